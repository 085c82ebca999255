// PackedLinear: a dense layer y[T][N] = W[N][K] . x[T][K] (+ bias) on the expert engine's kernels: a dense
// projection or an output head is a one-expert pool without SwiGLU.
//
// The weights are packed once (kept in their GGUF quantization where a kernel reads it, else converted as
// TargetFormat says: by default float types become BF16 and other quantized types Q8_0), each token's activations
// are quantized (or rounded to bf16) once per call, and the GEMM runs over 32-column panels on the caller's thread
// pool, so the numerics are exactly the expert pool's (kernels.h).
//
// Thread safety: a PackedLinear is immutable after create(); forward() may run concurrently on different
// Workspaces.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "mem/weight_storage.h"
#include "moe/packed_store.h"
#include "moe/weights.h"

namespace kt::moe {

class PackedLinear {
public:
    // Activation buffers of one caller (grow to the largest call, then reused: no allocation in steady state).
    // Rows start on cache lines (64-byte lines of storage), as the AMX kernels read them without a copy.
    struct alignas(64) Line {
        uint8_t bytes[64];
    };
    struct Workspace {
        std::vector<Line> q;  // int8 [T][kp], or bf16 [T][kp]
        std::vector<float> scale;
        std::vector<int32_t> sums;
        std::vector<Line> scratch;  // per thread of a prefill call: the kernels' scratch (GemmActs)
    };

    // Packs `w` ([N][K] rows of any type kt reads), in parallel on `pool` when given. bias: N floats, copied;
    // may be nullptr. With a store (may be nullptr), the packed matrix is first asked of it (under `name`, the
    // tensor's): when it has the bytes, w's data is never read; otherwise the freshly packed buffer is handed to it.
    static Status create(const MatrixSource &w, TargetFormat format, const float *bias, const cpu::KernelSet &kernels,
                         ThreadPool *pool, std::unique_ptr<PackedLinear> *out, PackedStore *store = nullptr,
                         const char *name = "");
    // Whether the packed bytes are a view of a store's (a cache file's) instead of packed here.
    bool from_store() const { return buffer_.is_view(); }

    int64_t in_features() const { return matrix_.layout.k; }
    int64_t out_features() const { return matrix_.layout.n; }
    const cpu::PackedLayout &layout() const { return matrix_.layout; }
    uint64_t bytes() const { return matrix_.layout.bytes; }

    // y[t][n] for t < n_tokens (x: [n_tokens][K] fp32, y: [n_tokens][ldy], ldy >= N), on `pool` (nullptr: the
    // calling thread). Fails when the pool cannot run the job.
    Status forward(const float *x, int64_t n_tokens, float *y, int64_t ldy, Workspace *ws, ThreadPool *pool) const;

private:
    PackedLinear() = default;

    const cpu::KernelSet *kernels_ = nullptr;
    mem::WeightStorage buffer_;
    cpu::PackedMatrix matrix_;
    cpu::QuantSpec spec_;
    int64_t sums_ld_ = 0;
    std::vector<float> bias_;
};

}  // namespace kt::moe
