// The JSON kt-server answers, in exactly the shapes the official OpenAI clients parse: whole responses, and the
// chunks of a Server-Sent Events stream.
//
// A chat stream is: a chunk whose delta carries the assistant role, chunks with content deltas, a chunk with an
// empty delta and the finish_reason, then (when stream_options.include_usage) a chunk with "choices": [] and the
// usage (every earlier chunk then has "usage": null), then "data: [DONE]". Every chunk of a response has the same
// id and created time. A completion stream is the same without the role chunk, with "text" instead of a delta.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace kt_server {

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache (prompt_tokens_details)
};

enum class Endpoint { kChat, kCompletion };

// One response's identity and the JSON of each of its parts. Text must be valid UTF-8 (see sanitize_utf8); any
// invalid byte that still slipped through becomes U+FFFD rather than an exception.
class ResponseJson {
public:
    ResponseJson(Endpoint endpoint, std::string id, int64_t created, std::string model, bool include_usage);

    // A whole (non-streamed) response.
    std::string full(const std::string &text, const char *finish_reason, const Usage &usage) const;
    // Stream chunks (JSON only; frame them with sse_data).
    std::string role_chunk() const;  // chat only
    std::string text_chunk(const std::string &text) const;
    std::string finish_chunk(const char *finish_reason) const;
    std::string usage_chunk(const Usage &usage) const;

    Endpoint endpoint() const { return endpoint_; }
    bool include_usage() const { return include_usage_; }
    const std::string &id() const { return id_; }

private:
    std::string chunk(nlohmann::json choice) const;

    Endpoint endpoint_;
    std::string id_;
    int64_t created_;
    std::string model_;
    bool include_usage_;
};

// "data: <json>\n\n": one SSE event. JSON never contains a raw newline, so one data line suffices.
std::string sse_data(const std::string &json);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";
// An SSE comment line, ignored by clients: keeps proxies and clients from timing out while a prompt is prefilled.
inline constexpr char kSsePing[] = ": ping\n\n";

}  // namespace kt_server
