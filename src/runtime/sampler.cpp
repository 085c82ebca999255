#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

namespace kt::runtime {

void Sampler::seed(uint64_t seed) { rng_.seed(seed); }

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(const SamplerParams &p, const float *logits, int64_t n_vocab, const std::vector<int32_t> &history) {
    // Penalties, over the last repeat_last_n tokens (llama.cpp's llama_sampler_penalties). Only the window's
    // tokens are counted and, when done, reset: nothing here is proportional to the vocabulary but the passes
    // below, which a batched engine runs for every sequence of every step.
    const bool penalise = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    window_.clear();
    if (penalise && p.repeat_last_n != 0 && !history.empty()) {
        if (counts_.size() != static_cast<size_t>(n_vocab)) counts_.assign(static_cast<size_t>(n_vocab), 0);
        const size_t window = p.repeat_last_n < 0 ? history.size()
                                                  : std::min(history.size(), static_cast<size_t>(p.repeat_last_n));
        for (size_t i = history.size() - window; i < history.size(); ++i)
            if (history[i] >= 0 && history[i] < n_vocab && counts_[history[i]]++ == 0) window_.push_back(history[i]);
    }
    struct ResetCounts {
        std::vector<int32_t> &counts;
        const std::vector<int32_t> &window;
        ~ResetCounts() {
            for (int32_t id : window) counts[id] = 0;
        }
    } reset{counts_, window_};
    const bool penalised = !window_.empty();
    auto value = [&](int64_t id) {
        float l = logits[id];
        const int32_t n = penalised ? counts_[id] : 0;
        if (n == 0) return l;
        l = l <= 0.0f ? l * p.repeat_penalty : l / p.repeat_penalty;
        return l - (static_cast<float>(n) * p.frequency_penalty + p.presence_penalty);
    };
    auto by_logit = [](const Candidate &a, const Candidate &b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };

    if (p.temperature <= 0.0f) {  // argmax after penalties; ties go to the lowest id
        int64_t best = 0;
        float best_value = value(0);
        for (int64_t i = 1; i < n_vocab; ++i) {
            const float v = value(i);
            if (v > best_value) {
                best_value = v;
                best = i;
            }
        }
        return static_cast<int32_t>(best);
    }

    // top-k: keep the k best (sorted best first from here on), selected in one pass through a heap whose top is
    // the worst kept; without top-k every token is a candidate.
    size_t n = static_cast<size_t>(n_vocab);
    if (p.top_k > 0 && p.top_k < n_vocab) {
        n = static_cast<size_t>(p.top_k);
        candidates_.clear();
        for (int64_t i = 0; i < n_vocab; ++i) {
            const Candidate c{static_cast<int32_t>(i), value(i), 0.0f};
            if (candidates_.size() < n) {
                candidates_.push_back(c);
                std::push_heap(candidates_.begin(), candidates_.end(), by_logit);
            } else if (by_logit(c, candidates_.front())) {
                std::pop_heap(candidates_.begin(), candidates_.end(), by_logit);
                candidates_.back() = c;
                std::push_heap(candidates_.begin(), candidates_.end(), by_logit);
            }
        }
        std::sort_heap(candidates_.begin(), candidates_.end(), by_logit);
    } else {
        candidates_.resize(n);
        for (int64_t i = 0; i < n_vocab; ++i) candidates_[i] = {static_cast<int32_t>(i), value(i), 0.0f};
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
