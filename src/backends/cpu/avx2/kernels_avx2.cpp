// AVX2 + FMA + F16C level (compiled with -mavx2 -mfma -mf16c; called only when cpu_features reports them).
// 8 lanes: a microkernel covers half a panel (16 columns) and 2 rows, which keeps the 4 int32 and 4 fp32
// accumulators plus the decode temporaries inside the 16 ymm registers.
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx2.h"

namespace kt::cpu::detail {

void fill_avx2(KernelSet *ks) {
    impl::Kernels<simd::Avx2, 2>::fill(ks);
}

}  // namespace kt::cpu::detail
