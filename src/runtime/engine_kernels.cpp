#include "runtime/engine_kernels.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "mem/pinned_pool.h"
#include "moe/expert_pool.h"
#include "moe/linear.h"
#include "moe/packed_store.h"
#include "moe/weights.h"
#include "runtime/hybrid_ffn.h"

namespace kt::runtime {
namespace {

Status source_of(const ops::MatrixView &w, int64_t count, moe::MatrixSource *out) {
    KT_TRY(Status(moe::make_source(w.type, w.data, w.rows * count, w.cols, out)).with_context(w.name));
    // Every engine kernel packs its weights, so their pages in the file mapping are given back once packed.
    out->drop_after_packing = w.mapping;
    return Status::ok();
}

// ops::Linear over moe::PackedLinear: each calling thread keeps its own activation workspace (a model's Linears
// are shared by every context running it).
class EngineLinear final : public ops::Linear {
public:
    explicit EngineLinear(std::unique_ptr<moe::PackedLinear> linear) : linear_(std::move(linear)) {}

    int64_t in_features() const override { return linear_->in_features(); }
    int64_t out_features() const override { return linear_->out_features(); }

    Status forward(const float *x, int64_t n_tokens, float *y, ThreadPool &pool) const override {
        thread_local moe::PackedLinear::Workspace workspace;
        return linear_->forward(x, n_tokens, y, linear_->out_features(), &workspace, &pool);
    }

private:
    std::unique_ptr<moe::PackedLinear> linear_;
};

class PoolFfn final : public ops::ExpertFfn {
public:
    PoolFfn(std::unique_ptr<moe::ExpertPool> pool, int64_t n, int64_t hidden, int64_t intermediate, int64_t max_tokens)
        : pool_(std::move(pool)), n_(n), hidden_(hidden), intermediate_(intermediate), max_tokens_(max_tokens),
          counter_(n > 1 ? n : 0) {}

    int64_t n_experts() const override { return n_; }
    int64_t hidden() const override { return hidden_; }
    int64_t intermediate() const override { return intermediate_; }

    Status forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k, float *out,
                   ThreadPool &) const override {
        if (n_ > 1) counter_.add(ids, n_tokens * k);
        for (int64_t t0 = 0; t0 < n_tokens; t0 += max_tokens_) {
            moe::ForwardArgs args;
            args.n_tokens = std::min(max_tokens_, n_tokens - t0);
            args.top_k = static_cast<int32_t>(k);
            args.input = x + t0 * hidden_;
            args.ids = ids + t0 * k;
            args.weights = weights + t0 * k;
            args.output = out + t0 * hidden_;
            // The model loader and the router validated the arguments, but a job can still fail (memory, a
            // worker that could not start): the forward pass stops and the decode reports it.
            KT_TRY(pool_->forward(args));
        }
        return Status::ok();
    }

    bool activation_counts(std::vector<uint64_t> *out) const override {
        if (n_ <= 1) return false;  // a dense FFN or shared expert: nothing to place
        counter_.read(out);
        return true;
    }

private:
    std::unique_ptr<moe::ExpertPool> pool_;
    int64_t n_, hidden_, intermediate_, max_tokens_;
    mutable ActivationCounter counter_;
};

// The most experts per token any architecture here routes to (DeepSeek-V3, Qwen3: 8).
constexpr int32_t kMaxTopK = 16;
// Expert pools spin only briefly after a call: the next layer's work belongs to other threads (the context's, or
// the next layer's pool), which must not compete with spinning ones.
constexpr int64_t kPoolSpinNs = 20'000;

// "expert engine (avx512-vnni-bf16, prefetch l1)": the kernel set, and where its AVX-512 code prefetches weights
// (KT_PREFETCH) when it has any.
std::string engine_name(const cpu::KernelSet &ks) {
    std::string name = std::string("expert engine (") + ks.name;
    if (static_cast<int>(ks.level) >= static_cast<int>(cpu::IsaLevel::kAvx512))
        name += std::string(", prefetch ") + cpu::avx512_prefetch_name();
    return name + ")";
}

class EngineKernels final : public ops::KernelFactory {
public:
    EngineKernels(const EngineOptions &options, std::unique_ptr<ThreadPool> load_pool)
        : options_(options), load_pool_(std::move(load_pool)),
          ks_(cpu::best_kernel_set(cpu::active_isa_level())), name_(engine_name(ks_)) {
        if (options_.device && options_.plan && options_.deferred_experts > 0 && !options_.plan->layers.empty()) {
            int64_t last = 0;
            for (const device::LayerPlacement &l : options_.plan->layers) last = std::max(last, l.layer);
            chain_ = std::make_shared<DeferredChain>(options_.deferred_experts, last);
        }
    }

    const char *name() const override { return name_.c_str(); }

    Status make_linear(const ops::MatrixView &w, const float *bias, std::unique_ptr<ops::Linear> *out) const override {
        moe::MatrixSource src;
        KT_TRY(source_of(w, 1, &src));
        std::unique_ptr<moe::PackedLinear> linear;
        KT_TRY(Status(moe::PackedLinear::create(src, moe::TargetFormat::kAsSource, bias, ks_, load_pool_.get(), &linear,
                                                options_.store.get(), w.name))
                   .with_context(w.name));
        *out = std::make_unique<EngineLinear>(std::move(linear));
        return Status::ok();
    }

    Status make_experts(const ops::MatrixStack &gate, const ops::MatrixStack &up, const ops::MatrixStack &down,
                        const ops::ExpertOptions &options, std::unique_ptr<ops::ExpertFfn> *out) const override {
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
        c.format = moe::TargetFormat::kAsSource;  // each matrix in its own format, or the closest one with a kernel
        c.n_threads = options_.n_threads;
        c.spin_ns = kPoolSpinNs;
        c.swiglu.limit = options.swiglu_limit;
        c.swiglu.alpha = options.swiglu_alpha;
        const size_t gate_up = static_cast<size_t>(c.n_experts * c.intermediate), down_n = static_cast<size_t>(c.n_experts * c.hidden);
        if (options.gate_bias) c.gate_bias.assign(options.gate_bias, options.gate_bias + gate_up);
        if (options.up_bias) c.up_bias.assign(options.up_bias, options.up_bias + gate_up);
        if (options.down_bias) c.down_bias.assign(options.down_bias, options.down_bias + down_n);
        // A dense FFN or shared expert (one expert) runs on the device whenever the plan has them there (it counted
        // every one without biases). It stays there (nothing re-places it), so the host keeps no copy: no pool, and
        // the source pages go back once uploaded, as packing would have given them back.
        const bool dense_on_device = options_.device && options_.plan && options_.plan->n_dense > 0 && gate.count == 1 &&
                                     !options.gate_bias && !options.up_bias && !options.down_bias &&
                                     options.swiglu_limit <= 0.0f && options.swiglu_alpha <= 0.0f;
        if (dense_on_device) {
            std::unique_ptr<device::DeviceLayer> layer;
            KT_TRY(Status(options_.device->create_layer(device_layer_shape(options_, 1, c.hidden, c.intermediate), &layer))
                       .with_context(gate.first.name));
            KT_TRY(Status(layer->upload(0, gate.at(0), up.at(0), down.at(0))).with_context(gate.first.name));
            for (const moe::MatrixSource *src : {&g, &u, &d}) moe::drop_packed_rows(*src, 0, src->rows);
            auto hybrid = std::make_unique<HybridFfn>(nullptr, options_.device, std::move(layer), c.max_tokens,
                                                      nullptr, block_of(gate.first.name));
            KT_TRY(hybrid->init());
            *out = std::move(hybrid);
            return Status::ok();
        }
        std::unique_ptr<moe::ExpertPool> pool;
        KT_TRY(Status(moe::ExpertPool::create(c, &pool)).with_context(gate.first.name));
        const char *const names[3] = {gate.first.name, up.first.name, down.first.name};
        const device::LayerPlacement *placed =
            options_.device && options_.plan && gate.count > 1 ? options_.plan->find(block_of(gate.first.name)) : nullptr;
        // With deferred experts or streaming every planned layer is hybrid, even one with no experts on the device:
        // each MoE layer takes what the one before it deferred, and any may be streamed.
        const bool streaming = options_.prefill_threshold > 0;
        if (placed && (!placed->experts.empty() || chain_ || streaming)) {
            KT_RETURN_IF(options.gate_bias || options.up_bias || options.down_bias || options.swiglu_limit > 0.0f ||
                             options.swiglu_alpha > 0.0f,
                         KT_STATUS_UNSUPPORTED, "%s: the device computes plain SwiGLU experts only (no biases, no clamp)",
                         gate.first.name);
            const device::LayerShape shape = device_layer_shape(options_, c.n_experts, c.hidden, c.intermediate);
            std::unique_ptr<device::DeviceLayer> layer;
            KT_TRY(Status(options_.device->create_layer(shape, &layer)).with_context(gate.first.name));
            // Uploaded before the pool packs the layer: packing gives the mapping's pages back.
            for (int32_t e : placed->experts)
                KT_TRY(Status(layer->upload(e, gate.at(e), up.at(e), down.at(e))).with_context(gate.first.name));
            KT_TRY(Status(pool->load(g, u, d, 0, -1, options_.store.get(), names)).with_context(gate.first.name));
            auto hybrid = std::make_unique<HybridFfn>(std::move(pool), options_.device, std::move(layer), c.max_tokens,
                                                      chain_, placed->layer);
            hybrid->set_sources(gate, up, down);
            if (streaming) {
                std::shared_ptr<StreamBuffer> buffer;
                KT_TRY(Status(stream_buffer(&buffer)).with_context(gate.first.name));
                KT_TRY(hybrid->set_streaming(std::move(buffer), options_.prefill_threshold));
            }
            KT_TRY(hybrid->init());
            *out = std::move(hybrid);
            return Status::ok();
        }
        KT_TRY(Status(pool->load(g, u, d, 0, -1, options_.store.get(), names)).with_context(gate.first.name));
        *out = std::make_unique<PoolFfn>(std::move(pool), c.n_experts, c.hidden, c.intermediate, c.max_tokens);
        return Status::ok();
    }

private:
    // The model's stream buffer, made by the first layer that streams (its slots fill on first use).
    Status stream_buffer(std::shared_ptr<StreamBuffer> *out) const {
        std::lock_guard<std::mutex> lock(stream_mutex_);
        if (!stream_) {
            std::vector<std::unique_ptr<device::DeviceLayer>> slots(static_cast<size_t>(std::max(1, options_.stream_slots)));
            for (std::unique_ptr<device::DeviceLayer> &slot : slots)
                KT_TRY(Status(options_.device->create_layer(options_.stream_shape, &slot)).with_context("the stream buffer"));
            stream_ = std::make_shared<StreamBuffer>(options_.device, std::move(slots));
        }
        *out = stream_;
        return Status::ok();
    }

    EngineOptions options_;
    std::shared_ptr<DeferredChain> chain_;  // with options_.deferred_experts: shared by the hybrid layers
    mutable std::mutex stream_mutex_;
    mutable std::shared_ptr<StreamBuffer> stream_;  // with options_.prefill_threshold
    std::unique_ptr<ThreadPool> load_pool_;
    const cpu::KernelSet &ks_;
    std::string name_;
};

}  // namespace

device::LayerShape device_layer_shape(const EngineOptions &options, int64_t n_experts, int64_t hidden,
                                      int64_t intermediate) {
    device::LayerShape shape;
    shape.n_experts = n_experts;
    shape.hidden = hidden;
    shape.intermediate = intermediate;
    shape.max_tokens = options.max_tokens;
    shape.max_top_k = static_cast<int32_t>(std::min<int64_t>(kMaxTopK, n_experts));
    return shape;
}

int64_t block_of(const char *name) {
    if (!name || std::strncmp(name, "blk.", 4) != 0) return -1;
    int64_t v = 0;
    const char *p = name + 4;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; ++p) {
        v = v * 10 + (*p - '0');
        if (v > (int64_t{1} << 40)) return -1;
    }
    return *p == '.' ? v : -1;
}

Status create_engine_kernels(const EngineOptions &options, std::unique_ptr<ops::KernelFactory> *out) {
    cpu::warn_ignored_kernel_environment();
    std::unique_ptr<ThreadPool> load_pool;
    KT_TRY(mem::create_pinned_pool(options.n_threads, "kt-load", &load_pool));
    *out = std::make_unique<EngineKernels>(options, std::move(load_pool));
    return Status::ok();
}

}  // namespace kt::runtime
