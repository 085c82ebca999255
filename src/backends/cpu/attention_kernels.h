// Attention over a KV cache: the inner loop of a transformer's attention, for one KV head and a block of query
// rows (one or more tokens times the query heads that share the KV head).
//
// Layout (chosen for this kernel; runtime/kv_cache stores it): keys in tiles of 16 positions, transposed, so that
// one tile row is 16 positions of one head dimension and Q·Kᵀ is a small GEMM with the 16 positions in a vector
// register; values as rows [position][Dv]. Elements are f32, f16 or bf16. The cache is paged: a sequence's
// positions live in fixed-size blocks found through its block table, a multiple of 16 positions each, so a tile
// never straddles two blocks.
//
// Computation, per row r with `visible[r]` positions (the causal limit; with a window only the last `window` of
// them): flash-style online softmax in f32 over chunks of positions (running max m, sum l, output o rescaled when
// m grows), then, with a sink logit s, m' = max(m, s), l = l·e^(m - m') + e^(s - m') and o rescaled, and finally
// o / l. exp is kt's own polynomial (a few ulp). Windows, sinks and values inside the keys (v_in_k) are the f32
// path's only: the tile paths take none of them (attend() runs kF32 when any is set). The products Q·Kᵀ and P·V are computed one of three ways (Products):
//   kF32     f32 multiply-adds on vectors: each tile of 16 positions converted to f32 once for all rows. Matches a
//            two-pass f32 softmax to ~1e-6 relative. Any element type; the only choice for f32 caches.
//   kBf16    bf16 products with f32 sums on GEMM tiles (AMX TDPBF16PS, AVX512-BF16 VDPBF16PS, or the kernel
//            set's emulation): q (pre-scaled) and p rounded to bf16, keys and values as bf16. For bf16 caches,
//            where the keys and values are bf16 already: the rounding of q and p adds an error of the cache's own
//            size (the golden tier C of bf16 caches).
//   kBf16x3  the same GEMMs on three bf16 terms: x = hi + lo with hi = bf16(x), lo = bf16(x - hi), and
//            q·k = q_hi·k_hi + q_hi·k_lo + q_lo·k_hi (the K dimension tripled: A = [q_hi | q_hi | q_lo],
//            B = [k_hi | k_lo | k_hi]), p·v alike. f16 keys and values are exactly hi + lo, so the only rounding
//            left is q's and p's beyond 16 bits and the dropped lo·lo term: ~2^-16 relative, f16-cache accuracy at
//            three times the tile work (which AMX has to spare, and AVX-512 does not).
// The tile paths pack each chunk of keys (and values) once per call into the engine's bf16 panel layout
// (backends/cpu/packed.h: the AMX B-tile order) and run QKᵀ and PV as two GEMMs over all the call's rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/gemm_counters.h"

namespace kt::cpu {

struct KernelSet;

inline constexpr int64_t kKeyTile = 16;
// Positions per online-softmax step of the f32 products: four key tiles (attention_impl.h, attend_f32).
inline constexpr int64_t kF32StepPositions = 4 * kKeyTile;

enum class KvElem : int32_t { kF32 = 0, kF16 = 1, kBf16 = 2 };

enum class Products : int32_t { kF32 = 0, kBf16 = 1, kBf16x3 = 2 };
const char *products_name(Products p);

// Positions per chunk of the tile paths: a multiple of 32 (one bf16 K step of the PV GEMM, one panel of QKᵀ).
inline constexpr int64_t kAttentionChunk = 128;

struct AttentionArgs {
    KvElem elem = KvElem::kF16;
    // Positions [i·block_positions, (i+1)·block_positions) of this KV head are in block blocks[i], which starts at
    // base + blocks[i]·block_stride bytes: its keys at k_offset ([block_positions/16][dk][16] elements), its
    // values at v_offset ([block_positions][dv]), or, when v_in_k >= 0, key dims [v_in_k, v_in_k + dv) (an MLA
    // latent stored once).
    const uint8_t *base = nullptr;
    const int32_t *blocks = nullptr;
    int64_t block_positions = 0;    // a multiple of 16
    size_t block_stride = 0, k_offset = 0, v_offset = 0;
    int64_t v_in_k = -1;
    int64_t dk = 0, dv = 0;
    const float *q = nullptr;       // [rows][dk], contiguous
    int64_t rows = 0;
    const int32_t *visible = nullptr;  // [rows]: row r attends to positions [0, visible[r]), visible[r] >= 1
    int32_t window = 0;             // > 0: row r attends to [max(0, visible[r] - window), visible[r]) only
    const float *sinks = nullptr;   // [rows] or null: one more logit per row in the softmax denominator
    float scale = 1.0f;             // applied to q·k before the softmax
    float *out = nullptr;           // [rows][dv]
    float *scratch = nullptr;       // attention_scratch_floats(rows, dk, dv, products) floats, 64-byte aligned
    Products products = Products::kF32;
    // The tile paths: the kernel set whose gemm_bf16 runs the GEMMs (never the AMX set: AMX is `amx`), and whether
    // AMX tiles take the calls with at least amx_min_rows() rows (falling back to `gemm` if a kernel fails).
    const KernelSet *gemm = nullptr;
    bool amx = false;
    void *tile_session = nullptr;   // the calling thread's amx::TileSession when `amx`
    // Counts the tile paths' GEMM calls by the ISA that ran them (nullptr: not counted). The process-wide GEMM
    // counters (kt_get_gemm_counts) do not see attention.
    GemmCounter *counter = nullptr;
};

size_t attention_scratch_floats(int64_t rows, int64_t dk, int64_t dv, Products products);

// Where the tile paths keep their buffers inside the scratch (offsets in floats, each 64-byte aligned).
struct AttentionTilePlan {
    int segments = 1;         // 1 (kBf16) or 3 (kBf16x3): bf16 terms per element
    int64_t dkp = 0, dvp = 0; // head dims rounded up to 32
    int64_t ka = 0;           // K of Q·Kᵀ: segments · dkp
    size_t qa = 0;            // bf16 [rows][ka]: the query rows, scaled and split
    size_t kb = 0;            // packed bf16 keys of a chunk: [chunk][ka]
    size_t s = 0;             // f32 [rows][chunk]: scores
    size_t pa = 0;            // bf16 [rows][segments · chunk]: probabilities, split
    size_t vb = 0;            // packed bf16 values of a chunk: [dvp][segments · chunk]
    size_t pv = 0;            // f32 [rows][dv]: P·V of a chunk
    size_t m = 0, l = 0, correction = 0;  // f32 [rows]
    size_t floats = 0;        // total
};
AttentionTilePlan attention_tile_plan(int64_t rows, int64_t dk, int64_t dv, Products products);

// One GEMM of the tile paths: c[i][j] = sum_k x[i][k] · W[j][k] for i < m, j < n, where W [n][k] (k a multiple of
// 32) is packed in the bf16 panel layout at `packed` (64-byte aligned): tile (panel p, K step s, half h) at byte
// ((p·k/32 + s)·2 + h)·1024, its row r holding W[32p + 16h + j][32s + 2r + i] at 4j + 2i. On AMX tiles when
// args.amx and m >= amx_min_rows() (of a bf16 matrix), else on args.gemm; counted in args.counter. (Portable code: the per-ISA kernels
// call it, so that nothing of the AMX driver or of Status is compiled for an ISA.)
void attention_tile_gemm(const AttentionArgs &args, const uint8_t *packed, int64_t n, int64_t k, const uint16_t *x,
                         int64_t ldx, int64_t m, float *c, int64_t ldc);

struct AttentionKernels {
    const char *name;
    void (*attend)(const AttentionArgs &args);
};

// The best set for the active ISA level; a level's set, or nullptr when the host cannot run it.
const AttentionKernels &attention_kernels();
const AttentionKernels *attention_kernels_for(IsaLevel level);

namespace detail {
void attend_scalar(const AttentionArgs &args);
void attend_avx2(const AttentionArgs &args);
void attend_avx512(const AttentionArgs &args);
}  // namespace detail

}  // namespace kt::cpu
