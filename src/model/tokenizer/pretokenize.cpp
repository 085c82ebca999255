// The pre-tokenizer patterns, matched by hand; see pretokenize.h.
#include "model/tokenizer/pretokenize.h"

#include "model/tokenizer/unicode.h"

namespace kt::tokenizer {

namespace {

using namespace unicode;

// The code points of one fragment and their classes. A matcher gets a start position inside [.., end) of the
// current piece and returns how many code points the pattern matches there (0: no match). Patterns are applied
// to each piece separately, so `end` is where lookaheads see the end of input.
struct Text {
    const uint32_t *cpt;
    const uint8_t *flags;
};
using Matcher = size_t (*)(const Text &t, size_t pos, size_t end);

bool is_letter(uint8_t f) { return f & kLetter; }
bool is_number(uint8_t f) { return f & kNumber; }
bool is_space(uint8_t f) { return f & kWhitespace; }
bool is_newline(uint32_t c) { return c == '\r' || c == '\n'; }
uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

size_t run(const Text &t, size_t pos, size_t end, uint8_t mask) {
    size_t p = pos;
    while (p < end && (t.flags[p] & mask)) ++p;
    return p - pos;
}

// [^\s\p{L}\p{N}]: anything else, including unassigned code points.
bool is_other(uint8_t f) { return !(f & (kWhitespace | kLetter | kNumber)); }

size_t run_other(const Text &t, size_t pos, size_t end) {
    size_t p = pos;
    while (p < end && is_other(t.flags[p])) ++p;
    return p - pos;
}

// The whitespace tail shared by the LLAMA3/QWEN2 and DEEPSEEK3 patterns:  \s*[\r\n]+ | \s+(?!\S) | \s+
// \s*[\r\n]+ backtracks to the last newline of the whitespace run; \s+(?!\S) leaves the run's last character
// for the next piece unless the run reaches the end.
size_t match_space_tail(const Text &t, size_t pos, size_t end) {
    size_t p = pos, last_newline = 0;
    while (p < end && is_space(t.flags[p])) {
        if (is_newline(t.cpt[p])) last_newline = p + 1;
        ++p;
    }
    const size_t n = p - pos;
    if (last_newline) return last_newline - pos;
    if (n > 1 && p < end) return n - 1;
    return n;
}

// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]) (case-insensitive for LLAMA3/QWEN2, exact for GPT-2)
size_t match_contraction(const Text &t, size_t pos, size_t end, bool ignore_case) {
    if (pos + 1 >= end || t.cpt[pos] != '\'') return 0;  // GPT4O asks at the piece end too
    const auto at = [&](size_t i) { return ignore_case ? ascii_lower(t.cpt[i]) : t.cpt[i]; };
    const uint32_t c1 = at(pos + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= end) return 0;
    const uint32_t c2 = at(pos + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

// LLAMA3 (kMaxDigits 3) and QWEN2 (1):
//   (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <size_t kMaxDigits>
size_t match_llama3(const Text &t, size_t pos, size_t end) {
    if (size_t n = match_contraction(t, pos, end, true)) return n;
    const uint32_t c = t.cpt[pos];
    const uint8_t f = t.flags[pos];
    if (!is_newline(c) && !is_number(f)) {
        if (is_letter(f)) return run(t, pos, end, kLetter);
        if (pos + 1 < end && is_letter(t.flags[pos + 1])) return 1 + run(t, pos + 1, end, kLetter);
    }
    if (is_number(f)) {
        const size_t n = run(t, pos, end, kNumber);
        return n < kMaxDigits ? n : kMaxDigits;
    }
    const size_t lead = (c == ' ' && pos + 1 < end && is_other(t.flags[pos + 1])) ? 1 : 0;
    if (lead || is_other(f)) {
        size_t p = pos + lead;
        p += run_other(t, p, end);
        while (p < end && is_newline(t.cpt[p])) ++p;
        return p - pos;
    }
    return match_space_tail(t, pos, end);
}

// GPT2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
// A single whitespace character before a non-space matches no alternative and becomes a piece of its own, as the
// unmatched text between two matches does.
size_t match_gpt2(const Text &t, size_t pos, size_t end) {
    if (size_t n = match_contraction(t, pos, end, false)) return n;
    const size_t lead = (t.cpt[pos] == ' ' && pos + 1 < end) ? 1 : 0;
    const uint8_t f = t.flags[pos + lead];
    if (!lead && is_space(f)) {
        // fall through to the whitespace alternative
    } else if (is_letter(f)) {
        return lead + run(t, pos + lead, end, kLetter);
    } else if (is_number(f)) {
        return lead + run(t, pos + lead, end, kNumber);
    } else if (is_other(f)) {
        return lead + run_other(t, pos + lead, end);
    }
    const size_t n = run(t, pos, end, kWhitespace);
    if (n == 0) return 0;
    if (pos + n == end) return n;  // (?!\S) holds at the end of the piece
    return n - 1;                  // 0 when a lone space precedes a non-space: unmatched
}

// GPT4O (o200k, gpt-oss), as llama.cpp adapts tiktoken's pattern for std::regex:
//   [^\r\n\p{L}\p{N}]?U*L+C? | [^\r\n\p{L}\p{N}]?U+L*C? | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n/]* |
//   \s*[\r\n]+ | \s+(?!\S) | \s+
// with U = a letter other than a-z, L = a letter other than A-Z, C = a contraction ('s 't 're 've 'm 'll 'd, any
// case). tiktoken's classes are Unicode upper/lower case letters plus marks; llama.cpp's adaptation makes every
// non-ASCII letter both U and L and marks neither, so "ÉCOLE" splits into "É" + "COLE" where tiktoken keeps it
// whole. kt follows llama.cpp (its ids are the reference).
size_t match_gpt4o(const Text &t, size_t pos, size_t end) {
    const auto upper_like = [&](size_t i) { return is_letter(t.flags[i]) && !(t.cpt[i] >= 'a' && t.cpt[i] <= 'z'); };
    const auto lower_like = [&](size_t i) { return is_letter(t.flags[i]) && !(t.cpt[i] >= 'A' && t.cpt[i] <= 'Z'); };
    const uint32_t c = t.cpt[pos];
    // The optional leading character; when it is there, the letter alternatives cannot match without it.
    const size_t s = (!is_newline(c) && !is_letter(t.flags[pos]) && !is_number(t.flags[pos]) && pos + 1 < end) ? pos + 1 : pos;
    size_t u = 0;
    while (s + u < end && upper_like(s + u)) ++u;
    // U*L+: the longest U* that still leaves an L after it (greedy, backtracking one character at a time).
    for (size_t k = u + 1; k-- > 0;) {
        if (s + k >= end || !lower_like(s + k)) continue;
        size_t p = s + k;
        while (p < end && lower_like(p)) ++p;
        return p + match_contraction(t, p, end, true) - pos;
    }
    if (u > 0) {  // U+L*
        size_t p = s + u;
        while (p < end && lower_like(p)) ++p;
        return p + match_contraction(t, p, end, true) - pos;
    }
    if (is_number(t.flags[pos])) {
        const size_t n = run(t, pos, end, kNumber);
        return n < 3 ? n : 3;
    }
    const size_t lead = (c == ' ' && pos + 1 < end && is_other(t.flags[pos + 1])) ? 1 : 0;
    if (lead || is_other(t.flags[pos])) {
        size_t p = pos + lead;
        p += run_other(t, p, end);
        while (p < end && (is_newline(t.cpt[p]) || t.cpt[p] == '/')) ++p;
        return p - pos;
    }
    return match_space_tail(t, pos, end);
}

// \p{N}{1,3}  (DEEPSEEK3 stage 1)
size_t match_digits3(const Text &t, size_t pos, size_t end) {
    const size_t n = run(t, pos, end, kNumber);
    return n < 3 ? n : 3;
}

// \p{N}+  (default stage 3)
size_t match_digits(const Text &t, size_t pos, size_t end) { return run(t, pos, end, kNumber); }

// [0-9][0-9][0-9]  (default stage 4)
size_t match_ascii_digits3(const Text &t, size_t pos, size_t end) {
    if (pos + 3 > end) return 0;
    for (size_t i = pos; i < pos + 3; ++i)
        if (t.cpt[i] < '0' || t.cpt[i] > '9') return 0;
    return 3;
}

// [一-龥぀-ゟ゠-ヿ]+  (DEEPSEEK3 stage 2: CJK ideographs U+4E00..U+9FA5, hiragana, katakana)
size_t match_cjk(const Text &t, size_t pos, size_t end) {
    size_t p = pos;
    while (p < end) {
        const uint32_t c = t.cpt[p];
        if (!((c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF))) break;
        ++p;
    }
    return p - pos;
}

// llama.cpp matches the patterns with \p{P} or \p{S} through std::regex on a "collapsed" text in which ASCII
// keeps its own meaning and \p{S} is the ASCII set $+<=>^`| -- without '~' (U+007E, Sm in Unicode). So for
// DEEPSEEK3 and the default pattern '~' is neither punctuation nor symbol.
bool is_punct_or_symbol_collapsed(const Text &t, size_t i) {
    return t.cpt[i] != '~' && (t.flags[i] & (kPunctuation | kSymbol));
}

bool is_ascii_punct(uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}
bool is_ascii_letter(uint32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// DEEPSEEK3 stage 3:
//   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
//    ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_deepseek3(const Text &t, size_t pos, size_t end) {
    const uint32_t c = t.cpt[pos];
    if (is_ascii_punct(c) && pos + 1 < end && is_ascii_letter(t.cpt[pos + 1])) {
        size_t p = pos + 1;
        while (p < end && is_ascii_letter(t.cpt[p])) ++p;
        return p - pos;
    }
    const auto letter_or_mark_run = [&](size_t from) { return run(t, from, end, kLetter | kMark); };
    if (!is_newline(c) && !is_letter(t.flags[pos]) && !is_punct_or_symbol_collapsed(t, pos) && pos + 1 < end) {
        if (size_t n = letter_or_mark_run(pos + 1)) return 1 + n;
    }
    if (size_t n = letter_or_mark_run(pos)) return n;
    const size_t lead = (c == ' ' && pos + 1 < end && is_punct_or_symbol_collapsed(t, pos + 1)) ? 1 : 0;
    if (lead || is_punct_or_symbol_collapsed(t, pos)) {
        size_t p = pos + lead;
        while (p < end && is_punct_or_symbol_collapsed(t, p)) ++p;
        while (p < end && is_newline(t.cpt[p])) ++p;
        return p - pos;
    }
    return match_space_tail(t, pos, end);
}

// [\p{P}\$\+<=>\^~\|]+  (default stage 1; \p{P} in llama.cpp's collapsed sense, which for ASCII is the Unicode one)
size_t match_punct_run(const Text &t, size_t pos, size_t end) {
    size_t p = pos;
    while (p < end) {
        const uint32_t c = t.cpt[p];
        const bool hit = (t.flags[p] & kPunctuation) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
                         c == '^' || c == '~' || c == '|';
        if (!hit) break;
        ++p;
    }
    return p - pos;
}

struct Stages {
    const Matcher *matchers;
    size_t count;
};

Stages stages_of(PreTokenizer pre) {
    static const Matcher kGpt2[] = {match_gpt2};
    static const Matcher kLlama3[] = {match_llama3<3>};
    static const Matcher kQwen2[] = {match_llama3<1>};
    static const Matcher kDeepseek3[] = {match_digits3, match_cjk, match_deepseek3};
    static const Matcher kGpt4o[] = {match_gpt4o};
    static const Matcher kDefault[] = {match_punct_run, match_gpt2, match_digits, match_ascii_digits3};
    switch (pre) {
        case PreTokenizer::kGpt2: return {kGpt2, 1};
        case PreTokenizer::kLlama3:
        case PreTokenizer::kGlm4: return {kLlama3, 1};  // GLM-4's tokenizer uses cl100k's pattern, as Llama 3
        case PreTokenizer::kGpt4o: return {kGpt4o, 1};
        case PreTokenizer::kQwen2: return {kQwen2, 1};
        case PreTokenizer::kDeepseek3: return {kDeepseek3, 3};
        case PreTokenizer::kDefault: break;
    }
    return {kDefault, 4};
}

// One stage: every piece is searched for matches left to right; matches and the unmatched stretches between
// them both become pieces (how llama.cpp turns a regex search into a split).
void apply_stage(Matcher match, const Text &t, const std::vector<uint32_t> &ends, std::vector<uint32_t> *out) {
    out->clear();
    size_t begin = 0;
    for (const uint32_t end : ends) {
        size_t pos = begin, unmatched = begin;
        while (pos < end) {
            const size_t n = match(t, pos, end);
            if (n == 0) {
                ++pos;
                continue;
            }
            if (pos > unmatched) out->push_back(static_cast<uint32_t>(pos));
            pos += n;
            out->push_back(static_cast<uint32_t>(pos));
            unmatched = pos;
        }
        if (unmatched < end) out->push_back(end);
        begin = end;
    }
}

}  // namespace

void pretokenize(PreTokenizer pre, std::string_view text, PretokenizeScratch *s, std::vector<std::string_view> *pieces) {
    if (text.empty()) return;
    s->cpts.clear();
    s->flags.clear();
    s->offsets.clear();
    // Decode; if any sequence was invalid or not in shortest form, BPE sees the re-encoded text (llama.cpp).
    bool recode = false;
    for (size_t at = 0; at < text.size();) {
        const size_t from = at;
        const uint32_t c = decode_utf8(text, &at);
        const size_t canonical = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        recode |= canonical != at - from;
        s->cpts.push_back(c);
        s->flags.push_back(flags(c));
    }
    std::string_view src = text;
    if (recode) {
        s->recoded.clear();
        for (uint32_t c : s->cpts) append_utf8(&s->recoded, c);
        src = s->recoded;
    }
    for (size_t at = 0; at < src.size(); at += sequence_length(static_cast<uint8_t>(src[at])))
        s->offsets.push_back(static_cast<uint32_t>(at));
    s->offsets.push_back(static_cast<uint32_t>(src.size()));

    const Text t{s->cpts.data(), s->flags.data()};
    s->ends.assign(1, static_cast<uint32_t>(s->cpts.size()));
    const Stages stages = stages_of(pre);
    for (size_t i = 0; i < stages.count; ++i) {
        apply_stage(stages.matchers[i], t, s->ends, &s->next_ends);
        s->ends.swap(s->next_ends);
    }
    uint32_t begin = 0;
    for (const uint32_t end : s->ends) {
        pieces->emplace_back(src.substr(s->offsets[begin], s->offsets[end] - s->offsets[begin]));
        begin = end;
    }
}

}  // namespace kt::tokenizer
