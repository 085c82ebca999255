#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

namespace kt::runtime {

void Sampler::seed(uint64_t seed) { rng_.seed(seed); }

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(const SamplerParams &p, const float *logits, int64_t n_vocab, const std::vector<int32_t> &history) {
    candidates_.resize(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) candidates_[i] = {static_cast<int32_t>(i), logits[i], 0.0f};

    // Penalties, over the last repeat_last_n tokens (llama.cpp's llama_sampler_penalties).
    const bool penalise = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (penalise && p.repeat_last_n != 0 && !history.empty()) {
        counts_.assign(static_cast<size_t>(n_vocab), 0);
        const size_t window = p.repeat_last_n < 0 ? history.size()
                                                  : std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
        for (size_t i = history.size() - window; i < history.size(); ++i)
            if (history[i] >= 0 && history[i] < n_vocab) ++counts_[history[i]];
        for (Candidate &c : candidates_) {
            const int32_t n = counts_[c.id];
            if (n == 0) continue;
            c.logit = c.logit <= 0.0f ? c.logit * p.repeat_penalty : c.logit / p.repeat_penalty;
            c.logit -= static_cast<float>(n) * p.frequency_penalty + p.presence_penalty;
        }
    }

    auto by_logit = [](const Candidate &a, const Candidate &b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
    if (p.temperature <= 0.0f) return std::min_element(candidates_.begin(), candidates_.end(), by_logit)->id;

    // top-k: keep the k best (sorted best first from here on).
    size_t n = candidates_.size();
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
        n = static_cast<size_t>(p.top_k);
        std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n), candidates_.end(), by_logit);
    } else {
        std::sort(candidates_.begin(), candidates_.end(), by_logit);
    }

    // Softmax of the surviving logits (before temperature, as llama.cpp's top-p and min-p see them).
    auto softmax = [&](size_t count, float temperature) {
        const float max = candidates_[0].logit / temperature;
        double sum = 0.0;
        for (size_t i = 0; i < count; ++i) sum += candidates_[i].p = std::exp(candidates_[i].logit / temperature - max);
        for (size_t i = 0; i < count; ++i) candidates_[i].p = static_cast<float>(candidates_[i].p / sum);
    };
    softmax(n, 1.0f);

    // top-p: the smallest prefix whose probability reaches top_p (at least one token).
    if (p.top_p < 1.0f) {
        double cumulative = 0.0;
        size_t keep = n;
        for (size_t i = 0; i < n; ++i) {
            cumulative += candidates_[i].p;
            if (cumulative >= p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    // min-p: drop tokens less likely than min_p times the best one.
    if (p.min_p > 0.0f) {
        const float threshold = p.min_p * candidates_[0].p;
        size_t keep = 1;
        while (keep < n && candidates_[keep].p >= threshold) ++keep;
        n = keep;
    }

    softmax(n, p.temperature);
    double r = uniform();
    for (size_t i = 0; i < n; ++i) {
        r -= candidates_[i].p;
        if (r < 0.0) return candidates_[i].id;
    }
    return candidates_[n - 1].id;  // rounding left a sliver of probability at the end
}

}  // namespace kt::runtime
