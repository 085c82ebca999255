// The batched multi-sequence engine behind kt_engine_*: one per loaded model, owning a BatchRunner (worker
// threads, the paged KV cache), the block bookkeeping (KvBlocks) and a scheduler thread.
//
// A step of the scheduler:
//   1. new submissions join the waiting queue; cancelled sequences are dropped and their blocks released;
//   2. every decoding sequence gets its next token (a new block when it crosses into one; when no block is left,
//      the most recently admitted sequence is preempted: its blocks released, itself put back at the head of the
//      queue, to be recomputed from its tokens when it is admitted again);
//   3. sequences still prefilling get chunks of their prompts, oldest first, up to max_step_tokens;
//   4. waiting sequences are admitted in order while there is room (max_sequences, tokens left in the step, and
//      free or evictable blocks for all of their tokens that the prefix cache does not already hold);
//   5. one BatchRunner step runs all of it; each sequence whose tokens are all computed samples its next token
//      (in parallel: every sequence has its own sampler), publishes it to its readers and may finish.
// Full blocks are published to the prefix cache as soon as they are computed, so a prompt submitted while
// another with the same prefix is still running reuses its blocks too.
//
// Threads: the scheduler thread runs the steps (it is thread 0 of the runner's pool); any thread may submit,
// read, cancel and query. The two share the Inbox (submissions, wake-ups, published statistics) under one mutex,
// held only for short bookkeeping, never across a step; each Sequence has its own mutex for what its readers see.
// The scheduler's own state (block tables, token lists, samplers) is touched by the scheduler thread only, and
// by submit() before the sequence is handed over under the Inbox mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "runtime/batch_runner.h"
#include "runtime/context.h"
#include "runtime/kv_blocks.h"
#include "runtime/sampler.h"

namespace kt::runtime {

struct EngineParams {
    int n_threads = 0;                // 0: one per physical core
    int32_t max_sequences = 16;       // admitted at once
    int32_t max_queued = 256;         // waiting (preempted ones included); submit beyond it is KT_STATUS_BUSY
    int64_t n_ctx = 4096;             // positions per sequence
    uint64_t kv_budget_bytes = 0;     // 0: max_sequences full sequences
    int32_t kv_type = KT_TYPE_F16;
    int64_t kv_block_tokens = 16;
    int64_t max_step_tokens = 512;
    bool prefix_cache = true;
};

struct SequenceParams {
    std::vector<int32_t> prompt;
    int64_t max_tokens = 128;         // 0: prefill the prompt (filling the prefix cache) and finish
    SamplerParams sampler;
    std::vector<int32_t> stop_tokens;
    std::function<void()> notify;     // on the scheduler thread, after new tokens or the finish are published
    // Tests: every logits row the sequence samples from, on a worker thread, before sampling.
    std::function<void(const float *logits, int64_t n_vocab)> on_logits;
};

enum class SequenceState : int32_t { kQueued = 0, kPrefill = 1, kDecoding = 2, kPreempted = 3, kFinished = 4 };

struct SequenceInfo {
    SequenceState state = SequenceState::kQueued;
    bool finished = false;
    StopReason reason = StopReason::kMaxTokens;  // when finished
    int32_t n_preemptions = 0;
    int64_t n_prompt = 0;
    int64_t n_prompt_cached = 0;
    int64_t n_generated = 0;
    double queued_seconds = 0.0;
    double first_token_seconds = -1.0;
    double elapsed_seconds = 0.0;
};

inline constexpr int kStepBuckets = 12;

struct EngineStats {
    int32_t n_running = 0, n_queued = 0;
    int64_t block_tokens = 0, blocks_total = 0, blocks_used = 0, blocks_cached = 0;
    uint64_t kv_bytes = 0;
    int64_t n_submitted = 0, n_finished = 0, n_preemptions = 0;
    int64_t n_prompt_tokens = 0, n_prompt_tokens_cached = 0, n_prefill_tokens = 0, n_generated_tokens = 0;
    int64_t n_steps = 0;
    double step_seconds = 0.0;
    int64_t step_tokens[kStepBuckets] = {};  // steps of [2^i, 2^(i+1)) tokens; the last bucket is open
};

// What the scheduler and the callers share. Sequences hold it too, so that cancel() can wake the scheduler even
// while the engine is being destroyed.
struct Inbox;

class Sequence : public std::enable_shared_from_this<Sequence> {
public:
    // Hands out up to `capacity` tokens not read yet, waiting up to timeout_ms (< 0: no limit) for one or the
    // end. *finished: the sequence has ended and every token has been read (then *reason says why).
    void read(int32_t *tokens, int64_t capacity, int32_t timeout_ms, int64_t *n, bool *finished, StopReason *reason);
    // Ends the sequence at the next step boundary (no effect once finished). Never blocks for long.
    void cancel();
    SequenceInfo info() const;
    // Why it finished with StopReason::kError; "" otherwise. Stable once the sequence has finished.
    const char *error() const;

private:
    friend class Engine;
    using Clock = std::chrono::steady_clock;

    Sequence(SequenceParams params, std::shared_ptr<Inbox> inbox);
    void set_state(SequenceState state);

    // Set at submit, then read-only.
    std::shared_ptr<Inbox> inbox_;
    std::atomic<bool> cancel_requested_{false};
    const int64_t n_prompt_;

    // ---- seen by readers, under mutex_
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<int32_t> generated_;
    size_t n_read_ = 0;
    SequenceState state_ = SequenceState::kQueued;
    bool finished_ = false;
    StopReason reason_ = StopReason::kMaxTokens;
    std::string error_;
    int32_t n_preemptions_ = 0;
    int64_t n_prompt_cached_ = 0;
    const Clock::time_point submitted_ = Clock::now();
    Clock::time_point admitted_, first_token_, finished_at_;
    bool admitted_once_ = false, has_first_token_ = false;

    // ---- the scheduler's
    SequenceParams params_;
    std::vector<int32_t> tokens_;   // the prompt, then each generated token: position p holds tokens_[p]
    int64_t n_computed_ = 0;        // positions whose keys and values are in blocks_
    std::vector<int32_t> blocks_;   // the block table
    std::vector<uint64_t> keys_;    // content keys of its first keys_.size() blocks (the prefix-cache chain)
    Sampler sampler_;
    bool preempted_ = false;        // set while planning a step, acted on after it
    bool finished_flag_ = false;    // finished_, for the scheduler without the lock
    int64_t n_generated_ = 0;
};

class Engine {
public:
    static Status create(std::shared_ptr<const model::Model> model, const EngineParams &params,
                         std::unique_ptr<Engine> *out);
    // Stops the scheduler (the step in progress is abandoned after its current layer) and ends every sequence
    // not finished yet with StopReason::kCancelled. Sequence objects outlive the engine as their holders wish.
    ~Engine();
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;

    // Validates and queues a sequence. KT_STATUS_BUSY when max_queued are waiting, KT_STATUS_CONTEXT_FULL when
    // the prompt leaves no room to generate, KT_STATUS_INVALID_ARGUMENT for a bad prompt.
    Status submit(SequenceParams params, std::shared_ptr<Sequence> *out);

    EngineStats stats() const;
    const EngineParams &params() const { return params_; }
    const model::Model &model() const { return runner_->model(); }
    int n_threads() const { return runner_->n_threads(); }

private:
    Engine(const EngineParams &params, int64_t n_blocks);

    void scheduler_main();
    void take_submissions();
    void drop_cancelled();
    void drop_finished();  // from running_
    bool plan_step();
    bool ensure_block(Sequence &seq);
    void preempt(Sequence &victim);
    bool try_admit(Sequence &seq);
    void schedule(Sequence &seq, int64_t n_tokens);
    void run_step();
    // Ends the sequence for the scheduler (blocks released); its readers see it at the next publish().
    void finish(Sequence &seq, StopReason reason, const std::string &error = std::string());
    // What readers will see of a sequence at the next publish(): a new token, the end.
    struct Announcement {
        std::shared_ptr<Sequence> seq;  // kept alive until announced, even if dropped from the queues meanwhile
        bool has_token = false;
        int32_t token = 0;
        bool finished = false;
        StopReason reason = StopReason::kMaxTokens;
        std::string error;
    };
    Announcement &announce(Sequence &seq);
    // Publishes the statistics, then the step's announcements (tokens, ends), waking readers and notify callbacks.
    void publish();
    void release_blocks(Sequence &seq);
    void publish_full_blocks(Sequence &seq);
    void publish_stats();

    EngineParams params_;
    std::unique_ptr<BatchRunner> runner_;
    KvBlocks blocks_;
    std::shared_ptr<Inbox> inbox_;
    std::atomic<bool> stopping_{false};
    std::thread scheduler_;

    // ---- the scheduler's
    std::deque<std::shared_ptr<Sequence>> waiting_;   // FIFO; preempted sequences go back to the front
    std::vector<std::shared_ptr<Sequence>> running_;  // admitted, oldest admission first
    EngineStats counters_;                            // published to the Inbox after every step
    // The step being planned: its tokens, one segment per sequence, and the rows that sample.
    std::vector<int32_t> step_tokens_;
    std::vector<KvCache::Segment> segments_;
    std::vector<Sequence *> step_sequences_;          // [segment]
    std::vector<int32_t> output_rows_;
    std::vector<Sequence *> output_sequences_;        // [output]
    std::vector<int32_t> sampled_;                    // [output]
    std::vector<float> logits_;                       // [outputs, V]
    std::vector<Announcement> announcements_;
};

}  // namespace kt::runtime
