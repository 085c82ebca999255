// qwen2: Qwen2 / Qwen2.5 dense models. The LLaMA graph (llama_forward) with NEOX RoPE and biases on Q, K and V;
// the output head is tied to token_embd in the small models (no output.weight).
#include "model/arch/blocks.h"
#include "model/arch/families.h"

namespace kt::model {
namespace {

Status read_hparams(const gguf::File &file, HParams *hp) {
    HParamReader r(file, hp->arch);
    KT_TRY(read_common_hparams(file, r, hp));
    hp->rope.mode = ops::RopeMode::kNeox;
    KT_RETURN_IF(hp->n_ff == 0, KT_STATUS_INVALID_FILE, "qwen2: '%s' is missing or 0",
                 r.key("feed_forward_length").c_str());
    KT_RETURN_IF(hp->n_expert != 0, KT_STATUS_INVALID_FILE, "qwen2: '%s' is set; MoE models are qwen2moe",
                 r.key("expert_count").c_str());
    return Status::ok();
}

void for_each_tensor(const HParams &hp, Weights &w, TensorTable &t) {
    const int64_t E = hp.n_embd, V = hp.n_vocab, H = hp.n_head, Hkv = hp.n_head_kv;
    const int64_t Dk = hp.head_dim_k, Dv = hp.head_dim_v, F = hp.n_ff;
    t.embedding("token_embd", E, V, w.token_embd);
    t.vector("output_norm", E, kRequired, w.output_norm);
    t.linear("output", E, V, kOptional | kTiedToEmbedding, w.output);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerWeights &L = w.layers[l];
        const std::string b = block_prefix(l);
        t.vector(b + "attn_norm", E, kRequired, L.attn_norm);
        t.linear(b + "attn_q", E, H * Dk, kBias, L.wq);
        t.linear(b + "attn_k", E, Hkv * Dk, kBias, L.wk);
        t.linear(b + "attn_v", E, Hkv * Dv, kBias, L.wv);
        t.linear(b + "attn_output", H * Dv, E, kRequired, L.wo);
        t.vector(b + "ffn_norm", E, kRequired, L.ffn_norm);
        t.ffn(b + "ffn", "", E, F, 0, kRequired, L.ffn);
    }
}

}  // namespace

extern const Architecture kQwen2 = {"qwen2", read_hparams, for_each_tensor, llama_forward};

}  // namespace kt::model
