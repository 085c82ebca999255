#include "core/status.h"

#include <cstdio>
#include <vector>

namespace kt {

std::string vformat(const char *fmt, va_list args) {
    va_list copy;
    va_copy(copy, args);
    char small[256];
    int n = std::vsnprintf(small, sizeof small, fmt, copy);
    va_end(copy);
    if (n < 0) return std::string(fmt);
    if (static_cast<size_t>(n) < sizeof small) return std::string(small, static_cast<size_t>(n));
    std::string out(static_cast<size_t>(n), '\0');
    std::vsnprintf(out.data(), out.size() + 1, fmt, args);
    return out;
}

std::string format(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::string s = vformat(fmt, args);
    va_end(args);
    return s;
}

Status Status::error(kt_status code, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    Status s(code, vformat(fmt, args));
    va_end(args);
    return s;
}

}  // namespace kt
