// Shared pieces of the architecture layer: hyperparameter reading, the architecture table, scratch sizing.
#include "model/arch/arch.h"

#include <algorithm>
#include <cmath>

#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace kt::model {

// ------------------------------------------------------------------------------------------------------------
// HParamReader

namespace {

Status out_of_range(const std::string &key, double value, double lo, double hi) {
    return Status::error(KT_STATUS_INVALID_FILE, "metadata key '%s' = %g is out of range [%g, %g]", key.c_str(), value,
                         lo, hi);
}

}  // namespace

bool HParamReader::has(const char *suffix) const { return file_.find(key(suffix)) != nullptr; }

Status HParamReader::get_int(const char *suffix, int64_t lo, int64_t hi, int64_t *out) const {
    const std::string k = key(suffix);
    const gguf::KeyValue *kv = file_.find(k);
    KT_RETURN_IF(!kv, KT_STATUS_INVALID_FILE, "required metadata key '%s' is missing", k.c_str());
    int64_t value = 0;
    if (kv->is_array()) {
        // Per-layer arrays (head counts, FFN widths): kt runs models whose layers agree.
        uint64_t n = 0;
        KT_TRY(file_.array_length(k, &n));
        KT_RETURN_IF(n == 0, KT_STATUS_INVALID_FILE, "metadata key '%s' is an empty array", k.c_str());
        KT_TRY(file_.array_get_int(k, 0, &value));
        for (uint64_t i = 1; i < n; ++i) {
            int64_t other = 0;
            KT_TRY(file_.array_get_int(k, i, &other));
            KT_RETURN_IF(other != value, KT_STATUS_UNSUPPORTED,
                         "metadata key '%s': layers differ (%lld at index 0, %lld at index %llu); kt runs uniform layers",
                         k.c_str(), static_cast<long long>(value), static_cast<long long>(other),
                         static_cast<unsigned long long>(i));
        }
    } else {
        KT_TRY(file_.get_int(k, &value));
    }
    if (value < lo || value > hi) return out_of_range(k, static_cast<double>(value), static_cast<double>(lo), static_cast<double>(hi));
    *out = value;
    return Status::ok();
}

Status HParamReader::get_int_or(const char *suffix, int64_t fallback, int64_t lo, int64_t hi, int64_t *out) const {
    if (!has(suffix)) {
        *out = fallback;
        return Status::ok();
    }
    return get_int(suffix, lo, hi, out);
}

Status HParamReader::get_float(const char *suffix, float *out) const {
    const std::string k = key(suffix);
    double value = 0.0;
    KT_RETURN_IF(!file_.find(k), KT_STATUS_INVALID_FILE, "required metadata key '%s' is missing", k.c_str());
    KT_TRY(file_.get_float(k, &value));
    KT_RETURN_IF(!std::isfinite(value), KT_STATUS_INVALID_FILE, "metadata key '%s' is not finite", k.c_str());
    *out = static_cast<float>(value);
    return Status::ok();
}

Status HParamReader::get_float_or(const char *suffix, float fallback, float *out) const {
    if (!has(suffix)) {
        *out = fallback;
        return Status::ok();
    }
    return get_float(suffix, out);
}

Status HParamReader::get_float(const char *suffix, float lo, float hi, float *out) const {
    float value = 0.0f;
    KT_TRY(get_float(suffix, &value));
    if (!(value >= lo && value <= hi)) return out_of_range(key(suffix), value, lo, hi);
    *out = value;
    return Status::ok();
}

Status HParamReader::get_float_or(const char *suffix, float fallback, float lo, float hi, float *out) const {
    if (!has(suffix)) {
        *out = fallback;
        return Status::ok();
    }
    return get_float(suffix, lo, hi, out);
}

Status HParamReader::get_bool_or(const char *suffix, bool fallback, bool *out) const {
    *out = fallback;
    return has(suffix) ? file_.get_bool(key(suffix), out) : Status::ok();
}

Status HParamReader::get_string_or(const char *suffix, std::string fallback, std::string *out) const {
    if (!has(suffix)) {
        *out = std::move(fallback);
        return Status::ok();
    }
    std::string_view s;
    KT_TRY(file_.get_string(key(suffix), &s));
    *out = std::string(s);
    return Status::ok();
}

// ------------------------------------------------------------------------------------------------------------
// Generic keys

namespace {

// YaRN's attention-magnitude correction for scaling factor s (HF's yarn_get_mscale).
float yarn_mscale(float s, float mscale) { return s <= 1.0f ? 1.0f : 0.1f * mscale * std::log(s) + 1.0f; }

Status read_rope(const HParamReader &r, HParams *hp) {
    ops::RopeParams &rope = hp->rope;
    KT_TRY(r.get_int_or("rope.dimension_count", hp->head_dim_k, 2, hp->head_dim_k, &rope.n_rot));
    KT_RETURN_IF(rope.n_rot % 2 != 0, KT_STATUS_INVALID_FILE, "metadata key '%s' = %lld must be even",
                 r.key("rope.dimension_count").c_str(), static_cast<long long>(rope.n_rot));
    KT_TRY(r.get_float_or("rope.freq_base", 10000.0f, &rope.freq_base));
    KT_RETURN_IF(rope.freq_base <= 1.0f, KT_STATUS_INVALID_FILE, "metadata key '%s' = %g must be above 1",
                 r.key("rope.freq_base").c_str(), static_cast<double>(rope.freq_base));

    std::string scaling;
    KT_TRY(r.get_string_or("rope.scaling.type", "linear", &scaling));
    KT_RETURN_IF(scaling != "none" && scaling != "linear" && scaling != "yarn", KT_STATUS_UNSUPPORTED,
                 "metadata key '%s' = '%s': kt supports RoPE scaling none, linear and yarn",
                 r.key("rope.scaling.type").c_str(), scaling.c_str());
    // The factor, from rope.scaling.factor or the older rope.scale_linear; absent means none. llama.cpp also reads
    // an explicit 0 as none, but converters write the key only for scaled models, so 0 (like any factor outside
    // [1/1024, 1024]) is a broken file here: its YaRN corrections would silently be those of factor 1.
    const char *factor_key = r.has("rope.scaling.factor") ? "rope.scaling.factor" : "rope.scale_linear";
    float factor = 1.0f;
    if (scaling != "none") KT_TRY(r.get_float_or(factor_key, 1.0f, 1.0f / 1024, 1024.0f, &factor));
    rope.freq_scale = 1.0f / factor;
    KT_TRY(r.get_int_or("rope.scaling.original_context_length", hp->n_ctx_train, 1, kMaxContext, &rope.n_ctx_orig));

    rope.ext_factor = 0.0f;
    rope.attn_factor = 1.0f;
    if (scaling == "yarn") {
        rope.ext_factor = 1.0f;
        KT_TRY(r.get_float_or("rope.scaling.yarn_beta_fast", 32.0f, 1.0f / 1024, 1024.0f, &rope.beta_fast));
        KT_TRY(r.get_float_or("rope.scaling.yarn_beta_slow", 1.0f, 1.0f / 1024, 1024.0f, &rope.beta_slow));
        // llama.cpp (S3, llama-context.cpp): the cos/sin scale is HF's yarn_get_mscale(s) = 1 + 0.1 ln s, or, with
        // a yarn_log_multiplier (the converter stores 0.1 · mscale_all_dim), the ratio of the two mscales, where
        // deepseek2 takes mscale = mscale_all_dim (DeepSeek-V2-Lite's config has both 0.707) so that it is 1. The
        // magnitude correction that rope_table multiplies in (1 + 0.1 ln s) is divided out again here.
        // 0.1 · mscale_all_dim: DeepSeek-V2 0.0707, V3 0.1. Negative or large values turn the attention scale
        // (1 + log_mul · ln s)² into nonsense or zero without any other sign.
        float &log_mul = hp->yarn_log_multiplier;
        KT_TRY(r.get_float_or("rope.scaling.yarn_log_multiplier", 0.0f, 0.0f, 1.0f, &log_mul));
        if (log_mul != 0.0f) {
            const float mscale_all_dims = log_mul / 0.1f;
            const float mscale = hp->arch == "deepseek2" ? mscale_all_dims : 1.0f;
            rope.attn_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dims);
        } else {
            rope.attn_factor = yarn_mscale(factor, 1.0f);  // gpt-oss: q and k each scaled by 1 + 0.1 ln s
        }
        rope.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
    }
    return Status::ok();
}

}  // namespace

Status read_common_hparams(const gguf::File &file, const HParamReader &r, HParams *hp) {
    KT_TRY(r.get_int("embedding_length", 1, kMaxEmbedding, &hp->n_embd));
    KT_TRY(r.get_int("block_count", 1, kMaxLayers, &hp->n_layer));
    KT_TRY(r.get_int("context_length", 1, kMaxContext, &hp->n_ctx_train));
    KT_TRY(r.get_int_or("feed_forward_length", 0, 0, kMaxFeedForward, &hp->n_ff));
    KT_TRY(r.get_int("attention.head_count", 1, kMaxHeads, &hp->n_head));
    KT_TRY(r.get_int_or("attention.head_count_kv", hp->n_head, 1, hp->n_head, &hp->n_head_kv));
    KT_RETURN_IF(hp->n_head % hp->n_head_kv != 0, KT_STATUS_INVALID_FILE,
                 "%s = %lld is not a multiple of %s = %lld", r.key("attention.head_count").c_str(),
                 static_cast<long long>(hp->n_head), r.key("attention.head_count_kv").c_str(),
                 static_cast<long long>(hp->n_head_kv));
    const int64_t default_head_dim = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    KT_TRY(r.get_int_or("attention.key_length", default_head_dim, 1, kMaxHeadDim, &hp->head_dim_k));
    KT_TRY(r.get_int_or("attention.value_length", default_head_dim, 1, kMaxHeadDim, &hp->head_dim_v));
    KT_RETURN_IF(hp->head_dim_k == 0 || hp->head_dim_v == 0, KT_STATUS_INVALID_FILE,
                 "%s has no key_length/value_length and embedding_length %lld is not a multiple of head_count %lld",
                 hp->arch.c_str(), static_cast<long long>(hp->n_embd), static_cast<long long>(hp->n_head));
    KT_RETURN_IF(hp->n_head * std::max(hp->head_dim_k, hp->head_dim_v) > kMaxAttentionWidth, KT_STATUS_INVALID_FILE,
                 "%s = %lld heads of %s = %lld / %s = %lld exceed kt's attention width of %lld",
                 r.key("attention.head_count").c_str(), static_cast<long long>(hp->n_head),
                 r.key("attention.key_length").c_str(), static_cast<long long>(hp->head_dim_k),
                 r.key("attention.value_length").c_str(), static_cast<long long>(hp->head_dim_v),
                 static_cast<long long>(kMaxAttentionWidth));
    KT_TRY(r.get_float("attention.layer_norm_rms_epsilon", &hp->rms_eps));
    KT_RETURN_IF(!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f), KT_STATUS_INVALID_FILE, "metadata key '%s' = %g is out of range (0, 1)",
                 r.key("attention.layer_norm_rms_epsilon").c_str(), static_cast<double>(hp->rms_eps));
    KT_TRY(read_rope(r, hp));

    KT_TRY(r.get_int_or("expert_count", 0, 0, kMaxExperts, &hp->n_expert));
    KT_TRY(r.get_int_or("expert_used_count", 0, 0, hp->n_expert, &hp->n_expert_used));
    KT_RETURN_IF(hp->n_expert > 0 && hp->n_expert_used == 0, KT_STATUS_INVALID_FILE,
                 "%s has %lld experts but '%s' is missing or 0", hp->arch.c_str(), static_cast<long long>(hp->n_expert),
                 r.key("expert_used_count").c_str());

    // The vocabulary size: the vocab_size key, else token_embd's row count; when both exist they must agree.
    const gguf::TensorInfo *embd = file.find_tensor("token_embd.weight");
    KT_RETURN_IF(!embd && !r.has("vocab_size"), KT_STATUS_INVALID_FILE,
                 "%s: tensor 'token_embd.weight' is missing (and there is no '%s' key)", hp->arch.c_str(),
                 r.key("vocab_size").c_str());
    if (r.has("vocab_size")) {
        KT_TRY(r.get_int("vocab_size", 1, kMaxVocab, &hp->n_vocab));
        KT_RETURN_IF(embd && embd->ne[1] != hp->n_vocab, KT_STATUS_INVALID_FILE,
                     "metadata key '%s' = %lld but token_embd has %lld rows", r.key("vocab_size").c_str(),
                     static_cast<long long>(hp->n_vocab), static_cast<long long>(embd->ne[1]));
    } else {
        hp->n_vocab = embd->ne[1];
        KT_RETURN_IF(hp->n_vocab < 1 || hp->n_vocab > kMaxVocab, KT_STATUS_INVALID_FILE,
                     "tensor 'token_embd.weight' has %lld rows; kt accepts vocabularies of 1 to %lld tokens",
                     static_cast<long long>(hp->n_vocab), static_cast<long long>(kMaxVocab));
    }

    hp->kq_scale = 1.0f / std::sqrt(static_cast<float>(hp->head_dim_k));
    return Status::ok();
}

Status read_routed_experts(const HParamReader &r, ops::Gating default_gating, HParams *hp) {
    KT_RETURN_IF(hp->n_expert == 0, KT_STATUS_INVALID_FILE, "%s: '%s' is missing or 0", hp->arch.c_str(),
                 r.key("expert_count").c_str());
    KT_TRY(r.get_int("expert_feed_forward_length", 1, kMaxFeedForward, &hp->n_ff_exp));
    KT_TRY(r.get_int_or("expert_shared_count", 0, 0, kMaxExperts, &hp->n_expert_shared));
    // routed_scaling_factor: V2 16, V3 2.5, the lite models 1; absent means 1. A stored 0 would silence every
    // routed expert, and is refused with any other value out of range.
    KT_TRY(r.get_float_or("expert_weights_scale", 1.0f, 1.0f / 1024, 1024.0f, &hp->expert_weights_scale));
    KT_TRY(r.get_bool_or("expert_weights_norm", false, &hp->expert_weights_norm));
    int64_t gating = 0;  // 1: softmax, 2: sigmoid, 3: softmax over the chosen weights
    KT_TRY(r.get_int_or("expert_gating_func", default_gating == ops::Gating::kSigmoid ? 2 : 1, 0, 3, &gating));
    KT_RETURN_IF(gating == 3, KT_STATUS_UNSUPPORTED, "%s: '%s' = 3 (softmax_weight) is not supported", hp->arch.c_str(),
                 r.key("expert_gating_func").c_str());
    hp->gating = gating == 2 ? ops::Gating::kSigmoid : ops::Gating::kSoftmax;
    KT_TRY(r.get_int_or("expert_group_count", 1, 1, hp->n_expert, &hp->n_group));
    KT_TRY(r.get_int_or("expert_group_used_count", 1, 1, hp->n_group, &hp->n_group_used));
    KT_RETURN_IF(hp->n_expert % hp->n_group != 0 || (hp->n_group > 1 && hp->n_expert / hp->n_group < 2),
                 KT_STATUS_INVALID_FILE, "%s: %lld experts do not form %lld groups of at least two", hp->arch.c_str(),
                 static_cast<long long>(hp->n_expert), static_cast<long long>(hp->n_group));
    return Status::ok();
}

float rope_magnitude(const HParams &hp) {
    const ops::RopeParams &p = hp.rope;
    return p.ext_factor != 0.0f ? p.attn_factor * (1.0f + 0.1f * std::log(1.0f / p.freq_scale)) : p.attn_factor;
}

// ------------------------------------------------------------------------------------------------------------
// Weights and scratch

std::string block_prefix(int64_t layer) { return "blk." + std::to_string(layer) + "."; }

void Embedding::row(int64_t token, float *dst) const {
    const ops::TypeTraits &traits = *ops::type_traits(tensor->type);
    const int64_t E = tensor->ne[0];
    ref::dequantize_row(tensor->type, tensor->data + token * ops::row_bytes(traits, E), dst, E);
}

void Scratch::reserve(const HParams &hp, int64_t n_batch) {
    const auto T = static_cast<size_t>(n_batch);
    const auto top_k = static_cast<size_t>(std::max<int64_t>(hp.n_expert_used, 1));
    x.resize(T * hp.n_embd);
    h.resize(T * hp.n_embd);
    q.resize(T * hp.n_head * hp.head_dim_k);
    k.resize(T * hp.n_head_kv * hp.head_dim_k);
    v.resize(T * hp.n_head_kv * hp.head_dim_v);
    attn.resize(T * hp.n_head * hp.head_dim_v);
    ffn_out.resize(T * hp.n_embd);
    shared.resize(T * hp.n_embd);
    router.resize(T * std::max<int64_t>(hp.n_expert, 1));
    ids.resize(T * top_k);
    gates.resize(T * top_k);
    shared_scale.resize(T);
    if (hp.kv_lora_rank > 0) {
        const int64_t qk_nope = hp.head_dim_k_mla - hp.rope.n_rot;
        mla_qa.resize(T * hp.q_lora_rank);
        mla_q.resize(T * hp.n_head * hp.head_dim_k_mla);
        mla_c.resize(T * (hp.kv_lora_rank + hp.rope.n_rot));
        mla_in.resize(T * std::max(qk_nope, hp.kv_lora_rank));
        mla_out.resize(T * std::max(hp.kv_lora_rank, hp.head_dim_v_mla));
        mla_o.resize(T * hp.n_head * hp.head_dim_v_mla);
    }
    zeros.assign(T, 0);
    rope.resize(T * hp.rope.n_rot);
}

}  // namespace kt::model

// ------------------------------------------------------------------------------------------------------------
// The architecture table: explicit, so that nothing depends on static registration (which a static library's
// linker is free to drop).

#include "model/arch/families.h"

namespace kt::model {
namespace {

const Architecture *const kArchitectures[] = {&kLlama,     &kQwen2,     &kQwen3,  &kQwen2Moe,
                                              &kQwen3Moe, &kDeepseek2, &kGlm4Moe, &kGptOss};

}  // namespace

const Architecture *find_architecture(const std::string &name) {
    for (const Architecture *a : kArchitectures)
        if (name == a->name) return a;
    return nullptr;
}

std::string known_architectures() {
    std::string s;
    for (const Architecture *a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a->name);
    return s;
}

}  // namespace kt::model
