// SIMD traits for AVX2 + FMA + F16C (Haswell and later, Zen 1 and later): 8 lanes, so one 64-byte tile row is two
// vectors (vi = 0: columns 0..7 of the half, vi = 1: columns 8..15).
//
// Include only from translation units compiled with -mavx2 -mfma -mf16c.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kt::cpu::simd {

struct Avx2 {
    static constexpr int kW = 8;
    static constexpr bool kLatencyBoundDot = false;  // the accumulation is a 1-cycle vpaddd
    static constexpr bool kSignedWideDot = true;     // see Avx512::dot4s
    using VI = __m256i;
    using VF = __m256;

    static VI loadu(const void *p) { return _mm256_loadu_si256(static_cast<const __m256i *>(p)); }
    static void storeu(void *p, VI v) { _mm256_storeu_si256(static_cast<__m256i *>(p), v); }
    static VI zero() { return _mm256_setzero_si256(); }
    static VI set1_8(int8_t v) { return _mm256_set1_epi8(v); }
    static VI set1_32(int32_t v) { return _mm256_set1_epi32(v); }
    static VI bcst32(const void *p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm256_set1_epi32(v);
    }
    static VI and_(VI a, VI b) { return _mm256_and_si256(a, b); }
    static VI or_(VI a, VI b) { return _mm256_or_si256(a, b); }
    static VI xor_(VI a, VI b) { return _mm256_xor_si256(a, b); }
    template <int N>
    static VI srl16(VI a) { return _mm256_srli_epi16(a, N); }
    static VI add32(VI a, VI b) { return _mm256_add_epi32(a, b); }
    static VI sub32(VI a, VI b) { return _mm256_sub_epi32(a, b); }
    static VI sub8(VI a, VI b) { return _mm256_sub_epi8(a, b); }

    // See Avx512::dot4: vpmaddubsw while two products fit int16, the 16-bit path otherwise.
    template <int kUMax>
    static VI dot4(VI acc, VI u, VI s) {
        if constexpr (kUMax <= 127) {
            const VI pairs = _mm256_maddubs_epi16(u, s);
            return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
        } else {
            const VI u_even = _mm256_and_si256(u, _mm256_set1_epi16(0x00FF));
            const VI u_odd = _mm256_srli_epi16(u, 8);
            const VI s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8);
            const VI s_odd = _mm256_srai_epi16(s, 8);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(u_even, s_even));
            return _mm256_add_epi32(acc, _mm256_madd_epi16(u_odd, s_odd));
        }
    }

    // See Avx512::dot4s: vpsignb puts w's sign on s (and zeroes it where w is 0, where the product is 0 anyway).
    static VI dot4s(VI acc, VI w, VI s) {
        const VI pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(s, w));
        return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
    }

    static constexpr bool kAffineNibbles = false;  // no high_nibbles_xor8 (simd_avx512.h)
    static constexpr bool kLut16LowBitsOnly = false;  // vpshufb zeroes a byte whose index has bit 7 set
    static constexpr bool kMaskedLut = false;         // no lut4_by_bit (simd_avx512.h)
    static VI lut16(VI table, VI idx) { return _mm256_shuffle_epi8(table, idx); }

    // Q5_K (kValue 0x10) and Q3_K (0x04): bits 32*vi .. 32*vi+31 of the 64-bit word at p, one per byte, as
    // kValue / 0.
    template <int kValue>
    static VI high_bit(const uint8_t *p, int vi) {
        uint32_t bits;
        std::memcpy(&bits, p + 4 * vi, 4);
        // Byte i takes source byte i / 8 (the broadcast repeats the word in every dword, so lane 1 reads bytes 2, 3
        // at indexes 2, 3), then tests bit i % 8.
        const VI spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(static_cast<int32_t>(bits)),
            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
                             3, 3));
        const VI bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
        return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(kValue));
    }
    // Q6_K: tile-row bytes 32*vi .. 32*vi+31 use the fields at bits 4*vi and 4*vi+2 of bytes 0..15.
    static VI high_bits6(const uint8_t *p, int vi) {
        const VI f = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
        const int lo = 4 * vi, hi = 4 * vi + 2;
        const VI shifted = _mm256_srlv_epi64(f, _mm256_setr_epi64x(lo, lo, hi, hi));
        return _mm256_slli_epi16(_mm256_and_si256(shifted, _mm256_set1_epi8(3)), 4);
    }

    static VF fzero() { return _mm256_setzero_ps(); }
    static VF fset1(float v) { return _mm256_set1_ps(v); }
    static VF castf(VI a) { return _mm256_castsi256_ps(a); }
    static VI casti(VF a) { return _mm256_castps_si256(a); }
    static VF cvt(VI a) { return _mm256_cvtepi32_ps(a); }
    static VF fmadd(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
    static VF fnmadd(VF a, VF b, VF c) { return _mm256_fnmadd_ps(a, b, c); }
    static VF mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
    static VF add(VF a, VF b) { return _mm256_add_ps(a, b); }
    static VF fmin(VF a, VF b) { return _mm256_min_ps(a, b); }
    static VF fmax(VF a, VF b) { return _mm256_max_ps(a, b); }
    static VF fabs(VF a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }
    static VF div(VF a, VF b) { return _mm256_div_ps(a, b); }
    static VF round_even(VF a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static VI cvt_round(VF a) { return _mm256_cvtps_epi32(a); }
    static VI sll32_23(VI a) { return _mm256_slli_epi32(a, 23); }
    static float hmax(VF a) {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        return _mm_cvtss_f32(m);
    }
    static void store_i8(int8_t *p, VI a) {
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        const __m128i b = _mm_packs_epi16(w, w);
        std::memcpy(p, &b, 8);
    }
    static VF loadf(const float *p) { return _mm256_loadu_ps(p); }
    static VF loadf_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
    static VF loadf_u8(const uint8_t *p) {
        int64_t v;
        std::memcpy(&v, p, 8);
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v)));
    }
    static VF loadf_i8(const int8_t *p) {
        int64_t v;
        std::memcpy(&v, p, 8);
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(v)));
    }
    // The low and high nibbles of kW bytes (Q2_K's scale and min byte).
    static void loadf_u4_pairs(const uint8_t *p, VF *low, VF *high) {
        int64_t v;
        std::memcpy(&v, p, 8);
        const __m256i b = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v));
        *low = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(15)));
        *high = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
    }
    static VF loadf_bf16(const uint16_t *p) {
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))), 16));
    }
    static void storef_bf16(uint16_t *p, VF v) {
        const VI u = _mm256_castps_si256(v);
        VI r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)),
                                                  _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))),
                                 16);
        const VI quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
        const VI nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        r = _mm256_blendv_epi8(r, quiet, nan);
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(p), packed);
    }
    static void storef(float *p, VF v) { _mm256_storeu_ps(p, v); }
    static void storef_n(float *p, VF v, int n) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, v);
        std::memcpy(p, tmp, sizeof(float) * static_cast<size_t>(n));
    }

    // No AVX512-BF16 here: the two FMAs in VDPBF16PS order (odd, then even).
    static VF dot2_bf16(VF acc, VI w, VI a) {
        const VI hi = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
        acc = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w, hi)), _mm256_castsi256_ps(_mm256_and_si256(a, hi)),
                              acc);
        return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)),
                               _mm256_castsi256_ps(_mm256_slli_epi32(a, 16)), acc);
    }
    template <int kUMax, bool kEmbed = false, int kOffset = 0>
    static VI dot4_bcst(VI acc, VI u, const void *p) {
        return dot4<kUMax>(acc, u, bcst32(static_cast<const uint8_t *>(p) + kOffset));
    }
    static VF dot2_bf16_bcst(VF acc, VI w, const void *p) { return dot2_bf16(acc, w, bcst32(p)); }
    // Brings the cache line at p into L2 ahead of use (always_inline: see Avx512::prefetch).
    __attribute__((always_inline)) static void prefetch(const void *p) {
        _mm_prefetch(static_cast<const char *>(p), _MM_HINT_T1);
    }
    // A line of a stream read once (see Avx512::prefetch_stream): here as any other.
    __attribute__((always_inline)) static void prefetch_stream(const void *p) { prefetch(p); }
};

}  // namespace kt::cpu::simd
