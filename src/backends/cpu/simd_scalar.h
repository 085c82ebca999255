// SIMD traits in portable C++: a 16-lane "vector" held in memory, every operation a loop.
//
// This is kt's scalar level (any x86-64 CPU, no AVX2). It implements each operation exactly as the AVX-512
// traits do (integer dot products are exact; every float operation is one IEEE operation, FMAs are std::fma), so the
// one kernel template gives the same bits on every ISA level. Compile its translation unit with
// -ffp-contract=off: a contracted a * b + c would change results.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"

namespace kt::cpu::simd {

struct Scalar {
    static constexpr int kW = 16;
    static constexpr bool kLatencyBoundDot = false;
    static constexpr bool kSignedWideDot = true;
    struct VI {
        uint8_t b[64];
        int32_t i32(int l) const {
            int32_t v;
            std::memcpy(&v, b + 4 * l, 4);
            return v;
        }
        void set_i32(int l, int32_t v) { std::memcpy(b + 4 * l, &v, 4); }
    };
    struct VF {
        float f[16];
    };

    static VI loadu(const void *p) {
        VI v;
        std::memcpy(v.b, p, 64);
        return v;
    }
    static void storeu(void *p, VI v) { std::memcpy(p, v.b, 64); }
    static VI zero() { return VI{}; }
    static VI set1_8(int8_t x) {
        VI v;
        std::memset(v.b, static_cast<uint8_t>(x), 64);
        return v;
    }
    static VI set1_32(int32_t x) {
        VI v;
        for (int l = 0; l < 16; ++l) v.set_i32(l, x);
        return v;
    }
    static VI bcst32(const void *p) {
        int32_t x;
        std::memcpy(&x, p, 4);
        return set1_32(x);
    }
    template <typename Op>
    static VI bytewise(VI a, VI b, Op op) {
        VI r;
        for (int i = 0; i < 64; ++i) r.b[i] = static_cast<uint8_t>(op(a.b[i], b.b[i]));
        return r;
    }
    static VI and_(VI a, VI b) { return bytewise(a, b, [](uint8_t x, uint8_t y) { return x & y; }); }
    static VI or_(VI a, VI b) { return bytewise(a, b, [](uint8_t x, uint8_t y) { return x | y; }); }
    static VI xor_(VI a, VI b) { return bytewise(a, b, [](uint8_t x, uint8_t y) { return x ^ y; }); }
    static VI sub8(VI a, VI b) { return bytewise(a, b, [](uint8_t x, uint8_t y) { return x - y; }); }
    template <int N>
    static VI srl16(VI a) {
        VI r;
        for (int i = 0; i < 32; ++i) {
            uint16_t w;
            std::memcpy(&w, a.b + 2 * i, 2);
            w = static_cast<uint16_t>(w >> N);
            std::memcpy(r.b + 2 * i, &w, 2);
        }
        return r;
    }
    static VI add32(VI a, VI b) {
        VI r;
        for (int l = 0; l < 16; ++l) r.set_i32(l, static_cast<int32_t>(static_cast<uint32_t>(a.i32(l)) + static_cast<uint32_t>(b.i32(l))));
        return r;
    }
    static VI sub32(VI a, VI b) {
        VI r;
        for (int l = 0; l < 16; ++l) r.set_i32(l, static_cast<int32_t>(static_cast<uint32_t>(a.i32(l)) - static_cast<uint32_t>(b.i32(l))));
        return r;
    }
    template <int kUMax>
    static VI dot4(VI acc, VI u, VI s) {
        VI r;
        for (int l = 0; l < 16; ++l) {
            int32_t sum = acc.i32(l);
            for (int j = 0; j < 4; ++j) sum += static_cast<int32_t>(u.b[4 * l + j]) * static_cast<int8_t>(s.b[4 * l + j]);
            r.set_i32(l, sum);
        }
        return r;
    }
    static VI dot4s(VI acc, VI w, VI s) {
        VI r;
        for (int l = 0; l < 16; ++l) {
            int32_t sum = acc.i32(l);
            for (int j = 0; j < 4; ++j) sum += static_cast<int8_t>(w.b[4 * l + j]) * static_cast<int8_t>(s.b[4 * l + j]);
            r.set_i32(l, sum);
        }
        return r;
    }
    static constexpr bool kAffineNibbles = false;  // no high_nibbles_xor8 (simd_avx512.h)
    static constexpr bool kLut16LowBitsOnly = true;
    static constexpr bool kMaskedLut = false;  // no lut4_by_bit (simd_avx512.h)
    static VI lut16(VI table, VI idx) {
        VI r;
        for (int i = 0; i < 64; ++i) r.b[i] = table.b[(i / 16) * 16 + (idx.b[i] & 15)];
        return r;
    }
    template <int kValue>
    static VI high_bit(const uint8_t *p, int /*vi*/) {
        VI r;
        for (int i = 0; i < 64; ++i) r.b[i] = ((p[i / 8] >> (i % 8)) & 1) ? kValue : 0;
        return r;
    }
    static VI high_bits6(const uint8_t *p, int /*vi*/) {
        VI r;
        for (int i = 0; i < 64; ++i) r.b[i] = static_cast<uint8_t>(((p[i % 16] >> (2 * (i / 16))) & 3) << 4);
        return r;
    }

    template <typename Op>
    static VF lanewise(VF a, VF b, Op op) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = op(a.f[l], b.f[l]);
        return r;
    }
    static VF fzero() { return VF{}; }
    static VF fset1(float x) {
        VF r;
        for (float &f : r.f) f = x;
        return r;
    }
    static VF castf(VI a) {
        VF r;
        std::memcpy(r.f, a.b, 64);
        return r;
    }
    static VI casti(VF a) {
        VI r;
        std::memcpy(r.b, a.f, 64);
        return r;
    }
    static VF cvt(VI a) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = static_cast<float>(a.i32(l));
        return r;
    }
    static VF fmadd(VF a, VF b, VF c) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = std::fma(a.f[l], b.f[l], c.f[l]);
        return r;
    }
    static VF fnmadd(VF a, VF b, VF c) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = std::fma(-a.f[l], b.f[l], c.f[l]);
        return r;
    }
    static VF mul(VF a, VF b) { return lanewise(a, b, [](float x, float y) { return x * y; }); }
    static VF add(VF a, VF b) { return lanewise(a, b, [](float x, float y) { return x + y; }); }
    static VF div(VF a, VF b) { return lanewise(a, b, [](float x, float y) { return x / y; }); }
    // As MINPS / MAXPS: the second operand when either is NaN or both are zero.
    static VF fmin(VF a, VF b) { return lanewise(a, b, [](float x, float y) { return x < y ? x : y; }); }
    static VF fmax(VF a, VF b) { return lanewise(a, b, [](float x, float y) { return x > y ? x : y; }); }
    static VF fabs(VF a) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = std::fabs(a.f[l]);
        return r;
    }
    static VF round_even(VF a) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = std::nearbyint(a.f[l]);  // default rounding: to nearest even
        return r;
    }
    static VI cvt_round(VF a) {
        VI r;
        for (int l = 0; l < 16; ++l) r.set_i32(l, static_cast<int32_t>(std::lrint(a.f[l])));
        return r;
    }
    static VI sll32_23(VI a) {
        VI r;
        for (int l = 0; l < 16; ++l) r.set_i32(l, static_cast<int32_t>(static_cast<uint32_t>(a.i32(l)) << 23));
        return r;
    }
    static float hmax(VF a) {
        float m = a.f[0];
        for (int l = 1; l < 16; ++l) m = a.f[l] > m ? a.f[l] : m;
        return m;
    }
    static void store_i8(int8_t *p, VI a) {
        for (int l = 0; l < 16; ++l) p[l] = static_cast<int8_t>(std::clamp(a.i32(l), -128, 127));
    }
    static VF loadf(const float *p) {
        VF r;
        std::memcpy(r.f, p, 64);
        return r;
    }
    static VF loadf_f16(const uint16_t *p) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = fp16_to_f32(p[l]);
        return r;
    }
    static VF loadf_u8(const uint8_t *p) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = static_cast<float>(p[l]);
        return r;
    }
    static VF loadf_i8(const int8_t *p) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = static_cast<float>(p[l]);
        return r;
    }
    static void loadf_u4_pairs(const uint8_t *p, VF *low, VF *high) {
        for (int l = 0; l < 16; ++l) {
            low->f[l] = static_cast<float>(p[l] & 15);
            high->f[l] = static_cast<float>(p[l] >> 4);
        }
    }
    static VF loadf_bf16(const uint16_t *p) {
        VF r;
        for (int l = 0; l < 16; ++l) r.f[l] = bf16_to_f32(p[l]);
        return r;
    }
    static void storef_bf16(uint16_t *p, VF v) {
        for (int l = 0; l < 16; ++l) p[l] = f32_to_bf16(v.f[l]);
    }
    static void storef(float *p, VF v) { std::memcpy(p, v.f, 64); }
    static void storef_n(float *p, VF v, int n) { std::memcpy(p, v.f, sizeof(float) * static_cast<size_t>(n)); }

    static VF dot2_bf16(VF acc, VI w, VI a) {
        VF r;
        for (int l = 0; l < 16; ++l) {
            const uint32_t wl = static_cast<uint32_t>(w.i32(l)), al = static_cast<uint32_t>(a.i32(l));
            float c = std::fma(f32_from_bits(wl & 0xFFFF0000u), f32_from_bits(al & 0xFFFF0000u), acc.f[l]);
            r.f[l] = std::fma(f32_from_bits(wl << 16), f32_from_bits(al << 16), c);
        }
        return r;
    }
    template <int kUMax, bool kEmbed = false, int kOffset = 0>
    static VI dot4_bcst(VI acc, VI u, const void *p) {
        return dot4<kUMax>(acc, u, bcst32(static_cast<const uint8_t *>(p) + kOffset));
    }
    static VF dot2_bf16_bcst(VF acc, VI w, const void *p) { return dot2_bf16(acc, w, bcst32(p)); }
    // Brings the cache line at p into L2 ahead of use (always_inline: see Avx512::prefetch).
    __attribute__((always_inline)) static void prefetch(const void *p) { __builtin_prefetch(p, 0, 2); }
    // A line of a stream read once (see Avx512::prefetch_stream): here as any other.
    __attribute__((always_inline)) static void prefetch_stream(const void *p) { prefetch(p); }
};

}  // namespace kt::cpu::simd
