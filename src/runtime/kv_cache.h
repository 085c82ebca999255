// The KV cache and the attention that reads it.
//
// Keys and values live in host memory in the element type the caller chose (f16, bf16, f32, or Q8_0 blocks of 32
// int8 with an f16 scale), laid out per layer as [Hkv][n_ctx][D]: one KV head's rows for consecutive positions are
// contiguous, which is how attention streams them. Positions 0..n_ctx-1 of one sequence.
//
// Attention is computed in f32 whatever the cache type: scores = kq_scale · q·k, causal mask (a query at position
// p sees positions 0..p), softmax with the max subtracted and the sum taken in double, then the weighted sum of
// values. GQA: query head h reads KV head h / (H / Hkv). Work is organised per KV head and block of queries so
// that each cached row is converted to f32 once per block, not once per query head; blocks run in parallel.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "backends/cpu/vector_kernels.h"
#include "model/arch/arch.h"

namespace kt::runtime {

class KvCache {
public:
    // type: KT_TYPE_F16, BF16, F32 or Q8_0 (head dims multiples of 32). n_threads: the most threads attend() will be given (per-thread scratch).
    static Status create(const model::HParams &hp, int64_t n_ctx, int32_t type, int n_threads, KvCache *out);

    int64_t n_ctx() const { return n_ctx_; }
    int32_t type() const { return type_; }
    uint64_t bytes() const { return k_.size() + v_.size(); }

    // Writes positions [pos0, pos0 + T) of `layer` (k: [T, Hkv, Dk], v: [T, Hkv, Dv]) and computes the batch's
    // attention over positions [0, pos0 + t] for query t: q [T, H, Dk] -> out [T, H, Dv].
    // Precondition: pos0 + T <= n_ctx(); pool.size() <= n_threads given to create().
    void attend(int64_t layer, int64_t pos0, int64_t T, const float *q, const float *k, const float *v, float *out,
                ThreadPool &pool);

private:
    uint8_t *k_row(int64_t layer, int64_t head, int64_t pos) {
        return k_.data() + ((layer * hkv_ + head) * n_ctx_ + pos) * k_row_bytes_;
    }
    uint8_t *v_row(int64_t layer, int64_t head, int64_t pos) {
        return v_.data() + ((layer * hkv_ + head) * n_ctx_ + pos) * v_row_bytes_;
    }

    void store_row(const float *src, int64_t n, uint8_t *dst) const;
    // The row as f32: a view of the cache itself for F32, otherwise converted into `buffer`.
    const float *load_row(const uint8_t *src, int64_t n, float *buffer) const;

    int32_t type_ = 0;
    const cpu::VectorKernels *vk_ = nullptr;
    int64_t n_ctx_ = 0, n_head_ = 0, hkv_ = 0, dk_ = 0, dv_ = 0;
    int64_t k_row_bytes_ = 0, v_row_bytes_ = 0;
    float kq_scale_ = 1.0f;
    std::vector<uint8_t> k_, v_;  // [n_layer][Hkv][n_ctx][row bytes]
    // Per-thread scratch: a row converted to f32, then the scores of a block of (query, head) pairs.
    int64_t scratch_per_thread_ = 0;
    std::vector<float> scratch_;

    void attend_block(int64_t layer, int64_t g, int64_t pos0, int64_t t0, int64_t tb, const float *q, float *out,
                      float *scratch);
};

}  // namespace kt::runtime
