// kt-chat: an interactive chat with a GGUF model, the reply streamed as it is generated.
//
//   kt-chat -m MODEL [-s "system prompt"] [-n 256] [--template NAME | --template-file FILE] [sampling flags]
//
// Each line on standard input is a user turn; the reply streams to standard output. "/reset" starts a new
// conversation, "/quit" (or end of input) ends it. The conversation is rendered with the model's chat template
// (tokenizer.chat_template) or a named built-in family ("chatml", "llama3", "deepseek3", "mistral"); a model
// without a template needs --template. Every turn re-renders the whole conversation, and only the tokens that
// differ from what the context already holds are decoded, so a turn costs its own tokens, not the history's.
// With -v each turn's token accounting goes to standard error.
//
// Exit status: 0 at the end of the conversation, 1 when kt reports an error, 2 on a usage error.
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.h"
#include "kt.h"

namespace {

int usage(const char *message = nullptr) {
    if (message) std::fprintf(stderr, "kt-chat: %s\n\n", message);
    std::fprintf(stderr,
                 "usage: kt-chat -m MODEL [options]   (user turns on standard input, one per line)\n"
                 "  -m, --model FILE        GGUF model\n"
                 "  -s, --system TEXT       system prompt\n"
                 "  -n, --n-predict N       most tokens per reply (default 256)\n"
                 "      --template NAME     chat template: a built-in family (chatml, llama3, deepseek3, mistral, glm4,\n"
                 "                          harmony)\n"
                 "                          or a template the model names (tokenizer.chat_template.NAME)\n"
                 "      --template-file F   a Jinja chat template from a file\n"
                 "  -t, --threads N         threads (default: one per physical core)\n"
                 "  -c, --ctx-size N        context length (default: the model's, at most 4096)\n"
                 "  -v, --verbose           per-turn token counts and speed on standard error\n"
                 "sampling (default: temperature 0.7, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1):\n"
                 "      --temp T  --top-k N  --top-p P  --min-p P  --repeat-penalty R  --repeat-last-n N\n"
                 "      --presence-penalty P  --frequency-penalty P  --seed N\n"
                 "      --greedy            always the most likely token\n");
    return 2;
}

struct Message {
    std::string role, content;
};

kt_status render(const kt_model *model, const std::vector<Message> &messages, const kt_chat_params &params,
                 std::string *out) {
    std::vector<kt_chat_message> turns;
    for (const Message &m : messages) turns.push_back({m.role.c_str(), m.content.c_str()});
    return kt_cli::render_chat(model, turns, params, out);
}

int32_t on_token(int32_t token, void *user_data) {
    static_cast<kt_cli::TextStream *>(user_data)->push(token);
    return 0;
}

int fail(const char *what, const char *message) {
    std::fprintf(stderr, "kt-chat: %s: %s\n", what, message);
    return 1;
}

// The length of the common prefix of two token sequences.
size_t common_prefix(const std::vector<int32_t> &a, const std::vector<int32_t> &b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

}  // namespace

int main(int argc, char **argv) {
    std::string model_path, system_prompt, template_name, template_source;
    int64_t n_predict = 256;
    bool verbose = false;
    kt_context_params cp;
    kt_context_params_init(&cp);
    kt_sampler_params sp;
    kt_sampler_params_init(&sp);
    sp.temperature = 0.7f;
    sp.repeat_penalty = 1.1f;

    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return usage();
        if (a == "-v" || a == "--verbose") {
            verbose = true;
            continue;
        }
        if (a == "--greedy") {
            sp.temperature = 0.0f;
            continue;
        }
        if (i + 1 >= argc) return usage(("missing value for " + a).c_str());
        const char *v = argv[++i];
        int64_t n = 0;
        if (a == "-m" || a == "--model") model_path = v;
        else if (a == "-s" || a == "--system") system_prompt = v;
        else if (a == "--template") template_name = v;
        else if (a == "--template-file") {
            std::ifstream in(v);
            if (!in) return usage(("cannot read " + std::string(v)).c_str());
            std::stringstream ss;
            ss << in.rdbuf();
            template_source = ss.str();
        } else if (a == "-n" || a == "--n-predict" || a == "-t" || a == "--threads" || a == "-c" || a == "--ctx-size") {
            if (!kt_cli::parse_int(v, &n) || n < 0) return usage(("bad integer for " + a).c_str());
            if (a == "-n" || a == "--n-predict") n_predict = n;
            else if (a == "-t" || a == "--threads") cp.n_threads = static_cast<int32_t>(n);
            else cp.n_ctx = n;
        } else if (const kt_cli::Flag flag = kt_cli::sampling_flag(a, v, &sp); flag != kt_cli::Flag::kNotMine) {
            if (flag == kt_cli::Flag::kBadValue) return usage(("bad value for " + a).c_str());
        } else {
            return usage(("unknown option " + a).c_str());
        }
    }
    if (model_path.empty()) return usage("no model (-m)");
    if (n_predict < 1) return usage("-n must be at least 1");

    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_model *model = nullptr;
    if (kt_model_load(model_path.c_str(), nullptr, &model, &err) != KT_STATUS_OK) return fail("load", err.message);
    kt_vocab_info vocab;
    vocab.struct_size = sizeof vocab;
    if (kt_vocab_get_info(model, &vocab) != KT_STATUS_OK) {
        const int rc = fail("vocabulary", kt_model_last_error(model));
        kt_model_free(model);
        return rc;
    }

    kt_chat_params chat;
    kt_chat_params_init(&chat);
    chat.template_name = template_name.empty() ? nullptr : template_name.c_str();
    chat.template_source = template_source.empty() ? nullptr : template_source.c_str();
    std::vector<Message> messages;
    if (!system_prompt.empty()) messages.push_back({"system", system_prompt});
    {
        // Render once up front, so a model without a usable template fails before the first question.
        std::string probe;
        std::vector<Message> trial = messages;
        trial.push_back({"user", "hello"});
        if (render(model, trial, chat, &probe) != KT_STATUS_OK) {
            const int rc = fail("chat template", kt_model_last_error(model));
            kt_model_free(model);
            return rc;
        }
    }

    kt_context *ctx = nullptr;
    if (kt_context_create(model, &cp, &ctx, &err) != KT_STATUS_OK) {
        kt_model_free(model);
        return fail("context", err.message);
    }
    // Replies end at any token the vocabulary marks as ending generation (EOS, <|im_end|>, <|eot_id|> ...).
    std::vector<int32_t> stops;
    for (int32_t id = 0; id < kt_context_n_vocab(ctx); ++id) {
        int32_t eog = 0;
        if (kt_token_is_eog(model, id, &eog) == KT_STATUS_OK && eog) stops.push_back(id);
    }
    kt_detokenizer *detokenizer = nullptr;
    if (kt_detokenizer_create(model, 0, &detokenizer, &err) != KT_STATUS_OK) {
        kt_context_free(ctx);
        kt_model_free(model);
        return fail("detokenizer", err.message);
    }
    kt_cli::TextStream stream(detokenizer);

    const bool interactive = isatty(STDIN_FILENO);  // a prompt only for a person at a terminal
    std::vector<int32_t> cached;  // exactly the tokens the context holds, in order
    int status = 0;
    int turn = 0;
    std::string line;
    while (status == 0) {
        if (interactive) {
            std::fprintf(stderr, "> ");
            std::fflush(stderr);
        }
        if (!std::getline(std::cin, line)) break;
        if (line == "/quit") break;
        if (line == "/reset") {
            messages.resize(system_prompt.empty() ? 0 : 1);
            std::fprintf(stderr, "(new conversation)\n");
            continue;
        }
        if (line.empty()) continue;
        messages.push_back({"user", line});
        ++turn;

        std::string prompt;
        std::vector<int32_t> tokens;
        if (render(model, messages, chat, &prompt) != KT_STATUS_OK ||
            kt_cli::tokenize(model, prompt, true, true, &tokens) != KT_STATUS_OK) {
            status = fail("prompt", kt_model_last_error(model));
            break;
        }

        // Room for the prompt and a reply? Otherwise start over with only the system prompt and this question.
        const int64_t n_ctx = kt_context_n_ctx(ctx);
        if (static_cast<int64_t>(tokens.size()) + n_predict > n_ctx) {
            std::fprintf(stderr, "(the conversation no longer fits in %" PRId64 " positions: history dropped)\n", n_ctx);
            messages.erase(messages.begin() + (system_prompt.empty() ? 0 : 1), messages.end() - 1);
            if (render(model, messages, chat, &prompt) != KT_STATUS_OK ||
                kt_cli::tokenize(model, prompt, true, true, &tokens) != KT_STATUS_OK) {
                status = fail("prompt", kt_model_last_error(model));
                break;
            }
        }

        // Reuse what the context already holds. The cache cannot be cut back, so a divergence in the middle (the
        // template rendering an earlier turn differently, or the reply re-tokenizing differently) means a fresh
        // prefill. The last prompt token is always decoded again, so the logits to sample from are fresh.
        size_t keep = common_prefix(cached, tokens);
        if (keep == tokens.size() && keep > 0) --keep;
        if (keep < cached.size()) {
            kt_context_reset(ctx);
            cached.clear();
            keep = 0;
        }
        const std::vector<int32_t> fresh(tokens.begin() + static_cast<long>(keep), tokens.end());

        kt_perf before;
        before.struct_size = sizeof before;
        kt_context_perf(ctx, &before);
        kt_generate_params gp;
        kt_generate_params_init(&gp);
        gp.max_tokens = n_predict;
        gp.stop_tokens = stops.data();
        gp.n_stop_tokens = static_cast<int64_t>(stops.size());
        gp.sampler = &sp;
        gp.on_token = on_token;
        gp.user_data = &stream;
        std::vector<int32_t> reply(static_cast<size_t>(n_predict));
        int64_t n_reply = 0;
        int32_t reason = 0;
        const kt_status s = kt_context_generate(ctx, fresh.data(), static_cast<int64_t>(fresh.size()), &gp,
                                                reply.data(), n_predict, &n_reply, &reason);
        stream.push(-1);
        std::printf("\n");
        std::fflush(stdout);
        if (s != KT_STATUS_OK) {
            status = fail("generate", kt_context_last_error(ctx));
            break;
        }
        reply.resize(static_cast<size_t>(n_reply));
        cached = tokens;
        cached.insert(cached.end(), reply.begin(), reply.end());

        std::string reply_text;
        if (kt_cli::detokenize(model, reply, &reply_text) != KT_STATUS_OK) {
            status = fail("detokenize", kt_model_last_error(model));
            break;
        }
        messages.push_back({"assistant", reply_text});

        if (verbose) {
            kt_perf after;
            after.struct_size = sizeof after;
            kt_context_perf(ctx, &after);
            const double seconds =
                after.prefill_seconds + after.decode_seconds - before.prefill_seconds - before.decode_seconds;
            static const char *reasons[] = {"length limit", "end of turn", "callback", "context full"};
            std::fprintf(stderr, "[turn %d: %zu prompt tokens, %zu reused from the cache, %zu decoded; %" PRId64
                                 " generated (%s) in %.2f s]\n",
                         turn, tokens.size(), keep, fresh.size(), n_reply, reasons[reason >= 0 && reason < 4 ? reason : 0],
                         seconds);
        }
    }
    kt_detokenizer_free(detokenizer);
    kt_context_free(ctx);
    kt_model_free(model);
    return status;
}
