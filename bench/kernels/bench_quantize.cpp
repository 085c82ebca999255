// Scalar reference quantization throughput (kt::ref::quantize_row), one thread.
//
// Activation formats (Q8_0, Q8_1, Q8_K) are what a matmul quantizes its f32 input to once per call, so their cost
// is paid per token; a 4096-float row (a typical hidden size) stays in L1/L2, as an activation row would. Weight
// formats are quantized once, by converters and kt-synth; their reference search is deliberately thorough, not
// fast. These are reference paths: the numbers are recorded, not targets.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace {

void BM_quantize_row(benchmark::State &state, int32_t type) {
    constexpr int64_t kRow = 4096;
    const kt::ops::TypeTraits &t = *kt::ops::type_traits(type);
    std::vector<float> src(kRow);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float &x : src) x = normal(rng);
    std::vector<uint8_t> dst(static_cast<size_t>(kt::ops::row_bytes(t, kRow)));
    for (auto _ : state) {
        kt::ref::quantize_row(type, src.data(), dst.data(), kRow);
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations() * kRow);
    state.SetBytesProcessed(state.iterations() * kRow * static_cast<int64_t>(sizeof(float)));
}

}  // namespace

BENCHMARK_CAPTURE(BM_quantize_row, Q8_0, KT_TYPE_Q8_0);
BENCHMARK_CAPTURE(BM_quantize_row, Q8_1, KT_TYPE_Q8_1);
BENCHMARK_CAPTURE(BM_quantize_row, Q8_K, KT_TYPE_Q8_K);
BENCHMARK_CAPTURE(BM_quantize_row, Q4_0, KT_TYPE_Q4_0);
BENCHMARK_CAPTURE(BM_quantize_row, IQ4_NL, KT_TYPE_IQ4_NL);
BENCHMARK_CAPTURE(BM_quantize_row, Q4_K, KT_TYPE_Q4_K);
BENCHMARK_CAPTURE(BM_quantize_row, Q6_K, KT_TYPE_Q6_K);
BENCHMARK_CAPTURE(BM_quantize_row, IQ4_XS, KT_TYPE_IQ4_XS);
BENCHMARK_CAPTURE(BM_quantize_row, BF16, KT_TYPE_BF16);
BENCHMARK_MAIN();
