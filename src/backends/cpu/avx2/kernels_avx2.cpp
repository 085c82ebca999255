// AVX2 + FMA + F16C level (compiled with -mavx2 -mfma -mf16c; called only when cpu_features reports them).
// 8 lanes: a microkernel covers half a panel (16 columns) and 4 rows, or 2 for the formats whose decode needs the
// registers (Kernels::kRowBlock).
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx2.h"

namespace kt::cpu::detail {

void fill_avx2(KernelSet *ks) {
    impl::Kernels<simd::Avx2, 4>::fill(ks);
}

}  // namespace kt::cpu::detail
