// The Jinja-subset interpreter; see jinja.h.
//
// Structure: a scanner cuts the source into text and tags (applying -/+ whitespace control, trim_blocks and
// lstrip_blocks), a lexer turns each tag into tokens, a recursive-descent parser builds statement and expression
// trees (operator precedence as in Jinja2's parser), and a tree-walking renderer evaluates them. Inside this file
// errors travel as a private exception (JinjaError) that render()/parse() turn into a Status; nothing escapes.
//
// The limits of jinja.h are enforced in three places: the parser bounds recursion and the height of every tree
// (so evaluating and destroying a tree stays shallow), the values bound their own nesting (Value::depth), and the
// renderer counts depth, work and the size of everything it builds before it builds it.
#include "model/tokenizer/jinja.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <new>
#include <stdexcept>
#include <unordered_map>

namespace kt::tokenizer::jinja {

namespace {

struct JinjaError {
    Status status;
};

[[noreturn]] void fail(kt_status code, std::string message) { throw JinjaError{Status(code, std::move(message))}; }

// Dicts search their keys linearly up to this size (messages have two to five keys), then hash them.
constexpr size_t kIndexFrom = 16;

// A loop iteration builds a scope and the nine-entry loop variable: measured, about four expressions' time.
constexpr uint64_t kIterationSteps = 4;

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// Values

size_t Dict::position(std::string_view key) const {
    if (!index_.empty()) {
        const auto it = index_.find(key);
        return it == index_.end() ? items_.size() : it->second;
    }
    for (size_t i = 0; i < items_.size(); ++i)
        if (items_[i].first == key) return i;
    return items_.size();
}

const Value *Dict::find(std::string_view key) const {
    const size_t at = position(key);
    return at < items_.size() ? &items_[at].second : nullptr;
}

void Dict::set(std::string key, Value v) {
    const size_t at = position(key);
    if (at < items_.size()) {
        items_[at].second = std::move(v);
        return;
    }
    items_.emplace_back(std::move(key), std::move(v));
    if (!index_.empty()) {
        index_.emplace(items_.back().first, items_.size() - 1);
    } else if (items_.size() > kIndexFrom) {
        for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    }
}

const std::string &Value::as_string() const {
    static const std::string empty;
    return s_ ? *s_ : empty;
}

void Value::take_measure(const Value &element) {
    depth_ = std::max(depth_, element.depth_ + 1);
    holds_namespace_ = holds_namespace_ || element.namespace_ || element.holds_namespace_;
}

Value Value::none() {
    Value v;
    v.kind_ = Kind::kNone;
    return v;
}
Value Value::boolean(bool b) {
    Value v;
    v.kind_ = Kind::kBool;
    v.b_ = b;
    return v;
}
Value Value::integer(int64_t i) {
    Value v;
    v.kind_ = Kind::kInt;
    v.i_ = i;
    return v;
}
Value Value::number(double f) {
    Value v;
    v.kind_ = Kind::kFloat;
    v.f_ = f;
    return v;
}
Value Value::string(std::string s) {
    Value v;
    v.kind_ = Kind::kString;
    v.s_ = std::make_shared<const std::string>(std::move(s));
    return v;
}
Value Value::list(List items) {
    Value v;
    v.kind_ = Kind::kList;
    v.depth_ = 1;
    for (const Value &x : items) v.take_measure(x);
    v.list_ = std::make_shared<const List>(std::move(items));
    return v;
}
Value Value::dict(Dict d) {
    Value v;
    v.kind_ = Kind::kDict;
    v.depth_ = 1;
    for (const auto &kv : d.items()) v.take_measure(kv.second);
    v.dict_ = std::make_shared<Dict>(std::move(d));
    return v;
}
Value Value::make_namespace(Dict d) {
    Value v = dict(std::move(d));
    v.namespace_ = true;
    return v;
}
Value Value::function(std::string name) {
    Value v;
    v.kind_ = Kind::kFunction;
    v.s_ = std::make_shared<const std::string>(std::move(name));
    return v;
}

Value Value::from_json(const json::Value &j) {
    switch (j.kind()) {
        case json::Value::Kind::kNull: return none();
        case json::Value::Kind::kBool: return boolean(j.as_bool());
        case json::Value::Kind::kNumber: return j.is_integer() ? integer(j.as_int()) : number(j.as_number());
        case json::Value::Kind::kString: return string(j.as_string());
        case json::Value::Kind::kArray: {  // recursion bounded by json::kMaxDepth
            List items;
            items.reserve(j.items().size());
            for (const auto &x : j.items()) items.push_back(from_json(x));
            return list(std::move(items));
        }
        case json::Value::Kind::kObject: {
            Dict d;
            for (const auto &[k, x] : j.members()) d.set(k, from_json(x));
            return dict(std::move(d));
        }
    }
    return Value();
}

bool Value::truthy() const {
    switch (kind_) {
        case Kind::kUndefined:
        case Kind::kNone: return false;
        case Kind::kBool: return b_;
        case Kind::kInt: return i_ != 0;
        case Kind::kFloat: return f_ != 0;
        case Kind::kString: return !as_string().empty();
        case Kind::kList: return !list_->empty();
        case Kind::kDict: return !dict_->empty();
        case Kind::kFunction: return true;
    }
    return false;
}

// ------------------------------------------------------------------------------------------------------------
// Text: code points, searching, stripping

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The length of the code point starting at s[i], as Python's len() and indexing see a UTF-8 string (a stray
// byte counts as one character).
size_t char_length(std::string_view s, size_t i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return std::min(n, s.size() - i);
}

size_t count_chars(std::string_view s) {
    size_t n = 0;
    for (size_t i = 0; i < s.size();) {
        // ASCII eight bytes at a time: the work budget prices bytes, so the common case should cost little.
        uint64_t word;
        while (i + 8 <= s.size() && (std::memcpy(&word, s.data() + i, 8), (word & 0x8080808080808080ull) == 0)) {
            i += 8;
            n += 8;
        }
        if (i >= s.size()) break;
        i += char_length(s, i);
        ++n;
    }
    return n;
}

// The byte offset of character `index` (0 <= index <= count_chars(s)).
size_t char_offset(std::string_view s, size_t index) {
    size_t i = 0;
    for (; index > 0 && i < s.size(); --index) i += char_length(s, i);
    return i;
}

// Needles up to this length are searched with std::string_view::find, whose candidate-by-candidate comparison
// then costs at most this many byte compares per haystack byte; longer ones with Knuth-Morris-Pratt, linear in
// both lengths (a hostile 'aaa...ab' needle makes the naive search quadratic).
constexpr size_t kShortNeedle = 16;

// The first occurrence of `needle` in `hay` at or after `from`, or npos.
size_t find_text(std::string_view hay, std::string_view needle, size_t from) {
    if (needle.size() <= kShortNeedle || from >= hay.size()) return hay.find(needle, from);
    // failure[i]: the length of the longest proper border of needle[0, i].
    std::vector<uint32_t> failure(needle.size(), 0);
    for (size_t i = 1, k = 0; i < needle.size(); ++i) {
        while (k > 0 && needle[i] != needle[k]) k = failure[k - 1];
        if (needle[i] == needle[k]) ++k;
        failure[i] = static_cast<uint32_t>(k);
    }
    for (size_t i = from, k = 0; i < hay.size(); ++i) {
        while (k > 0 && hay[i] != needle[k]) k = failure[k - 1];
        if (hay[i] == needle[k]) ++k;
        if (k == needle.size()) return i + 1 - k;
    }
    return std::string_view::npos;
}

// Python's str.strip family on bytes: ASCII whitespace, or the bytes of `chars`.
std::string_view strip(std::string_view s, const std::string *chars, bool left, bool right) {
    bool strip_byte[256] = {};
    for (unsigned char c : chars ? std::string_view(*chars) : std::string_view(" \t\n\r\v\f")) strip_byte[c] = true;
    size_t b = 0, e = s.size();
    if (left)
        while (b < e && strip_byte[static_cast<unsigned char>(s[b])]) ++b;
    if (right)
        while (e > b && strip_byte[static_cast<unsigned char>(s[e - 1])]) --e;
    return s.substr(b, e - b);
}

std::string ascii_case(std::string_view in, bool upper) {
    std::string s(in);
    for (char &c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string float_repr(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, f);
    std::string s(buf, r.ptr);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";  // Python writes 1.0, not 1
    return s;
}

// Python's int() and float() of a string: surrounding whitespace allowed, the whole rest must be the number.
bool parse_int_text(std::string_view s, int64_t *out, bool *overflow) {
    s = strip(s, nullptr, true, true);
    *overflow = false;
    bool negative = false;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
        negative = s[0] == '-';
        s.remove_prefix(1);
    }
    if (s.empty()) return false;
    // Accumulated negatively, so INT64_MIN parses.
    int64_t v = 0;
    bool digit_before = false;
    for (char c : s) {
        if (c == '_' && digit_before) {  // Python allows single underscores between digits
            digit_before = false;
            continue;
        }
        if (c < '0' || c > '9') return false;
        digit_before = true;
        if (__builtin_mul_overflow(v, int64_t{10}, &v) || __builtin_sub_overflow(v, int64_t{c - '0'}, &v)) *overflow = true;
    }
    if (!digit_before) return false;
    if (!negative && v == std::numeric_limits<int64_t>::min()) *overflow = true;
    if (!*overflow) *out = negative ? v : -v;
    return true;
}

bool parse_float_text(std::string_view s, double *out) {
    s = strip(s, nullptr, true, true);
    bool negative = false;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
        negative = s[0] == '-';
        s.remove_prefix(1);
    }
    if (s.empty() || s[0] == '+' || s[0] == '-') return false;
    double v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);  // also inf, infinity, nan
    if (r.ec == std::errc::invalid_argument || r.ptr != s.data() + s.size()) return false;
    if (r.ec == std::errc::result_out_of_range) v = std::strtod(std::string(s).c_str(), nullptr);  // inf or 0, as Python
    *out = negative ? -v : v;
    return true;
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// Lexing

namespace {

struct Token {
    enum Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind;
    std::string text;  // name, string value or operator
    int64_t i = 0;
    double f = 0;
    size_t pos = 0;
};

// Where a byte offset is, for messages.
struct Source {
    std::string_view text;
    std::string where(size_t pos) const {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < pos && i < text.size(); ++i) {
            if (text[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        return "chat template line " + std::to_string(line) + ":" + std::to_string(col);
    }
    [[noreturn]] void error(size_t pos, const std::string &what) const {
        fail(KT_STATUS_UNSUPPORTED, where(pos) + ": " + what);
    }
};

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// Lexes one tag's content starting at `at`, up to and including its closing delimiter ("}}" or "%}"). Sets
// *strip_after when the tag ends with "-}}" / "-%}".
std::vector<Token> lex_tag(const Source &src, size_t *at, char close, bool *strip_after) {
    std::vector<Token> tokens;
    const std::string_view s = src.text;
    size_t i = *at;
    while (true) {
        while (i < s.size() && is_space(s[i])) ++i;
        if (i >= s.size()) src.error(*at, "unterminated tag");
        if (s[i] == '-' && i + 2 < s.size() && s[i + 1] == close && s[i + 2] == '}') {
            *strip_after = true;
            i += 3;
            break;
        }
        if (s[i] == close && i + 1 < s.size() && s[i + 1] == '}') {
            *strip_after = false;
            i += 2;
            break;
        }
        Token t;
        t.pos = i;
        const char c = s[i];
        if (is_name_start(c)) {
            const size_t from = i;
            while (i < s.size() && is_name_char(s[i])) ++i;
            t.kind = Token::kName;
            t.text = std::string(s.substr(from, i - from));
        } else if (c >= '0' && c <= '9') {
            const size_t from = i;
            while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
            bool is_float = false;
            if (i + 1 < s.size() && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9') {
                is_float = true;
                ++i;
                while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
            }
            if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
                size_t j = i + 1;
                if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
                if (j < s.size() && s[j] >= '0' && s[j] <= '9') {
                    is_float = true;
                    i = j;
                    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
                }
            }
            const std::string num(s.substr(from, i - from));
            if (is_float) {
                t.kind = Token::kFloat;
                t.f = std::strtod(num.c_str(), nullptr);
            } else {
                t.kind = Token::kInt;
                auto r = std::from_chars(num.data(), num.data() + num.size(), t.i);
                if (r.ec != std::errc()) src.error(i, "integer literal out of range");
            }
        } else if (c == '\'' || c == '"') {
            t.kind = Token::kString;
            ++i;
            while (true) {
                if (i >= s.size()) src.error(t.pos, "unterminated string literal");
                const char d = s[i++];
                if (d == c) break;
                if (d != '\\' || i >= s.size()) {
                    t.text += d;
                    continue;
                }
                const char e = s[i++];
                switch (e) {
                    case 'n': t.text += '\n'; break;
                    case 't': t.text += '\t'; break;
                    case 'r': t.text += '\r'; break;
                    case '\\': t.text += '\\'; break;
                    case '\'': t.text += '\''; break;
                    case '"': t.text += '"'; break;
                    case '\n': break;  // line continuation
                    default:
                        t.text += '\\';
                        t.text += e;
                }
            }
        } else {
            static const char *kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                         "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
            const char *found = nullptr;
            for (const char *op : kOps)
                if (s.substr(i, std::strlen(op)) == op) {
                    found = op;
                    break;
                }
            if (!found) src.error(i, std::string("unexpected character '") + c + "'");
            t.kind = Token::kOp;
            t.text = found;
            i += std::strlen(found);
        }
        tokens.push_back(std::move(t));
    }
    Token end;
    end.kind = Token::kEnd;
    end.pos = i;
    tokens.push_back(end);
    *at = i;
    return tokens;
}

// The template cut into text and tags, whitespace control applied.
struct Piece {
    enum Kind { kText, kExpr, kStmt } kind;
    std::string text;
    std::vector<Token> tokens;
    size_t pos;
};

std::vector<Piece> scan(const Source &src) {
    const std::string_view s = src.text;
    std::vector<Piece> pieces;
    size_t i = 0;
    bool strip_next = false;  // the previous tag ended with "-"
    while (i <= s.size()) {
        size_t j = i;
        while (j + 1 < s.size() && !(s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#'))) ++j;
        const bool tag = j + 1 < s.size();
        std::string text(s.substr(i, (tag ? j : s.size()) - i));
        if (strip_next) text.erase(0, std::find_if(text.begin(), text.end(), [](char c) { return !is_space(c); }) - text.begin());
        strip_next = false;
        if (!tag) {
            if (!text.empty()) pieces.push_back(Piece{Piece::kText, std::move(text), {}, i});
            break;
        }
        const char kind = s[j + 1];
        size_t at = j + 2;
        const char modifier = at < s.size() ? s[at] : '\0';
        if (modifier == '-' || modifier == '+') ++at;
        if (modifier == '-') {
            while (!text.empty() && is_space(text.back())) text.pop_back();
        } else if (kind != '{' && modifier != '+') {
            // lstrip_blocks: spaces and tabs between the start of the line and a block tag go. The line may have
            // started before this text (at the template's start, or right after a newline trim_blocks removed).
            const size_t nl = text.rfind('\n');
            if (nl != std::string::npos || i == 0 || s[i - 1] == '\n') {
                const size_t line_start = nl == std::string::npos ? 0 : nl + 1;
                if (text.find_first_not_of(" \t", line_start) == std::string::npos) text.erase(line_start);
            }
        }
        if (!text.empty()) pieces.push_back(Piece{Piece::kText, std::move(text), {}, i});

        bool strip_after = false;
        if (kind == '#') {
            const size_t end = s.find("#}", at);
            if (end == std::string_view::npos) src.error(j, "unterminated comment");
            strip_after = end > at && s[end - 1] == '-';
            i = end + 2;
        } else {
            std::vector<Token> tokens = lex_tag(src, &at, kind == '{' ? '}' : '%', &strip_after);
            pieces.push_back(Piece{kind == '{' ? Piece::kExpr : Piece::kStmt, {}, std::move(tokens), j});
            i = at;
        }
        if (strip_after) {
            strip_next = true;
        } else if (kind != '{') {
            // trim_blocks: the first newline after a block tag goes.
            if (i < s.size() && s[i] == '\n') ++i;
            else if (i + 1 < s.size() && s[i] == '\r' && s[i + 1] == '\n') i += 2;
        }
    }
    return pieces;
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// Trees

namespace {

struct Expr {
    enum Kind {
        kLiteral, kName, kAttr, kIndex, kSlice, kCall, kFilter, kTest, kNeg, kNot, kBinary, kAnd, kOr, kCond,
        kList, kDict,
    } kind;
    size_t pos = 0;
    int height = 1;     // 1 + the tallest operand: the depth of evaluating (and destroying) this tree
    Value literal;
    std::string name;   // name, attribute, filter, test or operator
    bool negate = false;  // "is not"
    std::vector<std::unique_ptr<Expr>> args;  // operands; for calls/filters/tests the object first (may be null)
    std::vector<std::string> kwargs;          // names of the trailing keyword arguments
};
using ExprPtr = std::unique_ptr<Expr>;

}  // namespace

struct Node {
    enum Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBlock } kind;
    size_t pos = 0;
    std::string text;                  // kText
    std::vector<ExprPtr> exprs;        // kOutput: value; kIf: conditions; kFor: iterable [, filter]; kSet: value
    std::vector<std::vector<std::unique_ptr<Node>>> bodies;  // kIf: per condition, then else; kFor: body, else
    std::vector<std::string> names;    // kFor: targets; kSet/kSetBlock: name [, attribute]
};

namespace {

using Body = std::vector<std::unique_ptr<Node>>;

class Parser {
public:
    Parser(const Source &src, std::vector<Piece> pieces) : src_(src), pieces_(std::move(pieces)) {}

    Body parse_template() {
        std::string end;
        Body body = parse_body({}, &end);
        return body;
    }

    // The deepest nesting of recursive parsing, and of statements plus expression trees, seen.
    int max_depth() const { return max_depth_; }

private:
    // Every recursive parse function holds one of these: parsing "((((...", "not not not ...", "- - - 1" or a
    // statement inside a statement costs one level each, and kMaxDepth levels at most.
    class Level {
    public:
        Level(Parser &p, size_t pos, const char *what) : p_(p) {
            if (p_.depth_ >= kMaxDepth)
                p_.src_.error(pos, std::string(what) + " nested too deeply (more than " + std::to_string(kMaxDepth) + " levels)");
            p_.max_depth_ = std::max(p_.max_depth_, ++p_.depth_);
        }
        ~Level() { --p_.depth_; }
        Level(const Level &) = delete;
        Level &operator=(const Level &) = delete;

    private:
        Parser &p_;
    };

    // ---- statements ----

    // Parses pieces until a statement whose keyword is in `ends` (returned in *end, its tokens left for the caller
    // in cur_) or the end of the template (only allowed when `ends` is empty).
    Body parse_body(const std::vector<std::string> &ends, std::string *end) {
        Body body;
        const Level level(*this, pos_of_piece(), "statements");
        ++statements_;
        while (piece_ < pieces_.size()) {
            Piece &p = pieces_[piece_++];
            if (p.kind == Piece::kText) {
                auto n = std::make_unique<Node>();
                n->kind = Node::kText;
                n->pos = p.pos;
                n->text = std::move(p.text);
                body.push_back(std::move(n));
                continue;
            }
            start_tokens(&p.tokens);
            if (p.kind == Piece::kExpr) {
                auto n = std::make_unique<Node>();
                n->kind = Node::kOutput;
                n->pos = p.pos;
                n->exprs.push_back(parse_expr());
                expect_end();
                body.push_back(std::move(n));
                continue;
            }
            const Token &kw = next();
            if (kw.kind != Token::kName) src_.error(kw.pos, "expected a statement keyword");
            if (std::find(ends.begin(), ends.end(), kw.text) != ends.end()) {
                *end = kw.text;
                --statements_;
                return body;
            }
            body.push_back(parse_statement(kw));
        }
        if (!ends.empty()) src_.error(src_.text.size(), "missing {% " + ends.back() + " %}");
        --statements_;
        return body;
    }

    std::unique_ptr<Node> parse_statement(const Token &kw) {
        auto n = std::make_unique<Node>();
        n->pos = kw.pos;
        if (kw.text == "if") {
            n->kind = Node::kIf;
            n->exprs.push_back(parse_expr());
            expect_end();
            std::string end;
            while (true) {
                n->bodies.push_back(parse_body({"elif", "else", "endif"}, &end));
                if (end == "elif") {
                    n->exprs.push_back(parse_expr());
                    expect_end();
                } else if (end == "else") {
                    expect_end();
                    n->bodies.push_back(parse_body({"endif"}, &end));
                    expect_end();
                    break;
                } else {
                    expect_end();
                    break;
                }
            }
        } else if (kw.text == "for") {
            n->kind = Node::kFor;
            do {
                const Token &t = next();
                if (t.kind != Token::kName) src_.error(t.pos, "expected a loop variable");
                n->names.push_back(t.text);
            } while (accept_op(","));
            const Token &in = next();
            if (in.kind != Token::kName || in.text != "in") src_.error(in.pos, "expected 'in'");
            n->exprs.push_back(parse_or_expr());  // not parse_expr: "if" here is the loop filter
            if (accept_name("if")) n->exprs.push_back(parse_expr());
            if (accept_name("recursive")) src_.error(kw.pos, "recursive loops are not supported");
            expect_end();
            std::string end;
            n->bodies.push_back(parse_body({"else", "endfor"}, &end));
            if (end == "else") {
                expect_end();
                n->bodies.push_back(parse_body({"endfor"}, &end));
            }
            expect_end();
        } else if (kw.text == "set") {
            const Token &t = next();
            if (t.kind != Token::kName) src_.error(t.pos, "expected a variable name");
            n->names.push_back(t.text);
            if (accept_op(".")) {
                const Token &a = next();
                if (a.kind != Token::kName) src_.error(a.pos, "expected an attribute name");
                n->names.push_back(a.text);
            }
            if (peek().kind == Token::kOp && peek().text == ",") src_.error(peek().pos, "tuple assignment is not supported");
            if (accept_op("=")) {
                n->kind = Node::kSet;
                n->exprs.push_back(parse_expr());
                expect_end();
            } else {
                n->kind = Node::kSetBlock;
                expect_end();
                std::string end;
                n->bodies.push_back(parse_body({"endset"}, &end));
                expect_end();
            }
        } else if (kw.text == "generation") {  // Hugging Face's assistant-mask marker: renders its body
            n->kind = Node::kBlock;
            expect_end();
            std::string end;
            n->bodies.push_back(parse_body({"endgeneration"}, &end));
            expect_end();
        } else {
            src_.error(kw.pos, "the statement '" + kw.text + "' is not supported");
        }
        return n;
    }

    // ---- expressions (precedence as in Jinja2: conditional < or < and < not < compare < + - < ~ < * / // %
    //      < ** < unary < postfix, filters and tests) ----

    ExprPtr parse_expr() {
        const Level level(*this, peek().pos, "expressions");
        ExprPtr e = parse_or();
        while (peek().kind == Token::kName && peek().text == "if") {
            const size_t pos = next().pos;
            auto c = make(Expr::kCond, pos);
            ExprPtr cond = parse_or();
            ExprPtr otherwise;
            if (accept_name("else")) otherwise = parse_expr();
            attach(*c, std::move(e));
            attach(*c, std::move(cond));
            attach(*c, std::move(otherwise));
            e = std::move(c);
        }
        return e;
    }

    // An expression without a trailing conditional (a for loop's iterable), with its own level.
    ExprPtr parse_or_expr() {
        const Level level(*this, peek().pos, "expressions");
        return parse_or();
    }

    ExprPtr parse_or() {
        ExprPtr e = parse_and();
        while (accept_name("or")) e = binary(Expr::kOr, "or", std::move(e), parse_and());
        return e;
    }

    ExprPtr parse_and() {
        ExprPtr e = parse_not();
        while (accept_name("and")) e = binary(Expr::kAnd, "and", std::move(e), parse_not());
        return e;
    }

    ExprPtr parse_not() {
        if (peek().kind == Token::kName && peek().text == "not") {
            const Level level(*this, peek().pos, "expressions");
            auto n = make(Expr::kNot, next().pos);
            attach(*n, parse_not());
            return n;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        ExprPtr e = parse_add();
        while (true) {
            const Token &t = peek();
            if (t.kind == Token::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" ||
                                         t.text == ">" || t.text == ">=")) {
                const std::string op = next().text;
                e = binary(Expr::kBinary, op, std::move(e), parse_add());
            } else if (t.kind == Token::kName && t.text == "in") {
                next();
                e = binary(Expr::kBinary, "in", std::move(e), parse_add());
            } else if (t.kind == Token::kName && t.text == "not" && peek(1).kind == Token::kName && peek(1).text == "in") {
                next();
                next();
                e = binary(Expr::kBinary, "not in", std::move(e), parse_add());
            } else {
                break;
            }
        }
        return e;
    }

    ExprPtr parse_add() {
        ExprPtr e = parse_concat();
        while (peek().kind == Token::kOp && (peek().text == "+" || peek().text == "-")) {
            const std::string op = next().text;
            e = binary(Expr::kBinary, op, std::move(e), parse_concat());
        }
        return e;
    }

    ExprPtr parse_concat() {
        ExprPtr e = parse_mul();
        while (accept_op("~")) e = binary(Expr::kBinary, "~", std::move(e), parse_mul());
        return e;
    }

    ExprPtr parse_mul() {
        ExprPtr e = parse_pow();
        while (peek().kind == Token::kOp &&
               (peek().text == "*" || peek().text == "/" || peek().text == "//" || peek().text == "%")) {
            const std::string op = next().text;
            e = binary(Expr::kBinary, op, std::move(e), parse_pow());
        }
        return e;
    }

    ExprPtr parse_pow() {
        ExprPtr e = parse_unary();
        while (accept_op("**")) e = binary(Expr::kBinary, "**", std::move(e), parse_unary());
        return e;
    }

    ExprPtr parse_unary() {
        ExprPtr e;
        if (peek().kind == Token::kOp && (peek().text == "-" || peek().text == "+")) {
            const Token &t = next();
            ExprPtr operand = parse_unary_no_filter();
            if (t.text == "-") {
                e = make(Expr::kNeg, t.pos);
                attach(*e, std::move(operand));
            } else {
                e = std::move(operand);
            }
        } else {
            e = parse_postfix(parse_primary());
        }
        return parse_filters(std::move(e));
    }

    ExprPtr parse_unary_no_filter() {
        const Level level(*this, peek().pos, "expressions");
        if (peek().kind == Token::kOp && (peek().text == "-" || peek().text == "+")) {
            const Token &t = next();
            ExprPtr operand = parse_unary_no_filter();
            if (t.text == "+") return operand;
            auto e = make(Expr::kNeg, t.pos);
            attach(*e, std::move(operand));
            return e;
        }
        return parse_postfix(parse_primary());
    }

    ExprPtr parse_primary() {
        const Token &t = next();
        switch (t.kind) {
            case Token::kString: {
                auto e = make(Expr::kLiteral, t.pos);
                // Adjacent string literals concatenate, as in Python (joined once: repeated appends are linear).
                std::string text = t.text;
                while (peek().kind == Token::kString) text += next().text;
                e->literal = Value::string(std::move(text));
                return e;
            }
            case Token::kInt: {
                auto e = make(Expr::kLiteral, t.pos);
                e->literal = Value::integer(t.i);
                return e;
            }
            case Token::kFloat: {
                auto e = make(Expr::kLiteral, t.pos);
                e->literal = Value::number(t.f);
                return e;
            }
            case Token::kName: {
                auto e = make(Expr::kLiteral, t.pos);
                if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
                else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
                else if (t.text == "none" || t.text == "None") e->literal = Value::none();
                else {
                    e->kind = Expr::kName;
                    e->name = t.text;
                }
                return e;
            }
            case Token::kOp:
                if (t.text == "(") {
                    ExprPtr e = parse_expr();
                    if (accept_op(",")) {  // a tuple: a list for our purposes
                        auto l = make(Expr::kList, t.pos);
                        attach(*l, std::move(e));
                        while (!(peek().kind == Token::kOp && peek().text == ")")) {
                            attach(*l, parse_expr());
                            if (!accept_op(",")) break;
                        }
                        e = std::move(l);
                    }
                    expect_op(")");
                    return e;
                }
                if (t.text == "[") {
                    auto l = make(Expr::kList, t.pos);
                    while (!accept_op("]")) {
                        attach(*l, parse_expr());
                        if (!accept_op(",")) {
                            expect_op("]");
                            break;
                        }
                    }
                    return l;
                }
                if (t.text == "{") {
                    auto d = make(Expr::kDict, t.pos);
                    while (!accept_op("}")) {
                        attach(*d, parse_expr());
                        expect_op(":");
                        attach(*d, parse_expr());
                        if (!accept_op(",")) {
                            expect_op("}");
                            break;
                        }
                    }
                    return d;
                }
                break;
            case Token::kEnd: src_.error(t.pos, "unexpected end of tag");
        }
        src_.error(t.pos, "unexpected '" + t.text + "'");
    }

    // Attribute, subscript and call chains ("x.y.y.y", "x()()()") are loops here but nest in the tree: attach
    // bounds their height.
    ExprPtr parse_postfix(ExprPtr e) {
        while (peek().kind == Token::kOp) {
            const std::string &op = peek().text;
            if (op == ".") {
                const size_t pos = next().pos;
                const Token &name = next();
                if (name.kind != Token::kName && name.kind != Token::kInt) src_.error(name.pos, "expected an attribute name");
                auto a = make(Expr::kAttr, pos);
                a->name = name.kind == Token::kName ? name.text : std::to_string(name.i);
                attach(*a, std::move(e));
                e = std::move(a);
            } else if (op == "[") {
                const size_t pos = next().pos;
                ExprPtr parts[3];
                int colons = 0;
                while (!(peek().kind == Token::kOp && peek().text == "]")) {
                    if (accept_op(":")) {
                        if (++colons > 2) src_.error(pos, "bad slice");
                        continue;
                    }
                    if (parts[colons]) src_.error(peek().pos, "expected ']'");
                    parts[colons] = parse_expr();
                }
                next();
                if (colons == 0) {
                    if (!parts[0]) src_.error(pos, "empty subscript");
                    auto ix = make(Expr::kIndex, pos);
                    attach(*ix, std::move(e));
                    attach(*ix, std::move(parts[0]));
                    e = std::move(ix);
                } else {
                    auto sl = make(Expr::kSlice, pos);
                    attach(*sl, std::move(e));
                    for (auto &p : parts) attach(*sl, std::move(p));
                    e = std::move(sl);
                }
            } else if (op == "(") {
                auto c = make(Expr::kCall, next().pos);
                attach(*c, std::move(e));
                parse_call_args(c.get());
                e = std::move(c);
            } else {
                break;
            }
        }
        return e;
    }

    // After "(": positional then keyword arguments, up to ")".
    void parse_call_args(Expr *call) {
        while (!accept_op(")")) {
            if (peek().kind == Token::kName && peek(1).kind == Token::kOp && peek(1).text == "=") {
                call->kwargs.push_back(next().text);
                next();
                attach(*call, parse_expr());
            } else {
                if (!call->kwargs.empty()) src_.error(peek().pos, "positional argument after keyword argument");
                attach(*call, parse_expr());
            }
            if (!accept_op(",")) {
                expect_op(")");
                break;
            }
        }
    }

    // Filter and test chains ("x|list|list|...") are loops too, bounded the same way.
    ExprPtr parse_filters(ExprPtr e) {
        while (true) {
            if (accept_op("|")) {
                const Token &name = next();
                if (name.kind != Token::kName) src_.error(name.pos, "expected a filter name");
                auto f = make(Expr::kFilter, name.pos);
                f->name = name.text;
                attach(*f, std::move(e));
                if (accept_op("(")) parse_call_args(f.get());
                e = std::move(f);
            } else if (peek().kind == Token::kName && peek().text == "is") {
                next();
                auto t = make(Expr::kTest, peek().pos);
                t->negate = accept_name("not");
                const Token &name = next();
                if (name.kind != Token::kName) src_.error(name.pos, "expected a test name");
                t->name = name.text;
                attach(*t, std::move(e));
                if (accept_op("(")) {
                    parse_call_args(t.get());
                } else if (peek().kind == Token::kString || peek().kind == Token::kInt ||
                           (peek().kind == Token::kName && peek().text != "and" && peek().text != "or" &&
                            peek().text != "else" && peek().text != "if")) {
                    attach(*t, parse_primary());  // "is divisibleby 3", "is sameas x"
                }
                e = std::move(t);
            } else {
                return e;
            }
        }
    }

    // ---- trees ----

    // Adds an operand (null for an absent slice bound or else-branch). The tree's height plus the statements
    // around it is what rendering will nest, so it is bounded by the same kMaxDepth.
    void attach(Expr &parent, ExprPtr child) {
        if (child) {
            parent.height = std::max(parent.height, child->height + 1);
            const int depth = parent.height + statements_;
            if (depth > kMaxDepth)
                src_.error(parent.pos, "expression nested too deeply (more than " + std::to_string(kMaxDepth) +
                                           " levels with the statements around it)");
            max_depth_ = std::max(max_depth_, depth);
        }
        parent.args.push_back(std::move(child));
    }

    // ---- token helpers ----

    void start_tokens(std::vector<Token> *tokens) {
        tokens_ = tokens;
        tok_ = 0;
    }
    const Token &peek(size_t ahead = 0) const {
        const size_t i = std::min(tok_ + ahead, tokens_->size() - 1);
        return (*tokens_)[i];
    }
    const Token &next() {
        const Token &t = peek();
        if (tok_ < tokens_->size() - 1) ++tok_;
        return t;
    }
    bool accept_op(const char *op) {
        if (peek().kind == Token::kOp && peek().text == op) {
            next();
            return true;
        }
        return false;
    }
    bool accept_name(const char *name) {
        if (peek().kind == Token::kName && peek().text == name) {
            next();
            return true;
        }
        return false;
    }
    void expect_op(const char *op) {
        if (!accept_op(op)) src_.error(peek().pos, std::string("expected '") + op + "'");
    }
    void expect_end() {
        if (peek().kind != Token::kEnd) src_.error(peek().pos, "unexpected '" + peek().text + "'");
    }
    size_t pos_of_piece() const { return piece_ < pieces_.size() ? pieces_[piece_].pos : src_.text.size(); }

    static ExprPtr make(Expr::Kind kind, size_t pos) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->pos = pos;
        return e;
    }
    ExprPtr binary(Expr::Kind kind, const std::string &op, ExprPtr a, ExprPtr b) {
        auto e = make(kind, a->pos);
        e->name = op;
        attach(*e, std::move(a));
        attach(*e, std::move(b));
        return e;
    }

    const Source &src_;
    std::vector<Piece> pieces_;
    size_t piece_ = 0;
    std::vector<Token> *tokens_ = nullptr;
    size_t tok_ = 0;
    int depth_ = 0;       // recursive parse functions active
    int statements_ = 0;  // statement bodies open around the current tag
    int max_depth_ = 0;
};

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// Rendering

namespace {

// A short description of a value for messages: never more than a line, whatever the value holds.
std::string describe(const Value &v) {
    switch (v.kind()) {
        case Value::Kind::kUndefined: return "an undefined value";
        case Value::Kind::kNone: return "None";
        case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
        case Value::Kind::kInt: return std::to_string(v.as_int());
        case Value::Kind::kFloat: return float_repr(v.as_float());
        case Value::Kind::kFunction: return "the function '" + v.as_string() + "'";
        case Value::Kind::kList: return "a list of " + std::to_string(v.items().size()) + " items";
        case Value::Kind::kDict:
            return std::string(v.is_namespace() ? "a namespace" : "a dict") + " of " + std::to_string(v.members().size()) + " items";
        case Value::Kind::kString: {
            const std::string &s = v.as_string();
            constexpr size_t kShown = 40;
            if (s.size() <= kShown) return "'" + s + "'";
            return "'" + s.substr(0, char_offset(s, count_chars(s.substr(0, kShown)) - 1)) + "...' (" +
                   std::to_string(s.size()) + " bytes)";
        }
    }
    return "?";
}

class Renderer {
public:
    Renderer(const Source &src, const Limits &limits, std::string *out) : src_(src), limits_(limits), out_(out) {}

    void run(const Body &body, const Value &context) {
        scopes_.emplace_back();
        if (context.is_dict())
            for (const auto &[k, v] : context.members().items()) scopes_.back()[k] = v;
        exec(body);
    }

    RenderStats stats() const {
        RenderStats s;
        s.depth = max_depth_;
        s.steps = work_done();
        s.largest_value = largest_value_;
        s.output_bytes = out_->size();
        return s;
    }

private:
    using Scope = std::unordered_map<std::string, Value>;

    // ---- limits ----

    [[noreturn]] void error(size_t pos, const std::string &what) const { src_.error(pos, what); }

    uint64_t work_done() const { return steps_ + bytes_worked_ / kBytesPerStep; }
    void check_work(size_t pos) const {
        if (work_done() > limits_.steps)
            error(pos, "the template runs too long (more than " + std::to_string(limits_.steps) + " steps)");
    }
    void step(size_t pos, uint64_t steps = 1) {
        steps_ += steps;
        check_work(pos);
    }
    void work(uint64_t bytes, size_t pos) {
        bytes_worked_ += bytes;
        check_work(pos);
    }
    // A value of `bytes` is about to be built (its bytes copied or written): within the limit, and paid for.
    void reserve(uint64_t bytes, size_t pos) {
        if (bytes > limits_.value_bytes) too_large(bytes, pos);
        largest_value_ = std::max(largest_value_, bytes);
        work(bytes, pos);
    }
    [[noreturn]] void too_large(uint64_t bytes, size_t pos) const {
        error(pos, "a value of " + (bytes == UINT64_MAX ? std::string("more than 2^64") : std::to_string(bytes)) +
                       " bytes is larger than the " + std::to_string(limits_.value_bytes >> 20) + " MiB a template value may hold");
    }
    static uint64_t times(uint64_t a, uint64_t b) {
        uint64_t r;
        return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
    }
    void check_depth(const Value &v, size_t pos) const {
        if (v.depth() > kMaxDepth)
            error(pos, "a value nested more than " + std::to_string(kMaxDepth) + " levels deep");
    }

    // One level of the render's nesting: a statement body, an expression, a step into a value.
    class Level {
    public:
        Level(Renderer &r, size_t pos) : r_(r) {
            if (r_.depth_ >= kMaxDepth) r_.error(pos, "nested too deeply (more than " + std::to_string(kMaxDepth) + " levels)");
            r_.max_depth_ = std::max(r_.max_depth_, ++r_.depth_);
        }
        ~Level() { --r_.depth_; }
        Level(const Level &) = delete;
        Level &operator=(const Level &) = delete;

    private:
        Renderer &r_;
    };

    // A string under construction: bounded by the value limit before each append, its bytes paid for.
    class Text {
    public:
        Text(Renderer &r, size_t pos) : r_(r), pos_(pos) {}
        void append(std::string_view s) {
            if (s.size() > r_.limits_.value_bytes - s_.size()) r_.too_large(s_.size() + s.size(), pos_);
            s_.append(s);
            r_.work(s.size(), pos_);
        }
        void append(size_t n, char c) {
            if (n > r_.limits_.value_bytes - s_.size()) r_.too_large(n == SIZE_MAX ? UINT64_MAX : s_.size() + n, pos_);
            s_.append(n, c);
            r_.work(n, pos_);
        }
        Value take() {
            r_.largest_value_ = std::max<uint64_t>(r_.largest_value_, s_.size());
            return Value::string(std::move(s_));
        }

    private:
        Renderer &r_;
        size_t pos_;
        std::string s_;
    };

    // A list under construction, bounded and paid for the same way (sizeof(Value) bytes per element).
    class Items {
    public:
        Items(Renderer &r, size_t pos, uint64_t expected = 0) : r_(r), pos_(pos) {
            r_.reserve(times(expected, sizeof(Value)), pos_);
            items_.reserve(static_cast<size_t>(expected));
            prepaid_ = expected;
        }
        void push(Value v) {
            if (items_.size() >= prepaid_) {
                if ((items_.size() + 1) * sizeof(Value) > r_.limits_.value_bytes) r_.too_large((items_.size() + 1) * sizeof(Value), pos_);
                r_.work(sizeof(Value), pos_);
            }
            items_.push_back(std::move(v));
        }
        size_t size() const { return items_.size(); }
        Value take() {
            r_.largest_value_ = std::max<uint64_t>(r_.largest_value_, items_.size() * sizeof(Value));
            Value v = Value::list(std::move(items_));
            r_.check_depth(v, pos_);
            return v;
        }

    private:
        Renderer &r_;
        size_t pos_;
        uint64_t prepaid_ = 0;
        List items_;
    };

    Value make_dict(Dict d, size_t pos) {
        reserve(times(d.size(), sizeof(Dict::Item)), pos);
        Value v = Value::dict(std::move(d));
        check_depth(v, pos);
        return v;
    }

    void emit(std::string_view s, size_t pos) {
        if (s.size() > limits_.output_bytes - out_->size())
            error(pos, "the rendered text exceeds " + std::to_string(limits_.output_bytes >> 20) + " MiB");
        work(s.size(), pos);
        out_->append(s);
    }
    void emit_value(const Value &v, size_t pos) {
        if (v.is_string()) return emit(v.as_string(), pos);
        Text t(*this, pos);
        str_into(v, t, pos);
        emit(t.take().as_string(), pos);
    }

    Value lookup(const std::string &name) const {
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
            auto f = it->find(name);
            if (f != it->end()) return f->second;
        }
        static const char *kFunctions[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};
        for (const char *f : kFunctions)
            if (name == f) return Value::function(name);
        return Value();
    }

    // ---- values as text: Python's str() and repr(), and JSON ----

    void str_into(const Value &v, Text &out, size_t pos) {
        switch (v.kind()) {
            case Value::Kind::kUndefined: return;
            case Value::Kind::kNone: return out.append("None");
            case Value::Kind::kBool: return out.append(v.as_bool() ? "True" : "False");
            case Value::Kind::kInt: return out.append(std::to_string(v.as_int()));
            case Value::Kind::kFloat: return out.append(float_repr(v.as_float()));
            case Value::Kind::kString: return out.append(v.as_string());
            case Value::Kind::kFunction: return out.append("<function " + v.as_string() + ">");
            case Value::Kind::kList:
            case Value::Kind::kDict: return repr_into(v, out, pos);
        }
    }

    void repr_into(const Value &v, Text &out, size_t pos) {
        if (v.is_string()) {
            const std::string &s = v.as_string();
            const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
            std::string quoted(1, quote);
            quoted.reserve(s.size() + 2);
            for (char c : s) {
                if (c == quote || c == '\\') quoted += '\\';
                if (c == '\n') quoted += "\\n";
                else if (c == '\t') quoted += "\\t";
                else if (c == '\r') quoted += "\\r";
                else quoted += c;
                if (quoted.size() > limits_.value_bytes) too_large(quoted.size(), pos);
            }
            quoted += quote;
            return out.append(quoted);
        }
        if (v.is_list()) {
            const Level level(*this, pos);
            out.append("[");
            for (size_t i = 0; i < v.items().size(); ++i) {
                if (i) out.append(", ");
                repr_into(v.items()[i], out, pos);
            }
            return out.append("]");
        }
        if (v.is_dict()) {
            const Level level(*this, pos);
            out.append("{");
            bool first = true;
            for (const auto &[k, x] : v.members().items()) {
                if (!first) out.append(", ");
                first = false;
                repr_into(Value::string(k), out, pos);
                out.append(": ");
                repr_into(x, out, pos);
            }
            return out.append("}");
        }
        str_into(v, out, pos);
    }

    // The tojson filter: JSON with Python json.dumps's default separators (", ", ": "), non-ASCII kept as is;
    // indent > 0 pretty-prints.
    void json_into(const Value &v, int64_t indent, int64_t level, Text &out, size_t pos) {
        const auto newline = [&](int64_t d) {
            out.append("\n");
            out.append(static_cast<size_t>(std::min<uint64_t>(times(static_cast<uint64_t>(indent), static_cast<uint64_t>(d)), SIZE_MAX)), ' ');
        };
        switch (v.kind()) {
            case Value::Kind::kUndefined:
            case Value::Kind::kNone: return out.append("null");
            case Value::Kind::kBool: return out.append(v.as_bool() ? "true" : "false");
            case Value::Kind::kInt: return out.append(std::to_string(v.as_int()));
            case Value::Kind::kFloat: return out.append(float_repr(v.as_float()));
            case Value::Kind::kString: return json_string_into(v.as_string(), out);
            case Value::Kind::kFunction: error(pos, "tojson: a function cannot be serialised");
            case Value::Kind::kList: {
                if (v.items().empty()) return out.append("[]");
                const Level nest(*this, pos);
                out.append("[");
                for (size_t i = 0; i < v.items().size(); ++i) {
                    if (i) out.append(indent ? "," : ", ");
                    if (indent) newline(level + 1);
                    json_into(v.items()[i], indent, level + 1, out, pos);
                }
                if (indent) newline(level);
                return out.append("]");
            }
            case Value::Kind::kDict: {
                if (v.members().empty()) return out.append("{}");
                const Level nest(*this, pos);
                out.append("{");
                bool first = true;
                for (const auto &[k, x] : v.members().items()) {
                    if (!first) out.append(indent ? "," : ", ");
                    first = false;
                    if (indent) newline(level + 1);
                    json_string_into(k, out);
                    out.append(": ");
                    json_into(x, indent, level + 1, out, pos);
                }
                if (indent) newline(level);
                return out.append("}");
            }
        }
    }

    // A JSON string literal, escaped a chunk at a time: escapes can make it six times its input, and the bound
    // applies to what is built, not to an intermediate copy.
    static void json_string_into(std::string_view s, Text &out) {
        constexpr size_t kChunk = 4096;
        out.append("\"");
        std::string escaped;
        for (size_t at = 0; at < s.size(); at += kChunk) {
            escaped.clear();
            json::append_escaped(&escaped, s.substr(at, kChunk));
            out.append(escaped);
        }
        out.append("\"");
    }

    // Python's ==, paid for element by element (two lists of a million items each cost a million comparisons).
    bool equal(const Value &a, const Value &b, size_t pos) {
        work(sizeof(Value), pos);
        if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt) return a.as_int() == b.as_int();
        if (a.is_number() && b.is_number()) return a.as_float() == b.as_float();
        if (a.kind() != b.kind()) return false;
        switch (a.kind()) {
            case Value::Kind::kUndefined:
            case Value::Kind::kNone: return true;
            case Value::Kind::kBool: return a.as_bool() == b.as_bool();
            case Value::Kind::kString:
            case Value::Kind::kFunction:
                work(std::min(a.as_string().size(), b.as_string().size()), pos);
                return a.as_string() == b.as_string();
            case Value::Kind::kList: {
                if (&a.items() == &b.items()) return true;  // the same list: Python's identity shortcut
                if (a.items().size() != b.items().size()) return false;
                const Level level(*this, pos);
                for (size_t i = 0; i < a.items().size(); ++i)
                    if (!equal(a.items()[i], b.items()[i], pos)) return false;
                return true;
            }
            case Value::Kind::kDict: {
                if (&a.members() == &b.members()) return true;
                if (a.members().size() != b.members().size()) return false;
                const Level level(*this, pos);
                for (const auto &[k, v] : a.members().items()) {
                    const Value *w = b.members().find(k);
                    if (!w || !equal(v, *w, pos)) return false;
                }
                return true;
            }
            default: return false;
        }
    }

    // `needle in haystack`.
    bool contains(const Value &haystack, const Value &needle, size_t pos) {
        if (haystack.is_string() && needle.is_string()) {
            work(haystack.as_string().size() + needle.as_string().size(), pos);
            return find_text(haystack.as_string(), needle.as_string(), 0) != std::string::npos;
        }
        if (haystack.is_list()) {
            for (const Value &x : haystack.items())
                if (equal(needle, x, pos)) return true;
            return false;
        }
        if (haystack.is_dict()) return needle.is_string() && haystack.members().find(needle.as_string()) != nullptr;
        if (haystack.is_undefined()) return false;
        error(pos, "'in' needs a string, list or dict on the right, not " + describe(haystack));
    }

    // The characters of a string as a list of one-character strings (for loops, |list, slicing with a step).
    Value characters(const std::string &s, size_t pos) {
        Items chars(*this, pos, count_chars(s));
        for (size_t i = 0; i < s.size();) {
            const size_t n = char_length(s, i);
            chars.push(Value::string(s.substr(i, n)));
            i += n;
        }
        work(s.size(), pos);
        return chars.take();
    }

    // ---- statements ----

    void exec(const Body &body) {
        for (const auto &n : body) exec(*n);
    }

    void exec(const Node &n) {
        step(n.pos);
        switch (n.kind) {
            case Node::kText: emit(n.text, n.pos); return;
            case Node::kOutput: emit_value(eval(*n.exprs[0]), n.pos); return;
            case Node::kBlock: {
                const Level level(*this, n.pos);
                exec(n.bodies[0]);
                return;
            }
            case Node::kIf: {
                const Level level(*this, n.pos);
                for (size_t i = 0; i < n.exprs.size(); ++i) {
                    if (eval(*n.exprs[i]).truthy()) {
                        exec(n.bodies[i]);
                        return;
                    }
                }
                if (n.bodies.size() > n.exprs.size()) exec(n.bodies.back());
                return;
            }
            case Node::kSet: assign(n, eval(*n.exprs[0])); return;
            case Node::kSetBlock: {
                const Level level(*this, n.pos);
                std::string captured;
                std::string *saved = out_;
                out_ = &captured;
                exec(n.bodies[0]);
                out_ = saved;
                largest_value_ = std::max<uint64_t>(largest_value_, captured.size());
                assign(n, Value::string(std::move(captured)));
                return;
            }
            case Node::kFor: exec_for(n); return;
        }
    }

    void assign(const Node &n, Value v) {
        if (n.names.size() == 1) {
            scopes_.back()[n.names[0]] = std::move(v);
            return;
        }
        Value target = lookup(n.names[0]);
        if (!target.is_namespace()) error(n.pos, "'" + n.names[0] + "' is not a namespace: only namespace attributes can be set");
        // A namespace is the only value that changes after it is made; holding no namespace, it can never hold
        // itself, so values stay acyclic and their nesting stays what Value::depth says.
        if (v.holds_namespace() || v.is_namespace())
            error(n.pos, "a namespace attribute cannot hold a namespace (" + n.names[0] + "." + n.names[1] + ")");
        target.namespace_members().set(n.names[1], std::move(v));
    }

    void exec_for(const Node &n) {
        const Level level(*this, n.pos);
        const Value iterable = eval(*n.exprs[0]);
        Value sequence;  // a list, kept alive while the loop runs
        if (iterable.is_list()) {
            sequence = iterable;
        } else if (iterable.is_dict()) {
            Items keys(*this, n.pos, iterable.members().size());
            for (const auto &kv : iterable.members().items()) keys.push(Value::string(kv.first));
            sequence = keys.take();
        } else if (iterable.is_string()) {
            sequence = characters(iterable.as_string(), n.pos);
        } else if (iterable.is_undefined() || iterable.is_none()) {
            sequence = Value::list();
        } else {
            error(n.pos, "cannot loop over " + describe(iterable));
        }
        // The loop filter is applied first: loop.index and loop.last count only the items it lets through.
        if (n.exprs.size() > 1) {
            Items kept(*this, n.pos);
            for (const Value &item : sequence.items()) {
                step(n.pos);
                scopes_.emplace_back();
                bind_targets(n, item);
                const bool keep = eval(*n.exprs[1]).truthy();
                scopes_.pop_back();
                if (keep) kept.push(item);
            }
            sequence = kept.take();
        }
        const List &items = sequence.items();
        if (items.empty()) {
            if (n.bodies.size() > 1) exec(n.bodies[1]);
            return;
        }
        const int64_t len = static_cast<int64_t>(items.size());
        for (int64_t i = 0; i < len; ++i) {
            step(n.pos, kIterationSteps);
            scopes_.emplace_back();
            bind_targets(n, items[static_cast<size_t>(i)]);
            Dict loop;
            loop.set("index0", Value::integer(i));
            loop.set("index", Value::integer(i + 1));
            loop.set("revindex0", Value::integer(len - 1 - i));
            loop.set("revindex", Value::integer(len - i));
            loop.set("first", Value::boolean(i == 0));
            loop.set("last", Value::boolean(i == len - 1));
            loop.set("length", Value::integer(len));
            loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
            loop.set("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value());
            scopes_.back()["loop"] = Value::dict(std::move(loop));
            exec(n.bodies[0]);
            scopes_.pop_back();
        }
    }

    void bind_targets(const Node &n, const Value &item) {
        if (n.names.size() == 1) {
            scopes_.back()[n.names[0]] = item;
            return;
        }
        if (!item.is_list() || item.items().size() != n.names.size())
            error(n.pos, "cannot unpack " + describe(item) + " into " + std::to_string(n.names.size()) + " loop variables");
        for (size_t k = 0; k < n.names.size(); ++k) scopes_.back()[n.names[k]] = item.items()[k];
    }

    // ---- expressions ----

    Value eval(const Expr &e) {
        const Level level(*this, e.pos);
        step(e.pos);
        switch (e.kind) {
            case Expr::kLiteral: return e.literal;
            case Expr::kName: return lookup(e.name);
            case Expr::kAttr: return attribute(eval(*e.args[0]), e.name);
            case Expr::kIndex: return index(eval(*e.args[0]), eval(*e.args[1]), e.pos);
            case Expr::kSlice: return slice(e);
            case Expr::kCall: return call(e);
            case Expr::kFilter: return filter(e);
            case Expr::kTest: {
                const bool r = test(e);
                return Value::boolean(e.negate ? !r : r);
            }
            case Expr::kNeg: {
                const Value v = eval(*e.args[0]);
                if (v.kind() == Value::Kind::kInt) {
                    if (v.as_int() == std::numeric_limits<int64_t>::min()) overflow(e.pos, "-");
                    return Value::integer(-v.as_int());
                }
                if (v.kind() == Value::Kind::kFloat) return Value::number(-v.as_float());
                error(e.pos, "cannot negate " + describe(v));
            }
            case Expr::kNot: return Value::boolean(!eval(*e.args[0]).truthy());
            case Expr::kAnd: {
                Value a = eval(*e.args[0]);
                return a.truthy() ? eval(*e.args[1]) : a;
            }
            case Expr::kOr: {
                Value a = eval(*e.args[0]);
                return a.truthy() ? a : eval(*e.args[1]);
            }
            case Expr::kCond:
                if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
                return e.args[2] ? eval(*e.args[2]) : Value();
            case Expr::kList: {
                Items items(*this, e.pos, e.args.size());
                for (const auto &a : e.args) items.push(eval(*a));
                return items.take();
            }
            case Expr::kDict: {
                Dict d;
                for (size_t i = 0; i < e.args.size(); i += 2) {
                    const Value k = eval(*e.args[i]);
                    if (!k.is_string()) error(e.args[i]->pos, "dictionary keys must be strings");
                    d.set(k.as_string(), eval(*e.args[i + 1]));
                }
                return make_dict(std::move(d), e.pos);
            }
            case Expr::kBinary: return binary(e);
        }
        error(e.pos, "unknown expression");
    }

    static Value attribute(const Value &obj, const std::string &name) {
        if (obj.is_dict()) {
            const Value *v = obj.members().find(name);
            return v ? *v : Value();
        }
        return Value();
    }

    Value index(const Value &obj, const Value &key, size_t pos) {
        if (obj.is_dict()) {
            if (!key.is_string()) return Value();
            const Value *v = obj.members().find(key.as_string());
            return v ? *v : Value();
        }
        if (obj.is_list() || obj.is_string()) {
            if (key.kind() != Value::Kind::kInt) error(pos, "indices must be integers, not " + describe(key));
            int64_t i = key.as_int();
            if (obj.is_list()) {
                const int64_t n = static_cast<int64_t>(obj.items().size());
                if (i < 0) i += n;
                if (i < 0 || i >= n) return Value();
                return obj.items()[static_cast<size_t>(i)];
            }
            const std::string &s = obj.as_string();
            work(s.size(), pos);
            if (i < 0) i += static_cast<int64_t>(count_chars(s));
            if (i < 0) return Value();
            const size_t at = char_offset(s, static_cast<size_t>(i));
            if (at >= s.size()) return Value();
            return Value::string(s.substr(at, char_length(s, at)));
        }
        if (obj.is_undefined()) return Value();
        error(pos, "cannot index " + describe(obj));
    }

    // Python's slice.indices() and the number of items a slice takes, without overflow for any bounds and step.
    struct SliceRange {
        int64_t start = 0, step = 1;
        uint64_t count = 0;
    };
    static SliceRange slice_range(int64_t n, const int64_t bound[3], const bool given[3]) {
        SliceRange r;
        r.step = bound[2];
        const auto adjust = [&](int64_t v, bool is_given, int64_t fallback) {
            if (!is_given) return fallback;
            if (v < 0) {
                v += n;
                if (v < 0) v = r.step < 0 ? -1 : 0;
            } else if (v >= n) {
                v = r.step < 0 ? n - 1 : n;
            }
            return v;
        };
        r.start = adjust(bound[0], given[0], r.step > 0 ? 0 : n - 1);
        const int64_t stop = adjust(bound[1], given[1], r.step > 0 ? n : -1);
        // start and stop lie in [-1, n], so their differences cannot overflow; |step| may be 2^63.
        const uint64_t magnitude = r.step > 0 ? static_cast<uint64_t>(r.step) : 0 - static_cast<uint64_t>(r.step);
        if (r.step > 0 && r.start < stop) r.count = static_cast<uint64_t>(stop - r.start - 1) / magnitude + 1;
        if (r.step < 0 && stop < r.start) r.count = static_cast<uint64_t>(r.start - stop - 1) / magnitude + 1;
        return r;
    }

    Value slice(const Expr &e) {
        const Value obj = eval(*e.args[0]);
        int64_t bound[3] = {0, 0, 1};
        bool given[3] = {false, false, false};
        for (int k = 0; k < 3; ++k) {
            if (!e.args[static_cast<size_t>(k) + 1]) continue;
            const Value v = eval(*e.args[static_cast<size_t>(k) + 1]);
            if (v.is_none()) continue;
            if (v.kind() != Value::Kind::kInt) error(e.pos, "slice bounds must be integers");
            bound[k] = v.as_int();
            given[k] = true;
        }
        if (bound[2] == 0) error(e.pos, "slice step cannot be zero");
        if (obj.is_list()) {
            const SliceRange r = slice_range(static_cast<int64_t>(obj.items().size()), bound, given);
            Items out(*this, e.pos, r.count);
            // start + k·step stays inside [0, n) for k < count.
            for (uint64_t k = 0; k < r.count; ++k) out.push(obj.items()[static_cast<size_t>(r.start + static_cast<int64_t>(k) * r.step)]);
            return out.take();
        }
        if (!obj.is_string()) error(e.pos, "cannot slice " + describe(obj));
        const std::string &s = obj.as_string();
        work(s.size(), e.pos);
        const SliceRange r = slice_range(static_cast<int64_t>(count_chars(s)), bound, given);
        if (r.step == 1) {  // the common case: one substring, no per-character table
            const size_t from = char_offset(s, static_cast<size_t>(r.start));
            const size_t to = char_offset(std::string_view(s).substr(from), static_cast<size_t>(r.count)) + from;
            reserve(to - from, e.pos);
            return Value::string(s.substr(from, to - from));
        }
        std::vector<size_t> starts;  // starts[c]: byte offset of character c
        reserve(times(count_chars(s) + 1, sizeof(size_t)), e.pos);
        starts.reserve(count_chars(s) + 1);
        for (size_t i = 0; i < s.size(); i += char_length(s, i)) starts.push_back(i);
        starts.push_back(s.size());
        Text out(*this, e.pos);
        for (uint64_t k = 0; k < r.count; ++k) {
            const size_t c = static_cast<size_t>(r.start + static_cast<int64_t>(k) * r.step);
            out.append(std::string_view(s).substr(starts[c], starts[c + 1] - starts[c]));
        }
        return out.take();
    }

    Value binary(const Expr &e) {
        const std::string &op = e.name;
        const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        if (op == "==") return Value::boolean(equal(a, b, e.pos));
        if (op == "!=") return Value::boolean(!equal(a, b, e.pos));
        if (op == "in" || op == "not in") {
            const bool found = contains(b, a, e.pos);
            return Value::boolean(op == "in" ? found : !found);
        }
        if (op == "~") {
            Text t(*this, e.pos);
            str_into(a, t, e.pos);
            str_into(b, t, e.pos);
            return t.take();
        }
        if (op == "<" || op == "<=" || op == ">" || op == ">=") {
            int cmp;
            if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt) {
                cmp = a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
            } else if (a.is_number() && b.is_number()) {
                cmp = a.as_float() < b.as_float() ? -1 : a.as_float() > b.as_float() ? 1 : 0;
            } else if (a.is_string() && b.is_string()) {
                work(std::min(a.as_string().size(), b.as_string().size()), e.pos);
                cmp = a.as_string().compare(b.as_string());
            } else {
                error(e.pos, "cannot compare " + describe(a) + " and " + describe(b));
            }
            const bool r = op == "<" ? cmp < 0 : op == "<=" ? cmp <= 0 : op == ">" ? cmp > 0 : cmp >= 0;
            return Value::boolean(r);
        }
        if (op == "+") {
            if (a.is_string() && b.is_string()) {
                reserve(a.as_string().size() + b.as_string().size(), e.pos);
                return Value::string(a.as_string() + b.as_string());
            }
            if (a.is_list() && b.is_list()) {
                Items l(*this, e.pos, a.items().size() + b.items().size());
                for (const Value &x : a.items()) l.push(x);
                for (const Value &x : b.items()) l.push(x);
                return l.take();
            }
        }
        if (op == "*") {
            const Value *seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
            const Value *count = seq == &a ? &b : &a;
            if (seq && count->kind() == Value::Kind::kInt) return repeat(*seq, count->as_int(), e.pos);
        }
        if (a.is_number() && b.is_number()) return arithmetic(e, op, a, b);
        error(e.pos, "unsupported operand types for " + op + ": " + describe(a) + " and " + describe(b));
    }

    // seq * times: the size is known before anything is built, so a huge repetition fails at once, and an
    // empty one ('' * 10**18) costs nothing.
    Value repeat(const Value &seq, int64_t n, size_t pos) {
        const uint64_t copies = n > 0 ? static_cast<uint64_t>(n) : 0;
        if (seq.is_string()) {
            const std::string &unit = seq.as_string();
            if (unit.empty() || copies == 0) return Value::string("");
            reserve(times(unit.size(), copies), pos);
            std::string s;
            s.reserve(static_cast<size_t>(unit.size() * copies));
            for (uint64_t i = 0; i < copies; ++i) s += unit;
            return Value::string(std::move(s));
        }
        const List &unit = seq.items();
        if (unit.empty() || copies == 0) return Value::list();
        Items l(*this, pos, times(unit.size(), copies));
        for (uint64_t i = 0; i < copies; ++i)
            for (const Value &x : unit) l.push(x);
        return l.take();
    }

    [[noreturn]] void overflow(size_t pos, const std::string &op) const {
        error(pos, "integer overflow in " + op + " (kt's template integers are 64-bit)");
    }

    // Python's integer power by squaring, refusing what does not fit 64 bits.
    int64_t int_pow(int64_t base, int64_t exponent, size_t pos) const {
        int64_t result = 1;
        while (true) {
            if ((exponent & 1) && __builtin_mul_overflow(result, base, &result)) overflow(pos, "**");
            exponent >>= 1;
            if (exponent == 0) return result;
            if (__builtin_mul_overflow(base, base, &base)) overflow(pos, "**");
        }
    }

    Value arithmetic(const Expr &e, const std::string &op, const Value &a, const Value &b) {
        const bool ints = a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt;
        const double x = a.as_float(), y = b.as_float();
        if (ints) {
            const int64_t i = a.as_int(), j = b.as_int();
            int64_t r = 0;
            const bool overflows = op == "+" ? __builtin_add_overflow(i, j, &r)
                                   : op == "-" ? __builtin_sub_overflow(i, j, &r)
                                   : op == "*" ? __builtin_mul_overflow(i, j, &r)
                                               : false;
            if (overflows) overflow(e.pos, op);
            if (op == "+" || op == "-" || op == "*") return Value::integer(r);
            if (op == "**" && j >= 0) return Value::integer(int_pow(i, j, e.pos));
            if (op == "**" && i == 0) error(e.pos, "0 cannot be raised to a negative power");
            if ((op == "//" || op == "%") && j == 0) error(e.pos, "integer division or modulo by zero");
            if (op == "//") {
                if (i == std::numeric_limits<int64_t>::min() && j == -1) overflow(e.pos, op);
                const int64_t q = i / j;
                return Value::integer(i % j != 0 && ((i < 0) != (j < 0)) ? q - 1 : q);
            }
            if (op == "%") {
                if (j == -1) return Value::integer(0);  // also for INT64_MIN, whose C++ % -1 traps
                const int64_t m = i % j;
                return Value::integer(m != 0 && ((m < 0) != (j < 0)) ? m + j : m);
            }
        }
        if (op == "+") return Value::number(x + y);
        if (op == "-") return Value::number(x - y);
        if (op == "*") return Value::number(x * y);
        if (op == "**") {
            if (x == 0 && y < 0) error(e.pos, "0.0 cannot be raised to a negative power");
            if (x < 0 && std::isfinite(y) && y != std::floor(y)) error(e.pos, "a negative number to a fractional power is complex");
            const double r = std::pow(x, y);
            if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) error(e.pos, "numerical result out of range in **");
            return Value::number(r);
        }
        if (y == 0) error(e.pos, "division by zero");
        if (op == "/") return Value::number(x / y);
        if (op == "//") return Value::number(std::floor(x / y));
        if (op == "%") {  // Python's float modulo: the sign of the divisor
            double m = std::fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return Value::number(m == 0 ? std::copysign(0.0, y) : m);
        }
        error(e.pos, "unknown operator " + op);
    }

    // Jinja's int(): a float is truncated (NaN gives the default, infinity is an error, as Python's int()
    // raises OverflowError there); beyond 64 bits is kt's overflow error.
    Value float_to_int(double f, const Value &fallback, size_t pos) const {
        if (std::isnan(f)) return fallback;
        if (std::isinf(f)) error(pos, "cannot convert float infinity to integer");
        const double t = std::trunc(f);
        if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0)) overflow(pos, "int()");
        return Value::integer(static_cast<int64_t>(t));
    }

    // Arguments of a call, filter or test: positional (after `skip` leading ones) and keyword.
    struct Args {
        List positional;
        Dict keywords;
        const Value *get(size_t i, const char *keyword) const {
            if (i < positional.size()) return &positional[i];
            return keyword ? keywords.find(keyword) : nullptr;
        }
    };
    Args evaluate_args(const Expr &e, size_t skip) {
        Args a;
        const size_t n_kw = e.kwargs.size();
        const size_t n_pos = e.args.size() - n_kw;
        for (size_t i = skip; i < n_pos; ++i) a.positional.push_back(eval(*e.args[i]));
        for (size_t k = 0; k < n_kw; ++k) a.keywords.set(e.kwargs[k], eval(*e.args[n_pos + k]));
        return a;
    }

    Value call(const Expr &e) {
        const Expr &callee = *e.args[0];
        if (callee.kind == Expr::kAttr) {
            const Value obj = eval(*callee.args[0]);
            const Value *member = obj.is_dict() ? obj.members().find(callee.name) : nullptr;
            if (!member) return method(e, obj, callee.name, evaluate_args(e, 1));
        }
        const Value f = eval(callee);
        if (f.kind() != Value::Kind::kFunction)
            error(e.pos, "cannot call " + (callee.kind == Expr::kName ? "'" + callee.name + "' (undefined or not a function)" : describe(f)));
        const Args args = evaluate_args(e, 1);
        const std::string &name = f.as_string();
        if (name == "raise_exception") {
            const Value *m = args.get(0, "message");
            Text message(*this, e.pos);
            if (m) str_into(*m, message, e.pos);
            else message.append("raise_exception");
            fail(KT_STATUS_INVALID_ARGUMENT, src_.where(e.pos) + ": " + message.take().as_string());
        }
        if (name == "namespace" || name == "dict") {
            Dict d = args.keywords;
            if (name == "dict") return make_dict(std::move(d), e.pos);
            for (const auto &kv : d.items())
                if (kv.second.holds_namespace() || kv.second.is_namespace())
                    error(e.pos, "a namespace attribute cannot hold a namespace (" + kv.first + ")");
            reserve(times(d.size(), sizeof(Dict::Item)), e.pos);
            return Value::make_namespace(std::move(d));
        }
        if (name == "range") {
            int64_t v[3] = {0, 0, 1};
            const size_t n = args.positional.size();
            if (n < 1 || n > 3) error(e.pos, "range takes 1 to 3 arguments");
            for (size_t i = 0; i < n; ++i) {
                if (args.positional[i].kind() != Value::Kind::kInt) error(e.pos, "range arguments must be integers");
            }
            if (n == 1) v[1] = args.positional[0].as_int();
            else for (size_t i = 0; i < n; ++i) v[i] = args.positional[i].as_int();
            if (v[2] == 0) error(e.pos, "range step cannot be zero");
            // The length first, in 128 bits: stepping an int64 towards a bound near INT64_MAX would overflow.
            const __int128 span = v[2] > 0 ? static_cast<__int128>(v[1]) - v[0] : static_cast<__int128>(v[0]) - v[1];
            const __int128 step = v[2] > 0 ? static_cast<__int128>(v[2]) : -static_cast<__int128>(v[2]);
            const __int128 count = span > 0 ? (span - 1) / step + 1 : 0;
            Items l(*this, e.pos, count > static_cast<__int128>(UINT64_MAX / sizeof(Value)) ? UINT64_MAX / sizeof(Value) + 1 : static_cast<uint64_t>(count));
            for (__int128 k = 0; k < count; ++k) l.push(Value::integer(static_cast<int64_t>(v[0] + k * v[2])));
            return l.take();
        }
        if (name == "strftime_now") {
            const Value *fmt = args.get(0, nullptr);
            if (!fmt || !fmt->is_string()) error(e.pos, "strftime_now needs a format string");
            const std::time_t now = std::time(nullptr);
            std::tm tm{};
            localtime_r(&now, &tm);
            char buf[256];
            // The format comes from the template by design (Llama 3.x templates print today's date).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
            const size_t n = std::strftime(buf, sizeof buf, fmt->as_string().c_str(), &tm);
#pragma GCC diagnostic pop
            return Value::string(std::string(buf, n));
        }
        error(e.pos, "unknown function '" + name + "'");
    }

    Value method(const Expr &e, const Value &obj, const std::string &name, const Args &args) {
        const Value *a0 = args.get(0, nullptr);
        const Value *a1 = args.get(1, nullptr);
        if (obj.is_string()) {
            const std::string &s = obj.as_string();
            const auto stripped = [&](bool left, bool right) {
                work(s.size(), e.pos);
                const std::string_view v = strip(s, a0 && a0->is_string() ? &a0->as_string() : nullptr, left, right);
                return Value::string(std::string(v));
            };
            if (name == "strip") return stripped(true, true);
            if (name == "lstrip") return stripped(true, false);
            if (name == "rstrip") return stripped(false, true);
            if (name == "upper" || name == "lower") {
                reserve(s.size(), e.pos);
                return Value::string(ascii_case(s, name == "upper"));
            }
            if (name == "title" || name == "capitalize") return filter_by_name(e, name, obj, Args{});
            if (name == "startswith" || name == "endswith") {
                if (!a0) error(e.pos, name + " needs an argument");
                const List single{*a0};
                const List &options = a0->is_list() ? a0->items() : single;
                for (const Value &o : options) {
                    if (!o.is_string()) error(e.pos, name + " needs strings");
                    const std::string &p = o.as_string();
                    work(p.size(), e.pos);
                    const bool hit = p.size() <= s.size() &&
                                     (name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
                    if (hit) return Value::boolean(true);
                }
                return Value::boolean(false);
            }
            if (name == "split") return split(e, s, a0, a1);
            if (name == "replace") return filter_by_name(e, "replace", obj, args);
            if (name == "find") {
                if (!a0 || !a0->is_string()) error(e.pos, "find needs a string");
                work(s.size() + a0->as_string().size(), e.pos);
                const size_t at = find_text(s, a0->as_string(), 0);
                return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(at));
            }
            if (name == "join") {
                if (!a0) error(e.pos, "join needs a list");
                Args j;
                j.positional.push_back(obj);
                return filter_by_name(e, "join", *a0, j);
            }
        } else if (obj.is_dict()) {
            if (name == "items" || name == "keys" || name == "values") {
                Items l(*this, e.pos, obj.members().size());
                for (const auto &[k, v] : obj.members().items()) {
                    if (name == "items") l.push(pair(k, v, e.pos));
                    else l.push(name == "keys" ? Value::string(k) : v);
                }
                return l.take();
            }
            if (name == "get") {
                if (!a0 || !a0->is_string()) error(e.pos, "get needs a string key");
                const Value *v = obj.members().find(a0->as_string());
                return v ? *v : a1 ? *a1 : Value::none();
            }
        }
        error(e.pos, "unknown method '" + name + "' of " + describe(obj));
    }

    // A dict's (key, value) item as a two-element list.
    Value pair(const std::string &key, const Value &v, size_t pos) {
        Items p(*this, pos, 2);
        p.push(Value::string(key));
        p.push(v);
        return p.take();
    }

    // str.split(sep=None, maxsplit=-1).
    Value split(const Expr &e, const std::string &s, const Value *sep_arg, const Value *max_arg) {
        Items parts(*this, e.pos);
        int64_t max_split = max_arg && max_arg->kind() == Value::Kind::kInt ? max_arg->as_int() : -1;
        work(s.size(), e.pos);
        if (!sep_arg || sep_arg->is_none()) {  // split on runs of whitespace, dropping empty parts
            size_t i = 0;
            while (i < s.size()) {
                while (i < s.size() && is_space(s[i])) ++i;
                if (i >= s.size()) break;
                size_t j = i;
                if (max_split == 0) j = s.size();
                else while (j < s.size() && !is_space(s[j])) ++j;
                parts.push(Value::string(s.substr(i, j - i)));
                if (max_split > 0) --max_split;
                i = j;
            }
            return parts.take();
        }
        if (!sep_arg->is_string() || sep_arg->as_string().empty()) error(e.pos, "split needs a non-empty separator");
        const std::string &sep = sep_arg->as_string();
        size_t from = 0;
        for (size_t hit; max_split != 0 && (hit = find_text(s, sep, from)) != std::string::npos; from = hit + sep.size()) {
            parts.push(Value::string(s.substr(from, hit - from)));
            if (max_split > 0) --max_split;
        }
        parts.push(Value::string(s.substr(from)));
        return parts.take();
    }

    Value filter(const Expr &e) {
        const Value obj = eval(*e.args[0]);
        if (e.name == "selectattr" || e.name == "rejectattr" || e.name == "map") return filter_sequence(e, obj);
        return filter_by_name(e, e.name, obj, evaluate_args(e, 1));
    }

    Value filter_by_name(const Expr &e, const std::string &name, const Value &obj, const Args &args) {
        const Value *a0 = args.get(0, nullptr);
        if (name == "trim") {
            Text t(*this, e.pos);
            str_into(obj, t, e.pos);
            const Value text = t.take();
            const Value *chars = args.get(0, "chars");
            return Value::string(std::string(strip(text.as_string(), chars && chars->is_string() ? &chars->as_string() : nullptr, true, true)));
        }
        if (name == "safe" || name == "e" || name == "escape") {
            if (name != "safe") error(e.pos, "the filter '" + name + "' is not supported");
            return obj;
        }
        if (name == "tojson") {
            const Value *indent = args.get(0, "indent");
            int64_t spaces = 0;
            if (indent && !indent->is_none()) {
                if (indent->kind() != Value::Kind::kInt || indent->as_int() < 0) error(e.pos, "tojson: indent must be a non-negative integer");
                spaces = indent->as_int();
            }
            Text t(*this, e.pos);
            json_into(obj, spaces, 0, t, e.pos);
            return t.take();
        }
        if (name == "length" || name == "count") {
            if (obj.is_string()) {
                work(obj.as_string().size(), e.pos);
                return Value::integer(static_cast<int64_t>(count_chars(obj.as_string())));
            }
            if (obj.is_list()) return Value::integer(static_cast<int64_t>(obj.items().size()));
            if (obj.is_dict()) return Value::integer(static_cast<int64_t>(obj.members().size()));
            if (obj.is_undefined()) return Value::integer(0);
            error(e.pos, "length of " + describe(obj));
        }
        if (name == "default" || name == "d") {
            const Value *boolean = args.get(1, "boolean");
            const bool use_default = obj.is_undefined() || (boolean && boolean->truthy() && !obj.truthy());
            if (!use_default) return obj;
            const Value *d = args.get(0, "default_value");
            return d ? *d : Value::string("");
        }
        if (name == "lower" || name == "upper" || name == "capitalize" || name == "title") {
            Text t(*this, e.pos);
            str_into(obj, t, e.pos);
            std::string s = ascii_case(t.take().as_string(), name == "upper");
            if (name == "capitalize" || name == "title") {
                bool start = true;
                for (char &c : s) {
                    if (start && std::isalpha(static_cast<unsigned char>(c))) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
                    start = name == "title" ? !std::isalpha(static_cast<unsigned char>(c)) : false;
                }
            }
            return Value::string(std::move(s));
        }
        if (name == "string") {
            if (obj.is_string()) return obj;
            Text t(*this, e.pos);
            str_into(obj, t, e.pos);
            return t.take();
        }
        if (name == "int") return to_int(e, obj, args);
        if (name == "float") {
            const Value *d = args.get(0, "default");
            const Value fallback = d ? *d : Value::number(0);
            if (obj.is_number()) return Value::number(obj.as_float());
            if (obj.kind() == Value::Kind::kBool) return Value::number(obj.as_bool() ? 1 : 0);
            double f = 0;
            if (obj.is_string() && parse_float_text(obj.as_string(), &f)) return Value::number(f);
            return fallback;  // Jinja: a ValueError or TypeError gives the default
        }
        if (name == "join") {
            const Value *sep = args.get(0, "d");
            if (!obj.is_list()) error(e.pos, "join needs a list");
            Text out(*this, e.pos);
            for (size_t i = 0; i < obj.items().size(); ++i) {
                if (i && sep) str_into(*sep, out, e.pos);
                str_into(obj.items()[i], out, e.pos);
            }
            return out.take();
        }
        if (name == "first" || name == "last") {
            if (obj.is_list()) {
                if (obj.items().empty()) return Value();
                return name == "first" ? obj.items().front() : obj.items().back();
            }
            if (obj.is_string()) {
                const std::string &s = obj.as_string();
                if (s.empty()) return Value();
                if (name == "first") return Value::string(s.substr(0, char_length(s, 0)));
                work(s.size(), e.pos);
                size_t last = 0;
                for (size_t i = 0; i < s.size(); i += char_length(s, i)) last = i;
                return Value::string(s.substr(last));
            }
            error(e.pos, name + " of " + describe(obj));
        }
        if (name == "list") {
            if (obj.is_list()) return obj;
            if (obj.is_string()) return characters(obj.as_string(), e.pos);
            Items l(*this, e.pos);
            if (obj.is_dict()) for (const auto &kv : obj.members().items()) l.push(Value::string(kv.first));
            else if (!obj.is_undefined()) error(e.pos, "list of " + describe(obj));
            return l.take();
        }
        if (name == "reverse") {
            if (obj.is_list()) {
                Items l(*this, e.pos, obj.items().size());
                for (auto it = obj.items().rbegin(); it != obj.items().rend(); ++it) l.push(*it);
                return l.take();
            }
            if (obj.is_string()) {
                const std::string &s = obj.as_string();
                reserve(s.size(), e.pos);
                std::string r(s.size(), '\0');
                for (size_t i = 0; i < s.size();) {  // each character's bytes keep their order
                    const size_t n = char_length(s, i);
                    std::memcpy(&r[s.size() - i - n], &s[i], n);
                    i += n;
                }
                return Value::string(std::move(r));
            }
            error(e.pos, "reverse of " + describe(obj));
        }
        if (name == "replace") {
            const Value *a1 = args.get(1, nullptr);
            if (!obj.is_string() || !a0 || !a1 || !a0->is_string() || !a1->is_string()) error(e.pos, "replace needs strings");
            const std::string &from = a0->as_string(), &to = a1->as_string();
            const std::string &s = obj.as_string();
            if (from.empty()) return obj;
            work(s.size(), e.pos);
            Text out(*this, e.pos);
            size_t at = 0;
            for (size_t hit; (hit = find_text(s, from, at)) != std::string::npos; at = hit + from.size()) {
                out.append(std::string_view(s).substr(at, hit - at));
                out.append(to);
            }
            out.append(std::string_view(s).substr(at));
            return out.take();
        }
        if (name == "items") {
            if (!obj.is_dict()) error(e.pos, "items of " + describe(obj));
            Items l(*this, e.pos, obj.members().size());
            for (const auto &[k, v] : obj.members().items()) l.push(pair(k, v, e.pos));
            return l.take();
        }
        if (name == "abs") {
            if (obj.kind() == Value::Kind::kInt) {
                if (obj.as_int() == std::numeric_limits<int64_t>::min()) overflow(e.pos, "abs");
                return Value::integer(obj.as_int() < 0 ? -obj.as_int() : obj.as_int());
            }
            if (obj.kind() == Value::Kind::kFloat) return Value::number(std::fabs(obj.as_float()));
            error(e.pos, "abs of " + describe(obj));
        }
        error(e.pos, "the filter '" + name + "' is not supported");
    }

    // Jinja's int filter: int(value), else int(float(value)), else the default (0); base 10 only.
    Value to_int(const Expr &e, const Value &obj, const Args &args) {
        const Value *d = args.get(0, "default");
        const Value fallback = d ? *d : Value::integer(0);
        const Value *base = args.get(1, "base");
        if (base && !(base->kind() == Value::Kind::kInt && base->as_int() == 10)) error(e.pos, "int: only base 10 is supported");
        switch (obj.kind()) {
            case Value::Kind::kInt: return obj;
            case Value::Kind::kBool: return Value::integer(obj.as_bool() ? 1 : 0);
            case Value::Kind::kFloat: return float_to_int(obj.as_float(), fallback, e.pos);
            case Value::Kind::kString: {
                work(obj.as_string().size(), e.pos);
                int64_t i = 0;
                bool too_big = false;
                if (parse_int_text(obj.as_string(), &i, &too_big)) {
                    if (too_big) overflow(e.pos, "int()");
                    return Value::integer(i);
                }
                double f = 0;
                if (parse_float_text(obj.as_string(), &f)) return float_to_int(f, fallback, e.pos);
                return fallback;
            }
            default: return fallback;  // None, lists, dicts: TypeError, so the default
        }
    }

    // selectattr(attr[, test[, arg]]), rejectattr(...), map(attribute=name) / map(filter_name)
    Value filter_sequence(const Expr &e, const Value &obj) {
        const Args args = evaluate_args(e, 1);
        if (!obj.is_list()) {
            if (obj.is_undefined()) return Value::list();
            error(e.pos, e.name + " needs a list");
        }
        Items out(*this, e.pos);
        if (e.name == "map") {
            const Value *attr = args.keywords.find("attribute");
            for (const Value &item : obj.items()) {
                step(e.pos);
                if (attr && attr->is_string()) {
                    out.push(attribute(item, attr->as_string()));
                } else if (!args.positional.empty() && args.positional[0].is_string()) {
                    Args rest;
                    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
                    out.push(filter_by_name(e, args.positional[0].as_string(), item, rest));
                } else {
                    error(e.pos, "map needs attribute= or a filter name");
                }
            }
            return out.take();
        }
        if (args.positional.empty() || !args.positional[0].is_string()) error(e.pos, e.name + " needs an attribute name");
        const std::string &attr = args.positional[0].as_string();
        const std::string test_name = args.positional.size() > 1 && args.positional[1].is_string() ? args.positional[1].as_string() : "";
        List test_args(args.positional.size() > 2 ? args.positional.begin() + 2 : args.positional.end(), args.positional.end());
        for (const Value &item : obj.items()) {
            step(e.pos);
            const Value v = attribute(item, attr);
            const bool pass = test_name.empty() ? v.truthy() : run_test(e, test_name, v, test_args);
            if (pass == (e.name == "selectattr")) out.push(item);
        }
        return out.take();
    }

    bool test(const Expr &e) {
        const Value obj = eval(*e.args[0]);
        const Args args = evaluate_args(e, 1);
        return run_test(e, e.name, obj, args.positional);
    }

    bool run_test(const Expr &e, const std::string &name, const Value &v, const List &args) {
        using K = Value::Kind;
        const Value *a0 = args.empty() ? nullptr : &args[0];
        if (name == "defined") return !v.is_undefined();
        if (name == "undefined") return v.is_undefined();
        if (name == "none") return v.is_none();
        if (name == "boolean") return v.kind() == K::kBool;
        if (name == "true") return v.kind() == K::kBool && v.as_bool();
        if (name == "false") return v.kind() == K::kBool && !v.as_bool();
        if (name == "string") return v.is_string();
        if (name == "number") return v.is_number();
        if (name == "integer") return v.kind() == K::kInt;
        if (name == "float") return v.kind() == K::kFloat;
        if (name == "mapping") return v.is_dict();
        if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
        if (name == "sequence") return v.is_list() || v.is_string() || v.is_dict();
        if (name == "callable") return v.kind() == K::kFunction;
        if (name == "lower" || name == "upper") {
            if (!v.is_string()) return false;
            work(v.as_string().size(), e.pos);
            return ascii_case(v.as_string(), name == "upper") == v.as_string();
        }
        if (name == "even" || name == "odd") {
            if (v.kind() != K::kInt) error(e.pos, "'" + name + "' needs an integer");
            return (v.as_int() % 2 == 0) == (name == "even");
        }
        if (name == "divisibleby") {
            if (v.kind() != K::kInt || !a0 || a0->kind() != K::kInt || a0->as_int() == 0) error(e.pos, "divisibleby needs integers");
            return a0->as_int() == -1 || v.as_int() % a0->as_int() == 0;  // INT64_MIN % -1 traps in C++
        }
        if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return a0 && equal(v, *a0, e.pos);
        if (name == "ne" || name == "!=") return !a0 || !equal(v, *a0, e.pos);
        if (name == "in") {
            if (!a0) error(e.pos, "'in' needs an argument");
            if (a0->is_list() || (a0->is_string() && v.is_string()) || a0->is_dict()) return contains(*a0, v, e.pos);
            return false;
        }
        error(e.pos, "the test '" + name + "' is not supported");
    }

    const Source &src_;
    const Limits limits_;
    std::string *out_;
    std::vector<Scope> scopes_;
    uint64_t steps_ = 0;         // statements, iterations and expressions
    uint64_t bytes_worked_ = 0;  // bytes read, copied or built by bulk operations
    uint64_t largest_value_ = 0;
    int depth_ = 0;
    int max_depth_ = 0;
};

}  // namespace

Template::~Template() = default;

namespace {

// The exceptions a parse or render may meet besides its own errors, as statuses: nothing escapes into the caller.
template <typename Body>
Status guarded(Body &&body) {
    try {
        body();
    } catch (const JinjaError &e) {
        return e.status;
    } catch (const std::bad_alloc &) {
        return Status(KT_STATUS_OUT_OF_MEMORY, "chat template: out of memory");
    } catch (const std::exception &e) {
        return Status(KT_STATUS_INTERNAL, std::string("chat template: ") + e.what());
    }
    return Status::ok();
}

}  // namespace

Status Template::parse(std::string_view source, std::unique_ptr<Template> *out) {
    if (source.size() > kMaxSourceBytes)
        return Status(KT_STATUS_UNSUPPORTED, "the chat template is " + std::to_string(source.size()) +
                                                 " bytes; kt runs templates of up to " + std::to_string(kMaxSourceBytes >> 10) + " KiB");
    std::unique_ptr<Template> t(new Template());
    t->source_ = std::string(source);
    KT_TRY(guarded([&] {
        const Source src{t->source_};
        Parser parser(src, scan(src));
        t->body_ = parser.parse_template();
        t->depth_ = parser.max_depth();
    }));
    *out = std::move(t);
    return Status::ok();
}

Status Template::render(const Value &context, std::string *out, RenderStats *stats, const Limits &limits) const {
    if (context.depth() > kMaxDepth)
        return Status(KT_STATUS_UNSUPPORTED, "chat template variables nested " + std::to_string(context.depth()) +
                                                 " levels deep; templates take at most " + std::to_string(kMaxDepth));
    std::string rendered;
    KT_TRY(guarded([&] {
        const Source src{source_};
        Renderer r(src, limits, &rendered);
        r.run(body_, context);
        if (stats) *stats = r.stats();
    }));
    out->append(rendered);
    return Status::ok();
}

}  // namespace kt::tokenizer::jinja
