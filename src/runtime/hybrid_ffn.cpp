#include "runtime/hybrid_ffn.h"

#include <algorithm>
#include <atomic>
#include <utility>

namespace kt::runtime {
namespace {

uint64_t next_stream_id() {
    static std::atomic<uint64_t> last{0};
    return ++last;
}

// Every expert of one layer into `layer` (a stream buffer slot).
Status upload_all(device::DeviceLayer &layer, int64_t n_experts, const ops::MatrixStack &gate,
                  const ops::MatrixStack &up, const ops::MatrixStack &down, int64_t model_layer) {
    for (int64_t e = 0; e < n_experts; ++e)
        KT_TRY(Status(layer.upload(e, gate.at(e), up.at(e), down.at(e)))
                   .with_context(format("hybrid layer %lld: streaming expert %lld to the device",
                                        static_cast<long long>(model_layer), static_cast<long long>(e))));
    return Status::ok();
}

}  // namespace

StreamBuffer::StreamBuffer(std::shared_ptr<device::Device> device, std::vector<std::unique_ptr<device::DeviceLayer>> slots)
    : device_(std::move(device)) {
    for (std::unique_ptr<device::DeviceLayer> &layer : slots) slots_.push_back(Slot{std::move(layer), 0, false, 0});
    if (slots_.size() > 1) thread_ = std::thread([this] { upload_thread(); });
}

StreamBuffer::StreamBuffer(std::shared_ptr<device::Device> device, std::unique_ptr<device::DeviceLayer> slot)
    : device_(std::move(device)) {
    slots_.push_back(Slot{std::move(slot), 0, false, 0});
}

StreamBuffer::~StreamBuffer() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

// One request at a time, uploaded under mutex_: a streamed call that comes meanwhile waits for it (it may be the
// call that needs these experts), and a layer leaving the buffer waits before its sources may go.
void StreamBuffer::upload_thread() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        cv_.wait(lock, [&] { return stop_ || ahead_slot_; });
        if (stop_) return;
        Slot &slot = *ahead_slot_;
        const Member *m = member(ahead_id_);
        if (m && slot.holder != m->stream_id) {
            const int64_t start = monotonic_ns();
            slot.holder = 0;
            slot.uploaded_ahead = false;
            // A failure is the layer's own call to report: it finds the slot incomplete and uploads again.
            if (upload_all(*slot.layer, m->n_experts, m->gate, m->up, m->down, m->model_layer).is_ok()) {
                slot.holder = m->stream_id;
                slot.uploaded_ahead = true;
                slot.ahead_ns = monotonic_ns() - start;
            }
        }
        ahead_slot_ = nullptr;
        ahead_id_ = 0;
        cv_.notify_all();
    }
}

StreamBuffer::Slot &StreamBuffer::slot_for(uint64_t stream_id) {
    for (Slot &slot : slots_)
        if (slot.holder == stream_id) return slot;
    return slots_.size() > 1 ? slots_[1 - last_used_] : slots_.front();
}

const StreamBuffer::Member *StreamBuffer::member(uint64_t stream_id) const {
    for (const Member &m : members_)
        if (m.stream_id == stream_id) return &m;
    return nullptr;
}

const StreamBuffer::Member *StreamBuffer::next_after(int64_t layer) const {
    if (slots_.size() < 2) return nullptr;
    for (const Member &m : members_)
        if (m.model_layer > layer) return &m;
    return nullptr;
}

HybridFfn::HybridFfn(std::unique_ptr<moe::ExpertPool> pool, std::shared_ptr<device::Device> device,
                     std::unique_ptr<device::DeviceLayer> layer, int64_t max_tokens,
                     std::shared_ptr<DeferredChain> chain, int64_t model_layer)
    : chain_(std::move(chain)), model_layer_(model_layer), pool_(std::move(pool)), device_(std::move(device)),
      layer_(std::move(layer)), n_(layer_->shape().n_experts), hidden_(layer_->shape().hidden),
      intermediate_(layer_->shape().intermediate), max_tokens_(max_tokens),
      dev_out_(static_cast<size_t>(max_tokens * layer_->shape().hidden)), stream_id_(next_stream_id()),
      counter_(layer_->shape().n_experts) {}

HybridFfn::~HybridFfn() {
    if (stream_) {
        std::lock_guard<std::mutex> lock(stream_->mutex_);
        std::vector<StreamBuffer::Member> &members = stream_->members_;
        members.erase(std::remove_if(members.begin(), members.end(),
                                     [&](const StreamBuffer::Member &m) { return m.stream_id == stream_id_; }),
                      members.end());
    }
    // The layer's device memory goes back before the device itself (held by device_) may go.
    layer_.reset();
}

Status HybridFfn::init() {
    if (pool_) {
        const moe::ExpertPoolConfig &c = pool_->config();
        KT_RETURN_IF(c.n_experts != n_ || c.hidden != hidden_ || c.intermediate != intermediate_, KT_STATUS_INTERNAL,
                     "hybrid layer %lld: the CPU pool's shape is not the device layer's",
                     static_cast<long long>(model_layer_));
        return pool_->set_mask(layer_->resident_mask().data(), n_);
    }
    KT_RETURN_IF(layer_->n_resident() != n_ || chain_, KT_STATUS_INTERNAL,
                 "hybrid layer %lld: without a CPU pool every expert must be on the device (%lld of %lld are), and "
                 "nothing can be deferred", static_cast<long long>(model_layer_),
                 static_cast<long long>(layer_->n_resident()), static_cast<long long>(n_));
    return Status::ok();
}

Status HybridFfn::forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                          float *out, ThreadPool &) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return forward_locked(x, n_tokens, ids, weights, k, out);
}

Status HybridFfn::begin_forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                                float *out, ThreadPool &) const {
    // Locked here and unlocked in finish_forward() (the same thread, as ExpertFfn's contract says): the chunk in
    // flight owns the device layer, dev_out_ and chunk_ until then.
    mutex_.lock();
    const bool in_flight = !chain_ && !streams(n_tokens) && n_tokens <= max_tokens_;
    Status s;
    if (in_flight) {
        counter_.add(ids, n_tokens * k);
        s = begin_chunk(x, n_tokens, ids, weights, k, out);
    } else {
        s = forward_locked(x, n_tokens, ids, weights, k, out);
    }
    chunk_pending_ = in_flight && s.is_ok();
    if (chunk_pending_) chunk_.begun_ns = monotonic_ns();
    if (!s.is_ok()) mutex_.unlock();
    return s;
}

Status HybridFfn::finish_forward() const {
    const Status s = chunk_pending_ ? finish_chunk() : Status::ok();
    chunk_pending_ = false;
    mutex_.unlock();
    return s;
}

Status HybridFfn::forward_locked(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights,
                                 int64_t k, float *out) const {
    counter_.add(ids, n_tokens * k);  // every routing, deferred or not
    const bool streamed = streams(n_tokens);
    if (!chain_) return streamed ? forward_streamed(x, n_tokens, ids, weights, k, out)
                                 : forward_chunks(x, n_tokens, ids, weights, k, out);
    const bool deferring = !streamed && chain_->defers_in(model_layer_) && n_tokens <= max_tokens_;
    int64_t n_deferred = 0;
    if (deferring) {
        const size_t slots = static_cast<size_t>(n_tokens * k);
        immediate_ids_.resize(slots);
        deferred_ids_.resize(slots);
        n_deferred = split_deferred(ids, weights, n_tokens, static_cast<int32_t>(k), chain_->max_deferred(), n_,
                                    layer_->resident_mask(), immediate_ids_.data(), deferred_ids_.data());
    }
    Status s = streamed ? forward_streamed(x, n_tokens, ids, weights, k, out)
                        : forward_chunks(x, n_tokens, n_deferred > 0 ? immediate_ids_.data() : ids, weights, k, out);
    // What the previous MoE layer deferred lands here; then this layer's deferred slots are queued for the next.
    if (s.is_ok()) s = chain_->absorb(model_layer_, n_tokens, hidden_, out);
    if (s.is_ok() && n_deferred > 0)
        s = chain_->defer(model_layer_, *pool_, x, n_tokens, hidden_, static_cast<int32_t>(k), deferred_ids_.data(),
                          weights);
    if (!s.is_ok()) {
        chain_->drop();
        return s;
    }
    stats_.deferred_rows += n_deferred;
    return Status::ok();
}

Status HybridFfn::forward_chunks(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                                 float *out) const {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += max_tokens_) {
        const int64_t T = std::min(max_tokens_, n_tokens - t0);
        KT_TRY(begin_chunk(x + t0 * hidden_, T, ids + t0 * k, weights + t0 * k, k, out + t0 * hidden_));
        KT_TRY(finish_chunk());
    }
    return Status::ok();
}

Status HybridFfn::begin_chunk(const float *x, int64_t T, const int32_t *ids, const float *weights, int64_t k,
                              float *out) const {
    Chunk &c = chunk_;
    c = Chunk{};
    c.n_tokens = T;
    c.out = out;
    for (int64_t i = 0; i < T * k; ++i) {
        if (ids[i] < 0) continue;
        if (layer_->resident(ids[i])) ++c.device_rows;
        else ++c.cpu_rows;
    }
    c.start_ns = monotonic_ns();

    // 1. The CPU experts, queued on the pool's executor.
    KT_RETURN_IF(c.cpu_rows > 0 && !pool_, KT_STATUS_INTERNAL,
                 "hybrid layer %lld: %lld rows route to experts off the device, and the host holds no copy of them",
                 static_cast<long long>(model_layer_), static_cast<long long>(c.cpu_rows));
    if (c.cpu_rows > 0) {
        moe::ForwardArgs args;
        args.n_tokens = T;
        args.top_k = static_cast<int32_t>(k);
        args.input = x;
        args.ids = ids;
        args.weights = weights;
        args.output = out;
        args.times = &c.cpu_times;
        if (cpu_begin_hook_) args.on_begin = &cpu_begin_ref_;
        KT_TRY(pool_->submit(args, &c.ticket));
    } else {
        std::fill(out, out + T * hidden_, 0.0f);
    }
    // 2. Meanwhile, the device's experts. A failure here is finish_chunk's to report: the CPU job is in flight.
    if (c.device_rows > 0) {
        device::ExpertWork work;
        work.n_tokens = T;
        work.top_k = static_cast<int32_t>(k);
        work.input = x;
        work.ids = ids;
        work.weights = weights;
        work.output = dev_out_.data();
        c.device_status = layer_->submit(work, &c.event);
    }
    return Status::ok();
}

Status HybridFfn::finish_chunk() const {
    Chunk &c = chunk_;
    const int64_t T = c.n_tokens, H = hidden_;
    const int64_t called_ns = monotonic_ns();
    // 3. Both results; the CPU job is waited for even when the device failed (it writes the output).
    const Status cpu_status = c.ticket ? pool_->wait(c.ticket) : Status::ok();
    device::Interval dev_times;
    Status dev_status = c.device_status;
    if (c.device_rows > 0 && dev_status.is_ok()) dev_status = layer_->wait(c.event, &dev_times);
    KT_TRY(cpu_status);
    KT_TRY(std::move(dev_status).with_context("device experts"));
    if (c.device_rows > 0)
        for (int64_t i = 0; i < T * H; ++i) c.out[i] += dev_out_[static_cast<size_t>(i)];

    ++stats_.calls;
    stats_.wall_ns += monotonic_ns() - c.start_ns;
    stats_.cpu_rows += c.cpu_rows;
    stats_.device_rows += c.device_rows;
    const int64_t cpu_ns = c.ticket ? std::max<int64_t>(0, c.cpu_times.end_ns - c.cpu_times.begin_ns) : 0;
    stats_.cpu_ns += cpu_ns;
    stats_.device_ns += dev_times.ns();
    if (c.ticket && c.device_rows > 0) {
        const int64_t both = std::min(c.cpu_times.end_ns, dev_times.end_ns) -
                             std::max(c.cpu_times.begin_ns, dev_times.begin_ns);
        stats_.overlap_ns += std::max<int64_t>(0, both);
    }
    if (c.begun_ns > 0) {  // the device's work between begin_forward()'s return and this call ran beside the caller's
        ++stats_.begun_calls;
        stats_.begun_hidden_ns += std::max<int64_t>(0, std::min(dev_times.end_ns, called_ns) -
                                                           std::max(dev_times.begin_ns, c.begun_ns));
    }
    stats_.last_cpu = c.ticket ? c.cpu_times : moe::JobTimes{};
    stats_.last_device = dev_times;
    return Status::ok();
}

Status HybridFfn::forward_streamed(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights,
                                   int64_t k, float *out) const {
    const int64_t H = hidden_;
    std::unique_lock<std::mutex> lock(stream_->mutex_);
    // An upload ahead, queued or running, finishes first: most often it is this layer's, and it may fill the slot
    // this call would take.
    const int64_t arrived = monotonic_ns();
    stream_->cv_.wait(lock, [&] { return !stream_->ahead_slot_; });
    const int64_t waited = monotonic_ns() - arrived;
    StreamBuffer::Slot &slot = stream_->slot_for(stream_id_);
    if (slot.holder == stream_id_ && slot.uploaded_ahead) {
        ++stats_.stream_ahead_calls;
        stats_.stream_ahead_ns += slot.ahead_ns;
        stats_.stream_ahead_wait_ns += waited;
        slot.uploaded_ahead = false;
    }
    if (slot.holder != stream_id_) {
        const int64_t start = monotonic_ns();
        slot.holder = 0;  // none until all of this layer's experts are in (a failed upload leaves a mix)
        slot.uploaded_ahead = false;
        KT_TRY(upload_all(*slot.layer, n_, gate_src_, up_src_, down_src_, model_layer_));
        slot.holder = stream_id_;
        ++stats_.stream_uploads;
        stats_.stream_upload_ns += monotonic_ns() - start;
        stats_.stream_bytes += static_cast<uint64_t>(n_) * device::expert_bytes(hidden_, intermediate_);
    }
    stream_->last_used_ = static_cast<size_t>(&slot - stream_->slots_.data());
    for (int64_t t0 = 0; t0 < n_tokens; t0 += max_tokens_) {
        const int64_t T = std::min(max_tokens_, n_tokens - t0);
        const int64_t start = monotonic_ns();
        device::ExpertWork work;
        work.n_tokens = T;
        work.top_k = static_cast<int32_t>(k);
        work.input = x + t0 * H;
        work.ids = ids + t0 * k;
        work.weights = weights + t0 * k;
        work.output = out + t0 * H;  // overwritten, zeros for a token without experts
        device::Event event;
        device::Interval when;
        KT_TRY(Status(slot.layer->submit(work, &event)).with_context("streamed experts"));
        KT_TRY(Status(slot.layer->wait(event, &when)).with_context("streamed experts"));
        for (int64_t i = 0; i < T * k; ++i) stats_.device_rows += work.ids[i] >= 0 ? 1 : 0;
        ++stats_.calls;
        stats_.device_ns += when.ns();
        stats_.wall_ns += monotonic_ns() - start;
        stats_.last_cpu = moe::JobTimes{};
        stats_.last_device = when;
    }
    ++stats_.streamed_calls;
    // The next streaming layer's experts, unless the other slot holds them: uploaded by the buffer's thread once
    // this call has let go of the buffer, while the model computes that layer's attention.
    if (const StreamBuffer::Member *next = stream_->next_after(model_layer_)) {
        StreamBuffer::Slot &other = stream_->slot_for(next->stream_id);
        if (&other != &slot && other.holder != next->stream_id) {
            stream_->ahead_slot_ = &other;
            stream_->ahead_id_ = next->stream_id;
            stream_->cv_.notify_all();
        }
    }
    return Status::ok();
}

Status HybridFfn::set_streaming(std::shared_ptr<StreamBuffer> buffer, int64_t threshold) {
    std::lock_guard<std::mutex> lock(mutex_);
    KT_RETURN_IF(!buffer || threshold <= 0, KT_STATUS_INVALID_ARGUMENT,
                 "hybrid layer %lld: streaming needs a buffer and a threshold > 0", static_cast<long long>(model_layer_));
    KT_RETURN_IF(!have_sources_, KT_STATUS_INVALID_ARGUMENT, "hybrid layer %lld: no source weights to stream from",
                 static_cast<long long>(model_layer_));
    const device::LayerShape &s = buffer->shape();
    KT_RETURN_IF(s.n_experts < n_ || s.hidden != hidden_ || s.intermediate != intermediate_ || s.max_tokens < max_tokens_,
                 KT_STATUS_UNSUPPORTED,
                 "hybrid layer %lld: %lld experts of %lld x %lld do not fit the stream buffer's %lld of %lld x %lld "
                 "(the MoE layers of a model must have one shape)",
                 static_cast<long long>(model_layer_), static_cast<long long>(n_), static_cast<long long>(intermediate_),
                 static_cast<long long>(hidden_), static_cast<long long>(s.n_experts),
                 static_cast<long long>(s.intermediate), static_cast<long long>(s.hidden));
    KT_RETURN_IF(stream_, KT_STATUS_INVALID_ARGUMENT, "hybrid layer %lld: streaming is set already",
                 static_cast<long long>(model_layer_));
    {
        std::lock_guard<std::mutex> buffer_lock(buffer->mutex_);
        std::vector<StreamBuffer::Member> &members = buffer->members_;
        const StreamBuffer::Member me{model_layer_, stream_id_, n_, gate_src_, up_src_, down_src_};
        members.insert(std::upper_bound(members.begin(), members.end(), me,
                                        [](const StreamBuffer::Member &a, const StreamBuffer::Member &b) {
                                            return a.model_layer < b.model_layer;
                                        }),
                       me);
    }
    stream_ = std::move(buffer);
    prefill_threshold_ = threshold;
    return Status::ok();
}

void HybridFfn::set_sources(const ops::MatrixStack &gate, const ops::MatrixStack &up, const ops::MatrixStack &down) {
    std::lock_guard<std::mutex> lock(mutex_);
    gate_src_ = gate;
    up_src_ = up;
    down_src_ = down;
    have_sources_ = true;
}

Status HybridFfn::replace(const std::vector<int32_t> &experts) {
    std::lock_guard<std::mutex> lock(mutex_);
    KT_RETURN_IF(!have_sources_, KT_STATUS_INVALID_ARGUMENT, "hybrid layer %lld: no source weights to upload from",
                 static_cast<long long>(model_layer_));
    KT_RETURN_IF(!pool_, KT_STATUS_INVALID_ARGUMENT,
                 "hybrid layer %lld: the layer lives on the device only (the host holds no copy to move it back to)",
                 static_cast<long long>(model_layer_));
    std::vector<uint8_t> wanted(static_cast<size_t>(n_), 0);
    for (int32_t e : experts) {
        KT_RETURN_IF(e < 0 || e >= n_, KT_STATUS_INVALID_ARGUMENT, "hybrid layer %lld: expert %d out of range",
                     static_cast<long long>(model_layer_), e);
        wanted[static_cast<size_t>(e)] = 1;
    }
    // Leaving experts first, so that the new ones fit a budget the old ones filled.
    Status s;
    for (int64_t e = 0; e < n_ && s.is_ok(); ++e)
        if (layer_->resident(e) && !wanted[static_cast<size_t>(e)]) s = layer_->evict(e);
    for (int64_t e = 0; e < n_ && s.is_ok(); ++e)
        if (wanted[static_cast<size_t>(e)] && !layer_->resident(e))
            s = layer_->upload(e, gate_src_.at(e), up_src_.at(e), down_src_.at(e));
    const Status mask = pool_ ? pool_->set_mask(layer_->resident_mask().data(), n_) : Status::ok();
    KT_TRY(Status(s).with_context(format("hybrid layer %lld", static_cast<long long>(model_layer_))));
    return mask;
}

HybridStats HybridFfn::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

}  // namespace kt::runtime
