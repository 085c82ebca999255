// An error answered to an HTTP client, shaped as OpenAI's API shapes it:
//     {"error": {"message": "...", "type": "invalid_request_error", "param": "messages[0].role", "code": null}}
// with the HTTP status next to it. The official clients turn this body into their typed errors (BadRequestError,
// AuthenticationError ...), so the message and the field it names reach the user unchanged.
#pragma once

#include <string>

namespace kt_server {

struct ApiError {
    int http_status = 400;
    std::string type = "invalid_request_error";
    std::string message;
    std::string param;  // the request field at fault ("messages[2].content"); empty: none (JSON null)
    std::string code;   // a machine-readable code ("context_length_exceeded", "invalid_api_key"); empty: null

    // The JSON body {"error": {...}}.
    std::string body() const;

    static ApiError invalid(std::string param, std::string message) {
        return {400, "invalid_request_error", std::move(message), std::move(param), ""};
    }
};

}  // namespace kt_server
