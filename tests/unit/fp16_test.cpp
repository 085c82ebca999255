// fp16 / bf16 conversions: exhaustive where the space is small, against independent oracles where it is not.
#include <immintrin.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "backends/cpu/cpu_features.h"
#include "core/fp16.h"

using namespace kt;

TEST_CASE("f16 -> f32 -> f16 is the identity on every non-NaN pattern") {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_f32(static_cast<uint16_t>(h));
        if (std::isnan(f)) {
            CHECK(f32_to_fp16(f) == (h | 0x0200u));  // NaNs come back quiet, payload and sign kept
            continue;
        }
        REQUIRE(f32_to_fp16(f) == h);
    }
}

TEST_CASE("f16 -> f32 matches the value formula") {
    for (uint32_t h = 0; h < 0x7C00; ++h) {
        const int e = static_cast<int>(h >> 10), m = static_cast<int>(h & 0x3FF);
        const double expected = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
        REQUIRE(static_cast<double>(fp16_to_f32(static_cast<uint16_t>(h))) == expected);
        REQUIRE(static_cast<double>(fp16_to_f32(static_cast<uint16_t>(h | 0x8000))) == -expected);
    }
    CHECK(std::isinf(fp16_to_f32(0x7C00)));
    CHECK(std::isinf(fp16_to_f32(0xFC00)));
}

TEST_CASE("f32 -> f16 rounds like the CPU's F16C instruction") {
    if (!cpu::host_cpu_features().f16c) {
        WARN("host has no F16C: skipping the hardware-oracle comparison");
        return;
    }
    std::mt19937 rng(1234);
    auto check = [](float f) {
        const uint16_t hw = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
        INFO("f32 bits " << std::hex << f32_bits(f));
        REQUIRE(f32_to_fp16(f) == hw);
    };
    // Random bit patterns concentrated on the f16 range (exponents 100..150 cover subnormals, ties, overflow).
    std::uniform_int_distribution<uint32_t> mantissa(0, 0x7FFFFF), exponent(100, 150), sign(0, 1);
    for (int i = 0; i < 2000000; ++i) check(f32_from_bits(sign(rng) << 31 | exponent(rng) << 23 | mantissa(rng)));
    // Exact ties around every f16 value boundary.
    for (uint32_t h = 0; h < 0x7C00; ++h) {
        const float lo = fp16_to_f32(static_cast<uint16_t>(h));
        const float hi = fp16_to_f32(static_cast<uint16_t>(h + 1));
        const float mid = lo + (hi - lo) * 0.5f;
        check(mid);
        check(-mid);
        check(std::nextafter(mid, 0.0f));
        check(std::nextafter(mid, 1e9f));
    }
    check(65504.0f);
    check(65519.99f);
    check(65520.0f);
    check(1e10f);
    check(-1e-10f);
    check(INFINITY);
}

TEST_CASE("f32 -> bf16 rounds to nearest even and keeps NaN quiet") {
    std::mt19937 rng(99);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 1000000; ++i) {
        const uint32_t u = bits(rng);
        const float f = f32_from_bits(u);
        const uint16_t b = f32_to_bf16(f);
        if (std::isnan(f)) {
            REQUIRE(std::isnan(bf16_to_f32(b)));
            continue;
        }
        // Independent of the bit trick: on magnitudes, the result is the nearer of the two bf16 neighbours
        // (distances computed exactly in double; the upper neighbour of the largest finite bf16 is 2^128, which
        // encodes as infinity), ties going to the even mantissa.
        const uint32_t mag = u & 0x7FFFFFFFu, down = mag & 0xFFFF0000u;
        uint16_t expected = static_cast<uint16_t>(down >> 16);
        if (mag != down) {
            const int e = static_cast<int>(mag >> 23);
            const double ulp = std::ldexp(1.0, (e == 0 ? 1 : e) - 127 - 7);
            const double x = std::fabs(static_cast<double>(f)), lo = f32_from_bits(down);
            const double dl = x - lo, dh = lo + ulp - x;
            if (dh < dl || (dh == dl && ((down >> 16) & 1u))) expected = static_cast<uint16_t>((down >> 16) + 1);
        }
        expected = static_cast<uint16_t>(expected | ((u >> 16) & 0x8000u));
        INFO("f32 bits " << std::hex << u);
        REQUIRE(b == expected);
    }
}
