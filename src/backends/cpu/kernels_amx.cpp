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
std::atomic<uint64_t> g_amx_calls{0};

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

void fall_back(const Status &s) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) KT_LOG_ERROR_MSG("AMX GEMM failed, using AVX-512 instead: %s", s.message().c_str());
}

void gemm_int_amx(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                  int64_t ldc) {
    amx::PackedB b;
    if (m < kAmxMinRows || !as_amx(w, &b) || !amx::available()) return g_base->gemm_int(w, a, m, n_begin, n_end, c, ldc);
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
    if (!s.is_ok()) {
        fall_back(s);
        return g_base->gemm_int(w, a, m, n_begin, n_end, c, ldc);
    }
    g_amx_calls.fetch_add(1, std::memory_order_relaxed);
}

void gemm_bf16_amx(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                   int64_t ldc) {
    amx::PackedB b;
    if (m < kAmxMinRows || !as_amx(w, &b) || !amx::available()) return g_base->gemm_bf16(w, a, m, n_begin, n_end, c, ldc);
    const uint16_t *x = a.bf16;
    if (a.rows) {
        Gathered &g = tls_gathered;
        g.bf16.resize(static_cast<size_t>(m * a.bf16_ld));
        for (int64_t i = 0; i < m; ++i) std::copy_n(a.bf16 + a.rows[i] * a.bf16_ld, a.bf16_ld, g.bf16.data() + i * a.bf16_ld);
        x = g.bf16.data();
    }
    const Status s = amx::gemm_bf16_f32(static_cast<amx::TileSession *>(a.tile_session), b, m, n_begin, n_end, x,
                                        a.bf16_ld, c, ldc);
    if (!s.is_ok()) {
        fall_back(s);
        return g_base->gemm_bf16(w, a, m, n_begin, n_end, c, ldc);
    }
    g_amx_calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

uint64_t amx_gemm_calls() { return g_amx_calls.load(std::memory_order_relaxed); }

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
