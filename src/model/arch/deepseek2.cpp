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
// kq_scale = mscale² / √Dq with mscale = r · (1 + yarn_log_multiplier · ln(scaling factor)), r the net cos/sin
// scale of the RoPE (1 for every published file; llama.cpp's TAG_DEEPSEEK2_YARN_LOG_MUL_FIX convention: the file
// stores 0.1 · mscale_all_dim).
//
// Files in the legacy convention (how DeepSeek-V2/V3/R1 GGUFs were converted before the MLA split: one attn_kv_b
// {kv_lora, H·(qk_nope + v)} per layer, head_count_kv = H, key_length = qk_nope + rope, value_length = v, no *_mla
// keys) run the same way: attn_kv_b is split at load into the absorbed k_b (its key rows transposed) and v_b, and
// the hyperparameters are restated in the MLA convention, so the cache holds the latent only for both.
#include <cmath>

#include "model/arch/blocks.h"
#include "model/arch/families.h"

namespace kt::model {
namespace {

Status read_hparams(const gguf::File &file, HParams *hp) {
    HParamReader r(file, hp->arch);
    KT_TRY(read_common_hparams(file, r, hp));
    hp->rope.mode = ops::RopeMode::kNorm;
    KT_TRY(r.get_int("leading_dense_block_count", 0, hp->n_layer, &hp->n_layer_dense_lead));
    KT_TRY(r.get_int_or("attention.q_lora_rank", 0, 0, kMaxEmbedding, &hp->q_lora_rank));
    KT_TRY(r.get_int("attention.kv_lora_rank", 1, kMaxHeadDim, &hp->kv_lora_rank));
    hp->legacy_kv_b = !r.has("attention.key_length_mla") && !r.has("attention.value_length_mla");
    if (hp->legacy_kv_b) {
        // Multi-head as stored: every head has its own key (qk_nope + rope) and value. Restated as MLA (one KV head
        // of the latent plus the shared RoPE key) for the attention kt runs.
        KT_RETURN_IF(hp->n_head_kv != hp->n_head || hp->rope.n_rot >= hp->head_dim_k, KT_STATUS_INVALID_FILE,
                     "deepseek2 (legacy attn_kv_b convention): head_count_kv %lld must equal head_count %lld and the "
                     "rope dims %lld be below key_length %lld",
                     static_cast<long long>(hp->n_head_kv), static_cast<long long>(hp->n_head),
                     static_cast<long long>(hp->rope.n_rot), static_cast<long long>(hp->head_dim_k));
        hp->head_dim_k_mla = hp->head_dim_k;
        hp->head_dim_v_mla = hp->head_dim_v;
        hp->n_head_kv = 1;
        hp->head_dim_k = hp->kv_lora_rank + hp->rope.n_rot;
        hp->head_dim_v = hp->kv_lora_rank;
    } else {
        KT_TRY(r.get_int("attention.key_length_mla", 1, kMaxHeadDim, &hp->head_dim_k_mla));
        KT_TRY(r.get_int("attention.value_length_mla", 1, kMaxHeadDim, &hp->head_dim_v_mla));
    }
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
    hp->v_in_k = hp->rope.n_rot;  // K = [k_pe ; c_kv], V = c_kv
    // DeepSeek-V2 files have no gating key: softmax (V3 writes 2, sigmoid).
    if (hp->n_layer_dense_lead < hp->n_layer) KT_TRY(read_routed_experts(r, ops::Gating::kSoftmax, hp));
    const float mscale = rope_magnitude(*hp) * (1.0f + hp->yarn_log_multiplier * std::log(1.0f / hp->rope.freq_scale));
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
        if (hp.legacy_kv_b) {
            t.split_kv_b(b + "attn_kv_b", kv_lora, qk_nope, Dv, H, L.k_b, L.v_b);
        } else {
            t.stack(b + "attn_k_b", qk_nope, kv_lora, H, kRequired, L.k_b);
            t.stack(b + "attn_v_b", kv_lora, Dv, H, kRequired, L.v_b);
        }
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
Status per_head(const Stack &w, const float *src, int64_t src_stride, int64_t src_offset, float *dst, int64_t dst_stride,
              int64_t dst_offset, int64_t T, ForwardHost &host) {
    Scratch &s = host.scratch();
    const int64_t H = static_cast<int64_t>(w.linears.size());
    for (int64_t h = 0; h < H; ++h) {
        const ops::Linear &m = *w.linears[static_cast<size_t>(h)];
        const int64_t in = m.in_features(), out = m.out_features();
        for (int64_t t = 0; t < T; ++t)
            std::copy_n(src + (t * H + h) * src_stride + src_offset, in, s.mla_in.data() + t * in);
        KT_TRY(m.forward(s.mla_in.data(), T, s.mla_out.data(), host.pool()));
        for (int64_t t = 0; t < T; ++t)
            std::copy_n(s.mla_out.data() + t * out, out, dst + (t * H + h) * dst_stride + dst_offset);
    }
    return Status::ok();
}

Status mla_attention(const Model &m, int64_t layer, const Batch &b, ForwardHost &host, const float *h, float *out) {
    const HParams &hp = m.hp;
    const LayerWeights &L = m.w.layers[layer];
    Scratch &s = host.scratch();
    const int64_t T = b.n_tokens, H = hp.n_head, Dq = hp.head_dim_k_mla, kv_lora = hp.kv_lora_rank;
    const int64_t rope = hp.rope.n_rot, qk_nope = Dq - rope, Dk = hp.head_dim_k, Dv = hp.head_dim_v_mla;
    float *q = s.mla_q.data(), *c = s.mla_c.data();

    if (L.wq) {
        KT_TRY(L.wq.forward(h, T, q, host.pool()));                           // q [T, H, Dq]
    } else {
        KT_TRY(L.wq_a.forward(h, T, s.mla_qa.data(), host.pool()));           // [T, q_lora]
        ops::rms_norm(s.mla_qa.data(), L.q_a_norm.data(), T, hp.q_lora_rank, hp.rms_eps, s.mla_qa.data());
        KT_TRY(L.wq_b.forward(s.mla_qa.data(), T, q, host.pool()));           // q [T, H, Dq]
    }
    KT_TRY(L.wkv_a.forward(h, T, c, host.pool()));                            // c [T, kv_lora + rope]

    // Q [T, H, rope + kv_lora] = [q_pe ; W_kb q_nope], K [T, rope + kv_lora] = [k_pe ; c_kv], V [T, kv_lora] = c_kv.
    float *Q = s.q.data(), *K = s.k.data(), *Vv = s.v.data();
    for (int64_t t = 0; t < T; ++t) {
        const float *ct = c + t * (kv_lora + rope);
        ops::rms_norm(ct, L.kv_a_norm.data(), 1, kv_lora, hp.rms_eps, K + t * Dk + rope);
        std::copy_n(K + t * Dk + rope, kv_lora, Vv + t * kv_lora);
        std::copy_n(ct + kv_lora, rope, K + t * Dk);
        for (int64_t hh = 0; hh < H; ++hh) std::copy_n(q + (t * H + hh) * Dq + qk_nope, rope, Q + (t * H + hh) * Dk);
    }
    KT_TRY(per_head(L.k_b, q, Dq, 0, Q, Dk, rope, T, host));                  // absorption into the latent space
    ops::rope_apply(hp.rope, s.rope.data(), T, H, Dk, H * Dk, Q);
    ops::rope_apply(hp.rope, s.rope.data(), T, 1, Dk, Dk, K);
    KT_TRY(host.attention(layer, Q, K, Vv, AttentionMask(), s.attn.data()));  // latent output [T, H, kv_lora]
    KT_TRY(per_head(L.v_b, s.attn.data(), kv_lora, 0, s.mla_o.data(), Dv, 0, T, host)); // decompressed [T, H, Dv]
    KT_TRY(L.wo.forward(s.mla_o.data(), T, out, host.pool()));                // out [T, E]
    return Status::ok();
}

Status forward(const Model &m, const Batch &b, ForwardHost &host) { return attention_moe_forward(m, b, host, mla_attention); }

}  // namespace

extern const Architecture kDeepseek2 = {"deepseek2", read_hparams, for_each_tensor, forward};

}  // namespace kt::model
