// The AMX kernel set: the expert engine's GEMM entry points routed to the JIT AMX kernels (backends/cpu/amx) for
// the weight types they cover, over the same packed buffers (the INT8 / INT4 / BF16 layouts of packed.h are the
// AMX contract's, byte for byte). The group-wise GGUF formats (all that kt keeps as stored but MXFP4) go through
// amx::gemm_s8_grouped_f32: per call, the activation rows are gathered once into the kernels' padded layout;
// per 32-column panel, the base set's unpack_panel_s8 writes the signed codes and fp32 group scales into a
// per-thread scratch (L1/L2 resident, reused by every 32-row block of the call), which the kernel then reads.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/kernels_detail.h"
#include "core/log.h"

namespace kt::cpu {
namespace {

const KernelSet *g_base = nullptr;  // the AVX-512 set for everything AMX does not take

struct alignas(64) Line {
    uint8_t bytes[64];
};

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A buffer of `bytes` (rounded up to whole cache lines), 64-byte aligned.
template <typename T>
T *lines(std::vector<Line> &v, int64_t bytes) {
    v.resize(static_cast<size_t>((bytes + 63) / 64));
    return reinterpret_cast<T *>(v.data());
}

// What a gathered copy of activation rows was made from: a call with an equal key (GemmActs::rows_id nonzero)
// reuses the copy instead of gathering again.
struct GatherKey {
    uint64_t rows_id = 0;
    const void *src = nullptr, *scale = nullptr, *sums = nullptr;
    const int32_t *rows = nullptr;
    int64_t m = 0, k = 0;
    int32_t layout = 0;  // the gathered layout: 0 dense, or the group size (negative with the sums of mins)

    bool operator==(const GatherKey &o) const {
        return rows_id == o.rows_id && src == o.src && scale == o.scale && sums == o.sums && rows == o.rows &&
               m == o.m && k == o.k && layout == o.layout;
    }
    // True when `now` may reuse the copy this key describes; otherwise it becomes the key.
    bool reuse(const GatherKey &now) {
        if (now.rows_id != 0 && *this == now) return true;
        *this = now;
        return false;
    }
};

// Activation rows gathered for the AMX kernels, which read A as one strided matrix of cache-line aligned rows (a
// tile row that straddles two lines costs a third of the kernels' speed: measured 34 % of the TMUL peak instead
// of 47 % for INT8). Per thread; it grows to the largest call once and is reused afterwards.
struct Gathered {
    std::vector<Line> q;
    std::vector<float> scale;
    GatherKey q_key;
    std::vector<Line> bf16;
    GatherKey bf16_key;
};
thread_local Gathered tls_gathered;

// Whether the dense kernels get a gathered copy of A: for rows picked by index, rows that do not start on cache
// lines, and a row count that leaves a partial 16-row tile (the copy is padded with zero rows, so the kernel loads
// that tile directly: GemmKernelDesc::a_padded).
bool needs_gather(const int32_t *rows, const void *base, int64_t ld_bytes, int64_t m) {
    return rows || reinterpret_cast<uintptr_t>(base) % 64 != 0 || ld_bytes % 64 != 0 || m % amx::kRowsPerTile != 0;
}

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

// The group size of a format the group-wise AMX kernels take, or 0.
int32_t grouped_group(const PackedLayout &l) {
    switch (l.type) {
        case PackedType::kQ8_0:
        case PackedType::kQ4_0:
        case PackedType::kQ4_K:
        case PackedType::kQ5_K:
        case PackedType::kQ6_K:
        case PackedType::kIq4Xs:
        case PackedType::kQ2_K:
        case PackedType::kQ3_K:
        case PackedType::kQ5_0:
        case PackedType::kIq4Nl:
        case PackedType::kQ4_1:
        case PackedType::kQ5_1:
        case PackedType::kIqGrid:
        case PackedType::kIqGrid3: return l.group;
        default: return 0;
    }
}

// Per-thread buffers of the group-wise path; each grows to the largest call once and is reused afterwards.
struct GroupedScratch {
    std::vector<Line> a;          // activations, packed (amx::GroupedActs)
    std::vector<float> a_scale;   // [m]
    std::vector<float> asum;      // [ceil(m / 32)][groups][32]
    GatherKey key;
    std::vector<Line> tiles;      // one unpacked panel
    std::vector<float> scale, neg_min;  // [groups][32]
};
thread_local GroupedScratch tls_grouped;

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

// The activation rows of a group-wise call in the packed layout amx::GroupedActs states (rows padded with zeros
// to a multiple of 32).
amx::GroupedActs gather_grouped(const GemmActs &a, int64_t m, int64_t k, int32_t group, bool mins, GroupedScratch &g) {
    const int64_t rows = round_up(m, amx::kMBlock), groups = k / group;
    amx::GroupedActs acts;
    acts.m = m;
    acts.k = k;
    acts.group = group;
    const GatherKey key{a.rows_id, a.q, a.scale, mins ? a.sums : nullptr, a.rows, m, k, mins ? -group : group};
    if (g.key.reuse(key)) {
        acts.a = reinterpret_cast<const int8_t *>(g.a.data());
        acts.a_scale = g.a_scale.data();
        acts.asum = mins ? g.asum.data() : nullptr;
        return acts;
    }
    int8_t *dst = lines<int8_t>(g.a, rows * k);
    g.a_scale.resize(static_cast<size_t>(m));
    if (mins) g.asum.assign(static_cast<size_t>(rows * groups), 0.0f);
    for (int64_t i = 0; i < m; ++i) {
        const int64_t row = a.rows ? a.rows[i] : i;
        const int8_t *src = a.q + row * a.q_ld;
        int8_t *block = dst + (i / amx::kMBlock) * amx::kMBlock * k + (i % amx::kMBlock) * group;
        for (int64_t gi = 0; gi < groups; ++gi)
            std::memcpy(block + gi * amx::kMBlock * group, src + gi * group, static_cast<size_t>(group));
        g.a_scale[static_cast<size_t>(i)] = a.scale[row];
        if (!mins) continue;
        float *asum = g.asum.data() + (i / amx::kMBlock) * groups * amx::kMBlock + i % amx::kMBlock;
        const int32_t *sums = a.sums + row * a.sums_ld;  // QuantSpec of a format with mins: plain group sums
        for (int64_t gi = 0; gi < groups; ++gi) asum[gi * amx::kMBlock] = static_cast<float>(sums[gi]);
    }
    for (int64_t i = m; i < rows; ++i) {  // the padding rows of the last block
        int8_t *block = dst + (i / amx::kMBlock) * amx::kMBlock * k + (i % amx::kMBlock) * group;
        for (int64_t gi = 0; gi < groups; ++gi) std::memset(block + gi * amx::kMBlock * group, 0, static_cast<size_t>(group));
    }
    acts.a = dst;
    acts.a_scale = g.a_scale.data();
    acts.asum = mins ? g.asum.data() : nullptr;
    return acts;
}

Status gemm_grouped(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                    int64_t ldc) {
    const PackedLayout &l = w.layout;
    const int32_t group = grouped_group(l);
    const bool mins = packed_type_info(l.type).has_mins;
    GroupedScratch &g = tls_grouped;
    const amx::GroupedActs acts = gather_grouped(a, m, l.k, group, mins, g);
    int8_t *tiles = lines<int8_t>(g.tiles, (l.k + 63) / 64 * 2 * kTileBytes);
    g.scale.resize(static_cast<size_t>(l.groups * kPanel));
    if (mins) g.neg_min.resize(static_cast<size_t>(l.groups * kPanel));
    auto *session = static_cast<amx::TileSession *>(a.tile_session);
    const int64_t p_end = (n_end + kPanel - 1) / kPanel;
    for (int64_t p = n_begin / kPanel; p < p_end; ++p) {
        amx::GroupedPanel b;
        b.n = static_cast<int32_t>(std::min<int64_t>(kPanel, n_end - p * kPanel));
        b.k = l.k;
        b.group = group;
        // Q8_0's packed tiles are the signed codes already: only its scales need unpacking.
        const bool as_stored = l.type == PackedType::kQ8_0;
        g_base->unpack_panel_s8(w, p, as_stored ? nullptr : tiles, g.scale.data(), mins ? g.neg_min.data() : nullptr,
                                p + 1 < p_end);
        b.tiles = as_stored ? reinterpret_cast<const int8_t *>(w.tile(p, 0, 0)) : tiles;
        b.scale = g.scale.data();
        b.neg_min = mins ? g.neg_min.data() : nullptr;
        KT_TRY(amx::gemm_s8_grouped_f32(session, b, acts, c + (p * kPanel - n_begin), ldc));
    }
    return Status::ok();
}

void gemm_int_amx(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                  int64_t ldc) {
    if (m >= amx_min_rows(w.layout) && grouped_group(w.layout) != 0) {
        if (!amx::available()) return fall_back(kAmxGone, w, a, m, n_begin, n_end, c, ldc);
        const Status s = gemm_grouped(w, a, m, n_begin, n_end, c, ldc);
        if (!s.is_ok()) return fall_back(s, w, a, m, n_begin, n_end, c, ldc);
        return count_gemm(a, IsaLevel::kAmx, w, m, n_begin, n_end);
    }
    amx::PackedB b;
    if (m < amx_min_rows(w.layout) || !as_amx(w, &b)) return on_base(w, a, m, n_begin, n_end, c, ldc);
    if (!amx::available()) return fall_back(kAmxGone, w, a, m, n_begin, n_end, c, ldc);
    const int8_t *q = a.q;
    const float *scale = a.scale;
    int64_t ld = a.q_ld;
    const bool gathered = needs_gather(a.rows, a.q, a.q_ld, m);
    if (gathered) {
        Gathered &g = tls_gathered;
        ld = round_up(w.layout.k, 64);
        if (!g.q_key.reuse({a.rows_id, a.q, a.scale, nullptr, a.rows, m, w.layout.k, 0})) {
            const int64_t rows = round_up(m, amx::kRowsPerTile);
            int8_t *dst = lines<int8_t>(g.q, rows * ld);
            g.scale.resize(static_cast<size_t>(m));
            for (int64_t i = 0; i < m; ++i) {
                const int64_t row = a.rows ? a.rows[i] : i;
                std::memcpy(dst + i * ld, a.q + row * a.q_ld, static_cast<size_t>(w.layout.k));
                g.scale[static_cast<size_t>(i)] = a.scale[row];
            }
            std::memset(dst + m * ld, 0, static_cast<size_t>((rows - m) * ld));
        }
        q = reinterpret_cast<const int8_t *>(g.q.data());
        scale = g.scale.data();
    }
    const Status s = amx::gemm_s8_f32(static_cast<amx::TileSession *>(a.tile_session), b, m, n_begin, n_end, q, ld,
                                      scale, c, ldc, gathered);
    if (!s.is_ok()) return fall_back(s, w, a, m, n_begin, n_end, c, ldc);
    count_gemm(a, IsaLevel::kAmx, w, m, n_begin, n_end);
}

void gemm_bf16_amx(const PackedMatrix &w, const GemmActs &a, int64_t m, int64_t n_begin, int64_t n_end, float *c,
                   int64_t ldc) {
    amx::PackedB b;
    if (m < amx_min_rows(w.layout) || !as_amx(w, &b)) return on_base(w, a, m, n_begin, n_end, c, ldc);
    if (!amx::available()) return fall_back(kAmxGone, w, a, m, n_begin, n_end, c, ldc);
    const uint16_t *x = a.bf16;
    int64_t ld = a.bf16_ld;
    const bool gathered = needs_gather(a.rows, a.bf16, 2 * a.bf16_ld, m);
    if (gathered) {
        Gathered &g = tls_gathered;
        ld = round_up(w.layout.k, 32);
        if (!g.bf16_key.reuse({a.rows_id, a.bf16, nullptr, nullptr, a.rows, m, w.layout.k, 0})) {
            const int64_t rows = round_up(m, amx::kRowsPerTile);
            uint16_t *dst = lines<uint16_t>(g.bf16, 2 * rows * ld);
            for (int64_t i = 0; i < m; ++i)
                std::memcpy(dst + i * ld, a.bf16 + (a.rows ? a.rows[i] : i) * a.bf16_ld, 2 * static_cast<size_t>(w.layout.k));
            std::memset(dst + m * ld, 0, 2 * static_cast<size_t>((rows - m) * ld));
        }
        x = reinterpret_cast<const uint16_t *>(g.bf16.data());
    }
    const Status s = amx::gemm_bf16_f32(static_cast<amx::TileSession *>(a.tile_session), b, m, n_begin, n_end, x,
                                        ld, c, ldc, gathered);
    if (!s.is_ok()) return fall_back(s, w, a, m, n_begin, n_end, c, ldc);
    count_gemm(a, IsaLevel::kAmx, w, m, n_begin, n_end);
}

}  // namespace

int64_t amx_min_rows(const PackedLayout &layout) {
    switch (layout.type) {
        case PackedType::kInt8:
        case PackedType::kBf16: return 2;
        case PackedType::kInt4: return layout.group == 32 ? 8 : 4;
        default: return grouped_group(layout) != 0 ? 16 : INT64_MAX;  // INT64_MAX: a format AMX has no kernel for
    }
}

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
