// The machine's roofline, measured: how fast memory can be read and how many int8 and bf16 dot-product operations
// the cores can retire, with the threads that will run the real work. Benchmarks state their results as a fraction
// of these (decode is bandwidth bound, prefill compute bound), measured in the same run so that a busy or
// throttled machine lowers both sides alike.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"

namespace kt::cpu {

struct Roofline {
    int n_threads = 0;
    uint64_t buffer_bytes = 0;      // bytes streamed per bandwidth pass
    double read_bytes_per_s = 0.0;  // best pass: every thread summing its slice of the buffer
    double int8_ops_per_s = 0.0;    // 2 ops per int8 multiply-add, best of the repetitions
    std::string int8_isa;           // the instruction measured: "avx512-vnni", "avx-vnni", "avx2", "scalar"
    double bf16_flops_per_s = 0.0;  // 2 per multiply-add of the BF16 kernels' instruction, best of the repetitions
    std::string bf16_isa;           // "avx512-bf16" (vdpbf16ps), else the fp32 FMA the kernels use instead:
                                    // "avx512-fma", "avx2-fma", "scalar"
    // The AMX TMUL peaks (amx_probe.h), measured when AMX code runs natively at the active ISA level; else 0.
    double amx_int8_ops_per_s = 0.0;    // TDPBSSD, 2 ops per multiply-add
    double amx_bf16_flops_per_s = 0.0;  // TDPBF16PS, 2 flops per multiply-add
};

// What the TMUL unit retires when each multiply is one scale group deep (the group-wise kernels of the GGUF
// formats, amx_gemm.h), in int8 ops per second (2 per multiply-add), every thread together: TMULs of K = 32 and
// K = 16, and K = 32 with every TMUL's sums stored (TILESTORED), as exact per-group sums require.
struct AmxGroupPeaks {
    double group32_ops_per_s = 0.0;
    double group16_ops_per_s = 0.0;
    double group32_out_ops_per_s = 0.0;
};
// UNSUPPORTED unless AMX code runs natively.
Status measure_amx_group_peaks(ThreadPool &pool, AmxGroupPeaks *out);

// buffer_bytes: the bandwidth buffer (rounded down to a multiple of 4 KiB per thread); use several times the
// last-level cache. Each thread first-touches its own slice, so on NUMA machines the pages are local to it.
Status measure_roofline(ThreadPool &pool, uint64_t buffer_bytes, Roofline *out);

// The per-ISA probes (roofline_avx512.cpp, roofline_avx2.cpp, roofline.cpp for scalar). read_sum sums n bytes
// (a multiple of 512) as 64-bit words; int8_dots runs `iterations` rounds of independent dot instructions and
// returns a value that depends on all of them; *_macs_per_iteration says how many multiply-adds one round is.
namespace probe {
uint64_t read_sum_avx512(const void *data, uint64_t n);
int64_t int8_dots_avx512_vnni(int64_t iterations);
inline constexpr int64_t kAvx512VnniMacsPerIteration = 16 * 64;
int64_t int8_dots_avx512(int64_t iterations);  // without VNNI
inline constexpr int64_t kAvx512MacsPerIteration = 8 * 64;
uint64_t read_sum_avx2(const void *data, uint64_t n);
int64_t int8_dots_avx_vnni(int64_t iterations);
inline constexpr int64_t kAvxVnniMacsPerIteration = 10 * 32;
int64_t int8_dots_avx2(int64_t iterations);
inline constexpr int64_t kAvx2MacsPerIteration = 8 * 32;
// bf16_dots / fma: the same for the BF16 kernels' instruction; a result that depends on every chain.
double bf16_dots_avx512(int64_t iterations);
inline constexpr int64_t kAvx512Bf16MacsPerIteration = 16 * 32;
double fma_avx512(int64_t iterations);
inline constexpr int64_t kAvx512FmaPerIteration = 16 * 16;
double fma_avx2(int64_t iterations);
inline constexpr int64_t kAvx2FmaPerIteration = 12 * 8;
}  // namespace probe

}  // namespace kt::cpu
