// kt_expert_pool through kt.h: every weight format, every ISA level this host supports (forced down with the cap
// and the feature mask), shapes with tails, 1..512 tokens, top-k 1..8 with duplicate and -1 ids, against the math
// reference (ops/ref/moe_ref) with a normalised error bound per format; and bit-identical results across levels.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels.h"
#include "core/fp16.h"
#include "moe_test_support.h"
#include "ops/ref/blocks.h"
#include "ops/ref/quants_ref.h"
#include "support/quant_test_support.h"
#include "support/test_support.h"

using namespace kt;
using namespace kt::test;

namespace {

// An ISA level as the pool sees it: the cap (kt_set_max_isa) plus disabled VNNI / AVX512-BF16.
struct Level {
    int32_t isa;
    uint32_t disabled;
    const char *name;
};

std::vector<Level> host_levels() {
    std::vector<Level> v = {{KT_ISA_SCALAR, 0, "scalar"}};
    const int32_t host = kt_get_host_isa();
    if (host >= KT_ISA_AVX2) v.push_back({KT_ISA_AVX2, 0, "avx2"});
    if (host >= KT_ISA_AVX512) {
        v.push_back({KT_ISA_AVX512, cpu::kDisableVnni | cpu::kDisableBf16, "avx512 without VNNI and BF16"});
        v.push_back({KT_ISA_AVX512, 0, "avx512 with what the host has"});
    }
    return v;
}

// Applies a level for the pools created in its scope.
struct ScopedLevel {
    explicit ScopedLevel(const Level &l) {
        REQUIRE(kt_set_max_isa(l.isa) == KT_STATUS_OK);
        cpu::set_disabled_features(l.disabled);
    }
    ~ScopedLevel() {
        kt_set_max_isa(KT_ISA_AMX);
        cpu::set_disabled_features(0);
    }
};

struct FormatCase {
    const char *name;
    int32_t src_type;
    int32_t format;
    int32_t group;
    int64_t hidden, inter;
    // Bound on ||y - ref|| / ||ref|| against the math reference. Integer formats quantize each token's input and
    // each intermediate row to int8 with one scale per row: step amax/127, i.e. about 0.7% rms for the Gaussian
    // input and 1-2% for the heavier-tailed SwiGLU output; the largest error observed over these cases is 2.3%.
    // BF16 rounds both to 8 significant bits: 0.34% observed. The bounds are about 2x and 3x those.
    double bound;
};

const FormatCase kFormats[] = {
    {"INT8 from F32 (tails)", KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT8, 0, 100, 70, 0.05},
    {"INT8 from BF16", KT_TYPE_BF16, KT_EXPERT_WEIGHTS_INT8, 0, 256, 96, 0.05},
    {"INT4 g32", KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT4, 32, 96, 64, 0.05},
    {"INT4 g64", KT_TYPE_F16, KT_EXPERT_WEIGHTS_INT4, 64, 128, 192, 0.05},
    {"INT4 g128", KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT4, 128, 256, 128, 0.05},
    {"BF16 as stored (tails)", KT_TYPE_BF16, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 70, 50, 0.01},
    {"BF16 from F32", KT_TYPE_F32, KT_EXPERT_WEIGHTS_BF16, 0, 64, 33, 0.01},
    {"F16 as stored (becomes BF16)", KT_TYPE_F16, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 64, 0.01},
    {"Q8_0", KT_TYPE_Q8_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 96, 64, 0.05},
    {"Q4_0", KT_TYPE_Q4_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 96, 0.05},
    {"Q4_K", KT_TYPE_Q4_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"Q5_K", KT_TYPE_Q5_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"Q6_K", KT_TYPE_Q6_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"IQ4_XS", KT_TYPE_IQ4_XS, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"MXFP4 as stored (tails)", KT_TYPE_MXFP4, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 96, 160, 0.05},
    {"Q2_K as stored", KT_TYPE_Q2_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"Q3_K as stored", KT_TYPE_Q3_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"Q5_0 as stored", KT_TYPE_Q5_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 96, 0.05},
    {"Q5_1 as stored", KT_TYPE_Q5_1, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 96, 64, 0.05},
    {"Q4_1 as stored", KT_TYPE_Q4_1, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 96, 0.05},
    {"IQ4_NL as stored", KT_TYPE_IQ4_NL, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 96, 64, 0.05},
    {"Q8_K as stored (becomes Q8_0)", KT_TYPE_Q8_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"IQ3_XXS (held exactly as Q6_K)", KT_TYPE_IQ3_XXS, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"IQ3_S (held exactly as Q5_K)", KT_TYPE_IQ3_S, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 512, 256, 0.05},
    {"IQ1_M (held exactly as Q6_K)", KT_TYPE_IQ1_M, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 512, 0.05},
    {"IQ1_S (held exactly as Q4_K, mins past 63)", KT_TYPE_IQ1_S, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 512, 256, 0.05},
    {"IQ2_XXS (a grid format: becomes Q8_0)", KT_TYPE_IQ2_XXS, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"Q4_K converted to INT8", KT_TYPE_Q4_K, KT_EXPERT_WEIGHTS_INT8, 0, 256, 256, 0.05},
};

constexpr int64_t kExperts = 8;

std::vector<float> input(int64_t tokens, int64_t hidden, uint64_t seed) {
    return random_normal(static_cast<size_t>(tokens * hidden), seed, 1.0f);
}

}  // namespace

TEST_CASE("expert pool: every format at every ISA level matches the math reference") {
    const auto levels = host_levels();
    double worst_int = 0, worst_bf16 = 0, worst_emulated = 0;
    for (const FormatCase &fc : kFormats) {
        const ExpertWeights w = make_experts(fc.src_type, fc.format, fc.group, kExperts, fc.hidden, fc.inter, 1234);
        struct Call {
            int64_t tokens;
            int32_t top_k;
        };
        const Call calls[] = {{1, 1}, {1, 8}, {2, 3}, {2, 5}, {7, 4}, {7, 8}, {3, 6}, {3, 7}, {33, 2}, {33, 8}};  // top-k 1..8
        std::vector<std::vector<float>> first(std::size(calls));
        for (size_t li = 0; li < levels.size(); ++li) {
            ScopedLevel scoped(levels[li]);
            kt_expert_pool *pool = make_pool(w, fc.format, fc.group, 64, 8);
            kt_expert_pool_info info;
            info.struct_size = sizeof info;
            REQUIRE(kt_expert_pool_get_info(pool, &info) == KT_STATUS_OK);
            for (size_t ci = 0; ci < std::size(calls); ++ci) {
                const Call &c = calls[ci];
                INFO(fc.name << ", " << levels[li].name << " (kernels " << info.kernels << ", " << info.weight_formats
                             << "), " << c.tokens << " tokens, top-" << c.top_k);
                const Routing r = make_routing(c.tokens, c.top_k, kExperts, 77 + ci);
                const std::vector<float> x = input(c.tokens, fc.hidden, 99 + ci);
                const std::vector<float> y = run_forward(pool, x, r);
                if (li == 0) {
                    const std::vector<double> ref = reference(w, x, r, nullptr, 0, 0);
                    const double err = normalized_error(y, ref);
                    const double err_emulated = normalized_error(y, emulated_reference(w, x, r, nullptr, fc.bound < 0.03));
                    INFO("normalised error " << err << " (bound " << fc.bound << "), against the emulated rounding "
                                             << err_emulated);
                    CHECK(err <= fc.bound);
                    CHECK(err_emulated <= kEmulatedBound);
                    worst_emulated = std::max(worst_emulated, err_emulated);
                    (fc.bound < 0.03 ? worst_bf16 : worst_int) = std::max(fc.bound < 0.03 ? worst_bf16 : worst_int, err);
                    first[ci] = y;
                } else {
                    // Same operations in the same order on every level: the same bits.
                    CHECK(std::memcmp(y.data(), first[ci].data(), sizeof(float) * y.size()) == 0);
                }
            }
            kt_expert_pool_free(pool);
        }
    }
    WARN("largest normalised error: integer formats " << worst_int << ", bf16 formats " << worst_bf16
                                                       << ", against the emulated rounding " << worst_emulated);
}

TEST_CASE("expert pool: 512 tokens with top-8") {
    for (const FormatCase &fc : {kFormats[0], kFormats[5], kFormats[10]}) {
        const ExpertWeights w = make_experts(fc.src_type, fc.format, fc.group, kExperts, fc.hidden, fc.inter, 55);
        kt_expert_pool *pool = make_pool(w, fc.format, fc.group, 512, 8);
        const Routing r = make_routing(512, 8, kExperts, 5);
        const std::vector<float> x = input(512, fc.hidden, 6);
        const std::vector<float> y = run_forward(pool, x, r);
        const double err = normalized_error(y, reference(w, x, r, nullptr, 0, 0));
        INFO(fc.name << ": normalised error " << err);
        CHECK(err <= fc.bound);
        kt_expert_pool_free(pool);
    }
}

namespace {

// A Q6_K block of super-block scale d, scales sc per 16 and codes q (0..63), laid out as GGUF stores them.
ref::BlockQ6_K q6_k_block(uint16_t d, const int8_t sc[16], const uint8_t q[256]) {
    ref::BlockQ6_K b{};
    b.d = d;
    std::memcpy(b.scales, sc, 16);
    for (int half = 0; half < 2; ++half) {
        const uint8_t *y = q + 128 * half;
        for (int l = 0; l < 32; ++l) {
            b.ql[64 * half + l] = static_cast<uint8_t>((y[l] & 0x0F) | ((y[l + 64] & 0x0F) << 4));
            b.ql[64 * half + l + 32] = static_cast<uint8_t>((y[l + 32] & 0x0F) | ((y[l + 96] & 0x0F) << 4));
            b.qh[32 * half + l] = static_cast<uint8_t>((y[l] >> 4) | ((y[l + 32] >> 4) << 2) | ((y[l + 64] >> 4) << 4) |
                                                       ((y[l + 96] >> 4) << 6));
        }
    }
    return b;
}

// The Q6_K block holding an IQ3_XXS block's weights: d / 2, sc = 2 ls + 1 per 16, q = 32 + value / 2.
ref::BlockQ6_K q6_k_of(const ref::BlockIq3Xxs &x) {
    int8_t v[256], sc[16];
    uint8_t ls[8], q[256];
    ref::iq3_xxs_values(&x, v, ls);
    for (int i = 0; i < 256; ++i) q[i] = static_cast<uint8_t>(32 + v[i] / 2);
    for (int g = 0; g < 16; ++g) sc[g] = static_cast<int8_t>(2 * ls[g / 2] + 1);
    return q6_k_block(f32_to_fp16(fp16_to_f32(x.d) * 0.5f), sc, q);
}

// The Q6_K block holding an IQ1_M block's weights: d / 8, sc = 2 s + 1 per 16, q = 32 + eighths.
ref::BlockQ6_K q6_k_of_iq1_m(const ref::BlockIq1M &x) {
    int8_t e[256], sc[16];
    uint8_t s[16], q[256];
    const uint16_t d = ref::iq1_m_values(&x, e, s);
    for (int i = 0; i < 256; ++i) q[i] = static_cast<uint8_t>(32 + e[i]);
    for (int g = 0; g < 16; ++g) sc[g] = static_cast<int8_t>(2 * s[g] + 1);
    return q6_k_block(f32_to_fp16(fp16_to_f32(d) * 0.125f), sc, q);
}

// The Q5_K block holding an IQ3_S block's weights: d, dmin = 16 d, sc = m = 1 + 2 s per 32, q = 16 + value.
ref::BlockQ5_K q5_k_of(const ref::BlockIq3S &x) {
    int8_t v[256];
    uint8_t s[8];
    ref::iq3_s_values(&x, v, s);
    uint8_t sc[8], q[256];
    for (int j = 0; j < 8; ++j) sc[j] = static_cast<uint8_t>(2 * s[j] + 1);
    for (int i = 0; i < 256; ++i) q[i] = static_cast<uint8_t>(16 + v[i]);
    ref::BlockQ5_K b{};
    b.d = x.d;
    b.dmin = f32_to_fp16(fp16_to_f32(x.d) * 16.0f);
    for (int j = 0; j < 4; ++j) {  // 6-bit scales and mins, packed as unpack_k4_scale_min reads them (m == sc here)
        b.scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        b.scales[j + 4] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((sc[j + 4] & 0x0F) << 4));
    }
    for (int chunk = 0; chunk < 4; ++chunk)
        for (int l = 0; l < 32; ++l) {
            const uint8_t lo = q[64 * chunk + l], hi = q[64 * chunk + 32 + l];
            b.qs[32 * chunk + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
            const int lo_bit = (lo >> 4) & 1, hi_bit = (hi >> 4) & 1;
            b.qh[l] = static_cast<uint8_t>(b.qh[l] | (lo_bit << (2 * chunk)) | (hi_bit << (2 * chunk + 1)));
        }
    return b;
}

template <typename From, typename To>
std::vector<uint8_t> reencode(const std::vector<uint8_t> &bytes, To (*convert)(const From &)) {
    std::vector<uint8_t> out(bytes.size() / sizeof(From) * sizeof(To));
    for (size_t b = 0; b < bytes.size() / sizeof(From); ++b) {
        From x;
        std::memcpy(&x, bytes.data() + b * sizeof x, sizeof x);
        const To y = convert(x);
        std::memcpy(out.data() + b * sizeof y, &y, sizeof y);
    }
    return out;
}

}  // namespace

// IQ3_XXS, IQ3_S and IQ1_M have no kernel of their own: kt keeps them in the fields of Q6_K, Q5_K and Q6_K, which
// hold their weights exactly (moe/weights.cpp). The K-quant blocks built here from the same weights dequantize to
// the same values as the grid blocks (both dequantizers are golden-tested against llama.cpp), and a pool of each
// must give the same bits. (IQ1_S's Q4_K fields carry mins above 63, which no GGUF Q4_K block holds: the test
// against the math reference covers it.)
TEST_CASE("expert pool: IQ3_XXS, IQ3_S and IQ1_M compute bit for bit as the K-quant files of the same weights") {
    for (const int32_t type : {KT_TYPE_IQ3_XXS, KT_TYPE_IQ3_S, KT_TYPE_IQ1_M}) {
        INFO(kt_type_name(type));
        const int64_t hidden = 512, inter = 256;
        const ExpertWeights grid = make_experts(type, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, kExperts, hidden, inter, 4321);
        ExpertWeights k = grid;
        k.src_type = type == KT_TYPE_IQ3_S ? KT_TYPE_Q5_K : KT_TYPE_Q6_K;
        for (std::vector<uint8_t> *m : {&k.gate, &k.up, &k.down})
            *m = type == KT_TYPE_IQ3_XXS ? reencode<ref::BlockIq3Xxs>(*m, q6_k_of)
                 : type == KT_TYPE_IQ3_S ? reencode<ref::BlockIq3S>(*m, q5_k_of)
                                         : reencode<ref::BlockIq1M>(*m, q6_k_of_iq1_m);
        // The same weights (compared as values: an IQ3 weight of d = 0 may be -0 where the K-quant's is +0).
        const std::vector<float> a = dequantize_rows(type, grid.down, kExperts * hidden, inter);
        const std::vector<float> b = dequantize_rows(k.src_type, k.down, kExperts * hidden, inter);
        const std::vector<float> c = dequantize_rows(type, grid.gate, kExperts * inter, hidden);
        const std::vector<float> d = dequantize_rows(k.src_type, k.gate, kExperts * inter, hidden);
        REQUIRE(a == b);
        REQUIRE(c == d);

        kt_expert_pool *pg = make_pool(grid, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 8);
        kt_expert_pool *pk = make_pool(k, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 8);
        for (const int64_t tokens : {1, 4, 33}) {
            const Routing r = make_routing(tokens, 4, kExperts, 500 + tokens);
            const std::vector<float> x = input(tokens, hidden, 600 + tokens);
            const std::vector<float> yg = run_forward(pg, x, r), yk = run_forward(pk, x, r);
            CHECK(std::memcmp(yg.data(), yk.data(), sizeof(float) * yg.size()) == 0);
        }
        kt_expert_pool_free(pg);
        kt_expert_pool_free(pk);
    }
}
