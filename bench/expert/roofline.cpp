#include "roofline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "kt.h"
#include "mem/numa_buffer.h"

namespace kt::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs fn(thread) on every thread of the pool `repetitions` times; returns the best wall time.
template <typename Fn>
double best_time(ThreadPool &pool, int repetitions, Fn &&fn) {
    std::atomic<uint64_t> sink{0};
    double best = 1e30;
    for (int r = 0; r < repetitions; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        (void)pool.run([&](int tid) { sink.fetch_add(fn(tid), std::memory_order_relaxed); });
        best = std::min(best, seconds_since(t0));
    }
    return best;
}

}  // namespace

Roofline measure_roofline(ThreadPool &pool, int isa, bool vnni, bool bf16, size_t buffer_bytes, int repetitions) {
    Roofline r;
    const int n = pool.size();

    // Read bandwidth: each thread first touches, then reads, its own contiguous slice (local memory on NUMA
    // machines, as the expert pool's shards are).
    mem::NumaBuffer buf;
    if (mem::NumaBuffer::allocate(buffer_bytes, nullptr, -1, &buf).is_ok()) {
        const size_t slice = buf.size() / static_cast<size_t>(n) / 4096 * 4096;
        (void)pool.run([&](int tid) { std::memset(buf.as<uint8_t>() + slice * static_cast<size_t>(tid), tid + 1, slice); });
        const double t = best_time(pool, repetitions, [&](int tid) -> uint64_t {
            const uint8_t *p = buf.as<uint8_t>() + slice * static_cast<size_t>(tid);
            return isa >= KT_ISA_AVX512 ? read_avx512(p, slice) : read_avx2(p, slice);
        });
        r.read_gbs = static_cast<double>(slice) * n / t / 1e9;
    }

    // Dot-product peaks of the instructions the kernels use at this level.
    const int64_t iterations = 4'000'000;
    const double instr = static_cast<double>(iterations) * 16 * n;
    if (isa >= KT_ISA_AVX512) {
        const double t8 = best_time(pool, repetitions, [&](int) { return vnni ? dot_vnni512(iterations) : dot_maddubs512(iterations); });
        r.int8_gops = instr * 64 * 2 / t8 / 1e9;
        r.int8_instruction = vnni ? "vpdpbusd zmm" : "vpmaddubsw+vpmaddwd+vpaddd zmm";
        const double tb = best_time(pool, repetitions, [&](int) { return bf16 ? dot_bf16_512(iterations) : fma512(iterations); });
        r.bf16_gflops = instr * (bf16 ? 32 : 16) * 2 / tb / 1e9;
        r.bf16_instruction = bf16 ? "vdpbf16ps zmm" : "vfmadd231ps zmm";
    } else if (isa == KT_ISA_AVX2) {
        const double t8 = best_time(pool, repetitions, [&](int) { return dot_maddubs256(iterations); });
        r.int8_gops = instr * 32 * 2 / t8 / 1e9;
        r.int8_instruction = "vpmaddubsw+vpmaddwd+vpaddd ymm";
        const double tb = best_time(pool, repetitions, [&](int) { return fma256(iterations); });
        r.bf16_gflops = instr * 8 * 2 / tb / 1e9;
        r.bf16_instruction = "vfmadd231ps ymm";
    }
    return r;
}

}  // namespace kt::bench
