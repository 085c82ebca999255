// Compiled with -ffp-contract=off: every fp32 operation below is one IEEE operation, as written.
#include "amx/amx_reference.h"

#include <cmath>
#include <cstdlib>

#include "core/fp16.h"

namespace kt::test::amx_ref {
namespace {

int64_t dot_s8(const int8_t *a, const int8_t *w, int64_t k) {
    int64_t s = 0;
    for (int64_t i = 0; i < k; ++i) s += static_cast<int64_t>(a[i]) * w[i];
    return s;
}

float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

}  // namespace

std::vector<int32_t> gemm_s8_s32(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda, const int8_t *w,
                                 int64_t ldw) {
    std::vector<int32_t> c(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            c[static_cast<size_t>(i * n + j)] = static_cast<int32_t>(dot_s8(a + i * lda, w + j * ldw, k));
    return c;
}

std::vector<float> gemm_s8_f32(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda, const float *a_scale,
                               const int8_t *w, int64_t ldw, const float *w_scale) {
    std::vector<float> c(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            const float acc = static_cast<float>(dot_s8(a + i * lda, w + j * ldw, k));
            c[static_cast<size_t>(i * n + j)] = (acc * w_scale[j]) * a_scale[i];
        }
    }
    return c;
}

std::vector<float> gemm_s4_f32(int64_t m, int64_t n, int64_t k, int64_t group, const int8_t *a, int64_t lda,
                               const float *a_scale, const int8_t *w, int64_t ldw, const float *w_scale) {
    const int64_t groups = k / group;
    std::vector<float> c(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t g = 0; g < groups; ++g) {
                const float isum = static_cast<float>(dot_s8(a + i * lda + g * group, w + j * ldw + g * group, group));
                acc = std::fma(isum, w_scale[j * groups + g], acc);
            }
            c[static_cast<size_t>(i * n + j)] = acc * a_scale[i];
        }
    }
    return c;
}

std::vector<float> gemm_s8_grouped_f32(int64_t m, int64_t n, int64_t k, int64_t group, const int8_t *a, int64_t lda,
                                       const float *a_scale, const int8_t *w, int64_t ldw, const float *w_scale,
                                       const float *w_neg_min) {
    const int64_t groups = k / group;
    std::vector<float> c(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t g = 0; g < groups; ++g) {
                const int8_t *ag = a + i * lda + g * group;
                const float isum = static_cast<float>(dot_s8(ag, w + j * ldw + g * group, group));
                acc = std::fma(isum, w_scale[j * groups + g], acc);
                if (!w_neg_min) continue;
                int64_t asum = 0;
                for (int64_t x = 0; x < group; ++x) asum += ag[x];
                acc = std::fma(w_neg_min[j * groups + g], static_cast<float>(asum), acc);
            }
            c[static_cast<size_t>(i * n + j)] = acc * a_scale[i];
        }
    }
    return c;
}

void gemm_bf16_f64(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, const uint16_t *w, int64_t ldw,
                   std::vector<double> *c, std::vector<double> *abs_sum) {
    c->assign(static_cast<size_t>(m * n), 0.0);
    abs_sum->assign(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double s = 0.0, t = 0.0;
            for (int64_t x = 0; x < k; ++x) {
                const double p = static_cast<double>(bf16_to_f32(a[i * lda + x])) * bf16_to_f32(w[j * ldw + x]);
                s += p;
                t += std::fabs(p);
            }
            (*c)[static_cast<size_t>(i * n + j)] = s;
            (*abs_sum)[static_cast<size_t>(i * n + j)] = t;
        }
    }
}

std::vector<float> gemm_bf16_sdm(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, const uint16_t *w,
                                 int64_t ldw) {
    constexpr int64_t kStep = 32;  // bf16 per TDPBF16PS (64-byte A rows)
    std::vector<float> c(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (int64_t k0 = 0; k0 < k; k0 += kStep) {
                float even = 0.0f, odd = 0.0f;
                for (int64_t p = 0; p < kStep / 2; ++p) {
                    const int64_t ke = k0 + 2 * p, ko = ke + 1;
                    const float ae = ke < k ? bf16_to_f32(a[i * lda + ke]) : 0.0f;
                    const float we = ke < k ? bf16_to_f32(w[j * ldw + ke]) : 0.0f;
                    const float ao = ko < k ? bf16_to_f32(a[i * lda + ko]) : 0.0f;
                    const float wo = ko < k ? bf16_to_f32(w[j * ldw + ko]) : 0.0f;
                    even = flush(std::fma(flush(ae), flush(we), even));
                    odd = flush(std::fma(flush(ao), flush(wo), odd));
                }
                acc = flush(flush(acc) + flush(flush(even + odd)));
            }
            c[static_cast<size_t>(i * n + j)] = acc;
        }
    }
    return c;
}

}  // namespace kt::test::amx_ref
