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
#include "moe_test_support.h"
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
    {"IQ3_XXS as stored (IQ_GRID)", KT_TYPE_IQ3_XXS, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"IQ3_S as stored (IQ_GRID)", KT_TYPE_IQ3_S, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 512, 256, 0.05},
    {"IQ1_M as stored (IQ_GRID3)", KT_TYPE_IQ1_M, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 512, 0.05},
    {"IQ1_S as stored (IQ_GRID3)", KT_TYPE_IQ1_S, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 512, 256, 0.05},
    {"IQ2_XXS as stored (IQ_GRID3)", KT_TYPE_IQ2_XXS, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256, 0.05},
    {"IQ2_XS as stored (IQ_GRID3)", KT_TYPE_IQ2_XS, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 512, 0.05},
    {"IQ2_S as stored (IQ_GRID3)", KT_TYPE_IQ2_S, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 512, 256, 0.05},
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

