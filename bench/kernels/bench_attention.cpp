// bench_attention: prefill attention over the KV cache alone (runtime::KvCache::attend, the part of kt-bench's
// "attention" column that is neither a projection nor RoPE), with each way of computing its products
// (cpu::Products), on the shapes of one layer of a model, against the roofline measured in the same run.
//
//   bench_attention [-p 512,4096] [-ub 512] [-r 5] [-t THREADS] [--heads 32,4] [--dims 128,128] [-ctk f16,bf16]
//
// A test is one layer's prefill of -p tokens in steps of -ub (each step's rows attend to every cached position
// of the sequence before them, causally within the step), on an empty cache each repetition. The products are
// run in turn within each repetition (f32, bf16, bf16x3, f32, ...) so that a load change hits all of them alike;
// each is reported by its median repetition. Work: 2 flops per multiply-add of Q·Kᵀ and P·V over the visible
// positions (the masked half of each step's last block is not counted), printed as GFLOP/s next to the f32 FMA
// and AMX bf16 peaks of the roofline (and the load average before and after).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/roofline.h"
#include "core/thread_pool.h"
#include "runtime/kv_cache.h"

namespace {

std::vector<int64_t> parse_list(const char *text) {
    std::vector<int64_t> out;
    for (const char *p = text; *p;) {
        char *end = nullptr;
        const long long v = std::strtoll(p, &end, 10);
        if (end == p) return {};
        out.push_back(v);
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return {};
    }
    return out;
}

double load_average() {
    double l = 0;
    if (FILE *f = std::fopen("/proc/loadavg", "r")) {
        if (std::fscanf(f, "%lf", &l) != 1) l = 0;
        std::fclose(f);
    }
    return l;
}

struct Options {
    std::vector<int64_t> prompts = {512, 4096};
    int64_t ubatch = 512, reps = 5, threads = 2, heads = 32, heads_kv = 4, dk = 128, dv = 128;
    std::vector<int32_t> types = {KT_TYPE_F16, KT_TYPE_BF16};
};

// One repetition: seconds for the whole prefill of one layer.
double run_once(const Options &o, int64_t n_prompt, int32_t type, kt::cpu::Products products, kt::ThreadPool &pool,
                const std::vector<float> &q, const std::vector<float> &k, const std::vector<float> &v,
                std::vector<float> &out) {
    kt::model::HParams hp;
    hp.n_layer = 1;
    hp.n_head = o.heads;
    hp.n_head_kv = o.heads_kv;
    hp.head_dim_k = o.dk;
    hp.head_dim_v = o.dv;
    hp.kq_scale = 1.0f / std::sqrt(static_cast<float>(o.dk));
    kt::runtime::KvCache cache;
    kt::runtime::KvCache::Config config;
    config.type = type;
    config.block_positions = 256;
    config.n_blocks = (n_prompt + 255) / 256;
    config.max_positions = n_prompt;
    config.n_threads = pool.size();
    config.products = static_cast<int32_t>(products);
    if (!kt::runtime::KvCache::create(hp, config, &cache).is_ok()) {
        std::fprintf(stderr, "bench_attention: cannot create the cache\n");
        std::exit(1);
    }
    std::vector<int32_t> table(static_cast<size_t>(config.n_blocks));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t p0 = 0; p0 < n_prompt; p0 += o.ubatch) {
        const int64_t n = std::min(o.ubatch, n_prompt - p0);
        const kt::runtime::KvCache::Segment seg{table.data(), p0, 0, n};
        cache.attend(0, &seg, 1, q.data() + p0 * o.heads * o.dk, k.data() + p0 * o.heads_kv * o.dk,
                     v.data() + p0 * o.heads_kv * o.dv, /*window=*/0, /*sinks=*/nullptr, out.data(), pool);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        const char *v = argv[i + 1];
        std::vector<int64_t> list = parse_list(v);
        if (a == "-p" && !list.empty()) o.prompts = list;
        else if (a == "-ub" && list.size() == 1) o.ubatch = list[0];
        else if (a == "-r" && list.size() == 1) o.reps = list[0];
        else if (a == "-t" && list.size() == 1) o.threads = list[0];
        else if (a == "--heads" && list.size() == 2) o.heads = list[0], o.heads_kv = list[1];
        else if (a == "--dims" && list.size() == 2) o.dk = list[0], o.dv = list[1];
        else if (a == "-ctk") {
            o.types.clear();
            for (std::string rest = v; !rest.empty();) {
                const size_t comma = rest.find(',');
                const std::string name = rest.substr(0, comma);
                rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
                o.types.push_back(name == "f16" ? KT_TYPE_F16 : name == "bf16" ? KT_TYPE_BF16 : name == "f32" ? KT_TYPE_F32 : -1);
                if (o.types.back() < 0) o.types.clear(), rest.clear();
            }
        } else {
            std::fprintf(stderr,
                         "usage: bench_attention [-p 512,4096] [-ub 512] [-r 5] [-t 2] [--heads 32,4] [--dims 128,128] "
                         "[-ctk f16,bf16]\n");
            return 2;
        }
    }
    if (o.ubatch < 1 || o.reps < 1 || o.threads < 1 || o.heads < 1 || o.heads_kv < 1 || o.heads % o.heads_kv != 0 ||
        o.dk < 1 || o.dv < 1 || o.types.empty()) {
        std::fprintf(stderr, "bench_attention: bad options\n");
        return 2;
    }
    kt::ThreadPoolOptions po;
    po.n_threads = static_cast<int>(o.threads);
    std::unique_ptr<kt::ThreadPool> pool;
    if (!kt::ThreadPool::create(po, &pool).is_ok()) return 1;

    const double load_before = load_average();
    kt::cpu::Roofline roof;
    if (!kt::cpu::measure_roofline(*pool, 1ull << 30, &roof).is_ok()) return 1;
    // The f32 FMA peak of the vector units: the f32 products' roof.
    double fma_flops = 0;
    {
        const int64_t iters = 20000000;
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<double> sink(static_cast<size_t>(o.threads));
        (void)pool->parallel_for(o.threads, 1, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i)
                sink[static_cast<size_t>(i)] = kt::cpu::host_isa_level() >= kt::cpu::IsaLevel::kAvx512
                                                   ? kt::cpu::probe::fma_avx512(iters)
                                                   : kt::cpu::probe::fma_avx2(iters);
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const int64_t per = kt::cpu::host_isa_level() >= kt::cpu::IsaLevel::kAvx512 ? kt::cpu::probe::kAvx512FmaPerIteration
                                                                                      : kt::cpu::probe::kAvx2FmaPerIteration;
        fma_flops = 2.0 * static_cast<double>(per) * static_cast<double>(iters) * static_cast<double>(o.threads) / s;
        if (sink[0] == 12345.678) std::printf(" ");  // keeps the probes' results alive
    }
    std::printf("bench_attention: %s, isa %s, %lld threads; heads %lld/%lld, dims %lld/%lld, ubatch %lld\n",
                kt::cpu::host_cpu_features().brand.c_str(), kt::cpu::isa_level_name(kt::cpu::active_isa_level()),
                static_cast<long long>(o.threads), static_cast<long long>(o.heads), static_cast<long long>(o.heads_kv),
                static_cast<long long>(o.dk), static_cast<long long>(o.dv), static_cast<long long>(o.ubatch));
    std::printf("roofline: f32 FMA %.0f GFLOP/s, %s bf16 %.0f GFLOP/s, AMX bf16 %.0f GFLOP/s, read %.1f GB/s\n\n",
                fma_flops / 1e9, roof.bf16_isa.c_str(), roof.bf16_flops_per_s / 1e9, roof.amx_bf16_flops_per_s / 1e9,
                roof.read_bytes_per_s / 1e9);
    std::printf("| type | tokens | products | median s | min s | GFLOP/s | vs f32 |\n|---|---:|---|---:|---:|---:|---:|\n");

    const kt::cpu::Products all[] = {kt::cpu::Products::kF32, kt::cpu::Products::kBf16, kt::cpu::Products::kBf16x3};
    for (int32_t type : o.types)
        for (int64_t n_prompt : o.prompts) {
            std::mt19937 rng(7);
            std::normal_distribution<float> nd(0.0f, 1.0f);
            auto fill = [&](int64_t n) {
                std::vector<float> x(static_cast<size_t>(n));
                for (float &e : x) e = nd(rng);
                return x;
            };
            const std::vector<float> q = fill(n_prompt * o.heads * o.dk), k = fill(n_prompt * o.heads_kv * o.dk),
                                     v = fill(n_prompt * o.heads_kv * o.dv);
            std::vector<float> out(static_cast<size_t>(o.ubatch * o.heads * o.dv));
            // Multiply-adds: each row t of a step sees p0 + (t - p0) + 1 positions, times heads, times Dk + Dv.
            double macs = 0;
            for (int64_t t = 0; t < n_prompt; ++t) macs += static_cast<double>(t + 1);
            macs *= static_cast<double>(o.heads) * static_cast<double>(o.dk + o.dv);
            std::vector<double> seconds[3];
            for (kt::cpu::Products products : all)  // warm-up: pages of the inputs, the AMX kernels' generation
                (void)run_once(o, std::min(n_prompt, o.ubatch), type, products, *pool, q, k, v, out);
            for (int64_t r = 0; r < o.reps; ++r)
                for (int i = 0; i < 3; ++i) seconds[i].push_back(run_once(o, n_prompt, type, all[i], *pool, q, k, v, out));
            double f32_median = 0;
            for (int i = 0; i < 3; ++i) {
                std::vector<double> s = seconds[i];
                std::sort(s.begin(), s.end());
                const double median = s[s.size() / 2];
                if (i == 0) f32_median = median;
                std::printf("| %s | %lld | %s | %.4f | %.4f | %.1f | %.2fx |\n", kt_type_name(type),
                            static_cast<long long>(n_prompt), kt::cpu::products_name(all[i]), median, s.front(),
                            2.0 * macs / median / 1e9, f32_median / median);
            }
        }
    std::printf("\nload average %.2f -> %.2f\n", load_before, load_average());
    return 0;
}
