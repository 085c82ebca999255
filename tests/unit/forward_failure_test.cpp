// A failure inside a forward pass reaches the caller of decode as that failure's status, whichever projection or
// expert call it happens in, and leaves the sequence as it was; the expert engine's experts report a failed pool
// call instead of leaving garbage in their output.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "mem/mapped_file.h"
#include "model/gguf/gguf.h"
#include "model/model.h"
#include "ops/linear.h"
#include "runtime/context.h"
#include "runtime/engine_kernels.h"
#include "support/test_support.h"
#include "support/tiny_model.h"

namespace {

// Counts the kernel calls of forward passes and fails call number `fail_at` (counting from 0) with
// KT_STATUS_OUT_OF_MEMORY, the way a kernel whose scratch cannot grow would. Everything else runs the reference
// kernels, so the numbers around the failure are real.
struct FaultPlan {
    int64_t calls = 0;
    int64_t fail_at = -1;
    kt::Status next() { return calls++ == fail_at ? kt::Status(KT_STATUS_OUT_OF_MEMORY, "injected failure") : kt::Status::ok(); }
};

class FaultyLinear final : public kt::ops::Linear {
public:
    FaultyLinear(std::unique_ptr<kt::ops::Linear> inner, FaultPlan *plan) : inner_(std::move(inner)), plan_(plan) {}
    int64_t in_features() const override { return inner_->in_features(); }
    int64_t out_features() const override { return inner_->out_features(); }
    kt::Status forward(const float *x, int64_t n, float *y, kt::ThreadPool &pool) const override {
        KT_TRY(plan_->next());
        return inner_->forward(x, n, y, pool);
    }

private:
    std::unique_ptr<kt::ops::Linear> inner_;
    FaultPlan *plan_;
};

class FaultyExperts final : public kt::ops::ExpertFfn {
public:
    FaultyExperts(std::unique_ptr<kt::ops::ExpertFfn> inner, FaultPlan *plan) : inner_(std::move(inner)), plan_(plan) {}
    int64_t n_experts() const override { return inner_->n_experts(); }
    int64_t hidden() const override { return inner_->hidden(); }
    int64_t intermediate() const override { return inner_->intermediate(); }
    kt::Status forward(const float *x, int64_t n, const int32_t *ids, const float *w, int64_t k, float *out,
                       kt::ThreadPool &pool) const override {
        KT_TRY(plan_->next());
        return inner_->forward(x, n, ids, w, k, out, pool);
    }

private:
    std::unique_ptr<kt::ops::ExpertFfn> inner_;
    FaultPlan *plan_;
};

class FaultyKernels final : public kt::ops::KernelFactory {
public:
    explicit FaultyKernels(FaultPlan *plan) : plan_(plan) {}
    const char *name() const override { return "reference with injected failures"; }
    kt::Status make_linear(const kt::ops::MatrixView &w, const float *bias,
                           std::unique_ptr<kt::ops::Linear> *out) const override {
        std::unique_ptr<kt::ops::Linear> inner;
        KT_TRY(kt::ops::reference_kernels().make_linear(w, bias, &inner));
        *out = std::make_unique<FaultyLinear>(std::move(inner), plan_);
        return kt::Status::ok();
    }
    kt::Status make_experts(const kt::ops::MatrixStack &gate, const kt::ops::MatrixStack &up,
                            const kt::ops::MatrixStack &down, const kt::ops::ExpertOptions &options,
                            std::unique_ptr<kt::ops::ExpertFfn> *out) const override {
        std::unique_ptr<kt::ops::ExpertFfn> inner;
        KT_TRY(kt::ops::reference_kernels().make_experts(gate, up, down, options, &inner));
        *out = std::make_unique<FaultyExperts>(std::move(inner), plan_);
        return kt::Status::ok();
    }

private:
    FaultPlan *plan_;
};

}  // namespace

TEST_CASE("a kernel failure anywhere in the forward pass fails the decode with its status and changes nothing") {
    // llama_forward with experts (qwen3moe) and dense (llama), qwen2moe's gated shared experts, and deepseek2's MLA
    // with per-head stacks and a dense lead layer (the golden model): every family's call sites.
    for (const char *arch : {"qwen3moe", "llama", "qwen2moe", "deepseek2"}) {
        INFO(arch);
        std::vector<uint8_t> bytes;
        if (std::string(arch) == "deepseek2") {
            bytes = kt::test::read_file(kt::test::testdata_path("models/deepseek2.f32.gguf"));
        } else {
            kt::test::TinyModel spec;
            spec.arch = arch;
            if (std::string(arch) == "llama") spec.n_expert = spec.n_expert_used = 0;  // dense_ffn in every layer
            bytes = kt::test::write_tiny_model(spec);
        }
        std::unique_ptr<kt::gguf::File> file;
        REQUIRE(kt::gguf::File::parse(kt::mem::MappedFile::borrow(bytes.data(), bytes.size()), arch, &file).is_ok());
        FaultPlan plan;
        FaultyKernels kernels(&plan);
        std::unique_ptr<kt::model::Model> model;
        const kt::Status loaded = kt::model::Model::load(*file, kernels, &model);
        INFO(loaded.message());
        REQUIRE(loaded.is_ok());
        const int64_t model_layers = model->hp.n_layer;
        kt::runtime::ContextParams cp;
        cp.n_ctx = 32;
        cp.n_threads = 2;
        std::unique_ptr<kt::runtime::Context> ctx;
        REQUIRE(kt::runtime::Context::create(std::shared_ptr<const kt::model::Model>(std::move(model)), cp, &ctx).is_ok());

        const std::vector<int32_t> prompt = {1, 2, 3};
        REQUIRE(ctx->decode(prompt.data(), 3, kt::runtime::Logits::kLast).is_ok());
        const std::vector<float> expected(ctx->logits_row(0), ctx->logits_row(0) + ctx->n_vocab());
        const int64_t calls_per_decode = plan.calls;
        REQUIRE(calls_per_decode >= 2 * model_layers + 1);  // a projection and an FFN per layer, and the head
        ctx->reset();

        for (int64_t k = 0; k < calls_per_decode; ++k) {
            INFO("failing kernel call " << k << " of " << calls_per_decode);
            plan.calls = 0;
            plan.fail_at = k;
            const kt::Status s = ctx->decode(prompt.data(), 3, kt::runtime::Logits::kLast);
            CHECK(s.code() == KT_STATUS_OUT_OF_MEMORY);
            CHECK(s.message().find("injected failure") != std::string::npos);
            CHECK(plan.calls == k + 1);  // the pass stopped at the failing call
            CHECK(ctx->n_past() == 0);
            CHECK(ctx->n_logit_rows() == 0);
        }
        plan.fail_at = -1;
        REQUIRE(ctx->decode(prompt.data(), 3, kt::runtime::Logits::kLast).is_ok());
        const std::vector<float> again(ctx->logits_row(0), ctx->logits_row(0) + ctx->n_vocab());
        CHECK(again == expected);  // the failures left nothing behind
    }
}

TEST_CASE("the expert engine's experts return a failed pool call instead of dropping it") {
    const int64_t E = 4, H = 32, I = 16;
    const std::vector<float> gate = kt::test::random_normal(static_cast<size_t>(E * I * H), 1, 0.1f);
    const std::vector<float> up = kt::test::random_normal(gate.size(), 2, 0.1f);
    const std::vector<float> down = kt::test::random_normal(static_cast<size_t>(E * H * I), 3, 0.1f);
    auto stack = [](const std::vector<float> &w, int64_t rows, int64_t cols, int64_t count, const char *name) {
        kt::ops::MatrixStack s;
        s.first.type = KT_TYPE_F32;
        s.first.data = reinterpret_cast<const uint8_t *>(w.data());
        s.first.cols = cols;
        s.first.rows = rows;
        s.first.row_bytes = cols * 4;
        s.first.name = name;
        s.count = count;
        s.stride = rows * cols * 4;
        return s;
    };
    kt::runtime::EngineOptions options;
    options.n_threads = 2;
    std::unique_ptr<kt::ops::KernelFactory> engine;
    REQUIRE(kt::runtime::create_engine_kernels(options, &engine).is_ok());
    std::unique_ptr<kt::ops::ExpertFfn> experts;
    REQUIRE(engine->make_experts(stack(gate, I, H, E, "gate"), stack(up, I, H, E, "up"), stack(down, H, I, E, "down"),
                                 kt::ops::ExpertOptions(), &experts)
                .is_ok());
    kt::ThreadPoolOptions po;
    std::unique_ptr<kt::ThreadPool> pool;
    REQUIRE(kt::ThreadPool::create(po, &pool).is_ok());

    const std::vector<float> x = kt::test::random_normal(static_cast<size_t>(2 * H), 4);
    const std::vector<float> weights = {0.5f, 0.5f, 0.75f, 0.25f};
    std::vector<float> out(static_cast<size_t>(2 * H));
    const std::vector<int32_t> ids = {0, 3, 1, 2};
    REQUIRE(experts->forward(x.data(), 2, ids.data(), weights.data(), 2, out.data(), *pool).is_ok());
    // An id the pool does not have (the router is the caller's to validate; here it failed to): the pool refuses the
    // job, and the status comes back out.
    const std::vector<int32_t> bad = {0, 3, 1, static_cast<int32_t>(E)};
    const kt::Status s = experts->forward(x.data(), 2, bad.data(), weights.data(), 2, out.data(), *pool);
    CHECK(s.code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(s.message().find("out of range") != std::string::npos);
}
