// The GEMM kernels of every kernel set this host can run (scalar, AVX2, AVX-512 with and without VNNI / BF16, AMX
// natively), for every packed format, against a double-precision reference computed from the GGUF reference
// dequantizer and the activation quantization stated in kernels.h; and each against the reference that states its
// own operation order, bit for bit: every integer path and every non-AMX float path gives the same bits on every
// ISA, and a BF16 call AMX ran gives the bits of TDPBF16PS's order as the silicon vectors (shared/testdata/amx)
// pin it (amx_ref::gemm_bf16_sdm).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "amx/amx_reference.h"
#include "tile_machine/tile_machine.h"
#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/kernels.h"
#include "core/fp16.h"
#include "mem/numa_buffer.h"
#include "moe/weights.h"
#include "ops/types.h"
#include "support/quant_test_support.h"
#include "support/test_support.h"

using namespace kt;
using cpu::PackedType;

namespace {

struct Case {
    int32_t src_type;
    moe::TargetFormat target;
    int32_t group;  // INT4
    std::vector<int64_t> ks;
};

std::vector<const cpu::KernelSet *> all_sets() {
    const cpu::KernelSet *sets[16];
    const int n = cpu::supported_kernel_sets(sets, 16);
    return std::vector<const cpu::KernelSet *>(sets, sets + n);
}

// The weights the kernel should be computing with: dequantized source, or the stated INT8 / INT4 / BF16 rounding.
std::vector<double> expected_weights(const Case &c, const std::vector<uint8_t> &src, int64_t rows, int64_t cols) {
    const std::vector<float> w = test::dequantize_rows(c.src_type, src, rows, cols);
    std::vector<double> out(w.begin(), w.end());
    if (c.target == moe::TargetFormat::kInt8) {
        for (int64_t r = 0; r < rows; ++r) {
            float amax = 0.0f;
            for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(w[r * cols + k]));
            const float s = amax / 127.0f;
            for (int64_t k = 0; k < cols; ++k)
                out[r * cols + k] = s > 0 ? static_cast<double>(std::nearbyint(w[r * cols + k] / s)) * s : 0.0;
        }
    } else if (c.target == moe::TargetFormat::kInt4) {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t g = 0; g < cols; g += c.group) {
                float amax = 0.0f;
                for (int64_t k = g; k < g + c.group; ++k) amax = std::max(amax, std::fabs(w[r * cols + k]));
                const float s = amax / 7.0f;
                for (int64_t k = g; k < g + c.group; ++k) {
                    const float q = s > 0 ? std::min(7.0f, std::max(-8.0f, std::nearbyint(w[r * cols + k] / s))) : 0.0f;
                    out[r * cols + k] = static_cast<double>(q) * s;
                }
            }
    } else if (c.target == moe::TargetFormat::kBf16) {
        for (size_t i = 0; i < w.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(w[i]));
    }
    return out;
}

bool is_bf16(const Case &c) {
    return c.target == moe::TargetFormat::kBf16 || (c.target == moe::TargetFormat::kAsSource && c.src_type == KT_TYPE_BF16);
}

// A BF16 GEMM in the order of AMX's TDPBF16PS (amx_reference.h), on the bf16 weights (wref holds bf16 values) and
// the bf16-rounded activations of rows [r0, r0 + n) x columns [k0, k0 + k).
std::vector<float> bf16_sdm_reference(const std::vector<double> &wref, int64_t cols, int64_t r0, int64_t n, int64_t k0,
                                      int64_t k, const std::vector<float> &x, int64_t m) {
    std::vector<uint16_t> a(static_cast<size_t>(m * k)), w(static_cast<size_t>(n * k));
    for (size_t i = 0; i < a.size(); ++i) a[i] = f32_to_bf16(x[i]);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t kk = 0; kk < k; ++kk)
            w[static_cast<size_t>(j * k + kk)] = f32_to_bf16(static_cast<float>(wref[static_cast<size_t>((r0 + j) * cols + k0 + kk)]));
    return test::amx_ref::gemm_bf16_sdm(m, n, k, a.data(), k, w.data(), k);
}

// Runs one GEMM with `ks` over rows [r0, r0 + n) x columns [k0, k0 + k) of a [rows, cols] source; *ran_on receives
// the ISA level whose code computed it. lend_scratch: the call gets scratch (GemmActs::scratch) as the library's
// callers lend it, filled with a marker first; *scratch_use (may be nullptr) says which parts of it the kernels
// wrote: the decoded tile rows (the first decode_scratch_bytes) and the prepared scales (the rest). A write past
// gemm_scratch_bytes fails the test.
struct ScratchUse {
    bool decoded = false, prepared = false;
};
std::vector<float> run_gemm(const cpu::KernelSet &ks, const Case &c, const moe::MatrixSource &src, int64_t r0, int64_t n,
                            int64_t k0, int64_t k, const std::vector<float> &x /* [m][k] */, int64_t m,
                            cpu::IsaLevel *ran_on, bool lend_scratch = true, ScratchUse *scratch_use = nullptr) {
    moe::PackSpec spec;
    REQUIRE(moe::pack_spec_for(src, c.target, c.group, &spec).is_ok());
    cpu::PackedLayout layout;
    const Status ls = moe::slice_layout(src, spec, r0, r0 + n, k0, k0 + k, &layout);
    INFO(ls.message());
    REQUIRE(ls.is_ok());
    mem::NumaBuffer buf;
    REQUIRE(mem::NumaBuffer::allocate(layout.bytes, nullptr, -1, &buf).is_ok());
    REQUIRE(moe::pack_slice(src, spec, r0, k0, layout, 0, layout.panels, buf.as<uint8_t>()).is_ok());
    cpu::PackedMatrix w{layout, buf.as<uint8_t>()};

    cpu::GemmActs a;
    std::vector<int8_t> q;
    std::vector<float> scale;
    std::vector<int32_t> sums;
    std::vector<uint16_t> bf;
    if (layout.type == PackedType::kBf16) {
        bf.resize(static_cast<size_t>(m * layout.kp));
        for (int64_t i = 0; i < m; ++i) ks.convert_row_bf16(x.data() + i * k, false, k, layout.kp, bf.data() + i * layout.kp);
        a.bf16 = bf.data();
        a.bf16_ld = layout.kp;
    } else {
        const cpu::QuantSpec qs = cpu::quant_spec(layout);
        const int64_t ns = cpu::quant_sums_per_row(qs, k);
        q.resize(static_cast<size_t>(m * layout.kp));
        scale.resize(static_cast<size_t>(m));
        sums.resize(static_cast<size_t>(m * ns));
        for (int64_t i = 0; i < m; ++i) {
            scale[static_cast<size_t>(i)] = ks.quantize_row(x.data() + i * k, false, k, layout.kp, q.data() + i * layout.kp);
            cpu::group_sums_row(q.data() + i * layout.kp, k, qs, sums.data() + i * ns);
        }
        a.q = q.data();
        a.q_ld = layout.kp;
        a.scale = scale.data();
        a.sums = sums.data();
        a.sums_ld = ns;
    }
    constexpr uint8_t kMarker = 0xA5;
    const size_t scratch_bytes = cpu::gemm_scratch_bytes(layout), decoded_bytes = cpu::decode_scratch_bytes(layout);
    mem::NumaBuffer scratch;
    if (lend_scratch) {
        REQUIRE(mem::NumaBuffer::allocate(scratch_bytes + 64, nullptr, -1, &scratch).is_ok());
        std::memset(scratch.as<uint8_t>(), kMarker, scratch_bytes + 64);
        a.scratch = scratch.as<uint8_t>();
    }
    const int64_t ldc = n + 3;
    std::vector<float> out(static_cast<size_t>(m * ldc), -12345.0f);
    cpu::GemmCounter counter;
    a.counter = &counter;
    cpu::gemm(ks, w, a, m, 0, n, out.data(), ldc);
    if (lend_scratch) {
        const uint8_t *sp = scratch.as<uint8_t>();
        ScratchUse use;
        for (size_t i = 0; i < decoded_bytes && !use.decoded; ++i) use.decoded = sp[i] != kMarker;
        for (size_t i = decoded_bytes; i < scratch_bytes && !use.prepared; ++i) use.prepared = sp[i] != kMarker;
        for (size_t i = scratch_bytes; i < scratch_bytes + 64; ++i) CHECK(sp[i] == kMarker);
        if (scratch_use) *scratch_use = use;
    }
    const cpu::GemmCounts counts = counter.read();
    REQUIRE(counts.total_calls() == 1);
    CHECK(counts.amx_fallbacks == 0);
    for (int l = 0; l < cpu::kIsaLevels; ++l)
        if (counts.calls[l]) *ran_on = static_cast<cpu::IsaLevel>(l);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = n; j < ldc; ++j) CHECK(out[static_cast<size_t>(i * ldc + j)] == -12345.0f);  // nothing past n_end
    std::vector<float> result(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) std::memcpy(&result[i * n], &out[i * ldc], sizeof(float) * n);
    return result;
}

void check_case(const Case &c, uint64_t seed) {
    const auto sets = all_sets();
    const int64_t rows = 70;
    for (int64_t cols : c.ks) {
        const std::vector<uint8_t> bytes = test::random_gguf_rows(c.src_type, rows, cols, seed + cols);
        moe::MatrixSource src;
        REQUIRE(moe::make_source(c.src_type, bytes.data(), rows, cols, &src).is_ok());
        const std::vector<double> wref = expected_weights(c, bytes, rows, cols);

        // Whole matrices of several widths, and a K slice starting mid-super-block where the format allows one.
        struct Slice {
            int64_t r0, n, k0, k;
        };
        std::vector<Slice> slices = {{0, rows, 0, cols}, {0, 1, 0, cols}, {5, 31, 0, cols}, {32, 33, 0, cols}};
        moe::PackSpec spec;
        REQUIRE(moe::pack_spec_for(src, c.target, c.group, &spec).is_ok());
        const int64_t gran = moe::slice_k_granularity(src, spec);
        if (cols > gran && cols % gran == 0) slices.push_back({3, 40, gran, cols - gran});

        for (const Slice &sl : slices) {
            for (int64_t m : {1, 2, 3, 5, 7, 9, 31, 33}) {
                INFO("type " << ops::type_traits(c.src_type)->name << " target " << static_cast<int>(c.target) << " group "
                             << c.group << " K " << cols << " rows [" << sl.r0 << "+" << sl.n << ") cols [" << sl.k0
                             << "+" << sl.k << ") m " << m);
                const std::vector<float> x = test::random_normal(static_cast<size_t>(m * sl.k), seed * 7 + m);

                // Reference: activations quantized (or bf16-rounded) as kernels.h states, sums in double.
                std::vector<double> expect(static_cast<size_t>(m * sl.n)), magnitude(expect.size());
                for (int64_t i = 0; i < m; ++i) {
                    const float *xi = x.data() + i * sl.k;
                    float amax = 0.0f;
                    for (int64_t kk = 0; kk < sl.k; ++kk) amax = std::max(amax, std::fabs(xi[kk]));
                    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
                    for (int64_t j = 0; j < sl.n; ++j) {
                        double sum = 0, mag = 0;
                        for (int64_t kk = 0; kk < sl.k; ++kk) {
                            const double a = is_bf16(c) ? static_cast<double>(bf16_to_f32(f32_to_bf16(xi[kk])))
                                                        : static_cast<double>(std::nearbyint(xi[kk] * inv)) * (amax / 127.0f);
                            const double wv = wref[static_cast<size_t>((sl.r0 + j) * cols + sl.k0 + kk)];
                            sum += a * wv;
                            mag += std::fabs(a * wv);
                        }
                        expect[static_cast<size_t>(i * sl.n + j)] = sum;
                        magnitude[static_cast<size_t>(i * sl.n + j)] = mag;
                    }
                }

                std::vector<float> first;
                for (const cpu::KernelSet *ks : sets) {
                    INFO("kernel set " << ks->name);
                    cpu::IsaLevel ran_on = cpu::IsaLevel::kScalar;
                    const std::vector<float> y = run_gemm(*ks, c, src, sl.r0, sl.n, sl.k0, sl.k, x, m, &ran_on);
                    INFO("computed by " << cpu::isa_level_name(ran_on) << " code");
                    // The AMX set takes a call with enough rows whenever AMX has a kernel for the format: every
                    // format kt packs (the GGUF ones through the group-wise kernels).
                    if (ks->level == cpu::IsaLevel::kAmx) {
                        cpu::PackedLayout layout;
                        REQUIRE(moe::slice_layout(src, spec, sl.r0, sl.r0 + sl.n, sl.k0, sl.k0 + sl.k, &layout).is_ok());
                        CHECK((ran_on == cpu::IsaLevel::kAmx) == (m >= cpu::amx_min_rows(layout)));
                    } else {
                        CHECK(ran_on == ks->level);
                    }
                    int64_t bad = 0;
                    double worst = 0;
                    for (size_t e = 0; e < y.size(); ++e) {
                        const double err = std::fabs(static_cast<double>(y[e]) - expect[e]);
                        // fp32 rounding of group partial sums: a few ulps of the sum of |products|.
                        const double bound = 4e-6 * magnitude[e] + 1e-30;
                        worst = std::max(worst, err / bound);
                        bad += !(err <= bound);
                    }
                    INFO("worst error / bound = " << worst);
                    CHECK(bad == 0);
                    if (ran_on == cpu::IsaLevel::kAmx && is_bf16(c)) {
                        // TDPBF16PS's order, not VDPBF16PS's: the bits of the silicon-order model.
                        const std::vector<float> sdm = bf16_sdm_reference(wref, cols, sl.r0, sl.n, sl.k0, sl.k, x, m);
                        CHECK(std::memcmp(sdm.data(), y.data(), sizeof(float) * y.size()) == 0);
                    } else if (first.empty()) {
                        first = y;
                    } else {
                        CHECK(std::memcmp(first.data(), y.data(), sizeof(float) * y.size()) == 0);  // same bits on every ISA
                    }
                }
            }
        }
    }
}

}  // namespace

TEST_CASE("gemm kernels: this host's kernel sets") {
    const auto sets = all_sets();
    std::string names;
    for (const auto *s : sets) names += std::string(s->name) + " ";
    INFO("kernel sets: " << names);
    CHECK(sets.front()->level == cpu::IsaLevel::kScalar);
    CHECK(sets.size() >= 1);
}

TEST_CASE("gemm kernels: INT8 per channel from F32 and F16") {
    check_case({KT_TYPE_F32, moe::TargetFormat::kInt8, 0, {1, 7, 64, 100, 200}}, 11);
    check_case({KT_TYPE_F16, moe::TargetFormat::kInt8, 0, {96}}, 12);
}

TEST_CASE("gemm kernels: INT4 with groups of 32 64 and 128") {
    check_case({KT_TYPE_F32, moe::TargetFormat::kInt4, 32, {32, 96, 160}}, 21);
    check_case({KT_TYPE_F32, moe::TargetFormat::kInt4, 64, {64, 192}}, 22);
    check_case({KT_TYPE_BF16, moe::TargetFormat::kInt4, 128, {128, 384}}, 23);
}

TEST_CASE("gemm kernels: BF16 kept and converted") {
    check_case({KT_TYPE_BF16, moe::TargetFormat::kAsSource, 0, {2, 30, 64, 98}}, 31);
    check_case({KT_TYPE_F32, moe::TargetFormat::kBf16, 0, {1, 33}}, 32);
}

TEST_CASE("gemm kernels: the 32-wide formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) as stored") {
    // K = 32 and 96 leave most of a 128-K nibble tile as padding.
    check_case({KT_TYPE_Q8_0, moe::TargetFormat::kAsSource, 0, {32, 96, 160}}, 41);
    check_case({KT_TYPE_Q4_0, moe::TargetFormat::kAsSource, 0, {32, 96, 256}}, 42);
    check_case({KT_TYPE_Q4_1, moe::TargetFormat::kAsSource, 0, {32, 160}}, 43);
    check_case({KT_TYPE_Q5_0, moe::TargetFormat::kAsSource, 0, {96, 256}}, 44);
    check_case({KT_TYPE_Q5_1, moe::TargetFormat::kAsSource, 0, {32, 160}}, 45);
    check_case({KT_TYPE_IQ4_NL, moe::TargetFormat::kAsSource, 0, {96, 256}}, 46);
}

TEST_CASE("gemm kernels: K-quants (Q2_K to Q6_K) and IQ4_XS as stored") {
    check_case({KT_TYPE_Q4_K, moe::TargetFormat::kAsSource, 0, {256, 768}}, 51);
    check_case({KT_TYPE_Q5_K, moe::TargetFormat::kAsSource, 0, {256, 512}}, 52);
    check_case({KT_TYPE_Q6_K, moe::TargetFormat::kAsSource, 0, {256, 768}}, 53);
    check_case({KT_TYPE_IQ4_XS, moe::TargetFormat::kAsSource, 0, {256, 512}}, 54);
    check_case({KT_TYPE_Q2_K, moe::TargetFormat::kAsSource, 0, {256, 768}}, 56);
    check_case({KT_TYPE_Q3_K, moe::TargetFormat::kAsSource, 0, {256, 768}}, 57);
}

TEST_CASE("gemm kernels: the IQ1-IQ3 grid formats as their code book indices (IQ_GRID3, IQ_GRID)") {
    // Exact weights (packed.h), so the bound of the formats kept as stored holds; some blocks have subnormal d
    // (quant_test_support.cpp), where an f16 d / 8 would not be exact.
    check_case({KT_TYPE_IQ2_XXS, moe::TargetFormat::kAsSource, 0, {256, 768}}, 61);
    check_case({KT_TYPE_IQ2_XS, moe::TargetFormat::kAsSource, 0, {256, 512}}, 62);
    check_case({KT_TYPE_IQ2_S, moe::TargetFormat::kAsSource, 0, {256, 512}}, 63);
    check_case({KT_TYPE_IQ3_XXS, moe::TargetFormat::kAsSource, 0, {256, 768}}, 64);
    check_case({KT_TYPE_IQ3_S, moe::TargetFormat::kAsSource, 0, {256, 512}}, 65);
    check_case({KT_TYPE_IQ1_S, moe::TargetFormat::kAsSource, 0, {256, 512}}, 66);
    check_case({KT_TYPE_IQ1_M, moe::TargetFormat::kAsSource, 0, {256, 768}}, 67);

    // The IQ1 and IQ2 formats (books of 6 values) in 3-bit indices, the IQ3 ones (16) in 4.
    for (int32_t type : {KT_TYPE_IQ1_S, KT_TYPE_IQ1_M, KT_TYPE_IQ2_XXS, KT_TYPE_IQ2_XS, KT_TYPE_IQ2_S}) {
        PackedType packed = PackedType::kInt8;
        CHECK((moe::native_packed_type(type, &packed) && packed == PackedType::kIqGrid3));
    }
    for (int32_t type : {KT_TYPE_IQ3_XXS, KT_TYPE_IQ3_S}) {
        PackedType packed = PackedType::kInt8;
        CHECK((moe::native_packed_type(type, &packed) && packed == PackedType::kIqGrid));
    }

    // The sizes packed.h states: 4 (IQ_GRID3: 2 + 1) bits a weight, an i8 scale per group of 16 or 32, an f32 d per
    // 256, the book.
    cpu::PackedLayout l;
    REQUIRE(cpu::packed_layout(PackedType::kIqGrid, 64, 1024, 32, 0, &l).is_ok());
    CHECK(l.bytes == 64 * 1024 / 2 + 64 * 1024 / 32 + 64 * 4 * 4 + 64);
    REQUIRE(cpu::packed_layout(PackedType::kIqGrid, 64, 1024, 16, 128, &l).is_ok());
    CHECK(l.bytes == 64 * 1024 / 2 + 64 * 1024 / 16 + 64 * 5 * 4 + 64);  // 5 super-blocks from offset 128
    CHECK(cpu::packed_layout(PackedType::kIqGrid, 64, 1024, 64, 0, &l).code() == KT_STATUS_INVALID_ARGUMENT);
    REQUIRE(cpu::packed_layout(PackedType::kIqGrid3, 64, 1024, 32, 0, &l).is_ok());
    CHECK(l.bytes == 64 * 1024 / 4 + 64 * 1024 / 8 + 64 * 1024 / 32 + 64 * 4 * 4 + 64);
    REQUIRE(cpu::packed_layout(PackedType::kIqGrid3, 64, 1024, 16, 128, &l).is_ok());
    CHECK(l.bytes == 64 * 1024 / 4 + 64 * 1024 / 8 + 64 * 1024 / 16 + 64 * 5 * 4 + 64);
    CHECK(cpu::packed_layout(PackedType::kIqGrid3, 64, 1024, 8, 0, &l).code() == KT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("gemm kernels: a row gives the same bits alone and among other rows") {
    // With the caller's scratch, a call of several row blocks prepares each panel's scales and mins once for all of
    // them (kernels_impl.h, int_gemm_typed), at any K; a call of one block, or without scratch, reads them from the
    // packed arrays per group. The formats of kPredecodes decode each tile row once in such a call, and the other
    // row blocks read it back. A row's result may depend on none of these.
    enum class Prepares { kNo, kYes, kWithoutVnni };
    struct DecodeCase {
        Case c;
        bool decodes_once;  // in the calls of this test, for each K of c
        Prepares prepares;
    };
    constexpr Prepares kNo = Prepares::kNo, kYes = Prepares::kYes, kWithoutVnni = Prepares::kWithoutVnni;
    const DecodeCase cases[] = {{{KT_TYPE_Q4_K, moe::TargetFormat::kAsSource, 0, {768, 4352}}, false, kYes},  // 136 groups
                                {{KT_TYPE_Q5_K, moe::TargetFormat::kAsSource, 0, {512}}, true, kYes},
                                {{KT_TYPE_Q6_K, moe::TargetFormat::kAsSource, 0, {768}}, true, kYes},
                                {{KT_TYPE_Q6_K, moe::TargetFormat::kAsSource, 0, {4096}}, true, kYes},  // 256 groups
                                {{KT_TYPE_Q2_K, moe::TargetFormat::kAsSource, 0, {512}}, false, kYes},
                                {{KT_TYPE_Q3_K, moe::TargetFormat::kAsSource, 0, {512}}, true, kYes},
                                {{KT_TYPE_Q4_1, moe::TargetFormat::kAsSource, 0, {160, 4160}}, false, kWithoutVnni},
                                {{KT_TYPE_Q5_0, moe::TargetFormat::kAsSource, 0, {96}}, true, kNo},
                                {{KT_TYPE_Q5_1, moe::TargetFormat::kAsSource, 0, {160, 4160}}, true, kWithoutVnni},  // 5, 130 groups
                                {{KT_TYPE_Q8_0, moe::TargetFormat::kAsSource, 0, {96}}, false, kNo},
                                {{KT_TYPE_IQ4_XS, moe::TargetFormat::kAsSource, 0, {512}}, true, kNo},
                                {{KT_TYPE_IQ2_XS, moe::TargetFormat::kAsSource, 0, {512, 4352}}, true, kNo},
                                {{KT_TYPE_IQ3_XXS, moe::TargetFormat::kAsSource, 0, {768}}, true, kNo}};
    const int64_t rows = 40, m = 13;
    for (const DecodeCase &dc : cases) {
        const Case &c = dc.c;
        for (int64_t cols : c.ks) {
            const std::vector<uint8_t> bytes = test::random_gguf_rows(c.src_type, rows, cols, 71 + cols);
            moe::MatrixSource src;
            REQUIRE(moe::make_source(c.src_type, bytes.data(), rows, cols, &src).is_ok());
            const std::vector<float> x = test::random_normal(static_cast<size_t>(m * cols), 73 + cols);
            for (const cpu::KernelSet *ks : all_sets()) {
                INFO("type " << ops::type_traits(c.src_type)->name << " K " << cols << " kernel set " << ks->name);
                cpu::IsaLevel ran_on = cpu::IsaLevel::kScalar;
                ScratchUse use;
                const std::vector<float> together = run_gemm(*ks, c, src, 0, rows, 0, cols, x, m, &ran_on, true, &use);
                if (ran_on != cpu::IsaLevel::kAmx) {  // AMX unpacks panels its own way
                    CHECK(use.decoded == dc.decodes_once);
                    CHECK(use.prepared == (dc.prepares == kYes || (dc.prepares == kWithoutVnni && !ks->vnni)));
                }
                const std::vector<float> decoding = run_gemm(*ks, c, src, 0, rows, 0, cols, x, m, &ran_on, false);
                CHECK(std::memcmp(decoding.data(), together.data(), sizeof(float) * together.size()) == 0);
                for (int64_t i = 0; i < m; ++i) {
                    const std::vector<float> xi(x.begin() + i * cols, x.begin() + (i + 1) * cols);
                    const std::vector<float> alone = run_gemm(*ks, c, src, 0, rows, 0, cols, xi, 1, &ran_on);
                    INFO("row " << i);
                    CHECK(std::memcmp(alone.data(), together.data() + i * rows, sizeof(float) * rows) == 0);
                }
            }
        }
    }
}

TEST_CASE("gemm kernels: every set unpacks a panel to the scalar set's codes and scales") {
    // unpack_panel_s8 is what the AMX set reads (its base set's); the tile machine checks it only through the sets
    // an AMX set sits on. Here each set's own unpacking, byte for byte: ragged last panels, partial 64-K steps and
    // K slices mid-super-block included.
    struct UnpackCase {
        Case c;
        int64_t rows, cols, k0;
    };
    const UnpackCase cases[] = {
        {{KT_TYPE_Q4_K, moe::TargetFormat::kAsSource, 0, {}}, 45, 768, 0},
        {{KT_TYPE_Q4_K, moe::TargetFormat::kAsSource, 0, {}}, 33, 768, 128},
        {{KT_TYPE_Q5_K, moe::TargetFormat::kAsSource, 0, {}}, 40, 512, 0},
        {{KT_TYPE_Q6_K, moe::TargetFormat::kAsSource, 0, {}}, 40, 768, 128},
        {{KT_TYPE_Q8_0, moe::TargetFormat::kAsSource, 0, {}}, 37, 96, 0},
        {{KT_TYPE_Q4_0, moe::TargetFormat::kAsSource, 0, {}}, 37, 160, 0},
        {{KT_TYPE_IQ4_XS, moe::TargetFormat::kAsSource, 0, {}}, 40, 512, 0},
        {{KT_TYPE_Q2_K, moe::TargetFormat::kAsSource, 0, {}}, 40, 512, 128},
        {{KT_TYPE_Q3_K, moe::TargetFormat::kAsSource, 0, {}}, 40, 768, 0},
        {{KT_TYPE_Q5_0, moe::TargetFormat::kAsSource, 0, {}}, 37, 224, 32},
        {{KT_TYPE_Q5_1, moe::TargetFormat::kAsSource, 0, {}}, 40, 160, 0},
        {{KT_TYPE_Q4_1, moe::TargetFormat::kAsSource, 0, {}}, 40, 192, 64},
        {{KT_TYPE_IQ4_NL, moe::TargetFormat::kAsSource, 0, {}}, 33, 160, 0},
        {{KT_TYPE_IQ3_S, moe::TargetFormat::kAsSource, 0, {}}, 40, 768, 128},
        {{KT_TYPE_IQ1_M, moe::TargetFormat::kAsSource, 0, {}}, 37, 512, 0},
        {{KT_TYPE_F32, moe::TargetFormat::kInt4, 32, {}}, 35, 96, 0},
        {{KT_TYPE_F32, moe::TargetFormat::kInt4, 128, {}}, 35, 384, 0},
    };
    const auto sets = all_sets();
    for (const UnpackCase &uc : cases) {
        const std::vector<uint8_t> bytes = test::random_gguf_rows(uc.c.src_type, uc.rows, uc.cols, 91 + uc.cols);
        moe::MatrixSource src;
        REQUIRE(moe::make_source(uc.c.src_type, bytes.data(), uc.rows, uc.cols, &src).is_ok());
        moe::PackSpec spec;
        REQUIRE(moe::pack_spec_for(src, uc.c.target, uc.c.group, &spec).is_ok());
        cpu::PackedLayout layout;
        REQUIRE(moe::slice_layout(src, spec, 0, uc.rows, uc.k0, uc.cols, &layout).is_ok());
        mem::NumaBuffer buf;
        REQUIRE(mem::NumaBuffer::allocate(layout.bytes, nullptr, -1, &buf).is_ok());
        REQUIRE(moe::pack_slice(src, spec, 0, uc.k0, layout, 0, layout.panels, buf.as<uint8_t>()).is_ok());
        const cpu::PackedMatrix w{layout, buf.as<uint8_t>()};
        const bool mins = cpu::packed_type_info(layout.type).has_mins;
        const size_t tile_bytes = static_cast<size_t>((layout.k + 63) / 64 * 2 * cpu::kTileBytes);
        const size_t scale_count = static_cast<size_t>(layout.groups * 32);

        struct Unpacked {
            std::vector<int8_t> tiles;
            std::vector<float> scale, neg_min;
        };
        auto unpack = [&](const cpu::KernelSet &ks, int64_t p) {
            Unpacked u{std::vector<int8_t>(tile_bytes, 99), std::vector<float>(scale_count, -1.0f),
                       std::vector<float>(scale_count, -1.0f)};
            ks.unpack_panel_s8(w, p, u.tiles.data(), u.scale.data(), mins ? u.neg_min.data() : nullptr, p == 0);
            return u;
        };
        // The GGUF formats' codes and scales as the reference dequantizer's weights (INT4's are quantized here, so
        // only the sets' agreement is checked for it).
        const bool as_source = uc.c.target == moe::TargetFormat::kAsSource;
        const std::vector<float> ref_w =
            as_source ? test::dequantize_rows(uc.c.src_type, bytes, uc.rows, uc.cols) : std::vector<float>();
        for (int64_t p = 0; p < layout.panels; ++p) {
            const Unpacked want = unpack(*sets.front(), p);  // the scalar set
            for (int64_t col = 0; as_source && col < 32 && p * 32 + col < uc.rows; ++col) {
                int64_t bad = 0;
                for (int64_t k = 0; k < layout.k; ++k) {
                    // INT8 tile layout (packed.h): step k / 64, half col / 16, tile row (k % 64) / 4, word col % 16.
                    const size_t at = static_cast<size_t>(((k / 64) * 2 + col / 16) * cpu::kTileBytes +
                                                          (k % 64) / 4 * 64 + 4 * (col % 16) + k % 4);
                    const size_t gi = static_cast<size_t>(k / layout.group * 32 + col);
                    const double s = want.scale[gi] * static_cast<double>(want.tiles[at]), m = mins ? want.neg_min[gi] : 0;
                    const double expect = ref_w[static_cast<size_t>((p * 32 + col) * uc.cols + uc.k0 + k)];
                    bad += !(std::fabs(s + m - expect) <= 1e-6 * (std::fabs(s) + std::fabs(m)) + 1e-30);
                }
                INFO("type " << ops::type_traits(uc.c.src_type)->name << " panel " << p << " column " << col);
                CHECK(bad == 0);
            }
            for (const cpu::KernelSet *ks : sets) {
                INFO("type " << ops::type_traits(uc.c.src_type)->name << " K " << uc.cols << " from " << uc.k0
                             << " panel " << p << " kernel set " << ks->name);
                const Unpacked got = unpack(*ks, p);
                CHECK(got.tiles == want.tiles);
                CHECK(std::memcmp(got.scale.data(), want.scale.data(), sizeof(float) * scale_count) == 0);
                if (mins) CHECK(std::memcmp(got.neg_min.data(), want.neg_min.data(), sizeof(float) * scale_count) == 0);
            }
        }
    }
}

TEST_CASE("gemm kernels: MXFP4 as stored (gpt-oss experts), awkward K and N included") {
    // K = 32 and 96 leave most of a 128-K nibble tile as padding; 70 rows leave a ragged last panel.
    check_case({KT_TYPE_MXFP4, moe::TargetFormat::kAsSource, 0, {32, 96, 160, 256, 2880}}, 55);
}

TEST_CASE("gemm kernels: other GGUF types converted to INT8 and BF16") {
    check_case({KT_TYPE_Q4_K, moe::TargetFormat::kInt8, 0, {256}}, 61);
    check_case({KT_TYPE_Q3_K, moe::TargetFormat::kBf16, 0, {256}}, 62);
    check_case({KT_TYPE_Q5_0, moe::TargetFormat::kInt4, 32, {64}}, 63);
}

TEST_CASE("gemm kernels: the AMX set on the tile machine", "[amx]") {
    if (cpu::host_isa_level() < cpu::IsaLevel::kAvx512) {
        WARN("skipped: the AMX kernel set needs an AVX-512 host for the calls AMX does not take");
        return;
    }
    // Natively, the cases above ran the AMX set already where the host has AMX; here the same set runs its
    // generated code on the tile machine on any AVX-512 host.
    test::ScopedTileMachineRunner tile_machine;
    const uint64_t executed_before = test::thread_tile_machine().instructions;
    check_case({KT_TYPE_F32, moe::TargetFormat::kInt8, 0, {64, 100}}, 71);
    check_case({KT_TYPE_F32, moe::TargetFormat::kInt4, 32, {96}}, 72);
    check_case({KT_TYPE_F32, moe::TargetFormat::kBf16, 0, {33}}, 73);
    check_case({KT_TYPE_BF16, moe::TargetFormat::kAsSource, 0, {64}}, 74);
    // The GGUF formats through the group-wise kernels (groups of 32; Q6_K of 16), K slices mid-super-block
    // included, each bit for bit equal to every other kernel set.
    check_case({KT_TYPE_Q8_0, moe::TargetFormat::kAsSource, 0, {96}}, 75);
    check_case({KT_TYPE_Q4_0, moe::TargetFormat::kAsSource, 0, {160}}, 76);
    check_case({KT_TYPE_Q4_K, moe::TargetFormat::kAsSource, 0, {256}}, 77);
    check_case({KT_TYPE_Q5_K, moe::TargetFormat::kAsSource, 0, {256}}, 78);
    check_case({KT_TYPE_Q6_K, moe::TargetFormat::kAsSource, 0, {512}}, 79);
    check_case({KT_TYPE_IQ4_XS, moe::TargetFormat::kAsSource, 0, {256}}, 80);
    check_case({KT_TYPE_Q2_K, moe::TargetFormat::kAsSource, 0, {256}}, 81);
    check_case({KT_TYPE_Q3_K, moe::TargetFormat::kAsSource, 0, {512}}, 82);
    check_case({KT_TYPE_Q5_0, moe::TargetFormat::kAsSource, 0, {160}}, 83);
    check_case({KT_TYPE_IQ4_NL, moe::TargetFormat::kAsSource, 0, {96}}, 84);
    check_case({KT_TYPE_Q4_1, moe::TargetFormat::kAsSource, 0, {128}}, 85);
    check_case({KT_TYPE_Q5_1, moe::TargetFormat::kAsSource, 0, {96}}, 86);
    check_case({KT_TYPE_IQ2_XXS, moe::TargetFormat::kAsSource, 0, {256}}, 87);
    check_case({KT_TYPE_IQ1_M, moe::TargetFormat::kAsSource, 0, {512}}, 88);  // IQ_GRID3 in groups of 16 (IQ2_XXS: 32)
    check_case({KT_TYPE_IQ3_XXS, moe::TargetFormat::kAsSource, 0, {256}}, 89);  // IQ_GRID
    CHECK(test::thread_tile_machine().instructions > executed_before);  // the AMX calls ran on the tile machine
}

TEST_CASE("gemm kernels: the AMX set reuses gathered rows only for the same rows_id and pointers", "[amx]") {
    if (cpu::host_isa_level() < cpu::IsaLevel::kAvx512) {
        WARN("skipped: the AMX kernel set needs an AVX-512 host for the calls AMX does not take");
        return;
    }
    // Natively where the CPU has AMX, else on the tile machine.
    std::unique_ptr<test::ScopedTileMachineRunner> tile_machine;
    if (!cpu::amx::available()) tile_machine = std::make_unique<test::ScopedTileMachineRunner>();
    const cpu::KernelSet *amx = cpu::kernel_set(cpu::IsaLevel::kAmx, false, false);
    REQUIRE(amx);
    const cpu::KernelSet &base = cpu::best_kernel_set(cpu::IsaLevel::kAvx512);
    for (int32_t type : {KT_TYPE_Q4_K, KT_TYPE_Q8_0}) {
        INFO("type " << ops::type_traits(type)->name);
        const int64_t n = 40, k = 256, m = 17;  // >= amx_min_rows of both formats
        const std::vector<uint8_t> bytes = test::random_gguf_rows(type, n, k, 5);
        moe::MatrixSource src;
        REQUIRE(moe::make_source(type, bytes.data(), n, k, &src).is_ok());
        moe::PackSpec spec;
        REQUIRE(moe::pack_spec_for(src, moe::TargetFormat::kAsSource, 0, &spec).is_ok());
        cpu::PackedLayout layout;
        REQUIRE(moe::slice_layout(src, spec, 0, n, 0, k, &layout).is_ok());
        mem::NumaBuffer buf;
        REQUIRE(mem::NumaBuffer::allocate(layout.bytes, nullptr, -1, &buf).is_ok());
        REQUIRE(moe::pack_slice(src, spec, 0, 0, layout, 0, layout.panels, buf.as<uint8_t>()).is_ok());
        const cpu::PackedMatrix w{layout, buf.as<uint8_t>()};
        const cpu::QuantSpec qs = cpu::quant_spec(layout);
        const int64_t ns = cpu::quant_sums_per_row(qs, k);
        // Two activation sets in separate buffers, and a second copy of set 1's sums (different pointer, same values).
        struct Set {
            std::vector<int8_t> q;
            std::vector<float> scale;
            std::vector<int32_t> sums;
        } sets[2];
        for (int s = 0; s < 2; ++s) {
            const std::vector<float> x = test::random_normal(static_cast<size_t>(m * k), 90 + s);
            sets[s].q.resize(static_cast<size_t>(m * layout.kp));
            sets[s].scale.resize(static_cast<size_t>(m));
            sets[s].sums.resize(static_cast<size_t>(m * ns));
            for (int64_t i = 0; i < m; ++i) {
                sets[s].scale[i] = base.quantize_row(x.data() + i * k, false, k, layout.kp, sets[s].q.data() + i * layout.kp);
                cpu::group_sums_row(sets[s].q.data() + i * layout.kp, k, qs, sets[s].sums.data() + i * ns);
            }
        }
        const std::vector<int32_t> rows = {8, 0, 3, 3, 1, 7, 2, 6, 5, 16, 9, 10, 11, 12, 13, 14, 15};
        auto run = [&](const cpu::KernelSet &ks, const Set &st, uint64_t id) {
            cpu::GemmActs a;
            a.q = st.q.data();
            a.q_ld = layout.kp;
            a.scale = st.scale.data();
            a.sums = st.sums.data();
            a.sums_ld = ns;
            a.rows = rows.data();
            a.rows_id = id;
            std::vector<float> c(static_cast<size_t>(m * n));
            cpu::gemm(ks, w, a, m, 0, n, c.data(), n);
            return c;
        };
        const std::vector<float> expect0 = run(base, sets[0], 0), expect1 = run(base, sets[1], 0);
        const uint64_t id = cpu::new_rows_ids(1);
        CHECK(run(*amx, sets[0], id) == expect0);
        CHECK(run(*amx, sets[0], id) == expect0);  // reused
        CHECK(run(*amx, sets[1], id) == expect1);  // same id, other rows: gathered again
        Set copy = sets[1];
        CHECK(run(*amx, copy, id) == expect1);     // other pointers
        CHECK(run(*amx, sets[0], 0) == expect0);   // id 0: never reused
        CHECK(run(*amx, sets[1], 0) == expect1);
    }
}
