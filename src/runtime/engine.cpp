#include "runtime/engine.h"

#include <algorithm>

namespace kt::runtime {

struct Inbox {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::shared_ptr<Sequence>> incoming;
    bool wake = false;          // a sequence was cancelled
    bool stopping = false;
    int64_t n_waiting = 0;      // incoming plus the scheduler's queue: what max_queued limits
    int64_t n_submitted = 0;
    EngineStats stats;          // as of the last step
};

namespace {

using Clock = std::chrono::steady_clock;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int step_bucket(int64_t n_tokens) {
    int b = 0;
    while (b + 1 < kStepBuckets && (int64_t{2} << b) <= n_tokens) ++b;
    return b;
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// Sequence: what readers see

Sequence::Sequence(SequenceParams params, std::shared_ptr<Inbox> inbox)
    : inbox_(std::move(inbox)), n_prompt_(static_cast<int64_t>(params.prompt.size())), params_(std::move(params)) {}

void Sequence::read(int32_t *tokens, int64_t capacity, int32_t timeout_ms, int64_t *n, bool *finished,
                    StopReason *reason) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto ready = [&] { return n_read_ < generated_.size() || finished_; };
    if (timeout_ms < 0) cv_.wait(lock, ready);
    else if (timeout_ms > 0) cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready);
    const size_t count = std::min(static_cast<size_t>(capacity), generated_.size() - n_read_);
    std::copy_n(generated_.begin() + static_cast<std::ptrdiff_t>(n_read_), count, tokens);
    n_read_ += count;
    *n = static_cast<int64_t>(count);
    *finished = finished_ && n_read_ == generated_.size();
    *reason = reason_;
}

void Sequence::cancel() {
    if (cancel_requested_.exchange(true)) return;
    {
        std::lock_guard<std::mutex> lock(inbox_->mutex);
        inbox_->wake = true;
    }
    inbox_->cv.notify_all();
}

SequenceInfo Sequence::info() const {
    std::lock_guard<std::mutex> lock(mutex_);
    const Clock::time_point now = Clock::now();
    auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    SequenceInfo i;
    i.state = state_;
    i.finished = finished_;
    i.reason = reason_;
    i.n_preemptions = n_preemptions_;
    i.n_prompt = n_prompt_;
    i.n_prompt_cached = n_prompt_cached_;
    i.n_generated = static_cast<int64_t>(generated_.size());
    i.queued_seconds = seconds((admitted_once_ ? admitted_ : finished_ ? finished_at_ : now) - submitted_);
    i.first_token_seconds = has_first_token_ ? seconds(first_token_ - submitted_) : -1.0;
    i.elapsed_seconds = seconds((finished_ ? finished_at_ : now) - submitted_);
    return i;
}

const char *Sequence::error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return finished_ ? error_.c_str() : "";  // error_ is written once, before finished_
}

void Sequence::set_state(SequenceState state) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = state;
}

// ------------------------------------------------------------------------------------------------------------
// Engine: creation, submission, statistics

Engine::Engine(const EngineParams &params, int64_t n_blocks)
    : params_(params), blocks_(n_blocks, params.kv_block_tokens, params.prefix_cache),
      inbox_(std::make_shared<Inbox>()) {}

Status Engine::create(std::shared_ptr<const model::Model> model, const EngineParams &params,
                      std::unique_ptr<Engine> *out) {
    KT_RETURN_IF(params.max_sequences < 1 || params.max_sequences > 4096, KT_STATUS_INVALID_ARGUMENT,
                 "max_sequences %d is out of range [1, 4096]", params.max_sequences);
    KT_RETURN_IF(params.max_queued < 0 || params.max_queued > (1 << 20), KT_STATUS_INVALID_ARGUMENT,
                 "max_queued %d is out of range [0, 1048576]", params.max_queued);
    KT_RETURN_IF(params.n_ctx < 2 || params.n_ctx > model::kMaxContext, KT_STATUS_INVALID_ARGUMENT,
                 "n_ctx %lld is out of range [2, %lld]", static_cast<long long>(params.n_ctx),
                 static_cast<long long>(model::kMaxContext));
    KT_RETURN_IF(params.kv_block_tokens < 16 || params.kv_block_tokens > 4096 || params.kv_block_tokens % 16 != 0,
                 KT_STATUS_INVALID_ARGUMENT, "kv_block_tokens %lld must be a multiple of 16 in [16, 4096]",
                 static_cast<long long>(params.kv_block_tokens));
    KT_RETURN_IF(params.max_step_tokens < params.max_sequences || params.max_step_tokens > (1 << 16),
                 KT_STATUS_INVALID_ARGUMENT,
                 "max_step_tokens %lld is out of range [max_sequences = %d, 65536]: every decoding sequence takes a "
                 "token of each step",
                 static_cast<long long>(params.max_step_tokens), params.max_sequences);
    uint64_t block_bytes = 0;
    KT_TRY(KvCache::block_bytes_for(model->hp, params.kv_type, params.kv_block_tokens, &block_bytes));
    const int64_t per_sequence = ceil_div(params.n_ctx, params.kv_block_tokens);
    const int64_t n_blocks = params.kv_budget_bytes == 0
                                 ? per_sequence * params.max_sequences
                                 : static_cast<int64_t>(std::min<uint64_t>(params.kv_budget_bytes / block_bytes, INT32_MAX));
    KT_RETURN_IF(n_blocks < per_sequence, KT_STATUS_INVALID_ARGUMENT,
                 "kv_budget_bytes %llu holds %lld KV blocks of %llu bytes, but one sequence of n_ctx %lld positions "
                 "needs %lld: the budget must be at least %llu bytes",
                 static_cast<unsigned long long>(params.kv_budget_bytes), static_cast<long long>(n_blocks),
                 static_cast<unsigned long long>(block_bytes), static_cast<long long>(params.n_ctx),
                 static_cast<long long>(per_sequence), static_cast<unsigned long long>(per_sequence * block_bytes));
    KT_RETURN_IF(n_blocks > INT32_MAX, KT_STATUS_INVALID_ARGUMENT, "%lld KV blocks are too many",
                 static_cast<long long>(n_blocks));

    std::unique_ptr<Engine> e(new Engine(params, n_blocks));
    BatchRunner::Config rc;
    rc.n_threads = params.n_threads;
    rc.thread_name = "kt-engine";
    rc.kv.type = params.kv_type;
    rc.kv.block_positions = params.kv_block_tokens;
    rc.kv.n_blocks = n_blocks;
    rc.kv.max_positions = params.n_ctx;
    rc.max_step_tokens = params.max_step_tokens;
    Engine *self = e.get();
    rc.should_abort = [self] { return self->stopping_.load(std::memory_order_relaxed); };
    KT_TRY(BatchRunner::create(std::move(model), rc, &e->runner_));
    e->counters_.block_tokens = params.kv_block_tokens;
    e->counters_.blocks_total = n_blocks;
    e->counters_.kv_bytes = e->runner_->cache().bytes();
    e->publish_stats();
    e->scheduler_ = std::thread([self] { self->scheduler_main(); });
    *out = std::move(e);
    return Status::ok();
}

Engine::~Engine() {
    stopping_.store(true);
    {
        std::lock_guard<std::mutex> lock(inbox_->mutex);
        inbox_->stopping = true;
    }
    inbox_->cv.notify_all();
    if (scheduler_.joinable()) scheduler_.join();
}

Status Engine::submit(SequenceParams params, std::shared_ptr<Sequence> *out) {
    const int64_t n = static_cast<int64_t>(params.prompt.size()), V = model().hp.n_vocab;
    KT_RETURN_IF(n < 1, KT_STATUS_INVALID_ARGUMENT, "the prompt is empty");
    for (int64_t i = 0; i < n; ++i)
        KT_RETURN_IF(params.prompt[i] < 0 || params.prompt[i] >= V, KT_STATUS_INVALID_ARGUMENT,
                     "prompt token %d at index %lld is outside the vocabulary [0, %lld)", params.prompt[i],
                     static_cast<long long>(i), static_cast<long long>(V));
    KT_RETURN_IF(n >= params_.n_ctx, KT_STATUS_CONTEXT_FULL,
                 "a prompt of %lld tokens leaves no room to generate in a context of %lld positions",
                 static_cast<long long>(n), static_cast<long long>(params_.n_ctx));
    KT_RETURN_IF(params.max_tokens < 0, KT_STATUS_INVALID_ARGUMENT, "max_tokens %lld is negative",
                 static_cast<long long>(params.max_tokens));
    std::shared_ptr<Sequence> seq(new Sequence(std::move(params), inbox_));
    seq->tokens_ = seq->params_.prompt;
    seq->sampler_.seed(seq->params_.sampler.seed);
    {
        std::lock_guard<std::mutex> lock(inbox_->mutex);
        KT_RETURN_IF(inbox_->stopping, KT_STATUS_MISUSE, "the engine is being freed");
        KT_RETURN_IF(inbox_->n_waiting >= params_.max_queued, KT_STATUS_BUSY,
                     "%lld sequences are waiting for admission already (max_queued %d)",
                     static_cast<long long>(inbox_->n_waiting), params_.max_queued);
        inbox_->incoming.push_back(seq);
        ++inbox_->n_waiting;
        ++inbox_->n_submitted;
    }
    inbox_->cv.notify_all();
    *out = std::move(seq);
    return Status::ok();
}

EngineStats Engine::stats() const {
    std::lock_guard<std::mutex> lock(inbox_->mutex);
    EngineStats s = inbox_->stats;
    s.n_queued = static_cast<int32_t>(inbox_->n_waiting);
    s.n_submitted = inbox_->n_submitted;
    return s;
}

void Engine::publish_stats() {
    counters_.n_running = static_cast<int32_t>(running_.size());
    counters_.blocks_used = blocks_.n_held();
    counters_.blocks_cached = blocks_.n_cached_idle();
    std::lock_guard<std::mutex> lock(inbox_->mutex);
    inbox_->stats = counters_;
}

// ------------------------------------------------------------------------------------------------------------
// The scheduler

void Engine::scheduler_main() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(inbox_->mutex);
            inbox_->cv.wait(lock, [&] {
                return inbox_->stopping || inbox_->wake || !inbox_->incoming.empty() || !running_.empty() ||
                       !waiting_.empty();
            });
            if (inbox_->stopping) break;
            inbox_->wake = false;
            for (auto &seq : inbox_->incoming) waiting_.push_back(std::move(seq));
            inbox_->incoming.clear();
        }
        drop_cancelled();
        publish();
        if (plan_step()) {
            run_step();
            publish();
        }
    }
    // Stopping: whatever is left ends as cancelled.
    std::deque<std::shared_ptr<Sequence>> incoming;
    {
        std::lock_guard<std::mutex> lock(inbox_->mutex);
        incoming.swap(inbox_->incoming);
        inbox_->n_waiting = 0;
    }
    for (auto &seq : running_) finish(*seq, StopReason::kCancelled);
    for (auto &seq : waiting_) finish(*seq, StopReason::kCancelled);
    for (auto &seq : incoming) finish(*seq, StopReason::kCancelled);
    running_.clear();
    waiting_.clear();
    publish();
}

void Engine::drop_cancelled() {
    auto cancelled = [](const std::shared_ptr<Sequence> &s) { return s->cancel_requested_.load(); };
    int64_t dropped_waiting = 0;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (!cancelled(*it)) {
            ++it;
            continue;
        }
        finish(**it, StopReason::kCancelled);
        it = waiting_.erase(it);
        ++dropped_waiting;
    }
    if (dropped_waiting > 0) {
        std::lock_guard<std::mutex> lock(inbox_->mutex);
        inbox_->n_waiting -= dropped_waiting;
    }
    for (auto &seq : running_)
        if (cancelled(seq)) finish(*seq, StopReason::kCancelled);
    drop_finished();
}

bool Engine::plan_step() {
    step_tokens_.clear();
    segments_.clear();
    step_sequences_.clear();
    output_rows_.clear();
    output_sequences_.clear();
    int64_t budget = params_.max_step_tokens;
    auto pending = [](const Sequence &s) { return static_cast<int64_t>(s.tokens_.size()) - s.n_computed_; };

    // 1. The next token of every decoding sequence, oldest first, preempting the newest when blocks run out.
    for (size_t i = 0; i < running_.size(); ++i) {
        Sequence &s = *running_[i];
        if (s.preempted_ || pending(s) != 1) continue;
        if (!ensure_block(s)) continue;  // it was the newest: preempted itself
        schedule(s, 1);
        budget -= 1;
    }
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [](const std::shared_ptr<Sequence> &s) { return s->preempted_; }),
                   running_.end());

    // 2. Prompt chunks of the sequences still prefilling (their blocks were taken at admission).
    for (auto &sp : running_) {
        const int64_t p = pending(*sp);
        if (p <= 1 || budget == 0) continue;
        const int64_t n = std::min(p, budget);
        schedule(*sp, n);
        budget -= n;
    }

    // 3. Admissions, in order, while there is room.
    while (budget > 0 && static_cast<int64_t>(running_.size()) < params_.max_sequences && !waiting_.empty()) {
        Sequence &s = *waiting_.front();
        if (!try_admit(s)) break;
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
        {
            std::lock_guard<std::mutex> lock(inbox_->mutex);
            --inbox_->n_waiting;
        }
        const int64_t n = std::min(pending(s), budget);
        schedule(s, n);
        budget -= n;
    }
    return !segments_.empty();
}

bool Engine::ensure_block(Sequence &seq) {
    const int64_t B = params_.kv_block_tokens;
    while (seq.n_computed_ >= static_cast<int64_t>(seq.blocks_.size()) * B) {
        const int32_t block = blocks_.allocate();
        if (block >= 0) {
            seq.blocks_.push_back(block);
            continue;
        }
        // The victim is the most recently admitted sequence still running: one not yet scheduled in this
        // step, since decoding sequences are scheduled oldest first (or `seq` itself).
        Sequence *victim = nullptr;
        for (auto it = running_.rbegin(); it != running_.rend() && !victim; ++it)
            if (!(*it)->preempted_) victim = it->get();
        preempt(*victim);
        if (victim == &seq) return false;
    }
    return true;
}

void Engine::preempt(Sequence &victim) {
    release_blocks(victim);
    victim.preempted_ = true;
    ++counters_.n_preemptions;
    {
        std::lock_guard<std::mutex> lock(victim.mutex_);
        victim.state_ = SequenceState::kPreempted;
        ++victim.n_preemptions_;
    }
    for (auto &sp : running_)
        if (sp.get() == &victim) waiting_.push_front(sp);
    std::lock_guard<std::mutex> lock(inbox_->mutex);
    ++inbox_->n_waiting;
}

bool Engine::try_admit(Sequence &seq) {
    const int64_t B = params_.kv_block_tokens, n = static_cast<int64_t>(seq.tokens_.size());
    // The longest cached prefix of whole blocks that leaves at least one token to compute (its logits are needed).
    std::vector<int32_t> &matched = seq.blocks_;
    matched.clear();
    seq.keys_.clear();
    int64_t idle = 0;
    if (blocks_.prefix_cache()) {
        uint64_t parent = 0;
        for (int64_t b = 0; b < (n - 1) / B; ++b) {
            const int32_t *tokens = seq.tokens_.data() + b * B;
            const uint64_t key = blocks_.key(parent, tokens);
            const int32_t block = blocks_.find(key, parent, tokens);
            if (block < 0) break;
            matched.push_back(block);
            seq.keys_.push_back(key);
            idle += blocks_.ref_count(block) == 0;
            parent = key;
        }
    }
    const int64_t fresh = ceil_div(n, B) - static_cast<int64_t>(matched.size());
    if (blocks_.n_available() - idle < fresh) {
        matched.clear();
        seq.keys_.clear();
        return false;
    }
    for (int32_t block : matched) blocks_.retain(block);  // before allocating: it must not evict them
    for (int64_t i = 0; i < fresh; ++i) matched.push_back(blocks_.allocate());
    const int64_t cached = static_cast<int64_t>(seq.keys_.size()) * B;
    seq.n_computed_ = cached;
    seq.preempted_ = false;
    std::lock_guard<std::mutex> lock(seq.mutex_);
    seq.state_ = SequenceState::kPrefill;
    if (!seq.admitted_once_) {
        seq.admitted_once_ = true;
        seq.admitted_ = Clock::now();
        seq.n_prompt_cached_ = cached;
        counters_.n_prompt_tokens += n;
        counters_.n_prompt_tokens_cached += cached;
    }
    return true;
}

void Engine::schedule(Sequence &seq, int64_t n_tokens) {
    KvCache::Segment seg;
    seg.blocks = seq.blocks_.data();
    seg.pos0 = seq.n_computed_;
    seg.row0 = static_cast<int64_t>(step_tokens_.size());
    seg.n_tokens = n_tokens;
    const auto first = seq.tokens_.begin() + static_cast<std::ptrdiff_t>(seq.n_computed_);
    step_tokens_.insert(step_tokens_.end(), first, first + static_cast<std::ptrdiff_t>(n_tokens));
    segments_.push_back(seg);
    step_sequences_.push_back(&seq);
    const bool completes = seq.n_computed_ + n_tokens == static_cast<int64_t>(seq.tokens_.size());
    if (completes) {
        output_rows_.push_back(static_cast<int32_t>(seg.row0 + n_tokens - 1));
        output_sequences_.push_back(&seq);
    }
    seq.set_state(completes && n_tokens == 1 ? SequenceState::kDecoding : SequenceState::kPrefill);
}

void Engine::run_step() {
    BatchRunner::Step step;
    step.tokens = step_tokens_.data();
    step.n_tokens = static_cast<int64_t>(step_tokens_.size());
    step.segments = segments_.data();
    step.n_segments = static_cast<int64_t>(segments_.size());
    step.output_rows = output_rows_.data();
    step.n_outputs = static_cast<int64_t>(output_rows_.size());
    // Rows for the sequences sampling in this step; grown to the most a step has needed, not max_sequences.
    const size_t logits_floats = output_rows_.size() * static_cast<size_t>(model().hp.n_vocab);
    if (logits_.size() < logits_floats) logits_.resize(logits_floats);
    step.logits = logits_.data();
    const auto start = Clock::now();
    const Status status = runner_->run(step);
    if (!status.is_ok()) {
        if (stopping_.load()) return;  // the scheduler ends every sequence as it exits
        // The step's sequences end; the others go on (their positions were not in this step).
        for (Sequence *seq : step_sequences_) finish(*seq, StopReason::kError, status.message());
        drop_finished();
        return;
    }
    ++counters_.n_steps;
    counters_.step_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    ++counters_.step_tokens[step_bucket(step.n_tokens)];
    for (size_t i = 0; i < segments_.size(); ++i) {
        Sequence &seq = *step_sequences_[i];
        const KvCache::Segment &seg = segments_[i];
        const bool decode = seg.n_tokens == 1 && seg.pos0 >= seq.n_prompt_;
        if (!decode) counters_.n_prefill_tokens += seg.n_tokens;
        seq.n_computed_ += seg.n_tokens;
        if (blocks_.prefix_cache()) publish_full_blocks(seq);
    }

    // Sampling, in parallel: each sequence has its own sampler and logits row.
    const int64_t V = model().hp.n_vocab;
    sampled_.assign(output_sequences_.size(), -1);
    Status sampling = runner_->pool().parallel_for(static_cast<int64_t>(output_sequences_.size()), 1,
                                            [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) {
            Sequence &seq = *output_sequences_[i];
            if (seq.params_.max_tokens == 0) continue;
            const float *row = logits_.data() + i * V;
            if (seq.params_.on_logits) seq.params_.on_logits(row, V);
            sampled_[i] = seq.sampler_.sample(seq.params_.sampler, row, V, seq.tokens_);
        }
    });
    (void)sampling;  // the body cannot throw

    for (size_t i = 0; i < output_sequences_.size(); ++i) {
        Sequence &seq = *output_sequences_[i];
        const int32_t token = sampled_[i];
        if (seq.params_.max_tokens == 0) {
            finish(seq, StopReason::kMaxTokens);
            continue;
        }
        const std::vector<int32_t> &stop = seq.params_.stop_tokens;
        if (std::find(stop.begin(), stop.end(), token) != stop.end()) {
            finish(seq, StopReason::kStopToken);
            continue;
        }
        seq.tokens_.push_back(token);
        ++seq.n_generated_;
        ++counters_.n_generated_tokens;
        Announcement &a = announce(seq);
        a.has_token = true;
        a.token = token;
        if (seq.n_generated_ >= seq.params_.max_tokens) {
            finish(seq, StopReason::kMaxTokens);
        } else if (static_cast<int64_t>(seq.tokens_.size()) >= params_.n_ctx) {
            finish(seq, StopReason::kContextFull);  // the token just sampled would have no position
        }
    }
    drop_finished();
}

void Engine::drop_finished() {
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [](const std::shared_ptr<Sequence> &seq) { return seq->finished_flag_; }),
                   running_.end());
}

// Full blocks join the prefix cache as soon as they are computed.
void Engine::publish_full_blocks(Sequence &seq) {
    const int64_t B = params_.kv_block_tokens;
    while (static_cast<int64_t>(seq.keys_.size() + 1) * B <= seq.n_computed_) {
        const size_t b = seq.keys_.size();
        const uint64_t parent = b == 0 ? 0 : seq.keys_[b - 1];
        const int32_t *tokens = seq.tokens_.data() + static_cast<int64_t>(b) * B;
        const uint64_t key = blocks_.key(parent, tokens);
        blocks_.publish(seq.blocks_[b], key, parent, tokens);
        seq.keys_.push_back(key);
    }
}

void Engine::release_blocks(Sequence &seq) {
    // Last block first: the eviction order then drops a prefix's tail before its head.
    for (auto it = seq.blocks_.rbegin(); it != seq.blocks_.rend(); ++it) blocks_.release(*it);
    seq.blocks_.clear();
    seq.keys_.clear();
    seq.n_computed_ = 0;
}

void Engine::finish(Sequence &seq, StopReason reason, const std::string &error) {
    release_blocks(seq);
    seq.finished_flag_ = true;
    seq.sampler_ = Sampler();  // its scratch is not needed any more
    ++counters_.n_finished;
    Announcement &a = announce(seq);
    a.finished = true;
    a.reason = reason;
    a.error = error;
}

Engine::Announcement &Engine::announce(Sequence &seq) {
    if (announcements_.empty() || announcements_.back().seq.get() != &seq) {
        announcements_.emplace_back();
        announcements_.back().seq = seq.shared_from_this();
    }
    return announcements_.back();
}

// Statistics first, then what readers see: a caller who has read a token or an end finds it counted.
void Engine::publish() {
    publish_stats();
    const Clock::time_point now = Clock::now();
    for (Announcement &a : announcements_) {
        Sequence &seq = *a.seq;
        {
            std::lock_guard<std::mutex> lock(seq.mutex_);
            if (a.has_token) {
                seq.generated_.push_back(a.token);
                if (!seq.has_first_token_) {
                    seq.has_first_token_ = true;
                    seq.first_token_ = now;
                }
            }
            if (a.finished) {
                seq.finished_ = true;
                seq.reason_ = a.reason;
                seq.error_ = std::move(a.error);
                seq.state_ = SequenceState::kFinished;
                seq.finished_at_ = now;
            }
        }
        seq.cv_.notify_all();
        if (seq.params_.notify) seq.params_.notify();
    }
    announcements_.clear();
}

}  // namespace kt::runtime
