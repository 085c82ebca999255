// AVX-512 F/BW/DQ/VL level without VNNI or AVX512-BF16 (Skylake-SP class): dot products by vpmaddubsw /
// vpmaddwd and bf16 pairs widened to fp32, giving the same results as the native instructions.
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx512.h"

namespace kt::cpu::detail {

void fill_avx512(KernelSet *ks) {
    using K = impl::Kernels<simd::Avx512<false, false>, 6>;
    ks->gemm_int = &K::gemm_int;
    ks->gemm_bf16 = &K::gemm_bf16;
    ks->quantize_row = &K::quantize_row;
    ks->row_amax = &K::row_amax;
    ks->quantize_row_amax = &K::quantize_row_amax;
    ks->convert_row_bf16 = &K::convert_row_bf16;
    ks->swiglu_row = &K::swiglu_row;
    ks->axpy_row = &K::axpy_row;
    ks->merge_row = &K::merge_row;
}

}  // namespace kt::cpu::detail
