// deepseek2: DeepSeek-V2 / V3 (and their lite variants). Multi-head latent attention (MLA) served as MQA over the
// compressed KV latent, as llama.cpp computes it (reference/gguf-and-quants.md §5.5, §5.6), and MoE layers with
// sigmoid (V3) or softmax (V2) gating, selection bias, group-limited routing, renormalised and scaled weights, plus
// an ungated shared expert. The first leading_dense_block_count layers have a dense SwiGLU FFN.
//
// Per layer, with qk_nope + qk_rope = Dq (the query head width before absorption), kv_lora = the latent width:
//   q       = W_qb RMSNorm(W_qa h)   (lite: W_q h)                       [T, H, Dq] = [q_nope ; q_pe] per head
//   c       = W_kv_a h                                                  [T, kv_lora + qk_rope] = [c_kv ; k_pe]
//   q_pe, k_pe = RoPE (NORM, YaRN)                                      k_pe: one head shared by all
//   c_kv    = RMSNorm(c_kv)
//   Q[h]    = [q_pe[h] ; W_kb[h] q_nope[h]]                              [T, H, qk_rope + kv_lora]  (absorption)
//   K       = [k_pe ; c_kv],  V = c_kv                                  one KV head: the cache holds the latent
//   o[h]    = W_vb[h] softmax(kq_scale · Q[h] Kᵀ + mask) V               [T, H, Dv_mla]             (decompression)
//   out     = W_o o
// kq_scale = mscale² / √Dq with mscale = 1 + yarn_log_multiplier · ln(scaling factor) (llama.cpp's
// TAG_DEEPSEEK2_YARN_LOG_MUL_FIX convention: the file stores 0.1 · mscale_all_dim).
//
// Files in the legacy convention (one attn_kv_b instead of attn_k_b / attn_v_b, no *_mla keys) are refused with a
// message: they need a reconversion.
#include <cmath>

#include "model/arch/blocks.h"
#include "model/arch/families.h"

namespace kt::model {
namespace {

Status read_hparams(const gguf::File &file, HParams *hp) {
    HParamReader r(file, hp->arch);
    KT_TRY(read_common_hparams(file, r, hp));
    hp->rope.mode = ops::RopeMode::kNorm;
    KT_RETURN_IF(!r.has("attention.key_length_mla") || !r.has("attention.value_length_mla"), KT_STATUS_UNSUPPORTED,
                 "deepseek2: '%s' / '%s' are missing: this is the legacy attn_kv_b convention; kt runs files "
                 "converted with attn_k_b / attn_v_b (reconvert with a current converter)",
                 r.key("attention.key_length_mla").c_str(), r.key("attention.value_length_mla").c_str());
    KT_TRY(r.get_int("leading_dense_block_count", 0, hp->n_layer, &hp->n_layer_dense_lead));
    KT_TRY(r.get_int_or("attention.q_lora_rank", 0, 0, kMaxEmbedding, &hp->q_lora_rank));
    KT_TRY(r.get_int("attention.kv_lora_rank", 1, kMaxHeadDim, &hp->kv_lora_rank));
    KT_TRY(r.get_int("attention.key_length_mla", 1, kMaxHeadDim, &hp->head_dim_k_mla));
    KT_TRY(r.get_int("attention.value_length_mla", 1, kMaxHeadDim, &hp->head_dim_v_mla));
    KT_RETURN_IF(hp->n_head_kv != 1 || hp->head_dim_k != hp->kv_lora_rank + hp->rope.n_rot ||
                     hp->head_dim_v != hp->kv_lora_rank || hp->rope.n_rot >= hp->head_dim_k_mla,
                 KT_STATUS_INVALID_FILE,
                 "deepseek2: the MLA convention needs head_count_kv 1, key_length = kv_lora_rank + rope dims and "
                 "value_length = kv_lora_rank (got %lld, %lld, %lld with kv_lora_rank %lld, rope dims %lld, "
                 "key_length_mla %lld)",
                 static_cast<long long>(hp->n_head_kv), static_cast<long long>(hp->head_dim_k),
                 static_cast<long long>(hp->head_dim_v), static_cast<long long>(hp->kv_lora_rank),
                 static_cast<long long>(hp->rope.n_rot), static_cast<long long>(hp->head_dim_k_mla));
    KT_RETURN_IF(hp->n_layer_dense_lead > 0 && hp->n_ff == 0, KT_STATUS_INVALID_FILE,
                 "deepseek2: '%s' is missing or 0 but %lld layers are dense", r.key("feed_forward_length").c_str(),
                 static_cast<long long>(hp->n_layer_dense_lead));
    if (hp->n_layer_dense_lead < hp->n_layer) {
        KT_RETURN_IF(hp->n_expert == 0, KT_STATUS_INVALID_FILE, "deepseek2: '%s' is missing or 0",
                     r.key("expert_count").c_str());
        KT_TRY(r.get_int("expert_feed_forward_length", 1, kMaxFeedForward, &hp->n_ff_exp));
        KT_TRY(r.get_int("expert_shared_count", 0, kMaxExperts, &hp->n_expert_shared));
        // routed_scaling_factor: V2 16, V3 2.5, the lite models 1. Zero silences every routed expert.
        KT_TRY(r.get_float("expert_weights_scale", 1.0f / 1024, 1024.0f, &hp->expert_weights_scale));
        KT_TRY(r.get_bool_or("expert_weights_norm", false, &hp->expert_weights_norm));
        int64_t gating = 0;
        KT_TRY(r.get_int_or("expert_gating_func", 0, 0, 3, &gating));  // 0 / absent and 1: softmax, 2: sigmoid
        KT_RETURN_IF(gating == 3, KT_STATUS_UNSUPPORTED, "deepseek2: '%s' = 3 (softmax_weight) is not supported",
                     r.key("expert_gating_func").c_str());
        hp->gating = gating == 2 ? ops::Gating::kSigmoid : ops::Gating::kSoftmax;
        KT_TRY(r.get_int_or("expert_group_count", 1, 1, hp->n_expert, &hp->n_group));
        KT_TRY(r.get_int_or("expert_group_used_count", 1, 1, hp->n_group, &hp->n_group_used));
        KT_RETURN_IF(hp->n_expert % hp->n_group != 0 || (hp->n_group > 1 && hp->n_expert / hp->n_group < 2),
                     KT_STATUS_INVALID_FILE, "deepseek2: %lld experts do not form %lld groups of at least two",
                     static_cast<long long>(hp->n_expert), static_cast<long long>(hp->n_group));
    }
    const float mscale = 1.0f + hp->yarn_log_multiplier * std::log(1.0f / hp->rope.freq_scale);
    hp->kq_scale = mscale * mscale / std::sqrt(static_cast<float>(hp->head_dim_k_mla));
    KT_RETURN_IF(!(mscale > 0.0f) || !std::isfinite(hp->kq_scale), KT_STATUS_INVALID_FILE,
                 "deepseek2: '%s' = %g with RoPE scaling factor %g gives the attention scale %g",
                 r.key("rope.scaling.yarn_log_multiplier").c_str(), static_cast<double>(hp->yarn_log_multiplier),
                 static_cast<double>(1.0f / hp->rope.freq_scale), static_cast<double>(hp->kq_scale));
    return Status::ok();
}

void for_each_tensor(const HParams &hp, Weights &w, TensorTable &t) {
    const int64_t E = hp.n_embd, V = hp.n_vocab, H = hp.n_head, Dq = hp.head_dim_k_mla, Dv = hp.head_dim_v_mla;
    const int64_t kv_lora = hp.kv_lora_rank, rope = hp.rope.n_rot, qk_nope = Dq - rope, X = hp.n_expert;
    t.embedding("token_embd", E, V, w.token_embd);
    t.vector("output_norm", E, kRequired, w.output_norm);
    t.linear("output", E, V, kRequired, w.output);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerWeights &L = w.layers[l];
        const std::string b = block_prefix(l);
        t.vector(b + "attn_norm", E, kRequired, L.attn_norm);
        if (hp.q_lora_rank > 0) {
            t.linear(b + "attn_q_a", E, hp.q_lora_rank, kRequired, L.wq_a);
            t.vector(b + "attn_q_a_norm", hp.q_lora_rank, kRequired, L.q_a_norm);
            t.linear(b + "attn_q_b", hp.q_lora_rank, H * Dq, kRequired, L.wq_b);
        } else {
            t.linear(b + "attn_q", E, H * Dq, kRequired, L.wq);
        }
        t.linear(b + "attn_kv_a_mqa", E, kv_lora + rope, kRequired, L.wkv_a);
        t.vector(b + "attn_kv_a_norm", kv_lora, kRequired, L.kv_a_norm);
        t.stack(b + "attn_k_b", qk_nope, kv_lora, H, kRequired, L.k_b);
        t.stack(b + "attn_v_b", kv_lora, Dv, H, kRequired, L.v_b);
        t.linear(b + "attn_output", H * Dv, E, kRequired, L.wo);
        t.vector(b + "ffn_norm", E, kRequired, L.ffn_norm);
        if (l < hp.n_layer_dense_lead) {
            t.ffn(b + "ffn", "", E, hp.n_ff, 0, kRequired, L.ffn);
        } else {
            t.linear(b + "ffn_gate_inp", E, X, kRequired, L.router);
            t.vector_tensor(b + "exp_probs_b.bias", X, kOptional, L.expert_bias);
            t.ffn(b + "ffn", "_exps", E, hp.n_ff_exp, X, kRequired, L.experts);
            if (hp.n_expert_shared > 0) t.ffn(b + "ffn", "_shexp", E, hp.n_ff_exp * hp.n_expert_shared, 0, kRequired, L.shared);
        }
    }
}

// Applies per-head projections of a stack: dst[t, h, :] = W[h] src[t, h, :], gathering each head's rows so that
// each matrix runs once over the batch. src: [T, H, src_stride] (the head's `in` values start at src_offset),
// dst: [T, H, dst_stride] (written from dst_offset).
void per_head(const Stack &w, const float *src, int64_t src_stride, int64_t src_offset, float *dst, int64_t dst_stride,
              int64_t dst_offset, int64_t T, ForwardHost &host) {
    Scratch &s = host.scratch();
    const int64_t H = static_cast<int64_t>(w.linears.size());
    for (int64_t h = 0; h < H; ++h) {
        const ops::Linear &m = *w.linears[static_cast<size_t>(h)];
        const int64_t in = m.in_features(), out = m.out_features();
        for (int64_t t = 0; t < T; ++t)
            std::copy_n(src + (t * H + h) * src_stride + src_offset, in, s.mla_in.data() + t * in);
        m.forward(s.mla_in.data(), T, s.mla_out.data(), host.pool());
        for (int64_t t = 0; t < T; ++t)
            std::copy_n(s.mla_out.data() + t * out, out, dst + (t * H + h) * dst_stride + dst_offset);
    }
}

Status mla_attention(const Model &m, int64_t layer, const Batch &b, ForwardHost &host, const float *h, float *out) {
    const HParams &hp = m.hp;
    const LayerWeights &L = m.w.layers[layer];
    Scratch &s = host.scratch();
    const int64_t T = b.n_tokens, H = hp.n_head, Dq = hp.head_dim_k_mla, kv_lora = hp.kv_lora_rank;
    const int64_t rope = hp.rope.n_rot, qk_nope = Dq - rope, Dk = hp.head_dim_k, Dv = hp.head_dim_v_mla;
    float *q = s.mla_q.data(), *c = s.mla_c.data();

    if (L.wq) {
        L.wq.forward(h, T, q, host.pool());                                   // q [T, H, Dq]
    } else {
        L.wq_a.forward(h, T, s.mla_qa.data(), host.pool());                   // [T, q_lora]
        ops::rms_norm(s.mla_qa.data(), L.q_a_norm.data(), T, hp.q_lora_rank, hp.rms_eps, s.mla_qa.data());
        L.wq_b.forward(s.mla_qa.data(), T, q, host.pool());                   // q [T, H, Dq]
    }
    L.wkv_a.forward(h, T, c, host.pool());                                    // c [T, kv_lora + rope]

    // Q [T, H, rope + kv_lora] = [q_pe ; W_kb q_nope], K [T, rope + kv_lora] = [k_pe ; c_kv], V [T, kv_lora] = c_kv.
    float *Q = s.q.data(), *K = s.k.data(), *Vv = s.v.data();
    for (int64_t t = 0; t < T; ++t) {
        const float *ct = c + t * (kv_lora + rope);
        ops::rms_norm(ct, L.kv_a_norm.data(), 1, kv_lora, hp.rms_eps, K + t * Dk + rope);
        std::copy_n(K + t * Dk + rope, kv_lora, Vv + t * kv_lora);
        std::copy_n(ct + kv_lora, rope, K + t * Dk);
        for (int64_t hh = 0; hh < H; ++hh) std::copy_n(q + (t * H + hh) * Dq + qk_nope, rope, Q + (t * H + hh) * Dk);
    }
    per_head(L.k_b, q, Dq, 0, Q, Dk, rope, T, host);                          // absorption into the latent space
    ops::rope_apply(hp.rope, s.rope.data(), T, H, Dk, H * Dk, Q);
    ops::rope_apply(hp.rope, s.rope.data(), T, 1, Dk, Dk, K);
    KT_TRY(host.attention(layer, Q, K, Vv, s.attn.data()));                   // latent output [T, H, kv_lora]
    per_head(L.v_b, s.attn.data(), kv_lora, 0, s.mla_o.data(), Dv, 0, T, host);  // decompressed [T, H, Dv]
    L.wo.forward(s.mla_o.data(), T, out, host.pool());                        // out [T, E]
    return Status::ok();
}

Status forward(const Model &m, const Batch &b, ForwardHost &host) {
    const HParams &hp = m.hp;
    Scratch &s = host.scratch();
    const int64_t T = b.n_tokens, E = hp.n_embd;
    float *x = s.x.data(), *h = s.h.data(), *f = s.ffn_out.data(), *shared = s.shared.data();

    begin_batch(m, b, host);                                                  // x [T, E]
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const LayerWeights &L = m.w.layers[il];

        host.enter(Phase::kAttention);
        ops::rms_norm(x, L.attn_norm.data(), T, E, hp.rms_eps, h);           // h [T, E]
        KT_TRY(mla_attention(m, il, b, host, h, h));
        ops::add_inplace(x, h, T * E);

        if (il < hp.n_layer_dense_lead) {
            host.enter(Phase::kDenseFfn);
            ops::rms_norm(x, L.ffn_norm.data(), T, E, hp.rms_eps, h);
            dense_ffn(L.ffn, h, T, nullptr, host, f);                         // f [T, E]
        } else {
            host.enter(Phase::kExperts);
            ops::rms_norm(x, L.ffn_norm.data(), T, E, hp.rms_eps, h);
            const ops::RoutingParams routing{.gating = hp.gating, .n_expert = hp.n_expert, .k = hp.n_expert_used,
                                             .renormalize = hp.expert_weights_norm, .scale = hp.expert_weights_scale,
                                             .selection_bias = L.expert_bias.data(), .n_group = hp.n_group,
                                             .n_group_used = hp.n_group_used};
            moe_ffn(L, routing, h, T, host, f);                               // f [T, E] routed experts
            if (L.shared) {
                dense_ffn(L.shared, h, T, nullptr, host, shared);             // ungated shared expert
                ops::add_inplace(f, shared, T * E);
            }
        }
        ops::add_inplace(x, f, T * E);
        KT_TRY(host.layer_done(il));
    }
    output_head(m, b, host);                                                  // logits [n_outputs, V]
    return Status::ok();
}

}  // namespace

extern const Architecture kDeepseek2 = {"deepseek2", read_hparams, for_each_tensor, forward};

}  // namespace kt::model
