// Who ran the GEMM calls: counts by the ISA level whose code executed each call, so that tests can prove which
// kernels ran (a fallback never passes silently) and benchmarks can state a result against the peak of the
// instructions that produced it.
//
// A call counts once, under the level that computed it, with its multiply-adds (m x computed columns x K) as int8
// or bf16 arithmetic. The AMX kernel set (kernels.h) counts a call it sends to AMX as kAmx; a call it leaves to its
// AVX-512 base by design (fewer than amx_min_rows() rows, a format AMX has no kernel for) as kAvx512; a call whose
// AMX kernel failed (logged, then computed by the base) as kAvx512 and one amx_fallback.
//
// Every thread counts into its own process-wide counter, and a caller that wants its own attribution (an expert
// pool, per worker thread) passes one more in GemmActs::counter. Counters are written by one thread at a time, with
// relaxed loads and stores (no locked instruction on the hot path), and read by any thread at any time.
#pragma once

#include <atomic>
#include <cstdint>

#include "backends/cpu/cpu_features.h"

namespace kt::cpu {

inline constexpr int kIsaLevels = 4;  // IsaLevel::kScalar .. kAmx

struct GemmCounts {
    uint64_t calls[kIsaLevels] = {};
    uint64_t int8_macs[kIsaLevels] = {};
    uint64_t bf16_macs[kIsaLevels] = {};
    uint64_t amx_fallbacks = 0;

    GemmCounts &operator+=(const GemmCounts &o);
    GemmCounts operator-(const GemmCounts &o) const;  // counts between two readings of the same counters
    uint64_t total_calls() const;
};

enum class GemmArith : int32_t { kInt8 = 0, kBf16 = 1 };

class alignas(64) GemmCounter {
public:
    void count(IsaLevel level, GemmArith arith, uint64_t macs) {
        const int l = static_cast<int>(level);
        bump(calls_[l], 1);
        bump(arith == GemmArith::kBf16 ? bf16_macs_[l] : int8_macs_[l], macs);
    }
    void count_amx_fallback() { bump(amx_fallbacks_, 1); }
    GemmCounts read() const;

private:
    // Single writer: a plain add is enough, and readers see whole 64-bit values.
    static void bump(std::atomic<uint64_t> &v, uint64_t by) {
        v.store(v.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
    }
    std::atomic<uint64_t> calls_[kIsaLevels] = {};
    std::atomic<uint64_t> int8_macs_[kIsaLevels] = {};
    std::atomic<uint64_t> bf16_macs_[kIsaLevels] = {};
    std::atomic<uint64_t> amx_fallbacks_{0};
};

// The calling thread's process-wide counter (created on first use; its counts outlive the thread).
GemmCounter &thread_gemm_counter();

// Every thread's counts since the process started.
GemmCounts process_gemm_counts();

}  // namespace kt::cpu
