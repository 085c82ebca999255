#include "generator.h"

namespace kt_server {

namespace {

Finish finish_of(int32_t stop) {
    switch (stop) {
    case KT_FINISH_NONE: return Finish::kRunning;
    case KT_STOP_TOKEN: return Finish::kStopToken;
    case KT_STOP_CANCELLED: return Finish::kCancelled;
    case KT_STOP_ERROR: return Finish::kError;
    default: return Finish::kLength;  // KT_STOP_MAX_TOKENS, KT_STOP_CONTEXT_FULL
    }
}

}  // namespace

SequenceRead Sequence::read(std::vector<int32_t> *tokens, int32_t timeout_ms) {
    int32_t buf[256];
    int64_t n = 0;
    int32_t finish = KT_FINISH_NONE;
    const kt_status s = kt_sequence_read(sequence_, buf, 256, timeout_ms, &n, &finish);
    if (s != KT_STATUS_OK) return {Finish::kError, kt_status_string(s)};
    tokens->insert(tokens->end(), buf, buf + n);
    SequenceRead r{finish_of(finish), ""};
    if (r.finish == Finish::kError) r.error = kt_sequence_last_error(sequence_);
    return r;
}

SequenceInfo Sequence::info() const {
    kt_sequence_info i;
    i.struct_size = sizeof i;
    if (kt_sequence_get_info(sequence_, &i) != KT_STATUS_OK) return {};
    return {i.n_prompt, i.n_prompt_cached, i.n_generated};
}

std::unique_ptr<Generator> Generator::create(kt_model *model, const kt_engine_params &params, std::string *error) {
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_engine *engine = nullptr;
    if (kt_engine_create(model, &params, &engine, &err) != KT_STATUS_OK) {
        *error = err.message;
        return nullptr;
    }
    return std::unique_ptr<Generator>(new Generator(engine, params.n_ctx));
}

SubmitStatus Generator::submit(const GenerationJob &job, std::unique_ptr<Sequence> *out, std::string *message) {
    kt_sequence_params p;
    kt_sequence_params_init(&p);
    p.prompt = job.prompt.data();
    p.n_prompt = static_cast<int64_t>(job.prompt.size());
    p.max_tokens = job.max_tokens;
    p.sampler = &job.sampler;
    p.stop_tokens = job.stop_tokens.data();
    p.n_stop_tokens = static_cast<int64_t>(job.stop_tokens.size());
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_sequence *sequence = nullptr;
    const kt_status s = kt_engine_submit(engine_, &p, &sequence, &err);
    if (s == KT_STATUS_OK) {
        *out = std::make_unique<Sequence>(sequence);
        return SubmitStatus::kOk;
    }
    *message = err.message;
    if (s == KT_STATUS_BUSY) return SubmitStatus::kBusy;
    if (s == KT_STATUS_INVALID_ARGUMENT || s == KT_STATUS_CONTEXT_FULL) return SubmitStatus::kInvalid;
    return SubmitStatus::kError;
}

GeneratorStats Generator::stats() const {
    kt_engine_stats s;
    s.struct_size = sizeof s;
    if (kt_engine_get_stats(engine_, &s) != KT_STATUS_OK) return {};
    GeneratorStats g;
    g.running = s.n_running;
    g.queued = s.n_queued;
    g.kv_blocks_used = s.kv_blocks_used;
    g.kv_blocks_total = s.kv_blocks_total;
    g.kv_blocks_cached = s.kv_blocks_cached;
    g.preemptions = s.n_preemptions;
    return g;
}

}  // namespace kt_server
