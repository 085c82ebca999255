// AVX-512 BF16 GEMM with AVX512-BF16 (vdpbf16ps). Compiled with -mavx512bf16.
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx512.h"

namespace kt::cpu::detail {

GemmFn gemm_bf16_avx512_bf16() { return &impl::Kernels<simd::Avx512<false, true>, 6>::gemm_bf16; }

}  // namespace kt::cpu::detail
