// The batched engine (kt_engine_*) on the shipped model kt-tiny-moe: all the framework's greedy prompts decoded
// together must give PyTorch's continuations token for token (F32 file, exact f32 arithmetic), and on the shipped
// Q8_0 file with kt's default kernels the batch must give what kt_context gives each prompt alone.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "e2e/tiny_moe_expected.h"
#include "kt.h"

namespace {

const std::string kModelDir = KT_TINY_MOE_DIR;
const std::string kDataDir = KT_E2E_DATA_DIR;

struct Model {
    kt_model *model = nullptr;
    explicit Model(const std::string &file) {
        kt_error err = {sizeof(kt_error), 0, {0}};
        const kt_status s = kt_model_load((kModelDir + "/" + file).c_str(), nullptr, &model, &err);
        INFO(err.message);
        REQUIRE(s == KT_STATUS_OK);
    }
    ~Model() { kt_model_free(model); }
};

// Submits every prompt at once (the engine batches them), then reads each to its end.
std::vector<std::vector<int32_t>> engine_greedy(kt_model *model, const std::vector<kt::test::TinyMoeGreedy> &prompts,
                                                bool exact, int64_t max_step_tokens) {
    kt_engine_params ep;
    kt_engine_params_init(&ep);
    ep.n_threads = 2;
    ep.max_sequences = 4;  // fewer than the prompts: some wait for admission
    ep.max_step_tokens = max_step_tokens;
    if (exact) {
        ep.kernels = KT_KERNELS_REFERENCE;
        ep.kv_type = KT_TYPE_F32;
    }
    kt_engine *engine = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status s = kt_engine_create(model, &ep, &engine, &err);
    INFO(err.message);
    REQUIRE(s == KT_STATUS_OK);
    std::vector<kt_sequence *> seqs;
    for (const auto &g : prompts) {
        kt_sequence_params sp;
        kt_sequence_params_init(&sp);
        sp.prompt = g.prompt_ids.data();
        sp.n_prompt = static_cast<int64_t>(g.prompt_ids.size());
        sp.max_tokens = static_cast<int64_t>(g.greedy.size());
        kt_sequence *seq = nullptr;
        REQUIRE(kt_engine_submit(engine, &sp, &seq, &err) == KT_STATUS_OK);
        seqs.push_back(seq);
    }
    std::vector<std::vector<int32_t>> out;
    for (kt_sequence *seq : seqs) {
        std::vector<int32_t> tokens;
        int32_t finish = KT_FINISH_NONE;
        while (finish == KT_FINISH_NONE) {
            int32_t buf[16];
            int64_t n = 0;
            REQUIRE(kt_sequence_read(seq, buf, 16, 10000, &n, &finish) == KT_STATUS_OK);
            tokens.insert(tokens.end(), buf, buf + n);
        }
        CHECK(finish == KT_STOP_MAX_TOKENS);
        out.push_back(tokens);
        kt_sequence_free(seq);
    }
    kt_engine_free(engine);
    return out;
}

}  // namespace

TEST_CASE("kt-tiny-moe engine: the greedy prompts batched give PyTorch's continuations token for token") {
    const kt::test::TinyMoeExpected e = kt::test::read_tiny_moe_expected(kDataDir + "/kt_tiny_moe_expected.txt");
    Model m(e.greedy_model);
    for (int64_t step : {512, 16}) {  // 16 tokens per step: the prompts are prefilled in chunks
        INFO("max_step_tokens " << step);
        const auto got = engine_greedy(m.model, e.greedy, true, step);
        for (size_t i = 0; i < e.greedy.size(); ++i) {
            INFO("prompt \"" << e.greedy[i].prompt << "\"");
            CHECK(got[i] == e.greedy[i].greedy);
        }
    }
}

TEST_CASE("kt-tiny-moe engine: the shipped Q8_0 model batched with default kernels generates what a context does") {
    const kt::test::TinyMoeExpected e = kt::test::read_tiny_moe_expected(kDataDir + "/kt_tiny_moe_expected.txt");
    Model m("kt-tiny-moe.q8_0.gguf");
    const auto got = engine_greedy(m.model, e.greedy, false, 512);
    kt_context_params cp;
    kt_context_params_init(&cp);
    cp.n_threads = 2;
    kt_context *ctx = nullptr;
    REQUIRE(kt_context_create(m.model, &cp, &ctx, nullptr) == KT_STATUS_OK);
    for (size_t i = 0; i < e.greedy.size(); ++i) {
        const auto &g = e.greedy[i];
        INFO("prompt \"" << g.prompt << "\"");
        kt_context_reset(ctx);
        kt_generate_params gp;
        kt_generate_params_init(&gp);
        gp.max_tokens = static_cast<int64_t>(g.greedy.size());
        std::vector<int32_t> want(g.greedy.size());
        int64_t n = 0;
        REQUIRE(kt_context_generate(ctx, g.prompt_ids.data(), static_cast<int64_t>(g.prompt_ids.size()), &gp,
                                    want.data(), static_cast<int64_t>(want.size()), &n, nullptr) == KT_STATUS_OK);
        want.resize(static_cast<size_t>(n));
        CHECK(got[i] == want);
    }
    kt_context_free(ctx);
}
