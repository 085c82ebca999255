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
// Templates come from model files and requests: they are untrusted programs. Every resource a render can use is
// bounded by the limits below, and each violation is KT_STATUS_UNSUPPORTED with a message naming the template
// line. Integers are 64-bit: where Python would grow a big integer (2 ** 64, INT64_MIN // -1, a float beyond
// 2^63 through |int) kt reports an overflow instead of wrapping.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace kt::tokenizer::jinja {

// ---- limits (margins kept by real templates: tests/unit/chat_template_test.cpp, "real templates stay far
//      inside the limits") ----

// The source of one template. Real chat templates are 0.3-20 KB.
constexpr size_t kMaxSourceBytes = 1 << 20;
// One depth for every recursive path: statement nesting plus expression nesting in the parser, the tree height
// of every expression, and at render time the statements, expressions and value walks (str, repr, tojson, ==)
// that are active at once. Real templates reach 10-20.
constexpr int kMaxDepth = 200;
// The thread stack the deepest template kMaxDepth admits needs at most (parsing 200 nested parentheses is the
// deepest path: 11 parser frames per level), in an optimised build and under AddressSanitizer.
constexpr size_t kStackBytes = 512 << 10;
constexpr size_t kSanitizerStackBytes = 4 << 20;
// Work units per render: one per statement and expression evaluated, four per loop iteration, plus one per
// kBytesPerStep bytes that an operation reads, copies or builds (repetition, concatenation, join, replace,
// split, tojson, comparisons of lists and dicts count their elements as sizeof(Value) bytes each). Spending all
// of it took 0.01-0.27 s on one core of the development machine (loops, string scans, copies, comparisons); a
// short real chat takes 230-700 steps, 100 turns (0.6 MB) 10-27 thousand.
constexpr uint64_t kMaxSteps = 1'000'000;
constexpr uint64_t kBytesPerStep = 256;
// The largest single value (a string's bytes, a list's or dict's element storage) and the rendered text.
constexpr uint64_t kMaxValueBytes = 64ull << 20;
constexpr uint64_t kMaxOutputBytes = 64ull << 20;

// The budgets of one render: kt renders every template with these defaults. A smaller budget runs the same checks
// and fails with the same messages, only sooner; the chat template fuzz target uses one so that an input that runs
// to a limit costs a fuzzing execution milliseconds rather than a quarter of a second. The depth is not among them:
// it is what the parser and the thread stack are sized for (kStackBytes).
struct Limits {
    uint64_t steps = kMaxSteps;
    uint64_t value_bytes = kMaxValueBytes;    // whole MiB
    uint64_t output_bytes = kMaxOutputBytes;  // whole MiB
};

class Value;
using List = std::vector<Value>;

// A Jinja dict: keys in insertion order, like Python dicts; lookups hashed once it is large.
class Dict {
public:
    using Item = std::pair<std::string, Value>;
    const std::vector<Item> &items() const { return items_; }
    size_t size() const;  // defined after Value: clang needs the complete type here
    bool empty() const;
    const Value *find(std::string_view key) const;
    void set(std::string key, Value v);

private:
    size_t position(std::string_view key) const;  // items_.size() when absent

    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::vector<Item> items_;
    std::unordered_map<std::string, size_t, Hash, std::equal_to<>> index_;  // key -> position, once large
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
    const std::string &as_string() const;  // also the function name
    const List &items() const { return *list_; }
    const Dict &members() const { return *dict_; }
    // A namespace's attributes, shared by every copy of it ({% set ns.x = ... %}).
    Dict &namespace_members() { return *dict_; }

    // Nesting of lists and dicts (0 for scalars), as built: a namespace counts as it was when the container was
    // made. Bounded by kMaxDepth when a template builds it, so walks and destruction stay shallow.
    int depth() const { return static_cast<int>(depth_); }
    // True for a namespace and for containers holding one (a namespace attribute may not: no cycles).
    bool holds_namespace() const { return holds_namespace_; }

    bool truthy() const;

private:
    void take_measure(const Value &element);

    Kind kind_ = Kind::kUndefined;
    bool b_ = false;
    bool namespace_ = false;
    bool holds_namespace_ = false;
    uint32_t depth_ = 0;
    int64_t i_ = 0;
    double f_ = 0;
    // Shared and immutable (except a namespace's dict): copying a value is O(1), as in Python.
    std::shared_ptr<const std::string> s_;
    std::shared_ptr<const List> list_;
    std::shared_ptr<Dict> dict_;
};

inline size_t Dict::size() const { return items_.size(); }
inline bool Dict::empty() const { return items_.empty(); }

// What one render used, to compare with the limits.
struct RenderStats {
    int depth = 0;               // the deepest nesting reached (see kMaxDepth)
    uint64_t steps = 0;          // work units (see kMaxSteps)
    uint64_t largest_value = 0;  // bytes of the largest string, list or dict built
    uint64_t output_bytes = 0;
};

struct Node;

class Template {
public:
    // Parses `source`. KT_STATUS_UNSUPPORTED for syntax kt does not implement or cannot parse, or a template
    // beyond kMaxSourceBytes or kMaxDepth, with line:column.
    static Status parse(std::string_view source, std::unique_ptr<Template> *out);
    ~Template();

    // Renders with the variables of `context` (a dict). raise_exception() in the template gives
    // KT_STATUS_INVALID_ARGUMENT with its message; evaluation errors (an unknown filter, a call of a
    // non-function, a type that an operator does not take, an integer overflow, a limit exceeded)
    // KT_STATUS_UNSUPPORTED with the line. On error *out is left as it was. Thread-safe: a parsed template may be
    // rendered by many threads at once.
    Status render(const Value &context, std::string *out, RenderStats *stats = nullptr, const Limits &limits = {}) const;

    // The deepest statement + expression nesting in the source (render depth is at least this on the paths
    // taken, plus the nesting of the values walked).
    int depth() const { return depth_; }

private:
    Template() = default;
    std::string source_;  // kept for the line:column of evaluation errors
    std::vector<std::unique_ptr<Node>> body_;
    int depth_ = 0;
};

}  // namespace kt::tokenizer::jinja
