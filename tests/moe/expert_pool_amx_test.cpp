// The expert pool's AMX level, on the tile machine (the exact bytes the JIT emitted, interpreted;
// tests/backends/tile_machine) on every host, and natively on a host with AMX; the log says which ran.
// The packed INT8 / INT4 / BF16 buffers are shared with the AVX-512 kernels, so the packers must agree byte for byte,
// and INT8 / INT4 and GGUF-format results (every format kept as stored but MXFP4, through the group-wise kernels)
// must be the same bits at every level.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels.h"
#include "core/fp16.h"
#include "mem/numa_buffer.h"
#include "moe/weights.h"
#include "moe_test_support.h"
#include "support/quant_test_support.h"
#include "support/test_support.h"
#include "amx/amx_test_util.h"

using namespace kt;
using namespace kt::test;

namespace {

// My packing (moe/weights.cpp) of an F32 source next to amx::pack_b_* of the same quantized weights.
void check_same_bytes(moe::TargetFormat target, int32_t group, int64_t n, int64_t k) {
    INFO("target " << static_cast<int>(target) << " group " << group << " n " << n << " k " << k);
    const std::vector<float> w = random_normal(static_cast<size_t>(n * k), 3 + n + k, 0.1f);
    moe::MatrixSource src;
    REQUIRE(moe::make_source(KT_TYPE_F32, w.data(), n, k, &src).is_ok());
    moe::PackSpec spec;
    REQUIRE(moe::pack_spec_for(src, target, group, &spec).is_ok());
    cpu::PackedLayout layout;
    REQUIRE(moe::slice_layout(src, spec, 0, n, 0, k, &layout).is_ok());
    mem::NumaBuffer mine;
    REQUIRE(mem::NumaBuffer::allocate(layout.bytes, nullptr, -1, &mine).is_ok());
    REQUIRE(moe::pack_slice(src, spec, 0, 0, layout, 0, layout.panels, mine.as<uint8_t>()).is_ok());

    cpu::amx::PackedBDesc desc;
    desc.n = n;
    desc.k = k;
    std::vector<int8_t> codes(static_cast<size_t>(n * k));
    std::vector<float> scales;
    std::vector<uint16_t> bf(static_cast<size_t>(n * k));
    if (target == moe::TargetFormat::kInt8) {
        desc.type = cpu::amx::WeightType::kInt8;
        for (int64_t r = 0; r < n; ++r) {
            scales.push_back(moe::int8_row_scale(&w[r * k], k));
            for (int64_t i = 0; i < k; ++i) codes[r * k + i] = moe::quantize_int8(w[r * k + i], scales.back());
        }
    } else if (target == moe::TargetFormat::kInt4) {
        desc.type = cpu::amx::WeightType::kInt4;
        desc.group = group;
        for (int64_t r = 0; r < n; ++r)
            for (int64_t g = 0; g < k; g += group) {
                scales.push_back(moe::int4_group_scale(&w[r * k + g], group));
                for (int64_t i = g; i < g + group; ++i) codes[r * k + i] = moe::quantize_int4(w[r * k + i], scales.back());
            }
    } else {
        desc.type = cpu::amx::WeightType::kBf16;
        for (size_t i = 0; i < bf.size(); ++i) bf[i] = f32_to_bf16(w[i]);
    }
    size_t bytes = 0;
    REQUIRE(cpu::amx::packed_b_size(desc, &bytes).is_ok());
    CHECK(bytes <= layout.bytes);
    mem::NumaBuffer theirs;
    REQUIRE(mem::NumaBuffer::allocate(bytes, nullptr, -1, &theirs).is_ok());
    Status s;
    if (desc.type == cpu::amx::WeightType::kInt8)
        s = cpu::amx::pack_b_int8(desc, codes.data(), k, scales.data(), theirs.data(), bytes);
    else if (desc.type == cpu::amx::WeightType::kInt4)
        s = cpu::amx::pack_b_int4(desc, codes.data(), k, scales.data(), theirs.data(), bytes);
    else
        s = cpu::amx::pack_b_bf16(desc, bf.data(), k, theirs.data(), bytes);
    INFO(s.message());
    REQUIRE(s.is_ok());
    CHECK(std::memcmp(mine.data(), theirs.data(), bytes) == 0);
}

}  // namespace

TEST_CASE("amx level: the expert engine's INT8 INT4 and BF16 packing is the AMX contract's byte for byte") {
    check_same_bytes(moe::TargetFormat::kInt8, 0, 37, 70);
    check_same_bytes(moe::TargetFormat::kInt8, 0, 64, 128);
    check_same_bytes(moe::TargetFormat::kInt4, 32, 33, 96);
    check_same_bytes(moe::TargetFormat::kInt4, 64, 40, 192);
    check_same_bytes(moe::TargetFormat::kInt4, 128, 32, 256);
    check_same_bytes(moe::TargetFormat::kBf16, 0, 50, 66);
}

// The pool's GEMM calls by the ISA that ran them.
kt_expert_pool_info pool_info(kt_expert_pool *pool) {
    kt_expert_pool_info info;
    info.struct_size = sizeof info;
    REQUIRE(kt_expert_pool_get_info(pool, &info) == KT_STATUS_OK);
    return info;
}

TEST_CASE("amx level: pools on AMX match the AVX-512 level, and count their AMX calls") {
    if (cpu::host_isa_level() < cpu::IsaLevel::kAvx512) {
        WARN("skipped: the AMX kernel set needs an AVX-512 host for the calls AMX does not take");
        return;
    }
    struct Case {
        int32_t src_type, format, group;
        int64_t hidden, inter;  // the K-quants and IQ4_XS need multiples of 256
    };
    const Case cases[] = {{KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT8, 0, 64, 64},
                          {KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT4, 32, 64, 64},
                          {KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT4, 64, 64, 64},
                          {KT_TYPE_BF16, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 64},
                          {KT_TYPE_Q8_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 96, 160},
                          {KT_TYPE_Q4_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 160, 96},
                          {KT_TYPE_Q4_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256},
                          {KT_TYPE_Q5_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256},
                          {KT_TYPE_Q6_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256},
                          {KT_TYPE_IQ4_XS, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256},
                          {KT_TYPE_Q2_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256},
                          {KT_TYPE_Q3_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256},
                          {KT_TYPE_Q5_0, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 96, 160},
                          {KT_TYPE_Q5_1, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 160, 96},
                          {KT_TYPE_Q4_1, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 96, 64},
                          {KT_TYPE_IQ4_NL, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 64, 96},
                          // IQ_GRID3 and IQ_GRID (grid formats: their code books through the AMX set's unpacking)
                          {KT_TYPE_IQ1_S, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256},
                          {KT_TYPE_IQ3_S, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 256, 256}};
    const int64_t E = 4, T = 16;
    for (const Case &c : cases) {
        const int64_t H = c.hidden, I = c.inter;
        const ExpertWeights w = make_experts(c.src_type, c.format, c.group, E, H, I, 61);
        // Every token goes to experts 0 and 1 (and one -1): 16-row GEMMs, enough for the AMX path.
        Routing r;
        r.tokens = T;
        r.top_k = 3;
        for (int64_t t = 0; t < T; ++t) {
            r.ids.insert(r.ids.end(), {0, 1, -1});
            r.weights.insert(r.weights.end(), {0.7f, 0.3f, 1.0f});
        }
        const std::vector<float> x = random_normal(static_cast<size_t>(T * H), 62);

        REQUIRE(kt_set_max_isa(KT_ISA_AVX512) == KT_STATUS_OK);
        kt_expert_pool *avx = make_pool(w, c.format, c.group, T, 3);
        const std::vector<float> yv = run_forward(avx, x, r);
        CHECK(pool_info(avx).gemm_calls[KT_ISA_AMX] == 0);
        kt_expert_pool_free(avx);
        REQUIRE(kt_set_max_isa(KT_ISA_AMX) == KT_STATUS_OK);

        for_each_amx_runner([&](const char *runner) {
            INFO("source type " << c.src_type << " format " << c.format << " group " << c.group << " on " << runner);
            kt_expert_pool *amx = make_pool(w, c.format, c.group, T, 3);
            CHECK(pool_info(amx).isa == KT_ISA_AMX);
            CHECK(std::string(pool_info(amx).kernels) == "amx");
            kt_gemm_counts before, after;
            before.struct_size = after.struct_size = sizeof before;
            REQUIRE(kt_get_gemm_counts(&before) == KT_STATUS_OK);
            const std::vector<float> ya = run_forward(amx, x, r);
            REQUIRE(kt_get_gemm_counts(&after) == KT_STATUS_OK);
            // Every GEMM of this call has 16 rows: all of them ran on AMX, none fell back.
            const kt_expert_pool_info info = pool_info(amx);
            CHECK(info.gemm_calls[KT_ISA_AMX] > 0);
            CHECK(info.gemm_calls[KT_ISA_AVX512] == 0);
            CHECK(info.amx_fallbacks == 0);
            // The process-wide counts saw the same calls (and nothing else ran meanwhile).
            CHECK(after.calls[KT_ISA_AMX] - before.calls[KT_ISA_AMX] == info.gemm_calls[KT_ISA_AMX]);
            CHECK(after.amx_fallbacks == before.amx_fallbacks);
            kt_expert_pool_free(amx);

            const bool bf16 = c.src_type == KT_TYPE_BF16;
            if (bf16) {
                // TDPBF16PS sums even and odd products separately: not the bits of vdpbf16ps, but within fp32
                // rounding.
                CHECK(normalized_error(ya, std::vector<double>(yv.begin(), yv.end())) < 1e-5);
                CHECK(info.gemm_bf16_macs[KT_ISA_AMX] > 0);
            } else {
                CHECK(std::memcmp(ya.data(), yv.data(), sizeof(float) * ya.size()) == 0);
                CHECK(info.gemm_int8_macs[KT_ISA_AMX] > 0);
            }
            CHECK(normalized_error(ya, emulated_reference(w, x, r, nullptr, bf16)) < kEmulatedBound);
        });
    }
}

TEST_CASE("amx level: calls of fewer than amx_min_rows() rows run on AVX-512 by design, not as fallbacks") {
    if (cpu::host_isa_level() < cpu::IsaLevel::kAvx512) {
        WARN("skipped: the AMX kernel set needs an AVX-512 host for the calls AMX does not take");
        return;
    }
    const int64_t E = 4, H = 256, I = 256;
    for_each_amx_runner([&](const char *runner) {
        INFO("on " << runner);
        // INT8 weights, one token: a 1-row GEMM is AVX-512's.
        const ExpertWeights w8 = make_experts(KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT8, 0, E, H, I, 71);
        kt_expert_pool *p8 = make_pool(w8, KT_EXPERT_WEIGHTS_INT8, 0, 16, 2);
        Routing one;  // two different experts: one row each
        one.tokens = 1;
        one.top_k = 2;
        one.ids = {0, 1};
        one.weights = {0.6f, 0.4f};
        const std::vector<float> x1 = random_normal(static_cast<size_t>(H), 73);
        const std::vector<float> y1 = run_forward(p8, x1, one);
        kt_expert_pool_info info = pool_info(p8);
        CHECK(info.gemm_calls[KT_ISA_AMX] == 0);
        CHECK(info.gemm_calls[KT_ISA_AVX512] > 0);
        CHECK(info.amx_fallbacks == 0);
        CHECK(normalized_error(y1, emulated_reference(w8, x1, one, nullptr, false)) < kEmulatedBound);
        kt_expert_pool_free(p8);

        // Q4_K kept as stored, 16 tokens spread over the 4 experts: 4 rows per expert, below amx_min_rows (16).
        const ExpertWeights wq = make_experts(KT_TYPE_Q4_K, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, E, H, I, 74);
        kt_expert_pool *pq = make_pool(wq, KT_EXPERT_WEIGHTS_AS_SOURCE, 0, 16, 1);
        Routing many;
        many.tokens = 16;
        many.top_k = 1;
        for (int64_t t = 0; t < 16; ++t) {
            many.ids.push_back(static_cast<int32_t>(t % E));
            many.weights.push_back(0.5f);
        }
        const std::vector<float> x = random_normal(static_cast<size_t>(16 * H), 75);
        const std::vector<float> y = run_forward(pq, x, many);
        info = pool_info(pq);
        CHECK(info.gemm_calls[KT_ISA_AMX] == 0);
        CHECK(info.gemm_calls[KT_ISA_AVX512] > 0);
        CHECK(info.amx_fallbacks == 0);
        CHECK(normalized_error(y, emulated_reference(wq, x, many, nullptr, false)) < kEmulatedBound);
        kt_expert_pool_free(pq);
    });
}
