// Fuzz target: chat templates as kt-chat and (per request) kt-server render them. The input is a template source, a
// NUL, a JSON object of extra template variables, a NUL, and a JSON array of {"role", "content"} messages (absent
// parts: none, and a fixed two-turn chat). Rendered with the Qwen3 vocabulary's BOS/EOS.
//
// Each input is rendered first through the interpreter's own entry (render_chat) with small budgets (kFuzzLimits):
// the same checks as kt's defaults, cut off 50 times sooner, because an input that runs to the default step limit
// costs a quarter of a second and the fuzzer finds such inputs all the time (at the defaults this target ran 75-110
// executions a second). Then, unless that render ran out of a budget or hit Jinja kt does not implement (UNSUPPORTED),
// the input goes through kt_chat_apply_template, which uses the defaults: it must end the same way and, where the
// template does not read the clock, render the same text (a budget can only cut a render off, never change it).
// Any status is fine except an internal error, and a failure must name its cause; a render that succeeds must
// report a length that fits the buffer it filled.
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "core/json.h"
#include "fuzz_support.h"
#include "model/tokenizer/chat_template.h"

namespace {

const kt_model *vocabulary() {
    static kt_model *model = kt::fuzz::load_vocabulary_or_die(kt::fuzz::testdata("tokenizer/qwen3.gguf"));
    return model;
}

// A fiftieth of the default step budget (a short real chat takes 230-700 steps, 100 turns 10-27 thousand) and a
// sixty-fourth of the byte budgets.
kt::tokenizer::jinja::Limits fuzz_limits() {
    kt::tokenizer::jinja::Limits l;
    l.steps = kt::tokenizer::jinja::kMaxSteps / 50;
    l.value_bytes = 1 << 20;
    l.output_bytes = 1 << 20;
    return l;
}

// render_chat under the fuzz budgets, exceptions turned into statuses as kt.h's guard does.
kt::Status render_with_fuzz_limits(const std::vector<std::string> &strings, const std::string &source,
                                   const std::string &extra, bool add_generation_prompt, std::string *text) {
    return kt::api::guard([&]() -> kt::Status {
        const kt::tokenizer::Tokenizer *tok = nullptr;
        KT_TRY(vocabulary()->tokenizer.get(*vocabulary()->file, &tok));
        kt::tokenizer::ChatOptions options;
        options.add_generation_prompt = add_generation_prompt;
        options.template_source = source;
        options.extra_context_json = extra;
        options.limits = fuzz_limits();
        std::vector<kt::tokenizer::ChatMessage> messages;
        for (size_t i = 0; i + 1 < strings.size(); i += 2) messages.push_back({strings[i], strings[i + 1]});
        return kt::tokenizer::render_chat(tok->vocab(), messages, options, text);
    });
}

}  // namespace

// The vocabulary loads before the first input, which is not charged for it.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    vocabulary();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string input(reinterpret_cast<const char *>(data), size);
    const size_t first = input.find('\0');
    const size_t second = first == std::string::npos ? std::string::npos : input.find('\0', first + 1);
    const std::string source = input.substr(0, first);
    const std::string extra = first == std::string::npos ? "" : input.substr(first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
    const std::string messages_json = second == std::string::npos ? "" : input.substr(second + 1);

    // Messages: the JSON array's string fields (anything else in it is skipped), else a fixed chat.
    std::vector<std::string> strings = {"system", "You are a helpful assistant.", "user", "Hi <think>x</think>"};
    kt::json::Value parsed;
    if (!messages_json.empty() && kt::json::parse(messages_json, &parsed).is_ok() &&
        parsed.kind() == kt::json::Value::Kind::kArray) {
        strings.clear();
        for (const auto &m : parsed.items()) {
            const kt::json::Value *role = m.find("role"), *content = m.find("content");
            if (m.kind() != kt::json::Value::Kind::kObject || !role || !content) continue;
            if (role->kind() != kt::json::Value::Kind::kString || content->kind() != kt::json::Value::Kind::kString) continue;
            strings.push_back(role->as_string());
            strings.push_back(content->as_string());
        }
    }
    const bool add_generation_prompt = size % 2;

    std::string small_budget_text;
    const kt::Status small = render_with_fuzz_limits(strings, source, extra, add_generation_prompt, &small_budget_text);
    kt::fuzz::expect_clean(small.code(), small.message().c_str(), "render_chat (fuzz budgets)");
    if (small.code() == KT_STATUS_UNSUPPORTED) return 0;

    std::vector<kt_chat_message> messages;
    for (size_t i = 0; i + 1 < strings.size(); i += 2) messages.push_back({strings[i].c_str(), strings[i + 1].c_str()});
    kt_chat_params params;
    kt_chat_params_init(&params);
    params.template_source = source.empty() ? nullptr : source.c_str();
    params.extra_context_json = extra.empty() ? nullptr : extra.c_str();
    params.add_generation_prompt = add_generation_prompt;
    std::vector<char> buf(4096);
    int64_t length = 0;
    kt_status s = kt_chat_apply_template(vocabulary(), messages.data(), static_cast<int64_t>(messages.size()), &params,
                                         buf.data(), static_cast<int64_t>(buf.size()), &length);
    if (s == KT_STATUS_BUFFER_TOO_SMALL) {
        if (length < static_cast<int64_t>(buf.size()) - 1) kt::fuzz::broken_invariant("BUFFER_TOO_SMALL for a length that fits");
        buf.resize(static_cast<size_t>(length) + 1);
        s = kt_chat_apply_template(vocabulary(), messages.data(), static_cast<int64_t>(messages.size()), &params, buf.data(),
                                   static_cast<int64_t>(buf.size()), &length);
    }
    kt::fuzz::expect_clean(s, kt_model_last_error(vocabulary()), "kt_chat_apply_template");
    if (s == KT_STATUS_OK && (length < 0 || length >= static_cast<int64_t>(buf.size()) || buf[static_cast<size_t>(length)] != '\0'))
        kt::fuzz::broken_invariant("kt_chat_apply_template: the length does not match the NUL-terminated text");
    if (s != small.code()) kt::fuzz::broken_invariant("kt_chat_apply_template ends otherwise than the same render with smaller budgets");
    if (s == KT_STATUS_OK && source.find("strftime_now") == std::string::npos &&
        small_budget_text != std::string_view(buf.data(), static_cast<size_t>(length)))
        kt::fuzz::broken_invariant("kt_chat_apply_template renders another text than the same render with smaller budgets");
    return 0;
}
