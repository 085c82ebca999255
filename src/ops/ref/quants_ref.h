// Scalar reference implementations of every block format: the oracle all kernels are tested against.
//
// Dequantization reproduces ggml's reference dequantizers bit for bit (checked against shared/testdata/quants):
// IEEE binary32, one rounding per operation, in the order reference/../testdata/quants/README.md states, and no
// FMA contraction (this file's translation unit is compiled with -ffp-contract=off).
#pragma once

#include <cstdint>

#include "kt.h"

namespace kt::ref {

// True for the types dequantize_row handles: every float and block format, and the plain integer / f64 types
// (converted to the nearest float; integers above 2^24 lose precision).
bool can_dequantize(int32_t type);

// Dequantizes n elements (n a multiple of the type's block size) from src to dst. Precondition:
// can_dequantize(type); callers validate shapes first.
void dequantize_row(int32_t type, const void *src, float *dst, int64_t n);

}  // namespace kt::ref
