// Scalar reference implementations of every block format: the oracle all kernels are tested against.
//
// Dequantization reproduces ggml's reference dequantizers bit for bit (checked against shared/testdata/quants):
// IEEE binary32, one rounding per operation, in the order reference/../testdata/quants/README.md states, and no
// FMA contraction (both translation units are compiled with -ffp-contract=off).
//
// Quantization (quantize_ref.cpp) follows ggml's reference rules exactly for Q8_0, Q8_1, Q8_K, Q4_0, Q4_1, Q5_0,
// Q5_1 and IQ4_NL (tests/golden compares bytes with llama.cpp's) and uses kt's own least-squares search for the
// K-quants, IQ4_XS and MXFP4 (tests/unit states the error each reaches).
#pragma once

#include <cstdint>

#include "kt.h"
#include "ops/ref/blocks.h"

namespace kt::ref {

// True for the types dequantize_row handles: every float and block format, and the plain integer / f64 types
// (converted to the nearest float; integers above 2^24 lose precision).
bool can_dequantize(int32_t type);

// Dequantizes n elements (n a multiple of the type's block size) from src to dst. Precondition:
// can_dequantize(type); callers validate shapes first.
void dequantize_row(int32_t type, const void *src, float *dst, int64_t n);

// IQ2 blocks as integers: the signed grid value of each of the 256 weights (+-8, +-25, +-43) and the 4-bit scale
// code of each 32 (IQ2_XXS) or 16 (IQ2_XS, IQ2_S): weight = d (0.5 + code) / 4 * value.
void iq2_xxs_values(const BlockIq2Xxs *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 32]);
void iq2_xs_values(const BlockIq2Xs *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 16]);
void iq2_s_values(const BlockIq2S *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 16]);

// IQ3_XXS and IQ3_S blocks as integers: the signed grid value of each of the 256 weights and the 4-bit scale code
// of each 32. IQ3_XXS: weight = d (0.5 + code) / 2 * value (value +-4 .. +-62, even); IQ3_S: weight = d (1 + 2 code)
// * value (value odd, +-1 .. +-15). The dequantizers use these decoders, and so does moe/weights.cpp, which keeps
// every grid format as the code book indices of its values (packed.h, kIqGrid3 and kIqGrid).
void iq3_xxs_values(const BlockIq3Xxs *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 32]);
void iq3_s_values(const BlockIq3S *block, int8_t values[kQKK], uint8_t scale_codes[kQKK / 32]);

// IQ1_S and IQ1_M blocks as integers: each weight in eighths, 8 (grid + delta) = 8 g +- 1 (-9 .. 9), and the 3-bit
// scale code of each 32 (IQ1_S) or 16 (IQ1_M) weights: weight = d (2 code + 1) * eighths / 8. iq1_m_values returns
// the block's f16 d (spread over its scale words).
void iq1_s_values(const BlockIq1S *block, int8_t eighths[kQKK], uint8_t scale_codes[kQKK / 32]);
uint16_t iq1_m_values(const BlockIq1M *block, int8_t eighths[kQKK], uint8_t scale_codes[kQKK / 16]);

// True for the types quantize_row produces: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_XS, MXFP4.
bool can_quantize(int32_t type);

// Quantizes n elements (n a multiple of the type's block size) from src into dst, which receives
// ops::row_bytes(type, n) bytes and needs no particular alignment. Every finite input dequantizes to finite
// values, except that F16 converts like IEEE (|x| >= 65520 becomes +-inf). Precondition: can_quantize(type).
void quantize_row(int32_t type, const float *src, void *dst, int64_t n);

}  // namespace kt::ref
