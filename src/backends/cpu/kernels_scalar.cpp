// Scalar level: the kernel template over portable 16-lane emulated vectors (compiled with -ffp-contract=off).
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_scalar.h"

namespace kt::cpu::detail {

void fill_scalar(KernelSet *ks) {
    using K = impl::Kernels<simd::Scalar, 4>;
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
