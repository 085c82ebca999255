// The scalar reference quantizers (src/ops/ref/quantize_ref.cpp): round-trip accuracy per format, edge inputs,
// the invariants of the activation formats, and that rows are quantized block by block, independently.
//
// Accuracy is the relative RMS error ||dequantize(quantize(x)) - x|| / ||x|| on N(0,1) data. The bounds below sit
// just above what kt measures (worst shape, this suite's seeds); next to them, llama.cpp's reference quantizer's
// error on row 0 of shared/testdata/quants t0 (from that README). kt measured (all shapes here together):
//   F16 0.00021  BF16 0.00165  Q4_0 0.0858  Q4_1 0.0782  Q5_0 0.0429  Q5_1 0.0379  Q8_0 0.00535  IQ4_NL 0.0765
//   Q2_K 0.258   Q3_K 0.144    Q4_K 0.0695  Q5_K 0.0343  Q6_K 0.0164  IQ4_XS 0.0747  Q8_1 0.00535  Q8_K 0.0070
//   MXFP4 0.112 (llama.cpp: 0.127 on that row, computed from shared/testdata/quants/MXFP4.gguf)
// The 32-wide formats and IQ4_NL use ggml's exact rules (tests/golden checks llama.cpp's bytes), so on the same
// data their errors are llama.cpp's; the K-quants, IQ4_XS and MXFP4 are kt's own search (tests/golden checks that it is
// never less accurate than llama.cpp's on the golden rows).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "ops/ref/blocks.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"
#include "support/test_support.h"

namespace {

using kt::ops::TypeTraits;

struct Format {
    int32_t type;
    double bound;        // kt's relative RMS error bound on N(0,1) data
    double llama_error;  // llama.cpp's, for the record (shared/testdata/quants/README.md); 0: not given there
};

// Bounds: kt's worst shape in this test plus ~3% (over 16k elements the estimate's spread is about 1%).
const Format kFormats[] = {
    {KT_TYPE_F16, 0.00022, 0.0002},  {KT_TYPE_BF16, 0.00172, 0.0016}, {KT_TYPE_Q4_0, 0.0895, 0.087},
    {KT_TYPE_Q4_1, 0.0815, 0.077},   {KT_TYPE_Q5_0, 0.045, 0.040},    {KT_TYPE_Q5_1, 0.0392, 0.039},
    {KT_TYPE_Q8_0, 0.0056, 0.0060},  {KT_TYPE_IQ4_NL, 0.0793, 0.077}, {KT_TYPE_Q2_K, 0.2665, 0.28},
    {KT_TYPE_Q3_K, 0.149, 0.14},     {KT_TYPE_Q4_K, 0.0723, 0.075},   {KT_TYPE_Q5_K, 0.0357, 0.035},
    {KT_TYPE_Q6_K, 0.0169, 0.018},   {KT_TYPE_IQ4_XS, 0.0774, 0.078}, {KT_TYPE_MXFP4, 0.116, 0.127},
    // The activation formats.
    {KT_TYPE_Q8_1, 0.0056, 0},       {KT_TYPE_Q8_K, 0.0073, 0},
};

const int32_t kEveryQuantizable[] = {KT_TYPE_F32,  KT_TYPE_F16,  KT_TYPE_BF16, KT_TYPE_Q4_0, KT_TYPE_Q4_1,
                                     KT_TYPE_Q5_0, KT_TYPE_Q5_1, KT_TYPE_Q8_0, KT_TYPE_Q8_1, KT_TYPE_IQ4_NL,
                                     KT_TYPE_Q2_K, KT_TYPE_Q3_K, KT_TYPE_Q4_K, KT_TYPE_Q5_K, KT_TYPE_Q6_K,
                                     KT_TYPE_Q8_K, KT_TYPE_IQ4_XS, KT_TYPE_MXFP4};

const TypeTraits &traits(int32_t type) { return *kt::ops::type_traits(type); }

// Quantizes and dequantizes `rows` rows of n elements.
std::vector<float> round_trip(int32_t type, const std::vector<float> &x, int64_t n) {
    const int64_t rows = static_cast<int64_t>(x.size()) / n, row_bytes = kt::ops::row_bytes(traits(type), n);
    std::vector<uint8_t> q(static_cast<size_t>(rows * row_bytes));
    std::vector<float> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        kt::ref::quantize_row(type, x.data() + r * n, q.data() + r * row_bytes, n);
        kt::ref::dequantize_row(type, q.data() + r * row_bytes, y.data() + r * n, n);
    }
    return y;
}

double relative_rms(const std::vector<float> &x, const std::vector<float> &y, size_t begin = 0, size_t end = SIZE_MAX) {
    double err = 0, norm = 0;
    for (size_t i = begin; i < std::min(end, x.size()); ++i) {
        err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
        norm += static_cast<double>(x[i]) * x[i];
    }
    return std::sqrt(err / norm);
}

bool all_finite(const std::vector<float> &y) {
    for (float v : y)
        if (!std::isfinite(v)) return false;
    return true;
}

// Row lengths from one block to 4096, including odd block counts.
std::vector<int64_t> row_lengths(int32_t type) {
    if (traits(type).block_size == kt::ref::kQKK) return {256, 768, 1024, 4096};
    return {32, 96, 256, 1024, 4096};
}

}  // namespace

TEST_CASE("quantize: every format round-trips N(0,1) data within its stated error") {
    constexpr size_t kElementsPerShape = 16384;
    for (const Format &f : kFormats) {
        double err_sum = 0, norm_sum = 0;
        for (int64_t n : row_lengths(f.type)) {
            INFO(traits(f.type).name << " rows of " << n << " (llama.cpp: " << f.llama_error << ")");
            const std::vector<float> x =
                kt::test::random_normal(kElementsPerShape / static_cast<size_t>(n) * static_cast<size_t>(n),
                                        1000 + static_cast<uint64_t>(f.type) * 64 + static_cast<uint64_t>(n));
            const std::vector<float> y = round_trip(f.type, x, n);
            const double e = relative_rms(x, y);
            CHECK(e < f.bound);
            err_sum += e * e;
            norm_sum += 1;
        }
        const double aggregate = std::sqrt(err_sum / norm_sum);
        INFO(traits(f.type).name << " aggregate " << aggregate);
        CHECK(aggregate < f.bound);
    }
}

TEST_CASE("quantize: a row is its blocks quantized one by one, into any alignment") {
    for (int32_t type : kEveryQuantizable) {
        const TypeTraits &t = traits(type);
        INFO(t.name);
        const int64_t n = t.block_size == 1 ? 37 : 5 * t.block_size;
        const std::vector<float> x = kt::test::random_normal(static_cast<size_t>(n), 7 + static_cast<uint64_t>(type));
        const int64_t bytes = kt::ops::row_bytes(t, n);
        std::vector<uint8_t> whole(static_cast<size_t>(bytes) + 1), pieces(static_cast<size_t>(bytes));
        kt::ref::quantize_row(type, x.data(), whole.data() + 1, n);  // deliberately misaligned
        for (int64_t b = 0; b < n / t.block_size; ++b)
            kt::ref::quantize_row(type, x.data() + b * t.block_size, pieces.data() + b * t.block_bytes, t.block_size);
        CHECK(std::memcmp(whole.data() + 1, pieces.data(), static_cast<size_t>(bytes)) == 0);
    }
}

TEST_CASE("quantize: edge inputs give finite values, zeros stay zero, an outlier survives") {
    constexpr int64_t n = 1024;
    for (int32_t type : kEveryQuantizable) {
        const TypeTraits &t = traits(type);
        INFO(t.name);
        const double bound = [&] {
            for (const Format &f : kFormats)
                if (f.type == type) return f.bound;
            return 0.0;  // F32
        }();

        {
            INFO("all zeros");
            const std::vector<float> y = round_trip(type, std::vector<float>(n, 0.0f), n);
            for (float v : y) CHECK(v == 0.0f);
        }
        {
            INFO("one huge outlier leaves the other blocks alone");
            std::vector<float> x = kt::test::random_normal(n, 11);
            constexpr size_t kAt = 300;
            x[kAt] = 1000.0f;
            const std::vector<float> y = round_trip(type, x, n);
            REQUIRE(all_finite(y));
            CHECK(std::fabs(y[kAt] - 1000.0f) <= 0.1f * 1000.0f);
            // The super-block (or block) holding the outlier is [256, 512) at most; the rest are plain N(0,1).
            CHECK(relative_rms(x, y, 512, n) < 1.1 * bound + 1e-7);
            CHECK(relative_rms(x, y, 0, 256) < 1.1 * bound + 1e-7);
        }
        {
            INFO("tiny values (1e-30) come back finite, never worse than zeros");
            const std::vector<float> x = kt::test::random_normal(n, 12, 1e-30f);
            const std::vector<float> y = round_trip(type, x, n);
            REQUIRE(all_finite(y));
            CHECK(relative_rms(x, y) <= 1.0 + 1e-6);
        }
        {
            INFO("values whose scales overflow f16 (1e6) come back finite");
            const std::vector<float> x = kt::test::random_normal(n, 13, 1e6f);
            const std::vector<float> y = round_trip(type, x, n);
            if (type == KT_TYPE_F16) {
                // IEEE conversion, as ggml does: beyond 65520 is +-inf, never NaN.
                for (size_t i = 0; i < x.size(); ++i) {
                    CHECK_FALSE(std::isnan(y[i]));
                    if (std::fabs(x[i]) >= 65520.0f) CHECK(y[i] == std::copysign(INFINITY, x[i]));
                }
            } else {
                REQUIRE(all_finite(y));
                CHECK(relative_rms(x, y) <= 1.0);
            }
            // Formats whose scale range covers this data keep their usual accuracy (scale invariance). Those with
            // few levels per f16 scale saturate instead: Q4_0 ... Q5_1 (one scale: at most 65504 * 8 .. 31) and
            // Q2_K (dmin = largest min / 15).
            const bool saturates = type == KT_TYPE_F16 || type == KT_TYPE_Q4_0 || type == KT_TYPE_Q4_1 ||
                                   type == KT_TYPE_Q5_0 || type == KT_TYPE_Q5_1 || type == KT_TYPE_Q2_K;
            if (!saturates) CHECK(relative_rms(x, y) < 1.1 * bound + 1e-7);
        }
    }
}

TEST_CASE("quantize: kt's own formats stay accurate on small data and are never worse than zeros") {
    // Their super-block scale is rounded up to an f16 value, so it does not underflow until ~1e-8, and the sub-block
    // codes absorb the coarse subnormal steps. (The formats with ggml's rules inherit its behaviour there: Q4_1 and
    // Q5_1 come out worse than zeros around 1e-7, which kt keeps for byte compatibility.)
    for (const Format &f : kFormats) {
        if (traits(f.type).block_size != kt::ref::kQKK || f.type == KT_TYPE_Q8_K) continue;
        for (float sigma : {1e-9f, 1e-8f, 1e-7f, 1e-6f, 1e-5f}) {
            INFO(traits(f.type).name << " sigma " << sigma);
            const std::vector<float> x = kt::test::random_normal(4096, 31, sigma);
            const double e = relative_rms(x, round_trip(f.type, x, 4096));
            CHECK(e <= 1.0);
            if (sigma == 1e-5f) CHECK(e < 1.25 * f.bound);
        }
    }
}

TEST_CASE("quantize: Q8_0 and Q8_1 share their rule, and Q8_1's s is d times the sum of its q") {
    const std::vector<float> x = kt::test::random_normal(4096, 21, 3.0f);
    std::vector<kt::ref::BlockQ8_0> a(4096 / 32);
    std::vector<kt::ref::BlockQ8_1> b(4096 / 32);
    kt::ref::quantize_row(KT_TYPE_Q8_0, x.data(), a.data(), 4096);
    kt::ref::quantize_row(KT_TYPE_Q8_1, x.data(), b.data(), 4096);
    for (size_t i = 0; i < a.size(); ++i) {
        INFO("block " << i);
        REQUIRE(a[i].d == b[i].d);
        REQUIRE(std::memcmp(a[i].qs, b[i].qs, 32) == 0);
        const float d = kt::fp16_to_f32(b[i].d);
        int sum = 0, amax_q = 0;
        for (int j = 0; j < 32; ++j) {
            sum += b[i].qs[j];
            amax_q = std::max(amax_q, std::abs(static_cast<int>(b[i].qs[j])));
            // q was chosen with the f32 d, dequantized with its f16 rounding (relative error <= 2^-11), so each
            // element is within d/2 plus 127 * 2^-11 * d.
            const float y = d * static_cast<float>(b[i].qs[j]);
            CHECK(std::fabs(y - x[32 * i + j]) <= d * (0.5f + 127.0f / 2048.0f) * 1.0001f);
        }
        CHECK(amax_q == 127);  // the largest magnitude maps to +-127
        // s = f16(d32 * sum) and d = f16(d32): both within 2^-11 relative of the exact products.
        const float s = kt::fp16_to_f32(b[i].s);
        CHECK(std::fabs(s - d * static_cast<float>(sum)) <= std::fabs(d * static_cast<float>(sum)) / 1024.0f + 6e-8f);
    }
}

TEST_CASE("quantize: Q8_K keeps bsums, |error| <= |d|/2, and maps the signed maximum to -127") {
    std::vector<float> x = kt::test::random_normal(8 * 256, 22, 2.0f);
    for (size_t i = 256; i < 512; ++i) x[i] = std::fabs(x[i]) + 0.1f;  // an all-positive super-block
    std::fill(x.begin() + 512, x.begin() + 768, 0.0f);                 // an all-zero one
    std::vector<kt::ref::BlockQ8_K> q(8);
    kt::ref::quantize_row(KT_TYPE_Q8_K, x.data(), q.data(), static_cast<int64_t>(x.size()));
    std::vector<float> y(x.size());
    kt::ref::dequantize_row(KT_TYPE_Q8_K, q.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t b = 0; b < q.size(); ++b) {
        INFO("super-block " << b);
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += q[b].qs[16 * g + j];
            CHECK(q[b].bsums[g] == sum);
        }
        if (b == 2) {
            CHECK(q[b].d == 0.0f);
            continue;
        }
        float amax = 0, max = 0;
        int at = 0;
        for (int j = 0; j < 256; ++j) {
            if (std::fabs(x[256 * b + j]) > amax) {
                amax = std::fabs(x[256 * b + j]);
                max = x[256 * b + j];
                at = j;
            }
            CHECK(std::fabs(y[256 * b + j] - x[256 * b + j]) <= std::fabs(q[b].d) * 0.5f * 1.0001f);
        }
        CHECK(q[b].qs[at] == -127);
        CHECK(std::fabs(q[b].d * -127.0f - max) <= amax * 1e-6f);  // d = max / -127, stored as f32
    }
}

TEST_CASE("quantize: can_quantize lists exactly the formats with a quantizer") {
    for (int32_t type = 0; type < 40; ++type) {
        bool expected = false;
        for (int32_t t : kEveryQuantizable) expected = expected || t == type;
        INFO("type " << type);
        CHECK(kt::ref::can_quantize(type) == expected);
        if (expected) CHECK(kt::ref::can_dequantize(type));
    }
}
