// kt-engine-bench: aggregate decode speed of the batched engine (kt_engine_*) with 1, 8, 32, 64, 100 ... sequences
// decoding at once, next to one kt_context's decode on the same file, with the roofline measured in the same run.
//
//   kt-engine-bench -m MODEL [--streams 1,8,32,64,100] [-p 32] [-n 64] [-t THREADS] [--temp 0.8] [-r 3] [-o md|csv]
//
// The stream counts (and the kt_context reference) run in -r rounds, one after another in each round, and each
// is reported by its median round: on a shared machine the load drifts, and this spreads the drift over all.
// For each stream count N: a fresh engine admitting N sequences; N prompts of -p random tokens (a different seed
// each, so no prefix is shared) submitted at once, each generating -n tokens with the sampler at --temp (top-k 40,
// top-p 0.95, its own seed), so that the sequences' tokens, and with them the experts they route to, differ as real
// users' do. The engine's notify callback stamps every token as the scheduler publishes it. Reported:
//   TTFT       submit to first token, median and 95th percentile over the N sequences;
//   decode     tokens published while all N were decoding (after the last first token, up to the first finish),
//              divided by that window: the aggregate rate; per stream = aggregate / N;
//   vs 1       aggregate / the engine's own 1-stream rate of this run; vs ctx: / kt_context's decode rate.
// The single-sequence reference is kt_context_generate with the same prompt length and sampler (what kt-run
// does), its rate n_decode_tokens / decode_seconds from kt_context_perf.
//
// Bound (bandwidth only): a step of N decode tokens reads every non-expert weight once, the routed experts that
// at least one token chose (with uniform routing, a share 1 - (1 - k/X)^N of the expert tensors) and each
// sequence's KV cache; N x read bandwidth / those bytes. Compute is not in it, so at large N it is loose.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/cli.h"
#include "kt.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    std::string model;
    std::vector<int64_t> streams = {1, 8, 32, 64, 100};
    int64_t n_prompt = 32, n_gen = 64;
    int32_t threads = 0;
    float temperature = 0.8f;
    int64_t roofline_mib = 1024;
    int64_t rounds = 3;
    std::string output = "md";
};

int usage(const char *message = nullptr) {
    if (message) std::fprintf(stderr, "kt-engine-bench: %s\n\n", message);
    std::fprintf(stderr,
                 "usage: kt-engine-bench -m MODEL [options]\n"
                 "  --streams LIST       sequences decoding at once, comma-separated (default 1,8,32,64,100)\n"
                 "  -p N                 prompt tokens per sequence (default 32)\n"
                 "  -n N                 tokens generated per sequence (default 64)\n"
                 "  -t N                 threads (default 0: one per physical core)\n"
                 "  --temp F             sampling temperature (default 0.8; 0: greedy)\n"
                 "  -r N                 rounds of every stream count, reported by the median (default 3)\n"
                 "  --roofline-mib N     bandwidth buffer in MiB (default 1024); 0 skips the roofline\n"
                 "  -o md|csv            output (default md)\n");
    return 2;
}

// Bytes a decode step reads from the weights as the kernels hold them (kt_packed_matrix_bytes): the non-expert
// tensors in full, the expert tensors by share.
struct WeightBytes {
    double dense = 0, experts = 0;
    int64_t n_expert = 0, n_used = 0;
};

WeightBytes weight_bytes(kt_model *model) {
    WeightBytes w;
    const std::string arch = kt_model_architecture(model);
    kt_model_meta_get_int(model, (arch + ".expert_count").c_str(), &w.n_expert);
    kt_model_meta_get_int(model, (arch + ".expert_used_count").c_str(), &w.n_used);
    for (int64_t i = 0; i < kt_model_tensor_count(model); ++i) {
        kt_tensor_info t;
        t.struct_size = sizeof t;
        if (kt_model_tensor_info(model, i, &t) != KT_STATUS_OK) continue;
        const std::string name = t.name;
        if (name == "token_embd.weight") continue;  // one row per token
        (name.find("_exps.") != std::string::npos ? w.experts : w.dense) += kt_cli::packed_tensor_bytes(t);
    }
    return w;
}

std::vector<int32_t> random_prompt(int64_t n, int64_t n_vocab, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t &t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
    return p;
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(std::min<double>(q * static_cast<double>(v.size() - 1) + 0.5, static_cast<double>(v.size() - 1)))];
}

kt_sampler_params sampler_for(const Options &o, uint64_t seed) {
    kt_sampler_params sp;
    kt_sampler_params_init(&sp);
    sp.temperature = o.temperature;
    sp.seed = seed;
    return sp;
}

// One kt_context, as kt-run decodes: its decode rate.
double context_decode_rate(kt_model *model, const Options &o, int64_t n_vocab) {
    kt_context_params cp;
    kt_context_params_init(&cp);
    cp.n_threads = o.threads;
    cp.n_ctx = o.n_prompt + o.n_gen + 16;
    kt_context *ctx = nullptr;
    if (kt_context_create(model, &cp, &ctx, nullptr) != KT_STATUS_OK) return 0;
    const std::vector<int32_t> prompt = random_prompt(o.n_prompt, n_vocab, 7);
    const kt_sampler_params sp = sampler_for(o, 7);
    kt_generate_params gp;
    kt_generate_params_init(&gp);
    gp.max_tokens = o.n_gen;
    gp.sampler = &sp;
    kt_context_perf_reset(ctx);
    kt_context_generate(ctx, prompt.data(), o.n_prompt, &gp, nullptr, 0, nullptr, nullptr);
    kt_perf perf;
    perf.struct_size = sizeof perf;
    kt_context_perf(ctx, &perf);
    kt_context_free(ctx);
    return perf.decode_seconds > 0 ? static_cast<double>(perf.n_decode_tokens) / perf.decode_seconds : 0;
}

struct Stream {
    std::mutex mutex;
    std::vector<Clock::time_point> arrivals;
    std::atomic<bool> finished{false};
};

struct Streams {
    std::vector<Stream> each;
    std::atomic<int64_t> n_finished{0};
    explicit Streams(size_t n) : each(n) {}
};

struct NotifyArg {
    Streams *all;
    size_t index;
};

// On the scheduler thread: take the new tokens and stamp them.
void on_tokens(kt_sequence *seq, void *user_data) {
    const NotifyArg *arg = static_cast<const NotifyArg *>(user_data);
    Stream &s = arg->all->each[arg->index];
    int32_t buf[64];
    int64_t n = 0;
    int32_t finish = KT_FINISH_NONE;
    kt_sequence_read(seq, buf, 64, 0, &n, &finish);
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(s.mutex);
    for (int64_t i = 0; i < n; ++i) s.arrivals.push_back(now);
    if (finish != KT_FINISH_NONE && !s.finished.exchange(true)) ++arg->all->n_finished;
}

struct Result {
    int64_t streams = 0;
    double ttft_p50 = 0, ttft_p95 = 0, aggregate = 0, bound = 0, seconds = 0;
    int64_t steps = 0, preemptions = 0, generated = 0;
    double load_before = -1, load_after = -1;
};

bool run_streams(kt_model *model, const Options &o, int64_t n, int64_t n_vocab, const WeightBytes &w,
                 double read_bytes_per_s, Result *r) {
    kt_engine_params ep;
    kt_engine_params_init(&ep);
    ep.n_threads = o.threads;
    ep.max_sequences = static_cast<int32_t>(n);
    ep.max_queued = static_cast<int32_t>(n);
    ep.n_ctx = o.n_prompt + o.n_gen + 16;
    ep.max_step_tokens = std::max<int64_t>(512, n);
    kt_engine *engine = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    if (kt_engine_create(model, &ep, &engine, &err) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-engine-bench: %s\n", err.message);
        return false;
    }
    r->streams = n;
    r->load_before = kt_cli::load_average();
    Streams all(static_cast<size_t>(n));
    std::vector<NotifyArg> args(static_cast<size_t>(n));
    std::vector<kt_sequence *> seqs(static_cast<size_t>(n), nullptr);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<kt_sampler_params> samplers;
    for (int64_t i = 0; i < n; ++i) {
        prompts.push_back(random_prompt(o.n_prompt, n_vocab, 1000 + static_cast<uint64_t>(i)));
        samplers.push_back(sampler_for(o, 1000 + static_cast<uint64_t>(i)));
    }
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
        args[i] = {&all, static_cast<size_t>(i)};
        kt_sequence_params sp;
        kt_sequence_params_init(&sp);
        sp.prompt = prompts[i].data();
        sp.n_prompt = o.n_prompt;
        sp.max_tokens = o.n_gen;
        sp.sampler = &samplers[i];
        sp.notify = on_tokens;
        sp.notify_user_data = &args[i];
        if (kt_engine_submit(engine, &sp, &seqs[i], &err) != KT_STATUS_OK) {
            std::fprintf(stderr, "kt-engine-bench: submit: %s\n", err.message);
            for (kt_sequence *s : seqs) kt_sequence_free(s);
            kt_engine_free(engine);
            return false;
        }
    }
    while (all.n_finished.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const Clock::time_point end = Clock::now();
    r->load_after = kt_cli::load_average();
    kt_engine_stats st;
    st.struct_size = sizeof st;
    kt_engine_get_stats(engine, &st);
    for (kt_sequence *s : seqs) kt_sequence_free(s);
    kt_engine_free(engine);

    std::vector<double> ttft;
    Clock::time_point last_first = start, first_end = end;
    for (Stream &s : all.each) {
        if (s.arrivals.empty()) return false;
        ttft.push_back(std::chrono::duration<double>(s.arrivals.front() - start).count());
        last_first = std::max(last_first, s.arrivals.front());
        first_end = std::min(first_end, s.arrivals.back());
    }
    int64_t in_window = 0;
    for (Stream &s : all.each)
        for (const Clock::time_point &t : s.arrivals) in_window += t > last_first && t <= first_end;
    const double window = std::chrono::duration<double>(first_end - last_first).count();
    r->ttft_p50 = percentile(ttft, 0.5);
    r->ttft_p95 = percentile(ttft, 0.95);
    r->aggregate = window > 0 ? static_cast<double>(in_window) / window : 0;
    r->seconds = std::chrono::duration<double>(end - start).count();
    r->steps = st.n_steps;
    r->preemptions = st.n_preemptions;
    r->generated = st.n_generated_tokens;
    if (read_bytes_per_s > 0 && w.n_expert > 0) {
        const double share = 1.0 - std::pow(1.0 - static_cast<double>(w.n_used) / static_cast<double>(w.n_expert),
                                            static_cast<double>(n));
        const double kv_per_position = static_cast<double>(st.kv_bytes) /
                                       static_cast<double>(st.kv_blocks_total * st.kv_block_tokens);
        const double depth = static_cast<double>(o.n_prompt) + static_cast<double>(o.n_gen) / 2;
        const double bytes = w.dense + w.experts * share + static_cast<double>(n) * depth * kv_per_position;
        r->bound = static_cast<double>(n) * read_bytes_per_s / bytes;
    }
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) return usage(("missing value for " + a).c_str());
        const char *v = argv[++i];
        int64_t x = 0;
        if (a == "-m" || a == "--model") o.model = v;
        else if (a == "--streams") { if (!kt_cli::parse_int_list(v, &o.streams)) return usage("bad --streams"); }
        else if (a == "-p") { if (!kt_cli::parse_int(v, &o.n_prompt) || o.n_prompt < 1) return usage("bad -p"); }
        else if (a == "-n") { if (!kt_cli::parse_int(v, &o.n_gen) || o.n_gen < 2) return usage("bad -n"); }
        else if (a == "-t") { if (!kt_cli::parse_int(v, &x) || x < 0) return usage("bad -t"); o.threads = static_cast<int32_t>(x); }
        else if (a == "-r") { if (!kt_cli::parse_int(v, &o.rounds) || o.rounds < 1) return usage("bad -r"); }
        else if (a == "--temp") { if (!kt_cli::parse_float(v, &o.temperature)) return usage("bad --temp"); }
        else if (a == "--roofline-mib") { if (!kt_cli::parse_int(v, &o.roofline_mib) || o.roofline_mib < 0) return usage("bad --roofline-mib"); }
        else if (a == "-o") { o.output = v; if (o.output != "md" && o.output != "csv") return usage("-o wants md or csv"); }
        else return usage(("unknown flag " + a).c_str());
    }
    if (o.model.empty()) return usage("-m is required");
    for (int64_t n : o.streams)
        if (n < 1 || n > 4096) return usage("--streams wants 1 .. 4096");

    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    if (kt_model_load(o.model.c_str(), nullptr, &model, &err) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-engine-bench: %s\n", err.message);
        return 1;
    }
    int64_t n_vocab = 0;
    for (int64_t i = 0; i < kt_model_tensor_count(model); ++i) {
        kt_tensor_info t;
        t.struct_size = sizeof t;
        if (kt_model_tensor_info(model, i, &t) == KT_STATUS_OK && std::string(t.name) == "token_embd.weight") n_vocab = t.ne[1];
    }
    if (n_vocab <= 0) {
        std::fprintf(stderr, "kt-engine-bench: %s has no token_embd.weight\n", o.model.c_str());
        kt_model_free(model);
        return 1;
    }
    const WeightBytes w = weight_bytes(model);

    // The single-sequence reference (its first call also prepares the weights for every later engine).
    context_decode_rate(model, o, n_vocab);  // warm-up
    const double ctx_load_before = kt_cli::load_average();
    kt_roofline roof{};
    roof.struct_size = sizeof roof;
    const bool have_roofline = o.roofline_mib > 0 &&
                               kt_measure_roofline(o.threads, static_cast<uint64_t>(o.roofline_mib) << 20, &roof) == KT_STATUS_OK;

    // Rounds of every stream count (and the context) in turn, so that a change in the machine's load spreads over
    // all of them; each is reported by its median round.
    std::vector<double> ctx_rates;
    std::vector<std::vector<Result>> rounds(o.streams.size());
    for (int64_t round = 0; round < o.rounds; ++round) {
        ctx_rates.push_back(context_decode_rate(model, o, n_vocab));
        for (size_t i = 0; i < o.streams.size(); ++i) {
            Result r;
            if (!run_streams(model, o, o.streams[i], n_vocab, w, have_roofline ? roof.read_bytes_per_s : 0, &r)) {
                kt_model_free(model);
                return 1;
            }
            rounds[i].push_back(r);
        }
    }
    const double ctx_load_after = kt_cli::load_average();
    const double ctx_rate = percentile(ctx_rates, 0.5);
    std::vector<Result> results;
    for (std::vector<Result> &runs : rounds) {
        std::sort(runs.begin(), runs.end(), [](const Result &a, const Result &b) { return a.aggregate < b.aggregate; });
        results.push_back(runs[runs.size() / 2]);
    }
    double one = 0;
    for (const Result &r : results)
        if (r.streams == 1) one = r.aggregate;

    if (o.output == "csv") {
        std::printf("build_info,model,threads,n_prompt,n_gen,temperature,read_bytes_per_s,int8_ops_per_s,context_decode_ts,"
                    "streams,ttft_p50_s,ttft_p95_s,aggregate_decode_ts,per_stream_ts,vs_one_stream,vs_context,bound_ts,"
                    "steps,generated,preemptions,seconds,load_before,load_after\n");
        for (const Result &r : results)
            std::printf("\"%s\",\"%s\",%d,%lld,%lld,%.2f,%.4g,%.4g,%.2f,%lld,%.3f,%.3f,%.2f,%.2f,%.2f,%.2f,%.1f,%lld,%lld,%lld,%.2f,%.2f,%.2f\n",
                        kt_build_info(), o.model.c_str(), roof.n_threads, static_cast<long long>(o.n_prompt),
                        static_cast<long long>(o.n_gen), static_cast<double>(o.temperature), roof.read_bytes_per_s,
                        roof.int8_ops_per_s, ctx_rate, static_cast<long long>(r.streams), r.ttft_p50, r.ttft_p95,
                        r.aggregate, r.aggregate / static_cast<double>(r.streams), one > 0 ? r.aggregate / one : 0,
                        ctx_rate > 0 ? r.aggregate / ctx_rate : 0, r.bound, static_cast<long long>(r.steps),
                        static_cast<long long>(r.generated), static_cast<long long>(r.preemptions), r.seconds,
                        r.load_before, r.load_after);
    } else {
        std::printf("%s\n%s: prompts of %lld random tokens, %lld generated per sequence, temperature %.2f\n",
                    kt_build_info(), o.model.c_str(), static_cast<long long>(o.n_prompt),
                    static_cast<long long>(o.n_gen), static_cast<double>(o.temperature));
        if (have_roofline)
            std::printf("roofline with %d threads: read %.1f GB/s (%lld MiB buffer), int8 dot %.0f GOP/s (%s)\n",
                        roof.n_threads, roof.read_bytes_per_s / 1e9, static_cast<long long>(o.roofline_mib),
                        roof.int8_ops_per_s / 1e9, roof.int8_isa);
        std::printf("kt_context (one sequence, as kt-run): decode %.2f tok/s (median of %zu rounds); load average %.2f -> "
                    "%.2f over the whole run\n",
                    ctx_rate, ctx_rates.size(), ctx_load_before, ctx_load_after);
        std::printf("decode tok/s (all streams) by round:");
        for (size_t i = 0; i < rounds.size(); ++i) {
            std::printf(" %lld:", static_cast<long long>(o.streams[i]));
            for (const Result &r : rounds[i]) std::printf(" %.1f", r.aggregate);
        }
        std::printf("; kt_context:");
        for (double c : ctx_rates) std::printf(" %.1f", c);
        std::printf("\n\n");
        std::printf("| streams | TTFT p50 s | TTFT p95 s | decode tok/s (all) | per stream | vs 1 stream | vs kt_context | "
                    "bound tok/s | steps | preempted | load before -> after |\n");
        std::printf("| ------: | ---------: | ---------: | -----------------: | ---------: | ----------: | ------------: | "
                    "----------: | ----: | --------: | ------------------: |\n");
        for (const Result &r : results)
            std::printf("| %7lld | %10.3f | %10.3f | %18.2f | %10.2f | %10.2fx | %12.2fx | %11.1f | %5lld | %9lld | %9.2f -> %5.2f |\n",
                        static_cast<long long>(r.streams), r.ttft_p50, r.ttft_p95, r.aggregate,
                        r.aggregate / static_cast<double>(r.streams), one > 0 ? r.aggregate / one : 0,
                        ctx_rate > 0 ? r.aggregate / ctx_rate : 0, r.bound, static_cast<long long>(r.steps),
                        static_cast<long long>(r.preemptions), r.load_before, r.load_after);
    }
    kt_model_free(model);
    return 0;
}
