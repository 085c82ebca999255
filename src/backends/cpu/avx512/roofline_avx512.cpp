// Roofline probes for AVX-512 (compiled with -mavx512f -mavx512bw -mavx512vnni; called only when the CPU and OS
// allow them).
#include <immintrin.h>

#include "backends/cpu/roofline.h"

namespace kt::cpu::probe {

uint64_t read_sum_avx512(const void *data, uint64_t n) {
    // Eight independent accumulators: the adds never limit the loads.
    const __m512i *p = static_cast<const __m512i *>(data);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (uint64_t i = 0; i < n / 64; i += 8) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 1));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 2));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 3));
        a4 = _mm512_add_epi64(a4, _mm512_load_si512(p + i + 4));
        a5 = _mm512_add_epi64(a5, _mm512_load_si512(p + i + 5));
        a6 = _mm512_add_epi64(a6, _mm512_load_si512(p + i + 6));
        a7 = _mm512_add_epi64(a7, _mm512_load_si512(p + i + 7));
    }
    const __m512i s = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)),
                                       _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7)));
    // (GCC 12's _mm512_reduce_* warn about an uninitialised temporary inside the header; sum by hand.)
    alignas(64) uint64_t lanes[8];
    _mm512_store_si512(lanes, s);
    uint64_t total = 0;
    for (uint64_t v : lanes) total += v;
    return total;
}

int64_t int8_dots_avx512_vnni(int64_t iterations) {
    // 16 independent vpdpbusd chains (enough to cover the instruction's latency on two ports), spelled out so that
    // they stay in registers. The empty asm makes the inputs opaque each round, so that nothing is folded; it must
    // not name the accumulators: GCC 12 then kept the array in memory and the loop ran at half the peak (the
    // loads and stores of 16 zmm per round).
    __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(2);
    // Distinct starting values: equal ones let the compiler compute one chain for all (it did).
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3),
            a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7),
            a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11),
            a12 = _mm512_set1_epi32(12), a13 = _mm512_set1_epi32(13), a14 = _mm512_set1_epi32(14),
            a15 = _mm512_set1_epi32(15);
    for (int64_t i = 0; i < iterations; ++i) {
        a0 = _mm512_dpbusd_epi32(a0, u, s), a1 = _mm512_dpbusd_epi32(a1, u, s);
        a2 = _mm512_dpbusd_epi32(a2, u, s), a3 = _mm512_dpbusd_epi32(a3, u, s);
        a4 = _mm512_dpbusd_epi32(a4, u, s), a5 = _mm512_dpbusd_epi32(a5, u, s);
        a6 = _mm512_dpbusd_epi32(a6, u, s), a7 = _mm512_dpbusd_epi32(a7, u, s);
        a8 = _mm512_dpbusd_epi32(a8, u, s), a9 = _mm512_dpbusd_epi32(a9, u, s);
        a10 = _mm512_dpbusd_epi32(a10, u, s), a11 = _mm512_dpbusd_epi32(a11, u, s);
        a12 = _mm512_dpbusd_epi32(a12, u, s), a13 = _mm512_dpbusd_epi32(a13, u, s);
        a14 = _mm512_dpbusd_epi32(a14, u, s), a15 = _mm512_dpbusd_epi32(a15, u, s);
        __asm__ volatile("" : "+v"(u), "+v"(s));
    }
    const __m512i sum = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                         _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)),
                         _mm512_add_epi32(_mm512_add_epi32(a12, a13), _mm512_add_epi32(a14, a15))));
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, sum);
    int64_t total = 0;
    for (int32_t v : lanes) total += v;
    return total;
}

}  // namespace kt::cpu::probe
