// Roofline probes for AVX-512 (compiled with -mavx512f -mavx512bw -mavx512vnni -mavx512bf16; each called only when
// the CPU and OS allow it).
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

int64_t int8_dots_avx512(int64_t iterations) {
    // AVX-512 without VNNI (Skylake-SP class): vpmaddubsw + vpmaddwd + vpaddd, as the kernels do. The empty asm before
    // each product makes u opaque again, so the 8 products cannot be computed once for all.
    __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(2), ones = _mm512_set1_epi16(1);
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3),
            a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7);
    auto dot = [&](__m512i acc) {
        __asm__ volatile("" : "+v"(u));
        return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), ones));
    };
    for (int64_t i = 0; i < iterations; ++i)
        a0 = dot(a0), a1 = dot(a1), a2 = dot(a2), a3 = dot(a3), a4 = dot(a4), a5 = dot(a5), a6 = dot(a6), a7 = dot(a7);
    const __m512i sum = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                         _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, sum);
    int64_t total = 0;
    for (int32_t v : lanes) total += v;
    return total;
}

namespace {

double lane_sum(__m512 s) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s);
    double total = 0;
    for (float v : lanes) total += v;
    return total;
}

}  // namespace

// As int8_dots_avx512_vnni: 16 named chains with distinct starting values, the empty asm on the inputs only.
double bf16_dots_avx512(int64_t iterations) {
    __m512i w = _mm512_set1_epi32(0x3F803F80), x = _mm512_set1_epi32(0x3F803F80);  // bf16 pairs (1, 1)
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3),
           a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7),
           a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11),
           a12 = _mm512_set1_ps(12), a13 = _mm512_set1_ps(13), a14 = _mm512_set1_ps(14), a15 = _mm512_set1_ps(15);
    auto dot = [&](__m512 acc) { return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x); };
    for (int64_t i = 0; i < iterations; ++i) {
        a0 = dot(a0), a1 = dot(a1), a2 = dot(a2), a3 = dot(a3), a4 = dot(a4), a5 = dot(a5), a6 = dot(a6), a7 = dot(a7);
        a8 = dot(a8), a9 = dot(a9), a10 = dot(a10), a11 = dot(a11), a12 = dot(a12), a13 = dot(a13), a14 = dot(a14);
        a15 = dot(a15);
        __asm__ volatile("" : "+v"(w), "+v"(x));
    }
    return lane_sum(_mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                      _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))),
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                      _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15)))));
}

double fma_avx512(int64_t iterations) {
    __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(0.0001f);  // chains converge to 1: no overflow
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3),
           a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7),
           a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11),
           a12 = _mm512_set1_ps(12), a13 = _mm512_set1_ps(13), a14 = _mm512_set1_ps(14), a15 = _mm512_set1_ps(15);
    auto fma = [&](__m512 acc) { return _mm512_fmadd_ps(m, acc, c); };
    for (int64_t i = 0; i < iterations; ++i) {
        a0 = fma(a0), a1 = fma(a1), a2 = fma(a2), a3 = fma(a3), a4 = fma(a4), a5 = fma(a5), a6 = fma(a6), a7 = fma(a7);
        a8 = fma(a8), a9 = fma(a9), a10 = fma(a10), a11 = fma(a11), a12 = fma(a12), a13 = fma(a13), a14 = fma(a14);
        a15 = fma(a15);
        __asm__ volatile("" : "+v"(m), "+v"(c));
    }
    return lane_sum(_mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                      _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))),
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                      _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15)))));
}

}  // namespace kt::cpu::probe
