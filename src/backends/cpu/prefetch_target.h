// Where the AVX-512 kernels' software prefetches put their lines (Avx512::prefetch and prefetch_stream in
// simd_avx512.h). Its own header because kernels.cpp, which chooses, is not compiled for AVX-512.
#pragma once

namespace kt::cpu::simd {

enum class PrefetchTarget {
    kL1,           // everything into L1 (and L2)
    kL1StreamNta,  // into L1, and what a decode stream reads once as non-temporal
    kL2,           // into L2 only
};

// Written once, while kernels.cpp builds the kernel sets, before any kernel can run; KT_PREFETCH=l1, l1nta or l2
// overrides the choice.
extern PrefetchTarget g_avx512_prefetch;

}  // namespace kt::cpu::simd
