// The tokenizer on small hand-made vocabularies (merge order, scores, special tokens, byte fallback,
// detokenization, streaming) and the malformed-vocabulary corpus: every broken vocabulary is rejected with a
// status whose message names the key and, for arrays, the index.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

using namespace kt;
using gguf::Value;
using tokenizer::Tokenizer;

namespace {

// A GGUF held in memory for the File that views it.
struct Gguf {
    std::vector<uint8_t> bytes;
    std::unique_ptr<gguf::File> file;
};

Status build(gguf::Writer &w, Gguf *g) {
    KT_TRY(w.write_buffer(&g->bytes));
    return gguf::File::parse(mem::MappedFile::borrow(g->bytes.data(), g->bytes.size()), "test.gguf", &g->file);
}

// Byte-level text of a string (what a BPE vocabulary stores): every byte as its mapped character.
std::string mapped(const std::string &s) {
    std::string out;
    for (char c : s) tokenizer::unicode::append_utf8(&out, tokenizer::unicode::byte_to_code_point(static_cast<uint8_t>(c)));
    return out;
}

// A small byte-level BPE vocabulary: all 256 byte characters, then merged tokens, then specials.
struct BpeSpec {
    std::vector<std::string> extra_tokens;  // raw text (mapped automatically)
    std::vector<std::string> merges;        // raw "left right" (mapped automatically)
    std::vector<std::pair<std::string, int32_t>> specials;  // text (unmapped), type
    std::string pre = "llama-bpe";
};

gguf::Writer bpe_writer(const BpeSpec &spec) {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(mapped(std::string(1, static_cast<char>(b))));
        types.push_back(1);
    }
    for (const auto &t : spec.extra_tokens) {
        tokens.push_back(mapped(t));
        types.push_back(1);
    }
    for (const auto &[t, type] : spec.specials) {
        tokens.push_back(t);
        types.push_back(type);
    }
    std::vector<std::string> merges;
    for (const auto &m : spec.merges) {
        const size_t sp = m.find(' ', 1);
        merges.push_back(mapped(m.substr(0, sp)) + " " + mapped(m.substr(sp + 1)));
    }
    gguf::Writer w;
    w.add("general.architecture", Value::str("llama"));
    w.add("tokenizer.ggml.model", Value::str("gpt2"));
    w.add("tokenizer.ggml.pre", Value::str(spec.pre));
    w.add("tokenizer.ggml.tokens", Value::array_str(tokens));
    w.add("tokenizer.ggml.token_type", Value::array_i32(types));
    w.add("tokenizer.ggml.merges", Value::array_str(merges));
    w.add("tokenizer.ggml.add_bos_token", Value::boolean(false));
    return w;
}

std::unique_ptr<Tokenizer> make(gguf::Writer &w, Gguf *g) {
    REQUIRE(build(w, g).is_ok());
    std::unique_ptr<Tokenizer> t;
    Status s = Tokenizer::create(*g->file, &t);
    INFO(s.message());
    REQUIRE(s.is_ok());
    return t;
}

std::vector<int32_t> ids(const Tokenizer &t, const std::string &text, bool parse_special = true, bool add_special = true) {
    std::vector<int32_t> out;
    REQUIRE(t.tokenize(text, add_special, parse_special, &out).is_ok());
    return out;
}

std::string detok(const Tokenizer &t, const std::vector<int32_t> &v, bool unparse_special = true) {
    std::string out;
    REQUIRE(t.detokenize(v.data(), v.size(), false, unparse_special, &out).is_ok());
    return out;
}

using I = std::vector<int32_t>;

}  // namespace

TEST_CASE("BPE merges by rank, leftmost first among equal ranks") {
    BpeSpec spec;
    spec.extra_tokens = {"ab", "bc", "abc", "aa"};  // ids 256..259
    spec.merges = {"b c", "a b", "a bc", "a a"};    // "b c" outranks "a b": abc = a + bc
    Gguf g;
    auto w = bpe_writer(spec);
    auto t = make(w, &g);
    CHECK(ids(*t, "abc") == I{258});
    CHECK(ids(*t, "ab") == I{256});
    CHECK(ids(*t, "aaa") == I{259, 'a'});  // the leftmost pair merges first
    CHECK(ids(*t, "aaaa") == I{259, 259});
    CHECK(detok(*t, I{258, 259}) == "abcaa");
}

TEST_CASE("BPE: a merge result that is not a token falls back to its bytes") {
    BpeSpec spec;
    spec.extra_tokens = {"xy"};
    spec.merges = {"x y", "xy z"};  // "xyz" is no token
    Gguf g;
    auto w = bpe_writer(spec);
    auto t = make(w, &g);
    CHECK(ids(*t, "xyz") == I{'x', 'y', 'z'});
}

TEST_CASE("LLAMA3 ignore_merges emits a whole pre-token that is a token") {
    BpeSpec spec;
    spec.extra_tokens = {"hello", "he", "ll"};  // "hello" cannot be reached by these merges
    spec.merges = {"h e", "l l"};
    Gguf g;
    auto w = bpe_writer(spec);
    auto t = make(w, &g);
    CHECK(ids(*t, "hello") == I{256});
    CHECK(ids(*t, "hell") == I{257, 258});
    spec.pre = "qwen2";  // no ignore_merges there
    Gguf g2;
    auto w2 = bpe_writer(spec);
    auto t2 = make(w2, &g2);
    CHECK(ids(*t2, "hello") == I{257, 258, 'o'});
}

TEST_CASE("special tokens: CONTROL only with parse_special, USER_DEFINED always, longest first") {
    BpeSpec spec;
    spec.specials = {{"<|s|>", 3}, {"<|s|>x", 3}, {"<think>", 4}};  // ids 256, 257, 258
    Gguf g;
    auto w = bpe_writer(spec);
    auto t = make(w, &g);
    CHECK(ids(*t, "a<|s|>b") == I{'a', 256, 'b'});
    CHECK(ids(*t, "<|s|>xy") == I{257, 'y'});  // the longer token wins
    CHECK(ids(*t, "<think>a") == I{258, 'a'});
    CHECK(ids(*t, "<think>a", false) == I{258, 'a'});
    CHECK(ids(*t, "<|s|>", false) == I{'<', '|', 's', '|', '>'});
    CHECK(ids(*t, "") == I{});
    // CONTROL tokens render only when asked; USER_DEFINED always.
    CHECK(detok(*t, I{256, 'a', 258}, true) == "<|s|>a<think>");
    CHECK(detok(*t, I{256, 'a', 258}, false) == "a<think>");
}

TEST_CASE("tokens recognised by text become CONTROL and end generation, as in llama.cpp") {
    BpeSpec spec;
    spec.specials = {{"<|im_end|>", 1}, {"</s>", 1}};  // stored as NORMAL
    Gguf g;
    auto w = bpe_writer(spec);
    auto t = make(w, &g);
    CHECK(t->vocab().type(256) == tokenizer::TokenType::kControl);
    CHECK(t->vocab().is_eog(256));
    CHECK(t->vocab().is_eog(257));
    CHECK(t->vocab().eot() == 256);
    CHECK(ids(*t, "a</s>") == I{'a', 257});
    CHECK(ids(*t, "a</s>", false) == I{'a', '<', '/', 's', '>'});
}

TEST_CASE("clean_spaces: llama-bpe detokenization tidies spaces like Hugging Face") {
    BpeSpec spec;
    Gguf g;
    auto w = bpe_writer(spec);
    auto t = make(w, &g);
    const auto round = [&](const std::string &s) { return detok(*t, ids(*t, s)); };
    CHECK(round("a , b . c ? d !") == "a, b. c? d!");
    CHECK(round("it 's I 'm we 're you 've") == "it's I'm we're you've");
    CHECK(round("do n't I 'd we 'll") == "do n't I 'd we 'll");
    CHECK(round("rock ' n") == "rock'n");
    spec.pre = "qwen2";  // no clean-up there
    Gguf g2;
    auto w2 = bpe_writer(spec);
    auto t2 = make(w2, &g2);
    CHECK(detok(*t2, ids(*t2, "a , b")) == "a , b");
}

namespace {

// A small SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces with scores.
gguf::Writer spm_writer(const std::vector<std::pair<std::string, float>> &pieces, bool byte_tokens = true) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<int32_t> types = {2, 3, 3};
    if (byte_tokens) {
        for (int b = 0; b < 256; ++b) {
            tokens.push_back(format("<0x%02X>", b));
            scores.push_back(0);
            types.push_back(6);
        }
    }
    for (const auto &[p, s] : pieces) {
        tokens.push_back(p);
        scores.push_back(s);
        types.push_back(1);
    }
    gguf::Writer w;
    w.add("general.architecture", Value::str("llama"));
    w.add("tokenizer.ggml.model", Value::str("llama"));
    w.add("tokenizer.ggml.tokens", Value::array_str(tokens));
    w.add("tokenizer.ggml.scores", Value::array_f32(scores));
    w.add("tokenizer.ggml.token_type", Value::array_i32(types));
    return w;
}

}  // namespace

TEST_CASE("SentencePiece merges by score, adds the space prefix and falls back to bytes") {
    const std::string sp = "\xe2\x96\x81";  // ▁
    // ids: 259 ▁, 260 a, 261 b, 262 ab, 263 ▁a, 264 ▁ab
    Gguf g;
    auto w = spm_writer({{sp, -1}, {"a", -2}, {"b", -3}, {"ab", -5}, {sp + "a", -4}, {sp + "ab", -6}});
    auto t = make(w, &g);
    CHECK(t->vocab().add_bos());
    // "▁ab": ▁a (-4) beats ab (-5); then ▁a + b = ▁ab.
    CHECK(ids(*t, "ab") == I{1, 264});
    CHECK(ids(*t, "ab", true, false) == I{264});
    CHECK(ids(*t, "b a") == I{1, 259, 261, 263});
    // é has no piece: its two bytes become <0xC3> <0xA9> (ids 3 + byte).
    CHECK(ids(*t, "\xc3\xa9", true, false) == I{259, 3 + 0xC3, 3 + 0xA9});
    // After a special token the text gets a space prefix again.
    CHECK(ids(*t, "a</s>a", true, false) == I{263, 2, 263});
    // Detokenization drops the first space and renders byte tokens as bytes.
    CHECK(detok(*t, I{264, 259, 3 + 0xC3, 3 + 0xA9}) == "ab \xc3\xa9");
    CHECK(detok(*t, I{2, 263}) == "</s> a");
}

TEST_CASE("SentencePiece without byte tokens uses the unknown token") {
    Gguf g;
    auto w = spm_writer({{"\xe2\x96\x81", -1}, {"a", -2}}, false);
    auto t = make(w, &g);
    CHECK(ids(*t, "a\xc3\xa9", true, false) == I{3, 4, 0, 0});
}

TEST_CASE("streaming detokenization holds back split characters") {
    Gguf g;
    auto w = spm_writer({{"\xe2\x96\x81", -1}, {"a", -2}});
    auto t = make(w, &g);
    tokenizer::DetokenizeStream stream(*t, true);
    std::string out;
    REQUIRE(stream.push(260, &out).is_ok());  // "a"
    CHECK(out == "a");
    for (int b : {0xF0, 0x9F, 0xA6}) {
        REQUIRE(stream.push(3 + b, &out).is_ok());
        CHECK(out == "a");
        CHECK(stream.pending() > 0);
    }
    REQUIRE(stream.push(3 + 0x99, &out).is_ok());
    CHECK(out == "a\xf0\x9f\xa6\x99");  // 🦙 arrives whole
    REQUIRE(stream.push(3 + 0xE4, &out).is_ok());
    stream.flush(&out);                   // an unfinished character is released at the end
    CHECK(out == "a\xf0\x9f\xa6\x99\xe4");
    CHECK(!stream.push(100000, &out).is_ok());
}

// ------------------------------------------------------------------------------------------------------------
// Malformed vocabularies

namespace {

struct Case {
    const char *name;
    kt_status code;
    std::vector<std::string> message_parts;  // each must appear in the message
    void (*mutate)(std::vector<std::pair<std::string, Value>> *kvs);
};

void set(std::vector<std::pair<std::string, Value>> *kvs, const std::string &key, Value v) {
    for (auto &kv : *kvs)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    kvs->emplace_back(key, std::move(v));
}

void erase(std::vector<std::pair<std::string, Value>> *kvs, const std::string &key) {
    for (auto it = kvs->begin(); it != kvs->end(); ++it)
        if (it->first == key) {
            kvs->erase(it);
            return;
        }
}

std::vector<std::pair<std::string, Value>> valid_bpe() {
    return {
        {"general.architecture", Value::str("llama")},
        {"tokenizer.ggml.model", Value::str("gpt2")},
        {"tokenizer.ggml.pre", Value::str("qwen2")},
        {"tokenizer.ggml.tokens", Value::array_str({"a", "b", "ab", "<0x41>", "<|end|>"})},
        {"tokenizer.ggml.token_type", Value::array_i32({1, 1, 1, 1, 3})},
        {"tokenizer.ggml.merges", Value::array_str({"a b"})},
        {"tokenizer.ggml.bos_token_id", Value::u32(4)},
        {"tokenizer.ggml.eos_token_id", Value::u32(4)},
    };
}

const Case kCases[] = {
    {"no tokenizer", KT_STATUS_NOT_FOUND, {"tokenizer.ggml.model"}, [](auto *kvs) { erase(kvs, "tokenizer.ggml.model"); }},
    {"model not a string", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.model", "STRING"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.model", Value::u32(2)); }},
    {"unknown model", KT_STATUS_UNSUPPORTED, {"tokenizer.ggml.model", "bert"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.model", Value::str("bert")); }},
    {"unknown pre-tokenizer", KT_STATUS_UNSUPPORTED, {"tokenizer.ggml.pre", "starcoder"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.pre", Value::str("starcoder")); }},
    {"tokens missing", KT_STATUS_NOT_FOUND, {"tokenizer.ggml.tokens"}, [](auto *kvs) { erase(kvs, "tokenizer.ggml.tokens"); }},
    {"tokens not strings", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.tokens", "INT32"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.tokens", Value::array_i32({1, 2})); }},
    {"tokens a scalar", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.tokens", "found STRING"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.tokens", Value::str("a")); }},
    {"tokens empty", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.tokens", "empty"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.tokens", Value::array_str({})); }},
    {"types shorter than tokens", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.token_type", "4 elements", "5"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.token_type", Value::array_i32({1, 1, 1, 1})); }},
    {"types of the wrong element type", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.token_type", "UINT8"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.token_type", Value::array(gguf::ValueType::kUint8, {1, 1, 1, 1, 3})); }},
    {"type value out of range", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.token_type[2]", "7"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.token_type", Value::array_i32({1, 1, 7, 1, 3})); }},
    {"negative type value", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.token_type[0]", "-1"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.token_type", Value::array_i32({-1, 1, 1, 1, 3})); }},
    {"scores longer than tokens", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.scores", "6 elements"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.scores", Value::array_f32({0, 0, 0, 0, 0, 0})); }},
    {"scores as f64", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.scores", "FLOAT64"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.scores", Value::array(gguf::ValueType::kFloat64, std::vector<uint8_t>(40))); }},
    {"bos beyond the vocabulary", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.bos_token_id", "5", "outside"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.bos_token_id", Value::u32(5)); }},
    {"eos huge", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.eos_token_id", "4294967295"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.eos_token_id", Value::u32(0xFFFFFFFFu)); }},
    {"negative unknown id", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.unknown_token_id", "-1"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.unknown_token_id", Value::i32(-1)); }},
    {"padding id a string", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.padding_token_id", "integer"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.padding_token_id", Value::str("4")); }},
    {"fim id beyond the vocabulary", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.fim_pre_token_id", "99"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.fim_pre_token_id", Value::u32(99)); }},
    {"merges missing", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.merges", "required"},
     [](auto *kvs) { erase(kvs, "tokenizer.ggml.merges"); }},
    {"merges not strings", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.merges", "INT32"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.merges", Value::array_i32({1})); }},
    {"merge without a space", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.merges[1]", "'ab'"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.merges", Value::array_str({"a b", "ab"})); }},
    {"merge with an empty right side", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.merges[0]"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.merges", Value::array_str({"a "})); }},
    {"empty merge", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.merges[0]"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.merges", Value::array_str({""})); }},
    {"byte token with a bad text", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.tokens[3]", "<0x-1>"},
     [](auto *kvs) {
         set(kvs, "tokenizer.ggml.tokens", Value::array_str({"a", "b", "ab", "<0x-1>", "<|end|>"}));
         set(kvs, "tokenizer.ggml.token_type", Value::array_i32({1, 1, 1, 6, 3}));
     }},
    {"byte token too long", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.tokens[3]", "<0x411>"},
     [](auto *kvs) {
         set(kvs, "tokenizer.ggml.tokens", Value::array_str({"a", "b", "ab", "<0x411>", "<|end|>"}));
         set(kvs, "tokenizer.ggml.token_type", Value::array_i32({1, 1, 1, 6, 3}));
     }},
    {"add_bos not a bool", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.add_bos_token", "BOOL"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.add_bos_token", Value::u8(1)); }},
    {"add_bos without a BOS", KT_STATUS_INVALID_FILE, {"add_bos_token", "no BOS"},
     [](auto *kvs) {
         erase(kvs, "tokenizer.ggml.bos_token_id");
         set(kvs, "tokenizer.ggml.add_bos_token", Value::boolean(true));
     }},
    {"pre not a string", KT_STATUS_INVALID_FILE, {"tokenizer.ggml.pre", "STRING"},
     [](auto *kvs) { set(kvs, "tokenizer.ggml.pre", Value::array_str({"qwen2"})); }},
    {"chat template not a string", KT_STATUS_INVALID_FILE, {"tokenizer.chat_template", "STRING"},
     [](auto *kvs) { set(kvs, "tokenizer.chat_template", Value::u32(1)); }},
    {"named chat template not a string", KT_STATUS_INVALID_FILE, {"tokenizer.chat_template.tool_use", "STRING"},
     [](auto *kvs) { set(kvs, "tokenizer.chat_template.tool_use", Value::boolean(true)); }},
};

}  // namespace

TEST_CASE("malformed vocabularies are rejected with the key and index named") {
    {
        Gguf g;
        gguf::Writer w;
        for (auto &kv : valid_bpe()) w.add(kv.first, kv.second);
        auto t = make(w, &g);  // the unmutated vocabulary is fine
        CHECK(ids(*t, "ab") == I{2});
    }
    for (const Case &c : kCases) {
        INFO("case: " << c.name);
        auto kvs = valid_bpe();
        c.mutate(&kvs);
        gguf::Writer w;
        for (auto &kv : kvs) w.add(kv.first, kv.second);
        Gguf g;
        REQUIRE(build(w, &g).is_ok());
        std::unique_ptr<Tokenizer> t;
        const Status s = Tokenizer::create(*g.file, &t);
        INFO("message: " << s.message());
        CHECK(s.code() == c.code);
        CHECK(t == nullptr);
        for (const std::string &part : c.message_parts) CHECK(s.message().find(part) != std::string::npos);
    }
}

TEST_CASE("SentencePiece defaults and a malformed SentencePiece vocabulary") {
    Gguf g;
    auto w = spm_writer({{"\xe2\x96\x81", -1}});
    auto t = make(w, &g);
    CHECK(t->vocab().bos() == 1);
    CHECK(t->vocab().eos() == 2);
    CHECK(t->vocab().unk() == 0);
    CHECK(t->vocab().add_space_prefix());

    gguf::Writer bad;
    bad.add("tokenizer.ggml.model", Value::str("llama"));
    bad.add("tokenizer.ggml.tokens", Value::array_str({"<unk>", "<s>", "</s>", "a"}));
    bad.add("tokenizer.ggml.scores", Value::array_f32({0, 0, 0}));
    Gguf g2;
    REQUIRE(build(bad, &g2).is_ok());
    std::unique_ptr<Tokenizer> t2;
    const Status s = Tokenizer::create(*g2.file, &t2);
    CHECK(s.code() == KT_STATUS_INVALID_FILE);
    CHECK(s.message().find("tokenizer.ggml.scores has 3 elements but tokenizer.ggml.tokens has 4") != std::string::npos);
}
