// Driver of the AMX GEMM: argument checks, tile sessions, the block walk, and where generated code runs.
//
// Block walk: N panels outermost, 32-row M blocks inside, one kernel call per block over the whole K. A B panel
// (32 x K) is then reused from L1/L2 by every M block while A rows stream; C is written once per block. At most
// four kernels serve a call (whole / partial rows x whole / partial columns), all under one tile palette.
#include <atomic>
#include <cstring>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/amx/amx_gemm_kernel.h"
#include "backends/cpu/amx/amx_pack_layout.h"
#include "backends/cpu/amx/amx_tile_config.h"
#include "backends/cpu/cpu_features.h"

namespace kt::cpu::amx {
namespace {

// ---- where generated code runs -------------------------------------------------------------------------------

std::atomic<CodeRunner> g_runner{nullptr};
std::atomic<void *> g_runner_user{nullptr};

}  // namespace

Status run_code(const jit::JitCode &code, const void *params) {
    if (CodeRunner runner = g_runner.load(std::memory_order_acquire))
        return runner(code, params, g_runner_user.load(std::memory_order_acquire));
    code.entry<void (*)(const void *)>()(params);
    return Status::ok();
}

namespace {

Status run_stub(TileStub which, const void *config) {
    const jit::JitCode *stub = nullptr;
    KT_TRY(tile_stub(which, &stub));
    return run_code(*stub, config);
}

// ---- one GEMM call -------------------------------------------------------------------------------------------

struct GemmCall {
    GemmKind kind;
    const PackedB *b;
    int64_t m, n_begin, n_end;
    const void *a;
    int64_t lda;  // elements
    size_t a_elem;
    const float *a_scale;
    void *c;
    int64_t ldc;  // elements
    size_t c_elem;
    bool a_padded;
};

const char *kind_label(GemmKind kind) {
    switch (kind) {
        case GemmKind::kS8S32: return "gemm_s8_s32";
        case GemmKind::kS8F32: return "gemm_s8_f32";
        case GemmKind::kS4F32: return "gemm_s8_f32 (INT4)";
        case GemmKind::kBf16F32: return "gemm_bf16_f32";
        case GemmKind::kS8GroupF32:
        case GemmKind::kS8GroupMinF32: return "gemm_s8_grouped_f32";
    }
    return "gemm";
}

Status check_call(const GemmCall &g, PackedLayout *layout) {
    const char *fn = kind_label(g.kind);
    KT_RETURN_IF(!available(), KT_STATUS_UNSUPPORTED, "amx %s: AMX is not available in this process", fn);
    KT_RETURN_IF(!g.b->data, KT_STATUS_INVALID_ARGUMENT, "amx %s: packed B is null", fn);
    KT_RETURN_IF(reinterpret_cast<uintptr_t>(g.b->data) % kPackedAlignment != 0, KT_STATUS_INVALID_ARGUMENT,
                 "amx %s: packed B %p is not %zu-byte aligned", fn, g.b->data, kPackedAlignment);
    KT_TRY(packed_layout(g.b->desc, layout));
    const bool type_ok = g.kind == GemmKind::kBf16F32   ? layout->type == WeightType::kBf16
                         : g.kind == GemmKind::kS4F32 ? layout->type == WeightType::kInt4
                                                      : layout->type == WeightType::kInt8;
    KT_RETURN_IF(!type_ok, KT_STATUS_INVALID_ARGUMENT, "amx %s: packed B has weight type %d", fn,
                 static_cast<int>(layout->type));
    KT_RETURN_IF(g.m < 1, KT_STATUS_INVALID_ARGUMENT, "amx %s: m = %lld", fn, static_cast<long long>(g.m));
    KT_RETURN_IF(g.n_begin < 0 || g.n_begin >= g.n_end || g.n_end > layout->n, KT_STATUS_INVALID_ARGUMENT,
                 "amx %s: column range [%lld, %lld) is not inside [0, %lld)", fn, static_cast<long long>(g.n_begin),
                 static_cast<long long>(g.n_end), static_cast<long long>(layout->n));
    KT_RETURN_IF(g.n_begin % kNPanel != 0 || (g.n_end % kNPanel != 0 && g.n_end != layout->n),
                 KT_STATUS_INVALID_ARGUMENT, "amx %s: column range [%lld, %lld) does not follow %lld-column panels",
                 fn, static_cast<long long>(g.n_begin), static_cast<long long>(g.n_end),
                 static_cast<long long>(kNPanel));
    KT_RETURN_IF(!g.a || !g.c, KT_STATUS_INVALID_ARGUMENT, "amx %s: A or C is null", fn);
    const bool scaled = g.kind == GemmKind::kS8F32 || g.kind == GemmKind::kS4F32;
    KT_RETURN_IF(scaled && !g.a_scale, KT_STATUS_INVALID_ARGUMENT, "amx %s: a_scale is null", fn);
    KT_RETURN_IF(g.lda < layout->k, KT_STATUS_INVALID_ARGUMENT, "amx %s: lda %lld < k %lld", fn,
                 static_cast<long long>(g.lda), static_cast<long long>(layout->k));
    KT_RETURN_IF(g.ldc < g.n_end - g.n_begin, KT_STATUS_INVALID_ARGUMENT, "amx %s: ldc %lld < %lld computed columns",
                 fn, static_cast<long long>(g.ldc), static_cast<long long>(g.n_end - g.n_begin));
    KT_RETURN_IF(g.lda > (int64_t{1} << 40) || g.ldc > (int64_t{1} << 40) || g.m > (int64_t{1} << 31),
                 KT_STATUS_INVALID_ARGUMENT, "amx %s: m, lda or ldc is implausibly large", fn);
    return Status::ok();
}

Status run_gemm(TileSession *session, const GemmCall &g) {
    PackedLayout layout;
    KT_TRY(check_call(g, &layout));

    // The (at most four) kernels of this call: [partial rows][partial columns].
    const int32_t m_tail = static_cast<int32_t>(g.m % kMBlock);
    const int32_t n_tail = static_cast<int32_t>((g.n_end - g.n_begin) % kNPanel);
    const bool has_m[2] = {g.m >= kMBlock, m_tail != 0};
    const bool has_n[2] = {g.n_end - g.n_begin >= kNPanel, n_tail != 0};
    const jit::JitCode *kernels[2][2] = {};
    for (int pm = 0; pm < 2; ++pm) {
        for (int pn = 0; pn < 2; ++pn) {
            if (!has_m[pm] || !has_n[pn]) continue;
            GemmKernelDesc desc;
            desc.kind = g.kind;
            desc.m = pm ? m_tail : static_cast<int32_t>(kMBlock);
            desc.n = pn ? n_tail : static_cast<int32_t>(kNPanel);
            desc.k = layout.k;
            desc.group = static_cast<int32_t>(layout.group);
            desc.a_padded = g.a_padded && desc.m % kMaxTileRows != 0;
            KT_TRY(gemm_kernel(desc, &kernels[pm][pn]));
        }
    }

    TileSession local;
    TileSession *tiles = session ? session : &local;
    KT_TRY(tiles->configure());

    const auto *b_bytes = static_cast<const uint8_t *>(g.b->data);
    const auto *a_bytes = static_cast<const uint8_t *>(g.a);
    auto *c_bytes = static_cast<uint8_t *>(g.c);
    GemmKernelParams params;
    params.lda = g.lda * static_cast<int64_t>(g.a_elem);
    params.ldc = g.ldc * static_cast<int64_t>(g.c_elem);
    for (int64_t n0 = g.n_begin; n0 < g.n_end; n0 += kNPanel) {
        const int64_t panel = n0 / kNPanel;
        const bool partial_n = g.n_end - n0 < kNPanel;
        params.b = b_bytes + layout.panel_offset(panel);
        params.b_scale = layout.type == WeightType::kBf16
                             ? nullptr
                             : reinterpret_cast<const float *>(b_bytes + layout.panel_scale_offset(panel));
        for (int64_t m0 = 0; m0 < g.m; m0 += kMBlock) {
            const bool partial_m = g.m - m0 < kMBlock;
            params.a = a_bytes + m0 * params.lda;
            params.c = c_bytes + m0 * params.ldc + (n0 - g.n_begin) * static_cast<int64_t>(g.c_elem);
            params.a_scale = g.a_scale ? g.a_scale + m0 : nullptr;
            Status s = run_code(*kernels[partial_m][partial_n], &params);
            if (!s.is_ok()) {
                if (!session) (void)local.end();
                return std::move(s).with_context(std::string("amx ") + kind_label(g.kind) + ": kernel '" +
                                                 kernels[partial_m][partial_n]->name() + "'");
            }
        }
    }
    return session ? Status::ok() : local.end();
}

// ---- group-wise GEMM ---------------------------------------------------------------------------------------

Status check_grouped(const GroupedPanel &b, const GroupedActs &a, const float *c, int64_t ldc) {
    const char *fn = "amx gemm_s8_grouped_f32";
    KT_RETURN_IF(!available(), KT_STATUS_UNSUPPORTED, "%s: AMX is not available in this process", fn);
    KT_RETURN_IF(b.group != 16 && b.group != 32, KT_STATUS_INVALID_ARGUMENT, "%s: group %d is not 16 or 32", fn,
                 b.group);
    KT_RETURN_IF(b.n < 1 || b.n > kNPanel, KT_STATUS_INVALID_ARGUMENT, "%s: n = %d is not in 1..%lld", fn, b.n,
                 static_cast<long long>(kNPanel));
    KT_RETURN_IF(b.k < b.group || b.k > kMaxPackedDim || b.k % b.group != 0, KT_STATUS_INVALID_ARGUMENT,
                 "%s: k = %lld is not a multiple of %d in 1..%lld", fn, static_cast<long long>(b.k), b.group,
                 static_cast<long long>(kMaxPackedDim));
    KT_RETURN_IF(!b.tiles || !b.scale, KT_STATUS_INVALID_ARGUMENT, "%s: tiles or scale is null", fn);
    KT_RETURN_IF(a.m < 1 || a.m > (int64_t{1} << 31), KT_STATUS_INVALID_ARGUMENT, "%s: m = %lld", fn,
                 static_cast<long long>(a.m));
    KT_RETURN_IF(!a.a || !a.a_scale || !c, KT_STATUS_INVALID_ARGUMENT, "%s: A, a_scale or C is null", fn);
    KT_RETURN_IF(b.neg_min && !a.asum, KT_STATUS_INVALID_ARGUMENT, "%s: weights with mins need the activation sums",
                 fn);
    KT_RETURN_IF(a.k != b.k || a.group != b.group, KT_STATUS_INVALID_ARGUMENT,
                 "%s: activations packed for K %lld, group %d, weights for K %lld, group %d", fn,
                 static_cast<long long>(a.k), a.group, static_cast<long long>(b.k), b.group);
    KT_RETURN_IF(ldc < b.n || ldc > (int64_t{1} << 40), KT_STATUS_INVALID_ARGUMENT, "%s: ldc %lld < %d columns", fn,
                 static_cast<long long>(ldc), b.n);
    return Status::ok();
}

Status run_grouped(TileSession *session, const GroupedPanel &b, const GroupedActs &a, float *c, int64_t ldc) {
    KT_TRY(check_grouped(b, a, c, ldc));
    const GemmKind kind = b.neg_min ? GemmKind::kS8GroupMinF32 : GemmKind::kS8GroupF32;
    const int32_t m_tail = static_cast<int32_t>(a.m % kMBlock);
    const jit::JitCode *kernels[2] = {};
    for (int pm = 0; pm < 2; ++pm) {
        if (pm == 0 ? a.m < kMBlock : m_tail == 0) continue;
        KT_TRY(gemm_kernel({kind, pm ? m_tail : static_cast<int32_t>(kMBlock), b.n, b.k, b.group}, &kernels[pm]));
    }
    TileSession local;
    TileSession *tiles = session ? session : &local;
    KT_TRY(tiles->configure(group_palette(b.group)));
    const int64_t groups = b.k / b.group;
    GemmKernelParams params;
    params.ldc = ldc * static_cast<int64_t>(sizeof(float));
    params.b = b.tiles;
    params.b_scale = b.scale;
    params.b_min = b.neg_min;
    for (int64_t m0 = 0; m0 < a.m; m0 += kMBlock) {
        const bool partial = a.m - m0 < kMBlock;
        params.a = a.a + m0 * b.k;  // block m0 / 32 starts after (m0 / 32) * G * 32 * group = m0 * K bytes
        params.a_scale = a.a_scale + m0;
        params.a_sums = b.neg_min ? a.asum + (m0 / kMBlock) * groups * kNPanel : nullptr;
        params.c = c + m0 * ldc;
        Status s = run_code(*kernels[partial], &params);
        if (!s.is_ok()) {
            if (!session) (void)local.end();
            return std::move(s).with_context("amx gemm_s8_grouped_f32: kernel '" + kernels[partial]->name() + "'");
        }
    }
    return session ? Status::ok() : local.end();
}

}  // namespace

// ---- TileSession ---------------------------------------------------------------------------------------------

TileSession::~TileSession() {
    if (active_) (void)end();
}

Status TileSession::configure() { return configure(kt_palette()); }

Status TileSession::configure(const TileConfig &palette) {
    KT_RETURN_IF(std::this_thread::get_id() != owner_, KT_STATUS_MISUSE,
                 "amx: a TileSession is used on a thread other than the one that created it");
    if (!active_) {
        KT_RETURN_IF(!available(), KT_STATUS_UNSUPPORTED, "amx: AMX is not available in this process");
        KT_TRY(run_stub(TileStub::kStoreConfig, saved_));
        std::memcpy(loaded_, saved_, sizeof loaded_);
        active_ = true;
    }
    if (std::memcmp(loaded_, &palette, sizeof loaded_) == 0) return Status::ok();
    Status s = run_stub(TileStub::kLoadConfig, &palette);
    if (!s.is_ok()) {
        (void)end();
        return s;
    }
    std::memcpy(loaded_, &palette, sizeof loaded_);
    return Status::ok();
}

Status TileSession::end() {
    if (!active_) return Status::ok();
    KT_RETURN_IF(std::this_thread::get_id() != owner_, KT_STATUS_MISUSE,
                 "amx: a TileSession is ended on a thread other than the one that created it");
    active_ = false;
    if (saved_[0] == 0) return run_stub(TileStub::kRelease, nullptr);  // the thread had no tiles: release ours
    if (std::memcmp(saved_, loaded_, sizeof saved_) == 0) return Status::ok();
    return run_stub(TileStub::kLoadConfig, saved_);
}

// ---- GEMM entry points ---------------------------------------------------------------------------------------

Status gemm_s8_s32(TileSession *session, const PackedB &b, int64_t m, int64_t n_begin, int64_t n_end,
                   const int8_t *a, int64_t lda, int32_t *c, int64_t ldc, bool a_padded) {
    return run_gemm(session, {GemmKind::kS8S32, &b, m, n_begin, n_end, a, lda, 1, nullptr, c, ldc, 4, a_padded});
}

Status gemm_s8_f32(TileSession *session, const PackedB &b, int64_t m, int64_t n_begin, int64_t n_end,
                   const int8_t *a, int64_t lda, const float *a_scale, float *c, int64_t ldc, bool a_padded) {
    const GemmKind kind = b.desc.type == WeightType::kInt4 ? GemmKind::kS4F32 : GemmKind::kS8F32;
    return run_gemm(session, {kind, &b, m, n_begin, n_end, a, lda, 1, a_scale, c, ldc, 4, a_padded});
}

Status gemm_bf16_f32(TileSession *session, const PackedB &b, int64_t m, int64_t n_begin, int64_t n_end,
                     const uint16_t *a, int64_t lda, float *c, int64_t ldc, bool a_padded) {
    return run_gemm(session, {GemmKind::kBf16F32, &b, m, n_begin, n_end, a, lda, 2, nullptr, c, ldc, 4, a_padded});
}

Status gemm_s8_grouped_f32(TileSession *session, const GroupedPanel &b, const GroupedActs &a, float *c, int64_t ldc) {
    return run_grouped(session, b, a, c, ldc);
}

// ---- availability and runners --------------------------------------------------------------------------------

bool available() {
    if (g_runner.load(std::memory_order_acquire)) return max_isa_level() >= IsaLevel::kAmx;
    return active_isa_level() == IsaLevel::kAmx;
}

bool runs_natively() { return !g_runner.load(std::memory_order_acquire) && active_isa_level() == IsaLevel::kAmx; }

void set_code_runner(CodeRunner runner, void *user) {
    g_runner_user.store(user, std::memory_order_release);
    g_runner.store(runner, std::memory_order_release);
}

}  // namespace kt::cpu::amx
