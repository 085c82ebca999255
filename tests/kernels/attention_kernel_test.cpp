// The attention products (cpu::Products: f32, bf16, bf16x3 on GEMM tiles) against causal GQA attention computed
// in double from the definition, through the KV cache that runs them: several sequences' segments in one call
// (some with cached positions from an earlier call), lengths 1 to 1000 (one chunk of kAttentionChunk positions
// and many), head dims 64 and 128, ragged ones and MLA's (one KV head, keys wider than values), on every ISA level the host has, natively on AMX where the host
// has it and on the tile machine otherwise. The GEMM counters prove which units ran the products.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/attention_kernels.h"
#include "backends/cpu/cpu_features.h"
#include "core/thread_pool.h"
#include "runtime/kv_cache.h"
#include "support/test_support.h"
#include "tile_machine/tile_machine.h"

namespace {

using kt::cpu::IsaLevel;
using kt::cpu::Products;

struct Shape {
    int64_t H, Hkv, Dk, Dv;
};

std::unique_ptr<kt::ThreadPool> make_pool(int n) {
    kt::ThreadPoolOptions o;
    o.n_threads = n;
    std::unique_ptr<kt::ThreadPool> pool;
    REQUIRE(kt::ThreadPool::create(o, &pool).is_ok());
    return pool;
}

// One sequence: its tokens' q [L][H][Dk], k [L][Hkv][Dk], v [L][Hkv][Dv], and its attention in double.
struct Sequence {
    int64_t length = 0;
    std::vector<float> q, k, v;
    std::vector<double> expected;  // [L][H][Dv]
};

std::vector<double> definition(const Sequence &s, const Shape &sh, float scale) {
    std::vector<double> out(static_cast<size_t>(s.length * sh.H * sh.Dv), 0.0);
    std::vector<double> w(static_cast<size_t>(s.length));
    for (int64_t t = 0; t < s.length; ++t)
        for (int64_t h = 0; h < sh.H; ++h) {
            const int64_t g = h / (sh.H / sh.Hkv);
            const float *qr = s.q.data() + (t * sh.H + h) * sh.Dk;
            double m = -INFINITY;
            for (int64_t j = 0; j <= t; ++j) {
                const float *kr = s.k.data() + (j * sh.Hkv + g) * sh.Dk;
                double d = 0;
                for (int64_t i = 0; i < sh.Dk; ++i) d += double(qr[i]) * kr[i];
                w[j] = d * scale;
                m = std::max(m, w[j]);
            }
            double sum = 0;
            for (int64_t j = 0; j <= t; ++j) sum += w[j] = std::exp(w[j] - m);
            double *o = out.data() + (t * sh.H + h) * sh.Dv;
            for (int64_t j = 0; j <= t; ++j) {
                const float *vr = s.v.data() + (j * sh.Hkv + g) * sh.Dv;
                for (int64_t i = 0; i < sh.Dv; ++i) o[i] += w[j] / sum * vr[i];
            }
        }
    return out;
}

std::vector<Sequence> make_sequences(const Shape &sh, const std::vector<int64_t> &lengths, float scale, uint64_t seed) {
    std::vector<Sequence> seqs;
    for (int64_t L : lengths) {
        Sequence s;
        s.length = L;
        // Queries of standard deviation 2: scores of deviation ~2, a softmax with clear peaks and long tails.
        s.q = kt::test::random_normal(size_t(L * sh.H * sh.Dk), seed++, 2.0f);
        s.k = kt::test::random_normal(size_t(L * sh.Hkv * sh.Dk), seed++);
        s.v = kt::test::random_normal(size_t(L * sh.Hkv * sh.Dv), seed++);
        s.expected = definition(s, sh, scale);
        seqs.push_back(std::move(s));
    }
    return seqs;
}

// Runs every sequence through one cache: a first call with all sequences' first tokens as segments of one batch,
// then a second call with the last `tail` tokens of each (which attend to the cached ones too). Returns the worst
// error relative to the largest expected magnitude; `out` gets every sequence's result.
double run_cache(const Shape &sh, std::vector<Sequence> &seqs, int32_t type, Products products, float scale,
                 kt::ThreadPool &pool, kt::cpu::GemmCounts *counts, std::vector<std::vector<float>> *out) {
    constexpr int64_t kBlock = 64, kTail = 3;
    int64_t max_len = 0;
    for (const Sequence &s : seqs) max_len = std::max(max_len, s.length);
    const int64_t per_sequence = (max_len + kBlock - 1) / kBlock;
    kt::model::HParams hp;
    hp.n_layer = 1;
    hp.n_head = sh.H;
    hp.n_head_kv = sh.Hkv;
    hp.head_dim_k = sh.Dk;
    hp.head_dim_v = sh.Dv;
    hp.kq_scale = scale;
    kt::runtime::KvCache cache;
    kt::runtime::KvCache::Config config;
    config.type = type;
    config.block_positions = kBlock;
    config.n_blocks = per_sequence * int64_t(seqs.size());
    config.max_positions = max_len;
    config.n_threads = pool.size();
    config.products = static_cast<int32_t>(products);
    REQUIRE(kt::runtime::KvCache::create(hp, config, &cache).is_ok());
    // Interleaved block tables: sequence i owns blocks i, i + n, i + 2n, ...
    std::vector<std::vector<int32_t>> tables(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i)
        for (int64_t b = 0; b < per_sequence; ++b) tables[i].push_back(int32_t(b * int64_t(seqs.size()) + int64_t(i)));

    out->assign(seqs.size(), {});
    for (size_t i = 0; i < seqs.size(); ++i) (*out)[i].assign(seqs[i].expected.size(), 0.0f);
    for (int call = 0; call < 2; ++call) {
        std::vector<kt::runtime::KvCache::Segment> segments;
        std::vector<float> bq, bk, bv;
        int64_t rows = 0;
        for (size_t i = 0; i < seqs.size(); ++i) {
            const Sequence &s = seqs[i];
            const int64_t split = std::max<int64_t>(0, s.length - kTail);
            const int64_t p0 = call == 0 ? 0 : split, n = call == 0 ? split : s.length - split;
            if (n == 0) continue;
            segments.push_back({tables[i].data(), p0, rows, n});
            bq.insert(bq.end(), s.q.begin() + p0 * sh.H * sh.Dk, s.q.begin() + (p0 + n) * sh.H * sh.Dk);
            bk.insert(bk.end(), s.k.begin() + p0 * sh.Hkv * sh.Dk, s.k.begin() + (p0 + n) * sh.Hkv * sh.Dk);
            bv.insert(bv.end(), s.v.begin() + p0 * sh.Hkv * sh.Dv, s.v.begin() + (p0 + n) * sh.Hkv * sh.Dv);
            rows += n;
        }
        std::vector<float> bo(size_t(rows * sh.H * sh.Dv), NAN);
        cache.attend(0, segments.data(), int64_t(segments.size()), bq.data(), bk.data(), bv.data(), /*window=*/0,
                     /*sinks=*/nullptr, bo.data(), pool);
        size_t seg = 0;
        for (size_t i = 0; i < seqs.size(); ++i) {
            const int64_t split = std::max<int64_t>(0, seqs[i].length - kTail);
            const int64_t p0 = call == 0 ? 0 : split, n = call == 0 ? split : seqs[i].length - split;
            if (n == 0) continue;
            const int64_t width = sh.H * sh.Dv;
            std::copy_n(bo.begin() + segments[seg].row0 * width, n * width, (*out)[i].begin() + p0 * width);
            ++seg;
        }
    }
    *counts = cache.gemm_counts();
    double worst = 0, magnitude = 0;
    for (size_t i = 0; i < seqs.size(); ++i)
        for (size_t j = 0; j < seqs[i].expected.size(); ++j) {
            const double e = (*out)[i][j] - seqs[i].expected[j];
            worst = std::max(worst, std::isnan(e) ? INFINITY : std::fabs(e));
            magnitude = std::max(magnitude, std::fabs(seqs[i].expected[j]));
        }
    return worst / magnitude;
}

double max_difference(const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i)
        for (size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, double(std::fabs(a[i][j] - b[i][j])));
    return worst;
}

// The error bounds, relative to the largest expected output: the cache's own rounding for f32 products (f16:
// 2^-11 per element, bf16: 2^-8) and for bf16x3 (exact for f16 and bf16 elements up to ~2^-16); bf16 products
// also round q and p to bf16.
double bound(int32_t type, Products products) {
    if (products == Products::kBf16) return 2e-2;
    return type == KT_TYPE_F16 ? 3e-3 : 2e-2;
}

void check_level(IsaLevel level, const Shape &sh, std::vector<Sequence> &seqs, float scale, kt::ThreadPool &pool,
                 IsaLevel expected_units) {
    for (int32_t type : {KT_TYPE_F16, KT_TYPE_BF16}) {
        std::vector<std::vector<float>> f32_out;
        for (Products products : {Products::kF32, Products::kBf16, Products::kBf16x3}) {
            INFO("level " << kt::cpu::isa_level_name(level) << " type " << kt_type_name(type) << " products "
                          << kt::cpu::products_name(products) << " H " << sh.H << " Hkv " << sh.Hkv << " Dk " << sh.Dk
                          << " Dv " << sh.Dv);
            kt::cpu::GemmCounts counts;
            std::vector<std::vector<float>> out;
            const double rel = run_cache(sh, seqs, type, products, scale, pool, &counts, &out);
            std::printf("attention %-6s H %lld/%lld Dk %3lld Dv %3lld %-4s %-6s rel %.2e  tile GEMM calls %llu\n",
                        kt::cpu::isa_level_name(level), (long long)sh.H, (long long)sh.Hkv, (long long)sh.Dk,
                        (long long)sh.Dv, kt_type_name(type), kt::cpu::products_name(products), rel,
                        (unsigned long long)counts.total_calls());
            CHECK(rel < bound(type, products));
            if (products == Products::kF32) {
                f32_out = out;
                CHECK(counts.total_calls() == 0);
                continue;
            }
            // The tile GEMMs ran, on the units expected (every call: no fallback, no other level).
            CHECK(counts.calls[static_cast<int>(expected_units)] > 0);
            CHECK(counts.calls[static_cast<int>(expected_units)] == counts.total_calls());
            CHECK(counts.amx_fallbacks == 0);
            // Three bf16 terms reproduce the f32 products of f16 and bf16 elements to ~2^-16 of the output.
            if (products == Products::kBf16x3) {
                double magnitude = 0;
                for (const Sequence &s : seqs)
                    for (double e : s.expected) magnitude = std::max(magnitude, std::fabs(e));
                CHECK(max_difference(out, f32_out) / magnitude < 1e-4);
            }
        }
    }
}

}  // namespace

TEST_CASE("attention products: f32, bf16 and bf16x3 tiles equal the definition on every ISA level") {
    auto pool = make_pool(2);
    const IsaLevel cap = kt::cpu::max_isa_level();
    const IsaLevel host = kt::cpu::host_isa_level();
    // GQA with head dims 64 and 128, ragged dims, and MLA as DeepSeek's absorbed form runs it: one KV head of the
    // latent plus the RoPE dims (keys) and the latent alone (values), every query head on it; and values of 13
    // vectors of 16, which P·V takes in passes of every width it has (8, 4 and 1 on AVX-512).
    for (const Shape sh : {Shape{8, 2, 64, 64}, Shape{4, 1, 128, 128}, Shape{6, 3, 80, 48}, Shape{16, 1, 96, 64},
                           Shape{4, 2, 32, 208}}) {
        const float scale = 1.0f / std::sqrt(float(sh.Dk));
        // The long sequence (many chunks, several blocks) only where its cost is small: the best vector level.
        const bool ragged = sh.Dk % 32 != 0;
        std::vector<Sequence> seqs = make_sequences(sh, {1, 7, 33}, scale, 100 + uint64_t(sh.Dk));
        std::vector<Sequence> long_seqs =
            make_sequences(sh, {1, 7, 33, ragged || sh.Hkv == 1 ? 300 : 1000}, scale, 200 + uint64_t(sh.Dk));
        for (IsaLevel level : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
            if (level > host) continue;
            kt::cpu::set_max_isa_level(level);  // the cache picks its units at creation
            const bool best_vector = level == std::min(host, IsaLevel::kAvx512);
            check_level(level, sh, best_vector ? long_seqs : seqs, scale, *pool, level);
        }
        if (host == IsaLevel::kAmx) {
            kt::cpu::set_max_isa_level(IsaLevel::kAmx);
            check_level(IsaLevel::kAmx, sh, long_seqs, scale, *pool, IsaLevel::kAmx);
        }
        // The f32 products give the same bits on AVX2 and AVX-512: each runs the same operations lane for lane
        // (attention_impl.h), the sums across lanes in one order. (The scalar level has no fused multiply-add.)
        std::vector<std::vector<float>> first;
        for (IsaLevel level : {IsaLevel::kAvx2, IsaLevel::kAvx512}) {
            if (level > host) continue;
            kt::cpu::set_max_isa_level(level);
            INFO("f32 products, level " << kt::cpu::isa_level_name(level) << " H " << sh.H << " Dk " << sh.Dk << " Dv " << sh.Dv);
            kt::cpu::GemmCounts counts;
            std::vector<std::vector<float>> out;
            run_cache(sh, seqs, KT_TYPE_F16, Products::kF32, scale, *pool, &counts, &out);
            if (first.empty()) first = out;
            for (size_t i = 0; i < out.size(); ++i)
                CHECK(std::memcmp(out[i].data(), first[i].data(), sizeof(float) * out[i].size()) == 0);
        }
        kt::cpu::set_max_isa_level(cap);
    }
}

TEST_CASE("attention products on the AMX tiles of the tile machine", "[amx]") {
    if (kt::cpu::host_isa_level() < IsaLevel::kAvx512) {
        WARN("skipped: the AMX attention path needs an AVX-512 host for what AMX does not take");
        return;
    }
    // Natively, the case above ran AMX already where the host has it; here the generated tile code runs on the
    // tile machine on any AVX-512 host (one thread: the calling one, whose machine counts what it executed).
    kt::test::ScopedTileMachineRunner tile_machine;
    const uint64_t executed_before = kt::test::thread_tile_machine().instructions;
    const IsaLevel cap = kt::cpu::max_isa_level();
    kt::cpu::set_max_isa_level(IsaLevel::kAmx);
    REQUIRE(kt::cpu::amx::available());
    auto pool = make_pool(1);
    const Shape sh{4, 1, 64, 64};
    const float scale = 0.125f;
    std::vector<Sequence> seqs = make_sequences(sh, {1, 7, 33}, scale, 300);
    check_level(IsaLevel::kAmx, sh, seqs, scale, *pool, IsaLevel::kAmx);
    CHECK(kt::test::thread_tile_machine().instructions > executed_before);
    kt::cpu::set_max_isa_level(cap);
}
