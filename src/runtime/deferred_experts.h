// Deferred experts: the lowest-weighted CPU experts of each token land one MoE layer late, as KTransformers'
// --kt-max-deferred-experts-per-token does (shared/reference/kt-kernel-anchor.md, 1.5).
//
// In a MoE layer of the hybrid path, each token's k - D highest-weighted slots are protected (D: the most deferred
// per token, at most k - 1; ties go to the lower slot), and an expert protected for any token of the call is
// immediate for all of them (its weights are read once for every token that has it). The slots left over whose
// experts are on the CPU are deferred; the device's experts are never deferred. The layer returns once its
// immediate experts (CPU and device) are done, and a second job on its pool computes the deferred ones from the
// layer's input while the forward pass goes on to the next layer's attention. The next MoE layer adds that
// result to its own output:
//
//   out_L     = Σ immediate slots of L (on x_L)
//   out_{L+1} = Σ immediate slots of L+1 (on x_{L+1})  +  Σ deferred slots of L (on x_L)
//
// so the deferred experts enter the residual stream one layer late. The last MoE layer defers nothing, so a forward
// pass ends with nothing pending, and a call longer than the pool's max_tokens (long prefill, computed in chunks)
// defers nothing either.
//
// A DeferredChain is shared by the MoE layers of one model. It holds at most one pending job per thread running a
// forward pass (a pass runs its layers in order, on one thread; contexts on other threads have their own). A
// pending job owns copies of its input, ids and weights, since the caller reuses those buffers for the next layer,
// and its output. A job left behind by a pass that failed between two layers is recognised by the next pass on
// that thread (its layer is not earlier than the absorbing one, or its token count differs) and dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/function_ref.h"
#include "core/status.h"
#include "moe/expert_pool.h"

namespace kt::runtime {

// Splits a call's slots (ids [n_tokens][k], -1: none) into the immediate and the deferred ones by the rule above:
// immediate[i] and deferred[i] each hold ids[i] or -1, every valid slot (0 <= id < n_experts) in exactly one of
// them. resident: the experts on the device ([n_experts], or empty: none). Returns the number of deferred slots.
int64_t split_deferred(const int32_t *ids, const float *weights, int64_t n_tokens, int32_t k, int32_t max_deferred,
                       int64_t n_experts, const std::vector<uint8_t> &resident, int32_t *immediate, int32_t *deferred);

// The deferred jobs of a chain, summed: how long they ran and how much of that the passes did not wait for.
struct DeferredStats {
    int64_t jobs = 0;
    int64_t ns = 0;         // each job, begin to end
    int64_t hidden_ns = 0;  // the part of each that ran before the next layer began waiting for it
};

class DeferredChain {
public:
    // max_deferred > 0; last_layer: the model's last MoE layer, which never defers.
    DeferredChain(int32_t max_deferred, int64_t last_layer) : max_deferred_(max_deferred), last_layer_(last_layer) {}
    DeferredChain(const DeferredChain &) = delete;
    DeferredChain &operator=(const DeferredChain &) = delete;

    int32_t max_deferred() const { return max_deferred_; }
    bool defers_in(int64_t layer) const { return layer != last_layer_; }

    // For MoE layer `layer` on the calling thread: waits for the job an earlier layer of this pass deferred, if
    // any, and adds its output into out [n_tokens][hidden]. A stale job (see above) is waited for and dropped.
    // The job's failure is returned.
    Status absorb(int64_t layer, int64_t n_tokens, int64_t hidden, float *out);
    // Queues layer's deferred slots (ids [n_tokens][k], -1 elsewhere) on `pool`, on copies of x [n_tokens][hidden]
    // and the weights; the next absorb on this thread adds the result. Any job still pending here is dropped first.
    Status defer(int64_t layer, moe::ExpertPool &pool, const float *x, int64_t n_tokens, int64_t hidden, int32_t k,
                 const int32_t *ids, const float *weights);
    // Waits for and drops the calling thread's pending job, if any (after a failed layer).
    void drop();
    // Jobs pending on all threads (tests).
    int64_t pending() const;
    DeferredStats stats() const;
    // Tests: called on the pool's driver thread as each deferred job begins. Set before the first defer.
    void set_begin_hook(std::function<void()> hook) { begin_hook_ = std::move(hook); }

private:
    struct Job {
        int64_t layer = -1, n_tokens = 0;
        moe::ExpertPool *pool = nullptr;
        uint64_t ticket = 0;
        moe::JobTimes times;
        std::vector<float> input, weights, output;
        std::vector<int32_t> ids;
    };
    std::unique_ptr<Job> take();        // the calling thread's pending job, removed, or null
    void recycle(std::unique_ptr<Job> job);  // its buffers kept for the next defer

    const int32_t max_deferred_;
    const int64_t last_layer_;
    mutable std::mutex mutex_;
    std::unordered_map<std::thread::id, std::unique_ptr<Job>> pending_;
    std::vector<std::unique_ptr<Job>> spare_;  // at most a few: one per thread that deferred at the same time
    DeferredStats stats_;  // under mutex_
    std::function<void()> begin_hook_;
    const FunctionRef<void()> begin_ref_{begin_hook_};  // what a job's ForwardArgs::on_begin points to
};

}  // namespace kt::runtime
