// CPU kernels for the expert engine and dense layers, and their dispatch by ISA level.
//
// Numerics (shared with the AMX kernels, src/backends/cpu/amx/amx_gemm.h):
//   - Activations for the integer formats are int8 per token: a_q = round_to_even(x * (127 / amax)) in
//     [-127, 127], one fp32 scale amax / 127 per row, quantized once per token and reused by every expert that
//     token visits.
//   - A kernel computes, per scale group g of the weights, the exact int32 sum of w * a_q over the group (with
//     VNNI as the sum of u * a_q, u = the unsigned byte the format decodes to (packed.h), minus u_offset times
//     sum(a_q over g), precomputed per row (QuantSpec); without VNNI full-byte codes use |w| times a_q with w's
//     sign) and accumulates acc = fma(float(isum_g), S_g, acc) over groups in order; formats with mins (Q4_K, Q5_K) then
//     do acc = fnma(M_g, float(sum(a_q over g)), acc). The result is acc * a_scale. INT8 (one group over K) is
//     (float(isum) * w_scale) * a_scale. Every group scale S_g and min M_g is computed exactly in fp32.
//   - BF16: per lane, the odd and then the even product of each pair fused into the fp32 accumulator (the order
//     of VDPBF16PS).
//   - SwiGLU uses kt's own exp (a degree-7 polynomial after exact range reduction), not libm.
// Every ISA level runs the same templated code with the same operation order, so scalar, AVX2 and AVX-512 (with
// or without VNNI / AVX512-BF16) give identical bits, except that VDPBF16PS flushes denormal inputs to zero.
#pragma once

#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/gemm_counters.h"
#include "backends/cpu/packed.h"

namespace kt::cpu {

// Which per-group activation sums a packed matrix needs: sum of a_q over groups of `group` elements (0: the whole
// row), times `multiplier`: minus the format's u_offset (the integer kernels start a group's sum of u * a_q there,
// so that it comes out as the sum of w * a_q), or 1 for formats with mins.
struct QuantSpec {
    int32_t group = 0;
    int32_t multiplier = 1;
    bool operator==(const QuantSpec &o) const { return group == o.group && multiplier == o.multiplier; }
};
QuantSpec quant_spec(const PackedLayout &layout);
// Number of int32 sums per row for a row of k values.
int64_t quant_sums_per_row(const QuantSpec &spec, int64_t k);
// sums[g] = multiplier * sum of q over group g (exact).
void group_sums_row(const int8_t *q, int64_t k, const QuantSpec &spec, int32_t *sums);

// The activations a GEMM reads. Rows are zero beyond K up to the matrix's padded K.
struct GemmActs {
    // integer formats
    const int8_t *q = nullptr;   // [rows][q_ld]
    int64_t q_ld = 0;
    const float *scale = nullptr;  // [rows]
    const int32_t *sums = nullptr; // [rows][sums_ld], QuantSpec of the matrix
    int64_t sums_ld = 0;
    // kBf16
    const uint16_t *bf16 = nullptr;  // [rows][bf16_ld]
    int64_t bf16_ld = 0;
    // Output row i reads activation row rows[i] (nullptr: row i).
    const int32_t *rows = nullptr;
    // Nonzero: consecutive calls on this thread with the same rows_id (and the same pointers and row count) read
    // the same activation values, so a kernel set that gathers rows into a layout of its own (AMX) may reuse its
    // copy, e.g. between an expert's gate and up GEMMs. Callers make ids unique process-wide (new_rows_ids()).
    uint64_t rows_id = 0;
    // Weights the caller will use next (a panel, e.g. the next expert's), prefetched while the last panel of this
    // call is computed, as each panel prefetches the next. nullptr: none.
    const uint8_t *prefetch_next = nullptr;
    // The calling thread's amx::TileSession for the AMX kernel set (nullptr: each AMX call brackets itself).
    void *tile_session = nullptr;
    // Scratch of the calling thread, gemm_scratch_bytes(w.layout) bytes, 64-byte aligned, which the kernels may
    // overwrite. With it, a call of more rows than one row block decodes each weight tile row once (in the first row
    // block) and the other row blocks read it back, for the formats whose decoding costs more than that read, and
    // prepares each panel's scales once for all its row blocks (the results are the same bit for bit). nullptr:
    // every row block decodes for itself and reads the scales from the packed arrays.
    uint8_t *scratch = nullptr;
    // Counts the call too, besides the calling thread's process-wide counter (gemm_counters.h); written only by
    // the calling thread (nullptr: none).
    GemmCounter *counter = nullptr;
};

struct SwigluParams {
    float limit = 0.0f;  // > 0: gate = min(gate, limit), up = clamp(up, -limit, limit) first
    float alpha = 0.0f;  // > 0: gate * sigmoid(alpha * gate) * (up + 1); otherwise silu(gate) * up
};

// One set of kernels; all pointers are non-null.
struct KernelSet {
    const char *name;  // "scalar", "avx2", "avx512", "avx512-vnni", "avx512-bf16", "avx512-vnni-bf16",
                       // "avx512-vnni-bf16-gfni-vbmi" (the last with GFNI and AVX512-VBMI as well), "amx"
    IsaLevel level;
    bool vnni;
    bool bf16;

    // C[i][n - n_begin] = sum_k W[n][k] * A[row(i)][k] for 0 <= i < m, n_begin <= n < n_end, with
    // n_begin % 32 == 0 and (n_end % 32 == 0 or n_end == N). gemm_int takes every format except kBf16.
    void (*gemm_int)(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                     int64_t ldc);
    void (*gemm_bf16)(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                      int64_t ldc);

    // Quantizes k values of src (fp32, or bf16 when src_bf16) to int8, writes q[0..kp) (zeros after k) and
    // returns the row's scale amax / 127.
    float (*quantize_row)(const void *src, bool src_bf16, int64_t k, int64_t kp, int8_t *q);
    // The two halves of quantize_row, for rows split across NUMA shards that must share one scale: the largest |x|,
    // and the quantization with a given amax (returns amax / 127).
    float (*row_amax)(const void *src, bool src_bf16, int64_t k);
    float (*quantize_row_amax)(const void *src, bool src_bf16, int64_t k, int64_t kp, float amax, int8_t *q);
    // dst[0..kp) = bf16(src[0..k)), zeros after k.
    void (*convert_row_bf16)(const void *src, bool src_bf16, int64_t k, int64_t kp, uint16_t *dst);
    // h[i] = swiglu(g[i], u[i]).
    void (*swiglu_row)(const float *g, const float *u, int64_t n, const SwigluParams &params, float *h);
    // y[i] = fma(w, x[i], y[i]).
    void (*axpy_row)(float w, const float *x, int64_t n, float *y);
    // dst[i] = (accumulate ? dst[i] : 0) + (((src[0][i] + src[1][i]) + ...)); dst is fp32, or bf16 when dst_bf16.
    void (*merge_row)(const float *const *src, int n_src, int64_t n, void *dst, bool dst_bf16, bool accumulate);
    // Panel p of a group-wise integer matrix (INT4 and the GGUF formats but MXFP4) as the AMX set reads
    // it (amx::GroupedPanel): the signed codes in the INT8 tile layout (ceil(K / 64) steps of 2 KiB; skipped
    // when tiles is nullptr), and per group g and column the scale S_g and, for formats with mins, -M_g, fp32
    // [groups][32], exactly as gemm_int uses them. prefetch_next: prefetch panel + 1 meanwhile (the caller's next).
    // Other types: nothing.
    void (*unpack_panel_s8)(const PackedMatrix &w, int64_t panel, int8_t *tiles, float *scale, float *neg_min,
                            bool prefetch_next);
};

// GemmActs::scratch for a GEMM over `layout`: first one column block's decoded tile rows, at most a panel's 32
// columns of a byte per padded K (decode_scratch_bytes), then fp32 per scale group: a panel's scales and mins and a
// row block's activation sums (kMaxRowBlock rows at most).
inline constexpr int kMaxRowBlock = 8;
inline size_t decode_scratch_bytes(const PackedLayout &layout) { return static_cast<size_t>(layout.kp) * kPanel; }
inline size_t gemm_scratch_bytes(const PackedLayout &layout) {
    return decode_scratch_bytes(layout) + sizeof(float) * static_cast<size_t>(layout.groups) * (2 * kPanel + kMaxRowBlock);
}

// The first of `count` fresh, process-wide unique GemmActs::rows_id values (thread-safe).
uint64_t new_rows_ids(uint64_t count);

// Counts one GEMM call of m rows over columns [n_begin, n_end) of w, computed by code of `level`, in the calling
// thread's counter and in a.counter.
void count_gemm(const GemmActs &a, IsaLevel level, const PackedMatrix &w, int64_t m, int64_t n_begin, int64_t n_end);

// C = W * A for any format (dispatches on the matrix type), counted (the AMX set counts its own calls, by the code
// that ran them).
inline void gemm(const KernelSet &ks, const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin,
                 int64_t n_end, float *c, int64_t ldc) {
    (w.layout.type == PackedType::kBf16 ? ks.gemm_bf16 : ks.gemm_int)(w, a, m, n_begin, n_end, c, ldc);
    if (ks.level != IsaLevel::kAmx) count_gemm(a, ks.level, w, m, n_begin, n_end);
}

// Kernel sets by capability. Returns nullptr when the host cannot run it.
const KernelSet *kernel_set(IsaLevel level, bool vnni, bool bf16);
// The best set for an ISA level (capped by what the host supports), with VNNI / AVX512-BF16 when the host has them
// and they are not disabled by set_disabled_features, and the VNNI set's form for GFNI and AVX512-VBMI where the host
// has them (and nothing is disabled). kAmx gives the AMX set when amx::available() (the CPU has usable AMX, or tests
// installed the tile machine), else the best AVX-512 set.
const KernelSet &best_kernel_set(IsaLevel level);
// The level the kernels should use now: kAmx when amx::available(), else active_isa_level().
IsaLevel kernel_level();

// The AMX set: INT8 and INT4 weights (AMX int8 tiles), the GGUF formats but MXFP4
// (int8 tiles, one TMUL per scale group: amx::gemm_s8_grouped_f32 over unpack_panel_s8) and BF16 weights (bf16
// tiles) through the JIT kernels of backends/cpu/amx when a call has at least amx_min_rows() rows; other formats,
// and smaller calls (where AVX-512 is faster), through the best AVX-512 set. Integer results are the same bits as
// the other levels (the AMX contract's numerics are these kernels'); BF16 differs in the last bits (TDPBF16PS sums
// even and odd products separately).
//
// The fewest rows a call of this matrix needs to run on AMX: where the AMX kernels overtake AVX-512 VNNI / BF16,
// measured one core, 256 columns, K 768 and 2048, weights in L2 (the crossover below both): INT8 and BF16 at 2
// rows (AVX-512 BF16 is 8x slower than its tiles), INT4 at 4 (group 32: 8), the group-wise GGUF formats at 12-16
// (per-group tile stores and scaling cost more than AVX-512's decoding until the tiles are well filled; 16 here).
// INT64_MAX for a format AMX has no kernel for (MXFP4, the other K-quants): no call of it runs on AMX.
int64_t amx_min_rows(const PackedLayout &layout);
// Where the AVX-512 kernels (and the AMX set's AVX-512 paths) prefetch weights, as KT_PREFETCH names it: "l1",
// "l1nta" or "l2".
const char *avx512_prefetch_name();
// Logs (KT_LOG_WARN) each kernel variable of the environment whose value kt does not understand and so ignores
// (KT_MAX_ISA, KT_PREFETCH): without it a typo changes nothing, silently. Whatever creates kernels for a caller
// (a model's engine, an expert pool) calls it; it warns once per process, at the first call that finds a log
// callback taking warnings (one installed after the first pool still hears it).
void warn_ignored_kernel_environment();
// The sets this host can run, from scalar up (for tests: every path is exercised, including fallbacks).
int supported_kernel_sets(const KernelSet **out, int capacity);

// Disables VNNI and/or AVX512-BF16 in best_kernel_set (tests force the software fallbacks of a Skylake-class
// CPU). Thread-safe; affects kernel sets chosen afterwards.
inline constexpr uint32_t kDisableVnni = 1u;
inline constexpr uint32_t kDisableBf16 = 2u;
void set_disabled_features(uint32_t mask);
uint32_t disabled_features();

}  // namespace kt::cpu
