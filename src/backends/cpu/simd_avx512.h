// SIMD traits for AVX-512 (F, BW, DQ, VL), with AVX512-VNNI and AVX512-BF16 used when the template says so and
// exact software replacements when not (a Skylake-class CPU has neither), and GFNI and AVX512-VBMI where the template
// says so (Ice Lake and later, Zen 4 and later; Cascade and Cooper Lake have VNNI without them).
//
// Include only from translation units compiled with the matching -m flags, and call their functions only after
// cpu_features says the CPU and OS support them.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/prefetch_target.h"

namespace kt::cpu::simd {

template <bool kVnni, bool kBf16, bool kGfniVbmi = false>
struct Avx512 {
    static constexpr int kW = 16;  // int32 / fp32 lanes; one vector = one 64-byte tile row = 16 columns
    // vpdpbusd accumulates into its destination: a chain of them runs at its latency (~5 cycles), not its
    // throughput (2 per cycle), unless about 10 independent chains are in flight.
    static constexpr bool kLatencyBoundDot = kVnni;
    // Without VNNI, formats whose codes need the full byte (INT8, Q8_0, IQ4_XS) use dot4s on signed weights.
    static constexpr bool kSignedWideDot = !kVnni;
    using VI = __m512i;
    using VF = __m512;

    static VI loadu(const void *p) { return _mm512_loadu_si512(p); }
    static void storeu(void *p, VI v) { _mm512_storeu_si512(p, v); }
    static VI zero() { return _mm512_setzero_si512(); }
    static VI set1_8(int8_t v) { return _mm512_set1_epi8(v); }
    static VI set1_32(int32_t v) { return _mm512_set1_epi32(v); }
    static VI bcst32(const void *p) {
        int32_t v;
        std::memcpy(&v, p, 4);
        return _mm512_set1_epi32(v);
    }
    static VI and_(VI a, VI b) { return _mm512_and_si512(a, b); }
    static VI or_(VI a, VI b) { return _mm512_or_si512(a, b); }
    static VI xor_(VI a, VI b) { return _mm512_xor_si512(a, b); }
    template <int N>
    static VI srl16(VI a) { return _mm512_srli_epi16(a, N); }
    static VI add32(VI a, VI b) { return _mm512_add_epi32(a, b); }
    static VI sub32(VI a, VI b) { return _mm512_sub_epi32(a, b); }
    static VI sub8(VI a, VI b) { return _mm512_sub_epi8(a, b); }

    // acc + sum over the 4 bytes of each 32-bit lane of u (unsigned) * s (signed): exact.
    // kUMax: the largest u the caller can pass. Without VNNI, vpmaddubsw is exact while two products fit int16
    // (2 * 127 * 128 < 32768); larger u take the 16-bit path (vpmaddwd on even and odd bytes).
    template <int kUMax>
    static VI dot4(VI acc, VI u, VI s) {
        if constexpr (kVnni) {
            return _mm512_dpbusd_epi32(acc, u, s);
        } else if constexpr (kUMax <= 127) {
            const VI pairs = _mm512_maddubs_epi16(u, s);
            return _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
        } else {
            const VI u_even = _mm512_and_si512(u, _mm512_set1_epi16(0x00FF));
            const VI u_odd = _mm512_srli_epi16(u, 8);
            const VI s_even = _mm512_srai_epi16(_mm512_slli_epi16(s, 8), 8);
            const VI s_odd = _mm512_srai_epi16(s, 8);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(u_even, s_even));
            return _mm512_add_epi32(acc, _mm512_madd_epi16(u_odd, s_odd));
        }
    }

    // dot4 against the 4 bytes at p + kOffset broadcast to every lane. kEmbed: fold the broadcast into the
    // instruction as its {1to16} memory operand. Compilers otherwise load a broadcast that feeds several instructions
    // into a register once, and that vpbroadcastd competes with vpdpbusd for issue slots: in the INT8 kernel (no
    // scale groups) folding lifts the in-cache rate from 65% to 79% of the vpdpbusd peak on Zen 5 (bench_gemm); the
    // grouped kernels fold it only in blocks of more than 4 rows (kernels_impl.h says what it measured). The memory
    // is passed as an address register and a constant displacement (kOffset, for the kernels' unrolled steps), not
    // an "m" operand: __m512i may alias anything, so an "m" operand makes GCC store every accumulator to the stack
    // before each instruction. This is sound because kernels only read activations, which nothing writes while a
    // kernel runs (kernels are called through function pointers, never inlined into code that writes activations).
    template <int kUMax, bool kEmbed = false, int kOffset = 0>
    static VI dot4_bcst(VI acc, VI u, const void *p) {
        if constexpr (kVnni && kEmbed) {
            __asm__("vpdpbusd %c3(%2)%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "r"(p), "i"(kOffset));
            return acc;
        } else {
            return dot4<kUMax>(acc, u, bcst32(static_cast<const uint8_t *>(p) + kOffset));
        }
    }

    // acc + sum over the 4 bytes of each lane of w (signed) * s (signed activations in [-127, 127], which
    // quantize_row guarantees), exact: |w| and s with w's sign as vpmaddubsw operands (|w| <= 128 is a valid u8,
    // negating s cannot overflow, |products| <= 128 * 127 so two fit int16). 3 instructions per weight vector and
    // token plus |w| once per weight vector, where the unsigned form of a full-byte code needs the 16-bit path's 7.
    static VI dot4s(VI acc, VI w, VI s) {
        const VI s_signed = _mm512_mask_sub_epi8(s, _mm512_movepi8_mask(w), _mm512_setzero_si512(), s);
        const VI pairs = _mm512_maddubs_epi16(_mm512_abs_epi8(w), s_signed);
        return _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
    }

    // bytes 0..15 of each 128-bit lane of `table` (the same 16 in every lane) indexed by the low 4 bits of idx; with
    // VBMI whatever idx's other bits are (kLut16LowBitsOnly), else for idx < 16. vpermb reads bits 0-5 of an index,
    // and bits 4-5 pick one of the table's four copies, so IQ4_XS and MXFP4 codes need no mask: Zen 5, in cache
    // (bench_gemm BM_gemm_cached IQ4_XS, K 2,048, two runs of 5 paired rounds, median ratios): one row 1.07x (10 of
    // 10 faster), four 1.02-1.06x, 32 rows 1.01-1.04x.
    static constexpr bool kLut16LowBitsOnly = kGfniVbmi;
    static VI lut16(VI table, VI idx) {
        if constexpr (kGfniVbmi) return _mm512_permutexvar_epi8(idx, table);
        return _mm512_shuffle_epi8(table, idx);
    }

    // ((x >> 4) & 0x0F) ^ 8 in each byte, Q4_0's high nibbles as the kernels' codes, by one affine transform
    // (kAffineNibbles: with GFNI) where a shift and a vpternlogd took two instructions: output bits 0-3 are input
    // bits 4-7, and the constant flips bit 3. Zen 5, in cache (bench_gemm BM_gemm_cached Q4_0, K 2,048, 5 paired
    // rounds, median ratio): one row 1.05x (5 of 5 faster), four 1.02x (5 of 5), 32 rows 1.01x. INT4 g128 (the same
    // codes) moved 1.01, 1.02 and 0.99x and keeps its shift.
    static constexpr bool kAffineNibbles = kGfniVbmi;
    static VI high_nibbles_xor8(VI x) {  // only where kAffineNibbles
        return _mm512_gf2p8affine_epi64_epi8(x, _mm512_set1_epi64(0x1020408000000000ll), 8);
    }

    // Byte i: low[idx_i & 3] where bit i of the 64-bit word at p is clear, else high[idx_i & 3], for tables that
    // repeat their first 4 bytes (kernels_impl.h, kSplitLookup). VBMI only.
    static constexpr bool kMaskedLut = kGfniVbmi;
    static VI lut4_by_bit(VI low, VI high, VI idx, const uint8_t *p) {
        uint64_t bits;
        std::memcpy(&bits, p, 8);
        return _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(idx, low), static_cast<__mmask64>(bits), idx, high);
    }

    // Q5_K (kValue 0x10) and Q3_K (0x04): kValue in byte i where bit i of the 64-bit word at p is set (vi: which
    // part of a tile row; 0 here).
    template <int kValue>
    static VI high_bit(const uint8_t *p, int /*vi*/) {
        uint64_t bits;
        std::memcpy(&bits, p, 8);
        return _mm512_maskz_mov_epi8(static_cast<__mmask64>(bits), _mm512_set1_epi8(kValue));
    }
    // Q6_K: (field << 4) in byte i, where byte j of the 16 bytes at p holds the 2-bit fields of bytes j, j+16,
    // j+32, j+48 at bits 0, 2, 4, 6. One 64-bit rotate per 128-bit lane brings each lane's field to bits 4-5 (left
    // by 4, 2, 0 and 62); it moves bits across bytes, but the & 0x30 keeps only each byte's own field. A shift right
    // to bit 0 and back left by 4 took one instruction more, and in a one-row Q6_K GEMV, bound by its decoding,
    // every instruction of this counts (kernels_impl.h, int_block).
    // With GFNI one affine transform per byte does the rotate and the mask: output bit i of a byte is the parity of
    // (matrix byte 7 - i) & input, so lane L's matrix takes input bit 2L to bit 4 and 2L + 1 to bit 5, and leaves
    // the other bits zero (so the caller's merge with the low nibble is one vpternlogd). Zen 5, in cache (bench_gemm
    // BM_gemm_cached Q6_K, K 2,048, three runs of 5 paired rounds, median ratios): one row 1.06x, four 1.06-1.09x,
    // 32 rows 1.01-1.04x. The same transform for the high nibbles' shift (Q5_K, Q6_K) gained nothing and cost Q5_K
    // 2 % at four rows, so the nibbles keep their shift and mask.
    static VI high_bits6(const uint8_t *p, int /*vi*/) {
        const VI f = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
        if constexpr (kGfniVbmi) {
            const VI lane_bits = _mm512_set_epi64(0x40800000, 0x40800000, 0x10200000, 0x10200000, 0x04080000,
                                                  0x04080000, 0x01020000, 0x01020000);
            return _mm512_gf2p8affine_epi64_epi8(f, lane_bits, 0);
        }
        return _mm512_and_si512(_mm512_rolv_epi64(f, _mm512_set_epi64(62, 62, 0, 0, 2, 2, 4, 4)), _mm512_set1_epi8(0x30));
    }

    static VF fzero() { return _mm512_setzero_ps(); }
    static VF castf(VI a) { return _mm512_castsi512_ps(a); }
    static VI casti(VF a) { return _mm512_castps_si512(a); }
    static VF fmin(VF a, VF b) { return _mm512_min_ps(a, b); }
    static VF fmax(VF a, VF b) { return _mm512_max_ps(a, b); }
    static VF fabs(VF a) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7FFFFFFF))); }
    static VF div(VF a, VF b) { return _mm512_div_ps(a, b); }
    static VF round_even(VF a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static VI cvt_round(VF a) { return _mm512_cvtps_epi32(a); }  // round to nearest even (default MXCSR)
    static VI sll32_23(VI a) { return _mm512_slli_epi32(a, 23); }
    static float hmax(VF a) { return _mm512_reduce_max_ps(a); }
    // 16 int32 (already within [-128, 127]) to 16 int8 at p
    static void store_i8(int8_t *p, VI a) { _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm512_cvtsepi32_epi8(a)); }
    // 16 bf16 <-> 16 fp32. To bf16: round to nearest even (NaN stays NaN).
    static VF loadf_bf16(const uint16_t *p) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))), 16));
    }
    static void storef_bf16(uint16_t *p, VF v) {
        const VI u = _mm512_castps_si512(v);
        const VI rounded = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                             _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))), 16);
        const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        const VI quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet)));
    }
    static VF fset1(float v) { return _mm512_set1_ps(v); }
    static VF cvt(VI a) { return _mm512_cvtepi32_ps(a); }
    static VF fmadd(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }     // a * b + c, one rounding
    static VF fnmadd(VF a, VF b, VF c) { return _mm512_fnmadd_ps(a, b, c); }   // c - a * b, one rounding
    static VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
    static VF add(VF a, VF b) { return _mm512_add_ps(a, b); }
    static VF loadf(const float *p) { return _mm512_loadu_ps(p); }
    static VF loadf_f16(const uint16_t *p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    }
    static VF loadf_u8(const uint8_t *p) {
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
    }
    static VF loadf_i8(const int8_t *p) {
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
    }
    // The low and high nibbles of kW bytes (Q2_K's scale and min byte).
    static void loadf_u4_pairs(const uint8_t *p, VF *low, VF *high) {
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
        *low = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)));
        *high = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
    }
    static void storef(float *p, VF v) { _mm512_storeu_ps(p, v); }
    static void storef_n(float *p, VF v, int n) {
        _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
    }

    // dot2_bf16 against the pair of bf16 at p broadcast to every lane.
    static VF dot2_bf16_bcst(VF acc, VI w, const void *p) {
        return dot2_bf16(acc, w, bcst32(p));  // a folded broadcast measured slower here (79% vs 93% of peak)
    }

    // acc + w.odd * a.odd + w.even * a.even per lane (bf16 pairs), as VDPBF16PS orders it: the odd product is
    // fused into acc first, then the even one (reference/amx-hwloc.md §1.2). Without AVX512-BF16 the same two
    // FMAs are done on the widened values; results match except that VDPBF16PS flushes denormals.
    static VF dot2_bf16(VF acc, VI w, VI a) {
        if constexpr (kBf16) {
            return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)a);
        } else {
            const VI hi = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
            acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w, hi)),
                                  _mm512_castsi512_ps(_mm512_and_si512(a, hi)), acc);
            return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
                                   _mm512_castsi512_ps(_mm512_slli_epi32(a, 16)), acc);
        }
    }
    // Brings the cache line at p into L1 (and L2) ahead of use, or into L2 only where that streams faster
    // (PrefetchTarget::kL2). Zen 5, one core, one-token GEMV (bench_gemm BM_gemv_stream): into L1 went from 34 to
    // 42 GB/s for INT4, 40 to 41 for Q4_K, 36.5 to 37.7 for Q6_K, with prefill rates unchanged. An Intel Xeon with
    // AMX, 2 threads, one-token expert pool (kt-expert-bench, bench/results/amx_quiet.md): into L2 went from 72 to
    // 76 % of the read bandwidth for Q4_K, 69 to 82 % for INT4, 83 to 87 % for Q8_0, 86 to 91 % for INT8 (there
    // an L1 prefetch holds one of the core's few L1 miss buffers, which the demand loads need). Zen 4 (32 KB L1,
    // 2 threads, bench/results/zen4.md): into L2, the one-token pool's median over 4 alternating rounds read
    // 15.2 -> 20.9 GB/s for Q4_K, 14.5 -> 24.1 for INT8, 15.4 -> 18.9 for INT4, and kt-bench tg128 went 34.1 -> 41.1 t/s.
    // always_inline: a function that only prefetches has no effect the compiler must keep, and GCC 12, calling it
    // from the kernels' always_inline steps, deleted the calls (not one prefetch was left in the integer kernels).
    // Inlined first, the prefetches stay.
    __attribute__((always_inline)) static void prefetch(const void *p) {
        if (g_avx512_prefetch == PrefetchTarget::kL2)
            _mm_prefetch(static_cast<const char *>(p), _MM_HINT_T1);
        else
            _mm_prefetch(static_cast<const char *>(p), _MM_HINT_T0);
    }
    // The same for a line of a stream that is read once (a decode GEMV's weights), which with kL1StreamNta is
    // prefetched as non-temporal: into L1 without taking a place in the lower caches that the stream only passes
    // through. Not the default anywhere yet. Zen 5 KVM guest, 2 threads, kt-bench tg128, one binary with KT_PREFETCH
    // alternating (bench/results/zen5.md): a one-layer Qwen3-30B-A3B file, whose Q6_K head is 81 % of a token, ran
    // faster in 7 of 8 rounds (median ratio 1.20); the eight-layer file's median ratio over 15 rounds was 1.00.
    __attribute__((always_inline)) static void prefetch_stream(const void *p) {
        if (g_avx512_prefetch == PrefetchTarget::kL1StreamNta)
            _mm_prefetch(static_cast<const char *>(p), _MM_HINT_NTA);
        else
            prefetch(p);
    }
};

}  // namespace kt::cpu::simd
