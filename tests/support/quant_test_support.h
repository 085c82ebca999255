// Random weights in any GGUF type, for kernel and expert-pool tests.
#pragma once

#include <cstdint>
#include <vector>

namespace kt::test {

// rows x cols values of `type` (F32, F16, BF16 or a block type), row-major GGUF rows. Block types get random
// codes and scales chosen so that the weights are of order 0.05 (every bit pattern of the code fields is valid).
std::vector<uint8_t> random_gguf_rows(int32_t type, int64_t rows, int64_t cols, uint64_t seed);

// The weights as fp32, dequantized by kt's golden-tested reference dequantizer.
std::vector<float> dequantize_rows(int32_t type, const std::vector<uint8_t> &data, int64_t rows, int64_t cols);

}  // namespace kt::test
