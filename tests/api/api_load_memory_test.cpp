// Loading in bounded memory: the pages of the file mapping that the expert engine has repacked are given back, so a
// loaded model holds about its file's size, not the packed copy and the mapping side by side. Measured for real: a
// child process (load_memory_child) loads a few-hundred-megabyte model and reports its peak resident set (VmHWM).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "kt.h"
#include "mem/mapped_file.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

#if defined(__SANITIZE_ADDRESS__)
#define KT_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KT_TEST_UNDER_ASAN 1
#endif
#endif

namespace {

using kt::test::TempDir;

// A qwen3moe whose 64 experts per layer are random Q8_0 (kept as Q8_0 by the engine, so packed and file bytes are
// about equal): 4 layers, about 225 MB, nearly all of it experts.
kt::test::TinyModel large_q8_model() {
    kt::test::TinyModel m;
    m.n_vocab = 8192;
    m.n_embd = 512;
    m.n_ff = 512;
    m.n_layer = 4;
    m.n_head = 8;
    m.n_head_kv = 4;
    m.head_dim = 64;
    m.n_expert = 64;
    m.n_expert_used = 4;
    m.weight_type = KT_TYPE_Q8_0;
    return m;
}

// A few MB of Q8_0, enough for a packing to report many tensors.
kt::test::TinyModel small_q8_model() {
    kt::test::TinyModel m;
    m.weight_type = KT_TYPE_Q8_0;
    m.n_embd = 256;
    m.n_ff = 256;
    m.n_expert = 8;
    m.n_vocab = 512;
    return m;
}

struct ChildRun {
    long peak_rss_kb = -1;
    std::vector<uint8_t> logits;
};

ChildRun run_child(const std::string &model, const char *mode, const TempDir &dir) {
    const std::string logits = dir.file(std::string("logits.") + mode);
    const kt::test::ProgramRun r =
        kt::test::run_program(std::string(KT_LOAD_MEMORY_CHILD) + " '" + model + "' " + mode + " '" + logits + "'");
    INFO(r.all());
    REQUIRE(r.exit_code == 0);
    ChildRun c;
    REQUIRE(std::sscanf(r.out.c_str(), "vmhwm_kb %ld", &c.peak_rss_kb) == 1);
    c.logits = kt::test::read_file(logits);
    return c;
}

uint64_t file_size(const std::string &path) {
    struct stat st;
    REQUIRE(stat(path.c_str(), &st) == 0);
    return static_cast<uint64_t>(st.st_size);
}

}  // namespace

TEST_CASE("a loaded model's peak resident memory is about its file's size, with the same logits") {
    TempDir dir;
    const std::string path = dir.file("large.gguf");
    kt::test::write_tiny_model_file_or_fail(large_q8_model(), path);
    const uint64_t bytes = file_size(path);
    REQUIRE(bytes > 200'000'000);

    // Mapped: the engine packs and gives the mapping's pages back. Read into memory: the heap copy cannot be given
    // back (it is the model's only copy of the vectors and the embedding), so packing holds both: the same packing
    // without the dropping, for the logits to be compared with.
    const ChildRun mapped = run_child(path, "mmap", dir);
    const ChildRun read = run_child(path, "read", dir);
    REQUIRE(mapped.logits.size() == 8192 * sizeof(float));
    CHECK(mapped.logits == read.logits);  // bit for bit: dropping pages changes nothing computed

    const double file_kb = static_cast<double>(bytes) / 1024.0;
    INFO("file " << file_kb << " KiB; peak RSS mapped " << mapped.peak_rss_kb << " KiB, read " << read.peak_rss_kb
                 << " KiB");
#ifdef KT_TEST_UNDER_ASAN
    // AddressSanitizer's shadow memory and quarantine add an amount unrelated to the model's: no bound is
    // meaningful there. The logits comparison above still runs.
    WARN("AddressSanitizer build: peak-RSS bound not checked");
#else
    // 64 MiB covers the program, libkt's code and heap, the threads, KV cache and scratch of a 64-token context.
    const double allowance_kb = 64.0 * 1024.0;
    CHECK(static_cast<double>(mapped.peak_rss_kb) <= 1.1 * file_kb + allowance_kb);
    // The measurement sees packed copies: reading the file into memory really does hold about two of it.
    CHECK(static_cast<double>(read.peak_rss_kb) >= 1.8 * file_kb);
#endif
}

TEST_CASE("pages given back after packing are read again from the file, unchanged") {
    TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_tiny_model_file_or_fail(small_q8_model(), path);

    kt_model *model = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &model, nullptr) == KT_STATUS_OK);
    int64_t index = -1;
    REQUIRE(kt_model_tensor_find(model, "blk.1.ffn_down_exps.weight", &index) == KT_STATUS_OK);
    kt_tensor_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    REQUIRE(kt_model_tensor_info(model, index, &info) == KT_STATUS_OK);
    std::vector<float> before(info.n_elements), after(info.n_elements);
    REQUIRE(kt_model_tensor_read_f32(model, index, before.data(), before.size(), nullptr) == KT_STATUS_OK);

    // The reference kernels read the mapping in place; run them once before and once after the engine has packed
    // (and given back) every weight.
    auto reference_logits = [&]() {
        kt_context_params cp;
        kt_context_params_init(&cp);
        cp.kernels = KT_KERNELS_REFERENCE;
        cp.n_ctx = 16;
        kt_context *ctx = nullptr;
        REQUIRE(kt_context_create(model, &cp, &ctx, nullptr) == KT_STATUS_OK);
        const int32_t prompt[] = {3, 1, 4};
        REQUIRE(kt_context_decode(ctx, prompt, 3, KT_LOGITS_LAST) == KT_STATUS_OK);
        const float *l = nullptr;
        REQUIRE(kt_context_logits(ctx, -1, &l, nullptr) == KT_STATUS_OK);
        std::vector<float> v(l, l + kt_context_n_vocab(ctx));
        kt_context_free(ctx);
        return v;
    };
    const std::vector<float> reference_before = reference_logits();
    kt_context *engine_ctx = nullptr;
    REQUIRE(kt_context_create(model, nullptr, &engine_ctx, nullptr) == KT_STATUS_OK);
    REQUIRE(kt_model_tensor_read_f32(model, index, after.data(), after.size(), nullptr) == KT_STATUS_OK);
    CHECK(before == after);
    CHECK(reference_logits() == reference_before);
    kt_context_free(engine_ctx);
    kt_model_free(model);
}

TEST_CASE("MappedFile::drop_pages gives back whole pages of a mapping only") {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    std::vector<uint8_t> bytes(8 * page);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
    TempDir dir;
    kt::test::write_file(dir.file("f"), bytes);

    kt::mem::MappedFile mapped;
    REQUIRE(kt::mem::MappedFile::open(dir.file("f"), true, nullptr, &mapped).is_ok());
    mapped.prefetch(0, mapped.size());
    const uint8_t *d = mapped.data();
    CHECK(mapped.drop_pages(d + 1, page) == 0);                  // straddles two pages: both stay
    CHECK(mapped.drop_pages(d + page / 2, 3 * page) == 2 * page);  // pages 1 and 2 lie wholly inside
    CHECK(mapped.drop_pages(d, mapped.size()) == mapped.size());
    CHECK(mapped.drop_pages(d + mapped.size() - page, 2 * page) == 0);  // runs past the end: refused
    CHECK(mapped.drop_pages(bytes.data(), page) == 0);                  // not inside the mapping
    CHECK(std::memcmp(d, bytes.data(), bytes.size()) == 0);             // read again from the file

    // A file read into memory and borrowed bytes are the only copy: never dropped.
    kt::mem::MappedFile heap;
    REQUIRE(kt::mem::MappedFile::open(dir.file("f"), false, nullptr, &heap).is_ok());
    CHECK(heap.drop_pages(heap.data(), heap.size()) == 0);
    CHECK(std::memcmp(heap.data(), bytes.data(), bytes.size()) == 0);
    const kt::mem::MappedFile borrowed = kt::mem::MappedFile::borrow(bytes.data(), bytes.size());
    CHECK(borrowed.drop_pages(bytes.data(), bytes.size()) == 0);
}

namespace {

struct ProgressLog {
    std::vector<float> fractions;
    float cancel_above = 2.0f;  // returns non-zero for the first fraction above this
    int calls_after_cancel = 0;
    bool cancelled = false;
};

int32_t log_progress(float fraction, void *user_data) {
    auto *log = static_cast<ProgressLog *>(user_data);
    if (log->cancelled) ++log->calls_after_cancel;
    log->fractions.push_back(fraction);
    if (fraction > log->cancel_above) log->cancelled = true;
    return log->cancelled ? 1 : 0;
}

std::vector<float> engine_logits(kt_model *model) {
    kt_context_params cp;
    kt_context_params_init(&cp);
    cp.n_ctx = 16;
    kt_context *ctx = nullptr;
    REQUIRE(kt_context_create(model, &cp, &ctx, nullptr) == KT_STATUS_OK);
    const int32_t prompt[] = {2, 7, 1, 8};
    REQUIRE(kt_context_decode(ctx, prompt, 4, KT_LOGITS_LAST) == KT_STATUS_OK);
    const float *l = nullptr;
    REQUIRE(kt_context_logits(ctx, -1, &l, nullptr) == KT_STATUS_OK);
    std::vector<float> v(l, l + kt_context_n_vocab(ctx));
    kt_context_free(ctx);
    return v;
}

}  // namespace

TEST_CASE("kt_model_load with prepare packs the weights, reporting each tensor, and can be cancelled while packing") {
    TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_tiny_model_file_or_fail(small_q8_model(), path);

    kt_model_params mp;
    kt_model_params_init(&mp);
    CHECK(mp.prepare == 0);
    CHECK(mp.n_threads == 0);
    mp.prepare = 1;
    mp.n_threads = 2;
    ProgressLog log;
    mp.progress_callback = log_progress;
    mp.progress_user_data = &log;
    kt_model *model = nullptr;
    REQUIRE(kt_model_load(path.c_str(), &mp, &model, nullptr) == KT_STATUS_OK);
    REQUIRE(!log.fractions.empty());
    for (size_t i = 1; i < log.fractions.size(); ++i) CHECK(log.fractions[i - 1] <= log.fractions[i]);
    CHECK(log.fractions.back() == 1.0f);
    CHECK(std::count(log.fractions.begin(), log.fractions.end(), 1.0f) == 1);
    // Packing reports after every kernel: per layer q, k, v, o, the router and the expert stack; then the head.
    const auto packing = std::count_if(log.fractions.begin(), log.fractions.end(), [](float f) { return f > 0.2f && f < 1.0f; });
    CHECK(packing >= 6 * small_q8_model().n_layer + 1);

    // The prepared model runs as one prepared by its first context.
    kt_model *plain = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &plain, nullptr) == KT_STATUS_OK);
    CHECK(engine_logits(model) == engine_logits(plain));
    kt_model_free(plain);
    kt_model_free(model);

    SECTION("cancelled while packing: nothing is returned and the callback is not called again") {
        ProgressLog cancel;
        cancel.cancel_above = 0.5f;
        mp.progress_user_data = &cancel;
        kt_error err = {sizeof(kt_error), 0, {0}};
        kt_model *cancelled = reinterpret_cast<kt_model *>(&cancel);  // overwritten with NULL
        CHECK(kt_model_load(path.c_str(), &mp, &cancelled, &err) == KT_STATUS_CANCELLED);
        CHECK(cancelled == nullptr);
        CHECK(err.status == KT_STATUS_CANCELLED);
        CHECK(std::string(err.message).find("cancelled") != std::string::npos);
        CHECK(cancel.cancelled);
        CHECK(cancel.fractions.back() < 1.0f);
        CHECK(cancel.calls_after_cancel == 0);
    }
    SECTION("prepare other than 0 or 1, or negative threads, is refused") {
        mp.progress_callback = nullptr;
        mp.prepare = 2;
        kt_model *refused = nullptr;
        CHECK(kt_model_load(path.c_str(), &mp, &refused, nullptr) == KT_STATUS_INVALID_ARGUMENT);
        mp.prepare = 1;
        mp.n_threads = -1;
        CHECK(kt_model_load(path.c_str(), &mp, &refused, nullptr) == KT_STATUS_INVALID_ARGUMENT);
        CHECK(refused == nullptr);
    }
}
