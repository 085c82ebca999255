// Status: the error value every fallible internal function returns, and the macros that keep error paths short.
//
// kt's public functions return kt_status codes; internally a failure also carries a message that names what was
// wrong and where ("gguf: tensor 'blk.0.attn_q.weight' (info at byte 1234): dimension 1 is 0"). The api layer
// copies that message into the handle's last-error slot. Status is cheap when OK (no allocation).
#pragma once

#include <cstdarg>
#include <string>
#include <utility>

#include "kt.h"

namespace kt {

// printf-style formatting into a std::string.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char *fmt, va_list args);

class [[nodiscard]] Status {
public:
    Status() = default;
    Status(kt_status code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return Status(); }
    static Status error(kt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

    bool is_ok() const { return code_ == KT_STATUS_OK; }
    explicit operator bool() const { return is_ok(); }
    kt_status code() const { return code_; }
    const std::string &message() const { return message_; }

    // Prefixes the message with context, e.g. the file name, keeping the code.
    Status &&with_context(const std::string &context) && {
        if (!is_ok()) message_ = context + ": " + message_;
        return std::move(*this);
    }

private:
    kt_status code_ = KT_STATUS_OK;
    std::string message_;
};

}  // namespace kt

// Returns an error Status from the current function when `cond` holds.
#define KT_RETURN_IF(cond, code, ...)                    \
    do {                                                 \
        if (cond) return ::kt::Status::error((code), __VA_ARGS__); \
    } while (0)

// Evaluates an expression yielding Status and returns it from the current function if it failed.
#define KT_TRY(expr)                                 \
    do {                                             \
        ::kt::Status kt_try_status_ = (expr);        \
        if (!kt_try_status_.is_ok()) return kt_try_status_; \
    } while (0)
