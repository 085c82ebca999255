// A small JSON reader and writer: tests read golden files with it, chat templates take extra variables as JSON
// and render `tojson`. Strict RFC 8259 input (no comments, no trailing commas); nesting is limited so hostile
// input cannot exhaust the stack; objects keep their key order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kt::json {

class Value {
public:
    enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

    Value() = default;
    static Value boolean(bool b);
    static Value number(double d);
    static Value string(std::string s);
    static Value array(std::vector<Value> items = {});
    static Value object(std::vector<std::pair<std::string, Value>> members = {});

    Kind kind() const { return kind_; }
    bool is_null() const { return kind_ == Kind::kNull; }
    bool as_bool() const { return bool_; }
    double as_number() const { return number_; }
    // True when the number was written without fraction or exponent and fits an int64 (e.g. token ids).
    bool is_integer() const { return kind_ == Kind::kNumber && integer_; }
    int64_t as_int() const { return int_; }
    const std::string &as_string() const { return string_; }
    const std::vector<Value> &items() const { return items_; }
    const std::vector<std::pair<std::string, Value>> &members() const { return members_; }
    // The member's value, or nullptr (objects only).
    const Value *find(std::string_view key) const;

private:
    Kind kind_ = Kind::kNull;
    bool bool_ = false;
    bool integer_ = false;
    double number_ = 0;
    int64_t int_ = 0;
    std::string string_;
    std::vector<Value> items_;
    std::vector<std::pair<std::string, Value>> members_;
    friend class Parser;
};

constexpr int kMaxDepth = 256;

// Parses one JSON document. INVALID_ARGUMENT with the byte offset on malformed input.
Status parse(std::string_view text, Value *out);

// Appends `s` as a JSON string literal: ", \, control characters escaped; other characters (non-ASCII included)
// written as they are, like Python's json.dumps(ensure_ascii=False).
void append_quoted(std::string *out, std::string_view s);
// The same without the quotes: the inside of a string literal (escaping is per byte, so `s` may be one chunk of a
// longer string).
void append_escaped(std::string *out, std::string_view s);

}  // namespace kt::json
