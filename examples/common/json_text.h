// JSON string contents for the programs' --json / -o json output: always valid UTF-8 JSON, whatever bytes a file,
// a key or a path holds. Header-only, on the standard library alone (the programs use kt.h, never src/).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace kt_cli {

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, surrogates or code points
// past U+10FFFF), or 0.
inline size_t utf8_length_at(std::string_view s, size_t i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || n > s.size() - i) return 0;
    uint32_t cp = n == 1 ? c : c & (0x7Fu >> n);
    for (size_t k = 1; k < n; ++k) {
        const unsigned char d = static_cast<unsigned char>(s[i + k]);
        if ((d >> 6) != 2) return 0;
        cp = (cp << 6) | (d & 0x3Fu);
    }
    static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    return cp < kSmallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000) ? 0 : n;
}

// `s` escaped for the inside of a JSON string: quote, backslash and control characters escaped, each byte that is
// not part of valid UTF-8 replaced by U+FFFD (JSON text must be UTF-8; the programs say where bytes were invalid).
inline std::string json_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const size_t n = utf8_length_at(s, i);
        if (n == 0) {
            out += "\\ufffd";
            ++i;
            continue;
        }
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out.append(s.substr(i, n));
                }
        }
        i += n;
    }
    return out;
}

}  // namespace kt_cli
