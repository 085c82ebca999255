// Scalar reference dequantization throughput per format. The references are the oracle, not the fast path; this
// benchmark exists so that load-time costs that go through them (kt_model_tensor_read_f32, repacking) are known.
// The source buffer is 64 MiB so the data comes from memory, not cache.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace {

void BM_dequantize(benchmark::State &state, int32_t type) {
    const kt::ops::TypeTraits &t = *kt::ops::type_traits(type);
    constexpr int64_t kRow = 4096;
    const int64_t row_bytes = kt::ops::row_bytes(t, kRow);
    const int64_t rows = (64ll << 20) / row_bytes;
    std::vector<uint8_t> src(static_cast<size_t>(rows * row_bytes));
    std::mt19937 rng(1);
    for (auto &b : src) b = static_cast<uint8_t>(rng());
    std::vector<float> dst(kRow);
    int64_t r = 0;
    for (auto _ : state) {
        kt::ref::dequantize_row(type, src.data() + r * row_bytes, dst.data(), kRow);
        benchmark::DoNotOptimize(dst.data());
        r = (r + 1) % rows;
    }
    state.SetItemsProcessed(state.iterations() * kRow);
    state.SetBytesProcessed(state.iterations() * row_bytes);
}

}  // namespace

BENCHMARK_CAPTURE(BM_dequantize, F16, KT_TYPE_F16);
BENCHMARK_CAPTURE(BM_dequantize, BF16, KT_TYPE_BF16);
BENCHMARK_CAPTURE(BM_dequantize, Q4_0, KT_TYPE_Q4_0);
BENCHMARK_CAPTURE(BM_dequantize, Q8_0, KT_TYPE_Q8_0);
BENCHMARK_CAPTURE(BM_dequantize, Q4_K, KT_TYPE_Q4_K);
BENCHMARK_CAPTURE(BM_dequantize, Q6_K, KT_TYPE_Q6_K);
BENCHMARK_CAPTURE(BM_dequantize, IQ4_XS, KT_TYPE_IQ4_XS);
BENCHMARK_MAIN();
