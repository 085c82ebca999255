// The KV cache and the attention that reads it.
//
// Keys and values live in host memory in the element type the caller chose: f16, bf16, f32, or Q8_0 blocks (32
// int8 with an f16 scale). When the values are part of the keys (MLA: K = [k_pe ; c_kv], V = c_kv) only the keys
// are stored. Positions 0..n_ctx-1 of one sequence, per layer and KV head:
//   - f16 / bf16 / f32: keys in tiles of 16 positions, transposed ([n_ctx/16][Dk][16]), values as rows
//     ([n_ctx][Dv]): the layout of the tiled attention kernel (backends/cpu/attention_kernels.h), which runs
//     Q·Kᵀ as a small GEMM and the softmax online, one tile at a time;
//   - Q8_0: keys and values as rows of blocks, read by a generic path (rows converted to f32, dot and axpy).
//
// Attention is computed in f32 whatever the cache type: scores = kq_scale · q·k, causal mask (a query at position
// p sees positions 0..p, or only the last `window` of them), softmax (with an optional sink logit per head in the
// denominator), weighted sum of values. Every position is kept, also for sliding-window layers. GQA: query head h reads KV head h / (H / Hkv). Work is
// split into tasks of one KV head and a block of queries (all the query heads sharing it), run in parallel; each
// cached tile or row is converted once per task.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/vector_kernels.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/arch/arch.h"

namespace kt::runtime {

class KvCache {
public:
    // type: KT_TYPE_F16, BF16, F32 or Q8_0 (head dims multiples of 32). n_threads: the most threads attend() will
    // be given (per-thread scratch).
    static Status create(const model::HParams &hp, int64_t n_ctx, int32_t type, int n_threads, KvCache *out);

    int64_t n_ctx() const { return n_ctx_; }
    int32_t type() const { return type_; }
    uint64_t bytes() const { return k_.size() + v_.size(); }
    // Keys and values of one position, all layers (MLA: the latent once, see HParams::v_in_k).
    uint64_t bytes_per_position() const { return bytes_per_position_; }

    // Writes positions [pos0, pos0 + T) of `layer` (k: [T, Hkv, Dk], v: [T, Hkv, Dv]) and computes the batch's
    // attention over positions [0, pos0 + t] for query t (window > 0: [pos0 + t - window + 1, pos0 + t]):
    // q [T, H, Dk] -> out [T, H, Dv]. sinks: [H] extra softmax logits, or null.
    // Precondition: pos0 + T <= n_ctx(); pool.size() <= n_threads given to create().
    void attend(int64_t layer, int64_t pos0, int64_t T, const float *q, const float *k, const float *v, int64_t window,
                const float *sinks, float *out, ThreadPool &pool);

private:
    bool tiled() const { return type_ != KT_TYPE_Q8_0; }
    // One KV head's storage in a layer.
    uint8_t *k_head(int64_t layer, int64_t head) { return k_.data() + (layer * hkv_ + head) * k_head_bytes_; }
    uint8_t *v_head(int64_t layer, int64_t head) { return v_.data() + (layer * hkv_ + head) * v_head_bytes_; }

    void store_key(const float *src, uint8_t *head, int64_t pos);
    void store_row(const float *src, int64_t n, uint8_t *dst) const;
    // The row as f32: a view of the cache itself for F32, otherwise converted into `buffer`.
    const float *load_row(const uint8_t *src, int64_t n, float *buffer) const;

    // Queries t0 .. t0+tb-1 of the batch, all query heads of KV head g.
    struct Extras {
        int64_t window;
        const float *sinks;
    };
    void attend_tiled(int64_t layer, int64_t g, int64_t pos0, int64_t t0, int64_t tb, const float *q, const Extras &x,
                      float *out, float *scratch, int thread);
    void attend_rows(int64_t layer, int64_t g, int64_t pos0, int64_t t0, int64_t tb, const float *q, const Extras &x,
                     float *out, float *scratch);

    int32_t type_ = 0;
    cpu::KvElem elem_ = cpu::KvElem::kF16;
    size_t elem_bytes_ = 0;
    const cpu::VectorKernels *vk_ = nullptr;
    const cpu::AttentionKernels *ak_ = nullptr;
    int64_t n_ctx_ = 0, n_head_ = 0, hkv_ = 0, dk_ = 0, dv_ = 0;
    int64_t k_row_bytes_ = 0, v_row_bytes_ = 0;     // Q8_0 rows
    int64_t k_head_bytes_ = 0, v_head_bytes_ = 0;   // one head of one layer
    int64_t v_in_k_ = -1;                           // >= 0: values are key dims from here, not stored apart
    uint64_t bytes_per_position_ = 0;
    float kq_scale_ = 1.0f;
    std::vector<uint8_t> k_, v_;  // [n_layer][Hkv][head bytes]
    // Per-thread scratch (floats), 64-byte aligned blocks: gathered queries, outputs, the kernel's own scratch
    // (tiled) or a converted row and the scores of a block (rows).
    int64_t scratch_per_thread_ = 0;
    std::vector<float> scratch_;
    std::vector<int32_t> visible_;  // [threads][rows of a block]
    std::vector<float> row_sinks_;  // [threads][rows of a block]
};

}  // namespace kt::runtime
