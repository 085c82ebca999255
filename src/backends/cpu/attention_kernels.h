// Attention over a KV cache: the inner loop of a transformer's attention, for one KV head and a block of query
// rows (one or more tokens times the query heads that share the KV head).
//
// Layout (chosen for this kernel; runtime/kv_cache stores it): keys in tiles of 16 positions, transposed, so that
// one tile row is 16 positions of one head dimension and Q·Kᵀ is a small GEMM with the 16 positions in a vector
// register; values as rows [position][Dv]. Elements are f32, f16 or bf16, converted to f32 once per tile. The
// cache is paged: a sequence's positions live in fixed-size blocks found through its block table, a multiple of
// 16 positions each, so a tile never straddles two blocks.
//
// Computation, per row r with `visible[r]` positions (the causal limit; with a window only the last `window` of
// them): flash-style online softmax in f32 over the tiles (running max m, sum l, output o rescaled when m grows),
// then, with a sink logit s, m' = max(m, s), l = l·e^(m - m') + e^(s - m') and o rescaled, and finally o / l.
// exp is kt's own polynomial (a few ulp),
// so the result matches a two-pass softmax to ~1e-6 relative, not bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/cpu_features.h"

namespace kt::cpu {

inline constexpr int64_t kKeyTile = 16;

enum class KvElem : int32_t { kF32 = 0, kF16 = 1, kBf16 = 2 };

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
    float *scratch = nullptr;       // attention_scratch_floats(rows, dk, dv) floats, 64-byte aligned
};

size_t attention_scratch_floats(int64_t rows, int64_t dk, int64_t dv);

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
