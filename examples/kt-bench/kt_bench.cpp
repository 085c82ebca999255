// kt-bench: prompt processing (ppN) and token generation (tgN) speed, laid out like llama-bench so that the
// two tables can be read side by side, with the machine's roofline measured in the same run.
//
//   kt-bench -m MODEL [-p 512] [-n 128] [-pg 512,128] [-r 5] [-t THREADS] [-ub 512] [-ctk f16] [-o md|csv|json]
//
// Each test (as llama-bench, reference/gguf-and-quants.md §8): warm-up first (a full ppN run, or one tg token),
// then -r repetitions, each on an empty KV cache: ppN decodes N random tokens in steps of -ub and keeps the last
// logits; tgN decodes N random tokens one at a time. The result is the mean ± sample standard deviation of the
// repetitions' tokens/s.
//
// Roofline (measured just before each test, with the same threads): memory read bandwidth and the int8
// dot-product peak (kt_measure_roofline); the 1-minute load average before and after each test is printed too. tgN's bound is bandwidth ÷ bytes read per token (every weight of
// the attention blocks, router, dense and shared FFNs and the output head, the routed experts' share k/X of the
// expert tensors, one embedding row, and the KV cache at the test's mean depth); ppN's bound is int8 peak ÷ 2 ×
// multiply-adds per token through the attention projections, router, dense/shared FFNs and the k routed experts
// (the head runs once per batch and is not counted). Each result is also given as a fraction of its bound.
// A second table splits the time by part of the layer (kt_context_perf).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "kt.h"

namespace {

using Clock = std::chrono::steady_clock;

int usage(const char *message = nullptr) {
    if (message) std::fprintf(stderr, "kt-bench: %s\n\n", message);
    std::fprintf(stderr,
                 "usage: kt-bench -m MODEL [options]\n"
                 "  -m, --model FILE        GGUF model (repeatable)\n"
                 "  -p, --n-prompt LIST     prompt lengths, comma-separated (default 512; 0 to skip)\n"
                 "  -n, --n-gen LIST        generation lengths (default 128; 0 to skip)\n"
                 "  -pg PP,TG               prompt then generation, timed together\n"
                 "  -r, --repetitions N     repetitions per test (default 5)\n"
                 "  -t, --threads LIST      thread counts (default 0: one per physical core)\n"
                 "  -ub, --ubatch-size N    prefill tokens per forward step (default 512; -b is accepted too)\n"
                 "  -ctk, --cache-type-k T  KV cache type: f16 (default), bf16, f32, q8_0 (-ctv is accepted, same value)\n"
                 "      --kernels K         auto (default) or reference\n"
                 "      --roofline-mib N    bandwidth buffer in MiB (default 1024); 0 skips the roofline\n"
                 "  -o, --output FMT        md (default), csv or json\n");
    return 2;
}

bool parse_list(const char *text, std::vector<int64_t> *out) {
    out->clear();
    std::string s = text;
    size_t at = 0;
    while (at <= s.size()) {
        const size_t comma = s.find(',', at);
        const std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        char *end = nullptr;
        errno = 0;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (errno || end == item.c_str() || *end || v < 0) return false;
        out->push_back(v);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return !out->empty();
}

struct Test {
    int64_t n_prompt = 0, n_gen = 0;
    std::string name() const {
        if (n_prompt > 0 && n_gen > 0) return "pp" + std::to_string(n_prompt) + "+tg" + std::to_string(n_gen);
        return n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
    }
};

// What the model file says about itself, for the table and the roofline bounds.
struct ModelInfo {
    std::string path, desc;
    uint64_t bytes = 0, params = 0;
    int64_t n_vocab = 0, n_layer = 0, n_head_kv = 0, head_dim_k = 0, head_dim_v = 0;
    double bytes_per_token = 0;  // weights read by one decode step (KV cache excluded)
    double macs_per_token = 0;   // multiply-adds per prefill token through projections, router and experts
    int32_t bos = -1;
};

const char *ftype_name(int64_t ftype) {
    switch (ftype) {
        case 0: return "all F32";
        case 1: return "F16";
        case 2: return "Q4_0";
        case 3: return "Q4_1";
        case 7: return "Q8_0";
        case 8: return "Q5_0";
        case 9: return "Q5_1";
        case 10: return "Q2_K - Medium";
        case 11: return "Q3_K - Small";
        case 12: return "Q3_K - Medium";
        case 13: return "Q3_K - Large";
        case 14: return "Q4_K - Small";
        case 15: return "Q4_K - Medium";
        case 16: return "Q5_K - Small";
        case 17: return "Q5_K - Medium";
        case 18: return "Q6_K";
        case 25: return "IQ4_NL - 4.5 bpw";
        case 30: return "IQ4_XS - 4.25 bpw";
        case 32: return "BF16";
        default: return "?";
    }
}

bool ends_with(const std::string &s, const char *suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool contains(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

ModelInfo describe(kt_model *model, const std::string &path) {
    ModelInfo m;
    m.path = path;
    const std::string arch = kt_model_architecture(model);
    auto meta_int = [&](const std::string &key, int64_t fallback) {
        int64_t v = fallback;
        return kt_model_meta_get_int(model, key.c_str(), &v) == KT_STATUS_OK ? v : fallback;
    };
    const int64_t n_embd = meta_int(arch + ".embedding_length", 0);
    const int64_t n_head = meta_int(arch + ".attention.head_count", 1);
    const int64_t n_expert = meta_int(arch + ".expert_count", 0);
    const int64_t n_used = meta_int(arch + ".expert_used_count", 0);
    m.n_layer = meta_int(arch + ".block_count", 0);
    m.n_head_kv = meta_int(arch + ".attention.head_count_kv", n_head);
    m.head_dim_k = meta_int(arch + ".attention.key_length", n_head ? n_embd / n_head : 0);
    m.head_dim_v = meta_int(arch + ".attention.value_length", n_head ? n_embd / n_head : 0);
    m.desc = arch + " ?B " + ftype_name(meta_int("general.file_type", -1));
    if (meta_int("tokenizer.ggml.add_bos_token", 0) != 0) m.bos = static_cast<int32_t>(meta_int("tokenizer.ggml.bos_token_id", -1));

    bool has_output = false;
    const int64_t count = kt_model_tensor_count(model);
    for (int64_t i = 0; i < count; ++i) {
        kt_tensor_info t;
        t.struct_size = sizeof t;
        if (kt_model_tensor_info(model, i, &t) != KT_STATUS_OK) continue;
        const std::string name = t.name;
        m.bytes += t.n_bytes;
        m.params += t.n_elements;
        if (name == "output.weight") has_output = true;
        if (name == "token_embd.weight") {
            m.n_vocab = t.ne[1];
            m.bytes_per_token += static_cast<double>(t.n_bytes) / static_cast<double>(t.ne[1]);  // one row
            continue;
        }
        const bool experts = contains(name, "_exps.");
        const double share = experts && n_expert > 0 ? static_cast<double>(n_used) / static_cast<double>(n_expert) : 1.0;
        m.bytes_per_token += static_cast<double>(t.n_bytes) * share;
        const bool matrix = t.n_dims >= 2 && ends_with(name, ".weight");
        const bool counted = contains(name, "attn_q") || contains(name, "attn_k") || contains(name, "attn_v") ||
                             contains(name, "attn_output") || contains(name, "ffn_");
        if (matrix && counted && name.rfind("blk.", 0) == 0) m.macs_per_token += static_cast<double>(t.n_elements) * share;
    }
    if (!has_output) {  // tied head: the embedding is read in full by the output projection
        for (int64_t i = 0; i < count; ++i) {
            kt_tensor_info t;
            t.struct_size = sizeof t;
            if (kt_model_tensor_info(model, i, &t) == KT_STATUS_OK && std::string(t.name) == "token_embd.weight")
                m.bytes_per_token += static_cast<double>(t.n_bytes);
        }
    }
    return m;
}

struct Result {
    ModelInfo model;
    int threads = 0;
    int64_t n_batch = 0;
    std::string type_k;
    Test test;
    std::vector<double> seconds;  // per repetition
    kt_perf perf{};                // summed over the repetitions
    kt_roofline roofline{};       // measured just before this test
    double bound_ts = 0;          // roofline tokens/s for this test (0: not measured)
    double load_before = -1, load_after = -1;  // 1-minute load average (/proc/loadavg), -1 when unknown

    std::vector<double> ts() const {
        std::vector<double> v;
        for (double s : seconds) v.push_back(static_cast<double>(test.n_prompt + test.n_gen) / s);
        return v;
    }
    static double mean(const std::vector<double> &v) {
        double s = 0;
        for (double x : v) s += x;
        return v.empty() ? 0 : s / static_cast<double>(v.size());
    }
    static double stdev(const std::vector<double> &v) {
        if (v.size() < 2) return 0;
        const double m = mean(v);
        double s = 0;
        for (double x : v) s += (x - m) * (x - m);
        return std::sqrt(s / static_cast<double>(v.size() - 1));
    }
    double phase_total() const {
        return perf.attention_seconds + perf.experts_seconds + perf.dense_ffn_seconds + perf.head_seconds + perf.other_seconds;
    }
    double pct(double part) const { return phase_total() > 0 ? 100.0 * part / phase_total() : 0.0; }
};

std::string size_text(uint64_t bytes) {
    char buf[32];
    if (bytes >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
    else std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
    return buf;
}

std::string params_text(uint64_t params) {
    char buf[32];
    if (params >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(params) / 1e9);
    else std::snprintf(buf, sizeof buf, "%.2f M", static_cast<double>(params) / 1e6);
    return buf;
}

// ---- the run --------------------------------------------------------------------------------------------------

struct Options {
    std::vector<std::string> models;
    std::vector<int64_t> n_prompt = {512}, n_gen = {128}, threads = {0};
    std::vector<std::pair<int64_t, int64_t>> pg;
    int64_t repetitions = 5, n_batch = 512, roofline_mib = 1024;
    int32_t kv_type = KT_TYPE_F16, kernels = KT_KERNELS_AUTO;
    std::string output = "md";
};

// The machine's 1-minute load average, to be stated next to every number taken on a shared machine.
double load_average() {
    FILE *f = std::fopen("/proc/loadavg", "r");
    double load = -1;
    if (f) {
        if (std::fscanf(f, "%lf", &load) != 1) load = -1;
        std::fclose(f);
    }
    return load;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t n_vocab, int32_t bos, std::mt19937_64 &rng) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t &x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
    if (bos >= 0 && n > 0) t[0] = bos;
    return t;
}

bool check(kt_status s, kt_context *ctx, const char *what) {
    if (s == KT_STATUS_OK) return true;
    std::fprintf(stderr, "kt-bench: %s: %s\n", what, ctx ? kt_context_last_error(ctx) : kt_status_string(s));
    return false;
}

// One repetition: returns the seconds it took, or < 0 on error.
double run_once(kt_context *ctx, const Test &test, const ModelInfo &m, std::mt19937_64 &rng) {
    kt_context_reset(ctx);
    const std::vector<int32_t> prompt = random_tokens(test.n_prompt, m.n_vocab, m.bos, rng);
    const std::vector<int32_t> gen = random_tokens(test.n_gen, m.n_vocab, test.n_prompt > 0 ? -1 : m.bos, rng);
    const Clock::time_point start = Clock::now();
    if (test.n_prompt > 0 && !check(kt_context_decode(ctx, prompt.data(), test.n_prompt, KT_LOGITS_LAST), ctx, "decode"))
        return -1;
    for (int64_t i = 0; i < test.n_gen; ++i)
        if (!check(kt_context_decode(ctx, &gen[static_cast<size_t>(i)], 1, KT_LOGITS_LAST), ctx, "decode")) return -1;
    return std::chrono::duration<double>(Clock::now() - start).count();
}

bool run_model(const Options &o, const std::string &path, std::vector<Result> *results) {
    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    if (kt_model_load(path.c_str(), nullptr, &model, &err) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-bench: %s\n", err.message);
        return false;
    }
    const ModelInfo info = describe(model, path);
    std::vector<Test> tests;
    for (int64_t p : o.n_prompt)
        if (p > 0) tests.push_back({p, 0});
    for (int64_t n : o.n_gen)
        if (n > 0) tests.push_back({0, n});
    for (const auto &[p, n] : o.pg) tests.push_back({p, n});
    int64_t n_ctx = 1;
    for (const Test &t : tests) n_ctx = std::max(n_ctx, t.n_prompt + t.n_gen);

    bool ok = true;
    for (size_t ti = 0; ti < o.threads.size() && ok; ++ti) {
        const int64_t threads = o.threads[ti];
        // The engine's expert pools take the thread count of the model's first context: a fresh load per count.
        if (ti > 0) {
            kt_model_free(model);
            model = nullptr;
            if (kt_model_load(path.c_str(), nullptr, &model, &err) != KT_STATUS_OK) {
                std::fprintf(stderr, "kt-bench: %s\n", err.message);
                return false;
            }
        }
        kt_context_params cp;
        kt_context_params_init(&cp);
        cp.n_threads = static_cast<int32_t>(threads);
        cp.n_ctx = n_ctx;
        cp.n_batch = o.n_batch;
        cp.kv_type = o.kv_type;
        cp.kernels = o.kernels;
        kt_context *ctx = nullptr;
        if (kt_context_create(model, &cp, &ctx, &err) != KT_STATUS_OK) {
            std::fprintf(stderr, "kt-bench: %s\n", err.message);
            ok = false;
            break;
        }
        std::mt19937_64 rng(1234);
        for (const Test &test : tests) {
            Result r;
            r.model = info;
            r.threads = kt_context_n_threads(ctx);
            r.n_batch = o.n_batch;
            r.type_k = o.kv_type == KT_TYPE_F16 ? "f16" : o.kv_type == KT_TYPE_BF16 ? "bf16" : o.kv_type == KT_TYPE_Q8_0 ? "q8_0" : "f32";
            r.test = test;
            r.load_before = load_average();
            // The roofline just before the test: on a shared machine the load moves, and a bound measured minutes
            // earlier would say more about the neighbours than about kt.
            r.roofline.struct_size = sizeof r.roofline;
            if (o.roofline_mib > 0) {
                const kt_status s = kt_measure_roofline(static_cast<int32_t>(threads),
                                                        static_cast<uint64_t>(o.roofline_mib) << 20, &r.roofline);
                if (s != KT_STATUS_OK) std::fprintf(stderr, "kt-bench: roofline: %s\n", kt_status_string(s));
            }
            const kt_roofline &roofline = r.roofline;
            // Warm-up: the whole prompt, or one generated token.
            if (run_once(ctx, test.n_prompt > 0 ? Test{test.n_prompt, 0} : Test{0, 1}, info, rng) < 0) {
                ok = false;
                break;
            }
            r.perf.struct_size = sizeof r.perf;
            for (int64_t rep = 0; rep < o.repetitions && ok; ++rep) {
                kt_context_perf_reset(ctx);
                const double s = run_once(ctx, test, info, rng);
                if (s < 0) {
                    ok = false;
                    break;
                }
                r.seconds.push_back(s);
                kt_perf p;
                p.struct_size = sizeof p;
                kt_context_perf(ctx, &p);
                r.perf.attention_seconds += p.attention_seconds;
                r.perf.experts_seconds += p.experts_seconds;
                r.perf.dense_ffn_seconds += p.dense_ffn_seconds;
                r.perf.head_seconds += p.head_seconds;
                r.perf.other_seconds += p.other_seconds;
            }
            if (!ok) break;
            // The bound for this test: time per token at the roofline, summed over its prompt and generation.
            if (roofline.read_bytes_per_s > 0 && roofline.int8_ops_per_s > 0) {
                const double kv_bytes_per_pos = static_cast<double>(info.n_layer * info.n_head_kv * (info.head_dim_k + info.head_dim_v)) *
                                                static_cast<double>(kt_type_block_bytes(o.kv_type)) / static_cast<double>(kt_type_block_size(o.kv_type));
                const double mean_depth = static_cast<double>(test.n_prompt) + static_cast<double>(test.n_gen) / 2.0;
                const double gen_s = static_cast<double>(test.n_gen) * (info.bytes_per_token + kv_bytes_per_pos * mean_depth) / roofline.read_bytes_per_s;
                const double pp_s = static_cast<double>(test.n_prompt) * 2.0 * info.macs_per_token / roofline.int8_ops_per_s;
                r.bound_ts = static_cast<double>(test.n_prompt + test.n_gen) / (gen_s + pp_s);
            }
            r.load_after = load_average();
            std::fprintf(stderr, "kt-bench: %s %s t=%d: %.2f t/s\n", info.desc.c_str(), test.name().c_str(), r.threads,
                         Result::mean(r.ts()));
            results->push_back(r);
        }
        kt_context_free(ctx);
        if (!ok) break;
    }
    kt_model_free(model);
    return ok;
}

// ---- output ---------------------------------------------------------------------------------------------------

void print_markdown(const std::vector<Result> &results) {
    if (results.empty()) return;
    std::printf("%s\n\n", kt_build_info());
    for (size_t i = 0; i < results.size(); ++i) {
        const Result &r = results[i];
        if (i == 0 || r.model.path != results[i - 1].model.path)
            std::printf("%s: %.4g MB read per generated token (+ KV cache), %.4g GOP per prompt token\n",
                        r.model.path.c_str(), r.model.bytes_per_token / 1e6, 2.0 * r.model.macs_per_token / 1e9);
        if (r.roofline.n_threads > 0)
            std::printf("  %-13s roofline with %d threads: read %.1f GB/s (%.0f MiB buffer), int8 dot %.0f GOP/s (%s); "
                        "load average %.2f -> %.2f\n",
                        r.test.name().c_str(), r.threads, r.roofline.read_bytes_per_s / 1e9,
                        static_cast<double>(r.roofline.buffer_bytes) / (1 << 20), r.roofline.int8_ops_per_s / 1e9,
                        r.roofline.int8_isa, r.load_before, r.load_after);
    }
    std::printf("\n| %-30s | %10s | %10s | %-10s | %7s | %13s | %20s | %13s | %11s |\n", "model", "size", "params",
                "backend", "threads", "test", "t/s", "roofline t/s", "of roofline");
    std::printf("| %s | %s: | %s: | %s | %s: | %s: | %s: | %s: | %s: |\n", std::string(30, '-').c_str(),
                std::string(9, '-').c_str(), std::string(9, '-').c_str(), std::string(10, '-').c_str(),
                std::string(6, '-').c_str(), std::string(12, '-').c_str(), std::string(19, '-').c_str(),
                std::string(12, '-').c_str(), std::string(10, '-').c_str());
    for (const Result &r : results) {
        char ts[64], bound[32], frac[32];
        std::snprintf(ts, sizeof ts, "%.2f ± %.2f", Result::mean(r.ts()), Result::stdev(r.ts()));
        std::snprintf(bound, sizeof bound, r.bound_ts > 0 ? "%.2f" : "-", r.bound_ts);
        std::snprintf(frac, sizeof frac, r.bound_ts > 0 ? "%.1f %%" : "-", 100.0 * Result::mean(r.ts()) / r.bound_ts);
        // "±" is two bytes: pad by display width, not bytes.
        std::printf("| %-30s | %10s | %10s | %-10s | %7d | %13s | %21s | %13s | %11s |\n", r.model.desc.c_str(),
                    size_text(r.model.bytes).c_str(), params_text(r.model.params).c_str(), "CPU", r.threads,
                    r.test.name().c_str(), ts, bound, frac);
    }
    std::printf("\ntime by part of the layer (all repetitions):\n\n");
    std::printf("| %-13s | %7s | %9s | %7s | %9s | %7s | %7s |\n", "test", "threads", "attention", "experts", "dense ffn",
                "head", "other");
    std::printf("| ------------- | ------: | --------: | ------: | --------: | ------: | ------: |\n");
    for (const Result &r : results)
        std::printf("| %-13s | %7d | %7.1f %% | %5.1f %% | %7.1f %% | %5.1f %% | %5.1f %% |\n", r.test.name().c_str(),
                    r.threads, r.pct(r.perf.attention_seconds), r.pct(r.perf.experts_seconds),
                    r.pct(r.perf.dense_ffn_seconds), r.pct(r.perf.head_seconds), r.pct(r.perf.other_seconds));
}

struct Field {
    std::string name, text;
    bool is_string;
};

// The fields of one result, in order (llama-bench's names where it has them).
std::vector<Field> fields(const Result &r) {
    auto num = [](double v) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        return std::string(buf);
    };
    const std::vector<double> ts = r.ts();
    std::vector<double> ns;
    for (double s : r.seconds) ns.push_back(s * 1e9);
    return {
        {"build_info", kt_build_info(), true},
        {"model_filename", r.model.path, true},
        {"model_type", r.model.desc, true},
        {"model_size", std::to_string(r.model.bytes), false},
        {"model_n_params", std::to_string(r.model.params), false},
        {"n_batch", std::to_string(r.n_batch), false},
        {"n_threads", std::to_string(r.threads), false},
        {"type_k", r.type_k, true},
        {"type_v", r.type_k, true},
        {"n_prompt", std::to_string(r.test.n_prompt), false},
        {"n_gen", std::to_string(r.test.n_gen), false},
        {"test", r.test.name(), true},
        {"avg_ns", num(Result::mean(ns)), false},
        {"stddev_ns", num(Result::stdev(ns)), false},
        {"avg_ts", num(Result::mean(ts)), false},
        {"stddev_ts", num(Result::stdev(ts)), false},
        {"roofline_read_bytes_per_s", num(r.roofline.read_bytes_per_s), false},
        {"roofline_int8_ops_per_s", num(r.roofline.int8_ops_per_s), false},
        {"roofline_int8_isa", r.roofline.int8_isa, true},
        {"bytes_per_token", num(r.model.bytes_per_token), false},
        {"ops_per_prompt_token", num(2.0 * r.model.macs_per_token), false},
        {"bound_ts", num(r.bound_ts), false},
        {"bound_fraction", num(r.bound_ts > 0 ? Result::mean(ts) / r.bound_ts : 0.0), false},
        {"load_before", num(r.load_before), false},
        {"load_after", num(r.load_after), false},
        {"attention_pct", num(r.pct(r.perf.attention_seconds)), false},
        {"experts_pct", num(r.pct(r.perf.experts_seconds)), false},
        {"dense_ffn_pct", num(r.pct(r.perf.dense_ffn_seconds)), false},
        {"head_pct", num(r.pct(r.perf.head_seconds)), false},
        {"other_pct", num(r.pct(r.perf.other_seconds)), false},
    };
}

void print_csv(const std::vector<Result> &results) {
    if (results.empty()) return;
    bool first = true;
    for (const Field &f : fields(results[0])) {
        std::printf("%s%s", first ? "" : ",", f.name.c_str());
        first = false;
    }
    std::printf("\n");
    for (const Result &r : results) {
        first = true;
        for (const auto &[name, text, is_string] : fields(r)) {
            std::string quoted = text;
            if (is_string) {
                quoted = "\"";
                for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
                quoted += "\"";
            }
            std::printf("%s%s", first ? "" : ",", quoted.c_str());
            first = false;
        }
        std::printf("\n");
    }
}

void print_json(const std::vector<Result> &results) {
    std::printf("[\n");
    for (size_t i = 0; i < results.size(); ++i) {
        std::printf("  {");
        bool first = true;
        for (const auto &[name, text, is_string] : fields(results[i])) {
            std::printf("%s\"%s\": %s%s%s", first ? "" : ", ", name.c_str(), is_string ? "\"" : "",
                        is_string ? kt_cli::json_escape(text).c_str() : text.c_str(), is_string ? "\"" : "");
            first = false;
        }
        std::printf("}%s\n", i + 1 < results.size() ? "," : "");
    }
    std::printf("]\n");
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return usage();
        if (i + 1 >= argc) return usage(("missing value for " + a).c_str());
        const char *v = argv[++i];
        std::vector<int64_t> list;
        if (a == "-m" || a == "--model") o.models.push_back(v);
        else if (a == "-p" || a == "--n-prompt") { if (!parse_list(v, &o.n_prompt)) return usage("bad -p"); }
        else if (a == "-n" || a == "--n-gen") { if (!parse_list(v, &o.n_gen)) return usage("bad -n"); }
        else if (a == "-t" || a == "--threads") { if (!parse_list(v, &o.threads)) return usage("bad -t"); }
        else if (a == "-pg") {
            if (!parse_list(v, &list) || list.size() != 2) return usage("-pg wants PP,TG");
            o.pg.push_back({list[0], list[1]});
        } else if (a == "-r" || a == "--repetitions" || a == "-ub" || a == "--ubatch-size" || a == "-b" ||
                   a == "--batch-size" || a == "--roofline-mib") {
            if (!parse_list(v, &list) || list.size() != 1) return usage(("bad value for " + a).c_str());
            if (a == "-r" || a == "--repetitions") o.repetitions = std::max<int64_t>(1, list[0]);
            else if (a == "--roofline-mib") o.roofline_mib = list[0];
            else if (a == "-ub" || a == "--ubatch-size") o.n_batch = std::max<int64_t>(1, list[0]);
            // -b (llama-bench's logical batch) has no separate meaning here: kt runs -ub tokens per step.
        } else if (a == "-ctk" || a == "--cache-type-k" || a == "-ctv" || a == "--cache-type-v") {
            const std::string t = v;
            o.kv_type = t == "f16" ? KT_TYPE_F16 : t == "bf16" ? KT_TYPE_BF16 : t == "f32" ? KT_TYPE_F32 : t == "q8_0" ? KT_TYPE_Q8_0 : -1;
            if (o.kv_type < 0) return usage("cache type must be f16, bf16, f32 or q8_0");
        } else if (a == "--kernels") {
            const std::string k = v;
            if (k != "auto" && k != "reference") return usage("--kernels must be auto or reference");
            o.kernels = k == "auto" ? KT_KERNELS_AUTO : KT_KERNELS_REFERENCE;
        } else if (a == "-o" || a == "--output") {
            o.output = v;
            if (o.output != "md" && o.output != "csv" && o.output != "json") return usage("-o must be md, csv or json");
        } else {
            return usage(("unknown option " + a).c_str());
        }
    }
    if (o.models.empty()) return usage("no model (-m)");

    std::vector<Result> results;
    bool ok = true;
    for (const std::string &m : o.models) ok = run_model(o, m, &results) && ok;
    if (o.output == "md") print_markdown(results);
    else if (o.output == "csv") print_csv(results);
    else print_json(results);
    return ok ? 0 : 1;
}
