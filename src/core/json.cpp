// JSON reading and string quoting; see json.h.
#include "core/json.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace kt::json {

Value Value::boolean(bool b) {
    Value v;
    v.kind_ = Kind::kBool;
    v.bool_ = b;
    return v;
}

Value Value::number(double d) {
    Value v;
    v.kind_ = Kind::kNumber;
    v.number_ = d;
    if (std::floor(d) == d && std::fabs(d) < 9.2e18) {
        v.integer_ = true;
        v.int_ = static_cast<int64_t>(d);
    }
    return v;
}

Value Value::string(std::string s) {
    Value v;
    v.kind_ = Kind::kString;
    v.string_ = std::move(s);
    return v;
}

Value Value::array(std::vector<Value> items) {
    Value v;
    v.kind_ = Kind::kArray;
    v.items_ = std::move(items);
    return v;
}

Value Value::object(std::vector<std::pair<std::string, Value>> members) {
    Value v;
    v.kind_ = Kind::kObject;
    v.members_ = std::move(members);
    return v;
}

const Value *Value::find(std::string_view key) const {
    for (const auto &m : members_)
        if (m.first == key) return &m.second;
    return nullptr;
}

class Parser {
public:
    explicit Parser(std::string_view text) : s_(text) {}

    Status document(Value *out) {
        KT_TRY(value(out, 0));
        skip_space();
        return at_ == s_.size() ? Status::ok() : fail("unexpected data after the document");
    }

private:
    Status fail(const char *what) const {
        return Status::error(KT_STATUS_INVALID_ARGUMENT, "json: %s at byte %zu", what, at_);
    }
    void skip_space() {
        while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
    }
    bool literal(std::string_view word) {
        if (s_.substr(at_, word.size()) != word) return false;
        at_ += word.size();
        return true;
    }

    Status value(Value *out, int depth) {
        if (depth > kMaxDepth) return fail("nesting too deep");
        skip_space();
        if (at_ >= s_.size()) return fail("unexpected end of input");
        const char c = s_[at_];
        if (c == '{') return object(out, depth);
        if (c == '[') return array(out, depth);
        if (c == '"') {
            std::string str;
            KT_TRY(string(&str));
            *out = Value::string(std::move(str));
            return Status::ok();
        }
        if (literal("true")) return *out = Value::boolean(true), Status::ok();
        if (literal("false")) return *out = Value::boolean(false), Status::ok();
        if (literal("null")) return *out = Value(), Status::ok();
        return number(out);
    }

    Status number(Value *out) {
        const size_t start = at_;
        bool integer = true;
        if (at_ < s_.size() && s_[at_] == '-') ++at_;
        const auto digits = [&] {
            const size_t from = at_;
            while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
            return at_ - from;
        };
        const size_t int_digits = digits();
        if (int_digits == 0 || (int_digits > 1 && s_[start + (s_[start] == '-')] == '0')) return fail("invalid number");
        if (at_ < s_.size() && s_[at_] == '.') {
            ++at_;
            integer = false;
            if (digits() == 0) return fail("invalid number");
        }
        if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
            ++at_;
            integer = false;
            if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
            if (digits() == 0) return fail("invalid number");
        }
        const std::string text(s_.substr(start, at_ - start));
        *out = Value::number(std::strtod(text.c_str(), nullptr));
        if (integer && int_digits <= 18) {
            out->integer_ = true;
            out->int_ = std::strtoll(text.c_str(), nullptr, 10);
        } else {
            out->integer_ = false;
        }
        return Status::ok();
    }

    Status hex4(uint32_t *out) {
        if (at_ + 4 > s_.size()) return fail("truncated \\u escape");
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = s_[at_++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
            else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
            else return fail("invalid \\u escape");
        }
        *out = v;
        return Status::ok();
    }

    static void put_utf8(std::string *out, uint32_t c) {
        if (c < 0x80) {
            out->push_back(static_cast<char>(c));
        } else if (c < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (c >> 6)));
            out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
        } else if (c < 0x10000) {
            out->push_back(static_cast<char>(0xE0 | (c >> 12)));
            out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
        } else {
            out->push_back(static_cast<char>(0xF0 | (c >> 18)));
            out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
        }
    }

    Status string(std::string *out) {
        ++at_;  // the opening quote
        while (true) {
            if (at_ >= s_.size()) return fail("unterminated string");
            const char c = s_[at_++];
            if (c == '"') return Status::ok();
            if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
            if (c != '\\') {
                out->push_back(c);
                continue;
            }
            if (at_ >= s_.size()) return fail("unterminated escape");
            const char e = s_[at_++];
            switch (e) {
                case '"': out->push_back('"'); break;
                case '\\': out->push_back('\\'); break;
                case '/': out->push_back('/'); break;
                case 'b': out->push_back('\b'); break;
                case 'f': out->push_back('\f'); break;
                case 'n': out->push_back('\n'); break;
                case 'r': out->push_back('\r'); break;
                case 't': out->push_back('\t'); break;
                case 'u': {
                    uint32_t c1 = 0;
                    KT_TRY(hex4(&c1));
                    // A high surrogate followed by a low one is one code point; a lone surrogate becomes U+FFFD.
                    if (c1 >= 0xD800 && c1 < 0xDC00 && s_.substr(at_, 2) == "\\u") {
                        at_ += 2;
                        uint32_t c2 = 0;
                        KT_TRY(hex4(&c2));
                        if (c2 >= 0xDC00 && c2 < 0xE000) {
                            put_utf8(out, 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00));
                        } else {
                            put_utf8(out, 0xFFFD);
                            put_utf8(out, c2 >= 0xD800 && c2 < 0xE000 ? 0xFFFD : c2);
                        }
                    } else {
                        put_utf8(out, c1 >= 0xD800 && c1 < 0xE000 ? 0xFFFD : c1);
                    }
                    break;
                }
                default: return fail("invalid escape");
            }
        }
    }

    Status array(Value *out, int depth) {
        ++at_;
        std::vector<Value> items;
        skip_space();
        if (at_ < s_.size() && s_[at_] == ']') {
            ++at_;
            *out = Value::array();
            return Status::ok();
        }
        while (true) {
            Value item;
            KT_TRY(value(&item, depth + 1));
            items.push_back(std::move(item));
            skip_space();
            if (at_ >= s_.size()) return fail("unterminated array");
            const char c = s_[at_++];
            if (c == ']') break;
            if (c != ',') return fail("expected ',' or ']'");
        }
        *out = Value::array(std::move(items));
        return Status::ok();
    }

    Status object(Value *out, int depth) {
        ++at_;
        std::vector<std::pair<std::string, Value>> members;
        skip_space();
        if (at_ < s_.size() && s_[at_] == '}') {
            ++at_;
            *out = Value::object();
            return Status::ok();
        }
        while (true) {
            skip_space();
            if (at_ >= s_.size() || s_[at_] != '"') return fail("expected a string key");
            std::string key;
            KT_TRY(string(&key));
            skip_space();
            if (at_ >= s_.size() || s_[at_] != ':') return fail("expected ':'");
            ++at_;
            Value v;
            KT_TRY(value(&v, depth + 1));
            members.emplace_back(std::move(key), std::move(v));
            skip_space();
            if (at_ >= s_.size()) return fail("unterminated object");
            const char c = s_[at_++];
            if (c == '}') break;
            if (c != ',') return fail("expected ',' or '}'");
        }
        *out = Value::object(std::move(members));
        return Status::ok();
    }

    std::string_view s_;
    size_t at_ = 0;
};

Status parse(std::string_view text, Value *out) {
    Parser p(text);
    return p.document(out);
}

void append_quoted(std::string *out, std::string_view s) {
    out->push_back('"');
    append_escaped(out, s);
    out->push_back('"');
}

void append_escaped(std::string *out, std::string_view s) {
    for (char c : s) {
        switch (c) {
            case '"': *out += "\\\""; break;
            case '\\': *out += "\\\\"; break;
            case '\n': *out += "\\n"; break;
            case '\r': *out += "\\r"; break;
            case '\t': *out += "\\t"; break;
            case '\b': *out += "\\b"; break;
            case '\f': *out += "\\f"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) *out += format("\\u%04x", static_cast<unsigned char>(c));
                else out->push_back(c);
        }
    }
}

}  // namespace kt::json
