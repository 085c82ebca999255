// Fuzz target: kt-server's request bodies, as parse_chat_request and the other three parsers see them for every
// POST, then the text path every generated piece takes (sanitize_utf8, StopMatcher). A body may be refused, but
// only with a 4xx ApiError whose message is non-empty and whose JSON body parses; a body that is accepted must
// satisfy every bound request_parser.h promises. The text path must always give valid UTF-8 that is a prefix of
// the sanitized text and never contains a stop string.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "request_parser.h"
#include "text_output.h"

namespace {

using namespace kt_server;

[[noreturn]] void fail(const char *what, const std::string &detail) {
    std::fprintf(stderr, "fuzz: %s: %s\n", what, detail.c_str());
    std::abort();
}

bool valid_utf8(const std::string &s) {
    for (size_t i = 0, n = 0; i < s.size(); i += n)
        if ((n = kt::utf8_sequence_length(s, i)) == 0) return false;
    return true;
}

void check_error(const ApiError &e, const char *parser) {
    if (e.http_status < 400 || e.http_status > 499) fail(parser, "status " + std::to_string(e.http_status));
    if (e.message.empty()) fail(parser, "an error without a message");
    const nlohmann::json body = nlohmann::json::parse(e.body(), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.contains("error")) fail(parser, "error body is not JSON: " + e.body());
}

void check_generation(const GenerationFields &g) {
    if (g.max_tokens && *g.max_tokens < 1) fail("generation", "max_tokens < 1");
    if (g.stop.size() > kMaxStopStrings) fail("generation", "too many stop strings");
    for (const std::string &s : g.stop)
        if (s.empty() || s.size() > kMaxStopBytes) fail("generation", "a stop string of " + std::to_string(s.size()) + " bytes");
    const SamplingFields &f = g.sampling;
    if (f.temperature && !(*f.temperature >= 0.0f && *f.temperature <= 2.0f)) fail("sampling", "temperature");
    if (f.top_p && !(*f.top_p >= 0.0f && *f.top_p <= 1.0f)) fail("sampling", "top_p");
    if (f.top_k && *f.top_k < 0) fail("sampling", "top_k");
    if (f.min_p && !(*f.min_p >= 0.0f && *f.min_p <= 1.0f)) fail("sampling", "min_p");
    if (f.repeat_penalty && !(*f.repeat_penalty > 0.0f && *f.repeat_penalty <= 10.0f)) fail("sampling", "repeat_penalty");
}

// The pieces a stream would send for `text`, split at the positions the input's bytes give.
void check_text_path(const std::string &raw, const std::vector<std::string> &stops) {
    const std::string text = sanitize_utf8(raw);
    if (!valid_utf8(text)) fail("sanitize_utf8", "invalid UTF-8 out");
    if (sanitize_utf8(text) != text) fail("sanitize_utf8", "not idempotent");
    StopMatcher matcher(stops);
    std::string sent;
    size_t at = 0, step = 1;
    while (at < text.size()) {
        // Pieces end on character boundaries, as the detokenizer hands them out.
        size_t end = std::min(text.size(), at + step);
        while (end < text.size() && (static_cast<unsigned char>(text[end]) >> 6) == 2) ++end;
        sent += matcher.push(std::string_view(text).substr(at, end - at));
        at = end;
        step = step % 7 + 1;
    }
    sent += matcher.finish();
    if (text.compare(0, sent.size(), sent) != 0) fail("StopMatcher", "sent text is not a prefix of the text");
    for (const std::string &s : stops)
        if (!s.empty() && sent.find(s) != std::string::npos) fail("StopMatcher", "a stop string was sent: " + s);
    if (!matcher.stopped() && sent != text) fail("StopMatcher", "text lost without a stop");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string body(reinterpret_cast<const char *>(data), size);
    std::vector<std::string> stops;

    const Parsed<ChatRequest> chat = parse_chat_request(body);
    if (const ApiError *e = std::get_if<ApiError>(&chat)) {
        check_error(*e, "parse_chat_request");
    } else {
        const ChatRequest &r = std::get<ChatRequest>(chat);
        if (r.messages.empty()) fail("parse_chat_request", "no messages");
        for (const ChatMessage &m : r.messages)
            if (m.content.find('\0') != std::string::npos) fail("parse_chat_request", "a NUL in a message");
        check_generation(r.generation);
        stops = r.generation.stop;
    }
    const Parsed<CompletionRequest> completion = parse_completion_request(body);
    if (const ApiError *e = std::get_if<ApiError>(&completion)) {
        check_error(*e, "parse_completion_request");
    } else {
        const CompletionRequest &r = std::get<CompletionRequest>(completion);
        for (int32_t id : r.prompt_tokens)
            if (id < 0) fail("parse_completion_request", "a negative token id");
        check_generation(r.generation);
        if (stops.empty()) stops = r.generation.stop;
    }
    const Parsed<TokenizeRequest> tokenize = parse_tokenize_request(body);
    if (const ApiError *e = std::get_if<ApiError>(&tokenize)) check_error(*e, "parse_tokenize_request");
    const Parsed<DetokenizeRequest> detokenize = parse_detokenize_request(body);
    if (const ApiError *e = std::get_if<ApiError>(&detokenize)) {
        check_error(*e, "parse_detokenize_request");
    } else {
        for (int32_t id : std::get<DetokenizeRequest>(detokenize).tokens)
            if (id < 0) fail("parse_detokenize_request", "a negative token id");
    }
    // The body's bytes as if a model had written them, against the request's stop strings (or a fixed pair).
    if (stops.empty()) stops = {"\n\n", "</s>"};
    check_text_path(body, stops);
    return 0;
}
