// kt_context_* through kt.h: every architecture runs, batching does not change results, errors are clear and
// leave the sequence unchanged, generation stops where it should, sampling is reproducible, counters count.
// Models are tiny random-weight GGUFs written from each architecture's own tensor table (support/tiny_model.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kt.h"
#include "support/greedy.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace {

using kt::test::TinyModel;

struct Loaded {
    kt::test::TempDir dir;
    kt_model *model = nullptr;
    explicit Loaded(const TinyModel &spec) {
        const std::string path = dir.file("model.gguf");
        std::vector<uint8_t> bytes;
        const kt::Status written = kt::test::write_tiny_model(spec, &bytes);
        INFO(written.message());
        REQUIRE(written.is_ok());
        kt::test::write_file(path, bytes);
        kt_error err = {sizeof(kt_error), 0, {0}};
        INFO(err.message);
        REQUIRE(kt_model_load(path.c_str(), nullptr, &model, &err) == KT_STATUS_OK);
    }
    ~Loaded() { kt_model_free(model); }
};

kt_context_params params(int64_t n_ctx = 64, int32_t kv_type = KT_TYPE_F32, int64_t n_batch = 512) {
    kt_context_params p;
    kt_context_params_init(&p);
    p.n_ctx = n_ctx;
    p.kv_type = kv_type;
    p.n_batch = n_batch;
    p.kernels = KT_KERNELS_REFERENCE;
    p.n_threads = 2;
    return p;
}

struct Ctx {
    kt_context *ctx = nullptr;
    Ctx(kt_model *model, const kt_context_params &p) {
        kt_error err = {sizeof(kt_error), 0, {0}};
        const kt_status s = kt_context_create(model, &p, &ctx, &err);
        INFO(err.message);
        REQUIRE(s == KT_STATUS_OK);
    }
    ~Ctx() { kt_context_free(ctx); }

    std::vector<float> decode(const std::vector<int32_t> &tokens, int32_t mode) {
        const kt_status s = kt_context_decode(ctx, tokens.data(), static_cast<int64_t>(tokens.size()), mode);
        INFO(kt_context_last_error(ctx));
        REQUIRE(s == KT_STATUS_OK);
        int64_t rows = 0;
        const float *l = nullptr;
        if (mode == KT_LOGITS_NONE) return {};
        REQUIRE(kt_context_logits(ctx, 0, &l, &rows) == KT_STATUS_OK);
        const int64_t V = kt_context_n_vocab(ctx);
        return std::vector<float>(l, l + rows * V);
    }
};

double max_rel(const std::vector<float> &a, const std::vector<float> &b) {
    REQUIRE(a.size() == b.size());
    double diff = 0, ref = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
        ref = std::max(ref, std::fabs(static_cast<double>(b[i])));
    }
    return diff / ref;
}

const std::vector<int32_t> kPrompt = {1, 7, 33, 2, 63, 12, 5, 40, 41, 9, 17, 0, 22};

TinyModel arch(const std::string &name, bool moe) {
    TinyModel m;
    m.arch = name;
    if (!moe) m.n_expert = 0;
    return m;
}

const std::vector<std::pair<std::string, bool>> kArchitectures = {
    {"llama", false}, {"llama", true}, {"qwen2", false}, {"qwen3", false}, {"qwen2moe", true}, {"qwen3moe", true}};

std::string create_error(const TinyModel &spec, kt_status expected) {
    Loaded m(spec);
    kt_context_params p = params();
    kt_context *ctx = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status s = kt_context_create(m.model, &p, &ctx, &err);
    INFO(err.message);
    CHECK(s == expected);
    CHECK(ctx == nullptr);
    CHECK(err.status == expected);
    return err.message;
}

}  // namespace

TEST_CASE("context: every architecture gives the same logits prefilled at once, in steps, or token by token") {
    for (const auto &[name, moe] : kArchitectures) {
        INFO(name << (moe ? " (MoE)" : ""));
        Loaded m(arch(name, moe));
        Ctx whole(m.model, params());
        const std::vector<float> all = whole.decode(kPrompt, KT_LOGITS_ALL);
        REQUIRE(all.size() == kPrompt.size() * 64);

        Ctx steps(m.model, params(64, KT_TYPE_F32, 3));  // n_batch 3: five forward steps
        CHECK(max_rel(steps.decode(kPrompt, KT_LOGITS_ALL), all) < 1e-6);

        Ctx single(m.model, params());
        std::vector<float> one_by_one;
        for (int32_t t : kPrompt) {
            const std::vector<float> row = single.decode({t}, KT_LOGITS_LAST);
            one_by_one.insert(one_by_one.end(), row.begin(), row.end());
        }
        CHECK(max_rel(one_by_one, all) < 1e-5);
        CHECK(kt_context_n_past(single.ctx) == static_cast<int64_t>(kPrompt.size()));

        // LAST keeps only the final row, equal to ALL's last row.
        kt_context_reset(whole.ctx);
        CHECK(kt_context_n_past(whole.ctx) == 0);
        const std::vector<float> last = whole.decode(kPrompt, KT_LOGITS_LAST);
        CHECK(max_rel(last, std::vector<float>(all.end() - 64, all.end())) < 1e-6);

        // Lower-precision caches stay close.
        for (int32_t kv : {KT_TYPE_F16, KT_TYPE_BF16}) {
            Ctx c(m.model, params(64, kv));
            CHECK(max_rel(c.decode(kPrompt, KT_LOGITS_ALL), all) < 2e-2);
        }
    }
}

TEST_CASE("context: model defects are reported with the tensor or key that is wrong") {
    TinyModel missing;
    missing.drop = {"blk.1.attn_k_norm.weight", "output_norm.weight"};
    std::string msg = create_error(missing, KT_STATUS_INVALID_FILE);
    CHECK(msg.find("blk.1.attn_k_norm.weight") != std::string::npos);
    CHECK(msg.find("output_norm.weight") != std::string::npos);

    TinyModel extra;
    extra.extra_tensors = {{"blk.0.attn_q.bias", {32}}};  // qwen3moe has no Q bias
    msg = create_error(extra, KT_STATUS_UNSUPPORTED);
    CHECK(msg.find("blk.0.attn_q.bias") != std::string::npos);

    TinyModel shape;
    shape.drop = {"blk.0.ffn_up_exps.weight"};
    shape.extra_tensors = {{"blk.0.ffn_up_exps.weight", {32, 48, 3}}};
    msg = create_error(shape, KT_STATUS_INVALID_FILE);
    CHECK(msg.find("blk.0.ffn_up_exps.weight") != std::string::npos);
    CHECK(msg.find("[32, 48, 3]") != std::string::npos);

    TinyModel unknown;
    unknown.keys_after_table = {{"general.architecture", kt::gguf::Value::str("gptj")}};
    msg = create_error(unknown, KT_STATUS_UNSUPPORTED);
    CHECK(msg.find("gptj") != std::string::npos);
    CHECK(msg.find("qwen3moe") != std::string::npos);  // lists what kt runs

    TinyModel layers;
    layers.keys_after_table = {{"qwen3moe.block_count", kt::gguf::Value::u32(100000)}};
    msg = create_error(layers, KT_STATUS_INVALID_FILE);
    CHECK(msg.find("qwen3moe.block_count") != std::string::npos);

    TinyModel used;
    used.keys_after_table = {{"qwen3moe.expert_used_count", kt::gguf::Value::u32(9)}};  // more than the 4 experts
    msg = create_error(used, KT_STATUS_INVALID_FILE);
    CHECK(msg.find("expert_used_count") != std::string::npos);

    TinyModel gqa;
    gqa.keys_after_table = {{"qwen3moe.attention.head_count_kv", kt::gguf::Value::u32(3)}};
    msg = create_error(gqa, KT_STATUS_INVALID_FILE);
    CHECK(msg.find("head_count_kv") != std::string::npos);

    TinyModel rope;
    rope.keys_after_table = {{"qwen3moe.rope.scaling.type", kt::gguf::Value::str("longrope")}};
    msg = create_error(rope, KT_STATUS_UNSUPPORTED);
    CHECK(msg.find("longrope") != std::string::npos);

    // A GGUF without an architecture (a quantization golden file) cannot be run, but still loads.
    kt_model *quants = nullptr;
    REQUIRE(kt_model_load(kt::test::testdata_path("quants/Q4_K.gguf").c_str(), nullptr, &quants, nullptr) == KT_STATUS_OK);
    kt_context *ctx = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    CHECK(kt_context_create(quants, nullptr, &ctx, &err) != KT_STATUS_OK);
    CHECK(std::string(err.message).find("architecture") != std::string::npos);
    kt_model_free(quants);
}

namespace {

// A copy of `bytes` with the FLOAT32 metadata value of `key` replaced (the file is otherwise untouched).
std::vector<uint8_t> with_f32(std::vector<uint8_t> bytes, const std::string &key, float value) {
    std::vector<uint8_t> needle(8);
    const uint64_t n = key.size();
    std::memcpy(needle.data(), &n, 8);
    needle.insert(needle.end(), key.begin(), key.end());
    const auto at = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
    REQUIRE(at != bytes.end());
    const size_t type_at = static_cast<size_t>(at - bytes.begin()) + needle.size();
    uint32_t type = 0;
    std::memcpy(&type, bytes.data() + type_at, 4);
    REQUIRE(type == 6);  // FLOAT32
    std::memcpy(bytes.data() + type_at + 4, &value, 4);
    return bytes;
}

// The message of kt_context_create on `bytes`, which must fail with INVALID_FILE.
std::string refused(const std::vector<uint8_t> &bytes) {
    kt::test::TempDir dir;
    const std::string path = dir.file("model.gguf");
    kt::test::write_file(path, bytes);
    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    REQUIRE(kt_model_load(path.c_str(), nullptr, &model, &err) == KT_STATUS_OK);  // loading reads no hyperparameters
    kt_context_params p = params();
    kt_context *ctx = nullptr;
    CHECK(kt_context_create(model, &p, &ctx, &err) == KT_STATUS_INVALID_FILE);
    CHECK(ctx == nullptr);
    kt_context_free(ctx);
    kt_model_free(model);
    return err.message;
}

}  // namespace

TEST_CASE("context: hyperparameters out of range are refused with the key and the value") {
    // The golden deepseek2 file as llama.cpp's converter wrote it runs; one changed value does not.
    const std::vector<uint8_t> deepseek = kt::test::read_file(kt::test::testdata_path("models/deepseek2.q8_0.gguf"));
    {
        kt::test::TempDir dir;
        kt::test::write_file(dir.file("ok.gguf"), deepseek);
        kt_model *model = nullptr;
        REQUIRE(kt_model_load(dir.file("ok.gguf").c_str(), nullptr, &model, nullptr) == KT_STATUS_OK);
        kt_context_params p = params();
        kt_context *ctx = nullptr;
        CHECK(kt_context_create(model, &p, &ctx, nullptr) == KT_STATUS_OK);
        kt_context_free(ctx);
        kt_model_free(model);
    }
    const struct {
        const char *key;
        float value;
        const char *shown;
    } cases[] = {
        {"deepseek2.expert_weights_scale", 0.0f, "= 0 "},              // every routed expert silenced
        {"deepseek2.expert_weights_scale", -2.5f, "= -2.5 "},
        {"deepseek2.rope.scaling.factor", 0.0f, "= 0 "},               // YaRN as if unscaled
        {"deepseek2.rope.scaling.factor", 1e6f, "= 1e+06 "},
        {"deepseek2.rope.scaling.yarn_log_multiplier", -100.0f, "= -100 "},  // attention scale (1 - 100 ln 40)²
        {"deepseek2.rope.scaling.yarn_log_multiplier", 50.0f, "= 50 "},
        {"deepseek2.attention.layer_norm_rms_epsilon", 0.0f, "= 0 "},
        {"deepseek2.rope.freq_base", 0.5f, "= 0.5 "},
    };
    for (const auto &c : cases) {
        const std::string msg = refused(with_f32(deepseek, c.key, c.value));
        INFO(c.key << " = " << c.value << ": " << msg);
        CHECK(msg.find(std::string("'") + c.key + "'") != std::string::npos);
        CHECK(msg.find(c.shown) != std::string::npos);
    }
    const std::string nan = refused(with_f32(deepseek, "deepseek2.expert_weights_scale", std::nanf("")));
    CHECK(nan.find("deepseek2.expert_weights_scale' is not finite") != std::string::npos);

    // The generic keys of every family, on a tiny qwen3moe (set after its tensors were chosen: the generator reads
    // them too).
    TinyModel zero_factor;
    zero_factor.keys_after_table = {{"qwen3moe.rope.scaling.factor", kt::gguf::Value::f32(0.0f)}};
    CHECK(create_error(zero_factor, KT_STATUS_INVALID_FILE).find("'qwen3moe.rope.scaling.factor' = 0 ") != std::string::npos);
    TinyModel old_key;
    old_key.keys_after_table = {{"qwen3moe.rope.scale_linear", kt::gguf::Value::f32(-4.0f)}};
    CHECK(create_error(old_key, KT_STATUS_INVALID_FILE).find("'qwen3moe.rope.scale_linear' = -4 ") != std::string::npos);
    TinyModel beta;
    beta.keys_after_table = {{"qwen3moe.rope.scaling.type", kt::gguf::Value::str("yarn")},
                 {"qwen3moe.rope.scaling.factor", kt::gguf::Value::f32(4.0f)},
                 {"qwen3moe.rope.scaling.yarn_beta_fast", kt::gguf::Value::f32(0.0f)}};
    CHECK(create_error(beta, KT_STATUS_INVALID_FILE).find("'qwen3moe.rope.scaling.yarn_beta_fast' = 0 ") != std::string::npos);
    TinyModel wide;
    wide.keys_after_table = {{"qwen3moe.attention.head_count", kt::gguf::Value::u32(1024)},
                             {"qwen3moe.attention.head_count_kv", kt::gguf::Value::u32(1024)},
                             {"qwen3moe.attention.key_length", kt::gguf::Value::u32(1024)}};
    CHECK(create_error(wide, KT_STATUS_INVALID_FILE).find("attention width") != std::string::npos);
    // Scaling "none" ignores the factor, as llama.cpp does.
    TinyModel none;
    none.keys = {{"qwen3moe.rope.scaling.type", kt::gguf::Value::str("none")},
                 {"qwen3moe.rope.scaling.factor", kt::gguf::Value::f32(0.0f)}};
    Loaded m(none);
    kt_context_params p = params();
    Ctx c(m.model, p);
}

TEST_CASE("context: bad calls get a status and leave the sequence as it was") {
    Loaded m(TinyModel{});
    Ctx c(m.model, params(16));
    const kt_context *none = nullptr;
    CHECK(kt_context_n_vocab(none) == 0);
    kt_context_free(nullptr);
    uint64_t kv_total = 0, kv_per_position = 0;
    CHECK(kt_context_kv_size(none, &kv_total, &kv_per_position) == KT_STATUS_INVALID_ARGUMENT);
    REQUIRE(kt_context_kv_size(c.ctx, &kv_total, nullptr) == KT_STATUS_OK);
    REQUIRE(kt_context_kv_size(c.ctx, nullptr, &kv_per_position) == KT_STATUS_OK);
    CHECK(kv_per_position > 0);
    CHECK(kv_total >= 16 * kv_per_position);  // every one of the 16 positions has room (tiles may round up)

    const int32_t bad[] = {3, 64, 5};
    CHECK(kt_context_decode(c.ctx, bad, 3, KT_LOGITS_ALL) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(kt_context_last_error(c.ctx)).find("index 1") != std::string::npos);
    CHECK(kt_context_decode(c.ctx, nullptr, 3, KT_LOGITS_ALL) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_context_decode(c.ctx, bad, 1, 7) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_context_decode(c.ctx, bad, 0, KT_LOGITS_ALL) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_context_n_past(c.ctx) == 0);

    // More than the whole context: "N tokens, the context holds M" (not "holds 0 of M").
    const std::vector<int32_t> too_many(17, 1);
    CHECK(kt_context_decode(c.ctx, too_many.data(), 17, KT_LOGITS_LAST) == KT_STATUS_CONTEXT_FULL);
    CHECK(std::string(kt_context_last_error(c.ctx)).find("17 tokens do not fit: the context holds 16") != std::string::npos);
    CHECK(kt_context_n_past(c.ctx) == 0);

    int32_t token = -1;
    CHECK(kt_context_sample(c.ctx, nullptr, &token) == KT_STATUS_MISUSE);  // no logits yet
    const float *row = nullptr;
    CHECK(kt_context_logits(c.ctx, -1, &row, nullptr) == KT_STATUS_NOT_FOUND);

    // Full: 13 of 16 positions used, 4 more do not fit; nothing changes and no logits are kept.
    c.decode(kPrompt, KT_LOGITS_LAST);
    const int32_t four[] = {1, 2, 3, 4};
    CHECK(kt_context_decode(c.ctx, four, 4, KT_LOGITS_LAST) == KT_STATUS_CONTEXT_FULL);
    CHECK(kt_context_n_past(c.ctx) == 13);
    CHECK(std::string(kt_context_last_error(c.ctx)).find("13 of 16") != std::string::npos);
    CHECK(kt_context_decode(c.ctx, four, 3, KT_LOGITS_LAST) == KT_STATUS_OK);
    CHECK(kt_context_n_past(c.ctx) == 16);
    int64_t rows = 0;
    CHECK(kt_context_logits(c.ctx, 0, &row, &rows) == KT_STATUS_OK);
    CHECK(rows == 1);
    CHECK(kt_context_logits(c.ctx, 1, &row, nullptr) == KT_STATUS_NOT_FOUND);

    // Params: too-short struct, unknown cache type, unknown kernels.
    kt_context_params p = params();
    p.struct_size = 4;
    kt_context *ctx = nullptr;
    CHECK(kt_context_create(m.model, &p, &ctx, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    p = params();
    p.kv_type = KT_TYPE_Q4_K;
    CHECK(kt_context_create(m.model, &p, &ctx, nullptr) == KT_STATUS_UNSUPPORTED);
    p = params();
    p.kernels = 9;
    CHECK(kt_context_create(m.model, &p, &ctx, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
}

namespace {

struct AbortAfter {
    int calls = 0;
    int limit = 0;
};

int32_t abort_after(void *user_data) {
    auto *a = static_cast<AbortAfter *>(user_data);
    return ++a->calls > a->limit;
}

}  // namespace

TEST_CASE("context: the abort callback cancels a decode and the sequence stays as it was") {
    Loaded m(TinyModel{});
    Ctx reference(m.model, params());
    reference.decode({kPrompt.begin(), kPrompt.begin() + 5}, KT_LOGITS_NONE);
    const std::vector<float> expected = reference.decode({kPrompt.begin() + 5, kPrompt.end()}, KT_LOGITS_ALL);

    AbortAfter abort;
    kt_context_params p = params(64, KT_TYPE_F32, 4);
    p.abort_callback = abort_after;
    p.abort_user_data = &abort;
    abort.limit = 1000;
    Ctx c(m.model, p);
    c.decode({kPrompt.begin(), kPrompt.begin() + 5}, KT_LOGITS_NONE);
    abort.calls = 0;
    abort.limit = 3;  // the second forward step (two layers each) is cancelled
    CHECK(kt_context_decode(c.ctx, kPrompt.data() + 5, 8, KT_LOGITS_ALL) == KT_STATUS_CANCELLED);
    CHECK(kt_context_n_past(c.ctx) == 5);
    const float *row = nullptr;
    CHECK(kt_context_logits(c.ctx, 0, &row, nullptr) == KT_STATUS_NOT_FOUND);
    abort.limit = 1000;
    CHECK(max_rel(c.decode({kPrompt.begin() + 5, kPrompt.end()}, KT_LOGITS_ALL), expected) < 1e-6);
}

namespace {

struct Collect {
    std::vector<int32_t> tokens;
    size_t stop_after = 1000;
};

int32_t collect(int32_t token, void *user_data) {
    auto *c = static_cast<Collect *>(user_data);
    c->tokens.push_back(token);
    return c->tokens.size() >= c->stop_after;
}

}  // namespace

TEST_CASE("context: generation stops at max tokens, stop tokens, the callback and a full context") {
    Loaded m(TinyModel{});
    Ctx c(m.model, params(24));
    kt_generate_params gp;
    kt_generate_params_init(&gp);
    gp.max_tokens = 6;
    Collect seen;
    gp.on_token = collect;
    gp.user_data = &seen;
    std::vector<int32_t> out(8, -1);
    int64_t n = 0;
    int32_t reason = -1;
    REQUIRE(kt_context_generate(c.ctx, kPrompt.data(), 5, &gp, out.data(), 8, &n, &reason) == KT_STATUS_OK);
    CHECK(n == 6);
    CHECK(reason == KT_STOP_MAX_TOKENS);
    CHECK(seen.tokens == std::vector<int32_t>(out.begin(), out.begin() + 6));
    CHECK(kt_context_n_past(c.ctx) == 11);  // every reported token was decoded

    // Greedy generation is the argmax of the logits at each step.
    Ctx check(m.model, params(24));
    std::vector<float> logits = check.decode({kPrompt.begin(), kPrompt.begin() + 5}, KT_LOGITS_LAST);
    for (int i = 0; i < 6; ++i) {
        const int32_t best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        CHECK(out[i] == best);
        logits = check.decode({best}, KT_LOGITS_LAST);
    }

    // Continuing with an empty prompt extends the same sequence: 6 + 4 tokens equal 10 in one go.
    Ctx whole(m.model, params(24));
    std::vector<int32_t> ten(10);
    gp.max_tokens = 10;
    gp.on_token = nullptr;
    REQUIRE(kt_context_generate(whole.ctx, kPrompt.data(), 5, &gp, ten.data(), 10, &n, &reason) == KT_STATUS_OK);
    gp.max_tokens = 4;
    std::vector<int32_t> more(4);
    REQUIRE(kt_context_generate(c.ctx, nullptr, 0, &gp, more.data(), 4, &n, &reason) == KT_STATUS_OK);
    CHECK(std::equal(out.begin(), out.begin() + 6, ten.begin()));
    CHECK(more == std::vector<int32_t>(ten.begin() + 6, ten.end()));

    // A stop token is neither reported nor decoded: stop at the first token that has not appeared before.
    kt_context_reset(c.ctx);
    size_t first_new = 1;
    while (first_new < ten.size() && std::count(ten.begin(), ten.begin() + first_new, ten[first_new])) ++first_new;
    REQUIRE(first_new < ten.size());
    const int32_t stop = ten[first_new];
    gp.max_tokens = 10;
    gp.stop_tokens = &stop;
    gp.n_stop_tokens = 1;
    REQUIRE(kt_context_generate(c.ctx, kPrompt.data(), 5, &gp, out.data(), 8, &n, &reason) == KT_STATUS_OK);
    CHECK(reason == KT_STOP_TOKEN);
    CHECK(n == static_cast<int64_t>(first_new));
    CHECK(kt_context_n_past(c.ctx) == 5 + n);

    // The callback stops after the 3rd token.
    kt_context_reset(c.ctx);
    gp.n_stop_tokens = 0;
    Collect three;
    three.stop_after = 3;
    gp.on_token = collect;
    gp.user_data = &three;
    REQUIRE(kt_context_generate(c.ctx, kPrompt.data(), 5, &gp, nullptr, 0, &n, &reason) == KT_STATUS_OK);
    CHECK(reason == KT_STOP_CALLBACK);
    CHECK(n == 3);

    // A full context: 13 of 16 positions after the prompt leave room for 3 tokens.
    Ctx small(m.model, params(16));
    gp.on_token = nullptr;
    gp.max_tokens = 10;
    REQUIRE(kt_context_generate(small.ctx, kPrompt.data(), 13, &gp, nullptr, 0, &n, &reason) == KT_STATUS_OK);
    CHECK(reason == KT_STOP_CONTEXT_FULL);
    CHECK(n == 3);

    // Nothing to continue from.
    kt_context_reset(small.ctx);
    CHECK(kt_context_generate(small.ctx, nullptr, 0, &gp, nullptr, 0, &n, &reason) == KT_STATUS_MISUSE);
}

// Several contexts of one model, each used by its own thread at once (kt.h: a model may be shared by contexts),
// with the production kernels, whose MoE layers run on the expert pools' shared executor: each context computes
// what it computes alone. The threads only record; this thread asserts (Catch2's assertions are not thread-safe).
// The tsan workflow runs this under ThreadSanitizer.
TEST_CASE("context: contexts of one model decode at once on their own threads, as each would alone") {
    Loaded m(arch("qwen3moe", true));
    kt_context_params p = params();
    p.kernels = KT_KERNELS_AUTO;
    std::vector<float> alone;
    {
        Ctx c(m.model, p);
        alone = c.decode(kPrompt, KT_LOGITS_ALL);
    }
    constexpr int kThreads = 3;
    struct Result {
        kt_status created = -1, decoded = -1, generated = -1;
        std::vector<float> logits;
        std::vector<int32_t> tokens = std::vector<int32_t>(4, -1);
    };
    std::vector<Result> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            Result &r = results[static_cast<size_t>(t)];
            kt_context *ctx = nullptr;
            r.created = kt_context_create(m.model, &p, &ctx, nullptr);
            if (r.created != KT_STATUS_OK) return;
            r.decoded = kt_context_decode(ctx, kPrompt.data(), static_cast<int64_t>(kPrompt.size()), KT_LOGITS_ALL);
            const float *l = nullptr;
            int64_t rows = 0;
            if (r.decoded == KT_STATUS_OK && kt_context_logits(ctx, 0, &l, &rows) == KT_STATUS_OK)
                r.logits.assign(l, l + rows * kt_context_n_vocab(ctx));
            r.generated = kt::test::generate_greedy(ctx, r.tokens.data(), 4, nullptr);
            kt_context_free(ctx);
        });
    }
    for (auto &th : threads) th.join();
    for (const Result &r : results) {
        CHECK(r.created == KT_STATUS_OK);
        CHECK(r.decoded == KT_STATUS_OK);
        CHECK(r.generated == KT_STATUS_OK);
        REQUIRE(r.logits.size() == alone.size());
        CHECK(max_rel(r.logits, alone) < 1e-6);
        CHECK(r.tokens == results[0].tokens);
    }
}

TEST_CASE("context: sampling with a seed is reproducible and the seed matters") {
    Loaded m(TinyModel{});
    kt_sampler_params sp;
    kt_sampler_params_init(&sp);
    sp.temperature = 1.5f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    auto run = [&](uint64_t seed) {
        Ctx c(m.model, params());
        sp.seed = seed;
        kt_generate_params gp;
        kt_generate_params_init(&gp);
        gp.max_tokens = 24;
        gp.sampler = &sp;
        std::vector<int32_t> out(24);
        int64_t n = 0;
        REQUIRE(kt_context_generate(c.ctx, kPrompt.data(), 4, &gp, out.data(), 24, &n, nullptr) == KT_STATUS_OK);
        REQUIRE(n == 24);
        return out;
    };
    CHECK(run(7) == run(7));
    CHECK(run(7) != run(8));

    sp.reserved0 = 1;
    Ctx c(m.model, params());
    c.decode(kPrompt, KT_LOGITS_LAST);
    int32_t token = 0;
    CHECK(kt_context_sample(c.ctx, &sp, &token) == KT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("context: performance counters count tokens and time by phase") {
    Loaded m(TinyModel{});
    Ctx c(m.model, params());
    c.decode(kPrompt, KT_LOGITS_LAST);
    for (int32_t t : {3, 4, 5}) c.decode({t}, KT_LOGITS_LAST);
    kt_perf perf;
    perf.struct_size = sizeof perf;
    REQUIRE(kt_context_perf(c.ctx, &perf) == KT_STATUS_OK);
    CHECK(perf.n_prefill_tokens == 13);
    CHECK(perf.n_decode_tokens == 3);
    CHECK(perf.prefill_seconds > 0);
    CHECK(perf.decode_seconds > 0);
    CHECK(perf.attention_seconds > 0);
    CHECK(perf.experts_seconds > 0);
    CHECK(perf.head_seconds > 0);
    CHECK(perf.dense_ffn_seconds == 0);  // qwen3moe has no dense FFN
    const double phases = perf.attention_seconds + perf.experts_seconds + perf.dense_ffn_seconds + perf.head_seconds +
                          perf.other_seconds;
    CHECK(phases <= (perf.prefill_seconds + perf.decode_seconds) * 1.0001);
    kt_context_perf_reset(c.ctx);
    REQUIRE(kt_context_perf(c.ctx, &perf) == KT_STATUS_OK);
    CHECK(perf.n_prefill_tokens == 0);
    CHECK(perf.experts_seconds == 0);
    perf.struct_size = 8;
    CHECK(kt_context_perf(c.ctx, &perf) == KT_STATUS_INVALID_ARGUMENT);
}

namespace {

struct Specs {
    std::vector<std::string> names;
    std::vector<kt_tensor_spec> specs;
    size_t stop_after = 100000;
};

int32_t collect_spec(const kt_tensor_spec *spec, void *user_data) {
    auto *s = static_cast<Specs *>(user_data);
    s->names.emplace_back(spec->name);
    s->specs.push_back(*spec);
    return s->names.size() >= s->stop_after;
}

}  // namespace

TEST_CASE("writer: the tensors an architecture expects, from metadata alone") {
    kt_gguf_writer *w = nullptr;
    REQUIRE(kt_gguf_writer_create(0, &w) == KT_STATUS_OK);
    auto u32 = [&](const char *key, int64_t v) { REQUIRE(kt_gguf_writer_set_int(w, key, KT_META_UINT32, v) == KT_STATUS_OK); };
    REQUIRE(kt_gguf_writer_set_string(w, "general.architecture", "qwen3moe", 8) == KT_STATUS_OK);
    Specs specs;
    // Hyperparameters missing: the first one the reader needs is named.
    CHECK(kt_gguf_writer_expected_tensors(w, collect_spec, &specs) == KT_STATUS_INVALID_FILE);
    CHECK(std::string(kt_gguf_writer_last_error(w)).find("qwen3moe.embedding_length") != std::string::npos);
    u32("qwen3moe.embedding_length", 64);
    u32("qwen3moe.block_count", 2);
    u32("qwen3moe.context_length", 128);
    u32("qwen3moe.attention.head_count", 4);
    u32("qwen3moe.attention.head_count_kv", 2);
    u32("qwen3moe.attention.key_length", 32);
    u32("qwen3moe.attention.value_length", 32);
    u32("qwen3moe.expert_count", 8);
    u32("qwen3moe.expert_used_count", 2);
    u32("qwen3moe.expert_feed_forward_length", 48);
    u32("qwen3moe.vocab_size", 100);
    REQUIRE(kt_gguf_writer_set_float(w, "qwen3moe.attention.layer_norm_rms_epsilon", KT_META_FLOAT32, 1e-6) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_expected_tensors(w, collect_spec, &specs) == KT_STATUS_OK);
    REQUIRE(specs.names.size() == 3 + 2 * 12);
    CHECK(specs.names[0] == "token_embd.weight");
    CHECK(specs.specs[0].role == KT_TENSOR_ROLE_EMBEDDING);
    CHECK(specs.specs[0].ne[0] == 64);
    CHECK(specs.specs[0].ne[1] == 100);
    auto find = [&](const std::string &name) -> const kt_tensor_spec & {
        const auto it = std::find(specs.names.begin(), specs.names.end(), name);
        REQUIRE(it != specs.names.end());
        return specs.specs[static_cast<size_t>(it - specs.names.begin())];
    };
    const kt_tensor_spec &q = find("blk.1.attn_q.weight");
    CHECK((q.role == KT_TENSOR_ROLE_MATRIX && q.n_dims == 2 && q.ne[0] == 64 && q.ne[1] == 128 && !q.optional));
    const kt_tensor_spec &down = find("blk.0.ffn_down_exps.weight");
    CHECK((down.role == KT_TENSOR_ROLE_EXPERTS && down.ne[0] == 48 && down.ne[1] == 64 && down.ne[2] == 8));
    CHECK(find("output.weight").optional == 1);  // tied to token_embd when absent
    CHECK(find("blk.0.attn_k_norm.weight").role == KT_TENSOR_ROLE_VECTOR);

    Specs two;
    two.stop_after = 2;
    CHECK(kt_gguf_writer_expected_tensors(w, collect_spec, &two) == KT_STATUS_CANCELLED);
    CHECK(two.names.size() == 2);
    CHECK(kt_gguf_writer_expected_tensors(w, nullptr, &two) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_expected_tensors(nullptr, collect_spec, &two) == KT_STATUS_INVALID_ARGUMENT);
    kt_gguf_writer_free(w);

    REQUIRE(kt_gguf_writer_create(0, &w) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_string(w, "general.architecture", "mamba", 5) == KT_STATUS_OK);
    CHECK(kt_gguf_writer_expected_tensors(w, collect_spec, &two) == KT_STATUS_UNSUPPORTED);
    kt_gguf_writer_free(w);
}

TEST_CASE("kt_measure_roofline measures bandwidth and both peaks, and rejects bad arguments") {
    kt_roofline r;
    std::memset(&r, 0xA5, sizeof r);  // every field must be written
    r.struct_size = sizeof r;
    REQUIRE(kt_measure_roofline(1, 16u << 20, &r) == KT_STATUS_OK);
    CHECK(r.n_threads == 1);
    CHECK(r.buffer_bytes == (16u << 20));
    CHECK(r.read_bytes_per_s > 1e8);
    CHECK(r.int8_ops_per_s > 1e9);
    CHECK(r.bf16_flops_per_s > 1e8);
    const std::string int8_isa(r.int8_isa, strnlen(r.int8_isa, sizeof r.int8_isa));
    const std::string bf16_isa(r.bf16_isa, strnlen(r.bf16_isa, sizeof r.bf16_isa));
    CHECK(int8_isa.size() < sizeof r.int8_isa);  // NUL-terminated
    CHECK(bf16_isa.size() < sizeof r.bf16_isa);
    CHECK_FALSE(int8_isa.empty());
    CHECK_FALSE(bf16_isa.empty());

    // The AMX peaks: measured exactly when AMX runs natively (how fast is a benchmark's business, not a test's).
    if (kt_get_isa() == KT_ISA_AMX) {
        CHECK(r.amx_int8_ops_per_s > 1e9);
        CHECK(r.amx_bf16_flops_per_s > 1e9);
    } else {
        CHECK(r.amx_int8_ops_per_s == 0);
        CHECK(r.amx_bf16_flops_per_s == 0);
    }

    CHECK(kt_measure_roofline(1, 16u << 20, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    // A caller built before the AMX fields: its struct is filled up to its own size, nothing past it.
    kt_roofline old_caller;
    std::memset(&old_caller, 0xA5, sizeof old_caller);
    old_caller.struct_size = offsetof(kt_roofline, amx_int8_ops_per_s);
    REQUIRE(kt_measure_roofline(1, 16u << 20, &old_caller) == KT_STATUS_OK);
    CHECK(old_caller.read_bytes_per_s > 1e8);
    uint64_t untouched;
    std::memcpy(&untouched, &old_caller.amx_int8_ops_per_s, 8);
    CHECK(untouched == 0xA5A5A5A5A5A5A5A5ull);
    kt_roofline small = r;
    small.struct_size = sizeof small - 4;  // ends inside a field
    CHECK(kt_measure_roofline(1, 16u << 20, &small) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_measure_roofline(-1, 16u << 20, &r) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_measure_roofline(1, 16, &r) != KT_STATUS_OK);  // too small for even one 4 KiB slice
}
