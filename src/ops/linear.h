// The matrix products of a model's forward pass, behind two narrow interfaces.
//
// Every projection (attention, dense FFN, router, output head) is a Linear, and every feed-forward block made of
// SwiGLU experts (a MoE layer, a dense FFN, a shared expert) is an ExpertFfn: a dense FFN is a one-expert pool.
// The forward passes in model/arch only ever call these two, so the kernels behind them can be swapped (the
// scalar reference here, the expert engine's packed kernels) without touching the model graphs. A
// KernelFactory builds them from the weight tensors once, at load.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "mem/mapped_file.h"

namespace kt::ops {

// A weight matrix as GGUF stores it: W has `rows` rows of `cols` elements (ne = {cols, rows}); each row is a
// contiguous run of `cols` values in `type`'s block format, `row_bytes` apart.
struct MatrixView {
    int32_t type = 0;             // KT_TYPE_*
    const uint8_t *data = nullptr;
    int64_t cols = 0;             // K: input features
    int64_t rows = 0;             // N: output features
    int64_t row_bytes = 0;
    const char *name = "";        // for messages
    // The read-only file mapping `data` lies in, or null (a file read into memory, caller buffers). A kernel that
    // copies the weights out may give those pages back (MappedFile::drop_pages); one that reads them in place keeps
    // them.
    const mem::MappedFile *mapping = nullptr;
};

// A stack of `count` same-shaped matrices, `stride` bytes apart (GGUF `*_exps` tensors, ne = {cols, rows, count}).
struct MatrixStack {
    MatrixView first;            // matrix 0; matrix e starts at first.data + e * stride
    int64_t count = 0;
    int64_t stride = 0;

    MatrixView at(int64_t e) const {
        MatrixView m = first;
        m.data += e * stride;
        return m;
    }
};

// y[T, N] = x[T, K] · Wᵀ (+ bias[N] when the layer has one).
class Linear {
public:
    virtual ~Linear() = default;
    virtual int64_t in_features() const = 0;   // K
    virtual int64_t out_features() const = 0;  // N
    // x: [n_tokens, K] row-major f32; y: [n_tokens, N], overwritten. x and y do not overlap. Work is spread over
    // `pool`'s threads (the caller is not inside a job of it). A failure (the pool refused the job, memory ran
    // out) is returned, never swallowed: y is then unspecified and the forward pass must stop.
    virtual Status forward(const float *x, int64_t n_tokens, float *y, ThreadPool &pool) const = 0;
};

// SwiGLU experts: out[t] = Σ_j weight[t, j] · down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t])) with e = ids[t, j];
// ids < 0 are skipped. gate/up: [n_expert][I, H], down: [n_expert][H, I]. ExpertOptions select gpt-oss's variant:
// biases on all three products and the clamped SwiGLU.
class ExpertFfn {
public:
    virtual ~ExpertFfn() = default;
    virtual int64_t n_experts() const = 0;
    virtual int64_t hidden() const = 0;        // H
    virtual int64_t intermediate() const = 0;  // I
    // x: [n_tokens, H]; ids, weights: [n_tokens, k]; out: [n_tokens, H], overwritten. Every id is < n_experts()
    // (callers validate). The k weighted outputs of a token are summed in slot order j = 0..k-1. Failures are
    // returned as for Linear::forward (out is then unspecified).
    virtual Status forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                           float *out, ThreadPool &pool) const = 0;
    // forward() in two halves, so that the caller can run other work while FFNs that compute elsewhere (a device)
    // are at it: begin_forward() starts the call and finish_forward() ends it and returns its status. Until
    // finish_forward() returns, x, ids and weights stay valid and unchanged and out is neither read nor written by
    // the caller; an FFN with a call in flight may make other threads' calls wait for it. After a failed
    // begin_forward() there is nothing to finish; after a successful one finish_forward() must be called, from the
    // same thread. The default computes the whole call in begin_forward().
    virtual Status begin_forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights,
                                 int64_t k, float *out, ThreadPool &pool) const {
        return forward(x, n_tokens, ids, weights, k, out, pool);
    }
    virtual Status finish_forward() const { return Status::ok(); }
    // Activation counts, for placing the hottest experts on a device: out[e] = the (token, slot) pairs routed to
    // expert e since these kernels were built. False (and *out untouched) when these kernels do not count.
    virtual bool activation_counts(std::vector<uint64_t> *out) const {
        (void)out;
        return false;
    }
};

// The variant of an expert FFN (defaults: plain SwiGLU, no biases).
//   g = gate_e · x + gate_bias[e], u = up_e · x + up_bias[e]
//   limit L > 0: g = min(g, L), u = clamp(u, -L, L); alpha a > 0: h = g · sigmoid(a · g) · (u + 1), else silu(g) · u
//   y = down_e · h + down_bias[e]
struct ExpertOptions {
    float swiglu_limit = 0.0f;
    float swiglu_alpha = 0.0f;
    const float *gate_bias = nullptr;  // [n_expert][I] or null; must outlive the kernels built with it
    const float *up_bias = nullptr;    // [n_expert][I] or null
    const float *down_bias = nullptr;  // [n_expert][H] or null
};

// Builds the kernels for a model's weights. Errors name the tensor (an unsupported type, a bad shape).
class KernelFactory {
public:
    virtual ~KernelFactory() = default;
    virtual const char *name() const = 0;
    // `bias` (may be null) holds out_features f32 values and must outlive the Linear.
    virtual Status make_linear(const MatrixView &w, const float *bias, std::unique_ptr<Linear> *out) const = 0;
    virtual Status make_experts(const MatrixStack &gate, const MatrixStack &up, const MatrixStack &down,
                                const ExpertOptions &options, std::unique_ptr<ExpertFfn> *out) const = 0;
};

// The scalar reference: weights are dequantized exactly (ops/ref) and multiplied with f32 activations, so its
// results match llama.cpp's "f32math" golden runs (tier A). Slow; the oracle, not the engine. Works for every
// type kt can dequantize.
const KernelFactory &reference_kernels();

}  // namespace kt::ops
