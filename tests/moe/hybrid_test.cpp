// The hybrid path without a GPU: the device interface's row planning, the CPU stand-in against the math reference,
// the hybrid FFN (CPU pool + stand-in at once) against the all-CPU pool, overlap, placement and budgets.
#include <catch2/catch.hpp>

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
    moe::MatrixSource g, u, d;
    REQUIRE(moe::make_source(w.src_type, w.gate.data(), w.experts * w.inter, w.hidden, &g).is_ok());
    REQUIRE(moe::make_source(w.src_type, w.up.data(), w.experts * w.inter, w.hidden, &u).is_ok());
    REQUIRE(moe::make_source(w.src_type, w.down.data(), w.experts * w.hidden, w.inter, &d).is_ok());
    REQUIRE(pool->load(g, u, d).is_ok());
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

std::shared_ptr<device::Device> standin(uint64_t budget, std::function<void()> hook = nullptr) {
    device::DeviceOptions o;
    o.kind = device::Kind::kCpuStandIn;
    o.budget_bytes = budget;
    o.on_work_begin = std::move(hook);
    std::shared_ptr<device::Device> d;
    REQUIRE(device::create_device(o, &d).is_ok());
    return d;
}

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
    // A rendezvous: the device's work, once begun, waits for the CPU job to have begun, and the CPU job waits for
    // the device's. Both can only meet if the hybrid FFN has both submitted before it waits for either, and then
    // each interval contains the meeting point: overlap by construction of the schedule, not by timing luck on
    // loaded cores. A schedule that ran them one after another would time out here instead.
    std::mutex m;
    std::condition_variable cv;
    bool cpu_began = false, device_began = false, timed_out = false;
    auto meet = [&](bool &mine, bool &theirs) {
        std::unique_lock<std::mutex> lock(m);
        mine = true;
        cv.notify_all();
        if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return theirs; })) timed_out = true;
    };
    std::shared_ptr<device::Device> dev = standin(1ull << 30, [&] { meet(device_began, cpu_began); });
    std::unique_ptr<device::DeviceLayer> layer;
    REQUIRE(dev->create_layer(shape_of(w, T, k), &layer).is_ok());
    upload(*layer, w, 0);
    upload(*layer, w, 1);
    runtime::HybridFfn hybrid(make_pool(w, T, k), dev, std::move(layer), T);
    REQUIRE(hybrid.init().is_ok());
    hybrid.set_cpu_begin_hook([&] { meet(cpu_began, device_began); });
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
    REQUIRE_FALSE(timed_out);
    const runtime::HybridStats s = hybrid.stats();
    CHECK(s.last_cpu.begin_ns < s.last_device.end_ns);
    CHECK(s.last_device.begin_ns < s.last_cpu.end_ns);
    CHECK(s.overlap_ns > 0);
    CHECK(s.overlap_ns <= std::min(s.cpu_ns, s.device_ns));
    CHECK(s.cpu_rows == T);
    CHECK(s.device_rows == T);
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
