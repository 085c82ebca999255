// kt_context's implementation: one sequence's KV cache, the forward-pass scratch, sampling and generation.
//
// A Context runs a shared, immutable model::Model; several contexts may run the same model at once, each from
// one thread at a time. decode() feeds tokens in steps of n_batch (prefill) or one at a time (decode), keeps
// the logits the caller asked for, and is all-or-nothing: if it fails or is cancelled, the sequence is as it
// was before the call.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/arch/arch.h"
#include "model/model.h"
#include "runtime/batch_runner.h"
#include "runtime/sampler.h"

namespace kt::runtime {

struct ContextParams {
    int64_t n_ctx = 4096;          // positions the KV cache holds
    int64_t n_batch = 512;         // tokens per forward step
    int n_threads = 0;             // 0: one per physical core
    int32_t kv_type = KT_TYPE_F16;
    std::function<bool()> should_abort;  // polled after every layer; true cancels the decode
};

enum class Logits { kNone, kLast, kAll };

// Why generation ended (kt.h's KT_STOP_*): the last two only for the engine's sequences.
enum class StopReason : int32_t {
    kMaxTokens = 0,
    kStopToken = 1,
    kCallback = 2,
    kContextFull = 3,
    kCancelled = 4,
    kError = 5,
};

struct GenerateParams {
    int64_t max_tokens = 0;
    std::vector<int32_t> stop_tokens;          // not decoded, not reported to on_token
    SamplerParams sampler;
    std::function<bool(int32_t)> on_token;     // each generated token; false stops
};

struct PerfCounters {
    int64_t n_prefill_tokens = 0;   // tokens of decode calls with more than one token
    double prefill_seconds = 0.0;
    int64_t n_decode_tokens = 0;    // single-token decode calls
    double decode_seconds = 0.0;
    double phase_seconds[static_cast<int>(model::Phase::kCount)] = {};
};

class Context final {
public:
    static Status create(std::shared_ptr<const model::Model> model, const ContextParams &params,
                         std::unique_ptr<Context> *out);

    const model::Model &model() const { return runner_->model(); }
    int n_threads() const { return runner_->n_threads(); }
    int64_t n_ctx() const { return n_ctx_; }
    int64_t n_past() const { return n_past_; }
    int64_t n_vocab() const { return model().hp.n_vocab; }
    uint64_t kv_bytes() const { return runner_->cache().bytes(); }
    uint64_t kv_bytes_per_position() const { return runner_->cache().bytes_per_position(); }

    // Appends tokens at positions n_past.. and runs them through the model. KT_STATUS_CONTEXT_FULL when they do
    // not fit (nothing is done), KT_STATUS_CANCELLED when should_abort fired (the sequence is unchanged).
    Status decode(const int32_t *tokens, int64_t n_tokens, Logits logits);
    // Logits rows kept by the last decode: all its tokens (kAll), the last one (kLast) or none.
    int64_t n_logit_rows() const { return n_logit_rows_; }
    const float *logits_row(int64_t row) const { return logits_.data() + row * n_vocab(); }

    // Forgets the sequence (the cache is reused) and the logits; the sampler is re-seeded on its next use.
    void reset();

    // Samples from the last logits row; the tokens decoded so far feed the penalties.
    Status sample(const SamplerParams &params, int32_t *out_token);

    // Decodes the prompt (may be empty if the context already holds tokens and logits), then samples and decodes
    // until a stop condition. Every token appended to `out` has been decoded, so a later call continues the
    // sequence; a stop token is neither decoded nor reported.
    Status generate(const int32_t *prompt, int64_t n_prompt, const GenerateParams &params, std::vector<int32_t> *out,
                    StopReason *reason);

    PerfCounters perf() const;
    void reset_perf();

private:
    Context() = default;
    Status check_tokens(const int32_t *tokens, int64_t n) const;

    // The one-sequence user of the batched forward path: its cache is a single block holding the whole context.
    std::unique_ptr<BatchRunner> runner_;
    int64_t n_ctx_ = 0;
    int64_t n_batch_ = 0;
    const int32_t block_table_[1] = {0};
    int64_t n_past_ = 0;
    std::vector<int32_t> history_;       // every token decoded, in order (penalties)
    std::vector<float> logits_;          // [n_logit_rows, V]
    int64_t n_logit_rows_ = 0;
    Sampler sampler_;
    bool sampler_seeded_ = false;
    uint64_t sampler_seed_ = 0;
    PerfCounters perf_;                  // token counts and seconds; the phases are the runner's
};

}  // namespace kt::runtime
