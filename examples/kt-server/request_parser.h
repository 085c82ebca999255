// The request bodies kt-server accepts, parsed and validated: a pure function from the body's bytes to a request
// struct or an ApiError naming the field at fault (so it can be fuzzed and tested without a server).
//
// Fields follow OpenAI's chat and completions APIs; top_k, min_p, repeat_penalty and ignore_eos are the
// extensions that vLLM and llama.cpp's server accept too. Unknown fields are ignored, and null counts as absent. A field that would
// change the shape of the answer and is not implemented (n > 1, logprobs) is a 400, never silently dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api_error.h"

namespace kt_server {

// Sampling settings the request gives; absent ones take the server's defaults.
struct SamplingFields {
    std::optional<float> temperature;        // [0, 2]
    std::optional<float> top_p;              // [0, 1]
    std::optional<int32_t> top_k;            // >= 0; 0: off
    std::optional<float> min_p;              // [0, 1]
    std::optional<float> presence_penalty;   // [-2, 2]
    std::optional<float> frequency_penalty;  // [-2, 2]
    std::optional<float> repeat_penalty;     // (0, 10]
    std::optional<uint64_t> seed;            // any integer (negative ones are taken modulo 2^64)
};

// What chat and completion requests share.
struct GenerationFields {
    std::string model;                   // as sent; "" when absent
    std::optional<int64_t> max_tokens;   // >= 1; max_completion_tokens wins over max_tokens
    SamplingFields sampling;
    std::vector<std::string> stop;       // up to kMaxStopStrings, each 1..kMaxStopBytes bytes
    bool stream = false;
    bool include_usage = false;          // stream_options.include_usage
    bool ignore_eos = false;             // extension: generate max_tokens even past end-of-generation tokens
};

constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 1024;

struct ChatMessage {
    std::string role;     // system, user, assistant or tool ("developer" is taken as system)
    std::string content;  // text parts joined with "\n"; never contains a NUL
};

struct ChatRequest {
    GenerationFields generation;
    std::vector<ChatMessage> messages;  // at least one
};

struct CompletionRequest {
    GenerationFields generation;
    bool prompt_is_tokens = false;
    std::string prompt_text;            // when !prompt_is_tokens
    std::vector<int32_t> prompt_tokens; // when prompt_is_tokens: ids >= 0 (the vocabulary bound is the caller's)
};

// POST /tokenize {"content": "...", "add_special": false, "parse_special": true}
struct TokenizeRequest {
    std::string content;
    bool add_special = false;
    bool parse_special = true;
};

// POST /detokenize {"tokens": [1, 2, 3]}
struct DetokenizeRequest {
    std::vector<int32_t> tokens;  // ids >= 0
};

template <class Request>
using Parsed = std::variant<Request, ApiError>;

Parsed<ChatRequest> parse_chat_request(std::string_view body);
Parsed<CompletionRequest> parse_completion_request(std::string_view body);
Parsed<TokenizeRequest> parse_tokenize_request(std::string_view body);
Parsed<DetokenizeRequest> parse_detokenize_request(std::string_view body);

}  // namespace kt_server
