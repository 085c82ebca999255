// Choosing the next token from a row of logits.
//
// The chain follows llama.cpp's default order so that the same settings mean the same thing: penalties on the
// raw logits (repetition over the last n tokens, presence, frequency), then top-k, top-p and min-p on the
// softmax of the penalised logits, then temperature, then a draw. Temperature <= 0 means greedy (argmax after
// penalties; ties go to the lowest id). Draws use a 64-bit Mersenne Twister with kt's own uniform conversion, so
// a seed gives the same tokens on every platform.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kt::runtime {

struct SamplerParams {
    float temperature = 0.0f;      // <= 0: greedy
    int32_t top_k = 0;             // <= 0: off
    float top_p = 1.0f;            // >= 1: off
    float min_p = 0.0f;            // <= 0: off
    float repeat_penalty = 1.0f;   // 1: off; > 1 discourages tokens seen in the last repeat_last_n
    int32_t repeat_last_n = 64;    // window for all three penalties; -1: the whole history
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint64_t seed = 0;
};

class Sampler {
public:
    void seed(uint64_t seed);
    // history: the tokens the context has seen, oldest first.
    int32_t sample(const SamplerParams &p, const float *logits, int64_t n_vocab, const std::vector<int32_t> &history);

private:
    double uniform();  // [0, 1) with 53 random bits

    std::mt19937_64 rng_;
    struct Candidate {
        int32_t id;
        float logit;
        float p;
    };
    std::vector<Candidate> candidates_;
    std::vector<int32_t> counts_;  // per-token occurrences in the penalty window; zero outside sample()
    std::vector<int32_t> window_;  // the distinct tokens of the window (the entries of counts_ to reset)
};

}  // namespace kt::runtime
