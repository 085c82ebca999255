// A Generator on kt_context: one context per slot, each slot decoding one request at a time on its own thread,
// requests beyond the slots waiting in a bounded queue. No batching across requests and no prefix reuse: this is
// the stand-in that lets the server run until it moves onto kt_engine.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "generator.h"

namespace kt_server {

class ContextGenerator final : public Generator {
public:
    // Creates n_slots contexts of `model` (which must outlive the generator). On failure returns null with *error set.
    static std::unique_ptr<ContextGenerator> create(kt_model *model, const kt_context_params &params, int32_t n_slots,
                                                    int32_t max_queued, std::string *error);
    ~ContextGenerator() override;

    SubmitStatus submit(const GenerationJob &job, std::unique_ptr<Sequence> *out, std::string *message) override;
    GeneratorStats stats() const override;
    int64_t n_ctx() const override { return n_ctx_; }

    struct Job;   // one request's state, shared by its Sequence and the slot running it
    struct Slot;  // a context's current job, polled by its abort callback

private:
    ContextGenerator() = default;
    void run_slot(kt_context *context, Slot *slot);

    std::vector<kt_context *> contexts_;
    std::vector<std::thread> threads_;
    int64_t n_ctx_ = 0;
    int32_t max_queued_ = 0;

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::shared_ptr<Job>> queue_;
    int64_t running_ = 0;
    bool stopping_ = false;
};

}  // namespace kt_server
