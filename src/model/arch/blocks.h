// The building blocks the families' forward passes are made of. Each family's file shows its layer structure
// top to bottom and calls these for the parts they share; shapes are in the comments, T = tokens in the batch.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/arch/arch.h"
#include "model/model.h"

namespace kt::model {

// x [T, E] = token_embd[tokens]; the batch's RoPE cos/sin table into scratch.rope.
void begin_batch(const Model &m, const Batch &b, ForwardHost &host);

// The attention sub-block, h [T, E] -> out [T, E] (out may alias h):
//   q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv)          q [T, H, Dk], k [T, Hkv, Dk], v [T, Hkv, Dv]
//   q, k    = RMSNorm per head (when the layer has attn_q_norm / attn_k_norm: qwen3, qwen3moe, glm4moe)
//   q, k    = RoPE(q, k)                                    NORM or NEOX on the first n_rot dims, from the hparams
//   a       = softmax(kq_scale · q kᵀ + mask) v              over the KV cache, GQA (mask: causal, or a sliding
//                                                           window, with sinks); a [T, H, Dv]
//   out     = Wo a (+bo)                                    [T, E]
Status self_attention(const Model &m, int64_t layer, const Batch &b, ForwardHost &host, const float *h, float *out,
                      const AttentionMask &mask = AttentionMask());

// A dense SwiGLU FFN, run as a one-expert pool: out [T, E] = W_down(silu(W_gate h) ⊙ W_up h), scaled per token by
// `scale` ([T], or null for 1).
Status dense_ffn(const Ffn &ffn, const float *h, int64_t n_tokens, const float *scale, ForwardHost &host, float *out);

// A routed MoE FFN: router logits [T, X] = W_gate_inp h; top-k experts and weights per token by `routing`;
// out [T, E] = Σ_j w_j · expert_j(h).
Status moe_ffn(const LayerWeights &L, const ops::RoutingParams &routing, const float *h, int64_t n_tokens,
               ForwardHost &host, float *out);

// The routed experts plus, when the layer has one, its shared expert weighted per token by scratch.shared_scale
// (which the caller fills): out [T, E] = moe_ffn(h) + shared_scale[t] · shared(h). The shared expert begins before
// the routed experts and finishes after them (ExpertFfn::begin_forward), so one on a device runs while the CPU
// computes the routed experts; on the CPU it is computed first.
Status moe_and_shared_ffn(const LayerWeights &L, const ops::RoutingParams &routing, const float *h, int64_t n_tokens,
                          ForwardHost &host, float *out);

// The FFN sub-block of deepseek2 and glm4moe, x [T, E] -> out [T, E] (h: scratch.h):
//   h   = RMSNorm(x) · ffn_norm                          (glm4moe's post_attention_norm is bound as ffn_norm)
//   out = SwiGLU(h)                                      dense, for the leading n_layer_dense_lead layers
//       = Σ_j w_j · expert_j(h) + shared(h)              otherwise: routing from the hyperparameters (gating, bias,
//                                                        groups, renormalisation, scale), the shared expert ungated
Status leading_dense_or_moe(const Model &m, int64_t layer, ForwardHost &host, const float *x, int64_t n_tokens,
                            float *out);

// One attention sub-block of a family, h [T, E] -> out [T, E] (out may alias h), e.g. self_attention with the
// layer's mask, or deepseek2's MLA.
using AttentionBlock = Status (*)(const Model &m, int64_t layer, const Batch &b, ForwardHost &host, const float *h,
                                  float *out);

// The whole graph of deepseek2, glm4moe and gpt-oss:
//   x = token_embd[tokens]
//   per layer: x += attention(RMSNorm(x) · attn_norm); x += leading_dense_or_moe(x)
//   logits = output_head(x)
Status attention_moe_forward(const Model &m, const Batch &b, ForwardHost &host, AttentionBlock attention);

// logits [n_outputs, V] = W_out RMSNorm(x) for the batch's output rows of the residual stream.
Status output_head(const Model &m, const Batch &b, ForwardHost &host);

}  // namespace kt::model
