// The mixture-of-experts FFN written from the math, in double precision: the oracle for the expert pool.
//
//   out[t] = (accumulate ? out[t] : 0) + sum over j < top_k with e = ids[t][j] != -1 and !mask[e] of
//            weights[t][j] * W_down[e] . swiglu(W_gate[e] . x[t], W_up[e] . x[t])
//   swiglu(g, u) = silu(g) * u; with limit L > 0: g = min(g, L), u = clamp(u, -L, L) first; with alpha a > 0:
//                  g * sigmoid(a * g) * (u + 1) instead.
// No quantization of activations or intermediates: the difference between this and a kernel is exactly the error
// the kernel's number formats introduce.
#pragma once

#include <cstdint>

namespace kt::ref {

struct MoeShape {
    int64_t n_experts = 0;
    int64_t hidden = 0;        // H
    int64_t intermediate = 0;  // I
    float swiglu_limit = 0.0f;
    float swiglu_alpha = 0.0f;
};

double swiglu_ref(double g, double u, float limit, float alpha);

// gate, up: [E][I][H]; down: [E][H][I]; x: [T][H]; ids, weights: [T][top_k]; mask: [E] or nullptr; out: [T][H].
void moe_ref(const MoeShape &shape, const float *gate, const float *up, const float *down, const float *x,
             int64_t n_tokens, int64_t top_k, const int32_t *ids, const float *weights, const uint8_t *mask,
             bool accumulate, double *out);

}  // namespace kt::ref
