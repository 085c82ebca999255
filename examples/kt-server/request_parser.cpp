#include "request_parser.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace kt_server {

using nlohmann::json;

namespace {

// A request body being read: every check names the field by its path ("messages[1].content[0].text"), and the
// first failure is kept. Nothing here throws past parse_body; nlohmann's parser is iterative, so nesting depth
// costs memory (bounded by the body limit), not stack.
class Reader {
public:
    std::optional<ApiError> error;

    bool fail(const std::string &param, const std::string &message) {
        if (!error) error = ApiError::invalid(param, message);
        return false;
    }

    // The field's value, or nullptr when it is absent or null.
    static const json *field(const json &object, const char *name) {
        const auto it = object.find(name);
        return it == object.end() || it->is_null() ? nullptr : &*it;
    }

    bool read_bool(const json &object, const char *name, bool *out) {
        const json *v = field(object, name);
        if (!v) return true;
        if (!v->is_boolean()) return fail(name, std::string("'") + name + "' must be a boolean");
        *out = v->get<bool>();
        return true;
    }

    // An integer in [lowest, highest]; a number with a fraction is rejected, 3.0 is taken as 3.
    bool read_int(const json &v, const std::string &param, int64_t lowest, int64_t highest, int64_t *out) {
        if (v.is_number_integer() || v.is_number_unsigned()) {
            if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
                return fail(param, "'" + param + "' is out of range");
            const int64_t n = v.get<int64_t>();
            if (n < lowest || n > highest) return fail(param, range_message(param, lowest, highest));
            *out = n;
            return true;
        }
        if (v.is_number_float()) {
            const double d = v.get<double>();
            if (!std::isfinite(d) || d != std::floor(d)) return fail(param, "'" + param + "' must be an integer");
            if (d < static_cast<double>(lowest) || d > static_cast<double>(highest))
                return fail(param, range_message(param, lowest, highest));
            *out = static_cast<int64_t>(d);
            return true;
        }
        return fail(param, "'" + param + "' must be an integer");
    }

    bool read_float(const json &object, const char *name, double lowest, double highest,
                    std::optional<float> *out) {
        const json *v = field(object, name);
        if (!v) return true;
        if (!v->is_number()) return fail(name, std::string("'") + name + "' must be a number");
        const double d = v->get<double>();
        if (!(d >= lowest && d <= highest)) {  // also rejects NaN
            return fail(name, std::string("'") + name + "' must be between " + number(lowest) + " and " +
                                  number(highest));
        }
        *out = static_cast<float>(d);
        return true;
    }

    // A string that the chat template receives as a C string: it may not contain NUL.
    bool check_no_nul(const std::string &text, const std::string &param) {
        if (text.find('\0') != std::string::npos) return fail(param, "'" + param + "' contains a NUL character");
        return true;
    }

private:
    static std::string number(double d) {
        std::string s = std::to_string(d);
        while (s.size() > 1 && s.back() == '0') s.pop_back();
        if (!s.empty() && s.back() == '.') s.pop_back();
        return s;
    }
    static std::string range_message(const std::string &param, int64_t lowest, int64_t highest) {
        if (highest == INT64_MAX) return "'" + param + "' must be at least " + std::to_string(lowest);
        return "'" + param + "' must be between " + std::to_string(lowest) + " and " + std::to_string(highest);
    }
};

// The body as a JSON object, or the error to answer.
std::optional<ApiError> parse_body(std::string_view body, json *out) {
    try {
        *out = json::parse(body.begin(), body.end());
    } catch (const json::exception &e) {
        // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." without the bracketed prefix.
        std::string what = e.what();
        const size_t close = what.find("] ");
        if (close != std::string::npos) what = what.substr(close + 2);
        return ApiError::invalid("", "the request body is not valid JSON: " + what);
    }
    if (!out->is_object()) return ApiError::invalid("", "the request body must be a JSON object");
    return std::nullopt;
}

void read_generation_fields(const json &body, Reader *r, GenerationFields *out) {
    if (const json *model = Reader::field(body, "model")) {
        if (!model->is_string()) r->fail("model", "'model' must be a string");
        else out->model = model->get<std::string>();
    }
    for (const char *name : {"max_tokens", "max_completion_tokens"}) {
        if (const json *v = Reader::field(body, name)) {
            int64_t n = 0;
            if (r->read_int(*v, name, 1, INT64_MAX, &n)) out->max_tokens = n;
        }
    }
    SamplingFields &s = out->sampling;
    r->read_float(body, "temperature", 0.0, 2.0, &s.temperature);
    r->read_float(body, "top_p", 0.0, 1.0, &s.top_p);
    r->read_float(body, "min_p", 0.0, 1.0, &s.min_p);
    r->read_float(body, "presence_penalty", -2.0, 2.0, &s.presence_penalty);
    r->read_float(body, "frequency_penalty", -2.0, 2.0, &s.frequency_penalty);
    r->read_float(body, "repeat_penalty", std::numeric_limits<double>::min(), 10.0, &s.repeat_penalty);
    if (const json *v = Reader::field(body, "top_k")) {
        int64_t n = 0;
        // -1 is what llama.cpp's clients send for "off".
        if (r->read_int(*v, "top_k", -1, INT32_MAX, &n)) s.top_k = static_cast<int32_t>(n < 0 ? 0 : n);
    }
    if (const json *v = Reader::field(body, "seed")) {
        if (v->is_number_unsigned()) {
            s.seed = v->get<uint64_t>();
        } else {
            int64_t n = 0;
            if (r->read_int(*v, "seed", INT64_MIN, INT64_MAX, &n)) s.seed = static_cast<uint64_t>(n);
        }
    }

    if (const json *v = Reader::field(body, "stop")) {
        auto add = [&](const json &item, const std::string &param) {
            if (!item.is_string()) return r->fail(param, "'" + param + "' must be a string");
            std::string text = item.get<std::string>();
            if (text.empty()) return r->fail(param, "'" + param + "' must not be empty");
            if (text.size() > kMaxStopBytes)
                return r->fail(param, "'" + param + "' is longer than " + std::to_string(kMaxStopBytes) + " bytes");
            out->stop.push_back(std::move(text));
            return true;
        };
        if (v->is_string()) {
            add(*v, "stop");
        } else if (v->is_array()) {
            if (v->size() > kMaxStopStrings)
                r->fail("stop", "'stop' has more than " + std::to_string(kMaxStopStrings) + " strings");
            for (size_t i = 0; i < v->size() && !r->error; ++i) add((*v)[i], "stop[" + std::to_string(i) + "]");
        } else {
            r->fail("stop", "'stop' must be a string or an array of strings");
        }
    }

    r->read_bool(body, "stream", &out->stream);
    r->read_bool(body, "ignore_eos", &out->ignore_eos);
    if (const json *v = Reader::field(body, "stream_options")) {
        if (!v->is_object()) r->fail("stream_options", "'stream_options' must be an object");
        else if (const json *u = Reader::field(*v, "include_usage")) {
            if (!u->is_boolean()) r->fail("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
            else out->include_usage = u->get<bool>();
        }
    }

    // Fields that change the shape of the answer: refused rather than ignored.
    if (const json *v = Reader::field(body, "n")) {
        int64_t n = 0;
        if (r->read_int(*v, "n", 1, INT64_MAX, &n) && n != 1)
            r->fail("n", "only n = 1 is supported: one choice per request");
    }
    if (const json *v = Reader::field(body, "logprobs")) {
        if (!((v->is_boolean() && !v->get<bool>()) || (v->is_number() && v->get<double>() == 0.0)))
            r->fail("logprobs", "logprobs are not supported");
    }
}

// A message's content: a string, or an array of text parts ({"type": "text", "text": "..."}), joined by "\n".
bool read_content(const json &content, const std::string &param, Reader *r, std::string *out) {
    if (content.is_string()) {
        *out = content.get<std::string>();
        return r->check_no_nul(*out, param);
    }
    if (!content.is_array()) return r->fail(param, "'" + param + "' must be a string or an array of content parts");
    for (size_t j = 0; j < content.size(); ++j) {
        const std::string part_param = param + "[" + std::to_string(j) + "]";
        const json &part = content[j];
        if (!part.is_object()) return r->fail(part_param, "'" + part_param + "' must be an object");
        const json *type = Reader::field(part, "type");
        if (!type || !type->is_string())
            return r->fail(part_param + ".type", "'" + part_param + ".type' must be a string");
        if (type->get<std::string>() != "text") {
            return r->fail(part_param + ".type",
                           "content parts of type '" + type->get<std::string>() + "' are not supported (only 'text')");
        }
        const json *text = Reader::field(part, "text");
        if (!text || !text->is_string())
            return r->fail(part_param + ".text", "'" + part_param + ".text' must be a string");
        if (j > 0) out->push_back('\n');
        *out += text->get<std::string>();
    }
    return r->check_no_nul(*out, param);
}

void read_messages(const json &body, Reader *r, std::vector<ChatMessage> *out) {
    const json *messages = Reader::field(body, "messages");
    if (!messages) {
        r->fail("messages", "'messages' is required");
        return;
    }
    if (!messages->is_array()) {
        r->fail("messages", "'messages' must be an array");
        return;
    }
    if (messages->empty()) {
        r->fail("messages", "'messages' must not be empty");
        return;
    }
    for (size_t i = 0; i < messages->size() && !r->error; ++i) {
        const std::string param = "messages[" + std::to_string(i) + "]";
        const json &m = (*messages)[i];
        if (!m.is_object()) {
            r->fail(param, "'" + param + "' must be an object");
            return;
        }
        ChatMessage message;
        const json *role = Reader::field(m, "role");
        if (!role || !role->is_string()) {
            r->fail(param + ".role", "'" + param + ".role' must be a string");
            return;
        }
        message.role = role->get<std::string>();
        if (message.role == "developer") message.role = "system";  // OpenAI's newer name for the system turn
        if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
            message.role != "tool") {
            r->fail(param + ".role", "'" + param + ".role' must be one of system, developer, user, assistant, tool (got '" +
                                         message.role + "')");
            return;
        }
        const json *content = Reader::field(m, "content");
        if (!content) {
            // An assistant turn that only called tools has no content; every other turn must have some.
            if (message.role != "assistant") {
                r->fail(param + ".content", "'" + param + ".content' is required");
                return;
            }
        } else if (!read_content(*content, param + ".content", r, &message.content)) {
            return;
        }
        out->push_back(std::move(message));
    }
}

// A prompt for /v1/completions: a string, a one-element array of strings, or an array of token ids.
void read_prompt(const json &body, Reader *r, CompletionRequest *out) {
    const json *prompt = Reader::field(body, "prompt");
    if (!prompt) {
        r->fail("prompt", "'prompt' is required");
        return;
    }
    if (prompt->is_string()) {
        out->prompt_text = prompt->get<std::string>();
        return;
    }
    if (!prompt->is_array()) {
        r->fail("prompt", "'prompt' must be a string, an array of strings or an array of token ids");
        return;
    }
    if (prompt->size() == 1 && (*prompt)[0].is_string()) {
        out->prompt_text = (*prompt)[0].get<std::string>();
        return;
    }
    if (!prompt->empty() && (*prompt)[0].is_string()) {
        r->fail("prompt", "only one prompt per request is supported");
        return;
    }
    out->prompt_is_tokens = true;
    for (size_t i = 0; i < prompt->size() && !r->error; ++i) {
        int64_t id = 0;
        if (r->read_int((*prompt)[i], "prompt[" + std::to_string(i) + "]", 0, INT32_MAX, &id))
            out->prompt_tokens.push_back(static_cast<int32_t>(id));
    }
    if (!r->error && out->prompt_tokens.empty()) r->fail("prompt", "'prompt' must not be an empty array");
}

// The skeleton every parser shares: the body as a JSON object, then `read` fills the request or records the
// first error.
template <class Request, class Read>
Parsed<Request> parse(std::string_view text, Read read) {
    json body;
    if (auto e = parse_body(text, &body)) return *e;
    Reader r;
    Request request;
    read(body, &r, &request);
    if (r.error) return *r.error;
    return request;
}

}  // namespace

Parsed<ChatRequest> parse_chat_request(std::string_view text) {
    return parse<ChatRequest>(text, [](const json &body, Reader *r, ChatRequest *out) {
        read_messages(body, r, &out->messages);
        if (!r->error) read_generation_fields(body, r, &out->generation);
    });
}

Parsed<CompletionRequest> parse_completion_request(std::string_view text) {
    return parse<CompletionRequest>(text, [](const json &body, Reader *r, CompletionRequest *out) {
        read_prompt(body, r, out);
        if (r->error) return;
        if (const json *echo = Reader::field(body, "echo"); echo && !(echo->is_boolean() && !echo->get<bool>()))
            r->fail("echo", "echo is not supported");
        const json *suffix = Reader::field(body, "suffix");
        if (suffix && !(suffix->is_string() && suffix->get<std::string>().empty()))
            r->fail("suffix", "suffix is not supported");
        if (!r->error) read_generation_fields(body, r, &out->generation);
    });
}

Parsed<TokenizeRequest> parse_tokenize_request(std::string_view text) {
    return parse<TokenizeRequest>(text, [](const json &body, Reader *r, TokenizeRequest *out) {
        const json *content = Reader::field(body, "content");
        if (!content) r->fail("content", "'content' is required");
        else if (!content->is_string()) r->fail("content", "'content' must be a string");
        else out->content = content->get<std::string>();
        if (!r->error) r->read_bool(body, "add_special", &out->add_special);
        if (!r->error) r->read_bool(body, "parse_special", &out->parse_special);
    });
}

Parsed<DetokenizeRequest> parse_detokenize_request(std::string_view text) {
    return parse<DetokenizeRequest>(text, [](const json &body, Reader *r, DetokenizeRequest *out) {
        const json *tokens = Reader::field(body, "tokens");
        if (!tokens) return (void)r->fail("tokens", "'tokens' is required");
        if (!tokens->is_array()) return (void)r->fail("tokens", "'tokens' must be an array of token ids");
        for (size_t i = 0; i < tokens->size() && !r->error; ++i) {
            int64_t id = 0;
            if (r->read_int((*tokens)[i], "tokens[" + std::to_string(i) + "]", 0, INT32_MAX, &id))
                out->tokens.push_back(static_cast<int32_t>(id));
        }
    });
}

}  // namespace kt_server
