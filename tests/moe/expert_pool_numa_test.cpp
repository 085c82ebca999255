// Sharded against unsharded: on a fake 2-node machine (HWLOC_SYNTHETIC, set by the ctest entries in
// tests/moe/CMakeLists.txt), a pool that splits every expert's intermediate dimension across two worker groups must
// give the results of a pool with one group, up to fp32 reassociation of the split down projection.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "moe/expert_pool.h"
#include "moe_test_support.h"
#include "support/test_support.h"

using namespace kt;
using namespace kt::test;

namespace {

struct Shape {
    const char *name;
    int32_t src_type, format, group;
    int64_t hidden, inter;
};

kt_expert_pool_info info_of(kt_expert_pool *pool) {
    kt_expert_pool_info info;
    info.struct_size = sizeof info;
    REQUIRE(kt_expert_pool_get_info(pool, &info) == KT_STATUS_OK);
    return info;
}

int total_threads(const moe::ExpertPool &pool) {
    const std::vector<int> &per_group = pool.info().group_threads;
    return std::accumulate(per_group.begin(), per_group.end(), 0);
}

double max_relative_difference(const std::vector<float> &a, const std::vector<float> &b) {
    double scale = 0, diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
        diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    return scale > 0 ? diff / scale : diff;
}

}  // namespace

TEST_CASE("numa: sharded pools equal unsharded pools") {
    const char *synthetic = std::getenv("HWLOC_SYNTHETIC");
    INFO("HWLOC_SYNTHETIC=" << (synthetic ? synthetic : "(unset)"));
    const Shape shapes[] = {
        {"INT8, shards with a tail", KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT8, 0, 96, 100},
        {"INT4 g128", KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT4, 128, 128, 256},
        {"BF16", KT_TYPE_BF16, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 96},
        {"Q8_0", KT_TYPE_Q8_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 128},
        {"Q4_K (a shard starts mid-super-block)", KT_TYPE_Q4_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256},
        {"Q6_K", KT_TYPE_Q6_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 512},
    };
    for (const Shape &sh : shapes) {
        INFO(sh.name);
        const ExpertWeights w = make_experts(sh.src_type, sh.format, sh.group, 6, sh.hidden, sh.inter, 21);
        kt_expert_pool *sharded = make_pool(w, sh.format, sh.group, 40, 8, KT_NUMA_AUTO);
        kt_expert_pool *single = make_pool(w, sh.format, sh.group, 40, 8, KT_NUMA_OFF);
        const kt_expert_pool_info si = info_of(sharded), ui = info_of(single);
        INFO("sharded: " << si.description);
        REQUIRE(si.n_numa_groups == 2);  // the fake topology is in effect
        CHECK(ui.n_numa_groups == 1);
        CHECK(std::string(si.description).find("I [0, ") != std::string::npos);

        for (const auto &call : {std::pair<int64_t, int32_t>{1, 8}, {7, 3}, {40, 8}}) {
            const Routing r = make_routing(call.first, call.second, 6, 31 + call.first);
            const std::vector<float> x = random_normal(static_cast<size_t>(call.first * sh.hidden), 41 + call.first);
            const std::vector<float> a = run_forward(sharded, x, r), b = run_forward(single, x, r);
            const double d = max_relative_difference(a, b);
            INFO(call.first << " tokens, top-" << call.second << ": max |sharded - unsharded| / max |y| = " << d);
            CHECK(d < 1e-5);
            const bool bf16 = sh.format == KT_EXPERT_WEIGHTS_AS_SOURCE && sh.src_type == KT_TYPE_BF16;
            CHECK(normalized_error(a, emulated_reference(w, x, r, nullptr, bf16)) < kEmulatedBound);
        }
        kt_expert_pool_free(sharded);
        kt_expert_pool_free(single);
    }
}

TEST_CASE("numa: a pool on the second node only") {
    const ExpertWeights w = make_experts(KT_TYPE_Q8_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 4, 64, 64, 22);
    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    p.n_experts = 4;
    p.hidden_size = 64;
    p.intermediate_size = 64;
    p.max_tokens = 8;
    p.numa_policy = KT_NUMA_NODES;
    const int32_t nodes[] = {1};
    p.n_numa_nodes = 1;
    p.numa_nodes = nodes;
    kt_expert_pool *pool = nullptr;
    REQUIRE(kt_expert_pool_create(&p, &pool, nullptr) == KT_STATUS_OK);
    kt_expert_weights ew = {sizeof ew, KT_TYPE_Q8_0, KT_TYPE_Q8_0, KT_TYPE_Q8_0, w.gate.data(), w.up.data(), w.down.data()};
    REQUIRE(kt_expert_pool_load(pool, &ew) == KT_STATUS_OK);
    const kt_expert_pool_info info = info_of(pool);
    INFO(info.description);
    CHECK(info.n_numa_groups == 1);
    CHECK(std::string(info.description).find("node 1") != std::string::npos);
    const Routing r = make_routing(5, 4, 4, 23);
    const std::vector<float> x = random_normal(static_cast<size_t>(5 * 64), 24);
    CHECK(normalized_error(run_forward(pool, x, r), emulated_reference(w, x, r, nullptr, false)) < kEmulatedBound);
    kt_expert_pool_free(pool);
}

// gpt-oss's experts: MXFP4 weights, per-expert biases on gate, up and down, and the clamped SwiGLU (the pool's
// internal config; kt.h has no biases). Sharded, the gate/up biases follow each shard's rows and the down bias is
// added by one group only: the result must equal the single group's and a double-precision reference.
TEST_CASE("numa: expert biases and the clamped SwiGLU, sharded and not") {
    constexpr int64_t E = 4, H = 64, I = 96, T = 5, K = 2;
    const ExpertWeights w = make_experts(KT_TYPE_MXFP4, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, E, H, I, 31);
    const std::vector<float> gate_bias = random_normal(E * I, 32, 0.5f), up_bias = random_normal(E * I, 33, 0.5f);
    const std::vector<float> down_bias = random_normal(E * H, 34, 0.5f), x = random_normal(T * H, 35, 1.0f);
    const std::vector<int32_t> ids = {0, 3, 1, 2, 3, 0, 2, -1, 1, 1};
    const std::vector<float> weights = {0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f, 1.0f, 0.0f, 0.4f, 0.6f};
    auto run = [&](moe::NumaPolicy numa, int *groups) {
        moe::ExpertPoolConfig c;
        c.n_experts = E;
        c.hidden = H;
        c.intermediate = I;
        c.max_tokens = T;
        c.numa = numa;
        c.private_threads = true;
        c.swiglu = {7.0f, 1.702f};
        c.gate_bias = gate_bias;
        c.up_bias = up_bias;
        c.down_bias = down_bias;
        std::unique_ptr<moe::ExpertPool> pool;
        REQUIRE(moe::ExpertPool::create(c, &pool).is_ok());
        load_experts(pool.get(), w);
        *groups = pool->info().groups;
        std::vector<float> out(T * H);
        moe::ForwardArgs a;
        a.n_tokens = T;
        a.top_k = K;
        a.input = x.data();
        a.ids = ids.data();
        a.weights = weights.data();
        a.output = out.data();
        REQUIRE(pool->forward(a).is_ok());
        return out;
    };
    int sharded_groups = 0, single_groups = 0;
    const std::vector<float> sharded = run(moe::NumaPolicy::kAuto, &sharded_groups);
    const std::vector<float> single = run(moe::NumaPolicy::kOff, &single_groups);
    CHECK(sharded_groups == 2);
    CHECK(single_groups == 1);
    CHECK(max_relative_difference(sharded, single) < 1e-5);
    // The definition in double, on the dequantized weights and unquantized activations.
    std::vector<double> ref(T * H, 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < K; ++j) {
            const int32_t e = ids[t * K + j];
            if (e < 0) continue;
            std::vector<double> h(I);
            for (int64_t i = 0; i < I; ++i) {
                double gv = gate_bias[e * I + i], uv = up_bias[e * I + i];
                for (int64_t k = 0; k < H; ++k) {
                    gv += double(w.gate_f[(e * I + i) * H + k]) * x[t * H + k];
                    uv += double(w.up_f[(e * I + i) * H + k]) * x[t * H + k];
                }
                gv = std::min(gv, 7.0);
                uv = std::min(std::max(uv, -7.0), 7.0);
                h[i] = gv / (1.0 + std::exp(-1.702 * gv)) * (uv + 1.0);
            }
            for (int64_t k = 0; k < H; ++k) {
                double y = down_bias[e * H + k];
                for (int64_t i = 0; i < I; ++i) y += double(w.down_f[(e * H + k) * I + i]) * h[i];
                ref[t * H + k] += weights[t * K + j] * y;
            }
        }
    const std::vector<float> ref_f(ref.begin(), ref.end());
    CHECK(max_relative_difference(sharded, ref_f) < 0.05);  // int8 activations and intermediates
}

// A worker whose core another process keeps busy may not start a job for milliseconds. The pool must not wait for
// it: a thread that runs takes the tasks of every group, its own first. Here workers are held before their first
// job (all of them, so that the driver thread alone computes both groups' shards, or only the last one); loading
// and forward calls must finish, with the same bits as a pool whose threads all run (a task's arithmetic does not
// depend on the thread that runs it).
TEST_CASE("numa: a pool whose workers have not started finishes on the threads that run") {
    constexpr int64_t E = 6, H = 256, I = 256;
    for (int32_t src_type : {KT_TYPE_F32, KT_TYPE_Q4_K}) {
        const int32_t format = src_type == KT_TYPE_F32 ? KT_EXPERT_WEIGHTS_INT8 : KT_EXPERT_WEIGHTS_AS_SOURCE;
        INFO("source type " << src_type);
        const ExpertWeights w = make_experts(src_type, format, 0, E, H, I, 41);
        const std::vector<float> x = random_normal(7 * H, 42, 1.0f);
        const Routing r = make_routing(7, 3, E, 43);
        // hold: -1 none, 0 every worker, 1 the last worker only.
        auto run = [&](int hold, int *groups) {
            std::atomic<bool> release{false};
            std::atomic<int> held{0};
            int last_worker = -1;
            moe::ExpertPoolConfig c;
            c.n_experts = E;
            c.hidden = H;
            c.intermediate = I;
            c.max_tokens = 7;
            c.format = format == KT_EXPERT_WEIGHTS_INT8 ? moe::TargetFormat::kInt8 : moe::TargetFormat::kAsSource;
            c.numa = moe::NumaPolicy::kAuto;
            c.private_threads = true;
            if (hold >= 0)
                c.on_worker_start = [&](int index) {
                    if (hold == 1 && index != last_worker) return;
                    held.fetch_add(1);
                    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                };
            std::unique_ptr<moe::ExpertPool> pool;
            // The last worker's index is only known from the plan; a pool of the same settings tells it.
            {
                moe::ExpertPoolConfig probe = c;
                probe.on_worker_start = nullptr;
                std::unique_ptr<moe::ExpertPool> p;
                REQUIRE(moe::ExpertPool::create(probe, &p).is_ok());
                last_worker = total_threads(*p) - 1;
            }
            REQUIRE(moe::ExpertPool::create(c, &pool).is_ok());
            load_experts(pool.get(), w);
            *groups = pool->info().groups;
            std::vector<float> out;
            for (int64_t tokens : {int64_t{7}, int64_t{1}}) {
                std::vector<float> y(static_cast<size_t>(tokens * H));
                moe::ForwardArgs a;
                a.n_tokens = tokens;
                a.top_k = r.top_k;
                a.input = x.data();
                a.ids = r.ids.data();
                a.weights = r.weights.data();
                a.output = y.data();
                REQUIRE(pool->forward(a).is_ok());
                out.insert(out.end(), y.begin(), y.end());
            }
            if (hold >= 0) {
                // A worker enters the hook when the OS first runs it, which on a busy host (2 vCPUs, ctest -j2) can
                // be after the calls above have finished without it: wait for the held workers (10 s at most).
                const int expected = hold == 0 ? total_threads(*pool) - 1 : 1;
                for (int i = 0; i < 10000 && held.load() < expected; ++i)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
                CHECK(held.load() == expected);
            }
            release.store(true);
            return out;
        };
        int groups_all = 0, groups_none = 0, groups_last = 0;
        const std::vector<float> all_run = run(-1, &groups_all);
        const std::vector<float> none_run = run(0, &groups_none);
        const std::vector<float> last_held = run(1, &groups_last);
        CHECK(groups_all == 2);
        CHECK(groups_none == 2);
        CHECK(none_run == all_run);
        CHECK(last_held == all_run);
        const std::vector<double> ref = emulated_reference(w, x, r, nullptr, false);
        CHECK(normalized_error(std::vector<float>(all_run.begin(), all_run.begin() + 7 * H), ref) < kEmulatedBound);
    }
}
