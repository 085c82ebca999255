// Unicode classes, UTF-8 decoding, the byte-level mapping and the pre-tokenizer patterns. Expected splits are
// derived by hand from the patterns in reference/gguf-and-quants.md §4.3 (ordered alternation, greedy
// quantifiers, (?!\S) at the end of a piece).
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/tokenizer/pretokenize.h"
#include "model/tokenizer/unicode.h"

using namespace kt::tokenizer;
namespace u = kt::tokenizer::unicode;

TEST_CASE("unicode classes cover all of Unicode, not just ASCII") {
    CHECK(u::flags('A') == u::kLetter);
    CHECK(u::flags('5') == u::kNumber);
    CHECK(u::flags('$') == u::kSymbol);
    CHECK(u::flags('~') == u::kSymbol);
    CHECK(u::flags('!') == u::kPunctuation);
    CHECK(u::flags(' ') == (u::kSeparator | u::kWhitespace));
    CHECK(u::flags('\n') == (u::kControl | u::kWhitespace));
    CHECK(u::flags(0x01) == u::kControl);
    CHECK(u::flags(0xE9) == u::kLetter);                          // é
    CHECK(u::flags(0x0301) == u::kMark);                          // combining acute
    CHECK(u::flags(0x0663) == u::kNumber);                        // Arabic-Indic three
    CHECK(u::flags(0xFF11) == u::kNumber);                        // fullwidth one
    CHECK(u::flags(0x00B2) == u::kNumber);                        // superscript two (No)
    CHECK(u::flags(0x3002) == u::kPunctuation);                   // 。
    CHECK(u::flags(0x4E00) == u::kLetter);                        // 一 (CJK range, expanded from First/Last)
    CHECK(u::flags(0x9FFF) == u::kLetter);
    CHECK(u::flags(0xAC00) == u::kLetter);                        // 가 (Hangul syllables range)
    CHECK(u::flags(0x1F600) == u::kSymbol);                       // 😀
    CHECK(u::flags(0x200D) == u::kControl);                       // ZWJ (Cf)
    CHECK(u::flags(0x3000) == (u::kSeparator | u::kWhitespace));  // ideographic space
    CHECK(u::flags(0x0085) == (u::kControl | u::kWhitespace));    // NEL
    CHECK(u::flags(0x00A0) == (u::kSeparator | u::kWhitespace));  // NBSP
    CHECK(u::flags(0x200B) == u::kControl);                       // zero width space: Cf, not White_Space
    CHECK(u::flags(0x0378) == 0);                                 // unassigned
    CHECK(u::flags(0xE000) == u::kControl);                       // private use (Co)
    CHECK(u::flags(0x20000) == u::kLetter);                       // CJK extension B
    CHECK(u::flags(0x10FFFF) == 0);                               // noncharacter (Cn)
    CHECK(u::flags(0x110000) == 0);
    CHECK(u::flags(0xFFFFFFFF) == 0);
}

TEST_CASE("UTF-8 decoding is lenient like llama.cpp and never reads past the end") {
    const auto decode_all = [](const std::string &s) {
        std::vector<uint32_t> out;
        for (size_t at = 0; at < s.size();) out.push_back(u::decode_utf8(s, &at));
        return out;
    };
    CHECK(decode_all("a\xc3\xa9\xe4\xb8\x80\xf0\x9f\x98\x80") == std::vector<uint32_t>{'a', 0xE9, 0x4E00, 0x1F600});
    CHECK(decode_all("\x80") == std::vector<uint32_t>{0xFFFD});                 // lone continuation
    CHECK(decode_all("\xc3") == std::vector<uint32_t>{0xFFFD});                 // truncated at the end
    CHECK(decode_all("\xe4\xb8") == std::vector<uint32_t>{0xFFFD, 0xFFFD});     // truncated, byte by byte
    CHECK(decode_all("\xc3(") == std::vector<uint32_t>{0xFFFD, '('});           // bad continuation
    CHECK(decode_all("\xff\xfe") == std::vector<uint32_t>{0xFFFD, 0xFFFD});
    CHECK(decode_all("\xc0\x80") == std::vector<uint32_t>{0});                  // overlong accepted (llama.cpp)
    CHECK(decode_all("\xed\xa0\x80") == std::vector<uint32_t>{0xD800});         // surrogate accepted (llama.cpp)
    CHECK(decode_all("\xf4\x90\x80\x80") == std::vector<uint32_t>{0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD});  // > U+10FFFF
    std::string enc;
    for (uint32_t c : {0x24u, 0xA2u, 0x20ACu, 0x10348u}) u::append_utf8(&enc, c);
    CHECK(enc == "$\xc2\xa2\xe2\x82\xac\xf0\x90\x8d\x88");
}

TEST_CASE("complete_prefix_length holds back only a genuinely split character") {
    CHECK(u::complete_prefix_length("") == 0);
    CHECK(u::complete_prefix_length("abc") == 3);
    CHECK(u::complete_prefix_length("a\xe4") == 1);
    CHECK(u::complete_prefix_length("a\xe4\xb8") == 1);
    CHECK(u::complete_prefix_length("a\xe4\xb8\x80") == 4);
    CHECK(u::complete_prefix_length("a\xf0\x9f\x98") == 1);
    CHECK(u::complete_prefix_length("a\xf0\x9f\x98\x80") == 5);
    CHECK(u::complete_prefix_length("a\x80") == 2);          // a stray continuation byte never completes
    CHECK(u::complete_prefix_length("a\xff") == 2);          // nor does an invalid byte
    CHECK(u::complete_prefix_length("\x80\x80\x80\x80") == 4);
}

TEST_CASE("GPT-2 byte mapping is a bijection onto printable characters") {
    std::set<uint32_t> image;
    for (int b = 0; b < 256; ++b) {
        const uint32_t c = u::byte_to_code_point(static_cast<uint8_t>(b));
        image.insert(c);
        CHECK(u::unicode_to_byte(c) == b);
        CHECK((u::flags(c) & u::kWhitespace) == 0);
    }
    CHECK(image.size() == 256);
    CHECK(u::byte_to_code_point(' ') == 0x120);   // Ġ
    CHECK(u::byte_to_code_point('\n') == 0x10A);  // Ċ
    CHECK(u::byte_to_code_point('a') == 'a');
    CHECK(u::byte_to_code_point(0xAD) == 0x143);  // the soft hyphen is not kept
    CHECK(u::unicode_to_byte(0x4E00) == -1);
}

namespace {

std::vector<std::string> split(PreTokenizer pre, const std::string &text) {
    PretokenizeScratch scratch;
    std::vector<std::string_view> pieces;
    pretokenize(pre, text, &scratch, &pieces);
    std::vector<std::string> out(pieces.begin(), pieces.end());
    std::string joined;
    for (const auto &p : out) joined += p;
    if (joined != text) FAIL("pieces do not concatenate to the text");
    return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("LLAMA3 pre-tokenizer") {
    const auto p = PreTokenizer::kLlama3;
    CHECK(split(p, "Hello world") == V{"Hello", " world"});
    CHECK(split(p, "I'm HE'S we'LL") == V{"I", "'m", " HE", "'S", " we", "'LL"});
    CHECK(split(p, "12345") == V{"123", "45"});
    CHECK(split(p, "x1234y") == V{"x", "123", "4", "y"});
    CHECK(split(p, "  a") == V{" ", " a"});
    CHECK(split(p, "a  \n\nb") == V{"a", "  \n\n", "b"});
    CHECK(split(p, "a \n x") == V{"a", " \n", " x"});
    CHECK(split(p, "x   ") == V{"x", "   "});
    CHECK(split(p, "hi!!\n\nx") == V{"hi", "!!\n\n", "x"});
    CHECK(split(p, "a ...b") == V{"a", " ...", "b"});
    CHECK(split(p, "\t\tword") == V{"\t", "\tword"});
    CHECK(split(p, "\nword") == V{"\n", "word"});             // [^\r\n\p{L}\p{N}]? excludes the newline
    CHECK(split(p, "(word") == V{"(word"});
    CHECK(split(p, "3x") == V{"3", "x"});                     // a digit is no letter prefix
    CHECK(split(p, "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96") ==  // 你好，世
          V{"\xe4\xbd\xa0\xe5\xa5\xbd", "\xef\xbc\x8c\xe4\xb8\x96"});        // ，prefixes the next word
    CHECK(split(p, "").empty());
}

TEST_CASE("QWEN2 pre-tokenizer splits digits one by one") {
    CHECK(split(PreTokenizer::kQwen2, "12345 ab") == V{"1", "2", "3", "4", "5", " ab"});
    CHECK(split(PreTokenizer::kQwen2, "\xd9\xa1\xd9\xa2") == V{"\xd9\xa1", "\xd9\xa2"});  // Arabic-Indic digits
}

TEST_CASE("GPT2 pre-tokenizer") {
    const auto p = PreTokenizer::kGpt2;
    CHECK(split(p, "Hello world") == V{"Hello", " world"});
    CHECK(split(p, "I'M I'm") == V{"I", "'", "M", " I", "'m"});  // contractions are case-sensitive
    CHECK(split(p, "a\nb") == V{"a", "\n", "b"});                 // a lone space before a non-space: its own piece
    CHECK(split(p, "  x") == V{" ", " x"});
    CHECK(split(p, "x  ") == V{"x", "  "});
    CHECK(split(p, "12345") == V{"12345"});
    CHECK(split(p, " !?x") == V{" !?", "x"});
}

TEST_CASE("DEEPSEEK3 pre-tokenizer: digits, CJK runs, then the main pattern") {
    const auto p = PreTokenizer::kDeepseek3;
    CHECK(split(p, "abc1234567") == V{"abc", "123", "456", "7"});
    CHECK(split(p, "\xe4\xbd\xa0\xe5\xa5\xbdworld") == V{"\xe4\xbd\xa0\xe5\xa5\xbd", "world"});  // 你好world
    CHECK(split(p, "Hello, world!") == V{"Hello", ",", " world", "!"});
    CHECK(split(p, ".Net and _init") == V{".Net", " and", " _", "init"});
    CHECK(split(p, "e\xcc\x81t\xc3\xa9") == V{"e\xcc\x81t\xc3\xa9"});  // marks join letters
    // llama.cpp's collapsed \p{S} lacks '~': it is then matched by nothing and stands alone.
    CHECK(split(p, "a ~ b") == V{"a", " ", "~", " b"});
    CHECK(split(p, "a + b") == V{"a", " +", " b"});
}

// The splits below are derived by hand from the regex rules (pretokenize.cpp states them), not taken from
// llama.cpp's output: there is no llama.cpp on this machine to produce independent expected ids.
TEST_CASE("GLM4 pre-tokenizer: cl100k's pattern, as LLAMA3's") {
    const auto p = PreTokenizer::kGlm4;
    CHECK(split(p, "Hello world 1234!!\n") == V{"Hello", " world", " ", "123", "4", "!!\n"});
    CHECK(split(p, "I'm HE'S") == V{"I", "'m", " HE", "'S"});
    CHECK(split(p, "(x) \n\n y") == V{"(x", ")", " \n\n", " y"});
}

TEST_CASE("GPT4O pre-tokenizer (gpt-oss): case runs with contractions attached, 3-digit numbers, slashes") {
    const auto p = PreTokenizer::kGpt4o;
    CHECK(split(p, "Hello World") == V{"Hello", " World"});
    CHECK(split(p, "HELLOworld foo") == V{"HELLOworld", " foo"});  // U*L+: the capitals run into the lower case
    CHECK(split(p, "helloWORLD") == V{"hello", "WORLD"});           // L+ stops at capitals; U+ takes them
    CHECK(split(p, "don't stop") == V{"don't", " stop"});           // the contraction stays with its word
    CHECK(split(p, "I'M HERE") == V{"I'M", " HERE"});
    CHECK(split(p, "12345") == V{"123", "45"});
    CHECK(split(p, "a+b") == V{"a", "+b"});                         // any non-letter, non-digit char leads a word
    CHECK(split(p, "path/to\n/x") == V{"path", "/to", "\n", "/x"});
    CHECK(split(p, "x +/\n/") == V{"x", " +/\n/"});                // newlines and slashes end a symbol run
    CHECK(split(p, "  hi") == V{" ", " hi"});
    CHECK(split(p, "it'") == V{"it", "'"});                        // a lone apostrophe at the end: no contraction
    // llama.cpp's adaptation: non-ASCII letters count as both cases, so an accented capital stands alone before
    // ASCII capitals, and joins ASCII lower case.
    CHECK(split(p, "\xc3\x89" "COLE \xc3\xa9" "cole") == V{"\xc3\x89", "COLE", " \xc3\xa9" "cole"});
}

TEST_CASE("default BPE pre-tokenizer (missing or \"default\" tokenizer.ggml.pre)") {
    const auto p = PreTokenizer::kDefault;
    CHECK(split(p, "a+b=c") == V{"a", "+", "b", "=", "c"});
    CHECK(split(p, "12345") == V{"123", "45"});
    CHECK(split(p, "Hello world!") == V{"Hello", " world", "!"});
}

TEST_CASE("pre-tokenizers re-encode invalid UTF-8 as U+FFFD, as llama.cpp does") {
    PretokenizeScratch scratch;
    std::vector<std::string_view> pieces;
    pretokenize(PreTokenizer::kLlama3, "ab\xff\xc0\x80", &scratch, &pieces);
    CHECK(std::vector<std::string>(pieces.begin(), pieces.end()) == V{"ab", std::string("\xef\xbf\xbd\0", 4)});
}
