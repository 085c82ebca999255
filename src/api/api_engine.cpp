// kt_engine_*, kt_sequence_*: the batched multi-sequence engine (runtime/engine.h).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>

#include "api/api_internal.h"
#include "core/log.h"

using kt::Status;
using kt::api::copy_params;
using kt::api::guard;
using kt::api::require;

struct kt_engine {
    std::unique_ptr<kt::runtime::Engine> engine;
};

namespace {

// The caller's notify callback with the handle it names. kt_sequence_free clears `handle` under the mutex, so a
// callback already running finishes first and none starts after: the engine may hold the sequence (and call its
// notify) for up to a step after the handle is gone.
struct NotifyTarget {
    std::mutex mutex;
    kt_sequence *handle = nullptr;
    kt_sequence_notify_callback callback = nullptr;
    void *user_data = nullptr;

    void operator()() {
        std::lock_guard<std::mutex> lock(mutex);
        if (handle) callback(handle, user_data);
    }
};

}  // namespace

struct kt_sequence {
    std::shared_ptr<kt::runtime::Sequence> sequence;
    std::shared_ptr<NotifyTarget> notify;  // null without a callback
};

namespace {

Status create_engine(kt_model *model, const kt_engine_params &p, kt_engine **out) {
    KT_TRY(require(model != nullptr, "kt_engine_create: model is NULL"));
    KT_TRY(require(out != nullptr, "kt_engine_create: out_engine is NULL"));
    KT_TRY(require(p.n_threads >= 0, "kt_engine_create: n_threads is negative"));
    KT_TRY(require(p.n_ctx >= 0, "kt_engine_create: n_ctx is negative"));
    KT_TRY(require(p.prefix_cache == 0 || p.prefix_cache == 1, "kt_engine_create: prefix_cache must be 0 or 1"));
    KT_TRY(require(p.kernels == KT_KERNELS_AUTO || p.kernels == KT_KERNELS_REFERENCE,
                   "kt_engine_create: kernels must be KT_KERNELS_AUTO or KT_KERNELS_REFERENCE"));
    std::shared_ptr<const kt::model::Model> m;
    KT_TRY(kt::api::prepared_model(model, p.kernels, p.n_threads, &m));
    kt::runtime::EngineParams ep;
    ep.n_threads = p.n_threads;
    ep.max_sequences = p.max_sequences;
    ep.max_queued = p.max_queued;
    ep.n_ctx = p.n_ctx > 0 ? p.n_ctx : std::min(m->hp.n_ctx_train, kt::api::kDefaultMaxContext);
    ep.kv_budget_bytes = p.kv_budget_bytes;
    ep.kv_type = p.kv_type;
    ep.kv_block_tokens = p.kv_block_tokens;
    ep.max_step_tokens = p.max_step_tokens;
    ep.prefix_cache = p.prefix_cache != 0;
    auto engine = std::make_unique<kt_engine>();
    KT_TRY(kt::runtime::Engine::create(std::move(m), ep, &engine->engine));
    *out = engine.release();
    return Status::ok();
}

Status submit(kt_engine *engine, const kt_sequence_params *given, kt_sequence **out) {
    KT_TRY(require(engine != nullptr, "kt_engine_submit: engine is NULL"));
    KT_TRY(require(given != nullptr, "kt_engine_submit: params is NULL"));
    KT_TRY(require(out != nullptr, "kt_engine_submit: out_sequence is NULL"));
    kt_sequence_params p;
    kt_sequence_params_init(&p);
    KT_TRY(copy_params(given, offsetof(kt_sequence_params, notify_user_data) + sizeof(void *), "kt_sequence_params",
                       &p));
    KT_TRY(require(p.reserved0 == 0, "kt_sequence_params.reserved0 must be 0"));
    KT_TRY(require(p.n_prompt >= 1, "kt_sequence_params.n_prompt must be at least 1"));
    KT_TRY(require(p.prompt != nullptr, "kt_sequence_params.prompt is NULL"));
    KT_TRY(require(p.n_stop_tokens >= 0, "kt_sequence_params.n_stop_tokens is negative"));
    KT_TRY(require(p.stop_tokens != nullptr || p.n_stop_tokens == 0, "kt_sequence_params.stop_tokens is NULL"));
    kt::runtime::SequenceParams sp;
    sp.prompt.assign(p.prompt, p.prompt + p.n_prompt);
    sp.max_tokens = p.max_tokens;
    KT_TRY(kt::api::read_sampler(p.sampler, &sp.sampler));
    sp.stop_tokens.assign(p.stop_tokens, p.stop_tokens + p.n_stop_tokens);
    auto handle = std::make_unique<kt_sequence>();
    if (p.notify) {
        handle->notify = std::make_shared<NotifyTarget>();
        handle->notify->handle = handle.get();
        handle->notify->callback = p.notify;
        handle->notify->user_data = p.notify_user_data;
        sp.notify = [target = handle->notify] { (*target)(); };
    }
    KT_TRY(engine->engine->submit(std::move(sp), &handle->sequence));
    *out = handle.release();
    return Status::ok();
}

}  // namespace

extern "C" {

KT_API void kt_engine_params_init(kt_engine_params *params) {
    if (!params) return;
    std::memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->max_sequences = 16;
    params->max_queued = 256;
    params->kv_type = KT_TYPE_F16;
    params->kv_block_tokens = 16;
    params->max_step_tokens = 512;
    params->prefix_cache = 1;
    params->kernels = KT_KERNELS_AUTO;
}

KT_API kt_status kt_engine_create(kt_model *model, const kt_engine_params *params, kt_engine **out_engine,
                                  kt_error *err) {
    if (out_engine) *out_engine = nullptr;
    kt_engine_params p;
    kt_engine_params_init(&p);
    Status s = guard([&]() -> Status {
        KT_TRY(copy_params(params, offsetof(kt_engine_params, kernels) + sizeof(int32_t), "kt_engine_create", &p));
        return create_engine(model, p, out_engine);
    });
    kt::api::fill_error(err, s);
    if (!s.is_ok()) KT_LOG_ERROR_MSG("%s", s.message().c_str());
    return s.code();
}

KT_API void kt_engine_free(kt_engine *engine) { delete engine; }

KT_API void kt_sequence_params_init(kt_sequence_params *params) {
    if (!params) return;
    std::memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->max_tokens = 128;
}

KT_API kt_status kt_engine_submit(kt_engine *engine, const kt_sequence_params *params, kt_sequence **out_sequence,
                                  kt_error *err) {
    if (out_sequence) *out_sequence = nullptr;
    Status s = guard([&]() -> Status { return submit(engine, params, out_sequence); });
    kt::api::fill_error(err, s);
    return s.code();
}

KT_API kt_status kt_sequence_read(kt_sequence *sequence, int32_t *tokens, int64_t capacity, int32_t timeout_ms,
                                  int64_t *out_n, int32_t *out_finish) {
    if (out_n) *out_n = 0;
    if (out_finish) *out_finish = KT_FINISH_NONE;
    Status s = guard([&]() -> Status {
        KT_TRY(require(sequence != nullptr, "kt_sequence_read: sequence is NULL"));
        KT_TRY(require(tokens != nullptr, "kt_sequence_read: tokens is NULL"));
        KT_TRY(require(capacity >= 1, "kt_sequence_read: capacity must be at least 1"));
        int64_t n = 0;
        bool finished = false;
        kt::runtime::StopReason reason = kt::runtime::StopReason::kMaxTokens;
        sequence->sequence->read(tokens, capacity, timeout_ms, &n, &finished, &reason);
        if (out_n) *out_n = n;
        if (out_finish) *out_finish = finished ? static_cast<int32_t>(reason) : KT_FINISH_NONE;
        return Status::ok();
    });
    return s.code();
}

KT_API void kt_sequence_cancel(kt_sequence *sequence) {
    if (!sequence) return;
    (void)guard([&]() -> Status {
        sequence->sequence->cancel();
        return Status::ok();
    });
}

KT_API void kt_sequence_free(kt_sequence *sequence) {
    if (!sequence) return;
    if (sequence->notify) {
        std::lock_guard<std::mutex> lock(sequence->notify->mutex);
        sequence->notify->handle = nullptr;
    }
    kt_sequence_cancel(sequence);
    delete sequence;
}

KT_API kt_status kt_sequence_get_info(const kt_sequence *sequence, kt_sequence_info *out_info) {
    return guard([&]() -> Status {
        KT_TRY(require(sequence != nullptr, "kt_sequence_get_info: sequence is NULL"));
        KT_TRY(require(out_info != nullptr, "kt_sequence_get_info: out_info is NULL"));
        KT_TRY(require(out_info->struct_size >= sizeof(kt_sequence_info),
                       "kt_sequence_get_info: out_info->struct_size is smaller than this library's kt_sequence_info"));
        const kt::runtime::SequenceInfo i = sequence->sequence->info();
        const uint32_t size = out_info->struct_size;
        std::memset(out_info, 0, sizeof(kt_sequence_info));
        out_info->struct_size = size;
        out_info->state = static_cast<int32_t>(i.state);
        out_info->finish_reason = i.finished ? static_cast<int32_t>(i.reason) : KT_FINISH_NONE;
        out_info->n_preemptions = i.n_preemptions;
        out_info->n_prompt = i.n_prompt;
        out_info->n_prompt_cached = i.n_prompt_cached;
        out_info->n_generated = i.n_generated;
        out_info->queued_seconds = i.queued_seconds;
        out_info->first_token_seconds = i.first_token_seconds;
        out_info->elapsed_seconds = i.elapsed_seconds;
        return Status::ok();
    }).code();
}

KT_API const char *kt_sequence_last_error(const kt_sequence *sequence) {
    if (!sequence) return "sequence is NULL";
    return sequence->sequence->error();
}

KT_API kt_status kt_engine_get_stats(const kt_engine *engine, kt_engine_stats *out_stats) {
    return guard([&]() -> Status {
        KT_TRY(require(engine != nullptr, "kt_engine_get_stats: engine is NULL"));
        KT_TRY(require(out_stats != nullptr, "kt_engine_get_stats: out_stats is NULL"));
        KT_TRY(require(out_stats->struct_size >= sizeof(kt_engine_stats),
                       "kt_engine_get_stats: out_stats->struct_size is smaller than this library's kt_engine_stats"));
        const kt::runtime::EngineStats s = engine->engine->stats();
        const uint32_t size = out_stats->struct_size;
        std::memset(out_stats, 0, sizeof(kt_engine_stats));
        out_stats->struct_size = size;
        out_stats->n_running = s.n_running;
        out_stats->n_queued = s.n_queued;
        out_stats->kv_block_tokens = static_cast<int32_t>(s.block_tokens);
        out_stats->kv_blocks_total = s.blocks_total;
        out_stats->kv_blocks_used = s.blocks_used;
        out_stats->kv_blocks_cached = s.blocks_cached;
        out_stats->kv_bytes = s.kv_bytes;
        out_stats->n_submitted = s.n_submitted;
        out_stats->n_finished = s.n_finished;
        out_stats->n_preemptions = s.n_preemptions;
        out_stats->n_prompt_tokens = s.n_prompt_tokens;
        out_stats->n_prompt_tokens_cached = s.n_prompt_tokens_cached;
        out_stats->n_prefill_tokens = s.n_prefill_tokens;
        out_stats->n_generated_tokens = s.n_generated_tokens;
        out_stats->n_steps = s.n_steps;
        out_stats->step_seconds = s.step_seconds;
        static_assert(kt::runtime::kStepBuckets == KT_ENGINE_STEP_BUCKETS, "one histogram");
        std::copy_n(s.step_tokens, KT_ENGINE_STEP_BUCKETS, out_stats->step_tokens);
        return Status::ok();
    }).code();
}

}  // extern "C"
