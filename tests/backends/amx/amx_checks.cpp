#include "amx/amx_checks.h"

#include <cmath>
#include <cstring>

#include "amx/amx_reference.h"
#include "amx/amx_test_util.h"
#include "backends/cpu/amx/amx_pack_layout.h"

using namespace kt::cpu::amx;

namespace kt::test {

std::string describe(const Shape &s) {
    return "M=" + std::to_string(s.m) + " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) +
           (s.group ? " G=" + std::to_string(s.group) : "");
}

namespace {

// Runs a GEMM over [0, N) as two calls split at the first panel boundary when N > 32, so that n_begin != 0 is
// exercised; with or without an explicit session.
template <typename Call>
void run_split(int64_t n, bool with_session, Call &&call) {
    TileSession session;
    TileSession *s = with_session ? &session : nullptr;
    const int64_t split = n > kNPanel ? kNPanel : n;
    Status st = call(s, 0, split);
    INFO(st.message());
    REQUIRE(st.is_ok());
    if (split < n) {
        st = call(s, split, n);
        INFO(st.message());
        REQUIRE(st.is_ok());
    }
    if (with_session) REQUIRE(session.end().is_ok());
}

// A copy of A [m][lda] padded to whole 16-row tiles, the extra rows random (finite) values from `fill`: a kernel told
// that A is padded may read them, and must not let them into rows < m. Sized exactly (AddressSanitizer).
template <typename T, typename Fill>
std::vector<T> padded_rows(const std::vector<T> &a, int64_t m, int64_t lda, Fill fill) {
    const int64_t rows = (m + 15) / 16 * 16;
    std::vector<T> p = fill(static_cast<size_t>((rows - m) * lda));
    p.insert(p.begin(), a.begin(), a.begin() + m * lda);
    return p;
}

}  // namespace

void check_int8(const Shape &sh, uint32_t seed) {
    std::mt19937 rng(seed);
    // Odd M: lda == K, so reading past a row's end on the last row is an AddressSanitizer error.
    const int64_t lda = sh.k + (sh.m % 2 ? 0 : 5), ldw = sh.k + 2;
    const auto a = random_s8(static_cast<size_t>(sh.m * lda), rng);
    const auto w = random_s8(static_cast<size_t>(sh.n * ldw), rng);
    const auto w_scale = random_scales(static_cast<size_t>(sh.n), rng);
    const auto a_scale = random_scales(static_cast<size_t>(sh.m), rng);
    const PackedBDesc desc{WeightType::kInt8, sh.n, sh.k, 0};
    const Packed p = pack(desc, [&](void *dst, size_t size) {
        return pack_b_int8(desc, w.data(), ldw, w_scale.data(), dst, size);
    });
    const auto ref_s32 = amx_ref::gemm_s8_s32(sh.m, sh.n, sh.k, a.data(), lda, w.data(), ldw);
    const auto ref_f32 =
        amx_ref::gemm_s8_f32(sh.m, sh.n, sh.k, a.data(), lda, a_scale.data(), w.data(), ldw, w_scale.data());
    for_each_amx_runner([&](const char *runner) {
        INFO(runner << ": " << describe(sh));
        OutC<int32_t> c32(sh.m, sh.n);
        run_split(sh.n, true, [&](TileSession *s, int64_t nb, int64_t ne) {
            return gemm_s8_s32(s, p.b, sh.m, nb, ne, a.data(), lda, c32.c.data() + nb, c32.ldc);
        });
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                INFO("s32 C[" << i << "][" << j << "]");
                REQUIRE(c32.at(i, j) == ref_s32[static_cast<size_t>(i * sh.n + j)]);
            }
        c32.check_sentinels();

        OutC<float> cf(sh.m, sh.n);
        run_split(sh.n, false, [&](TileSession *s, int64_t nb, int64_t ne) {
            return gemm_s8_f32(s, p.b, sh.m, nb, ne, a.data(), lda, a_scale.data(), cf.c.data() + nb, cf.ldc);
        });
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                INFO("f32 C[" << i << "][" << j << "]");
                REQUIRE(f32_bits(cf.at(i, j)) == f32_bits(ref_f32[static_cast<size_t>(i * sh.n + j)]));
            }
        cf.check_sentinels();

        if (sh.m % 16 == 0) return;
        const auto ap = padded_rows(a, sh.m, lda, [&](size_t n) { return random_s8(n, rng); });
        OutC<int32_t> cp(sh.m, sh.n);
        OutC<float> cpf(sh.m, sh.n);
        run_split(sh.n, true, [&](TileSession *s, int64_t nb, int64_t ne) {
            const Status st = gemm_s8_s32(s, p.b, sh.m, nb, ne, ap.data(), lda, cp.c.data() + nb, cp.ldc, true);
            return st.is_ok() ? gemm_s8_f32(s, p.b, sh.m, nb, ne, ap.data(), lda, a_scale.data(), cpf.c.data() + nb,
                                            cpf.ldc, true)
                              : st;
        });
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                INFO("padded A: C[" << i << "][" << j << "]");
                REQUIRE(cp.at(i, j) == ref_s32[static_cast<size_t>(i * sh.n + j)]);
                REQUIRE(f32_bits(cpf.at(i, j)) == f32_bits(ref_f32[static_cast<size_t>(i * sh.n + j)]));
            }
        cp.check_sentinels();
        cpf.check_sentinels();
    });
}

void check_int4(const Shape &sh, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t lda = sh.k + (sh.m % 2 ? 0 : 1), ldw = sh.k + 3, groups = sh.k / sh.group;
    const auto a = random_s8(static_cast<size_t>(sh.m * lda), rng);
    const auto w = random_s8(static_cast<size_t>(sh.n * ldw), rng, -8, 7);
    const auto w_scale = random_scales(static_cast<size_t>(sh.n * groups), rng);
    const auto a_scale = random_scales(static_cast<size_t>(sh.m), rng);
    const PackedBDesc desc{WeightType::kInt4, sh.n, sh.k, sh.group};
    const Packed p = pack(desc, [&](void *dst, size_t size) {
        return pack_b_int4(desc, w.data(), ldw, w_scale.data(), dst, size);
    });
    const auto ref = amx_ref::gemm_s4_f32(sh.m, sh.n, sh.k, sh.group, a.data(), lda, a_scale.data(), w.data(), ldw,
                                          w_scale.data());
    for_each_amx_runner([&](const char *runner) {
        INFO(runner << ": " << describe(sh));
        OutC<float> c(sh.m, sh.n);
        run_split(sh.n, true, [&](TileSession *s, int64_t nb, int64_t ne) {
            return gemm_s8_f32(s, p.b, sh.m, nb, ne, a.data(), lda, a_scale.data(), c.c.data() + nb, c.ldc);
        });
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                INFO("C[" << i << "][" << j << "]");
                REQUIRE(f32_bits(c.at(i, j)) == f32_bits(ref[static_cast<size_t>(i * sh.n + j)]));
            }
        c.check_sentinels();

        if (sh.m % 16 == 0) return;
        const auto ap = padded_rows(a, sh.m, lda, [&](size_t n) { return random_s8(n, rng); });
        OutC<float> cp(sh.m, sh.n);
        run_split(sh.n, false, [&](TileSession *s, int64_t nb, int64_t ne) {
            return gemm_s8_f32(s, p.b, sh.m, nb, ne, ap.data(), lda, a_scale.data(), cp.c.data() + nb, cp.ldc, true);
        });
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                INFO("padded A: C[" << i << "][" << j << "]");
                REQUIRE(f32_bits(cp.at(i, j)) == f32_bits(ref[static_cast<size_t>(i * sh.n + j)]));
            }
        cp.check_sentinels();
    });
}

void check_bf16(const Shape &sh, uint32_t seed) {
    std::mt19937 rng(seed);
    // Odd M: lda == K (reads past the last row are AddressSanitizer errors); even M: the columns between K and
    // lda hold NaN, so a kernel that reads past K in any row turns its output into NaN even without ASan.
    const int64_t lda = sh.k + (sh.m % 2 ? 0 : 7), ldw = sh.k;
    auto a = random_bf16(static_cast<size_t>(sh.m * lda), rng);
    for (int64_t i = 0; i < sh.m; ++i)
        for (int64_t x = sh.k; x < lda; ++x) a[static_cast<size_t>(i * lda + x)] = 0x7FC1;
    const auto w = random_bf16(static_cast<size_t>(sh.n * ldw), rng);
    const PackedBDesc desc{WeightType::kBf16, sh.n, sh.k, 0};
    const Packed p = pack(desc, [&](void *dst, size_t size) { return pack_b_bf16(desc, w.data(), ldw, dst, size); });
    const auto sdm = amx_ref::gemm_bf16_sdm(sh.m, sh.n, sh.k, a.data(), lda, w.data(), ldw);
    std::vector<double> exact, abs_sum;
    amx_ref::gemm_bf16_f64(sh.m, sh.n, sh.k, a.data(), lda, w.data(), ldw, &exact, &abs_sum);
    // Products of bf16 are exact in fp32; every sum is one fp32 rounding, and an output goes through at most K + 2
    // of them (16-term chains per step, then two adds per step), so |error| <= (K + 2) * 2^-24 * sum |a*w|.
    const double bound_factor = static_cast<double>(sh.k + 2) * std::ldexp(1.0, -24);
    double worst = 0.0;
    for_each_amx_runner([&](const char *runner) {
        INFO(runner << ": " << describe(sh));
        OutC<float> c(sh.m, sh.n);
        run_split(sh.n, sh.m % 2 == 0, [&](TileSession *s, int64_t nb, int64_t ne) {
            return gemm_bf16_f32(s, p.b, sh.m, nb, ne, a.data(), lda, c.c.data() + nb, c.ldc);
        });
        const bool native = std::string(runner) != "tile machine";
        size_t sdm_mismatches = 0;
        for (int64_t i = 0; i < sh.m; ++i) {
            for (int64_t j = 0; j < sh.n; ++j) {
                const size_t x = static_cast<size_t>(i * sh.n + j);
                const double err = std::fabs(static_cast<double>(c.at(i, j)) - exact[x]);
                INFO("C[" << i << "][" << j << "] = " << c.at(i, j) << ", fp64 " << exact[x]);
                REQUIRE(err <= bound_factor * abs_sum[x]);
                if (abs_sum[x] > 0) worst = std::max(worst, err / (bound_factor * abs_sum[x]));
                if (f32_bits(c.at(i, j)) != f32_bits(sdm[x])) ++sdm_mismatches;
                if (!native) REQUIRE(f32_bits(c.at(i, j)) == f32_bits(sdm[x]));
            }
        }
        // On hardware, bit-exactness with the SDM pseudocode is the conformance question of reference §4.6.
        if (native) CHECK(sdm_mismatches == 0);
        c.check_sentinels();

        if (sh.m % 16 == 0) return;
        // Padded A: the same bits as the unpadded call, whatever finite values the extra rows hold.
        auto ap = padded_rows(a, sh.m, lda, [&](size_t n) { return random_bf16(n, rng); });
        OutC<float> cp(sh.m, sh.n);
        run_split(sh.n, true, [&](TileSession *s, int64_t nb, int64_t ne) {
            return gemm_bf16_f32(s, p.b, sh.m, nb, ne, ap.data(), lda, cp.c.data() + nb, cp.ldc, true);
        });
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                INFO("padded A: C[" << i << "][" << j << "]");
                REQUIRE(f32_bits(cp.at(i, j)) == f32_bits(c.at(i, j)));
            }
        cp.check_sentinels();
    });
    CHECK(worst <= 1.0);
}

void check_grouped(const Shape &sh, bool mins, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t groups = sh.k / sh.group, ldw = sh.k + 1, panels = (sh.n + kNPanel - 1) / kNPanel;
    // A row-major for the reference, and packed as GroupedActs states it (row r of block b, group g at
    // ((b * G + g) * 32 + r) * group; rows m.. of the last block zero), sized exactly.
    const int64_t rows = (sh.m + kMBlock - 1) / kMBlock * kMBlock, lda = sh.k;
    const auto a_rand = random_s8(static_cast<size_t>(sh.m * lda), rng);
    const int8_t *a8 = a_rand.data();
    AlignedBytes a = aligned_bytes(static_cast<size_t>((rows * sh.k + 63) / 64 * 64));
    std::memset(a.get(), 0, static_cast<size_t>(rows * sh.k));
    for (int64_t i = 0; i < sh.m; ++i)
        for (int64_t g = 0; g < groups; ++g)
            std::memcpy(a.get() + (((i / kMBlock) * groups + g) * kMBlock + i % kMBlock) * sh.group, a8 + i * lda + g * sh.group,
                        static_cast<size_t>(sh.group));
    const auto w = random_s8(static_cast<size_t>(sh.n * ldw), rng);
    const auto w_scale = random_scales(static_cast<size_t>(sh.n * groups), rng);
    std::vector<float> w_neg_min = random_scales(static_cast<size_t>(sh.n * groups), rng);
    for (size_t i = 0; i < w_neg_min.size(); i += 3) w_neg_min[i] = -w_neg_min[i];  // both signs
    const auto a_scale = random_scales(static_cast<size_t>(sh.m), rng);
    std::vector<float> asum(static_cast<size_t>(rows * groups));
    for (int64_t i = 0; i < sh.m; ++i)
        for (int64_t g = 0; g < groups; ++g) {
            int32_t s = 0;
            for (int64_t x = 0; x < sh.group; ++x) s += a8[i * lda + g * sh.group + x];
            asum[static_cast<size_t>(((i / kMBlock) * groups + g) * kMBlock + i % kMBlock)] = static_cast<float>(s);
        }
    // The tiles of each panel: the INT8 layout (pack_b_int8 of the codes; its scales are not used).
    const std::vector<float> unit(static_cast<size_t>(sh.n), 1.0f);
    const PackedBDesc desc{WeightType::kInt8, sh.n, sh.k, 0};
    const Packed p = pack(desc, [&](void *dst, size_t size) {
        return pack_b_int8(desc, w.data(), ldw, unit.data(), dst, size);
    });
    PackedLayout layout;
    REQUIRE(packed_layout(desc, &layout).is_ok());
    // Scales per panel as [groups][32], zero for the padding columns.
    std::vector<float> scale(static_cast<size_t>(panels * groups * kNPanel)), neg_min(scale.size());
    for (int64_t j = 0; j < sh.n; ++j)
        for (int64_t g = 0; g < groups; ++g) {
            const size_t at = static_cast<size_t>(((j / kNPanel) * groups + g) * kNPanel + j % kNPanel);
            scale[at] = w_scale[static_cast<size_t>(j * groups + g)];
            neg_min[at] = w_neg_min[static_cast<size_t>(j * groups + g)];
        }
    const auto ref = amx_ref::gemm_s8_grouped_f32(sh.m, sh.n, sh.k, sh.group, a8, lda, a_scale.data(), w.data(), ldw,
                                                  w_scale.data(), mins ? w_neg_min.data() : nullptr);
    GroupedActs acts;
    acts.m = sh.m;
    acts.k = sh.k;
    acts.group = sh.group;
    acts.a = reinterpret_cast<const int8_t *>(a.get());
    acts.a_scale = a_scale.data();
    acts.asum = mins ? asum.data() : nullptr;
    for_each_amx_runner([&](const char *runner) {
        INFO(runner << ": " << describe(sh) << (mins ? " with mins" : ""));
        OutC<float> c(sh.m, sh.n);
        TileSession session;
        for (int64_t panel = 0; panel < panels; ++panel) {
            GroupedPanel b;
            b.n = static_cast<int32_t>(std::min<int64_t>(kNPanel, sh.n - panel * kNPanel));
            b.k = sh.k;
            b.group = sh.group;
            b.tiles = reinterpret_cast<const int8_t *>(p.bytes.get() + layout.panel_offset(panel));
            b.scale = scale.data() + panel * groups * kNPanel;
            b.neg_min = mins ? neg_min.data() + panel * groups * kNPanel : nullptr;
            // The first panel brackets itself, the others share a session.
            const Status s = gemm_s8_grouped_f32(panel == 0 ? nullptr : &session, b, acts,
                                                 c.c.data() + panel * kNPanel, c.ldc);
            INFO(s.message());
            REQUIRE(s.is_ok());
        }
        REQUIRE(session.end().is_ok());
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                INFO("C[" << i << "][" << j << "]");
                REQUIRE(f32_bits(c.at(i, j)) == f32_bits(ref[static_cast<size_t>(i * sh.n + j)]));
            }
        c.check_sentinels();
    });
}

}  // namespace kt::test
