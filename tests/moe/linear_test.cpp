// PackedLinear (dense layers and output heads on the expert engine's kernels) for every weight type kt reads,
// against a double-precision reference with the activation rounding the kernels state (kernels.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "moe/linear.h"
#include "ops/types.h"
#include "support/quant_test_support.h"
#include "support/test_support.h"

using namespace kt;

namespace {

// The weights PackedLinear computes with for the default format (kAsSource): the dequantized source, except that
// float sources become BF16 and quantized types without a kernel Q8_0.
std::vector<double> expected_weights(int32_t type, const std::vector<uint8_t> &bytes, int64_t n, int64_t k) {
    const std::vector<float> w = test::dequantize_rows(type, bytes, n, k);
    std::vector<double> out(w.begin(), w.end());
    cpu::PackedType native;
    if (moe::native_packed_type(type, &native)) return out;
    if (type == KT_TYPE_F32 || type == KT_TYPE_F16) {
        for (size_t i = 0; i < w.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(w[i]));
        return out;
    }
    for (int64_t b = 0; b < n * k; b += 32) {  // Q8_0: d = f16(amax / 127), q = round(w / d)
        float amax = 0;
        for (int64_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(w[i]));
        const float d = fp16_to_f32(f32_to_fp16(amax / 127.0f));
        for (int64_t i = b; i < b + 32; ++i) out[i] = d > 0 ? std::nearbyint(w[i] / d) * d : 0.0;
    }
    return out;
}

}  // namespace

TEST_CASE("packed linear: every weight type kt reads, with tails, bias and threads") {
    ThreadPoolOptions po;
    po.n_threads = 2;
    std::unique_ptr<ThreadPool> pool;
    REQUIRE(ThreadPool::create(po, &pool).is_ok());
    const cpu::KernelSet &ks = cpu::best_kernel_set(cpu::kernel_level());
    struct Case {
        int32_t type;
        int64_t n, k;
    };
    const Case cases[] = {{KT_TYPE_F32, 100, 70},   {KT_TYPE_F16, 33, 64},    {KT_TYPE_BF16, 65, 50},
                          {KT_TYPE_Q8_0, 100, 96},  {KT_TYPE_Q4_0, 40, 64},   {KT_TYPE_Q4_K, 70, 256},
                          {KT_TYPE_Q5_K, 32, 512},  {KT_TYPE_Q6_K, 100, 256}, {KT_TYPE_IQ4_XS, 36, 256},
                          {KT_TYPE_Q3_K, 40, 256},  {KT_TYPE_Q2_K, 31, 256},  {KT_TYPE_IQ4_NL, 20, 64}};
    for (const Case &c : cases) {
        INFO(ops::type_traits(c.type)->name << " [" << c.n << " x " << c.k << "], kernels " << ks.name);
        const std::vector<uint8_t> bytes = test::random_gguf_rows(c.type, c.n, c.k, 100 + c.n);
        moe::MatrixSource src;
        REQUIRE(moe::make_source(c.type, bytes.data(), c.n, c.k, &src).is_ok());
        const std::vector<float> bias = test::random_normal(static_cast<size_t>(c.n), 5);
        std::unique_ptr<moe::PackedLinear> lin;
        const Status s = moe::PackedLinear::create(src, moe::TargetFormat::kAsSource, bias.data(), ks, pool.get(), &lin);
        INFO(s.message());
        REQUIRE(s.is_ok());
        CHECK(lin->in_features() == c.k);
        CHECK(lin->out_features() == c.n);
        const std::vector<double> w = expected_weights(c.type, bytes, c.n, c.k);
        const bool bf16 = lin->layout().type == cpu::PackedType::kBf16;
        moe::PackedLinear::Workspace ws;
        for (int64_t T : {1, 3, 17}) {
            const std::vector<float> x = test::random_normal(static_cast<size_t>(T * c.k), 7 + T);
            const int64_t ldy = c.n + 5;
            std::vector<float> y(static_cast<size_t>(T * ldy), 1234.5f);
            const cpu::GemmCounts before = cpu::process_gemm_counts();
            REQUIRE(lin->forward(x.data(), T, y.data(), ldy, &ws, T == 3 ? nullptr : pool.get()).is_ok());
            const cpu::GemmCounts ran = cpu::process_gemm_counts() - before;
            CHECK(ran.amx_fallbacks == 0);
            // On the AMX level every format kt packs runs on AMX tiles once the call has enough rows.
            if (ks.level == cpu::IsaLevel::kAmx && T >= cpu::amx_min_rows(lin->layout()))
                CHECK(ran.calls[static_cast<int>(cpu::IsaLevel::kAmx)] == ran.total_calls());
            double err = 0, norm = 0;
            for (int64_t t = 0; t < T; ++t) {
                const float *xt = x.data() + t * c.k;
                float amax = 0;
                for (int64_t i = 0; i < c.k; ++i) amax = std::max(amax, std::fabs(xt[i]));
                const float inv = amax > 0 ? 127.0f / amax : 0.0f;
                for (int64_t j = 0; j < c.n; ++j) {
                    double ref = bias[static_cast<size_t>(j)];
                    for (int64_t i = 0; i < c.k; ++i) {
                        const double a = bf16 ? bf16_to_f32(f32_to_bf16(xt[i])) : std::nearbyint(xt[i] * inv) * (amax / 127.0f);
                        ref += w[static_cast<size_t>(j * c.k + i)] * a;
                    }
                    const double d = y[static_cast<size_t>(t * ldy + j)] - ref;
                    err += d * d;
                    norm += ref * ref;
                }
                for (int64_t j = c.n; j < ldy; ++j) CHECK(y[static_cast<size_t>(t * ldy + j)] == 1234.5f);
            }
            INFO(T << " tokens: normalised error " << std::sqrt(err / norm));
            CHECK(std::sqrt(err / norm) < 1e-5);  // fp32 accumulation only: the rounding of x is in the reference
        }
    }
}

TEST_CASE("packed linear: each thread's region of panels, and the chunks taken from others, cover every column once") {
    // 1000 columns = 32 panels (the last partial): with 2 and 3 threads the regions are 16 + 16 and 10 + 11 + 11
    // panels, handed out in chunks of one or two. A panel skipped keeps the fill value; one computed twice shows in
    // the GEMM counters' multiply-adds. Every panel's arithmetic is the same whichever thread runs it, so the
    // results are identical.
    const cpu::KernelSet &ks = cpu::best_kernel_set(cpu::kernel_level());
    const int64_t n = 1000, k = 256;
    const std::vector<uint8_t> bytes = test::random_gguf_rows(KT_TYPE_Q4_K, n, k, 41);
    moe::MatrixSource src;
    REQUIRE(moe::make_source(KT_TYPE_Q4_K, bytes.data(), n, k, &src).is_ok());
    const std::vector<float> bias = test::random_normal(static_cast<size_t>(n), 42);
    std::unique_ptr<moe::PackedLinear> lin;
    REQUIRE(moe::PackedLinear::create(src, moe::TargetFormat::kAsSource, bias.data(), ks, nullptr, &lin).is_ok());
    for (int64_t T : {1, 4}) {
        const std::vector<float> x = test::random_normal(static_cast<size_t>(T * k), 43 + T);
        moe::PackedLinear::Workspace ws;
        std::vector<float> serial(static_cast<size_t>(T * n), 1234.5f);
        REQUIRE(lin->forward(x.data(), T, serial.data(), n, &ws, nullptr).is_ok());
        for (float v : serial) REQUIRE(v != 1234.5f);
        for (int threads : {2, 3}) {
            INFO(T << " tokens, " << threads << " threads");
            ThreadPoolOptions po;
            po.n_threads = threads;
            std::unique_ptr<ThreadPool> pool;
            REQUIRE(ThreadPool::create(po, &pool).is_ok());
            for (int rep = 0; rep < 20; ++rep) {
                std::vector<float> y(static_cast<size_t>(T * n), 1234.5f);
                const cpu::GemmCounts before = cpu::process_gemm_counts();
                REQUIRE(lin->forward(x.data(), T, y.data(), n, &ws, pool.get()).is_ok());
                const cpu::GemmCounts ran = cpu::process_gemm_counts() - before;
                uint64_t macs = 0;
                for (uint64_t m : ran.int8_macs) macs += m;
                REQUIRE(macs == static_cast<uint64_t>(T * n * k));
                REQUIRE(y == serial);
            }
        }
    }
}

TEST_CASE("packed linear: weights that are not finite quantize without undefined behaviour (NaN to 0, inf saturated)") {
    // Found by the model fuzz target: a NaN weight reached the int8 conversion (undefined under UBSan).
    const float nan = std::nanf(""), inf = HUGE_VALF;
    CHECK(moe::quantize_int8(nan, 0.5f) == 0);
    CHECK(moe::quantize_int4(nan, 0.5f) == 0);
    CHECK(moe::quantize_int8(inf, 0.5f) == 127);
    CHECK(moe::quantize_int8(-inf, 0.5f) == -127);
    CHECK(moe::quantize_int4(-inf, 0.5f) == -8);
    CHECK(moe::quantize_int8(inf, inf) == 0);  // inf / inf
    CHECK(moe::quantize_int8(1.0f, moe::int8_row_scale(&inf, 1)) == 0);
    CHECK(moe::quantize_int8(63.5f, 0.5f) == 127);

    // Packed as INT8 and INT4, F32 rows with NaN and inf weights: the finite rows come out as they do alone.
    const int64_t N = 4, K = 256;
    std::vector<float> w = test::random_normal(static_cast<size_t>(N * K), 21);
    w[1 * K + 3] = nan;
    w[2 * K + 7] = inf;
    w[3 * K + 0] = -inf;
    w[3 * K + 40] = nan;
    const cpu::KernelSet &ks = cpu::best_kernel_set(cpu::kernel_level());
    const std::vector<float> x = test::random_normal(static_cast<size_t>(K), 22);
    for (moe::TargetFormat format : {moe::TargetFormat::kInt8, moe::TargetFormat::kInt4}) {
        moe::MatrixSource all, first;
        REQUIRE(moe::make_source(KT_TYPE_F32, w.data(), N, K, &all).is_ok());
        REQUIRE(moe::make_source(KT_TYPE_F32, w.data(), 1, K, &first).is_ok());
        std::unique_ptr<moe::PackedLinear> lin_all, lin_first;
        const Status created = moe::PackedLinear::create(all, format, nullptr, ks, nullptr, &lin_all);
        INFO(created.message());
        REQUIRE(created.is_ok());
        REQUIRE(moe::PackedLinear::create(first, format, nullptr, ks, nullptr, &lin_first).is_ok());
        moe::PackedLinear::Workspace ws;
        std::vector<float> y_all(static_cast<size_t>(N)), y_first(1);
        REQUIRE(lin_all->forward(x.data(), 1, y_all.data(), N, &ws, nullptr).is_ok());
        REQUIRE(lin_first->forward(x.data(), 1, y_first.data(), 1, &ws, nullptr).is_ok());
        CHECK(y_all[0] == y_first[0]);
        CHECK(std::isfinite(y_all[1]));  // its NaN weight counts as 0
    }
}
