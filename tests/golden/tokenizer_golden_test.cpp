// Golden tokenization: shared/testdata/tokenizer holds five real vocabularies (vocabulary-only GGUFs) and the ids
// llama.cpp produced for 61 texts, each with special-token parsing on and off (see its README). For every entry kt
// must produce exactly those ids, and where `roundtrip` is true detokenizing the ids (without the added BOS) must
// give the text back byte for byte. Where it is false, llama.cpp's `detok` string is matched when kt can (counted
// and printed, not required).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/json.h"
#include "mem/mapped_file.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"
#include "support/test_support.h"

namespace {

struct Golden {
    std::unique_ptr<kt::gguf::File> file;
    std::unique_ptr<kt::tokenizer::Tokenizer> tokenizer;
    kt::json::Value entries;
    double load_ms = 0;
};

Golden load(const std::string &name) {
    Golden g;
    const std::string path = kt::test::testdata_path("tokenizer/" + name + ".gguf");
    kt::mem::MappedFile bytes;
    REQUIRE(kt::mem::MappedFile::open(path, true, nullptr, &bytes).is_ok());
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(kt::gguf::File::parse(std::move(bytes), path, &g.file).is_ok());
    kt::Status s = kt::tokenizer::Tokenizer::create(*g.file, &g.tokenizer);
    INFO(s.message());
    REQUIRE(s.is_ok());
    g.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const std::vector<uint8_t> json = kt::test::read_file(kt::test::testdata_path("tokenizer/" + name + ".expected.json"));
    REQUIRE(kt::json::parse(std::string_view(reinterpret_cast<const char *>(json.data()), json.size()), &g.entries).is_ok());
    REQUIRE(g.entries.items().size() == 122);
    return g;
}

std::string show(const std::vector<int32_t> &ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
    return s + "]";
}

void check_vocabulary(const std::string &name) {
    const Golden g = load(name);
    const kt::tokenizer::Tokenizer &tok = *g.tokenizer;
    int ids_ok = 0, roundtrip_required = 0, roundtrip_ok = 0, detok_extra = 0, detok_extra_ok = 0;
    for (size_t e = 0; e < g.entries.items().size(); ++e) {
        const kt::json::Value &entry = g.entries.items()[e];
        const std::string &text = entry.find("text")->as_string();
        const bool parse_special = entry.find("parse_special")->as_bool();
        const bool add_bos = entry.find("add_bos")->as_bool();
        std::vector<int32_t> expected;
        for (const auto &id : entry.find("ids")->items()) expected.push_back(static_cast<int32_t>(id.as_int()));
        REQUIRE(add_bos == tok.vocab().add_bos());

        std::vector<int32_t> got;
        REQUIRE(tok.tokenize(text, true, parse_special, &got).is_ok());
        INFO(name << " entry " << e << " parse_special=" << parse_special << " text: " << text);
        CHECK(show(got) == show(expected));
        ids_ok += got == expected;

        const std::vector<int32_t> body(expected.begin() + (add_bos ? 1 : 0), expected.end());
        std::string detok;
        REQUIRE(tok.detokenize(body.data(), body.size(), false, true, &detok).is_ok());
        // Streaming gives the same bytes, in chunks that never end inside a character.
        kt::tokenizer::DetokenizeStream stream(tok, true);
        std::string streamed, pieces;
        for (size_t i = 0; i < body.size(); ++i) {
            std::string chunk;
            REQUIRE(stream.push(body[i], &chunk).is_ok());
            CHECK(kt::tokenizer::unicode::complete_prefix_length(chunk) == chunk.size());
            streamed += chunk;
            std::string_view piece;
            REQUIRE(tok.token_to_piece(body[i], true, i == 0 && tok.vocab().add_space_prefix(), &piece).is_ok());
            pieces += piece;
        }
        stream.flush(&streamed);
        CHECK(streamed == pieces);
        if (!tok.vocab().clean_spaces()) CHECK(streamed == detok);

        if (entry.find("roundtrip")->as_bool()) {
            ++roundtrip_required;
            CHECK(detok == text);
            roundtrip_ok += detok == text;
        } else {
            ++detok_extra;
            detok_extra_ok += detok == entry.find("detok")->as_string();
        }
    }
    std::printf("%-12s ids %d/122, roundtrip %d/%d, llama.cpp detok also matched on %d/%d non-roundtrip entries; "
                "vocabulary load %.1f ms\n",
                name.c_str(), ids_ok, roundtrip_ok, roundtrip_required, detok_extra_ok, detok_extra, g.load_ms);
}

// Random mixed-script text (valid UTF-8 from a pool of ASCII, accented Latin, Cyrillic, Arabic, Devanagari, CJK,
// kana, Hangul, combining marks, emoji and whitespace): every id lies in the vocabulary and, where the vocabulary
// does not clean up spaces, detokenizing gives the text back.
void check_random_roundtrip(const std::string &name) {
    const Golden g = load(name);
    const kt::tokenizer::Tokenizer &tok = *g.tokenizer;
    const uint32_t pool[] = {'a', 'Z', 'q', '0', '7', ' ', ' ', ' ', '\n', '\t', '.', ',', '\'', '"', '!', '?', '-', '_', '(', '{',
                             '~', '$', 0xE9, 0xF1, 0xDF, 0x0430, 0x044F, 0x0627, 0x0644, 0x0928, 0x093F, 0x4E00, 0x5B57,
                             0x3002, 0x3042, 0x30AB, 0xAC00, 0xD55C, 0x0301, 0x200D, 0x1F600, 0x1F999, 0xFF11, 0x00A0, 0x3000};
    std::mt19937 rng(1234);
    for (int iter = 0; iter < 300; ++iter) {
        std::string text;
        const int n = static_cast<int>(rng() % 40);
        for (int i = 0; i < n; ++i) kt::tokenizer::unicode::append_utf8(&text, pool[rng() % (sizeof pool / sizeof pool[0])]);
        std::vector<int32_t> ids;
        REQUIRE(tok.tokenize(text, false, true, &ids).is_ok());
        for (int32_t id : ids) REQUIRE(tok.vocab().valid(id));
        std::string back;
        REQUIRE(tok.detokenize(ids.data(), ids.size(), false, true, &back).is_ok());
        INFO(name << ": " << text);
        if (!tok.vocab().clean_spaces()) CHECK(back == text);
    }
}

}  // namespace

TEST_CASE("golden tokenizer: random mixed-script text round-trips") {
    for (const char *name : {"qwen3", "llama3", "deepseek-v3", "llama2-spm", "mistral-spm"}) check_random_roundtrip(name);
}

TEST_CASE("golden tokenizer: qwen3 (BPE, qwen2 pre-tokenizer)") { check_vocabulary("qwen3"); }
TEST_CASE("golden tokenizer: llama3 (BPE, llama-bpe pre-tokenizer)") { check_vocabulary("llama3"); }
TEST_CASE("golden tokenizer: deepseek-v3 (BPE, deepseek-v3 pre-tokenizer)") { check_vocabulary("deepseek-v3"); }
TEST_CASE("golden tokenizer: llama2 (SentencePiece)") { check_vocabulary("llama2-spm"); }
TEST_CASE("golden tokenizer: mistral (SentencePiece)") { check_vocabulary("mistral-spm"); }
