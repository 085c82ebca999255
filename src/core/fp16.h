// Half-precision conversions (IEEE binary16 and bfloat16), scalar and exact.
//
// These are the reference conversions: the golden dequantization data requires f16 -> f32 to be exact (it always
// is: every binary16 value is representable in binary32), and f32 -> f16 / bf16 to round to nearest even, with
// NaN kept quiet, as ggml's reference code does. SIMD kernels use the hardware instructions (F16C, AVX512-BF16),
// which round the same way.
#pragma once

#include <cstdint>
#include <cstring>

namespace kt {

inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline float fp16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1Fu;
    uint32_t mantissa = h & 0x3FFu;
    if (exponent == 0x1F) return f32_from_bits(sign | 0x7F800000u | (mantissa << 13));  // inf / NaN
    if (exponent != 0) return f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    if (mantissa == 0) return f32_from_bits(sign);  // +-0
    // Subnormal: normalise. Value = mantissa * 2^-24.
    int e = -1;
    do {
        ++e;
        mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    mantissa &= 0x3FFu;
    return f32_from_bits(sign | (static_cast<uint32_t>(112 - e) << 23) | (mantissa << 13));
}

// Round to nearest, ties to even; overflow gives +-inf; NaN stays NaN (quiet).
inline uint16_t f32_to_fp16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));  // NaN
    if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
    if (abs < 0x38800000u) {
        // Result is subnormal (or zero): value / 2^-24, rounded to nearest even.
        if (abs < 0x33000000u) return sign;  // below half the smallest subnormal: +-0
        const uint32_t exponent = abs >> 23;
        const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
        const uint32_t shift = 126u - exponent;  // 14..24 (maps 2^(e-127) * m/2^23 onto units of 2^-24)
        uint32_t q = mantissa >> shift;
        const uint32_t rem = mantissa & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    // Normal: rebias the exponent and round the 13 dropped mantissa bits; a carry correctly bumps the exponent.
    uint32_t h = ((abs >> 23) - 112u) << 10 | ((abs >> 13) & 0x3FFu);
    const uint32_t rem = abs & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 64u);  // quiet NaN
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace kt
