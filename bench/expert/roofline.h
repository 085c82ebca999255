// This machine's roofline, measured with the same threads as the benchmark: memory read bandwidth over a buffer far
// larger than the caches, and the int8 / bf16 dot-product peaks of the instructions kt's kernels use at a given
// ISA level.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace kt::bench {

struct Roofline {
    double read_gbs = 0;      // GB/s (1e9 bytes)
    double int8_gops = 0;     // int8 multiply-adds x 2, per second / 1e9
    double bf16_gflops = 0;   // bf16 multiply-adds x 2, per second / 1e9 (fp32 FMA when there is no AVX512-BF16)
    const char *int8_instruction = "";
    const char *bf16_instruction = "";
};

// `isa` is a KT_ISA_* level; `vnni` / `bf16`: whether the kernels at that level use them.
Roofline measure_roofline(ThreadPool &pool, int isa, bool vnni, bool bf16, size_t buffer_bytes, int repetitions);

// Per-ISA loops (roofline_avx512.cpp, roofline_avx2.cpp): each returns a checksum so the work is not elided.
uint64_t read_avx512(const uint8_t *p, size_t bytes);
uint64_t read_avx2(const uint8_t *p, size_t bytes);
uint64_t dot_vnni512(int64_t iterations);        // 16 independent vpdpbusd zmm per iteration
uint64_t dot_maddubs512(int64_t iterations);     // 16 x (vpmaddubsw + vpmaddwd + vpaddd) zmm
uint64_t dot_maddubs256(int64_t iterations);     // 16 x (vpmaddubsw + vpmaddwd + vpaddd) ymm
uint64_t dot_bf16_512(int64_t iterations);       // 16 independent vdpbf16ps zmm
uint64_t fma512(int64_t iterations);             // 16 independent vfmadd231ps zmm
uint64_t fma256(int64_t iterations);             // 16 independent vfmadd231ps ymm

}  // namespace kt::bench
