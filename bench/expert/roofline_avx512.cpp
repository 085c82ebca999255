// AVX-512 roofline loops (compiled with -mavx512f -mavx512bw -mavx512vnni -mavx512bf16; called only when the CPU
// has them). Sixteen independent accumulators hide the instructions' latency, so the loops run at throughput.
#include <immintrin.h>

#include "roofline.h"

namespace kt::bench {

uint64_t read_avx512(const uint8_t *p, size_t bytes) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= bytes; i += 256) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
    }
    return static_cast<uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3))));
}

#define KT_REPEAT16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

uint64_t dot_vnni512(int64_t iterations) {
    __m512i acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
    __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    for (int64_t it = 0; it < iterations; ++it) {
#define KT_STEP(i) acc[i] = _mm512_dpbusd_epi32(acc[i], u, s);
        KT_REPEAT16(KT_STEP)
#undef KT_STEP
        __asm__ volatile("" : "+v"(u), "+v"(s));
    }
    __m512i sum = acc[0];
    for (int i = 1; i < 16; ++i) sum = _mm512_add_epi32(sum, acc[i]);
    return static_cast<uint64_t>(_mm512_reduce_add_epi32(sum));
}

uint64_t dot_maddubs512(int64_t iterations) {
    __m512i acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
    __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    const __m512i ones = _mm512_set1_epi16(1);
    for (int64_t it = 0; it < iterations; ++it) {
// The empty asm before each product makes u opaque again: without it the compiler computes the product once for
// all 16 chains, and the loop measured vpaddd, not vpmaddubsw + vpmaddwd.
#define KT_STEP(i)                       \
    __asm__ volatile("" : "+v"(u));      \
    acc[i] = _mm512_add_epi32(acc[i], _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), ones));
        KT_REPEAT16(KT_STEP)
#undef KT_STEP
        __asm__ volatile("" : "+v"(u), "+v"(s));
    }
    __m512i sum = acc[0];
    for (int i = 1; i < 16; ++i) sum = _mm512_add_epi32(sum, acc[i]);
    return static_cast<uint64_t>(_mm512_reduce_add_epi32(sum));
}

uint64_t dot_bf16_512(int64_t iterations) {
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
    __m512i a = _mm512_set1_epi32(0x3F803F80), b = _mm512_set1_epi32(0x3F803F80);
    for (int64_t it = 0; it < iterations; ++it) {
#define KT_STEP(i) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)a, (__m512bh)b);
        KT_REPEAT16(KT_STEP)
#undef KT_STEP
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 sum = acc[0];
    for (int i = 1; i < 16; ++i) sum = _mm512_add_ps(sum, acc[i]);
    return static_cast<uint64_t>(_mm512_reduce_add_ps(sum));
}

uint64_t fma512(int64_t iterations) {
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
    __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
    for (int64_t it = 0; it < iterations; ++it) {
#define KT_STEP(i) acc[i] = _mm512_fmadd_ps(a, acc[i], b);
        KT_REPEAT16(KT_STEP)
#undef KT_STEP
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 sum = acc[0];
    for (int i = 1; i < 16; ++i) sum = _mm512_add_ps(sum, acc[i]);
    return static_cast<uint64_t>(_mm512_reduce_add_ps(sum));
}

}  // namespace kt::bench
