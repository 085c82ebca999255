// kt_expert_pool's behaviour through kt.h: accumulate mode, expert masks, submit/wait ordering, bf16 input and
// output, int64 ids, SwiGLU variants, loading from a GGUF model, and bad arguments returning statuses.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "model/gguf/gguf.h"
#include "moe_test_support.h"
#include "support/test_support.h"

using namespace kt;
using namespace kt::test;

namespace {

constexpr int64_t kE = 8, kH = 96, kI = 64;

struct Fixture {
    ExpertWeights w = make_experts(KT_TYPE_Q8_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, kE, kH, kI, 42);
    kt_expert_pool *pool = make_pool(w, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 8);
    ~Fixture() { kt_expert_pool_free(pool); }
};

kt_expert_forward args_for(const std::vector<float> &x, const Routing &r, void *out, bool accumulate = false) {
    kt_expert_forward a;
    kt_expert_forward_init(&a);
    a.n_tokens = static_cast<int32_t>(r.tokens);
    a.top_k = r.top_k;
    a.input = x.data();
    a.expert_ids = r.ids.data();
    a.expert_weights = r.weights.data();
    a.output = out;
    a.accumulate = accumulate ? 1 : 0;
    return a;
}

double emulated_error(const Fixture &f, const std::vector<float> &y, const std::vector<float> &x, const Routing &r,
                      const uint8_t *mask, const std::vector<double> *base = nullptr) {
    std::vector<double> ref = emulated_reference(f.w, x, r, mask, false);
    if (base)
        for (size_t i = 0; i < ref.size(); ++i) ref[i] += (*base)[i];
    return normalized_error(y, ref);
}

}  // namespace

TEST_CASE("expert pool api: accumulate adds to the output") {
    Fixture f;
    const Routing r = make_routing(5, 4, kE, 1);
    const std::vector<float> x = random_normal(static_cast<size_t>(5 * kH), 2);
    std::vector<float> y = random_normal(static_cast<size_t>(5 * kH), 3);
    const std::vector<double> before(y.begin(), y.end());
    const kt_expert_forward a = args_for(x, r, y.data(), true);
    REQUIRE(kt_expert_pool_forward(f.pool, &a) == KT_STATUS_OK);
    CHECK(emulated_error(f, y, x, r, nullptr, &before) < kEmulatedBound);
}

TEST_CASE("expert pool api: masked experts are skipped and the mask can change between calls") {
    Fixture f;
    const Routing r = make_routing(9, 8, kE, 4);
    const std::vector<float> x = random_normal(static_cast<size_t>(9 * kH), 5);
    uint8_t mask[kE] = {0, 1, 0, 0, 1, 0, 0, 1};
    REQUIRE(kt_expert_pool_set_mask(f.pool, mask, kE) == KT_STATUS_OK);
    std::vector<float> y = run_forward(f.pool, x, r);
    CHECK(emulated_error(f, y, x, r, mask) < kEmulatedBound);

    uint8_t all[kE];
    std::memset(all, 1, sizeof all);
    REQUIRE(kt_expert_pool_set_mask(f.pool, all, kE) == KT_STATUS_OK);
    y = run_forward(f.pool, x, r);
    for (float v : y) REQUIRE(v == 0.0f);  // every expert elsewhere: nothing added

    REQUIRE(kt_expert_pool_set_mask(f.pool, nullptr, 0) == KT_STATUS_OK);
    y = run_forward(f.pool, x, r);
    CHECK(emulated_error(f, y, x, r, nullptr) < kEmulatedBound);
}

TEST_CASE("expert pool api: submitted jobs run in order and wait covers earlier tickets") {
    Fixture f;
    const Routing r = make_routing(3, 2, kE, 6);
    const std::vector<float> x1 = random_normal(static_cast<size_t>(3 * kH), 7);
    const std::vector<float> x2 = random_normal(static_cast<size_t>(3 * kH), 8);
    const std::vector<float> y1 = run_forward(f.pool, x1, r);
    const std::vector<float> y2 = run_forward(f.pool, x2, r);

    // Job A writes, job B adds: only A-then-B gives y1 + y2 (B-then-A would give y1).
    for (int round = 0; round < 20; ++round) {
        std::vector<float> out(static_cast<size_t>(3 * kH), 123.0f);
        const kt_expert_forward a = args_for(x1, r, out.data(), false);
        const kt_expert_forward b = args_for(x2, r, out.data(), true);
        uint64_t ta = 0, tb = 0;
        REQUIRE(kt_expert_pool_submit(f.pool, &a, &ta) == KT_STATUS_OK);
        REQUIRE(kt_expert_pool_submit(f.pool, &b, &tb) == KT_STATUS_OK);
        CHECK(tb == ta + 1);
        REQUIRE(kt_expert_pool_wait(f.pool, tb) == KT_STATUS_OK);
        for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == y1[i] + y2[i]);
    }

    // More jobs than max_in_flight (4): submit blocks for a free slot instead of failing; each output is right.
    std::vector<std::vector<float>> outs(11, std::vector<float>(static_cast<size_t>(3 * kH)));
    uint64_t last = 0;
    for (auto &o : outs) {
        const kt_expert_forward a = args_for(x1, r, o.data());
        REQUIRE(kt_expert_pool_submit(f.pool, &a, &last) == KT_STATUS_OK);
    }
    REQUIRE(kt_expert_pool_wait(f.pool, 0) == KT_STATUS_OK);
    for (auto &o : outs) CHECK(std::memcmp(o.data(), y1.data(), sizeof(float) * o.size()) == 0);
    CHECK(kt_expert_pool_wait(f.pool, last + 1) == KT_STATUS_INVALID_ARGUMENT);  // never issued
}

TEST_CASE("expert pool api: pools with the same thread settings run their jobs in one FIFO") {
    // Two layers of a model: layer B's job, submitted after layer A's, runs after it (they share one executor),
    // so B accumulating into A's output sees A's result.
    Fixture a;
    const ExpertWeights wb = make_experts(KT_TYPE_Q4_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, kE, kH, kI, 43);
    kt_expert_pool *b = make_pool(wb, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 8);
    const Routing r = make_routing(5, 3, kE, 44);
    const std::vector<float> x = random_normal(static_cast<size_t>(5 * kH), 45);
    const std::vector<float> ya = run_forward(a.pool, x, r), yb = run_forward(b, x, r);
    for (int round = 0; round < 20; ++round) {
        std::vector<float> out(ya.size(), -7.0f);
        const kt_expert_forward fa = args_for(x, r, out.data(), false), fb = args_for(x, r, out.data(), true);
        uint64_t ta = 0, tb = 0;
        REQUIRE(kt_expert_pool_submit(a.pool, &fa, &ta) == KT_STATUS_OK);
        REQUIRE(kt_expert_pool_submit(b, &fb, &tb) == KT_STATUS_OK);
        CHECK(tb > ta);
        REQUIRE(kt_expert_pool_wait(b, tb) == KT_STATUS_OK);
        for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == ya[i] + yb[i]);
        REQUIRE(kt_expert_pool_wait(a.pool, 0) == KT_STATUS_OK);
    }
    kt_expert_pool_free(b);
    // The other pool keeps working after one of the pools sharing its threads is gone.
    CHECK(normalized_error(run_forward(a.pool, x, r), ya.empty() ? std::vector<double>() : std::vector<double>(ya.begin(), ya.end())) == 0.0);
}

TEST_CASE("expert pool api: bf16 input and output and int64 ids") {
    const ExpertWeights w = make_experts(KT_TYPE_BF16, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, kE, kH, kI, 9);
    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    p.n_experts = kE;
    p.hidden_size = kH;
    p.intermediate_size = kI;
    p.max_tokens = 16;
    p.input_type = KT_TYPE_BF16;
    p.output_type = KT_TYPE_BF16;
    kt_expert_pool *pool = nullptr;
    REQUIRE(kt_expert_pool_create(&p, &pool, nullptr) == KT_STATUS_OK);
    kt_expert_weights ew = {sizeof ew, KT_TYPE_BF16, KT_TYPE_BF16, KT_TYPE_BF16, w.gate.data(), w.up.data(), w.down.data()};
    REQUIRE(kt_expert_pool_load(pool, &ew) == KT_STATUS_OK);

    const Routing r = make_routing(6, 3, kE, 10);
    const std::vector<float> x = random_normal(static_cast<size_t>(6 * kH), 11);
    std::vector<uint16_t> xb(x.size());
    std::vector<float> xr(x.size());  // the input as the pool sees it
    for (size_t i = 0; i < x.size(); ++i) {
        xb[i] = f32_to_bf16(x[i]);
        xr[i] = bf16_to_f32(xb[i]);
    }
    std::vector<int64_t> ids64(r.ids.begin(), r.ids.end());
    std::vector<uint16_t> yb(x.size());
    kt_expert_forward a;
    kt_expert_forward_init(&a);
    a.n_tokens = 6;
    a.top_k = 3;
    a.input = xb.data();
    a.expert_ids = ids64.data();
    a.ids_type = KT_TYPE_I64;
    a.expert_weights = r.weights.data();
    a.output = yb.data();
    REQUIRE(kt_expert_pool_forward(pool, &a) == KT_STATUS_OK);
    std::vector<float> y(yb.size());
    for (size_t i = 0; i < yb.size(); ++i) y[i] = bf16_to_f32(yb[i]);
    // bf16 output adds one rounding of 2^-9 relative on top of the bf16 path's error.
    CHECK(normalized_error(y, emulated_reference(w, xr, r, nullptr, true)) < 4e-3);

    // Accumulating into bf16: out = bf16(out + result).
    std::vector<uint16_t> acc = yb;
    a.output = acc.data();
    a.accumulate = 1;
    REQUIRE(kt_expert_pool_forward(pool, &a) == KT_STATUS_OK);
    for (size_t i = 0; i < acc.size(); ++i) CHECK(std::fabs(bf16_to_f32(acc[i]) - 2 * y[i]) <= 0.01f * std::fabs(y[i]) + 1e-6f);
    kt_expert_pool_free(pool);
}

TEST_CASE("expert pool api: SwiGLU with a clamp limit and with alpha") {
    const ExpertWeights w = make_experts(KT_TYPE_F32, KT_EXPERT_WEIGHTS_BF16, 0, kE, kH, kI, 12);
    for (const auto &v : {std::pair<float, float>{0.05f, 0.0f}, {0.0f, 1.702f}, {0.07f, 1.702f}}) {
        kt_expert_pool *pool = make_pool(w, KT_EXPERT_WEIGHTS_BF16, 0, 16, 8, KT_NUMA_AUTO, 0, v.first, v.second);
        const Routing r = make_routing(7, 4, kE, 13);
        const std::vector<float> x = random_normal(static_cast<size_t>(7 * kH), 14, 3.0f);
        const std::vector<float> y = run_forward(pool, x, r);
        INFO("limit " << v.first << " alpha " << v.second);
        CHECK(normalized_error(y, emulated_reference(w, x, r, nullptr, true, v.first, v.second)) < kEmulatedBound);
        // The BF16 format's error (bf16 activations), a little above the format table's 0.34%: clamping makes many
        // intermediates equal, so their rounding errors no longer average out (1.06% observed).
        CHECK(normalized_error(y, reference(w, x, r, nullptr, v.first, v.second)) < 0.02);
        kt_expert_pool_free(pool);
    }
}

// kt_packed_matrix_bytes (what kt-bench counts as a decode step's reads) against the bytes a pool packs: the pool's
// gate and up are [I][H], its down [H][I], each expert packed whole (one NUMA group).
TEST_CASE("expert pool api: an expert's packed bytes are kt_packed_matrix_bytes of its matrices") {
    struct Case {
        int32_t type;
        int64_t hidden, inter;
    };
    const Case cases[] = {{KT_TYPE_Q4_K, 512, 256}, {KT_TYPE_Q6_K, 256, 512}, {KT_TYPE_IQ4_XS, 256, 256},
                          {KT_TYPE_Q8_0, 96, 160},  {KT_TYPE_Q5_1, 64, 96},   {KT_TYPE_Q3_K, 256, 256},
                          {KT_TYPE_F16, 96, 40}};
    for (const Case &c : cases) {
        CAPTURE(c.type);
        const ExpertWeights w = make_experts(c.type, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 2, c.hidden, c.inter, 21);
        kt_expert_pool *pool = make_pool(w, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 4, 2, KT_NUMA_OFF);
        kt_expert_pool_info info;
        info.struct_size = sizeof info;
        REQUIRE(kt_expert_pool_get_info(pool, &info) == KT_STATUS_OK);
        uint64_t gate = 0, down = 0;
        REQUIRE(kt_packed_matrix_bytes(c.type, c.inter, c.hidden, &gate) == KT_STATUS_OK);
        REQUIRE(kt_packed_matrix_bytes(c.type, c.hidden, c.inter, &down) == KT_STATUS_OK);
        CHECK(info.expert_bytes == 2 * gate + down);
        CHECK(info.weight_bytes == 2 * info.expert_bytes);
        kt_expert_pool_free(pool);
    }
}

TEST_CASE("expert pool api: weights from a GGUF model layer") {
    const ExpertWeights w = make_experts(KT_TYPE_Q4_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, kE, 256, 256, 15);
    TempDir dir;
    const std::string path = dir.file("experts.gguf");
    gguf::Writer writer;
    writer.add("general.architecture", gguf::Value::str("test"));
    writer.add_tensor_bytes("blk.3.ffn_gate_exps.weight", KT_TYPE_Q4_K, {256, 256, kE}, w.gate);
    writer.add_tensor_bytes("blk.3.ffn_up_exps.weight", KT_TYPE_Q4_K, {256, 256, kE}, w.up);
    writer.add_tensor_bytes("blk.3.ffn_down_exps.weight", KT_TYPE_Q4_K, {256, 256, kE}, w.down);
    REQUIRE(writer.write_file(path).is_ok());
    kt_model *model = nullptr;
    REQUIRE(kt_model_load(path.c_str(), nullptr, &model, nullptr) == KT_STATUS_OK);

    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    p.n_experts = kE;
    p.hidden_size = 256;
    p.intermediate_size = 256;
    p.max_tokens = 8;
    kt_expert_pool *pool = nullptr;
    REQUIRE(kt_expert_pool_create(&p, &pool, nullptr) == KT_STATUS_OK);
    CHECK(kt_expert_pool_load_model(pool, model, 0) == KT_STATUS_NOT_FOUND);
    CHECK(std::string(kt_expert_pool_last_error(pool)).find("blk.0.ffn_gate_exps.weight") != std::string::npos);
    REQUIRE(kt_expert_pool_load_model(pool, model, 3) == KT_STATUS_OK);
    kt_model_free(model);  // the pool keeps its own packed copy

    kt_expert_pool_info info;
    info.struct_size = sizeof info;
    REQUIRE(kt_expert_pool_get_info(pool, &info) == KT_STATUS_OK);
    CHECK(std::string(info.weight_formats) == "gate Q4_K, up Q4_K, down Q4_K");
    CHECK(info.loaded == 1);
    CHECK(info.expert_bytes * kE == info.weight_bytes);

    kt_expert_pool *from_buffers = make_pool(w, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 8, 8);
    const Routing r = make_routing(4, 8, kE, 16);
    const std::vector<float> x = random_normal(static_cast<size_t>(4 * 256), 17);
    const std::vector<float> a = run_forward(pool, x, r), b = run_forward(from_buffers, x, r);
    CHECK(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);

    // A pool of another shape refuses the layer.
    kt_expert_pool *other = nullptr;
    p.hidden_size = 512;
    REQUIRE(kt_expert_pool_create(&p, &other, nullptr) == KT_STATUS_OK);
    REQUIRE(kt_model_load(path.c_str(), nullptr, &model, nullptr) == KT_STATUS_OK);
    CHECK(kt_expert_pool_load_model(other, model, 3) == KT_STATUS_INVALID_ARGUMENT);
    kt_model_free(model);
    kt_expert_pool_free(other);
    kt_expert_pool_free(from_buffers);
    kt_expert_pool_free(pool);
}

TEST_CASE("expert pool api: loading expert by expert equals loading all at once") {
    const ExpertWeights w = make_experts(KT_TYPE_Q4_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, kE, kH, kI, 25);
    kt_expert_pool *whole = make_pool(w, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 16, 8);
    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    p.n_experts = kE;
    p.hidden_size = kH;
    p.intermediate_size = kI;
    p.max_tokens = 16;
    kt_expert_pool *parts = nullptr;
    REQUIRE(kt_expert_pool_create(&p, &parts, nullptr) == KT_STATUS_OK);
    const size_t gate_bytes = w.gate.size() / kE, down_bytes = w.down.size() / kE;
    auto load = [&](int32_t first, int32_t n) {
        kt_expert_weights ew = {sizeof ew, KT_TYPE_Q4_0, KT_TYPE_Q4_0, KT_TYPE_Q4_0, w.gate.data() + first * gate_bytes,
                                w.up.data() + first * gate_bytes, w.down.data() + first * down_bytes};
        return kt_expert_pool_load_experts(parts, &ew, first, n);
    };
    const Routing r = make_routing(9, 8, kE, 26);
    const std::vector<float> x = random_normal(static_cast<size_t>(9 * kH), 27);

    // Only experts 3..4 loaded: the others hold zeros and add nothing.
    REQUIRE(load(3, 2) == KT_STATUS_OK);
    uint8_t only_3_4[kE] = {1, 1, 1, 0, 0, 1, 1, 1};
    std::vector<float> y = run_forward(parts, x, r);
    CHECK(normalized_error(y, emulated_reference(w, x, r, only_3_4, false)) < kEmulatedBound);

    REQUIRE(load(0, 3) == KT_STATUS_OK);
    REQUIRE(load(5, 3) == KT_STATUS_OK);
    y = run_forward(parts, x, r);
    const std::vector<float> all = run_forward(whole, x, r);
    CHECK(std::memcmp(y.data(), all.data(), sizeof(float) * y.size()) == 0);

    CHECK(load(7, 2) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(load(-1, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(load(0, 0) == KT_STATUS_INVALID_ARGUMENT);
    kt_expert_pool_free(parts);
    kt_expert_pool_free(whole);
}

TEST_CASE("expert pool api: bad arguments get a status and a message, never a crash") {
    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    kt_expert_pool *pool = reinterpret_cast<kt_expert_pool *>(0x1);
    kt_error err = {sizeof(kt_error), 0, {0}};
    CHECK(kt_expert_pool_create(&p, &pool, &err) == KT_STATUS_INVALID_ARGUMENT);  // sizes not set
    CHECK(pool == nullptr);
    CHECK(err.status == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("n_experts") != std::string::npos);
    p.n_experts = kE;
    p.hidden_size = kH;
    p.intermediate_size = kI;
    CHECK(kt_expert_pool_create(nullptr, &pool, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_expert_pool_create(&p, nullptr, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    auto rejected = [&](kt_expert_pool_params bad) {
        kt_expert_pool *q = nullptr;
        const kt_status s = kt_expert_pool_create(&bad, &q, nullptr);
        kt_expert_pool_free(q);
        return s == KT_STATUS_INVALID_ARGUMENT;
    };
    kt_expert_pool_params bad = p;
    bad.weight_format = 9;
    CHECK(rejected(bad));
    bad = p;
    bad.weight_format = KT_EXPERT_WEIGHTS_INT4;
    bad.int4_group_size = 48;
    CHECK(rejected(bad));
    bad = p;
    bad.input_type = KT_TYPE_F16;
    CHECK(rejected(bad));
    bad = p;
    bad.numa_policy = KT_NUMA_NODES;  // without a node list
    CHECK(rejected(bad));
    const int32_t no_such_node[] = {99};
    bad.n_numa_nodes = 1;
    bad.numa_nodes = no_such_node;
    CHECK(rejected(bad));
    bad = p;
    bad.max_tokens = 0;
    CHECK(rejected(bad));
    bad = p;
    bad.struct_size = 3;
    CHECK(rejected(bad));
    bad = p;
    bad.swiglu_limit = -1.0f;
    CHECK(rejected(bad));

    bad = p;
    bad.struct_size = offsetof(kt_expert_pool_params, swiglu_limit);  // no kt.h had this size
    CHECK(rejected(bad));
    REQUIRE(kt_expert_pool_create(&p, &pool, nullptr) == KT_STATUS_OK);

    std::vector<float> x(static_cast<size_t>(4 * kH), 1.0f), y(x.size());
    const Routing r = make_routing(4, 2, kE, 18);
    kt_expert_forward a = args_for(x, r, y.data());
    CHECK(kt_expert_pool_forward(pool, &a) == KT_STATUS_MISUSE);  // no weights yet
    CHECK(std::string(kt_expert_pool_last_error(pool)).find("no weights") != std::string::npos);

    const ExpertWeights w = make_experts(KT_TYPE_F32, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, kE, kH, kI, 19);
    kt_expert_weights ew = {sizeof ew, KT_TYPE_F32, KT_TYPE_F32, KT_TYPE_F32, w.gate.data(), w.up.data(), nullptr};
    CHECK(kt_expert_pool_load(pool, &ew) == KT_STATUS_INVALID_ARGUMENT);
    ew.down = w.down.data();
    ew.down_type = 4;  // a removed GGML type id
    CHECK(kt_expert_pool_load(pool, &ew) == KT_STATUS_UNSUPPORTED);
    ew.down_type = KT_TYPE_Q4_K;  // rows of 64 values are not whole 256-value blocks
    CHECK(kt_expert_pool_load(pool, &ew) == KT_STATUS_INVALID_ARGUMENT);
    ew.down_type = KT_TYPE_F32;
    CHECK(kt_expert_pool_load(nullptr, &ew) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_expert_pool_load(pool, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    REQUIRE(kt_expert_pool_load(pool, &ew) == KT_STATUS_OK);
    REQUIRE(kt_expert_pool_forward(pool, &a) == KT_STATUS_OK);

    auto forward_status = [&](kt_expert_forward fa) { return kt_expert_pool_forward(pool, &fa); };
    kt_expert_forward b = a;
    b.n_tokens = 513;  // above max_tokens (512 by default)
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    b = a;
    b.n_tokens = -1;
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    b = a;
    b.top_k = 9;
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    b = a;
    b.top_k = 0;
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    b = a;
    b.input = nullptr;
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    b = a;
    b.output = nullptr;
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    b = a;
    b.ids_type = KT_TYPE_I16;
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    b = a;
    b.reserved0 = 1;
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    b = a;
    b.struct_size = sizeof b - 4;  // ends inside a field
    CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_expert_pool_forward(pool, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    for (int32_t id : {-2, static_cast<int32_t>(kE), 1 << 30}) {
        std::vector<int32_t> ids = r.ids;
        ids[3] = id;
        b = a;
        b.expert_ids = ids.data();
        CHECK(forward_status(b) == KT_STATUS_INVALID_ARGUMENT);
        CHECK(std::string(kt_expert_pool_last_error(pool)).find("out of range") != std::string::npos);
        uint64_t ticket = 0;
        CHECK(kt_expert_pool_submit(pool, &b, &ticket) == KT_STATUS_INVALID_ARGUMENT);  // checked before queuing
    }
    b = a;
    b.n_tokens = 0;  // nothing to do is fine, even with NULL buffers
    b.input = nullptr;
    CHECK(forward_status(b) == KT_STATUS_OK);

    uint8_t mask[kE] = {};
    CHECK(kt_expert_pool_set_mask(pool, mask, kE - 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_expert_pool_set_mask(nullptr, mask, kE) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_expert_pool_wait(nullptr, 0) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_expert_pool_forward(nullptr, &a) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_expert_pool_load_model(pool, nullptr, 0) == KT_STATUS_INVALID_ARGUMENT);
    kt_expert_pool_info info;
    info.struct_size = 2;
    CHECK(kt_expert_pool_get_info(pool, &info) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_expert_pool_get_info(pool, nullptr) == KT_STATUS_INVALID_ARGUMENT);

    kt_expert_pool_free(pool);
    kt_expert_pool_free(nullptr);
    CHECK(std::string(kt_expert_pool_last_error(nullptr)) == "expert pool is NULL");
}

TEST_CASE("expert pool api: ISA cap") {
    const int32_t host = kt_get_host_isa();
    CHECK(host >= KT_ISA_SCALAR);
    CHECK(std::string(kt_isa_name(KT_ISA_AVX512)) == "avx512");
    CHECK(kt_isa_name(7) == nullptr);
    CHECK(kt_set_max_isa(-1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_set_max_isa(4) == KT_STATUS_INVALID_ARGUMENT);
    REQUIRE(kt_set_max_isa(KT_ISA_SCALAR) == KT_STATUS_OK);
    CHECK(kt_get_isa() == KT_ISA_SCALAR);
    {
        Fixture f;  // a pool created under the cap uses scalar kernels
        kt_expert_pool_info info;
        info.struct_size = sizeof info;
        REQUIRE(kt_expert_pool_get_info(f.pool, &info) == KT_STATUS_OK);
        CHECK(info.isa == KT_ISA_SCALAR);
        CHECK(std::string(info.kernels) == "scalar");
    }
    REQUIRE(kt_set_max_isa(KT_ISA_AMX) == KT_STATUS_OK);
    CHECK(kt_get_isa() == host);
}

TEST_CASE("expert pool api: KT_EXPERT_TRACE logs where a pool's calls spent their time when it is freed") {
    std::vector<std::string> lines;
    kt_log_set([](int32_t, const char *msg, void *ud) { static_cast<std::vector<std::string> *>(ud)->push_back(msg); },
               &lines, KT_LOG_INFO);
    // 60 tokens, top 2 of 8 experts: about 15 rows an expert, spread over the trace's row buckets.
    const int64_t tokens = 60;
    const Routing r = make_routing(tokens, 2, kE, 5);
    const std::vector<float> x = random_normal(static_cast<size_t>(tokens * kH), 6);
    std::vector<float> y(static_cast<size_t>(tokens * kH));
    const kt_expert_forward a = args_for(x, r, y.data());
    auto trace_lines = [&] {
        int n = 0;
        for (const std::string &l : lines) n += l.find("expert pool trace: 3 jobs") != std::string::npos;
        return n;
    };
    {
        Fixture untraced;  // the variable is read when a pool is created
        for (int i = 0; i < 3; ++i) REQUIRE(kt_expert_pool_forward(untraced.pool, &a) == KT_STATUS_OK);
    }
    CHECK(trace_lines() == 0);
    setenv("KT_EXPERT_TRACE", "1", 1);
    {
        Fixture traced;
        unsetenv("KT_EXPERT_TRACE");
        for (int i = 0; i < 3; ++i) REQUIRE(kt_expert_pool_forward(traced.pool, &a) == KT_STATUS_OK);
    }
    kt_log_set(nullptr, nullptr, 0);
    REQUIRE(trace_lines() == 1);
    // The routed rows per expert, counted here from the ids (-1: no expert), and bucketed as the trace does.
    std::vector<int> rows(static_cast<size_t>(kE), 0);
    for (int32_t id : r.ids)
        if (id >= 0) ++rows[static_cast<size_t>(id)];
    int active = 0, buckets[4] = {};
    for (int n : rows)
        if (n > 0) {
            ++active;
            ++buckets[n < 8 ? 0 : n < 32 ? 1 : n < 64 ? 2 : 3];
        }
    char expected[160];
    std::snprintf(expected, sizeof expected,
                  "active experts %d.0, of them with < 8 / 8-31 / 32-63 / >= 64 rows %d.0 / %d.0 / %d.0 / %d.0", active,
                  buckets[0], buckets[1], buckets[2], buckets[3]);
    for (const std::string &l : lines)
        if (l.find("expert pool trace") != std::string::npos) {
            for (const char *phase : {"quantize x", "gate/up", "quantize h", "down", "merge"}) CHECK(l.find(phase) != std::string::npos);
            INFO(l);
            CHECK(l.find(expected) != std::string::npos);
        }
}
