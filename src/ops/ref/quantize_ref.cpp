// Scalar quantizers from f32: the activation formats dot-product kernels consume (Q8_0, Q8_1, Q8_K) and the
// weight formats kt writes (Q4_0 ... Q6_K, IQ4_NL, IQ4_XS, MXFP4, F16, BF16).
//
// Two families, held to different standards:
//   - Q8_0, Q8_1, Q8_K, Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL follow ggml's reference quantizers' arithmetic and rounding
//     rules (reference/gguf-and-quants.md §2.2; the rules are restated next to each function), in f32 with one
//     rounding per operation (this translation unit is compiled with -ffp-contract=off). Their bytes are compared
//     with llama.cpp's in tests/golden. For the activation formats that is what matters: a kernel's result then
//     depends on the weights and the activations, not on whose quantizer produced them.
//   - MXFP4 is kt's own too: of the two exponents that can be right for a block, the one with the smaller error.
//   - The K-quants and IQ4_XS are kt's own. Each sub-block gets the scale (and min) that minimises its squared error
//     over a sweep of candidate scales, each refined by least squares; the sub-block scales are then coded with the
//     super-block scale, every code is tried against its neighbours with the elements re-quantized, and the
//     super-block scales are re-fitted by least squares to the chosen codes. They minimise the plain squared error
//     (no importance weighting); tests/unit/quantize_test.cpp states the relative RMS error each reaches, and
//     tests/golden checks that it never exceeds llama.cpp's on the golden rows.
//
// Robustness: every finite input dequantizes to finite values (F16 excepted: it is IEEE conversion, |x| >= 65520
// becomes inf as in ggml). A scale beyond f16's range is clamped to its largest finite value and the block
// saturates. At the small end, ggml's rules let a scale round to zero or to a coarse f16 subnormal (kt keeps that
// where it keeps ggml's bytes); kt's own formats round the super-block scale up instead and fall back to zeros only
// when nothing is better. Non-finite inputs give unspecified bytes but never undefined behaviour: every float ->
// integer conversion saturates.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "ops/ref/blocks.h"
#include "ops/ref/quants_ref.h"

namespace kt::ref {
namespace {

// ------------------------------------------------------------------------------------------------------------
// Shared helpers

constexpr float kF16Max = 65504.0f;

// A stored f16 scale of inf would turn q * d into inf or NaN; the largest finite f16 makes the block saturate.
// (NaN passes through: it only arises from non-finite inputs.)
float clamp_to_f16(float v) { return v > kF16Max ? kF16Max : (v < -kF16Max ? -kF16Max : v); }

// 1/d, or 0 when d is 0 or so small that 1/d overflows (such a block stores a zero scale anyway).
float inverse(float d) {
    if (d == 0.0f) return 0.0f;
    const float id = 1.0f / d;
    return std::isfinite(id) ? id : 0.0f;
}

// Float -> int, truncating toward zero like a C cast, saturated to [lo, hi]; NaN gives lo. (Converting an
// out-of-range float is undefined behaviour in C++.)
int saturate(float v, int lo, int hi) {
    if (v >= static_cast<float>(hi)) return hi;
    if (v > static_cast<float>(lo)) return static_cast<int>(v);
    return lo;
}

// Nearest integer with ties to even (ggml's nearest_int), saturated to [lo, hi]; NaN gives lo. Inside the range
// |v| < 2^22, so adding and subtracting 1.5 * 2^23 rounds exactly (f32 addition rounds to nearest even), without
// the libm call std::nearbyint costs on a baseline x86-64 build.
int round_saturate(float v, int lo, int hi) {
    constexpr float kRoundingBias = 12582912.0f;  // 1.5 * 2^23
    if (!(v > static_cast<float>(lo))) return lo;
    if (v >= static_cast<float>(hi)) return hi;
    return static_cast<int>((v + kRoundingBias) - kRoundingBias);
}

// The element of x with the largest magnitude, keeping its sign (the first one on ties), and that magnitude.
void signed_max(const float *x, int n, float *max, float *amax) {
    *max = 0.0f;
    *amax = 0.0f;
    for (int j = 0; j < n; ++j) {
        const float a = std::fabs(x[j]);
        if (a > *amax) {
            *amax = a;
            *max = x[j];
        }
    }
}

// Blocks are assembled in a local struct and copied out, so dst needs no alignment.
template <typename Block>
void store(const Block &block, void *dst, int64_t i) {
    std::memcpy(static_cast<uint8_t *>(dst) + i * static_cast<int64_t>(sizeof(Block)), &block, sizeof(Block));
}

// The 32-wide formats keep element j in the low nibble of qs[j] and element j + 16 in the high nibble; the 5-bit
// formats put bit 4 of element j in bit j of the little-endian u32 qh.
void pack_nibbles(const uint8_t q[kQK], uint8_t qs[kQK / 2]) {
    for (int j = 0; j < kQK / 2; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | (q[j + kQK / 2] & 0x0F) << 4);
}

void pack_fifth_bits(const uint8_t q[kQK], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < kQK; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1u) << j;
    std::memcpy(qh, &h, sizeof h);
}

// ------------------------------------------------------------------------------------------------------------
// Activation formats (ggml's rules exactly)

// Q8_0 / Q8_1: d = amax / 127 (f32, stored as f16), q = round(x / d) with ties away from zero (roundf), computed
// as x * (1/d) from the unrounded d. Q8_1 adds s = f16(d * sum(q)), again with the f32 d.
template <typename Block, bool kWithSum>
void quantize_q8_32(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQK) {
        Block b{};
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = clamp_to_f16(amax / 127.0f);
        const float id = inverse(d);
        b.d = f32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < kQK; ++j) {
            b.qs[j] = static_cast<int8_t>(saturate(std::round(x[j] * id), -127, 127));
            sum += b.qs[j];
        }
        if constexpr (kWithSum) b.s = f32_to_fp16(clamp_to_f16(static_cast<float>(sum) * d));
        store(b, dst, i);
    }
}

// Q8_K: iscale = -127 / max with max the signed value of largest magnitude, q = min(127, nearest(iscale * x))
// with ties to even, d = 1 / iscale in f32 (so d can be negative), bsums[g] = sum of the 16 q of group g. An
// all-zero block (or one so small that iscale overflows) stores d = 0 and q = 0.
void quantize_q8_k(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        BlockQ8_K b{};
        float max, amax;
        signed_max(x, kQKK, &max, &amax);
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        if (std::isfinite(iscale) && iscale != 0.0f) {
            for (int j = 0; j < kQKK; ++j) b.qs[j] = static_cast<int8_t>(round_saturate(iscale * x[j], -128, 127));
            for (int g = 0; g < kQKK / 16; ++g) {
                int sum = 0;
                for (int j = 0; j < 16; ++j) sum += b.qs[16 * g + j];
                b.bsums[g] = static_cast<int16_t>(sum);
            }
            b.d = 1.0f / iscale;
        }
        store(b, dst, i);
    }
}

// ------------------------------------------------------------------------------------------------------------
// 32-wide weight formats (ggml's rules exactly)

// Q4_0 / Q5_0 (kBits = 4 / 5, offset o = 8 / 16): the signed value of largest magnitude maps to -o, so
// d = max / -o; q = min(2o - 1, trunc(x * (1/d) + (o + 0.5))) with the addition rounded in f32 first.
template <int kBits>
float quantize_offset_32(const float *x, uint8_t q[kQK]) {
    constexpr int kOffset = 1 << (kBits - 1);
    float max, amax;
    signed_max(x, kQK, &max, &amax);
    const float d = clamp_to_f16(max / static_cast<float>(-kOffset));
    const float id = inverse(d);
    for (int j = 0; j < kQK; ++j)
        q[j] = static_cast<uint8_t>(saturate(x[j] * id + (static_cast<float>(kOffset) + 0.5f), 0, 2 * kOffset - 1));
    return d;
}

// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min; q = min(2^bits - 1, trunc((x - min) * (1/d) + 0.5)).
template <int kBits>
void quantize_min_max_32(const float *x, uint8_t q[kQK], float *d_out, float *m_out) {
    constexpr int kMaxQ = (1 << kBits) - 1;
    float lo = x[0], hi = x[0];
    for (int j = 1; j < kQK; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
    }
    const float m = clamp_to_f16(lo);  // differs from lo only when lo is beyond f16's range
    const float d = clamp_to_f16((hi - lo) / static_cast<float>(kMaxQ));
    const float id = inverse(d);
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(saturate((x[j] - m) * id + 0.5f, 0, kMaxQ));
    *d_out = d;
    *m_out = m;
}

void quantize_q4_0(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQK) {
        BlockQ4_0 b{};
        uint8_t q[kQK];
        b.d = f32_to_fp16(quantize_offset_32<4>(x, q));
        pack_nibbles(q, b.qs);
        store(b, dst, i);
    }
}

void quantize_q5_0(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQK) {
        BlockQ5_0 b{};
        uint8_t q[kQK];
        b.d = f32_to_fp16(quantize_offset_32<5>(x, q));
        pack_nibbles(q, b.qs);
        pack_fifth_bits(q, b.qh);
        store(b, dst, i);
    }
}

void quantize_q4_1(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQK) {
        BlockQ4_1 b{};
        uint8_t q[kQK];
        float d, m;
        quantize_min_max_32<4>(x, q, &d, &m);
        b.d = f32_to_fp16(d);
        b.m = f32_to_fp16(m);
        pack_nibbles(q, b.qs);
        store(b, dst, i);
    }
}

void quantize_q5_1(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQK) {
        BlockQ5_1 b{};
        uint8_t q[kQK];
        float d, m;
        quantize_min_max_32<5>(x, q, &d, &m);
        b.d = f32_to_fp16(d);
        b.m = f32_to_fp16(m);
        pack_nibbles(q, b.qs);
        pack_fifth_bits(q, b.qh);
        store(b, dst, i);
    }
}

// For each integer k in [-128, 113): the index hi with kIq4nlValues[hi - 1] <= k < kIq4nlValues[hi] (clamped to
// 1..15). The code book holds integers, so every v in [k, k + 1) shares k's bracket.
constexpr int kIq4TableLo = -128, kIq4TableSize = 113 - kIq4TableLo;
constexpr std::array<uint8_t, kIq4TableSize> kIq4Bracket = [] {
    std::array<uint8_t, kIq4TableSize> t{};
    for (int k = 0; k < kIq4TableSize; ++k) {
        int hi = 1;
        while (hi < 15 && k + kIq4TableLo >= kIq4nlValues[hi]) ++hi;
        t[static_cast<size_t>(k)] = static_cast<uint8_t>(hi);
    }
    return t;
}();

// Index of the IQ4 code-book value nearest to v; a tie goes to the larger value (ggml's rule).
int nearest_iq4(float v) {
    if (v <= static_cast<float>(kIq4nlValues[0])) return 0;
    if (v >= static_cast<float>(kIq4nlValues[15])) return 15;
    // v is in (-127, 113), so v + 128 truncates to floor(v) + 128, or to one more when the f32 sum rounds up to
    // the next integer; the two loops step to the right bracket in that case.
    const int k = std::min(static_cast<int>(v - static_cast<float>(kIq4TableLo)), kIq4TableSize - 1);
    int hi = kIq4Bracket[static_cast<size_t>(k)];
    while (v >= static_cast<float>(kIq4nlValues[hi])) ++hi;
    while (v < static_cast<float>(kIq4nlValues[hi - 1])) --hi;
    return v - static_cast<float>(kIq4nlValues[hi - 1]) < static_cast<float>(kIq4nlValues[hi]) - v ? hi - 1 : hi;
}

// IQ4_NL, ggml's search without an importance matrix: weights w = x^2; start from d = max / 127 (the signed max
// onto the code book's -127 end), fit d = sum(w q x) / sum(w q^2) to the nearest codes; then for t = -7..7 try
// the codes nearest to x * (t - 127) / max and keep the fit with the largest sum(w q x)^2 / sum(w q^2). The codes
// stored are those nearest to x / d with the f32 d. Blocks with max |x| < 1e-15 store d = 0.
float iq4_nl_scale(const float *x) {
    constexpr int kTries = 7;
    constexpr float kZeroBlock = 1e-15f;
    const float lowest = static_cast<float>(kIq4nlValues[0]);
    float max, amax;
    signed_max(x, kQK, &max, &amax);
    if (amax < kZeroBlock) return 0.0f;
    float w[kQK];
    for (int j = 0; j < kQK; ++j) w[j] = x[j] * x[j];
    // Sums for the codes nearest to x * id.
    auto fit = [&](float id, float *sumqx, float *sumq2) {
        *sumqx = 0.0f;
        *sumq2 = 0.0f;
        for (int j = 0; j < kQK; ++j) {
            const float q = static_cast<float>(kIq4nlValues[nearest_iq4(id * x[j])]);
            *sumqx += w[j] * q * x[j];
            *sumq2 += w[j] * q * q;
        }
    };
    const float first = -max / lowest;
    float sumqx, sumq2;
    fit(1.0f / first, &sumqx, &sumq2);
    float d = sumqx / sumq2;
    float best = d * sumqx;
    for (int t = -kTries; t <= kTries; ++t) {
        fit(static_cast<float>(t + kIq4nlValues[0]) / max, &sumqx, &sumq2);
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    // x^2 overflows f32 for |x| > 1.8e19 and makes the fit NaN; the first guess is then the best we have.
    return std::isfinite(d) ? d : first;
}

void quantize_iq4_nl(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQK) {
        BlockIq4Nl b{};
        const float d = clamp_to_f16(iq4_nl_scale(x));
        b.d = f32_to_fp16(d);
        const float id = inverse(d);
        uint8_t q[kQK];
        for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>(nearest_iq4(id * x[j]));
        pack_nibbles(q, b.qs);
        store(b, dst, i);
    }
}

// ------------------------------------------------------------------------------------------------------------
// MXFP4: kt's own choice of the shared exponent

// The nibble of the MXFP4 code nearest to v (in units of the block scale); equally near two codes, the smaller
// magnitude. Codes 0..7 hold the magnitudes 0 1 2 3 4 6 8 12, codes 8..15 the same negated.
uint8_t nearest_mxfp4(float v) {
    constexpr float kMidpoints[7] = {0.5f, 1.5f, 2.5f, 3.5f, 5.0f, 7.0f, 10.0f};
    const float a = std::fabs(v);
    uint8_t m = 0;
    while (m < 7 && a > kMidpoints[m]) ++m;  // NaN compares false: code 0
    return static_cast<uint8_t>(m == 0 || !(v < 0.0f) ? m : m + 8);
}

// Squared error of the block coded with exponent byte e (codes written to q when q is not null).
double mxfp4_error(const float *x, uint8_t e, uint8_t *q) {
    const float d = e8m0_half_scale(e), id = inverse(d);
    double err = 0.0;
    for (int j = 0; j < kQK; ++j) {
        const uint8_t c = nearest_mxfp4(x[j] * id);
        const double diff = static_cast<double>(kMxfp4Values[c]) * d - x[j];
        err += diff * diff;
        if (q) q[j] = c;
    }
    return err;
}

// The scale is a power of two 2^(e - 128) with the codes' largest magnitude 12. The smallest e whose range holds
// the block's largest |x| never clips; one less halves the step and clips only the top, which often wins. Both are
// tried and the one with the smaller squared error kept; ggml's reference rule always picks one of the two, so kt
// is never less accurate than it on any block. All-zero (or all non-finite) blocks store e = 0 and zero codes.
void quantize_mxfp4(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQK) {
        BlockMxfp4 b{};
        float max, amax;
        signed_max(x, kQK, &max, &amax);
        uint8_t q[kQK] = {};
        if (amax > 0.0f && std::isfinite(amax)) {
            // 2^(s+3) <= amax < 2^(s+4) with s = ilogb(amax) - 3; 12 * 2^s = 1.5 * 2^(s+3) may or may not reach amax.
            int s = std::ilogb(amax) - 3;
            if (12.0f * std::ldexp(1.0f, s) < amax) ++s;
            const int e_hold = std::min(254, std::max(0, s + 128));
            const int e_clip = std::max(0, e_hold - 1);
            b.e = static_cast<uint8_t>(mxfp4_error(x, static_cast<uint8_t>(e_clip), nullptr) <
                                               mxfp4_error(x, static_cast<uint8_t>(e_hold), nullptr)
                                           ? e_clip
                                           : e_hold);
            mxfp4_error(x, b.e, q);
        }
        pack_nibbles(q, b.qs);
        store(b, dst, i);
    }
}

// ------------------------------------------------------------------------------------------------------------
// K-quants and IQ4_XS: kt's own search
//
// Errors are accumulated in double; the values they compare are computed exactly as the dequantizer computes them
// (f32, (d * code) * q), so the search optimises what the reader will see.

// Candidate scales: the sub-block's extreme value is mapped to kSweepLo..kSweepHi times the end of the code range.
// Clipping the extreme pays when the codes are few (3-bit Q3_K wants ~0.85), never when they are many (Q6_K ~1).
constexpr int kSweepSteps = 24;
constexpr double kSweepLo = 0.55, kSweepHi = 1.15;
constexpr int kRefineRounds = 4;  // least-squares <-> re-quantize alternations per candidate (they converge fast)

double sweep_fraction(int k) { return kSweepLo + (kSweepHi - kSweepLo) * k / kSweepSteps; }

float f16_round(float v) { return fp16_to_f32(f32_to_fp16(clamp_to_f16(v))); }

// The f16 value of v's sign nearest to v that is at least |v| in magnitude (at most 65504). A super-block scale
// rounded this way never pushes a sub-block code past its range, and it does not underflow: for small data
// (super-block scales among f16's subnormals, steps of 2^-24) the codes then absorb the coarse step instead of
// the whole block collapsing to zero.
float f16_at_least(float v) {
    uint16_t h = f32_to_fp16(clamp_to_f16(v));
    if (std::fabs(fp16_to_f32(h)) < std::fabs(v) && (h & 0x7FFFu) < 0x7BFFu) ++h;  // next magnitude, same sign
    return fp16_to_f32(h);
}

// The squared error of storing zeros; a search result worse than that is replaced by zeros.
double zero_error(const float *x, int n) {
    double err = 0;
    for (int i = 0; i < n; ++i) err += static_cast<double>(x[i]) * x[i];
    return err;
}

// The values an element of a symmetric format can take, by index: integers lo..hi, or the IQ4 code book. Index 0
// is the end with the larger magnitude (-4 of -4..3, -32 of -32..31, -127 of the code book).
struct IntGrid {
    int lo, hi;
    float value(int i) const { return static_cast<float>(lo + i); }
    int nearest(float v) const { return round_saturate(v, lo, hi) - lo; }
};

struct Iq4Grid {
    float value(int i) const { return static_cast<float>(kIq4nlValues[i]); }
    int nearest(float v) const { return nearest_iq4(v); }
};

// ---- symmetric sub-blocks: y = s * value(q) ----

// The scale of one sub-block minimising sum (x - s * value(q))^2 with q nearest to x / s.
template <class Grid>
float fit_symmetric(const float *x, int n, const Grid &g) {
    float max, amax;
    signed_max(x, n, &max, &amax);
    if (amax == 0.0f) return 0.0f;
    // Score of the codes nearest to x / s, and their least-squares scale: maximising (x.v)^2 / (v.v) is
    // minimising the squared error.
    auto evaluate = [&](float s, float *s_fit) {
        double xv = 0, vv = 0;
        for (int j = 0; j < n; ++j) {
            const double v = g.value(g.nearest(x[j] / s));
            xv += x[j] * v;
            vv += v * v;
        }
        if (vv == 0) return -1.0;
        *s_fit = static_cast<float>(xv / vv);
        return xv * xv / vv;
    };
    float best_s = max / g.value(0);
    double best_score = -1.0;
    for (int k = 0; k <= kSweepSteps; ++k) {
        float s = static_cast<float>(max / (g.value(0) * sweep_fraction(k)));
        for (int round = 0; round < kRefineRounds && std::isfinite(s) && s != 0.0f; ++round) {
            float s_fit = s;
            const double score = evaluate(s, &s_fit);
            if (score > best_score) {  // the score is that of s_fit with these codes, which s_fit can only improve
                best_score = score;
                best_s = s_fit;
            }
            if (s_fit == s) break;
            s = s_fit;
        }
    }
    return best_s;
}

// One super-block of a symmetric format: sub-block scales coded as integers in [code_lo, code_hi] times the f16
// super-block scale d, elements as grid indices. code_lo is the code of largest magnitude (-32, -128).
struct SymmetricCoding {
    int sub;      // elements per sub-block
    int code_lo;  // codes in [code_lo, code_hi]
    int code_hi;
};

template <class Grid>
void quantize_symmetric(const float *x, const SymmetricCoding &c, const Grid &g, uint16_t *d_out, int *codes,
                        uint8_t *q) {
    const int n_sub = kQKK / c.sub;
    float s[kQKK / 16];
    float max_s = 0.0f, amax_s = 0.0f;
    for (int j = 0; j < n_sub; ++j) {
        s[j] = fit_symmetric(x + j * c.sub, c.sub, g);
        if (std::fabs(s[j]) > amax_s) {
            amax_s = std::fabs(s[j]);
            max_s = s[j];
        }
    }
    // Codes and element indices for a given super-block scale; returns the squared error.
    auto code_all = [&](float d) {
        double total = 0;
        for (int j = 0; j < n_sub; ++j) {
            const float *xs = x + j * c.sub;
            uint8_t *qs = q + j * c.sub;
            const int c0 = d != 0.0f ? round_saturate(s[j] / d, c.code_lo, c.code_hi) : 0;
            double best_err = -1;
            for (int code = std::max(c.code_lo, c0 - 1); code <= std::min(c.code_hi, c0 + 1); ++code) {
                const float dl = d * static_cast<float>(code);
                const float idl = inverse(dl);
                double err = 0;
                uint8_t trial[kQKK / 8];
                for (int l = 0; l < c.sub; ++l) {
                    trial[l] = static_cast<uint8_t>(g.nearest(xs[l] * idl));
                    const double e = static_cast<double>(dl * g.value(trial[l])) - xs[l];
                    err += e * e;
                }
                if (best_err < 0 || err < best_err) {
                    best_err = err;
                    codes[j] = code;
                    std::memcpy(qs, trial, static_cast<size_t>(c.sub));
                }
            }
            total += best_err;
        }
        return total;
    };
    // The largest scale gets the code of largest magnitude; then alternate: codes for d, least-squares d for the
    // codes (y = d * (code * value) is linear in d).
    float d = f16_at_least(max_s / static_cast<float>(c.code_lo));
    double best_err = code_all(d);
    float best_d = d;
    int best_codes[kQKK / 16];
    uint8_t best_q[kQKK];
    std::memcpy(best_codes, codes, sizeof(int) * static_cast<size_t>(n_sub));
    std::memcpy(best_q, q, kQKK);
    for (int round = 0; round < kRefineRounds && d != 0.0f; ++round) {
        double xa = 0, aa = 0;
        for (int i = 0; i < kQKK; ++i) {
            const double a = static_cast<double>(codes[i / c.sub]) * g.value(q[i]);
            xa += x[i] * a;
            aa += a * a;
        }
        if (aa == 0) break;
        const float next = f16_round(static_cast<float>(xa / aa));
        if (next == d) break;
        d = next;
        const double err = code_all(d);
        if (err >= best_err) break;
        best_err = err;
        best_d = d;
        std::memcpy(best_codes, codes, sizeof(int) * static_cast<size_t>(n_sub));
        std::memcpy(best_q, q, kQKK);
    }
    if (zero_error(x, kQKK) <= best_err) {
        best_d = 0.0f;
        std::fill(best_codes, best_codes + n_sub, 0);
        std::memset(best_q, g.nearest(0.0f), kQKK);
    }
    *d_out = f32_to_fp16(best_d);
    std::memcpy(codes, best_codes, sizeof(int) * static_cast<size_t>(n_sub));
    std::memcpy(q, best_q, kQKK);
}

// ---- affine sub-blocks: y = s * q - m, q in [0, q_max], s >= 0, m >= 0 ----
//
// The K formats store the offset as -dmin * code with an unsigned code, so a sub-block's offset is at most 0: a
// sub-block of only positive values still starts its range at 0.

struct Affine {
    float s, m;
};

// Least-squares (s, m) for fixed codes q, with m >= 0 enforced; returns false when the codes are degenerate.
bool solve_affine(const float *x, const uint8_t *q, int n, Affine *out) {
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int j = 0; j < n; ++j) {
        sq += q[j];
        sqq += static_cast<double>(q[j]) * q[j];
        sx += x[j];
        sqx += q[j] * static_cast<double>(x[j]);
    }
    const double det = n * sqq - sq * sq;
    if (det <= 0) return false;
    double s = (n * sqx - sq * sx) / det;
    double offset = (sqq * sx - sq * sqx) / det;
    if (offset > 0) {  // the unconstrained optimum starts above 0: pin the offset at 0
        offset = 0;
        s = sqx / sqq;
    }
    if (!(s > 0)) return false;
    *out = Affine{static_cast<float>(s), static_cast<float>(-offset)};
    return true;
}

double affine_error(const float *x, int n, int q_max, const Affine &a, uint8_t *q) {
    const float is = inverse(a.s);
    double err = 0;
    for (int j = 0; j < n; ++j) {
        q[j] = static_cast<uint8_t>(round_saturate((x[j] + a.m) * is, 0, q_max));
        const double e = static_cast<double>(a.s * static_cast<float>(q[j]) - a.m) - x[j];
        err += e * e;
    }
    return err;
}

Affine fit_affine(const float *x, int n, int q_max) {
    float lo = 0.0f, hi = x[0];
    for (int j = 0; j < n; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
    }
    Affine best{(hi - lo) / static_cast<float>(q_max), -lo};
    if (!(hi > lo)) return Affine{0.0f, -lo};
    uint8_t q[kQKK / 8];
    double best_err = affine_error(x, n, q_max, best, q);
    for (int k = 0; k <= kSweepSteps; ++k) {
        Affine a{static_cast<float>((hi - lo) / (q_max * sweep_fraction(k))), -lo};
        for (int round = 0; round < kRefineRounds && std::isfinite(a.s) && a.s > 0.0f; ++round) {
            const double err = affine_error(x, n, q_max, a, q);
            if (err < best_err) {
                best_err = err;
                best = a;
            }
            Affine next;
            if (!solve_affine(x, q, n, &next) || (next.s == a.s && next.m == a.m)) break;
            a = next;
        }
    }
    return best;
}

struct AffineCoding {
    int sub;       // elements per sub-block
    int q_max;     // elements in [0, q_max]
    int code_max;  // scale and min codes in [0, code_max]
};

// One super-block of an affine format: scales and mins coded in [0, code_max] times the f16 d and dmin.
void quantize_affine(const float *x, const AffineCoding &c, uint16_t *d_out, uint16_t *dmin_out, uint8_t *sc,
                     uint8_t *mc, uint8_t *q) {
    const int n_sub = kQKK / c.sub;
    Affine fits[kQKK / 16];
    float max_s = 0.0f, max_m = 0.0f;
    for (int j = 0; j < n_sub; ++j) {
        fits[j] = fit_affine(x + j * c.sub, c.sub, c.q_max);
        max_s = std::max(max_s, fits[j].s);
        max_m = std::max(max_m, fits[j].m);
    }
    // Codes and elements for given (d, dmin): each sub-block tries its nearest codes and their neighbours.
    auto code_all = [&](float d, float dmin) {
        double total = 0;
        for (int j = 0; j < n_sub; ++j) {
            const float *xs = x + j * c.sub;
            const int s0 = d != 0.0f ? round_saturate(fits[j].s / d, 0, c.code_max) : 0;
            const int m0 = dmin != 0.0f ? round_saturate(fits[j].m / dmin, 0, c.code_max) : 0;
            double best_err = -1;
            for (int si = std::max(0, s0 - 1); si <= std::min(c.code_max, s0 + 1); ++si) {
                for (int mi = std::max(0, m0 - 1); mi <= std::min(c.code_max, m0 + 1); ++mi) {
                    uint8_t trial[kQKK / 8];
                    const Affine a{d * static_cast<float>(si), dmin * static_cast<float>(mi)};
                    const double err = affine_error(xs, c.sub, c.q_max, a, trial);
                    if (best_err < 0 || err < best_err) {
                        best_err = err;
                        sc[j] = static_cast<uint8_t>(si);
                        mc[j] = static_cast<uint8_t>(mi);
                        std::memcpy(q + j * c.sub, trial, static_cast<size_t>(c.sub));
                    }
                }
            }
            total += best_err;
        }
        return total;
    };
    float d = f16_at_least(max_s / static_cast<float>(c.code_max));
    float dmin = f16_at_least(max_m / static_cast<float>(c.code_max));
    double best_err = code_all(d, dmin);
    float best_d = d, best_dmin = dmin;
    uint8_t best_sc[kQKK / 16], best_mc[kQKK / 16], best_q[kQKK];
    auto keep = [&] {
        std::memcpy(best_sc, sc, static_cast<size_t>(n_sub));
        std::memcpy(best_mc, mc, static_cast<size_t>(n_sub));
        std::memcpy(best_q, q, kQKK);
    };
    keep();
    // y = d * (sc * q) - dmin * mc is linear in (d, dmin): re-fit both to the chosen codes, then re-code.
    for (int round = 0; round < kRefineRounds; ++round) {
        double aa = 0, ab = 0, bb = 0, xa = 0, xb = 0;
        for (int i = 0; i < kQKK; ++i) {
            const double a = static_cast<double>(sc[i / c.sub]) * q[i], b = mc[i / c.sub];
            aa += a * a;
            ab += a * b;
            bb += b * b;
            xa += x[i] * a;
            xb += x[i] * b;
        }
        float next_d, next_dmin;
        const double det = aa * bb - ab * ab;
        if (bb == 0 && aa > 0) {
            next_d = f16_round(static_cast<float>(xa / aa));
            next_dmin = dmin;
        } else if (det > 0) {
            next_d = f16_round(static_cast<float>((xa * bb - xb * ab) / det));
            next_dmin = f16_round(static_cast<float>(-(xb * aa - xa * ab) / det));
        } else {
            break;
        }
        if (!(next_d >= 0.0f) || !(next_dmin >= 0.0f) || (next_d == d && next_dmin == dmin)) break;
        d = next_d;
        dmin = next_dmin;
        const double err = code_all(d, dmin);
        if (err >= best_err) break;
        best_err = err;
        best_d = d;
        best_dmin = dmin;
        keep();
    }
    if (zero_error(x, kQKK) <= best_err) {
        best_d = best_dmin = 0.0f;
        std::memset(best_sc, 0, sizeof best_sc);
        std::memset(best_mc, 0, sizeof best_mc);
        std::memset(best_q, 0, sizeof best_q);
    }
    *d_out = f32_to_fp16(best_d);
    *dmin_out = f32_to_fp16(best_dmin);
    std::memcpy(sc, best_sc, static_cast<size_t>(n_sub));
    std::memcpy(mc, best_mc, static_cast<size_t>(n_sub));
    std::memcpy(q, best_q, kQKK);
}

// ---- packing (layouts: blocks.h and the dequantizers) ----

// Q2_K / Q3_K: element e = 128h + 32s + k (k < 32) keeps its two low bits at bit 2s of qs[32h + k].
void pack_2bit_planes(const uint8_t q[kQKK], uint8_t qs[kQKK / 4]) {
    for (int e = 0; e < kQKK; ++e) {
        const int h = e / 128, s = (e % 128) / 32, k = e % 32;
        qs[32 * h + k] |= static_cast<uint8_t>((q[e] & 3) << (2 * s));
    }
}

// Q4_K / Q5_K: eight 6-bit (scale, min) pairs in 12 bytes. Pairs 0..3 use the low 6 bits of bytes 0..3 (scales)
// and 4..7 (mins); pairs 4..7 put their low 4 bits in bytes 8..11 (scale low nibble, min high nibble) and their
// top 2 bits in the top bits of bytes 0..3 (scales) and 4..7 (mins).
void pack_k4_scales(const uint8_t sc[8], const uint8_t mc[8], uint8_t out[kKScaleBytes]) {
    for (int j = 0; j < 4; ++j) {
        out[j] = static_cast<uint8_t>((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        out[j + 4] = static_cast<uint8_t>((mc[j] & 63) | (mc[j + 4] >> 4) << 6);
        out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (mc[j + 4] & 15) << 4);
    }
}

constexpr AffineCoding kQ2K{16, 3, 15};
constexpr AffineCoding kQ4K{32, 15, 63};
constexpr AffineCoding kQ5K{32, 31, 63};
constexpr SymmetricCoding kQ3K{16, -32, 31};
constexpr SymmetricCoding kQ6K{16, -128, 127};
constexpr SymmetricCoding kIq4Xs{32, -32, 31};

void quantize_q2_k(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        BlockQ2_K b{};
        uint8_t sc[16], mc[16], q[kQKK];
        quantize_affine(x, kQ2K, &b.d, &b.dmin, sc, mc, q);
        for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(sc[j] | mc[j] << 4);
        pack_2bit_planes(q, b.qs);
        store(b, dst, i);
    }
}

void quantize_q3_k(const float *x, void *dst, int64_t nb) {
    const IntGrid grid{-4, 3};
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        BlockQ3_K b{};
        int codes[16];
        uint8_t q[kQKK];  // value + 4, in 0..7
        quantize_symmetric(x, kQ3K, grid, &b.d, codes, q);
        // Scale i (code + 32, 6 bits): low 4 bits in the low (i < 8) or high nibble of byte i % 8, top 2 bits at
        // bit 2 * (i / 4) of byte 8 + i % 4.
        for (int j = 0; j < 16; ++j) {
            const int s = codes[j] + 32;
            b.scales[j % 8] |= static_cast<uint8_t>((s & 15) << (4 * (j / 8)));
            b.scales[8 + j % 4] |= static_cast<uint8_t>((s >> 4) << (2 * (j / 4)));
        }
        pack_2bit_planes(q, b.qs);
        // The third bit (set: value = low bits; clear: low bits - 4) of element 128h + 32s + k is bit 4h + s of
        // hmask[k].
        for (int e = 0; e < kQKK; ++e)
            if (q[e] & 4) b.hmask[e % 32] |= static_cast<uint8_t>(1u << (4 * (e / 128) + (e % 128) / 32));
        store(b, dst, i);
    }
}

void quantize_q4_k(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        BlockQ4_K b{};
        uint8_t sc[8], mc[8], q[kQKK];
        quantize_affine(x, kQ4K, &b.d, &b.dmin, sc, mc, q);
        pack_k4_scales(sc, mc, b.scales);
        // Chunk c of 64 elements: the first 32 in the low nibbles of qs[32c ..], the next 32 in the high nibbles.
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | q[64 * c + 32 + l] << 4);
        store(b, dst, i);
    }
}

void quantize_q5_k(const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        BlockQ5_K b{};
        uint8_t sc[8], mc[8], q[kQKK];
        quantize_affine(x, kQ5K, &b.d, &b.dmin, sc, mc, q);
        pack_k4_scales(sc, mc, b.scales);
        // As Q4_K for the low 4 bits; bit 4 of element 64c + l is bit 2c of qh[l], of element 64c + 32 + l bit 2c + 1.
        for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                b.qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
                b.qh[l] |= static_cast<uint8_t>((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
        }
        store(b, dst, i);
    }
}

void quantize_q6_k(const float *x, void *dst, int64_t nb) {
    const IntGrid grid{-32, 31};
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        BlockQ6_K b{};
        int codes[16];
        uint8_t q[kQKK];  // value + 32, in 0..63
        quantize_symmetric(x, kQ6K, grid, &b.d, codes, q);
        for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(codes[j]);
        // Half n, quarter k, l < 32: element 128n + 32k + l has its low 4 bits in ql[64n + 32(k % 2) + l] (low
        // nibble for k < 2, high for k >= 2) and its top 2 bits at bit 2k of qh[32n + l].
        for (int e = 0; e < kQKK; ++e) {
            const int n = e / 128, k = (e % 128) / 32, l = e % 32;
            b.ql[64 * n + 32 * (k % 2) + l] |= static_cast<uint8_t>((q[e] & 15) << (4 * (k / 2)));
            b.qh[32 * n + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
        }
        store(b, dst, i);
    }
}

void quantize_iq4_xs(const float *x, void *dst, int64_t nb) {
    const Iq4Grid grid;
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        BlockIq4Xs b{};
        int codes[8];
        uint8_t q[kQKK];
        quantize_symmetric(x, kIq4Xs, grid, &b.d, codes, q);
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = codes[ib] + 32;
            b.scales_l[ib / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (ib % 2)));
            b.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
            for (int j = 0; j < 16; ++j)
                b.qs[16 * ib + j] = static_cast<uint8_t>(q[32 * ib + j] | q[32 * ib + 16 + j] << 4);
        }
        store(b, dst, i);
    }
}

// ------------------------------------------------------------------------------------------------------------
// Plain types

template <uint16_t (*kConvert)(float)>
void convert_half(const float *x, void *dst, int64_t n) {
    auto *out = static_cast<uint8_t *>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = kConvert(x[i]);
        std::memcpy(out + 2 * i, &h, sizeof h);
    }
}

}  // namespace

bool can_quantize(int32_t type) {
    switch (type) {
        case KT_TYPE_F32: case KT_TYPE_F16: case KT_TYPE_BF16:
        case KT_TYPE_Q4_0: case KT_TYPE_Q4_1: case KT_TYPE_Q5_0: case KT_TYPE_Q5_1:
        case KT_TYPE_Q8_0: case KT_TYPE_Q8_1: case KT_TYPE_IQ4_NL: case KT_TYPE_MXFP4:
        case KT_TYPE_Q2_K: case KT_TYPE_Q3_K: case KT_TYPE_Q4_K: case KT_TYPE_Q5_K:
        case KT_TYPE_Q6_K: case KT_TYPE_Q8_K: case KT_TYPE_IQ4_XS:
            return true;
        default:
            return false;
    }
}

void quantize_row(int32_t type, const float *src, void *dst, int64_t n) {
    const int64_t nb32 = n / kQK, nb256 = n / kQKK;
    switch (type) {
        case KT_TYPE_F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case KT_TYPE_F16: convert_half<f32_to_fp16>(src, dst, n); return;
        case KT_TYPE_BF16: convert_half<f32_to_bf16>(src, dst, n); return;
        case KT_TYPE_Q4_0: quantize_q4_0(src, dst, nb32); return;
        case KT_TYPE_Q4_1: quantize_q4_1(src, dst, nb32); return;
        case KT_TYPE_Q5_0: quantize_q5_0(src, dst, nb32); return;
        case KT_TYPE_Q5_1: quantize_q5_1(src, dst, nb32); return;
        case KT_TYPE_Q8_0: quantize_q8_32<BlockQ8_0, false>(src, dst, nb32); return;
        case KT_TYPE_Q8_1: quantize_q8_32<BlockQ8_1, true>(src, dst, nb32); return;
        case KT_TYPE_IQ4_NL: quantize_iq4_nl(src, dst, nb32); return;
        case KT_TYPE_MXFP4: quantize_mxfp4(src, dst, nb32); return;
        case KT_TYPE_Q2_K: quantize_q2_k(src, dst, nb256); return;
        case KT_TYPE_Q3_K: quantize_q3_k(src, dst, nb256); return;
        case KT_TYPE_Q4_K: quantize_q4_k(src, dst, nb256); return;
        case KT_TYPE_Q5_K: quantize_q5_k(src, dst, nb256); return;
        case KT_TYPE_Q6_K: quantize_q6_k(src, dst, nb256); return;
        case KT_TYPE_Q8_K: quantize_q8_k(src, dst, nb256); return;
        case KT_TYPE_IQ4_XS: quantize_iq4_xs(src, dst, nb256); return;
        default: return;
    }
}

}  // namespace kt::ref
