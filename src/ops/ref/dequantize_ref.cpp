// Scalar dequantizers. Each follows the arithmetic order of ggml's reference code exactly (integers converted to
// float, then one rounding per operation, no FMA), because the golden test compares bit patterns.
#include <cstring>

#include "core/fp16.h"
#include "ops/ref/blocks.h"
#include "ops/ref/iq_grids.h"
#include "ops/ref/quants_ref.h"

namespace kt::ref {
namespace {

// 32-element formats: low nibbles give elements 0..15, high nibbles 16..31 (not interleaved).
void dequantize_q4_0(const BlockQ4_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < kQK / 2; ++j) {
            y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + kQK / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_q4_1(const BlockQ4_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = fp16_to_f32(x[i].d);
        const float m = fp16_to_f32(x[i].m);
        for (int j = 0; j < kQK / 2; ++j) {
            y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
            y[j + kQK / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
        }
    }
}

uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

void dequantize_q5_0(const BlockQ5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = fp16_to_f32(x[i].d);
        const uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < kQK / 2; ++j) {
            const int lo = (x[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            y[j] = static_cast<float>(lo - 16) * d;
            y[j + kQK / 2] = static_cast<float>(hi - 16) * d;
        }
    }
}

void dequantize_q5_1(const BlockQ5_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = fp16_to_f32(x[i].d);
        const float m = fp16_to_f32(x[i].m);
        const uint32_t qh = load_u32(x[i].qh);
        for (int j = 0; j < kQK / 2; ++j) {
            const int lo = (x[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int hi = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            y[j] = static_cast<float>(lo) * d + m;
            y[j + kQK / 2] = static_cast<float>(hi) * d + m;
        }
    }
}

void dequantize_q8_0(const BlockQ8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

void dequantize_q8_1(const BlockQ8_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

void dequantize_iq4_nl(const BlockIq4Nl *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = fp16_to_f32(x[i].d);
        for (int j = 0; j < kQK / 2; ++j) {
            y[j] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] & 0x0F]);
            y[j + kQK / 2] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] >> 4]);
        }
    }
}

void dequantize_mxfp4(const BlockMxfp4 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = e8m0_half_scale(x[i].e);  // a power of two: every product below is exact
        for (int j = 0; j < kQK / 2; ++j) {
            y[j] = static_cast<float>(kMxfp4Values[x[i].qs[j] & 0x0F]) * d;
            y[j + kQK / 2] = static_cast<float>(kMxfp4Values[x[i].qs[j] >> 4]) * d;
        }
    }
}

// K-quants: super-blocks of 256. Q2_K and Q3_K walk two halves of 128 elements; in each half four 2-bit planes
// (shift 0, 2, 4, 6) of the same 32 bytes, each plane split into two sub-blocks of 16 with their own scale.
void dequantize_q2_k(const BlockQ2_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const float dmin = fp16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * static_cast<float>(sc & 0x0F);
                    const float ml = dmin * static_cast<float>(sc >> 4);
                    for (int l = 0; l < 16; ++l)
                        *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void dequantize_q3_k(const BlockQ3_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        int scales[16];
        unpack_q3_k_scales(x[i].scales, scales);
        const uint8_t *q = x[i].qs;
        const uint8_t *hm = x[i].hmask;
        uint8_t mask = 1;
        int is = 0;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, mask = static_cast<uint8_t>(mask << 1)) {
                for (int part = 0; part < 2; ++part) {
                    const float dl = d * static_cast<float>(scales[is++] - 32);
                    for (int l = 0; l < 16; ++l) {
                        const int k = 16 * part + l;
                        const int v = ((q[k] >> shift) & 3) - ((hm[k] & mask) ? 0 : 4);
                        *y++ = dl * static_cast<float>(v);
                    }
                }
            }
        }
    }
}

void dequantize_q4_k(const BlockQ4_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const float dmin = fp16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int chunk = 0; chunk < 4; ++chunk, q += 32) {
            uint8_t sc, m;
            unpack_k4_scale_min(2 * chunk, x[i].scales, &sc, &m);
            const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
            unpack_k4_scale_min(2 * chunk + 1, x[i].scales, &sc, &m);
            const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
    }
}

void dequantize_q5_k(const BlockQ5_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const float dmin = fp16_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs;
        const uint8_t *qh = x[i].qh;
        for (int chunk = 0; chunk < 4; ++chunk, ql += 32) {
            const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * chunk));
            const uint8_t bit_hi = static_cast<uint8_t>(2u << (2 * chunk));
            uint8_t sc, m;
            unpack_k4_scale_min(2 * chunk, x[i].scales, &sc, &m);
            const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
            unpack_k4_scale_min(2 * chunk + 1, x[i].scales, &sc, &m);
            const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & bit_lo) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & bit_hi) ? 16 : 0)) - m2;
        }
    }
}

void dequantize_q6_k(const BlockQ6_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql;
        const uint8_t *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
                y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
        }
    }
}

void dequantize_q8_k(const BlockQ8_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += kQKK)
        for (int j = 0; j < kQKK; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
}

void dequantize_iq4_xs(const BlockIq4Xs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < kQKK / 32; ++ib, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0x0F]);
                y[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
            }
        }
    }
}

// The grid formats. Every index selects 8 (or 4) weights of a code book at once; signs come in bytes of 8, where
// IQ2_XXS, IQ2_XS and IQ3_XXS store 7 bits and the 8th makes the count of minus signs even.
uint8_t even_signs(uint32_t seven_bits) {
    // The parity of the 7 bits: of bit i xor bit i + 4 (bits 0-3), looked up in the 16-bit table 0x6996. Without
    // -mpopcnt, __builtin_popcount is a libgcc call, a few percent of an IQ2 load.
    const uint32_t folded = (seven_bits ^ (seven_bits >> 4)) & 15u;
    return static_cast<uint8_t>(seven_bits | (((0x6996u >> folded) & 1u) << 7));
}

// The formats decoded to integers first (quants_ref.h): y = the group's scale * (value * unit), for the 256 values
// of one super-block in groups of `group`. unit is 1 or IQ1's 1/8 (grid + delta as ggml adds them is exactly
// eighths / 8); value * 1 is exact, so each y is ggml's product bit for bit.
template <typename GroupScale>
float *scaled_values(const int8_t *values, int group, GroupScale scale_of, float unit, float *y) {
    for (int g = 0; g < kQKK / group; ++g) {
        const float scale = scale_of(g);
        for (int j = 0; j < group; ++j) *y++ = scale * (static_cast<float>(values[group * g + j]) * unit);
    }
    return y;
}

// IQ2: y = d (0.5 + code) / 4 * value, as ggml's d (0.5 + code) * 0.25 * grid * sign (negating is exact).
float iq2_scale(float d, uint8_t code) { return d * (0.5f + static_cast<float>(code)) * 0.25f; }

void dequantize_iq2_xxs(const BlockIq2Xxs *x, float *y, int64_t nb) {
    int8_t values[kQKK];
    uint8_t codes[kQKK / 32];
    for (int64_t i = 0; i < nb; ++i) {
        iq2_xxs_values(&x[i], values, codes);
        const float d = fp16_to_f32(x[i].d);
        y = scaled_values(values, 32, [&](int g) { return iq2_scale(d, codes[g]); }, 1.0f, y);
    }
}

void dequantize_iq2_xs(const BlockIq2Xs *x, float *y, int64_t nb) {
    int8_t values[kQKK];
    uint8_t codes[kQKK / 16];
    for (int64_t i = 0; i < nb; ++i) {
        iq2_xs_values(&x[i], values, codes);
        const float d = fp16_to_f32(x[i].d);
        y = scaled_values(values, 16, [&](int g) { return iq2_scale(d, codes[g]); }, 1.0f, y);
    }
}

void dequantize_iq2_s(const BlockIq2S *x, float *y, int64_t nb) {
    int8_t values[kQKK];
    uint8_t codes[kQKK / 16];
    for (int64_t i = 0; i < nb; ++i) {
        iq2_s_values(&x[i], values, codes);
        const float d = fp16_to_f32(x[i].d);
        y = scaled_values(values, 16, [&](int g) { return iq2_scale(d, codes[g]); }, 1.0f, y);
    }
}

void dequantize_iq3_xxs(const BlockIq3Xxs *x, float *y, int64_t nb) {
    int8_t values[kQKK];
    uint8_t codes[kQKK / 32];
    for (int64_t i = 0; i < nb; ++i) {
        iq3_xxs_values(&x[i], values, codes);
        const float d = fp16_to_f32(x[i].d);
        y = scaled_values(values, 32, [&](int g) { return d * (0.5f + static_cast<float>(codes[g])) * 0.5f; }, 1.0f, y);
    }
}

void dequantize_iq3_s(const BlockIq3S *x, float *y, int64_t nb) {
    int8_t values[kQKK];
    uint8_t codes[kQKK / 32];
    for (int64_t i = 0; i < nb; ++i) {
        iq3_s_values(&x[i], values, codes);
        const float d = fp16_to_f32(x[i].d);
        y = scaled_values(values, 32, [&](int g) { return d * static_cast<float>(1 + 2 * codes[g]); }, 1.0f, y);
    }
}

void dequantize_iq1_s(const BlockIq1S *x, float *y, int64_t nb) {
    int8_t eighths[kQKK];
    uint8_t codes[kQKK / 32];
    for (int64_t i = 0; i < nb; ++i) {
        iq1_s_values(&x[i], eighths, codes);
        const float d = fp16_to_f32(x[i].d);
        y = scaled_values(eighths, 32, [&](int g) { return d * static_cast<float>(2 * codes[g] + 1); }, 0.125f, y);
    }
}

void dequantize_iq1_m(const BlockIq1M *x, float *y, int64_t nb) {
    int8_t eighths[kQKK];
    uint8_t codes[kQKK / 16];
    for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_f32(iq1_m_values(&x[i], eighths, codes));
        y = scaled_values(eighths, 16, [&](int g) { return d * static_cast<float>(2 * codes[g] + 1); }, 0.125f, y);
    }
}

// Plain element types (integers, f64): converted to the nearest float. Unaligned-safe.
template <typename T>
void convert_plain(const void *src, float *dst, int64_t n) {
    const auto *bytes = static_cast<const uint8_t *>(src);
    for (int64_t i = 0; i < n; ++i) {
        T v;
        std::memcpy(&v, bytes + i * static_cast<int64_t>(sizeof(T)), sizeof v);
        dst[i] = static_cast<float>(v);
    }
}

}  // namespace

namespace {

// The integer decoders work on a grid entry's bytes at once (the load packs every weight of these formats through
// them; byte by byte, they took over a third of a load's time).

// Four magnitudes (a byte each, all >= 1) with the bytes whose bit in sign_bits4 is set negated: ~g + 1 = 256 - g per
// byte, which never carries into the next byte since g >= 1.
uint32_t signed4(uint32_t magnitudes, uint32_t sign_bits4) {
    const uint32_t negate = ((sign_bits4 * 0x00204081u) & 0x01010101u) * 0xFFu;  // bit b of sign_bits4 -> byte b
    return (magnitudes ^ negate) + (negate & 0x01010101u);
}

// The eight magnitudes of an IQ2 grid entry with the bytes whose bit in signs is set negated.
void signed8(uint64_t entry, uint8_t signs, int8_t *out) {
    const uint32_t v[2] = {signed4(static_cast<uint32_t>(entry), signs & 15u),
                           signed4(static_cast<uint32_t>(entry >> 32), signs >> 4u)};
    std::memcpy(out, v, 8);
}

// 8 g + delta for the eight signed grid bytes g (-1, 0, 1) of an IQ1 entry, delta = +-1: 8 g has its low three bits
// clear, so + 1 is an or; - 1 is a byte-wise add of 0xFF that keeps carries inside each byte.
uint64_t iq1_eighths(uint64_t entry, bool minus) {
    const uint64_t eight_g = (entry << 3) & 0xF8F8F8F8F8F8F8F8ull;
    if (!minus) return eight_g | 0x0101010101010101ull;
    return ((eight_g & 0x7F7F7F7F7F7F7F7Full) + 0x7F7F7F7F7F7F7F7Full) ^ (~eight_g & 0x8080808080808080ull);
}

}  // namespace

// Per 32 weights two u32: four 8-bit grid indices; four 7-bit signs and a 4-bit scale on top.
void iq2_xxs_values(const BlockIq2Xxs *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 32]) {
    const auto *q = reinterpret_cast<const uint8_t *>(block->qs);
    for (int ib = 0; ib < kQKK / 32; ++ib, q += 8) {
        const uint32_t signs_scale = load_u32(q + 4);
        scale_codes[ib] = static_cast<uint8_t>(signs_scale >> 28);
        for (int l = 0; l < 4; ++l)
            signed8(kIq2XxsGrid[q[l]], even_signs((signs_scale >> (7 * l)) & 127), values + 32 * ib + 8 * l);
    }
}

// Per 8 weights a u16: 9-bit index, 7-bit signs; a 4-bit scale per 16 weights.
void iq2_xs_values(const BlockIq2Xs *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 16]) {
    for (int ib = 0; ib < kQKK / 32; ++ib) {
        scale_codes[2 * ib] = block->scales[ib] & 0x0F;
        scale_codes[2 * ib + 1] = block->scales[ib] >> 4;
    }
    for (int i8 = 0; i8 < kQKK / 8; ++i8) {
        const uint16_t q = block->qs[i8];
        signed8(kIq2XsGrid[q & 511], even_signs(q >> 9), values + 8 * i8);
    }
}

// 32 low index bytes, then 32 full sign bytes; per 32 weights a qh byte (2 high index bits per 8 weights) and a
// byte of two 4-bit scales (per 16).
void iq2_s_values(const BlockIq2S *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 16]) {
    const uint8_t *signs = block->qs + kQKK / 8;
    for (int ib = 0; ib < kQKK / 32; ++ib) {
        scale_codes[2 * ib] = block->scales[ib] & 0x0F;
        scale_codes[2 * ib + 1] = block->scales[ib] >> 4;
        for (int l = 0; l < 4; ++l) {
            const int index = block->qs[4 * ib + l] | ((block->qh[ib] << (8 - 2 * l)) & 0x300);
            signed8(kIq2SGrid[index], signs[4 * ib + l], values + 32 * ib + 8 * l);
        }
    }
}

// 32 low index bytes; per 32 weights a u16: 3 high index bits per 8 weights, a 3-bit scale, the delta's sign.
void iq1_s_values(const BlockIq1S *block, int8_t eighths[kQKK], uint8_t scale_codes[kQKK / 32]) {
    for (int ib = 0; ib < kQKK / 32; ++ib) {
        const uint16_t qh = block->qh[ib];
        scale_codes[ib] = static_cast<uint8_t>((qh >> 12) & 7);
        for (int l = 0; l < 4; ++l) {
            const uint64_t v = iq1_eighths(kIq1SGrid[block->qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], qh & 0x8000);
            std::memcpy(eighths + 32 * ib + 8 * l, &v, 8);
        }
    }
}

// No block scale field: its f16 is the top nibbles of the four u16 scale words, whose other 12 bits are 3-bit
// scales per 16 weights. Per 8 weights a qh nibble: 3 high index bits and the delta's sign.
uint16_t iq1_m_values(const BlockIq1M *block, int8_t eighths[kQKK], uint8_t scale_codes[kQKK / 16]) {
    uint16_t sc[4];
    std::memcpy(sc, block->scales, sizeof sc);
    for (int g = 0; g < kQKK / 16; ++g) scale_codes[g] = static_cast<uint8_t>((sc[g / 4] >> (3 * (g % 4))) & 7);
    for (int i8 = 0; i8 < kQKK / 8; ++i8) {
        const int qh = block->qh[i8 / 2] >> (4 * (i8 % 2));
        const uint64_t v = iq1_eighths(kIq1SGrid[block->qs[i8] | ((qh & 7) << 8)], qh & 8);
        std::memcpy(eighths + 8 * i8, &v, 8);
    }
    return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

// 64 index bytes (4 weights each), then per 32 weights a u32 of four 7-bit signs and a 4-bit scale ls on top.
void iq3_xxs_values(const BlockIq3Xxs *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 32]) {
    const uint8_t *q = block->qs;
    for (int ib = 0; ib < kQKK / 32; ++ib, q += 8) {
        const uint32_t signs_scale = load_u32(block->qs + kQKK / 4 + 4 * ib);
        scale_codes[ib] = static_cast<uint8_t>(signs_scale >> 28);
        for (int pair = 0; pair < 4; ++pair) {  // 8 weights: two grid entries under one sign byte
            const uint8_t signs = even_signs((signs_scale >> (7 * pair)) & 127);
            const uint32_t v[2] = {signed4(kIq3XxsGrid[q[2 * pair]], signs & 15u),
                                   signed4(kIq3XxsGrid[q[2 * pair + 1]], signs >> 4)};
            std::memcpy(values + 32 * ib + 8 * pair, v, 8);
        }
    }
}

// 64 low index bytes, a qh byte per 32 weights (one high index bit per 4), a full sign byte per 8, and a 4-bit
// scale s per 32.
void iq3_s_values(const BlockIq3S *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 32]) {
    const uint8_t *q = block->qs;
    const uint8_t *signs = block->signs;
    for (int ib = 0; ib < kQKK / 32; ++ib, q += 8, signs += 4) {
        scale_codes[ib] = static_cast<uint8_t>(ib % 2 ? block->scales[ib / 2] >> 4 : block->scales[ib / 2] & 0x0F);
        const int qh = block->qh[ib];
        for (int l = 0; l < 8; ++l) {
            const uint32_t v = signed4(kIq3SGrid[q[l] | ((qh << (8 - l)) & 256)], (signs[l / 2] >> (4 * (l % 2))) & 15u);
            std::memcpy(values + 32 * ib + 4 * l, &v, 4);
        }
    }
}

bool can_dequantize(int32_t type) {
    switch (type) {
        case KT_TYPE_F32: case KT_TYPE_F16: case KT_TYPE_BF16:
        case KT_TYPE_Q4_0: case KT_TYPE_Q4_1: case KT_TYPE_Q5_0: case KT_TYPE_Q5_1:
        case KT_TYPE_Q8_0: case KT_TYPE_Q8_1: case KT_TYPE_IQ4_NL: case KT_TYPE_MXFP4:
        case KT_TYPE_Q2_K: case KT_TYPE_Q3_K: case KT_TYPE_Q4_K: case KT_TYPE_Q5_K:
        case KT_TYPE_Q6_K: case KT_TYPE_Q8_K: case KT_TYPE_IQ4_XS:
        case KT_TYPE_IQ2_XXS: case KT_TYPE_IQ2_XS: case KT_TYPE_IQ2_S: case KT_TYPE_IQ3_XXS: case KT_TYPE_IQ3_S:
        case KT_TYPE_IQ1_S: case KT_TYPE_IQ1_M:
        case KT_TYPE_I8: case KT_TYPE_I16: case KT_TYPE_I32: case KT_TYPE_I64: case KT_TYPE_F64:
            return true;
        default:
            return false;
    }
}

void dequantize_row(int32_t type, const void *src, float *dst, int64_t n) {
    const int64_t nb32 = n / kQK, nb256 = n / kQKK;
    switch (type) {
        case KT_TYPE_F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case KT_TYPE_F16: {
            const auto *h = static_cast<const uint16_t *>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
            return;
        }
        case KT_TYPE_BF16: {
            const auto *b = static_cast<const uint16_t *>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(b[i]);
            return;
        }
        case KT_TYPE_I8: convert_plain<int8_t>(src, dst, n); return;
        case KT_TYPE_I16: convert_plain<int16_t>(src, dst, n); return;
        case KT_TYPE_I32: convert_plain<int32_t>(src, dst, n); return;
        case KT_TYPE_I64: convert_plain<int64_t>(src, dst, n); return;
        case KT_TYPE_F64: convert_plain<double>(src, dst, n); return;
        case KT_TYPE_Q4_0: dequantize_q4_0(static_cast<const BlockQ4_0 *>(src), dst, nb32); return;
        case KT_TYPE_Q4_1: dequantize_q4_1(static_cast<const BlockQ4_1 *>(src), dst, nb32); return;
        case KT_TYPE_Q5_0: dequantize_q5_0(static_cast<const BlockQ5_0 *>(src), dst, nb32); return;
        case KT_TYPE_Q5_1: dequantize_q5_1(static_cast<const BlockQ5_1 *>(src), dst, nb32); return;
        case KT_TYPE_Q8_0: dequantize_q8_0(static_cast<const BlockQ8_0 *>(src), dst, nb32); return;
        case KT_TYPE_Q8_1: dequantize_q8_1(static_cast<const BlockQ8_1 *>(src), dst, nb32); return;
        case KT_TYPE_IQ4_NL: dequantize_iq4_nl(static_cast<const BlockIq4Nl *>(src), dst, nb32); return;
        case KT_TYPE_MXFP4: dequantize_mxfp4(static_cast<const BlockMxfp4 *>(src), dst, nb32); return;
        case KT_TYPE_Q2_K: dequantize_q2_k(static_cast<const BlockQ2_K *>(src), dst, nb256); return;
        case KT_TYPE_Q3_K: dequantize_q3_k(static_cast<const BlockQ3_K *>(src), dst, nb256); return;
        case KT_TYPE_Q4_K: dequantize_q4_k(static_cast<const BlockQ4_K *>(src), dst, nb256); return;
        case KT_TYPE_Q5_K: dequantize_q5_k(static_cast<const BlockQ5_K *>(src), dst, nb256); return;
        case KT_TYPE_Q6_K: dequantize_q6_k(static_cast<const BlockQ6_K *>(src), dst, nb256); return;
        case KT_TYPE_Q8_K: dequantize_q8_k(static_cast<const BlockQ8_K *>(src), dst, nb256); return;
        case KT_TYPE_IQ4_XS: dequantize_iq4_xs(static_cast<const BlockIq4Xs *>(src), dst, nb256); return;
        case KT_TYPE_IQ2_XXS: dequantize_iq2_xxs(static_cast<const BlockIq2Xxs *>(src), dst, nb256); return;
        case KT_TYPE_IQ2_XS: dequantize_iq2_xs(static_cast<const BlockIq2Xs *>(src), dst, nb256); return;
        case KT_TYPE_IQ2_S: dequantize_iq2_s(static_cast<const BlockIq2S *>(src), dst, nb256); return;
        case KT_TYPE_IQ3_XXS: dequantize_iq3_xxs(static_cast<const BlockIq3Xxs *>(src), dst, nb256); return;
        case KT_TYPE_IQ3_S: dequantize_iq3_s(static_cast<const BlockIq3S *>(src), dst, nb256); return;
        case KT_TYPE_IQ1_S: dequantize_iq1_s(static_cast<const BlockIq1S *>(src), dst, nb256); return;
        case KT_TYPE_IQ1_M: dequantize_iq1_m(static_cast<const BlockIq1M *>(src), dst, nb256); return;
        default: return;
    }
}

}  // namespace kt::ref
