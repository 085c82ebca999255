#include "support/quant_test_support.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "core/fp16.h"
#include "ops/ref/blocks.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace kt::test {

std::vector<uint8_t> random_gguf_rows(int32_t type, int64_t rows, int64_t cols, uint64_t seed) {
    const ops::TypeTraits *t = ops::type_traits(type);
    REQUIRE(t != nullptr);
    REQUIRE(cols % t->block_size == 0);
    const int64_t row_bytes = ops::row_bytes(*t, cols);
    std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes));
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::uniform_real_distribution<float> jitter(0.5f, 1.5f);
    const int64_t n = rows * cols;
    switch (type) {
        case KT_TYPE_F32:
            for (int64_t i = 0; i < n; ++i) {
                const float v = normal(rng);
                std::memcpy(out.data() + 4 * i, &v, 4);
            }
            return out;
        case KT_TYPE_F16:
        case KT_TYPE_BF16:
            for (int64_t i = 0; i < n; ++i) {
                const float v = normal(rng);
                const uint16_t h = type == KT_TYPE_F16 ? f32_to_fp16(v) : f32_to_bf16(v);
                std::memcpy(out.data() + 2 * i, &h, 2);
            }
            return out;
        default: break;
    }
    for (uint8_t &b : out) b = static_cast<uint8_t>(rng());
    // Overwrite the f16 scale fields with finite values of a sensible size (random bits would give NaN and inf).
    auto scale = [&](float nominal) { return f32_to_fp16(nominal * jitter(rng)); };
    auto grid_d = [&](float nominal) { return scale(rng() % 8 == 0 ? nominal / 64 : nominal); };
    const int64_t blocks = n / t->block_size;
    uint8_t *p = out.data();
    for (int64_t b = 0; b < blocks; ++b, p += t->block_bytes) {
        auto put = [&](size_t offset, uint16_t v) { std::memcpy(p + offset, &v, 2); };
        switch (type) {
            case KT_TYPE_Q4_0: put(offsetof(ref::BlockQ4_0, d), scale(0.01f)); break;
            case KT_TYPE_Q4_1: put(offsetof(ref::BlockQ4_1, d), scale(0.01f)); put(offsetof(ref::BlockQ4_1, m), scale(-0.07f)); break;
            case KT_TYPE_Q5_0: put(offsetof(ref::BlockQ5_0, d), scale(0.005f)); break;
            case KT_TYPE_Q5_1: put(offsetof(ref::BlockQ5_1, d), scale(0.005f)); put(offsetof(ref::BlockQ5_1, m), scale(-0.07f)); break;
            case KT_TYPE_Q8_0: put(offsetof(ref::BlockQ8_0, d), scale(0.0005f)); break;
            case KT_TYPE_Q2_K: put(offsetof(ref::BlockQ2_K, d), scale(0.002f)); put(offsetof(ref::BlockQ2_K, dmin), scale(0.003f)); break;
            case KT_TYPE_Q3_K: put(offsetof(ref::BlockQ3_K, d), scale(0.0005f)); break;
            // K-quants: dmin about d times the middle code, so that sub-blocks are centred on average (sc and m are
            // random and independent, so each sub-block still has its own offset).
            case KT_TYPE_Q4_K: put(offsetof(ref::BlockQ4_K, d), scale(0.0001f)); put(offsetof(ref::BlockQ4_K, dmin), scale(0.00075f)); break;
            case KT_TYPE_Q5_K: put(offsetof(ref::BlockQ5_K, d), scale(0.00005f)); put(offsetof(ref::BlockQ5_K, dmin), scale(0.00075f)); break;
            case KT_TYPE_Q6_K: put(offsetof(ref::BlockQ6_K, d), scale(0.00001f)); break;
            case KT_TYPE_IQ4_NL: put(offsetof(ref::BlockIq4Nl, d), scale(0.0005f)); break;
            case KT_TYPE_IQ4_XS: put(offsetof(ref::BlockIq4Xs, d), scale(0.00002f)); break;
            // MXFP4: exponent bytes around 2^-8 (values up to 12 · 2^-5), and one block in 16 with the subnormal
            // scales of e = 0, 1 and the smallest normal one, which a kernel must decode exactly too.
            case KT_TYPE_MXFP4: p[0] = static_cast<uint8_t>(rng() % 16 == 0 ? rng() % 3 : 117 + rng() % 8); break;
            // The grid formats: d such that a typical weight is a few hundredths, like the others'; and one block
            // in 8 with d 64 times smaller, in f16's subnormal range (where d / 8 as an f16 would lose bits).
            case KT_TYPE_IQ2_XXS: put(offsetof(ref::BlockIq2Xxs, d), grid_d(0.001f)); break;
            case KT_TYPE_IQ2_XS: put(offsetof(ref::BlockIq2Xs, d), grid_d(0.001f)); break;
            case KT_TYPE_IQ2_S: put(offsetof(ref::BlockIq2S, d), grid_d(0.001f)); break;
            case KT_TYPE_IQ3_XXS: put(offsetof(ref::BlockIq3Xxs, d), grid_d(0.0005f)); break;
            case KT_TYPE_IQ3_S: put(offsetof(ref::BlockIq3S, d), grid_d(0.0005f)); break;
            case KT_TYPE_IQ1_S: put(offsetof(ref::BlockIq1S, d), grid_d(0.01f)); break;
            case KT_TYPE_IQ1_M: {  // the f16 scale is the top nibble of each of the four u16 scale words
                const uint16_t d = grid_d(0.01f);
                uint8_t *words = p + offsetof(ref::BlockIq1M, scales);
                for (int k = 0; k < 4; ++k)
                    words[2 * k + 1] = static_cast<uint8_t>((words[2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0x0F) << 4));
                break;
            }
            case KT_TYPE_Q8_K: {
                const float d = 0.0005f * jitter(rng);
                std::memcpy(p + offsetof(ref::BlockQ8_K, d), &d, 4);
                break;
            }
            default: FAIL("random_gguf_rows: no recipe for type " << type);
        }
    }
    return out;
}

std::vector<float> dequantize_rows(int32_t type, const std::vector<uint8_t> &data, int64_t rows, int64_t cols) {
    const ops::TypeTraits *t = ops::type_traits(type);
    REQUIRE(t != nullptr);
    const int64_t row_bytes = ops::row_bytes(*t, cols);
    REQUIRE(static_cast<int64_t>(data.size()) >= rows * row_bytes);
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) ref::dequantize_row(type, data.data() + r * row_bytes, out.data() + r * cols, cols);
    return out;
}

}  // namespace kt::test
