// Scalar level: the kernel template over portable 16-lane emulated vectors (compiled with -ffp-contract=off).
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_scalar.h"

namespace kt::cpu::detail {

void fill_scalar(KernelSet *ks) {
    impl::Kernels<simd::Scalar, 4>::fill(ks);
}

}  // namespace kt::cpu::detail
