#include "runtime/deferred_experts.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"

namespace kt::runtime {

int64_t split_deferred(const int32_t *ids, const float *weights, int64_t n_tokens, int32_t k, int32_t max_deferred,
                       int64_t n_experts, const std::vector<uint8_t> &resident, int32_t *immediate, int32_t *deferred) {
    auto valid = [&](int32_t e) { return e >= 0 && e < n_experts; };
    // Every token keeps at least its highest-weighted expert immediate.
    const int32_t protect = std::max<int32_t>(1, k - max_deferred);
    std::vector<uint8_t> is_protected(static_cast<size_t>(n_experts), 0);
    std::vector<int32_t> order(static_cast<size_t>(k));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const int32_t *tid = ids + t * k;
        const float *tw = weights + t * k;
        int32_t n = 0;
        for (int32_t j = 0; j < k; ++j)
            if (valid(tid[j])) order[static_cast<size_t>(n++)] = j;
        // Highest weight first; equal weights in slot order.
        std::stable_sort(order.begin(), order.begin() + n, [&](int32_t a, int32_t b) { return tw[a] > tw[b]; });
        for (int32_t r = 0; r < std::min(n, protect); ++r)
            is_protected[static_cast<size_t>(tid[order[static_cast<size_t>(r)]])] = 1;
    }
    int64_t n_deferred = 0;
    for (int64_t i = 0; i < n_tokens * k; ++i) {
        const int32_t e = ids[i];
        immediate[i] = deferred[i] = -1;
        if (!valid(e)) continue;
        const bool on_device = !resident.empty() && resident[static_cast<size_t>(e)];
        if (on_device || is_protected[static_cast<size_t>(e)]) {
            immediate[i] = e;
        } else {
            deferred[i] = e;
            ++n_deferred;
        }
    }
    return n_deferred;
}

std::unique_ptr<DeferredChain::Job> DeferredChain::take() {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(std::this_thread::get_id());
    if (it == pending_.end()) return nullptr;
    std::unique_ptr<Job> job = std::move(it->second);
    pending_.erase(it);
    return job;
}

void DeferredChain::recycle(std::unique_ptr<Job> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (spare_.size() < 8) spare_.push_back(std::move(job));
}

Status DeferredChain::absorb(int64_t layer, int64_t n_tokens, int64_t hidden, float *out) {
    std::unique_ptr<Job> job = take();
    if (!job) return Status::ok();
    // Waited for even when stale: its buffers are about to be reused.
    const int64_t wait_begin = monotonic_ns();
    const Status s = job->pool->wait(job->ticket);
    const bool current = job->layer < layer && job->n_tokens == n_tokens;
    if (s.is_ok() && current) {
        const float *d = job->output.data();
        for (int64_t i = 0; i < n_tokens * hidden; ++i) out[i] += d[i];
        const moe::JobTimes &t = job->times;
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.jobs;
        stats_.ns += std::max<int64_t>(0, t.end_ns - t.begin_ns);
        stats_.hidden_ns += std::max<int64_t>(0, std::min(t.end_ns, wait_begin) - t.begin_ns);
    }
    recycle(std::move(job));
    // A stale job's failure belongs to the pass that failed before; this pass goes on without it.
    return current ? Status(s).with_context("deferred experts") : Status::ok();
}

Status DeferredChain::defer(int64_t layer, moe::ExpertPool &pool, const float *x, int64_t n_tokens, int64_t hidden,
                            int32_t k, const int32_t *ids, const float *weights) {
    drop();
    std::unique_ptr<Job> job;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!spare_.empty()) {
            job = std::move(spare_.back());
            spare_.pop_back();
        }
    }
    if (!job) job = std::make_unique<Job>();
    const size_t xs = static_cast<size_t>(n_tokens * hidden), slots = static_cast<size_t>(n_tokens * k);
    job->layer = layer;
    job->n_tokens = n_tokens;
    job->pool = &pool;
    job->input.assign(x, x + xs);
    job->weights.assign(weights, weights + slots);
    job->ids.assign(ids, ids + slots);
    job->output.resize(xs);
    moe::ForwardArgs args;
    args.n_tokens = n_tokens;
    args.top_k = k;
    args.input = job->input.data();
    args.ids = job->ids.data();
    args.weights = job->weights.data();
    args.output = job->output.data();
    args.times = &job->times;
    if (begin_hook_) args.on_begin = &begin_ref_;
    KT_TRY(Status(pool.submit(args, &job->ticket)).with_context("deferred experts"));
    std::lock_guard<std::mutex> lock(mutex_);
    pending_[std::this_thread::get_id()] = std::move(job);
    return Status::ok();
}

void DeferredChain::drop() {
    std::unique_ptr<Job> job = take();
    if (!job) return;
    (void)job->pool->wait(job->ticket);  // its failure belonged to the pass that left it
    recycle(std::move(job));
}

DeferredStats DeferredChain::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

int64_t DeferredChain::pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(pending_.size());
}

}  // namespace kt::runtime
