// The hybrid MoE FFN: a layer's experts split between kt's CPU expert pool and a device.
//
// Once routing is known, forward() submits the CPU experts to the layer's moe::ExpertPool (whose mask skips the
// device-resident experts), then has the device compute its resident experts on the same tokens, waits for both
// and adds the device's sum into the pool's output. The two run at the same time: the pool on its executor's
// threads, the device on its own (the stand-in's thread, or the GPU's stream).
//
//   out[t] = Σ_{j: id not resident} w·expert(x[t])  (CPU, in the pool's order)  +  Σ_{j: resident} w·expert(x[t])  (device)
//
// so the result equals the all-CPU one up to the order of the sum and the device's BF16 arithmetic.
//
// With a DeferredChain (runtime/deferred_experts.h), the lowest-weighted CPU experts of each token are computed by a
// second job that the next MoE layer waits for and adds; this layer adds the one its predecessor deferred.
//
// With a StreamBuffer and a prefill threshold, a call of more tokens than the threshold (a long prompt's chunk) runs
// the whole layer on the device instead: the layer's experts are uploaded into the stream buffer, unless it holds
// them already, and the device computes every routed expert while the CPU pool rests. This is KTransformers' GPU
// prefill threshold: for a long prompt the device's arithmetic outweighs copying the layer's experts to it. Such a
// call defers nothing (it has no CPU experts), but still adds what the layer before it deferred. With a buffer of
// two slots, the next streaming layer's experts are uploaded into the other slot as the call returns, on the
// buffer's thread, while the model goes on to that layer's attention.
//
// begin_forward() / finish_forward() split a call so that the caller's own work runs while it is in flight: the model
// starts a layer's shared expert (a one-expert HybridFfn, all on the device) before the routed experts and ends it
// after them, so the device computes the shared expert while the CPU computes the routed ones.
//
// Each call's CPU job interval and device interval are recorded: the statistics say how long each side worked and
// how much of it was hidden by the other (the intersection of the two intervals).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"
#include "device/device.h"
#include "moe/expert_pool.h"
#include "ops/linear.h"
#include "runtime/deferred_experts.h"

namespace kt::runtime {

// Counts (token, slot) routings per expert; shared by the engine's expert FFNs.
class ActivationCounter {
public:
    explicit ActivationCounter(int64_t n) : counts_(static_cast<size_t>(n)) {}
    void add(const int32_t *ids, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
            if (ids[i] >= 0 && ids[i] < static_cast<int32_t>(counts_.size()))
                counts_[static_cast<size_t>(ids[i])].fetch_add(1, std::memory_order_relaxed);
    }
    void read(std::vector<uint64_t> *out) const {
        out->resize(counts_.size());
        for (size_t e = 0; e < counts_.size(); ++e) (*out)[e] = counts_[e].load(std::memory_order_relaxed);
    }

private:
    std::vector<std::atomic<uint64_t>> counts_;
};

// The device memory that holds MoE layers' experts (gate, up, down as BF16, like resident experts) for the calls
// above the prefill threshold, in one or two slots of one layer each. Shared by the hybrid layers of a model; one
// call at a time uses it. With two slots, a streamed call of layer L, once done, has the buffer's own thread upload
// the next streaming layer's experts into the other slot, while the caller goes on (the next layer's attention on
// the CPU, as a long prompt streams the layers in order) and the device with it (uploads do not wait for the
// device's calls): the next layer's call then finds its experts there, or waits only for the rest of their upload.
class StreamBuffer {
public:
    // `slots` (one or two) have the shape of the model's MoE layers (n_experts experts each); `device` is kept
    // alive with them.
    StreamBuffer(std::shared_ptr<device::Device> device, std::vector<std::unique_ptr<device::DeviceLayer>> slots);
    StreamBuffer(std::shared_ptr<device::Device> device, std::unique_ptr<device::DeviceLayer> slot);
    ~StreamBuffer();  // stops the upload thread (after the upload it is doing, if any)
    StreamBuffer(const StreamBuffer &) = delete;
    StreamBuffer &operator=(const StreamBuffer &) = delete;
    const device::LayerShape &shape() const { return slots_.front().layer->shape(); }
    int64_t slots() const { return static_cast<int64_t>(slots_.size()); }
    // Device bytes one slot holds once filled (it is allocated the first time it is filled, then reused).
    static uint64_t bytes_for(const device::LayerShape &shape) {
        return static_cast<uint64_t>(shape.n_experts) * device::expert_bytes(shape.hidden, shape.intermediate);
    }

private:
    friend class HybridFfn;
    struct Slot {
        std::unique_ptr<device::DeviceLayer> layer;
        uint64_t holder = 0;       // the stream id of the hybrid layer whose experts it holds; 0: none (or incomplete)
        bool uploaded_ahead = false;  // the holder's experts came from the upload thread, not yet found by its call
        int64_t ahead_ns = 0;      // and how long that upload took
    };
    // A hybrid layer streaming through this buffer, as the upload thread needs it (set_streaming registers it, its
    // destructor takes it out).
    struct Member {
        int64_t model_layer = -1;
        uint64_t stream_id = 0;
        int64_t n_experts = 0;
        ops::MatrixStack gate, up, down;
    };
    // Under mutex_: the slot holding `stream_id`, else the one to fill for it (not the one used last).
    Slot &slot_for(uint64_t stream_id);
    // Under mutex_: the member after model layer `layer` in model order, or null (also with one slot).
    const Member *next_after(int64_t layer) const;
    const Member *member(uint64_t stream_id) const;
    void upload_thread();

    std::shared_ptr<device::Device> device_;  // declared first: the slots' memory goes back before the device goes
    std::mutex mutex_;
    std::condition_variable cv_;  // a request for the upload thread, or its upload done
    std::vector<Slot> slots_;
    size_t last_used_ = 0;
    std::vector<Member> members_;  // by model layer
    Slot *ahead_slot_ = nullptr;   // the upload thread's request (or upload in progress): this slot,
    uint64_t ahead_id_ = 0;        // this member's experts
    bool stop_ = false;
    std::thread thread_;           // with two slots
};

struct HybridStats {
    int64_t calls = 0;          // chunks of at most max_tokens tokens
    int64_t cpu_ns = 0;         // the pool's jobs, begin to end
    int64_t device_ns = 0;      // the device's work, begin to end
    int64_t overlap_ns = 0;     // time both were working: the part of the shorter side hidden behind the other
    int64_t wall_ns = 0;        // from the first submission to both results, per call, summed
    int64_t cpu_rows = 0, device_rows = 0;  // (token, slot) pairs computed on each side, at once
    int64_t deferred_rows = 0;              // CPU pairs deferred to the next MoE layer (not in cpu_rows)
    int64_t streamed_calls = 0;    // forward calls above the prefill threshold: the whole layer on the device
    int64_t stream_uploads = 0;    // of those, the ones that uploaded the layer's experts into the stream buffer
    int64_t stream_upload_ns = 0;  // the uploads' time, on the calling thread (not overlapped with anything)
    uint64_t stream_bytes = 0;     // device bytes uploaded by them
    int64_t stream_ahead_calls = 0;     // streamed calls that found their experts uploaded ahead by the buffer's thread
    int64_t stream_ahead_ns = 0;        // those uploads' time (on that thread)
    int64_t stream_ahead_wait_ns = 0;   // how long the calls waited for an upload ahead to finish
    int64_t begun_calls = 0;       // calls left in flight by begin_forward() while the caller worked (shared experts)
    int64_t begun_hidden_ns = 0;   // of their device work, the part done before finish_forward() was called
    // Of the last call (for tests): the two intervals on the monotonic_ns clock.
    moe::JobTimes last_cpu;
    device::Interval last_device;

    // Adds another layer's totals (the last call's intervals stay this one's: they are not totals).
    void add(const HybridStats &o) {
        calls += o.calls;
        cpu_ns += o.cpu_ns;
        device_ns += o.device_ns;
        overlap_ns += o.overlap_ns;
        wall_ns += o.wall_ns;
        cpu_rows += o.cpu_rows;
        device_rows += o.device_rows;
        deferred_rows += o.deferred_rows;
        streamed_calls += o.streamed_calls;
        stream_uploads += o.stream_uploads;
        stream_upload_ns += o.stream_upload_ns;
        stream_bytes += o.stream_bytes;
        stream_ahead_calls += o.stream_ahead_calls;
        stream_ahead_ns += o.stream_ahead_ns;
        stream_ahead_wait_ns += o.stream_ahead_wait_ns;
        begun_calls += o.begun_calls;
        begun_hidden_ns += o.begun_hidden_ns;
    }
};

class HybridFfn final : public ops::ExpertFfn {
public:
    // `pool` holds every expert (its mask is set here to skip the layer's resident ones); `layer` the resident
    // experts, uploaded. `device` keeps the layer's device alive. With `chain`, this is MoE layer `model_layer` of
    // the chain's model and defers experts as the chain says.
    // A null pool: every expert of the layer stays on the device (a dense FFN or shared expert there), so the host
    // holds no copy of its weights; such a layer has no sources, no chain and no streaming.
    HybridFfn(std::unique_ptr<moe::ExpertPool> pool, std::shared_ptr<device::Device> device,
              std::unique_ptr<device::DeviceLayer> layer, int64_t max_tokens,
              std::shared_ptr<DeferredChain> chain = nullptr, int64_t model_layer = -1);
    ~HybridFfn() override;
    Status init();  // sets the pool's mask; without a pool, checks that every expert is resident

    int64_t n_experts() const override { return n_; }
    int64_t hidden() const override { return hidden_; }
    int64_t intermediate() const override { return intermediate_; }
    Status forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k, float *out,
                   ThreadPool &pool) const override;
    // A call of at most max_tokens tokens, without deferring or streaming, returns from begin_forward() with its
    // CPU job and device work in flight (a shared expert on the device runs while the routed experts run); any
    // other call runs whole in begin_forward(). The layer stays locked to the caller until finish_forward().
    Status begin_forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                         float *out, ThreadPool &pool) const override;
    Status finish_forward() const override;
    bool activation_counts(std::vector<uint64_t> *out) const override {
        counter_.read(out);
        return true;
    }

    // Where replace() uploads experts from: the layer's stacks of gate, up and down matrices (as make_experts got
    // them; they must outlive this FFN). Without them replace() refuses.
    void set_sources(const ops::MatrixStack &gate, const ops::MatrixStack &up, const ops::MatrixStack &down);
    // Re-places the layer without a reload: the resident experts not in `experts` leave the device, those in it
    // not yet there are uploaded, and the CPU pool's mask follows, between two calls (a running call finishes
    // first). On failure the experts already moved stay moved and the split stays complete (the mask is the
    // device's resident set whatever happened).
    Status replace(const std::vector<int32_t> &experts);
    // Calls of more than `threshold` tokens (> 0) run the whole layer on the device, through `buffer` (whose shape
    // must be this layer's), uploading from the sources set_sources() gave; with two slots, such a call then has
    // the next streaming layer's experts (by model_layer) uploaded ahead. Before the first forward, once.
    Status set_streaming(std::shared_ptr<StreamBuffer> buffer, int64_t threshold);

    HybridStats stats() const;
    // Host bytes of this layer's packed CPU weights: every expert's, the device-resident ones too (replace() may
    // move them back). 0 without a pool.
    uint64_t host_weight_bytes() const { return pool_ ? pool_->info().weight_bytes : 0; }
    int64_t model_layer() const { return model_layer_; }
    const device::DeviceLayer &layer() const { return *layer_; }
    const DeferredChain *chain() const { return chain_.get(); }  // null without deferred experts
    // Tests: called on the pool's driver thread as each CPU job begins.
    void set_cpu_begin_hook(std::function<void()> hook) { cpu_begin_hook_ = std::move(hook); }

private:
    // One chunk's work in flight, from begin_chunk() to finish_chunk(), under mutex_.
    struct Chunk {
        int64_t n_tokens = 0, start_ns = 0, cpu_rows = 0, device_rows = 0;
        int64_t begun_ns = 0;  // when begin_forward() returned it to its caller; 0: a chunk of forward()
        float *out = nullptr;
        uint64_t ticket = 0;  // the CPU job; 0: none
        moe::JobTimes cpu_times;
        device::Event event;  // the device's call; ticket 0: none
        Status device_status;
    };
    // Whether a call of n_tokens runs the whole layer on the device from the stream buffer.
    bool streams(int64_t n_tokens) const { return stream_ && n_tokens > prefill_threshold_; }
    Status forward_locked(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                          float *out) const;
    // Submits the CPU experts, then the device's, of one chunk (T <= max_tokens). A failure leaves nothing in
    // flight; once it succeeded, finish_chunk() must follow.
    Status begin_chunk(const float *x, int64_t T, const int32_t *ids, const float *weights, int64_t k,
                       float *out) const;
    // Waits for both, adds the device's sum into the output and counts the chunk.
    Status finish_chunk() const;
    Status forward_chunks(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                          float *out) const;
    Status forward_streamed(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                            float *out) const;

    // Declared before the pool: the pool, destroyed first, waits for its jobs, which may write into the chain.
    std::shared_ptr<DeferredChain> chain_;
    int64_t model_layer_;
    std::unique_ptr<moe::ExpertPool> pool_;
    std::shared_ptr<device::Device> device_;
    std::unique_ptr<device::DeviceLayer> layer_;
    int64_t n_, hidden_, intermediate_, max_tokens_;
    mutable std::mutex mutex_;  // one forward at a time: the device layer and dev_out_ are per layer
    mutable Chunk chunk_;
    mutable bool chunk_pending_ = false;  // begin_forward() left chunk_ in flight
    mutable std::vector<float> dev_out_;  // [max_tokens][H]: the device's result, copied back to the host
    mutable std::vector<int32_t> immediate_ids_, deferred_ids_;  // [max_tokens][k] with a chain
    bool have_sources_ = false;
    ops::MatrixStack gate_src_, up_src_, down_src_;
    std::shared_ptr<StreamBuffer> stream_;
    int64_t prefill_threshold_ = 0;
    uint64_t stream_id_;  // this layer's identity in the stream buffer (unique in the process)
    mutable ActivationCounter counter_;
    mutable HybridStats stats_;
    std::function<void()> cpu_begin_hook_;
    const FunctionRef<void()> cpu_begin_ref_{cpu_begin_hook_};  // what a CPU job calls (only when the hook is set)
};

}  // namespace kt::runtime
