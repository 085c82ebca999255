// Fuzz target: chat templates as kt_chat_apply_template runs them for kt-chat and (per request) kt-server. The
// input is a template source, a NUL, a JSON object of extra template variables, a NUL, and a JSON array of
// {"role", "content"} messages (absent parts: none, and a fixed two-turn chat). Rendered with the Qwen3
// vocabulary's BOS/EOS. Any status is fine except an internal error, and a failure must name its cause; a render
// that succeeds must report a length that fits the buffer it filled.
#include <string>
#include <vector>

#include "core/json.h"
#include "fuzz_support.h"

namespace {

const kt_model *vocabulary() {
    static kt_model *model = kt::fuzz::load_vocabulary_or_die(kt::fuzz::testdata("tokenizer/qwen3.gguf"));
    return model;
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
    std::vector<kt_chat_message> messages;
    for (size_t i = 0; i + 1 < strings.size(); i += 2) messages.push_back({strings[i].c_str(), strings[i + 1].c_str()});

    kt_chat_params params;
    kt_chat_params_init(&params);
    params.template_source = source.empty() ? nullptr : source.c_str();
    params.extra_context_json = extra.empty() ? nullptr : extra.c_str();
    params.add_generation_prompt = size % 2;
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
    return 0;
}
