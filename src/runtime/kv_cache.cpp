#include "runtime/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "core/checked_math.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace kt::runtime {
namespace {

// Queries handled together per KV head: each cached row is converted to f32 once per block.
constexpr int64_t kQueryBlock = 16;

}  // namespace

void KvCache::store_row(const float *src, int64_t n, uint8_t *dst) const {
    switch (type_) {
        case KT_TYPE_F32: std::copy_n(src, n, reinterpret_cast<float *>(dst)); break;
        case KT_TYPE_F16: vk_->f32_to_f16(src, reinterpret_cast<uint16_t *>(dst), n); break;
        case KT_TYPE_BF16: vk_->f32_to_bf16(src, reinterpret_cast<uint16_t *>(dst), n); break;
        default: ref::quantize_row(type_, src, dst, n); break;  // Q8_0
    }
}

const float *KvCache::load_row(const uint8_t *src, int64_t n, float *buffer) const {
    switch (type_) {
        case KT_TYPE_F32: return reinterpret_cast<const float *>(src);  // the cache itself
        case KT_TYPE_F16: vk_->f16_to_f32(reinterpret_cast<const uint16_t *>(src), buffer, n); break;
        case KT_TYPE_BF16: vk_->bf16_to_f32(reinterpret_cast<const uint16_t *>(src), buffer, n); break;
        default: ref::dequantize_row(type_, src, buffer, n); break;  // Q8_0
    }
    return buffer;
}

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
    c.vk_ = &cpu::vector_kernels();
    c.n_ctx_ = n_ctx;
    c.n_head_ = hp.n_head;
    c.hkv_ = hp.n_head_kv;
    c.dk_ = hp.head_dim_k;
    c.dv_ = hp.head_dim_v;
    c.kq_scale_ = hp.kq_scale;
    c.k_row_bytes_ = ops::row_bytes(traits, c.dk_);
    c.v_row_bytes_ = ops::row_bytes(traits, c.dv_);
    uint64_t rows = 0, k_bytes = 0, v_bytes = 0;
    KT_RETURN_IF(!checked_mul(static_cast<uint64_t>(hp.n_layer * hp.n_head_kv), static_cast<uint64_t>(n_ctx), &rows) ||
                     !checked_mul(rows, static_cast<uint64_t>(c.k_row_bytes_), &k_bytes) ||
                     !checked_mul(rows, static_cast<uint64_t>(c.v_row_bytes_), &v_bytes),
                 KT_STATUS_INVALID_ARGUMENT, "KV cache for %lld positions is too large", static_cast<long long>(n_ctx));
    c.k_.resize(k_bytes);
    c.v_.resize(v_bytes);
    c.scratch_per_thread_ = std::max(c.dk_, c.dv_) + kQueryBlock * (c.n_head_ / c.hkv_) * n_ctx;
    c.scratch_.resize(static_cast<size_t>(c.scratch_per_thread_ * std::max(n_threads, 1)));
    *out = std::move(c);
    return Status::ok();
}

void KvCache::attend(int64_t layer, int64_t pos0, int64_t T, const float *q, const float *k, const float *v,
                     float *out, ThreadPool &pool) {
    const int64_t Hkv = hkv_, Dk = dk_, Dv = dv_;
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t g = 0; g < Hkv; ++g) {
            store_row(k + (t * Hkv + g) * Dk, Dk, k_row(layer, g, pos0 + t));
            store_row(v + (t * Hkv + g) * Dv, Dv, v_row(layer, g, pos0 + t));
        }
    }
    const int64_t blocks = (T + kQueryBlock - 1) / kQueryBlock;
    Status s = pool.parallel_for(Hkv * blocks, 1, [&](int64_t begin, int64_t end, int thread) {
        for (int64_t task = begin; task < end; ++task) {
            const int64_t g = task / blocks, t0 = (task % blocks) * kQueryBlock;
            attend_block(layer, g, pos0, t0, std::min(kQueryBlock, T - t0), q, out,
                         scratch_.data() + thread * scratch_per_thread_);
        }
    });
    (void)s;  // the body cannot throw
}

// Queries t0 .. t0+tb-1 of the batch, all query heads of KV head g.
void KvCache::attend_block(int64_t layer, int64_t g, int64_t pos0, int64_t t0, int64_t tb, const float *q,
                           float *out, float *scratch) {
    const int64_t H = n_head_, Dk = dk_, Dv = dv_, G = H / hkv_;
    const int64_t n_kv = pos0 + t0 + tb;  // positions the block's last query sees
    float *row = scratch;
    // scores[(tt·G + hh)·n_kv + j] for query t0+tt, head g·G+hh, key position j.
    float *scores = scratch + std::max(Dk, Dv);
    for (int64_t j = 0; j < n_kv; ++j) {
        const float *kr = load_row(k_row(layer, g, j), Dk, row);
        for (int64_t tt = std::max<int64_t>(0, j - pos0 - t0); tt < tb; ++tt)  // causal: j <= pos0 + t0 + tt
            for (int64_t hh = 0; hh < G; ++hh) {
                const float *qv = q + ((t0 + tt) * H + g * G + hh) * Dk;
                scores[(tt * G + hh) * n_kv + j] = vk_->dot(qv, kr, Dk) * kq_scale_;
            }
    }
    for (int64_t tt = 0; tt < tb; ++tt) {
        const int64_t seen = pos0 + t0 + tt + 1;
        for (int64_t hh = 0; hh < G; ++hh) {
            float *s = scores + (tt * G + hh) * n_kv;
            const float max = *std::max_element(s, s + seen);
            double sum = 0.0;
            for (int64_t j = 0; j < seen; ++j) sum += s[j] = std::exp(s[j] - max);
            const float inv = static_cast<float>(1.0 / sum);
            for (int64_t j = 0; j < seen; ++j) s[j] *= inv;
            std::fill_n(out + ((t0 + tt) * H + g * G + hh) * Dv, Dv, 0.0f);
        }
    }
    for (int64_t j = 0; j < n_kv; ++j) {
        const float *vr = load_row(v_row(layer, g, j), Dv, row);
        for (int64_t tt = std::max<int64_t>(0, j - pos0 - t0); tt < tb; ++tt)
            for (int64_t hh = 0; hh < G; ++hh) {
                vk_->axpy(scores[(tt * G + hh) * n_kv + j], vr, out + ((t0 + tt) * H + g * G + hh) * Dv, Dv);
            }
    }
}

}  // namespace kt::runtime
