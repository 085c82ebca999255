// The rules at the top of kt.h that every function shares: error messages of shared handles are per thread, the
// log callback may re-enter kt, kt_log_set waits for running callbacks, *_last_error(NULL) and constructors'
// kt_error behave alike, and callbacks return 0 to go on.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kt.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 300;

}  // namespace

TEST_CASE("a shared model's error messages are per thread: each thread reads the message of its own failure") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_file(path, kt::test::write_tiny_model({}));
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);

    std::atomic<int> wrong{0}, changed_under_us{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int r = 0; r < kRounds; ++r) {
                const std::string tensor = "no.such.tensor." + std::to_string(t) + "." + std::to_string(r);
                int64_t index = 0;
                if (kt_model_tensor_find(m, tensor.c_str(), &index) != KT_STATUS_NOT_FOUND) ++wrong;
                const char *message = kt_model_last_error(m);
                const std::string copy = message;
                if (copy.find(tensor) == std::string::npos) ++wrong;
                // The pointer stays valid and unchanged while the other threads fail on the same model.
                for (int i = 0; i < 5; ++i) {
                    std::this_thread::yield();
                    if (copy != message) ++changed_under_us;
                }
            }
        });
    }
    for (std::thread &th : threads) th.join();
    CHECK(wrong == 0);
    CHECK(changed_under_us == 0);
    // A thread that never failed on the model sees no message, whatever the others did.
    std::string fresh;
    std::thread([&] { fresh = kt_model_last_error(m); }).join();
    CHECK(fresh.empty());
    kt_model_free(m);
}

TEST_CASE("a shared expert pool's error messages are per thread") {
    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    p.n_experts = 4;
    p.hidden_size = p.intermediate_size = 32;
    p.n_threads = 1;
    kt_expert_pool *pool = nullptr;
    REQUIRE(kt_expert_pool_create(&p, &pool, nullptr) == KT_STATUS_OK);
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            // A mask of the wrong length, different per thread; the message names the length.
            std::vector<uint8_t> mask(static_cast<size_t>(10 + t));
            const std::string expected = "mask of " + std::to_string(10 + t) + " entries";
            for (int r = 0; r < kRounds; ++r) {
                if (kt_expert_pool_set_mask(pool, mask.data(), 10 + t) != KT_STATUS_INVALID_ARGUMENT) ++wrong;
                if (std::string(kt_expert_pool_last_error(pool)).find(expected) == std::string::npos) ++wrong;
            }
        });
    }
    for (std::thread &th : threads) th.join();
    CHECK(wrong == 0);
    kt_expert_pool_free(pool);
}

TEST_CASE("threads that exit leave no messages behind in a shared handle") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_file(path, kt::test::write_tiny_model({}));
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
    // Many short-lived threads each fail once; with the entries of exited threads erased, a thread created later
    // (which may get a recycled thread id) starts with no message.
    for (int t = 0; t < 200; ++t) {
        std::thread([&] {
            int64_t v;
            (void)kt_model_meta_get_int(m, "absent", &v);
        }).join();
    }
    std::string later = "unset";
    std::thread([&] { later = kt_model_last_error(m); }).join();
    CHECK(later.empty());
    kt_model_free(m);
}

TEST_CASE("every *_last_error(NULL) gives a fixed message") {
    CHECK(std::string(kt_model_last_error(nullptr)) == "model is NULL");
    CHECK(std::string(kt_context_last_error(nullptr)) == "context is NULL");
    CHECK(std::string(kt_expert_pool_last_error(nullptr)) == "expert pool is NULL");
    CHECK(std::string(kt_gguf_writer_last_error(nullptr)) == "writer is NULL");
    CHECK(std::string(kt_detokenizer_last_error(nullptr)) == "detokenizer is NULL");
}

TEST_CASE("kt_gguf_writer_create_v2 reports a failure in kt_error as the other constructors do") {
    kt_error err = {sizeof err, 0, {0}};
    kt_gguf_writer *w = reinterpret_cast<kt_gguf_writer *>(0x1);
    CHECK(kt_gguf_writer_create_v2(24, &w, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(w == nullptr);
    CHECK(err.status == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("alignment 24") != std::string::npos);
    REQUIRE(kt_gguf_writer_create_v2(64, &w, &err) == KT_STATUS_OK);
    kt_gguf_writer_free(w);
    CHECK(kt_gguf_writer_create(7, &w) == KT_STATUS_INVALID_ARGUMENT);  // the first version still works
}

namespace {

// A log callback that calls back into kt: kt functions that log, and kt_log_set.
struct Reentrant {
    std::atomic<int> calls{0};
    bool uninstall = false;
};

void reentrant_log(int32_t, const char *, void *user_data) {
    auto *r = static_cast<Reentrant *>(user_data);
    ++r->calls;
    // kt_quantize logs its failures: from inside the callback that message is dropped, not delivered recursively.
    float x[3] = {1, 2, 3};
    (void)kt_quantize(KT_TYPE_Q8_0, x, 1, 3, nullptr, 0, nullptr);
    if (r->uninstall) kt_log_set(nullptr, nullptr, 0);
}

}  // namespace

TEST_CASE("the log callback may call kt, kt_log_set included, without deadlock or recursion") {
    Reentrant r;
    kt_log_set(reentrant_log, &r, KT_LOG_ERROR);
    float x[3] = {1, 2, 3};
    CHECK(kt_quantize(KT_TYPE_Q8_0, x, 1, 3, nullptr, 0, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(r.calls == 1);  // its own kt_quantize failure was not delivered to it
    r.uninstall = true;
    CHECK(kt_quantize(KT_TYPE_Q8_0, x, 1, 3, nullptr, 0, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(r.calls == 2);
    CHECK(kt_quantize(KT_TYPE_Q8_0, x, 1, 3, nullptr, 0, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(r.calls == 2);  // the callback uninstalled itself
}

namespace {

struct Slow {
    std::atomic<bool> started{false}, finished{false};
};

void slow_log(int32_t, const char *, void *user_data) {
    auto *s = static_cast<Slow *>(user_data);
    s->started = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    s->finished = true;
}

}  // namespace

TEST_CASE("kt_log_set returns only when the callback it replaces is no longer running") {
    Slow slow;
    kt_log_set(slow_log, &slow, KT_LOG_ERROR);
    std::thread logger([] {
        float x[3] = {1, 2, 3};
        (void)kt_quantize(KT_TYPE_Q8_0, x, 1, 3, nullptr, 0, nullptr);
    });
    while (!slow.started) std::this_thread::yield();
    kt_log_set(nullptr, nullptr, 0);
    CHECK(slow.finished);  // user_data could be freed now
    logger.join();
}

TEST_CASE("callbacks return 0 to go on: load progress, token streaming, tensor fill") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_file(path, kt::test::write_tiny_model({}));
    int calls = 0;
    kt_model_params p;
    kt_model_params_init(&p);
    p.progress_user_data = &calls;
    p.progress_callback = [](float, void *ud) -> int32_t {
        ++*static_cast<int *>(ud);
        return 0;
    };
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(path.c_str(), &p, &m, nullptr) == KT_STATUS_OK);
    CHECK(calls >= 1);
    kt_model_free(m);
    p.progress_callback = [](float, void *) -> int32_t { return 1; };
    m = reinterpret_cast<kt_model *>(0x1);
    CHECK(kt_model_load(path.c_str(), &p, &m, nullptr) == KT_STATUS_CANCELLED);
    CHECK(m == nullptr);
}
