// kt-server's generation on kt.h's batched engine: one kt_engine for the model, one kt_sequence per request.
// The engine puts every running request into each forward step (continuous batching), keeps the KV cache as a
// pool of blocks under a budget and reuses prompt prefixes across requests; these classes adapt its C API to
// what the HTTP handlers need (C++ ownership, the server's own names for how a generation ended).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kt.h"

namespace kt_server {

struct GenerationJob {
    std::vector<int32_t> prompt;
    int64_t max_tokens = 0;              // >= 1
    kt_sampler_params sampler{};
    std::vector<int32_t> stop_tokens;    // sampling one ends the generation (it is not reported)
};

enum class Finish {
    kRunning,      // more tokens may come
    kStopToken,    // an end-of-generation token was sampled (not reported)
    kLength,       // max_tokens reached, or the context is full
    kCancelled,    // cancel() was called (the drain on SIGTERM)
    kError,        // the message is in SequenceRead::error
};

struct SequenceRead {
    Finish finish = Finish::kRunning;
    std::string error;
};

struct SequenceInfo {
    int64_t n_prompt = 0;
    int64_t n_prompt_cached = 0;  // prompt tokens whose KV came from the prefix cache
    int64_t n_generated = 0;
};

// One request's generation (a kt_sequence). Destroying it cancels the generation if it still runs and gives its
// KV blocks back. Used by one thread at a time, except cancel(), which any thread may call.
class Sequence {
public:
    explicit Sequence(kt_sequence *sequence) : sequence_(sequence) {}
    ~Sequence() { kt_sequence_free(sequence_); }
    Sequence(const Sequence &) = delete;
    Sequence &operator=(const Sequence &) = delete;

    // Waits up to timeout_ms for at least one new token or the end, and appends the new tokens to *tokens. The
    // end is reported once every token before it has been handed out.
    SequenceRead read(std::vector<int32_t> *tokens, int32_t timeout_ms);
    void cancel() { kt_sequence_cancel(sequence_); }
    SequenceInfo info() const;

private:
    kt_sequence *sequence_;
};

enum class SubmitStatus {
    kOk,
    kBusy,        // the queue is full: answer 503 with Retry-After
    kInvalid,     // the job cannot run (the message says why): answer 400
    kError,       // anything else: 500
};

struct GeneratorStats {
    int64_t running = 0;
    int64_t queued = 0;
    int64_t kv_blocks_used = 0;
    int64_t kv_blocks_total = 0;
    int64_t kv_blocks_cached = 0;  // held only by the prefix cache (reusable)
    int64_t preemptions = 0;
};

// The engine. Thread-safe: every connection thread submits and reads concurrently.
class Generator {
public:
    // Creates the engine (the model must outlive it). On failure returns null with *error set.
    static std::unique_ptr<Generator> create(kt_model *model, const kt_engine_params &params, std::string *error);
    ~Generator() { kt_engine_free(engine_); }
    Generator(const Generator &) = delete;
    Generator &operator=(const Generator &) = delete;

    SubmitStatus submit(const GenerationJob &job, std::unique_ptr<Sequence> *out, std::string *message);
    GeneratorStats stats() const;
    // Positions one sequence may hold (prompt + generated tokens).
    int64_t n_ctx() const { return n_ctx_; }

private:
    Generator(kt_engine *engine, int64_t n_ctx) : engine_(engine), n_ctx_(n_ctx) {}

    kt_engine *engine_;
    int64_t n_ctx_;
};

}  // namespace kt_server
