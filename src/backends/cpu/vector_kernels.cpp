#include "backends/cpu/vector_kernels.h"

#include "core/fp16.h"

namespace kt::cpu {
namespace {

float dot_scalar(const float *a, const float *b, int64_t n) {
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

void axpy_scalar(float a, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void f16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}
void f32_to_f16_scalar(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}
void bf16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
void f32_to_bf16_scalar(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

const VectorKernels kVectorScalar = {"scalar", dot_scalar, axpy_scalar, f16_to_f32_scalar, f32_to_f16_scalar,
                                     bf16_to_f32_scalar, f32_to_bf16_scalar};

}  // namespace

const VectorKernels *vector_kernels_for(IsaLevel level) {
    if (level > host_isa_level()) return nullptr;
    switch (level) {
        case IsaLevel::kScalar: return &kVectorScalar;
        case IsaLevel::kAvx2: return &detail::kVectorAvx2;
        default: return &detail::kVectorAvx512;  // AMX machines run the AVX-512 set here
    }
}

const VectorKernels &vector_kernels() { return *vector_kernels_for(active_isa_level()); }

}  // namespace kt::cpu
