// glm4moe: GLM-4.5 / GLM-4.5-Air / GLM-4.6 (llama.cpp's src/models/glm4-moe.cpp; shared/testdata/models/
// README.glm4moe-gpt-oss.md). Per layer, with the FFN input norm stored as post_attention_norm:
//   h    = x + Wo · attention(RMSNorm(x) · attn_norm)        Q/K/V biases optional; per-head RMSNorm of q and k
//                                                            (attn_q_norm / attn_k_norm) optional, before RoPE;
//                                                            NEOX RoPE on the first rope.dimension_count dims of
//                                                            each head (GLM: half of the head); kq_scale 1/√Dk
//   out  = h + FFN(RMSNorm(h) · post_attention_norm)         dense SwiGLU for the leading_dense_block_count layers,
//                                                            else sigmoid + exp_probs_b selection, the unbiased
//                                                            sigmoid weights renormalised and scaled, plus the
//                                                            ungated shared expert
// The last nextn_predict_layers blocks are GLM's multi-token-prediction heads: their tensors belong to the file
// but are never computed (n_layer counts the others), as in llama.cpp.
#include "model/arch/blocks.h"
#include "model/arch/families.h"

namespace kt::model {
namespace {

Status read_hparams(const gguf::File &file, HParams *hp) {
    HParamReader r(file, hp->arch);
    KT_TRY(read_common_hparams(file, r, hp));
    hp->rope.mode = ops::RopeMode::kNeox;
    KT_TRY(r.get_int_or("nextn_predict_layers", 0, 0, hp->n_layer - 1, &hp->n_layer_nextn));
    hp->n_layer -= hp->n_layer_nextn;
    KT_TRY(r.get_int_or("leading_dense_block_count", 0, 0, hp->n_layer, &hp->n_layer_dense_lead));
    KT_RETURN_IF(hp->n_layer_dense_lead > 0 && hp->n_ff == 0, KT_STATUS_INVALID_FILE,
                 "glm4moe: '%s' is missing or 0 but %lld layers are dense", r.key("feed_forward_length").c_str(),
                 static_cast<long long>(hp->n_layer_dense_lead));
    if (hp->n_layer_dense_lead < hp->n_layer) KT_TRY(read_routed_experts(r, ops::Gating::kSigmoid, hp));
    return Status::ok();
}

void for_each_tensor(const HParams &hp, Weights &w, TensorTable &t) {
    const int64_t E = hp.n_embd, V = hp.n_vocab, H = hp.n_head, Hkv = hp.n_head_kv;
    const int64_t Dk = hp.head_dim_k, Dv = hp.head_dim_v, X = hp.n_expert;
    t.embedding("token_embd", E, V, w.token_embd);
    t.vector("output_norm", E, kRequired, w.output_norm);
    t.linear("output", E, V, kRequired, w.output);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerWeights &L = w.layers[l];
        const std::string b = block_prefix(l);
        t.vector(b + "attn_norm", E, kRequired, L.attn_norm);
        t.linear(b + "attn_q", E, H * Dk, kOptionalBias, L.wq);
        t.linear(b + "attn_k", E, Hkv * Dk, kOptionalBias, L.wk);
        t.linear(b + "attn_v", E, Hkv * Dv, kOptionalBias, L.wv);
        t.linear(b + "attn_output", H * Dv, E, kRequired, L.wo);
        t.vector(b + "attn_q_norm", Dk, kOptional, L.attn_q_norm);
        t.vector(b + "attn_k_norm", Dk, kOptional, L.attn_k_norm);
        t.vector(b + "post_attention_norm", E, kRequired, L.ffn_norm);
        if (l < hp.n_layer_dense_lead) {
            t.ffn(b + "ffn", "", E, hp.n_ff, 0, kRequired, L.ffn);
        } else {
            t.linear(b + "ffn_gate_inp", E, X, kRequired, L.router);
            t.vector_tensor(b + "exp_probs_b.bias", X, kRequired, L.expert_bias);
            t.ffn(b + "ffn", "_exps", E, hp.n_ff_exp, X, kRequired, L.experts);
            if (hp.n_expert_shared > 0) t.ffn(b + "ffn", "_shexp", E, hp.n_ff_exp * hp.n_expert_shared, 0, kRequired, L.shared);
        }
    }
    for (int64_t l = hp.n_layer; l < hp.n_layer + hp.n_layer_nextn; ++l) t.skip(block_prefix(l));
}

Status attention(const Model &m, int64_t layer, const Batch &b, ForwardHost &host, const float *h, float *out) {
    return self_attention(m, layer, b, host, h, out);
}

Status forward(const Model &m, const Batch &b, ForwardHost &host) { return attention_moe_forward(m, b, host, attention); }

}  // namespace

extern const Architecture kGlm4Moe = {"glm4moe", read_hparams, for_each_tensor, forward};

}  // namespace kt::model
