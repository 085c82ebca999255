// The AMX GEMM microkernel: one generated function per descriptor computes one block of C (up to 32 x 32) over the
// whole K. Blocking, packing and numerics are described in amx_gemm.h; the driver (amx_gemm_driver.cpp) walks the
// blocks and the emitter (amx_gemm_kernel.cpp) writes the code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cpu/jit/jit_code.h"
#include "core/status.h"

namespace kt::cpu::amx {

enum class GemmKind : int32_t {
    kS8S32 = 0,    // s8 A x INT8 B -> int32 C
    kS8F32 = 1,    // s8 A x INT8 B -> fp32 C = (float(acc) * w_scale[n]) * a_scale[m]
    kS4F32 = 2,    // s8 A x INT4 B (group-wise) -> fp32 C
    kBf16F32 = 3,  // bf16 A x BF16 B -> fp32 C
    kS8GroupF32 = 4,     // s8 A x group-wise int8 B (GroupedPanel) -> fp32 C
    kS8GroupMinF32 = 5,  // the same with the formats' mins
};

struct GemmKernelDesc {
    GemmKind kind = GemmKind::kS8S32;
    int32_t m = 32;     // valid rows of the block, 1..32
    int32_t n = 32;     // valid columns of the block, 1..32
    int64_t k = 0;      // K (elements), >= 1; kS4F32: a multiple of group
    int32_t group = 0;  // kS4F32: 32, 64 or 128; group kinds: 16 or 32; otherwise 0
    // A has whole 16-row tiles of readable, finite rows (rows m.. padded): a partial row tile is loaded from A
    // directly instead of being staged row by row. Dense and INT4 kinds with m % 16 != 0 only.
    bool a_padded = false;

    bool operator==(const GemmKernelDesc &o) const {
        return kind == o.kind && m == o.m && n == o.n && k == o.k && group == o.group && a_padded == o.a_padded;
    }
};

struct GemmKernelDescHash {
    size_t operator()(const GemmKernelDesc &d) const {
        uint64_t h = static_cast<uint64_t>(d.k);
        h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(d.kind);
        h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(d.m);
        h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(d.n);
        h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(d.group);
        h = h * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(d.a_padded);
        return static_cast<size_t>(h ^ (h >> 29));
    }
};

// The kernel's only argument (read through [rdi + offset]); every stride in bytes.
struct GemmKernelParams {
    const void *a = nullptr;        // A at (row m0, column 0) of the block
    int64_t lda = 0;                // bytes between A rows
    const void *b = nullptr;        // the panel's first packed tile
    const float *b_scale = nullptr; // kS8F32: the panel's scale[32]; kS4F32: the panel's scale[K / G][32]
    void *c = nullptr;              // C at (row m0, column n0) of the block
    int64_t ldc = 0;                // bytes between C rows
    const float *a_scale = nullptr; // f32 kinds with s8 A: a_scale[m0 ..]
    const float *b_min = nullptr;   // kS8GroupMinF32: neg_min[K / G][32]
    const float *a_sums = nullptr;  // kS8GroupMinF32: asum[K / G][32] of the block's rows
};

// A descriptive name ("amx_gemm_s4f32_g32_m7_n17_k96"), used for dumps and golden listings.
std::string gemm_kernel_name(const GemmKernelDesc &desc);

// Validates the descriptor and returns the cached kernel, generating it on first use. INVALID_ARGUMENT for a bad
// descriptor; INTERNAL when generation fails (including the semantic lint).
Status gemm_kernel(const GemmKernelDesc &desc, const jit::JitCode **out);

// Runs generated AMX code (one pointer argument) where AMX code runs: natively, or on the installed CodeRunner.
Status run_code(const jit::JitCode &code, const void *params);

// Generates a new kernel outside the cache (golden listings, tests).
Status generate_gemm_kernel(const GemmKernelDesc &desc, std::unique_ptr<jit::JitCode> *out);

}  // namespace kt::cpu::amx
