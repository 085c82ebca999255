// The runtime's and ops' pieces against independent formulas: attention over the KV cache (vs a direct double
// computation), RMS norm, RoPE (rotation, angles, linear and YaRN scaling), MoE routing, and the sampler's filters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "core/thread_pool.h"
#include "ops/transformer_ops.h"
#include "runtime/kv_cache.h"
#include "runtime/sampler.h"
#include "support/test_support.h"

namespace {

std::unique_ptr<kt::ThreadPool> make_pool(int n) {
    kt::ThreadPoolOptions o;
    o.n_threads = n;
    std::unique_ptr<kt::ThreadPool> pool;
    REQUIRE(kt::ThreadPool::create(o, &pool).is_ok());
    return pool;
}

// Causal GQA attention in double, straight from the definition; with a window, query t sees t - window + 1 .. t
// only; with sinks, head h's softmax denominator has one more term e^sinks[h].
std::vector<double> naive_attention(const std::vector<float> &q, const std::vector<float> &k, const std::vector<float> &v,
                                    int64_t T, int64_t H, int64_t Hkv, int64_t Dk, int64_t Dv, float scale,
                                    int64_t window = 0, const float *sinks = nullptr) {
    std::vector<double> out(static_cast<size_t>(T * H * Dv), 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / Hkv);
            const int64_t first = window > 0 ? std::max<int64_t>(0, t - window + 1) : 0;
            std::vector<double> s(static_cast<size_t>(t + 1 - first));
            for (int64_t j = first; j <= t; ++j) {
                double d = 0;
                for (int64_t i = 0; i < Dk; ++i) d += double(q[(t * H + h) * Dk + i]) * k[(j * Hkv + g) * Dk + i];
                s[j - first] = d * scale;
            }
            double m = *std::max_element(s.begin(), s.end());
            if (sinks) m = std::max(m, double(sinks[h]));
            double sum = sinks ? std::exp(sinks[h] - m) : 0.0;
            for (double &x : s) sum += x = std::exp(x - m);
            for (int64_t j = first; j <= t; ++j)
                for (int64_t i = 0; i < Dv; ++i) out[(t * H + h) * Dv + i] += s[j - first] / sum * v[(j * Hkv + g) * Dv + i];
        }
    return out;
}

}  // namespace

TEST_CASE("attention over the paged KV cache equals the definition, whatever the batching and block layout, on every ISA level") {
    struct Shape {
        int64_t H, Hkv, Dk, Dv, T;
    };
    auto pool = make_pool(3);
    const kt::cpu::IsaLevel cap = kt::cpu::max_isa_level();
    for (kt::cpu::IsaLevel level : {kt::cpu::IsaLevel::kScalar, kt::cpu::IsaLevel::kAvx2, kt::cpu::IsaLevel::kAvx512}) {
    if (level > kt::cpu::host_isa_level()) continue;
    kt::cpu::set_max_isa_level(level);  // the cache picks its kernels at creation
    INFO("ISA level " << kt::cpu::isa_level_name(level));
    for (const Shape sh : {Shape{4, 2, 16, 16, 7}, Shape{8, 1, 32, 24, 40}, Shape{3, 3, 8, 8, 33}, Shape{6, 2, 64, 64, 17},
                           Shape{4, 1, 80, 64, 21}}) {
        INFO("H " << sh.H << " Hkv " << sh.Hkv << " Dk " << sh.Dk << " Dv " << sh.Dv << " T " << sh.T);
        kt::model::HParams hp;
        hp.n_layer = 2;
        hp.n_head = sh.H;
        hp.n_head_kv = sh.Hkv;
        hp.head_dim_k = sh.Dk;
        hp.head_dim_v = sh.Dv;
        hp.kq_scale = 1.0f / std::sqrt(float(sh.Dk));
        const auto q = kt::test::random_normal(size_t(sh.T * sh.H * sh.Dk), 1);
        const auto k = kt::test::random_normal(size_t(sh.T * sh.Hkv * sh.Dk), 2);
        const auto v = kt::test::random_normal(size_t(sh.T * sh.Hkv * sh.Dv), 3);
        const auto k_other = kt::test::random_normal(k.size(), 4), v_other = kt::test::random_normal(v.size(), 5);
        const std::vector<double> expected = naive_attention(q, k, v, sh.T, sh.H, sh.Hkv, sh.Dk, sh.Dv, hp.kq_scale);
        const std::vector<double> expected_other =
            naive_attention(q, k_other, v_other, sh.T, sh.H, sh.Hkv, sh.Dk, sh.Dv, hp.kq_scale);
        for (int32_t type : {KT_TYPE_F32, KT_TYPE_F16, KT_TYPE_BF16, KT_TYPE_Q8_0}) {
            if (type == KT_TYPE_Q8_0 && (sh.Dk % 32 != 0 || sh.Dv % 32 != 0)) {
                kt::runtime::KvCache cache;
                kt::runtime::KvCache::Config config;
                config.type = type;
                config.max_positions = 64;
                CHECK(kt::runtime::KvCache::create(hp, config, &cache).code() == KT_STATUS_UNSUPPORTED);
                continue;
            }
            const double tolerance = type == KT_TYPE_F32 ? 1e-5 : type == KT_TYPE_F16 ? 3e-3 : type == KT_TYPE_BF16 ? 2e-2 : 3e-2;
            // Two sequences in every call, each in its own shuffled blocks: A over (k, v), B over (k_other,
            // v_other); A's rows first, then B's. The tokens go in one call, then in uneven steps (the later steps
            // attend to cached positions). Layer 1 gets other keys for A: it must not disturb layer 0.
            for (int64_t block : {int64_t(16), int64_t(32), int64_t(64)}) {
            for (int64_t step : {sh.T, int64_t(5), int64_t(1)}) {
                INFO("type " << kt_type_name(type) << ", block " << block << ", step " << step);
                const int64_t per_sequence = (64 + block - 1) / block;
                std::vector<int32_t> ids(size_t(2 * per_sequence));
                std::iota(ids.begin(), ids.end(), 0);
                std::shuffle(ids.begin(), ids.end(), std::mt19937(uint32_t(block + step)));
                const int32_t *table_a = ids.data(), *table_b = ids.data() + per_sequence;
                kt::runtime::KvCache cache;
                kt::runtime::KvCache::Config config;
                config.type = type;
                config.block_positions = block;
                config.n_blocks = 2 * per_sequence;
                config.max_positions = 64;
                config.n_threads = pool->size();
                REQUIRE(kt::runtime::KvCache::create(hp, config, &cache).is_ok());
                std::vector<float> out_a(size_t(sh.T * sh.H * sh.Dv), 0.0f), out_b(out_a.size()), other(out_a.size());
                for (int64_t t0 = 0; t0 < sh.T; t0 += step) {
                    const int64_t n = std::min(step, sh.T - t0);
                    // The batch: rows [0, n) of A, then [n, 2n) of B.
                    std::vector<float> bq, bk, bv;
                    auto append = [&](std::vector<float> &dst, const std::vector<float> &src, int64_t width) {
                        dst.insert(dst.end(), src.begin() + t0 * width, src.begin() + (t0 + n) * width);
                    };
                    append(bq, q, sh.H * sh.Dk);
                    append(bq, q, sh.H * sh.Dk);
                    append(bk, k_other, sh.Hkv * sh.Dk);
                    append(bv, v_other, sh.Hkv * sh.Dv);
                    std::vector<float> bo(size_t(2 * n * sh.H * sh.Dv));
                    const kt::runtime::KvCache::Segment only_a{table_a, t0, 0, n};
                    cache.attend(1, &only_a, 1, bq.data(), bk.data(), bv.data(), 0, nullptr, other.data(), *pool);
                    bk.clear();
                    bv.clear();
                    append(bk, k, sh.Hkv * sh.Dk);
                    append(bk, k_other, sh.Hkv * sh.Dk);
                    append(bv, v, sh.Hkv * sh.Dv);
                    append(bv, v_other, sh.Hkv * sh.Dv);
                    const kt::runtime::KvCache::Segment both[] = {{table_a, t0, 0, n}, {table_b, t0, n, n}};
                    cache.attend(0, both, 2, bq.data(), bk.data(), bv.data(), 0, nullptr, bo.data(), *pool);
                    const size_t width = size_t(sh.H * sh.Dv);
                    std::copy_n(bo.begin(), n * width, out_a.begin() + t0 * width);
                    std::copy_n(bo.begin() + n * width, n * width, out_b.begin() + t0 * width);
                }
                double worst_a = 0, worst_b = 0, scale = 0;
                for (size_t i = 0; i < out_a.size(); ++i) {
                    worst_a = std::max(worst_a, std::fabs(out_a[i] - expected[i]));
                    worst_b = std::max(worst_b, std::fabs(out_b[i] - expected_other[i]));
                    scale = std::max(scale, std::max(std::fabs(expected[i]), std::fabs(expected_other[i])));
                }
                CHECK(worst_a / scale < tolerance);
                CHECK(worst_b / scale < tolerance);
            }
            }
        }
    }
    }
    kt::cpu::set_max_isa_level(cap);
}

// One sequence in a cache of 16-position blocks (block i holds positions 16i..16i+15): attention in several steps
// then crosses block boundaries.
struct OneSequenceCache {
    kt::runtime::KvCache cache;
    std::vector<int32_t> table;

    bool create(const kt::model::HParams &hp, int64_t n_ctx, int32_t type, int threads) {
        kt::runtime::KvCache::Config config;
        config.type = type;
        config.block_positions = 16;
        config.n_blocks = (n_ctx + 15) / 16;
        config.max_positions = n_ctx;
        config.n_threads = threads;
        table.resize(size_t(config.n_blocks));
        std::iota(table.begin(), table.end(), 0);
        return kt::runtime::KvCache::create(hp, config, &cache).is_ok();
    }
    void attend(int64_t layer, int64_t pos0, int64_t n, const float *q, const float *k, const float *v, int64_t window,
                const float *sinks, float *out, kt::ThreadPool &pool) {
        const kt::runtime::KvCache::Segment segment{table.data(), pos0, 0, n};
        cache.attend(layer, &segment, 1, q, k, v, window, sinks, out, pool);
    }
};

TEST_CASE("attention with a sliding window and sinks equals the definition, on every ISA level and cache type") {
    auto pool = make_pool(2);
    const kt::cpu::IsaLevel cap = kt::cpu::max_isa_level();
    struct Shape {
        int64_t H, Hkv, D, T, window;
    };
    for (kt::cpu::IsaLevel level : {kt::cpu::IsaLevel::kScalar, kt::cpu::IsaLevel::kAvx2, kt::cpu::IsaLevel::kAvx512}) {
        if (level > kt::cpu::host_isa_level()) continue;
        kt::cpu::set_max_isa_level(level);
        for (const Shape sh : {Shape{4, 2, 32, 45, 16}, Shape{2, 1, 64, 40, 1}, Shape{3, 3, 32, 20, 7}, Shape{4, 2, 32, 33, 64}}) {
            INFO(kt::cpu::isa_level_name(level) << ": H " << sh.H << " Hkv " << sh.Hkv << " T " << sh.T << " window " << sh.window);
            kt::model::HParams hp;
            hp.n_layer = 1;
            hp.n_head = sh.H;
            hp.n_head_kv = sh.Hkv;
            hp.head_dim_k = hp.head_dim_v = sh.D;
            hp.kq_scale = 1.0f / std::sqrt(float(sh.D));
            const auto q = kt::test::random_normal(size_t(sh.T * sh.H * sh.D), 31, 2.0f);
            const auto k = kt::test::random_normal(size_t(sh.T * sh.Hkv * sh.D), 32);
            const auto v = kt::test::random_normal(size_t(sh.T * sh.Hkv * sh.D), 33);
            const auto sinks = kt::test::random_normal(size_t(sh.H), 34, 2.0f);
            for (const float *sink : {static_cast<const float *>(nullptr), sinks.data()}) {
                const std::vector<double> expected =
                    naive_attention(q, k, v, sh.T, sh.H, sh.Hkv, sh.D, sh.D, hp.kq_scale, sh.window, sink);
                for (int32_t type : {KT_TYPE_F32, KT_TYPE_F16, KT_TYPE_Q8_0}) {
                    for (int64_t step : {sh.T, int64_t(1), int64_t(6)}) {
                        INFO("sinks " << (sink != nullptr) << ", type " << kt_type_name(type) << ", step " << step);
                        OneSequenceCache cache;
                        REQUIRE(cache.create(hp, 80, type, pool->size()));
                        std::vector<float> out(size_t(sh.T * sh.H * sh.D));
                        for (int64_t t0 = 0; t0 < sh.T; t0 += step) {
                            const int64_t n = std::min(step, sh.T - t0);
                            cache.attend(0, t0, n, q.data() + t0 * sh.H * sh.D, k.data() + t0 * sh.Hkv * sh.D,
                                         v.data() + t0 * sh.Hkv * sh.D, sh.window, sink, out.data() + t0 * sh.H * sh.D, *pool);
                        }
                        double worst = 0, scale = 0;
                        for (size_t i = 0; i < out.size(); ++i) {
                            worst = std::max(worst, std::fabs(out[i] - expected[i]));
                            scale = std::max(scale, std::fabs(expected[i]));
                        }
                        CHECK(worst / scale < (type == KT_TYPE_F32 ? 1e-5 : type == KT_TYPE_F16 ? 3e-3 : 3e-2));
                    }
                }
            }
        }
    }
    kt::cpu::set_max_isa_level(cap);
}

TEST_CASE("attention whose values are part of the keys (MLA's latent) stores them once and equals the definition") {
    auto pool = make_pool(2);
    const kt::cpu::IsaLevel cap = kt::cpu::max_isa_level();
    for (kt::cpu::IsaLevel level : {kt::cpu::IsaLevel::kScalar, kt::cpu::IsaLevel::kAvx2, kt::cpu::IsaLevel::kAvx512}) {
        if (level > kt::cpu::host_isa_level()) continue;
        kt::cpu::set_max_isa_level(level);
        // One KV head of [rope 16 ; latent 64] (Dk 80, Dv 64), or [rope 32 ; latent 64] (both multiples of 32, so
        // that the Q8_0 cache can hold it).
        for (const int64_t rope : {int64_t(16), int64_t(32)}) {
            kt::model::HParams hp;
            hp.n_layer = 2;
            hp.n_head = 4;
            hp.n_head_kv = 1;
            hp.head_dim_v = 64;
            hp.head_dim_k = rope + 64;
            hp.v_in_k = rope;
            hp.kq_scale = 0.1f;
            const int64_t T = 37, Dk = hp.head_dim_k, Dv = hp.head_dim_v;
            const auto q = kt::test::random_normal(size_t(T * 4 * Dk), 41);
            const auto k = kt::test::random_normal(size_t(T * Dk), 42);
            std::vector<float> v(size_t(T * Dv));
            for (int64_t t = 0; t < T; ++t) std::copy_n(k.begin() + t * Dk + rope, Dv, v.begin() + t * Dv);
            const std::vector<double> expected = naive_attention(q, k, v, T, 4, 1, Dk, Dv, hp.kq_scale);
            for (int32_t type : {KT_TYPE_F32, KT_TYPE_F16, KT_TYPE_Q8_0}) {
                if (type == KT_TYPE_Q8_0 && Dk % 32 != 0) continue;
                INFO(kt::cpu::isa_level_name(level) << " rope " << rope << " type " << kt_type_name(type));
                OneSequenceCache cache;
                REQUIRE(cache.create(hp, 64, type, pool->size()));
                const uint64_t key_row = type == KT_TYPE_F32 ? 4 * Dk : type == KT_TYPE_F16 ? 2 * Dk : Dk / 32 * 34;
                CHECK(cache.cache.bytes_per_position() == 2 * key_row);  // two layers, keys only
                std::vector<float> out(size_t(T * 4 * Dv));
                for (int64_t t0 = 0; t0 < T; t0 += 10) {
                    const int64_t n = std::min<int64_t>(10, T - t0);
                    // The values argument is ignored: pass garbage to prove it.
                    const std::vector<float> garbage(size_t(n * Dv), 1e30f);
                    cache.attend(1, t0, n, q.data() + t0 * 4 * Dk, k.data() + t0 * Dk, garbage.data(), 0, nullptr,
                                 out.data() + t0 * 4 * Dv, *pool);
                }
                double worst = 0, scale = 0;
                for (size_t i = 0; i < out.size(); ++i) {
                    worst = std::max(worst, std::fabs(out[i] - expected[i]));
                    scale = std::max(scale, std::fabs(expected[i]));
                }
                CHECK(worst / scale < (type == KT_TYPE_F32 ? 1e-5 : type == KT_TYPE_F16 ? 3e-3 : 3e-2));
            }
        }
    }
    kt::cpu::set_max_isa_level(cap);
}

TEST_CASE("RMS norm equals x / sqrt(mean(x^2) + eps) * w at every row length, in place and without weights") {
    // Lengths around its 8 partial sums (1, 7, 8, 9, 15), a head (128) and hidden sizes with odd tails.
    for (int64_t dim : {1, 7, 8, 9, 15, 128, 2047, 2048, 4099}) {
        const int64_t rows = 3;
        const std::vector<float> x = kt::test::random_normal(static_cast<size_t>(rows * dim), 40 + static_cast<uint64_t>(dim));
        const std::vector<float> w = kt::test::random_normal(static_cast<size_t>(dim), 7);
        std::vector<float> y(x.size()), y_plain(x.size()), in_place = x;
        kt::ops::rms_norm(x.data(), w.data(), rows, dim, 1e-6f, y.data());
        kt::ops::rms_norm(x.data(), nullptr, rows, dim, 1e-6f, y_plain.data());
        kt::ops::rms_norm(in_place.data(), w.data(), rows, dim, 1e-6f, in_place.data());
        for (int64_t r = 0; r < rows; ++r) {
            double sum = 0;
            for (int64_t i = 0; i < dim; ++i) sum += double(x[r * dim + i]) * x[r * dim + i];
            const double scale = 1.0 / std::sqrt(sum / double(dim) + 1e-6);
            for (int64_t i = 0; i < dim; ++i) {
                const double plain = x[r * dim + i] * scale;
                INFO("dim " << dim << " row " << r << " i " << i);
                CHECK(y_plain[r * dim + i] == Approx(plain).epsilon(1e-6).margin(1e-30));
                CHECK(y[r * dim + i] == Approx(plain * w[i]).epsilon(1e-6).margin(1e-30));
                CHECK(in_place[r * dim + i] == y[r * dim + i]);
            }
        }
    }
}

TEST_CASE("RoPE rotates pairs by pos * base^(-2i/n), NORM adjacent and NEOX by halves") {
    kt::ops::RopeParams p;
    p.n_rot = 8;
    p.freq_base = 10000.0f;
    const int32_t positions[] = {0, 1, 17, 250};
    std::vector<float> cs(4 * 4 * 2);
    kt::ops::rope_table(p, nullptr, positions, 4, cs.data());
    for (int t = 0; t < 4; ++t)
        for (int i = 0; i < 4; ++i) {
            const double theta = positions[t] * std::pow(10000.0, -2.0 * i / 8);
            CHECK(cs[(t * 4 + i) * 2] == Approx(std::cos(theta)).margin(2e-5));
            CHECK(cs[(t * 4 + i) * 2 + 1] == Approx(std::sin(theta)).margin(2e-5));
        }

    // Head dim 10 with n_rot 8: the last two values pass through. Two heads, token stride 20.
    const std::vector<float> x = kt::test::random_normal(4 * 20, 9);
    for (kt::ops::RopeMode mode : {kt::ops::RopeMode::kNorm, kt::ops::RopeMode::kNeox}) {
        p.mode = mode;
        std::vector<float> y = x;
        kt::ops::rope_apply(p, cs.data(), 4, 2, 10, 20, y.data());
        for (int t = 0; t < 4; ++t)
            for (int h = 0; h < 2; ++h) {
                const float *a = x.data() + t * 20 + h * 10, *b = y.data() + t * 20 + h * 10;
                for (int i = 0; i < 4; ++i) {
                    const int i0 = mode == kt::ops::RopeMode::kNorm ? 2 * i : i;
                    const int i1 = mode == kt::ops::RopeMode::kNorm ? 2 * i + 1 : i + 4;
                    const double c = cs[(t * 4 + i) * 2], s = cs[(t * 4 + i) * 2 + 1];
                    CHECK(b[i0] == Approx(a[i0] * c - a[i1] * s).margin(1e-5));
                    CHECK(b[i1] == Approx(a[i0] * s + a[i1] * c).margin(1e-5));
                }
                CHECK(b[8] == a[8]);
                CHECK(b[9] == a[9]);
            }
    }
}

TEST_CASE("RoPE scaling: linear divides positions, YaRN extrapolates fast dims and interpolates slow ones") {
    kt::ops::RopeParams p;
    p.n_rot = 64;
    p.freq_base = 10000.0f;
    p.n_ctx_orig = 4096;
    const int32_t pos[] = {1000};
    std::vector<float> plain(64), scaled(64);

    // Linear: factor 4 at position 1000 is position 250 unscaled.
    const int32_t quarter[] = {250};
    kt::ops::rope_table(p, nullptr, quarter, 1, plain.data());
    p.freq_scale = 0.25f;
    kt::ops::rope_table(p, nullptr, pos, 1, scaled.data());
    for (int i = 0; i < 64; ++i) CHECK(scaled[i] == Approx(plain[i]).margin(1e-3));

    // YaRN (ext_factor 1): pair 0 (fastest) is extrapolated (the unscaled angle), the last pair interpolated; the
    // magnitude is attn_factor · (1 + 0.1 ln 4).
    p.ext_factor = 1.0f;
    p.attn_factor = 0.5f;
    kt::ops::rope_table(p, nullptr, pos, 1, scaled.data());
    const double mscale = 0.5 * (1 + 0.1 * std::log(4.0));
    const double fast = 1000.0, slow = 1000.0 * std::pow(10000.0, -62.0 / 64) * 0.25;
    CHECK(scaled[0] == Approx(std::cos(fast) * mscale).margin(2e-3));
    CHECK(scaled[1] == Approx(std::sin(fast) * mscale).margin(2e-3));
    CHECK(scaled[62] == Approx(std::cos(slow) * mscale).margin(1e-5));
    CHECK(scaled[63] == Approx(std::sin(slow) * mscale).margin(1e-5));

    // Frequency factors divide the angles.
    p = kt::ops::RopeParams();
    p.n_rot = 4;
    const float factors[] = {2.0f, 4.0f};
    std::vector<float> cs(4);
    kt::ops::rope_table(p, factors, pos, 1, cs.data());
    CHECK(cs[0] == Approx(std::cos(500.0)).margin(1e-3));
    CHECK(cs[2] == Approx(std::cos(1000.0 * 0.01 / 4)).margin(1e-5));
}

TEST_CASE("MoE routing: softmax top-k with and without renormalisation, sigmoid with bias and groups, softmax over the chosen") {
    std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 3.0f};
    int32_t ids[2];
    float w[2];
    kt::ops::RoutingParams p;
    p.n_expert = 6;
    p.k = 2;
    std::vector<float> l = logits;
    kt::ops::route(p, l.data(), 1, ids, w);
    double z = 0;
    for (float x : logits) z += std::exp(x);
    CHECK(ids[0] == 5);
    CHECK(ids[1] == 1);
    CHECK(w[0] == Approx(std::exp(3.0) / z));
    CHECK(w[1] == Approx(std::exp(2.0) / z));
    p.renormalize = true;
    l = logits;
    kt::ops::route(p, l.data(), 1, ids, w);
    CHECK(w[0] + w[1] == Approx(1.0));
    CHECK(w[0] / w[1] == Approx(std::exp(1.0)));

    // Sigmoid gating: selection on sigmoid + bias, weights from the unbiased sigmoid, times scale.
    const float bias[] = {0.0f, 0.0f, 5.0f, 0.0f, 0.0f, 0.0f};
    p = kt::ops::RoutingParams();
    p.gating = kt::ops::Gating::kSigmoid;
    p.n_expert = 6;
    p.k = 2;
    p.selection_bias = bias;
    p.scale = 2.5f;
    l = logits;
    kt::ops::route(p, l.data(), 1, ids, w);
    CHECK(ids[0] == 2);
    CHECK(ids[1] == 5);
    CHECK(w[0] == Approx(2.5 / (1 + std::exp(1.0))));
    CHECK(w[1] == Approx(2.5 / (1 + std::exp(-3.0))));

    // Groups of two; each scored by its two selection scores: {0,1}: σ(.5)+σ(2), {2,3}: σ(-1)+σ(1.5)+5,
    // {4,5}: σ(0)+σ(3). Keep one group: only experts 2 and 3 can be chosen.
    p.n_group = 3;
    p.n_group_used = 1;
    l = logits;
    kt::ops::route(p, l.data(), 1, ids, w);
    CHECK(ids[0] == 2);
    CHECK(ids[1] == 3);

    // Softmax over the chosen (gpt-oss): the top-k logits, weights = their softmax alone.
    p = kt::ops::RoutingParams();
    p.gating = kt::ops::Gating::kSoftmaxWeight;
    p.n_expert = 6;
    p.k = 3;
    int32_t ids3[3];
    float w3[3];
    l = logits;
    kt::ops::route(p, l.data(), 1, ids3, w3);
    CHECK(ids3[0] == 5);
    CHECK(ids3[1] == 1);
    CHECK(ids3[2] == 3);
    const double z3 = std::exp(3.0) + std::exp(2.0) + std::exp(1.5);
    CHECK(w3[0] == Approx(std::exp(3.0) / z3));
    CHECK(w3[2] == Approx(std::exp(1.5) / z3));
}

TEST_CASE("sampler: greedy, filters, penalties and seeded draws") {
    kt::runtime::Sampler s;
    kt::runtime::SamplerParams greedy;
    const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -2.0f, 2.5f};
    CHECK(s.sample(greedy, logits.data(), 5, {}) == 1);  // ties go to the lower id

    // Repetition penalty divides positive logits and multiplies negative ones; presence and frequency subtract.
    kt::runtime::SamplerParams pen;
    pen.repeat_penalty = 2.0f;
    CHECK(s.sample(pen, logits.data(), 5, {1, 2}) == 4);  // 3/2 < 2.5
    pen.repeat_penalty = 1.0f;
    pen.presence_penalty = 0.4f;
    pen.frequency_penalty = 0.1f;
    CHECK(s.sample(pen, logits.data(), 5, {1, 1, 2}) == 2);  // 3 - 0.4 - 0.2 < 3 - 0.4 - 0.1
    pen.repeat_last_n = 1;
    CHECK(s.sample(pen, logits.data(), 5, {1, 1, 2}) == 1);  // only the last token is in the window

    // Draw frequencies follow softmax(logits / T) within the kept set.
    auto frequencies = [&](const kt::runtime::SamplerParams &p, const std::vector<float> &l, int draws) {
        std::map<int32_t, int> counts;
        s.seed(p.seed);
        for (int i = 0; i < draws; ++i) ++counts[s.sample(p, l.data(), static_cast<int64_t>(l.size()), {})];
        return counts;
    };
    const std::vector<float> probs = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    kt::runtime::SamplerParams t1;
    t1.temperature = 1.0f;
    auto c = frequencies(t1, probs, 20000);
    CHECK(c[0] / 20000.0 == Approx(0.5).margin(0.02));
    CHECK(c[1] / 20000.0 == Approx(0.3).margin(0.02));
    CHECK(c[3] / 20000.0 == Approx(0.05).margin(0.01));

    kt::runtime::SamplerParams topk = t1;
    topk.top_k = 2;
    c = frequencies(topk, probs, 4000);
    CHECK(c.size() == 2);
    CHECK(c[0] / 4000.0 == Approx(0.625).margin(0.03));

    kt::runtime::SamplerParams topp = t1;
    topp.top_p = 0.85f;  // 0.5 + 0.3 < 0.85 <= 0.95: three tokens
    c = frequencies(topp, probs, 4000);
    CHECK(c.size() == 3);

    kt::runtime::SamplerParams minp = t1;
    minp.min_p = 0.5f;  // keeps p >= 0.25: two tokens
    c = frequencies(minp, probs, 4000);
    CHECK(c.size() == 2);

    kt::runtime::SamplerParams cold = t1;
    cold.temperature = 0.25f;  // sharpens: 0.5^4 : 0.3^4 ...
    c = frequencies(cold, probs, 4000);
    CHECK(c[0] / 4000.0 == Approx(0.0625 / (0.0625 + 0.0081 + 0.00050625 + 0.00000625)).margin(0.03));

    // Same seed, same draws.
    t1.seed = 42;
    CHECK(frequencies(t1, probs, 300) == frequencies(t1, probs, 300));
}

namespace {

// The sampler chain written plainly (penalties on a copy of every logit, a full sort, filters, one draw), as the
// oracle for the sampler's one-pass selection.
int32_t sample_plainly(const kt::runtime::SamplerParams &p, const std::vector<float> &logits,
                       const std::vector<int32_t> &history, std::mt19937_64 &rng) {
    struct C {
        int32_t id;
        float logit;
        double p;
    };
    std::vector<C> c;
    for (size_t i = 0; i < logits.size(); ++i) c.push_back({int32_t(i), logits[i], 0.0});
    const size_t window = p.repeat_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.repeat_last_n));
    std::map<int32_t, int> count;
    for (size_t i = history.size() - window; i < history.size(); ++i) ++count[history[i]];
    for (const auto &[id, n] : count) {
        float &l = c[size_t(id)].logit;
        l = l <= 0.0f ? l * p.repeat_penalty : l / p.repeat_penalty;
        l -= float(n) * p.frequency_penalty + p.presence_penalty;
    }
    std::sort(c.begin(), c.end(), [](const C &a, const C &b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
    if (p.temperature <= 0.0f) return c[0].id;
    size_t n = p.top_k > 0 ? std::min(c.size(), size_t(p.top_k)) : c.size();
    auto softmax = [&](size_t count_, float t) {
        double sum = 0;
        for (size_t i = 0; i < count_; ++i) sum += c[i].p = float(std::exp(c[i].logit / t - c[0].logit / t));
        for (size_t i = 0; i < count_; ++i) c[i].p = float(c[i].p / sum);
    };
    softmax(n, 1.0f);
    if (p.top_p < 1.0f) {
        double cumulative = 0;
        for (size_t i = 0; i < n; ++i)
            if ((cumulative += c[i].p) >= p.top_p) {
                n = i + 1;
                break;
            }
    }
    if (p.min_p > 0.0f) {
        size_t keep = 1;
        while (keep < n && c[keep].p >= p.min_p * c[0].p) ++keep;
        n = keep;
    }
    softmax(n, p.temperature);
    double r = double(rng() >> 11) * 0x1.0p-53;
    for (size_t i = 0; i < n; ++i)
        if ((r -= c[i].p) < 0.0) return c[i].id;
    return c[n - 1].id;
}

}  // namespace

TEST_CASE("sampler: its one-pass top-k and penalties choose what the plain full-sort chain chooses") {
    std::mt19937 gen(5);
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t V = 1 + int64_t(gen() % 700);
        std::vector<float> logits = kt::test::random_normal(size_t(V), uint64_t(trial), 3.0f);
        // Many ties (logits rounded to halves in every other trial): the order among equal logits (lower id
        // first) decides which tokens survive top-k.
        if (trial % 2) for (float &l : logits) l = std::round(l * 2) / 2;
        std::vector<int32_t> history(gen() % 90);
        for (int32_t &t : history) t = int32_t(gen() % V);
        kt::runtime::SamplerParams p;
        p.temperature = trial % 4 == 0 ? 0.0f : 0.3f + float(gen() % 10) / 10;
        p.top_k = int32_t(gen() % 3 == 0 ? 0 : gen() % 60);
        p.top_p = gen() % 2 ? 1.0f : 0.5f + float(gen() % 50) / 100;
        p.min_p = gen() % 2 ? 0.0f : float(gen() % 20) / 100;
        p.repeat_penalty = gen() % 2 ? 1.0f : 1.3f;
        p.repeat_last_n = int32_t(gen() % 3 == 0 ? -1 : gen() % 70);
        p.presence_penalty = gen() % 2 ? 0.0f : 0.5f;
        p.frequency_penalty = gen() % 2 ? 0.0f : 0.2f;
        p.seed = uint64_t(trial);
        INFO("trial " << trial << ": V " << V << ", T " << p.temperature << ", top-k " << p.top_k);
        kt::runtime::Sampler s;
        s.seed(p.seed);
        std::mt19937_64 rng(p.seed);
        for (int draw = 0; draw < 4; ++draw) CHECK(s.sample(p, logits.data(), V, history) == sample_plainly(p, logits, history, rng));
    }
}
