// gpt-oss: OpenAI's gpt-oss-20b / -120b (llama.cpp's src/models/openai-moe.cpp; shared/testdata/models/
// README.glm4moe-gpt-oss.md). Per layer:
//   h    = x + (Wo · attention(RMSNorm(x) · attn_norm) + bo)   Q/K/V/O biases; head size rope.dimension_count;
//                                                              full-head NEOX RoPE with YaRN; kq_scale 1/√head;
//                                                              one sink logit per head in the softmax; layers
//                                                              0, 2, 4, ... see a sliding window of n_swa positions
//                                                              (sliding_window_pattern: the period), the others all
//   out  = h + MoE(RMSNorm(h) · post_attention_norm)           router logits W x + b, the top k of them, weights =
//                                                              softmax over those k; experts with biases and the
//                                                              clamped SwiGLU: min(g, 7) · σ(1.702 · min(g, 7)) ·
//                                                              (clamp(u, -7, 7) + 1)
// The experts ship in MXFP4 (ggml type 39), which the expert engine computes as stored.
#include <cmath>

#include "model/arch/blocks.h"
#include "model/arch/families.h"

namespace kt::model {
namespace {

// The constants of gpt-oss's SwiGLU (hard-coded in llama.cpp too; the GGUF has no keys for them).
constexpr float kSwigluAlpha = 1.702f;
constexpr float kSwigluLimit = 7.0f;

Status read_hparams(const gguf::File &file, HParams *hp) {
    HParamReader r(file, hp->arch);
    KT_TRY(read_common_hparams(file, r, hp));
    hp->rope.mode = ops::RopeMode::kNeox;
    // q, k and v heads are rope.dimension_count wide (llama.cpp's n_rot), whatever key_length says.
    hp->head_dim_k = hp->head_dim_v = hp->rope.n_rot;
    hp->kq_scale = 1.0f / std::sqrt(static_cast<float>(hp->rope.n_rot));
    KT_RETURN_IF(hp->n_expert == 0, KT_STATUS_INVALID_FILE, "gpt-oss: '%s' is missing or 0", r.key("expert_count").c_str());
    KT_TRY(r.get_int("expert_feed_forward_length", 1, kMaxFeedForward, &hp->n_ff_exp));
    hp->gating = ops::Gating::kSoftmaxWeight;
    KT_TRY(r.get_int("attention.sliding_window", 1, kMaxContext, &hp->n_swa));
    KT_TRY(r.get_int_or("attention.sliding_window_pattern", 2, 1, kMaxLayers, &hp->swa_period));
    KT_RETURN_IF(r.has("rope.freq_base_swa"), KT_STATUS_UNSUPPORTED,
                 "gpt-oss: '%s' (a separate RoPE base for the sliding-window layers) is not supported",
                 r.key("rope.freq_base_swa").c_str());
    return Status::ok();
}

// llama.cpp's set_swa_pattern(n): layer il is a sliding-window layer when il % n < n - 1.
bool sliding(const HParams &hp, int64_t layer) { return hp.swa_period > 1 && layer % hp.swa_period < hp.swa_period - 1; }

void for_each_tensor(const HParams &hp, Weights &w, TensorTable &t) {
    const int64_t E = hp.n_embd, V = hp.n_vocab, H = hp.n_head, Hkv = hp.n_head_kv, D = hp.head_dim_k;
    const int64_t X = hp.n_expert;
    ops::ExpertOptions swiglu;
    swiglu.swiglu_alpha = kSwigluAlpha;
    swiglu.swiglu_limit = kSwigluLimit;
    t.embedding("token_embd", E, V, w.token_embd);
    t.vector("output_norm", E, kRequired, w.output_norm);
    t.linear("output", E, V, kRequired, w.output);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
        LayerWeights &L = w.layers[l];
        const std::string b = block_prefix(l);
        t.vector(b + "attn_norm", E, kRequired, L.attn_norm);
        t.linear(b + "attn_q", E, H * D, kBias, L.wq);
        t.linear(b + "attn_k", E, Hkv * D, kBias, L.wk);
        t.linear(b + "attn_v", E, Hkv * D, kBias, L.wv);
        t.linear(b + "attn_output", H * D, E, kBias, L.wo);
        t.vector(b + "attn_sinks", H, kRequired, L.attn_sinks);
        t.vector(b + "post_attention_norm", E, kRequired, L.ffn_norm);
        t.linear(b + "ffn_gate_inp", E, X, kBias, L.router);
        t.ffn(b + "ffn", "_exps", E, hp.n_ff_exp, X, kBias, swiglu, L.experts);
    }
}

// Sliding window on the SWA layers, the layer's sinks on all.
Status attention(const Model &m, int64_t layer, const Batch &b, ForwardHost &host, const float *h, float *out) {
    AttentionMask mask;
    mask.window = sliding(m.hp, layer) ? m.hp.n_swa : 0;
    mask.sinks = m.w.layers[layer].attn_sinks.data();
    return self_attention(m, layer, b, host, h, out, mask);
}

// The MoE is leading_dense_or_moe's with no dense layers, no shared expert and kSoftmaxWeight routing.
Status forward(const Model &m, const Batch &b, ForwardHost &host) { return attention_moe_forward(m, b, host, attention); }

}  // namespace

extern const Architecture kGptOss = {"gpt-oss", read_hparams, for_each_tensor, forward};

}  // namespace kt::model
