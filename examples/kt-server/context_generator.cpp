#include "context_generator.h"

#include <atomic>
#include <chrono>

namespace kt_server {

struct ContextGenerator::Job {
    GenerationJob job;
    std::atomic<bool> cancelled{false};

    std::mutex mutex;
    std::condition_variable changed;
    std::vector<int32_t> tokens;  // generated so far
    size_t n_read = 0;            // of tokens, handed to the reader
    Finish finish = Finish::kRunning;
    std::string error;
};

namespace {

class ContextSequence final : public Sequence {
public:
    explicit ContextSequence(std::shared_ptr<ContextGenerator::Job> job) : job_(std::move(job)) {}
    ~ContextSequence() override { cancel(); }

    SequenceRead read(std::vector<int32_t> *tokens, int32_t timeout_ms) override {
        ContextGenerator::Job &j = *job_;
        std::unique_lock<std::mutex> lock(j.mutex);
        j.changed.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                           [&] { return j.n_read < j.tokens.size() || j.finish != Finish::kRunning; });
        tokens->insert(tokens->end(), j.tokens.begin() + static_cast<long>(j.n_read), j.tokens.end());
        j.n_read = j.tokens.size();
        // The end is reported only once every token before it has been read.
        return {j.finish, j.error};
    }

    void cancel() override {
        job_->cancelled = true;
        std::lock_guard<std::mutex> lock(job_->mutex);
        if (job_->finish == Finish::kRunning) job_->changed.notify_all();
    }

    SequenceInfo info() const override {
        std::lock_guard<std::mutex> lock(job_->mutex);
        return {static_cast<int64_t>(job_->job.prompt.size()), 0, static_cast<int64_t>(job_->tokens.size())};
    }

private:
    std::shared_ptr<ContextGenerator::Job> job_;
};

int32_t abort_requested(void *user_data);

int32_t on_token(int32_t token, void *user_data) {
    auto &job = *static_cast<ContextGenerator::Job *>(user_data);
    {
        std::lock_guard<std::mutex> lock(job.mutex);
        job.tokens.push_back(token);
    }
    job.changed.notify_all();
    return job.cancelled ? 1 : 0;
}

}  // namespace

struct ContextGenerator::Slot {
    std::atomic<Job *> job{nullptr};
};

namespace {

int32_t abort_requested(void *user_data) {
    ContextGenerator::Job *job = static_cast<ContextGenerator::Slot *>(user_data)->job.load();
    return job && job->cancelled ? 1 : 0;
}

}  // namespace

std::unique_ptr<ContextGenerator> ContextGenerator::create(kt_model *model, const kt_context_params &params,
                                                           int32_t n_slots, int32_t max_queued, std::string *error) {
    std::unique_ptr<ContextGenerator> g(new ContextGenerator());
    g->max_queued_ = max_queued;
    for (int32_t i = 0; i < n_slots; ++i) {
        auto *slot = new Slot();
        kt_context_params cp = params;
        cp.abort_callback = abort_requested;
        cp.abort_user_data = slot;
        kt_error err = {sizeof(kt_error), 0, {0}};
        kt_context *ctx = nullptr;
        if (kt_context_create(model, &cp, &ctx, &err) != KT_STATUS_OK) {
            delete slot;
            *error = err.message;
            return nullptr;  // the destructor stops the slots already started
        }
        g->n_ctx_ = kt_context_n_ctx(ctx);
        g->contexts_.push_back(ctx);
        g->threads_.emplace_back([gen = g.get(), ctx, slot] {
            std::unique_ptr<Slot> owned(slot);
            gen->run_slot(ctx, slot);
        });
    }
    return g;
}

ContextGenerator::~ContextGenerator() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        for (auto &job : queue_) job->cancelled = true;
    }
    wake_.notify_all();
    for (std::thread &t : threads_) t.join();
    for (kt_context *ctx : contexts_) kt_context_free(ctx);
}

SubmitStatus ContextGenerator::submit(const GenerationJob &job, std::unique_ptr<Sequence> *out, std::string *message) {
    if (job.prompt.empty() || static_cast<int64_t>(job.prompt.size()) >= n_ctx_) {
        *message = "the prompt must hold 1 to " + std::to_string(n_ctx_ - 1) + " tokens";
        return SubmitStatus::kInvalid;
    }
    auto state = std::make_shared<Job>();
    state->job = job;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const int64_t idle = static_cast<int64_t>(contexts_.size()) - running_;
        if (static_cast<int64_t>(queue_.size()) - idle >= max_queued_) {
            *message = "the server is busy: every sequence is taken and the queue is full";
            return SubmitStatus::kBusy;
        }
        queue_.push_back(state);
    }
    wake_.notify_one();
    *out = std::make_unique<ContextSequence>(std::move(state));
    return SubmitStatus::kOk;
}

GeneratorStats ContextGenerator::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    GeneratorStats s;
    s.running = running_;
    s.queued = static_cast<int64_t>(queue_.size());
    return s;
}

void ContextGenerator::run_slot(kt_context *ctx, Slot *slot) {
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping
            job = std::move(queue_.front());
            queue_.pop_front();
            ++running_;
        }
        slot->job = job.get();
        Finish finish = Finish::kCancelled;
        std::string error;
        if (!job->cancelled) {
            kt_context_reset(ctx);
            kt_generate_params gp;
            kt_generate_params_init(&gp);
            const int64_t room = n_ctx_ - static_cast<int64_t>(job->job.prompt.size());
            gp.max_tokens = std::min(job->job.max_tokens, room);
            gp.stop_tokens = job->job.stop_tokens.data();
            gp.n_stop_tokens = static_cast<int64_t>(job->job.stop_tokens.size());
            gp.sampler = &job->job.sampler;
            gp.on_token = on_token;
            gp.user_data = job.get();
            int32_t reason = 0;
            const kt_status s = kt_context_generate(ctx, job->job.prompt.data(),
                                                    static_cast<int64_t>(job->job.prompt.size()), &gp, nullptr, 0,
                                                    nullptr, &reason);
            if (job->cancelled) finish = Finish::kCancelled;
            else if (s != KT_STATUS_OK) finish = Finish::kError, error = kt_context_last_error(ctx);
            else finish = reason == KT_STOP_TOKEN ? Finish::kStopToken : Finish::kLength;
        }
        slot->job = nullptr;
        {
            std::lock_guard<std::mutex> lock(job->mutex);
            job->finish = finish;
            job->error = error;
        }
        job->changed.notify_all();
        std::lock_guard<std::mutex> lock(mutex_);
        --running_;
    }
}

}  // namespace kt_server
