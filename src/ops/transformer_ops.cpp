#include "ops/transformer_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kt::ops {

void rms_norm(const float *x, const float *w, int64_t n_rows, int64_t dim, float eps, float *y) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        // The squares summed in double, as ggml does, but in kChains interleaved partial sums: a single running sum
        // is a chain of dependent double adds, about 4 cycles an element. At a 512-token prompt of Qwen3-30B-A3B the
        // norms of a layer (two over the hidden rows, q and k per head) took about 4 % of the prompt's wall time
        // (perf, Zen 5); 512 rows of 2048 took 0.97 ms, now 0.33. The order differs from ggml's only within double
        // precision: the float mean that comes out is the same unless the sum lies within a double rounding of a
        // float rounding boundary.
        constexpr int kChains = 8;
        double part[kChains] = {};
        int64_t k = 0;
        for (; k + kChains <= dim; k += kChains)
            for (int c = 0; c < kChains; ++c) part[c] += static_cast<double>(xr[k + c] * xr[k + c]);
        for (int c = 0; k < dim; ++k, ++c) part[c] += static_cast<double>(xr[k] * xr[k]);
        double sum = 0.0;
        for (int c = 0; c < kChains; ++c) sum += part[c];
        const float mean = static_cast<float>(sum / static_cast<double>(dim));
        const float scale = 1.0f / std::sqrt(mean + eps);
        // Two roundings, as ggml's rms_norm followed by a separate mul: (x · scale) · w.
        if (w) {
            for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * scale) * w[i];
        } else {
            for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale;
        }
    }
}

void add_inplace(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

float dot(const float *a, const float *b, int64_t n) {
    constexpr int kLanes = 16;
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
    for (int width = kLanes / 2; width > 0; width /= 2)
        for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
    return acc[0];
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// ------------------------------------------------------------------------------------------------------------
// RoPE

namespace {

// The dimension below which YaRN extrapolates and above which it interpolates, for a wavelength of n_rot turns
// over the training context (ggml's ggml_rope_yarn_corr_dim).
float yarn_corr_dim(int64_t n_dims, int64_t n_ctx_orig, float n_rot, float base) {
    return static_cast<float>(n_dims) *
           std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(base));
}

float yarn_ramp(float low, float high, int64_t i0) {
    const float y = (static_cast<float>(i0 / 2) - low) / std::max(0.001f, high - low);
    return 1.0f - std::min(1.0f, std::max(0.0f, y));
}

}  // namespace

void rope_table(const RopeParams &p, const float *freq_factors, const int32_t *positions, int64_t n_tokens,
                float *cs) {
    const int64_t half = p.n_rot / 2;
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    float corr_low = 0.0f, corr_high = 0.0f;
    if (p.ext_factor != 0.0f) {
        corr_low = std::max(0.0f, std::floor(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_fast, p.freq_base)));
        corr_high = std::min(static_cast<float>(p.n_rot - 1),
                             std::ceil(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_slow, p.freq_base)));
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
        float theta_extrap = static_cast<float>(positions[t]);  // θ_i = pos · base^(-2i/n_rot), built as ggml does
        float *out = cs + t * half * 2;
        for (int64_t i = 0; i < half; ++i) {
            const float extrap = freq_factors ? theta_extrap / freq_factors[i] : theta_extrap;
            const float theta_interp = p.freq_scale * extrap;
            float theta = theta_interp;
            float mscale = p.attn_factor;
            if (p.ext_factor != 0.0f) {
                const float mix = yarn_ramp(corr_low, corr_high, 2 * i) * p.ext_factor;
                theta = theta_interp * (1.0f - mix) + extrap * mix;
                mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
            }
            out[2 * i] = std::cos(theta) * mscale;
            out[2 * i + 1] = std::sin(theta) * mscale;
            theta_extrap *= theta_scale;
        }
    }
}

void rope_apply(const RopeParams &p, const float *cs, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                int64_t token_stride, float *x) {
    const int64_t half = p.n_rot / 2;
    // NORM pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2). Both use angle θ_i for pair i.
    const int64_t second = p.mode == RopeMode::kNeox ? half : 1;
    const int64_t step = p.mode == RopeMode::kNeox ? 1 : 2;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float *c = cs + t * half * 2;
        for (int64_t h = 0; h < n_heads; ++h) {
            float *v = x + t * token_stride + h * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                float *a = v + i * step;
                const float x0 = a[0], x1 = a[second];
                const float cos_t = c[2 * i], sin_t = c[2 * i + 1];
                a[0] = x0 * cos_t - x1 * sin_t;
                a[second] = x0 * sin_t + x1 * cos_t;
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------------------
// Routing

namespace {

// probs[i] = softmax(logits)[i], in place; the sum is taken in double as ggml does.
void softmax_inplace(float *x, int64_t n) {
    const float max = *std::max_element(x, x + n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max);
        sum += x[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// Indices of the k largest scores, best first; ties go to the lower index.
void top_k(const float *scores, int64_t n, int64_t k, int32_t *out, std::vector<int32_t> &order) {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    });
    std::copy_n(order.begin(), k, out);
}

}  // namespace

void route(const RoutingParams &p, float *logits, int64_t n_tokens, int32_t *ids, float *weights) {
    const int64_t X = p.n_expert, k = p.k;
    std::vector<float> selection(static_cast<size_t>(X));
    std::vector<int32_t> order, groups(static_cast<size_t>(p.n_group));
    std::vector<float> group_score(static_cast<size_t>(p.n_group));
    std::vector<char> keep(static_cast<size_t>(p.n_group));
    for (int64_t t = 0; t < n_tokens; ++t) {
        float *probs = logits + t * X;
        if (p.gating == Gating::kSoftmax) {
            softmax_inplace(probs, X);
        } else if (p.gating == Gating::kSigmoid) {
            for (int64_t i = 0; i < X; ++i) probs[i] = sigmoid(probs[i]);
        }
        for (int64_t i = 0; i < X; ++i) selection[i] = probs[i] + (p.selection_bias ? p.selection_bias[i] : 0.0f);

        if (p.n_group > 1) {
            // Score each group by its two best selection scores; experts outside the best groups cannot be chosen.
            const int64_t per_group = X / p.n_group;
            int32_t best2[2];
            for (int64_t g = 0; g < p.n_group; ++g) {
                top_k(selection.data() + g * per_group, per_group, 2, best2, order);
                group_score[g] = selection[g * per_group + best2[0]] + selection[g * per_group + best2[1]];
            }
            top_k(group_score.data(), p.n_group, p.n_group_used, groups.data(), order);
            std::fill(keep.begin(), keep.end(), 0);
            for (int64_t g = 0; g < p.n_group_used; ++g) keep[groups[g]] = 1;
            for (int64_t i = 0; i < X; ++i)
                if (!keep[i / per_group]) selection[i] = -std::numeric_limits<float>::infinity();
        }

        int32_t *id = ids + t * k;
        float *w = weights + t * k;
        top_k(selection.data(), X, k, id, order);
        if (p.gating == Gating::kSoftmaxWeight) {  // the k chosen logits, best first: softmax over them
            for (int64_t j = 0; j < k; ++j) w[j] = probs[id[j]];
            softmax_inplace(w, k);
            for (int64_t j = 0; j < k; ++j) w[j] *= p.scale;
            continue;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < k; ++j) sum += w[j] = probs[id[j]];
        const float divisor = p.renormalize ? std::max(sum, 6.103515625e-5f) : 1.0f;
        for (int64_t j = 0; j < k; ++j) w[j] = w[j] / divisor * p.scale;
    }
}

}  // namespace kt::ops
