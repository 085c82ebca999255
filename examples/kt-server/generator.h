// What the HTTP side needs from whatever decodes tokens: submit a prompt, read its tokens as they come, cancel.
// It mirrors kt.h's kt_engine / kt_sequence so the handlers do not care which one runs underneath.
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
    kCancelled,    // cancel() was called
    kError,        // the message is in SequenceRead::error
};

struct SequenceRead {
    Finish finish = Finish::kRunning;
    std::string error;
};

struct SequenceInfo {
    int64_t n_prompt = 0;
    int64_t n_prompt_cached = 0;  // prompt tokens whose KV was reused, not recomputed
    int64_t n_generated = 0;
};

// One request's generation. Destroying it cancels the generation if it still runs and frees what it holds.
// Used by one thread at a time, except cancel(), which any thread may call.
class Sequence {
public:
    virtual ~Sequence() = default;
    // Waits up to timeout_ms for at least one new token or the end, and appends the new tokens to *tokens.
    virtual SequenceRead read(std::vector<int32_t> *tokens, int32_t timeout_ms) = 0;
    virtual void cancel() = 0;
    virtual SequenceInfo info() const = 0;
};

enum class SubmitStatus {
    kOk,
    kBusy,        // the queue is full: answer 503 with Retry-After
    kInvalid,     // the job cannot run (message says why): answer 400
    kError,       // anything else: 500
};

struct GeneratorStats {
    int64_t running = 0;
    int64_t queued = 0;
    int64_t kv_blocks_used = 0;
    int64_t kv_blocks_total = 0;
    int64_t preemptions = 0;
};

// Thread-safe: every connection thread submits and reads concurrently.
class Generator {
public:
    virtual ~Generator() = default;
    virtual SubmitStatus submit(const GenerationJob &job, std::unique_ptr<Sequence> *out, std::string *message) = 0;
    virtual GeneratorStats stats() const = 0;
    // Positions one sequence may hold (prompt + generated tokens).
    virtual int64_t n_ctx() const = 0;
};

}  // namespace kt_server
