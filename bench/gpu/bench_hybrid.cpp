// kt-hybrid-bench: one MoE layer split between the CPU expert pool and a device (CUDA or the CPU stand-in).
//
// For each token count it times, per call (median of --iters after --warmup):
//   cpu      every expert on the CPU pool
//   device   every routed expert on the device (all experts resident)
//   hybrid   --resident experts on the device, the rest on the CPU, at once
// and for the hybrid the device's and the CPU's busy time and how much of the shorter one was hidden behind the
// other (the intersection of their intervals). Routing: uniform random top-k, or --skew s (expert e drawn with
// weight 1/(e+1)^s, so the low ids are the hot ones that a placement by counts would put on the device).
// Then, for the largest token count, a long prompt's pass over --stream-layers layers above the prefill threshold
// (every layer streamed through the stream buffer) with one slot and with two, the caller spending --gap-ms
// between layers as the next layer's attention would: with two slots the next layer's experts go up meanwhile.
//
//   kt-hybrid-bench --device cuda --experts 128 --hidden 2048 --inter 768 --top-k 8 --resident 32 --tokens 1,8,128,512
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "device/device.h"
#include "kt.h"
#include "moe/expert_pool.h"
#include "moe/weights.h"
#include "ops/types.h"
#include "runtime/hybrid_ffn.h"

using namespace kt;

namespace {

struct Options {
    std::string device = "cuda";
    int64_t experts = 128, hidden = 2048, inter = 768, resident = 32;
    int32_t top_k = 8, threads = 0;
    std::vector<int64_t> tokens = {1, 8, 128, 512};
    int iters = 10, warmup = 2;
    double skew = 0.0;
    std::string type = "Q8_0";
    int64_t stream_layers = 4;
    double gap_ms = 5.0;
};

[[noreturn]] void usage(const char *why) {
    std::fprintf(stderr,
                 "kt-hybrid-bench: %s\nusage: kt-hybrid-bench [--device cuda|standin] [--experts N] [--hidden H] "
                 "[--inter I] [--top-k K] [--resident N] [--tokens a,b,..] [--iters N] [--warmup N] [--threads N] "
                 "[--skew S] [--type Q8_0|Q4_0|BF16] [--stream-layers N (0: none)] [--gap-ms MS]\n",
                 why);
    std::exit(2);
}

Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char * {
            if (i + 1 >= argc) usage(("missing value after " + a).c_str());
            return argv[++i];
        };
        if (a == "--device") o.device = next();
        else if (a == "--experts") o.experts = std::atoll(next());
        else if (a == "--hidden") o.hidden = std::atoll(next());
        else if (a == "--inter") o.inter = std::atoll(next());
        else if (a == "--top-k") o.top_k = std::atoi(next());
        else if (a == "--resident") o.resident = std::atoll(next());
        else if (a == "--iters") o.iters = std::atoi(next());
        else if (a == "--warmup") o.warmup = std::atoi(next());
        else if (a == "--threads") o.threads = std::atoi(next());
        else if (a == "--skew") o.skew = std::atof(next());
        else if (a == "--type") o.type = next();
        else if (a == "--stream-layers") o.stream_layers = std::atoll(next());
        else if (a == "--gap-ms") o.gap_ms = std::atof(next());
        else if (a == "--tokens") {
            o.tokens.clear();
            std::string list = next();
            for (size_t p = 0; p < list.size();) {
                const size_t q = list.find(',', p);
                o.tokens.push_back(std::atoll(list.substr(p, q - p).c_str()));
                p = q == std::string::npos ? list.size() : q + 1;
            }
        } else usage(("unknown option " + a).c_str());
    }
    if (o.resident < 0 || o.resident > o.experts || o.top_k <= 0 || o.top_k > o.experts || o.iters <= 0 ||
        o.stream_layers < 0 || o.gap_ms < 0)
        usage("bad sizes");
    return o;
}

void check(const Status &s, const char *what) {
    if (!s.is_ok()) {
        std::fprintf(stderr, "kt-hybrid-bench: %s: %s\n", what, s.message().c_str());
        std::exit(1);
    }
}

moe::ExpertPoolConfig pool_config(const Options &o, int64_t max_tokens, int32_t threads) {
    moe::ExpertPoolConfig c;
    c.n_experts = o.experts;
    c.hidden = o.hidden;
    c.intermediate = o.inter;
    c.max_tokens = max_tokens;
    c.max_top_k = o.top_k;
    c.n_threads = threads;
    return c;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// A long prompt's chunk of T = max_t tokens through `layers` layers, each above the prefill threshold (so
// streamed), with the caller busy for gap_ms after each (the next layer's attention), with a stream buffer of one
// slot and then of two. Every layer streams the same weights; what differs is whose experts a slot holds.
template <typename View>
void stream_pass(const Options &o, const std::shared_ptr<device::Device> &dev, const device::LayerShape &shape,
                 int64_t max_t, const std::vector<uint8_t> &gate, const std::vector<uint8_t> &up,
                 const std::vector<uint8_t> &down, View view) {
    const int64_t E = o.experts, H = o.hidden, I = o.inter, T = max_t;
    auto stack = [&](const std::vector<uint8_t> &m, int64_t rows, int64_t cols) {
        ops::MatrixStack s;
        s.first = view(m, 0, rows, cols);
        s.count = E;
        s.stride = rows * s.first.row_bytes;
        return s;
    };
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(E - 1));
    std::vector<int32_t> ids(static_cast<size_t>(T * o.top_k));
    for (int32_t &id : ids) id = pick(rng);
    std::vector<float> w(ids.size(), 1.0f / static_cast<float>(o.top_k)), x(static_cast<size_t>(T * H), 0.5f),
        y(x.size());
    std::unique_ptr<ThreadPool> unused;
    check(ThreadPool::create(ThreadPoolOptions{}, &unused), "thread pool");
    std::printf("\nstreamed pass: %lld layers of %lld tokens above the prefill threshold, %.1f ms of the caller's own "
                "work after each\n%6s %12s %12s %14s %12s %12s\n",
                static_cast<long long>(o.stream_layers), static_cast<long long>(T), o.gap_ms, "slots", "pass_ms",
                "uploads", "uploaded_ahead", "ahead_ms", "waited_ms");
    for (int slots : {1, 2}) {
        std::vector<std::unique_ptr<device::DeviceLayer>> buffers(static_cast<size_t>(slots));
        for (std::unique_ptr<device::DeviceLayer> &b : buffers) check(dev->create_layer(shape, &b), "stream slot");
        auto buffer = std::make_shared<runtime::StreamBuffer>(dev, std::move(buffers));
        std::vector<std::unique_ptr<runtime::HybridFfn>> layers;
        for (int64_t l = 0; l < o.stream_layers; ++l) {
            // A pool that is never loaded: a streamed call computes nothing on the CPU.
            std::unique_ptr<moe::ExpertPool> pool;
            check(moe::ExpertPool::create(pool_config(o, T, 1), &pool), "pool");
            std::unique_ptr<device::DeviceLayer> none;
            check(dev->create_layer(shape, &none), "device layer");
            layers.push_back(std::make_unique<runtime::HybridFfn>(std::move(pool), dev, std::move(none), T, nullptr, l));
            check(layers.back()->init(), "hybrid");
            layers.back()->set_sources(stack(gate, I, H), stack(up, I, H), stack(down, H, I));
            check(layers.back()->set_streaming(buffer, 1), "streaming");
        }
        std::vector<double> pass_ms;
        for (int it = 0; it < o.warmup + o.iters; ++it) {
            const int64_t t0 = monotonic_ns();
            for (const std::unique_ptr<runtime::HybridFfn> &layer : layers) {
                check(layer->forward(x.data(), T, ids.data(), w.data(), o.top_k, y.data(), *unused), "streamed forward");
                const int64_t until = monotonic_ns() + static_cast<int64_t>(o.gap_ms * 1e6);
                while (monotonic_ns() < until) {
                }
            }
            if (it >= o.warmup) pass_ms.push_back(static_cast<double>(monotonic_ns() - t0) * 1e-6);
        }
        runtime::HybridStats sum;
        for (const std::unique_ptr<runtime::HybridFfn> &layer : layers) sum.add(layer->stats());
        const double passes = static_cast<double>(o.warmup + o.iters);
        std::printf("%6d %12.3f %12.2f %14.2f %12.3f %12.3f\n", slots, median(pass_ms),
                    static_cast<double>(sum.stream_uploads) / passes, static_cast<double>(sum.stream_ahead_calls) / passes,
                    static_cast<double>(sum.stream_ahead_ns) * 1e-6 / passes,
                    static_cast<double>(sum.stream_ahead_wait_ns) * 1e-6 / passes);
    }
    std::printf("columns: pass_ms = median time of the pass, gaps included; the rest per pass: uploads on the calling "
                "thread, calls that found their layer uploaded ahead, those uploads' time, and the calls' wait for them\n");
}

}  // namespace

int main(int argc, char **argv) {
    const Options o = parse(argc, argv);
    const ops::TypeTraits *tt = ops::type_traits_by_name(o.type);
    if (!tt) usage("unknown --type");
    const int32_t type = tt->type;
    const int64_t E = o.experts, H = o.hidden, I = o.inter;
    const int64_t max_t = *std::max_element(o.tokens.begin(), o.tokens.end());

    // The device first: without one there is nothing to measure, and no reason to make the weights.
    device::DeviceOptions dopt;
    dopt.kind = o.device == "standin" ? device::Kind::kCpuStandIn : device::Kind::kCuda;
    const device::LayerShape shape{E, H, I, max_t, o.top_k};
    // The all-resident layer, the hybrid's, and the stream buffer's two slots.
    dopt.budget_bytes = device::workspace_bytes(shape) + 4 * static_cast<uint64_t>(E) * device::expert_bytes(H, I);
    std::shared_ptr<device::Device> dev;
    check(device::create_device(dopt, &dev), "device");

    // Weights: random values (a sum of two uniforms: cheap, bell-shaped, never constant) quantized once.
    std::printf("kt-hybrid-bench: %lld experts of %lld x %lld (%s), top-%d, %lld resident on %s\n", static_cast<long long>(E),
                static_cast<long long>(H), static_cast<long long>(I), o.type.c_str(), o.top_k,
                static_cast<long long>(o.resident), o.device.c_str());
    std::mt19937 rng(1);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    auto next_uniform = [&]() {  // xorshift64*: [0, 1)
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        return static_cast<float>((state * 0x2545F4914F6CDD1Dull) >> 40) * (1.0f / 16777216.0f);
    };
    auto make = [&](int64_t rows, int64_t cols) {
        std::vector<float> f(static_cast<size_t>(rows * cols));
        for (float &v : f) v = 0.05f * (next_uniform() + next_uniform() - 1.0f);
        std::vector<uint8_t> q(static_cast<size_t>(rows * ops::row_bytes(*tt, cols)));
        uint64_t n = 0;
        if (kt_quantize(type, f.data(), rows, cols, q.data(), q.size(), &n) != KT_STATUS_OK) usage("cannot quantize to --type");
        return q;
    };
    const std::vector<uint8_t> gate = make(E * I, H), up = make(E * I, H), down = make(E * H, I);
    auto view = [&](const std::vector<uint8_t> &m, int64_t e, int64_t rows, int64_t cols) {
        ops::MatrixView v;
        v.type = type;
        v.rows = rows;
        v.cols = cols;
        v.row_bytes = ops::row_bytes(*tt, cols);
        v.data = m.data() + e * rows * v.row_bytes;
        v.name = "bench";
        return v;
    };
    auto make_pool = [&]() {
        std::unique_ptr<moe::ExpertPool> pool;
        check(moe::ExpertPool::create(pool_config(o, max_t, o.threads), &pool), "pool");
        moe::MatrixSource g, u, d;
        check(moe::make_source(type, gate.data(), E * I, H, &g), "source");
        check(moe::make_source(type, up.data(), E * I, H, &u), "source");
        check(moe::make_source(type, down.data(), E * H, I, &d), "source");
        check(pool->load(g, u, d), "pool load");
        return pool;
    };
    std::printf("device: %s, budget %.1f MiB (work buffer %.1f MiB, %.2f MiB per expert)\n", dev->name().c_str(),
                static_cast<double>(dopt.budget_bytes) / 1048576.0, static_cast<double>(device::workspace_bytes(shape)) / 1048576.0,
                static_cast<double>(device::expert_bytes(H, I)) / 1048576.0);

    auto cpu_only = make_pool();
    std::unique_ptr<device::DeviceLayer> all_layer, part_layer;
    check(dev->create_layer(shape, &all_layer), "device layer");
    check(dev->create_layer(shape, &part_layer), "device layer");
    // The whole layer uploaded: what a call above the prefill threshold pays first (runtime/hybrid_ffn.h's stream
    // buffer), timed on the second pass, when the device memory is allocated already, as it is for every layer the
    // stream buffer takes after the first.
    double upload_ms = 0;
    for (int pass = 0; pass < 2; ++pass) {
        const int64_t t0 = monotonic_ns();
        for (int64_t e = 0; e < E; ++e)
            check(all_layer->upload(e, view(gate, e, I, H), view(up, e, I, H), view(down, e, H, I)), "upload");
        upload_ms = static_cast<double>(monotonic_ns() - t0) * 1e-6;
    }
    const double layer_mb = static_cast<double>(gate.size() + up.size() + down.size()) / 1e6;
    std::printf("layer upload (as stored, %s): %.1f MB in %.3f ms, %.2f GB/s\n", o.type.c_str(), layer_mb, upload_ms,
                layer_mb / upload_ms);
    for (int64_t e = 0; e < o.resident && e < E; ++e)
        check(part_layer->upload(e, view(gate, e, I, H), view(up, e, I, H), view(down, e, H, I)), "upload");
    runtime::HybridFfn hybrid(make_pool(), dev, std::move(part_layer), max_t);
    check(hybrid.init(), "hybrid");
    std::unique_ptr<ThreadPool> unused;
    check(ThreadPool::create(ThreadPoolOptions{}, &unused), "thread pool");

    std::printf("%7s %11s %11s %11s %9s %11s %9s | %11s %11s %9s %7s\n", "tokens", "cpu_ms", "device_ms", "hybrid_ms",
                "speedup", "stream_ms", "stream_x", "h.dev_ms", "h.cpu_ms", "hidden_%", "dev_rows%");
    for (int64_t T : o.tokens) {
        // Routing: k distinct experts per token, uniform or skewed to low ids.
        std::vector<double> p(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) p[static_cast<size_t>(e)] = 1.0 / std::pow(static_cast<double>(e + 1), o.skew);
        std::vector<int32_t> ids(static_cast<size_t>(T * o.top_k));
        std::vector<float> w(ids.size(), 1.0f / static_cast<float>(o.top_k));
        for (int64_t t = 0; t < T; ++t) {
            std::vector<double> left = p;
            for (int32_t j = 0; j < o.top_k; ++j) {
                std::discrete_distribution<int32_t> pick(left.begin(), left.end());
                const int32_t e = pick(rng);
                ids[static_cast<size_t>(t * o.top_k + j)] = e;
                left[static_cast<size_t>(e)] = 0.0;
            }
        }
        std::vector<float> x(static_cast<size_t>(T * H));
        for (float &v : x) v = next_uniform() + next_uniform() - 1.0f;
        std::vector<float> y(x.size());
        std::vector<double> t_cpu, t_dev, t_hyb;
        const runtime::HybridStats before = hybrid.stats();
        for (int it = 0; it < o.warmup + o.iters; ++it) {
            moe::ForwardArgs a;
            a.n_tokens = T;
            a.top_k = o.top_k;
            a.input = x.data();
            a.ids = ids.data();
            a.weights = w.data();
            a.output = y.data();
            int64_t t0 = monotonic_ns();
            check(cpu_only->forward(a), "cpu forward");
            int64_t t1 = monotonic_ns();
            device::ExpertWork work{T, o.top_k, x.data(), ids.data(), w.data(), y.data()};
            device::Event ev;
            check(all_layer->submit(work, &ev), "device submit");
            check(all_layer->wait(ev, nullptr), "device wait");
            int64_t t2 = monotonic_ns();
            check(hybrid.forward(x.data(), T, ids.data(), w.data(), o.top_k, y.data(), *unused), "hybrid forward");
            int64_t t3 = monotonic_ns();
            if (it < o.warmup) continue;
            t_cpu.push_back(static_cast<double>(t1 - t0) * 1e-6);
            t_dev.push_back(static_cast<double>(t2 - t1) * 1e-6);
            t_hyb.push_back(static_cast<double>(t3 - t2) * 1e-6);
        }
        const runtime::HybridStats after = hybrid.stats();
        const double calls = static_cast<double>(after.calls - before.calls);
        const double hd = static_cast<double>(after.device_ns - before.device_ns) * 1e-6 / calls;
        const double hc = static_cast<double>(after.cpu_ns - before.cpu_ns) * 1e-6 / calls;
        const double ov = static_cast<double>(after.overlap_ns - before.overlap_ns) * 1e-6 / calls;
        const double rows = static_cast<double>(after.device_rows - before.device_rows + after.cpu_rows - before.cpu_rows);
        const double dev_share = rows > 0 ? 100.0 * static_cast<double>(after.device_rows - before.device_rows) / rows : 0.0;
        const double shorter = std::min(hd, hc);
        const double stream_ms = upload_ms + median(t_dev);
        std::printf("%7lld %11.3f %11.3f %11.3f %8.2fx %11.3f %8.2fx | %11.3f %11.3f %8.1f%% %6.1f%%\n",
                    static_cast<long long>(T), median(t_cpu), median(t_dev), median(t_hyb), median(t_cpu) / median(t_hyb),
                    stream_ms, median(t_cpu) / stream_ms, hd, hc, shorter > 0 ? 100.0 * ov / shorter : 0.0, dev_share);
    }
    std::printf("columns: medians per call; stream_ms = the layer's upload + device_ms, what a call above the prefill "
                "threshold costs (stream_x > 1: streaming beats the CPU at this many tokens); h.* = the hybrid's device / "
                "CPU busy time per call (warm-up included), hidden_%% = overlap / the shorter of the two\n");
    if (o.stream_layers > 0) stream_pass(o, dev, shape, max_t, gate, up, down, view);
    return 0;
}
