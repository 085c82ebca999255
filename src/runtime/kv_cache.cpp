#include "runtime/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/checked_math.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace kt::runtime {
namespace {

// Queries handled together per KV head: each cached tile or row is converted to f32 once per block.
constexpr int64_t kQueryBlock = 16;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

Status KvCache::create(const model::HParams &hp, int64_t n_ctx, int32_t type, int n_threads, KvCache *out) {
    KT_RETURN_IF(type != KT_TYPE_F32 && type != KT_TYPE_F16 && type != KT_TYPE_BF16 && type != KT_TYPE_Q8_0,
                 KT_STATUS_UNSUPPORTED, "KV cache type %s is not supported (use F16, BF16, F32 or Q8_0)",
                 kt_type_name(type) ? kt_type_name(type) : "?");
    KT_RETURN_IF(type == KT_TYPE_Q8_0 && (hp.head_dim_k % 32 != 0 || hp.head_dim_v % 32 != 0), KT_STATUS_UNSUPPORTED,
                 "a Q8_0 KV cache needs head dimensions that are multiples of 32 (the model has %lld and %lld)",
                 static_cast<long long>(hp.head_dim_k), static_cast<long long>(hp.head_dim_v));
    KT_RETURN_IF(n_ctx < 1 || n_ctx > model::kMaxContext, KT_STATUS_INVALID_ARGUMENT,
                 "context length %lld is out of range [1, %lld]", static_cast<long long>(n_ctx),
                 static_cast<long long>(model::kMaxContext));
    const ops::TypeTraits &traits = *ops::type_traits(type);
    KvCache c;
    c.type_ = type;
    c.elem_ = type == KT_TYPE_F32 ? cpu::KvElem::kF32 : type == KT_TYPE_BF16 ? cpu::KvElem::kBf16 : cpu::KvElem::kF16;
    c.elem_bytes_ = type == KT_TYPE_F32 ? 4 : 2;
    c.vk_ = &cpu::vector_kernels();
    c.ak_ = &cpu::attention_kernels();
    c.n_ctx_ = n_ctx;
    c.n_head_ = hp.n_head;
    c.hkv_ = hp.n_head_kv;
    c.dk_ = hp.head_dim_k;
    c.dv_ = hp.head_dim_v;
    c.kq_scale_ = hp.kq_scale;
    KT_RETURN_IF(hp.v_in_k >= 0 && hp.v_in_k + hp.head_dim_v > hp.head_dim_k, KT_STATUS_INTERNAL,
                 "KV cache: values at key dims %lld.. do not fit in %lld", static_cast<long long>(hp.v_in_k),
                 static_cast<long long>(hp.head_dim_k));
    c.v_in_k_ = hp.v_in_k;
    c.k_row_bytes_ = ops::row_bytes(traits, c.dk_);
    c.v_row_bytes_ = c.v_in_k_ >= 0 ? 0 : ops::row_bytes(traits, c.dv_);
    c.bytes_per_position_ = static_cast<uint64_t>(hp.n_layer * hp.n_head_kv * (c.k_row_bytes_ + c.v_row_bytes_));
    // Tiles cover whole groups of 16 positions.
    const int64_t positions = c.tiled() ? round_up(n_ctx, cpu::kKeyTile) : n_ctx;
    c.k_head_bytes_ = positions * c.k_row_bytes_;
    c.v_head_bytes_ = positions * c.v_row_bytes_;
    uint64_t heads = 0, k_bytes = 0, v_bytes = 0;
    KT_RETURN_IF(!checked_mul(static_cast<uint64_t>(hp.n_layer), static_cast<uint64_t>(hp.n_head_kv), &heads) ||
                     !checked_mul(heads, static_cast<uint64_t>(c.k_head_bytes_), &k_bytes) ||
                     !checked_mul(heads, static_cast<uint64_t>(c.v_head_bytes_), &v_bytes),
                 KT_STATUS_INVALID_ARGUMENT, "KV cache for %lld positions is too large", static_cast<long long>(n_ctx));
    c.k_.resize(k_bytes);
    c.v_.resize(v_bytes);

    const int64_t rows = kQueryBlock * (c.n_head_ / c.hkv_);
    const int64_t kernel = c.tiled() ? static_cast<int64_t>(cpu::attention_scratch_floats(rows, c.dk_, c.dv_))
                                     : std::max(c.dk_, c.dv_) + rows * n_ctx;
    c.scratch_per_thread_ = round_up(rows * c.dk_ + rows * c.dv_ + kernel, 16);
    c.scratch_.resize(static_cast<size_t>(c.scratch_per_thread_ * std::max(n_threads, 1) + 16));
    c.visible_.resize(static_cast<size_t>(rows * std::max(n_threads, 1)));
    c.row_sinks_.resize(c.visible_.size());
    *out = std::move(c);
    return Status::ok();
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

// A key into its tile: position pos is lane pos % 16 of tile pos / 16, dimension d at [tile][d][lane].
void KvCache::store_key(const float *src, uint8_t *head, int64_t pos) {
    if (!tiled()) {
        store_row(src, dk_, head + pos * k_row_bytes_);
        return;
    }
    // Convert the row once, then scatter its elements to their tile rows.
    uint8_t converted[model::kMaxHeadDim * sizeof(float)];
    store_row(src, dk_, converted);
    uint8_t *tile = head + static_cast<size_t>((pos / cpu::kKeyTile) * dk_ * cpu::kKeyTile) * elem_bytes_;
    const int64_t lane = pos % cpu::kKeyTile;
    for (int64_t d = 0; d < dk_; ++d)
        std::memcpy(tile + static_cast<size_t>(d * cpu::kKeyTile + lane) * elem_bytes_, converted + d * elem_bytes_,
                    elem_bytes_);
}

void KvCache::attend(int64_t layer, int64_t pos0, int64_t T, const float *q, const float *k, const float *v,
                     int64_t window, const float *sinks, float *out, ThreadPool &pool) {
    const int64_t Hkv = hkv_, Dk = dk_, Dv = dv_;
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t g = 0; g < Hkv; ++g) {
            store_key(k + (t * Hkv + g) * Dk, k_head(layer, g), pos0 + t);
            if (v_in_k_ < 0) store_row(v + (t * Hkv + g) * Dv, Dv, v_head(layer, g) + (pos0 + t) * v_row_bytes_);
        }
    }
    // 64-byte aligned per-thread scratch.
    float *base = scratch_.data();
    base += (16 - (reinterpret_cast<uintptr_t>(base) / sizeof(float)) % 16) % 16;
    const int64_t blocks = (T + kQueryBlock - 1) / kQueryBlock;
    const Extras extras{window, sinks};
    Status s = pool.parallel_for(Hkv * blocks, 1, [&](int64_t begin, int64_t end, int thread) {
        for (int64_t task = begin; task < end; ++task) {
            const int64_t g = task / blocks, t0 = (task % blocks) * kQueryBlock;
            float *scratch = base + thread * scratch_per_thread_;
            if (tiled()) attend_tiled(layer, g, pos0, t0, std::min(kQueryBlock, T - t0), q, extras, out, scratch, thread);
            else attend_rows(layer, g, pos0, t0, std::min(kQueryBlock, T - t0), q, extras, out, scratch);
        }
    });
    (void)s;  // the body cannot throw
}

void KvCache::attend_tiled(int64_t layer, int64_t g, int64_t pos0, int64_t t0, int64_t tb, const float *q,
                           const Extras &x, float *out, float *scratch, int thread) {
    const int64_t H = n_head_, Dk = dk_, Dv = dv_, G = H / hkv_, R = tb * G;
    // Gather the block's query rows (row tt·G + hh: query t0+tt, head g·G+hh) and their causal limits.
    float *qb = scratch, *ob = qb + R * Dk, *ks = ob + R * Dv;
    int32_t *visible = visible_.data() + thread * kQueryBlock * G;
    float *sinks = row_sinks_.data() + thread * kQueryBlock * G;
    for (int64_t tt = 0; tt < tb; ++tt)
        for (int64_t hh = 0; hh < G; ++hh) {
            std::copy_n(q + ((t0 + tt) * H + g * G + hh) * Dk, Dk, qb + (tt * G + hh) * Dk);
            visible[tt * G + hh] = static_cast<int32_t>(pos0 + t0 + tt + 1);
            if (x.sinks) sinks[tt * G + hh] = x.sinks[g * G + hh];
        }
    cpu::AttentionArgs a;
    a.elem = elem_;
    a.k_tiles = k_head(layer, g);
    a.v_rows = v_head(layer, g);
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
    ak_->attend(a);
    for (int64_t tt = 0; tt < tb; ++tt)
        for (int64_t hh = 0; hh < G; ++hh)
            std::copy_n(ob + (tt * G + hh) * Dv, Dv, out + ((t0 + tt) * H + g * G + hh) * Dv);
}

void KvCache::attend_rows(int64_t layer, int64_t g, int64_t pos0, int64_t t0, int64_t tb, const float *q,
                          const Extras &x, float *out, float *scratch) {
    const int64_t H = n_head_, Dk = dk_, Dv = dv_, G = H / hkv_;
    const int64_t n_kv = pos0 + t0 + tb;  // positions the block's last query sees
    const uint8_t *keys = k_head(layer, g), *values = v_head(layer, g);
    float *row = scratch;
    // scores[(tt·G + hh)·n_kv + j] for query t0+tt, head g·G+hh, key position j.
    float *scores = scratch + std::max(Dk, Dv);
    for (int64_t j = 0; j < n_kv; ++j) {
        const float *kr = load_row(keys + j * k_row_bytes_, Dk, row);
        for (int64_t tt = std::max<int64_t>(0, j - pos0 - t0); tt < tb; ++tt)  // causal: j <= pos0 + t0 + tt
            for (int64_t hh = 0; hh < G; ++hh) {
                const float *qv = q + ((t0 + tt) * H + g * G + hh) * Dk;
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
            std::fill_n(out + ((t0 + tt) * H + g * G + hh) * Dv, Dv, 0.0f);
        }
    }
    for (int64_t j = 0; j < n_kv; ++j) {
        const float *vr = v_in_k_ >= 0 ? load_row(keys + j * k_row_bytes_, Dk, row) + v_in_k_
                                       : load_row(values + j * v_row_bytes_, Dv, row);
        for (int64_t tt = std::max<int64_t>(0, j - pos0 - t0); tt < tb; ++tt)
            for (int64_t hh = 0; hh < G; ++hh)
                vk_->axpy(scores[(tt * G + hh) * n_kv + j], vr, out + ((t0 + tt) * H + g * G + hh) * Dv, Dv);
    }
}

}  // namespace kt::runtime
