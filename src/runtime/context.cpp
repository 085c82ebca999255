#include "runtime/context.h"

#include <algorithm>
#include <chrono>

namespace kt::runtime {

Status Context::create(std::shared_ptr<const model::Model> model, const ContextParams &params,
                       std::unique_ptr<Context> *out) {
    KT_RETURN_IF(params.n_batch < 1 || params.n_batch > (1 << 16), KT_STATUS_INVALID_ARGUMENT,
                 "n_batch %lld is out of range [1, 65536]", static_cast<long long>(params.n_batch));
    KT_RETURN_IF(params.n_ctx < 1 || params.n_ctx > model::kMaxContext, KT_STATUS_INVALID_ARGUMENT,
                 "context length %lld is out of range [1, %lld]", static_cast<long long>(params.n_ctx),
                 static_cast<long long>(model::kMaxContext));
    std::unique_ptr<Context> c(new Context());
    c->n_ctx_ = params.n_ctx;
    c->n_batch_ = std::min(params.n_batch, params.n_ctx);
    BatchRunner::Config rc;
    rc.n_threads = params.n_threads;
    rc.thread_name = "kt-ctx";
    rc.kv.type = params.kv_type;
    rc.kv.block_positions = (params.n_ctx + cpu::kKeyTile - 1) / cpu::kKeyTile * cpu::kKeyTile;
    rc.kv.n_blocks = 1;
    rc.kv.max_positions = params.n_ctx;
    rc.max_step_tokens = c->n_batch_;
    rc.should_abort = params.should_abort;
    KT_TRY(BatchRunner::create(std::move(model), rc, &c->runner_));
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

    const auto start = std::chrono::steady_clock::now();
    const int64_t n_past_before = n_past_;
    for (int64_t done = 0; done < n_tokens;) {
        const int64_t n = std::min(n_batch_, n_tokens - done);
        const KvCache::Segment segment{block_table_, n_past_, 0, n};
        BatchRunner::Step step;
        step.tokens = tokens + done;
        step.n_tokens = n;
        step.segments = &segment;
        step.n_segments = 1;
        const bool last_step = done + n == n_tokens;
        step.n_outputs = logits == Logits::kAll ? n : (logits == Logits::kLast && last_step ? 1 : 0);
        step.logits = logits_.data() + (logits == Logits::kAll ? done * V : 0);
        Status s = runner_->run(step);
        if (!s.is_ok()) {
            n_past_ = n_past_before;  // the cache rows written past it are simply overwritten later
            return s;
        }
        n_past_ += n;
        done += n;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

PerfCounters Context::perf() const {
    PerfCounters p = perf_;
    for (int i = 0; i < static_cast<int>(model::Phase::kCount); ++i)
        p.phase_seconds[i] = runner_->phase_seconds(static_cast<model::Phase>(i));
    return p;
}

void Context::reset_perf() {
    perf_ = PerfCounters();
    runner_->reset_phases();
}

}  // namespace kt::runtime
