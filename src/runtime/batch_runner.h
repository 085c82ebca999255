// The one forward path: steps of a model over a paged KV cache, with one sequence per step (kt_context) or many
// (the engine's continuous batching).
//
// A step is a batch of tokens made of segments, one per sequence: consecutive rows, at consecutive positions of
// that sequence, written into its blocks. Every projection, dense FFN and MoE layer sees all of the step's rows at
// once (an expert's weights are read once for all the tokens routed to it); attention runs per segment over its
// own sequence (KvCache::attend). The runner owns what a step needs: the threads for attention and projections,
// the cache, the scratch buffers (the forward pass allocates nothing), and the per-phase timers.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/arch/arch.h"
#include "model/model.h"
#include "runtime/kv_cache.h"

namespace kt::runtime {

class BatchRunner final : public model::ForwardHost {
public:
    struct Config {
        int n_threads = 0;                  // 0: one per physical core
        const char *thread_name = "kt-ctx";
        KvCache::Config kv;                 // its n_threads is the runner's
        int64_t max_step_tokens = 512;
        std::function<bool()> should_abort;  // polled after every layer; true cancels the step
    };

    static Status create(std::shared_ptr<const model::Model> model, const Config &config,
                         std::unique_ptr<BatchRunner> *out);

    struct Step {
        const int32_t *tokens = nullptr;             // [n_tokens], inside the vocabulary
        int64_t n_tokens = 0;                        // 1 .. max_step_tokens
        const KvCache::Segment *segments = nullptr;  // cover rows [0, n_tokens) in order
        int64_t n_segments = 0;
        const int32_t *output_rows = nullptr;        // rows whose logits are wanted, ascending; null: the last
        int64_t n_outputs = 0;                       // n_outputs rows
        float *logits = nullptr;                     // [n_outputs, V]
    };

    // Runs the step. On failure (KT_STATUS_CANCELLED from should_abort) the caller must treat the step's
    // positions as not written: they hold garbage that is overwritten when they are computed again.
    Status run(const Step &step);

    const model::Model &model() const { return *model_; }
    int n_threads() const { return pool_->size(); }
    int64_t max_step_tokens() const { return max_step_tokens_; }
    KvCache &cache() { return cache_; }
    const KvCache &cache() const { return cache_; }

    // Seconds spent in each model::Phase since creation or reset_phases().
    double phase_seconds(model::Phase phase) const { return phase_seconds_[static_cast<int>(phase)]; }
    void reset_phases();

    // ForwardHost
    model::Scratch &scratch() override { return scratch_; }
    ThreadPool &pool() override { return *pool_; }
    Status attention(int64_t layer, const float *q, const float *k, const float *v, const model::AttentionMask &mask,
                     float *out) override;
    void enter(model::Phase phase) override;
    Status layer_done(int64_t layer) override;

private:
    using Clock = std::chrono::steady_clock;

    BatchRunner() = default;

    std::shared_ptr<const model::Model> model_;
    std::unique_ptr<ThreadPool> pool_;
    KvCache cache_;
    model::Scratch scratch_;
    int64_t max_step_tokens_ = 0;
    std::function<bool()> should_abort_;
    std::vector<int32_t> positions_;             // [max_step_tokens] of the step being run
    const Step *step_ = nullptr;                 // the step being run (attention needs its segments)
    double phase_seconds_[static_cast<int>(model::Phase::kCount)] = {};
    model::Phase phase_ = model::Phase::kOther;
    Clock::time_point phase_start_;
};

}  // namespace kt::runtime
