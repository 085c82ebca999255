#include "moe_test_support.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "core/fp16.h"
#include "moe/expert_pool.h"
#include "ops/ref/moe_ref.h"
#include "ops/types.h"
#include "support/quant_test_support.h"

namespace kt::test {
namespace {

bool has_kernel(int32_t type) {
    switch (type) {
        case KT_TYPE_Q4_0: case KT_TYPE_Q4_1: case KT_TYPE_Q5_0: case KT_TYPE_Q5_1: case KT_TYPE_Q8_0:
        case KT_TYPE_Q2_K: case KT_TYPE_Q3_K: case KT_TYPE_Q4_K: case KT_TYPE_Q5_K: case KT_TYPE_Q6_K:
        case KT_TYPE_IQ4_NL: case KT_TYPE_IQ4_XS: case KT_TYPE_MXFP4: case KT_TYPE_BF16:
        case KT_TYPE_IQ1_S: case KT_TYPE_IQ1_M: case KT_TYPE_IQ2_XXS: case KT_TYPE_IQ2_XS: case KT_TYPE_IQ2_S:
        case KT_TYPE_IQ3_XXS: case KT_TYPE_IQ3_S:  // exactly, as code book indices (IQ_GRID3, IQ_GRID)
            return true;
        default: return false;
    }
}

float to_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// What the pool computes with, from the stated quantizers (moe/weights.h), rows of length k.
void convert_rows(std::vector<float> &w, int64_t k, int32_t src_type, int32_t format, int32_t group) {
    const int64_t rows = static_cast<int64_t>(w.size()) / k;
    int mode = format;  // KT_EXPERT_WEIGHTS_*
    if (format == KT_EXPERT_WEIGHTS_AS_SOURCE) {
        if (has_kernel(src_type)) return;
        mode = (src_type == KT_TYPE_F32 || src_type == KT_TYPE_F16) ? KT_EXPERT_WEIGHTS_BF16 : -1;  // -1: Q8_0
    }
    for (int64_t r = 0; r < rows; ++r) {
        float *row = w.data() + r * k;
        auto amax_of = [](const float *p, int64_t n) {
            float m = 0;
            for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(p[i]));
            return m;
        };
        if (mode == KT_EXPERT_WEIGHTS_BF16) {
            for (int64_t i = 0; i < k; ++i) row[i] = to_bf16(row[i]);
        } else if (mode == KT_EXPERT_WEIGHTS_INT8) {
            const float s = amax_of(row, k) / 127.0f;
            for (int64_t i = 0; i < k; ++i) row[i] = s > 0 ? std::nearbyint(row[i] / s) * s : 0.0f;
        } else if (mode == KT_EXPERT_WEIGHTS_INT4) {
            for (int64_t g = 0; g < k; g += group) {
                const float s = amax_of(row + g, group) / 7.0f;
                for (int64_t i = g; i < g + group; ++i)
                    row[i] = s > 0 ? std::min(7.0f, std::max(-8.0f, std::nearbyint(row[i] / s))) * s : 0.0f;
            }
        } else {  // Q8_0: d rounded to f16
            for (int64_t g = 0; g < k; g += 32) {
                const float d = fp16_to_f32(f32_to_fp16(amax_of(row + g, 32) / 127.0f));
                for (int64_t i = g; i < g + 32; ++i) row[i] = d > 0 ? std::nearbyint(row[i] / d) * d : 0.0f;
            }
        }
    }
}

}  // namespace

ExpertWeights make_experts(int32_t src_type, int32_t format, int32_t int4_group, int64_t experts, int64_t hidden,
                           int64_t inter, uint64_t seed) {
    ExpertWeights w;
    w.src_type = src_type;
    w.experts = experts;
    w.hidden = hidden;
    w.inter = inter;
    w.gate = random_gguf_rows(src_type, experts * inter, hidden, seed * 3 + 1);
    w.up = random_gguf_rows(src_type, experts * inter, hidden, seed * 3 + 2);
    w.down = random_gguf_rows(src_type, experts * hidden, inter, seed * 3 + 3);
    w.gate_f = dequantize_rows(src_type, w.gate, experts * inter, hidden);
    w.up_f = dequantize_rows(src_type, w.up, experts * inter, hidden);
    w.down_f = dequantize_rows(src_type, w.down, experts * hidden, inter);
    convert_rows(w.gate_f, hidden, src_type, format, int4_group);
    convert_rows(w.up_f, hidden, src_type, format, int4_group);
    convert_rows(w.down_f, inter, src_type, format, int4_group);
    return w;
}

Routing make_routing(int64_t tokens, int32_t top_k, int64_t experts, uint64_t seed) {
    Routing r;
    r.tokens = tokens;
    r.top_k = top_k;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(0, static_cast<int>(experts) - 1);
    std::uniform_real_distribution<float> weight(0.05f, 1.0f);
    r.ids.resize(static_cast<size_t>(tokens * top_k));
    r.weights.resize(r.ids.size());
    for (int64_t t = 0; t < tokens; ++t) {
        for (int32_t j = 0; j < top_k; ++j) {
            const size_t i = static_cast<size_t>(t * top_k + j);
            const unsigned roll = static_cast<unsigned>(rng() % 16);
            if (roll == 0)
                r.ids[i] = -1;                                                  // no expert
            else if (roll == 1 && j > 0)
                r.ids[i] = r.ids[i - 1] >= 0 ? r.ids[i - 1] : pick(rng);         // the same expert twice
            else
                r.ids[i] = pick(rng);
            r.weights[i] = weight(rng);
        }
    }
    return r;
}

std::vector<double> reference(const ExpertWeights &w, const std::vector<float> &x, const Routing &r, const uint8_t *mask,
                              float swiglu_limit, float swiglu_alpha, const std::vector<double> *accumulate_into) {
    ref::MoeShape shape;
    shape.n_experts = w.experts;
    shape.hidden = w.hidden;
    shape.intermediate = w.inter;
    shape.swiglu_limit = swiglu_limit;
    shape.swiglu_alpha = swiglu_alpha;
    std::vector<double> out(static_cast<size_t>(r.tokens * w.hidden), 0.0);
    if (accumulate_into) out = *accumulate_into;
    ref::moe_ref(shape, w.gate_f.data(), w.up_f.data(), w.down_f.data(), x.data(), r.tokens, r.top_k, r.ids.data(),
                 r.weights.data(), mask, accumulate_into != nullptr, out.data());
    return out;
}

namespace {

// The kernels' int8 rounding of one row: q = round_even(v * (127 / amax)) in fp32, value q * (amax / 127).
void quantize_like_kernels(std::vector<double> &row) {
    float amax = 0;
    for (double v : row) amax = std::max(amax, std::fabs(static_cast<float>(v)));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f, scale = amax / 127.0f;
    for (double &v : row) v = static_cast<double>(std::nearbyint(static_cast<float>(v) * inv)) * scale;
}

}  // namespace

std::vector<double> emulated_reference(const ExpertWeights &w, const std::vector<float> &x, const Routing &r,
                                       const uint8_t *mask, bool bf16_activations, float swiglu_limit,
                                       float swiglu_alpha) {
    const int64_t H = w.hidden, I = w.inter;
    std::vector<double> out(static_cast<size_t>(r.tokens * H), 0.0), xt(static_cast<size_t>(H)), h(static_cast<size_t>(I));
    auto round_row = [&](std::vector<double> &row) {
        if (bf16_activations)
            for (double &v : row) v = to_bf16(static_cast<float>(v));
        else
            quantize_like_kernels(row);
    };
    for (int64_t t = 0; t < r.tokens; ++t) {
        for (int64_t k = 0; k < H; ++k) xt[static_cast<size_t>(k)] = x[static_cast<size_t>(t * H + k)];
        round_row(xt);
        for (int32_t j = 0; j < r.top_k; ++j) {
            const int32_t e = r.ids[static_cast<size_t>(t * r.top_k + j)];
            if (e < 0 || (mask && mask[e])) continue;
            for (int64_t i = 0; i < I; ++i) {
                double g = 0, u = 0;
                for (int64_t k = 0; k < H; ++k) {
                    g += static_cast<double>(w.gate_f[static_cast<size_t>((e * I + i) * H + k)]) * xt[static_cast<size_t>(k)];
                    u += static_cast<double>(w.up_f[static_cast<size_t>((e * I + i) * H + k)]) * xt[static_cast<size_t>(k)];
                }
                h[static_cast<size_t>(i)] = ref::swiglu_ref(g, u, swiglu_limit, swiglu_alpha);
            }
            round_row(h);
            const double wt = r.weights[static_cast<size_t>(t * r.top_k + j)];
            for (int64_t o = 0; o < H; ++o) {
                double acc = 0;
                for (int64_t i = 0; i < I; ++i)
                    acc += static_cast<double>(w.down_f[static_cast<size_t>((e * H + o) * I + i)]) * h[static_cast<size_t>(i)];
                out[static_cast<size_t>(t * H + o)] += wt * acc;
            }
        }
    }
    return out;
}

double normalized_error(const std::vector<float> &y, const std::vector<double> &ref) {
    REQUIRE(y.size() == ref.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        const double d = static_cast<double>(y[i]) - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den == 0) return std::sqrt(num);
    return std::sqrt(num / den);
}

kt_expert_pool *make_pool(const ExpertWeights &w, int32_t format, int32_t int4_group, int64_t max_tokens,
                          int32_t max_top_k, int32_t numa_policy, int32_t n_threads, float swiglu_limit,
                          float swiglu_alpha) {
    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    p.n_experts = static_cast<int32_t>(w.experts);
    p.hidden_size = static_cast<int32_t>(w.hidden);
    p.intermediate_size = static_cast<int32_t>(w.inter);
    p.max_tokens = static_cast<int32_t>(max_tokens);
    p.max_top_k = max_top_k;
    p.weight_format = format;
    p.int4_group_size = int4_group;
    p.numa_policy = numa_policy;
    p.n_threads = n_threads;
    p.swiglu_limit = swiglu_limit;
    p.swiglu_alpha = swiglu_alpha;
    kt_expert_pool *pool = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status s = kt_expert_pool_create(&p, &pool, &err);
    INFO(err.message);
    REQUIRE(s == KT_STATUS_OK);
    kt_expert_weights ew;
    ew.struct_size = sizeof ew;
    ew.gate_type = ew.up_type = ew.down_type = w.src_type;
    ew.gate = w.gate.data();
    ew.up = w.up.data();
    ew.down = w.down.data();
    const kt_status ls = kt_expert_pool_load(pool, &ew);
    INFO(kt_expert_pool_last_error(pool));
    REQUIRE(ls == KT_STATUS_OK);
    return pool;
}

std::vector<float> run_forward(kt_expert_pool *pool, const std::vector<float> &x, const Routing &r) {
    const int64_t H = static_cast<int64_t>(x.size()) / std::max<int64_t>(r.tokens, 1);
    std::vector<float> y(static_cast<size_t>(r.tokens * H), std::nanf(""));
    kt_expert_forward a;
    kt_expert_forward_init(&a);
    a.n_tokens = static_cast<int32_t>(r.tokens);
    a.top_k = r.top_k;
    a.input = x.data();
    a.expert_ids = r.ids.data();
    a.expert_weights = r.weights.data();
    a.output = y.data();
    const kt_status s = kt_expert_pool_forward(pool, &a);
    INFO(kt_expert_pool_last_error(pool));
    REQUIRE(s == KT_STATUS_OK);
    return y;
}

void load_experts(moe::ExpertPool *pool, const ExpertWeights &w) {
    moe::MatrixSource g, u, d;
    REQUIRE(moe::make_source(w.src_type, w.gate.data(), w.experts * w.inter, w.hidden, &g).is_ok());
    REQUIRE(moe::make_source(w.src_type, w.up.data(), w.experts * w.inter, w.hidden, &u).is_ok());
    REQUIRE(moe::make_source(w.src_type, w.down.data(), w.experts * w.hidden, w.inter, &d).is_ok());
    REQUIRE(pool->load(g, u, d).is_ok());
}

}  // namespace kt::test
