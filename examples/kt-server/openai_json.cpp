#include "openai_json.h"

#include <nlohmann/json.hpp>

#include "api_error.h"

namespace kt_server {

using nlohmann::json;

namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_json(const Usage &u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json finish_json(const char *finish_reason) { return finish_reason ? json(finish_reason) : json(nullptr); }

}  // namespace

std::string ApiError::body() const {
    json error = {{"message", message},
                  {"type", type},
                  {"param", param.empty() ? json(nullptr) : json(param)},
                  {"code", code.empty() ? json(nullptr) : json(code)}};
    return dump(json{{"error", std::move(error)}});
}

ResponseJson::ResponseJson(Endpoint endpoint, std::string id, int64_t created, std::string model, bool include_usage)
    : endpoint_(endpoint), id_(std::move(id)), created_(created), model_(std::move(model)),
      include_usage_(include_usage) {}

std::string ResponseJson::full(const std::string &text, const char *finish_reason, const Usage &usage) const {
    json choice = {{"index", 0}};
    if (endpoint_ == Endpoint::kChat) choice["message"] = {{"role", "assistant"}, {"content", text}};
    else choice["text"] = text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_json(finish_reason);
    return dump({{"id", id_},
                 {"object", endpoint_ == Endpoint::kChat ? "chat.completion" : "text_completion"},
                 {"created", created_},
                 {"model", model_},
                 {"choices", json::array({std::move(choice)})},
                 {"usage", usage_json(usage)}});
}

std::string ResponseJson::chunk(json choice) const {
    json j = {{"id", id_},
              {"object", endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", json::array({std::move(choice)})}};
    if (include_usage_) j["usage"] = nullptr;
    return dump(j);
}

std::string ResponseJson::role_chunk() const {
    return chunk({{"index", 0},
                  {"delta", {{"role", "assistant"}, {"content", ""}}},
                  {"logprobs", nullptr},
                  {"finish_reason", nullptr}});
}

std::string ResponseJson::text_chunk(const std::string &text) const {
    json choice = {{"index", 0}};
    if (endpoint_ == Endpoint::kChat) choice["delta"] = {{"content", text}};
    else choice["text"] = text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    return chunk(std::move(choice));
}

std::string ResponseJson::finish_chunk(const char *finish_reason) const {
    json choice = {{"index", 0}};
    if (endpoint_ == Endpoint::kChat) choice["delta"] = json::object();
    else choice["text"] = "";
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_json(finish_reason);
    return chunk(std::move(choice));
}

std::string ResponseJson::usage_chunk(const Usage &usage) const {
    return dump({{"id", id_},
                 {"object", endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
                 {"created", created_},
                 {"model", model_},
                 {"choices", json::array()},
                 {"usage", usage_json(usage)}});
}

std::string sse_data(const std::string &json_text) { return "data: " + json_text + "\n\n"; }

}  // namespace kt_server
