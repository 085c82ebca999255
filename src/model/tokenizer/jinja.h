// A small interpreter for the subset of Jinja2 that chat templates use (tokenizer.chat_template in GGUF files,
// chat_template in Hugging Face tokenizer_config.json). It renders the way Hugging Face's apply_chat_template
// does: trim_blocks and lstrip_blocks on, undefined values empty and falsy, Python's str() for output.
//
// Supported: {{ }}, {% %}, {# #} with whitespace control (- and +); if/elif/else, for (tuple targets, loop
// filter, else, the loop variable), set (names, namespace attributes, blocks), generation blocks; literals,
// lists, dicts, tuples, attribute/index/slice access, calls, filters, tests, arithmetic, comparison, `in`,
// `~`, and/or/not, conditional expressions; the functions range, namespace, raise_exception, strftime_now; the
// string, list and dict methods and the filters and tests chat templates use (listed in jinja.cpp). Anything
// else — macros, includes, an unknown filter — is KT_STATUS_UNSUPPORTED with the line and column: a template
// kt does not understand is an error, never a guess.
//
// Templates come from model files and are untrusted: parsing depth, loop iterations and output size are capped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace kt::tokenizer::jinja {

class Value;
using List = std::vector<Value>;
struct Dict {
    std::vector<std::pair<std::string, Value>> items;  // in insertion order, like Python dicts
    const Value *find(std::string_view key) const;
    void set(const std::string &key, Value v);
};

class Value {
public:
    enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

    Value() = default;
    static Value none();
    static Value boolean(bool b);
    static Value integer(int64_t i);
    static Value number(double f);
    static Value string(std::string s);
    static Value list(List items = {});
    static Value dict(Dict d = {});
    static Value make_namespace(Dict d = {});
    static Value function(std::string name);
    static Value from_json(const json::Value &j);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::kUndefined; }
    bool is_none() const { return kind_ == Kind::kNone; }
    bool is_string() const { return kind_ == Kind::kString; }
    bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
    bool is_list() const { return kind_ == Kind::kList; }
    bool is_dict() const { return kind_ == Kind::kDict; }
    bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }

    bool as_bool() const { return b_; }
    int64_t as_int() const { return i_; }
    double as_float() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : f_; }
    const std::string &as_string() const { return s_; }  // also the function name
    const List &items() const { return *list_; }
    List &items() { return *list_; }
    const Dict &members() const { return *dict_; }
    Dict &members() { return *dict_; }

    bool truthy() const;

private:
    Kind kind_ = Kind::kUndefined;
    bool b_ = false;
    bool namespace_ = false;
    int64_t i_ = 0;
    double f_ = 0;
    std::string s_;
    std::shared_ptr<List> list_;  // shared: Jinja lists and dicts are references, as in Python
    std::shared_ptr<Dict> dict_;
};

// Python's str() of a value, as {{ }} prints it (None, True, 1.5, ['a', 1], {'k': 'v'}).
std::string to_output(const Value &v);
// The tojson filter: JSON with Python json.dumps's default separators (", ", ": "), non-ASCII kept as is;
// indent > 0 pretty-prints.
std::string to_json(const Value &v, int indent = 0);

struct Node;

class Template {
public:
    // Parses `source`. KT_STATUS_UNSUPPORTED for syntax kt does not implement or cannot parse, with line:column.
    static Status parse(std::string_view source, std::unique_ptr<Template> *out);
    ~Template();

    // Renders with the variables of `context` (a dict). raise_exception() in the template gives
    // KT_STATUS_INVALID_ARGUMENT with its message; evaluation errors (an unknown filter, a call of a
    // non-function, a type that an operator does not take) KT_STATUS_UNSUPPORTED with the line.
    Status render(const Value &context, std::string *out) const;

private:
    Template() = default;
    std::string source_;  // kept for the line:column of evaluation errors
    std::vector<std::unique_ptr<Node>> body_;
};

}  // namespace kt::tokenizer::jinja
