// kt_engine_*, kt_sequence_*: the batched multi-sequence engine (runtime/engine.h).
//
// This first version declares the ABI so that its users can be written against it; the functions that need the
// engine report KT_STATUS_UNSUPPORTED until the runtime behind them lands.
#include <cstring>

#include "api/api_internal.h"

namespace {

const char kNotYet[] = "the batched engine is not implemented in this build yet";

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

KT_API kt_status kt_engine_create(kt_model *, const kt_engine_params *, kt_engine **out_engine, kt_error *err) {
    if (out_engine) *out_engine = nullptr;
    kt::api::fill_error(err, kt::Status(KT_STATUS_UNSUPPORTED, kNotYet));
    return KT_STATUS_UNSUPPORTED;
}

KT_API void kt_engine_free(kt_engine *) {}

KT_API void kt_sequence_params_init(kt_sequence_params *params) {
    if (!params) return;
    std::memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->max_tokens = 128;
}

KT_API kt_status kt_engine_submit(kt_engine *, const kt_sequence_params *, kt_sequence **out_sequence, kt_error *err) {
    if (out_sequence) *out_sequence = nullptr;
    kt::api::fill_error(err, kt::Status(KT_STATUS_UNSUPPORTED, kNotYet));
    return KT_STATUS_UNSUPPORTED;
}

KT_API kt_status kt_sequence_read(kt_sequence *, int32_t *, int64_t, int32_t, int64_t *, int32_t *) {
    return KT_STATUS_UNSUPPORTED;
}

KT_API void kt_sequence_cancel(kt_sequence *) {}
KT_API void kt_sequence_free(kt_sequence *) {}

KT_API kt_status kt_sequence_get_info(const kt_sequence *, kt_sequence_info *) { return KT_STATUS_UNSUPPORTED; }

KT_API const char *kt_sequence_last_error(const kt_sequence *) { return kNotYet; }

KT_API kt_status kt_engine_get_stats(const kt_engine *, kt_engine_stats *) { return KT_STATUS_UNSUPPORTED; }

}  // extern "C"
