#include "runtime/context.h"

#include <algorithm>

#include "mem/pinned_pool.h"

namespace kt::runtime {
namespace {

// The context's workers spin only briefly between jobs: consecutive jobs of one layer (projections, attention)
// follow each other within microseconds, and the MoE that comes next runs on the expert pools' threads, which
// spinning workers would slow down on the same cores.
constexpr int64_t kContextSpinNs = 10'000;

}  // namespace

Status Context::create(std::shared_ptr<const model::Model> model, const ContextParams &params,
                       std::unique_ptr<Context> *out) {
    KT_RETURN_IF(params.n_batch < 1 || params.n_batch > (1 << 16), KT_STATUS_INVALID_ARGUMENT,
                 "n_batch %lld is out of range [1, 65536]", static_cast<long long>(params.n_batch));
    std::unique_ptr<Context> c(new Context());
    c->model_ = std::move(model);
    c->params_ = params;
    c->params_.n_batch = std::min(params.n_batch, params.n_ctx);
    KT_RETURN_IF(params.n_threads < 0 || params.n_threads > 4096, KT_STATUS_INVALID_ARGUMENT,
                 "n_threads %d is out of range [0, 4096]", params.n_threads);
    KT_TRY(mem::create_pinned_pool(params.n_threads, "kt-ctx", &c->pool_, kContextSpinNs));
    KT_TRY(KvCache::create(c->model_->hp, params.n_ctx, params.kv_type, c->pool_->size(), &c->cache_));
    c->scratch_.reserve(c->model_->hp, c->params_.n_batch);
    c->positions_.resize(static_cast<size_t>(c->params_.n_batch));
    *out = std::move(c);
    return Status::ok();
}

Status Context::check_tokens(const int32_t *tokens, int64_t n) const {
    for (int64_t i = 0; i < n; ++i)
        KT_RETURN_IF(tokens[i] < 0 || tokens[i] >= n_vocab(), KT_STATUS_INVALID_ARGUMENT,
                     "token %d at index %lld is outside the vocabulary [0, %lld)", tokens[i], static_cast<long long>(i),
                     static_cast<long long>(n_vocab()));
    return Status::ok();
}

Status Context::decode(const int32_t *tokens, int64_t n_tokens, Logits logits) {
    KT_RETURN_IF(n_tokens < 1, KT_STATUS_INVALID_ARGUMENT, "decode: no tokens");
    KT_TRY(check_tokens(tokens, n_tokens));
    if (n_tokens > n_ctx() - n_past_) {
        KT_RETURN_IF(n_past_ == 0, KT_STATUS_CONTEXT_FULL, "decode: %lld tokens do not fit: the context holds %lld",
                     static_cast<long long>(n_tokens), static_cast<long long>(n_ctx()));
        return Status::error(KT_STATUS_CONTEXT_FULL, "decode: %lld tokens do not fit: %lld of %lld positions are in use",
                             static_cast<long long>(n_tokens), static_cast<long long>(n_past_),
                             static_cast<long long>(n_ctx()));
    }

    const int64_t V = n_vocab();
    const int64_t rows = logits == Logits::kAll ? n_tokens : logits == Logits::kLast ? 1 : 0;
    if (logits_.size() < static_cast<size_t>(rows * V)) logits_.resize(static_cast<size_t>(rows * V));
    n_logit_rows_ = 0;

    const Clock::time_point start = Clock::now();
    phase_start_ = start;
    phase_ = model::Phase::kOther;
    const int64_t n_past_before = n_past_;
    for (int64_t done = 0; done < n_tokens;) {
        const int64_t n = std::min(params_.n_batch, n_tokens - done);
        for (int64_t i = 0; i < n; ++i) positions_[i] = static_cast<int32_t>(n_past_ + i);
        model::Batch batch;
        batch.tokens = tokens + done;
        batch.positions = positions_.data();
        batch.n_tokens = n;
        const bool last_step = done + n == n_tokens;
        batch.n_outputs = logits == Logits::kAll ? n : (logits == Logits::kLast && last_step ? 1 : 0);
        batch.logits = logits_.data() + (logits == Logits::kAll ? done * V : 0);
        batch_ = &batch;
        Status s = model_->arch->forward(*model_, batch, *this);
        batch_ = nullptr;
        if (!s.is_ok()) {
            n_past_ = n_past_before;  // the cache rows written past it are simply overwritten later
            return s;
        }
        n_past_ += n;
        done += n;
    }
    enter(model::Phase::kOther);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (n_tokens > 1) {
        perf_.n_prefill_tokens += n_tokens;
        perf_.prefill_seconds += seconds;
    } else {
        perf_.n_decode_tokens += 1;
        perf_.decode_seconds += seconds;
    }
    history_.insert(history_.end(), tokens, tokens + n_tokens);
    n_logit_rows_ = rows;
    return Status::ok();
}

void Context::reset() {
    n_past_ = 0;
    n_logit_rows_ = 0;
    history_.clear();
    sampler_seeded_ = false;
}

Status Context::sample(const SamplerParams &params, int32_t *out_token) {
    KT_RETURN_IF(n_logit_rows_ == 0, KT_STATUS_MISUSE, "sample: the last decode kept no logits");
    if (!sampler_seeded_ || params.seed != sampler_seed_) {
        sampler_.seed(params.seed);
        sampler_seeded_ = true;
        sampler_seed_ = params.seed;
    }
    *out_token = sampler_.sample(params, logits_row(n_logit_rows_ - 1), n_vocab(), history_);
    return Status::ok();
}

Status Context::generate(const int32_t *prompt, int64_t n_prompt, const GenerateParams &params,
                         std::vector<int32_t> *out, StopReason *reason) {
    KT_RETURN_IF(params.max_tokens < 0, KT_STATUS_INVALID_ARGUMENT, "generate: max_tokens is negative");
    if (n_prompt > 0) KT_TRY(decode(prompt, n_prompt, Logits::kLast));
    KT_RETURN_IF(n_logit_rows_ == 0, KT_STATUS_MISUSE, "generate: no prompt and no logits to continue from");
    out->clear();
    *reason = StopReason::kMaxTokens;
    while (static_cast<int64_t>(out->size()) < params.max_tokens) {
        if (n_past_ == n_ctx()) {  // no room for another token
            *reason = StopReason::kContextFull;
            break;
        }
        int32_t token = 0;
        KT_TRY(sample(params.sampler, &token));
        if (std::find(params.stop_tokens.begin(), params.stop_tokens.end(), token) != params.stop_tokens.end()) {
            *reason = StopReason::kStopToken;
            break;
        }
        // Decoded before it is reported: every token handed out is in the sequence, so a later call continues
        // from it.
        KT_TRY(decode(&token, 1, Logits::kLast));
        out->push_back(token);
        if (params.on_token && !params.on_token(token)) {
            *reason = StopReason::kCallback;
            break;
        }
    }
    return Status::ok();
}

Status Context::attention(int64_t layer, const float *q, const float *k, const float *v, float *out) {
    cache_.attend(layer, batch_->positions[0], batch_->n_tokens, q, k, v, out, *pool_);
    return Status::ok();
}

void Context::enter(model::Phase phase) {
    const Clock::time_point now = Clock::now();
    perf_.phase_seconds[static_cast<int>(phase_)] += std::chrono::duration<double>(now - phase_start_).count();
    phase_ = phase;
    phase_start_ = now;
}

Status Context::layer_done(int64_t layer) {
    KT_RETURN_IF(params_.should_abort && params_.should_abort(), KT_STATUS_CANCELLED,
                 "decode cancelled by the abort callback after layer %lld", static_cast<long long>(layer));
    return Status::ok();
}

}  // namespace kt::runtime
