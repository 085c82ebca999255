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
// Roofline (measured just before and just after each test, with the same threads; the bound takes the larger of
// each figure): memory read bandwidth, the int8 and bf16 dot-product peaks of AVX-512 / AVX2 and, where AMX runs
// natively, of the AMX tiles (kt_measure_roofline); the 1-minute load average before and after each test is
// printed too. Each result is given as a fraction of the time bound of its test, summed over its prompt and its
// generation, each max(bytes / bandwidth, ops / peak):
//   bytes  tg: per token, every weight of the attention blocks, router, dense and shared FFNs and the output head,
//          the routed experts' share k/X of the expert tensors, one embedding row, and the KV cache at the test's
//          mean depth; pp: per batch of -ub tokens, the non-expert weights and the expected share of the experts
//          that batch touches, 1 - (1 - k/X)^ub, with uniform routing. Weights count as the kernels hold them:
//          packed (kt_packed_matrix_bytes: about the file's bytes for the formats kernels read as stored, more for
//          those they convert, such as the grid formats), or as the file stores them with --kernels reference
//   ops    the GEMM multiply-adds kt counted while the test ran (kt_get_gemm_counts), by the ISA whose code ran
//          them and by arithmetic, each over that ISA's measured peak: prefill that ran on AMX tiles is held
//          against the AMX peak, the rest against AVX-512's. Attention over the cache is not counted. With the
//          reference kernels nothing is counted and ppN's ops are the model's multiply-adds per token through the
//          projections, router, dense/shared FFNs and the k routed experts, over the int8 peak.
// "ran on" gives each test's share of multiply-adds per ISA and any AMX fallbacks.
// A second table splits the time by part of the layer (kt_context_perf); for generation tests a third gives each
// part's rate, the weights it reads per token over its time per token, against the measured read bandwidth.
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

#include "common/cli.h"
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
                 "  -o, --output FMT        md (default), csv or json\n"
                 "%s"
                 "                          with a device: the placement, then the CPU/device split of the runs, on stderr\n",
                 kt_cli::device_usage());
    return 2;
}

struct Test {
    int64_t n_prompt = 0, n_gen = 0;
    std::string name() const {
        if (n_prompt > 0 && n_gen > 0) return "pp" + std::to_string(n_prompt) + "+tg" + std::to_string(n_gen);
        return n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "tg" + std::to_string(n_gen);
    }
};

// The parts of a forward step that kt_context_perf times, in the order of the split tables.
enum Part : int { kAttentionPart, kExpertsPart, kDenseFfnPart, kHeadPart, kOtherPart, kParts };

// The part whose time reads tensor `name`: the blocks' attention tensors, the rest of a layer with routed experts
// (norm, router, experts, shared experts: kt_perf's experts) or without (dense ffn), the output head; the
// embedding and anything else is "other".
Part part_of(const std::string &name, const std::vector<bool> &moe_layer) {
    if (name == "output.weight" || name == "output_norm.weight") return kHeadPart;
    if (name.rfind("blk.", 0) != 0) return kOtherPart;
    if (name.find(".attn_") != std::string::npos) return kAttentionPart;
    const size_t layer = static_cast<size_t>(std::strtoull(name.c_str() + 4, nullptr, 10));
    return layer < moe_layer.size() && moe_layer[layer] ? kExpertsPart : kDenseFfnPart;
}

// Weight bytes as a set of kernels reads them.
struct WeightBytes {
    double per_token = 0;      // read by one decode step (KV cache excluded)
    double part[kParts] = {};  // per_token by the part of the layer whose time reads them
    double experts = 0;        // all routed-expert tensors
    double all = 0;            // every tensor
};

// What the model file says about itself, for the table and the roofline bounds.
struct ModelInfo {
    std::string path, desc;
    uint64_t bytes = 0, params = 0;
    int64_t n_vocab = 0;
    // As the file stores the weights (what the reference kernels read), and as the expert engine's kernels hold them
    // (KT_KERNELS_AUTO); read: the one the run's kernels read, which the bounds and rates use.
    WeightBytes file, packed, read;
    int64_t n_expert = 0, n_used = 0;
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
        case 19: return "IQ2_XXS - 2.0625 bpw";
        case 20: return "IQ2_XS - 2.3125 bpw";
        case 21: return "Q2_K - Small";
        case 22: return "IQ3_XS - 3.3 bpw";
        case 23: return "IQ3_XXS - 3.0625 bpw";
        case 24: return "IQ1_S - 1.5625 bpw";
        case 25: return "IQ4_NL - 4.5 bpw";
        case 26: return "IQ3_S - 3.4375 bpw";
        case 27: return "IQ3_S mix - 3.66 bpw";
        case 28: return "IQ2_S - 2.5 bpw";
        case 29: return "IQ2_M - 2.7 bpw";
        case 30: return "IQ4_XS - 4.25 bpw";
        case 31: return "IQ1_M - 1.75 bpw";
        case 32: return "BF16";
        case 38: return "MXFP4 MoE";
        default: return "?";
    }
}

bool ends_with(const std::string &s, const char *suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool contains(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

ModelInfo describe(kt_model *model, const std::string &path, int32_t kernels) {
    ModelInfo m;
    m.path = path;
    const std::string arch = kt_model_architecture(model);
    auto meta_int = [&](const std::string &key, int64_t fallback) {
        int64_t v = fallback;
        return kt_model_meta_get_int(model, key.c_str(), &v) == KT_STATUS_OK ? v : fallback;
    };
    const int64_t n_expert = meta_int(arch + ".expert_count", 0);
    const int64_t n_used = meta_int(arch + ".expert_used_count", 0);
    m.n_expert = n_expert;
    m.n_used = n_used;
    m.desc = arch + " ?B " + ftype_name(meta_int("general.file_type", -1));
    if (meta_int("tokenizer.ggml.add_bos_token", 0) != 0) m.bos = static_cast<int32_t>(meta_int("tokenizer.ggml.bos_token_id", -1));

    bool has_output = false;
    const int64_t count = kt_model_tensor_count(model);
    std::vector<bool> moe_layer;  // layers with routed-expert tensors
    for (int64_t i = 0; i < count; ++i) {
        kt_tensor_info t;
        t.struct_size = sizeof t;
        if (kt_model_tensor_info(model, i, &t) != KT_STATUS_OK) continue;
        const std::string name = t.name;
        if (name.rfind("blk.", 0) != 0 || !contains(name, "_exps.")) continue;
        const size_t layer = static_cast<size_t>(std::strtoull(name.c_str() + 4, nullptr, 10));
        if (layer < (size_t{1} << 20)) {  // (the vector's size bounded whatever a name says)
            if (moe_layer.size() <= layer) moe_layer.resize(layer + 1, false);
            moe_layer[layer] = true;
        }
    }
    auto add_read = [&](Part part, double file_bytes, double packed) {
        m.file.per_token += file_bytes;
        m.file.part[part] += file_bytes;
        m.packed.per_token += packed;
        m.packed.part[part] += packed;
    };
    for (int64_t i = 0; i < count; ++i) {
        kt_tensor_info t;
        t.struct_size = sizeof t;
        if (kt_model_tensor_info(model, i, &t) != KT_STATUS_OK) continue;
        const std::string name = t.name;
        m.bytes += t.n_bytes;
        m.params += t.n_elements;
        if (name == "output.weight") has_output = true;
        if (name == "token_embd.weight") {  // looked up in the file, one row per token
            m.n_vocab = t.ne[1];
            const double row = static_cast<double>(t.n_bytes) / static_cast<double>(t.ne[1]);
            add_read(kOtherPart, row, row);
            m.file.all += static_cast<double>(t.n_bytes);
            m.packed.all += static_cast<double>(t.n_bytes);
            continue;
        }
        const bool experts = contains(name, "_exps.");
        const double file_bytes = static_cast<double>(t.n_bytes), packed = kt_cli::packed_tensor_bytes(t);
        m.file.all += file_bytes;
        m.packed.all += packed;
        if (experts) {
            m.file.experts += file_bytes;
            m.packed.experts += packed;
        }
        const double share = experts && n_expert > 0 ? static_cast<double>(n_used) / static_cast<double>(n_expert) : 1.0;
        add_read(part_of(name, moe_layer), file_bytes * share, packed * share);
        const bool matrix = t.n_dims >= 2 && ends_with(name, ".weight");
        const bool counted = contains(name, "attn_q") || contains(name, "attn_k") || contains(name, "attn_v") ||
                             contains(name, "attn_output") || contains(name, "ffn_");
        if (matrix && counted && name.rfind("blk.", 0) == 0) m.macs_per_token += static_cast<double>(t.n_elements) * share;
    }
    if (!has_output) {  // tied head: the embedding is read in full by the output projection
        for (int64_t i = 0; i < count; ++i) {
            kt_tensor_info t;
            t.struct_size = sizeof t;
            if (kt_model_tensor_info(model, i, &t) == KT_STATUS_OK && std::string(t.name) == "token_embd.weight") {
                const double packed = kt_cli::packed_tensor_bytes(t);
                add_read(kHeadPart, static_cast<double>(t.n_bytes), packed);
                m.packed.all += packed;  // a packed copy beside the embedding the lookups read
            }
        }
    }
    m.read = kernels == KT_KERNELS_REFERENCE ? m.file : m.packed;
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
    kt_roofline roofline{};       // the larger of each figure measured just before and just after this test
    double read_before = 0, read_after = 0;  // the two bandwidth probes, bytes/s
    kt_gemm_counts prompt_counts{}, gen_counts{};  // GEMM work of the prompts and of the generations, all repetitions
    uint64_t kv_bytes_per_position = 0;  // the context's KV cache per token of context, as kt stores it
    double bound_ts = 0;          // roofline tokens/s for this test (0: not measured)
    std::string ran_on;           // share of multiply-adds per ISA
    std::string backend = "CPU";  // "CPU", or "CPU+standin" / "CPU+cuda" on the hybrid path
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
    double part_seconds(Part part) const {
        const double by_part[kParts] = {perf.attention_seconds, perf.experts_seconds, perf.dense_ffn_seconds,
                                        perf.head_seconds, perf.other_seconds};
        return by_part[part];
    }
    // Generation tests: weights read per second by a part (its bytes per token over its time per token; the whole
    // step with kParts). 0 for tests with a prompt (a prompt reads each weight once per batch, not per token) and
    // for parts that read nothing or took no time.
    double read_rate(int part) const {
        if (test.n_prompt != 0 || test.n_gen <= 0) return 0;
        const double bytes = part == kParts ? model.read.per_token : model.read.part[part];
        const double spent = part == kParts ? phase_total() : part_seconds(static_cast<Part>(part));
        const double tokens = static_cast<double>(test.n_gen) * static_cast<double>(seconds.size());
        return bytes > 0 && spent > 0 ? bytes * tokens / spent : 0;
    }
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
    kt_model_params model_params = [] {
        kt_model_params p;
        kt_model_params_init(&p);
        return p;
    }();
};


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

kt_gemm_counts gemm_counts_now() {
    kt_gemm_counts c{};
    c.struct_size = sizeof c;
    kt_get_gemm_counts(&c);
    return c;
}

// sum += to - from.
void add_counts(const kt_gemm_counts &from, const kt_gemm_counts &to, kt_gemm_counts *sum) {
    for (int l = 0; l < 4; ++l) {
        sum->calls[l] += to.calls[l] - from.calls[l];
        sum->int8_macs[l] += to.int8_macs[l] - from.int8_macs[l];
        sum->bf16_macs[l] += to.bf16_macs[l] - from.bf16_macs[l];
    }
    sum->amx_fallbacks += to.amx_fallbacks - from.amx_fallbacks;
}

// Seconds the roofline allows for counted GEMM work: each ISA's int8 and bf16 ops over that ISA's measured peak.
// -1 when nothing was counted or a peak the work needs was not measured.
double ops_seconds(const kt_gemm_counts &c, const kt_roofline &roof) {
    double seconds = 0, macs = 0;
    for (int l = 0; l < 4; ++l) {
        const double int8_peak = l == KT_ISA_AMX ? roof.amx_int8_ops_per_s : roof.int8_ops_per_s;
        const double bf16_peak = l == KT_ISA_AMX ? roof.amx_bf16_flops_per_s : roof.bf16_flops_per_s;
        const double m8 = static_cast<double>(c.int8_macs[l]), m16 = static_cast<double>(c.bf16_macs[l]);
        if ((m8 > 0 && int8_peak <= 0) || (m16 > 0 && bf16_peak <= 0)) return -1;
        if (m8 > 0) seconds += 2.0 * m8 / int8_peak;
        if (m16 > 0) seconds += 2.0 * m16 / bf16_peak;
        macs += m8 + m16;
    }
    return macs > 0 ? seconds : -1;
}

// "avx512 12% amx 88%", plus AMX fallbacks if any.
std::string ran_on(const kt_gemm_counts &a, const kt_gemm_counts &b) {
    double macs[4], total = 0;
    for (int l = 0; l < 4; ++l) {
        macs[l] = static_cast<double>(a.int8_macs[l] + a.bf16_macs[l] + b.int8_macs[l] + b.bf16_macs[l]);
        total += macs[l];
    }
    std::string out;
    for (int l = 0; l < 4 && total > 0; ++l) {
        if (macs[l] <= 0) continue;
        char part[32];
        std::snprintf(part, sizeof part, "%s%s %.0f%%", out.empty() ? "" : " ", kt_isa_name(l), 100 * macs[l] / total);
        out += part;
    }
    if (a.amx_fallbacks + b.amx_fallbacks)
        out += " (" + std::to_string(a.amx_fallbacks + b.amx_fallbacks) + " AMX fallbacks)";
    return out.empty() ? "-" : out;
}

// One repetition: returns the seconds it took, or < 0 on error. The GEMM work of its prompt and of its generation
// is added to *prompt_counts and *gen_counts.
double run_once(kt_context *ctx, const Test &test, const ModelInfo &m, std::mt19937_64 &rng,
                kt_gemm_counts *prompt_counts, kt_gemm_counts *gen_counts) {
    kt_context_reset(ctx);
    const std::vector<int32_t> prompt = random_tokens(test.n_prompt, m.n_vocab, m.bos, rng);
    const std::vector<int32_t> gen = random_tokens(test.n_gen, m.n_vocab, test.n_prompt > 0 ? -1 : m.bos, rng);
    const kt_gemm_counts c0 = gemm_counts_now();
    const Clock::time_point start = Clock::now();
    if (test.n_prompt > 0 && !check(kt_context_decode(ctx, prompt.data(), test.n_prompt, KT_LOGITS_LAST), ctx, "decode"))
        return -1;
    const kt_gemm_counts c1 = gemm_counts_now();
    for (int64_t i = 0; i < test.n_gen; ++i)
        if (!check(kt_context_decode(ctx, &gen[static_cast<size_t>(i)], 1, KT_LOGITS_LAST), ctx, "decode")) return -1;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    add_counts(c0, c1, prompt_counts);
    add_counts(c1, gemm_counts_now(), gen_counts);
    return seconds;
}

bool run_model(const Options &o, const std::string &path, std::vector<Result> *results) {
    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    if (kt_model_load(path.c_str(), &o.model_params, &model, &err) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-bench: %s\n", err.message);
        return false;
    }
    if (o.model_params.device != KT_DEVICE_NONE) std::fprintf(stderr, "%s", kt_cli::device_plan(model).c_str());
    const ModelInfo info = describe(model, path, o.kernels);
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
            if (kt_model_load(path.c_str(), &o.model_params, &model, &err) != KT_STATUS_OK) {
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
            if (o.model_params.device == KT_DEVICE_CPU_STANDIN) r.backend = "CPU+standin";
            else if (o.model_params.device == KT_DEVICE_CUDA) r.backend = "CPU+cuda";
            r.n_batch = o.n_batch;
            r.type_k = o.kv_type == KT_TYPE_F16 ? "f16" : o.kv_type == KT_TYPE_BF16 ? "bf16" : o.kv_type == KT_TYPE_Q8_0 ? "q8_0" : "f32";
            r.test = test;
            kt_context_kv_size(ctx, nullptr, &r.kv_bytes_per_position);
            r.load_before = kt_cli::load_average();
            // The roofline just before the test: on a shared machine the load moves, and a bound measured minutes
            // earlier would say more about the neighbours than about kt.
            auto measure = [&](kt_roofline *out) {
                out->struct_size = sizeof *out;
                if (o.roofline_mib <= 0) return;
                const kt_status s = kt_measure_roofline(static_cast<int32_t>(threads),
                                                        static_cast<uint64_t>(o.roofline_mib) << 20, out);
                if (s != KT_STATUS_OK) std::fprintf(stderr, "kt-bench: roofline: %s\n", kt_status_string(s));
            };
            measure(&r.roofline);
            r.read_before = r.roofline.read_bytes_per_s;
            // Warm-up: the whole prompt, or one generated token.
            kt_gemm_counts warmup_counts{};
            if (run_once(ctx, test.n_prompt > 0 ? Test{test.n_prompt, 0} : Test{0, 1}, info, rng, &warmup_counts,
                         &warmup_counts) < 0) {
                ok = false;
                break;
            }
            r.perf.struct_size = sizeof r.perf;
            for (int64_t rep = 0; rep < o.repetitions && ok; ++rep) {
                kt_context_perf_reset(ctx);
                const double s = run_once(ctx, test, info, rng, &r.prompt_counts, &r.gen_counts);
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
            // And again just after it. A virtual machine's bandwidth can move 2x within minutes as its neighbours
            // come and go: a bound from one slow probe made a test look near the machine's limit (tg64 at 99 % of
            // a 31 GB/s probe, where the same host measured 71-83 GB/s the same hour). Each figure of the bound is
            // the larger of the two, what the machine showed it can do around the test.
            kt_roofline after{};
            measure(&after);
            r.read_after = after.read_bytes_per_s;
            r.roofline.read_bytes_per_s = std::max(r.roofline.read_bytes_per_s, after.read_bytes_per_s);
            r.roofline.int8_ops_per_s = std::max(r.roofline.int8_ops_per_s, after.int8_ops_per_s);
            r.roofline.bf16_flops_per_s = std::max(r.roofline.bf16_flops_per_s, after.bf16_flops_per_s);
            r.roofline.amx_int8_ops_per_s = std::max(r.roofline.amx_int8_ops_per_s, after.amx_int8_ops_per_s);
            r.roofline.amx_bf16_flops_per_s = std::max(r.roofline.amx_bf16_flops_per_s, after.amx_bf16_flops_per_s);
            const kt_roofline &roofline = r.roofline;
            // The bound for this test: max(bytes / bandwidth, ops / peak) of its prompt, plus the same of its
            // generation (see the top of this file).
            if (roofline.read_bytes_per_s > 0 && roofline.int8_ops_per_s > 0) {
                const double reps = static_cast<double>(o.repetitions);
                const double kv_bytes_per_pos = static_cast<double>(r.kv_bytes_per_position);
                const double mean_depth = static_cast<double>(test.n_prompt) + static_cast<double>(test.n_gen) / 2.0;
                const double gen_bytes = static_cast<double>(test.n_gen) * (info.read.per_token + kv_bytes_per_pos * mean_depth);
                const double gen_ops_s = ops_seconds(r.gen_counts, roofline) / reps;
                const double gen_s = std::max(gen_bytes / roofline.read_bytes_per_s, gen_ops_s);

                const int64_t ub = std::min(o.n_batch, std::max<int64_t>(test.n_prompt, 1));
                const double batches = std::ceil(static_cast<double>(test.n_prompt) / static_cast<double>(ub));
                const double touched = info.n_expert > 0
                    ? 1.0 - std::pow(1.0 - static_cast<double>(info.n_used) / static_cast<double>(info.n_expert), static_cast<double>(ub))
                    : 1.0;
                const double dense_bytes = info.read.all - info.read.experts;
                const double pp_bytes = test.n_prompt > 0 ? batches * (dense_bytes + info.read.experts * touched) : 0.0;
                double pp_ops_s = ops_seconds(r.prompt_counts, roofline) / reps;
                if (pp_ops_s < 0)  // nothing counted (reference kernels): the model's multiply-adds at the int8 peak
                    pp_ops_s = static_cast<double>(test.n_prompt) * 2.0 * info.macs_per_token / roofline.int8_ops_per_s;
                const double pp_s = std::max(pp_bytes / roofline.read_bytes_per_s, pp_ops_s);
                r.bound_ts = static_cast<double>(test.n_prompt + test.n_gen) / (gen_s + pp_s);
            }
            r.ran_on = ran_on(r.prompt_counts, r.gen_counts);
            r.load_after = kt_cli::load_average();
            std::fprintf(stderr, "kt-bench: %s %s t=%d: %.2f t/s\n", info.desc.c_str(), test.name().c_str(), r.threads,
                         Result::mean(r.ts()));
            results->push_back(r);
        }
        kt_context_free(ctx);
        if (!ok) break;
    }
    if (o.model_params.device != KT_DEVICE_NONE) {  // the split over every test run on this model
        const std::string plan = kt_cli::device_plan(model);
        const size_t at = plan.find("host: ");  // the host's share, then the split
        if (at != std::string::npos) std::fprintf(stderr, "kt-bench: the device after these runs:\n%s", plan.c_str() + at);
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
            std::printf("%s: %.4g MB read per generated token as the kernels hold the weights (file: %.4g MB; "
                        "attention %.4g, experts %.4g, dense ffn %.4g, head %.4g, other %.4g; + KV cache: %llu bytes "
                        "per token of context), %.4g GOP per prompt token\n",
                        r.model.path.c_str(), r.model.read.per_token / 1e6, r.model.file.per_token / 1e6,
                        r.model.read.part[kAttentionPart] / 1e6, r.model.read.part[kExpertsPart] / 1e6,
                        r.model.read.part[kDenseFfnPart] / 1e6, r.model.read.part[kHeadPart] / 1e6,
                        r.model.read.part[kOtherPart] / 1e6,
                        static_cast<unsigned long long>(r.kv_bytes_per_position), 2.0 * r.model.macs_per_token / 1e9);
        if (r.roofline.n_threads > 0)
            std::printf("  %-13s roofline with %d threads: read %.1f GB/s (before %.1f, after %.1f; %.0f MiB buffer), "
                        "int8 dot %.0f GOP/s (%s), bf16 %.0f GFLOP/s (%s), AMX int8 %.0f GOP/s, AMX bf16 %.0f GFLOP/s; "
                        "ran on %s; load average %.2f -> %.2f\n",
                        r.test.name().c_str(), r.threads, r.roofline.read_bytes_per_s / 1e9, r.read_before / 1e9,
                        r.read_after / 1e9, static_cast<double>(r.roofline.buffer_bytes) / (1 << 20),
                        r.roofline.int8_ops_per_s / 1e9,
                        r.roofline.int8_isa, r.roofline.bf16_flops_per_s / 1e9, r.roofline.bf16_isa,
                        r.roofline.amx_int8_ops_per_s / 1e9, r.roofline.amx_bf16_flops_per_s / 1e9, r.ran_on.c_str(),
                        r.load_before, r.load_after);
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
                    size_text(r.model.bytes).c_str(), params_text(r.model.params).c_str(), r.backend.c_str(), r.threads,
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

    // Generation alone: each part's weights per token over its time per token, against the measured bandwidth.
    // Where a part reads at a lower rate than the others, its kernels (or the work between them) hold decode back.
    bool any_gen = false;
    for (const Result &r : results) any_gen = any_gen || (r.test.n_prompt == 0 && r.test.n_gen > 0);
    if (!any_gen) return;
    std::printf("\nweights read per second by part, generation tests (GB/s, and of the roofline's read bandwidth):\n\n");
    std::printf("| %-13s | %7s | %16s | %16s | %16s | %16s | %16s |\n", "test", "threads", "attention", "experts",
                "dense ffn", "head", "whole step");
    std::printf("| ------------- | ------: | ---------------: | ---------------: | ---------------: | ---------------: | "
                "---------------: |\n");
    for (const Result &r : results) {
        if (r.test.n_prompt != 0 || r.test.n_gen <= 0) continue;
        auto rate = [&](int part) {
            char buf[40] = "-";
            const double bytes_per_s = r.read_rate(part);
            if (bytes_per_s > 0 && r.roofline.read_bytes_per_s > 0)
                std::snprintf(buf, sizeof buf, "%.1f (%.0f %%)", bytes_per_s / 1e9,
                              100.0 * bytes_per_s / r.roofline.read_bytes_per_s);
            else if (bytes_per_s > 0)
                std::snprintf(buf, sizeof buf, "%.1f", bytes_per_s / 1e9);
            return std::string(buf);
        };
        std::printf("| %-13s | %7d | %16s | %16s | %16s | %16s | %16s |\n", r.test.name().c_str(), r.threads,
                    rate(kAttentionPart).c_str(), rate(kExpertsPart).c_str(), rate(kDenseFfnPart).c_str(),
                    rate(kHeadPart).c_str(), rate(kParts).c_str());
    }
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
        {"roofline_read_bytes_per_s_before", num(r.read_before), false},
        {"roofline_read_bytes_per_s_after", num(r.read_after), false},
        {"roofline_int8_ops_per_s", num(r.roofline.int8_ops_per_s), false},
        {"roofline_int8_isa", r.roofline.int8_isa, true},
        {"roofline_bf16_flops_per_s", num(r.roofline.bf16_flops_per_s), false},
        {"roofline_amx_int8_ops_per_s", num(r.roofline.amx_int8_ops_per_s), false},
        {"roofline_amx_bf16_flops_per_s", num(r.roofline.amx_bf16_flops_per_s), false},
        {"ran_on", r.ran_on, true},
        {"bytes_per_token", num(r.model.read.per_token), false},
        {"file_bytes_per_token", num(r.model.file.per_token), false},
        {"kv_bytes_per_position", std::to_string(r.kv_bytes_per_position), false},
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
        {"attention_read_bytes_per_s", num(r.read_rate(kAttentionPart)), false},
        {"experts_read_bytes_per_s", num(r.read_rate(kExpertsPart)), false},
        {"dense_ffn_read_bytes_per_s", num(r.read_rate(kDenseFfnPart)), false},
        {"head_read_bytes_per_s", num(r.read_rate(kHeadPart)), false},
        {"step_read_bytes_per_s", num(r.read_rate(kParts)), false},
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
        else if (a == "-p" || a == "--n-prompt") { if (!kt_cli::parse_int_list(v, &o.n_prompt)) return usage("bad -p"); }
        else if (a == "-n" || a == "--n-gen") { if (!kt_cli::parse_int_list(v, &o.n_gen)) return usage("bad -n"); }
        else if (a == "-t" || a == "--threads") { if (!kt_cli::parse_int_list(v, &o.threads)) return usage("bad -t"); }
        else if (a == "-pg") {
            if (!kt_cli::parse_int_list(v, &list) || list.size() != 2) return usage("-pg wants PP,TG");
            o.pg.push_back({list[0], list[1]});
        } else if (a == "-r" || a == "--repetitions" || a == "-ub" || a == "--ubatch-size" || a == "-b" ||
                   a == "--batch-size" || a == "--roofline-mib") {
            if (!kt_cli::parse_int_list(v, &list) || list.size() != 1) return usage(("bad value for " + a).c_str());
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
        } else if (const kt_cli::Flag dflag = kt_cli::device_flag(a, v, &o.model_params); dflag != kt_cli::Flag::kNotMine) {
            if (dflag == kt_cli::Flag::kBadValue) return usage(("bad value for " + a).c_str());
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
