#include "metrics.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kt_server {

namespace {

// Prometheus floats: integers as integers, others in the shortest form that reads back exactly.
std::string number(double v) {
    char buf[32];
    if (v == std::floor(v) && std::fabs(v) < 1e15) {
        std::snprintf(buf, sizeof buf, "%.0f", v);
        return buf;
    }
    for (int precision = 1; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*g", precision, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
}

void header(std::string *out, const char *name, const char *type, const char *help) {
    *out += "# HELP ";
    *out += name;
    *out += ' ';
    *out += help;
    *out += "\n# TYPE ";
    *out += name;
    *out += ' ';
    *out += type;
    *out += '\n';
}

void sample(std::string *out, const char *name, double value) {
    *out += name;
    *out += ' ';
    *out += number(value);
    *out += '\n';
}

}  // namespace

void Histogram::observe(double value) {
    for (size_t i = 0; i < bounds_.size(); ++i) {
        if (value <= bounds_[i]) {
            ++counts_[i];
            break;
        }
    }
    ++count_;
    sum_ += value;
}

void Histogram::render(const std::string &name, std::string *out) const {
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += counts_[i];
        *out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
    }
    *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
    *out += name + "_sum " + number(sum_) + "\n";
    *out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}),
      time_per_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      request_seconds_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void Metrics::count_request(const std::string &route, int status) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_[{route, status}];
}

void Metrics::count_prompt(int64_t prompt_tokens, int64_t cached_tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    prompt_tokens_ += static_cast<uint64_t>(prompt_tokens);
    cached_tokens_ += static_cast<uint64_t>(cached_tokens);
}

void Metrics::count_generated(int64_t tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    generated_tokens_ += static_cast<uint64_t>(tokens);
}

void Metrics::observe_time_to_first_token(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    ttft_.observe(seconds);
}

void Metrics::observe_time_per_token(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    time_per_token_.observe(seconds);
}

void Metrics::observe_request_seconds(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    request_seconds_.observe(seconds);
}

std::string Metrics::render(const GeneratorStats &stats) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    header(&out, "kt_requests_total", "counter", "HTTP requests answered, by route and status code.");
    for (const auto &[key, count] : requests_) {
        out += "kt_requests_total{route=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"} " +
               std::to_string(count) + "\n";
    }
    header(&out, "kt_requests_running", "gauge", "Sequences being decoded now.");
    sample(&out, "kt_requests_running", static_cast<double>(stats.running));
    header(&out, "kt_requests_queued", "gauge", "Sequences waiting to be admitted.");
    sample(&out, "kt_requests_queued", static_cast<double>(stats.queued));
    header(&out, "kt_prompt_tokens_total", "counter", "Prompt tokens of ended generations.");
    sample(&out, "kt_prompt_tokens_total", static_cast<double>(prompt_tokens_));
    header(&out, "kt_prompt_tokens_cached_total", "counter", "Prompt tokens whose KV was reused from the prefix cache.");
    sample(&out, "kt_prompt_tokens_cached_total", static_cast<double>(cached_tokens_));
    header(&out, "kt_generated_tokens_total", "counter", "Tokens generated, counted as they are handed out.");
    sample(&out, "kt_generated_tokens_total", static_cast<double>(generated_tokens_));
    header(&out, "kt_time_to_first_token_seconds", "histogram", "From a request's arrival to its first token.");
    ttft_.render("kt_time_to_first_token_seconds", &out);
    header(&out, "kt_time_per_output_token_seconds", "histogram", "Between consecutive tokens of a stream.");
    time_per_token_.render("kt_time_per_output_token_seconds", &out);
    header(&out, "kt_request_duration_seconds", "histogram", "From a generation request's arrival to its end.");
    request_seconds_.render("kt_request_duration_seconds", &out);
    header(&out, "kt_kv_blocks_used", "gauge", "KV cache blocks in use.");
    sample(&out, "kt_kv_blocks_used", static_cast<double>(stats.kv_blocks_used));
    header(&out, "kt_kv_blocks_cached", "gauge", "KV cache blocks held only by the prefix cache (reusable).");
    sample(&out, "kt_kv_blocks_cached", static_cast<double>(stats.kv_blocks_cached));
    header(&out, "kt_kv_blocks_total", "gauge", "KV cache blocks in the pool.");
    sample(&out, "kt_kv_blocks_total", static_cast<double>(stats.kv_blocks_total));
    header(&out, "kt_preemptions_total", "counter", "Sequences preempted because the KV pool ran out.");
    sample(&out, "kt_preemptions_total", static_cast<double>(stats.preemptions));
    return out;
}

}  // namespace kt_server
