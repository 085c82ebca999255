// kt_engine_* / kt_sequence_* through kt.h: what a server relies on. Sequences batched give the tokens of
// kt_context_generate (greedy and seeded sampling); reads hand out each token once and report the end after the
// last token; the notify callback fires and stops firing once the handle is freed; cancel, free and engine free
// work in any order while sequences run; a full queue is KT_STATUS_BUSY; bad arguments get statuses and messages.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kt.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace {

struct Loaded {
    kt::test::TempDir dir;
    kt_model *model = nullptr;
    explicit Loaded(const kt::test::TinyModel &spec = kt::test::TinyModel{}) {
        const std::string path = dir.file("model.gguf");
        kt::test::write_file(path, kt::test::write_tiny_model(spec));
        REQUIRE(kt_model_load(path.c_str(), nullptr, &model, nullptr) == KT_STATUS_OK);
    }
    explicit Loaded(const std::string &path) {
        REQUIRE(kt_model_load(path.c_str(), nullptr, &model, nullptr) == KT_STATUS_OK);
    }
    ~Loaded() { kt_model_free(model); }
};

kt_engine_params engine_params(int64_t n_ctx = 64) {
    kt_engine_params p;
    kt_engine_params_init(&p);
    p.n_threads = 2;
    p.n_ctx = n_ctx;
    p.max_sequences = 4;
    return p;
}

kt_engine *create(kt_model *model, const kt_engine_params &p) {
    kt_engine *engine = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status s = kt_engine_create(model, &p, &engine, &err);
    INFO(err.message);
    REQUIRE(s == KT_STATUS_OK);
    return engine;
}

kt_sequence *submit(kt_engine *engine, const std::vector<int32_t> &prompt, int64_t max_tokens,
                    const kt_sampler_params *sampler = nullptr) {
    kt_sequence_params sp;
    kt_sequence_params_init(&sp);
    sp.prompt = prompt.data();
    sp.n_prompt = static_cast<int64_t>(prompt.size());
    sp.max_tokens = max_tokens;
    sp.sampler = sampler;
    kt_sequence *seq = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status s = kt_engine_submit(engine, &sp, &seq, &err);
    INFO(err.message);
    REQUIRE(s == KT_STATUS_OK);
    return seq;
}

std::vector<int32_t> read_all(kt_sequence *seq, int32_t *finish) {
    std::vector<int32_t> tokens;
    *finish = KT_FINISH_NONE;
    while (*finish == KT_FINISH_NONE) {
        int32_t buf[5];
        int64_t n = 0;
        REQUIRE(kt_sequence_read(seq, buf, 5, 10000, &n, finish) == KT_STATUS_OK);
        tokens.insert(tokens.end(), buf, buf + n);
    }
    return tokens;
}

std::vector<int32_t> context_generate(kt_model *model, const std::vector<int32_t> &prompt, int64_t max_tokens,
                                      const kt_sampler_params *sampler = nullptr, int32_t kernels = KT_KERNELS_AUTO) {
    kt_context_params cp;
    kt_context_params_init(&cp);
    cp.n_threads = 2;
    cp.n_ctx = 64;
    cp.kernels = kernels;
    kt_context *ctx = nullptr;
    REQUIRE(kt_context_create(model, &cp, &ctx, nullptr) == KT_STATUS_OK);
    kt_generate_params gp;
    kt_generate_params_init(&gp);
    gp.max_tokens = max_tokens;
    gp.sampler = sampler;
    std::vector<int32_t> out(static_cast<size_t>(max_tokens));
    int64_t n = 0;
    REQUIRE(kt_context_generate(ctx, prompt.data(), static_cast<int64_t>(prompt.size()), &gp, out.data(), max_tokens,
                                &n, nullptr) == KT_STATUS_OK);
    out.resize(static_cast<size_t>(n));
    kt_context_free(ctx);
    return out;
}

std::vector<int32_t> prompt_of(int64_t n, int32_t seed) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((seed * 13 + i * 7 + i * i * 3) % 64);
    return p;
}

}  // namespace

TEST_CASE("engine api: sequences batched give kt_context_generate's tokens, greedy and with a seeded sampler") {
    Loaded m;
    kt_engine *engine = create(m.model, engine_params());
    kt_sampler_params sampler;
    kt_sampler_params_init(&sampler);  // temperature 0.8, top-k 40, top-p 0.95, min-p 0.05
    sampler.seed = 99;
    std::vector<kt_sequence *> seqs;
    for (int i = 0; i < 6; ++i) seqs.push_back(submit(engine, prompt_of(2 + 5 * i, i), 20, i % 2 ? &sampler : nullptr));
    for (int i = 0; i < 6; ++i) {
        INFO("sequence " << i);
        int32_t finish = 0;
        CHECK(read_all(seqs[i], &finish) == context_generate(m.model, prompt_of(2 + 5 * i, i), 20, i % 2 ? &sampler : nullptr));
        CHECK(finish == KT_STOP_MAX_TOKENS);
        kt_sequence_info info;
        info.struct_size = sizeof info;
        REQUIRE(kt_sequence_get_info(seqs[i], &info) == KT_STATUS_OK);
        CHECK(info.state == KT_SEQUENCE_FINISHED);
        CHECK(info.finish_reason == KT_STOP_MAX_TOKENS);
        CHECK(info.n_prompt == 2 + 5 * i);
        CHECK(info.n_generated == 20);
        CHECK(info.first_token_seconds >= info.queued_seconds);
        CHECK(info.elapsed_seconds >= info.first_token_seconds);
        CHECK(std::string(kt_sequence_last_error(seqs[i])).empty());
        kt_sequence_free(seqs[i]);
    }
    kt_engine_stats st;
    st.struct_size = sizeof st;
    REQUIRE(kt_engine_get_stats(engine, &st) == KT_STATUS_OK);
    CHECK(st.n_submitted == 6);
    CHECK(st.n_generated_tokens == 120);
    CHECK(st.kv_block_tokens == 16);
    CHECK(st.kv_blocks_total == 4 * 4);  // default budget: max_sequences sequences of 64 positions
    CHECK(st.kv_bytes > 0);
    CHECK(st.n_steps > 0);
    CHECK(st.step_seconds > 0);
    kt_engine_free(engine);
}

TEST_CASE("engine api: every architecture batched gives kt_context_generate's tokens") {
    struct Arch {
        std::string name;
        bool moe;
    };
    for (const Arch &a : {Arch{"llama", false}, Arch{"llama", true}, Arch{"qwen2", false}, Arch{"qwen3", false},
                          Arch{"qwen2moe", true}, Arch{"qwen3moe", true}, Arch{"deepseek2", true}}) {
        INFO(a.name << (a.moe ? " (MoE)" : ""));
        kt::test::TinyModel spec;
        spec.arch = a.name;
        if (!a.moe) spec.n_expert = 0;
        // deepseek2 (MLA attention, shared experts, a dense first layer) from the golden models.
        const Loaded m = a.name == "deepseek2" ? Loaded(kt::test::testdata_path("models/deepseek2.f32.gguf")) : Loaded(spec);
        kt_engine_params ep = engine_params();
        ep.kernels = KT_KERNELS_REFERENCE;
        kt_engine *engine = create(m.model, ep);
        std::vector<kt_sequence *> seqs;
        for (int i = 0; i < 3; ++i) seqs.push_back(submit(engine, prompt_of(3 + 13 * i, i), 8));
        for (int i = 0; i < 3; ++i) {
            INFO("sequence " << i);
            int32_t finish = 0;
            CHECK(read_all(seqs[i], &finish) == context_generate(m.model, prompt_of(3 + 13 * i, i), 8, nullptr, KT_KERNELS_REFERENCE));
            kt_sequence_free(seqs[i]);
        }
        kt_engine_free(engine);
    }
}

TEST_CASE("engine api: a read hands each token out once, waits or polls, and reports the end after the last token") {
    Loaded m;
    kt_engine *engine = create(m.model, engine_params());
    kt_sequence *seq = submit(engine, prompt_of(5, 1), 9);
    // Wait for the end without reading, then read one token at a time.
    kt_sequence_info info;
    info.struct_size = sizeof info;
    for (int i = 0; i < 10000; ++i) {
        REQUIRE(kt_sequence_get_info(seq, &info) == KT_STATUS_OK);
        if (info.state == KT_SEQUENCE_FINISHED) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(info.state == KT_SEQUENCE_FINISHED);
    std::vector<int32_t> got;
    for (int i = 0; i < 9; ++i) {
        int32_t t = -1, finish = 123;
        int64_t n = -1;
        REQUIRE(kt_sequence_read(seq, &t, 1, 0, &n, &finish) == KT_STATUS_OK);
        CHECK(n == 1);
        CHECK(finish == (i == 8 ? KT_STOP_MAX_TOKENS : KT_FINISH_NONE));
        got.push_back(t);
    }
    CHECK(got == context_generate(m.model, prompt_of(5, 1), 9));
    int32_t t = -1, finish = 0;
    int64_t n = -1;
    CHECK(kt_sequence_read(seq, &t, 1, 0, &n, &finish) == KT_STATUS_OK);
    CHECK(n == 0);
    CHECK(finish == KT_STOP_MAX_TOKENS);
    CHECK(kt_sequence_read(seq, nullptr, 1, 0, &n, &finish) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_sequence_read(seq, &t, 0, 0, &n, &finish) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_sequence_read(nullptr, &t, 1, 0, &n, &finish) == KT_STATUS_INVALID_ARGUMENT);
    kt_sequence_free(seq);

    // A poll of a sequence that has nothing new returns at once with nothing. `busy` holds the only slot for far
    // longer than the 30 ms wait below (it is cancelled after it): 400 tokens of this small model once fit in 30 ms.
    kt_engine_params one = engine_params(4096);
    one.max_sequences = 1;
    kt_engine *serial = create(m.model, one);
    kt_sequence *busy = submit(serial, prompt_of(4, 2), 4000);
    kt_sequence *waiting = submit(serial, prompt_of(4, 3), 5);
    REQUIRE(kt_sequence_read(waiting, &t, 1, 0, &n, &finish) == KT_STATUS_OK);
    CHECK(n == 0);
    CHECK(finish == KT_FINISH_NONE);
    REQUIRE(kt_sequence_get_info(waiting, &info) == KT_STATUS_OK);
    CHECK(info.state == KT_SEQUENCE_QUEUED);
    CHECK(info.first_token_seconds == -1.0);
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(kt_sequence_read(waiting, &t, 1, 30, &n, &finish) == KT_STATUS_OK);  // times out: still queued
    CHECK(n == 0);
    CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(30));
    kt_sequence_free(busy);  // cancels it: the waiting one gets its turn
    CHECK(read_all(waiting, &finish).size() == 5);
    kt_sequence_free(waiting);
    kt_engine_free(serial);
    kt_engine_free(engine);
}

namespace {

struct Counter {
    std::atomic<int> calls{0};
    std::atomic<kt_sequence *> last{nullptr};
};

void count_notify(kt_sequence *seq, void *user_data) {
    Counter *c = static_cast<Counter *>(user_data);
    c->last = seq;
    ++c->calls;
    // Allowed from the callback: a poll and an info query.
    int32_t t;
    int64_t n;
    int32_t finish;
    kt_sequence_read(seq, &t, 1, 0, &n, &finish);
    kt_sequence_info info;
    info.struct_size = sizeof info;
    kt_sequence_get_info(seq, &info);
}

}  // namespace

TEST_CASE("engine api: notify fires for new tokens and the end, never after the handle is freed") {
    Loaded m;
    kt_engine *engine = create(m.model, engine_params(512));
    Counter c;
    std::vector<int32_t> prompt = prompt_of(3, 4);
    kt_sequence_params sp;
    kt_sequence_params_init(&sp);
    sp.prompt = prompt.data();
    sp.n_prompt = 3;
    sp.max_tokens = 6;
    sp.notify = count_notify;
    sp.notify_user_data = &c;
    kt_sequence *seq = nullptr;
    REQUIRE(kt_engine_submit(engine, &sp, &seq, nullptr) == KT_STATUS_OK);
    for (int i = 0; i < 10000 && c.calls < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(c.calls == 6);  // five tokens, then the sixth with the end
    CHECK(c.last == seq);
    kt_sequence_free(seq);

    // Freed while running: no call after kt_sequence_free returns.
    Counter d;
    sp.max_tokens = 400;
    sp.notify_user_data = &d;
    REQUIRE(kt_engine_submit(engine, &sp, &seq, nullptr) == KT_STATUS_OK);
    for (int i = 0; i < 10000 && d.calls < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    kt_sequence_free(seq);
    const int after_free = d.calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(d.calls == after_free);
    kt_engine_free(engine);
}

TEST_CASE("engine api: cancel, free and engine free in any order while sequences run") {
    Loaded m;
    kt_engine *engine = create(m.model, engine_params(512));
    kt_sequence *a = submit(engine, prompt_of(3, 1), 500);
    kt_sequence *b = submit(engine, prompt_of(3, 2), 500);
    kt_sequence *c = submit(engine, prompt_of(3, 3), 500);
    int32_t t;
    int64_t n = 0;
    int32_t finish;
    REQUIRE(kt_sequence_read(a, &t, 1, 10000, &n, &finish) == KT_STATUS_OK);
    REQUIRE(n == 1);
    kt_sequence_cancel(a);
    kt_sequence_cancel(a);  // twice is harmless
    read_all(a, &finish);
    CHECK(finish == KT_STOP_CANCELLED);
    kt_sequence_free(b);     // freed while running
    kt_engine_free(engine);  // c still running: it ends cancelled, and its handle stays usable
    read_all(c, &finish);
    CHECK(finish == KT_STOP_CANCELLED);
    kt_sequence_info info;
    info.struct_size = sizeof info;
    REQUIRE(kt_sequence_get_info(c, &info) == KT_STATUS_OK);
    CHECK(info.state == KT_SEQUENCE_FINISHED);
    CHECK(info.finish_reason == KT_STOP_CANCELLED);
    kt_sequence_cancel(c);
    kt_sequence_free(c);
    kt_sequence_free(a);
    kt_sequence_free(nullptr);
    kt_sequence_cancel(nullptr);
    kt_engine_free(nullptr);
}

TEST_CASE("engine api: a full queue is KT_STATUS_BUSY, and bad parameters get a status and a message") {
    Loaded m;
    kt_engine_params p = engine_params(512);
    p.max_sequences = 1;
    p.max_queued = 1;
    kt_engine *engine = create(m.model, p);
    const std::vector<int32_t> prompt = prompt_of(4, 1);
    kt_sequence *running = submit(engine, prompt, 400);
    int32_t t;
    int64_t n = 0;
    int32_t finish;
    REQUIRE(kt_sequence_read(running, &t, 1, 10000, &n, &finish) == KT_STATUS_OK);  // admitted: the queue is empty
    kt_sequence *queued = submit(engine, prompt, 4);
    kt_sequence_params sp;
    kt_sequence_params_init(&sp);
    sp.prompt = prompt.data();
    sp.n_prompt = 4;
    kt_sequence *refused = reinterpret_cast<kt_sequence *>(1);
    kt_error err = {sizeof(kt_error), 0, {0}};
    CHECK(kt_engine_submit(engine, &sp, &refused, &err) == KT_STATUS_BUSY);
    CHECK(refused == nullptr);
    CHECK(err.status == KT_STATUS_BUSY);
    CHECK(std::string(err.message).find("max_queued") != std::string::npos);
    CHECK(std::string(kt_status_string(KT_STATUS_BUSY)) == "busy");
    kt_engine_stats st;
    st.struct_size = sizeof st;
    REQUIRE(kt_engine_get_stats(engine, &st) == KT_STATUS_OK);
    CHECK(st.n_queued == 1);
    CHECK(st.n_running == 1);

    // A prompt that cannot fit is refused before it is queued.
    std::vector<int32_t> huge(512, 3);
    sp.prompt = huge.data();
    sp.n_prompt = 512;
    CHECK(kt_engine_submit(engine, &sp, &refused, &err) == KT_STATUS_CONTEXT_FULL);
    sp.prompt = prompt.data();
    sp.n_prompt = 0;
    CHECK(kt_engine_submit(engine, &sp, &refused, &err) == KT_STATUS_INVALID_ARGUMENT);
    sp.n_prompt = 4;
    sp.struct_size = 8;
    CHECK(kt_engine_submit(engine, &sp, &refused, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("struct_size") != std::string::npos);
    kt_sequence_params_init(&sp);
    sp.prompt = prompt.data();
    sp.n_prompt = 4;
    sp.reserved0 = 1;
    CHECK(kt_engine_submit(engine, &sp, &refused, &err) == KT_STATUS_INVALID_ARGUMENT);
    sp.reserved0 = 0;
    kt_sampler_params bad_sampler;
    kt_sampler_params_init(&bad_sampler);
    bad_sampler.repeat_penalty = 0.0f;
    sp.sampler = &bad_sampler;
    CHECK(kt_engine_submit(engine, &sp, &refused, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_engine_submit(nullptr, &sp, &refused, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_engine_get_stats(engine, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    st.struct_size = 8;
    CHECK(kt_engine_get_stats(engine, &st) == KT_STATUS_INVALID_ARGUMENT);
    kt_sequence_free(queued);
    kt_sequence_free(running);
    kt_engine_free(engine);

    // Engine parameters.
    kt_engine *none = reinterpret_cast<kt_engine *>(1);
    kt_engine_params bad = engine_params();
    bad.kv_block_tokens = 24;
    CHECK(kt_engine_create(m.model, &bad, &none, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(none == nullptr);
    CHECK(std::string(err.message).find("kv_block_tokens") != std::string::npos);
    bad = engine_params();
    bad.kv_budget_bytes = 1000;
    CHECK(kt_engine_create(m.model, &bad, &none, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("kv_budget_bytes") != std::string::npos);
    bad = engine_params();
    bad.prefix_cache = 2;
    CHECK(kt_engine_create(m.model, &bad, &none, &err) == KT_STATUS_INVALID_ARGUMENT);
    bad = engine_params();
    bad.kv_type = KT_TYPE_Q4_K;
    CHECK(kt_engine_create(m.model, &bad, &none, &err) == KT_STATUS_UNSUPPORTED);
    bad = engine_params();
    bad.struct_size = 4;
    CHECK(kt_engine_create(m.model, &bad, &none, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_engine_create(nullptr, nullptr, &none, &err) == KT_STATUS_INVALID_ARGUMENT);
    // NULL params: the defaults (n_ctx from the model: its training context, at most 4096).
    REQUIRE(kt_engine_create(m.model, nullptr, &none, &err) == KT_STATUS_OK);
    kt_engine_free(none);
}
