// The expert pool's AMX level. No development machine here has AMX, so the AMX kernels run on the tile machine (the
// exact bytes the JIT emitted, interpreted; tests/backends/tile_machine); on an AMX machine they also run natively.
// The packed INT8 / INT4 / BF16 buffers are shared with the AVX-512 kernels, so the packers must agree byte for byte,
// and INT8 / INT4 results must be the same bits at every level.
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
#include "tile_machine/tile_machine.h"

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

TEST_CASE("amx level: pools on the tile machine match the AVX-512 level") {
    if (cpu::host_isa_level() < cpu::IsaLevel::kAvx512) {
        WARN("skipped: the AMX kernel set needs an AVX-512 host for the calls AMX does not take");
        return;
    }
    ScopedTileMachineRunner tile_machine;
    REQUIRE(cpu::amx::available());
    struct Case {
        int32_t src_type, format, group;
    };
    const Case cases[] = {{KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT8, 0},
                          {KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT4, 32},
                          {KT_TYPE_F32, KT_EXPERT_WEIGHTS_INT4, 64},
                          {KT_TYPE_BF16, KT_EXPERT_WEIGHTS_AS_SOURCE, 0}};
    const int64_t E = 4, H = 64, I = 64, T = 16;
    for (const Case &c : cases) {
        INFO("format " << c.format << " group " << c.group);
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

        const uint64_t calls_before = cpu::amx_gemm_calls();
        kt_expert_pool *amx = make_pool(w, c.format, c.group, T, 3);
        kt_expert_pool_info info;
        info.struct_size = sizeof info;
        REQUIRE(kt_expert_pool_get_info(amx, &info) == KT_STATUS_OK);
        CHECK(info.isa == KT_ISA_AMX);
        CHECK(std::string(info.kernels) == "amx");
        const std::vector<float> ya = run_forward(amx, x, r);
        CHECK(cpu::amx_gemm_calls() > calls_before);  // the AMX kernels really ran
        kt_expert_pool_free(amx);

        REQUIRE(kt_set_max_isa(KT_ISA_AVX512) == KT_STATUS_OK);  // the tile machine is capped too
        kt_expert_pool *avx = make_pool(w, c.format, c.group, T, 3);
        const std::vector<float> yv = run_forward(avx, x, r);
        kt_expert_pool_free(avx);
        REQUIRE(kt_set_max_isa(KT_ISA_AMX) == KT_STATUS_OK);

        const bool bf16 = c.format == KT_EXPERT_WEIGHTS_AS_SOURCE;
        if (bf16) {
            // TDPBF16PS sums even and odd products separately: not the bits of vdpbf16ps, but within fp32 rounding.
            CHECK(normalized_error(ya, std::vector<double>(yv.begin(), yv.end())) < 1e-5);
        } else {
            CHECK(std::memcmp(ya.data(), yv.data(), sizeof(float) * ya.size()) == 0);
        }
        CHECK(normalized_error(ya, emulated_reference(w, x, r, nullptr, bf16)) < kEmulatedBound);
    }
}
