// qwen3moe: Qwen3 MoE models (Qwen3-30B-A3B, Qwen3-235B-A22B). Qwen3's attention (NEOX RoPE, per-head Q/K
// RMSNorm) and, in every layer, softmax top-k routing over experts of width expert_feed_forward_length with the k
// weights renormalised (reference/gguf-and-quants.md §5.2) — the LLaMA graph's MoE path (llama_forward).
#include "model/arch/blocks.h"
#include "model/arch/families.h"

namespace kt::model {
namespace {

Status read_hparams(const gguf::File &file, HParams *hp) {
    HParamReader r(file, hp->arch);
    KT_TRY(read_common_hparams(file, r, hp));
    hp->rope.mode = ops::RopeMode::kNeox;
    KT_RETURN_IF(hp->n_expert == 0, KT_STATUS_INVALID_FILE, "qwen3moe: '%s' is missing or 0",
                 r.key("expert_count").c_str());
    KT_TRY(r.get_int_or("expert_feed_forward_length", hp->n_ff / hp->n_expert_used, 1, kMaxFeedForward,
                        &hp->n_ff_exp));
    KT_RETURN_IF(hp->n_ff_exp == 0, KT_STATUS_INVALID_FILE, "qwen3moe: '%s' is missing and feed_forward_length is 0",
                 r.key("expert_feed_forward_length").c_str());
    return Status::ok();
}

void for_each_tensor(const HParams &hp, Weights &w, TensorTable &t) {
    const int64_t E = hp.n_embd, V = hp.n_vocab, H = hp.n_head, Hkv = hp.n_head_kv;
    const int64_t Dk = hp.head_dim_k, Dv = hp.head_dim_v, Fe = hp.n_ff_exp, X = hp.n_expert;
    t.embedding("token_embd", E, V, w.token_embd);
    t.vector("output_norm", E, kRequired, w.output_norm);
    t.linear("output", E, V, kOptional | kTiedToEmbedding, w.output);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerWeights &L = w.layers[l];
        const std::string b = block_prefix(l);
        t.vector(b + "attn_norm", E, kRequired, L.attn_norm);
        t.linear(b + "attn_q", E, H * Dk, kRequired, L.wq);
        t.linear(b + "attn_k", E, Hkv * Dk, kRequired, L.wk);
        t.linear(b + "attn_v", E, Hkv * Dv, kRequired, L.wv);
        t.linear(b + "attn_output", H * Dv, E, kRequired, L.wo);
        t.vector(b + "attn_q_norm", Dk, kRequired, L.attn_q_norm);
        t.vector(b + "attn_k_norm", Dk, kRequired, L.attn_k_norm);
        t.vector(b + "ffn_norm", E, kRequired, L.ffn_norm);
        t.linear(b + "ffn_gate_inp", E, X, kRequired, L.router);
        t.ffn(b + "ffn", "_exps", E, Fe, X, kRequired, L.experts);
    }
}

}  // namespace

extern const Architecture kQwen3Moe = {"qwen3moe", read_hparams, for_each_tensor, llama_forward};

}  // namespace kt::model
