#include "runtime/engine_kernels.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "mem/numa_buffer.h"
#include "mem/pinned_pool.h"
#include "moe/expert_pool.h"
#include "moe/weights.h"

namespace kt::runtime {
namespace {

// The packed format a GGUF type runs in: its own where a kernel reads it, BF16 for float sources, INT8 otherwise.
moe::TargetFormat target_for(int32_t type) {
    cpu::PackedType native;
    if (moe::native_packed_type(type, &native)) return moe::TargetFormat::kAsSource;
    if (type == KT_TYPE_F32 || type == KT_TYPE_F16) return moe::TargetFormat::kBf16;
    return moe::TargetFormat::kInt8;
}

Status source_of(const ops::MatrixView &w, int64_t count, moe::MatrixSource *out) {
    return Status(moe::make_source(w.type, w.data, w.rows * count, w.cols, out)).with_context(w.name);
}

// Activations of one Linear call, reused between calls of the same thread (the hot path allocates only while a
// batch grows past the largest seen).
struct Activations {
    std::vector<int8_t> q;        // [T][kp]
    std::vector<float> scale;     // [T]
    std::vector<int32_t> sums;    // [T][sums_ld]
    std::vector<uint16_t> bf16;   // [T][kp]
};

Activations &thread_activations() {
    thread_local Activations a;
    return a;
}

// Panels per parallel_for chunk: enough work per hand-out, enough chunks to balance (decode GEMVs are short).
int64_t panel_grain(int64_t panels, int threads) { return std::max<int64_t>(1, panels / (8 * std::max(threads, 1))); }

class PackedLinear final : public ops::Linear {
public:
    static Status create(const ops::MatrixView &w, const float *bias, const cpu::KernelSet &ks, ThreadPool &load_pool,
                         std::unique_ptr<ops::Linear> *out) {
        std::unique_ptr<PackedLinear> l(new PackedLinear(w, bias, ks));
        moe::MatrixSource src;
        KT_TRY(source_of(w, 1, &src));
        moe::PackSpec spec;
        KT_TRY(Status(moe::pack_spec_for(src, target_for(w.type), 0, &spec)).with_context(w.name));
        cpu::PackedLayout layout;
        KT_TRY(Status(moe::slice_layout(src, spec, 0, w.rows, 0, w.cols, &layout)).with_context(w.name));
        KT_TRY(mem::NumaBuffer::allocate(layout.bytes, nullptr, -1, &l->buffer_));
        l->matrix_.layout = layout;
        l->matrix_.data = l->buffer_.as<uint8_t>();
        l->spec_ = cpu::quant_spec(layout);
        l->sums_ld_ = cpu::quant_sums_per_row(l->spec_, w.cols);
        Status failed;
        std::mutex failed_mutex;
        KT_TRY(load_pool.parallel_for(layout.panels, 4, [&](int64_t p0, int64_t p1, int) {
            Status s = moe::pack_slice(src, spec, 0, 0, layout, p0, p1, l->buffer_.as<uint8_t>());
            if (!s.is_ok()) {
                std::lock_guard<std::mutex> lock(failed_mutex);
                if (failed.is_ok()) failed = std::move(s);
            }
        }));
        KT_TRY(Status(failed).with_context(w.name));
        *out = std::move(l);
        return Status::ok();
    }

    int64_t in_features() const override { return k_; }
    int64_t out_features() const override { return n_; }

    void forward(const float *x, int64_t n_tokens, float *y, ThreadPool &pool) const override {
        const cpu::KernelSet &ks = ks_;
        const int64_t K = k_, N = n_, kp = matrix_.layout.kp;
        Activations &a = thread_activations();
        cpu::GemmActs acts;
        const bool bf16 = matrix_.layout.type == cpu::PackedType::kBf16;
        if (bf16) {
            a.bf16.resize(static_cast<size_t>(n_tokens * kp));
            for (int64_t t = 0; t < n_tokens; ++t) ks.convert_row_bf16(x + t * K, false, K, kp, a.bf16.data() + t * kp);
            acts.bf16 = a.bf16.data();
            acts.bf16_ld = kp;
        } else {
            a.q.resize(static_cast<size_t>(n_tokens * kp));
            a.scale.resize(static_cast<size_t>(n_tokens));
            a.sums.resize(static_cast<size_t>(n_tokens * sums_ld_));
            auto quantize = [&](int64_t t0, int64_t t1, int) {
                for (int64_t t = t0; t < t1; ++t) {
                    int8_t *q = a.q.data() + t * kp;
                    a.scale[t] = ks.quantize_row(x + t * K, false, K, kp, q);
                    cpu::group_sums_row(q, K, spec_, a.sums.data() + t * sums_ld_);
                }
            };
            if (n_tokens >= 16) (void)pool.parallel_for(n_tokens, 8, quantize);
            else quantize(0, n_tokens, 0);
            acts.q = a.q.data();
            acts.q_ld = kp;
            acts.scale = a.scale.data();
            acts.sums = a.sums.data();
            acts.sums_ld = sums_ld_;
        }
        const int64_t panels = matrix_.layout.panels;
        (void)pool.parallel_for(panels, panel_grain(panels, pool.size()), [&](int64_t p0, int64_t p1, int) {
            const int64_t n0 = p0 * cpu::kPanel, n1 = std::min(p1 * cpu::kPanel, N);
            cpu::gemm(ks, matrix_, acts, n_tokens, n0, n1, y + n0, N);
            if (bias_)
                for (int64_t t = 0; t < n_tokens; ++t)
                    for (int64_t n = n0; n < n1; ++n) y[t * N + n] += bias_[n];
        });
    }

private:
    PackedLinear(const ops::MatrixView &w, const float *bias, const cpu::KernelSet &ks)
        : ks_(ks), k_(w.cols), n_(w.rows), bias_(bias) {}

    const cpu::KernelSet &ks_;
    int64_t k_, n_;
    const float *bias_;
    mem::NumaBuffer buffer_;
    cpu::PackedMatrix matrix_;
    cpu::QuantSpec spec_;
    int64_t sums_ld_ = 0;
};

class PoolFfn final : public ops::ExpertFfn {
public:
    PoolFfn(std::unique_ptr<moe::ExpertPool> pool, int64_t n, int64_t hidden, int64_t intermediate, int64_t max_tokens)
        : pool_(std::move(pool)), n_(n), hidden_(hidden), intermediate_(intermediate), max_tokens_(max_tokens) {}

    int64_t n_experts() const override { return n_; }
    int64_t hidden() const override { return hidden_; }
    int64_t intermediate() const override { return intermediate_; }

    void forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k, float *out,
                 ThreadPool &) const override {
        for (int64_t t0 = 0; t0 < n_tokens; t0 += max_tokens_) {
            moe::ForwardArgs args;
            args.n_tokens = std::min(max_tokens_, n_tokens - t0);
            args.top_k = static_cast<int32_t>(k);
            args.input = x + t0 * hidden_;
            args.ids = ids + t0 * k;
            args.weights = weights + t0 * k;
            args.output = out + t0 * hidden_;
            (void)pool_->forward(args);  // arguments were validated by the model loader and the router
        }
    }

private:
    std::unique_ptr<moe::ExpertPool> pool_;
    int64_t n_, hidden_, intermediate_, max_tokens_;
};

// The most experts per token any architecture here routes to (DeepSeek-V3, Qwen3: 8).
constexpr int32_t kMaxTopK = 16;
// Expert pools spin only briefly after a call: the next layer's work belongs to other threads (the context's, or
// the next layer's pool), which must not compete with spinning ones.
constexpr int64_t kPoolSpinNs = 20'000;

class EngineKernels final : public ops::KernelFactory {
public:
    EngineKernels(const EngineOptions &options, std::unique_ptr<ThreadPool> load_pool)
        : options_(options), load_pool_(std::move(load_pool)),
          ks_(cpu::best_kernel_set(cpu::active_isa_level())), name_(std::string("expert engine (") + ks_.name + ")") {}

    const char *name() const override { return name_.c_str(); }

    Status make_linear(const ops::MatrixView &w, const float *bias, std::unique_ptr<ops::Linear> *out) const override {
        return PackedLinear::create(w, bias, ks_, *load_pool_, out);
    }

    Status make_experts(const ops::MatrixStack &gate, const ops::MatrixStack &up, const ops::MatrixStack &down,
                        std::unique_ptr<ops::ExpertFfn> *out) const override {
        moe::MatrixSource g, u, d;
        KT_TRY(source_of(gate.first, gate.count, &g));
        KT_TRY(source_of(up.first, up.count, &u));
        KT_TRY(source_of(down.first, down.count, &d));
        moe::ExpertPoolConfig c;
        c.n_experts = gate.count;
        c.hidden = gate.first.cols;
        c.intermediate = gate.first.rows;
        c.max_tokens = options_.max_tokens;
        c.max_top_k = static_cast<int32_t>(std::min<int64_t>(kMaxTopK, gate.count));
        // One format for the three matrices: their own when the kernels read all three directly.
        const moe::TargetFormat tg = target_for(g.type), tu = target_for(u.type), td = target_for(d.type);
        c.format = tg == tu && tu == td ? tg : moe::TargetFormat::kInt8;
        c.n_threads = options_.n_threads;
        c.spin_ns = kPoolSpinNs;
        std::unique_ptr<moe::ExpertPool> pool;
        KT_TRY(Status(moe::ExpertPool::create(c, &pool)).with_context(gate.first.name));
        KT_TRY(Status(pool->load(g, u, d)).with_context(gate.first.name));
        *out = std::make_unique<PoolFfn>(std::move(pool), c.n_experts, c.hidden, c.intermediate, c.max_tokens);
        return Status::ok();
    }

private:
    EngineOptions options_;
    std::unique_ptr<ThreadPool> load_pool_;
    const cpu::KernelSet &ks_;
    std::string name_;
};

}  // namespace

Status create_engine_kernels(const EngineOptions &options, std::unique_ptr<ops::KernelFactory> *out) {
    std::unique_ptr<ThreadPool> load_pool;
    KT_TRY(mem::create_pinned_pool(options.n_threads, "kt-load", &load_pool));
    *out = std::make_unique<EngineKernels>(options, std::move(load_pool));
    return Status::ok();
}

}  // namespace kt::runtime
