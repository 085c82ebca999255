// kt-run: load a GGUF model, prefill a prompt, generate and stream the result.
//
//   kt-run -m MODEL -p "TEXT" [-n 32] [sampling flags] [-t THREADS]
//   kt-run -m MODEL --tokens 1,2,3 [--ids] [--logits OUT.f32]
//
// A text prompt is tokenized with the model's vocabulary (BOS added as the vocabulary says, special tokens such as
// <|im_start|> recognised) and echoed; generated tokens are streamed after it as text (whole UTF-8 characters only) or, with --ids or a
// model without a vocabulary, as ids on one line. Generation stops at the vocabulary's end-of-generation tokens
// unless --ignore-eos. --logits writes the logits of every prompt position as raw little-endian f32, n_tokens x
// n_vocab, position-major, for comparison with other implementations. Timing goes to stderr.
// Exit status: 0 on success, 1 when kt reports an error, 2 on a usage error.
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/cli.h"
#include "kt.h"

namespace {

void log_to_stderr(int32_t, const char *message, void *) { std::fprintf(stderr, "kt: %s\n", message); }

int usage(const char *message = nullptr) {
    if (message) std::fprintf(stderr, "kt-run: %s\n\n", message);
    std::fprintf(stderr,
                 "usage: kt-run -m MODEL (-p TEXT | --tokens ID,ID,...) [options]\n"
                 "  -m, --model FILE        GGUF model\n"
                 "  -p, --prompt TEXT       prompt text (tokenized with the model's vocabulary)\n"
                 "      --tokens LIST       prompt as comma-separated token ids\n"
                 "      --ids               print generated token ids instead of text\n"
                 "  -n, --n-predict N       tokens to generate (default 32; 0: prefill only)\n"
                 "  -t, --threads N         threads (default: one per physical core)\n"
                 "  -c, --ctx-size N        context length (default: the model's, at most 4096)\n"
                 "  -b, --batch-size N      prefill tokens per step (default 512)\n"
                 "      --kv-type T         KV cache type: f16 (default), bf16, f32, q8_0\n"
                 "      --kernels K         auto (default) or reference (exact f32 math, slow)\n"
                 "      --logits FILE       write the prompt's logits (f32, n_tokens x n_vocab) to FILE\n"
                 "      --ignore-eos        do not stop at the vocabulary's end-of-sequence token\n"
                 "      --pack-cache [PATH] keep the packed weights in PATH (default MODEL.ktpack) and map them on\n"
                 "                          later runs instead of repacking (with -v: whether it was used, or why not)\n"
                 "  -v, --verbose           kt's log on standard error (loading, the packing rate)\n"
                 "%s"
                 "sampling (default: greedy):\n"
                 "      --temp T            temperature (0: greedy)\n"
                 "      --top-k N           --top-p P   --min-p P\n"
                 "      --repeat-penalty R  --repeat-last-n N\n"
                 "      --presence-penalty P  --frequency-penalty P\n"
                 "  -s, --seed N            random seed (default 0)\n",
                 kt_cli::device_usage());
    return 2;
}

bool parse_tokens(const std::string &text, std::vector<int32_t> *out) {
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = text.find(',', at);
        const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        int64_t v = 0;
        if (!kt_cli::parse_int(item.c_str(), &v) || v < 0 || v > INT32_MAX) return false;
        out->push_back(static_cast<int32_t>(v));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return !out->empty();
}

// Streams generated tokens: as text, or as ids.
struct Printer {
    kt_cli::TextStream *text = nullptr;  // null: print ids
    int count = 0;
};

int32_t on_token(int32_t token, void *user_data) {
    Printer &p = *static_cast<Printer *>(user_data);
    if (p.text) {
        p.text->push(token);
    } else {
        std::printf(p.count == 0 ? "%d" : " %d", token);
        std::fflush(stdout);
    }
    ++p.count;
    return 0;
}

int fail(const char *what, const char *message) {
    std::fprintf(stderr, "kt-run: %s: %s\n", what, message);
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    std::string model_path, logits_path, prompt_text, pack_cache_path;
    bool pack_cache = false;
    std::vector<int32_t> prompt;
    int64_t n_predict = 32;
    bool ignore_eos = false, print_ids = false;
    kt_context_params cp;
    kt_context_params_init(&cp);
    kt_sampler_params sp;
    kt_sampler_params_init(&sp);
    sp.temperature = 0.0f;  // greedy unless asked

    kt_model_params mp;
    kt_model_params_init(&mp);

    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> const char * { return i + 1 < argc ? argv[++i] : nullptr; };
        const char *v = nullptr;
        int64_t n = 0;
        if (a == "-h" || a == "--help") return usage();
        if (a == "--ignore-eos" || a == "--ids") {
            (a == "--ids" ? print_ids : ignore_eos) = true;
            continue;
        }
        if (a == "--pack-cache") {
            // An optional path: the next argument unless it is another option.
            pack_cache = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') pack_cache_path = argv[++i];
            continue;
        }
        if (a == "-v" || a == "--verbose") {
            kt_log_set(log_to_stderr, nullptr, KT_LOG_INFO);
            continue;
        }
        if (!(v = value())) return usage(("missing value for " + a).c_str());
        if (a == "-m" || a == "--model") model_path = v;
        else if (a == "-p" || a == "--prompt") prompt_text = v;
        else if (a == "--tokens") { if (!parse_tokens(v, &prompt)) return usage("--tokens wants comma-separated ids"); }
        else if (a == "--logits") logits_path = v;
        else if (a == "--kv-type") {
            const std::string t = v;
            cp.kv_type = t == "f16" ? KT_TYPE_F16 : t == "bf16" ? KT_TYPE_BF16 : t == "f32" ? KT_TYPE_F32 : t == "q8_0" ? KT_TYPE_Q8_0 : -1;
            if (cp.kv_type < 0) return usage("--kv-type must be f16, bf16, f32 or q8_0");
        } else if (a == "--kernels") {
            const std::string k = v;
            if (k != "auto" && k != "reference") return usage("--kernels must be auto or reference");
            cp.kernels = k == "auto" ? KT_KERNELS_AUTO : KT_KERNELS_REFERENCE;
        } else if (a == "-n" || a == "--n-predict" || a == "-t" || a == "--threads" || a == "-c" || a == "--ctx-size" ||
                   a == "-b" || a == "--batch-size") {
            if (!kt_cli::parse_int(v, &n) || n < -1) return usage(("bad integer for " + a).c_str());
            if (a == "-n" || a == "--n-predict") n_predict = n;
            else if (a == "-t" || a == "--threads") cp.n_threads = static_cast<int32_t>(n);
            else if (a == "-c" || a == "--ctx-size") cp.n_ctx = n;
            else cp.n_batch = n;
        } else if (const kt_cli::Flag flag = kt_cli::sampling_flag(a == "-s" ? "--seed" : a, v, &sp);
                   flag != kt_cli::Flag::kNotMine) {
            if (flag == kt_cli::Flag::kBadValue) return usage(("bad value for " + a).c_str());
        } else if (const kt_cli::Flag dflag = kt_cli::device_flag(a, v, &mp); dflag != kt_cli::Flag::kNotMine) {
            if (dflag == kt_cli::Flag::kBadValue) return usage(("bad value for " + a).c_str());
        } else {
            return usage(("unknown option " + a).c_str());
        }
    }
    if (model_path.empty()) return usage("no model (-m)");
    if (prompt.empty() == prompt_text.empty()) return usage("give a prompt: -p TEXT or --tokens IDS (one of them)");
    if (n_predict < 0) return usage("-n must be >= 0");

    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_model *model = nullptr;
    // The engine's kernels are built while loading, where the load's progress and time belong.
    mp.prepare = cp.kernels == KT_KERNELS_AUTO;
    mp.n_threads = cp.n_threads;
    if (pack_cache) {
        if (!mp.prepare) return usage("--pack-cache needs --kernels auto");
        mp.pack_cache = 1;
        mp.pack_cache_path = pack_cache_path.empty() ? nullptr : pack_cache_path.c_str();
    }
    const auto load_start = std::chrono::steady_clock::now();
    if (kt_model_load(model_path.c_str(), &mp, &model, &err) != KT_STATUS_OK) return fail("load", err.message);
    const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    if (mp.device != KT_DEVICE_NONE) std::fprintf(stderr, "%s", kt_cli::device_plan(model).c_str());
    kt_vocab_info vocab;
    vocab.struct_size = sizeof vocab;
    const bool has_vocab = kt_vocab_get_info(model, &vocab) == KT_STATUS_OK;
    if (!prompt_text.empty()) {
        if (!has_vocab) {
            kt_model_free(model);
            return fail("prompt", "the model has no vocabulary: give --tokens");
        }
        int64_t count = 0;
        kt_status s = kt_tokenize(model, prompt_text.data(), prompt_text.size(), 1, 1, nullptr, 0, &count);
        if (s == KT_STATUS_BUFFER_TOO_SMALL || s == KT_STATUS_OK) {
            prompt.resize(static_cast<size_t>(count));
            s = kt_tokenize(model, prompt_text.data(), prompt_text.size(), 1, 1, prompt.data(), count, &count);
        }
        if (s != KT_STATUS_OK || prompt.empty()) {
            kt_model_free(model);
            return fail("tokenize", s != KT_STATUS_OK ? kt_model_last_error(model) : "the prompt has no tokens");
        }
    }
    kt_context *ctx = nullptr;
    if (kt_context_create(model, &cp, &ctx, &err) != KT_STATUS_OK) {
        kt_model_free(model);
        return fail("context", err.message);
    }
    int status = 0;
    const int64_t n_vocab = kt_context_n_vocab(ctx);

    // The prompt: with --logits every position's row is kept and written out.
    if (static_cast<int64_t>(prompt.size()) > kt_context_n_ctx(ctx)) {
        const std::string why = std::to_string(prompt.size()) + " tokens, the context holds " +
                                std::to_string(kt_context_n_ctx(ctx)) + " (-c sets its size)";
        status = fail("prompt", why.c_str());
    } else if (kt_context_decode(ctx, prompt.data(), static_cast<int64_t>(prompt.size()),
                                 logits_path.empty() ? KT_LOGITS_LAST : KT_LOGITS_ALL) != KT_STATUS_OK) {
        status = fail("prefill", kt_context_last_error(ctx));
    }
    const bool prefilled = status == 0;
    if (status == 0 && !logits_path.empty()) {
        FILE *out = std::fopen(logits_path.c_str(), "wb");
        if (!out) {
            status = fail(logits_path.c_str(), std::strerror(errno));
        } else {
            for (size_t p = 0; p < prompt.size() && status == 0; ++p) {
                const float *row = nullptr;
                kt_context_logits(ctx, static_cast<int64_t>(p), &row, nullptr);
                if (std::fwrite(row, sizeof(float), static_cast<size_t>(n_vocab), out) != static_cast<size_t>(n_vocab))
                    status = fail(logits_path.c_str(), "write failed");
            }
            if (std::fclose(out) != 0 && status == 0) status = fail(logits_path.c_str(), "close failed");
        }
    }

    kt_perf after_prompt;
    after_prompt.struct_size = sizeof after_prompt;
    kt_context_perf(ctx, &after_prompt);

    // Generation, streamed. Stop tokens: every token the vocabulary says ends generation (EOS, EOT, <|im_end|> ...).
    std::vector<int32_t> stops;
    for (int32_t id = 0; has_vocab && !ignore_eos && id < n_vocab; ++id) {
        int32_t eog = 0;
        if (kt_token_is_eog(model, id, &eog) == KT_STATUS_OK && eog) stops.push_back(id);
    }
    kt_detokenizer *detokenizer = nullptr;
    if (has_vocab && !print_ids && kt_detokenizer_create(model, 0, &detokenizer, nullptr) != KT_STATUS_OK)
        detokenizer = nullptr;
    kt_cli::TextStream text(detokenizer);
    Printer printer;
    if (detokenizer) printer.text = &text;
    int64_t generated = 0;
    int32_t reason = KT_STOP_MAX_TOKENS;
    bool generation_ran = false;
    if (status == 0 && n_predict > 0) {
        if (printer.text && !prompt_text.empty()) std::fputs(prompt_text.c_str(), stdout);  // echo, as text
        kt_generate_params gp;
        kt_generate_params_init(&gp);
        gp.max_tokens = n_predict;
        gp.stop_tokens = stops.data();
        gp.n_stop_tokens = static_cast<int64_t>(stops.size());
        gp.sampler = &sp;
        gp.on_token = on_token;
        gp.user_data = &printer;
        if (kt_context_generate(ctx, nullptr, 0, &gp, nullptr, 0, &generated, &reason) != KT_STATUS_OK)
            status = fail("generate", kt_context_last_error(ctx));
        else
            generation_ran = true;
        if (printer.text) printer.text->push(-1);  // an incomplete character left at the end
        std::printf("\n");
        std::fflush(stdout);
    }

    // Statistics for the work that ran, and only that: a prompt that did not fit printed none.
    kt_perf perf;
    perf.struct_size = sizeof perf;
    if (prefilled && kt_context_perf(ctx, &perf) == KT_STATUS_OK) {
        static const char *reasons[] = {"max tokens", "stop token", "callback", "context full"};
        const double prompt_seconds = after_prompt.prefill_seconds + after_prompt.decode_seconds;
        const double gen_seconds = perf.prefill_seconds + perf.decode_seconds - prompt_seconds;
        std::fprintf(stderr, "load: %.3f s\n", load_seconds);
        std::fprintf(stderr, "prompt: %zu tokens in %.3f s (%.2f tokens/s)\n", prompt.size(), prompt_seconds,
                     prompt_seconds > 0 ? static_cast<double>(prompt.size()) / prompt_seconds : 0.0);
        if (generation_ran)
            std::fprintf(stderr, "generated: %" PRId64 " tokens in %.3f s (%.2f tokens/s), stopped by %s\n", generated,
                         gen_seconds, gen_seconds > 0 ? static_cast<double>(generated) / gen_seconds : 0.0,
                         reasons[reason >= 0 && reason < 4 ? reason : 0]);
        const double total = perf.attention_seconds + perf.experts_seconds + perf.dense_ffn_seconds +
                             perf.head_seconds + perf.other_seconds;
        if (total > 0)
            std::fprintf(stderr, "time: attention %.1f%%, experts %.1f%%, dense ffn %.1f%%, head %.1f%%, other %.1f%%\n",
                         100 * perf.attention_seconds / total, 100 * perf.experts_seconds / total,
                         100 * perf.dense_ffn_seconds / total, 100 * perf.head_seconds / total,
                         100 * perf.other_seconds / total);
    }
    if (mp.device != KT_DEVICE_NONE) {  // the split line: time on the device, on the CPU, hidden by overlap
        const std::string plan = kt_cli::device_plan(model);
        const size_t at = plan.find("split: ");
        if (at != std::string::npos) std::fprintf(stderr, "device %s", plan.c_str() + at);
    }
    kt_detokenizer_free(detokenizer);
    kt_context_free(ctx);
    kt_model_free(model);
    return status;
}
