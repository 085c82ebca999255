#include "runtime/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/kernels.h"
#include "core/checked_math.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace kt::runtime {
namespace {

// The most queries handled together per KV head (each cached tile or row is converted once per block): fewer
// when the KV head has many query heads, so that a task's rows stay near kTaskRows (kTileTaskRows).
constexpr int64_t kMaxQueryBlock = 16, kMaxTileQueryBlock = 64;
constexpr int64_t kMaxBlockPositions = 1 << 24;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

Status check_layout(const model::HParams &hp, int32_t type, int64_t block_positions) {
    KT_RETURN_IF(type != KT_TYPE_F32 && type != KT_TYPE_F16 && type != KT_TYPE_BF16 && type != KT_TYPE_Q8_0,
                 KT_STATUS_UNSUPPORTED, "KV cache type %s is not supported (use F16, BF16, F32 or Q8_0)",
                 kt_type_name(type) ? kt_type_name(type) : "?");
    KT_RETURN_IF(type == KT_TYPE_Q8_0 && (hp.head_dim_k % 32 != 0 || hp.head_dim_v % 32 != 0), KT_STATUS_UNSUPPORTED,
                 "a Q8_0 KV cache needs head dimensions that are multiples of 32 (the model has %lld and %lld)",
                 static_cast<long long>(hp.head_dim_k), static_cast<long long>(hp.head_dim_v));
    KT_RETURN_IF(block_positions < cpu::kKeyTile || block_positions % cpu::kKeyTile != 0 ||
                     block_positions > kMaxBlockPositions,
                 KT_STATUS_INVALID_ARGUMENT, "KV block of %lld positions: it must be a multiple of %lld up to %lld",
                 static_cast<long long>(block_positions), static_cast<long long>(cpu::kKeyTile),
                 static_cast<long long>(kMaxBlockPositions));
    return Status::ok();
}

}  // namespace

Status KvCache::block_bytes_for(const model::HParams &hp, int32_t type, int64_t block_positions, uint64_t *out) {
    KT_TRY(check_layout(hp, type, block_positions));
    const ops::TypeTraits &traits = *ops::type_traits(type);
    KT_RETURN_IF(hp.v_in_k >= 0 && hp.v_in_k + hp.head_dim_v > hp.head_dim_k, KT_STATUS_INTERNAL,
                 "KV cache: values at key dims %lld.. do not fit in %lld", static_cast<long long>(hp.v_in_k),
                 static_cast<long long>(hp.head_dim_k));
    const uint64_t per_position = static_cast<uint64_t>(ops::row_bytes(traits, hp.head_dim_k)) +
                                  (hp.v_in_k >= 0 ? 0 : static_cast<uint64_t>(ops::row_bytes(traits, hp.head_dim_v)));
    uint64_t heads = 0, bytes = 0;
    KT_RETURN_IF(!checked_mul(static_cast<uint64_t>(hp.n_layer), static_cast<uint64_t>(hp.n_head_kv), &heads) ||
                     !checked_mul(heads, per_position, &bytes) ||
                     !checked_mul(bytes, static_cast<uint64_t>(block_positions), &bytes),
                 KT_STATUS_INVALID_ARGUMENT, "a KV block of %lld positions is too large",
                 static_cast<long long>(block_positions));
    *out = bytes;
    return Status::ok();
}

Status KvCache::create(const model::HParams &hp, const Config &config, KvCache *out) {
    uint64_t block_bytes = 0;
    KT_TRY(block_bytes_for(hp, config.type, config.block_positions, &block_bytes));
    KT_RETURN_IF(config.max_positions < 1 || config.max_positions > model::kMaxContext, KT_STATUS_INVALID_ARGUMENT,
                 "context length %lld is out of range [1, %lld]", static_cast<long long>(config.max_positions),
                 static_cast<long long>(model::kMaxContext));
    KT_RETURN_IF(config.n_blocks < 1 || config.n_blocks > INT32_MAX, KT_STATUS_INVALID_ARGUMENT,
                 "a KV cache of %lld blocks is out of range [1, 2^31)", static_cast<long long>(config.n_blocks));
    uint64_t total = 0;
    KT_RETURN_IF(!checked_mul(block_bytes, static_cast<uint64_t>(config.n_blocks), &total) || total > (uint64_t{1} << 46),
                 KT_STATUS_INVALID_ARGUMENT, "a KV cache of %lld blocks of %llu bytes is too large",
                 static_cast<long long>(config.n_blocks), static_cast<unsigned long long>(block_bytes));
    const int32_t type = config.type;
    const ops::TypeTraits &traits = *ops::type_traits(type);
    KvCache c;
    c.type_ = type;
    c.elem_ = type == KT_TYPE_F32 ? cpu::KvElem::kF32 : type == KT_TYPE_BF16 ? cpu::KvElem::kBf16 : cpu::KvElem::kF16;
    c.elem_bytes_ = type == KT_TYPE_F32 ? 4 : 2;
    c.vk_ = &cpu::vector_kernels();
    c.ak_ = &cpu::attention_kernels();
    c.n_layer_ = hp.n_layer;
    c.n_head_ = hp.n_head;
    c.hkv_ = hp.n_head_kv;
    c.dk_ = hp.head_dim_k;
    c.dv_ = hp.head_dim_v;
    c.kq_scale_ = hp.kq_scale;
    c.block_positions_ = config.block_positions;
    c.n_blocks_ = config.n_blocks;
    c.max_positions_ = config.max_positions;
    c.k_row_bytes_ = static_cast<size_t>(ops::row_bytes(traits, c.dk_));
    c.v_in_k_ = hp.v_in_k;
    c.v_row_bytes_ = c.v_in_k_ >= 0 ? 0 : static_cast<size_t>(ops::row_bytes(traits, c.dv_));
    c.k_block_bytes_ = c.k_row_bytes_ * static_cast<size_t>(c.block_positions_);
    c.v_block_bytes_ = c.v_row_bytes_ * static_cast<size_t>(c.block_positions_);
    c.block_bytes_ = block_bytes;
    KT_TRY(mem::NumaBuffer::allocate(static_cast<size_t>(total), nullptr, -1, &c.memory_));

    // The products (see kv_cache.h). AMX tiles when the kernels run on AMX; otherwise the GEMMs of the tile
    // products run on the best AVX-512 / AVX2 / scalar set, whose bf16 dot products are native only with
    // AVX512-BF16.
    const cpu::KernelSet &base = cpu::best_kernel_set(std::min(cpu::active_isa_level(), cpu::IsaLevel::kAvx512));
    c.tile_amx_ = cpu::kernel_level() == cpu::IsaLevel::kAmx;
    c.tile_gemm_ = &base;
    if (config.products >= 0) {
        KT_RETURN_IF(config.products > static_cast<int32_t>(cpu::Products::kBf16x3), KT_STATUS_INVALID_ARGUMENT,
                     "KV cache: products %d is not a cpu::Products value", config.products);
        c.products_ = static_cast<cpu::Products>(config.products);
    } else if (type == KT_TYPE_BF16 && (c.tile_amx_ || base.bf16)) {
        c.products_ = cpu::Products::kBf16;
    } else if (type == KT_TYPE_F16 && c.tile_amx_) {
        c.products_ = cpu::Products::kBf16x3;
    }
    if (!c.tiled() || c.v_in_k_ >= 0) c.products_ = cpu::Products::kF32;  // values inside the keys: f32 only

    const int64_t G = c.n_head_ / c.hkv_;
    const bool tiles = c.products_ != cpu::Products::kF32;
    c.query_block_ =
        std::clamp<int64_t>((tiles ? kTileTaskRows : kTaskRows) / G, 1, tiles ? kMaxTileQueryBlock : kMaxQueryBlock);
    const int64_t rows = c.query_block_ * G;
    int64_t kernel = std::max(c.dk_, c.dv_) + rows * c.max_positions_;
    if (c.tiled()) {
        kernel = static_cast<int64_t>(cpu::attention_scratch_floats(rows, c.dk_, c.dv_, cpu::Products::kF32));
        if (c.products_ != cpu::Products::kF32)
            kernel = std::max(kernel, static_cast<int64_t>(cpu::attention_scratch_floats(rows, c.dk_, c.dv_, c.products_)));
    }
    const int threads = std::max(config.n_threads, 1);
    c.n_threads_ = threads;
    c.scratch_per_thread_ = round_up(rows * c.dk_ + rows * c.dv_ + kernel, 16);
    c.scratch_.resize(static_cast<size_t>(c.scratch_per_thread_ * threads + 16));
    c.visible_.resize(static_cast<size_t>(rows * threads));
    c.row_sinks_.resize(c.visible_.size());
    c.counters_ = std::make_unique<cpu::GemmCounter[]>(static_cast<size_t>(threads));
    *out = std::move(c);
    return Status::ok();
}

cpu::GemmCounts KvCache::gemm_counts() const {
    cpu::GemmCounts sum;
    for (int t = 0; t < n_threads_; ++t) sum += counters_[static_cast<size_t>(t)].read();
    return sum;
}

void KvCache::store_row(const float *src, int64_t n, uint8_t *dst) const {
    switch (type_) {
        case KT_TYPE_F32: std::copy_n(src, n, reinterpret_cast<float *>(dst)); break;
        case KT_TYPE_F16: vk_->f32_to_f16(src, reinterpret_cast<uint16_t *>(dst), n); break;
        case KT_TYPE_BF16: vk_->f32_to_bf16(src, reinterpret_cast<uint16_t *>(dst), n); break;
        default: ref::quantize_row(type_, src, dst, n); break;  // Q8_0
    }
}

const float *KvCache::load_row(const uint8_t *src, int64_t n, float *buffer) const {
    if (type_ == KT_TYPE_F32) return reinterpret_cast<const float *>(src);
    ref::dequantize_row(type_, src, buffer, n);  // Q8_0: the only type read as rows besides F32
    return buffer;
}

// Keys go into their tile (position p is lane p % 16 of tile p / 16, dimension d at [tile][d][lane]) or row,
// values into their row.
void KvCache::store(const Segment &seg, int64_t layer, const float *k, const float *v) {
    const int64_t Hkv = hkv_, Dk = dk_, Dv = dv_;
    uint8_t converted[model::kMaxHeadDim * sizeof(float)];
    for (int64_t t = 0; t < seg.n_tokens; ++t) {
        const int64_t pos = seg.pos0 + t, in_block = pos % block_positions_;
        uint8_t *blk = block(seg.blocks[pos / block_positions_]);
        const int64_t row = seg.row0 + t;
        for (int64_t g = 0; g < Hkv; ++g) {
            uint8_t *keys = blk + head_offset(layer, g), *values = keys + k_block_bytes_;
            const float *key = k + (row * Hkv + g) * Dk;
            if (v_in_k_ < 0) store_row(v + (row * Hkv + g) * Dv, Dv, values + static_cast<size_t>(in_block) * v_row_bytes_);
            if (!tiled()) {
                store_row(key, Dk, keys + static_cast<size_t>(in_block) * k_row_bytes_);
                continue;
            }
            // Convert the row once, then scatter its elements to their tile rows.
            store_row(key, Dk, converted);
            uint8_t *tile = keys + static_cast<size_t>((in_block / cpu::kKeyTile) * Dk * cpu::kKeyTile) * elem_bytes_;
            const int64_t lane = in_block % cpu::kKeyTile;
            for (int64_t d = 0; d < Dk; ++d)
                std::memcpy(tile + static_cast<size_t>(d * cpu::kKeyTile + lane) * elem_bytes_,
                            converted + d * elem_bytes_, elem_bytes_);
        }
    }
}

void KvCache::attend(int64_t layer, const Segment *segments, int64_t n_segments, const float *q, const float *k,
                     const float *v, int64_t window, const float *sinks, float *out, ThreadPool &pool) {
    task_begin_.resize(static_cast<size_t>(n_segments + 1));
    task_begin_[0] = 0;
    for (int64_t s = 0; s < n_segments; ++s) {
        store(segments[s], layer, k, v);
        const int64_t query_blocks = (segments[s].n_tokens + query_block_ - 1) / query_block_;
        task_begin_[s + 1] = task_begin_[s] + hkv_ * query_blocks;
    }
    // 64-byte aligned per-thread scratch.
    float *base = scratch_.data();
    base += (16 - (reinterpret_cast<uintptr_t>(base) / sizeof(float)) % 16) % 16;
    const Extras extras{window, sinks};
    const int64_t n_tasks = task_begin_[n_segments];
    // Each query against each visible position: Dk multiply-adds for its score, Dv for its share of the output.
    int64_t macs = 0;
    for (int64_t s = 0; s < n_segments; ++s)
        macs += segments[s].n_tokens * (segments[s].pos0 + segments[s].n_tokens) * n_head_ * (dk_ + dv_);
    const int64_t grain = macs < kMinParallelMacs ? n_tasks : 1;  // one chunk: the caller alone
    Status s = pool.parallel_for(n_tasks, grain, [&](int64_t begin, int64_t end, int thread) {
        // AMX tiles are configured once per run of tasks on this thread (and released after).
        cpu::amx::TileSession tiles;
        for (int64_t i = begin; i < end; ++i) {
            // Last tasks first: within a segment the later query blocks see more positions, so the long tasks
            // start early and the short ones fill the gaps at the end.
            const int64_t task = n_tasks - 1 - i;
            const int64_t si =
                std::upper_bound(task_begin_.begin(), task_begin_.end(), task) - task_begin_.begin() - 1;
            const Segment &seg = segments[si];
            const int64_t local = task - task_begin_[si];
            const int64_t query_blocks = (seg.n_tokens + query_block_ - 1) / query_block_;
            const int64_t g = local / query_blocks, t0 = (local % query_blocks) * query_block_;
            const int64_t tb = std::min(query_block_, seg.n_tokens - t0);
            float *scratch = base + thread * scratch_per_thread_;
            if (tiled()) attend_tiled(seg, layer, g, t0, tb, q, extras, out, scratch, thread, &tiles);
            else attend_rows(seg, layer, g, t0, tb, q, extras, out, scratch);
        }
    });
    (void)s;  // the body cannot throw
}

void KvCache::attend_tiled(const Segment &seg, int64_t layer, int64_t g, int64_t t0, int64_t tb, const float *q,
                           const Extras &x, float *out, float *scratch, int thread, void *tile_session) {
    const int64_t H = n_head_, Dk = dk_, Dv = dv_, G = H / hkv_, R = tb * G;
    // Gather the block's query rows (row tt·G + hh: query t0+tt, head g·G+hh) and their causal limits.
    float *qb = scratch, *ob = qb + R * Dk, *ks = ob + R * Dv;
    int32_t *visible = visible_.data() + thread * query_block_ * G;
    float *sinks = row_sinks_.data() + thread * query_block_ * G;
    for (int64_t tt = 0; tt < tb; ++tt)
        for (int64_t hh = 0; hh < G; ++hh) {
            std::copy_n(q + ((seg.row0 + t0 + tt) * H + g * G + hh) * Dk, Dk, qb + (tt * G + hh) * Dk);
            visible[tt * G + hh] = static_cast<int32_t>(seg.pos0 + t0 + tt + 1);
            if (x.sinks) sinks[tt * G + hh] = x.sinks[g * G + hh];
        }
    cpu::AttentionArgs a;
    a.elem = elem_;
    a.base = memory_.as<uint8_t>();
    a.blocks = seg.blocks;
    a.block_positions = block_positions_;
    a.block_stride = block_bytes_;
    a.k_offset = head_offset(layer, g);
    a.v_offset = a.k_offset + k_block_bytes_;
    a.v_in_k = v_in_k_;
    a.dk = Dk;
    a.dv = Dv;
    a.q = qb;
    a.rows = R;
    a.visible = visible;
    a.window = static_cast<int32_t>(x.window);
    a.sinks = x.sinks ? sinks : nullptr;
    a.scale = kq_scale_;
    a.out = ob;
    a.scratch = ks;
    // Windows and sinks are the f32 path's only (attention_kernels.h).
    if (products_ != cpu::Products::kF32 && R >= kMinTileRows && x.window == 0 && !x.sinks) {
        a.products = products_;
        a.gemm = tile_gemm_;
        a.amx = tile_amx_;
        a.tile_session = tile_session;
        a.counter = &counters_[static_cast<size_t>(thread)];
    }
    ak_->attend(a);
    for (int64_t tt = 0; tt < tb; ++tt)
        for (int64_t hh = 0; hh < G; ++hh)
            std::copy_n(ob + (tt * G + hh) * Dv, Dv, out + ((seg.row0 + t0 + tt) * H + g * G + hh) * Dv);
}

void KvCache::attend_rows(const Segment &seg, int64_t layer, int64_t g, int64_t t0, int64_t tb, const float *q,
                          const Extras &x, float *out, float *scratch) {
    const int64_t H = n_head_, Dk = dk_, Dv = dv_, G = H / hkv_, pos0 = seg.pos0, row0 = seg.row0 + t0;
    const int64_t n_kv = pos0 + t0 + tb;  // positions the block's last query sees
    const size_t keys = head_offset(layer, g), values = keys + k_block_bytes_;
    auto block_of = [&](int64_t j) { return block(seg.blocks[j / block_positions_]); };
    float *row = scratch;
    // scores[(tt·G + hh)·n_kv + j] for query t0+tt, head g·G+hh, key position j.
    float *scores = scratch + std::max(Dk, Dv);
    for (int64_t j = 0; j < n_kv; ++j) {
        const size_t in_block = static_cast<size_t>(j % block_positions_);
        const float *kr = load_row(block_of(j) + keys + in_block * k_row_bytes_, Dk, row);
        for (int64_t tt = std::max<int64_t>(0, j - pos0 - t0); tt < tb; ++tt)  // causal: j <= pos0 + t0 + tt
            for (int64_t hh = 0; hh < G; ++hh) {
                const float *qv = q + ((row0 + tt) * H + g * G + hh) * Dk;
                scores[(tt * G + hh) * n_kv + j] = vk_->dot(qv, kr, Dk) * kq_scale_;
            }
    }
    for (int64_t tt = 0; tt < tb; ++tt) {
        const int64_t seen = pos0 + t0 + tt + 1;
        const int64_t first = x.window > 0 ? std::max<int64_t>(0, seen - x.window) : 0;  // the window's first position
        for (int64_t hh = 0; hh < G; ++hh) {
            float *s = scores + (tt * G + hh) * n_kv;
            const float sink = x.sinks ? x.sinks[g * G + hh] : -INFINITY;
            const float max = std::max(*std::max_element(s + first, s + seen), sink);
            double sum = x.sinks ? std::exp(sink - max) : 0.0;
            for (int64_t j = first; j < seen; ++j) sum += s[j] = std::exp(s[j] - max);
            const float inv = static_cast<float>(1.0 / sum);
            std::fill_n(s, first, 0.0f);  // outside the window
            for (int64_t j = first; j < seen; ++j) s[j] *= inv;
            std::fill_n(out + ((row0 + tt) * H + g * G + hh) * Dv, Dv, 0.0f);
        }
    }
    for (int64_t j = 0; j < n_kv; ++j) {
        const size_t in_block = static_cast<size_t>(j % block_positions_);
        const float *vr = v_in_k_ >= 0 ? load_row(block_of(j) + keys + in_block * k_row_bytes_, Dk, row) + v_in_k_
                                       : load_row(block_of(j) + values + in_block * v_row_bytes_, Dv, row);
        for (int64_t tt = std::max<int64_t>(0, j - pos0 - t0); tt < tb; ++tt)
            for (int64_t hh = 0; hh < G; ++hh)
                vk_->axpy(scores[(tt * G + hh) * n_kv + j], vr, out + ((row0 + tt) * H + g * G + hh) * Dv, Dv);
    }
}

}  // namespace kt::runtime
