// Scalar dequantizers. Each follows the arithmetic order of ggml's reference code exactly (integers converted to
// float, then one rounding per operation, no FMA), because the golden test compares bit patterns.
#include <cstring>

#include "core/fp16.h"
#include "ops/ref/blocks.h"
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

bool can_dequantize(int32_t type) {
    switch (type) {
        case KT_TYPE_F32: case KT_TYPE_F16: case KT_TYPE_BF16:
        case KT_TYPE_Q4_0: case KT_TYPE_Q4_1: case KT_TYPE_Q5_0: case KT_TYPE_Q5_1:
        case KT_TYPE_Q8_0: case KT_TYPE_Q8_1: case KT_TYPE_IQ4_NL: case KT_TYPE_MXFP4:
        case KT_TYPE_Q2_K: case KT_TYPE_Q3_K: case KT_TYPE_Q4_K: case KT_TYPE_Q5_K:
        case KT_TYPE_Q6_K: case KT_TYPE_Q8_K: case KT_TYPE_IQ4_XS:
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
        default: return;
    }
}

}  // namespace kt::ref
