#include "ops/ref/moe_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kt::ref {

double swiglu_ref(double g, double u, float limit, float alpha) {
    if (limit > 0.0f) {
        g = std::min(g, static_cast<double>(limit));
        u = std::clamp(u, -static_cast<double>(limit), static_cast<double>(limit));
    }
    if (alpha > 0.0f) return g / (1.0 + std::exp(-static_cast<double>(alpha) * g)) * (u + 1.0);
    return g / (1.0 + std::exp(-g)) * u;
}

void moe_ref(const MoeShape &s, const float *gate, const float *up, const float *down, const float *x, int64_t n_tokens,
             int64_t top_k, const int32_t *ids, const float *weights, const uint8_t *mask, bool accumulate,
             double *out) {
    const int64_t H = s.hidden, I = s.intermediate;
    std::vector<double> h(static_cast<size_t>(I));
    for (int64_t t = 0; t < n_tokens; ++t) {
        double *o = out + t * H;
        if (!accumulate) std::fill(o, o + H, 0.0);
        const float *xt = x + t * H;
        for (int64_t j = 0; j < top_k; ++j) {
            const int32_t e = ids[t * top_k + j];
            if (e < 0 || (mask && mask[e])) continue;
            const float *ge = gate + e * I * H, *ue = up + e * I * H, *de = down + e * H * I;
            for (int64_t i = 0; i < I; ++i) {
                double g = 0, u = 0;
                for (int64_t k = 0; k < H; ++k) {
                    g += static_cast<double>(ge[i * H + k]) * xt[k];
                    u += static_cast<double>(ue[i * H + k]) * xt[k];
                }
                h[static_cast<size_t>(i)] = swiglu_ref(g, u, s.swiglu_limit, s.swiglu_alpha);
            }
            const double w = weights[t * top_k + j];
            for (int64_t r = 0; r < H; ++r) {
                double acc = 0;
                for (int64_t i = 0; i < I; ++i) acc += static_cast<double>(de[r * I + i]) * h[static_cast<size_t>(i)];
                o[r] += w * acc;
            }
        }
    }
}

}  // namespace kt::ref
