// The small element-wise and per-row operations of a transformer forward pass (everything that is not a matrix
// product or attention): RMSNorm, rotary position embeddings, residual adds, MoE routing.
//
// They follow llama.cpp's CPU arithmetic where it matters for the golden logits (reference/gguf-and-quants.md
// §5.1): RMSNorm sums squares in double, RoPE angles are built by repeated f32 multiplication, YaRN ramps and
// corrections as ggml computes them. All are cheap next to the matrix products; they are written for clarity.
#pragma once

#include <cstdint>

namespace kt::ops {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) ⊙ w, for r in [0, n_rows). x: [n_rows, dim]; w: [dim] or null
// (no scale); y may alias x.
void rms_norm(const float *x, const float *w, int64_t n_rows, int64_t dim, float eps, float *y);

// x[i] += y[i].
void add_inplace(float *x, const float *y, int64_t n);

// Σ a[i]·b[i], accumulated in 16 f32 lanes and summed pairwise (the shape of a SIMD dot product).
float dot(const float *a, const float *b, int64_t n);

float sigmoid(float x);

// ------------------------------------------------------------------------------------------------------------
// Rotary position embeddings

enum class RopeMode : int32_t {
    kNorm = 0,  // rotate adjacent pairs (x[2i], x[2i+1]): llama, deepseek2
    kNeox = 2,  // rotate halves (x[i], x[i + n_rot/2]): qwen2, qwen3, qwen2moe, qwen3moe
};

struct RopeParams {
    RopeMode mode = RopeMode::kNorm;
    int64_t n_rot = 0;           // rotated dimensions per head (the rest pass through)
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;     // 1 / scaling factor (linear and YaRN)
    float ext_factor = 0.0f;     // YaRN extrapolation mix; 0 = plain (linear) scaling
    float attn_factor = 1.0f;    // multiplies cos and sin
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
    int64_t n_ctx_orig = 0;      // training context length, for the YaRN correction dims
};

// cos/sin table for n_tokens positions: cs[t, i] = {cos θ, sin θ} of pair i in [0, n_rot/2). cs: [n_tokens,
// n_rot/2, 2]. freq_factors ([n_rot/2] or null) divide the angles (llama 3.1's rope_freqs).
void rope_table(const RopeParams &p, const float *freq_factors, const int32_t *positions, int64_t n_tokens,
                float *cs);

// Rotates the first n_rot values of every head in place. x: [n_tokens, n_heads, head_dim] with rows of
// `token_stride` floats between tokens (≥ n_heads * head_dim); cs from rope_table.
void rope_apply(const RopeParams &p, const float *cs, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                int64_t token_stride, float *x);

// ------------------------------------------------------------------------------------------------------------
// MoE routing

// Gating function of the router logits.
//   kSoftmax        probabilities = softmax over all experts; select the top k; weights = their probabilities
//   kSigmoid        probabilities = sigmoid of each logit (deepseek-v3, glm4moe); select and weigh as above
//   kSoftmaxWeight  select the top k logits; weights = softmax over those k only (gpt-oss)
enum class Gating : int32_t { kSoftmax = 0, kSigmoid = 1, kSoftmaxWeight = 2 };

struct RoutingParams {
    Gating gating = Gating::kSoftmax;
    int64_t n_expert = 0;
    int64_t k = 0;                 // experts per token
    bool renormalize = false;      // divide the k weights by their sum (clamped below at 6.1035e-5, as llama.cpp)
    float scale = 1.0f;            // multiply the final weights (deepseek2's expert_weights_scale)
    const float *selection_bias = nullptr;  // [n_expert] added to the probabilities for selection only, or null
    int64_t n_group = 1;           // group-limited routing: keep the best n_group_used groups ...
    int64_t n_group_used = 1;      // ... scored by the sum of their two best selection scores
};

// logits: [n_tokens, n_expert] router outputs (overwritten with the gate probabilities, except for kSoftmaxWeight).
// Writes ids [n_tokens, k] (best first) and weights [n_tokens, k].
void route(const RoutingParams &p, float *logits, int64_t n_tokens, int32_t *ids, float *weights);

}  // namespace kt::ops
