#include "backends/cpu/roofline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/amx/amx_probe.h"
#include "backends/cpu/cpu_features.h"
#include "mem/numa_buffer.h"

namespace kt::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

uint64_t read_sum_scalar(const void *data, uint64_t n) {
    const uint64_t *p = static_cast<const uint64_t *>(data);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (uint64_t i = 0; i < n / 8; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

int64_t int8_dots_scalar(int64_t iterations) {
    int32_t acc[8] = {};
    for (int64_t i = 0; i < iterations; ++i)
        for (int l = 0; l < 8; ++l) acc[l] += static_cast<int8_t>(i + l) * static_cast<uint8_t>(l + 3);
    int64_t s = 0;
    for (int32_t a : acc) s += a;
    return s;
}

double fma_scalar(int64_t iterations) {
    float acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int64_t i = 0; i < iterations; ++i)
        for (float &a : acc) a = 0.9999f * a + 0.0001f;
    double s = 0;
    for (float a : acc) s += a;
    return s;
}

// The probes of the instructions the kernels use at the active ISA level (kt_set_max_isa / KT_MAX_ISA included).
struct Probes {
    uint64_t (*read_sum)(const void *, uint64_t);
    int64_t (*int8_dots)(int64_t);
    int64_t int8_macs_per_iteration;
    const char *int8_isa;
    double (*bf16_dots)(int64_t);
    int64_t bf16_macs_per_iteration;
    const char *bf16_isa;
};

Probes select_probes() {
    const CpuFeatures &f = host_cpu_features();
    const IsaLevel level = active_isa_level();
    Probes p = {read_sum_scalar, int8_dots_scalar, 8, "scalar", fma_scalar, 8, "scalar"};
    auto int8 = [&p](int64_t (*dots)(int64_t), int64_t macs, const char *isa) {
        p.int8_dots = dots;
        p.int8_macs_per_iteration = macs;
        p.int8_isa = isa;
    };
    auto bf16 = [&p](double (*dots)(int64_t), int64_t macs, const char *isa) {
        p.bf16_dots = dots;
        p.bf16_macs_per_iteration = macs;
        p.bf16_isa = isa;
    };
    if (level >= IsaLevel::kAvx512) {
        p.read_sum = probe::read_sum_avx512;
        if (f.avx512_vnni) int8(probe::int8_dots_avx512_vnni, probe::kAvx512VnniMacsPerIteration, "avx512-vnni");
        else int8(probe::int8_dots_avx512, probe::kAvx512MacsPerIteration, "avx512");
        if (f.avx512_bf16) bf16(probe::bf16_dots_avx512, probe::kAvx512Bf16MacsPerIteration, "avx512-bf16");
        else bf16(probe::fma_avx512, probe::kAvx512FmaPerIteration, "avx512-fma");
    } else if (level >= IsaLevel::kAvx2) {
        p.read_sum = probe::read_sum_avx2;
        if (f.avx_vnni) int8(probe::int8_dots_avx_vnni, probe::kAvxVnniMacsPerIteration, "avx-vnni");
        else int8(probe::int8_dots_avx2, probe::kAvx2MacsPerIteration, "avx2");
        bf16(probe::fma_avx2, probe::kAvx2FmaPerIteration, "avx2-fma");
    }
    return p;
}

constexpr uint64_t kSliceAlign = 4096;
constexpr int kBandwidthPasses = 5;
constexpr int kComputeRepetitions = 3;
constexpr double kComputeSeconds = 0.05;  // per repetition, after calibration

// A peak: calibrate the iteration count on one thread, then run every thread together; the fastest repetition.
// sink: one cache line per thread for the probes' results.
template <typename Dots>
Status peak_ops_per_s(ThreadPool &pool, Dots &&dots, int64_t macs_per_iteration, std::vector<double> &sink,
                      double *ops_per_s) {
    int64_t iterations = 1 << 14;
    for (;;) {
        const Clock::time_point start = Clock::now();
        sink[0] += static_cast<double>(dots(iterations));
        const double s = seconds_since(start);
        if (s >= kComputeSeconds / 4 || iterations > (int64_t{1} << 40)) {
            iterations = static_cast<int64_t>(static_cast<double>(iterations) * kComputeSeconds / std::max(s, 1e-6));
            break;
        }
        iterations *= 4;
    }
    double fastest = 1e30;
    for (int rep = 0; rep < kComputeRepetitions; ++rep) {
        const Clock::time_point start = Clock::now();
        KT_TRY(pool.run([&](int t) { sink[static_cast<size_t>(t) * 8] += static_cast<double>(dots(iterations)); }));
        fastest = std::min(fastest, seconds_since(start));
    }
    *ops_per_s = 2.0 * static_cast<double>(iterations) * static_cast<double>(macs_per_iteration) * pool.size() / fastest;
    return Status::ok();
}

// The TMUL probe of `arith` as a peak; its first failure on any thread is the result.
Status tmul_peak(ThreadPool &pool, amx::TmulArith arith, std::vector<double> &sink, double *ops_per_s) {
    std::mutex failure_mutex;
    Status failure;
    auto dots = [&](int64_t rounds) {
        double result = 0;
        const Status s = amx::tmul_peak_probe(arith, rounds, &result);
        if (!s.is_ok()) {
            std::lock_guard<std::mutex> lock(failure_mutex);
            if (failure.is_ok()) failure = s;
        }
        return result;
    };
    KT_TRY(peak_ops_per_s(pool, dots, amx::probe_macs_per_round(arith), sink, ops_per_s));
    return failure;
}

void keep_used(const std::vector<double> &sink) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    volatile double keep = 0;
    for (double v : sink) keep = keep + v;  // the probes' results must look used
}

}  // namespace

Status measure_roofline(ThreadPool &pool, uint64_t buffer_bytes, Roofline *out) {
    const int n = pool.size();
    const uint64_t slice = buffer_bytes / static_cast<uint64_t>(n) / kSliceAlign * kSliceAlign;
    KT_RETURN_IF(slice == 0, KT_STATUS_INVALID_ARGUMENT, "roofline buffer of %llu bytes is too small for %d threads",
                 static_cast<unsigned long long>(buffer_bytes), n);
    const Probes probes = select_probes();
    Roofline r;
    r.n_threads = n;
    r.buffer_bytes = slice * static_cast<uint64_t>(n);
    r.int8_isa = probes.int8_isa;
    r.bf16_isa = probes.bf16_isa;

    // Bandwidth: each thread first touches, then repeatedly sums, its own slice.
    mem::NumaBuffer buffer;
    KT_TRY(mem::NumaBuffer::allocate(r.buffer_bytes, nullptr, -1, &buffer));
    uint8_t *base = buffer.as<uint8_t>();
    std::vector<double> sink(static_cast<size_t>(n) * 8);  // one cache line per thread
    KT_TRY(pool.run([&](int t) { std::memset(base + slice * static_cast<uint64_t>(t), t + 1, slice); }));
    double best = 1e30;
    for (int pass = 0; pass < kBandwidthPasses; ++pass) {
        const Clock::time_point start = Clock::now();
        KT_TRY(pool.run([&](int t) {
            sink[static_cast<size_t>(t) * 8] += static_cast<double>(probes.read_sum(base + slice * static_cast<uint64_t>(t), slice));
        }));
        best = std::min(best, seconds_since(start));
    }
    r.read_bytes_per_s = static_cast<double>(r.buffer_bytes) / best;

    // Peaks: every thread together.
    KT_TRY(peak_ops_per_s(pool, probes.int8_dots, probes.int8_macs_per_iteration, sink, &r.int8_ops_per_s));
    KT_TRY(peak_ops_per_s(pool, probes.bf16_dots, probes.bf16_macs_per_iteration, sink, &r.bf16_flops_per_s));
    if (amx::runs_natively()) {
        KT_TRY(tmul_peak(pool, amx::TmulArith::kInt8, sink, &r.amx_int8_ops_per_s));
        KT_TRY(tmul_peak(pool, amx::TmulArith::kBf16, sink, &r.amx_bf16_flops_per_s));
    }
    keep_used(sink);
    *out = r;
    return Status::ok();
}

Status measure_amx_group_peaks(ThreadPool &pool, AmxGroupPeaks *out) {
    KT_RETURN_IF(!amx::runs_natively(), KT_STATUS_UNSUPPORTED, "AMX group peaks: AMX does not run natively here");
    std::vector<double> sink(static_cast<size_t>(pool.size()) * 8);
    AmxGroupPeaks p;
    KT_TRY(tmul_peak(pool, amx::TmulArith::kInt8Group32, sink, &p.group32_ops_per_s));
    KT_TRY(tmul_peak(pool, amx::TmulArith::kInt8Group16, sink, &p.group16_ops_per_s));
    KT_TRY(tmul_peak(pool, amx::TmulArith::kInt8Group32Out, sink, &p.group32_out_ops_per_s));
    keep_used(sink);
    *out = p;
    return Status::ok();
}

}  // namespace kt::cpu
