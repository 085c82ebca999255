// The tokenizer through the C ABI: vocabulary queries on the golden vocabularies, size negotiation of every
// buffer-filling call, streaming, argument errors, and concurrent first use of a shared model.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kt.h"
#include "support/test_support.h"

namespace {

struct Model {
    kt_model *m = nullptr;
    explicit Model(const std::string &vocab) {
        const std::string path = kt::test::testdata_path("tokenizer/" + vocab + ".gguf");
        kt_error err = {sizeof(kt_error), 0, {0}};
        const kt_status s = kt_model_load(path.c_str(), nullptr, &m, &err);
        INFO(err.message);
        REQUIRE(s == KT_STATUS_OK);
    }
    ~Model() { kt_model_free(m); }
};

std::vector<int32_t> tokenize(kt_model *m, const std::string &text, int32_t add_special = 1, int32_t parse_special = 1) {
    int64_t count = -1;
    const kt_status first = kt_tokenize(m, text.data(), text.size(), add_special, parse_special, nullptr, 0, &count);
    REQUIRE(first == (count == 0 ? KT_STATUS_OK : KT_STATUS_BUFFER_TOO_SMALL));
    std::vector<int32_t> ids(static_cast<size_t>(count));
    int64_t again = -1;
    REQUIRE(kt_tokenize(m, text.data(), text.size(), add_special, parse_special, ids.data(), count, &again) == KT_STATUS_OK);
    REQUIRE(again == count);
    return ids;
}

std::string text_of(kt_model *m, int32_t token) {
    const char *t = nullptr;
    uint64_t n = 0;
    REQUIRE(kt_token_text(m, token, &t, &n) == KT_STATUS_OK);
    REQUIRE(std::strlen(t) == n);
    return std::string(t, n);
}

}  // namespace

TEST_CASE("kt_vocab_get_info on the golden vocabularies") {
    struct Expect {
        const char *name;
        int32_t kind, n_tokens, bos, eos, eot, add_bos;
        const char *pre, *eot_text;
    };
    const Expect expects[] = {
        {"qwen3", KT_VOCAB_BPE, 151936, 151643, 151645, 151645, 0, "qwen2", "<|im_end|>"},
        {"llama3", KT_VOCAB_BPE, 128256, 128000, 128001, 128009, 1, "llama-bpe", "<|eot_id|>"},
        {"deepseek-v3", KT_VOCAB_BPE, 129280, 0, 1, KT_TOKEN_NONE, 1, "deepseek-v3", nullptr},
        {"llama2-spm", KT_VOCAB_SPM, 32000, 1, 2, KT_TOKEN_NONE, 1, "default", nullptr},
        {"mistral-spm", KT_VOCAB_SPM, 32000, 1, 2, KT_TOKEN_NONE, 1, "default", nullptr},
    };
    for (const Expect &e : expects) {
        INFO(e.name);
        Model model(e.name);
        kt_vocab_info info;
        std::memset(&info, 0xAB, sizeof info);
        info.struct_size = sizeof info;
        REQUIRE(kt_vocab_get_info(model.m, &info) == KT_STATUS_OK);
        CHECK(info.kind == e.kind);
        CHECK(info.n_tokens == e.n_tokens);
        CHECK(info.bos == e.bos);
        CHECK(info.eos == e.eos);
        CHECK(info.eot == e.eot);
        CHECK(info.add_bos == e.add_bos);
        CHECK(info.add_eos == 0);
        CHECK(info.add_space_prefix == (e.kind == KT_VOCAB_SPM));
        CHECK(std::string(info.pre) == e.pre);
        if (e.eot_text) CHECK(text_of(model.m, info.eot) == e.eot_text);
        int32_t eog = 0;
        REQUIRE(kt_token_is_eog(model.m, info.eos, &eog) == KT_STATUS_OK);
        CHECK(eog == 1);
    }
}

TEST_CASE("token queries: text, type, end of generation, lookup") {
    Model q("qwen3");
    int32_t think = -1, type = -1, eog = -1;
    REQUIRE(kt_token_find(q.m, "<think>", 7, &think) == KT_STATUS_OK);
    REQUIRE(kt_token_type(q.m, think, &type) == KT_STATUS_OK);
    CHECK(type == KT_TOKEN_TYPE_USER_DEFINED);
    REQUIRE(kt_token_type(q.m, 151644, &type) == KT_STATUS_OK);  // <|im_start|>
    CHECK(type == KT_TOKEN_TYPE_CONTROL);
    REQUIRE(kt_token_type(q.m, 128247, &type) == KT_STATUS_OK);  // "</s>": NORMAL in the file, an end marker by text
    CHECK(type == KT_TOKEN_TYPE_CONTROL);
    REQUIRE(kt_token_is_eog(q.m, 128247, &eog) == KT_STATUS_OK);
    CHECK(eog == 1);
    REQUIRE(kt_token_is_eog(q.m, 9707, &eog) == KT_STATUS_OK);
    CHECK(eog == 0);
    REQUIRE(kt_token_type(q.m, 151900, &type) == KT_STATUS_OK);  // [PAD151900]
    CHECK(type == KT_TOKEN_TYPE_UNUSED);
    CHECK(text_of(q.m, 1879) == "\xc4\xa0world");  // Ġworld
    int32_t id = -1;
    CHECK(kt_token_find(q.m, "no such token text", 18, &id) == KT_STATUS_NOT_FOUND);
    CHECK(std::string(kt_model_last_error(q.m)).find("no such token text") != std::string::npos);
    CHECK(kt_token_type(q.m, 151936, &type) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_token_type(q.m, -1, &type) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(kt_model_last_error(q.m)).find("-1") != std::string::npos);
    const char *t = nullptr;
    CHECK(kt_token_text(q.m, 1 << 30, &t, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_token_text(q.m, 0, nullptr, nullptr) == KT_STATUS_INVALID_ARGUMENT);

    Model s("llama2-spm");
    REQUIRE(kt_token_type(s.m, 3, &type) == KT_STATUS_OK);  // <0x00>
    CHECK(type == KT_TOKEN_TYPE_BYTE);
    REQUIRE(kt_token_type(s.m, 0, &type) == KT_STATUS_OK);
    CHECK(type == KT_TOKEN_TYPE_UNKNOWN);
}

TEST_CASE("kt_tokenize: special handling and size negotiation") {
    Model q("qwen3");
    CHECK(tokenize(q.m, "Hello world") == std::vector<int32_t>{9707, 1879});
    CHECK(tokenize(q.m, "<|im_start|>") == std::vector<int32_t>{151644});
    CHECK(tokenize(q.m, "<|im_start|>", 1, 0).size() > 1);
    CHECK(tokenize(q.m, "", 1).empty());
    Model l("llama3");
    CHECK(tokenize(l.m, "hi") == std::vector<int32_t>{128000, 6151});
    CHECK(tokenize(l.m, "hi", 0) == std::vector<int32_t>{6151});
    CHECK(tokenize(l.m, "", 1) == std::vector<int32_t>{128000});

    // Too small: nothing written, the count reported.
    int32_t buf[2] = {-7, -7};
    int64_t count = -1;
    CHECK(kt_tokenize(l.m, "hi there", 8, 1, 1, buf, 2, &count) == KT_STATUS_BUFFER_TOO_SMALL);
    CHECK(count == 3);
    CHECK(buf[0] == -7);
    CHECK(std::string(kt_model_last_error(l.m)).find("3 tokens") != std::string::npos);
    // Text with NUL bytes and invalid UTF-8 is fine: it has a length.
    const std::string odd("a\0b\xff\xfe", 5);
    CHECK(!tokenize(q.m, odd, 0).empty());
    // Argument errors.
    CHECK(kt_tokenize(nullptr, "a", 1, 1, 1, buf, 2, &count) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_tokenize(q.m, nullptr, 1, 1, 1, buf, 2, &count) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_tokenize(q.m, nullptr, 0, 0, 1, buf, 2, &count) == KT_STATUS_OK);
    CHECK(kt_tokenize(q.m, "a", 1, 1, 1, buf, 2, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_tokenize(q.m, "a", 1, 1, 1, buf, -1, &count) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_tokenize(q.m, "a", 1, 1, 1, nullptr, 2, &count) == KT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("kt_token_to_piece and kt_detokenize negotiate sizes and never overflow") {
    Model s("llama2-spm");
    const std::vector<int32_t> ids = tokenize(s.m, "Hello world");  // <s> ▁Hello ▁world
    REQUIRE(ids.size() == 3);
    char piece[16];
    int64_t len = -1;
    REQUIRE(kt_token_to_piece(s.m, ids[1], 0, 0, piece, sizeof piece, &len) == KT_STATUS_OK);
    CHECK(std::string(piece) == " Hello");
    CHECK(len == 6);
    REQUIRE(kt_token_to_piece(s.m, ids[1], 0, 1, piece, sizeof piece, &len) == KT_STATUS_OK);
    CHECK(std::string(piece) == "Hello");
    REQUIRE(kt_token_to_piece(s.m, 1, 0, 0, piece, sizeof piece, &len) == KT_STATUS_OK);  // <s> hidden
    CHECK(len == 0);
    REQUIRE(kt_token_to_piece(s.m, 1, 1, 0, piece, sizeof piece, &len) == KT_STATUS_OK);
    CHECK(std::string(piece) == "<s>");
    // Exactly len + 1 fits; len does not (the NUL needs room). The canary after the buffer is untouched.
    char small[8];
    std::memset(small, 'x', sizeof small);
    CHECK(kt_token_to_piece(s.m, ids[1], 0, 0, small, 6, &len) == KT_STATUS_BUFFER_TOO_SMALL);
    CHECK(len == 6);
    CHECK(small[0] == 'x');
    CHECK(kt_token_to_piece(s.m, ids[1], 0, 0, small, 7, &len) == KT_STATUS_OK);
    CHECK(std::string(small) == " Hello");
    CHECK(small[7] == 'x');
    REQUIRE(kt_token_to_piece(s.m, 3 + 0xF0, 1, 0, piece, sizeof piece, &len) == KT_STATUS_OK);  // <0xF0>
    CHECK(len == 1);
    CHECK(static_cast<unsigned char>(piece[0]) == 0xF0);
    CHECK(kt_token_to_piece(s.m, 32000, 1, 0, piece, sizeof piece, &len) == KT_STATUS_INVALID_ARGUMENT);

    char text[64];
    // llama.cpp strips the space prefix from the first token only; a leading BOS (hidden, or removed with
    // remove_special) is that first token, so the space of "▁Hello" stays.
    REQUIRE(kt_detokenize(s.m, ids.data(), 3, 0, 0, text, sizeof text, &len) == KT_STATUS_OK);
    CHECK(std::string(text) == " Hello world");
    REQUIRE(kt_detokenize(s.m, ids.data(), 3, 1, 0, text, sizeof text, &len) == KT_STATUS_OK);
    CHECK(std::string(text) == " Hello world");
    REQUIRE(kt_detokenize(s.m, ids.data() + 1, 2, 0, 0, text, sizeof text, &len) == KT_STATUS_OK);
    CHECK(std::string(text) == "Hello world");
    REQUIRE(kt_detokenize(s.m, ids.data(), 3, 0, 1, text, sizeof text, &len) == KT_STATUS_OK);
    CHECK(std::string(text) == "<s> Hello world");
    CHECK(kt_detokenize(s.m, ids.data(), 3, 0, 1, text, 15, &len) == KT_STATUS_BUFFER_TOO_SMALL);
    CHECK(len == 15);
    REQUIRE(kt_detokenize(s.m, ids.data(), 0, 0, 1, text, 1, &len) == KT_STATUS_OK);
    CHECK(len == 0);
    const int32_t bad[] = {1, 99999};
    CHECK(kt_detokenize(s.m, bad, 2, 0, 1, text, sizeof text, &len) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(kt_model_last_error(s.m)).find("ids[1] = 99999") != std::string::npos);
    CHECK(kt_detokenize(s.m, nullptr, 2, 0, 1, text, sizeof text, &len) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_detokenize(s.m, ids.data(), -1, 0, 1, text, sizeof text, &len) == KT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("kt_detokenizer streams whole characters and keeps a token it could not deliver") {
    Model s("llama2-spm");
    const std::vector<int32_t> ids = tokenize(s.m, "a\xf0\x9f\xa6\x99 b", 0);  // ▁a <0xF0> <0x9F> <0xA6> <0x99> ▁b
    REQUIRE(ids.size() == 6);
    kt_detokenizer *d = nullptr;
    REQUIRE(kt_detokenizer_create(s.m, 0, &d, nullptr) == KT_STATUS_OK);
    std::string out;
    std::vector<int64_t> lengths;
    char buf[16];
    for (int32_t id : ids) {
        int64_t len = -1;
        if (id == ids[4]) {  // the token that completes 🦙: a 4-byte buffer cannot take 4 bytes + NUL
            CHECK(kt_detokenizer_push(d, id, buf, 4, &len) == KT_STATUS_BUFFER_TOO_SMALL);
            CHECK(len == 4);
        }
        REQUIRE(kt_detokenizer_push(d, id, buf, sizeof buf, &len) == KT_STATUS_OK);
        lengths.push_back(len);
        out.append(buf, static_cast<size_t>(len));
    }
    int64_t len = -1;
    REQUIRE(kt_detokenizer_flush(d, buf, sizeof buf, &len) == KT_STATUS_OK);
    CHECK(len == 0);
    CHECK(out == "a\xf0\x9f\xa6\x99 b");
    CHECK(lengths == std::vector<int64_t>{1, 0, 0, 0, 4, 2});
    CHECK(kt_detokenizer_push(d, -5, buf, sizeof buf, &len) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(kt_detokenizer_last_error(d)).find("-5") != std::string::npos);
    kt_detokenizer_free(d);
    kt_detokenizer_free(nullptr);

    kt_error err = {sizeof(kt_error), 0, {0}};
    CHECK(kt_detokenizer_create(nullptr, 0, &d, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(d == nullptr);
    CHECK(err.status == KT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("a model without a vocabulary reports it on every tokenizer call") {
    const std::string path = kt::test::testdata_path("quants/Q4_0.gguf");
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
    kt_vocab_info info;
    info.struct_size = sizeof info;
    CHECK(kt_vocab_get_info(m, &info) == KT_STATUS_NOT_FOUND);
    CHECK(std::string(kt_model_last_error(m)).find("tokenizer.ggml.model") != std::string::npos);
    int64_t count = 0;
    CHECK(kt_tokenize(m, "a", 1, 1, 1, nullptr, 0, &count) == KT_STATUS_NOT_FOUND);
    info.struct_size = 8;
    CHECK(kt_vocab_get_info(m, &info) == KT_STATUS_NOT_FOUND);  // the vocabulary error comes first
    kt_model_free(m);
}

TEST_CASE("threads sharing a model build its tokenizer once and agree") {
    Model q("qwen3");
    const std::string text = "Mixture-of-Experts \xe6\xb7\xb7\xe5\x90\x88\xe4\xb8\x93\xe5\xae\xb6 <|im_start|>";
    std::vector<std::vector<int32_t>> results(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < results.size(); ++t)
        threads.emplace_back([&, t] {
            int32_t buf[64];
            int64_t count = 0;
            if (kt_tokenize(q.m, text.data(), text.size(), 1, 1, buf, 64, &count) == KT_STATUS_OK)
                results[t].assign(buf, buf + count);
        });
    for (auto &th : threads) th.join();
    REQUIRE(!results[0].empty());
    for (const auto &r : results) CHECK(r == results[0]);
}

TEST_CASE("kt_chat_apply_template renders, negotiates size and reports template errors") {
    Model q("qwen3");
    const kt_chat_message messages[] = {{"system", "Be brief."}, {"user", "Hi"}};
    const std::string expected =
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    int64_t len = -1;
    CHECK(kt_chat_apply_template(q.m, messages, 2, nullptr, nullptr, 0, &len) == KT_STATUS_BUFFER_TOO_SMALL);
    CHECK(len == static_cast<int64_t>(expected.size()));
    std::vector<char> buf(static_cast<size_t>(len) + 1);
    REQUIRE(kt_chat_apply_template(q.m, messages, 2, nullptr, buf.data(), len + 1, &len) == KT_STATUS_OK);
    CHECK(std::string(buf.data()) == expected);

    kt_chat_params params;
    kt_chat_params_init(&params);
    CHECK(params.add_generation_prompt == 1);
    params.extra_context_json = "{\"enable_thinking\": false}";
    char big[512];
    REQUIRE(kt_chat_apply_template(q.m, messages, 2, &params, big, sizeof big, &len) == KT_STATUS_OK);
    CHECK(std::string(big) == expected + "<think>\n\n</think>\n\n");

    kt_chat_params_init(&params);
    params.template_source = "{% for m in messages %}[{{ m.role }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}";
    params.add_generation_prompt = 0;
    REQUIRE(kt_chat_apply_template(q.m, messages, 2, &params, big, sizeof big, &len) == KT_STATUS_OK);
    CHECK(std::string(big) == "[system][user]");

    kt_chat_params_init(&params);
    params.template_source = "{% macro m() %}{% endmacro %}";
    CHECK(kt_chat_apply_template(q.m, messages, 2, &params, big, sizeof big, &len) == KT_STATUS_UNSUPPORTED);
    CHECK(std::string(kt_model_last_error(q.m)).find("macro") != std::string::npos);

    Model s("llama2-spm");  // no chat template in the file
    CHECK(kt_chat_apply_template(s.m, messages, 2, nullptr, big, sizeof big, &len) == KT_STATUS_NOT_FOUND);
    kt_chat_params_init(&params);
    params.template_name = "mistral";
    const kt_chat_message turns[] = {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Again"}};
    REQUIRE(kt_chat_apply_template(s.m, turns, 3, &params, big, sizeof big, &len) == KT_STATUS_OK);
    CHECK(std::string(big) == "[INST] Hi [/INST]Yo</s>[INST] Again [/INST]");
    CHECK(kt_chat_apply_template(s.m, messages, 2, &params, big, sizeof big, &len) == KT_STATUS_INVALID_ARGUMENT);

    const kt_chat_message broken[] = {{"user", nullptr}};
    CHECK(kt_chat_apply_template(q.m, broken, 1, nullptr, big, sizeof big, &len) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_chat_apply_template(q.m, nullptr, 1, nullptr, big, sizeof big, &len) == KT_STATUS_INVALID_ARGUMENT);
    params.struct_size = 4;
    CHECK(kt_chat_apply_template(q.m, messages, 2, &params, big, sizeof big, &len) == KT_STATUS_INVALID_ARGUMENT);
}
