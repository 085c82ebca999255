#include "runtime/batch_runner.h"

#include <algorithm>

#include "mem/pinned_pool.h"

namespace kt::runtime {
namespace {

// The runner's workers spin only briefly between jobs: consecutive jobs of one layer (projections, attention)
// follow each other within microseconds, and the MoE that comes next runs on the expert pools' threads, which
// spinning workers would slow down on the same cores.
constexpr int64_t kRunnerSpinNs = 10'000;

}  // namespace

Status BatchRunner::create(std::shared_ptr<const model::Model> model, const Config &config,
                           std::unique_ptr<BatchRunner> *out) {
    KT_RETURN_IF(config.max_step_tokens < 1 || config.max_step_tokens > (1 << 16), KT_STATUS_INVALID_ARGUMENT,
                 "%lld tokens per step is out of range [1, 65536]", static_cast<long long>(config.max_step_tokens));
    KT_RETURN_IF(config.n_threads < 0 || config.n_threads > 4096, KT_STATUS_INVALID_ARGUMENT,
                 "n_threads %d is out of range [0, 4096]", config.n_threads);
    std::unique_ptr<BatchRunner> r(new BatchRunner());
    r->model_ = std::move(model);
    r->max_step_tokens_ = config.max_step_tokens;
    r->should_abort_ = config.should_abort;
    KT_TRY(mem::create_pinned_pool(config.n_threads, config.thread_name, &r->pool_, kRunnerSpinNs));
    KvCache::Config kv = config.kv;
    kv.n_threads = r->pool_->size();
    KT_TRY(KvCache::create(r->model_->hp, kv, &r->cache_));
    r->scratch_.reserve(r->model_->hp, config.max_step_tokens);
    r->positions_.resize(static_cast<size_t>(config.max_step_tokens));
    *out = std::move(r);
    return Status::ok();
}

Status BatchRunner::run(const Step &step) {
    int64_t row = 0;
    for (int64_t s = 0; s < step.n_segments; ++s) {
        const KvCache::Segment &seg = step.segments[s];
        for (int64_t t = 0; t < seg.n_tokens; ++t) positions_[row + t] = static_cast<int32_t>(seg.pos0 + t);
        row += seg.n_tokens;
    }
    KT_RETURN_IF(row != step.n_tokens || row < 1 || row > max_step_tokens_, KT_STATUS_INTERNAL,
                 "a step of %lld tokens whose segments cover %lld (at most %lld per step)",
                 static_cast<long long>(step.n_tokens), static_cast<long long>(row),
                 static_cast<long long>(max_step_tokens_));
    model::Batch batch;
    batch.tokens = step.tokens;
    batch.positions = positions_.data();
    batch.n_tokens = step.n_tokens;
    batch.n_outputs = step.n_outputs;
    batch.output_rows = step.output_rows;
    batch.logits = step.logits;
    phase_start_ = Clock::now();
    phase_ = model::Phase::kOther;
    step_ = &step;
    Status s = model_->arch->forward(*model_, batch, *this);
    step_ = nullptr;
    enter(model::Phase::kOther);
    return s;
}

void BatchRunner::reset_phases() { std::fill(std::begin(phase_seconds_), std::end(phase_seconds_), 0.0); }

Status BatchRunner::attention(int64_t layer, const float *q, const float *k, const float *v,
                              const model::AttentionMask &mask, float *out) {
    cache_.attend(layer, step_->segments, step_->n_segments, q, k, v, mask.window, mask.sinks, out, *pool_);
    return Status::ok();
}

void BatchRunner::enter(model::Phase phase) {
    const Clock::time_point now = Clock::now();
    phase_seconds_[static_cast<int>(phase_)] += std::chrono::duration<double>(now - phase_start_).count();
    phase_ = phase;
    phase_start_ = now;
}

Status BatchRunner::layer_done(int64_t layer) {
    KT_RETURN_IF(should_abort_ && should_abort_(), KT_STATUS_CANCELLED,
                 "decode cancelled by the abort callback after layer %lld", static_cast<long long>(layer));
    return Status::ok();
}

}  // namespace kt::runtime
