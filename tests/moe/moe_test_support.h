// Shared by the expert pool tests: random experts in any format, the math reference, routing with duplicates and
// -1 ids, and running a kt_expert_pool through kt.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kt.h"

namespace kt::moe {
class ExpertPool;
}

namespace kt::test {

struct ExpertWeights {
    int32_t src_type = KT_TYPE_F32;
    int64_t experts = 0, hidden = 0, inter = 0;
    std::vector<uint8_t> gate, up, down;      // as stored: [E*I][H], [E*I][H], [E*H][I]
    std::vector<float> gate_f, up_f, down_f;  // the weights the pool should compute with (see reference_weights)
};

// Random weights of `src_type`, and their fp32 values as the pool will see them after converting to `format`
// (KT_EXPERT_WEIGHTS_*): the reference dequantizer for formats kept as stored, the stated INT8 / INT4 / BF16 / Q8_0
// rounding (moe/weights.h) reproduced here for converted ones.
ExpertWeights make_experts(int32_t src_type, int32_t format, int32_t int4_group, int64_t experts, int64_t hidden,
                           int64_t inter, uint64_t seed);

struct Routing {
    int64_t tokens = 0;
    int32_t top_k = 0;
    std::vector<int32_t> ids;     // [T][k], with duplicates and -1
    std::vector<float> weights;   // [T][k]
};
Routing make_routing(int64_t tokens, int32_t top_k, int64_t experts, uint64_t seed);

// The math reference (ops/ref/moe_ref) in double.
std::vector<double> reference(const ExpertWeights &w, const std::vector<float> &x, const Routing &r,
                              const uint8_t *mask, float swiglu_limit, float swiglu_alpha,
                              const std::vector<double> *accumulate_into = nullptr);

// The math reference with the pool's rounding of activations emulated in double: each token's input and each
// intermediate row quantized to int8 per row (integer formats) or rounded to bf16 (bf16 formats), as kernels.h
// states. The pool must match this to fp32 accuracy; the distance to reference() is the error of the formats.
std::vector<double> emulated_reference(const ExpertWeights &w, const std::vector<float> &x, const Routing &r,
                                       const uint8_t *mask, bool bf16_activations, float swiglu_limit = 0.0f,
                                       float swiglu_alpha = 0.0f);

// How close the pool must come to emulated_reference: fp32 accumulation, plus the rare int8 code of an
// intermediate that flips because its fp32 value lies on the other side of a rounding boundary than the double
// one (each flip moves a result by one quantization step times a weight). Observed up to 1.2e-4.
constexpr double kEmulatedBound = 5e-4;

// ||y - ref||_2 / ||ref||_2
double normalized_error(const std::vector<float> &y, const std::vector<double> &ref);

kt_expert_pool *make_pool(const ExpertWeights &w, int32_t format, int32_t int4_group, int64_t max_tokens,
                          int32_t max_top_k, int32_t numa_policy = KT_NUMA_AUTO, int32_t n_threads = 0,
                          float swiglu_limit = 0.0f, float swiglu_alpha = 0.0f);

std::vector<float> run_forward(kt_expert_pool *pool, const std::vector<float> &x, const Routing &r);

// Loads all of w's experts, as stored, into an internal pool (the tests that reach below kt.h), REQUIREing success.
void load_experts(moe::ExpertPool *pool, const ExpertWeights &w);

}  // namespace kt::test
