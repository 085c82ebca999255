// kt-expert-bench: throughput of kt_expert_pool on MoE expert shapes, next to this machine's roofline measured in the
// same run with the same threads.
//
//   kt-expert-bench --preset qwen3 --format int8,q4_k --tokens 1,4,512 [--threads N] [--reps R] [--csv]
//
// Each format gets `layers` pools (one per MoE layer) of random weights, generated a few experts at a time and
// loaded with kt_expert_pool_load_experts. Calls rotate over the layers with fresh uniform routing (top-k distinct
// experts per token), so the weights a call reads are not in cache: one layer is already far larger than the L3.
// Reported per call: median wall time over the repetitions (after warm-up calls), and
//   tokens_per_s   tokens / time
//   gbytes_per_s   packed bytes of the experts the call touched / time (1e9 bytes)
//   gops_per_s     2 * 3 * hidden * intermediate * (token, expert) pairs / time (1e9)
//   bw_fraction    gbytes_per_s / the measured read bandwidth
//   peak_fraction  gops_per_s / the peak of the instructions that ran the call: the pool counts its GEMM
//                  multiply-adds by the ISA whose code ran them (AMX tiles, AVX-512 VNNI / BF16, ...), and the
//                  peak is total ops / the sum over ISAs of (that ISA's ops / its measured peak)
//   attainable_fraction ("of roof")  the time bound max(bytes / read bandwidth, sum of ops / peak per ISA) of
//                  this call over its measured time. Prefill with few tokens per expert can be bandwidth bound even
//                  on a compute peak target (DeepSeek: 16 tokens per expert at 512 tokens).
//   ran_on         the share of multiply-adds per ISA ("amx 100%", "avx512 12% amx 88%") and AMX fallbacks
// The roofline is measured before and after each case; its fractions use the larger of each figure.
// A format whose one layer does not fit the memory budget (--max-gib) is skipped with a message.
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/roofline.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kt.h"
#include "mem/thread_placement.h"
#include "mem/topology.h"
#include "ops/ref/blocks.h"
#include "ops/types.h"

namespace {

struct Options {
    int64_t experts = 128, hidden = 2048, inter = 768;
    int top_k = 8;
    std::vector<std::string> formats = {"int8"};
    std::vector<int64_t> tokens = {1, 4, 512};
    int threads = 0;
    int reps = 10;
    int warmup = 2;
    int layers = 0;  // 0: enough that the layers' weights exceed 1 GiB (capped by memory)
    int int4_group = 128;
    int spin_us = -1;  // -1: kt's default
    double max_gib = 16.0;
    size_t roofline_bytes = size_t{2} << 30;
    bool csv = false;
    bool cpu_time = false;  // time calls by process CPU time / threads (for a busy machine; not for final numbers)
    std::string preset;
};

[[noreturn]] void usage(const char *msg) {
    if (msg) std::fprintf(stderr, "kt-expert-bench: %s\n\n", msg);
    std::fprintf(stderr,
                 "usage: kt-expert-bench [options]\n"
                 "  --preset qwen3|deepseek   qwen3: 128 experts, top-8, H 2048, I 768; deepseek: 256, top-8, H 7168, I 2048\n"
                 "  --experts E --top-k K --hidden H --inter I\n"
                 "  --format LIST             int8,int4,bf16,q4_k,q8_0,q4_0,q5_k,q6_k,iq4_xs,q2_k,q3_k,\n"
                 "                            q5_0,q5_1,q4_1,iq4_nl (default int8)\n"
                 "  --int4-group G            32, 64 or 128 (default 128)\n"
                 "  --spin-us S               how long idle workers spin before sleeping (default: kt's)\n"
                 "  --tokens LIST             tokens per call (default 1,4,512)\n"
                 "  --threads N               0: one per physical core (default)\n"
                 "  --reps R --warmup W       timed calls and warm-up calls per case (default 10, 2)\n"
                 "  --layers L                layers to rotate over (default: >= 1 GiB of weights)\n"
                 "  --max-gib G               memory budget for weights (default 16)\n"
                 "  --roofline-mib M          bandwidth buffer (default 2048)\n"
                 "  --csv                     CSV rows instead of a table\n"
                 "  --cpu-time                time calls by process CPU time / threads instead of wall time: a\n"
                 "                            rough view on a busy machine (idle spinning counts as work); never\n"
                 "                            for recorded results\n");
    std::exit(2);
}

std::vector<std::string> split(const std::string &s) {
    std::vector<std::string> out;
    size_t b = 0;
    while (b <= s.size()) {
        const size_t e = s.find(',', b);
        out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
        if (e == std::string::npos) break;
        b = e + 1;
    }
    return out;
}

Options parse(int argc, char **argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value for " + a).c_str());
            return argv[++i];
        };
        if (a == "--preset") {
            o.preset = value();
            if (o.preset == "qwen3") o.experts = 128, o.top_k = 8, o.hidden = 2048, o.inter = 768;
            else if (o.preset == "deepseek") o.experts = 256, o.top_k = 8, o.hidden = 7168, o.inter = 2048;
            else usage("unknown preset");
        } else if (a == "--experts") o.experts = std::stoll(value());
        else if (a == "--top-k") o.top_k = std::stoi(value());
        else if (a == "--hidden") o.hidden = std::stoll(value());
        else if (a == "--inter") o.inter = std::stoll(value());
        else if (a == "--format") o.formats = split(value());
        else if (a == "--int4-group") o.int4_group = std::stoi(value());
        else if (a == "--spin-us") o.spin_us = std::stoi(value());
        else if (a == "--tokens") {
            o.tokens.clear();
            for (const std::string &t : split(value())) o.tokens.push_back(std::stoll(t));
        } else if (a == "--threads") o.threads = std::stoi(value());
        else if (a == "--reps") o.reps = std::stoi(value());
        else if (a == "--warmup") o.warmup = std::stoi(value());
        else if (a == "--layers") o.layers = std::stoi(value());
        else if (a == "--max-gib") o.max_gib = std::stod(value());
        else if (a == "--roofline-mib") o.roofline_bytes = static_cast<size_t>(std::stoll(value())) << 20;
        else if (a == "--csv") o.csv = true;
        else if (a == "--cpu-time") o.cpu_time = true;
        else if (a == "--help" || a == "-h") usage(nullptr);
        else usage(("unknown option " + a).c_str());
    }
    if (o.experts < 1 || o.hidden < 1 || o.inter < 1 || o.top_k < 1 || o.top_k > o.experts || o.reps < 1)
        usage("bad shape or repetitions");
    return o;
}

// ---- formats ---------------------------------------------------------------------------------------------------

// The roofline in the units this program prints (kt::cpu::measure_roofline, the probe behind kt_measure_roofline).
struct Roof {
    double read_gbs, int8_gops, bf16_gflops;
    std::string int8_isa, bf16_isa;
    double amx_int8_gops, amx_bf16_gflops;  // 0 when AMX does not run natively

    // The peak (GOP/s) of the instructions `level` runs for int8 or bf16 arithmetic.
    double peak(int level, bool bf16) const {
        if (level == KT_ISA_AMX) return bf16 ? amx_bf16_gflops : amx_int8_gops;
        return bf16 ? bf16_gflops : int8_gops;
    }
};

// A pool's GEMM counts between two readings of kt_expert_pool_info.
struct Counts {
    double int8_macs[4] = {}, bf16_macs[4] = {};
    uint64_t fallbacks = 0;
};

Counts counts_between(const kt_expert_pool_info &before, const kt_expert_pool_info &after) {
    Counts c;
    for (int l = 0; l < 4; ++l) {
        c.int8_macs[l] = static_cast<double>(after.gemm_int8_macs[l] - before.gemm_int8_macs[l]);
        c.bf16_macs[l] = static_cast<double>(after.gemm_bf16_macs[l] - before.gemm_bf16_macs[l]);
    }
    c.fallbacks = after.amx_fallbacks - before.amx_fallbacks;
    return c;
}

// Seconds per operation at the peaks of the ISAs that ran the counted work (0 when nothing was counted or a peak
// is unknown), and the share of the work per ISA as text.
double seconds_per_op(const Counts &c, const Roof &roof, std::string *ran_on) {
    double macs = 0, seconds = 0;
    for (int l = 0; l < 4; ++l) macs += c.int8_macs[l] + c.bf16_macs[l];
    ran_on->clear();
    if (macs <= 0) return 0;
    bool unknown_peak = false;
    for (int l = 0; l < 4; ++l) {
        const double share = (c.int8_macs[l] + c.bf16_macs[l]) / macs;
        if (share <= 0) continue;
        char part[32];
        std::snprintf(part, sizeof part, "%s%s %.0f%%", ran_on->empty() ? "" : " ", kt_isa_name(l), 100 * share);
        *ran_on += part;
        for (int bf16 = 0; bf16 < 2; ++bf16) {
            const double m = bf16 ? c.bf16_macs[l] : c.int8_macs[l];
            if (m <= 0) continue;
            const double peak = roof.peak(l, bf16);
            if (peak <= 0) unknown_peak = true;
            else seconds += 2.0 * m / (peak * 1e9);
        }
    }
    if (c.fallbacks) *ran_on += " (" + std::to_string(c.fallbacks) + " AMX fallbacks)";
    return unknown_peak ? 0 : seconds / (2.0 * macs);
}

struct Format {
    const char *name;
    int32_t source_type;  // what the random weights are generated as
    int32_t weight_format;
};

const Format kFormats[] = {
    {"int8", KT_TYPE_BF16, KT_EXPERT_WEIGHTS_INT8}, {"int4", KT_TYPE_BF16, KT_EXPERT_WEIGHTS_INT4},
    {"bf16", KT_TYPE_BF16, KT_EXPERT_WEIGHTS_AS_SOURCE}, {"q4_k", KT_TYPE_Q4_K, KT_EXPERT_WEIGHTS_AS_SOURCE},
    {"q8_0", KT_TYPE_Q8_0, KT_EXPERT_WEIGHTS_AS_SOURCE}, {"q4_0", KT_TYPE_Q4_0, KT_EXPERT_WEIGHTS_AS_SOURCE},
    {"q5_k", KT_TYPE_Q5_K, KT_EXPERT_WEIGHTS_AS_SOURCE}, {"q6_k", KT_TYPE_Q6_K, KT_EXPERT_WEIGHTS_AS_SOURCE},
    {"iq4_xs", KT_TYPE_IQ4_XS, KT_EXPERT_WEIGHTS_AS_SOURCE}, {"q2_k", KT_TYPE_Q2_K, KT_EXPERT_WEIGHTS_AS_SOURCE},
    {"q3_k", KT_TYPE_Q3_K, KT_EXPERT_WEIGHTS_AS_SOURCE}, {"q5_0", KT_TYPE_Q5_0, KT_EXPERT_WEIGHTS_AS_SOURCE},
    {"q5_1", KT_TYPE_Q5_1, KT_EXPERT_WEIGHTS_AS_SOURCE}, {"q4_1", KT_TYPE_Q4_1, KT_EXPERT_WEIGHTS_AS_SOURCE},
    {"iq4_nl", KT_TYPE_IQ4_NL, KT_EXPERT_WEIGHTS_AS_SOURCE},
};

const Format *find_format(const std::string &name) {
    for (const Format &f : kFormats)
        if (name == f.name) return &f;
    return nullptr;
}

// Fast random weights: bf16 of magnitude 2^-9 .. 2^-2, or GGUF blocks of random codes with sane f16 scales.
struct Rng {
    uint64_t s;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
};

void fill_random(int32_t type, uint8_t *p, size_t bytes, Rng &rng) {
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        const uint64_t v = rng.next();
        std::memcpy(p + i, &v, 8);
    }
    if (type == KT_TYPE_BF16) {
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            uint16_t b;
            std::memcpy(&b, p + i, 2);
            b = static_cast<uint16_t>((b & 0x807F) | ((118 + (b >> 7) % 8) << 7));  // sign, exponent 118..125, mantissa
            std::memcpy(p + i, &b, 2);
        }
        return;
    }
    const kt::ops::TypeTraits *t = kt::ops::type_traits(type);
    const uint16_t d = kt::f32_to_fp16(0.0005f), dmin = kt::f32_to_fp16(0.002f), neg_dmin = kt::f32_to_fp16(-0.002f);
    for (size_t off = 0; off + static_cast<size_t>(t->block_bytes) <= bytes; off += static_cast<size_t>(t->block_bytes)) {
        uint8_t *b = p + off;
        switch (type) {
            case KT_TYPE_Q4_K:
            case KT_TYPE_Q5_K: std::memcpy(b, &d, 2); std::memcpy(b + 2, &dmin, 2); break;
            case KT_TYPE_Q4_1:
            case KT_TYPE_Q5_1: std::memcpy(b, &d, 2); std::memcpy(b + 2, &neg_dmin, 2); break;  // d, m
            case KT_TYPE_Q6_K: std::memcpy(b + offsetof(kt::ref::BlockQ6_K, d), &d, 2); break;
            case KT_TYPE_Q3_K: std::memcpy(b + offsetof(kt::ref::BlockQ3_K, d), &d, 2); break;
            case KT_TYPE_Q2_K:
                std::memcpy(b + offsetof(kt::ref::BlockQ2_K, d), &d, 2);
                std::memcpy(b + offsetof(kt::ref::BlockQ2_K, dmin), &dmin, 2);
                break;
            default: std::memcpy(b, &d, 2); break;  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS: d first
        }
    }
}

// Packed bytes of one layer (E experts x gate, up, down), estimated before loading it: the format's bytes per
// weight with its scales (panel padding ignored).
double layer_bytes_estimate(const Options &o, const Format &fmt) {
    const double weights = 3.0 * static_cast<double>(o.experts) * static_cast<double>(o.hidden) * static_cast<double>(o.inter);
    double per_weight;
    switch (fmt.weight_format) {
        case KT_EXPERT_WEIGHTS_INT8: per_weight = 1.0 + 4.0 / static_cast<double>(std::min(o.hidden, o.inter)); break;
        case KT_EXPERT_WEIGHTS_INT4: per_weight = 0.5 + 4.0 / o.int4_group; break;
        default:
            per_weight = static_cast<double>(kt_type_block_bytes(fmt.source_type)) /
                         static_cast<double>(kt_type_block_size(fmt.source_type));
            // Kept as 2-bit fields (backends/cpu/packed.h; Q3_K: and a bit) with a byte of scale (Q2_K: and min)
            // per 16.
            if (fmt.source_type == KT_TYPE_Q2_K) per_weight = 0.25 + 1.0 / 16 + 4.0 / 256;
            if (fmt.source_type == KT_TYPE_Q3_K) per_weight = 0.375 + 1.0 / 16 + 2.0 / 256;
    }
    return weights * per_weight;
}

// ---- machine ---------------------------------------------------------------------------------------------------

std::string read_first_line(const char *path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

uint64_t mem_total_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    while (in >> key >> kb) {
        if (key == "MemTotal:") return kb * 1024;
        in.ignore(1 << 10, '\n');
    }
    return 0;
}

// AnonHugePages of this process in MiB (whether the weights got transparent huge pages).
long anon_huge_mib() {
    std::ifstream in("/proc/self/smaps_rollup");
    std::string key;
    long kb = 0;
    while (in >> key) {
        if (key == "AnonHugePages:") {
            in >> kb;
            return kb / 1024;
        }
        in.ignore(1 << 10, '\n');
    }
    return -1;
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

void log_to_stderr(int32_t, const char *message, void *) { std::fprintf(stderr, "# %s\n", message); }

int main(int argc, char **argv) {
    const Options o = parse(argc, argv);
    if (std::getenv("KT_EXPERT_TRACE")) kt_log_set(log_to_stderr, nullptr, KT_LOG_INFO);
    for (const std::string &f : o.formats)
        if (!find_format(f)) usage(("unknown format " + f).c_str());

    const kt::mem::Topology *topo = nullptr;
    if (!kt::mem::Topology::shared(&topo).is_ok()) {
        std::fprintf(stderr, "kt-expert-bench: cannot read the topology\n");
        return 1;
    }
    kt::mem::ThreadPlan plan;
    if (!kt::mem::plan_threads(*topo, o.threads, {}, &plan).is_ok()) usage("bad thread count");
    const int threads = static_cast<int>(plan.threads.size());
    const int isa = kt_get_isa();
    const kt::cpu::KernelSet &ks = kt::cpu::best_kernel_set(static_cast<kt::cpu::IsaLevel>(isa));

    // The roofline, with the pool's threads pinned as the expert pool pins its own.
    kt::ThreadPoolOptions po;
    po.n_threads = threads;
    po.on_worker_start = [&](int i) {
        if (plan.threads[static_cast<size_t>(i)].pu >= 0 && topo->can_bind_threads())
            (void)topo->bind_current_thread(plan.threads[static_cast<size_t>(i)].pu);
    };
    std::unique_ptr<kt::ThreadPool> tp;
    if (!kt::ThreadPool::create(po, &tp).is_ok()) return 1;
    // Measured again before every case: on a shared machine what other processes leave us changes over a run (the
    // read bandwidth of this VM alternates between ~44 and ~81 GB/s), and each case's fractions use the roofline
    // measured just before it.
    auto measure = [&]() {
        cpu_set_t saved;
        sched_getaffinity(0, sizeof saved, &saved);
        if (plan.threads[0].pu >= 0 && topo->can_bind_threads()) (void)topo->bind_current_thread(plan.threads[0].pu);
        kt::cpu::Roofline r;
        const kt::Status status = kt::cpu::measure_roofline(*tp, o.roofline_bytes, &r);
        sched_setaffinity(0, sizeof saved, &saved);
        if (!status.is_ok()) std::fprintf(stderr, "kt-expert-bench: roofline: %s\n", status.message().c_str());
        return Roof{r.read_bytes_per_s / 1e9, r.int8_ops_per_s / 1e9, r.bf16_flops_per_s / 1e9, r.int8_isa, r.bf16_isa,
                    r.amx_int8_ops_per_s / 1e9, r.amx_bf16_flops_per_s / 1e9};
    };
    Roof roof = measure();

    const kt::cpu::CpuFeatures &cf = kt::cpu::host_cpu_features();
    const std::string load = read_first_line("/proc/loadavg");
    std::printf("# kt-expert-bench: %s\n", kt_build_info());
    std::printf("# cpu: %s; %d threads (one per physical core), kernels %s; memory %.1f GiB; %s\n",
                cf.brand.empty() ? cf.vendor.c_str() : cf.brand.c_str(), threads, ks.name,
                static_cast<double>(mem_total_bytes()) / (1ull << 30), topo->describe().c_str());
    std::printf("# load average before: %s\n", load.c_str());
    std::printf("# roofline (same threads): read %.1f GB/s over %zu MiB; int8 %.0f GOP/s (%s); bf16 %.0f GFLOP/s (%s); "
                "AMX int8 %.0f GOP/s, bf16 %.0f GFLOP/s\n",
                roof.read_gbs, o.roofline_bytes >> 20, roof.int8_gops, roof.int8_isa.c_str(), roof.bf16_gflops,
                roof.bf16_isa.c_str(), roof.amx_int8_gops, roof.amx_bf16_gflops);
    if (roof.amx_int8_gops > 0) {
        // The ceiling of the group-wise kernels (GGUF formats): TMULs one scale group deep, and with their sums
        // stored every group as exact per-group sums need (amx_gemm.h).
        kt::cpu::AmxGroupPeaks gp;
        if (kt::cpu::measure_amx_group_peaks(*tp, &gp).is_ok())
            std::printf("# AMX int8 one group deep: group 32 %.0f GOP/s, group 16 %.0f GOP/s, group 32 with its sums "
                        "stored %.0f GOP/s (of the AMX int8 peak: %.0f %%, %.0f %%, %.0f %%)\n",
                        gp.group32_ops_per_s / 1e9, gp.group16_ops_per_s / 1e9, gp.group32_out_ops_per_s / 1e9,
                        100 * gp.group32_ops_per_s / 1e9 / roof.amx_int8_gops,
                        100 * gp.group16_ops_per_s / 1e9 / roof.amx_int8_gops,
                        100 * gp.group32_out_ops_per_s / 1e9 / roof.amx_int8_gops);
    }
    std::printf("# shape: %lld experts, top-%d, hidden %lld, intermediate %lld; median of %d calls after %d warm-up\n",
                static_cast<long long>(o.experts), o.top_k, static_cast<long long>(o.hidden),
                static_cast<long long>(o.inter), o.reps, o.warmup);
    if (o.csv)
        std::printf("format,isa,experts,top_k,hidden,intermediate,tokens,threads,tokens_per_s,gbytes_per_s,gops_per_s,"
                    "bw_fraction,peak_fraction,kernels,ms_per_call,ms_best,unique_experts,layers,read_gbs,int8_peak_gops,"
                    "bf16_peak_gflops,attainable_gops,attainable_fraction,weight_formats,amx_int8_peak_gops,"
                    "amx_bf16_peak_gflops,ran_on\n");
    else
        std::printf("%-7s %6s %8s %10s %9s %9s %7s %7s %7s %9s %8s  %s\n", "format", "tokens", "ms/call", "tokens/s",
                    "GB/s", "GOP/s", "of BW", "of peak", "of roof", "experts", "layers", "ran on");
    std::fflush(stdout);

    const int64_t max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
    // The weight budget, never more than 80 % of this machine's memory.
    double max_gib = o.max_gib;
    const double machine_gib = static_cast<double>(mem_total_bytes()) / (1ull << 30);
    if (machine_gib > 0 && max_gib > 0.8 * machine_gib) {
        max_gib = 0.8 * machine_gib;
        std::fprintf(stderr, "kt-expert-bench: --max-gib %.1f is more than 80 %% of this machine's %.1f GiB; using %.1f\n",
                     o.max_gib, machine_gib, max_gib);
    }
    bool first_case = true;
    for (const std::string &fname : o.formats) {
        const Format &fmt = *find_format(fname);
        const kt::ops::TypeTraits *st = kt::ops::type_traits(fmt.source_type);
        if (o.hidden % st->block_size || o.inter % st->block_size) {
            std::fprintf(stderr, "kt-expert-bench: %s needs hidden and intermediate multiples of %lld; skipped\n",
                         fmt.name, static_cast<long long>(st->block_size));
            continue;
        }
        // The budget: one layer must fit beside the staging buffers, or the format is skipped (a case that does
        // not fit must never push the machine into swapping or the OOM killer).
        const double staging_gib = 3.0 * std::min<int64_t>(8, o.experts) * static_cast<double>(o.hidden * o.inter) *
                                   static_cast<double>(kt_type_block_bytes(fmt.source_type)) /
                                   static_cast<double>(kt_type_block_size(fmt.source_type)) / (1ull << 30);
        const double layer_gib = layer_bytes_estimate(o, fmt) / (1ull << 30);
        if (layer_gib + staging_gib > max_gib) {
            std::fprintf(stderr,
                         "kt-expert-bench: %s: one layer needs about %.1f GiB packed plus %.1f GiB of staging, more "
                         "than the budget of %.1f GiB (--max-gib); skipped\n",
                         fmt.name, layer_gib, staging_gib, max_gib);
            std::printf("# %s skipped: one layer (%.1f GiB) does not fit the memory budget of %.1f GiB\n", fmt.name,
                        layer_gib, max_gib);
            continue;
        }
        kt_expert_pool_params p;
        kt_expert_pool_params_init(&p);
        p.n_experts = static_cast<int32_t>(o.experts);
        p.hidden_size = static_cast<int32_t>(o.hidden);
        p.intermediate_size = static_cast<int32_t>(o.inter);
        p.max_tokens = static_cast<int32_t>(max_tokens);
        p.max_top_k = o.top_k;
        p.weight_format = fmt.weight_format;
        p.int4_group_size = o.int4_group;
        p.n_threads = threads;
        if (o.spin_us >= 0) p.spin_microseconds = o.spin_us;

        // Layers: pools of random weights, generated and loaded 8 experts at a time.
        std::vector<kt_expert_pool *> pools;
        kt_expert_pool_info info;
        info.struct_size = sizeof info;
        double load_s = 0;
        const int64_t chunk = std::min<int64_t>(8, o.experts);
        const size_t gate_bytes = static_cast<size_t>(kt::ops::row_bytes(*st, o.hidden) * o.inter);
        const size_t down_bytes = static_cast<size_t>(kt::ops::row_bytes(*st, o.inter) * o.hidden);
        std::vector<uint8_t> gate(gate_bytes * chunk), up(gate_bytes * chunk), down(down_bytes * chunk);
        Rng rng{0x9E3779B97F4A7C15ull};
        for (int layer = 0;; ++layer) {
            if (o.layers > 0 && layer >= o.layers) break;
            kt_expert_pool *pool = nullptr;
            kt_error err = {sizeof err, 0, {0}};
            if (kt_expert_pool_create(&p, &pool, &err) != KT_STATUS_OK) {
                std::fprintf(stderr, "kt-expert-bench: %s\n", err.message);
                return 1;
            }
            const double t0 = now_seconds();
            for (int64_t e = 0; e < o.experts; e += chunk) {
                const int64_t n = std::min(chunk, o.experts - e);
                fill_random(fmt.source_type, gate.data(), gate_bytes * n, rng);
                fill_random(fmt.source_type, up.data(), gate_bytes * n, rng);
                fill_random(fmt.source_type, down.data(), down_bytes * n, rng);
                kt_expert_weights w = {sizeof w, fmt.source_type, fmt.source_type, fmt.source_type, gate.data(), up.data(), down.data()};
                if (kt_expert_pool_load_experts(pool, &w, static_cast<int32_t>(e), static_cast<int32_t>(n)) != KT_STATUS_OK) {
                    std::fprintf(stderr, "kt-expert-bench: %s\n", kt_expert_pool_last_error(pool));
                    return 1;
                }
            }
            load_s += now_seconds() - t0;
            kt_expert_pool_get_info(pool, &info);
            pools.push_back(pool);
            const double total_gib = static_cast<double>(info.weight_bytes) * static_cast<double>(pools.size()) / (1ull << 30);
            const double next_gib = total_gib + static_cast<double>(info.weight_bytes) / (1ull << 30);
            if (o.layers == 0 && total_gib >= 1.0) break;
            if (next_gib + staging_gib > max_gib) {
                if (o.layers > 0)
                    std::fprintf(stderr, "kt-expert-bench: %s: %zu of %d layers fit the memory budget of %.1f GiB\n",
                                 fmt.name, pools.size(), o.layers, max_gib);
                break;
            }
        }
        std::fprintf(stderr,
                     "# %s: %zu layer(s) of %.2f GiB packed (%s), loaded at %.0f MB/s of packed weights, %ld MiB in "
                     "transparent huge pages; %s\n",
                     fmt.name, pools.size(), static_cast<double>(info.weight_bytes) / (1ull << 30), info.weight_formats,
                     static_cast<double>(info.weight_bytes) * static_cast<double>(pools.size()) / load_s / 1e6,
                     anon_huge_mib(), info.description);

        for (int64_t T : o.tokens) {
            if (!first_case) {
                roof = measure();
                std::printf("# roofline before %s, %lld tokens: read %.1f GB/s; int8 %.0f GOP/s; bf16 %.0f GFLOP/s; load %s\n",
                            fmt.name, static_cast<long long>(T), roof.read_gbs, roof.int8_gops, roof.bf16_gflops,
                            read_first_line("/proc/loadavg").c_str());
            }
            first_case = false;
            std::vector<float> x(static_cast<size_t>(T * o.hidden)), y(x.size());
            std::mt19937_64 r(1234 + static_cast<uint64_t>(T));
            std::normal_distribution<float> normal(0.0f, 1.0f);
            for (float &v : x) v = normal(r);
            std::vector<int32_t> ids(static_cast<size_t>(T * o.top_k));
            std::vector<float> wts(ids.size(), 1.0f / static_cast<float>(o.top_k));
            std::vector<double> times;
            std::vector<int64_t> uniques;
            std::vector<int32_t> perm(static_cast<size_t>(o.experts));
            // The pools' GEMM counts over the timed calls: which ISA ran them.
            auto snapshot = [&pools]() {
                std::vector<kt_expert_pool_info> infos(pools.size());
                for (size_t i = 0; i < pools.size(); ++i) {
                    infos[i].struct_size = sizeof infos[i];
                    kt_expert_pool_get_info(pools[i], &infos[i]);
                }
                return infos;
            };
            std::vector<kt_expert_pool_info> counted_from;
            for (int rep = 0; rep < o.warmup + o.reps; ++rep) {
                if (rep == o.warmup) counted_from = snapshot();
                // Uniform routing: top-k distinct experts per token.
                std::vector<uint8_t> used(static_cast<size_t>(o.experts), 0);
                for (int64_t t = 0; t < T; ++t) {
                    for (int32_t e = 0; e < o.experts; ++e) perm[static_cast<size_t>(e)] = e;
                    for (int j = 0; j < o.top_k; ++j) {
                        const size_t pick = static_cast<size_t>(j) + r() % static_cast<size_t>(o.experts - j);
                        std::swap(perm[static_cast<size_t>(j)], perm[pick]);
                        ids[static_cast<size_t>(t * o.top_k + j)] = perm[static_cast<size_t>(j)];
                        used[static_cast<size_t>(perm[static_cast<size_t>(j)])] = 1;
                    }
                }
                kt_expert_forward a;
                kt_expert_forward_init(&a);
                a.n_tokens = static_cast<int32_t>(T);
                a.top_k = o.top_k;
                a.input = x.data();
                a.expert_ids = ids.data();
                a.expert_weights = wts.data();
                a.output = y.data();
                kt_expert_pool *pool = pools[static_cast<size_t>(rep) % pools.size()];
                const double t0 = o.cpu_time ? cpu_seconds() : now_seconds();
                if (kt_expert_pool_forward(pool, &a) != KT_STATUS_OK) {
                    std::fprintf(stderr, "kt-expert-bench: %s\n", kt_expert_pool_last_error(pool));
                    return 1;
                }
                const double dt = o.cpu_time ? (cpu_seconds() - t0) / threads : now_seconds() - t0;
                if (rep >= o.warmup) {
                    times.push_back(dt);
                    int64_t u = 0;
                    for (uint8_t b : used) u += b;
                    uniques.push_back(u);
                }
            }
            // And again after the case: its fractions use the larger of each figure, what the machine showed it can
            // do around the case, so that a probe taken in a slow moment of a shared host does not inflate them.
            const Roof after = measure();
            std::printf("# roofline after %s, %lld tokens: read %.1f GB/s; int8 %.0f GOP/s; bf16 %.0f GFLOP/s; load %s\n",
                        fmt.name, static_cast<long long>(T), after.read_gbs, after.int8_gops, after.bf16_gflops,
                        read_first_line("/proc/loadavg").c_str());
            roof.read_gbs = std::max(roof.read_gbs, after.read_gbs);
            roof.int8_gops = std::max(roof.int8_gops, after.int8_gops);
            roof.bf16_gflops = std::max(roof.bf16_gflops, after.bf16_gflops);
            roof.amx_int8_gops = std::max(roof.amx_int8_gops, after.amx_int8_gops);
            roof.amx_bf16_gflops = std::max(roof.amx_bf16_gflops, after.amx_bf16_gflops);
            std::vector<double> sorted = times;
            std::sort(sorted.begin(), sorted.end());
            const double med = sorted[sorted.size() / 2], best = sorted.front();
            double mean_unique = 0;
            for (int64_t u : uniques) mean_unique += static_cast<double>(u);
            mean_unique /= static_cast<double>(uniques.size());
            const double bytes = mean_unique * static_cast<double>(info.expert_bytes) +
                                 static_cast<double>(T * o.hidden) * 8.0;  // + fp32 input and output
            const double ops = 6.0 * static_cast<double>(o.hidden) * static_cast<double>(o.inter) *
                               static_cast<double>(T) * o.top_k;
            const std::vector<kt_expert_pool_info> counted_to = snapshot();
            Counts counts;
            for (size_t i = 0; i < pools.size(); ++i) {
                const Counts c = counts_between(counted_from[i], counted_to[i]);
                for (int l = 0; l < 4; ++l) {
                    counts.int8_macs[l] += c.int8_macs[l];
                    counts.bf16_macs[l] += c.bf16_macs[l];
                }
                counts.fallbacks += c.fallbacks;
            }
            std::string ran_on;
            const double s_per_op = seconds_per_op(counts, roof, &ran_on);
            const double gbs = bytes / med / 1e9, gops = ops / med / 1e9;
            const double peak = s_per_op > 0 ? 1e-9 / s_per_op : 0;  // GOP/s of the ISAs that ran the call
            const double bw_frac = roof.read_gbs > 0 ? gbs / roof.read_gbs : 0, peak_frac = peak > 0 ? gops / peak : 0;
            const double bound_s = std::max(roof.read_gbs > 0 ? bytes / (roof.read_gbs * 1e9) : 0.0, ops * s_per_op);
            const double attainable = bound_s > 0 ? ops / bound_s / 1e9 : 0;  // GOP/s
            const double att_frac = bound_s > 0 ? bound_s / med : 0;
            if (o.csv)
                std::printf("%s,%s,%lld,%d,%lld,%lld,%lld,%d,%.2f,%.2f,%.1f,%.3f,%.3f,%s,%.3f,%.3f,%.1f,%zu,%.1f,%.0f,%.0f,"
                            "%.0f,%.3f,\"%s\",%.0f,%.0f,\"%s\"\n",
                            fmt.name, kt_isa_name(info.isa), static_cast<long long>(o.experts), o.top_k,
                            static_cast<long long>(o.hidden), static_cast<long long>(o.inter), static_cast<long long>(T),
                            threads, static_cast<double>(T) / med, gbs, gops, bw_frac, peak_frac, info.kernels,
                            med * 1e3, best * 1e3, mean_unique, pools.size(), roof.read_gbs, roof.int8_gops,
                            roof.bf16_gflops, attainable, att_frac, info.weight_formats, roof.amx_int8_gops,
                            roof.amx_bf16_gflops, ran_on.c_str());
            else
                std::printf("%-7s %6lld %8.3f %10.1f %9.2f %9.1f %6.1f%% %6.1f%% %6.1f%% %9.1f %8zu  %s\n", fmt.name,
                            static_cast<long long>(T), med * 1e3, static_cast<double>(T) / med, gbs, gops, 100 * bw_frac,
                            100 * peak_frac, 100 * att_frac, mean_unique, pools.size(), ran_on.c_str());
            std::fflush(stdout);
        }
        for (kt_expert_pool *pool : pools) kt_expert_pool_free(pool);
    }
    std::printf("# load average after: %s\n", read_first_line("/proc/loadavg").c_str());
    return 0;
}
