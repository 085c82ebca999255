// Layouts the shared golden set lacks. deepseek2's are checked against the float64 oracle (tests/support/forward_f64,
// itself checked against llama.cpp by kt_golden_oracle) with the README's tiers:
//   - lite, as DeepSeek-V2-Lite ships: attn_q instead of the q LoRA, softmax gating without groups or bias, no
//     renormalisation, two shared experts, YaRN with yarn_log_multiplier 0.0707 (mscale_all_dim 0.707);
//   - legacy attn_kv_b (how V2/V3/R1 GGUFs were converted before the MLA split): kt splits it at load and must
//     give the logits of the same weights in the MLA layout (tier A) with the same latent-only KV cache.
// Token sequences are drawn until every routing gap is at least 0.01 (router logits), the README's rule, so that a
// correct implementation never picks other experts than the oracle.
// glm4moe with a NextN block, as GLM-4.5/4.6 ship: its tensors are skipped and the logits are those of the model
// without it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kt.h"
#include "support/forward_f64.h"
#include "support/model_file.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

using kt::gguf::Value;
using kt::test::ModelFile;
using kt::test::TinyModel;

namespace {

constexpr int64_t kEmbd = 64, kHeads = 4, kNope = 32, kRope = 16, kVHead = 32, kLora = 64, kLayers = 3;
constexpr int64_t kVocab = 160, kExperts = 16, kUsed = 4, kExpertFf = 32;

// DeepSeek-V2-Lite's hyperparameters at a small size, in the MLA or the legacy convention.
TinyModel lite_model(bool legacy) {
    TinyModel m;
    m.arch = "deepseek2";
    m.n_vocab = kVocab;
    m.n_embd = kEmbd;
    m.n_layer = kLayers;
    m.n_head = kHeads;
    m.n_head_kv = legacy ? kHeads : 1;
    m.head_dim = legacy ? kNope + kRope : kLora + kRope;
    m.n_ff = 96;
    m.n_expert = kExperts;
    m.n_expert_used = kUsed;
    m.seed = 77;
    m.router_sigma = 3.0f / std::sqrt(static_cast<float>(kEmbd));  // wide router logits: gaps >= 0.01 are common
    const std::string a = "deepseek2.";
    m.keys = {
        {a + "attention.value_length", Value::u32(legacy ? kVHead : kLora)},
        {a + "attention.kv_lora_rank", Value::u32(kLora)},
        {a + "rope.dimension_count", Value::u32(kRope)},
        {a + "leading_dense_block_count", Value::u32(1)},
        {a + "expert_feed_forward_length", Value::u32(kExpertFf)},
        {a + "expert_shared_count", Value::u32(2)},
        {a + "expert_weights_scale", Value::f32(1.0f)},
        {a + "rope.scaling.type", Value::str("yarn")},
        {a + "rope.scaling.factor", Value::f32(40.0f)},
        {a + "rope.scaling.original_context_length", Value::u32(4096)},
        {a + "rope.scaling.yarn_log_multiplier", Value::f32(0.0707f)},
    };
    for (int64_t l = 0; l < kLayers; ++l) m.drop.push_back("blk." + std::to_string(l) + ".exp_probs_b.bias");  // V2: none
    if (!legacy) {
        m.keys.push_back({a + "attention.key_length_mla", Value::u32(kNope + kRope)});
        m.keys.push_back({a + "attention.value_length_mla", Value::u32(kVHead)});
    }
    return m;
}

// The same weights in the MLA layout: attn_kv_b's per-head key rows become attn_k_b {nope, lora, H} transposed
// (element (j, i, h) = key row j, latent i), its value rows attn_v_b {lora, v, H}, as convert_hf_to_gguf splits.
std::vector<uint8_t> mla_twin(const std::vector<uint8_t> &legacy_bytes) {
    std::unique_ptr<kt::gguf::File> legacy;
    REQUIRE(kt::gguf::File::parse(kt::mem::MappedFile::borrow(legacy_bytes.data(), legacy_bytes.size()), "legacy", &legacy).is_ok());
    TinyModel twin = lite_model(false);
    twin.copy_from = legacy.get();
    for (int64_t l = 0; l < kLayers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const std::vector<float> kv_b = kt::test::tiny_model_values(legacy_bytes, b + "attn_kv_b.weight");
        std::vector<float> k_b(static_cast<size_t>(kHeads * kLora * kNope)), v_b(static_cast<size_t>(kHeads * kVHead * kLora));
        for (int64_t h = 0; h < kHeads; ++h) {
            const float *rows = kv_b.data() + h * (kNope + kVHead) * kLora;
            for (int64_t j = 0; j < kNope; ++j)
                for (int64_t i = 0; i < kLora; ++i) k_b[(h * kLora + i) * kNope + j] = rows[j * kLora + i];
            std::copy_n(rows + kNope * kLora, kVHead * kLora, v_b.begin() + h * kVHead * kLora);
        }
        twin.drop.push_back(b + "attn_k_b.weight");
        twin.drop.push_back(b + "attn_v_b.weight");
        twin.extra_values.push_back({b + "attn_k_b.weight", {kNope, kLora, kHeads}, std::move(k_b)});
        twin.extra_values.push_back({b + "attn_v_b.weight", {kLora, kVHead, kHeads}, std::move(v_b)});
    }
    return kt::test::write_tiny_model(twin);
}

// Tokens whose every routing gap in the oracle's run is at least 0.01 (router logit units).
std::vector<int32_t> route_stable_tokens(const kt::test::ForwardF64 &oracle, int64_t n, uint64_t seed) {
    for (int attempt = 0; attempt < 400; ++attempt) {
        std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(attempt));
        std::vector<int32_t> tokens(static_cast<size_t>(n));
        for (int32_t &t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(kVocab));
        double gap = 0.0;
        oracle.forward(tokens, &gap);
        if (gap >= 0.01) return tokens;
    }
    FAIL("no token sequence with routing gaps >= 0.01 in 400 attempts");
    return {};
}

// kt's logits for every position: a prefill of all but the last 6 tokens, then one token per decode step.
std::vector<float> kt_logits(kt_model *model, const std::vector<int32_t> &tokens, int32_t kernels, int32_t kv_type,
                             uint64_t *kv_bytes_per_position = nullptr) {
    kt_context_params p;
    kt_context_params_init(&p);
    p.n_ctx = 128;
    p.n_threads = 2;
    p.kernels = kernels;
    p.kv_type = kv_type;
    kt_context *ctx = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status s = kt_context_create(model, &p, &ctx, &err);
    INFO(err.message);
    REQUIRE(s == KT_STATUS_OK);
    const int64_t V = kt_context_n_vocab(ctx), n = static_cast<int64_t>(tokens.size()), prefill = n - 6;
    std::vector<float> out(static_cast<size_t>(n * V));
    REQUIRE(kt_context_decode(ctx, tokens.data(), prefill, KT_LOGITS_ALL) == KT_STATUS_OK);
    for (int64_t t = 0; t < prefill; ++t) {
        const float *l = nullptr;
        REQUIRE(kt_context_logits(ctx, t, &l, nullptr) == KT_STATUS_OK);
        std::copy_n(l, V, out.begin() + t * V);
    }
    for (int64_t t = prefill; t < n; ++t) {
        REQUIRE(kt_context_decode(ctx, &tokens[static_cast<size_t>(t)], 1, KT_LOGITS_LAST) == KT_STATUS_OK);
        const float *l = nullptr;
        REQUIRE(kt_context_logits(ctx, 0, &l, nullptr) == KT_STATUS_OK);
        std::copy_n(l, V, out.begin() + t * V);
    }
    if (kv_bytes_per_position) REQUIRE(kt_context_kv_size(ctx, nullptr, kv_bytes_per_position) == KT_STATUS_OK);
    kt_context_free(ctx);
    return out;
}

struct Agreement {
    double rel = 0, nmse = 0, top1 = 0;  // top1: share of positions with the same argmax
    bool top1_where_clear = true;        // same argmax wherever the reference's top-2 margin exceeds `margin`
};

template <typename Ref>
Agreement compare(const std::vector<float> &got, const std::vector<Ref> &ref, int64_t V, double margin) {
    Agreement a;
    double max_diff = 0, max_ref = 0, sq_diff = 0, sq_ref = 0;
    const int64_t n = static_cast<int64_t>(ref.size()) / V;
    int same = 0;
    for (int64_t t = 0; t < n; ++t) {
        int64_t bg = 0, br = 0;
        double first = -INFINITY, second = -INFINITY;
        for (int64_t v = 0; v < V; ++v) {
            const double g = got[t * V + v], r = static_cast<double>(ref[t * V + v]);
            max_diff = std::max(max_diff, std::fabs(g - r));
            max_ref = std::max(max_ref, std::fabs(r));
            sq_diff += (g - r) * (g - r);
            sq_ref += r * r;
            if (g > got[t * V + bg]) bg = v;
            if (r > static_cast<double>(ref[t * V + br])) br = v;
            if (r > first) second = first, first = r;
            else if (r > second) second = r;
        }
        same += bg == br;
        if (first - second > margin && bg != br) a.top1_where_clear = false;
    }
    a.rel = max_diff / max_ref;
    a.nmse = sq_diff / sq_ref;
    a.top1 = static_cast<double>(same) / static_cast<double>(n);
    return a;
}

// Tiers A, B, C (reference kernels) and the production kernels, for one file against the oracle's logits.
void check_tiers(const std::string &label, kt_model *model, const std::vector<int32_t> &tokens,
                 const std::vector<double> &oracle) {
    struct Tier {
        const char *name;
        int32_t kv;
        double rel, margin;
    };
    for (const Tier &t : {Tier{"A", KT_TYPE_F32, 1e-4, 0.01}, Tier{"B", KT_TYPE_F16, 3e-3, 0.1}, Tier{"C", KT_TYPE_BF16, 2e-2, 0.25}}) {
        const Agreement a = compare(kt_logits(model, tokens, KT_KERNELS_REFERENCE, t.kv), oracle, kVocab, t.margin);
        std::printf("%s tier %s: rel %.2e, top-1 %.0f %%\n", label.c_str(), t.name, a.rel, 100 * a.top1);
        INFO(label << " tier " << t.name << ": rel " << a.rel);
        CHECK(a.rel <= t.rel);
        CHECK(a.top1_where_clear);
    }
    // The expert engine (F32 weights as BF16, int8 activations): the loose tier D rule.
    const Agreement d = compare(kt_logits(model, tokens, KT_KERNELS_AUTO, KT_TYPE_F16), oracle, kVocab, 0.0);
    std::printf("%s auto kernels: NMSE %.2e, top-1 %.0f %%\n", label.c_str(), d.nmse, 100 * d.top1);
    CHECK(d.nmse <= 0.05);
    CHECK(d.top1 >= 0.8);
}

}  // namespace

TEST_CASE("deepseek2 lite (DeepSeek-V2-Lite's layout and YaRN) matches the float64 oracle in tiers A, B, C") {
    kt::test::TempDir dir;
    const std::string path = dir.file("lite.gguf");
    kt::test::write_file(path, kt::test::write_tiny_model(lite_model(false)));
    ModelFile model(path);
    kt::test::ForwardF64 oracle;
    REQUIRE(oracle.load(model.model).empty());
    const std::vector<int32_t> tokens = route_stable_tokens(oracle, 40, 1);
    check_tiers("deepseek2 lite", model.model, tokens, oracle.forward(tokens));
}

TEST_CASE("deepseek2 legacy attn_kv_b: split at load, the MLA layout's logits (tier A), a latent-only cache") {
    kt::test::TempDir dir;
    for (const int32_t kv_b_type : {KT_TYPE_F32, KT_TYPE_Q8_0, KT_TYPE_BF16}) {
        INFO("attn_kv_b stored as " << kt_type_name(kv_b_type));
        TinyModel spec = lite_model(true);
        spec.types = {{"attn_kv_b", kv_b_type}};
        const std::vector<uint8_t> legacy_bytes = kt::test::write_tiny_model(spec);
        kt::test::write_file(dir.file("legacy.gguf"), legacy_bytes);
        kt::test::write_file(dir.file("mla.gguf"), mla_twin(legacy_bytes));
        ModelFile legacy(dir.file("legacy.gguf")), mla(dir.file("mla.gguf"));
        kt::test::ForwardF64 oracle;
        REQUIRE(oracle.load(legacy.model).empty());
        const std::vector<int32_t> tokens = route_stable_tokens(oracle, 40, 2);

        uint64_t legacy_kv = 0, mla_kv = 0;
        const std::vector<float> from_legacy = kt_logits(legacy.model, tokens, KT_KERNELS_REFERENCE, KT_TYPE_F32, &legacy_kv);
        const std::vector<float> from_mla = kt_logits(mla.model, tokens, KT_KERNELS_REFERENCE, KT_TYPE_F32, &mla_kv);
        const Agreement twins = compare(from_legacy, from_mla, kVocab, 0.01);
        std::printf("deepseek2 legacy (%s attn_kv_b) vs its MLA twin: rel %.2e; KV %llu bytes per position\n",
                    kt_type_name(kv_b_type), twins.rel, static_cast<unsigned long long>(legacy_kv));
        CHECK(twins.rel <= 1e-4);
        CHECK(twins.top1_where_clear);
        // One latent (kv_lora, keys and values alike) and one RoPE key (rope dims) per layer and position, for both
        // conventions; the decompressed heads would take H · (qk_nope + rope + v) values.
        CHECK(legacy_kv == mla_kv);
        CHECK(legacy_kv == static_cast<uint64_t>(kLayers * (kLora + kRope) * 4));
        if (kv_b_type == KT_TYPE_F32) check_tiers("deepseek2 legacy", legacy.model, tokens, oracle.forward(tokens));
    }
}

TEST_CASE("glm4moe: the NextN block GLM-4.5/4.6 ship is loaded but never computed") {
    kt::test::TempDir dir;
    auto glm = [](int64_t nextn) {
        TinyModel m;
        m.arch = "glm4moe";
        m.n_vocab = 96;
        m.n_embd = 64;
        m.n_layer = 2 + nextn;  // block_count counts the NextN block
        m.n_head = 4;
        m.n_head_kv = 2;
        m.head_dim = 32;
        m.n_ff = 64;
        m.n_expert = 8;
        m.n_expert_used = 2;
        m.keys = {{"glm4moe.nextn_predict_layers", Value::u32(static_cast<uint32_t>(nextn))},
                  {"glm4moe.rope.dimension_count", Value::u32(16)},
                  {"glm4moe.leading_dense_block_count", Value::u32(1)},
                  {"glm4moe.expert_shared_count", Value::u32(1)}};
        if (nextn > 0)  // llama.cpp's NextN tensors, and a block's worth of the usual ones
            m.extra_tensors = {{"blk.2.nextn.eh_proj.weight", {128, 64}}, {"blk.2.nextn.enorm.weight", {64}},
                               {"blk.2.nextn.hnorm.weight", {64}},      {"blk.2.attn_norm.weight", {64}},
                               {"blk.2.attn_q.weight", {64, 128}},      {"blk.2.ffn_gate_exps.weight", {64, 32, 8}}};
        return kt::test::write_tiny_model(m);
    };
    kt::test::write_file(dir.file("plain.gguf"), glm(0));
    kt::test::write_file(dir.file("nextn.gguf"), glm(1));
    ModelFile plain(dir.file("plain.gguf")), with_nextn(dir.file("nextn.gguf"));
    const std::vector<int32_t> tokens = {1, 5, 9, 17, 33, 65, 2, 4, 8, 16, 32, 64};
    const std::vector<float> a = kt_logits(plain.model, tokens, KT_KERNELS_REFERENCE, KT_TYPE_F32);
    const std::vector<float> b = kt_logits(with_nextn.model, tokens, KT_KERNELS_REFERENCE, KT_TYPE_F32);
    CHECK(a == b);
    // A tensor of the computed layers that the architecture does not know is still refused.
    TinyModel odd;
    odd.arch = "glm4moe";
    odd.keys = {{"glm4moe.rope.dimension_count", Value::u32(4)}};
    odd.extra_tensors = {{"blk.1.nextn.eh_proj.weight", {64, 32}}};
    kt::test::write_file(dir.file("odd.gguf"), kt::test::write_tiny_model(odd));
    ModelFile odd_model(dir.file("odd.gguf"));
    kt_context *ctx = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    CHECK(kt_context_create(odd_model.model, nullptr, &ctx, &err) == KT_STATUS_UNSUPPORTED);
    CHECK(std::string(err.message).find("blk.1.nextn.eh_proj.weight") != std::string::npos);
}
