// The attention's vector primitives on every ISA level this host runs, against the scalar set (and the scalar
// conversions of core/fp16.h, which the golden dequantization data pins down): conversions must give the same
// bits, dot and axpy the same values within rounding. Awkward lengths exercise the tails.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/vector_kernels.h"
#include "core/fp16.h"
#include "support/test_support.h"

using kt::cpu::IsaLevel;
using kt::cpu::VectorKernels;

TEST_CASE("vector kernels: every level agrees with scalar") {
    const VectorKernels &scalar = *kt::cpu::vector_kernels_for(IsaLevel::kScalar);
    int levels = 0;
    for (IsaLevel level : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
        const VectorKernels *vk = kt::cpu::vector_kernels_for(level);
        if (!vk) {
            WARN("skipping " << kt::cpu::isa_level_name(level) << ": the host cannot run it");
            continue;
        }
        ++levels;
        for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 64, 128, 130}) {
            INFO(vk->name << ", n = " << n);
            std::vector<float> a = kt::test::random_normal(size_t(n), 1 + n, 3.0f);
            const std::vector<float> b = kt::test::random_normal(size_t(n), 100 + n);
            if (n >= 8) {  // special values: conversions must keep them exactly as the scalar code does
                a[0] = std::numeric_limits<float>::quiet_NaN();
                a[1] = -std::numeric_limits<float>::infinity();
                a[2] = 70000.0f;   // beyond f16: inf
                a[3] = 1e-7f;      // f16 subnormal
                a[4] = -0.0f;
                a[5] = 1.00390625f;  // a bf16 tie: rounds to even
            }
            std::vector<uint16_t> h(static_cast<size_t>(n)), hs(static_cast<size_t>(n));
            vk->f32_to_f16(a.data(), h.data(), n);
            scalar.f32_to_f16(a.data(), hs.data(), n);
            CHECK(h == hs);
            vk->f32_to_bf16(a.data(), h.data(), n);
            scalar.f32_to_bf16(a.data(), hs.data(), n);
            CHECK(h == hs);
            for (int64_t i = 0; i < n; ++i) CHECK(hs[i] == kt::f32_to_bf16(a[i]));
            std::vector<float> back(static_cast<size_t>(n)), back_s(static_cast<size_t>(n));
            vk->bf16_to_f32(h.data(), back.data(), n);
            scalar.bf16_to_f32(h.data(), back_s.data(), n);
            CHECK(std::memcmp(back.data(), back_s.data(), back.size() * 4) == 0);
            vk->f32_to_f16(a.data(), h.data(), n);
            vk->f16_to_f32(h.data(), back.data(), n);
            for (int64_t i = 0; i < n; ++i) {
                const float expected = kt::fp16_to_f32(h[i]);
                CHECK(std::memcmp(&back[i], &expected, 4) == 0);
            }

            const std::vector<float> x = kt::test::random_normal(size_t(n), 7 + n);
            double exact = 0, magnitude = 0;
            for (int64_t i = 0; i < n; ++i) {
                exact += double(x[i]) * b[i];
                magnitude += std::fabs(double(x[i]) * b[i]);
            }
            CHECK(std::fabs(vk->dot(x.data(), b.data(), n) - exact) <= 1e-6 * magnitude + 1e-30);
            std::vector<float> y = b, ys = b;
            vk->axpy(0.75f, x.data(), y.data(), n);
            scalar.axpy(0.75f, x.data(), ys.data(), n);
            for (int64_t i = 0; i < n; ++i) CHECK(y[i] == Approx(ys[i]).margin(1e-6));
        }
    }
    CHECK(levels >= 1);
    CHECK(kt::cpu::vector_kernels_for(kt::cpu::active_isa_level()) == &kt::cpu::vector_kernels());
}
