// kt-synth: write a GGUF model with random weights (fixed seed) for any architecture kt runs, at any size and
// weight type, so tests and benchmarks have realistic models without a download.
//
//   kt-synth -o OUT.gguf --preset qwen3-30b-a3b --layers 8 --type q4_k_m
//   kt-synth -o OUT.gguf --preset gpt-oss-120b --layers 4            (experts MXFP4, the rest Q8_0, as released)
//   kt-synth -o OUT.gguf --preset deepseek-v3 --layers 4 --legacy-kv-b   (the pre-MLA-split attn_kv_b convention)
//   kt-synth -o OUT.gguf --arch qwen3 --hidden 1024 --layers 4 --heads 16 --heads-kv 8 --ff 3072 --type q8_0
//
// The tensor list comes from kt itself (kt_gguf_writer_expected_tensors: the architecture's own table for these
// hyperparameters), so a synthetic model always has exactly what the runner expects. Weights are N(0, σ²) with
// σ = 1/√fan_in for projections and experts, 2/√hidden for the router, 1 for token_embd; norm weights 1 + 0.1·N;
// biases 0.1·N. To keep big models quick to make, each tensor's rows are drawn (seeded) from a pool of --pool-rows
// distinct random rows quantized once; a tensor with no more rows than that is entirely distinct. The weights'
// statistics are those of independent rows; only exact repeats between rows distinguish the result from a fully
// random model, which matters to nothing but compression.
//
// --type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4, and the
// grid formats iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s (every matrix in that type; kt cannot quantize to
// the grid formats, so their rows are random bits scaled to the Gaussian's RMS), q4_k_m (llama-quantize's Q4_K_M mix as
// far as kt-synth reproduces it: see choose_type) or mxfp4_moe (llama-quantize's MXFP4_MOE: experts MXFP4, every other
// matrix Q8_0; gpt-oss's default). Norms, biases, attention sinks and the router stay F32, as llama-quantize keeps
// them. A row length the type cannot hold falls back as llama-quantize does (Q4_K, Q5_K, Q6_K to Q5_0, Q5_1, Q8_0;
// Q2_K, Q3_K, IQ4_XS and the grid formats to IQ4_NL; then F16).
// Presets of families with optional tensors write what the released models have: GLM's attention biases (and
// q/k norms for GLM-4.5/4.6), gpt-oss's biases and sinks. GLM's NextN block is counted in block_count and
// nextn_predict_layers as in the released files, but its tensors (which kt skips) are not written.
// --vocab-from FILE copies the tokenizer.* metadata of another GGUF (its vocabulary size wins).
#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "kt.h"

namespace {

struct HParams {
    std::string arch = "qwen3moe";
    int64_t layers = 2, hidden = 256, heads = 4, heads_kv = 2, head_dim = 64, ff = 768;
    int64_t experts = 0, experts_used = 0, expert_ff = 256, shared_ff = 0, vocab = 1024, ctx = 4096;
    double rope_base = 1e6, eps = 1e-6;
    bool tied = false;
    // deepseek2 (MLA): head_dim is qk_nope + qk_rope there
    int64_t q_lora = 0, kv_lora = 0, rope_dims = 0, v_head = 0, dense_lead = 0, shared_experts = 0;
    int64_t groups = 1, groups_used = 1;
    bool sigmoid = false, weights_norm = false;
    double weights_scale = 1.0, yarn_factor = 0.0, yarn_log_mul = 0.0;
    int64_t yarn_orig_ctx = 4096;
    bool legacy_kv_b = false;      // deepseek2: one attn_kv_b per layer instead of attn_k_b / attn_v_b
    bool biases = false;           // write the optional attention biases (glm4moe)
    bool qk_norm = false;          // write the optional per-head q/k norms (glm4moe)
    int64_t nextn = 0;             // glm4moe: NextN blocks counted after the computed layers
    int64_t sliding_window = 0;    // gpt-oss
};

struct Preset {
    const char *name;
    HParams hp;
    const char *type = "q4_k_m";  // the default --type
};

// Published configurations (layer count included; override it with --layers).
const Preset kPresets[] = {
    {"qwen3-30b-a3b", {"qwen3moe", 48, 2048, 32, 4, 128, 6144, 128, 8, 768, 0, 151936, 40960, 1e6, 1e-6, false}},
    {"qwen3-8b", {"qwen3", 36, 4096, 32, 8, 128, 12288, 0, 0, 0, 0, 151936, 40960, 1e6, 1e-6, false}},
    {"qwen2.5-7b", {"qwen2", 28, 3584, 28, 4, 128, 18944, 0, 0, 0, 0, 152064, 32768, 1e6, 1e-6, false}},
    {"qwen1.5-moe-a2.7b", {"qwen2moe", 24, 2048, 16, 16, 128, 5632, 60, 4, 1408, 5632, 151936, 8192, 1e6, 1e-6, false}},
    {"llama3-8b", {"llama", 32, 4096, 32, 8, 128, 14336, 0, 0, 0, 0, 128256, 8192, 5e5, 1e-5, false}},
    {"mixtral-8x7b", {"llama", 32, 4096, 32, 8, 128, 14336, 8, 2, 14336, 0, 32000, 32768, 1e6, 1e-5, false}},
    {"deepseek-v2-lite", {"deepseek2", 27, 2048, 16, 1, 192, 10944, 64, 6, 1408, 0, 102400, 163840, 1e4, 1e-6, false,
                          0, 512, 64, 128, 1, 2, 1, 1, false, false, 1.0, 40.0, 0.0707, 4096}},
    {"deepseek-v3", {"deepseek2", 61, 7168, 128, 1, 192, 18432, 256, 8, 2048, 0, 129280, 163840, 1e4, 1e-6, false,
                     1536, 512, 64, 128, 3, 1, 8, 4, true, true, 2.5, 40.0, 0.1, 4096}},
    // Kimi-K2: DeepSeek-V3's graph with 384 experts, one expert group, 64 heads, rope base 50000, YaRN factor 32.
    {"kimi-k2", {.arch = "deepseek2", .layers = 61, .hidden = 7168, .heads = 64, .heads_kv = 1, .head_dim = 192,
                 .ff = 18432, .experts = 384, .experts_used = 8, .expert_ff = 2048, .vocab = 163840, .ctx = 131072,
                 .rope_base = 50000, .eps = 1e-6, .q_lora = 1536, .kv_lora = 512, .rope_dims = 64, .v_head = 128,
                 .dense_lead = 1, .shared_experts = 1, .sigmoid = true, .weights_norm = true, .weights_scale = 2.827,
                 .yarn_factor = 32.0, .yarn_log_mul = 0.1}},
    // GLM-4.5-Air and GLM-4.6: partial RoPE over half of each 128-wide head, attention biases, one NextN block.
    {"glm-4.5-air", {.arch = "glm4moe", .layers = 46, .hidden = 4096, .heads = 96, .heads_kv = 8, .head_dim = 128,
                     .ff = 10944, .experts = 128, .experts_used = 8, .expert_ff = 1408, .vocab = 151552, .ctx = 131072,
                     .rope_base = 1e6, .eps = 1e-5, .rope_dims = 64, .dense_lead = 1, .shared_experts = 1,
                     .sigmoid = true, .weights_norm = true, .weights_scale = 1.0, .biases = true, .nextn = 1}},
    {"glm-4.6", {.arch = "glm4moe", .layers = 92, .hidden = 5120, .heads = 96, .heads_kv = 8, .head_dim = 128,
                 .ff = 12288, .experts = 160, .experts_used = 8, .expert_ff = 1536, .vocab = 151552, .ctx = 202752,
                 .rope_base = 1e6, .eps = 1e-5, .rope_dims = 64, .dense_lead = 3, .shared_experts = 1, .sigmoid = true,
                 .weights_norm = true, .weights_scale = 2.5, .biases = true, .qk_norm = true, .nextn = 1}},
    // gpt-oss: 64-wide heads, every other layer a 128-position sliding window, YaRN factor 32 from 4096.
    {"gpt-oss-20b", {.arch = "gpt-oss", .layers = 24, .hidden = 2880, .heads = 64, .heads_kv = 8, .head_dim = 64,
                     .ff = 2880, .experts = 32, .experts_used = 4, .expert_ff = 2880, .vocab = 201088, .ctx = 131072,
                     .rope_base = 150000, .eps = 1e-5, .yarn_factor = 32.0, .sliding_window = 128}, "mxfp4_moe"},
    {"gpt-oss-120b", {.arch = "gpt-oss", .layers = 36, .hidden = 2880, .heads = 64, .heads_kv = 8, .head_dim = 64,
                      .ff = 2880, .experts = 128, .experts_used = 4, .expert_ff = 2880, .vocab = 201088, .ctx = 131072,
                      .rope_base = 150000, .eps = 1e-5, .yarn_factor = 32.0, .sliding_window = 128}, "mxfp4_moe"},
};

int usage(const char *message = nullptr) {
    if (message) std::fprintf(stderr, "kt-synth: %s\n\n", message);
    std::fprintf(stderr,
                 "usage: kt-synth -o OUT.gguf [--preset NAME | --arch ARCH] [options]\n"
                 "  --preset NAME      qwen3-30b-a3b, qwen3-8b, qwen2.5-7b, qwen1.5-moe-a2.7b, llama3-8b, mixtral-8x7b,\n"
                 "                     deepseek-v2-lite, deepseek-v3, kimi-k2, glm-4.5-air, glm-4.6, gpt-oss-20b,\n"
                 "                     gpt-oss-120b\n"
                 "  --arch ARCH        llama, qwen2, qwen3, qwen2moe, qwen3moe, deepseek2, glm4moe, gpt-oss\n"
                 "  --layers N  --hidden N  --heads N  --heads-kv N  --head-dim N  --ff N\n"
                 "  --experts N  --experts-used N  --expert-ff N  --shared-ff N  --vocab N  --ctx N\n"
                 "  --rope-base F  --eps F  --tied | --untied (output head shares token_embd)\n"
                 "  deepseek2: --q-lora N (0: lite)  --kv-lora N  --rope-dims N  --v-head N  --dense-lead N\n"
                 "             --shared-experts N  --groups N  --groups-used N  (--head-dim is qk_nope + rope dims)\n"
                 "             --legacy-kv-b (one attn_kv_b per layer, as files converted before the MLA split)\n"
                 "  glm4moe:   --rope-dims N  --dense-lead N  --shared-experts N  --nextn N  --biases  --qk-norm\n"
                 "  gpt-oss:   --sliding-window N\n"
                 "  --type T           f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4,\n"
                 "                     iq1_s iq1_m iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s (random, at a Gaussian's RMS),\n"
                 "                     q4_k_m (default) or mxfp4_moe (experts MXFP4, the rest Q8_0; gpt-oss's default)\n"
                 "  --seed N           (default 1)\n"
                 "  --pool-rows N      distinct random rows per tensor (default 4096; 0: every row distinct)\n"
                 "  --vocab-from FILE  copy tokenizer.* metadata from another GGUF\n");
    return 2;
}

// ---- types ----------------------------------------------------------------------------------------------------

struct TypeName {
    const char *name;
    int32_t type;
    int32_t file_type;  // general.file_type (llama_ftype) of a model mostly in this type
};

const TypeName kTypes[] = {
    {"f32", KT_TYPE_F32, 0},       {"f16", KT_TYPE_F16, 1},       {"bf16", KT_TYPE_BF16, 32},
    {"q8_0", KT_TYPE_Q8_0, 7},     {"q4_0", KT_TYPE_Q4_0, 2},     {"q4_1", KT_TYPE_Q4_1, 3},
    {"q5_0", KT_TYPE_Q5_0, 8},     {"q5_1", KT_TYPE_Q5_1, 9},     {"q2_k", KT_TYPE_Q2_K, 10},
    {"q3_k", KT_TYPE_Q3_K, 12},    {"q4_k", KT_TYPE_Q4_K, 15},    {"q5_k", KT_TYPE_Q5_K, 17},
    {"q6_k", KT_TYPE_Q6_K, 18},    {"iq4_nl", KT_TYPE_IQ4_NL, 25}, {"iq4_xs", KT_TYPE_IQ4_XS, 30},
    {"mxfp4", KT_TYPE_MXFP4, 38},
    // The grid formats: random rows (below), since kt has no quantizer for them.
    {"iq2_xxs", KT_TYPE_IQ2_XXS, 19}, {"iq2_xs", KT_TYPE_IQ2_XS, 20}, {"iq2_s", KT_TYPE_IQ2_S, 28},
    {"iq3_xxs", KT_TYPE_IQ3_XXS, 23}, {"iq3_s", KT_TYPE_IQ3_S, 26},   {"iq1_s", KT_TYPE_IQ1_S, 24},
    {"iq1_m", KT_TYPE_IQ1_M, 31},
};
constexpr int32_t kMixQ4KM = -1;
constexpr int32_t kFileTypeQ4KM = 15;
constexpr int32_t kMixMxfp4Moe = -3;
constexpr int32_t kFileTypeMxfp4Moe = 38;

bool has(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

// The type a row of `k` elements can be stored in: `type` itself, or llama-quantize's fallback.
int32_t fit(int32_t type, int64_t k) {
    if (k % kt_type_block_size(type) == 0) return type;
    switch (type) {
        case KT_TYPE_Q2_K: case KT_TYPE_Q3_K: case KT_TYPE_IQ4_XS:
        case KT_TYPE_IQ2_XXS: case KT_TYPE_IQ2_XS: case KT_TYPE_IQ2_S: case KT_TYPE_IQ3_XXS: case KT_TYPE_IQ3_S:
        case KT_TYPE_IQ1_S: case KT_TYPE_IQ1_M: type = KT_TYPE_IQ4_NL; break;
        case KT_TYPE_Q4_K: type = KT_TYPE_Q5_0; break;
        case KT_TYPE_Q5_K: type = KT_TYPE_Q5_1; break;
        case KT_TYPE_Q6_K: type = KT_TYPE_Q8_0; break;
        default: type = KT_TYPE_F16; break;
    }
    return k % kt_type_block_size(type) == 0 ? type : KT_TYPE_F16;
}

// llama-quantize's extra bits for some layers' attn_v / ffn_down under Q4_K_M: the first and last eighth of the
// layers and every third one in between.
bool use_more_bits(int64_t layer, int64_t n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

int64_t layer_of(const std::string &name) {
    return name.rfind("blk.", 0) == 0 ? std::strtoll(name.c_str() + 4, nullptr, 10) : -1;
}

int32_t choose_type(int32_t mix, const kt_tensor_spec &spec, const HParams &hp) {
    const std::string name = spec.name;
    if (spec.role == KT_TENSOR_ROLE_VECTOR || has(name, "ffn_gate_inp")) return KT_TYPE_F32;
    if (mix == kMixMxfp4Moe) return fit(has(name, "_exps.") ? KT_TYPE_MXFP4 : KT_TYPE_Q8_0, spec.ne[0]);
    if (mix != kMixQ4KM) return fit(mix, spec.ne[0]);
    // Q4_K_M: Q4_K by default, Q6_K for the head and the "more bits" layers' attn_v / ffn_down, Q8_0 for attn_k
    // and attn_v and Q5_K for attn_output in models with 8 or more experts.
    int32_t type = KT_TYPE_Q4_K;
    const int64_t layer = layer_of(name);
    if (name == "output.weight") type = KT_TYPE_Q6_K;
    else if (has(name, "attn_k.") || has(name, "attn_v.")) {
        if (hp.experts >= 8) type = KT_TYPE_Q8_0;
        else if (has(name, "attn_v.") && use_more_bits(layer, hp.layers)) type = KT_TYPE_Q6_K;
    } else if (has(name, "attn_output.") && hp.experts >= 8) type = KT_TYPE_Q5_K;
    else if (has(name, "ffn_down") && use_more_bits(layer, hp.layers)) type = KT_TYPE_Q6_K;
    return fit(type, spec.ne[0]);
}

// ---- random rows ----------------------------------------------------------------------------------------------

uint64_t mix64(uint64_t x) {  // splitmix64: seeds and row picks
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t name_hash(const std::string &s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// One tensor's data source: `pool_rows` distinct rows, quantized, and how rows are picked from them.
struct TensorPlan {
    std::string name;
    int32_t type = KT_TYPE_F32;
    int32_t n_dims = 0;
    int64_t ne[KT_MAX_DIMS] = {1, 1, 1, 1};
    int64_t rows = 0, pool_rows = 0;
    uint64_t row_bytes = 0, seed = 0;
    float mean = 0.0f, sigma = 1.0f;
    std::vector<uint8_t> pool;  // filled just before the tensor is written
};

// Sets every block's f16 scale: IQ1_M keeps it in the top nibbles of its four u16 scale words (bytes 48-55), the
// other grid formats in their first two bytes.
void set_block_scales(int32_t type, uint8_t *row, uint64_t row_bytes, uint16_t d) {
    const uint64_t block_bytes = static_cast<uint64_t>(kt_type_block_bytes(type));
    for (uint8_t *block = row; block < row + row_bytes; block += block_bytes) {
        if (type == KT_TYPE_IQ1_M) {
            for (int k = 0; k < 4; ++k)
                block[49 + 2 * k] = static_cast<uint8_t>((block[49 + 2 * k] & 0x0F) | (((d >> (4 * k)) & 0x0F) << 4));
        } else {
            std::memcpy(block, &d, sizeof d);
        }
    }
}

// A row of a format kt cannot quantize to (the IQ1-IQ3 grid formats): random bits, every block's scale set so that
// the row's RMS is the plan's sigma. To a kernel such a row is as good as a quantized Gaussian one.
bool random_bits_row(const TensorPlan &t, std::mt19937_64 &rng, uint8_t *row) {
    for (uint64_t i = 0; i < t.row_bytes; ++i) row[i] = static_cast<uint8_t>(rng());
    const uint16_t kOne = 0x3C00;  // f16 1.0
    set_block_scales(t.type, row, t.row_bytes, kOne);
    std::vector<float> values(static_cast<size_t>(t.ne[0]));
    if (kt_dequantize(t.type, row, t.row_bytes, 1, t.ne[0], values.data(), values.size()) != KT_STATUS_OK) return false;
    double squares = 0;
    for (float v : values) squares += static_cast<double>(v) * v;
    const double rms = std::sqrt(squares / static_cast<double>(values.size()));
    const float scale = rms > 0 ? t.sigma / static_cast<float>(rms) : 0.0f;
    uint16_t d = 0;
    if (kt_quantize(KT_TYPE_F16, &scale, 1, 1, &d, sizeof d, nullptr) != KT_STATUS_OK) return false;
    set_block_scales(t.type, row, t.row_bytes, d);
    return true;
}

// Generates and quantizes the pool, splitting rows over threads (kt_quantize is thread-safe).
bool make_pool(TensorPlan &t) {
    t.pool.assign(static_cast<size_t>(t.row_bytes * static_cast<uint64_t>(t.pool_rows)), 0);
    const int64_t n_threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), t.pool_rows / 64 + 1));
    std::vector<int> ok(static_cast<size_t>(n_threads), 1);
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < n_threads; ++w) {
        threads.emplace_back([&, w]() {
            const int64_t r0 = t.pool_rows * w / n_threads, r1 = t.pool_rows * (w + 1) / n_threads;
            std::vector<float> row(static_cast<size_t>(t.ne[0]));
            for (int64_t r = r0; r < r1; ++r) {
                std::mt19937_64 rng(mix64(t.seed ^ mix64(static_cast<uint64_t>(r))));
                if (!kt_type_can_quantize(t.type)) {
                    if (!random_bits_row(t, rng, t.pool.data() + static_cast<uint64_t>(r) * t.row_bytes))
                        ok[static_cast<size_t>(w)] = 0;
                    continue;
                }
                std::normal_distribution<float> normal(t.mean, t.sigma);
                for (float &x : row) x = normal(rng);
                if (kt_quantize(t.type, row.data(), 1, t.ne[0], t.pool.data() + static_cast<uint64_t>(r) * t.row_bytes,
                                t.row_bytes, nullptr) != KT_STATUS_OK)
                    ok[static_cast<size_t>(w)] = 0;
            }
        });
    }
    for (std::thread &th : threads) th.join();
    return std::all_of(ok.begin(), ok.end(), [](int v) { return v != 0; });
}

struct Progress {
    uint64_t done = 0, total = 0;
    bool terminal = false;  // show a progress line (only on a terminal)
};

struct FillContext {
    TensorPlan *plan;
    Progress *progress;
};

int32_t fill_tensor(void *dst, uint64_t n_bytes, void *user_data) {
    auto *ctx = static_cast<FillContext *>(user_data);
    TensorPlan &t = *ctx->plan;
    if (!make_pool(t)) return 1;
    uint8_t *out = static_cast<uint8_t *>(dst);
    if (n_bytes != t.row_bytes * static_cast<uint64_t>(t.rows)) return 1;
    for (int64_t r = 0; r < t.rows; ++r) {
        const int64_t pick = t.rows <= t.pool_rows
                                 ? r
                                 : static_cast<int64_t>(mix64(t.seed + static_cast<uint64_t>(r)) % static_cast<uint64_t>(t.pool_rows));
        std::memcpy(out + static_cast<uint64_t>(r) * t.row_bytes, t.pool.data() + static_cast<uint64_t>(pick) * t.row_bytes, t.row_bytes);
    }
    std::vector<uint8_t>().swap(t.pool);
    ctx->progress->done += n_bytes;
    if (ctx->progress->terminal)
        std::fprintf(stderr, "\rkt-synth: %6.1f%% %-40s", 100.0 * static_cast<double>(ctx->progress->done) / static_cast<double>(ctx->progress->total),
                     t.name.c_str());
    return 0;
}

struct Collector {
    std::vector<kt_tensor_spec> specs;
    std::vector<std::string> names;
};

int32_t collect(const kt_tensor_spec *spec, void *user_data) {
    auto *c = static_cast<Collector *>(user_data);
    c->specs.push_back(*spec);
    c->names.emplace_back(spec->name);
    return 0;
}

// ---- metadata -------------------------------------------------------------------------------------------------

bool check(kt_status s, kt_gguf_writer *w, const char *what) {
    if (s == KT_STATUS_OK) return true;
    std::fprintf(stderr, "kt-synth: %s: %s\n", what, w ? kt_gguf_writer_last_error(w) : kt_status_string(s));
    return false;
}

// Copies the tokenizer.* keys of `path`; sets *vocab to its token count.
bool copy_vocabulary(const std::string &path, kt_gguf_writer *w, int64_t *vocab) {
    kt_model *m = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_model_params mp;
    kt_model_params_init(&mp);
    mp.prefetch = 0;
    if (kt_model_load(path.c_str(), &mp, &m, &err) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-synth: %s\n", err.message);
        return false;
    }
    bool ok = true;
    for (int64_t i = 0; i < kt_model_meta_count(m) && ok; ++i) {
        const char *key = nullptr;
        int32_t type = 0, element = 0;
        kt_model_meta_key(m, i, &key);
        if (std::strncmp(key, "tokenizer.", 10) != 0) continue;
        kt_model_meta_type(m, key, &type, &element);
        if (type == KT_META_STRING) {
            const char *s = nullptr;
            uint64_t n = 0;
            kt_model_meta_get_string(m, key, &s, &n);
            ok = check(kt_gguf_writer_set_string(w, key, s, n), w, key);
        } else if (type == KT_META_ARRAY) {
            uint64_t n = 0;
            kt_model_meta_array_length(m, key, &n);
            if (std::string(key) == "tokenizer.ggml.tokens") *vocab = static_cast<int64_t>(n);
            if (element == KT_META_STRING) {
                std::vector<const char *> values(n);
                std::vector<uint64_t> lengths(n);
                for (uint64_t j = 0; j < n; ++j) kt_model_meta_array_get_string(m, key, j, &values[j], &lengths[j]);
                ok = check(kt_gguf_writer_set_array_string(w, key, values.data(), lengths.data(), n), w, key);
            } else if (element == KT_META_FLOAT32) {
                std::vector<float> values(n);
                for (uint64_t j = 0; j < n; ++j) {
                    double d = 0;
                    kt_model_meta_array_get_float(m, key, j, &d);
                    values[j] = static_cast<float>(d);
                }
                ok = check(kt_gguf_writer_set_array(w, key, KT_META_FLOAT32, values.data(), n), w, key);
            } else {
                std::vector<int32_t> values(n);
                for (uint64_t j = 0; j < n; ++j) {
                    int64_t v = 0;
                    kt_model_meta_array_get_int(m, key, j, &v);
                    values[j] = static_cast<int32_t>(v);
                }
                ok = check(kt_gguf_writer_set_array(w, key, KT_META_INT32, values.data(), n), w, key);
            }
        } else if (type == KT_META_BOOL) {
            int64_t v = 0;
            kt_model_meta_get_int(m, key, &v);
            ok = check(kt_gguf_writer_set_bool(w, key, v != 0), w, key);
        } else {
            int64_t v = 0;
            kt_model_meta_get_int(m, key, &v);
            ok = check(kt_gguf_writer_set_int(w, key, KT_META_UINT32, v), w, key);
        }
    }
    kt_model_free(m);
    return ok;
}

bool set_hparams(kt_gguf_writer *w, const HParams &hp, int32_t file_type, uint64_t seed, const std::string &label) {
    const std::string a = hp.arch + ".";
    auto u32 = [&](const std::string &key, int64_t v) {
        return check(kt_gguf_writer_set_int(w, key.c_str(), KT_META_UINT32, v), w, key.c_str());
    };
    auto f32 = [&](const std::string &key, double v) {
        return check(kt_gguf_writer_set_float(w, key.c_str(), KT_META_FLOAT32, v), w, key.c_str());
    };
    const std::string desc = "random weights, seed " + std::to_string(seed) + "; NOT a trained model (kt-synth)";
    bool ok = check(kt_gguf_writer_set_string(w, "general.architecture", hp.arch.c_str(), hp.arch.size()), w, "arch") &&
              check(kt_gguf_writer_set_string(w, "general.name", label.c_str(), label.size()), w, "name") &&
              check(kt_gguf_writer_set_string(w, "general.description", desc.c_str(), desc.size()), w, "description") &&
              u32("general.file_type", file_type) && u32(a + "context_length", hp.ctx) &&
              u32(a + "embedding_length", hp.hidden) && u32(a + "block_count", hp.layers + hp.nextn) &&
              u32(a + "attention.head_count", hp.heads) && f32(a + "rope.freq_base", hp.rope_base) &&
              f32(a + "attention.layer_norm_rms_epsilon", hp.eps) && u32(a + "vocab_size", hp.vocab);
    // The routed-expert keys deepseek2 and glm4moe share.
    auto routed = [&]() {
        return u32(a + "leading_dense_block_count", hp.dense_lead) && u32(a + "expert_feed_forward_length", hp.expert_ff) &&
               u32(a + "expert_shared_count", hp.shared_experts) && f32(a + "expert_weights_scale", hp.weights_scale) &&
               check(kt_gguf_writer_set_bool(w, (a + "expert_weights_norm").c_str(), hp.weights_norm), w, "norm") &&
               u32(a + "expert_gating_func", hp.sigmoid ? 2 : 1) && u32(a + "expert_group_count", hp.groups) &&
               u32(a + "expert_group_used_count", hp.groups_used) && u32(a + "expert_count", hp.experts) &&
               u32(a + "expert_used_count", hp.experts_used) && u32(a + "feed_forward_length", hp.ff);
    };
    if (ok && hp.yarn_factor > 0) {
        const char *yarn = "yarn";
        ok = check(kt_gguf_writer_set_string(w, (a + "rope.scaling.type").c_str(), yarn, 4), w, "rope") &&
             f32(a + "rope.scaling.factor", hp.yarn_factor) &&
             u32(a + "rope.scaling.original_context_length", hp.yarn_orig_ctx) &&
             (hp.yarn_log_mul == 0 || f32(a + "rope.scaling.yarn_log_multiplier", hp.yarn_log_mul));
    }
    if (ok && hp.arch == "deepseek2") {
        if (hp.legacy_kv_b) {
            // Multi-head as converters wrote it before the MLA split: every head has its key and value.
            ok = u32(a + "attention.head_count_kv", hp.heads) && u32(a + "attention.key_length", hp.head_dim) &&
                 u32(a + "attention.value_length", hp.v_head);
        } else {
            // MLA served as MQA: one KV head holding the latent and the shared RoPE key.
            ok = u32(a + "attention.head_count_kv", 1) && u32(a + "attention.key_length", hp.kv_lora + hp.rope_dims) &&
                 u32(a + "attention.value_length", hp.kv_lora) && u32(a + "attention.key_length_mla", hp.head_dim) &&
                 u32(a + "attention.value_length_mla", hp.v_head);
        }
        return ok && u32(a + "rope.dimension_count", hp.rope_dims) && u32(a + "attention.kv_lora_rank", hp.kv_lora) &&
               (hp.q_lora == 0 || u32(a + "attention.q_lora_rank", hp.q_lora)) && routed();
    }
    if (ok && hp.arch == "glm4moe") {
        ok = u32(a + "nextn_predict_layers", hp.nextn) && routed() && u32(a + "rope.dimension_count", hp.rope_dims);
    } else if (ok) {
        ok = u32(a + "rope.dimension_count", hp.head_dim);
    }
    if (ok && hp.arch == "gpt-oss")
        ok = u32(a + "attention.sliding_window", hp.sliding_window) && u32(a + "expert_count", hp.experts) &&
             u32(a + "expert_used_count", hp.experts_used) && u32(a + "expert_feed_forward_length", hp.expert_ff) &&
             u32(a + "feed_forward_length", hp.ff);
    ok = ok && u32(a + "attention.head_count_kv", hp.heads_kv) && u32(a + "attention.key_length", hp.head_dim) &&
         u32(a + "attention.value_length", hp.head_dim);
    if (hp.arch == "glm4moe" || hp.arch == "gpt-oss") return ok;
    if (ok && hp.ff > 0) ok = u32(a + "feed_forward_length", hp.ff);
    if (ok && hp.experts > 0) {
        ok = u32(a + "expert_count", hp.experts) && u32(a + "expert_used_count", hp.experts_used);
        if (ok && hp.arch != "llama") ok = u32(a + "expert_feed_forward_length", hp.expert_ff);
        if (ok && hp.shared_ff > 0) ok = u32(a + "expert_shared_feed_forward_length", hp.shared_ff);
    }
    return ok;
}

}  // namespace

int main(int argc, char **argv) {
    HParams hp;
    std::string out, type_name = "q4_k_m", vocab_from, label = "kt-synth";
    uint64_t seed = 1;
    int64_t pool_rows = 4096;
    bool arch_set = false, type_set = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return usage();
        if (a == "--tied" || a == "--untied") {
            hp.tied = a == "--tied";
            continue;
        }
        if (a == "--legacy-kv-b" || a == "--biases" || a == "--qk-norm") {
            (a == "--legacy-kv-b" ? hp.legacy_kv_b : a == "--biases" ? hp.biases : hp.qk_norm) = true;
            continue;
        }
        if (i + 1 >= argc) return usage(("missing value for " + a).c_str());
        const std::string v = argv[++i];
        char *end = nullptr;
        errno = 0;
        const double num = std::strtod(v.c_str(), &end);
        const bool numeric = errno == 0 && end != v.c_str() && *end == '\0';
        const int64_t n = numeric ? static_cast<int64_t>(num) : -1;
        if (a == "-o" || a == "--output") out = v;
        else if (a == "--preset") {
            const Preset *p = nullptr;
            for (const Preset &candidate : kPresets)
                if (v == candidate.name) p = &candidate;
            if (!p) return usage(("unknown preset " + v).c_str());
            if (arch_set) return usage("--preset must come before other model options");
            hp = p->hp;
            label = std::string("kt-synth ") + p->name;
            if (!type_set) type_name = p->type;
        } else if (a == "--arch") {
            hp.arch = v;
            arch_set = true;
        } else if (a == "--type") {
            type_name = v;
            type_set = true;
        }
        else if (a == "--vocab-from") vocab_from = v;
        else if (!numeric || num < 0) return usage(("bad value for " + a).c_str());
        else if (a == "--layers") hp.layers = n;
        else if (a == "--hidden") hp.hidden = n;
        else if (a == "--heads") hp.heads = n;
        else if (a == "--heads-kv") hp.heads_kv = n;
        else if (a == "--head-dim") hp.head_dim = n;
        else if (a == "--ff") hp.ff = n;
        else if (a == "--experts") hp.experts = n;
        else if (a == "--experts-used") hp.experts_used = n;
        else if (a == "--expert-ff") hp.expert_ff = n;
        else if (a == "--shared-ff") hp.shared_ff = n;
        else if (a == "--vocab") hp.vocab = n;
        else if (a == "--ctx") hp.ctx = n;
        else if (a == "--rope-base") hp.rope_base = num;
        else if (a == "--eps") hp.eps = num;
        else if (a == "--seed") seed = static_cast<uint64_t>(n);
        else if (a == "--q-lora") hp.q_lora = n;
        else if (a == "--kv-lora") hp.kv_lora = n;
        else if (a == "--rope-dims") hp.rope_dims = n;
        else if (a == "--v-head") hp.v_head = n;
        else if (a == "--dense-lead") hp.dense_lead = n;
        else if (a == "--shared-experts") hp.shared_experts = n;
        else if (a == "--groups") hp.groups = n;
        else if (a == "--groups-used") hp.groups_used = n;
        else if (a == "--nextn") hp.nextn = n;
        else if (a == "--sliding-window") hp.sliding_window = n;
        else if (a == "--pool-rows") pool_rows = n;
        else return usage(("unknown option " + a).c_str());
    }
    if (out.empty()) return usage("no output file (-o)");
    if (hp.arch == "deepseek2") {  // without a preset: small MLA dimensions
        if (hp.kv_lora == 0) hp.kv_lora = 64;
        if (hp.rope_dims == 0) hp.rope_dims = 16;
        if (hp.v_head == 0) hp.v_head = hp.head_dim / 2;
        if (hp.experts > 0 && hp.dense_lead == 0 && hp.layers > 1) hp.dense_lead = 1;
    }
    if (hp.arch == "glm4moe") {  // without a preset: GLM's partial RoPE over half of each head
        if (hp.rope_dims == 0) hp.rope_dims = hp.head_dim / 2;
        if (hp.experts > 0 && hp.dense_lead == 0 && hp.layers > 1) hp.dense_lead = 1;
        hp.sigmoid = true;
    }
    if (hp.arch == "gpt-oss" && hp.sliding_window == 0) hp.sliding_window = 128;
    if (hp.arch == "qwen2moe" || hp.arch == "qwen3moe" || hp.arch == "deepseek2" || hp.arch == "glm4moe" ||
        hp.arch == "gpt-oss") {  // MoE without a preset: 8 experts, 2 used
        if (hp.experts == 0) hp.experts = 8;
        if (hp.experts_used == 0) hp.experts_used = 2;
    }
    if (hp.experts > 0 && hp.experts_used == 0) hp.experts_used = std::min<int64_t>(2, hp.experts);
    if (hp.experts_used > hp.experts) hp.experts_used = hp.experts;
    // A preset cut to fewer layers keeps at least one MoE layer after its leading dense ones.
    if (hp.dense_lead >= hp.layers) hp.dense_lead = std::max<int64_t>(0, hp.layers - 1);
    if (hp.arch == "llama" && hp.experts > 0) hp.expert_ff = hp.ff;  // Mixtral's experts have the dense width
    int32_t mix = kMixQ4KM, file_type = kFileTypeQ4KM;
    if (type_name == "mxfp4_moe") {
        mix = kMixMxfp4Moe;
        file_type = kFileTypeMxfp4Moe;
    } else if (type_name != "q4_k_m") {
        mix = -2;
        for (const TypeName &t : kTypes)
            if (type_name == t.name) mix = t.type, file_type = t.file_type;
        if (mix == -2) return usage(("unknown type " + type_name).c_str());
    }

    kt_gguf_writer *w = nullptr;
    if (kt_gguf_writer_create(0, &w) != KT_STATUS_OK) return 1;
    int status = 0;
    if (!vocab_from.empty() && !copy_vocabulary(vocab_from, w, &hp.vocab)) status = 1;
    if (status == 0 && !set_hparams(w, hp, file_type, seed, label)) status = 1;
    Collector tensors;
    if (status == 0 && !check(kt_gguf_writer_expected_tensors(w, collect, &tensors), w, "tensors")) status = 1;

    // Plan every tensor: which ones, their types and initialisation.
    std::vector<TensorPlan> plans;
    uint64_t total = 0;
    for (size_t i = 0; i < tensors.specs.size() && status == 0; ++i) {
        kt_tensor_spec spec = tensors.specs[i];
        const std::string name = tensors.names[i];
        spec.name = name.c_str();
        // Optional tensors: the untied output head unless --tied, attention biases with --biases, q/k norms with
        // --qk-norm; rope_freqs and the like are left out.
        const bool wanted = (name == "output.weight" && !hp.tied) || (hp.biases && has(name, "attn_") && has(name, ".bias")) ||
                            (hp.qk_norm && (has(name, "attn_q_norm") || has(name, "attn_k_norm")));
        if (spec.optional && !wanted) continue;
        TensorPlan t;
        t.name = name;
        t.type = choose_type(mix, spec, hp);
        t.n_dims = spec.n_dims;
        std::copy(spec.ne, spec.ne + KT_MAX_DIMS, t.ne);
        t.rows = t.ne[1] * t.ne[2] * t.ne[3];
        t.pool_rows = pool_rows > 0 ? std::min(pool_rows, t.rows) : t.rows;
        t.row_bytes = static_cast<uint64_t>(t.ne[0] / kt_type_block_size(t.type) * kt_type_block_bytes(t.type));
        t.seed = mix64(seed ^ name_hash(name));
        const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        if (spec.role == KT_TENSOR_ROLE_VECTOR) {
            t.mean = bias || name.find("shexp") != std::string::npos ? 0.0f : 1.0f;
            t.sigma = bias ? 0.1f : name.find("shexp") != std::string::npos ? 1.0f / std::sqrt(static_cast<float>(hp.hidden)) : 0.1f;
        } else if (spec.role == KT_TENSOR_ROLE_EMBEDDING) {
            t.sigma = 1.0f;
        } else if (has(name, "ffn_gate_inp")) {
            t.sigma = 2.0f / std::sqrt(static_cast<float>(hp.hidden));
        } else {
            t.sigma = 1.0f / std::sqrt(static_cast<float>(t.ne[0]));
        }
        total += t.row_bytes * static_cast<uint64_t>(t.rows);
        plans.push_back(std::move(t));
    }
    Progress progress;
    progress.total = total;
    progress.terminal = isatty(2) != 0;
    std::vector<FillContext> fills(plans.size());
    for (size_t i = 0; i < plans.size() && status == 0; ++i) {
        fills[i] = {&plans[i], &progress};
        if (!check(kt_gguf_writer_add_tensor_fill(w, plans[i].name.c_str(), plans[i].type, plans[i].n_dims, plans[i].ne,
                                                  fill_tensor, &fills[i]),
                   w, plans[i].name.c_str()))
            status = 1;
    }
    if (status == 0) {
        std::fprintf(stderr, "kt-synth: %s, %zu tensors, %.2f GiB\n", label.c_str(), plans.size(),
                     static_cast<double>(total) / (1 << 30));
        if (!check(kt_gguf_writer_write_file(w, out.c_str()), w, out.c_str())) status = 1;
        else std::fprintf(stderr, "%skt-synth: wrote %s%-40s\n", progress.terminal ? "\r" : "", out.c_str(), "");
    }
    kt_gguf_writer_free(w);
    return status;
}
