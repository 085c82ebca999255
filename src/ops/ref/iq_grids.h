// The code books of ggml's grid formats IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (iq_grids.cpp,
// generated from llama.cpp's dequantizers by tests/data/iq_quants/dump_iq_grids.cpp).
//
// Entry i of a u64 grid is 8 weights, byte j for weight j; of a u32 grid, 4 weights. The IQ2 and IQ3 bytes are
// magnitudes (IQ2: 8, 25, 43; IQ3_XXS: 4 .. 62; IQ3_S: odd 1 .. 15), signed by separate sign bits; IQ1's are the
// signed values -1, 0, 1 themselves.
#pragma once

#include <cstdint>

namespace kt::ref {

extern const uint64_t kIq2XxsGrid[256];
extern const uint64_t kIq2XsGrid[512];
extern const uint64_t kIq2SGrid[1024];
extern const uint32_t kIq3XxsGrid[256];
extern const uint32_t kIq3SGrid[512];
extern const uint64_t kIq1SGrid[2048];

}  // namespace kt::ref
