#include "backends/cpu/attention_kernels.h"

#include <atomic>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/kernels.h"
#include "core/log.h"

namespace kt::cpu {
namespace {

const AttentionKernels kScalar = {"scalar", detail::attend_scalar};
const AttentionKernels kAvx2 = {"avx2", detail::attend_avx2};
const AttentionKernels kAvx512 = {"avx512", detail::attend_avx512};

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

const char *products_name(Products p) {
    switch (p) {
        case Products::kF32: return "f32";
        case Products::kBf16: return "bf16";
        case Products::kBf16x3: return "bf16x3";
    }
    return "?";
}

AttentionTilePlan attention_tile_plan(int64_t rows, int64_t dk, int64_t dv, Products products) {
    AttentionTilePlan p;
    p.segments = products == Products::kBf16x3 ? 3 : 1;
    p.dkp = round_up(dk, 32);
    p.dvp = round_up(dv, 32);
    p.ka = p.segments * p.dkp;
    size_t at = 0;
    // A buffer of n floats (or of 2n bf16) at the next 64-byte boundary.
    auto take = [&](int64_t n) {
        const size_t here = at;
        at += static_cast<size_t>(round_up(n, 16));
        return here;
    };
    const int64_t chunk = kAttentionChunk;
    p.qa = take(rows * p.ka / 2);
    p.kb = take(chunk * p.ka / 2);
    p.s = take(rows * chunk);
    p.pa = take(rows * p.segments * chunk / 2);
    p.vb = take(p.dvp * p.segments * chunk / 2);
    p.pv = take(rows * dv);
    p.m = take(rows);
    p.l = take(rows);
    p.correction = take(rows);
    p.floats = at;
    return p;
}

void attention_tile_gemm(const AttentionArgs &a, const uint8_t *packed, int64_t n, int64_t k, const uint16_t *x,
                         int64_t ldx, int64_t m, float *c, int64_t ldc) {
    const uint64_t macs = static_cast<uint64_t>(m) * static_cast<uint64_t>(n) * static_cast<uint64_t>(k);
    PackedMatrix w;
    // The layout of a bf16 matrix whose n and k the caller made panel and step multiples: it cannot fail.
    (void)packed_layout(PackedType::kBf16, n, k, 0, 0, &w.layout);
    if (a.amx && m >= amx_min_rows(w.layout)) {
        amx::PackedB b;
        b.desc = {amx::WeightType::kBf16, n, k, 0};
        b.data = packed;
        const Status s = amx::gemm_bf16_f32(static_cast<amx::TileSession *>(a.tile_session), b, m, 0, n, x, ldx, c, ldc);
        if (s.is_ok()) {
            if (a.counter) a.counter->count(IsaLevel::kAmx, GemmArith::kBf16, macs);
            return;
        }
        static std::atomic<bool> logged{false};
        if (!logged.exchange(true)) KT_LOG_ERROR_MSG("AMX attention GEMM failed, using %s instead: %s", a.gemm->name, s.message().c_str());
        if (a.counter) a.counter->count_amx_fallback();
    }
    w.data = packed;
    GemmActs acts;
    acts.bf16 = x;
    acts.bf16_ld = ldx;
    a.gemm->gemm_bf16(w, acts, m, 0, n, c, ldc);
    if (a.counter) a.counter->count(a.gemm->level, GemmArith::kBf16, macs);
}

size_t attention_scratch_floats(int64_t rows, int64_t dk, int64_t dv, Products products) {
    if (products != Products::kF32) return attention_tile_plan(rows, dk, dv, products).floats;
    // A step's K tiles and values, scores, m, l; rounded up so that the caller can carve 64-byte aligned per-thread
    // blocks.
    const int64_t n = dk * kF32StepPositions + kF32StepPositions * dv + rows * kF32StepPositions + 2 * rows;
    return static_cast<size_t>(round_up(n, 16));
}

const AttentionKernels *attention_kernels_for(IsaLevel level) {
    if (level > host_isa_level()) return nullptr;
    switch (level) {
        case IsaLevel::kScalar: return &kScalar;
        case IsaLevel::kAvx2: return &kAvx2;
        default: return &kAvx512;
    }
}

const AttentionKernels &attention_kernels() { return *attention_kernels_for(active_isa_level()); }

}  // namespace kt::cpu
