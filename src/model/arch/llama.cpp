// llama: the LLaMA block (Llama 2/3, Mistral) and, with expert_count > 0, Mixtral's sparse MoE.
//   RMSNorm -> attention (NORM RoPE, GQA, optional biases) -> residual -> RMSNorm -> SwiGLU FFN -> residual.
//   Mixtral replaces the FFN with softmax top-k routing over experts of width feed_forward_length, the k weights
//   renormalised to sum to 1 (reference/gguf-and-quants.md §5.4).
//
// This graph is also qwen2's, qwen3's and qwen3moe's: what differs between them (RoPE mode, Q/K/V biases, per-head
// Q/K norms, tied head) is in their hyperparameters and tensor tables, and self_attention applies whatever the
// layer has.
#include "model/arch/blocks.h"
#include "model/arch/families.h"

namespace kt::model {
namespace {

Status read_hparams(const gguf::File &file, HParams *hp) {
    HParamReader r(file, hp->arch);
    KT_TRY(read_common_hparams(file, r, hp));
    hp->rope.mode = ops::RopeMode::kNorm;
    KT_RETURN_IF(hp->rope.n_rot != hp->head_dim_k, KT_STATUS_UNSUPPORTED,
                 "llama: rope.dimension_count %lld differs from the head dimension %lld",
                 static_cast<long long>(hp->rope.n_rot), static_cast<long long>(hp->head_dim_k));
    KT_RETURN_IF(hp->n_ff == 0, KT_STATUS_INVALID_FILE, "llama: '%s' is missing or 0",
                 r.key("feed_forward_length").c_str());
    hp->n_ff_exp = hp->n_ff;  // Mixtral's experts have the dense width
    return Status::ok();
}

void for_each_tensor(const HParams &hp, Weights &w, TensorTable &t) {
    const int64_t E = hp.n_embd, V = hp.n_vocab, H = hp.n_head, Hkv = hp.n_head_kv;
    const int64_t Dk = hp.head_dim_k, Dv = hp.head_dim_v, F = hp.n_ff, X = hp.n_expert;
    t.embedding("token_embd", E, V, w.token_embd);
    t.vector("rope_freqs", hp.rope.n_rot / 2, kOptional, w.rope_freqs);
    t.vector("output_norm", E, kRequired, w.output_norm);
    t.linear("output", E, V, kOptional | kTiedToEmbedding, w.output);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerWeights &L = w.layers[l];
        const std::string b = block_prefix(l);
        t.vector(b + "attn_norm", E, kRequired, L.attn_norm);
        t.linear(b + "attn_q", E, H * Dk, kOptionalBias, L.wq);
        t.linear(b + "attn_k", E, Hkv * Dk, kOptionalBias, L.wk);
        t.linear(b + "attn_v", E, Hkv * Dv, kOptionalBias, L.wv);
        t.linear(b + "attn_output", H * Dv, E, kOptionalBias, L.wo);
        t.vector(b + "ffn_norm", E, kRequired, L.ffn_norm);
        if (X == 0) {
            t.ffn(b + "ffn", "", E, F, 0, kRequired, L.ffn);
        } else {
            t.linear(b + "ffn_gate_inp", E, X, kRequired, L.router);
            t.ffn(b + "ffn", "_exps", E, F, X, kRequired, L.experts);
        }
    }
}

}  // namespace

Status llama_forward(const Model &m, const Batch &b, ForwardHost &host) {
    const HParams &hp = m.hp;
    Scratch &s = host.scratch();
    const int64_t T = b.n_tokens, E = hp.n_embd;
    float *x = s.x.data(), *h = s.h.data(), *f = s.ffn_out.data();
    const ops::RoutingParams routing{.gating = ops::Gating::kSoftmax, .n_expert = hp.n_expert,
                                     .k = hp.n_expert_used, .renormalize = true};

    begin_batch(m, b, host);                                                // x [T, E]
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const LayerWeights &L = m.w.layers[il];

        host.enter(Phase::kAttention);
        ops::rms_norm(x, L.attn_norm.data(), T, E, hp.rms_eps, h);         // h [T, E]
        KT_TRY(self_attention(m, il, b, host, h, h));
        ops::add_inplace(x, h, T * E);

        host.enter(hp.n_expert == 0 ? Phase::kDenseFfn : Phase::kExperts);
        ops::rms_norm(x, L.ffn_norm.data(), T, E, hp.rms_eps, h);
        if (hp.n_expert == 0) {
            KT_TRY(dense_ffn(L.ffn, h, T, nullptr, host, f));                  // f [T, E]
        } else {
            KT_TRY(moe_ffn(L, routing, h, T, host, f));
        }
        ops::add_inplace(x, f, T * E);
        KT_TRY(host.layer_done(il));
    }
    KT_TRY(output_head(m, b, host));                                        // logits [n_outputs, V]
    return Status::ok();
}

extern const Architecture kLlama = {"llama", read_hparams, for_each_tensor, llama_forward};

}  // namespace kt::model
