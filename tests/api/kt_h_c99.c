/* kt.h compiled as strict C99, with struct layouts pinned (Rust and Go bindings rely on them), and a smoke run
 * of the model API from C. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kt.h"

/* C99 has no _Static_assert: a negative array size fails the build instead. */
#define KT_STATIC_ASSERT(cond, name) typedef char kt_static_assert_##name[(cond) ? 1 : -1]
KT_STATIC_ASSERT(sizeof(kt_status) == 4, status_size);
KT_STATIC_ASSERT(sizeof(kt_error) == 8 + KT_ERROR_MESSAGE_CAPACITY, error_size);
KT_STATIC_ASSERT(offsetof(kt_model_params, progress_callback) == 16, params_callback_offset);
KT_STATIC_ASSERT(sizeof(kt_model_params) == 32, params_size);
KT_STATIC_ASSERT(offsetof(kt_tensor_info, ne) == 16, tensor_info_ne_offset);
KT_STATIC_ASSERT(offsetof(kt_tensor_info, name) == 72, tensor_info_name_offset);
KT_STATIC_ASSERT(sizeof(kt_tensor_info) == 80, tensor_info_size);
KT_STATIC_ASSERT(offsetof(kt_context_params, n_ctx) == 8, context_params_n_ctx_offset);
KT_STATIC_ASSERT(offsetof(kt_context_params, abort_callback) == 32, context_params_abort_offset);
KT_STATIC_ASSERT(sizeof(kt_context_params) == 48, context_params_size);
KT_STATIC_ASSERT(offsetof(kt_sampler_params, seed) == 40, sampler_params_seed_offset);
KT_STATIC_ASSERT(sizeof(kt_sampler_params) == 48, sampler_params_size);
KT_STATIC_ASSERT(offsetof(kt_generate_params, sampler) == 32, generate_params_sampler_offset);
KT_STATIC_ASSERT(sizeof(kt_generate_params) == 56, generate_params_size);
KT_STATIC_ASSERT(offsetof(kt_perf, attention_seconds) == 40, perf_attention_offset);
KT_STATIC_ASSERT(sizeof(kt_perf) == 80, perf_size);
KT_STATIC_ASSERT(offsetof(kt_tensor_spec, ne) == 16, tensor_spec_ne_offset);
KT_STATIC_ASSERT(sizeof(kt_tensor_spec) == 56, tensor_spec_size);
KT_STATIC_ASSERT(offsetof(kt_roofline, read_bytes_per_s) == 16, roofline_read_offset);
KT_STATIC_ASSERT(offsetof(kt_roofline, bf16_flops_per_s) == 48, roofline_bf16_offset);
KT_STATIC_ASSERT(sizeof(kt_roofline) == 72, roofline_size);
KT_STATIC_ASSERT(offsetof(kt_vocab_info, add_space_prefix) == 44, vocab_info_flags_offset);
KT_STATIC_ASSERT(offsetof(kt_vocab_info, pre) == 48, vocab_info_pre_offset);
KT_STATIC_ASSERT(sizeof(kt_vocab_info) == 56, vocab_info_size);
KT_STATIC_ASSERT(sizeof(kt_chat_message) == 16, chat_message_size);
KT_STATIC_ASSERT(offsetof(kt_chat_params, template_name) == 8, chat_params_name_offset);
KT_STATIC_ASSERT(sizeof(kt_chat_params) == 32, chat_params_size);
KT_STATIC_ASSERT(offsetof(kt_engine_params, n_ctx) == 16, engine_params_n_ctx_offset);
KT_STATIC_ASSERT(offsetof(kt_engine_params, max_step_tokens) == 40, engine_params_step_offset);
KT_STATIC_ASSERT(sizeof(kt_engine_params) == 56, engine_params_size);
KT_STATIC_ASSERT(offsetof(kt_sequence_params, prompt) == 8, sequence_params_prompt_offset);
KT_STATIC_ASSERT(offsetof(kt_sequence_params, notify) == 56, sequence_params_notify_offset);
KT_STATIC_ASSERT(sizeof(kt_sequence_params) == 72, sequence_params_size);
KT_STATIC_ASSERT(offsetof(kt_sequence_info, n_prompt) == 16, sequence_info_n_prompt_offset);
KT_STATIC_ASSERT(sizeof(kt_sequence_info) == 64, sequence_info_size);
KT_STATIC_ASSERT(offsetof(kt_engine_stats, kv_blocks_total) == 16, engine_stats_blocks_offset);
KT_STATIC_ASSERT(offsetof(kt_engine_stats, step_tokens) == 120, engine_stats_histogram_offset);
KT_STATIC_ASSERT(sizeof(kt_engine_stats) == 120 + 8 * KT_ENGINE_STEP_BUCKETS, engine_stats_size);

static int32_t fill_zeros(void *dst, uint64_t n_bytes, void *user_data) {
    (void)user_data;
    memset(dst, 0, (size_t)n_bytes);
    return 0;
}

/* Quantization and the GGUF writer from C: a Q8_0 round trip, and a writer with a key and a streamed tensor. */
static int quantize_and_writer_smoke(void) {
    float x[64], y[64];
    unsigned char q[2 * 34];
    uint64_t bytes = 0;
    int64_t ne[2] = {32, 2};
    kt_gguf_writer *writer = NULL;
    int i, ok = 1;
    for (i = 0; i < 64; ++i) x[i] = (float)(i - 32) / 8.0f;
    if (!kt_type_can_quantize(KT_TYPE_Q8_0)) return 0;
    if (kt_quantize(KT_TYPE_Q8_0, x, 2, 32, q, sizeof q, &bytes) != KT_STATUS_OK || bytes != sizeof q) return 0;
    if (kt_dequantize(KT_TYPE_Q8_0, q, sizeof q, 2, 32, y, 64) != KT_STATUS_OK) return 0;
    for (i = 0; i < 64; ++i) ok = ok && y[i] - x[i] < 0.02f && x[i] - y[i] < 0.02f;
    if (kt_gguf_writer_create(0, &writer) != KT_STATUS_OK) return 0;
    ok = ok && kt_gguf_writer_set_int(writer, "c.answer", KT_META_INT32, 42) == KT_STATUS_OK;
    ok = ok && kt_gguf_writer_add_tensor_fill(writer, "c.zeros", KT_TYPE_Q8_0, 2, ne, fill_zeros, NULL) == KT_STATUS_OK;
    ok = ok && kt_gguf_writer_set_int(writer, "c.answer", KT_META_INT32, 43) == KT_STATUS_INVALID_ARGUMENT;
    ok = ok && strstr(kt_gguf_writer_last_error(writer), "c.answer") != NULL;
    kt_gguf_writer_free(writer);
    return ok;
}

static int32_t count_progress(float progress, void *user_data) {
    (void)progress;
    ++*(int *)user_data;
    return 1;
}

static int32_t count_token(int32_t token, void *user_data) {
    (void)token;
    ++*(int *)user_data;
    return 0;
}

/* Decode and generate with a model, the way a C program would. */
static int run_model(const char *path) {
    kt_model *model = NULL;
    kt_context *ctx = NULL;
    kt_context_params cp;
    kt_generate_params gp;
    kt_sampler_params sp;
    kt_perf perf;
    const int32_t prompt[] = {1, 2, 3, 4};
    int32_t out[8];
    const float *logits = NULL;
    int64_t rows = 0, generated = 0;
    int32_t reason = -1;
    int streamed = 0;

    if (kt_model_load(path, NULL, &model, NULL) != KT_STATUS_OK) return 1;
    kt_context_params_init(&cp);
    cp.n_ctx = 64;
    if (kt_context_create(model, &cp, &ctx, NULL) != KT_STATUS_OK) return 1;
    if (kt_context_decode(ctx, prompt, 4, KT_LOGITS_ALL) != KT_STATUS_OK) return 1;
    if (kt_context_logits(ctx, -1, &logits, &rows) != KT_STATUS_OK || rows != 4 || !logits) return 1;
    kt_sampler_params_init(&sp);
    kt_generate_params_init(&gp);
    gp.max_tokens = 8;
    gp.sampler = &sp;
    gp.on_token = count_token;
    gp.user_data = &streamed;
    if (kt_context_generate(ctx, NULL, 0, &gp, out, 8, &generated, &reason) != KT_STATUS_OK) return 1;
    perf.struct_size = sizeof perf;
    if (kt_context_perf(ctx, &perf) != KT_STATUS_OK) return 1;
    printf("%s: generated %lld tokens (streamed %d, stop reason %d), n_past %lld\n", path, (long long)generated,
           streamed, (int)reason, (long long)kt_context_n_past(ctx));
    if (generated != streamed || kt_context_n_past(ctx) != 4 + generated) return 1;
    kt_context_free(ctx);
    kt_context_free(NULL);
    kt_model_free(model);
    return 0;
}

int main(int argc, char **argv) {
    kt_model_params params;
    kt_model *model = NULL;
    kt_error err;
    kt_tensor_info info;
    int progress_calls = 0;
    float *values;

    if (kt_version_number() != KT_VERSION_NUMBER) return 1;
    if (!quantize_and_writer_smoke()) {
        fprintf(stderr, "quantize / writer smoke test failed\n");
        return 1;
    }
    printf("%s\n", kt_build_info());
    if (argc < 2) return 1;

    kt_model_params_init(&params);
    params.progress_callback = count_progress;
    params.progress_user_data = &progress_calls;
    memset(&err, 0, sizeof err);
    err.struct_size = sizeof err;
    if (kt_model_load(argv[1], &params, &model, &err) != KT_STATUS_OK) {
        fprintf(stderr, "load failed: %s\n", err.message);
        return 1;
    }
    if (progress_calls < 1 || kt_model_tensor_count(model) < 1) return 1;
    info.struct_size = sizeof info;
    if (kt_model_tensor_info(model, 0, &info) != KT_STATUS_OK) return 1;
    values = (float *)malloc(info.n_elements * sizeof(float));
    if (!values || kt_model_tensor_read_f32(model, 0, values, info.n_elements, NULL) != KT_STATUS_OK) return 1;
    printf("%s: %s [%lld x %lld] first value %g\n", kt_model_architecture(model), info.name, (long long)info.ne[0],
           (long long)info.ne[1], values[0]);
    free(values);
    kt_model_free(model);
    kt_model_free(NULL);
    return argc > 2 ? run_model(argv[2]) : 0;
}
