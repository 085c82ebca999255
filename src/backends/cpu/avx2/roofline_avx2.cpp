// Roofline probes for AVX2 and AVX-VNNI (compiled with -mavx2 -mavxvnni; each called only when the CPU and OS
// allow it).
#include <immintrin.h>

#include "backends/cpu/roofline.h"

namespace kt::cpu::probe {

uint64_t read_sum_avx2(const void *data, uint64_t n) {
    const __m256i *p = static_cast<const __m256i *>(data);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (uint64_t i = 0; i < n / 32; i += 8) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(p + i));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(p + i + 1));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(p + i + 2));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(p + i + 3));
        a4 = _mm256_add_epi64(a4, _mm256_load_si256(p + i + 4));
        a5 = _mm256_add_epi64(a5, _mm256_load_si256(p + i + 5));
        a6 = _mm256_add_epi64(a6, _mm256_load_si256(p + i + 6));
        a7 = _mm256_add_epi64(a7, _mm256_load_si256(p + i + 7));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
                                       _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i *>(lanes), s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

namespace {

int64_t lane_sum(__m256i s) {
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i *>(lanes), s);
    int64_t total = 0;
    for (int32_t v : lanes) total += v;
    return total;
}

}  // namespace

// As in roofline_avx512.cpp: named accumulators with distinct starting values in registers, and an empty asm on the
// inputs only. 10 chains: with 12 (14 of the 16 ymm registers) GCC 12 spilled some every round.
int64_t int8_dots_avx_vnni(int64_t iterations) {
    __m256i u = _mm256_set1_epi8(1), s = _mm256_set1_epi8(2);
    __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2), a3 = _mm256_set1_epi32(3),
            a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5), a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7),
            a8 = _mm256_set1_epi32(8), a9 = _mm256_set1_epi32(9);
    auto dot = [&](__m256i acc) { return _mm256_dpbusd_avx_epi32(acc, u, s); };
    for (int64_t i = 0; i < iterations; ++i) {
        a0 = dot(a0), a1 = dot(a1), a2 = dot(a2), a3 = dot(a3), a4 = dot(a4), a5 = dot(a5), a6 = dot(a6), a7 = dot(a7);
        a8 = dot(a8), a9 = dot(a9);
        __asm__ volatile("" : "+x"(u), "+x"(s));
    }
    return lane_sum(_mm256_add_epi32(
        _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                         _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7))),
        _mm256_add_epi32(a8, a9)));
}

int64_t int8_dots_avx2(int64_t iterations) {
    // Without VNNI an int8 dot is vpmaddubsw (u8·s8 pairs to s16) + vpmaddwd (to s32) + vpaddd.
    __m256i u = _mm256_set1_epi8(1), s = _mm256_set1_epi8(2), ones = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2), a3 = _mm256_set1_epi32(3),
            a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5), a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7);
    // The empty asm before each product makes u opaque again, so the 8 products cannot be computed once for all.
    auto dot = [&](__m256i acc) {
        __asm__ volatile("" : "+x"(u));
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
    };
    for (int64_t i = 0; i < iterations; ++i) {
        a0 = dot(a0), a1 = dot(a1), a2 = dot(a2), a3 = dot(a3), a4 = dot(a4), a5 = dot(a5), a6 = dot(a6), a7 = dot(a7);
        __asm__ volatile("" : "+x"(u), "+x"(s), "+x"(ones));
    }
    return lane_sum(_mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                     _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7))));
}

double fma_avx2(int64_t iterations) {
    __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(0.0001f);  // chains converge to 1: no overflow
    __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3),
           a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7),
           a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
    auto fma = [&](__m256 acc) { return _mm256_fmadd_ps(m, acc, c); };
    for (int64_t i = 0; i < iterations; ++i) {
        a0 = fma(a0), a1 = fma(a1), a2 = fma(a2), a3 = fma(a3), a4 = fma(a4), a5 = fma(a5), a6 = fma(a6), a7 = fma(a7);
        a8 = fma(a8), a9 = fma(a9), a10 = fma(a10), a11 = fma(a11);
        __asm__ volatile("" : "+x"(m), "+x"(c));
    }
    const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                                 _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))),
                                   _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s);
    double total = 0;
    for (float v : lanes) total += v;
    return total;
}

}  // namespace kt::cpu::probe
