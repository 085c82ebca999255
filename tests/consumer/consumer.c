/* A C99 program built against an installed kt: loads a model, tokenizes a prompt, generates greedily and prints the
 * text, the way an application embedding kt would. Exits non-zero on any failure, with kt's message. */
#include <kt.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what, kt_status status, const char *message) {
    fprintf(stderr, "%s: %s (%s)\n", what, message, kt_status_string(status));
    return 1;
}

int main(int argc, char **argv) {
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_model *model = NULL;
    kt_context *ctx = NULL;
    kt_context_params cp;
    kt_generate_params gp;
    const char *prompt = "And God said";
    int32_t ids[64], out[16];
    int64_t n_ids = 0, n_out = 0, len = 0;
    int32_t why = -1;
    char text[512];
    kt_status s;

    if (kt_version_number() / 1000000 != KT_VERSION_MAJOR) return fail("version", KT_STATUS_UNSUPPORTED, kt_version_string());
    printf("%s\n", kt_build_info());
    if (argc < 2) return fail("usage", KT_STATUS_INVALID_ARGUMENT, "consumer_c MODEL.gguf");
    if ((s = kt_model_load(argv[1], NULL, &model, &err)) != KT_STATUS_OK) return fail("kt_model_load", s, err.message);
    s = kt_tokenize(model, prompt, strlen(prompt), 1, 1, ids, 64, &n_ids);
    if (s != KT_STATUS_OK) return fail("kt_tokenize", s, kt_model_last_error(model));
    kt_context_params_init(&cp);
    cp.n_ctx = 64;
    cp.n_threads = 2;
    if ((s = kt_context_create(model, &cp, &ctx, &err)) != KT_STATUS_OK) return fail("kt_context_create", s, err.message);
    kt_generate_params_init(&gp); /* greedy: no sampler */
    gp.max_tokens = 16;
    s = kt_context_generate(ctx, ids, n_ids, &gp, out, 16, &n_out, &why);
    if (s != KT_STATUS_OK) return fail("kt_context_generate", s, kt_context_last_error(ctx));
    s = kt_detokenize(model, out, n_out, 0, 0, text, sizeof text, &len);
    if (s != KT_STATUS_OK) return fail("kt_detokenize", s, kt_model_last_error(model));
    printf("%s|%s\n", prompt, text);
    kt_context_free(ctx);
    kt_model_free(model);
    return n_out > 0 ? 0 : fail("kt_context_generate", KT_STATUS_INTERNAL, "no tokens");
}
