// The reference kernels behind ops/linear.h: exact dequantization, f32 products.
//
// Each weight row is dequantized once per call and multiplied with every token's activations (ops::dot), so the
// cost is one pass over the weights plus 2·T·K·N flops in plain C++.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "ops/linear.h"
#include "ops/transformer_ops.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

namespace kt::ops {
namespace {

// Output rows per parallel_for chunk: enough work to amortise the hand-out, small enough to balance.
constexpr int64_t kRowGrain = 16;

Status check_matrix(const MatrixView &w) {
    KT_RETURN_IF(!ref::can_dequantize(w.type), KT_STATUS_UNSUPPORTED, "tensor '%s': type %s cannot be dequantized",
                 w.name, kt_type_name(w.type) ? kt_type_name(w.type) : "?");
    const TypeTraits *traits = type_traits(w.type);
    KT_RETURN_IF(!traits || w.cols <= 0 || w.rows <= 0 || w.cols % traits->block_size != 0 ||
                     w.row_bytes != row_bytes(*traits, w.cols),
                 KT_STATUS_INVALID_ARGUMENT, "tensor '%s': bad matrix shape %lld x %lld", w.name,
                 static_cast<long long>(w.rows), static_cast<long long>(w.cols));
    return Status::ok();
}

// One matrix, dequantized row by row on every call (nothing is copied at load: the reference path keeps the
// file's bytes as they are).
class RefLinear final : public Linear {
public:
    RefLinear(const MatrixView &w, const float *bias) : w_(w), bias_(bias) {}

    int64_t in_features() const override { return w_.cols; }
    int64_t out_features() const override { return w_.rows; }

    Status forward(const float *x, int64_t n_tokens, float *y, ThreadPool &pool) const override {
        const int64_t K = w_.cols, N = w_.rows;
        // Output rows are split over the threads; each dequantizes its rows into its own buffer. F32 rows are read
        // in place and need none (and an offset into the empty buffer would be undefined behaviour).
        const bool dequantize = w_.type != KT_TYPE_F32;
        std::vector<float> rows(dequantize ? static_cast<size_t>(K * pool.size()) : 0);
        return pool.parallel_for(N, kRowGrain, [&](int64_t begin, int64_t end, int thread) {
            float *row = dequantize ? rows.data() + thread * K : nullptr;
            for (int64_t n = begin; n < end; ++n) {
                const uint8_t *src = w_.data + n * w_.row_bytes;
                const float *wrow = reinterpret_cast<const float *>(src);
                if (dequantize) {
                    ref::dequantize_row(w_.type, src, row, K);
                    wrow = row;
                }
                const float b = bias_ ? bias_[n] : 0.0f;
                for (int64_t t = 0; t < n_tokens; ++t) y[t * N + n] = dot(wrow, x + t * K, K) + b;
            }
        });
    }

private:
    MatrixView w_;
    const float *bias_;
};

// h = swiglu(g, u) with the variant of `o` (ops/linear.h, ExpertOptions).
float swiglu(float g, float u, const ExpertOptions &o) {
    if (o.swiglu_limit > 0.0f) {
        g = std::min(g, o.swiglu_limit);
        u = std::min(std::max(u, -o.swiglu_limit), o.swiglu_limit);
    }
    if (o.swiglu_alpha > 0.0f) return g / (1.0f + std::exp(-o.swiglu_alpha * g)) * (u + 1.0f);
    return g / (1.0f + std::exp(-g)) * u;
}

// Tokens are grouped by expert, each expert's three matrices run as Linears over its tokens, and the weighted
// outputs are summed per token in slot order.
class RefExperts final : public ExpertFfn {
public:
    RefExperts(const MatrixStack &gate, const MatrixStack &up, const MatrixStack &down, const ExpertOptions &options)
        : options_(options) {
        const int64_t I = gate.first.rows, H = gate.first.cols;
        auto row = [](const float *bias, int64_t e, int64_t n) { return bias ? bias + e * n : nullptr; };
        for (int64_t e = 0; e < gate.count; ++e) {
            gate_.emplace_back(gate.at(e), row(options.gate_bias, e, I));
            up_.emplace_back(up.at(e), row(options.up_bias, e, I));
            down_.emplace_back(down.at(e), row(options.down_bias, e, H));
        }
    }

    int64_t n_experts() const override { return static_cast<int64_t>(gate_.size()); }
    int64_t hidden() const override { return gate_[0].in_features(); }
    int64_t intermediate() const override { return gate_[0].out_features(); }

    Status forward(const float *x, int64_t n_tokens, const int32_t *ids, const float *weights, int64_t k,
                   float *out, ThreadPool &pool) const override {
        const int64_t H = hidden(), I = intermediate();
        // slot_out[t*k + j]: expert ids[t, j]'s output for token t, unweighted.
        std::vector<float> slot_out(static_cast<size_t>(n_tokens * k * H), 0.0f);
        std::vector<int64_t> slots;
        std::vector<float> xs, g, u, y;
        for (int64_t e = 0; e < n_experts(); ++e) {
            slots.clear();
            for (int64_t s = 0; s < n_tokens * k; ++s)
                if (ids[s] == e) slots.push_back(s);
            if (slots.empty()) continue;
            const int64_t n = static_cast<int64_t>(slots.size());
            xs.resize(static_cast<size_t>(n * H));
            g.resize(static_cast<size_t>(n * I));
            u.resize(static_cast<size_t>(n * I));
            y.resize(static_cast<size_t>(n * H));
            for (int64_t i = 0; i < n; ++i) std::copy_n(x + (slots[i] / k) * H, H, xs.begin() + i * H);
            KT_TRY(gate_[e].forward(xs.data(), n, g.data(), pool));              // g [n, I]
            KT_TRY(up_[e].forward(xs.data(), n, u.data(), pool));                // u [n, I]
            for (int64_t i = 0; i < n * I; ++i) g[i] = swiglu(g[i], u[i], options_);
            KT_TRY(down_[e].forward(g.data(), n, y.data(), pool));               // y [n, H]
            for (int64_t i = 0; i < n; ++i) std::copy_n(y.begin() + i * H, H, slot_out.begin() + slots[i] * H);
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
            float *o = out + t * H;
            std::fill_n(o, H, 0.0f);
            for (int64_t j = 0; j < k; ++j) {
                if (ids[t * k + j] < 0) continue;
                const float w = weights[t * k + j];
                const float *s = slot_out.data() + (t * k + j) * H;
                for (int64_t i = 0; i < H; ++i) o[i] += w * s[i];
            }
        }
        return Status::ok();
    }

private:
    ExpertOptions options_;
    std::vector<RefLinear> gate_, up_, down_;
};

class ReferenceKernels final : public KernelFactory {
public:
    const char *name() const override { return "reference"; }

    Status make_linear(const MatrixView &w, const float *bias, std::unique_ptr<Linear> *out) const override {
        KT_TRY(check_matrix(w));
        *out = std::make_unique<RefLinear>(w, bias);
        return Status::ok();
    }

    Status make_experts(const MatrixStack &gate, const MatrixStack &up, const MatrixStack &down,
                        const ExpertOptions &options, std::unique_ptr<ExpertFfn> *out) const override {
        for (const MatrixStack *s : {&gate, &up, &down}) {
            KT_TRY(check_matrix(s->first));
            KT_RETURN_IF(s->count != gate.count || s->count <= 0, KT_STATUS_INVALID_ARGUMENT,
                         "tensor '%s': %lld experts where %lld were expected", s->first.name,
                         static_cast<long long>(s->count), static_cast<long long>(gate.count));
        }
        KT_RETURN_IF(up.first.cols != gate.first.cols || up.first.rows != gate.first.rows ||
                         down.first.cols != gate.first.rows || down.first.rows != gate.first.cols,
                     KT_STATUS_INVALID_ARGUMENT, "experts '%s' / '%s' / '%s': shapes do not form a SwiGLU FFN",
                     gate.first.name, up.first.name, down.first.name);
        *out = std::make_unique<RefExperts>(gate, up, down, options);
        return Status::ok();
    }
};

}  // namespace

const KernelFactory &reference_kernels() {
    static const ReferenceKernels kernels;
    return kernels;
}

}  // namespace kt::ops
