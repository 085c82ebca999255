// The hybrid path through kt.h on the CPU stand-in device: a tiny MoE model gives the same greedy tokens and (to the
// summation order) the same logits as on the CPU alone; the plan is printed and follows activation counts; a
// model that does not fit is refused with a message that says why.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "support/greedy.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace {

// qwen3moe, 2 layers, 8 experts top-2; the experts stored as BF16, which the CPU pool and the device both compute
// with as stored (the rest stays F32).
kt::test::TinyModel spec() {
    kt::test::TinyModel s;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.seed = 5;
    s.types.push_back({"_exps.", KT_TYPE_BF16});
    return s;
}

struct Run {
    std::vector<float> logits;   // every prompt position, n_vocab each
    std::vector<int32_t> tokens; // greedy continuation
};

const std::vector<int32_t> kPrompt = {1, 5, 9, 2, 33, 17, 4, 60, 12, 7};

std::string &last_message() {
    static std::string message;
    return message;
}

kt_model *load(const std::string &path, const kt_model_params &p, kt_status *status = nullptr) {
    kt_model *m = nullptr;
    kt_error err;
    err.struct_size = sizeof err;
    err.message[0] = '\0';
    const kt_status s = kt_model_load(path.c_str(), &p, &m, &err);
    if (status) *status = s;
    else {
        INFO(err.message);
        REQUIRE(s == KT_STATUS_OK);
    }
    if (s != KT_STATUS_OK) last_message() = err.message;
    return m;
}

kt_context *new_context(kt_model *m) {
    kt_context_params cp;
    kt_context_params_init(&cp);
    cp.n_threads = 2;
    cp.n_ctx = 64;
    kt_context *ctx = nullptr;
    REQUIRE(kt_context_create(m, &cp, &ctx, nullptr) == KT_STATUS_OK);
    return ctx;
}

Run run(kt_model *m) {
    kt_context *ctx = new_context(m);
    Run r;
    REQUIRE(kt_context_decode(ctx, kPrompt.data(), static_cast<int64_t>(kPrompt.size()), KT_LOGITS_ALL) == KT_STATUS_OK);
    const int64_t V = kt_context_n_vocab(ctx);
    for (int64_t row = 0; row < static_cast<int64_t>(kPrompt.size()); ++row) {
        const float *l = nullptr;
        REQUIRE(kt_context_logits(ctx, row, &l, nullptr) == KT_STATUS_OK);
        r.logits.insert(r.logits.end(), l, l + V);
    }
    r.tokens.resize(8);
    int64_t produced = 0;
    REQUIRE(kt::test::generate_greedy(ctx, r.tokens.data(), 8, &produced) == KT_STATUS_OK);
    r.tokens.resize(static_cast<size_t>(produced));
    kt_context_free(ctx);
    return r;
}

// The all-CPU model's run: what every device configuration must reproduce.
Run all_cpu_run(const std::string &path) {
    kt_model_params p;
    kt_model_params_init(&p);
    kt_model *cpu = load(path, p);
    const Run r = run(cpu);
    kt_model_free(cpu);
    return r;
}

// The prompt decoded one token per call (where deferral happens most: a lone token keeps only its heaviest
// experts), the logits of each.
std::vector<float> run_stepwise(kt_model *m) {
    kt_context *ctx = new_context(m);
    std::vector<float> logits;
    for (int32_t token : kPrompt) {
        REQUIRE(kt_context_decode(ctx, &token, 1, KT_LOGITS_ALL) == KT_STATUS_OK);
        const float *l = nullptr;
        REQUIRE(kt_context_logits(ctx, 0, &l, nullptr) == KT_STATUS_OK);
        logits.insert(logits.end(), l, l + kt_context_n_vocab(ctx));
    }
    kt_context_free(ctx);
    return logits;
}

std::string plan_of(const kt_model *m) {
    uint64_t n = 0;
    REQUIRE(kt_model_device_plan(m, nullptr, 0, &n) == KT_STATUS_BUFFER_TOO_SMALL);
    std::string text(n + 1, '\0');
    REQUIRE(kt_model_device_plan(m, text.data(), text.size(), &n) == KT_STATUS_OK);
    text.resize(n);
    return text;
}

// Whether the plan puts each layer's two hottest experts by counts ([2 layers][8 experts]) on the device, as
// "layer L: 2/8 experts [lo hi]" (ties to the lower id).
void check_two_hottest(const std::string &plan, const std::vector<uint64_t> &counts) {
    INFO(plan);
    CHECK_THAT(plan, Catch::Contains("hottest by activation counts"));
    for (int64_t layer = 0; layer < 2; ++layer) {
        std::vector<int32_t> order(8);
        std::iota(order.begin(), order.end(), 0);
        const uint64_t *row = counts.data() + layer * 8;
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        const int32_t lo = std::min(order[0], order[1]), hi = std::max(order[0], order[1]);
        CHECK_THAT(plan, Catch::Contains("layer " + std::to_string(layer) + ": 2/8 experts [" + std::to_string(lo) + " " +
                                         std::to_string(hi) + "]"));
    }
}

// The largest difference between two runs' logits, relative to the largest logit of `expected`.
double relative_worst(const std::vector<float> &got, const std::vector<float> &expected) {
    REQUIRE(got.size() == expected.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(got[i] - expected[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(expected[i])));
    }
    return scale > 0 ? worst / scale : worst;
}

kt_model_params standin_params(uint64_t budget, int64_t experts) {
    kt_model_params p;
    kt_model_params_init(&p);
    p.device = KT_DEVICE_CPU_STANDIN;
    p.device_budget_bytes = budget;
    p.device_experts = experts;
    return p;
}

}  // namespace

TEST_CASE("device api: the stand-in device gives the all-CPU model's greedy tokens and logits") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_tiny_model_file_or_fail(spec(), path);

    kt_model_params cpu_params;
    kt_model_params_init(&cpu_params);
    kt_model *cpu = load(path, cpu_params);
    const Run expected = run(cpu);
    CHECK(kt_model_device_plan(cpu, nullptr, 0, nullptr) == KT_STATUS_NOT_FOUND);

    for (int64_t experts : {3, 8}) {
        kt_model *hybrid = load(path, standin_params(64ull << 20, experts));
        const std::string before = plan_of(hybrid);
        INFO(before);
        CHECK_THAT(before, Catch::Contains("layer 0: " + std::to_string(experts) + "/8 experts"));
        CHECK_THAT(before, Catch::Contains("layer 1: " + std::to_string(experts) + "/8 experts"));
        const Run got = run(hybrid);
        // Same tokens; logits within what a different order of summing the experts' outputs moves them (both
        // sides compute each expert from the same BF16 weights and BF16-rounded activations), through 2 layers.
        CHECK(got.tokens == expected.tokens);
        CHECK(relative_worst(got.logits, expected.logits) <= 1e-3);
        const std::string after = plan_of(hybrid);
        INFO(after);
        CHECK_THAT(after, Catch::Contains("split: "));
        // Exact accounting: what the device holds once the engine has built the layers is what the plan said.
        const size_t used_at = before.find(", used ");
        REQUIRE(used_at != std::string::npos);
        const std::string used = before.substr(used_at + 7, before.find(' ', used_at + 7) - used_at - 7);
        CHECK_THAT(after, Catch::Contains(": " + used + " bytes in use"));
        CHECK_THAT(before, Catch::Contains(": 0 bytes in use"));  // nothing allocated before the engine runs
        CHECK_THAT(after, !Catch::Contains("rows 0 on the device"));
        if (experts == 8) CHECK_THAT(after, Catch::Contains(" / 0 on the CPU"));
        kt_model_free(hybrid);
    }
    kt_model_free(cpu);
}

TEST_CASE("device api: activation counts are recorded, and placement by them puts the hottest experts on the device") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_tiny_model_file_or_fail(spec(), path);
    kt_model_params p;
    kt_model_params_init(&p);
    kt_model *calib = load(path, p);
    std::vector<uint64_t> c(8);
    int64_t n = 0;
    CHECK(kt_model_expert_counts(calib, 0, c.data(), 8, &n) == KT_STATUS_NOT_FOUND);  // not prepared yet
    const Run calibration = run(calib);
    REQUIRE(!calibration.tokens.empty());
    std::vector<uint64_t> all;  // [n_layer][n_expert]
    for (int64_t layer = 0; layer < 2; ++layer) {
        REQUIRE(kt_model_expert_counts(calib, layer, c.data(), 8, &n) == KT_STATUS_OK);
        CHECK(n == 8);
        // Every routed (token, slot): the prompt and each generated token (kt_context_generate runs the last one
        // too, leaving the context ready to continue), top-2.
        const uint64_t total = std::accumulate(c.begin(), c.end(), uint64_t{0});
        CHECK(total == (kPrompt.size() + calibration.tokens.size()) * 2);
        all.insert(all.end(), c.begin(), c.end());
    }
    CHECK(kt_model_expert_counts(calib, 0, c.data(), 7, &n) == KT_STATUS_BUFFER_TOO_SMALL);
    CHECK(kt_model_expert_counts(calib, 5, c.data(), 8, &n) == KT_STATUS_NOT_FOUND);
    kt_model_free(calib);

    kt_model_params hp = standin_params(64ull << 20, 2);
    hp.device_expert_counts = all.data();
    hp.device_expert_counts_len = all.size();
    kt_model *hybrid = load(path, hp);
    check_two_hottest(plan_of(hybrid), all);
    kt_model_free(hybrid);
    hp.device_expert_counts_len = 3;  // not n_layer * n_expert
    kt_status s = KT_STATUS_OK;
    CHECK(load(path, hp, &s) == nullptr);
    CHECK(s == KT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("device api: a model that does not fit, or a request that cannot be met, is refused with the reason") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_tiny_model_file_or_fail(spec(), path);
    kt_status s = KT_STATUS_OK;

    kt_model_params p = standin_params(64ull << 20, 9);  // more than the 8 experts a layer has
    CHECK(load(path, p, &s) == nullptr);
    CHECK(s == KT_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(last_message(), Catch::Contains("layer 0 has 8 experts"));

    p = standin_params(1000, 0);  // not even the work buffer
    CHECK(load(path, p, &s) == nullptr);
    CHECK(s == KT_STATUS_OUT_OF_MEMORY);
    CHECK_THAT(last_message(), Catch::Contains("non-expert"));

    p = standin_params(64ull << 20, 0);  // as many as fit: all of them
    kt_model *m = load(path, p);
    CHECK_THAT(plan_of(m), Catch::Contains("layer 1: 8/8 experts"));
    kt_model_free(m);

    p.device = 7;
    CHECK(load(path, p, &s) == nullptr);
    CHECK(s == KT_STATUS_INVALID_ARGUMENT);

    p = standin_params(64ull << 20, 2);
    p.device = KT_DEVICE_CUDA;
    m = load(path, p, &s);
    if (s == KT_STATUS_OK) {
        WARN("a CUDA device is present: the CUDA load was checked, not its refusal");
        kt_model_free(m);
    } else {
        CHECK(s == KT_STATUS_UNSUPPORTED);
        WARN("KT_DEVICE_CUDA refused as expected here: " << last_message());
    }
}

TEST_CASE("device api: deferred experts land one layer late, only where something is left to defer") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_tiny_model_file_or_fail(spec(), path);

    // 3 of 8 experts per layer on the device; the rest deferred by up to 1 per token (top-2: each token keeps its
    // heavier expert in its own layer). Layer 0 defers, layer 1 - the last - takes them and defers nothing.
    kt_model *plain = load(path, standin_params(64ull << 20, 3));
    const std::vector<float> undeferred = run_stepwise(plain);
    kt_model_free(plain);
    kt_model_params p = standin_params(64ull << 20, 3);
    p.device_deferred_experts = 1;
    kt_model *deferring = load(path, p);
    const std::vector<float> got = run_stepwise(deferring);
    const std::string text = plan_of(deferring);
    INFO(text);
    const size_t at = text.find(" on the CPU (");
    REQUIRE(at != std::string::npos);
    CHECK(std::stoll(text.substr(at + 13)) > 0);  // "(N deferred)": single-token decodes had experts to defer
    const size_t jobs = text.find("deferred jobs ");
    REQUIRE(jobs != std::string::npos);
    CHECK(std::stoll(text.substr(jobs + 14)) > 0);  // and the next layer took them
    kt_model_free(deferring);
    for (float v : got) REQUIRE(std::isfinite(v));
    const double moved = relative_worst(got, undeferred);
    // The deferral changed the numbers (a lone token's lighter CPU expert entered one layer late), and not by more
    // than the expert's share of the logits: in this random top-2 model (the deferred expert is half of a token's
    // experts) they move by about 0.2 of their scale.
    INFO("deferring 1 of 2 experts per token: logits move by up to " << moved << " of their scale");
    CHECK(moved > 1e-3);
    CHECK(moved < 0.5);

    // Every expert on the device: nothing is ever deferred, and the numbers are exactly the undeferred ones.
    kt_model *all_plain = load(path, standin_params(64ull << 20, 8));
    const Run expected = run(all_plain);
    kt_model_free(all_plain);
    p = standin_params(64ull << 20, 8);
    p.device_deferred_experts = 3;
    kt_model *all = load(path, p);
    const Run same = run(all);
    CHECK_THAT(plan_of(all), Catch::Contains("on the CPU (0 deferred)"));
    kt_model_free(all);
    CHECK(same.tokens == expected.tokens);
    CHECK(same.logits == expected.logits);

    // Refused: a negative count, and deferral without a device.
    kt_status s = KT_STATUS_OK;
    p.device_deferred_experts = -1;
    CHECK(load(path, p, &s) == nullptr);
    CHECK(s == KT_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(last_message(), Catch::Contains("device_deferred_experts is negative"));
    kt_model_params_init(&p);
    p.device_deferred_experts = 2;
    CHECK(load(path, p, &s) == nullptr);
    CHECK(s == KT_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(last_message(), Catch::Contains("no device was asked for"));
}

TEST_CASE("device api: experts placed again from counts gathered while running, without a reload") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_tiny_model_file_or_fail(spec(), path);
    const Run expected = all_cpu_run(path);

    kt_model *m = load(path, standin_params(64ull << 20, 2));  // no counts: experts 0 and 1 of each layer
    const std::string before = plan_of(m);
    CHECK_THAT(before, Catch::Contains("layer 0: 2/8 experts [0 1]"));
    REQUIRE(!run(m).tokens.empty());  // serving: the engine counts the routings
    const std::string served = plan_of(m);
    std::vector<uint64_t> counts;     // [n_layer][n_expert]
    std::vector<uint64_t> c(8);
    int64_t n = 0;
    for (int64_t layer = 0; layer < 2; ++layer) {
        REQUIRE(kt_model_expert_counts(m, layer, c.data(), 8, &n) == KT_STATUS_OK);
        counts.insert(counts.end(), c.begin(), c.end());
    }
    REQUIRE(kt_model_device_replace(m, counts.data(), counts.size()) == KT_STATUS_OK);
    const std::string after = plan_of(m);
    check_two_hottest(after, counts);
    // The same bytes in use, and a new context's output is still the all-CPU one.
    const auto in_use = [](const std::string &text) {
        const size_t end = text.find(" bytes in use"), begin = text.rfind(' ', end - 1) + 1;
        return text.substr(begin, end - begin);
    };
    CHECK(in_use(served) != "0");
    CHECK(in_use(after) == in_use(served));
    const Run got = run(m);
    CHECK(got.tokens == expected.tokens);
    CHECK(relative_worst(got.logits, expected.logits) <= 1e-3);

    CHECK(kt_model_device_replace(m, counts.data(), 5) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_model_device_replace(m, nullptr, counts.size()) == KT_STATUS_INVALID_ARGUMENT);
    kt_model_free(m);
    kt_model_params plain_params;
    kt_model_params_init(&plain_params);
    kt_model *plain = load(path, plain_params);
    CHECK(kt_model_device_replace(plain, counts.data(), counts.size()) == KT_STATUS_NOT_FOUND);
    kt_model_free(plain);
    CHECK(kt_model_device_replace(nullptr, counts.data(), counts.size()) == KT_STATUS_INVALID_ARGUMENT);
}

namespace {

// The number after `label` in `text` (REQUIREs that it is there).
uint64_t number_after(const std::string &text, const std::string &label) {
    const size_t at = text.find(label);
    INFO(text);
    REQUIRE(at != std::string::npos);
    return std::stoull(text.substr(at + label.size()));
}

// The decimal number after `label` in `text`, as printed (REQUIREs that it is there).
std::string decimal_after(const std::string &text, const std::string &label) {
    const size_t at = text.find(label);
    INFO(text);
    REQUIRE(at != std::string::npos);
    const size_t begin = at + label.size();
    return text.substr(begin, text.find_first_not_of("0123456789.", begin) - begin);
}

}  // namespace

TEST_CASE("device api: a prompt above the prefill threshold runs whole layers on the device, in the plan's budget") {
    kt::test::TempDir dir;
    const std::string path = dir.file("tiny.gguf");
    kt::test::write_tiny_model_file_or_fail(spec(), path);
    const Run expected = all_cpu_run(path);

    // 8 experts of 6 * hidden 32 * intermediate 48 bytes per layer in each of the stream buffer's two slots (the
    // model has two MoE layers: one computes while the next one's experts go up).
    const uint64_t expert = 6 * 32 * 48, stream = 2 * 8 * expert;
    kt_model_params p = standin_params(64ull << 20, 2);
    p.device_prefill_threshold = 4;  // the 10-token prompt streams, the generated tokens one by one do not
    kt_model *hybrid = load(path, p);
    const std::string before = plan_of(hybrid);
    CHECK(number_after(before, "stream buffer ") == stream);
    const uint64_t work = number_after(before, "work buffer ");
    CHECK(number_after(before, ", used ") == work + stream + 2 * 2 * expert);
    const Run got = run(hybrid);
    CHECK(got.tokens == expected.tokens);
    CHECK(relative_worst(got.logits, expected.logits) <= 1e-3);
    const std::string after = plan_of(hybrid);
    INFO(after);
    // One streamed call per MoE layer (the prompt): the first uploads its layer's 8 experts, then the buffer's
    // thread the next layer's into the other slot, where the second call finds them.
    CHECK_THAT(after, Catch::Contains("streamed calls 2 (over 4 tokens): 1 uploads"));
    CHECK_THAT(after, Catch::Contains("; 1 found their layer uploaded ahead"));
    // Exact accounting: the stream buffer filled once, next to the resident experts and the work buffer.
    CHECK_THAT(after, Catch::Contains(": " + std::to_string(work + stream + 2 * 2 * expert) + " bytes in use"));
    CHECK(number_after(after, "split: ") >= 2);  // calls
    CHECK(number_after(after, "rows ") >= 10 * 2 * 2);  // the prompt's: 10 tokens x top-2 x 2 layers, and more
    kt_model_free(hybrid);

    // Above the prompt's length nothing streams, and the plan still holds the buffer's room.
    p.device_prefill_threshold = 10;
    hybrid = load(path, p);
    (void)run(hybrid);
    CHECK_THAT(plan_of(hybrid), Catch::Contains("streamed calls 0 (over 10 tokens): 0 uploads"));
    kt_model_free(hybrid);

    // Refusals: a negative threshold, one without a device, a budget without room for the stream buffer.
    kt_status s = KT_STATUS_OK;
    p.device_prefill_threshold = -1;
    CHECK(load(path, p, &s) == nullptr);
    CHECK(s == KT_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(last_message(), Catch::Contains("device_prefill_threshold is negative"));
    kt_model_params no_device;
    kt_model_params_init(&no_device);
    no_device.device_prefill_threshold = 4;
    CHECK(load(path, no_device, &s) == nullptr);
    CHECK(s == KT_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(last_message(), Catch::Contains("no device was asked for"));
    p = standin_params(work + stream + 2 * 2 * expert - 1, 2);
    p.device_prefill_threshold = 4;
    CHECK(load(path, p, &s) == nullptr);
    CHECK(s == KT_STATUS_OUT_OF_MEMORY);
    CHECK_THAT(last_message(), Catch::Contains("stream buffers"));
}

TEST_CASE("device api: dense FFNs and shared experts run on the device, placed before the routed experts") {
    // deepseek2, 2 layers: a leading dense layer (I = 24) and a MoE layer with 8 routed experts (I = 16, BF16) and
    // one shared expert (I = 16).
    kt::test::TinyModel s;
    s.arch = "deepseek2";
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 1;
    s.n_ff = 24;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.seed = 11;
    s.types.push_back({"_exps.", KT_TYPE_BF16});
    s.keys = {{"deepseek2.attention.key_length", kt::gguf::Value::u32(24)},
              {"deepseek2.attention.value_length", kt::gguf::Value::u32(16)},
              {"deepseek2.rope.dimension_count", kt::gguf::Value::u32(8)},
              {"deepseek2.attention.kv_lora_rank", kt::gguf::Value::u32(16)},
              {"deepseek2.attention.key_length_mla", kt::gguf::Value::u32(16)},
              {"deepseek2.attention.value_length_mla", kt::gguf::Value::u32(8)},
              {"deepseek2.leading_dense_block_count", kt::gguf::Value::u32(1)},
              {"deepseek2.expert_feed_forward_length", kt::gguf::Value::u32(16)},
              {"deepseek2.expert_shared_count", kt::gguf::Value::u32(1)},
              {"deepseek2.expert_weights_scale", kt::gguf::Value::f32(2.5f)},
              {"deepseek2.expert_weights_norm", kt::gguf::Value::boolean(true)},
              {"deepseek2.expert_gating_func", kt::gguf::Value::u32(2)}};
    kt::test::TempDir dir;
    const std::string path = dir.file("deepseek.gguf");
    kt::test::write_tiny_model_file_or_fail(s, path);
    const Run expected = all_cpu_run(path);

    const uint64_t dense = 6 * 32 * 24 + 6 * 32 * 16, expert = 6 * 32 * 16;
    kt_model *hybrid = load(path, standin_params(64ull << 20, 2));
    const std::string before = plan_of(hybrid);
    INFO(before);
    CHECK_THAT(before, Catch::Contains("dense FFNs 2 (" + std::to_string(dense) + " bytes)"));
    CHECK_THAT(before, Catch::Contains("layer 1: 2/8 experts"));
    const uint64_t work = number_after(before, "work buffer ");
    CHECK(number_after(before, ", used ") == work + dense + 2 * expert);
    const Run got = run(hybrid);
    CHECK(got.tokens == expected.tokens);
    CHECK(relative_worst(got.logits, expected.logits) <= 1e-3);
    // Exact accounting: the dense FFN and the shared expert are on the device next to the two routed experts.
    CHECK_THAT(plan_of(hybrid), Catch::Contains(": " + std::to_string(work + dense + 2 * expert) + " bytes in use"));
    // The shared expert began before the routed experts of every call (the prompt's and one per generated token)
    // and finished after them.
    CHECK(number_after(plan_of(hybrid), "shared experts begun before the routed ones ") >= got.tokens.size());
    // The host keeps no copy of what only the device computes; it keeps all 8 routed experts of layer 1, the two
    // on the device among them (kt_model_device_replace may move them back).
    const std::string after = plan_of(hybrid);
    const uint64_t routed_host = number_after(after, "host: routed experts' CPU weights ");
    CHECK(routed_host >= 8 * expert);
    CHECK(number_after(after, "CPU weights " + std::to_string(routed_host) + " bytes, ") == routed_host / 8 * 2);
    CHECK(number_after(after, "dense FFNs and shared experts on the device ") == 0);
    // What the split calls hidden counts both kinds: routed CPU and device work at once, and the shared experts'
    // device work beside the routed experts.
    const double hidden = std::stod(decimal_after(after, "hidden "));
    const double routed = std::stod(decimal_after(after, "of the shorter side: "));
    const double shared = std::stod(decimal_after(after, " ms routed + "));
    const uint64_t begun = number_after(after, "shared experts begun before the routed ones ");
    CHECK(decimal_after(after, " ms routed + ") ==
          decimal_after(after, "shared experts begun before the routed ones " + std::to_string(begun) + ": "));
    CHECK(std::abs(hidden - (routed + shared)) <= 0.0015);
    CHECK(hidden >= shared);
    kt_model_free(hybrid);

    // A budget without room for them all is refused before any routed expert is placed.
    kt_status status = KT_STATUS_OK;
    CHECK(load(path, standin_params(work + dense - 1, 0), &status) == nullptr);
    CHECK(status == KT_STATUS_OUT_OF_MEMORY);
    CHECK_THAT(last_message(), Catch::Contains("2 dense FFNs and shared experts"));
}
