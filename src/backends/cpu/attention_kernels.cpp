#include "backends/cpu/attention_kernels.h"

namespace kt::cpu {
namespace {

const AttentionKernels kScalar = {"scalar", detail::attend_scalar};
const AttentionKernels kAvx2 = {"avx2", detail::attend_avx2};
const AttentionKernels kAvx512 = {"avx512", detail::attend_avx512};

}  // namespace

size_t attention_scratch_floats(int64_t rows, int64_t dk, int64_t dv) {
    // K tile, V tile, scores, m, l; rounded up so that the caller can carve 64-byte aligned per-thread blocks.
    const int64_t n = dk * kKeyTile + kKeyTile * dv + rows * kKeyTile + 2 * rows;
    return static_cast<size_t>((n + 15) / 16 * 16);
}

const AttentionKernels *attention_kernels_for(IsaLevel level) {
    if (level > host_isa_level()) return nullptr;
    switch (level) {
        case IsaLevel::kScalar: return &kScalar;
        case IsaLevel::kAvx2: return &kAvx2;
        default: return &kAvx512;
    }
}

const AttentionKernels &attention_kernels() { return *attention_kernels_for(active_isa_level()); }

}  // namespace kt::cpu
