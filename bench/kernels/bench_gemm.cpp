// Google Benchmark micro-benchmarks of the expert GEMM kernels, one thread, every kernel set this host runs:
//   BM_gemm_cached  weights of 256 x K (L2-resident): the kernels' compute rate per format, M (tokens) and K (2048,
//                   and 768 at 32 tokens: a Qwen3-30B-A3B expert's down projection against its gate and up, and
//                   7168: a DeepSeek-V3 expert's gate and up, past the 128 scale groups whose scales a call prepares);
//                   counter GOPS = 2 M N K per second / 1e9. Each call gathers or converts nothing it could reuse
//                   (GemmActs::rows_id 0), as the first GEMM of an expert pool chunk; it lends the kernels their
//                   decode scratch, as the expert pool does.
//   BM_gemv_stream  one token against 256 MiB of weights of depth K in calls of C columns, named K/C: K 2048 and
//                   768 (Qwen3-30B-A3B's gate/up and down depths), C 0 (one long call) or 256 (a decode task's call,
//                   the calls in a scattered order, each prefetching the next as an expert pool's calls do): the
//                   streaming rate of the decode path; counter GBS = packed weight bytes per second / 1e9.
//   BM_gemm_stream  M tokens against 256 MiB of weights of depth K in calls of C columns (an expert pool task),
//                   named M/K/C: 16 or 64 tokens at K 2048 in 256-column calls, and 32 tokens at K 2048 and 768 in
//                   256- and 128-column calls (Qwen3-30B-A3B's gate/up and down tasks): the prefill rate when weights
//                   come from memory; counter GOPS.
//   BM_peak         the single-core dot-product peaks, including the AMX TMUL probes (amx_probe.h: full K, one scale
//                   group deep, and one group deep with its sums stored).
// On a busy machine read GOPS_best: the rate of the fastest single call (BM_gemm_cached, BM_peak), since
// preemption only ever adds time; or use --benchmark_repetitions and the "_min" aggregate of the times.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/amx/amx_probe.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/roofline.h"
#include "core/fp16.h"
#include "mem/numa_buffer.h"
#include "moe/weights.h"
#include "ops/types.h"

namespace {

using namespace kt;

struct Fmt {
    const char *name;
    int32_t src_type;
    moe::TargetFormat target;
    int32_t group;
};
const Fmt kFmts[] = {
    {"INT8", KT_TYPE_BF16, moe::TargetFormat::kInt8, 0},  {"INT4g128", KT_TYPE_BF16, moe::TargetFormat::kInt4, 128},
    {"BF16", KT_TYPE_BF16, moe::TargetFormat::kAsSource, 0}, {"Q4_K", KT_TYPE_Q4_K, moe::TargetFormat::kAsSource, 0},
    {"Q8_0", KT_TYPE_Q8_0, moe::TargetFormat::kAsSource, 0}, {"Q6_K", KT_TYPE_Q6_K, moe::TargetFormat::kAsSource, 0},
    {"Q4_0", KT_TYPE_Q4_0, moe::TargetFormat::kAsSource, 0}, {"Q5_K", KT_TYPE_Q5_K, moe::TargetFormat::kAsSource, 0},
    {"IQ4_XS", KT_TYPE_IQ4_XS, moe::TargetFormat::kAsSource, 0},
    {"Q2_K", KT_TYPE_Q2_K, moe::TargetFormat::kAsSource, 0},  {"Q3_K", KT_TYPE_Q3_K, moe::TargetFormat::kAsSource, 0},
    {"Q5_0", KT_TYPE_Q5_0, moe::TargetFormat::kAsSource, 0},  {"Q5_1", KT_TYPE_Q5_1, moe::TargetFormat::kAsSource, 0},
    {"Q4_1", KT_TYPE_Q4_1, moe::TargetFormat::kAsSource, 0},
    {"IQ4_NL", KT_TYPE_IQ4_NL, moe::TargetFormat::kAsSource, 0},
    // The grid formats pack as IQ_GRID3 (IQ1, IQ2) or IQ_GRID (IQ3), in groups of 16 (IQ1_M, IQ2_XS, IQ2_S) or 32.
    {"IQ_GRID3_16", KT_TYPE_IQ2_XS, moe::TargetFormat::kAsSource, 0},
    {"IQ_GRID3_32", KT_TYPE_IQ2_XXS, moe::TargetFormat::kAsSource, 0},
    {"IQ_GRID32", KT_TYPE_IQ3_XXS, moe::TargetFormat::kAsSource, 0},
    {"MXFP4", KT_TYPE_MXFP4, moe::TargetFormat::kAsSource, 0},
};

// The fastest repetition: what the code does when nothing else runs.
double min_of(const std::vector<double> &v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

// Runs fn once per benchmark iteration, timing each call, and sets GOPS_best = ops per call / the fastest call.
template <typename Fn>
void time_calls(benchmark::State &state, double ops_per_call, Fn &&fn) {
    double best = 1e30;
    for (auto _ : state) {
        const auto start = std::chrono::steady_clock::now();
        fn();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    state.counters["GOPS"] = benchmark::Counter(ops_per_call * static_cast<double>(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
    state.counters["GOPS_best"] = ops_per_call / best / 1e9;
}

std::vector<uint8_t> random_source(int32_t type, int64_t rows, int64_t cols) {
    const ops::TypeTraits *t = ops::type_traits(type);
    std::vector<uint8_t> v(static_cast<size_t>(ops::row_bytes(*t, cols) * rows));
    std::mt19937_64 rng(7);
    for (uint8_t &b : v) b = static_cast<uint8_t>(rng());
    if (type == KT_TYPE_BF16) {
        for (size_t i = 0; i + 1 < v.size(); i += 2) {
            const uint16_t b = f32_to_bf16(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-4f);
            std::memcpy(&v[i], &b, 2);
        }
        return v;
    }
    const uint16_t d = f32_to_fp16(0.001f);
    for (size_t off = 0; off + static_cast<size_t>(t->block_bytes) <= v.size(); off += static_cast<size_t>(t->block_bytes)) {
        if (type == KT_TYPE_MXFP4) {  // one E8M0 scale byte first: 2^-7
            v[off] = 120;
        } else if (type == KT_TYPE_Q6_K || type == KT_TYPE_Q3_K) {  // d last
            std::memcpy(&v[off + t->block_bytes - 2], &d, 2);
        } else if (type == KT_TYPE_Q2_K) {  // d, dmin last
            std::memcpy(&v[off + t->block_bytes - 4], &d, 2);
            std::memcpy(&v[off + t->block_bytes - 2], &d, 2);
        } else {
            std::memcpy(&v[off], &d, 2);
        }
        if (type == KT_TYPE_Q4_K) std::memcpy(&v[off + 2], &d, 2);
    }
    return v;
}

struct Packed {
    mem::NumaBuffer buf;
    cpu::PackedMatrix w;
};

Packed pack(const Fmt &f, int64_t n, int64_t k) {
    const std::vector<uint8_t> src_bytes = random_source(f.src_type, n, k);
    moe::MatrixSource src;
    (void)moe::make_source(f.src_type, src_bytes.data(), n, k, &src);
    moe::PackSpec spec;
    (void)moe::pack_spec_for(src, f.target, f.group, &spec);
    Packed p;
    (void)moe::slice_layout(src, spec, 0, n, 0, k, &p.w.layout);
    (void)mem::NumaBuffer::allocate(p.w.layout.bytes, nullptr, -1, &p.buf);
    (void)moe::pack_slice(src, spec, 0, 0, p.w.layout, 0, p.w.layout.panels, p.buf.as<uint8_t>());
    p.w.data = p.buf.as<uint8_t>();
    return p;
}

struct alignas(64) Line {
    uint8_t bytes[64];
};

struct Acts {
    std::vector<int8_t> q;
    std::vector<float> scale;
    std::vector<int32_t> sums;
    std::vector<uint16_t> bf16;
    std::vector<Line> scratch;  // lent to the kernels as the expert pool and PackedLinear lend it
    cpu::GemmActs a;
};

Acts acts_for(const cpu::KernelSet &ks, const cpu::PackedLayout &l, int64_t m) {
    Acts r;
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<size_t>(l.k));
    if (l.type == cpu::PackedType::kBf16) {
        r.bf16.resize(static_cast<size_t>(m * l.kp));
        for (int64_t i = 0; i < m; ++i) {
            for (float &v : x) v = normal(rng);
            ks.convert_row_bf16(x.data(), false, l.k, l.kp, r.bf16.data() + i * l.kp);
        }
        r.a.bf16 = r.bf16.data();
        r.a.bf16_ld = l.kp;
        return r;
    }
    const cpu::QuantSpec qs = cpu::quant_spec(l);
    const int64_t ns = cpu::quant_sums_per_row(qs, l.k);
    r.q.resize(static_cast<size_t>(m * l.kp));
    r.scale.resize(static_cast<size_t>(m));
    r.sums.resize(static_cast<size_t>(m * ns));
    for (int64_t i = 0; i < m; ++i) {
        for (float &v : x) v = normal(rng);
        r.scale[static_cast<size_t>(i)] = ks.quantize_row(x.data(), false, l.k, l.kp, r.q.data() + i * l.kp);
        cpu::group_sums_row(r.q.data() + i * l.kp, l.k, qs, r.sums.data() + i * ns);
    }
    r.a.q = r.q.data();
    r.a.q_ld = l.kp;
    r.a.scale = r.scale.data();
    r.a.sums = r.sums.data();
    r.a.sums_ld = ns;
    r.scratch.resize((cpu::gemm_scratch_bytes(l) + 63) / 64);
    r.a.scratch = r.scratch.data()->bytes;
    return r;
}

void BM_gemm_cached(benchmark::State &state, const cpu::KernelSet *ks, Fmt f) {
    const int64_t m = state.range(0), n = 256, k = state.range(1);
    Packed p = pack(f, n, k);
    Acts a = acts_for(*ks, p.w.layout, m);
    std::vector<float> c(static_cast<size_t>(m * n));
    cpu::amx::TileSession session;  // as the expert pool's workers: tiles configured once
    if (ks->level == cpu::IsaLevel::kAmx) a.a.tile_session = &session;
    time_calls(state, 2.0 * static_cast<double>(m * n * k), [&] {
        cpu::gemm(*ks, p.w, a.a, m, 0, n, c.data(), n);
        benchmark::DoNotOptimize(c.data());
    });
    (void)session.end();
}

void BM_gemv_stream(benchmark::State &state, const cpu::KernelSet *ks, Fmt f) {
    const int64_t k = state.range(0), n = (int64_t{256} << 20) / k;  // ~256 MiB at one byte per weight
    Packed p = pack(f, n, k);
    Acts a = acts_for(*ks, p.w.layout, 1);
    std::vector<float> c(static_cast<size_t>(n));
    const int64_t chunk = state.range(1) > 0 ? state.range(1) : n, chunks = (n + chunk - 1) / chunk;
    // Chunks in a scattered order (a prime stride, which visits every chunk unless it divides their count), as an
    // expert pool's calls jump between experts.
    const int64_t stride = chunks % 997 != 0 ? 997 : 1;
    auto at = [&](int64_t i) { return (i * stride) % chunks * chunk; };
    for (auto _ : state) {
        for (int64_t i = 0; i < chunks; ++i) {
            const int64_t n0 = at(i);
            cpu::GemmActs acts = a.a;
            acts.prefetch_next = i + 1 < chunks ? p.w.tile(at(i + 1) / cpu::kPanel, 0, 0) : nullptr;
            cpu::gemm(*ks, p.w, acts, 1, n0, std::min(n, n0 + chunk), c.data() + n0, n);
        }
        benchmark::DoNotOptimize(c.data());
    }
    state.counters["GBS"] = benchmark::Counter(static_cast<double>(p.w.layout.bytes) * static_cast<double>(state.iterations()) / 1e9,
                                               benchmark::Counter::kIsRate);
}

// Prefill-sized GEMMs (M tokens) over 256 MiB of weights: the compute rate when weights stream from memory.
void BM_gemm_stream(benchmark::State &state, const cpu::KernelSet *ks, Fmt f) {
    const int64_t m = state.range(0), k = state.range(1), n = (int64_t{256} << 20) / k;
    Packed p = pack(f, n, k);
    Acts a = acts_for(*ks, p.w.layout, m);
    const int64_t chunk = state.range(2);  // columns per call, as an expert pool task
    std::vector<float> c(static_cast<size_t>(m * chunk));
    for (auto _ : state) {
        for (int64_t n0 = 0; n0 < n; n0 += chunk) {
            cpu::gemm(*ks, p.w, a.a, m, n0, std::min(n, n0 + chunk), c.data(), chunk);
            benchmark::DoNotOptimize(c.data());
        }
    }
    state.counters["GOPS"] = benchmark::Counter(2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
}

// The single-core dot-product peaks the GEMM rates compare to (the probes of kt_measure_roofline and kt-expert-bench).
void BM_peak(benchmark::State &state, double (*loop)(int64_t), double ops_per_iteration) {
    const int64_t iterations = 20000;
    time_calls(state, ops_per_iteration * static_cast<double>(iterations), [&] { benchmark::DoNotOptimize(loop(iterations)); });
}

}  // namespace

int main(int argc, char **argv) {
    const cpu::CpuFeatures &cf = cpu::host_cpu_features();
    if (cpu::host_isa_level() >= cpu::IsaLevel::kAvx512) {
        namespace probe = cpu::probe;
        if (cf.avx512_vnni)
            benchmark::RegisterBenchmark("BM_peak/int8/vpdpbusd_zmm", BM_peak,
                                         +[](int64_t i) { return static_cast<double>(probe::int8_dots_avx512_vnni(i)); },
                                         2.0 * probe::kAvx512VnniMacsPerIteration)
                ->ComputeStatistics("min", min_of);
        benchmark::RegisterBenchmark("BM_peak/int8/maddubs_zmm", BM_peak,
                                     +[](int64_t i) { return static_cast<double>(probe::int8_dots_avx512(i)); },
                                     2.0 * probe::kAvx512MacsPerIteration)
            ->ComputeStatistics("min", min_of);
        if (cf.avx512_bf16)
            benchmark::RegisterBenchmark("BM_peak/bf16/vdpbf16ps_zmm", BM_peak, probe::bf16_dots_avx512,
                                         2.0 * probe::kAvx512Bf16MacsPerIteration)
                ->ComputeStatistics("min", min_of);
        benchmark::RegisterBenchmark("BM_peak/f32/vfmadd_zmm", BM_peak, probe::fma_avx512, 2.0 * probe::kAvx512FmaPerIteration)
            ->ComputeStatistics("min", min_of);
    }
    if (cpu::amx::runs_natively()) {
        struct Tmul {
            const char *name;
            cpu::amx::TmulArith arith;
        };
        for (const Tmul &t : {Tmul{"BM_peak/int8/tdpbssd", cpu::amx::TmulArith::kInt8},
                              Tmul{"BM_peak/bf16/tdpbf16ps", cpu::amx::TmulArith::kBf16},
                              Tmul{"BM_peak/int8/tdpbssd_k32", cpu::amx::TmulArith::kInt8Group32},
                              Tmul{"BM_peak/int8/tdpbssd_k16", cpu::amx::TmulArith::kInt8Group16},
                              Tmul{"BM_peak/int8/tdpbssd_k32_stored", cpu::amx::TmulArith::kInt8Group32Out}}) {
            const cpu::amx::TmulArith arith = t.arith;
            benchmark::RegisterBenchmark(t.name, [arith](benchmark::State &state) {
                const int64_t rounds = 2000;
                time_calls(state, 2.0 * static_cast<double>(cpu::amx::probe_macs_per_round(arith) * rounds), [&] {
                    double result = 0;
                    (void)cpu::amx::tmul_peak_probe(arith, rounds, &result);
                    benchmark::DoNotOptimize(result);
                });
            })->ComputeStatistics("min", min_of);
        }
    }
    const cpu::KernelSet *sets[16];
    const int n = cpu::supported_kernel_sets(sets, 16);
    for (int i = 0; i < n; ++i) {
        if (sets[i]->level == cpu::IsaLevel::kScalar) continue;  // correct, not fast: not worth timing
        for (const Fmt &f : kFmts) {
            const std::string tag = std::string(f.name) + "/" + sets[i]->name;
            benchmark::RegisterBenchmark(("BM_gemm_cached/" + tag).c_str(), BM_gemm_cached, sets[i], f)
                ->ArgsProduct({{1, 4, 16, 32, 64, 128, 512}, {2048}})
                ->ArgsProduct({{32}, {768, 7168}})
                ->ComputeStatistics("min", min_of);
            benchmark::RegisterBenchmark(("BM_gemv_stream/" + tag).c_str(), BM_gemv_stream, sets[i], f)
                ->ArgsProduct({{2048, 768}, {0, 256}})->Unit(benchmark::kMillisecond)->ComputeStatistics("min", min_of);
            benchmark::RegisterBenchmark(("BM_gemm_stream/" + tag).c_str(), BM_gemm_stream, sets[i], f)
                ->ArgsProduct({{16, 64}, {2048}, {256}})
                ->ArgsProduct({{32}, {2048, 768}, {256, 128}})
                ->Unit(benchmark::kMillisecond)->ComputeStatistics("min", min_of);
        }
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
