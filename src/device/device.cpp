#include "device/device.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/checked_math.h"
#include "core/fp16.h"
#include "ops/ref/quants_ref.h"

namespace kt::device {

const char *kind_name(Kind kind) {
    switch (kind) {
        case Kind::kNone: return "none";
        case Kind::kCpuStandIn: return "cpu-standin";
        case Kind::kCuda: return "cuda";
    }
    return "unknown";
}

LayerShape cover(const LayerShape &a, const LayerShape &b) {
    LayerShape c;
    c.n_experts = std::max(a.n_experts, b.n_experts);
    c.hidden = std::max(a.hidden, b.hidden);
    c.intermediate = std::max(a.intermediate, b.intermediate);
    c.max_tokens = std::max(a.max_tokens, b.max_tokens);
    c.max_top_k = std::max(a.max_top_k, b.max_top_k);
    return c;
}

uint64_t expert_bytes(int64_t hidden, int64_t intermediate) {
    return 3ull * static_cast<uint64_t>(hidden) * static_cast<uint64_t>(intermediate) * sizeof(uint16_t);
}

// The work buffer of a call of T tokens with R = T · min(k, n_experts) rows at most:
//   x      f32  [T][H]    the input as copied from the host
//   xg     bf16 [R][H]    the input rows gathered by expert
//   gu     f32  [R][2I]   gate | up products
//   h      bf16 [R][I]    SwiGLU, rounded for the down GEMM
//   y      f32  [R][H]    down products
//   out    f32  [T][H]    the weighted sums, copied back to the host
//   routing              row_token, row_weight, token_rows [R] (4 bytes each), token_begin [T + 1]
// and, whatever the shape, the two upload slots (kUploadSlotBytes each).
uint64_t workspace_bytes(const LayerShape &s) {
    const uint64_t T = static_cast<uint64_t>(s.max_tokens), H = static_cast<uint64_t>(s.hidden),
                   I = static_cast<uint64_t>(s.intermediate);
    const uint64_t R = T * static_cast<uint64_t>(std::min<int64_t>(s.max_top_k, s.n_experts));
    return 4 * T * H + 2 * R * H + 8 * R * I + 2 * R * I + 4 * R * H + 4 * T * H + 12 * R + 4 * (T + 1) +
           2 * kUploadSlotBytes;
}

void plan_rows(const ExpertWork &work, const std::vector<uint8_t> &resident, int64_t n_experts, RowPlan *plan) {
    const int64_t T = work.n_tokens, k = work.top_k, n = T * k;
    auto on_device = [&](int32_t e) { return e >= 0 && e < n_experts && resident[static_cast<size_t>(e)]; };
    plan->expert_begin.assign(static_cast<size_t>(n_experts) + 1, 0);
    for (int64_t i = 0; i < n; ++i)
        if (on_device(work.ids[i])) ++plan->expert_begin[static_cast<size_t>(work.ids[i]) + 1];
    for (int64_t e = 0; e < n_experts; ++e)
        plan->expert_begin[static_cast<size_t>(e) + 1] += plan->expert_begin[static_cast<size_t>(e)];
    const int32_t rows = plan->expert_begin[static_cast<size_t>(n_experts)];
    plan->row_token.resize(static_cast<size_t>(rows));
    plan->row_weight.resize(static_cast<size_t>(rows));
    plan->token_rows.resize(static_cast<size_t>(rows));
    plan->token_begin.assign(static_cast<size_t>(T) + 1, 0);
    std::vector<int32_t> &cursor = plan->token_rows;  // reused as write cursors, then overwritten below
    std::vector<int32_t> next(plan->expert_begin.begin(), plan->expert_begin.end() - 1);
    std::vector<int32_t> slot_row(static_cast<size_t>(n), -1);
    for (int64_t i = 0; i < n; ++i) {  // tokens ascending within an expert: i runs in token order
        const int32_t e = work.ids[i];
        if (!on_device(e)) continue;
        const int32_t r = next[static_cast<size_t>(e)]++;
        plan->row_token[static_cast<size_t>(r)] = static_cast<int32_t>(i / k);
        plan->row_weight[static_cast<size_t>(r)] = work.weights[i];
        slot_row[static_cast<size_t>(i)] = r;
        ++plan->token_begin[static_cast<size_t>(i / k) + 1];
    }
    for (int64_t t = 0; t < T; ++t) plan->token_begin[static_cast<size_t>(t) + 1] += plan->token_begin[static_cast<size_t>(t)];
    int32_t at = 0;
    for (int64_t i = 0; i < n; ++i)  // slot order within a token
        if (slot_row[static_cast<size_t>(i)] >= 0) cursor[static_cast<size_t>(at++)] = slot_row[static_cast<size_t>(i)];
}

Status DeviceLayer::check_upload(int64_t expert, const ops::MatrixView &gate, const ops::MatrixView &up,
                                 const ops::MatrixView &down) const {
    KT_RETURN_IF(expert < 0 || expert >= shape_.n_experts, KT_STATUS_INVALID_ARGUMENT,
                 "device upload: expert %lld out of range [0, %lld)", static_cast<long long>(expert),
                 static_cast<long long>(shape_.n_experts));
    const int64_t H = shape_.hidden, I = shape_.intermediate;
    auto check = [&](const ops::MatrixView &m, int64_t rows, int64_t cols, const char *what) -> Status {
        KT_RETURN_IF(m.rows != rows || m.cols != cols || !m.data, KT_STATUS_INVALID_ARGUMENT,
                     "device upload: %s '%s' of expert %lld is %lld x %lld, expected %lld x %lld", what, m.name,
                     static_cast<long long>(expert), static_cast<long long>(m.rows), static_cast<long long>(m.cols),
                     static_cast<long long>(rows), static_cast<long long>(cols));
        KT_RETURN_IF(!ref::can_dequantize(m.type), KT_STATUS_UNSUPPORTED, "device upload: %s '%s': type %d cannot be dequantized",
                     what, m.name, m.type);
        return Status::ok();
    };
    KT_TRY(check(gate, I, H, "gate"));
    KT_TRY(check(up, I, H, "up"));
    KT_TRY(check(down, H, I, "down"));
    return Status::ok();
}

Status DeviceLayer::check_work(const ExpertWork &w) const {
    KT_RETURN_IF(w.n_tokens < 0 || w.n_tokens > shape_.max_tokens, KT_STATUS_INVALID_ARGUMENT,
                 "device: %lld tokens, at most %lld per call", static_cast<long long>(w.n_tokens),
                 static_cast<long long>(shape_.max_tokens));
    KT_RETURN_IF(w.top_k < 0 || w.top_k > shape_.max_top_k, KT_STATUS_INVALID_ARGUMENT,
                 "device: top_k %d, at most %d", w.top_k, shape_.max_top_k);
    KT_RETURN_IF(w.n_tokens > 0 && (!w.input || !w.output || (w.top_k > 0 && (!w.ids || !w.weights))),
                 KT_STATUS_INVALID_ARGUMENT, "device: a buffer of the work is NULL");
    return Status::ok();
}

uint64_t Device::used_bytes() const {
    std::lock_guard<std::mutex> lock(accounting_mutex_);
    return used_;
}

Status Device::reserve(uint64_t bytes, const char *what) {
    std::lock_guard<std::mutex> lock(accounting_mutex_);
    KT_RETURN_IF(bytes > options_.budget_bytes || used_ > options_.budget_bytes - bytes, KT_STATUS_OUT_OF_MEMORY,
                 "device %s: %s needs %llu bytes, but %llu of the budget of %llu bytes are in use", kind_name(kind()),
                 what, static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(used_),
                 static_cast<unsigned long long>(options_.budget_bytes));
    used_ += bytes;
    return Status::ok();
}

void Device::release(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(accounting_mutex_);
    used_ -= std::min(used_, bytes);
}

void compute_rows_bf16(const LayerShape &shape, int64_t n_tokens, const float *input, const RowPlan &plan,
                       const uint16_t *const *gate_up, const uint16_t *const *down, float *output) {
    const int64_t H = shape.hidden, I = shape.intermediate;
    std::vector<float> xb(static_cast<size_t>(H)), gu(static_cast<size_t>(2 * I)), h(static_cast<size_t>(I));
    std::vector<float> y(static_cast<size_t>(plan.rows() * H));
    for (int64_t e = 0; e < shape.n_experts; ++e) {
        for (int32_t r = plan.expert_begin[static_cast<size_t>(e)]; r < plan.expert_begin[static_cast<size_t>(e) + 1]; ++r) {
            const float *x = input + plan.row_token[static_cast<size_t>(r)] * H;
            for (int64_t i = 0; i < H; ++i) xb[static_cast<size_t>(i)] = bf16_to_f32(f32_to_bf16(x[i]));
            const uint16_t *w = gate_up[e];
            for (int64_t n = 0; n < 2 * I; ++n) {  // bf16 x bf16 products are exact in f32; sums in f32
                const uint16_t *row = w + n * H;
                float acc = 0.0f;
                for (int64_t i = 0; i < H; ++i) acc += xb[static_cast<size_t>(i)] * bf16_to_f32(row[i]);
                gu[static_cast<size_t>(n)] = acc;
            }
            for (int64_t i = 0; i < I; ++i) {
                const float g = gu[static_cast<size_t>(i)], u = gu[static_cast<size_t>(I + i)];
                h[static_cast<size_t>(i)] = bf16_to_f32(f32_to_bf16(g / (1.0f + std::exp(-g)) * u));
            }
            float *yr = y.data() + r * H;
            const uint16_t *d = down[e];
            for (int64_t n = 0; n < H; ++n) {
                const uint16_t *row = d + n * I;
                float acc = 0.0f;
                for (int64_t i = 0; i < I; ++i) acc += h[static_cast<size_t>(i)] * bf16_to_f32(row[i]);
                yr[n] = acc;
            }
        }
    }
    for (int64_t t = 0; t < n_tokens; ++t) {
        float *o = output + t * H;
        std::fill(o, o + H, 0.0f);
        for (int32_t j = plan.token_begin[static_cast<size_t>(t)]; j < plan.token_begin[static_cast<size_t>(t) + 1]; ++j) {
            const int32_t r = plan.token_rows[static_cast<size_t>(j)];
            const float w = plan.row_weight[static_cast<size_t>(r)];
            const float *yr = y.data() + r * H;
            for (int64_t n = 0; n < H; ++n) o[n] += w * yr[n];
        }
    }
}

Status create_device(const DeviceOptions &options, std::shared_ptr<Device> *out) {
    switch (options.kind) {
        case Kind::kCpuStandIn: return create_standin_device(options, out);
        case Kind::kCuda: return create_cuda_device(options, out);
        case Kind::kNone: break;
    }
    return Status::error(KT_STATUS_INVALID_ARGUMENT, "device: kind %d is not a device", static_cast<int>(options.kind));
}

}  // namespace kt::device
