// The KV cache and the attention that reads it: a pool of fixed-size blocks shared by any number of sequences.
//
// A block holds `block_positions` consecutive positions (a multiple of 16) of every layer and KV head; a sequence
// owns a block table (position p lives in block table[p / block_positions]), so sequences grow a block at a time
// and blocks with the same prefix can be shared (runtime/kv_blocks decides who holds which). A kt_context is a
// one-sequence user: one block covering its whole context.
//
// Keys and values are stored in the element type the caller chose: f16, bf16, f32, or Q8_0 blocks (32 int8 with
// an f16 scale). When the values are part of the keys (MLA: K = [k_pe ; c_kv], V = c_kv) only the keys are
// stored. Per block, layer and KV head:
//   - f16 / bf16 / f32: keys in tiles of 16 positions, transposed ([block/16][Dk][16]), values as rows
//     ([block][Dv]): the layout of the tiled attention kernel (backends/cpu/attention_kernels.h), which runs
//     Q·Kᵀ as a small GEMM and the softmax online, one tile at a time;
//   - Q8_0: keys and values as rows of blocks, read by a generic path (rows converted to f32, dot and axpy).
//
// Attention: scores = kq_scale · q·k, causal mask (a query at position p sees positions 0..p of its own
// sequence, or only the last `window` of them), softmax (with an optional sink logit per head in the
// denominator), weighted sum of values; every position is kept, also for sliding-window layers; the softmax and the sums are f32 whatever the cache type. GQA: query
// head h reads KV head h / (H / Hkv). Work is split into tasks of one sequence, one KV head and a block of its
// queries (all the query heads sharing the KV head: about kTaskRows rows, kTileTaskRows with tile products), run
// in parallel over the whole batch; each cached tile or row is converted once per task. The products q·k and p·v of the tiled types are computed as
// attention_kernels.h describes, chosen at creation (Config::products):
//   F32 cache  f32 products (exact: the golden tier A);
//   BF16       bf16 products on tiles where the host has bf16 dot products (AMX, AVX512-BF16), else f32;
//   F16        three-term bf16 products on AMX tiles (~2^-16 relative, inside the golden tier B), else f32;
// and a task with fewer than kMinTileRows rows (decoding a few tokens of a model with few query heads per KV
// head) takes the f32 products anyway: its tiles would be mostly empty. So does attention with a window, sinks
// or values inside the keys (gpt-oss, MLA's latent), which only the f32 path implements.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/vector_kernels.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "mem/numa_buffer.h"
#include "model/arch/arch.h"

namespace kt::runtime {

class KvCache {
public:
    struct Config {
        int32_t type = KT_TYPE_F16;     // KT_TYPE_F16, BF16, F32 or Q8_0 (head dims multiples of 32)
        int64_t block_positions = 16;   // a multiple of 16
        int64_t n_blocks = 1;
        int64_t max_positions = 1;      // the most positions one sequence holds (sizes the per-thread scratch)
        int n_threads = 1;              // the most threads attend() will be given
        // -1: chosen for the type and the host as above; otherwise a cpu::Products value (tests, benchmarks;
        // the tile products of a level the host lacks run on the kernel set's emulation).
        int32_t products = -1;
    };

    static constexpr int64_t kTaskRows = 128;    // query rows per task (queries x query heads of a KV head)
    // With tile products: each chunk's keys and values are packed once per task, so more rows share that work
    // (256: 1.1-1.2x faster than 128 at 4,096 positions in bench_attention, and the scratch still fits L2).
    static constexpr int64_t kTileTaskRows = 256;
    static constexpr int64_t kMinTileRows = 16;  // fewer rows take the f32 products

    // The memory is reserved here and touched when written: an unused block costs no RAM.
    static Status create(const model::HParams &hp, const Config &config, KvCache *out);
    // Bytes one block takes (to size a pool from a budget); 0 with an error for a type or shape create rejects.
    static Status block_bytes_for(const model::HParams &hp, int32_t type, int64_t block_positions, uint64_t *out);

    int32_t type() const { return type_; }
    int64_t block_positions() const { return block_positions_; }
    int64_t n_blocks() const { return n_blocks_; }
    int64_t max_positions() const { return max_positions_; }
    uint64_t block_bytes() const { return block_bytes_; }
    uint64_t bytes() const { return block_bytes_ * static_cast<uint64_t>(n_blocks_); }
    // Keys and values of one position, all layers (MLA: the latent once, see HParams::v_in_k).
    uint64_t bytes_per_position() const { return block_bytes_ / static_cast<uint64_t>(block_positions_); }
    cpu::Products products() const { return products_; }
    // The tile products' GEMM calls since creation, by the ISA that ran them.
    cpu::GemmCounts gemm_counts() const;

    // One sequence's rows of a batch.
    struct Segment {
        const int32_t *blocks = nullptr;  // its block table
        int64_t pos0 = 0;                 // position of its first row
        int64_t row0 = 0;                 // its first row in the batch
        int64_t n_tokens = 0;
    };

    // Writes every segment's keys and values (k: [T, Hkv, Dk], v: [T, Hkv, Dv], rows as in the batch) at its
    // positions, then computes each row's attention over its sequence's positions [0, pos0 + t] (window > 0:
    // [pos0 + t - window + 1, pos0 + t]): q [T, H, Dk] -> out [T, H, Dv]. sinks: [H] extra softmax logits, or
    // null. Preconditions: the block tables cover positions [0, pos0 + n_tokens) with
    // ids < n_blocks(); pos0 + n_tokens <= max_positions(); pool.size() <= n_threads given to create().
    void attend(int64_t layer, const Segment *segments, int64_t n_segments, const float *q, const float *k,
                const float *v, int64_t window, const float *sinks, float *out, ThreadPool &pool);

private:
    bool tiled() const { return type_ != KT_TYPE_Q8_0; }
    // Where one layer's KV head starts inside every block, and the two parts of it.
    size_t head_offset(int64_t layer, int64_t head) const {
        return static_cast<size_t>(layer * hkv_ + head) * (k_block_bytes_ + v_block_bytes_);
    }
    uint8_t *block(int32_t id) const { return memory_.as<uint8_t>() + static_cast<size_t>(id) * block_bytes_; }

    void store(const Segment &seg, int64_t layer, const float *k, const float *v);
    void store_row(const float *src, int64_t n, uint8_t *dst) const;
    // The row as f32: a view of the cache itself for F32, otherwise converted into `buffer`.
    const float *load_row(const uint8_t *src, int64_t n, float *buffer) const;

    // Queries t0 .. t0+tb-1 of a segment, all query heads of KV head g.
    struct Extras {
        int64_t window;
        const float *sinks;
    };
    void attend_tiled(const Segment &seg, int64_t layer, int64_t g, int64_t t0, int64_t tb, const float *q,
                      const Extras &x, float *out, float *scratch, int thread, void *tile_session);
    void attend_rows(const Segment &seg, int64_t layer, int64_t g, int64_t t0, int64_t tb, const float *q,
                     const Extras &x, float *out, float *scratch);

    int32_t type_ = 0;
    cpu::KvElem elem_ = cpu::KvElem::kF16;
    size_t elem_bytes_ = 0;
    const cpu::VectorKernels *vk_ = nullptr;
    const cpu::AttentionKernels *ak_ = nullptr;
    cpu::Products products_ = cpu::Products::kF32;
    const cpu::KernelSet *tile_gemm_ = nullptr;  // the tile products' GEMMs when not on AMX
    bool tile_amx_ = false;
    int64_t query_block_ = 16;  // queries per task
    int64_t n_layer_ = 0, n_head_ = 0, hkv_ = 0, dk_ = 0, dv_ = 0;
    int64_t block_positions_ = 0, n_blocks_ = 0, max_positions_ = 0;
    size_t k_row_bytes_ = 0, v_row_bytes_ = 0;      // Q8_0 rows
    int64_t v_in_k_ = -1;                           // >= 0: values are key dims from here, not stored apart
    size_t k_block_bytes_ = 0, v_block_bytes_ = 0;  // one layer's KV head in one block
    uint64_t block_bytes_ = 0;
    float kq_scale_ = 1.0f;
    mem::NumaBuffer memory_;  // [n_blocks][n_layer][Hkv][keys, values]
    // Per-thread scratch (floats), 64-byte aligned blocks: gathered queries, outputs, the kernel's own scratch
    // (tiled) or a converted row and the scores of a block (rows).
    int64_t scratch_per_thread_ = 0;
    std::vector<float> scratch_;
    std::vector<int32_t> visible_;      // [threads][rows of a block]
    std::vector<float> row_sinks_;      // [threads][rows of a block]
    std::unique_ptr<cpu::GemmCounter[]> counters_;  // [threads]
    int n_threads_ = 0;
    std::vector<int64_t> task_begin_;   // [n_segments + 1]: the first attention task of each segment
};

}  // namespace kt::runtime
