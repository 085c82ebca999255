#include "backends/cpu/roofline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

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

struct Probes {
    uint64_t (*read_sum)(const void *, uint64_t);
    int64_t (*int8_dots)(int64_t);
    int64_t macs_per_iteration;
    const char *isa;
};

Probes select_probes() {
    const CpuFeatures &f = host_cpu_features();
    const IsaLevel level = active_isa_level();
    if (level >= IsaLevel::kAvx512 && f.avx512_vnni)
        return {probe::read_sum_avx512, probe::int8_dots_avx512_vnni, probe::kAvx512VnniMacsPerIteration, "avx512-vnni"};
    if (level >= IsaLevel::kAvx2 && f.avx_vnni)
        return {probe::read_sum_avx2, probe::int8_dots_avx_vnni, probe::kAvxVnniMacsPerIteration, "avx-vnni"};
    if (level >= IsaLevel::kAvx2)
        return {probe::read_sum_avx2, probe::int8_dots_avx2, probe::kAvx2MacsPerIteration, "avx2"};
    return {read_sum_scalar, int8_dots_scalar, 8, "scalar"};
}

constexpr uint64_t kSliceAlign = 4096;
constexpr int kBandwidthPasses = 5;
constexpr int kComputeRepetitions = 3;
constexpr double kComputeSeconds = 0.05;  // per repetition, after calibration

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
    r.int8_isa = probes.isa;

    // Bandwidth: each thread first touches, then repeatedly sums, its own slice.
    mem::NumaBuffer buffer;
    KT_TRY(mem::NumaBuffer::allocate(r.buffer_bytes, nullptr, -1, &buffer));
    uint8_t *base = buffer.as<uint8_t>();
    std::vector<uint64_t> sink(static_cast<size_t>(n) * 8);  // one cache line per thread
    KT_TRY(pool.run([&](int t) { std::memset(base + slice * static_cast<uint64_t>(t), t + 1, slice); }));
    double best = 1e30;
    for (int pass = 0; pass < kBandwidthPasses; ++pass) {
        const Clock::time_point start = Clock::now();
        KT_TRY(pool.run([&](int t) { sink[static_cast<size_t>(t) * 8] += probes.read_sum(base + slice * static_cast<uint64_t>(t), slice); }));
        best = std::min(best, seconds_since(start));
    }
    r.read_bytes_per_s = static_cast<double>(r.buffer_bytes) / best;

    // int8 peak: calibrate the iteration count on one thread, then run every thread together.
    int64_t iterations = 1 << 14;
    for (;;) {
        const Clock::time_point start = Clock::now();
        sink[0] += static_cast<uint64_t>(probes.int8_dots(iterations));
        const double s = seconds_since(start);
        if (s >= kComputeSeconds / 4 || iterations > (int64_t{1} << 40)) {
            iterations = static_cast<int64_t>(static_cast<double>(iterations) * kComputeSeconds / std::max(s, 1e-6));
            break;
        }
        iterations *= 4;
    }
    best = 1e30;
    for (int rep = 0; rep < kComputeRepetitions; ++rep) {
        const Clock::time_point start = Clock::now();
        KT_TRY(pool.run([&](int t) { sink[static_cast<size_t>(t) * 8] += static_cast<uint64_t>(probes.int8_dots(iterations)); }));
        best = std::min(best, seconds_since(start));
    }
    r.int8_ops_per_s = 2.0 * static_cast<double>(iterations) * static_cast<double>(probes.macs_per_iteration) *
                       static_cast<double>(n) / best;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    volatile uint64_t keep = 0;
    for (uint64_t v : sink) keep = keep + v;  // the probes' results must look used
    *out = r;
    return Status::ok();
}

}  // namespace kt::cpu
