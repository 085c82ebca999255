// kt_context_*: running a model (decode, logits, sampling, generation, performance counters).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>

#include "api/api_internal.h"
#include "core/log.h"
#include "ops/linear.h"
#include "runtime/engine_kernels.h"
#include "runtime/pack_cache.h"

using kt::Status;
using kt::api::guard;
using kt::api::guard_on;
using kt::api::prepared_model;
using kt::api::read_sampler;
using kt::api::require;

namespace {

Status create_context(kt_model *model, const kt_context_params &p, kt_context **out) {
    KT_TRY(require(model != nullptr, "kt_context_create: model is NULL"));
    KT_TRY(require(out != nullptr, "kt_context_create: out_context is NULL"));
    KT_TRY(require(p.n_threads >= 0, "kt_context_create: n_threads is negative"));
    KT_TRY(require(p.n_ctx >= 0, "kt_context_create: n_ctx is negative"));
    KT_TRY(require(p.kernels == KT_KERNELS_AUTO || p.kernels == KT_KERNELS_REFERENCE,
                   "kt_context_create: kernels must be KT_KERNELS_AUTO or KT_KERNELS_REFERENCE"));
    std::shared_ptr<const kt::model::Model> m;
    KT_TRY(prepared_model(model, p.kernels, p.n_threads, &m));

    kt::runtime::ContextParams cp;
    cp.n_ctx = p.n_ctx > 0 ? p.n_ctx : std::min(m->hp.n_ctx_train, kt::api::kDefaultMaxContext);
    cp.n_batch = p.n_batch;
    cp.n_threads = p.n_threads;
    cp.kv_type = p.kv_type;
    if (p.abort_callback) {
        const kt_abort_callback callback = p.abort_callback;
        void *user_data = p.abort_user_data;
        cp.should_abort = [callback, user_data]() { return callback(user_data) != 0; };
    }
    auto ctx = std::make_unique<kt_context>();
    KT_TRY(kt::runtime::Context::create(std::move(m), cp, &ctx->context));
    *out = ctx.release();
    return Status::ok();
}

kt::runtime::SamplerParams sampler_params(const kt_sampler_params &p) {
    kt::runtime::SamplerParams s;
    s.temperature = p.temperature;
    s.top_k = p.top_k;
    s.top_p = p.top_p;
    s.min_p = p.min_p;
    s.repeat_penalty = p.repeat_penalty;
    s.repeat_last_n = p.repeat_last_n;
    s.presence_penalty = p.presence_penalty;
    s.frequency_penalty = p.frequency_penalty;
    s.seed = p.seed;
    return s;
}

Status check_context(const kt_context *c) { return require(c != nullptr, "context is NULL"); }

}  // namespace

namespace kt::api {

Status require(bool condition, const char *what) {
    if (condition) return Status::ok();
    return Status::error(KT_STATUS_INVALID_ARGUMENT, "%s", what);
}

Status prepared_model(kt_model *model, int32_t kernels, int32_t n_threads, std::shared_ptr<const model::Model> *out,
                      const model::Model::Progress &progress, std::shared_ptr<moe::PackedStore> store) {
    std::lock_guard<std::mutex> lock(model->runners_mutex);
    std::shared_ptr<const kt::model::Model> &slot = model->runners[kernels];
    if (!slot) {
        // With a pack cache read to the end nothing was packed: the time is that of mapping its buffers (checked
        // before).
        const auto *cache = dynamic_cast<const kt::runtime::PackCache *>(model->engine ? nullptr : store.get());
        const kt::ops::KernelFactory *factory = &kt::ops::reference_kernels();
        if (kernels == KT_KERNELS_AUTO) {
            if (!model->engine) {
                kt::runtime::EngineOptions options;
                options.n_threads = n_threads;
                options.store = std::move(store);
                options.device = model->device;
                options.plan = model->device_plan;
                options.deferred_experts = model->device_deferred_experts;
                options.prefill_threshold = model->device_prefill_threshold;
                options.stream_shape = model->device_stream_shape;
                options.stream_slots = model->device_stream_slots;
                KT_TRY(kt::runtime::create_engine_kernels(options, &model->engine));
            }
            factory = model->engine.get();
        }
        std::unique_ptr<kt::model::Model> m;
        const auto start = std::chrono::steady_clock::now();
        KT_TRY(kt::model::Model::load(*model->file, *factory, &m, progress));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const bool mapped = cache && cache->reading();
        // The rate counts the file's bytes (as stored) that were bound and packed, per second of wall time.
        KT_LOG_INFO_MSG("%s: %s, %lld layers, hidden %lld, %lld experts (%lld used), vocabulary %lld; kernels: %s; "
                        "%.2f GB of weights %s in %.2f s (%.2f GB/s)",
                        model->file->source_name().c_str(), m->hp.arch.c_str(), static_cast<long long>(m->hp.n_layer),
                        static_cast<long long>(m->hp.n_embd), static_cast<long long>(m->hp.n_expert),
                        static_cast<long long>(m->hp.n_expert_used), static_cast<long long>(m->hp.n_vocab),
                        m->kernels->name(), static_cast<double>(m->weight_bytes) * 1e-9,
                        mapped ? "mapped from the pack cache" : "prepared", seconds,
                        seconds > 0 ? static_cast<double>(m->weight_bytes) * 1e-9 / seconds : 0.0);
        slot = std::move(m);
    }
    *out = slot;
    return Status::ok();
}

Status read_sampler(const kt_sampler_params *given, runtime::SamplerParams *out) {
    if (!given) {
        *out = kt::runtime::SamplerParams();
        return Status::ok();
    }
    kt_sampler_params p;
    KT_TRY(kt::api::read_struct(given, &p, "kt_sampler_params"));
    KT_TRY(require(p.reserved0 == 0, "kt_sampler_params.reserved0 must be 0"));
    KT_TRY(require(p.repeat_last_n >= -1, "kt_sampler_params.repeat_last_n must be >= -1"));
    KT_TRY(require(p.repeat_penalty > 0.0f, "kt_sampler_params.repeat_penalty must be positive"));
    *out = sampler_params(p);
    return Status::ok();
}

}  // namespace kt::api

extern "C" {

KT_API void kt_context_params_init(kt_context_params *params) {
    if (!params) return;
    *params = kt::api::zeroed_struct<kt_context_params>();
    params->n_batch = 512;
    params->kv_type = KT_TYPE_F16;
    params->kernels = KT_KERNELS_AUTO;
}

KT_API kt_status kt_context_create(kt_model *model, const kt_context_params *params, kt_context **out_context,
                                   kt_error *err) {
    if (out_context) *out_context = nullptr;
    kt_context_params p;
    kt_context_params_init(&p);
    Status s = guard([&]() -> Status {
        if (params) KT_TRY(kt::api::read_struct(params, &p, "kt_context_create: params"));
        return create_context(model, p, out_context);
    });
    kt::api::fill_error(err, s);
    if (!s.is_ok()) KT_LOG_ERROR_MSG("%s", s.message().c_str());
    return s.code();
}

KT_API void kt_context_free(kt_context *context) { delete context; }

KT_API const char *kt_context_last_error(const kt_context *context) {
    if (!context) return "context is NULL";
    return context->error.get();
}

KT_API int64_t kt_context_n_vocab(const kt_context *context) { return context ? context->context->n_vocab() : 0; }
KT_API int64_t kt_context_n_ctx(const kt_context *context) { return context ? context->context->n_ctx() : 0; }
KT_API int64_t kt_context_n_past(const kt_context *context) { return context ? context->context->n_past() : 0; }
KT_API int32_t kt_context_n_threads(const kt_context *context) { return context ? context->context->n_threads() : 0; }

KT_API kt_status kt_context_kv_size(const kt_context *context, uint64_t *out_bytes, uint64_t *out_bytes_per_position) {
    if (!context) return KT_STATUS_INVALID_ARGUMENT;
    if (out_bytes) *out_bytes = context->context->kv_bytes();
    if (out_bytes_per_position) *out_bytes_per_position = context->context->kv_bytes_per_position();
    return KT_STATUS_OK;
}

KT_API kt_status kt_context_decode(kt_context *context, const int32_t *tokens, int64_t n_tokens, int32_t logits_mode) {
    return guard_on(context, [&]() -> Status {
        KT_TRY(check_context(context));
        KT_TRY(require(tokens != nullptr || n_tokens == 0, "kt_context_decode: tokens is NULL"));
        KT_TRY(require(logits_mode >= KT_LOGITS_NONE && logits_mode <= KT_LOGITS_ALL,
                       "kt_context_decode: logits_mode must be KT_LOGITS_NONE, KT_LOGITS_LAST or KT_LOGITS_ALL"));
        const kt::runtime::Logits mode = logits_mode == KT_LOGITS_ALL    ? kt::runtime::Logits::kAll
                                         : logits_mode == KT_LOGITS_LAST ? kt::runtime::Logits::kLast
                                                                         : kt::runtime::Logits::kNone;
        return context->context->decode(tokens, n_tokens, mode);
    });
}

KT_API kt_status kt_context_logits(kt_context *context, int64_t row, const float **out_logits, int64_t *out_rows) {
    return guard_on(context, [&]() -> Status {
        KT_TRY(check_context(context));
        KT_TRY(require(out_logits != nullptr, "kt_context_logits: out_logits is NULL"));
        const int64_t rows = context->context->n_logit_rows();
        if (out_rows) *out_rows = rows;
        const int64_t r = row == -1 ? rows - 1 : row;
        KT_RETURN_IF(r < 0 || r >= rows, KT_STATUS_NOT_FOUND, "logits row %lld is out of range (the last decode kept %lld)",
                     static_cast<long long>(row), static_cast<long long>(rows));
        *out_logits = context->context->logits_row(r);
        return Status::ok();
    });
}

KT_API void kt_context_reset(kt_context *context) {
    if (context) context->context->reset();
}

KT_API void kt_sampler_params_init(kt_sampler_params *params) {
    if (!params) return;
    *params = kt::api::zeroed_struct<kt_sampler_params>();
    params->temperature = 0.8f;
    params->top_k = 40;
    params->top_p = 0.95f;
    params->min_p = 0.05f;
    params->repeat_penalty = 1.0f;
    params->repeat_last_n = 64;
}

KT_API kt_status kt_context_sample(kt_context *context, const kt_sampler_params *params, int32_t *out_token) {
    return guard_on(context, [&]() -> Status {
        KT_TRY(check_context(context));
        KT_TRY(require(out_token != nullptr, "kt_context_sample: out_token is NULL"));
        kt::runtime::SamplerParams sp;
        KT_TRY(read_sampler(params, &sp));
        return context->context->sample(sp, out_token);
    });
}

KT_API void kt_generate_params_init(kt_generate_params *params) {
    if (!params) return;
    *params = kt::api::zeroed_struct<kt_generate_params>();
    params->max_tokens = 128;
}

KT_API kt_status kt_context_generate(kt_context *context, const int32_t *prompt, int64_t n_prompt,
                                     const kt_generate_params *params, int32_t *out_tokens, int64_t capacity,
                                     int64_t *out_n_tokens, int32_t *out_stop_reason) {
    if (out_n_tokens) *out_n_tokens = 0;
    return guard_on(context, [&]() -> Status {
        KT_TRY(check_context(context));
        KT_TRY(require(prompt != nullptr || n_prompt == 0, "kt_context_generate: prompt is NULL"));
        KT_TRY(require(n_prompt >= 0, "kt_context_generate: n_prompt is negative"));
        KT_TRY(require(out_tokens != nullptr || capacity == 0, "kt_context_generate: out_tokens is NULL"));
        kt_generate_params p;
        kt_generate_params_init(&p);
        if (params) KT_TRY(kt::api::read_struct(params, &p, "kt_context_generate: params"));
        KT_TRY(require(p.reserved0 == 0, "kt_generate_params.reserved0 must be 0"));
        KT_TRY(require(p.stop_tokens != nullptr || p.n_stop_tokens == 0, "kt_generate_params.stop_tokens is NULL"));
        KT_TRY(require(p.n_stop_tokens >= 0, "kt_generate_params.n_stop_tokens is negative"));

        kt::runtime::GenerateParams gp;
        gp.max_tokens = p.max_tokens;
        gp.stop_tokens.assign(p.stop_tokens, p.stop_tokens + p.n_stop_tokens);
        KT_TRY(read_sampler(p.sampler, &gp.sampler));
        int64_t written = 0;
        gp.on_token = [&](int32_t token) {
            if (out_tokens && written < capacity) out_tokens[written] = token;
            ++written;
            if (out_n_tokens) *out_n_tokens = written;
            return !(p.on_token && p.on_token(token, p.user_data) != 0);
        };
        std::vector<int32_t> generated;
        kt::runtime::StopReason reason = kt::runtime::StopReason::kMaxTokens;
        KT_TRY(context->context->generate(prompt, n_prompt, gp, &generated, &reason));
        if (out_stop_reason) *out_stop_reason = static_cast<int32_t>(reason);
        return Status::ok();
    });
}

KT_API kt_status kt_context_perf(const kt_context *context, kt_perf *out_perf) {
    return guard_on(context, [&]() -> Status {
        KT_TRY(check_context(context));
        KT_TRY(require(out_perf != nullptr, "kt_context_perf: out_perf is NULL"));
        const kt::runtime::PerfCounters &c = context->context->perf();
        kt_perf perf = kt::api::zeroed_struct<kt_perf>();
        perf.n_prefill_tokens = c.n_prefill_tokens;
        perf.prefill_seconds = c.prefill_seconds;
        perf.n_decode_tokens = c.n_decode_tokens;
        perf.decode_seconds = c.decode_seconds;
        using kt::model::Phase;
        auto phase = [&](Phase p) { return c.phase_seconds[static_cast<int>(p)]; };
        perf.attention_seconds = phase(Phase::kAttention);
        perf.experts_seconds = phase(Phase::kExperts);
        perf.dense_ffn_seconds = phase(Phase::kDenseFfn);
        perf.head_seconds = phase(Phase::kHead);
        perf.other_seconds = phase(Phase::kOther);
        return kt::api::write_struct(perf, out_perf, "kt_context_perf: out_perf");
    });
}

KT_API void kt_context_perf_reset(kt_context *context) {
    if (context) context->context->reset_perf();
}

}  // extern "C"
