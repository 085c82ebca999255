// Vector primitives of the attention over the KV cache, by ISA: f32 dot products and axpy, and conversions
// between f32 and the cache's 16-bit types.
//
// Conversions are exact in both directions' sense: f16/bf16 -> f32 is exact, f32 -> f16/bf16 rounds to nearest
// even (f16 through F16C, bf16 with NaN kept quiet, as core/fp16.h), so every level stores the same bits. dot
// sums in SIMD lanes, so its rounding differs between levels (within a few ulps of the row's magnitude).
#pragma once

#include <cstdint>

#include "backends/cpu/cpu_features.h"

namespace kt::cpu {

struct VectorKernels {
    const char *name;
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float a, const float *x, float *y, int64_t n);  // y += a · x
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    void (*bf16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    void (*f32_to_bf16)(const float *src, uint16_t *dst, int64_t n);
};

// The best set for the active ISA level (capped by KT_MAX_ISA / set_max_isa_level).
const VectorKernels &vector_kernels();
// The set of one level, or nullptr when the host cannot run it (tests compare every level with scalar).
const VectorKernels *vector_kernels_for(IsaLevel level);

namespace detail {
extern const VectorKernels kVectorAvx2;
extern const VectorKernels kVectorAvx512;
}  // namespace detail

}  // namespace kt::cpu
