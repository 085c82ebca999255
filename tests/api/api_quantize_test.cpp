// kt_quantize / kt_dequantize through the C ABI: every type, size queries, alignment, and every error path.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "kt.h"
#include "support/test_support.h"

namespace {

uint64_t size_of_rows(int32_t type, int64_t rows, int64_t n) {
    return static_cast<uint64_t>(rows * (n / kt_type_block_size(type)) * kt_type_block_bytes(type));
}

}  // namespace

TEST_CASE("api: kt_type_can_quantize and kt_type_can_dequantize") {
    const int32_t quantizable[] = {KT_TYPE_F32,  KT_TYPE_F16,  KT_TYPE_BF16, KT_TYPE_Q4_0,   KT_TYPE_Q4_1,  KT_TYPE_Q5_0,
                                   KT_TYPE_Q5_1, KT_TYPE_Q8_0, KT_TYPE_Q8_1, KT_TYPE_Q2_K,   KT_TYPE_Q3_K,  KT_TYPE_Q4_K,
                                   KT_TYPE_Q5_K, KT_TYPE_Q6_K, KT_TYPE_Q8_K, KT_TYPE_IQ4_NL, KT_TYPE_IQ4_XS, KT_TYPE_MXFP4};
    int count = 0;
    for (int32_t type = -1; type < 64; ++type) {
        INFO("type " << type);
        bool listed = false;
        for (int32_t t : quantizable) listed = listed || t == type;
        CHECK(kt_type_can_quantize(type) == (listed ? 1 : 0));
        count += kt_type_can_quantize(type);
        if (kt_type_name(type) == nullptr) CHECK(kt_type_can_dequantize(type) == 0);
    }
    CHECK(count == 18);
    for (int32_t type : {KT_TYPE_I8, KT_TYPE_I16, KT_TYPE_I32, KT_TYPE_I64, KT_TYPE_F64, KT_TYPE_Q4_K})
        CHECK(kt_type_can_dequantize(type) == 1);
}

TEST_CASE("api: kt_quantize then kt_dequantize, for every type, with a size query first") {
    for (int32_t type = 0; type < 64; ++type) {
        if (!kt_type_can_quantize(type)) continue;
        INFO(kt_type_name(type));
        const int64_t rows = 3, n = 2 * 256;
        const std::vector<float> x = kt::test::random_normal(static_cast<size_t>(rows * n), 40 + static_cast<uint64_t>(type));

        uint64_t needed = 0;
        CHECK(kt_quantize(type, x.data(), rows, n, nullptr, 0, &needed) == KT_STATUS_BUFFER_TOO_SMALL);
        REQUIRE(needed == size_of_rows(type, rows, n));
        std::vector<uint8_t> q(needed + 1, 0xAB);
        CHECK(kt_quantize(type, x.data(), rows, n, q.data(), needed - 1, &needed) == KT_STATUS_BUFFER_TOO_SMALL);
        CHECK(q[0] == 0xAB);  // nothing written
        uint64_t written = 0;
        REQUIRE(kt_quantize(type, x.data(), rows, n, q.data(), needed, &written) == KT_STATUS_OK);
        CHECK(written == needed);
        CHECK(q[needed] == 0xAB);  // nothing past the end

        std::vector<float> y(x.size());
        REQUIRE(kt_dequantize(type, q.data(), needed, rows, n, y.data(), y.size()) == KT_STATUS_OK);
        double err = 0, norm = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            err += (y[i] - x[i]) * static_cast<double>(y[i] - x[i]);
            norm += x[i] * static_cast<double>(x[i]);
        }
        CHECK(std::sqrt(err / norm) < 0.27);  // the coarsest format, Q2_K, is at 0.26

        // The same bytes at an odd address, in and out, give the same results.
        std::vector<uint8_t> shifted(needed + 1);
        REQUIRE(kt_quantize(type, x.data(), rows, n, shifted.data() + 1, needed, nullptr) == KT_STATUS_OK);
        CHECK(std::memcmp(shifted.data() + 1, q.data(), needed) == 0);
        std::vector<float> y2(x.size());
        REQUIRE(kt_dequantize(type, shifted.data() + 1, needed, rows, n, y2.data(), y2.size()) == KT_STATUS_OK);
        CHECK(std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("api: kt_dequantize reads the integer types") {
    const int32_t values[] = {-7, 0, 1, 123456};
    std::vector<float> y(4);
    REQUIRE(kt_dequantize(KT_TYPE_I32, values, sizeof values, 2, 2, y.data(), y.size()) == KT_STATUS_OK);
    CHECK(y == std::vector<float>{-7.0f, 0.0f, 1.0f, 123456.0f});
}

// Every type id against a spread of shapes, absurd ones included, as size queries (no buffers): a status and, for
// a size, the rows' bytes; never a crash or a wrapped multiplication (the sanitizer builds run this too).
TEST_CASE("api: kt_quantize and kt_dequantize size every type and shape or refuse it") {
    const int64_t extents[] = {-1, 0, 1, 31, 32, 256, int64_t{1} << 40, INT64_MAX};
    for (int32_t type = -2; type < 48; ++type)
        for (int64_t rows : extents)
            for (int64_t n : extents) {
                CAPTURE(type, rows, n);
                uint64_t bytes = 0;
                const kt_status q = kt_quantize(type, nullptr, rows, n, nullptr, 0, &bytes);
                if (q == KT_STATUS_OK || q == KT_STATUS_BUFFER_TOO_SMALL) {
                    CHECK(kt_type_can_quantize(type) == 1);
                    // In 128 bits: a size the library accepts may pass INT64_MAX (rows of INT64_MAX F16 values).
                    const unsigned __int128 want = static_cast<unsigned __int128>(rows) *
                                                   static_cast<unsigned __int128>(n / kt_type_block_size(type)) *
                                                   static_cast<unsigned __int128>(kt_type_block_bytes(type));
                    CHECK(want <= UINT64_MAX);
                    CHECK(bytes == static_cast<uint64_t>(want));
                    CHECK((q == KT_STATUS_OK) == (bytes == 0));
                } else {
                    CHECK((q == KT_STATUS_INVALID_ARGUMENT || q == KT_STATUS_UNSUPPORTED));
                }
                const kt_status d = kt_dequantize(type, nullptr, 0, rows, n, nullptr, 0);
                CHECK((d == KT_STATUS_OK || d == KT_STATUS_INVALID_ARGUMENT || d == KT_STATUS_UNSUPPORTED ||
                       d == KT_STATUS_BUFFER_TOO_SMALL));
                if (d == KT_STATUS_OK) CHECK(rows == 0);  // nothing to read, nothing to write
            }
}

TEST_CASE("api: kt_quantize and kt_dequantize reject bad arguments") {
    std::vector<float> x(512, 1.0f), y(512);
    std::vector<uint8_t> q(4096);
    uint64_t needed = 12345;
    // Unknown type ids are invalid; known types without a quantizer are unsupported.
    CHECK(kt_quantize(4, x.data(), 1, 32, q.data(), q.size(), &needed) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_quantize(99, x.data(), 1, 32, q.data(), q.size(), &needed) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_quantize(-1, x.data(), 1, 32, q.data(), q.size(), &needed) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_quantize(KT_TYPE_I32, x.data(), 1, 32, q.data(), q.size(), &needed) == KT_STATUS_UNSUPPORTED);
    CHECK(kt_dequantize(99, q.data(), q.size(), 1, 32, y.data(), y.size()) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(needed == 12345);  // untouched by failures before the size is known
    // Row lengths that are not a positive multiple of the block; negative row counts.
    CHECK(kt_quantize(KT_TYPE_Q4_K, x.data(), 1, 255, q.data(), q.size(), nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_quantize(KT_TYPE_Q8_0, x.data(), 1, 33, q.data(), q.size(), nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_quantize(KT_TYPE_Q8_0, x.data(), 1, 0, q.data(), q.size(), nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_quantize(KT_TYPE_Q8_0, x.data(), -1, 32, q.data(), q.size(), nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_dequantize(KT_TYPE_Q4_K, q.data(), q.size(), 1, 100, y.data(), y.size()) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_dequantize(KT_TYPE_Q4_K, q.data(), q.size(), -2, 256, y.data(), y.size()) == KT_STATUS_INVALID_ARGUMENT);
    // Sizes that overflow.
    CHECK(kt_quantize(KT_TYPE_F32, x.data(), INT64_MAX, 32, q.data(), q.size(), nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_dequantize(KT_TYPE_F32, q.data(), q.size(), INT64_MAX / 2, 64, y.data(), y.size()) ==
          KT_STATUS_INVALID_ARGUMENT);
    // One row too long for its bytes to fit (INT64_MAX F32 values: 4 bytes each), not wrapped (UBSan would say).
    CHECK(kt_quantize(KT_TYPE_F32, x.data(), 1, INT64_MAX, q.data(), q.size(), nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_dequantize(KT_TYPE_F32, q.data(), q.size(), 1, INT64_MAX, y.data(), y.size()) == KT_STATUS_INVALID_ARGUMENT);
    // NULL buffers (with elements to process).
    CHECK(kt_quantize(KT_TYPE_Q8_0, nullptr, 1, 32, q.data(), q.size(), nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_quantize(KT_TYPE_Q8_0, x.data(), 1, 32, nullptr, 34, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_dequantize(KT_TYPE_Q8_0, nullptr, 34, 1, 32, y.data(), y.size()) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_dequantize(KT_TYPE_Q8_0, q.data(), 34, 1, 32, nullptr, 32) == KT_STATUS_INVALID_ARGUMENT);
    // Zero rows is a valid, empty job.
    CHECK(kt_quantize(KT_TYPE_Q8_0, nullptr, 0, 32, nullptr, 0, &needed) == KT_STATUS_OK);
    CHECK(needed == 0);
    CHECK(kt_dequantize(KT_TYPE_Q8_0, nullptr, 0, 0, 32, nullptr, 0) == KT_STATUS_OK);
    // A source shorter than its rows; a destination with too few floats.
    CHECK(kt_dequantize(KT_TYPE_Q8_0, q.data(), 2 * 34 - 1, 2, 32, y.data(), y.size()) == KT_STATUS_INVALID_ARGUMENT);
    std::fill(y.begin(), y.end(), 42.0f);
    CHECK(kt_dequantize(KT_TYPE_Q8_0, q.data(), 2 * 34, 2, 32, y.data(), 63) == KT_STATUS_BUFFER_TOO_SMALL);
    CHECK(y[0] == 42.0f);
}

// The expected sizes follow the layout that backends/cpu/packed.h describes: 32-row panels of 4-bit codes (two per
// byte), each region starting on a 64-byte boundary, and per output row a byte of scale (and of min) per group
// and an f16 (IQ_GRID, IQ_GRID3: f32) super-block scale (and min) per 256 values; IQ_GRID3's 3-bit codes are 2-bit
// fields (four per byte) plus a bit each. expert_pool_api_test checks the figure against the bytes a pool allocates.
TEST_CASE("api: kt_packed_matrix_bytes gives the packed layout's size") {
    uint64_t bytes = 0;
    // Q4_K, 256 x 256: codes 32768, scales and mins 2 x 256 x 8, d and dmin 2 x 256 x 2: 148 bytes per 256 values.
    REQUIRE(kt_packed_matrix_bytes(KT_TYPE_Q4_K, 256, 256, &bytes) == KT_STATUS_OK);
    CHECK(bytes == 32768 + 2 * 2048 + 2 * 512);
    // 40 rows pad to 64: the second panel is whole.
    REQUIRE(kt_packed_matrix_bytes(KT_TYPE_Q4_K, 40, 256, &bytes) == KT_STATUS_OK);
    CHECK(bytes == 64 * 128 + 2 * 64 * 8 + 2 * 64 * 2);
    // IQ3_XXS as IQ_GRID (scale groups of 32): codes, a scale code per 32, an f32 d per 256, the 64-byte code book.
    REQUIRE(kt_packed_matrix_bytes(KT_TYPE_IQ3_XXS, 256, 256, &bytes) == KT_STATUS_OK);
    CHECK(bytes == 32768 + 2048 + 1024 + 64);
    // IQ2_XXS (a book of 6 values) as IQ_GRID3: 2-bit fields and a third bit per value, then the same.
    REQUIRE(kt_packed_matrix_bytes(KT_TYPE_IQ2_XXS, 256, 256, &bytes) == KT_STATUS_OK);
    CHECK(bytes == 16384 + 8192 + 2048 + 1024 + 64);
    // IQ1_M (groups of 16): the same with twice the scale codes.
    REQUIRE(kt_packed_matrix_bytes(KT_TYPE_IQ1_M, 256, 256, &bytes) == KT_STATUS_OK);
    CHECK(bytes == 16384 + 8192 + 4096 + 1024 + 64);
    // Q8_1 has no kernel of its own: Q8_0, one byte per value and an f16 scale per 32.
    REQUIRE(kt_packed_matrix_bytes(KT_TYPE_Q8_1, 64, 64, &bytes) == KT_STATUS_OK);
    CHECK(bytes == 64 * 64 + 64 * 2 * 2);
    // F16 becomes BF16: two bytes per value, nothing else.
    REQUIRE(kt_packed_matrix_bytes(KT_TYPE_F16, 64, 64, &bytes) == KT_STATUS_OK);
    CHECK(bytes == 64 * 64 * 2);
}

TEST_CASE("api: kt_packed_matrix_bytes rejects bad arguments") {
    uint64_t bytes = 7;
    CHECK(kt_packed_matrix_bytes(KT_TYPE_Q4_K, 256, 256, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_packed_matrix_bytes(KT_TYPE_Q4_K, 0, 256, &bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_packed_matrix_bytes(KT_TYPE_Q4_K, 256, -256, &bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_packed_matrix_bytes(KT_TYPE_Q4_K, 256, 128, &bytes) == KT_STATUS_INVALID_ARGUMENT);  // half a block
    CHECK(kt_packed_matrix_bytes(99, 32, 32, &bytes) == KT_STATUS_UNSUPPORTED);
    CHECK(kt_packed_matrix_bytes(-1, 32, 32, &bytes) == KT_STATUS_UNSUPPORTED);
    // Sizes past 64 bits are refused, never wrapped.
    CHECK(kt_packed_matrix_bytes(KT_TYPE_Q8_0, int64_t{1} << 40, int64_t{1} << 40, &bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_packed_matrix_bytes(KT_TYPE_Q8_0, INT64_MAX, 32, &bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(bytes == 7);  // untouched by every failure

    // Every type id and a spread of shapes, the absurd ones included: a status, never a crash (the sanitizer
    // builds run this too), and a size only for a type kt reads and a shape its blocks divide.
    const int64_t extents[] = {1, 31, 32, 256, 4096, int64_t{1} << 40, INT64_MAX};
    for (int32_t type = -2; type < 48; ++type)
        for (int64_t rows : extents)
            for (int64_t cols : extents) {
                CAPTURE(type, rows, cols);
                uint64_t got = 0;
                const kt_status s = kt_packed_matrix_bytes(type, rows, cols, &got);
                CHECK((s == KT_STATUS_OK || s == KT_STATUS_INVALID_ARGUMENT || s == KT_STATUS_UNSUPPORTED));
                if (s == KT_STATUS_UNSUPPORTED) CHECK(kt_type_can_dequantize(type) == 0);
                if (s == KT_STATUS_OK) {
                    CHECK(kt_type_can_dequantize(type) == 1);
                    CHECK(cols % kt_type_block_size(type) == 0);
                    CHECK(got >= static_cast<uint64_t>(rows));  // at least a byte per row of the padded panels
                }
            }
}
