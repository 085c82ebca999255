// qwen2moe: Qwen1.5-MoE / Qwen2-57B-A14B (reference/gguf-and-quants.md §5.3). Qwen2's attention (NEOX RoPE,
// Q/K/V biases); the FFN is softmax top-k routing over experts *without* renormalising the k weights, plus a
// shared expert scaled per token by sigmoid(ffn_gate_inp_shexp · h). llama.cpp computes that sigmoid as
// silu(z)/z, which is NaN at z = 0; kt computes the sigmoid itself.
#include "model/arch/blocks.h"
#include "model/arch/families.h"

namespace kt::model {
namespace {

Status read_hparams(const gguf::File &file, HParams *hp) {
    HParamReader r(file, hp->arch);
    KT_TRY(read_common_hparams(file, r, hp));
    hp->rope.mode = ops::RopeMode::kNeox;
    KT_RETURN_IF(hp->n_expert == 0, KT_STATUS_INVALID_FILE, "qwen2moe: '%s' is missing or 0",
                 r.key("expert_count").c_str());
    KT_TRY(r.get_int_or("expert_feed_forward_length", hp->n_ff / hp->n_expert_used, 1, kMaxFeedForward,
                        &hp->n_ff_exp));
    KT_TRY(r.get_int_or("expert_shared_feed_forward_length", hp->n_ff, 1, kMaxFeedForward, &hp->n_ff_shexp));
    KT_RETURN_IF(hp->n_ff_exp == 0 || hp->n_ff_shexp == 0, KT_STATUS_INVALID_FILE,
                 "qwen2moe: expert widths are missing and feed_forward_length is 0");
    return Status::ok();
}

void for_each_tensor(const HParams &hp, Weights &w, TensorTable &t) {
    const int64_t E = hp.n_embd, V = hp.n_vocab, H = hp.n_head, Hkv = hp.n_head_kv;
    const int64_t Dk = hp.head_dim_k, Dv = hp.head_dim_v, Fe = hp.n_ff_exp, Fs = hp.n_ff_shexp, X = hp.n_expert;
    t.embedding("token_embd", E, V, w.token_embd);
    t.vector("output_norm", E, kRequired, w.output_norm);
    t.linear("output", E, V, kRequired, w.output);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerWeights &L = w.layers[l];
        const std::string b = block_prefix(l);
        t.vector(b + "attn_norm", E, kRequired, L.attn_norm);
        t.linear(b + "attn_q", E, H * Dk, kBias, L.wq);
        t.linear(b + "attn_k", E, Hkv * Dk, kBias, L.wk);
        t.linear(b + "attn_v", E, Hkv * Dv, kBias, L.wv);
        t.linear(b + "attn_output", H * Dv, E, kRequired, L.wo);
        t.vector(b + "ffn_norm", E, kRequired, L.ffn_norm);
        t.linear(b + "ffn_gate_inp", E, X, kRequired, L.router);
        t.ffn(b + "ffn", "_exps", E, Fe, X, kRequired, L.experts);
        t.vector(b + "ffn_gate_inp_shexp", E, kRequired, L.shared_gate);
        t.ffn(b + "ffn", "_shexp", E, Fs, 0, kRequired, L.shared);
    }
}

Status forward(const Model &m, const Batch &b, ForwardHost &host) {
    const HParams &hp = m.hp;
    Scratch &s = host.scratch();
    const int64_t T = b.n_tokens, E = hp.n_embd;
    float *x = s.x.data(), *h = s.h.data(), *f = s.ffn_out.data();
    const ops::RoutingParams routing{.gating = ops::Gating::kSoftmax, .n_expert = hp.n_expert,
                                     .k = hp.n_expert_used, .renormalize = false};

    begin_batch(m, b, host);                                                // x [T, E]
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const LayerWeights &L = m.w.layers[il];

        host.enter(Phase::kAttention);
        ops::rms_norm(x, L.attn_norm.data(), T, E, hp.rms_eps, h);         // h [T, E]
        KT_TRY(self_attention(m, il, b, host, h, h));
        ops::add_inplace(x, h, T * E);

        host.enter(Phase::kExperts);
        ops::rms_norm(x, L.ffn_norm.data(), T, E, hp.rms_eps, h);
        for (int64_t t = 0; t < T; ++t)                                     // shared-expert gate [T]
            s.shared_scale[t] = ops::sigmoid(ops::dot(L.shared_gate.data(), h + t * E, E));
        KT_TRY(moe_and_shared_ffn(L, routing, h, T, host, f));              // f [T, E] routed + gated shared
        ops::add_inplace(x, f, T * E);
        KT_TRY(host.layer_done(il));
    }
    KT_TRY(output_head(m, b, host));                                        // logits [n_outputs, V]
    return Status::ok();
}

}  // namespace

extern const Architecture kQwen2Moe = {"qwen2moe", read_hparams, for_each_tensor, forward};

}  // namespace kt::model
