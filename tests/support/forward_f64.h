// An independent float64 forward pass for the MoE families whose details kt's own code is easiest to get wrong:
// deepseek2 (MLA with attn_k_b / attn_v_b, the legacy attn_kv_b convention, with or without q_lora), glm4moe and
// gpt-oss. Written from the math as llama.cpp computes it (shared/testdata/models/README.md and
// README.glm4moe-gpt-oss.md, "Things llama.cpp does"), sharing no code with src/: the attention is computed the
// textbook way (keys and values decompressed per head, every score materialised, two-pass softmax in double), the
// routing, YaRN and RoPE are restated here. It reads a model only through kt.h (metadata getters and
// kt_model_tensor_read_f32, whose dequantization the golden tests check bit for bit).
//
// It is the oracle for files the shared golden set lacks (kt-synth-style lite and legacy deepseek2 layouts): tests
// first check that it reproduces the llama.cpp references that exist, then compare kt with it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kt.h"

namespace kt::test {

class ForwardF64 {
public:
    // Reads the hyperparameters and every tensor. Returns "" on success, else what is missing or unsupported.
    std::string load(const kt_model *model);

    // Logits [n][n_vocab] of a causal prefill of `tokens` at positions 0..n-1, and the smallest routing gap met
    // over every MoE layer and position (+inf without MoE layers): the k-th minus the (k+1)-th router logit
    // (softmax gating) or selection score (sigmoid + bias), and between the last kept and first dropped group.
    std::vector<double> forward(const std::vector<int32_t> &tokens, double *min_route_gap = nullptr) const;

    int64_t n_vocab() const { return n_vocab_; }

private:
    struct Tensor {
        std::vector<float> v;
        int64_t ne[4] = {1, 1, 1, 1};
    };
    const Tensor *find(const std::string &name) const;
    const Tensor &get(const std::string &name) const;
    // y[rows] = W x (+ bias), W with ne = {cols, rows} (matrix `index` of a stack of them).
    void linear(const Tensor &w, const double *x, double *y, const Tensor *bias = nullptr, int64_t index = 0,
                int64_t bias_index = 0) const;
    void rms_norm(const double *x, int64_t n, const Tensor *w, double *y) const;
    void rope(double *x, int64_t pos) const;  // the first n_rot values of one head, in place
    // The routed (and shared) expert FFN of layer `il` for one token, added to out; updates the smallest gap.
    void moe(int64_t il, const double *h, double *out, double *gap) const;
    void swiglu_ffn(const std::string &prefix, const std::string &suffix, int64_t index, const double *h,
                    double weight, double *out) const;

    std::map<std::string, Tensor> tensors_;
    std::string arch_;
    int64_t n_vocab_ = 0, n_embd_ = 0, n_layer_ = 0, n_head_ = 0, n_head_kv_ = 0, head_dim_ = 0, v_head_ = 0;
    int64_t n_rot_ = 0, n_ctx_orig_ = 0, n_expert_ = 0, n_used_ = 0, n_ff_exp_ = 0, n_shared_ = 0;
    int64_t dense_lead_ = 0, n_group_ = 1, n_group_used_ = 1, sliding_window_ = 0;
    int64_t q_lora_ = 0, kv_lora_ = 0;
    bool legacy_kv_b_ = false, neox_ = false, sigmoid_ = false, norm_weights_ = false;
    double eps_ = 0, freq_base_ = 10000, freq_scale_ = 1, yarn_ext_ = 0, rope_scale_ = 1, kq_scale_ = 0;
    double weights_scale_ = 1;
};

}  // namespace kt::test
