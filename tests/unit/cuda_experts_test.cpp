// The CUDA device (src/device over backends/cuda/cuda_experts): on a GPU machine, its expert FFN against the CPU
// stand-in (the same BF16 rounding of weights, x and h: only the order of the sums differs) and the hybrid FFN
// against the all-CPU pool. Without a GPU (the development machines) the device tests say plainly that they were
// skipped, and only the host-side refusal is checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "device/device.h"
#include "kt.h"
#include "moe/expert_pool.h"
#include "moe/weights.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"
#include "runtime/hybrid_ffn.h"
#include "support/test_support.h"

using namespace kt;

namespace {

// Why there is no GPU to test on, or "" when there is one.
std::string no_gpu() {
    if (!cuda::compiled()) return "libkt built without CUDA";
    std::vector<cuda::DeviceInfo> devices;
    std::string why;
    if (!cuda::list_devices(&devices, &why).is_ok() || devices.empty()) return why.empty() ? "no CUDA device" : why;
    return "";
}

std::shared_ptr<device::Device> make_device(device::Kind kind, uint64_t budget) {
    device::DeviceOptions o;
    o.kind = kind;
    o.budget_bytes = budget;
    std::shared_ptr<device::Device> d;
    const Status s = device::create_device(o, &d);
    INFO(s.message());
    REQUIRE(s.is_ok());
    return d;
}

// Random experts in `type`: gate/up [E][I][H], down [E][H][I], as stored.
struct Experts {
    int32_t type;
    int64_t E, H, I;
    std::vector<uint8_t> gate, up, down;
    int64_t row_bytes(int64_t cols) const { return ops::row_bytes(*ops::type_traits(type), cols); }
    ops::MatrixView view(const std::vector<uint8_t> &m, int64_t e, int64_t rows, int64_t cols) const {
        ops::MatrixView v;
        v.type = type;
        v.rows = rows;
        v.cols = cols;
        v.row_bytes = row_bytes(cols);
        v.data = m.data() + e * rows * v.row_bytes;
        v.name = "random";
        return v;
    }
};

Experts random_experts(int32_t type, int64_t E, int64_t H, int64_t I, uint64_t seed) {
    Experts x{type, E, H, I, {}, {}, {}};
    auto fill = [&](std::vector<uint8_t> &dst, int64_t rows, int64_t cols, uint64_t s) {
        const std::vector<float> f = test::random_normal(static_cast<size_t>(rows * cols), s, 0.1f);
        dst.resize(static_cast<size_t>(rows * x.row_bytes(cols)));
        uint64_t written = 0;
        REQUIRE(kt_quantize(type, f.data(), rows, cols, dst.data(), dst.size(), &written) == KT_STATUS_OK);
        REQUIRE(written == dst.size());
    };
    fill(x.gate, E * I, H, seed);
    fill(x.up, E * I, H, seed + 1);
    fill(x.down, E * H, I, seed + 2);
    return x;
}

void upload_all(device::DeviceLayer &layer, const Experts &x, const std::vector<int64_t> &which) {
    for (int64_t e : which) {
        const Status s = layer.upload(e, x.view(x.gate, e, x.I, x.H), x.view(x.up, e, x.I, x.H), x.view(x.down, e, x.H, x.I));
        INFO(s.message());
        REQUIRE(s.is_ok());
    }
}

// A pool of all of x's experts on the CPU, for calls of up to T tokens of k experts.
std::unique_ptr<moe::ExpertPool> cpu_pool(const Experts &x, int64_t T, int32_t k) {
    moe::ExpertPoolConfig c;
    c.n_experts = x.E;
    c.hidden = x.H;
    c.intermediate = x.I;
    c.max_tokens = T;
    c.max_top_k = k;
    c.n_threads = 4;
    std::unique_ptr<moe::ExpertPool> pool;
    REQUIRE(moe::ExpertPool::create(c, &pool).is_ok());
    moe::MatrixSource g, u, d;
    REQUIRE(moe::make_source(x.type, x.gate.data(), x.E * x.I, x.H, &g).is_ok());
    REQUIRE(moe::make_source(x.type, x.up.data(), x.E * x.I, x.H, &u).is_ok());
    REQUIRE(moe::make_source(x.type, x.down.data(), x.E * x.H, x.I, &d).is_ok());
    REQUIRE(pool->load(g, u, d).is_ok());
    return pool;
}

// One call of T tokens: k experts per token spread by `stride`, weights 0.25, a random input, and what the
// all-CPU pool computes for it.
struct Call {
    std::vector<int32_t> ids;
    std::vector<float> weights, input, expected;
};

Call reference_call(moe::ExpertPool &all_cpu, const Experts &x, int64_t T, int32_t k, int64_t stride, uint64_t seed) {
    Call call;
    call.ids.resize(static_cast<size_t>(T * k));
    call.weights.assign(call.ids.size(), 0.25f);
    for (size_t i = 0; i < call.ids.size(); ++i)
        call.ids[i] = static_cast<int32_t>((static_cast<int64_t>(i) * stride + static_cast<int64_t>(i) / k) % x.E);
    call.input = test::random_normal(static_cast<size_t>(T * x.H), seed);
    call.expected.resize(call.input.size());
    moe::ForwardArgs a;
    a.n_tokens = T;
    a.top_k = k;
    a.input = call.input.data();
    a.ids = call.ids.data();
    a.weights = call.weights.data();
    a.output = call.expected.data();
    REQUIRE(all_cpu.forward(a).is_ok());
    return call;
}

// |got - expected| / |expected| over the whole output.
double relative_rms(const std::vector<float> &got, const std::vector<float> &expected) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        num += (got[i] - expected[i]) * static_cast<double>(got[i] - expected[i]);
        den += static_cast<double>(expected[i]) * expected[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

TEST_CASE("cuda experts: without a GPU the CUDA device refuses plainly") {
    const std::string why = no_gpu();
    if (why.empty()) {
        WARN("a CUDA device is present: the refusal is not exercised here");
        return;
    }
    device::DeviceOptions o;
    o.kind = device::Kind::kCuda;
    o.budget_bytes = 1ull << 30;
    std::shared_ptr<device::Device> d;
    const Status s = device::create_device(o, &d);
    CHECK(s.code() == KT_STATUS_UNSUPPORTED);
    CHECK(!s.message().empty());
    WARN("skipped: no CUDA device (" << why << "); the refusal says: " << s.message());
}

TEST_CASE("cuda experts: the GPU computes the resident experts as the CPU stand-in does") {
    const std::string why = no_gpu();
    if (!why.empty()) {
        WARN("skipped: no CUDA device (" << why << ")");
        return;
    }
    // Q8_0 and Q4_0 are dequantized on the GPU, Q4_K on the host first; awkward H and I (not multiples of 64).
    for (int32_t type : {KT_TYPE_BF16, KT_TYPE_F32, KT_TYPE_Q8_0, KT_TYPE_Q4_0, KT_TYPE_Q4_K}) {
        const int64_t E = 6, H = type == KT_TYPE_Q4_K ? 256 : 96, I = type == KT_TYPE_Q4_K ? 256 : 160;
        const Experts x = random_experts(type, E, H, I, 50);
        device::LayerShape shape{E, H, I, 200, 4};
        auto gpu = make_device(device::Kind::kCuda, 1ull << 30);
        auto cpu = make_device(device::Kind::kCpuStandIn, 1ull << 30);
        std::unique_ptr<device::DeviceLayer> gl, cl;
        REQUIRE(gpu->create_layer(shape, &gl).is_ok());
        REQUIRE(cpu->create_layer(shape, &cl).is_ok());
        const std::vector<int64_t> resident = {0, 3, 4};
        upload_all(*gl, x, resident);
        upload_all(*cl, x, resident);
        CHECK(gpu->used_bytes() == cpu->used_bytes());
        for (int64_t T : {1, 7, 33, 200}) {
            std::vector<int32_t> ids(static_cast<size_t>(T * 4));
            std::vector<float> w(ids.size());
            for (size_t i = 0; i < ids.size(); ++i) {
                ids[i] = static_cast<int32_t>((i * 7 + i / 4) % (E + 1)) - 1;  // -1 included
                w[i] = 0.1f + 0.05f * static_cast<float>(i % 5);
            }
            const std::vector<float> in = test::random_normal(static_cast<size_t>(T * H), 9);
            std::vector<float> yg(in.size(), 7.0f), yc(in.size(), -7.0f);
            device::ExpertWork wg{T, 4, in.data(), ids.data(), w.data(), yg.data()}, wc = wg;
            wc.output = yc.data();
            device::Event eg, ec;
            REQUIRE(gl->submit(wg, &eg).is_ok());
            REQUIRE(cl->submit(wc, &ec).is_ok());
            device::Interval when;
            REQUIRE(gl->wait(eg, &when).is_ok());
            REQUIRE(cl->wait(ec, nullptr).is_ok());
            INFO(ops::type_traits(type)->name << " T " << T << " device " << when.ns() << " ns");
            // Same BF16 inputs to every product; cuBLAS sums in another order (and h may round to the other BF16
            // neighbour where the f32 sums differ), so: f32-accumulation-level agreement.
            CHECK(relative_rms(yg, yc) < 1e-3);
        }
    }
}

TEST_CASE("cuda experts: the hybrid FFN on the GPU equals the all-CPU pool") {
    const std::string why = no_gpu();
    if (!why.empty()) {
        WARN("skipped: no CUDA device (" << why << ")");
        return;
    }
    const int64_t E = 16, H = 256, I = 128, T = 64;
    const int32_t k = 4;
    const Experts x = random_experts(KT_TYPE_BF16, E, H, I, 70);
    auto all_cpu = cpu_pool(x, T, k);
    auto gpu = make_device(device::Kind::kCuda, 1ull << 30);
    std::unique_ptr<device::DeviceLayer> layer;
    REQUIRE(gpu->create_layer(device::LayerShape{E, H, I, T, k}, &layer).is_ok());
    upload_all(*layer, x, {0, 1, 2, 3, 8, 9});
    runtime::HybridFfn hybrid(cpu_pool(x, T, k), gpu, std::move(layer), T);
    REQUIRE(hybrid.init().is_ok());
    const Call call = reference_call(*all_cpu, x, T, k, 5, 2);
    std::vector<float> got(call.expected.size());
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    REQUIRE(hybrid.forward(call.input.data(), T, call.ids.data(), call.weights.data(), k, got.data(), *unused).is_ok());
    CHECK(relative_rms(got, call.expected) < 1e-3);
    const runtime::HybridStats s = hybrid.stats();
    WARN("hybrid on the GPU: device " << s.device_ns << " ns, cpu " << s.cpu_ns << " ns, overlap " << s.overlap_ns << " ns");
}

TEST_CASE("cuda experts: above the prefill threshold the GPU computes the whole layer from streamed experts") {
    const std::string why = no_gpu();
    if (!why.empty()) {
        WARN("skipped: no CUDA device (" << why << ")");
        return;
    }
    // Q8_0 experts: the GPU converts them itself, as it would a real model's streamed layer.
    const int64_t E = 16, H = 256, I = 128, T = 64;
    const int32_t k = 4;
    const Experts x = random_experts(KT_TYPE_Q8_0, E, H, I, 90);
    auto all_cpu = cpu_pool(x, T, k);
    const device::LayerShape shape{E, H, I, T, k};
    auto gpu = make_device(device::Kind::kCuda, 1ull << 30);
    std::unique_ptr<device::DeviceLayer> layer, stream_layer;
    REQUIRE(gpu->create_layer(shape, &layer).is_ok());
    REQUIRE(gpu->create_layer(shape, &stream_layer).is_ok());
    upload_all(*layer, x, {0, 5});
    runtime::HybridFfn hybrid(cpu_pool(x, T, k), gpu, std::move(layer), T, nullptr, 0);
    REQUIRE(hybrid.init().is_ok());
    auto stack = [&](const std::vector<uint8_t> &m, int64_t rows, int64_t cols) {
        ops::MatrixStack s;
        s.first = x.view(m, 0, rows, cols);
        s.count = E;
        s.stride = rows * s.first.row_bytes;
        return s;
    };
    hybrid.set_sources(stack(x.gate, I, H), stack(x.up, I, H), stack(x.down, H, I));
    REQUIRE(hybrid.set_streaming(std::make_shared<runtime::StreamBuffer>(gpu, std::move(stream_layer)), 16).is_ok());

    const Call call = reference_call(*all_cpu, x, T, k, 7, 3);
    std::vector<float> got(call.expected.size());
    std::unique_ptr<ThreadPool> unused;
    REQUIRE(ThreadPool::create(ThreadPoolOptions{}, &unused).is_ok());
    for (int round = 0; round < 2; ++round) {  // the second finds the layer in the buffer
        REQUIRE(hybrid.forward(call.input.data(), T, call.ids.data(), call.weights.data(), k, got.data(), *unused).is_ok());
        // The CPU computes Q8_0 x int8 activations, the GPU BF16 x BF16: both within ~1e-2 of the exact result.
        CHECK(relative_rms(got, call.expected) < 2e-2);
    }
    const runtime::HybridStats s = hybrid.stats();
    CHECK(s.streamed_calls == 2);
    CHECK(s.stream_uploads == 1);
    CHECK(s.cpu_rows == 0);
    WARN("streamed on the GPU: upload " << s.stream_upload_ns << " ns for " << s.stream_bytes << " bytes, device "
                                        << s.device_ns << " ns for 2 calls");
}

TEST_CASE("cuda experts: matrices of several upload slots arrive whole, in every upload path, beside a call in flight") {
    const std::string why = no_gpu();
    if (!why.empty()) {
        WARN("skipped: no CUDA device (" << why << ")");
        return;
    }
    // H = 4096, I = 1024: a gate matrix is 16.8 MB as F32, 8.4 MB as BF16 (and as Q4_K rounded on the host), 4.5 MB
    // as Q8_0, each more than one kUploadSlotBytes slot, so the two slots alternate and the last chunk is partial.
    const int64_t E = 2, H = 4096, I = 1024, T = 8;
    for (int32_t type : {KT_TYPE_F32, KT_TYPE_BF16, KT_TYPE_Q8_0, KT_TYPE_Q4_K}) {
        const Experts x = random_experts(type, E, H, I, 110);
        // What passes through a slot: the rows as stored, or as BF16 for a type the host converts.
        const int64_t slot_row = type == KT_TYPE_Q4_K ? 2 * H : x.row_bytes(H);
        REQUIRE(static_cast<uint64_t>(I * slot_row) > device::kUploadSlotBytes);
        const device::LayerShape shape{E, H, I, T, 2};
        auto gpu = make_device(device::Kind::kCuda, 1ull << 30);
        auto cpu = make_device(device::Kind::kCpuStandIn, 1ull << 30);
        std::unique_ptr<device::DeviceLayer> busy, gl, cl;
        REQUIRE(gpu->create_layer(shape, &busy).is_ok());
        REQUIRE(gpu->create_layer(shape, &gl).is_ok());
        REQUIRE(cpu->create_layer(shape, &cl).is_ok());
        upload_all(*busy, x, {0});
        upload_all(*cl, x, {0, 1});

        std::vector<int32_t> ids(static_cast<size_t>(T * 2));
        std::vector<float> w(ids.size(), 0.5f);
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 2);
        const std::vector<float> in = test::random_normal(static_cast<size_t>(T * H), 13);
        std::vector<float> y_busy(in.size()), y_gpu(in.size()), y_cpu(in.size());
        // A call on one layer in flight while the other layer uploads (on its own stream, without waiting for the
        // call): both must come out right.
        device::ExpertWork work{T, 2, in.data(), ids.data(), w.data(), y_busy.data()};
        device::Event in_flight;
        REQUIRE(busy->submit(work, &in_flight).is_ok());
        upload_all(*gl, x, {0, 1});
        REQUIRE(busy->wait(in_flight, nullptr).is_ok());

        device::Event eg, ec;
        work.output = y_gpu.data();
        REQUIRE(gl->submit(work, &eg).is_ok());
        device::ExpertWork wc = work;
        wc.output = y_cpu.data();
        REQUIRE(cl->submit(wc, &ec).is_ok());
        REQUIRE(gl->wait(eg, nullptr).is_ok());
        REQUIRE(cl->wait(ec, nullptr).is_ok());
        INFO(ops::type_traits(type)->name);
        CHECK(relative_rms(y_gpu, y_cpu) < 1e-3);
        // Expert 0 alone on the busy layer: half of every token's weight, the same expert's rows.
        std::vector<float> y_expert0(in.size());
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = ids[i] == 0 ? 0 : -1;
        wc.output = y_expert0.data();
        REQUIRE(cl->submit(wc, &ec).is_ok());
        REQUIRE(cl->wait(ec, nullptr).is_ok());
        CHECK(relative_rms(y_busy, y_expert0) < 1e-3);
        CHECK(gpu->used_bytes() == cpu->used_bytes() + device::expert_bytes(H, I));  // the busy layer's expert
    }
}
