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
KT_STATIC_ASSERT(offsetof(kt_vocab_info, add_space_prefix) == 44, vocab_info_flags_offset);
KT_STATIC_ASSERT(offsetof(kt_vocab_info, pre) == 48, vocab_info_pre_offset);
KT_STATIC_ASSERT(sizeof(kt_vocab_info) == 56, vocab_info_size);
KT_STATIC_ASSERT(sizeof(kt_chat_message) == 16, chat_message_size);
KT_STATIC_ASSERT(offsetof(kt_chat_params, template_name) == 8, chat_params_name_offset);
KT_STATIC_ASSERT(sizeof(kt_chat_params) == 32, chat_params_size);

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
    return 0;
}
