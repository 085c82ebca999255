// Plain C++ reference GEMMs for the AMX kernel tests: C[m][n] = sum_k A[m][k] * W[n][k], written the obvious way
// from the numerics stated in src/backends/cpu/amx/amx_gemm.h (nothing here is taken from kt's kernels).
#pragma once

#include <cstdint>
#include <vector>

namespace kt::test::amx_ref {

// int32, exact.
std::vector<int32_t> gemm_s8_s32(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda, const int8_t *w,
                                 int64_t ldw);

// (float(acc) * w_scale[n]) * a_scale[m], in that order, one rounding each.
std::vector<float> gemm_s8_f32(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda, const float *a_scale,
                               const int8_t *w, int64_t ldw, const float *w_scale);

// acc = 0; per group g in order: acc = fma(float(sum_{k in g} a*w), w_scale[n][g], acc); C = acc * a_scale[m].
std::vector<float> gemm_s4_f32(int64_t m, int64_t n, int64_t k, int64_t group, const int8_t *a, int64_t lda,
                               const float *a_scale, const int8_t *w, int64_t ldw, const float *w_scale);

// Group-wise (amx_gemm.h, GroupedPanel): acc = 0; per group g in order: acc = fma(float(sum_{k in g} a*w),
// w_scale[n][g], acc), then, when w_neg_min is given, acc = fma(w_neg_min[n][g], float(sum_{k in g} a), acc);
// C = acc * a_scale[m].
std::vector<float> gemm_s8_grouped_f32(int64_t m, int64_t n, int64_t k, int64_t group, const int8_t *a, int64_t lda,
                                       const float *a_scale, const int8_t *w, int64_t ldw, const float *w_scale,
                                       const float *w_neg_min);

// bf16 x bf16 in double (exact products, nearly exact sums), and sum_k |a * w| for the error bound.
void gemm_bf16_f64(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, const uint16_t *w, int64_t ldw,
                   std::vector<double> *c, std::vector<double> *abs_sum);

// bf16 x bf16 in the order of TDPBF16PS as the SDM writes it, one instruction per 32-element K step (the last step
// zero-padded): per step, an even and an odd fp32 FMA chain from +0 with DAZ/FTZ/RNE, added together, then added to
// C. A scalar model of the instruction, independent of the tile machine's tile-level implementation.
std::vector<float> gemm_bf16_sdm(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda, const uint16_t *w,
                                 int64_t ldw);

}  // namespace kt::test::amx_ref
