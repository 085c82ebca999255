// GGML block layouts, byte for byte as in ggml-common.h (reference/gguf-and-quants.md §2).
//
// Fields are stored little-endian; kt only builds for little-endian x86-64, so the structs are read in place.
// f16 scales are raw uint16_t bit patterns (convert with kt::fp16_to_f32).
#pragma once

#include <cstdint>

namespace kt::ref {

constexpr int kQK = 32;    // elements per block of the 32-wide formats
constexpr int kQKK = 256;  // elements per super-block of the K-quants
constexpr int kKScaleBytes = 12;

// The IQ4_NL / IQ4_XS code book: a non-uniform 4-bit grid.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
struct BlockQ8_1 { uint16_t d; uint16_t s; int8_t qs[kQK]; };
struct BlockIq4Nl { uint16_t d; uint8_t qs[kQK / 2]; };
// MXFP4 (OCP microscaling FP4): one E8M0 exponent byte, then 32 e2m1 values as nibbles (low nibbles elements 0..15,
// high nibbles 16..31). The code book below is e2m1 doubled (so that it is integral) and the scale halved to match:
// value = kMxfp4Values[nibble] * 2^(e - 128).
struct BlockMxfp4 { uint8_t e; uint8_t qs[kQK / 2]; };

inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) exactly, for every byte e (E8M0 read as ggml does: 255 is 2^127, not NaN; 0 and 1 are subnormal).
inline float e8m0_half_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
}

struct BlockQ2_K { uint8_t scales[kQKK / 16]; uint8_t qs[kQKK / 4]; uint16_t d; uint16_t dmin; };
struct BlockQ3_K { uint8_t hmask[kQKK / 8]; uint8_t qs[kQKK / 4]; uint8_t scales[kKScaleBytes]; uint16_t d; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[kKScaleBytes]; uint8_t qs[kQKK / 2]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[kKScaleBytes]; uint8_t qh[kQKK / 8]; uint8_t qs[kQKK / 2]; };
struct BlockQ6_K { uint8_t ql[kQKK / 2]; uint8_t qh[kQKK / 4]; int8_t scales[kQKK / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[kQKK]; int16_t bsums[kQKK / 16]; };
struct BlockIq4Xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[kQKK / 64]; uint8_t qs[kQKK / 2]; };

// The grid formats (IQ1-IQ3): each index picks 4 or 8 weights at once from a code book (ops/ref/iq_grids.h), with
// signs and scales per 8, 16 or 32 weights. Field meanings are where they are decoded (dequantize_ref.cpp).
struct BlockIq2Xxs { uint16_t d; uint16_t qs[kQKK / 8]; };
struct BlockIq2Xs { uint16_t d; uint16_t qs[kQKK / 8]; uint8_t scales[kQKK / 32]; };
struct BlockIq2S { uint16_t d; uint8_t qs[kQKK / 4]; uint8_t qh[kQKK / 32]; uint8_t scales[kQKK / 32]; };
struct BlockIq3Xxs { uint16_t d; uint8_t qs[3 * kQKK / 8]; };
struct BlockIq3S {
    uint16_t d;
    uint8_t qs[kQKK / 4];
    uint8_t qh[kQKK / 32];
    uint8_t signs[kQKK / 8];
    uint8_t scales[kQKK / 64];
};
struct BlockIq1S { uint16_t d; uint8_t qs[kQKK / 8]; uint16_t qh[kQKK / 32]; };
struct BlockIq1M { uint8_t qs[kQKK / 8]; uint8_t qh[kQKK / 16]; uint8_t scales[kQKK / 32]; };

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockMxfp4) == 17);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIq4Xs) == 136);
static_assert(sizeof(BlockIq2Xxs) == 66);
static_assert(sizeof(BlockIq2Xs) == 74);
static_assert(sizeof(BlockIq2S) == 82);
static_assert(sizeof(BlockIq3Xxs) == 98);
static_assert(sizeof(BlockIq3S) == 110);
static_assert(sizeof(BlockIq1S) == 50);
static_assert(sizeof(BlockIq1M) == 56);

// The 6-bit (scale, min) pair j of a Q4_K / Q5_K super-block, unpacked from its 12 scale bytes.
inline void unpack_k4_scale_min(int j, const uint8_t *q, uint8_t *scale, uint8_t *min) {
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// The 16 6-bit Q3_K scales (before the - 32), from its 12 scale bytes: low 4 bits from bytes 0..7 (two nibbles
// each), high 2 bits from bytes 8..11 (four pairs each).
inline void unpack_q3_k_scales(const uint8_t *b, int scales[16]) {
    for (int i = 0; i < 16; ++i) {
        const int low4 = i < 8 ? (b[i] & 0x0F) : (b[i - 8] >> 4);
        const int high2 = (b[8 + (i % 4)] >> (2 * (i / 4))) & 3;
        scales[i] = low4 | (high2 << 4);
    }
}

}  // namespace kt::ref
