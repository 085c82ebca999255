// AVX-512 integer GEMM with AVX512-VNNI (vpdpbusd). Compiled with -mavx512vnni.
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx512.h"

namespace kt::cpu::detail {

GemmFn gemm_int_avx512_vnni() { return &impl::Kernels<simd::Avx512<true, false>, 6>::gemm_int; }

}  // namespace kt::cpu::detail
