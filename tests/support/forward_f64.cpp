#include "support/forward_f64.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

namespace kt::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// HF's yarn_get_mscale: the attention-magnitude correction of YaRN with scaling factor s.
double yarn_mscale(double s, double mscale) { return s <= 1.0 ? 1.0 : 0.1 * mscale * std::log(s) + 1.0; }

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Indices of the k largest values, best first; ties to the lower index.
std::vector<int64_t> top_k(const std::vector<double> &v, int64_t k) {
    std::vector<int64_t> order(v.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
    order.resize(static_cast<size_t>(k));
    return order;
}

// The k-th minus the (k+1)-th largest value (+inf when there is no (k+1)-th finite one).
double gap_after(const std::vector<double> &v, int64_t k) {
    std::vector<double> s = v;
    std::sort(s.begin(), s.end(), std::greater<double>());
    if (static_cast<int64_t>(s.size()) <= k || !std::isfinite(s[static_cast<size_t>(k)])) return kInf;
    return s[static_cast<size_t>(k - 1)] - s[static_cast<size_t>(k)];
}

}  // namespace

const ForwardF64::Tensor *ForwardF64::find(const std::string &name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

const ForwardF64::Tensor &ForwardF64::get(const std::string &name) const {
    static const Tensor kEmpty;
    const Tensor *t = find(name);
    return t ? *t : kEmpty;  // load() checked that every tensor forward() asks for exists
}

std::string ForwardF64::load(const kt_model *model) {
    auto has = [&](const std::string &key) { return kt_model_meta_type(model, key.c_str(), nullptr, nullptr) == KT_STATUS_OK; };
    auto geti = [&](const std::string &key, int64_t fallback) {
        int64_t v = fallback;
        if (has(key)) kt_model_meta_get_int(model, key.c_str(), &v);
        return v;
    };
    auto getf = [&](const std::string &key, double fallback) {
        double v = fallback;
        if (has(key)) kt_model_meta_get_float(model, key.c_str(), &v);
        return v;
    };
    arch_ = kt_model_architecture(model);
    if (arch_ != "deepseek2" && arch_ != "glm4moe" && arch_ != "gpt-oss") return "architecture " + arch_ + " is not covered";
    const std::string a = arch_ + ".";

    for (int64_t i = 0; i < kt_model_tensor_count(model); ++i) {
        kt_tensor_info info;
        info.struct_size = sizeof info;
        if (kt_model_tensor_info(model, i, &info) != KT_STATUS_OK) return "tensor info";
        Tensor t;
        std::copy(info.ne, info.ne + 4, t.ne);
        t.v.resize(info.n_elements);
        if (kt_model_tensor_read_f32(model, i, t.v.data(), t.v.size(), nullptr) != KT_STATUS_OK)
            return std::string("cannot read tensor ") + info.name;
        tensors_[info.name] = std::move(t);
    }
    if (!find("token_embd.weight")) return "no token_embd";
    n_vocab_ = get("token_embd.weight").ne[1];
    n_embd_ = geti(a + "embedding_length", 0);
    n_layer_ = geti(a + "block_count", 0) - geti(a + "nextn_predict_layers", 0);
    n_head_ = geti(a + "attention.head_count", 0);
    n_head_kv_ = geti(a + "attention.head_count_kv", n_head_);
    head_dim_ = geti(a + "attention.key_length", n_embd_ / n_head_);
    v_head_ = geti(a + "attention.value_length", head_dim_);
    n_rot_ = geti(a + "rope.dimension_count", head_dim_);
    eps_ = getf(a + "attention.layer_norm_rms_epsilon", 1e-6);
    freq_base_ = getf(a + "rope.freq_base", 10000.0);
    n_expert_ = geti(a + "expert_count", 0);
    n_used_ = geti(a + "expert_used_count", 0);
    n_ff_exp_ = geti(a + "expert_feed_forward_length", 0);
    n_shared_ = geti(a + "expert_shared_count", 0);
    dense_lead_ = geti(a + "leading_dense_block_count", 0);
    n_group_ = geti(a + "expert_group_count", 1);
    n_group_used_ = geti(a + "expert_group_used_count", 1);
    norm_weights_ = geti(a + "expert_weights_norm", 0) != 0;
    weights_scale_ = getf(a + "expert_weights_scale", 0.0);
    // deepseek2 files without the key are V2 (softmax); glm4moe defaults to sigmoid; 2 means sigmoid.
    sigmoid_ = geti(a + "expert_gating_func", arch_ == "glm4moe" ? 2 : 0) == 2;

    // RoPE scaling as llama.cpp applies it: cos and sin are scaled by the net YaRN attention factor.
    char scaling[16] = "";
    const char *stype = nullptr;
    if (kt_model_meta_get_string(model, (a + "rope.scaling.type").c_str(), &stype, nullptr) == KT_STATUS_OK)
        std::snprintf(scaling, sizeof scaling, "%s", stype);
    const double factor = getf(a + "rope.scaling.factor", 0.0);
    const double log_mul = getf(a + "rope.scaling.yarn_log_multiplier", 0.0);
    n_ctx_orig_ = geti(a + "rope.scaling.original_context_length", geti(a + "context_length", 0));
    if (std::string(scaling) == "yarn" && factor > 0.0) {
        freq_scale_ = 1.0 / factor;
        yarn_ext_ = 1.0;
        if (log_mul != 0.0) {
            const double mscale_all = log_mul / 0.1;  // the converter stores 0.1 * mscale_all_dim
            const double mscale = arch_ == "deepseek2" && mscale_all != 1.0 ? mscale_all : 1.0;
            rope_scale_ = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all);
        } else {
            rope_scale_ = yarn_mscale(factor, 1.0);
        }
    }

    if (arch_ == "deepseek2") {
        q_lora_ = geti(a + "attention.q_lora_rank", 0);
        kv_lora_ = geti(a + "attention.kv_lora_rank", 0);
        legacy_kv_b_ = !has(a + "attention.key_length_mla");
        if (!legacy_kv_b_) {
            head_dim_ = geti(a + "attention.key_length_mla", 0);
            v_head_ = geti(a + "attention.value_length_mla", 0);
        }
        const double mscale = rope_scale_ * (1.0 + log_mul * std::log(1.0 / freq_scale_));
        kq_scale_ = mscale * mscale / std::sqrt(static_cast<double>(head_dim_));
    } else {
        neox_ = true;
        if (arch_ == "gpt-oss") {
            head_dim_ = v_head_ = n_rot_;
            sliding_window_ = geti(a + "attention.sliding_window", 0);
        }
        kq_scale_ = 1.0 / std::sqrt(static_cast<double>(arch_ == "gpt-oss" ? n_rot_ : head_dim_));
    }
    if (n_embd_ <= 0 || n_layer_ <= 0 || n_head_ <= 0 || head_dim_ <= 0) return "bad hyperparameters";
    return "";
}

void ForwardF64::linear(const Tensor &w, const double *x, double *y, const Tensor *bias, int64_t index,
                        int64_t bias_index) const {
    const int64_t cols = w.ne[0], rows = w.ne[1];
    const float *m = w.v.data() + index * cols * rows;
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(m[r * cols + c]) * x[c];
        y[r] = s + (bias ? bias->v[static_cast<size_t>(bias_index * rows + r)] : 0.0);
    }
}

void ForwardF64::rms_norm(const double *x, int64_t n, const Tensor *w, double *y) const {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps_);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * (w ? w->v[static_cast<size_t>(i)] : 1.0);
}

void ForwardF64::rope(double *x, int64_t pos) const {
    const int64_t half = n_rot_ / 2;
    double low = 0.0, high = 0.0;
    if (yarn_ext_ != 0.0) {
        // ggml's correction dims, rounded down / up (beta_fast 32, beta_slow 1).
        auto corr = [&](double n_turns) {
            return static_cast<double>(n_rot_) * std::log(static_cast<double>(n_ctx_orig_) / (n_turns * 2.0 * M_PI)) /
                   (2.0 * std::log(freq_base_));
        };
        low = std::max(0.0, std::floor(corr(32.0)));
        high = std::min(static_cast<double>(n_rot_ - 1), std::ceil(corr(1.0)));
    }
    for (int64_t i = 0; i < half; ++i) {
        const double extrap = static_cast<double>(pos) * std::pow(freq_base_, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot_));
        const double interp = freq_scale_ * extrap;
        double theta = interp;
        if (yarn_ext_ != 0.0) {
            const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
            const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * yarn_ext_;
            theta = interp * (1.0 - ramp) + extrap * ramp;
        }
        const double c = std::cos(theta) * rope_scale_, s = std::sin(theta) * rope_scale_;
        double *a = neox_ ? x + i : x + 2 * i;
        double *b = neox_ ? x + i + half : x + 2 * i + 1;
        const double x0 = *a, x1 = *b;
        *a = x0 * c - x1 * s;
        *b = x0 * s + x1 * c;
    }
}

void ForwardF64::swiglu_ffn(const std::string &prefix, const std::string &suffix, int64_t index, const double *h,
                            double weight, double *out) const {
    const Tensor &g = get(prefix + "_gate" + suffix + ".weight"), &u = get(prefix + "_up" + suffix + ".weight");
    const Tensor &d = get(prefix + "_down" + suffix + ".weight");
    const int64_t F = g.ne[1];
    std::vector<double> gv(static_cast<size_t>(F)), uv(static_cast<size_t>(F)), y(static_cast<size_t>(n_embd_));
    const bool oai = arch_ == "gpt-oss";
    linear(g, h, gv.data(), find(prefix + "_gate" + suffix + ".bias"), index, index);
    linear(u, h, uv.data(), find(prefix + "_up" + suffix + ".bias"), index, index);
    for (int64_t i = 0; i < F; ++i) {
        if (oai) {  // SwiGLU-OAI: the gate clamped from above, the up from both sides and shifted by one
            const double x = std::min(gv[i], 7.0), up = std::min(std::max(uv[i], -7.0), 7.0);
            gv[i] = x * sigmoid(1.702 * x) * (up + 1.0);
        } else {
            gv[i] = gv[i] * sigmoid(gv[i]) * uv[i];
        }
    }
    linear(d, gv.data(), y.data(), find(prefix + "_down" + suffix + ".bias"), index, index);
    for (int64_t i = 0; i < n_embd_; ++i) out[i] += weight * y[i];
}

void ForwardF64::moe(int64_t il, const double *h, double *out, double *gap) const {
    const std::string b = "blk." + std::to_string(il) + ".";
    const int64_t X = n_expert_, k = n_used_;
    std::vector<double> logits(static_cast<size_t>(X));
    linear(get(b + "ffn_gate_inp.weight"), h, logits.data(), find(b + "ffn_gate_inp.bias"));
    std::vector<int64_t> chosen;
    std::vector<double> weights;
    if (arch_ == "gpt-oss") {
        // Top-k of the biased logits, weights = softmax over the k chosen.
        chosen = top_k(logits, k);
        *gap = std::min(*gap, gap_after(logits, k));
        const double m = logits[static_cast<size_t>(chosen[0])];
        double sum = 0.0;
        for (int64_t e : chosen) sum += std::exp(logits[static_cast<size_t>(e)] - m);
        for (int64_t e : chosen) weights.push_back(std::exp(logits[static_cast<size_t>(e)] - m) / sum);
    } else {
        std::vector<double> probs(static_cast<size_t>(X));
        if (sigmoid_) {
            for (int64_t e = 0; e < X; ++e) probs[e] = sigmoid(logits[e]);
        } else {
            const double m = *std::max_element(logits.begin(), logits.end());
            double sum = 0.0;
            for (int64_t e = 0; e < X; ++e) sum += probs[e] = std::exp(logits[e] - m);
            for (double &p : probs) p /= sum;
        }
        std::vector<double> sel = probs;
        if (const Tensor *bias = find(b + "exp_probs_b.bias"))
            for (int64_t e = 0; e < X; ++e) sel[e] += bias->v[static_cast<size_t>(e)];
        if (n_group_ > 1) {
            const int64_t per = X / n_group_;
            std::vector<double> score(static_cast<size_t>(n_group_));
            for (int64_t g = 0; g < n_group_; ++g) {
                std::vector<double> part(sel.begin() + g * per, sel.begin() + (g + 1) * per);
                std::sort(part.begin(), part.end(), std::greater<double>());
                score[g] = part[0] + part[1];
            }
            *gap = std::min(*gap, gap_after(score, n_group_used_));
            const std::vector<int64_t> keep = top_k(score, n_group_used_);
            for (int64_t e = 0; e < X; ++e)
                if (std::find(keep.begin(), keep.end(), e / per) == keep.end()) sel[e] = -kInf;
        }
        chosen = top_k(sel, k);
        // The gap in the units the README's route-gap rule uses: router logits for softmax gating (the softmax
        // keeps their order), selection scores for sigmoid gating.
        *gap = std::min(*gap, gap_after(sigmoid_ || find(b + "exp_probs_b.bias") ? sel : logits, k));
        double sum = 0.0;
        for (int64_t e : chosen) sum += probs[static_cast<size_t>(e)];
        for (int64_t e : chosen) {
            double w = probs[static_cast<size_t>(e)];
            if (norm_weights_) w /= std::max(sum, 6.103515625e-5);
            if (weights_scale_ != 0.0) w *= weights_scale_;
            weights.push_back(w);
        }
    }
    for (size_t j = 0; j < chosen.size(); ++j) swiglu_ffn(b + "ffn", "_exps", chosen[j], h, weights[j], out);
    if (find(b + "ffn_gate_shexp.weight")) swiglu_ffn(b + "ffn", "_shexp", 0, h, 1.0, out);
}

std::vector<double> ForwardF64::forward(const std::vector<int32_t> &tokens, double *min_route_gap) const {
    const int64_t T = static_cast<int64_t>(tokens.size()), E = n_embd_, H = n_head_, Hkv = n_head_kv_;
    const int64_t Dk = head_dim_, Dv = v_head_;
    double gap = kInf;
    std::vector<double> x(static_cast<size_t>(T * E)), h(static_cast<size_t>(T * E));
    const Tensor &embd = get("token_embd.weight");
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < E; ++i) x[t * E + i] = embd.v[static_cast<size_t>(tokens[t] * E + i)];

    // Per layer: q [T][H][Dk] (RoPE applied), k [T][H or Hkv][Dk], v [T][H or Hkv][Dv].
    std::vector<double> q, k, v, o(static_cast<size_t>(T * H * Dv)), scores(static_cast<size_t>(T + 1));
    for (int64_t il = 0; il < n_layer_; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        for (int64_t t = 0; t < T; ++t) rms_norm(&x[t * E], E, find(b + "attn_norm.weight"), &h[t * E]);

        int64_t kv_heads = Hkv;
        if (arch_ == "deepseek2") {
            // MLA, decompressed: every head gets its own keys [k_nope ; k_pe] and values from the latent c_kv.
            kv_heads = H;
            const int64_t n_pe = n_rot_, nope = Dk - n_pe, L = kv_lora_;
            q.assign(static_cast<size_t>(T * H * Dk), 0.0);
            k.assign(static_cast<size_t>(T * H * Dk), 0.0);
            v.assign(static_cast<size_t>(T * H * Dv), 0.0);
            std::vector<double> qa(static_cast<size_t>(std::max<int64_t>(q_lora_, 1))), c(static_cast<size_t>(L + n_pe));
            std::vector<double> ckv(static_cast<size_t>(L));
            for (int64_t t = 0; t < T; ++t) {
                if (q_lora_ > 0) {
                    linear(get(b + "attn_q_a.weight"), &h[t * E], qa.data());
                    rms_norm(qa.data(), q_lora_, find(b + "attn_q_a_norm.weight"), qa.data());
                    linear(get(b + "attn_q_b.weight"), qa.data(), &q[t * H * Dk]);
                } else {
                    linear(get(b + "attn_q.weight"), &h[t * E], &q[t * H * Dk]);
                }
                linear(get(b + "attn_kv_a_mqa.weight"), &h[t * E], c.data());
                rms_norm(c.data(), L, find(b + "attn_kv_a_norm.weight"), ckv.data());
                rope(c.data() + L, t);
                for (int64_t hh = 0; hh < H; ++hh) {
                    double *qh = &q[(t * H + hh) * Dk], *kh = &k[(t * H + hh) * Dk], *vh = &v[(t * H + hh) * Dv];
                    rope(qh + nope, t);
                    std::copy_n(c.data() + L, n_pe, kh + nope);
                    if (legacy_kv_b_) {
                        // attn_kv_b {L, H (nope + Dv)}: per head nope key rows, then Dv value rows.
                        const Tensor &kvb = get(b + "attn_kv_b.weight");
                        const float *rows = kvb.v.data() + hh * (nope + Dv) * L;
                        for (int64_t j = 0; j < nope + Dv; ++j) {
                            double s = 0.0;
                            for (int64_t i = 0; i < L; ++i) s += static_cast<double>(rows[j * L + i]) * ckv[i];
                            (j < nope ? kh[j] : vh[j - nope]) = s;
                        }
                    } else {
                        // attn_k_b {nope, L, H}: row i of head hh maps q_nope to latent dim i, so k_nope = W_kbᵀ c_kv;
                        // attn_v_b {L, Dv, H}: v = W_vb c_kv.
                        const float *kb = get(b + "attn_k_b.weight").v.data() + hh * nope * L;
                        for (int64_t j = 0; j < nope; ++j) {
                            double s = 0.0;
                            for (int64_t i = 0; i < L; ++i) s += static_cast<double>(kb[i * nope + j]) * ckv[i];
                            kh[j] = s;
                        }
                        linear(get(b + "attn_v_b.weight"), ckv.data(), vh, nullptr, hh);
                    }
                }
            }
        } else {
            q.assign(static_cast<size_t>(T * H * Dk), 0.0);
            k.assign(static_cast<size_t>(T * Hkv * Dk), 0.0);
            v.assign(static_cast<size_t>(T * Hkv * Dv), 0.0);
            for (int64_t t = 0; t < T; ++t) {
                linear(get(b + "attn_q.weight"), &h[t * E], &q[t * H * Dk], find(b + "attn_q.bias"));
                linear(get(b + "attn_k.weight"), &h[t * E], &k[t * Hkv * Dk], find(b + "attn_k.bias"));
                linear(get(b + "attn_v.weight"), &h[t * E], &v[t * Hkv * Dv], find(b + "attn_v.bias"));
                for (int64_t hh = 0; hh < H; ++hh) {
                    double *qh = &q[(t * H + hh) * Dk];
                    if (find(b + "attn_q_norm.weight")) rms_norm(qh, Dk, find(b + "attn_q_norm.weight"), qh);
                    rope(qh, t);
                }
                for (int64_t g = 0; g < Hkv; ++g) {
                    double *kh = &k[(t * Hkv + g) * Dk];
                    if (find(b + "attn_k_norm.weight")) rms_norm(kh, Dk, find(b + "attn_k_norm.weight"), kh);
                    rope(kh, t);
                }
            }
        }

        // softmax(kq_scale q kᵀ + mask [+ sink]) v, every score materialised.
        const bool swa = arch_ == "gpt-oss" && sliding_window_ > 0 && il % 2 == 0;
        const Tensor *sinks = find(b + "attn_sinks.weight");
        for (int64_t t = 0; t < T; ++t)
            for (int64_t hh = 0; hh < H; ++hh) {
                const int64_t g = hh / (H / kv_heads);
                const int64_t first = swa ? std::max<int64_t>(0, t - sliding_window_ + 1) : 0;
                double m = sinks ? sinks->v[static_cast<size_t>(hh)] : -kInf;
                for (int64_t j = first; j <= t; ++j) {
                    double s = 0.0;
                    for (int64_t d = 0; d < Dk; ++d) s += q[(t * H + hh) * Dk + d] * k[(j * kv_heads + g) * Dk + d];
                    scores[j] = s * kq_scale_;
                    m = std::max(m, scores[j]);
                }
                double sum = sinks ? std::exp(sinks->v[static_cast<size_t>(hh)] - m) : 0.0;
                for (int64_t j = first; j <= t; ++j) sum += scores[j] = std::exp(scores[j] - m);
                double *oh = &o[(t * H + hh) * Dv];
                std::fill_n(oh, Dv, 0.0);
                for (int64_t j = first; j <= t; ++j)
                    for (int64_t d = 0; d < Dv; ++d) oh[d] += scores[j] / sum * v[(j * kv_heads + g) * Dv + d];
            }
        std::vector<double> a(static_cast<size_t>(E));
        for (int64_t t = 0; t < T; ++t) {
            linear(get(b + "attn_output.weight"), &o[t * H * Dv], a.data(), find(b + "attn_output.bias"));
            for (int64_t i = 0; i < E; ++i) x[t * E + i] += a[i];
        }

        // The FFN: its input norm is ffn_norm (deepseek2) or post_attention_norm (glm4moe, gpt-oss).
        const Tensor *ffn_norm = find(b + "ffn_norm.weight") ? find(b + "ffn_norm.weight") : find(b + "post_attention_norm.weight");
        std::vector<double> f(static_cast<size_t>(E));
        for (int64_t t = 0; t < T; ++t) {
            rms_norm(&x[t * E], E, ffn_norm, &h[t * E]);
            std::fill(f.begin(), f.end(), 0.0);
            if (arch_ != "gpt-oss" && il < dense_lead_) swiglu_ffn(b + "ffn", "", 0, &h[t * E], 1.0, f.data());
            else moe(il, &h[t * E], f.data(), &gap);
            for (int64_t i = 0; i < E; ++i) x[t * E + i] += f[i];
        }
    }

    const Tensor *out = find("output.weight") ? find("output.weight") : &embd;
    std::vector<double> logits(static_cast<size_t>(T * n_vocab_));
    for (int64_t t = 0; t < T; ++t) {
        rms_norm(&x[t * E], E, find("output_norm.weight"), &h[t * E]);
        linear(*out, &h[t * E], &logits[t * n_vocab_]);
    }
    if (min_route_gap) *min_route_gap = gap;
    return logits;
}

}  // namespace kt::test
