// AVX-512 F/BW/DQ/VL level without VNNI or AVX512-BF16 (Skylake-SP class): dot products by vpmaddubsw /
// vpmaddwd and bf16 pairs widened to fp32, giving the same results as the native instructions.
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx512.h"

namespace kt::cpu::detail {

void fill_avx512(KernelSet *ks) {
    impl::Kernels<simd::Avx512<false, false>, 6>::fill(ks);
}

}  // namespace kt::cpu::detail
