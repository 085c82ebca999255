// The Jinja-subset interpreter; see jinja.h.
//
// Structure: a scanner cuts the source into text and tags (applying -/+ whitespace control, trim_blocks and
// lstrip_blocks), a lexer turns each tag into tokens, a recursive-descent parser builds statement and expression
// trees (operator precedence as in Jinja2's parser), and a tree-walking renderer evaluates them. Inside this file
// errors travel as a private exception (JinjaError) that render()/parse() turn into a Status; nothing escapes.
#include "model/tokenizer/jinja.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <unordered_map>

namespace kt::tokenizer::jinja {

namespace {

constexpr int kMaxDepth = 200;                    // nesting of expressions and statements
constexpr uint64_t kMaxSteps = 1'000'000;         // loop iterations + statements executed (real templates: thousands)
constexpr size_t kMaxOutput = 64ull << 20;        // bytes rendered

struct JinjaError {
    Status status;
};

[[noreturn]] void fail(kt_status code, std::string message) { throw JinjaError{Status(code, std::move(message))}; }

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// Values

const Value *Dict::find(std::string_view key) const {
    for (const auto &kv : items)
        if (kv.first == key) return &kv.second;
    return nullptr;
}

void Dict::set(const std::string &key, Value v) {
    for (auto &kv : items)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    items.emplace_back(key, std::move(v));
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
    v.s_ = std::move(s);
    return v;
}
Value Value::list(List items) {
    Value v;
    v.kind_ = Kind::kList;
    v.list_ = std::make_shared<List>(std::move(items));
    return v;
}
Value Value::dict(Dict d) {
    Value v;
    v.kind_ = Kind::kDict;
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
    v.s_ = std::move(name);
    return v;
}

Value Value::from_json(const json::Value &j) {
    switch (j.kind()) {
        case json::Value::Kind::kNull: return none();
        case json::Value::Kind::kBool: return boolean(j.as_bool());
        case json::Value::Kind::kNumber: return j.is_integer() ? integer(j.as_int()) : number(j.as_number());
        case json::Value::Kind::kString: return string(j.as_string());
        case json::Value::Kind::kArray: {
            List items;
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
        case Kind::kString: return !s_.empty();
        case Kind::kList: return !list_->empty();
        case Kind::kDict: return !dict_->items.empty();
        case Kind::kFunction: return true;
    }
    return false;
}

namespace {

std::string float_repr(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, f);
    std::string s(buf, r.ptr);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";  // Python writes 1.0, not 1
    return s;
}

std::string py_repr(const Value &v);

std::string py_str(const Value &v) {
    switch (v.kind()) {
        case Value::Kind::kUndefined: return "";
        case Value::Kind::kNone: return "None";
        case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
        case Value::Kind::kInt: return std::to_string(v.as_int());
        case Value::Kind::kFloat: return float_repr(v.as_float());
        case Value::Kind::kString: return v.as_string();
        case Value::Kind::kFunction: return "<function " + v.as_string() + ">";
        case Value::Kind::kList:
        case Value::Kind::kDict: return py_repr(v);
    }
    return "";
}

std::string py_repr(const Value &v) {
    if (v.is_string()) {
        const std::string &s = v.as_string();
        const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
        std::string out(1, quote);
        for (char c : s) {
            if (c == quote || c == '\\') out += '\\';
            if (c == '\n') out += "\\n";
            else if (c == '\t') out += "\\t";
            else if (c == '\r') out += "\\r";
            else out += c;
        }
        return out + quote;
    }
    if (v.is_list()) {
        std::string out = "[";
        for (size_t i = 0; i < v.items().size(); ++i) out += (i ? ", " : "") + py_repr(v.items()[i]);
        return out + "]";
    }
    if (v.is_dict()) {
        std::string out = "{";
        bool first = true;
        for (const auto &[k, x] : v.members().items) {
            out += (first ? "'" : ", '") + k + "': " + py_repr(x);
            first = false;
        }
        return out + "}";
    }
    return py_str(v);
}

void json_into(const Value &v, int indent, int depth, std::string *out) {
    const auto newline = [&](int d) {
        out->push_back('\n');
        out->append(static_cast<size_t>(indent * d), ' ');
    };
    switch (v.kind()) {
        case Value::Kind::kUndefined:
        case Value::Kind::kNone: *out += "null"; return;
        case Value::Kind::kBool: *out += v.as_bool() ? "true" : "false"; return;
        case Value::Kind::kInt: *out += std::to_string(v.as_int()); return;
        case Value::Kind::kFloat: *out += float_repr(v.as_float()); return;
        case Value::Kind::kString: json::append_quoted(out, v.as_string()); return;
        case Value::Kind::kFunction: fail(KT_STATUS_UNSUPPORTED, "tojson: a function cannot be serialised");
        case Value::Kind::kList: {
            if (v.items().empty()) {
                *out += "[]";
                return;
            }
            out->push_back('[');
            for (size_t i = 0; i < v.items().size(); ++i) {
                if (i) *out += indent ? "," : ", ";
                if (indent) newline(depth + 1);
                json_into(v.items()[i], indent, depth + 1, out);
            }
            if (indent) newline(depth);
            out->push_back(']');
            return;
        }
        case Value::Kind::kDict: {
            if (v.members().items.empty()) {
                *out += "{}";
                return;
            }
            out->push_back('{');
            bool first = true;
            for (const auto &[k, x] : v.members().items) {
                if (!first) *out += indent ? "," : ", ";
                first = false;
                if (indent) newline(depth + 1);
                json::append_quoted(out, k);
                *out += ": ";
                json_into(x, indent, depth + 1, out);
            }
            if (indent) newline(depth);
            out->push_back('}');
            return;
        }
    }
}

}  // namespace

std::string to_output(const Value &v) { return py_str(v); }

std::string to_json(const Value &v, int indent) {
    std::string out;
    json_into(v, indent, 0, &out);
    return out;
}

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

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
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

private:
    // ---- statements ----

    // Parses pieces until a statement whose keyword is in `ends` (returned in *end, its tokens left for the caller
    // in cur_) or the end of the template (only allowed when `ends` is empty).
    Body parse_body(const std::vector<std::string> &ends, std::string *end) {
        Body body;
        if (++depth_ > kMaxDepth) src_.error(pos_of_piece(), "statements nested too deeply");
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
                --depth_;
                return body;
            }
            body.push_back(parse_statement(kw));
        }
        if (!ends.empty()) src_.error(src_.text.size(), "missing {% " + ends.back() + " %}");
        --depth_;
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
            n->exprs.push_back(parse_or());  // not parse_expr: "if" here is the loop filter
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
        ExprPtr e = parse_or();
        while (peek().kind == Token::kName && peek().text == "if") {
            const size_t pos = next().pos;
            auto c = make(Expr::kCond, pos);
            ExprPtr cond = parse_or();
            ExprPtr otherwise;
            if (accept_name("else")) otherwise = parse_expr();
            c->args.push_back(std::move(e));
            c->args.push_back(std::move(cond));
            c->args.push_back(std::move(otherwise));
            e = std::move(c);
        }
        return e;
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
            auto n = make(Expr::kNot, next().pos);
            n->args.push_back(parse_not());
            return n;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        enter();
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
        leave();
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
        enter();
        ExprPtr e;
        if (peek().kind == Token::kOp && (peek().text == "-" || peek().text == "+")) {
            const Token &t = next();
            ExprPtr operand = parse_unary_no_filter();
            if (t.text == "-") {
                e = make(Expr::kNeg, t.pos);
                e->args.push_back(std::move(operand));
            } else {
                e = std::move(operand);
            }
        } else {
            e = parse_postfix(parse_primary());
        }
        e = parse_filters(std::move(e));
        leave();
        return e;
    }

    ExprPtr parse_unary_no_filter() {
        if (peek().kind == Token::kOp && peek().text == "-") {
            auto e = make(Expr::kNeg, next().pos);
            e->args.push_back(parse_unary_no_filter());
            return e;
        }
        return parse_postfix(parse_primary());
    }

    ExprPtr parse_primary() {
        const Token &t = next();
        switch (t.kind) {
            case Token::kString: {
                auto e = make(Expr::kLiteral, t.pos);
                e->literal = Value::string(t.text);
                // Adjacent string literals concatenate, as in Python.
                while (peek().kind == Token::kString) e->literal = Value::string(e->literal.as_string() + next().text);
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
                        l->args.push_back(std::move(e));
                        while (!(peek().kind == Token::kOp && peek().text == ")")) {
                            l->args.push_back(parse_expr());
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
                        l->args.push_back(parse_expr());
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
                        d->args.push_back(parse_expr());
                        expect_op(":");
                        d->args.push_back(parse_expr());
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

    ExprPtr parse_postfix(ExprPtr e) {
        while (peek().kind == Token::kOp) {
            const std::string &op = peek().text;
            if (op == ".") {
                const size_t pos = next().pos;
                const Token &name = next();
                if (name.kind != Token::kName && name.kind != Token::kInt) src_.error(name.pos, "expected an attribute name");
                auto a = make(Expr::kAttr, pos);
                a->name = name.kind == Token::kName ? name.text : std::to_string(name.i);
                a->args.push_back(std::move(e));
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
                    ix->args.push_back(std::move(e));
                    ix->args.push_back(std::move(parts[0]));
                    e = std::move(ix);
                } else {
                    auto sl = make(Expr::kSlice, pos);
                    sl->args.push_back(std::move(e));
                    for (auto &p : parts) sl->args.push_back(std::move(p));
                    e = std::move(sl);
                }
            } else if (op == "(") {
                auto c = make(Expr::kCall, next().pos);
                c->args.push_back(std::move(e));
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
                call->args.push_back(parse_expr());
            } else {
                if (!call->kwargs.empty()) src_.error(peek().pos, "positional argument after keyword argument");
                call->args.push_back(parse_expr());
            }
            if (!accept_op(",")) {
                expect_op(")");
                break;
            }
        }
    }

    ExprPtr parse_filters(ExprPtr e) {
        while (true) {
            if (accept_op("|")) {
                const Token &name = next();
                if (name.kind != Token::kName) src_.error(name.pos, "expected a filter name");
                auto f = make(Expr::kFilter, name.pos);
                f->name = name.text;
                f->args.push_back(std::move(e));
                if (accept_op("(")) parse_call_args(f.get());
                e = std::move(f);
            } else if (peek().kind == Token::kName && peek().text == "is") {
                next();
                auto t = make(Expr::kTest, peek().pos);
                t->negate = accept_name("not");
                const Token &name = next();
                if (name.kind != Token::kName) src_.error(name.pos, "expected a test name");
                t->name = name.text;
                t->args.push_back(std::move(e));
                if (accept_op("(")) {
                    parse_call_args(t.get());
                } else if (peek().kind == Token::kString || peek().kind == Token::kInt ||
                           (peek().kind == Token::kName && peek().text != "and" && peek().text != "or" &&
                            peek().text != "else" && peek().text != "if")) {
                    t->args.push_back(parse_primary());  // "is divisibleby 3", "is sameas x"
                }
                e = std::move(t);
            } else {
                return e;
            }
        }
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
    void enter() {
        if (++depth_ > kMaxDepth) src_.error(peek().pos, "expression nested too deeply");
    }
    void leave() { --depth_; }
    size_t pos_of_piece() const { return piece_ < pieces_.size() ? pieces_[piece_].pos : src_.text.size(); }

    static ExprPtr make(Expr::Kind kind, size_t pos) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->pos = pos;
        return e;
    }
    static ExprPtr binary(Expr::Kind kind, const std::string &op, ExprPtr a, ExprPtr b) {
        auto e = make(kind, a->pos);
        e->name = op;
        e->args.push_back(std::move(a));
        e->args.push_back(std::move(b));
        return e;
    }

    const Source &src_;
    std::vector<Piece> pieces_;
    size_t piece_ = 0;
    std::vector<Token> *tokens_ = nullptr;
    size_t tok_ = 0;
    int depth_ = 0;
};

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// Rendering

namespace {

// Python's str.strip family on byte strings (ASCII whitespace unless `chars` is given).
std::string strip(const std::string &s, const Value *chars, bool left, bool right) {
    const std::string set = chars && chars->is_string() ? chars->as_string() : std::string(" \t\n\r\v\f");
    size_t b = 0, e = s.size();
    if (left)
        while (b < e && set.find(s[b]) != std::string::npos) ++b;
    if (right)
        while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
    return s.substr(b, e - b);
}

std::string ascii_case(std::string s, bool upper) {
    for (char &c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Code points of a UTF-8 string, as Python's len() and indexing see it.
std::vector<std::string> characters(const std::string &s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        n = std::min(n, s.size() - i);
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

bool equal(const Value &a, const Value &b) {
    if (a.is_number() && b.is_number()) return a.as_float() == b.as_float();
    if (a.kind() == Value::Kind::kBool && b.kind() == Value::Kind::kBool) return a.as_bool() == b.as_bool();
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::kUndefined:
        case Value::Kind::kNone: return true;
        case Value::Kind::kString:
        case Value::Kind::kFunction: return a.as_string() == b.as_string();
        case Value::Kind::kList:
            if (a.items().size() != b.items().size()) return false;
            for (size_t i = 0; i < a.items().size(); ++i)
                if (!equal(a.items()[i], b.items()[i])) return false;
            return true;
        case Value::Kind::kDict:
            if (a.members().items.size() != b.members().items.size()) return false;
            for (const auto &[k, v] : a.members().items) {
                const Value *w = b.members().find(k);
                if (!w || !equal(v, *w)) return false;
            }
            return true;
        default: return false;
    }
}

class Renderer {
public:
    Renderer(const Source &src, std::string *out) : src_(src), out_(out) {}

    void run(const Body &body, const Value &context) {
        scopes_.emplace_back();
        if (context.is_dict())
            for (const auto &[k, v] : context.members().items) scopes_.back()[k] = v;
        exec(body);
    }

private:
    using Scope = std::unordered_map<std::string, Value>;

    [[noreturn]] void error(size_t pos, const std::string &what) const { src_.error(pos, what); }

    void step(size_t pos) {
        if (++steps_ > kMaxSteps) error(pos, "the template runs too long (more than a million steps)");
    }
    void emit(const std::string &s, size_t pos) {
        if (out_->size() + s.size() > kMaxOutput) error(pos, "the rendered text exceeds 64 MiB");
        out_->append(s);
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

    // ---- statements ----

    void exec(const Body &body) {
        for (const auto &n : body) exec(*n);
    }

    void exec(const Node &n) {
        step(n.pos);
        switch (n.kind) {
            case Node::kText: emit(n.text, n.pos); return;
            case Node::kOutput: emit(py_str(eval(*n.exprs[0])), n.pos); return;
            case Node::kBlock: exec(n.bodies[0]); return;
            case Node::kIf:
                for (size_t i = 0; i < n.exprs.size(); ++i) {
                    if (eval(*n.exprs[i]).truthy()) {
                        exec(n.bodies[i]);
                        return;
                    }
                }
                if (n.bodies.size() > n.exprs.size()) exec(n.bodies.back());
                return;
            case Node::kSet: assign(n, eval(*n.exprs[0])); return;
            case Node::kSetBlock: {
                std::string captured;
                std::string *saved = out_;
                out_ = &captured;
                exec(n.bodies[0]);
                out_ = saved;
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
        target.members().set(n.names[1], std::move(v));  // shared: visible through every copy
    }

    void exec_for(const Node &n) {
        const Value iterable = eval(*n.exprs[0]);
        List items;
        if (iterable.is_list()) {
            items = iterable.items();
        } else if (iterable.is_dict()) {
            for (const auto &kv : iterable.members().items) items.push_back(Value::string(kv.first));
        } else if (iterable.is_string()) {
            for (auto &c : characters(iterable.as_string())) items.push_back(Value::string(std::move(c)));
        } else if (!iterable.is_undefined() && !iterable.is_none()) {
            error(n.pos, "cannot loop over " + py_repr(iterable));
        }
        // The loop filter is applied first: loop.index and loop.last count only the items it lets through.
        if (n.exprs.size() > 1) {
            List kept;
            for (Value &item : items) {
                scopes_.emplace_back();
                bind_targets(n, item);
                const bool keep = eval(*n.exprs[1]).truthy();
                scopes_.pop_back();
                if (keep) kept.push_back(std::move(item));
            }
            items.swap(kept);
        }
        if (items.empty()) {
            if (n.bodies.size() > 1) exec(n.bodies[1]);
            return;
        }
        const int64_t len = static_cast<int64_t>(items.size());
        for (int64_t i = 0; i < len; ++i) {
            step(n.pos);
            scopes_.emplace_back();
            bind_targets(n, items[static_cast<size_t>(i)]);
            Dict loop;
            loop.items = {
                {"index0", Value::integer(i)},
                {"index", Value::integer(i + 1)},
                {"revindex0", Value::integer(len - 1 - i)},
                {"revindex", Value::integer(len - i)},
                {"first", Value::boolean(i == 0)},
                {"last", Value::boolean(i == len - 1)},
                {"length", Value::integer(len)},
                {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
                {"nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value()},
            };
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
            error(n.pos, "cannot unpack " + py_repr(item) + " into " + std::to_string(n.names.size()) + " loop variables");
        for (size_t k = 0; k < n.names.size(); ++k) scopes_.back()[n.names[k]] = item.items()[k];
    }

    // ---- expressions ----

    Value eval(const Expr &e) {
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
                if (v.kind() == Value::Kind::kInt) return Value::integer(-v.as_int());
                if (v.kind() == Value::Kind::kFloat) return Value::number(-v.as_float());
                error(e.pos, "cannot negate " + py_repr(v));
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
                List items;
                for (const auto &a : e.args) items.push_back(eval(*a));
                return Value::list(std::move(items));
            }
            case Expr::kDict: {
                Dict d;
                for (size_t i = 0; i < e.args.size(); i += 2) {
                    const Value k = eval(*e.args[i]);
                    if (!k.is_string()) error(e.args[i]->pos, "dictionary keys must be strings");
                    d.set(k.as_string(), eval(*e.args[i + 1]));
                }
                return Value::dict(std::move(d));
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
            if (key.kind() != Value::Kind::kInt) error(pos, "indices must be integers, not " + py_repr(key));
            const std::vector<std::string> chars = obj.is_string() ? characters(obj.as_string()) : std::vector<std::string>();
            const int64_t n = static_cast<int64_t>(obj.is_list() ? obj.items().size() : chars.size());
            int64_t i = key.as_int();
            if (i < 0) i += n;
            if (i < 0 || i >= n) return Value();
            return obj.is_list() ? obj.items()[static_cast<size_t>(i)] : Value::string(chars[static_cast<size_t>(i)]);
        }
        if (obj.is_undefined()) return Value();
        error(pos, "cannot index " + py_repr(obj));
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
        const int64_t step = bound[2];
        if (step == 0) error(e.pos, "slice step cannot be zero");
        List src;
        if (obj.is_list()) {
            src = obj.items();
        } else if (obj.is_string()) {
            for (auto &c : characters(obj.as_string())) src.push_back(Value::string(std::move(c)));
        } else {
            error(e.pos, "cannot slice " + py_repr(obj));
        }
        const int64_t n = static_cast<int64_t>(src.size());
        // Python's slice.indices().
        const auto clamp = [&](int64_t v, bool is_given, int64_t fallback) {
            if (!is_given) return fallback;
            if (v < 0) v += n;
            if (step > 0) return std::clamp<int64_t>(v, 0, n);
            return std::clamp<int64_t>(v, -1, n - 1);
        };
        const int64_t start = clamp(bound[0], given[0], step > 0 ? 0 : n - 1);
        const int64_t stop = clamp(bound[1], given[1], step > 0 ? n : -1);
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(src[static_cast<size_t>(i)]);
        if (obj.is_list()) return Value::list(std::move(out));
        std::string s;
        for (const Value &c : out) s += c.as_string();
        return Value::string(std::move(s));
    }

    Value binary(const Expr &e) {
        const std::string &op = e.name;
        const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
        if (op == "==") return Value::boolean(equal(a, b));
        if (op == "!=") return Value::boolean(!equal(a, b));
        if (op == "in" || op == "not in") {
            bool found = false;
            if (b.is_string() && a.is_string()) found = b.as_string().find(a.as_string()) != std::string::npos;
            else if (b.is_list()) found = std::any_of(b.items().begin(), b.items().end(), [&](const Value &x) { return equal(a, x); });
            else if (b.is_dict()) found = a.is_string() && b.members().find(a.as_string()) != nullptr;
            else if (!b.is_undefined()) error(e.pos, "'in' needs a string, list or dict on the right");
            return Value::boolean(op == "in" ? found : !found);
        }
        if (op == "~") return Value::string(py_str(a) + py_str(b));
        if (op == "<" || op == "<=" || op == ">" || op == ">=") {
            int cmp;
            if (a.is_number() && b.is_number()) cmp = a.as_float() < b.as_float() ? -1 : a.as_float() > b.as_float() ? 1 : 0;
            else if (a.is_string() && b.is_string()) cmp = a.as_string().compare(b.as_string());
            else error(e.pos, "cannot compare " + py_repr(a) + " and " + py_repr(b));
            const bool r = op == "<" ? cmp < 0 : op == "<=" ? cmp <= 0 : op == ">" ? cmp > 0 : cmp >= 0;
            return Value::boolean(r);
        }
        if (op == "+") {
            if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
            if (a.is_list() && b.is_list()) {
                List l = a.items();
                l.insert(l.end(), b.items().begin(), b.items().end());
                return Value::list(std::move(l));
            }
        }
        if (op == "*") {
            const Value *seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
            const Value *count = seq == &a ? &b : &a;
            if (seq && count->kind() == Value::Kind::kInt) {
                const int64_t times = std::max<int64_t>(0, count->as_int());
                const size_t unit = seq->is_string() ? seq->as_string().size() : seq->items().size();
                if (unit * static_cast<size_t>(std::min<int64_t>(times, 1 << 30)) > kMaxOutput) error(e.pos, "repetition too large");
                if (seq->is_string()) {
                    std::string s;
                    for (int64_t i = 0; i < times; ++i) s += seq->as_string();
                    return Value::string(std::move(s));
                }
                List l;
                for (int64_t i = 0; i < times; ++i) l.insert(l.end(), seq->items().begin(), seq->items().end());
                return Value::list(std::move(l));
            }
        }
        if (a.is_number() && b.is_number()) return arithmetic(e, op, a, b);
        error(e.pos, "unsupported operand types for " + op + ": " + py_repr(a) + " and " + py_repr(b));
    }

    Value arithmetic(const Expr &e, const std::string &op, const Value &a, const Value &b) {
        const bool ints = a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt;
        const double x = a.as_float(), y = b.as_float();
        if (op == "+") return ints ? Value::integer(a.as_int() + b.as_int()) : Value::number(x + y);
        if (op == "-") return ints ? Value::integer(a.as_int() - b.as_int()) : Value::number(x - y);
        if (op == "*") return ints ? Value::integer(a.as_int() * b.as_int()) : Value::number(x * y);
        if (op == "**") return ints && b.as_int() >= 0 ? Value::integer(static_cast<int64_t>(std::pow(x, y))) : Value::number(std::pow(x, y));
        if (y == 0) error(e.pos, "division by zero");
        if (op == "/") return Value::number(x / y);
        if (op == "//") {
            if (ints) {
                const int64_t q = a.as_int() / b.as_int();
                return Value::integer((a.as_int() % b.as_int() != 0 && ((a.as_int() < 0) != (b.as_int() < 0))) ? q - 1 : q);
            }
            return Value::number(std::floor(x / y));
        }
        if (op == "%") {
            if (ints) {
                const int64_t r = a.as_int() % b.as_int();
                return Value::integer(r != 0 && ((r < 0) != (b.as_int() < 0)) ? r + b.as_int() : r);
            }
            return Value::number(x - std::floor(x / y) * y);
        }
        error(e.pos, "unknown operator " + op);
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
        if (f.kind() != Value::Kind::kFunction) error(e.pos, "cannot call " + (callee.kind == Expr::kName ? "'" + callee.name + "' (undefined or not a function)" : py_repr(f)));
        const Args args = evaluate_args(e, 1);
        const std::string &name = f.as_string();
        if (name == "raise_exception") {
            const Value *m = args.get(0, "message");
            fail(KT_STATUS_INVALID_ARGUMENT, "chat template: " + (m ? py_str(*m) : std::string("raise_exception")));
        }
        if (name == "namespace" || name == "dict") {
            Dict d = args.keywords;
            return name == "namespace" ? Value::make_namespace(std::move(d)) : Value::dict(std::move(d));
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
            List l;
            for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
                step(e.pos);
                l.push_back(Value::integer(i));
            }
            return Value::list(std::move(l));
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
            if (name == "strip") return Value::string(strip(s, a0, true, true));
            if (name == "lstrip") return Value::string(strip(s, a0, true, false));
            if (name == "rstrip") return Value::string(strip(s, a0, false, true));
            if (name == "upper") return Value::string(ascii_case(s, true));
            if (name == "lower") return Value::string(ascii_case(s, false));
            if (name == "title" || name == "capitalize") return filter_by_name(e, name, obj, Args{});
            if (name == "startswith" || name == "endswith") {
                if (!a0) error(e.pos, name + " needs an argument");
                List options = a0->is_list() ? a0->items() : List{*a0};
                for (const Value &o : options) {
                    if (!o.is_string()) error(e.pos, name + " needs strings");
                    const std::string &p = o.as_string();
                    const bool hit = p.size() <= s.size() &&
                                     (name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
                    if (hit) return Value::boolean(true);
                }
                return Value::boolean(false);
            }
            if (name == "split") {
                List parts;
                int64_t max_split = a1 && a1->kind() == Value::Kind::kInt ? a1->as_int() : -1;
                if (!a0 || a0->is_none()) {  // split on runs of whitespace, dropping empty parts
                    size_t i = 0;
                    while (i < s.size()) {
                        while (i < s.size() && is_space(s[i])) ++i;
                        if (i >= s.size()) break;
                        size_t j = i;
                        if (max_split == 0) j = s.size();
                        else while (j < s.size() && !is_space(s[j])) ++j;
                        parts.push_back(Value::string(s.substr(i, j - i)));
                        if (max_split > 0) --max_split;
                        i = j;
                    }
                    return Value::list(std::move(parts));
                }
                if (!a0->is_string() || a0->as_string().empty()) error(e.pos, "split needs a non-empty separator");
                const std::string &sep = a0->as_string();
                size_t from = 0;
                for (size_t hit; max_split != 0 && (hit = s.find(sep, from)) != std::string::npos; from = hit + sep.size()) {
                    parts.push_back(Value::string(s.substr(from, hit - from)));
                    if (max_split > 0) --max_split;
                }
                parts.push_back(Value::string(s.substr(from)));
                return Value::list(std::move(parts));
            }
            if (name == "replace") return filter_by_name(e, "replace", obj, args);
            if (name == "find") {
                if (!a0 || !a0->is_string()) error(e.pos, "find needs a string");
                const size_t at = s.find(a0->as_string());
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
                List l;
                for (const auto &[k, v] : obj.members().items) {
                    if (name == "items") l.push_back(Value::list({Value::string(k), v}));
                    else l.push_back(name == "keys" ? Value::string(k) : v);
                }
                return Value::list(std::move(l));
            }
            if (name == "get") {
                if (!a0 || !a0->is_string()) error(e.pos, "get needs a string key");
                const Value *v = obj.members().find(a0->as_string());
                return v ? *v : a1 ? *a1 : Value::none();
            }
        }
        error(e.pos, "unknown method '" + name + "' of " + (obj.is_undefined() ? std::string("an undefined value") : py_repr(obj)));
    }

    Value filter(const Expr &e) {
        const Value obj = eval(*e.args[0]);
        if (e.name == "selectattr" || e.name == "rejectattr" || e.name == "map") return filter_sequence(e, obj);
        return filter_by_name(e, e.name, obj, evaluate_args(e, 1));
    }

    Value filter_by_name(const Expr &e, const std::string &name, const Value &obj, const Args &args) {
        const Value *a0 = args.get(0, nullptr);
        if (name == "trim") return Value::string(strip(py_str(obj), args.get(0, "chars"), true, true));
        if (name == "safe" || name == "e" || name == "escape") {
            if (name != "safe") error(e.pos, "the filter '" + name + "' is not supported");
            return obj;
        }
        if (name == "tojson") {
            const Value *indent = args.get(0, "indent");
            return Value::string(to_json(obj, indent && indent->kind() == Value::Kind::kInt ? static_cast<int>(indent->as_int()) : 0));
        }
        if (name == "length" || name == "count") {
            if (obj.is_string()) return Value::integer(static_cast<int64_t>(characters(obj.as_string()).size()));
            if (obj.is_list()) return Value::integer(static_cast<int64_t>(obj.items().size()));
            if (obj.is_dict()) return Value::integer(static_cast<int64_t>(obj.members().items.size()));
            if (obj.is_undefined()) return Value::integer(0);
            error(e.pos, "length of " + py_repr(obj));
        }
        if (name == "default" || name == "d") {
            const Value *boolean = args.get(1, "boolean");
            const bool use_default = obj.is_undefined() || (boolean && boolean->truthy() && !obj.truthy());
            if (!use_default) return obj;
            const Value *d = args.get(0, "default_value");
            return d ? *d : Value::string("");
        }
        if (name == "lower" || name == "upper") return Value::string(ascii_case(py_str(obj), name == "upper"));
        if (name == "capitalize" || name == "title") {
            std::string s = ascii_case(py_str(obj), false);
            bool start = true;
            for (char &c : s) {
                if (start && std::isalpha(static_cast<unsigned char>(c))) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
                start = name == "title" ? !std::isalpha(static_cast<unsigned char>(c)) : false;
            }
            return Value::string(std::move(s));
        }
        if (name == "string") return Value::string(py_str(obj));
        if (name == "int") {
            if (obj.kind() == Value::Kind::kInt) return obj;
            if (obj.kind() == Value::Kind::kFloat) return Value::integer(static_cast<int64_t>(obj.as_float()));
            if (obj.kind() == Value::Kind::kBool) return Value::integer(obj.as_bool());
            if (obj.is_string()) return Value::integer(std::strtoll(obj.as_string().c_str(), nullptr, 10));
            return Value::integer(0);
        }
        if (name == "float") {
            if (obj.is_number()) return Value::number(obj.as_float());
            if (obj.is_string()) return Value::number(std::strtod(obj.as_string().c_str(), nullptr));
            return Value::number(0);
        }
        if (name == "join") {
            const Value *sep = args.get(0, "d");
            std::string out;
            if (!obj.is_list()) error(e.pos, "join needs a list");
            for (size_t i = 0; i < obj.items().size(); ++i) {
                if (i && sep) out += py_str(*sep);
                out += py_str(obj.items()[i]);
            }
            return Value::string(std::move(out));
        }
        if (name == "first" || name == "last") {
            if (obj.is_list()) {
                if (obj.items().empty()) return Value();
                return name == "first" ? obj.items().front() : obj.items().back();
            }
            if (obj.is_string()) {
                auto chars = characters(obj.as_string());
                if (chars.empty()) return Value();
                return Value::string(name == "first" ? chars.front() : chars.back());
            }
            error(e.pos, name + " of " + py_repr(obj));
        }
        if (name == "list") {
            if (obj.is_list()) return obj;
            List l;
            if (obj.is_string()) for (auto &c : characters(obj.as_string())) l.push_back(Value::string(std::move(c)));
            else if (obj.is_dict()) for (const auto &kv : obj.members().items) l.push_back(Value::string(kv.first));
            else if (!obj.is_undefined()) error(e.pos, "list of " + py_repr(obj));
            return Value::list(std::move(l));
        }
        if (name == "reverse") {
            if (obj.is_list()) {
                List l(obj.items().rbegin(), obj.items().rend());
                return Value::list(std::move(l));
            }
            if (obj.is_string()) {
                auto chars = characters(obj.as_string());
                std::string s;
                for (auto it = chars.rbegin(); it != chars.rend(); ++it) s += *it;
                return Value::string(std::move(s));
            }
            error(e.pos, "reverse of " + py_repr(obj));
        }
        if (name == "replace") {
            const Value *a1 = args.get(1, nullptr);
            if (!obj.is_string() || !a0 || !a1 || !a0->is_string() || !a1->is_string()) error(e.pos, "replace needs strings");
            const std::string &from = a0->as_string(), &to = a1->as_string();
            std::string s = obj.as_string(), out;
            if (from.empty()) return obj;
            size_t at = 0;
            for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) out += s.substr(at, hit - at) + to;
            out += s.substr(at);
            return Value::string(std::move(out));
        }
        if (name == "items") {
            if (!obj.is_dict()) error(e.pos, "items of " + py_repr(obj));
            List l;
            for (const auto &[k, v] : obj.members().items) l.push_back(Value::list({Value::string(k), v}));
            return Value::list(std::move(l));
        }
        if (name == "abs") {
            if (obj.kind() == Value::Kind::kInt) return Value::integer(obj.as_int() < 0 ? -obj.as_int() : obj.as_int());
            if (obj.kind() == Value::Kind::kFloat) return Value::number(std::fabs(obj.as_float()));
            error(e.pos, "abs of " + py_repr(obj));
        }
        error(e.pos, "the filter '" + name + "' is not supported");
    }

    // selectattr(attr[, test[, arg]]), rejectattr(...), map(attribute=name) / map(filter_name)
    Value filter_sequence(const Expr &e, const Value &obj) {
        const Args args = evaluate_args(e, 1);
        if (!obj.is_list()) {
            if (obj.is_undefined()) return Value::list();
            error(e.pos, e.name + " needs a list");
        }
        List out;
        if (e.name == "map") {
            const Value *attr = args.keywords.find("attribute");
            for (const Value &item : obj.items()) {
                if (attr && attr->is_string()) {
                    out.push_back(attribute(item, attr->as_string()));
                } else if (!args.positional.empty() && args.positional[0].is_string()) {
                    Args rest;
                    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
                    out.push_back(filter_by_name(e, args.positional[0].as_string(), item, rest));
                } else {
                    error(e.pos, "map needs attribute= or a filter name");
                }
            }
            return Value::list(std::move(out));
        }
        if (args.positional.empty() || !args.positional[0].is_string()) error(e.pos, e.name + " needs an attribute name");
        const std::string &attr = args.positional[0].as_string();
        const std::string test_name = args.positional.size() > 1 && args.positional[1].is_string() ? args.positional[1].as_string() : "";
        List test_args(args.positional.size() > 2 ? args.positional.begin() + 2 : args.positional.end(), args.positional.end());
        for (const Value &item : obj.items()) {
            const Value v = attribute(item, attr);
            const bool pass = test_name.empty() ? v.truthy() : run_test(e, test_name, v, test_args);
            if (pass == (e.name == "selectattr")) out.push_back(item);
        }
        return Value::list(std::move(out));
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
        if (name == "lower") return v.is_string() && ascii_case(v.as_string(), false) == v.as_string();
        if (name == "upper") return v.is_string() && ascii_case(v.as_string(), true) == v.as_string();
        if (name == "even" || name == "odd") {
            if (v.kind() != K::kInt) error(e.pos, "'" + name + "' needs an integer");
            return (v.as_int() % 2 == 0) == (name == "even");
        }
        if (name == "divisibleby") {
            if (v.kind() != K::kInt || !a0 || a0->kind() != K::kInt || a0->as_int() == 0) error(e.pos, "divisibleby needs integers");
            return v.as_int() % a0->as_int() == 0;
        }
        if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return a0 && equal(v, *a0);
        if (name == "ne" || name == "!=") return !a0 || !equal(v, *a0);
        if (name == "in") {
            if (!a0) error(e.pos, "'in' needs an argument");
            if (a0->is_list()) return std::any_of(a0->items().begin(), a0->items().end(), [&](const Value &x) { return equal(v, x); });
            if (a0->is_string() && v.is_string()) return a0->as_string().find(v.as_string()) != std::string::npos;
            if (a0->is_dict() && v.is_string()) return a0->members().find(v.as_string()) != nullptr;
            return false;
        }
        error(e.pos, "the test '" + name + "' is not supported");
    }

    const Source &src_;
    std::string *out_;
    std::vector<Scope> scopes_;
    uint64_t steps_ = 0;
};

}  // namespace

Template::~Template() = default;

Status Template::parse(std::string_view source, std::unique_ptr<Template> *out) {
    std::unique_ptr<Template> t(new Template());
    t->source_ = std::string(source);
    try {
        const Source src{t->source_};
        Parser parser(src, scan(src));
        t->body_ = parser.parse_template();
    } catch (const JinjaError &e) {
        return e.status;
    }
    *out = std::move(t);
    return Status::ok();
}

Status Template::render(const Value &context, std::string *out) const {
    std::string rendered;
    try {
        const Source src{source_};
        Renderer r(src, &rendered);
        r.run(body_, context);
    } catch (const JinjaError &e) {
        return e.status;
    }
    out->append(rendered);
    return Status::ok();
}

}  // namespace kt::tokenizer::jinja
