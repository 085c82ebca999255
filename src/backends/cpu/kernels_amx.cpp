// The AMX kernel set: the expert engine's GEMM entry points routed to the JIT AMX kernels (backends/cpu/amx) for
// the weight types they cover, over the same packed buffers (the INT8 / INT4 / BF16 layouts of packed.h are the
// AMX contract's, byte for byte).
#include <algorithm>
#include <atomic>
#include <vector>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/kernels_detail.h"
#include "core/log.h"

namespace kt::cpu {
namespace {

const KernelSet *g_base = nullptr;  // the AVX-512 set for everything AMX does not take

bool as_amx(const PackedMatrix &w, amx::PackedB *b) {
    const PackedLayout &l = w.layout;
    switch (l.type) {
        case PackedType::kInt8: b->desc = {amx::WeightType::kInt8, l.n, l.k, 0}; break;
        case PackedType::kInt4: b->desc = {amx::WeightType::kInt4, l.n, l.k, l.group}; break;
        case PackedType::kBf16: b->desc = {amx::WeightType::kBf16, l.n, l.k, 0}; break;
        default: return false;
    }
    b->data = w.data;
    return true;
}

// Activation rows gathered for the AMX kernels, which read A as one strided matrix. Per thread; it grows to the
// largest call once (the expert pool's calls are at most 64 rows) and is reused afterwards.
struct Gathered {
    std::vector<int8_t> q;
    std::vector<float> scale;
    std::vector<uint16_t> bf16;
};
thread_local Gathered tls_gathered;

const Status kAmxGone(KT_STATUS_UNSUPPORTED, "AMX is no longer available in this process");

// A call AMX does not take, by design: computed and counted as the base set's.
void on_base(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c, int64_t ldc) {
    gemm(*g_base, w, a, m, n_begin, n_end, c, ldc);
}

// A call whose AMX kernel failed: logged (once per process), counted as a fallback, computed by the base set.
void fall_back(const Status &s, const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end,
               float *c, int64_t ldc) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) KT_LOG_ERROR_MSG("AMX GEMM failed, using AVX-512 instead: %s", s.message().c_str());
    thread_gemm_counter().count_amx_fallback();
    if (a.counter) a.counter->count_amx_fallback();
    on_base(w, a, m, n_begin, n_end, c, ldc);
}

void gemm_int_amx(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                  int64_t ldc) {
    amx::PackedB b;
    if (m < kAmxMinRows || !as_amx(w, &b)) return on_base(w, a, m, n_begin, n_end, c, ldc);
    if (!amx::available()) return fall_back(kAmxGone, w, a, m, n_begin, n_end, c, ldc);
    const int8_t *q = a.q;
    const float *scale = a.scale;
    if (a.rows) {
        Gathered &g = tls_gathered;
        g.q.resize(static_cast<size_t>(m * a.q_ld));
        g.scale.resize(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) {
            std::copy_n(a.q + a.rows[i] * a.q_ld, a.q_ld, g.q.data() + i * a.q_ld);
            g.scale[static_cast<size_t>(i)] = a.scale[a.rows[i]];
        }
        q = g.q.data();
        scale = g.scale.data();
    }
    const Status s = amx::gemm_s8_f32(static_cast<amx::TileSession *>(a.tile_session), b, m, n_begin, n_end, q, a.q_ld,
                                      scale, c, ldc);
    if (!s.is_ok()) return fall_back(s, w, a, m, n_begin, n_end, c, ldc);
    count_gemm(a, IsaLevel::kAmx, w, m, n_begin, n_end);
}

void gemm_bf16_amx(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                   int64_t ldc) {
    amx::PackedB b;
    if (m < kAmxMinRows || !as_amx(w, &b)) return on_base(w, a, m, n_begin, n_end, c, ldc);
    if (!amx::available()) return fall_back(kAmxGone, w, a, m, n_begin, n_end, c, ldc);
    const uint16_t *x = a.bf16;
    if (a.rows) {
        Gathered &g = tls_gathered;
        g.bf16.resize(static_cast<size_t>(m * a.bf16_ld));
        for (int64_t i = 0; i < m; ++i) std::copy_n(a.bf16 + a.rows[i] * a.bf16_ld, a.bf16_ld, g.bf16.data() + i * a.bf16_ld);
        x = g.bf16.data();
    }
    const Status s = amx::gemm_bf16_f32(static_cast<amx::TileSession *>(a.tile_session), b, m, n_begin, n_end, x,
                                        a.bf16_ld, c, ldc);
    if (!s.is_ok()) return fall_back(s, w, a, m, n_begin, n_end, c, ldc);
    count_gemm(a, IsaLevel::kAmx, w, m, n_begin, n_end);
}

}  // namespace

namespace detail {

void fill_amx(const KernelSet &base, KernelSet *ks) {
    g_base = &base;
    const char *name = ks->name;
    *ks = base;
    ks->name = name;
    ks->level = IsaLevel::kAmx;
    ks->gemm_int = &gemm_int_amx;
    ks->gemm_bf16 = &gemm_bf16_amx;
}

}  // namespace detail
}  // namespace kt::cpu
