#include "model/arch/blocks.h"

#include <algorithm>

#include "ops/transformer_ops.h"

namespace kt::model {

void begin_batch(const Model &m, const Batch &b, ForwardHost &host) {
    Scratch &s = host.scratch();
    const int64_t E = m.hp.n_embd;
    host.enter(Phase::kOther);
    for (int64_t t = 0; t < b.n_tokens; ++t) m.w.token_embd.row(b.tokens[t], s.x.data() + t * E);
    ops::rope_table(m.hp.rope, m.w.rope_freqs.data(), b.positions, b.n_tokens, s.rope.data());
}

Status self_attention(const Model &m, int64_t layer, const Batch &b, ForwardHost &host, const float *h, float *out,
                      const AttentionMask &mask) {
    const HParams &hp = m.hp;
    const LayerWeights &L = m.w.layers[layer];
    Scratch &s = host.scratch();
    const int64_t T = b.n_tokens, H = hp.n_head, Hkv = hp.n_head_kv, Dk = hp.head_dim_k;
    float *q = s.q.data(), *k = s.k.data(), *v = s.v.data();

    KT_TRY(L.wq.forward(h, T, q, host.pool()));                                          // q [T, H, Dk]
    KT_TRY(L.wk.forward(h, T, k, host.pool()));                                          // k [T, Hkv, Dk]
    KT_TRY(L.wv.forward(h, T, v, host.pool()));                                          // v [T, Hkv, Dv]
    if (L.attn_q_norm) ops::rms_norm(q, L.attn_q_norm.data(), T * H, Dk, hp.rms_eps, q);
    if (L.attn_k_norm) ops::rms_norm(k, L.attn_k_norm.data(), T * Hkv, Dk, hp.rms_eps, k);
    ops::rope_apply(hp.rope, s.rope.data(), T, H, Dk, H * Dk, q);
    ops::rope_apply(hp.rope, s.rope.data(), T, Hkv, Dk, Hkv * Dk, k);
    KT_TRY(host.attention(layer, q, k, v, mask, s.attn.data()));            // attn [T, H, Dv]
    KT_TRY(L.wo.forward(s.attn.data(), T, out, host.pool()));                            // out [T, E]
    return Status::ok();
}

Status dense_ffn(const Ffn &ffn, const float *h, int64_t n_tokens, const float *scale, ForwardHost &host, float *out) {
    Scratch &s = host.scratch();
    float *w = s.gates.data();
    for (int64_t t = 0; t < n_tokens; ++t) w[t] = scale ? scale[t] : 1.0f;
    return ffn.experts->forward(h, n_tokens, s.zeros.data(), w, 1, out, host.pool());
}

Status moe_ffn(const LayerWeights &L, const ops::RoutingParams &routing, const float *h, int64_t n_tokens,
               ForwardHost &host, float *out) {
    Scratch &s = host.scratch();
    KT_TRY(L.router.forward(h, n_tokens, s.router.data(), host.pool()));   // router logits [T, X]
    ops::route(routing, s.router.data(), n_tokens, s.ids.data(), s.gates.data());  // ids, gates [T, k]
    return L.experts.experts->forward(h, n_tokens, s.ids.data(), s.gates.data(), routing.k, out, host.pool());  // [T, E]
}

Status moe_and_shared_ffn(const LayerWeights &L, const ops::RoutingParams &routing, const float *h, int64_t n_tokens,
                          ForwardHost &host, float *out) {
    if (!L.shared) return moe_ffn(L, routing, h, n_tokens, host, out);
    Scratch &s = host.scratch();
    // The shared expert's inputs (h, zeros, shared_scale) and output are not touched by moe_ffn until it finishes.
    const ops::ExpertFfn &shared = *L.shared.experts;
    KT_TRY(shared.begin_forward(h, n_tokens, s.zeros.data(), s.shared_scale.data(), 1, s.shared.data(), host.pool()));
    const Status routed = moe_ffn(L, routing, h, n_tokens, host, out);   // out [T, E] routed experts
    const Status finished = shared.finish_forward();                     // shared [T, E]
    KT_TRY(routed);
    KT_TRY(finished);
    ops::add_inplace(out, s.shared.data(), n_tokens * shared.hidden());
    return Status::ok();
}

Status leading_dense_or_moe(const Model &m, int64_t layer, ForwardHost &host, const float *x, int64_t n_tokens,
                            float *out) {
    const HParams &hp = m.hp;
    const LayerWeights &L = m.w.layers[layer];
    Scratch &s = host.scratch();
    const int64_t T = n_tokens, E = hp.n_embd;
    float *h = s.h.data();
    if (layer < hp.n_layer_dense_lead) {
        host.enter(Phase::kDenseFfn);
        ops::rms_norm(x, L.ffn_norm.data(), T, E, hp.rms_eps, h);
        return dense_ffn(L.ffn, h, T, nullptr, host, out);                    // out [T, E]
    }
    host.enter(Phase::kExperts);
    ops::rms_norm(x, L.ffn_norm.data(), T, E, hp.rms_eps, h);
    const ops::RoutingParams routing{.gating = hp.gating, .n_expert = hp.n_expert, .k = hp.n_expert_used,
                                     .renormalize = hp.expert_weights_norm, .scale = hp.expert_weights_scale,
                                     .selection_bias = L.expert_bias.data(), .n_group = hp.n_group,
                                     .n_group_used = hp.n_group_used};
    if (L.shared) std::fill(s.shared_scale.begin(), s.shared_scale.begin() + T, 1.0f);  // ungated shared expert
    return moe_and_shared_ffn(L, routing, h, T, host, out);                   // out [T, E]
}

Status attention_moe_forward(const Model &m, const Batch &b, ForwardHost &host, AttentionBlock attention) {
    const HParams &hp = m.hp;
    Scratch &s = host.scratch();
    const int64_t T = b.n_tokens, E = hp.n_embd;
    float *x = s.x.data(), *h = s.h.data(), *f = s.ffn_out.data();

    begin_batch(m, b, host);                                                  // x [T, E]
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        host.enter(Phase::kAttention);
        ops::rms_norm(x, m.w.layers[il].attn_norm.data(), T, E, hp.rms_eps, h);  // h [T, E]
        KT_TRY(attention(m, il, b, host, h, h));
        ops::add_inplace(x, h, T * E);

        KT_TRY(leading_dense_or_moe(m, il, host, x, T, f));                   // f [T, E]
        ops::add_inplace(x, f, T * E);
        KT_TRY(host.layer_done(il));
    }
    return output_head(m, b, host);                                           // logits [n_outputs, V]
}

Status output_head(const Model &m, const Batch &b, ForwardHost &host) {
    if (b.n_outputs == 0) return Status::ok();
    host.enter(Phase::kHead);
    Scratch &s = host.scratch();
    const int64_t E = m.hp.n_embd;
    if (b.output_rows) {  // one row per sequence of a batched step
        for (int64_t i = 0; i < b.n_outputs; ++i)
            ops::rms_norm(s.x.data() + b.output_rows[i] * E, m.w.output_norm.data(), 1, E, m.hp.rms_eps,
                          s.h.data() + i * E);
    } else {
        const float *last = s.x.data() + (b.n_tokens - b.n_outputs) * E;
        ops::rms_norm(last, m.w.output_norm.data(), b.n_outputs, E, m.hp.rms_eps, s.h.data());
    }
    return m.w.output.forward(s.h.data(), b.n_outputs, b.logits, host.pool());                 // logits [n_outputs, V]
}

}  // namespace kt::model
