// The AMX GEMMs end to end: pack, run every kernel shape the driver generates (tails in M, N and K included) on the
// tile machine - and natively when the host has AMX - and compare with plain C++ references: int8 and int4 exactly,
// bf16 bit for bit against a scalar model of TDPBF16PS and within a K-dependent bound of an fp64 reference.
// Every output buffer carries sentinel columns and is sized exactly, so a write outside C[0..M)[n_begin..n_end) or
// a read past A (AddressSanitizer) fails the test.
#include <cmath>
#include <cstring>

#include "amx/amx_checks.h"
#include "amx/amx_test_util.h"
#include "backends/cpu/amx/amx_pack_layout.h"
#include "backends/cpu/amx/amx_probe.h"

using namespace kt;
using namespace kt::cpu::amx;
using namespace kt::test;

namespace {

// Awkward shapes: M = 1, 7, 16, 33 (tails of the 32-row block and of the 16-row tile), N with a partial panel or a
// half panel, K with a partial step.
const Shape kInt8Shapes[] = {
    {1, 32, 64}, {7, 17, 100}, {16, 48, 256}, {33, 33, 130}, {32, 64, 64}, {2, 1, 1}, {40, 16, 63},
};
const Shape kInt4Shapes[] = {
    {1, 32, 128, 128}, {7, 17, 384, 128}, {33, 48, 128, 64}, {16, 33, 192, 64},
    {1, 16, 32, 32},   {7, 32, 96, 32},   {33, 17, 160, 32}, {16, 40, 256, 32},
};
// Group-wise (the GGUF formats): M, N and K tails of 1, 7, 31, 33 around the 32 x 32 block, 16-row tile and 64-K step.
const Shape kGroupedShapes[] = {
    {1, 32, 32, 32},   {7, 17, 96, 32},  {31, 31, 256, 32}, {33, 33, 224, 32}, {16, 7, 64, 32},  {40, 64, 160, 32},
    {1, 1, 16, 16},    {7, 31, 112, 16}, {33, 17, 256, 16}, {31, 33, 48, 16},  {32, 32, 64, 16},
};
const Shape kBf16Shapes[] = {
    {1, 32, 32}, {7, 17, 70}, {16, 48, 256}, {33, 33, 33}, {2, 1, 1}, {32, 16, 100},
};

}  // namespace

TEST_CASE("amx gemm: INT8 s8 x s8 -> int32 and scaled fp32, exact, every tail", "[amx]") {
    uint32_t seed = 100;
    for (const Shape &sh : kInt8Shapes) {
        DYNAMIC_SECTION(describe(sh)) { check_int8(sh, seed); }
        ++seed;
    }
}

TEST_CASE("amx gemm: INT4 group-wise -> fp32, exact against the stated fp32 order", "[amx]") {
    uint32_t seed = 200;
    for (const Shape &sh : kInt4Shapes) {
        DYNAMIC_SECTION(describe(sh)) { check_int4(sh, seed); }
        ++seed;
    }
}

TEST_CASE("amx gemm: group-wise int8 -> fp32 (GGUF formats), exact against the stated fp32 order", "[amx]") {
    uint32_t seed = 400;
    for (const Shape &sh : kGroupedShapes) {
        for (bool mins : {false, true}) {
            DYNAMIC_SECTION(describe(sh) << (mins ? " with mins" : "")) { check_grouped(sh, mins, seed); }
            ++seed;
        }
    }
}

TEST_CASE("amx gemm: BF16 -> fp32, bit-exact with the SDM order and within the fp64 bound", "[amx]") {
    uint32_t seed = 300;
    for (const Shape &sh : kBf16Shapes) {
        DYNAMIC_SECTION(describe(sh)) { check_bf16(sh, seed); }
        ++seed;
    }
}

TEST_CASE("amx gemm: INT8 extremes accumulate in int32 without saturation", "[amx]") {
    // All -128 x -128: each product is 2^14, K = 4096 gives 2^26 per output (no saturation, no wrap).
    const Shape sh{17, 20, 4096};
    std::vector<int8_t> a(static_cast<size_t>(sh.m * sh.k), -128), w(static_cast<size_t>(sh.n * sh.k), -128);
    std::vector<float> scale(static_cast<size_t>(sh.n), 1.0f);
    const PackedBDesc desc{WeightType::kInt8, sh.n, sh.k, 0};
    const Packed p = pack(desc, [&](void *dst, size_t size) {
        return pack_b_int8(desc, w.data(), sh.k, scale.data(), dst, size);
    });
    for_each_amx_runner([&](const char *runner) {
        INFO("on " << runner);
        OutC<int32_t> c(sh.m, sh.n);
        REQUIRE(gemm_s8_s32(nullptr, p.b, sh.m, 0, sh.n, a.data(), sh.k, c.c.data(), c.ldc).is_ok());
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) REQUIRE(c.at(i, j) == (1 << 26));
        c.check_sentinels();
    });
}

TEST_CASE("amx gemm: bad arguments get a status, never a crash", "[amx]") {
    const PackedBDesc desc{WeightType::kInt8, 40, 64, 0};
    std::vector<int8_t> w(40 * 64, 1), a(8 * 64, 1);
    std::vector<float> scale(40, 1.0f), a_scale(8, 1.0f);
    const Packed p = pack(desc, [&](void *dst, size_t size) {
        return pack_b_int8(desc, w.data(), 64, scale.data(), dst, size);
    });
    std::vector<int32_t> c(8 * 40);
    std::vector<float> cf(8 * 40);

    // Without AMX hardware and without the tile machine, AMX is unavailable: UNSUPPORTED, not SIGILL.
    if (!host_has_amx()) {
        CHECK_FALSE(available());
        CHECK(gemm_s8_s32(nullptr, p.b, 8, 0, 40, a.data(), 64, c.data(), 40).code() == KT_STATUS_UNSUPPORTED);
        TileSession session;
        CHECK(session.configure().code() == KT_STATUS_UNSUPPORTED);
    }

    ScopedTileMachineRunner tile_machine;
    REQUIRE(available());
    auto s32 = [&](int64_t m, int64_t nb, int64_t ne, const int8_t *pa, int64_t lda, int32_t *pc, int64_t ldc) {
        return gemm_s8_s32(nullptr, p.b, m, nb, ne, pa, lda, pc, ldc).code();
    };
    CHECK(s32(8, 0, 40, a.data(), 64, c.data(), 40) == KT_STATUS_OK);
    CHECK(s32(0, 0, 40, a.data(), 64, c.data(), 40) == KT_STATUS_INVALID_ARGUMENT);   // m = 0
    CHECK(s32(8, 16, 40, a.data(), 64, c.data(), 40) == KT_STATUS_INVALID_ARGUMENT);  // n_begin not on a panel
    CHECK(s32(8, 0, 20, a.data(), 64, c.data(), 40) == KT_STATUS_INVALID_ARGUMENT);   // n_end inside a panel
    CHECK(s32(8, 0, 41, a.data(), 64, c.data(), 40) == KT_STATUS_INVALID_ARGUMENT);   // past N
    CHECK(s32(8, 32, 32, a.data(), 64, c.data(), 40) == KT_STATUS_INVALID_ARGUMENT);  // empty range
    CHECK(s32(8, 0, 40, nullptr, 64, c.data(), 40) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(s32(8, 0, 40, a.data(), 64, nullptr, 40) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(s32(8, 0, 40, a.data(), 63, c.data(), 40) == KT_STATUS_INVALID_ARGUMENT);   // lda < k
    CHECK(s32(8, 0, 40, a.data(), 64, c.data(), 39) == KT_STATUS_INVALID_ARGUMENT);   // ldc < 40 columns
    CHECK(s32(8, 32, 40, a.data(), 64, c.data(), 8) == KT_STATUS_OK);                 // c starts at column 32
    CHECK(s32(8, 32, 40, a.data(), 64, c.data(), 7) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gemm_s8_f32(nullptr, p.b, 8, 0, 40, a.data(), 64, nullptr, cf.data(), 40).code() ==
          KT_STATUS_INVALID_ARGUMENT);  // a_scale
    CHECK(gemm_bf16_f32(nullptr, p.b, 8, 0, 40, reinterpret_cast<const uint16_t *>(a.data()), 32, cf.data(), 40)
              .code() == KT_STATUS_INVALID_ARGUMENT);  // INT8 weights given to the bf16 GEMM
    PackedB misaligned = p.b;
    misaligned.data = p.bytes.get() + 4;
    CHECK(gemm_s8_s32(nullptr, misaligned, 8, 0, 40, a.data(), 64, c.data(), 40).code() == KT_STATUS_INVALID_ARGUMENT);
    PackedB bad_desc = p.b;
    bad_desc.desc.group = 32;
    CHECK(gemm_s8_s32(nullptr, bad_desc, 8, 0, 40, a.data(), 64, c.data(), 40).code() == KT_STATUS_INVALID_ARGUMENT);

    // Group-wise: shapes, groups and pointers are checked before any code runs.
    std::vector<float> gscale(2 * 32, 1.0f), asum(2 * 32, 0.0f);
    std::vector<int8_t> a32(32 * 64, 1);
    GroupedPanel gb;
    gb.n = 32;
    gb.k = 64;
    gb.group = 32;
    gb.tiles = reinterpret_cast<const int8_t *>(p.bytes.get());
    gb.scale = gscale.data();
    GroupedActs ga;
    ga.m = 8;
    ga.k = 64;
    ga.group = 32;
    ga.a = a32.data();
    ga.a_scale = a_scale.data();
    auto grouped = [&](GroupedPanel b, GroupedActs x, int64_t ldc) {
        return gemm_s8_grouped_f32(nullptr, b, x, cf.data(), ldc).code();
    };
    CHECK(grouped(gb, ga, 40) == KT_STATUS_OK);
    GroupedPanel bad = gb;
    bad.group = 64;
    CHECK(grouped(bad, ga, 40) == KT_STATUS_INVALID_ARGUMENT);  // only 16 and 32
    bad = gb;
    bad.k = 48;
    CHECK(grouped(bad, ga, 40) == KT_STATUS_INVALID_ARGUMENT);  // K not a multiple of the group
    bad = gb;
    bad.n = 33;
    CHECK(grouped(bad, ga, 40) == KT_STATUS_INVALID_ARGUMENT);  // more than a panel
    bad = gb;
    bad.scale = nullptr;
    CHECK(grouped(bad, ga, 40) == KT_STATUS_INVALID_ARGUMENT);
    bad = gb;
    bad.neg_min = gscale.data();
    CHECK(grouped(bad, ga, 40) == KT_STATUS_INVALID_ARGUMENT);  // mins without the activation sums
    GroupedActs bad_a = ga;
    bad_a.asum = asum.data();
    CHECK(grouped(bad, bad_a, 40) == KT_STATUS_OK);
    bad_a = ga;
    bad_a.k = 32;
    CHECK(grouped(gb, bad_a, 40) == KT_STATUS_INVALID_ARGUMENT);  // packed for another K
    bad_a = ga;
    bad_a.group = 16;
    CHECK(grouped(gb, bad_a, 40) == KT_STATUS_INVALID_ARGUMENT);  // or another group
    bad_a = ga;
    bad_a.m = 0;
    CHECK(grouped(gb, bad_a, 40) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(grouped(gb, ga, 31) == KT_STATUS_INVALID_ARGUMENT);  // ldc < n

    // The ISA cap applies to the tile machine too, so the pool's lower levels can be forced while it is installed.
    cpu::set_max_isa_level(cpu::IsaLevel::kAvx512);
    CHECK_FALSE(available());
    CHECK(s32(8, 0, 40, a.data(), 64, c.data(), 40) == KT_STATUS_UNSUPPORTED);
    cpu::set_max_isa_level(cpu::IsaLevel::kAmx);
    CHECK(available());
}

TEST_CASE("amx roofline probe: its TMUL loop runs every round of every variant", "[amx]") {
    // The probe's inputs (amx_probe_kernel.cpp): int8 tiles A0 A1 B0 B1 filled with 1 + (byte index % 7) over the
    // 4 KiB of all four (rows of 64 bytes; a K-deep variant reads the first K bytes of A's rows and K / 4 rows of
    // B), bf16 tiles all 2^-8. Its result is the sum of the four accumulators A0 B0, A0 B1, A1 B0, A1 B1 after
    // `rounds` TMULs each (the variant that stores every TMUL's sums: one round's).
    auto byte = [](int tile, int row, int col) { return 1 + (tile * 1024 + row * 64 + col) % 7; };
    auto int8_round = [&](int depth) {
        int64_t sum = 0;
        const int pairs[4][2] = {{0, 2}, {0, 3}, {1, 2}, {1, 3}};
        for (const auto &pr : pairs)
            for (int r = 0; r < 16; ++r)
                for (int n = 0; n < 16; ++n)
                    for (int k = 0; k < depth; ++k) sum += int64_t{byte(pr[0], r, k)} * byte(pr[1], k / 4, 4 * n + k % 4);
        return sum;
    };
    CHECK(probe_macs_per_round(TmulArith::kInt8) == 4 * 16 * 16 * 64);
    CHECK(probe_macs_per_round(TmulArith::kInt8Group16) == 4 * 16 * 16 * 16);
    for_each_amx_runner([&](const char *runner) {
        INFO("on " << runner);
        for (int64_t rounds : {1, 3}) {
            double result = 0;
            REQUIRE(tmul_peak_probe(TmulArith::kInt8, rounds, &result).is_ok());
            CHECK(result == static_cast<double>(rounds * int8_round(64)));
            REQUIRE(tmul_peak_probe(TmulArith::kInt8Group32, rounds, &result).is_ok());
            CHECK(result == static_cast<double>(rounds * int8_round(32)));
            REQUIRE(tmul_peak_probe(TmulArith::kInt8Group16, rounds, &result).is_ok());
            CHECK(result == static_cast<double>(rounds * int8_round(16)));
            REQUIRE(tmul_peak_probe(TmulArith::kInt8Group32Out, rounds, &result).is_ok());
            CHECK(result == static_cast<double>(int8_round(32)));
            // bf16: each output gains 32 products of 2^-16 per round; 1024 outputs.
            REQUIRE(tmul_peak_probe(TmulArith::kBf16, rounds, &result).is_ok());
            CHECK(result == 0.5 * static_cast<double>(rounds));
        }
        double unused = 0;
        CHECK(tmul_peak_probe(TmulArith::kInt8, 0, &unused).code() == KT_STATUS_INVALID_ARGUMENT);
        CHECK(tmul_peak_probe(static_cast<TmulArith>(9), 1, &unused).code() == KT_STATUS_INVALID_ARGUMENT);
    });
}

TEST_CASE("amx packing: the bytes sit where amx_gemm.h says, and bad input is refused", "[amx]") {
    // Each element is checked at the offset computed from the documented formula, written out here again.
    std::mt19937 rng(7);
    const int64_t n = 37, k = 70;
    const auto w8 = random_s8(static_cast<size_t>(n * k), rng);
    const auto w4 = random_s8(static_cast<size_t>(n * 128), rng, -8, 7);
    const auto w16 = random_bf16(static_cast<size_t>(n * k), rng);
    const auto s8 = random_scales(static_cast<size_t>(n), rng);
    const auto s4 = random_scales(static_cast<size_t>(n * 4), rng);
    const int64_t Np = 64;  // N padded to whole 32-column panels

    const PackedBDesc d8{WeightType::kInt8, n, k, 0};
    const Packed p8 = pack(d8, [&](void *dst, size_t sz) { return pack_b_int8(d8, w8.data(), k, s8.data(), dst, sz); });
    const int64_t kp8 = 128, steps8 = 2;
    size_t size8 = 0;
    REQUIRE(packed_b_size(d8, &size8).is_ok());
    CHECK(size8 == static_cast<size_t>(Np * kp8 + 4 * Np));
    size_t nonzero = 0;
    for (int64_t x = 0; x < Np; ++x) {
        for (int64_t y = 0; y < kp8; ++y) {
            const int64_t p = x / 32, h = (x % 32) / 16, j = x % 16, s = y / 64, r = (y % 64) / 4, i = y % 4;
            const int8_t got = static_cast<int8_t>(p8.bytes[static_cast<size_t>(((p * steps8 + s) * 2 + h) * 1024 + r * 64 + 4 * j + i)]);
            const int8_t expect = (x < n && y < k) ? w8[static_cast<size_t>(x * k + y)] : 0;
            REQUIRE(got == expect);
            nonzero += got != 0;
        }
        float sc;
        std::memcpy(&sc, &p8.bytes[static_cast<size_t>(Np * kp8 + 4 * x)], 4);
        CHECK(sc == (x < n ? s8[static_cast<size_t>(x)] : 0.0f));
    }
    CHECK(nonzero > 0);

    const PackedBDesc d4{WeightType::kInt4, n, 128, 32};
    const Packed p4 = pack(d4, [&](void *dst, size_t sz) { return pack_b_int4(d4, w4.data(), 128, s4.data(), dst, sz); });
    for (int64_t x = 0; x < Np; ++x) {
        for (int64_t y = 0; y < 128; ++y) {
            const int64_t p = x / 32, h = (x % 32) / 16, j = x % 16, u = y / 128, r = (y % 64) / 4, i = y % 4;
            const uint8_t byte = p4.bytes[static_cast<size_t>(((p * 1 + u) * 2 + h) * 1024 + r * 64 + 4 * j + i)];
            const int nib = ((y % 128) < 64 ? byte : byte >> 4) & 0xF;
            const int value = nib >= 8 ? nib - 16 : nib;
            REQUIRE(value == (x < n ? w4[static_cast<size_t>(x * 128 + y)] : 0));
        }
        for (int64_t g = 0; g < 4; ++g) {
            float sc;
            std::memcpy(&sc, &p4.bytes[static_cast<size_t>(Np * 128 / 2 + 4 * (((x / 32) * 4 + g) * 32 + x % 32))], 4);
            CHECK(sc == (x < n ? s4[static_cast<size_t>(x * 4 + g)] / 16.0f : 0.0f));
        }
    }

    const PackedBDesc d16{WeightType::kBf16, n, k, 0};
    const Packed p16 = pack(d16, [&](void *dst, size_t sz) { return pack_b_bf16(d16, w16.data(), k, dst, sz); });
    const int64_t kp16 = 96, steps16 = 3;
    for (int64_t x = 0; x < Np; ++x) {
        for (int64_t y = 0; y < kp16; ++y) {
            const int64_t p = x / 32, h = (x % 32) / 16, j = x % 16, s = y / 32, r = (y % 32) / 2, i = y % 2;
            uint16_t got;
            std::memcpy(&got, &p16.bytes[static_cast<size_t>(((p * steps16 + s) * 2 + h) * 1024 + r * 64 + 4 * j + 2 * i)], 2);
            REQUIRE(got == ((x < n && y < k) ? w16[static_cast<size_t>(x * k + y)] : 0));
        }
    }

    // Refusals.
    size_t size = 0;
    CHECK(packed_b_size({WeightType::kInt4, n, 100, 32}, &size).code() == KT_STATUS_INVALID_ARGUMENT);  // K % G
    CHECK(packed_b_size({WeightType::kInt4, n, 128, 16}, &size).code() == KT_STATUS_INVALID_ARGUMENT);  // G
    CHECK(packed_b_size({WeightType::kInt8, 0, 64, 0}, &size).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(packed_b_size({WeightType::kInt8, n, int64_t{1} << 40, 0}, &size).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(packed_b_size({static_cast<WeightType>(9), n, 64, 0}, &size).code() == KT_STATUS_INVALID_ARGUMENT);
    AlignedBytes buf = aligned_bytes(size8 + 64);
    CHECK(pack_b_int8(d8, w8.data(), k, s8.data(), buf.get(), size8 - 1).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(pack_b_int8(d8, w8.data(), k, s8.data(), buf.get() + 8, size8).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(pack_b_int8(d8, w8.data(), k - 1, s8.data(), buf.get(), size8).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(pack_b_int8(d8, nullptr, k, s8.data(), buf.get(), size8).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(pack_b_int8(d8, w8.data(), k, nullptr, buf.get(), size8).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(pack_b_bf16(d8, w16.data(), k, buf.get(), size8).code() == KT_STATUS_INVALID_ARGUMENT);  // type mismatch
    auto bad4 = w4;
    bad4[5] = 8;
    size_t size4 = 0;
    REQUIRE(packed_b_size(d4, &size4).is_ok());
    AlignedBytes buf4 = aligned_bytes(size4);
    std::memset(buf4.get(), 0xAB, size4);
    CHECK(pack_b_int4(d4, bad4.data(), 128, s4.data(), buf4.get(), size4).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(buf4[0] == 0xAB);  // nothing written
}
