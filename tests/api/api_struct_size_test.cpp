// struct_size through kt.h: every function that reads or writes a struct is called with the struct declared at
// every size from 0 to beyond today's sizeof. A size the struct has had (its history in src/api/api_structs.h)
// and any larger size work; every other size is refused with a message, and a refused output struct is left
// untouched. An input struct's bytes past its declared size are garbage here, so reading them would show; an
// output struct's bytes past its declared size must stay as they were, and those past today's sizeof read 0.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "api/api_structs.h"
#include "kt.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace {

using kt::api::struct_size_ok;

constexpr unsigned char kGarbage = 0xA5;   // past an input struct's declared size
constexpr unsigned char kUntouched = 0x5A;  // past an output struct's declared size
constexpr size_t kBeyond = 24;              // bytes past today's sizeof that a newer caller might declare

// The sizes to try for T: every size below today's (the historical ones must work, the rest must be refused), today's,
// and a few larger ones.
template <typename T>
std::vector<uint32_t> sizes_to_try() {
    std::vector<uint32_t> sizes;
    for (uint32_t s = 0; s <= sizeof(T); ++s) sizes.push_back(s);
    for (uint32_t extra : {1u, 4u, 8u, static_cast<uint32_t>(kBeyond)}) sizes.push_back(static_cast<uint32_t>(sizeof(T)) + extra);
    return sizes;
}

// A struct_size declared by a caller, in a buffer with room for a larger struct.
template <typename T>
struct Declared {
    alignas(16) unsigned char bytes[sizeof(T) + kBeyond];
    T *get() { return reinterpret_cast<T *>(bytes); }
};

// Result of one call: its status and the message it left (kt_error, last_error).
struct Outcome {
    kt_status status;
    std::string message;
};

// Calls `call` with `valid` declared at every size. Accepted sizes must give `ok`; refused ones
// KT_STATUS_INVALID_ARGUMENT with a message naming struct_size.
template <typename T, typename Call>
void check_input(const T &valid, kt_status ok, Call call) {
    for (uint32_t size : sizes_to_try<T>()) {
        INFO(kt::api::StructSizes<T>::name << " declared with struct_size " << size);
        Declared<T> d;
        std::memset(d.bytes, kGarbage, sizeof d.bytes);
        std::memcpy(d.bytes, &valid, std::min<size_t>(size, sizeof(T)));
        d.get()->struct_size = size;
        const Outcome o = call(d.get());
        if (struct_size_ok<T>(size)) {
            INFO(o.message);
            CHECK(o.status == ok);
        } else {
            CHECK(o.status == KT_STATUS_INVALID_ARGUMENT);
            CHECK(o.message.find("struct_size " + std::to_string(size)) != std::string::npos);
            CHECK(o.message.find(kt::api::StructSizes<T>::name) != std::string::npos);
        }
    }
}

// Calls `call` with an output struct declared at every size. Accepted sizes must give `ok` and the prefix of what
// today's size gets (when `deterministic`: values measured anew each call are not compared); refused ones
// `refused` (KT_STATUS_INVALID_ARGUMENT, or for kt_error the failing call's own status) with nothing written.
template <typename T, typename Call>
void check_output(kt_status ok, kt_status refused, bool deterministic, Call call) {
    T full;
    std::memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    REQUIRE(call(&full).status == ok);
    for (uint32_t size : sizes_to_try<T>()) {
        INFO(kt::api::StructSizes<T>::name << " declared with struct_size " << size);
        Declared<T> d;
        std::memset(d.bytes, kUntouched, sizeof d.bytes);
        d.get()->struct_size = size;
        const Outcome o = call(d.get());
        CHECK(d.get()->struct_size == size);
        const size_t known = std::min<size_t>(size, sizeof(T));
        if (struct_size_ok<T>(size)) {
            INFO(o.message);
            CHECK(o.status == ok);
            const auto *f = reinterpret_cast<const unsigned char *>(&full);
            if (deterministic) CHECK(std::memcmp(d.bytes + 4, f + 4, known - 4) == 0);
            CHECK(std::count(d.bytes + sizeof(T), d.bytes + std::max<size_t>(size, sizeof(T)), 0) ==
                  static_cast<long>(std::max<size_t>(size, sizeof(T)) - sizeof(T)));
            CHECK(std::count(d.bytes + std::max<size_t>(size, sizeof(T)), d.bytes + sizeof d.bytes, kUntouched) ==
                  static_cast<long>(sizeof d.bytes - std::max<size_t>(size, sizeof(T))));
        } else {
            CHECK(o.status == refused);
            CHECK(std::count(d.bytes + 4, d.bytes + sizeof d.bytes, kUntouched) == static_cast<long>(sizeof d.bytes - 4));
        }
    }
}

std::string error_text(const kt_error *e) { return std::string(e->message, strnlen(e->message, sizeof e->message)); }

struct TinyFiles {
    kt::test::TempDir dir;
    std::string model;  // a qwen3moe of tiny shapes (no vocabulary)
    TinyFiles() : model(dir.file("tiny.gguf")) { kt::test::write_file(model, kt::test::write_tiny_model({})); }
};

kt_model *load(const std::string &path) {
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
    return m;
}

kt_context_params small_context() {
    kt_context_params p;
    kt_context_params_init(&p);
    p.n_ctx = 32;
    p.n_threads = 1;
    p.kernels = KT_KERNELS_REFERENCE;
    return p;
}

}  // namespace

// ---- the helpers themselves, on a struct that has grown once ----

namespace {

struct GrownV1 {  // the first version: 16 bytes
    uint32_t struct_size;
    int32_t a;
    const void *p;
};
struct Grown {  // today's: one field appended, 24 bytes
    uint32_t struct_size;
    int32_t a;
    const void *p;
    int32_t b;
};

}  // namespace

namespace kt::api {
template <>
struct StructSizes<Grown> {
    static constexpr const char *name = "Grown";
    static constexpr uint32_t sizes[] = {16, 24};
    static constexpr size_t count = 2;
};
}  // namespace kt::api

TEST_CASE("struct helpers: an older caller's struct reads 0 past its size and gets only its prefix written") {
    static_assert(sizeof(GrownV1) == 16 && sizeof(Grown) == 24);
    Declared<Grown> old;
    std::memset(old.bytes, kGarbage, sizeof old.bytes);
    GrownV1 v1 = {sizeof(GrownV1), 7, &v1};
    std::memcpy(old.bytes, &v1, sizeof v1);
    Grown in;
    REQUIRE(kt::api::read_struct(old.get(), &in, "test").is_ok());
    CHECK(in.struct_size == sizeof(Grown));
    CHECK(in.a == 7);
    CHECK(in.p == &v1);
    CHECK(in.b == 0);  // not the garbage past the old caller's struct

    const Grown result = {sizeof(Grown), 1, nullptr, 2};
    std::memset(old.bytes, kUntouched, sizeof old.bytes);
    old.get()->struct_size = sizeof(GrownV1);
    REQUIRE(kt::api::write_struct(result, old.get(), "test").is_ok());
    CHECK(old.get()->struct_size == sizeof(GrownV1));
    CHECK(old.get()->a == 1);
    CHECK(std::count(old.bytes + sizeof(GrownV1), old.bytes + sizeof old.bytes, kUntouched) ==
          static_cast<long>(sizeof old.bytes - sizeof(GrownV1)));

    for (uint32_t bad : {0u, 4u, 8u, 12u, 15u, 17u, 20u, 23u}) {
        INFO("struct_size " << bad);
        old.get()->struct_size = bad;
        const kt::Status s = kt::api::read_struct(old.get(), &in, "test");
        CHECK(s.code() == KT_STATUS_INVALID_ARGUMENT);
        CHECK(s.message().find("Grown has had (16, 24") != std::string::npos);
        CHECK(kt::api::write_struct(result, old.get(), "test").code() == KT_STATUS_INVALID_ARGUMENT);
    }
}

// ---- input structs ----

TEST_CASE("struct_size: kt_model_params, kt_context_params, kt_sampler_params, kt_generate_params") {
    TinyFiles files;
    kt_model_params mp;
    kt_model_params_init(&mp);
    check_input(mp, KT_STATUS_OK, [&](const kt_model_params *p) {
        kt_model *m = nullptr;
        kt_error err = {sizeof err, 0, {0}};
        const kt_status s = kt_model_load(files.model.c_str(), p, &m, &err);
        kt_model_free(m);
        return Outcome{s, error_text(&err)};
    });

    kt_model *model = load(files.model);
    check_input(small_context(), KT_STATUS_OK, [&](const kt_context_params *p) {
        kt_context *c = nullptr;
        kt_error err = {sizeof err, 0, {0}};
        const kt_status s = kt_context_create(model, p, &c, &err);
        kt_context_free(c);
        return Outcome{s, error_text(&err)};
    });

    const kt_context_params cp = small_context();
    kt_context *ctx = nullptr;
    REQUIRE(kt_context_create(model, &cp, &ctx, nullptr) == KT_STATUS_OK);
    const int32_t prompt[] = {1, 2, 3};
    kt_sampler_params sp;
    kt_sampler_params_init(&sp);
    REQUIRE(kt_context_decode(ctx, prompt, 3, KT_LOGITS_LAST) == KT_STATUS_OK);
    check_input(sp, KT_STATUS_OK, [&](const kt_sampler_params *p) {
        int32_t token = -1;
        const kt_status s = kt_context_sample(ctx, p, &token);
        return Outcome{s, kt_context_last_error(ctx)};
    });

    kt_generate_params gp;
    kt_generate_params_init(&gp);
    gp.max_tokens = 1;
    check_input(gp, KT_STATUS_OK, [&](const kt_generate_params *p) {
        kt_context_reset(ctx);
        const kt_status s = kt_context_generate(ctx, prompt, 3, p, nullptr, 0, nullptr, nullptr);
        return Outcome{s, kt_context_last_error(ctx)};
    });
    // The sampler a generate call points at is read the same way.
    check_input(sp, KT_STATUS_OK, [&](const kt_sampler_params *p) {
        kt_generate_params g = gp;
        g.sampler = p;
        kt_context_reset(ctx);
        const kt_status s = kt_context_generate(ctx, prompt, 3, &g, nullptr, 0, nullptr, nullptr);
        return Outcome{s, kt_context_last_error(ctx)};
    });
    kt_context_free(ctx);
    kt_model_free(model);
}

TEST_CASE("struct_size: kt_chat_params") {
    kt_model *m = load(kt::test::testdata_path("tokenizer/qwen3.gguf"));
    kt_chat_params params;
    kt_chat_params_init(&params);
    params.template_name = "chatml";
    const kt_chat_message turn[] = {{"user", "Hi"}};
    check_input(params, KT_STATUS_OK, [&](const kt_chat_params *p) {
        char buf[256];
        int64_t len = 0;
        const kt_status s = kt_chat_apply_template(m, turn, 1, p, buf, sizeof buf, &len);
        return Outcome{s, kt_model_last_error(m)};
    });
    kt_model_free(m);
}

TEST_CASE("struct_size: kt_expert_pool_params, kt_expert_weights, kt_expert_forward") {
    const int32_t E = 2, H = 32, I = 32;
    kt_expert_pool_params pp;
    kt_expert_pool_params_init(&pp);
    pp.n_experts = E;
    pp.hidden_size = H;
    pp.intermediate_size = I;
    pp.n_threads = 1;
    check_input(pp, KT_STATUS_OK, [&](const kt_expert_pool_params *p) {
        kt_expert_pool *pool = nullptr;
        kt_error err = {sizeof err, 0, {0}};
        const kt_status s = kt_expert_pool_create(p, &pool, &err);
        kt_expert_pool_free(pool);
        return Outcome{s, error_text(&err)};
    });

    kt_expert_pool *pool = nullptr;
    REQUIRE(kt_expert_pool_create(&pp, &pool, nullptr) == KT_STATUS_OK);
    const std::vector<float> gate = kt::test::random_normal(static_cast<size_t>(E * I * H), 1, 0.1f);
    const std::vector<float> down = kt::test::random_normal(static_cast<size_t>(E * H * I), 2, 0.1f);
    const kt_expert_weights w = {sizeof w, KT_TYPE_F32, KT_TYPE_F32, KT_TYPE_F32, gate.data(), gate.data(), down.data()};
    check_input(w, KT_STATUS_OK, [&](const kt_expert_weights *p) {
        return Outcome{kt_expert_pool_load(pool, p), kt_expert_pool_last_error(pool)};
    });
    check_input(w, KT_STATUS_OK, [&](const kt_expert_weights *p) {
        return Outcome{kt_expert_pool_load_experts(pool, p, 1, 1), kt_expert_pool_last_error(pool)};
    });

    const std::vector<float> x = kt::test::random_normal(static_cast<size_t>(2 * H), 3);
    std::vector<float> y(x.size());
    const int32_t ids[] = {0, 1, 1, -1};
    const float weights[] = {0.5f, 0.5f, 1.0f, 0.0f};
    kt_expert_forward f;
    kt_expert_forward_init(&f);
    f.n_tokens = 2;
    f.top_k = 2;
    f.input = x.data();
    f.expert_ids = ids;
    f.expert_weights = weights;
    f.output = y.data();
    check_input(f, KT_STATUS_OK, [&](const kt_expert_forward *p) {
        return Outcome{kt_expert_pool_forward(pool, p), kt_expert_pool_last_error(pool)};
    });
    check_input(f, KT_STATUS_OK, [&](const kt_expert_forward *p) {
        uint64_t ticket = 0;
        kt_status s = kt_expert_pool_submit(pool, p, &ticket);
        if (s == KT_STATUS_OK) s = kt_expert_pool_wait(pool, ticket);
        return Outcome{s, kt_expert_pool_last_error(pool)};
    });
    kt_expert_pool_free(pool);
}

// ---- output structs ----

TEST_CASE("struct_size: kt_error from every constructor") {
    TinyFiles files;
    const std::string missing = files.dir.file("absent.gguf");
    check_output<kt_error>(KT_STATUS_IO_ERROR, KT_STATUS_IO_ERROR, true, [&](kt_error *err) {
        kt_model *m = nullptr;
        return Outcome{kt_model_load(missing.c_str(), nullptr, &m, err), ""};
    });
    kt_model *model = load(files.model);
    kt_context_params cp = small_context();
    cp.n_threads = -1;
    check_output<kt_error>(KT_STATUS_INVALID_ARGUMENT, KT_STATUS_INVALID_ARGUMENT, true, [&](kt_error *err) {
        kt_context *c = nullptr;
        return Outcome{kt_context_create(model, &cp, &c, err), ""};
    });
    check_output<kt_error>(KT_STATUS_NOT_FOUND, KT_STATUS_NOT_FOUND, true, [&](kt_error *err) {
        kt_detokenizer *d = nullptr;  // the tiny model has no vocabulary
        return Outcome{kt_detokenizer_create(model, 0, &d, err), ""};
    });
    kt_model_free(model);
    kt_expert_pool_params pp;
    kt_expert_pool_params_init(&pp);  // no sizes set
    check_output<kt_error>(KT_STATUS_INVALID_ARGUMENT, KT_STATUS_INVALID_ARGUMENT, true, [&](kt_error *err) {
        kt_expert_pool *pool = nullptr;
        return Outcome{kt_expert_pool_create(&pp, &pool, err), ""};
    });
    check_output<kt_error>(KT_STATUS_INVALID_ARGUMENT, KT_STATUS_INVALID_ARGUMENT, true, [&](kt_error *err) {
        kt_gguf_writer *w = nullptr;
        return Outcome{kt_gguf_writer_create_v2(3, &w, err), ""};
    });
}

TEST_CASE("struct_size: kt_tensor_info, kt_vocab_info, kt_perf, kt_expert_pool_info, kt_roofline") {
    TinyFiles files;
    kt_model *model = load(files.model);
    check_output<kt_tensor_info>(KT_STATUS_OK, KT_STATUS_INVALID_ARGUMENT, true, [&](kt_tensor_info *info) {
        return Outcome{kt_model_tensor_info(model, 1, info), kt_model_last_error(model)};
    });
    const kt_context_params cp = small_context();
    kt_context *ctx = nullptr;
    REQUIRE(kt_context_create(model, &cp, &ctx, nullptr) == KT_STATUS_OK);
    const int32_t prompt[] = {1, 2, 3};
    REQUIRE(kt_context_decode(ctx, prompt, 3, KT_LOGITS_LAST) == KT_STATUS_OK);
    check_output<kt_perf>(KT_STATUS_OK, KT_STATUS_INVALID_ARGUMENT, true, [&](kt_perf *perf) {
        return Outcome{kt_context_perf(ctx, perf), kt_context_last_error(ctx)};
    });
    kt_context_free(ctx);
    kt_model_free(model);

    kt_model *vocab = load(kt::test::testdata_path("tokenizer/qwen3.gguf"));
    check_output<kt_vocab_info>(KT_STATUS_OK, KT_STATUS_INVALID_ARGUMENT, true, [&](kt_vocab_info *info) {
        return Outcome{kt_vocab_get_info(vocab, info), kt_model_last_error(vocab)};
    });
    kt_model_free(vocab);

    kt_expert_pool_params pp;
    kt_expert_pool_params_init(&pp);
    pp.n_experts = 2;
    pp.hidden_size = pp.intermediate_size = 32;
    pp.n_threads = 1;
    kt_expert_pool *pool = nullptr;
    REQUIRE(kt_expert_pool_create(&pp, &pool, nullptr) == KT_STATUS_OK);
    check_output<kt_expert_pool_info>(KT_STATUS_OK, KT_STATUS_INVALID_ARGUMENT, true, [&](kt_expert_pool_info *info) {
        return Outcome{kt_expert_pool_get_info(pool, info), kt_expert_pool_last_error(pool)};
    });
    kt_expert_pool_free(pool);

    // Measured anew on every call, so only the layout rules are compared; a small buffer keeps it quick.
    check_output<kt_roofline>(KT_STATUS_OK, KT_STATUS_INVALID_ARGUMENT, false, [&](kt_roofline *r) {
        return Outcome{kt_measure_roofline(1, 1u << 20, r), ""};
    });
}

TEST_CASE("struct_size: kt_tensor_spec carries the size kt filled") {
    kt_gguf_writer *w = nullptr;
    REQUIRE(kt_gguf_writer_create_v2(0, &w, nullptr) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_string(w, "general.architecture", "qwen3moe", 8) == KT_STATUS_OK);
    const std::pair<const char *, int64_t> keys[] = {
        {"qwen3moe.embedding_length", 16}, {"qwen3moe.block_count", 1},     {"qwen3moe.feed_forward_length", 16},
        {"qwen3moe.attention.head_count", 2}, {"qwen3moe.attention.head_count_kv", 2}, {"qwen3moe.expert_count", 2},
        {"qwen3moe.expert_used_count", 1},  {"qwen3moe.vocab_size", 8},     {"qwen3moe.context_length", 16}};
    for (const auto &[key, value] : keys) REQUIRE(kt_gguf_writer_set_int(w, key, KT_META_UINT32, value) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_float(w, "qwen3moe.attention.layer_norm_rms_epsilon", KT_META_FLOAT32, 1e-6) ==
            KT_STATUS_OK);
    int n = 0;
    const kt_status s = kt_gguf_writer_expected_tensors(
        w,
        [](const kt_tensor_spec *spec, void *ud) -> int32_t {
            *static_cast<int *>(ud) += spec->struct_size == sizeof(kt_tensor_spec) ? 1 : -1000;
            return 0;
        },
        &n);
    INFO(kt_gguf_writer_last_error(w));
    REQUIRE(s == KT_STATUS_OK);
    CHECK(n > 3);
    kt_gguf_writer_free(w);
}
