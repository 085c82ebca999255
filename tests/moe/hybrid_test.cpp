// The hybrid path without a GPU: the device interface's row planning, the CPU stand-in against the math reference,
// the hybrid FFN (CPU pool + stand-in at once) against the all-CPU pool, overlap, placement and budgets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/thread_pool.h"
#include "device/device.h"
#include "device/placement.h"
#include "moe/expert_pool.h"
#include "moe/weights.h"
#include "moe_test_support.h"
#include "runtime/hybrid_ffn.h"
#include "support/test_support.h"

using namespace kt;

namespace {

ops::MatrixView matrix_of(const std::vector<uint8_t> &bytes, int32_t type, int64_t e, int64_t rows, int64_t cols) {
    const int64_t row_bytes = cols * (type == KT_TYPE_BF16 ? 2 : 4);
    ops::MatrixView m;
    m.type = type;
    m.data = bytes.data() + e * rows * row_bytes;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = row_bytes;
    m.name = "test";
    return m;
}

std::unique_ptr<moe::ExpertPool> make_pool(const test::ExpertWeights &w, int64_t max_tokens, int32_t top_k) {
    moe::ExpertPoolConfig c;
    c.n_experts = w.experts;
    c.hidden = w.hidden;
    c.intermediate = w.inter;
    c.max_tokens = max_tokens;
    c.max_top_k = top_k;
    c.format = moe::TargetFormat::kAsSource;
    c.n_threads = 2;
    c.private_threads = true;
    std::unique_ptr<moe::ExpertPool> pool;
    REQUIRE(moe::ExpertPool::create(c, &pool).is_ok());
    test::load_experts(pool.get(), w);
    return pool;
}

device::LayerShape shape_of(const test::ExpertWeights &w, int64_t max_tokens, int32_t top_k) {
    device::LayerShape s;
    s.n_experts = w.experts;
    s.hidden = w.hidden;
    s.intermediate = w.inter;
    s.max_tokens = max_tokens;
    s.max_top_k = top_k;
    return s;
}

void upload(device::DeviceLayer &layer, const test::ExpertWeights &w, int64_t e) {
    REQUIRE(layer.upload(e, matrix_of(w.gate, w.src_type, e, w.inter, w.hidden), matrix_of(w.up, w.src_type, e, w.inter, w.hidden),
                         matrix_of(w.down, w.src_type, e, w.hidden, w.inter))
                .is_ok());
}

// The hybrid layer's sources for replace(): w's experts as stacks of matrices.
void set_sources(runtime::HybridFfn &hybrid, const test::ExpertWeights &w) {
    auto stack = [&](const std::vector<uint8_t> &bytes, int64_t rows, int64_t cols) {
        ops::MatrixStack s;
        s.first = matrix_of(bytes, w.src_type, 0, rows, cols);
        s.count = w.experts;
        s.stride = rows * s.first.row_bytes;
        return s;
    };
    hybrid.set_sources(stack(w.gate, w.inter, w.hidden), stack(w.up, w.inter, w.hidden), stack(w.down, w.hidden, w.inter));
}

std::shared_ptr<device::Device> standin(uint64_t budget, std::function<void()> hook = nullptr) {
    device::DeviceOptions o;
    o.kind = device::Kind::kCpuStandIn;
    o.budget_bytes = budget;
    o.on_work_begin = std::move(hook);
    std::shared_ptr<device::Device> d;
    REQUIRE(device::create_device(o, &d).is_ok());
    return d;
}

// Two parties that each, once begun, wait for the other to have begun: they can only meet if both are in flight
// at once, so meeting proves overlap by construction of the schedule, not by timing luck on loaded cores. A
// schedule that ran them one after another times out instead (timed_out, after 20 s).
struct Rendezvous {
    std::mutex m;
    std::condition_variable cv;
    bool began[2] = {false, false};
    bool timed_out = false;
    void meet(int me) {
        std::unique_lock<std::mutex> lock(m);
        began[me] = true;
        cv.notify_all();
        if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return began[1 - me]; })) timed_out = true;
    }
};

double max_abs(const std::vector<float> &v) {
    double m = 0;
    for (float f : v) m = std::max(m, static_cast<double>(std::fabs(f)));
    return m;
}

}  // namespace

TEST_CASE("device: rows are grouped by expert and listed per token in slot order") {
    // 3 tokens, top 3; experts 1 and 3 resident; -1 and non-resident ids skipped; a duplicate id in one token.
    const std::vector<int32_t> ids = {3, 0, 1, /**/ -1, 1, 1, /**/ 2, 0, 3};
    const std::vector<float> weights = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f};
    const std::vector<uint8_t> resident = {0, 1, 0, 1};
    device::ExpertWork work;
    work.n_tokens = 3;
    work.top_k = 3;
    work.ids = ids.data();
    work.weights = weights.data();
    device::RowPlan plan;
    device::plan_rows(work, resident, 4, &plan);
    CHECK(plan.expert_begin == std::vector<int32_t>{0, 0, 3, 3, 5});
    CHECK(plan.row_token == std::vector<int32_t>{0, 1, 1, 0, 2});           // expert 1: tokens 0, 1, 1; expert 3: 0, 2
    CHECK(plan.row_weight == std::vector<float>{0.3f, 0.5f, 0.6f, 0.1f, 0.9f});
    CHECK(plan.token_begin == std::vector<int32_t>{0, 2, 4, 5});
    CHECK(plan.token_rows == std::vector<int32_t>{3, 0, 1, 2, 4});          // token 0: slot 0 (expert 3), slot 2 (expert 1)
}

TEST_CASE("device: the CPU stand-in computes its resident experts as the BF16 reference does") {
    const int64_t E = 6, H = 96, I = 40;
    const test::ExpertWeights w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 11);
    std::shared_ptr<device::Device> dev = standin(1ull << 30);
    std::unique_ptr<device::DeviceLayer> layer;
    REQUIRE(dev->create_layer(shape_of(w, 33, 4), &layer).is_ok());
    for (int64_t e : {0, 2, 5}) upload(*layer, w, e);
    std::vector<uint8_t> not_resident(E, 1);
    for (int64_t e : {0, 2, 5}) not_resident[static_cast<size_t>(e)] = 0;
    for (int64_t T : {1, 7, 33}) {
        const test::Routing r = test::make_routing(T, 4, E, 100 + static_cast<uint64_t>(T));
        const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 5);
        std::vector<float> y(static_cast<size_t>(T * H), 123.0f);
        device::ExpertWork work{T, 4, x.data(), r.ids.data(), r.weights.data(), y.data()};
        device::Event ev;
        REQUIRE(layer->submit(work, &ev).is_ok());
        device::Interval when;
        REQUIRE(layer->wait(ev, &when).is_ok());
        CHECK(when.end_ns >= when.begin_ns);
        // The reference with the same rounding (x and h to BF16) in double, the other experts masked off: only f32
        // accumulation separates them (and the rare h that rounds to the other BF16 neighbour).
        const std::vector<double> ref = test::emulated_reference(w, x, r, not_resident.data(), true);
        INFO("T " << T);
        CHECK(test::normalized_error(y, ref) < test::kEmulatedBound);
    }
}

TEST_CASE("hybrid: the split equals the all-CPU pool on the same weights and routing") {
    const int64_t E = 8, H = 96, I = 48, max_tokens = 40;
    const int32_t k = 3;
    const test::ExpertWeights w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 21);
    std::unique_ptr<moe::ExpertPool> cpu_only = make_pool(w, max_tokens, k);
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    for (const std::vector<int64_t> &on_device : {std::vector<int64_t>{1, 4, 6}, std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7},
                                                  std::vector<int64_t>{7}}) {
        std::shared_ptr<device::Device> dev = standin(1ull << 30);
        std::unique_ptr<device::DeviceLayer> layer;
        REQUIRE(dev->create_layer(shape_of(w, max_tokens, k), &layer).is_ok());
        for (int64_t e : on_device) upload(*layer, w, e);
        runtime::HybridFfn hybrid(make_pool(w, max_tokens, k), dev, std::move(layer), max_tokens);
        REQUIRE(hybrid.init().is_ok());
        for (int64_t T : {1, 7, 33, 90}) {  // 90: split into chunks of max_tokens
            const test::Routing r = test::make_routing(T, k, E, 7 + static_cast<uint64_t>(T));
            const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 9);
            std::vector<float> all_cpu(static_cast<size_t>(T * H)), split(all_cpu.size());
            for (int64_t t0 = 0; t0 < T; t0 += max_tokens) {
                moe::ForwardArgs a;
                a.n_tokens = std::min(max_tokens, T - t0);
                a.top_k = k;
                a.input = x.data() + t0 * H;
                a.ids = r.ids.data() + t0 * k;
                a.weights = r.weights.data() + t0 * k;
                a.output = all_cpu.data() + t0 * H;
                REQUIRE(cpu_only->forward(a).is_ok());
            }
            REQUIRE(hybrid.forward(x.data(), T, r.ids.data(), r.weights.data(), k, split.data(), *unused).is_ok());
            // Both sides round x and h to BF16 and accumulate in f32; what differs is the order of the sums (inside
            // each dot product, and expert by expert per token) - f32 rounding, ~1e-7 relative - and, rarely, an h
            // value that lands on the other side of a BF16 rounding boundary (one BF16 step, 2^-8 relative, of one
            // of I terms: up to ~2^-9 / sqrt(I) ~ 3e-4 of the output's scale). Observed on AVX2: 7.5e-7.
            double worst = 0;
            for (size_t i = 0; i < split.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(split[i] - all_cpu[i])));
            INFO("device experts " << on_device.size() << ", T " << T);
            CHECK(worst <= 1e-3 * max_abs(all_cpu));
        }
        const runtime::HybridStats s = hybrid.stats();
        CHECK(s.device_rows > 0);
        CHECK(s.cpu_rows + s.device_rows > 0);
        if (on_device.size() == static_cast<size_t>(E)) CHECK(s.cpu_rows == 0);
    }
}

TEST_CASE("hybrid: the CPU job and the device work run at the same time") {
    const int64_t E = 4, H = 64, I = 32, T = 16;
    const int32_t k = 2;
    const test::ExpertWeights w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 31);
    // A rendezvous between the device's work and the CPU job: they can only meet if the hybrid FFN has submitted
    // both before it waits for either, and then each interval contains the meeting point.
    Rendezvous rv;  // party 0: the CPU job, 1: the device
    std::shared_ptr<device::Device> dev = standin(1ull << 30, [&] { rv.meet(1); });
    std::unique_ptr<device::DeviceLayer> layer;
    REQUIRE(dev->create_layer(shape_of(w, T, k), &layer).is_ok());
    upload(*layer, w, 0);
    upload(*layer, w, 1);
    runtime::HybridFfn hybrid(make_pool(w, T, k), dev, std::move(layer), T);
    REQUIRE(hybrid.init().is_ok());
    hybrid.set_cpu_begin_hook([&] { rv.meet(0); });
    // Every token routes to one resident and one CPU expert.
    std::vector<int32_t> ids;
    std::vector<float> weights;
    for (int64_t t = 0; t < T; ++t) {
        ids.insert(ids.end(), {static_cast<int32_t>(t % 2), static_cast<int32_t>(2 + t % 2)});
        weights.insert(weights.end(), {0.6f, 0.4f});
    }
    const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 3);
    std::vector<float> y(static_cast<size_t>(T * H));
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    REQUIRE(hybrid.forward(x.data(), T, ids.data(), weights.data(), k, y.data(), *unused).is_ok());
    REQUIRE_FALSE(rv.timed_out);
    const runtime::HybridStats s = hybrid.stats();
    CHECK(s.last_cpu.begin_ns < s.last_device.end_ns);
    CHECK(s.last_device.begin_ns < s.last_cpu.end_ns);
    CHECK(s.overlap_ns > 0);
    CHECK(s.overlap_ns <= std::min(s.cpu_ns, s.device_ns));
    CHECK(s.cpu_rows == T);
    CHECK(s.device_rows == T);
}

TEST_CASE("hybrid: a call begun on the device runs while the caller computes other experts on the CPU") {
    // The model's shape of a MoE layer with a shared expert on the device: the shared expert (one expert, all on
    // the device) begins, the routed experts (all on the CPU) run, then the shared expert finishes.
    const int64_t E = 4, H = 64, I = 32, T = 12, max_tokens = 16;
    const int32_t k = 2;
    const test::ExpertWeights routed_w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 41);
    const test::ExpertWeights shared_w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, 1, H, 2 * I, 42);
    Rendezvous rv;  // party 0: the routed experts' CPU job, 1: the shared expert's device work
    std::shared_ptr<device::Device> dev = standin(1ull << 30, [&] { rv.meet(1); });
    std::unique_ptr<device::DeviceLayer> routed_layer, shared_layer;
    REQUIRE(dev->create_layer(shape_of(routed_w, max_tokens, k), &routed_layer).is_ok());  // nothing resident
    REQUIRE(dev->create_layer(shape_of(shared_w, max_tokens, 1), &shared_layer).is_ok());
    upload(*shared_layer, shared_w, 0);
    runtime::HybridFfn routed(make_pool(routed_w, max_tokens, k), dev, std::move(routed_layer), max_tokens);
    runtime::HybridFfn shared(make_pool(shared_w, max_tokens, 1), dev, std::move(shared_layer), max_tokens);
    REQUIRE(routed.init().is_ok());
    REQUIRE(shared.init().is_ok());
    routed.set_cpu_begin_hook([&] { rv.meet(0); });

    const test::Routing r = test::make_routing(T, k, E, 43);
    const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 44);
    const std::vector<int32_t> zeros(static_cast<size_t>(T), 0);
    const std::vector<float> scale = test::random_normal(static_cast<size_t>(T), 45);
    std::vector<float> y_shared(static_cast<size_t>(T * H), -1.0f), y_routed(y_shared.size());
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    REQUIRE(shared.begin_forward(x.data(), T, zeros.data(), scale.data(), 1, y_shared.data(), *unused).is_ok());
    REQUIRE(routed.forward(x.data(), T, r.ids.data(), r.weights.data(), k, y_routed.data(), *unused).is_ok());
    REQUIRE(shared.finish_forward().is_ok());
    REQUIRE_FALSE(rv.timed_out);  // they met: the device worked on the shared expert while the CPU job ran
    const runtime::HybridStats ss = shared.stats(), rs = routed.stats();
    CHECK(rs.last_cpu.begin_ns < ss.last_device.end_ns);
    CHECK(ss.last_device.begin_ns < rs.last_cpu.end_ns);
    CHECK(ss.device_rows == T);
    CHECK(ss.cpu_rows == 0);
    CHECK(ss.begun_calls == 1);
    CHECK(ss.begun_hidden_ns > 0);  // the device worked after begin_forward() returned, before finish_forward()
    CHECK(ss.begun_hidden_ns <= ss.device_ns);
    CHECK(rs.cpu_rows == std::count_if(r.ids.begin(), r.ids.end(), [](int32_t id) { return id >= 0; }));

    // The begun call's result against the all-CPU pool of the same expert (BF16 rounding of x and h on the
    // stand-in, order of sums: the bound of "the split equals the all-CPU pool").
    {
        std::unique_ptr<moe::ExpertPool> cpu_only = make_pool(shared_w, max_tokens, 1);
        std::vector<float> expected(y_shared.size());
        moe::ForwardArgs a;
        a.n_tokens = T;
        a.top_k = 1;
        a.input = x.data();
        a.ids = zeros.data();
        a.weights = scale.data();
        a.output = expected.data();
        REQUIRE(cpu_only->forward(a).is_ok());
        double worst = 0;
        for (size_t i = 0; i < expected.size(); ++i)
            worst = std::max(worst, static_cast<double>(std::fabs(y_shared[i] - expected[i])));
        CHECK(worst <= 1e-3 * max_abs(expected));
    }
    // The same call through forward() gives the same bits (the device's arithmetic does not depend on how the
    // call was waited for); a call too long for one chunk runs whole in begin_forward() and equals forward() too.
    std::vector<float> again(y_shared.size());
    REQUIRE(shared.forward(x.data(), T, zeros.data(), scale.data(), 1, again.data(), *unused).is_ok());
    CHECK(again == y_shared);
    const int64_t long_T = 2 * max_tokens + 3;
    const std::vector<float> long_x = test::random_normal(static_cast<size_t>(long_T * H), 46);
    const std::vector<int32_t> long_zeros(static_cast<size_t>(long_T), 0);
    const std::vector<float> ones(static_cast<size_t>(long_T), 1.0f);
    std::vector<float> whole(static_cast<size_t>(long_T * H)), begun(whole.size());
    REQUIRE(shared.forward(long_x.data(), long_T, long_zeros.data(), ones.data(), 1, whole.data(), *unused).is_ok());
    REQUIRE(shared.begin_forward(long_x.data(), long_T, long_zeros.data(), ones.data(), 1, begun.data(), *unused).is_ok());
    REQUIRE(shared.finish_forward().is_ok());
    CHECK(begun == whole);
    CHECK(shared.stats().calls == 1 + 1 + 3 + 3);
}

TEST_CASE("device: memory is accounted exactly and never exceeds the budget") {
    const int64_t E = 4, H = 64, I = 32;
    const test::ExpertWeights w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 41);
    const device::LayerShape shape = shape_of(w, 8, 2);
    const uint64_t work = device::workspace_bytes(shape), each = device::expert_bytes(H, I);
    CHECK(each == 3ull * H * I * 2);
    // Room for the work buffer and two experts, not three.
    std::shared_ptr<device::Device> dev = standin(work + 2 * each + each / 2);
    std::unique_ptr<device::DeviceLayer> layer;
    REQUIRE(dev->create_layer(shape, &layer).is_ok());
    CHECK(dev->used_bytes() == work);
    upload(*layer, w, 0);
    upload(*layer, w, 3);
    upload(*layer, w, 3);  // replaced in place, not counted twice
    CHECK(dev->used_bytes() == work + 2 * each);
    CHECK(layer->bytes() == 2 * each);
    const Status s = layer->upload(1, matrix_of(w.gate, w.src_type, 1, I, H), matrix_of(w.up, w.src_type, 1, I, H),
                                   matrix_of(w.down, w.src_type, 1, H, I));
    CHECK(s.code() == KT_STATUS_OUT_OF_MEMORY);
    CHECK_THAT(s.message(), Catch::Contains("budget"));
    CHECK(dev->used_bytes() == work + 2 * each);
    CHECK(dev->used_bytes() <= dev->budget_bytes());
    layer.reset();
    CHECK(dev->used_bytes() == work);
    // A work buffer that does not fit.
    std::shared_ptr<device::Device> small = standin(work - 1);
    CHECK(small->create_layer(shape, &layer).code() == KT_STATUS_OUT_OF_MEMORY);
    // Without CUDA, or without a GPU, the CUDA device says so.
    device::DeviceOptions o;
    o.kind = device::Kind::kCuda;
    o.budget_bytes = 1ull << 30;
    std::shared_ptr<device::Device> gpu;
    const Status c = device::create_device(o, &gpu);
    if (!c.is_ok()) {
        CHECK(c.code() == KT_STATUS_UNSUPPORTED);
        WARN("CUDA device: " << c.message());
    }
}

TEST_CASE("placement: hottest experts by counts, uniform without, exact bytes, clear errors") {
    std::vector<device::PlacementLayer> layers = {{1, 8, 64, 32}, {2, 8, 64, 32}, {3, 8, 64, 48}};
    const uint64_t e32 = device::expert_bytes(64, 32), e48 = device::expert_bytes(64, 48);
    device::PlacementRequest r;
    r.non_expert_bytes = 1000;
    r.budget_bytes = 1000 + 3 * (e32 + e32 + e48);
    r.experts_per_layer = 3;
    r.counts = {{5, 0, 9, 1, 7, 0, 0, 2}, {}, {0, 0, 0, 0, 1, 1, 1, 1}};
    device::Plan plan;
    REQUIRE(device::plan_placement(layers, r, &plan).is_ok());
    REQUIRE(plan.layers.size() == 3);
    CHECK(plan.layers[0].experts == std::vector<int32_t>{0, 2, 4});  // 9, 7, 5
    CHECK(plan.layers[1].experts == std::vector<int32_t>{0, 1, 2});  // no counts: every expert equal, lowest ids
    CHECK(plan.layers[2].experts == std::vector<int32_t>{4, 5, 6});  // ties among the hot ones go to the lower id
    CHECK(plan.layers[2].bytes == 3 * e48);
    CHECK(plan.used_bytes() == r.budget_bytes);
    CHECK(plan.by_counts);
    const std::string text = plan.to_string();
    CHECK_THAT(text, Catch::Contains("layer 1: 3/8 experts [0 2 4], " + std::to_string(3 * e32) + " bytes"));
    CHECK_THAT(text, Catch::Contains("layer 3: 3/8 experts [4 5 6]"));

    // One byte short: a clear error, nothing placed.
    r.budget_bytes -= 1;
    Status s = device::plan_placement(layers, r, &plan);
    CHECK(s.code() == KT_STATUS_OUT_OF_MEMORY);
    CHECK_THAT(s.message(), Catch::Contains("3 experts per layer"));
    // More experts than a layer has.
    r.budget_bytes = 1ull << 40;
    r.experts_per_layer = 9;
    s = device::plan_placement(layers, r, &plan);
    CHECK(s.code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(s.message(), Catch::Contains("layer 1 has 8 experts"));
    // The non-expert part alone does not fit.
    r.experts_per_layer = 0;
    r.budget_bytes = 999;
    s = device::plan_placement(layers, r, &plan);
    CHECK(s.code() == KT_STATUS_OUT_OF_MEMORY);
    CHECK_THAT(s.message(), Catch::Contains("non-expert"));
    // As many as fit: two per layer everywhere, then one more where it still fits (layers in order).
    r.budget_bytes = 1000 + 2 * (2 * e32 + e48) + e32;
    REQUIRE(device::plan_placement(layers, r, &plan).is_ok());
    CHECK(plan.layers[0].experts.size() == 3);
    CHECK(plan.layers[1].experts.size() == 2);
    CHECK(plan.layers[2].experts.size() == 2);
    CHECK(plan.used_bytes() <= r.budget_bytes);
    CHECK(plan.used_bytes() == 1000 + 3 * e32 + 2 * e32 + 2 * e48);
    // Room for the work buffer only.
    r.budget_bytes = 1000 + e32 - 1;
    CHECK(device::plan_placement(layers, r, &plan).code() == KT_STATUS_OUT_OF_MEMORY);
}

// ---- deferred experts ------------------------------------------------------------------------------------------

namespace {

// The rule of runtime/deferred_experts.h written out again, slot by slot: a slot is protected when fewer than
// k - D valid slots of its token outrank it (a higher weight, or the same weight in an earlier slot); an expert
// protected anywhere in the call, or on the device, is immediate everywhere.
void reference_split(const test::Routing &r, int64_t E, int32_t D, const std::vector<uint8_t> &resident,
                     std::vector<int32_t> *immediate, std::vector<int32_t> *deferred) {
    const int32_t k = r.top_k, protect = std::max(1, k - D);
    std::vector<bool> kept(static_cast<size_t>(E), false);
    for (int64_t t = 0; t < r.tokens; ++t)
        for (int32_t j = 0; j < k; ++j) {
            const int32_t e = r.ids[static_cast<size_t>(t * k + j)];
            if (e < 0) continue;
            const float wj = r.weights[static_cast<size_t>(t * k + j)];
            int32_t above = 0;
            for (int32_t i = 0; i < k; ++i) {
                const float wi = r.weights[static_cast<size_t>(t * k + i)];
                if (r.ids[static_cast<size_t>(t * k + i)] >= 0 && (wi > wj || (wi == wj && i < j))) ++above;
            }
            if (above < protect) kept[static_cast<size_t>(e)] = true;
        }
    immediate->assign(r.ids.size(), -1);
    deferred->assign(r.ids.size(), -1);
    for (size_t i = 0; i < r.ids.size(); ++i) {
        const int32_t e = r.ids[i];
        if (e < 0) continue;
        if (kept[static_cast<size_t>(e)] || resident[static_cast<size_t>(e)]) (*immediate)[i] = e;
        else (*deferred)[i] = e;
    }
}

std::vector<float> pool_forward(moe::ExpertPool &pool, const std::vector<float> &x, int64_t T, int32_t k,
                                const std::vector<int32_t> &ids, const std::vector<float> &weights) {
    std::vector<float> y(x.size());
    const int64_t H = pool.config().hidden, chunk = pool.config().max_tokens;
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        moe::ForwardArgs a;
        a.n_tokens = std::min(chunk, T - t0);
        a.top_k = k;
        a.input = x.data() + t0 * H;
        a.ids = ids.data() + t0 * k;
        a.weights = weights.data() + t0 * k;
        a.output = y.data() + t0 * H;
        REQUIRE(pool.forward(a).is_ok());
    }
    return y;
}

double worst_difference(const std::vector<float> &a, const std::vector<float> &b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    return worst;
}

// Three MoE layers (0, 1, 2) of one model on the stand-in, chained; and the all-CPU pools of the same weights.
struct DeferredModel {
    static constexpr int64_t E = 8, H = 64, I = 32, kMaxTokens = 16;
    static constexpr int32_t k = 4;
    std::vector<test::ExpertWeights> w;
    std::vector<std::unique_ptr<moe::ExpertPool>> cpu;
    std::vector<std::vector<uint8_t>> resident;
    std::shared_ptr<device::Device> dev;
    std::shared_ptr<runtime::DeferredChain> chain;
    std::vector<std::unique_ptr<runtime::HybridFfn>> layers;

    explicit DeferredModel(int32_t D, std::function<void()> device_hook = nullptr)
        : dev(standin(1ull << 30, std::move(device_hook))), chain(std::make_shared<runtime::DeferredChain>(D, 2)) {
        const std::vector<std::vector<int64_t>> on_device = {{1, 6}, {}, {0, 3, 5}};  // layer 1: nothing on the device
        for (int64_t l = 0; l < 3; ++l) {
            w.push_back(test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 60 + static_cast<uint64_t>(l)));
            cpu.push_back(make_pool(w.back(), kMaxTokens, k));
            std::unique_ptr<device::DeviceLayer> layer;
            REQUIRE(dev->create_layer(shape_of(w.back(), kMaxTokens, k), &layer).is_ok());
            resident.emplace_back(static_cast<size_t>(E), 0);
            for (int64_t e : on_device[static_cast<size_t>(l)]) {
                upload(*layer, w.back(), e);
                resident.back()[static_cast<size_t>(e)] = 1;
            }
            layers.push_back(std::make_unique<runtime::HybridFfn>(make_pool(w.back(), kMaxTokens, k), dev, std::move(layer),
                                                                  kMaxTokens, chain, l));
            REQUIRE(layers.back()->init().is_ok());
        }
    }
};

}  // namespace

TEST_CASE("deferred: each token keeps its k - D heaviest experts, a kept expert is kept for every token") {
    // 2 tokens, top 3, D = 1: token 0 keeps experts 4 and 2 (0.5, 0.3), token 1 keeps 5 and 0 (0.6, 0.3 before the
    // equal 0.3 of expert 6 in a later slot). Expert 2 stays for token 1 too; 6 is deferred; 7 is on the device.
    const std::vector<int32_t> ids = {2, 4, 0, /**/ 5, 0, 6};
    const std::vector<float> weights = {0.3f, 0.5f, 0.2f, /**/ 0.6f, 0.3f, 0.3f};
    std::vector<int32_t> imm(6), def(6);
    std::vector<uint8_t> resident(8, 0);
    CHECK(runtime::split_deferred(ids.data(), weights.data(), 2, 3, 1, 8, resident, imm.data(), def.data()) == 1);
    CHECK(imm == std::vector<int32_t>{2, 4, 0, 5, 0, -1});  // expert 0, kept by token 1, is kept for token 0
    CHECK(def == std::vector<int32_t>{-1, -1, -1, -1, -1, 6});
    // D = 2: each token keeps only its heaviest; experts 2, 0 and 6 go one layer late, unless on the device.
    CHECK(runtime::split_deferred(ids.data(), weights.data(), 2, 3, 2, 8, resident, imm.data(), def.data()) == 4);
    CHECK(imm == std::vector<int32_t>{-1, 4, -1, 5, -1, -1});
    resident[6] = 1;
    CHECK(runtime::split_deferred(ids.data(), weights.data(), 2, 3, 2, 8, resident, imm.data(), def.data()) == 3);
    CHECK(imm == std::vector<int32_t>{-1, 4, -1, 5, -1, 6});
    CHECK(def == std::vector<int32_t>{2, -1, 0, -1, 0, -1});
    // D >= k: the heaviest stays all the same; -1 and out-of-range ids are in neither list.
    const std::vector<int32_t> odd = {-1, 3, 9};
    const std::vector<float> ow = {0.9f, 0.1f, 0.8f};
    CHECK(runtime::split_deferred(odd.data(), ow.data(), 1, 3, 7, 8, {}, imm.data(), def.data()) == 0);
    CHECK(std::vector<int32_t>(imm.begin(), imm.begin() + 3) == std::vector<int32_t>{-1, 3, -1});
    CHECK(std::vector<int32_t>(def.begin(), def.begin() + 3) == std::vector<int32_t>{-1, -1, -1});
}

TEST_CASE("deferred: chained layers equal the reference that defers the same experts one layer late") {
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    using M = DeferredModel;
    for (int32_t D : {1, 2, 3}) {
        M m(D);
        int64_t expect_deferred = 0, expect_jobs = 0;
        for (int64_t T : {1, 5, 16, 40}) {  // 40: more than max_tokens, in chunks: defers nothing
            std::vector<test::Routing> r;
            std::vector<std::vector<float>> x, got(3), want(3), undeferred(3);
            std::vector<int32_t> imm, def, prev_def;
            int64_t deferred_here = 0;
            for (int64_t l = 0; l < 3; ++l) {
                r.push_back(test::make_routing(T, M::k, M::E, 900 + static_cast<uint64_t>(T * 3 + l)));
                x.push_back(test::random_normal(static_cast<size_t>(T * M::H), 70 + static_cast<uint64_t>(l)));
            }
            for (int64_t l = 0; l < 3; ++l) {
                auto &L = *m.layers[static_cast<size_t>(l)];
                got[static_cast<size_t>(l)].assign(static_cast<size_t>(T * M::H), 0.0f);
                REQUIRE(L.forward(x[l].data(), T, r[l].ids.data(), r[l].weights.data(), M::k, got[l].data(), *unused).is_ok());
                // The reference: this layer's immediate slots, all on the CPU, plus what the layer before deferred.
                const bool defers = l < 2 && T <= M::kMaxTokens;
                if (defers) reference_split(r[l], M::E, D, m.resident[l], &imm, &def);
                else imm = r[l].ids, def.assign(r[l].ids.size(), -1);
                want[l] = pool_forward(*m.cpu[l], x[l], T, M::k, imm, r[l].weights);
                undeferred[l] = pool_forward(*m.cpu[l], x[l], T, M::k, r[l].ids, r[l].weights);
                if (l > 0 && T <= M::kMaxTokens) {
                    const std::vector<float> late = pool_forward(*m.cpu[l - 1], x[l - 1], T, M::k, prev_def, r[l - 1].weights);
                    for (size_t i = 0; i < want[l].size(); ++i) want[l][i] += late[i];
                }
                int64_t n_def = 0;
                for (int32_t e : def) n_def += e >= 0;
                deferred_here += n_def;
                expect_jobs += n_def > 0;  // each absorbed by the next layer
                prev_def = def;
            }
            CHECK(m.chain->pending() == 0);  // the last layer defers nothing
            for (size_t l = 0; l < 3; ++l) {
                INFO("D " << D << ", T " << T << ", layer " << l);
                // As in the split test above: the device's experts differ from the CPU's by the order of the sums.
                CHECK(worst_difference(got[l], want[l]) <= 1e-3 * max_abs(want[l]));
            }
            expect_deferred += deferred_here;
            if (deferred_here > 0) {
                // The deferral is visible: a layer lost experts, the next gained them (the test can fail).
                double moved = 0;
                for (size_t l = 0; l < 2; ++l)
                    moved = std::max(moved, worst_difference(got[l], undeferred[l]) / max_abs(undeferred[l]));
                CHECK(moved > 1e-2);
            } else {  // nothing to defer (every expert kept by some token, or a call in chunks): the plain result
                for (size_t l = 0; l < 3; ++l)
                    CHECK(worst_difference(got[l], undeferred[l]) <= 1e-3 * max_abs(undeferred[l]));
            }
        }
        int64_t deferred = 0;
        for (auto &L : m.layers) deferred += L->stats().deferred_rows;
        CHECK(deferred == expect_deferred);
        CHECK(deferred > 0);
        CHECK(m.layers[2]->stats().deferred_rows == 0);
        const runtime::DeferredStats st = m.chain->stats();
        CHECK(st.jobs == expect_jobs);
        CHECK(st.ns > 0);
        CHECK(st.hidden_ns <= st.ns);
    }
}

TEST_CASE("deferred: a pass cut off between layers leaves nothing for the next pass") {
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    using M = DeferredModel;
    M m(2);
    const int64_t T = 6;
    const test::Routing r = test::make_routing(T, M::k, M::E, 4242);
    const std::vector<float> x = test::random_normal(static_cast<size_t>(T * M::H), 77);
    std::vector<float> y(x.size());
    // Layers 0 and 1, then the pass stops (a failure in layer 2's attention, say): layer 1's job is pending.
    for (size_t l = 0; l < 2; ++l)
        REQUIRE(m.layers[l]->forward(x.data(), T, r.ids.data(), r.weights.data(), M::k, y.data(), *unused).is_ok());
    CHECK(m.chain->pending() == 1);
    // The next pass begins at layer 0: it must not take layer 1's leftovers (same token count, a later layer).
    REQUIRE(m.layers[0]->forward(x.data(), T, r.ids.data(), r.weights.data(), M::k, y.data(), *unused).is_ok());
    std::vector<int32_t> imm, def;
    reference_split(r, M::E, 2, m.resident[0], &imm, &def);
    const std::vector<float> want = pool_forward(*m.cpu[0], x, T, M::k, imm, r.weights);
    CHECK(worst_difference(y, want) <= 1e-3 * max_abs(want));
    CHECK(m.chain->pending() == 1);  // layer 0's own, for layer 1
    m.chain->drop();
    CHECK(m.chain->pending() == 0);
}

TEST_CASE("deferred: passes on two threads at once keep their own deferred jobs") {
    using M = DeferredModel;
    M m(1);
    const int64_t T = 3;
    struct Pass {
        std::vector<test::Routing> r;
        std::vector<std::vector<float>> x, y;
        bool ok = true;
    };
    Pass pass[2];
    for (int p = 0; p < 2; ++p)
        for (int64_t l = 0; l < 3; ++l) {
            pass[p].r.push_back(test::make_routing(T, M::k, M::E, 500 + static_cast<uint64_t>(p * 3 + l)));
            pass[p].x.push_back(test::random_normal(static_cast<size_t>(T * M::H), 80 + static_cast<uint64_t>(p * 3 + l)));
            pass[p].y.emplace_back(static_cast<size_t>(T * M::H));
        }
    // Each thread runs its pass 20 times; the layers' locks interleave the two passes layer by layer. Results are
    // checked here, on the test's thread, against the same passes run alone afterwards.
    auto run = [&](Pass &ps) {
        std::unique_ptr<ThreadPool> unused;
        if (!ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok()) ps.ok = false;
        for (int rep = 0; rep < 20 && ps.ok; ++rep)
            for (size_t l = 0; l < 3 && ps.ok; ++l)
                ps.ok = m.layers[l]->forward(ps.x[l].data(), T, ps.r[l].ids.data(), ps.r[l].weights.data(), M::k,
                                             ps.y[l].data(), *unused).is_ok();
    };
    std::thread a([&] { run(pass[0]); }), b([&] { run(pass[1]); });
    a.join();
    b.join();
    REQUIRE(pass[0].ok);
    REQUIRE(pass[1].ok);
    CHECK(m.chain->pending() == 0);
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    for (int p = 0; p < 2; ++p)
        for (size_t l = 0; l < 3; ++l) {
            std::vector<float> alone(pass[p].y[l].size());
            REQUIRE(m.layers[l]->forward(pass[p].x[l].data(), T, pass[p].r[l].ids.data(), pass[p].r[l].weights.data(), M::k,
                                         alone.data(), *unused).is_ok());
            INFO("pass " << p << ", layer " << l);
            CHECK(worst_difference(pass[p].y[l], alone) == 0.0);
        }
}

TEST_CASE("deferred: a layer's deferred job runs while the next layer's device work runs") {
    // A rendezvous between layer 1's deferred job and layer 2's device work: they can only meet if layer 1 returned
    // with its job still to run and layer 2 put its device work in flight before waiting for that job.
    Rendezvous rv;  // party 0: the deferred job, 1: the device
    using M = DeferredModel;
    M m(1, [&] { rv.meet(1); });  // layer 2 is the only one with device work here
    std::atomic<int> deferred_jobs{0};
    m.chain->set_begin_hook([&] {
        if (deferred_jobs.fetch_add(1) == 1) rv.meet(0);  // the second: layer 1's
    });
    // One token. Layers 0 and 1: CPU experts only, the lightest (7) deferred; layer 2: experts 0, 3, 5 on the
    // device, 2 on the CPU, nothing deferred (the last layer).
    const std::vector<std::vector<int32_t>> ids = {{2, 3, 4, 7}, {2, 3, 4, 7}, {0, 3, 5, 2}};
    const std::vector<float> weights = {0.4f, 0.3f, 0.2f, 0.1f};
    const std::vector<float> x = test::random_normal(static_cast<size_t>(M::H), 91);
    std::vector<float> y(x.size());
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    for (size_t l = 0; l < 3; ++l)
        REQUIRE(m.layers[l]->forward(x.data(), 1, ids[l].data(), weights.data(), M::k, y.data(), *unused).is_ok());
    REQUIRE_FALSE(rv.timed_out);
    CHECK(rv.began[0]);
    CHECK(rv.began[1]);
    CHECK(deferred_jobs.load() == 2);
    CHECK(m.chain->pending() == 0);
    CHECK(m.layers[2]->stats().device_rows == 3);
}

TEST_CASE("hybrid: experts placed again without a reload, within the same budget, keep the all-CPU result") {
    const int64_t E = 8, H = 64, I = 32, T = 12;
    const int32_t k = 3;
    const test::ExpertWeights w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 77);
    const device::LayerShape shape = shape_of(w, T, k);
    // Room for the work buffer and exactly 3 experts: a new set of 3 fits only if the old ones leave first.
    std::shared_ptr<device::Device> dev = standin(device::workspace_bytes(shape) + 3 * device::expert_bytes(H, I));
    std::unique_ptr<device::DeviceLayer> layer;
    REQUIRE(dev->create_layer(shape, &layer).is_ok());
    for (int64_t e : {1, 4, 6}) upload(*layer, w, e);
    runtime::HybridFfn hybrid(make_pool(w, T, k), dev, std::move(layer), T, nullptr, 5);
    REQUIRE(hybrid.init().is_ok());
    CHECK(hybrid.replace({0, 2, 6}).code() == KT_STATUS_INVALID_ARGUMENT);  // no sources yet
    set_sources(hybrid, w);

    std::unique_ptr<moe::ExpertPool> cpu_only = make_pool(w, T, k);
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    const test::Routing r = test::make_routing(T, k, E, 99);
    const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 13);
    const std::vector<float> want = pool_forward(*cpu_only, x, T, k, r.ids, r.weights);
    const uint64_t used = dev->used_bytes();
    int64_t device_rows = 0;
    for (const std::vector<int32_t> &set : {std::vector<int32_t>{0, 2, 6}, std::vector<int32_t>{3, 5, 7}, std::vector<int32_t>{},
                                            std::vector<int32_t>{1, 2}}) {
        REQUIRE(hybrid.replace(set).is_ok());
        std::vector<uint8_t> mask(static_cast<size_t>(E), 0);
        for (int32_t e : set) mask[static_cast<size_t>(e)] = 1;
        CHECK(hybrid.layer().resident_mask() == mask);
        CHECK(dev->used_bytes() == used - (3 - set.size()) * device::expert_bytes(H, I));
        std::vector<float> y(x.size());
        REQUIRE(hybrid.forward(x.data(), T, r.ids.data(), r.weights.data(), k, y.data(), *unused).is_ok());
        INFO("device experts " << set.size());
        CHECK(worst_difference(y, want) <= 1e-3 * max_abs(want));
        int64_t rows = 0;  // the device computed exactly the rows of the new set
        for (int32_t e : r.ids) rows += e >= 0 && mask[static_cast<size_t>(e)];
        device_rows += rows;
        CHECK(hybrid.stats().device_rows == device_rows);
    }
    const Status bad = hybrid.replace({8});
    CHECK(bad.code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(bad.message(), Catch::Contains("expert 8 out of range"));
    // Four experts do not fit: the upload that fails is refused, and the split stays whole.
    const Status full = hybrid.replace({0, 1, 2, 3});
    CHECK(full.code() == KT_STATUS_OUT_OF_MEMORY);
    CHECK(dev->used_bytes() <= dev->budget_bytes());
    std::vector<float> y(x.size());
    REQUIRE(hybrid.forward(x.data(), T, r.ids.data(), r.weights.data(), k, y.data(), *unused).is_ok());
    CHECK(worst_difference(y, want) <= 1e-3 * max_abs(want));
    CHECK(hybrid.layer().n_resident() == 3);
}

TEST_CASE("hybrid: placing experts again while another thread runs the layer never gives a half-switched result") {
    const int64_t E = 8, H = 64, I = 32, T = 4;
    const int32_t k = 3;
    const test::ExpertWeights w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 78);
    std::shared_ptr<device::Device> dev = standin(1ull << 30);
    std::unique_ptr<device::DeviceLayer> layer;
    REQUIRE(dev->create_layer(shape_of(w, T, k), &layer).is_ok());
    runtime::HybridFfn hybrid(make_pool(w, T, k), dev, std::move(layer), T, nullptr, 0);
    REQUIRE(hybrid.init().is_ok());
    set_sources(hybrid, w);
    std::unique_ptr<moe::ExpertPool> cpu_only = make_pool(w, T, k);
    const test::Routing r = test::make_routing(T, k, E, 123);
    const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 14);
    const std::vector<float> want = pool_forward(*cpu_only, x, T, k, r.ids, r.weights);

    // The worker keeps its results; they are checked here, on the test's thread, once it has joined.
    std::atomic<bool> stop{false};
    std::atomic<int64_t> calls{0};
    std::vector<std::vector<float>> results;
    std::atomic<bool> worker_ok{true};
    std::thread worker([&] {
        std::unique_ptr<ThreadPool> unused;
        worker_ok = ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok();
        while (worker_ok && !stop.load()) {
            std::vector<float> y(x.size());
            worker_ok = hybrid.forward(x.data(), T, r.ids.data(), r.weights.data(), k, y.data(), *unused).is_ok();
            results.push_back(std::move(y));
            calls.fetch_add(1);
        }
    });
    // Each switch waits (up to 10 s) for a call after the one before, so calls and switches interleave.
    bool replaced = true;
    for (int i = 0; i < 30 && replaced; ++i) {
        const int64_t seen = calls.load();
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (calls.load() == seen && worker_ok && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
        replaced = hybrid.replace({static_cast<int32_t>(i % E), static_cast<int32_t>((i * 3 + 1) % E)}).is_ok();
    }
    stop = true;
    worker.join();
    REQUIRE(replaced);
    REQUIRE(worker_ok);
    CHECK(results.size() >= 30);
    double worst = 0;
    for (const std::vector<float> &y : results) worst = std::max(worst, worst_difference(y, want));
    INFO(results.size() << " calls during 30 switches");
    CHECK(worst <= 1e-3 * max_abs(want));
}

TEST_CASE("hybrid: calls above the prefill threshold stream the whole layer to the device, one layer at a time") {
    const int64_t E = 8, H = 64, I = 32, max_tokens = 24;
    const int32_t k = 3;
    const int64_t threshold = 6;
    // Two layers of one model sharing the stream buffer: streaming one after the other must swap the experts.
    const test::ExpertWeights w0 = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 81);
    const test::ExpertWeights w1 = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 82);
    const device::LayerShape shape = shape_of(w0, max_tokens, k);
    // Exactly the work buffer, the stream buffer and two resident experts per layer.
    const uint64_t budget = device::workspace_bytes(shape) + runtime::StreamBuffer::bytes_for(shape) +
                            4 * device::expert_bytes(H, I);
    std::shared_ptr<device::Device> dev = standin(budget);
    std::unique_ptr<device::DeviceLayer> stream_layer;
    REQUIRE(dev->create_layer(shape, &stream_layer).is_ok());
    auto buffer = std::make_shared<runtime::StreamBuffer>(dev, std::move(stream_layer));
    std::vector<std::unique_ptr<runtime::HybridFfn>> layers;
    std::vector<std::unique_ptr<moe::ExpertPool>> cpu_only;
    for (const test::ExpertWeights *w : {&w0, &w1}) {
        std::unique_ptr<device::DeviceLayer> layer;
        REQUIRE(dev->create_layer(shape, &layer).is_ok());
        upload(*layer, *w, 2);
        upload(*layer, *w, 5);
        layers.push_back(std::make_unique<runtime::HybridFfn>(make_pool(*w, max_tokens, k), dev, std::move(layer),
                                                              max_tokens, nullptr, static_cast<int64_t>(layers.size())));
        REQUIRE(layers.back()->init().is_ok());
        CHECK(layers.back()->set_streaming(buffer, threshold).code() == KT_STATUS_INVALID_ARGUMENT);  // no sources
        set_sources(*layers.back(), *w);
        REQUIRE(layers.back()->set_streaming(buffer, threshold).is_ok());
        cpu_only.push_back(make_pool(*w, max_tokens, k));
    }
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    // T = 6 takes the split; 7, 19 and 50 (in chunks of max_tokens) the stream. Each T runs layer 0, layer 1, and
    // layer 1 again: a streamed layer 1 after layer 0 uploads, the repeat finds its experts there.
    for (int64_t T : {6, 7, 19, 50}) {
        const bool streams = T > threshold;
        const size_t order[3] = {0, 1, 1};
        for (int i = 0; i < 3; ++i) {
            const size_t l = order[i];
            const test::Routing r = test::make_routing(T, k, E, 40 + static_cast<uint64_t>(T * 3 + i));
            const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 50 + static_cast<uint64_t>(T * 3 + i));
            std::vector<float> want(x.size());
            for (int64_t t0 = 0; t0 < T; t0 += max_tokens) {
                const int64_t n = std::min(max_tokens, T - t0);
                const std::vector<float> part = pool_forward(
                    *cpu_only[l], std::vector<float>(x.begin() + t0 * H, x.begin() + (t0 + n) * H), n, k,
                    std::vector<int32_t>(r.ids.begin() + t0 * k, r.ids.begin() + (t0 + n) * k),
                    std::vector<float>(r.weights.begin() + t0 * k, r.weights.begin() + (t0 + n) * k));
                std::copy(part.begin(), part.end(), want.begin() + t0 * H);
            }
            const runtime::HybridStats before = layers[l]->stats();
            std::vector<float> y(x.size());
            REQUIRE(layers[l]->forward(x.data(), T, r.ids.data(), r.weights.data(), k, y.data(), *unused).is_ok());
            const runtime::HybridStats after = layers[l]->stats();
            INFO("T " << T << ", call " << i << " (layer " << l << ")");
            // The same BF16 rounding on both sides (see "the split equals the all-CPU pool"); a layer computed
            // with the other layer's experts would be off by the whole output.
            CHECK(worst_difference(y, want) <= 1e-3 * max_abs(want));
            if (streams) {
                CHECK(after.cpu_rows == before.cpu_rows);  // the CPU computed nothing
                // Every routed slot (the routing leaves some empty: id -1).
                CHECK(after.device_rows - before.device_rows == std::count_if(r.ids.begin(), r.ids.end(), [](int32_t e) { return e >= 0; }));
                CHECK(after.streamed_calls == before.streamed_calls + 1);
                CHECK(after.stream_uploads - before.stream_uploads == (i < 2 ? 1 : 0));
            } else {
                CHECK(after.cpu_rows > before.cpu_rows);
                CHECK(after.streamed_calls == before.streamed_calls);
            }
        }
    }
    const runtime::HybridStats s0 = layers[0]->stats(), s1 = layers[1]->stats();
    CHECK(s0.streamed_calls == 3);
    CHECK(s1.streamed_calls == 6);
    CHECK(s0.stream_uploads == 3);
    CHECK(s1.stream_uploads == 3);
    CHECK(s0.stream_bytes == 3 * runtime::StreamBuffer::bytes_for(shape));
    // The plan's bytes, exactly: the stream buffer was filled once, its slots reused by every later upload.
    CHECK(dev->used_bytes() == budget);

    // A layer of another shape cannot use the buffer.
    const test::ExpertWeights wide = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, 2 * H, I, 83);
    std::shared_ptr<device::Device> other_dev = standin(1ull << 30);
    std::unique_ptr<device::DeviceLayer> other_layer;
    REQUIRE(other_dev->create_layer(shape_of(wide, max_tokens, k), &other_layer).is_ok());
    runtime::HybridFfn other(make_pool(wide, max_tokens, k), other_dev, std::move(other_layer), max_tokens, nullptr, 7);
    set_sources(other, wide);
    const Status refused = other.set_streaming(buffer, threshold);
    CHECK(refused.code() == KT_STATUS_UNSUPPORTED);
    CHECK_THAT(refused.message(), Catch::Contains("stream buffer"));
}

namespace {

// A stream buffer slot that counts the uploads into it and calls `on_upload` (with the count so far, shared by
// the slots) before each: a test's view of when the stream buffer fills.
class CountingSlot final : public device::DeviceLayer {
public:
    CountingSlot(std::unique_ptr<device::DeviceLayer> inner, std::atomic<int64_t> *count, std::function<void(int64_t)> on_upload)
        : DeviceLayer(inner->shape()), inner_(std::move(inner)), count_(count), on_upload_(std::move(on_upload)) {}
    Status upload(int64_t e, const ops::MatrixView &g, const ops::MatrixView &u, const ops::MatrixView &d) override {
        on_upload_(++*count_);
        KT_TRY(inner_->upload(e, g, u, d));
        mark_resident(e);
        return Status::ok();
    }
    Status evict(int64_t e) override {
        unmark_resident(e);
        return inner_->evict(e);
    }
    Status submit(const device::ExpertWork &work, device::Event *event) override { return inner_->submit(work, event); }
    Status wait(const device::Event &event, device::Interval *when) override { return inner_->wait(event, when); }

private:
    std::unique_ptr<device::DeviceLayer> inner_;
    std::atomic<int64_t> *count_;
    std::function<void(int64_t)> on_upload_;
};

}  // namespace

TEST_CASE("hybrid: with two stream slots, the next streaming layer is uploaded while the caller goes on") {
    const int64_t E = 8, H = 64, I = 32, max_tokens = 16, T = 12;
    const int32_t k = 2;
    const test::ExpertWeights w0 = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 91);
    const test::ExpertWeights w1 = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 92);
    const test::ExpertWeights w2 = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 93);
    const device::LayerShape shape = shape_of(w0, max_tokens, k);
    std::shared_ptr<device::Device> dev =
        standin(device::workspace_bytes(shape) + 2 * runtime::StreamBuffer::bytes_for(shape) + 3 * device::expert_bytes(H, I));
    // After the first layer's call has returned, the caller (standing in for the next layer's attention) waits
    // until the upload after the first layer's own 8 has begun, which is the buffer thread's of the next layer:
    // the two meet only if that upload runs while the caller works, after the call.
    Rendezvous meet;
    std::atomic<int64_t> uploads{0};
    std::vector<std::unique_ptr<device::DeviceLayer>> slots;
    for (int i = 0; i < 2; ++i) {
        std::unique_ptr<device::DeviceLayer> slot;
        REQUIRE(dev->create_layer(shape, &slot).is_ok());
        slots.push_back(std::make_unique<CountingSlot>(std::move(slot), &uploads, [&](int64_t n) {
            if (n == E + 1) meet.meet(1);
        }));
    }
    auto buffer = std::make_shared<runtime::StreamBuffer>(dev, std::move(slots));
    CHECK(buffer->slots() == 2);
    // Layers 0, 2 and 5 of a model, registered out of order: "next" follows the model's order.
    std::vector<std::unique_ptr<runtime::HybridFfn>> layers(3);
    std::vector<std::unique_ptr<moe::ExpertPool>> cpu_only;
    const test::ExpertWeights *weights[3] = {&w0, &w1, &w2};
    const int64_t model_layer[3] = {0, 2, 5};
    for (int i : {2, 0, 1}) {
        std::unique_ptr<device::DeviceLayer> layer;
        REQUIRE(dev->create_layer(shape, &layer).is_ok());
        upload(*layer, *weights[i], 1);
        layers[static_cast<size_t>(i)] = std::make_unique<runtime::HybridFfn>(make_pool(*weights[i], max_tokens, k), dev,
                                                                              std::move(layer), max_tokens, nullptr,
                                                                              model_layer[i]);
        REQUIRE(layers[static_cast<size_t>(i)]->init().is_ok());
        set_sources(*layers[static_cast<size_t>(i)], *weights[i]);
        REQUIRE(layers[static_cast<size_t>(i)]->set_streaming(buffer, 4).is_ok());
    }
    CHECK(layers[0]->set_streaming(buffer, 4).code() == KT_STATUS_INVALID_ARGUMENT);  // once
    for (const test::ExpertWeights *w : weights) cpu_only.push_back(make_pool(*w, max_tokens, k));
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());

    // A prompt's pass streams layer 0, 2, 5 in order; a second pass (the next chunk) starts over at layer 0.
    for (int pass = 0; pass < 2; ++pass) {
        for (size_t l = 0; l < 3; ++l) {
            const uint64_t seed = 200 + 10 * static_cast<uint64_t>(pass) + l;
            const test::Routing r = test::make_routing(T, k, E, seed);
            const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), seed);
            const std::vector<float> want = pool_forward(*cpu_only[l], x, T, k, r.ids, r.weights);
            const runtime::HybridStats before = layers[l]->stats();
            std::vector<float> y(x.size());
            REQUIRE(layers[l]->forward(x.data(), T, r.ids.data(), r.weights.data(), k, y.data(), *unused).is_ok());
            if (pass == 0 && l == 0) meet.meet(0);
            const runtime::HybridStats after = layers[l]->stats();
            INFO("pass " << pass << ", layer " << model_layer[l]);
            CHECK(worst_difference(y, want) <= 1e-3 * max_abs(want));  // the right layer's experts, all of them
            CHECK(after.streamed_calls == before.streamed_calls + 1);
            // Only each pass's first layer uploads its own experts; the others find theirs uploaded ahead.
            CHECK(after.stream_uploads - before.stream_uploads == (l == 0 ? 1 : 0));
            CHECK(after.stream_ahead_calls - before.stream_ahead_calls == (l == 0 ? 0 : 1));
        }
    }
    REQUIRE(!meet.timed_out);
    const runtime::HybridStats s2 = layers[1]->stats();
    CHECK(s2.stream_ahead_ns > 0);
    CHECK(uploads.load() == 2 * 3 * E);  // each pass: the three layers' experts, once each
    CHECK(dev->used_bytes() <= dev->budget_bytes());

    // Destroyed, a layer leaves the buffer's order: next after layer 0 is layer 5 now, which a slot holds already
    // (the second pass uploaded it ahead), so nothing is uploaded after layer 0's call and layer 5 finds its experts.
    layers[1].reset();
    const test::Routing r = test::make_routing(T, k, E, 300);
    const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 300);
    std::vector<float> y(x.size());
    REQUIRE(layers[0]->forward(x.data(), T, r.ids.data(), r.weights.data(), k, y.data(), *unused).is_ok());
    const std::vector<float> want5 = pool_forward(*cpu_only[2], x, T, k, r.ids, r.weights);
    const runtime::HybridStats s5_before = layers[2]->stats();
    REQUIRE(layers[2]->forward(x.data(), T, r.ids.data(), r.weights.data(), k, y.data(), *unused).is_ok());
    CHECK(worst_difference(y, want5) <= 1e-3 * max_abs(want5));
    CHECK(layers[2]->stats().stream_uploads == s5_before.stream_uploads);
    CHECK(layers[2]->stats().stream_ahead_calls == s5_before.stream_ahead_calls);  // found from the second pass
    CHECK(uploads.load() == 2 * 3 * E + E);  // layer 0's own, nothing else
}

TEST_CASE("hybrid: a stream buffer the budget cannot hold fails the streamed call, and the split still works") {
    const int64_t E = 8, H = 64, I = 32, T = 12;
    const int32_t k = 2;
    const test::ExpertWeights w = test::make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_BF16, 0, E, H, I, 84);
    const device::LayerShape shape = shape_of(w, T, k);
    // The work buffer, one resident expert and all but one of the stream buffer's slots.
    std::shared_ptr<device::Device> dev =
        standin(device::workspace_bytes(shape) + runtime::StreamBuffer::bytes_for(shape));
    std::unique_ptr<device::DeviceLayer> stream_layer, layer;
    REQUIRE(dev->create_layer(shape, &stream_layer).is_ok());
    REQUIRE(dev->create_layer(shape, &layer).is_ok());
    upload(*layer, w, 3);
    auto buffer = std::make_shared<runtime::StreamBuffer>(dev, std::move(stream_layer));
    runtime::HybridFfn hybrid(make_pool(w, T, k), dev, std::move(layer), T, nullptr, 0);
    REQUIRE(hybrid.init().is_ok());
    set_sources(hybrid, w);
    REQUIRE(hybrid.set_streaming(buffer, 4).is_ok());
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    const test::Routing r = test::make_routing(T, k, E, 85);
    const std::vector<float> x = test::random_normal(static_cast<size_t>(T * H), 86);
    std::vector<float> y(x.size());
    const Status s = hybrid.forward(x.data(), T, r.ids.data(), r.weights.data(), k, y.data(), *unused);
    CHECK(s.code() == KT_STATUS_OUT_OF_MEMORY);
    CHECK_THAT(s.message(), Catch::Contains("streaming expert 7"));
    CHECK(dev->used_bytes() <= dev->budget_bytes());
    // Below the threshold the layer's own split is untouched by the half-filled buffer.
    std::unique_ptr<moe::ExpertPool> cpu_only = make_pool(w, T, k);
    const std::vector<float> want = pool_forward(*cpu_only, std::vector<float>(x.begin(), x.begin() + 4 * H), 4, k,
                                                 std::vector<int32_t>(r.ids.begin(), r.ids.begin() + 4 * k),
                                                 std::vector<float>(r.weights.begin(), r.weights.begin() + 4 * k));
    std::vector<float> small(want.size());
    REQUIRE(hybrid.forward(x.data(), 4, r.ids.data(), r.weights.data(), k, small.data(), *unused).is_ok());
    CHECK(worst_difference(small, want) <= 1e-3 * max_abs(want));
}
