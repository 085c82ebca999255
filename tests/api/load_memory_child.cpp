// The process whose memory kt_api_load_memory measures: loads a model through kt.h (mapped or read into memory),
// runs a short prompt on the expert engine, writes the last token's logits and prints its peak resident memory.
// A process of its own, so that VmHWM counts this load and nothing the test did before it.
//
//   load_memory_child MODEL mmap|read|cache LOGITS_OUT
// prints "vmhwm_kb N" and exits 0, or prints the failure and exits 1. `cache`: mapped, prepared in kt_model_load
// with the pack cache next to MODEL (kt_api_pack_cache), kt's INFO log on standard error.
#include <cstdio>
#include <cstring>

#include "kt.h"

namespace {

// Peak resident set size of this process (VmHWM), in KiB; -1 when /proc is unreadable.
long peak_rss_kb() {
    FILE *f = std::fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    std::fclose(f);
    return kb;
}

void log_to_stderr(int32_t, const char *message, void *) { std::fprintf(stderr, "kt: %s\n", message); }

// Resident KiB of this process's mappings of `path` (/proc/self/smaps); -1 when unreadable.
long mapped_rss_kb(const char *path) {
    FILE *f = std::fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[4096];
    bool in = false;
    long total = 0, kb = 0;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long a = 0, b = 0;
        char name[4096] = "";
        if (std::sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &a, &b, name) >= 2 && b > a)
            in = std::strcmp(name, path) == 0;
        else if (in && std::sscanf(line, "Rss: %ld kB", &kb) == 1)
            total += kb;
    }
    std::fclose(f);
    return total;
}

int fail(const char *what, const char *message) {
    std::printf("%s: %s\n", what, message);
    return 1;
}

}  // namespace

int main(int argc, char **argv) {
    const bool cache = argc == 4 && std::strcmp(argv[2], "cache") == 0;
    if (argc != 4 || (std::strcmp(argv[2], "mmap") != 0 && std::strcmp(argv[2], "read") != 0 && !cache))
        return fail("usage", "load_memory_child MODEL mmap|read|cache LOGITS_OUT");
    kt_model_params mp;
    kt_model_params_init(&mp);
    mp.use_mmap = std::strcmp(argv[2], "read") != 0;
    if (cache) {
        kt_log_set(log_to_stderr, nullptr, KT_LOG_INFO);
        mp.prepare = 1;
        mp.pack_cache = 1;
    }
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_model *model = nullptr;
    if (kt_model_load(argv[1], &mp, &model, &err) != KT_STATUS_OK) return fail("kt_model_load", err.message);
    // What of the model file is resident once it is loaded (with a cache used: only what the cache does not hold).
    if (cache) std::fprintf(stderr, "model_rss_kb %ld\n", mapped_rss_kb(argv[1]));
    kt_context_params cp;
    kt_context_params_init(&cp);
    cp.n_ctx = 64;
    kt_context *ctx = nullptr;
    if (kt_context_create(model, &cp, &ctx, &err) != KT_STATUS_OK) return fail("kt_context_create", err.message);
    const int32_t prompt[] = {1, 17, 300, 42, 5};
    if (kt_context_decode(ctx, prompt, 5, KT_LOGITS_LAST) != KT_STATUS_OK)
        return fail("kt_context_decode", kt_context_last_error(ctx));
    const float *logits = nullptr;
    if (kt_context_logits(ctx, -1, &logits, nullptr) != KT_STATUS_OK)
        return fail("kt_context_logits", kt_context_last_error(ctx));
    FILE *out = std::fopen(argv[3], "wb");
    if (!out) return fail("fopen", argv[3]);
    const size_t n = static_cast<size_t>(kt_context_n_vocab(ctx));
    const bool written = std::fwrite(logits, sizeof(float), n, out) == n;
    if (std::fclose(out) != 0 || !written) return fail("fwrite", argv[3]);
    kt_context_free(ctx);
    kt_model_free(model);
    std::printf("vmhwm_kb %ld\n", peak_rss_kb());
    return 0;
}
