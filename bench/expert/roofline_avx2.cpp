// AVX2 roofline loops (compiled with -mavx2 -mfma).
#include <immintrin.h>

#include "roofline.h"

namespace kt::bench {

uint64_t read_avx2(const uint8_t *p, size_t bytes) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 96)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    alignas(32) uint64_t v[4];
    _mm256_store_si256(reinterpret_cast<__m256i *>(v), s);
    return v[0] + v[1] + v[2] + v[3];
}

#define KT_REPEAT16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

uint64_t dot_maddubs256(int64_t iterations) {
    __m256i acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm256_set1_epi32(i);
    __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t it = 0; it < iterations; ++it) {
// The empty asm before each product makes u opaque again: without it the compiler computes the product once for
// all 16 chains, and the loop measured vpaddd, not vpmaddubsw + vpmaddwd.
#define KT_STEP(i)                       \
    __asm__ volatile("" : "+x"(u));      \
    acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ones));
        KT_REPEAT16(KT_STEP)
#undef KT_STEP
        __asm__ volatile("" : "+x"(u), "+x"(s));
    }
    alignas(32) int32_t v[8];
    __m256i sum = acc[0];
    for (int i = 1; i < 16; ++i) sum = _mm256_add_epi32(sum, acc[i]);
    _mm256_store_si256(reinterpret_cast<__m256i *>(v), sum);
    return static_cast<uint64_t>(v[0] + v[7]);
}

uint64_t fma256(int64_t iterations) {
    __m256 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
    __m256 a = _mm256_set1_ps(1.0001f), b = _mm256_set1_ps(0.9999f);
    for (int64_t it = 0; it < iterations; ++it) {
#define KT_STEP(i) acc[i] = _mm256_fmadd_ps(a, acc[i], b);
        KT_REPEAT16(KT_STEP)
#undef KT_STEP
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    alignas(32) float v[8];
    __m256 sum = acc[0];
    for (int i = 1; i < 16; ++i) sum = _mm256_add_ps(sum, acc[i]);
    _mm256_store_ps(v, sum);
    return static_cast<uint64_t>(v[0]);
}

}  // namespace kt::bench
