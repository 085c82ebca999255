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

int64_t horizontal_sum(const __m256i *acc, int n) {
    __m256i s = _mm256_setzero_si256();
    for (int i = 0; i < n; ++i) s = _mm256_add_epi32(s, acc[i]);
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i *>(lanes), s);
    int64_t total = 0;
    for (int32_t v : lanes) total += v;
    return total;
}

}  // namespace

int64_t int8_dots_avx_vnni(int64_t iterations) {
    const __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8(2);
    __m256i acc[16];
    for (__m256i &x : acc) x = _mm256_setzero_si256();
    for (int64_t i = 0; i < iterations; ++i) {
        for (__m256i &x : acc) x = _mm256_dpbusd_avx_epi32(x, a, b);
        __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]), "+x"(acc[4]), "+x"(acc[5]),
                         "+x"(acc[6]), "+x"(acc[7]));
        __asm__ volatile("" : "+x"(acc[8]), "+x"(acc[9]), "+x"(acc[10]), "+x"(acc[11]), "+x"(acc[12]),
                         "+x"(acc[13]), "+x"(acc[14]), "+x"(acc[15]));
    }
    return horizontal_sum(acc, 16);
}

int64_t int8_dots_avx2(int64_t iterations) {
    // Without VNNI an int8 dot is vpmaddubsw (u8·s8 pairs to s16) + vpmaddwd (to s32) + vpaddd.
    const __m256i a = _mm256_set1_epi8(1), b = _mm256_set1_epi8(2), ones = _mm256_set1_epi16(1);
    __m256i acc[8];
    for (__m256i &x : acc) x = _mm256_setzero_si256();
    for (int64_t i = 0; i < iterations; ++i) {
        for (__m256i &x : acc) x = _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
        __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]), "+x"(acc[4]), "+x"(acc[5]),
                         "+x"(acc[6]), "+x"(acc[7]));
    }
    return horizontal_sum(acc, 8);
}

}  // namespace kt::cpu::probe
