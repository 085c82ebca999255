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
    // 16 independent vpdpbusd chains: enough to cover the instruction's latency on two ports.
    const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(2);
    __m512i acc[16];
    for (__m512i &x : acc) x = _mm512_setzero_si512();
    for (int64_t i = 0; i < iterations; ++i) {
        for (__m512i &x : acc) x = _mm512_dpbusd_epi32(x, a, b);
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]), "+v"(acc[5]),
                         "+v"(acc[6]), "+v"(acc[7]));
        __asm__ volatile("" : "+v"(acc[8]), "+v"(acc[9]), "+v"(acc[10]), "+v"(acc[11]), "+v"(acc[12]),
                         "+v"(acc[13]), "+v"(acc[14]), "+v"(acc[15]));
    }
    __m512i s = _mm512_setzero_si512();
    for (const __m512i &x : acc) s = _mm512_add_epi32(s, x);
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, s);
    int64_t total = 0;
    for (int32_t v : lanes) total += v;
    return total;
}

}  // namespace kt::cpu::probe
