// The server's counters and latency histograms, rendered in Prometheus' text exposition format (version 0.0.4)
// for GET /metrics. Thread-safe: every connection thread records into one Metrics.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "generator.h"

namespace kt_server {

// Cumulative buckets as Prometheus expects: counts[i] = observations <= bounds[i]; +Inf is the total count.
class Histogram {
public:
    explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
    void observe(double value);
    // Appends the _bucket, _sum and _count lines for `name`.
    void render(const std::string &name, std::string *out) const;

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative (summed when rendered)
    uint64_t count_ = 0;
    double sum_ = 0.0;
};

class Metrics {
public:
    Metrics();

    // One finished HTTP request: which route ("chat", "completions", "models", ...) and its status.
    void count_request(const std::string &route, int status);
    // A generation's prompt (when it ends), and its tokens as they come.
    void count_prompt(int64_t prompt_tokens, int64_t cached_tokens);
    void count_generated(int64_t tokens);
    void observe_time_to_first_token(double seconds);
    void observe_time_per_token(double seconds);  // between consecutive tokens of one stream
    void observe_request_seconds(double seconds);

    // The whole exposition, with the generator's gauges read now.
    std::string render(const GeneratorStats &stats) const;

private:
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;
    uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0;
    Histogram ttft_, time_per_token_, request_seconds_;
};

}  // namespace kt_server
