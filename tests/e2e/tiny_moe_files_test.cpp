// The shipped model kt-tiny-moe (examples/kt-tiny-moe): both files load, carry the metadata a qwen3moe runner and a
// gpt2/qwen2 tokenizer need, hold every tensor with the shape the metadata implies, the Q8_0 file is the F32 file
// quantized, and kt's tokenizer gives the ids the training script's tokenizer gave (tests/e2e/data). The parity of
// the model's outputs with PyTorch is tiny_moe_parity_test.cpp.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "e2e/tiny_moe_expected.h"
#include "kt.h"

namespace {

const std::string kModelDir = KT_TINY_MOE_DIR;
const std::string kDataDir = KT_E2E_DATA_DIR;

struct ModelHandle {
    kt_model *model = nullptr;
    explicit ModelHandle(const std::string &path) {
        kt_error err = {sizeof(kt_error), 0, {0}};
        INFO("loading " << path);
        const kt_status status = kt_model_load(path.c_str(), nullptr, &model, &err);
        INFO(err.message);
        REQUIRE(status == KT_STATUS_OK);
    }
    ~ModelHandle() { kt_model_free(model); }
    ModelHandle(const ModelHandle &) = delete;
    ModelHandle &operator=(const ModelHandle &) = delete;
};

int64_t meta_int(kt_model *m, const std::string &key) {
    int64_t v = -1;
    INFO("key " << key);
    REQUIRE(kt_model_meta_get_int(m, key.c_str(), &v) == KT_STATUS_OK);
    return v;
}

std::string meta_string(kt_model *m, const std::string &key) {
    const char *v = nullptr;
    uint64_t n = 0;
    INFO("key " << key);
    REQUIRE(kt_model_meta_get_string(m, key.c_str(), &v, &n) == KT_STATUS_OK);
    return std::string(v, n);
}

kt_tensor_info tensor_info(kt_model *m, const std::string &name) {
    int64_t index = -1;
    INFO("tensor " << name);
    REQUIRE(kt_model_tensor_find(m, name.c_str(), &index) == KT_STATUS_OK);
    kt_tensor_info info;
    info.struct_size = sizeof info;
    REQUIRE(kt_model_tensor_info(m, index, &info) == KT_STATUS_OK);
    return info;
}

std::vector<float> tensor_values(kt_model *m, const std::string &name) {
    int64_t index = -1;
    REQUIRE(kt_model_tensor_find(m, name.c_str(), &index) == KT_STATUS_OK);
    const kt_tensor_info info = tensor_info(m, name);
    std::vector<float> v(info.n_elements);
    REQUIRE(kt_model_tensor_read_f32(m, index, v.data(), v.size(), nullptr) == KT_STATUS_OK);
    return v;
}

struct Shape {
    std::string name;
    std::vector<int64_t> ne;
};

// Every tensor the qwen3moe architecture needs (reference/gguf-and-quants.md §3.3), with the shape the metadata
// implies; the head is tied (no output.weight).
std::vector<Shape> expected_tensors(kt_model *m) {
    const int64_t e = meta_int(m, "qwen3moe.embedding_length");
    const int64_t layers = meta_int(m, "qwen3moe.block_count");
    const int64_t heads = meta_int(m, "qwen3moe.attention.head_count");
    const int64_t kv = meta_int(m, "qwen3moe.attention.head_count_kv");
    const int64_t dk = meta_int(m, "qwen3moe.attention.key_length");
    const int64_t x = meta_int(m, "qwen3moe.expert_count");
    const int64_t fe = meta_int(m, "qwen3moe.expert_feed_forward_length");
    uint64_t vocab = 0;
    REQUIRE(kt_model_meta_array_length(m, "tokenizer.ggml.tokens", &vocab) == KT_STATUS_OK);
    const int64_t v = static_cast<int64_t>(vocab);
    std::vector<Shape> out = {{"token_embd.weight", {e, v}}, {"output_norm.weight", {e}}};
    for (int64_t i = 0; i < layers; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        out.push_back({p + "attn_norm.weight", {e}});
        out.push_back({p + "attn_q.weight", {e, dk * heads}});
        out.push_back({p + "attn_k.weight", {e, dk * kv}});
        out.push_back({p + "attn_v.weight", {e, dk * kv}});
        out.push_back({p + "attn_output.weight", {dk * heads, e}});
        out.push_back({p + "attn_q_norm.weight", {dk}});
        out.push_back({p + "attn_k_norm.weight", {dk}});
        out.push_back({p + "ffn_norm.weight", {e}});
        out.push_back({p + "ffn_gate_inp.weight", {e, x}});
        out.push_back({p + "ffn_gate_exps.weight", {e, fe, x}});
        out.push_back({p + "ffn_up_exps.weight", {e, fe, x}});
        out.push_back({p + "ffn_down_exps.weight", {fe, e, x}});
    }
    return out;
}

bool stays_f32(const std::string &name) {
    return name.find("norm.weight") != std::string::npos || name.find("ffn_gate_inp") != std::string::npos;
}

}  // namespace

TEST_CASE("kt-tiny-moe: both files are complete qwen3moe models with a gpt2/qwen2 vocabulary") {
    for (const char *variant : {"f32", "q8_0"}) {
        const std::string path = kModelDir + "/kt-tiny-moe." + variant + ".gguf";
        INFO("file " << path);
        ModelHandle h(path);
        kt_model *m = h.model;
        CHECK(std::string(kt_model_architecture(m)) == "qwen3moe");
        CHECK(meta_int(m, "qwen3moe.attention.key_length") == meta_int(m, "qwen3moe.rope.dimension_count"));
        CHECK(meta_int(m, "qwen3moe.expert_used_count") == 2);
        CHECK(meta_int(m, "qwen3moe.context_length") >= 256);
        double eps = 0, base = 0;
        REQUIRE(kt_model_meta_get_float(m, "qwen3moe.attention.layer_norm_rms_epsilon", &eps) == KT_STATUS_OK);
        REQUIRE(kt_model_meta_get_float(m, "qwen3moe.rope.freq_base", &base) == KT_STATUS_OK);
        CHECK(eps == Approx(1e-6));
        CHECK(base == 10000.0);

        CHECK(meta_string(m, "tokenizer.ggml.model") == "gpt2");
        CHECK(meta_string(m, "tokenizer.ggml.pre") == "qwen2");
        uint64_t n_tokens = 0, n_types = 0, n_merges = 0;
        REQUIRE(kt_model_meta_array_length(m, "tokenizer.ggml.tokens", &n_tokens) == KT_STATUS_OK);
        REQUIRE(kt_model_meta_array_length(m, "tokenizer.ggml.token_type", &n_types) == KT_STATUS_OK);
        REQUIRE(kt_model_meta_array_length(m, "tokenizer.ggml.merges", &n_merges) == KT_STATUS_OK);
        CHECK(n_types == n_tokens);
        CHECK(n_merges == n_tokens - 256 - 2);  // 256 byte symbols, one token per merge, BOS and EOS
        CHECK(meta_int(m, "qwen3moe.vocab_size") == static_cast<int64_t>(n_tokens));
        CHECK(meta_int(m, "tokenizer.ggml.add_bos_token") == 1);
        for (const char *key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
            const int64_t id = meta_int(m, key);
            INFO(key << " = " << id);
            REQUIRE(id >= 0);
            REQUIRE(id < static_cast<int64_t>(n_tokens));
            int64_t type = 0;
            REQUIRE(kt_model_meta_array_get_int(m, "tokenizer.ggml.token_type", static_cast<uint64_t>(id), &type) ==
                    KT_STATUS_OK);
            CHECK(type == 3);  // control
        }

        const std::vector<Shape> shapes = expected_tensors(m);
        CHECK(kt_model_tensor_count(m) == static_cast<int64_t>(shapes.size()));
        for (const Shape &s : shapes) {
            const kt_tensor_info info = tensor_info(m, s.name);
            INFO("tensor " << s.name);
            REQUIRE(info.n_dims == static_cast<int32_t>(s.ne.size()));
            for (size_t d = 0; d < s.ne.size(); ++d) CHECK(info.ne[d] == s.ne[d]);
            const bool quantized = std::string(variant) == "q8_0" && !stays_f32(s.name);
            CHECK(info.type == (quantized ? KT_TYPE_Q8_0 : KT_TYPE_F32));
        }
    }
}

TEST_CASE("kt-tiny-moe: the Q8_0 file holds the F32 weights quantized within the Q8_0 rounding bound") {
    ModelHandle f32(kModelDir + "/kt-tiny-moe.f32.gguf");
    ModelHandle q8(kModelDir + "/kt-tiny-moe.q8_0.gguf");
    size_t checked = 0;
    for (const Shape &s : expected_tensors(f32.model)) {
        INFO("tensor " << s.name);
        const std::vector<float> a = tensor_values(f32.model, s.name);
        const std::vector<float> b = tensor_values(q8.model, s.name);
        REQUIRE(a.size() == b.size());
        if (stays_f32(s.name)) {
            CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
            continue;
        }
        // Q8_0 stores d = fp16(amax / 127) per 32 values and q = round(x · 127 / amax) in [-127, 127], so
        // |q·fp16(d) - x| <= d/2 + 127·|fp16(d) - d| <= d · (0.5 + 127 · 2^-11) < 0.57 · d for a normal fp16 d;
        // the 2e-6 covers a subnormal fp16 scale (127 half-steps of 2^-24).
        size_t bad = 0;
        for (size_t block = 0; block < a.size(); block += 32) {
            float amax = 0;
            for (size_t i = block; i < block + 32; ++i) amax = std::max(amax, std::fabs(a[i]));
            const float bound = 0.57f * amax / 127.0f + 2e-6f;
            for (size_t i = block; i < block + 32; ++i) bad += std::fabs(a[i] - b[i]) > bound;
        }
        CHECK(bad == 0);
        ++checked;
    }
    CHECK(checked > 0);
}

TEST_CASE("kt-tiny-moe: the parity expectations fit the shipped vocabulary") {
    const kt::test::TinyMoeExpected e = kt::test::read_tiny_moe_expected(kDataDir + "/kt_tiny_moe_expected.txt");
    ModelHandle h(kModelDir + "/" + e.greedy_model);
    uint64_t n_tokens = 0;
    REQUIRE(kt_model_meta_array_length(h.model, "tokenizer.ggml.tokens", &n_tokens) == KT_STATUS_OK);
    const int64_t bos = meta_int(h.model, "tokenizer.ggml.bos_token_id");
    const int64_t context = meta_int(h.model, "qwen3moe.context_length");
    CHECK(e.chunk_tokens + 1 == context);
    REQUIRE(e.chunks >= 1);
    REQUIRE(static_cast<int64_t>(e.heldout_ids.size()) >= e.chunks * e.chunk_tokens);
    REQUIRE(e.perplexity.size() == 2);
    for (const auto &p : e.perplexity) {
        CHECK(p.chunk_nll.size() == static_cast<size_t>(e.chunks));
        double sum = 0;
        for (double v : p.chunk_nll) sum += v;
        CHECK(std::exp(sum / static_cast<double>(e.chunks * e.chunk_tokens)) == Approx(p.ppl).epsilon(1e-5));
    }
    REQUIRE(e.greedy.size() >= 4);
    auto in_vocab = [&](int32_t id) { return id >= 0 && static_cast<uint64_t>(id) < n_tokens; };
    for (int32_t id : e.heldout_ids) REQUIRE(in_vocab(id));
    for (const auto &g : e.greedy) {
        INFO("prompt " << g.prompt);
        REQUIRE(g.prompt_ids.size() >= 2);
        CHECK(g.prompt_ids[0] == bos);
        CHECK(g.greedy.size() >= 8);
        for (int32_t id : g.prompt_ids) CHECK(in_vocab(id));
        for (int32_t id : g.greedy) CHECK(in_vocab(id));
    }
}

TEST_CASE("kt-tiny-moe: kt tokenizes the held-out text and the prompts to the training script's ids") {
    const kt::test::TinyMoeExpected e = kt::test::read_tiny_moe_expected(kDataDir + "/kt_tiny_moe_expected.txt");
    std::ifstream in(kDataDir + "/" + e.heldout_file, std::ios::binary);
    REQUIRE(in);
    std::ostringstream text;
    text << in.rdbuf();
    for (const char *variant : {"f32", "q8_0"}) {
        ModelHandle h(kModelDir + "/kt-tiny-moe." + variant + ".gguf");
        auto tokenize = [&](const std::string &s, int32_t add_special) {
            int64_t n = 0;
            const kt_status sized = kt_tokenize(h.model, s.data(), s.size(), add_special, 0, nullptr, 0, &n);
            REQUIRE((sized == KT_STATUS_OK || sized == KT_STATUS_BUFFER_TOO_SMALL));
            std::vector<int32_t> ids(static_cast<size_t>(n));
            INFO(kt_model_last_error(h.model));
            REQUIRE(kt_tokenize(h.model, s.data(), s.size(), add_special, 0, ids.data(), n, &n) == KT_STATUS_OK);
            return ids;
        };
        INFO("file " << variant);
        CHECK(tokenize(text.str(), 0) == e.heldout_ids);
        for (const auto &g : e.greedy) {
            INFO("prompt " << g.prompt);
            CHECK(tokenize(g.prompt, 1) == g.prompt_ids);  // add_bos_token is true: BOS first
        }
    }
}
