// Fuzz target: model files through everything that reads them, via kt.h: kt_model_load, kt_context_create (the
// architecture's hyperparameters and tensor table), kt_context_decode and _generate, and expert pools loaded from a
// layer. Byte-level mutations of a GGUF mostly break its header; here the input instead describes a model, so the
// fuzzer explores the space behind the reader:
//   byte 0        the architecture (llama, Mixtral-style llama, qwen2, qwen3, qwen2moe, qwen3moe, deepseek2) and
//                 its sizes, from small tables; above the architecture (byte / 7), for half of the inputs, a hybrid
//                 load on the CPU stand-in device (the placement, the dense FFNs and shared experts on the device,
//                 deferred experts, the prefill threshold's stream buffer, or a budget too small for them);
//   then ops      0-2: set a metadata key (from every key the families read) to a value of any GGUF type, before
//                 the tensor table is derived (floats, strings, flags) or after it (the file then contradicts its
//                 own tensors: sizes, counts, per-layer arrays); 3: drop a tensor; 4: add an unexpected tensor;
//                 5: patch a byte of the finished file; 6: the context's settings; 7: the tokens to decode;
//                 8: the expert pool's settings.
// The tiny model generator (tests/support/tiny_model.h) writes the file from the architecture's own tensor table.
// Any status is fine except an internal error, and every failure must name its cause.
#include <unistd.h>

#include <string>
#include <vector>

#include "fuzz_support.h"
#include "support/greedy.h"
#include "support/tiny_model.h"

namespace {

using kt::gguf::Value;
using kt::test::TinyModel;

const char *const kArchitectures[] = {"llama", "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "deepseek2"};

const char *const kKeys[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "attention.layer_norm_rms_epsilon",
    "rope.freq_base", "rope.dimension_count", "rope.scaling.type", "rope.scaling.factor", "rope.scale_linear",
    "rope.scaling.original_context_length", "rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow", "expert_count", "expert_used_count", "expert_feed_forward_length",
    "expert_shared_feed_forward_length", "vocab_size", "leading_dense_block_count", "attention.q_lora_rank",
    "attention.kv_lora_rank", "attention.key_length_mla", "attention.value_length_mla", "expert_shared_count",
    "expert_weights_scale", "expert_weights_norm", "expert_gating_func", "expert_group_count",
    "expert_group_used_count",
};

const char *const kTensors[] = {
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm", "ffn_norm", "ffn_gate",
    "ffn_up", "ffn_down", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_shexp",
    "ffn_up_shexp", "ffn_down_shexp", "ffn_gate_inp_shexp", "attn_q_a", "attn_q_a_norm", "attn_q_b",
    "attn_kv_a_mqa", "attn_kv_a_norm", "attn_k_b", "attn_v_b", "exp_probs_b",
};

const char *const kStrings[] = {"yarn", "linear", "none", "longrope", "", "llama", "qwen3moe", "deepseek2"};

std::string tensor_name(kt::fuzz::Bytes &in, int64_t n_layer) {
    const uint8_t which = in.u8();
    if (which % 16 == 0) return "token_embd.weight";
    if (which % 16 == 1) return "output_norm.weight";
    if (which % 16 == 2) return "output.weight";
    const std::string name = kTensors[in.below(sizeof kTensors / sizeof kTensors[0])];
    const std::string suffix = name == "exp_probs_b" ? ".bias" : (which & 0x80) ? ".bias" : ".weight";
    return "blk." + std::to_string(in.below(static_cast<uint32_t>(n_layer) + 1)) + "." + name + suffix;
}

Value value(kt::fuzz::Bytes &in, int64_t n_layer) {
    static const uint32_t kInts[] = {0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 64, 255, 4096, 65536, 1u << 24, 0xFFFFFFFFu};
    static const float kFloats[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-6f, 0.1f, 2.5f, 16.0f, 40.0f, 1e6f, 1e30f,
                                    __builtin_nanf(""), __builtin_inff(), -__builtin_inff(), -100.0f};
    switch (in.u8() % 9) {
        case 0: return Value::u32(kInts[in.below(sizeof kInts / sizeof kInts[0])]);
        case 1: return Value::u32(in.u32());
        case 2: return Value::i32(-static_cast<int32_t>(in.u8()) - 1);
        case 3: return Value::f32(kFloats[in.below(sizeof kFloats / sizeof kFloats[0])]);
        case 4: return Value::f32(in.f32());
        case 5: return Value::str(kStrings[in.below(sizeof kStrings / sizeof kStrings[0])]);
        case 6: return Value::boolean(in.u8() & 1);
        case 7: {  // a per-layer array, uniform or not
            std::vector<int32_t> v(static_cast<size_t>(in.below(static_cast<uint32_t>(n_layer) + 2)));
            const int32_t first = static_cast<int32_t>(in.u8());
            for (size_t i = 0; i < v.size(); ++i) v[i] = (in.u8() & 1) ? first : static_cast<int32_t>(in.u8());
            return Value::array_i32(v);
        }
        default: return Value::u64(in.u64());
    }
}

// The base: sizes a real small model could have, valid for its architecture.
TinyModel base(kt::fuzz::Bytes &in, const char *arch, bool moe) {
    TinyModel m;
    m.arch = arch;
    const uint8_t size = in.u8();
    m.n_layer = 1 + size % 3;
    m.n_vocab = 16 + (size >> 2) % 4 * 16;
    m.n_head = 2 << ((size >> 4) % 2);
    m.n_head_kv = (size & 0x40) ? m.n_head : m.n_head / 2;
    m.head_dim = 8;
    m.n_embd = 32;
    m.n_ff = 24;
    m.n_expert = moe ? 4 : 0;
    m.n_expert_used = 2;
    m.seed = size;
    m.max_elements = 1 << 20;  // sizes the metadata asks for are the point, 4 MB of random weights per input are not
    m.uniform_values = true;
    if (std::string(arch) == "deepseek2") {
        // MLA: a 16-wide latent plus 8 RoPE dims per key; queries of 8 + 8 per head; one dense leading layer.
        m.n_layer = 2;
        m.n_head_kv = 1;
        m.keys = {{"deepseek2.attention.key_length", Value::u32(24)},
                  {"deepseek2.attention.value_length", Value::u32(16)},
                  {"deepseek2.rope.dimension_count", Value::u32(8)},
                  {"deepseek2.attention.kv_lora_rank", Value::u32(16)},
                  {"deepseek2.attention.key_length_mla", Value::u32(16)},
                  {"deepseek2.attention.value_length_mla", Value::u32(8)},
                  {"deepseek2.leading_dense_block_count", Value::u32(1)},
                  {"deepseek2.expert_feed_forward_length", Value::u32(16)},
                  {"deepseek2.expert_shared_count", Value::u32(1)},
                  {"deepseek2.expert_weights_scale", Value::f32(2.5f)},
                  {"deepseek2.expert_weights_norm", Value::boolean(true)},
                  {"deepseek2.expert_gating_func", Value::u32(2)},
                  {"deepseek2.rope.scaling.type", Value::str("yarn")},
                  {"deepseek2.rope.scaling.factor", Value::f32(4.0f)},
                  {"deepseek2.rope.scaling.yarn_log_multiplier", Value::f32(0.1f)}};
        if (size & 0x80) m.keys.push_back({"deepseek2.attention.q_lora_rank", Value::u32(16)});
    }
    return m;
}

// The file each input is written to (kt_model_load takes a path), removed when the process ends.
struct TempFile {
    std::string path = "/tmp/kt-fuzz-model-" + std::to_string(getpid()) + ".gguf";
    ~TempFile() { unlink(path.c_str()); }
};

const std::string &temp_path() {
    static const TempFile file;
    return file.path;
}

bool write_file(const std::string &path, const std::vector<uint8_t> &bytes) {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    return std::fclose(f) == 0 && ok;
}

// KT_FUZZ_VERBOSE=1: how far each input got (for curating the corpus).
void trace(const char *stage, kt_status s, const char *message) {
    static const bool verbose = std::getenv("KT_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "  %s: %s %s\n", stage, kt_status_string(s), s == KT_STATUS_OK ? "" : message);
}

struct Settings {
    kt_context_params context;
    std::vector<int32_t> tokens = {1, 2, 3};
    int32_t pool_layer = 0, pool_format = KT_EXPERT_WEIGHTS_AS_SOURCE, pool_threads = 1, top_k = 2;
    std::vector<int32_t> expert_ids = {0, 1};
};

void run_context(kt_model *model, const Settings &s) {
    kt_context *ctx = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status created = kt_context_create(model, &s.context, &ctx, &err);
    trace("context", created, err.message);
    kt::fuzz::expect_clean(created, err.message, "kt_context_create");
    if (!ctx) return;
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const kt_status decoded = kt_context_decode(ctx, s.tokens.data(), n, n % 2 ? KT_LOGITS_ALL : KT_LOGITS_LAST);
    trace("decode", decoded, kt_context_last_error(ctx));
    kt::fuzz::expect_clean(decoded, kt_context_last_error(ctx), "kt_context_decode");
    if (decoded == KT_STATUS_OK) {
        int32_t out[2];
        kt::fuzz::expect_clean(kt::test::generate_greedy(ctx, out, 2, nullptr), kt_context_last_error(ctx), "kt_context_generate");
    }
    kt_context_free(ctx);
}

void run_expert_pool(kt_model *model, const Settings &s) {
    int64_t experts = 0, hidden = 0, width = 0;
    if (kt_model_meta_get_int(model, (std::string(kt_model_architecture(model)) + ".expert_count").c_str(), &experts) != KT_STATUS_OK) return;
    const std::string a = kt_model_architecture(model);
    if (kt_model_meta_get_int(model, (a + ".embedding_length").c_str(), &hidden) != KT_STATUS_OK) return;
    if (kt_model_meta_get_int(model, (a + ".expert_feed_forward_length").c_str(), &width) != KT_STATUS_OK &&
        kt_model_meta_get_int(model, (a + ".feed_forward_length").c_str(), &width) != KT_STATUS_OK)
        return;
    kt_expert_pool_params p;
    kt_expert_pool_params_init(&p);
    // Hostile sizes are the point, but not ones whose scratch alone would exhaust the machine running the fuzzer.
    p.n_experts = static_cast<int32_t>(std::min<int64_t>(experts, 1 << 12));
    p.hidden_size = static_cast<int32_t>(std::min<int64_t>(hidden, 1 << 12));
    p.intermediate_size = static_cast<int32_t>(std::min<int64_t>(width, 1 << 12));
    p.max_tokens = 4;
    p.max_top_k = 4;
    p.weight_format = s.pool_format;
    p.n_threads = s.pool_threads;
    kt_expert_pool *pool = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status created = kt_expert_pool_create(&p, &pool, &err);
    trace("expert pool", created, err.message);
    kt::fuzz::expect_clean(created, err.message, "kt_expert_pool_create");
    if (!pool) return;
    const kt_status loaded = kt_expert_pool_load_model(pool, model, s.pool_layer);
    trace("expert pool load", loaded, kt_expert_pool_last_error(pool));
    kt::fuzz::expect_clean(loaded, kt_expert_pool_last_error(pool), "kt_expert_pool_load_model");
    if (loaded == KT_STATUS_OK) {
        const int32_t n_tokens = static_cast<int32_t>(s.expert_ids.size()) / std::max(s.top_k, 1);
        std::vector<float> input(static_cast<size_t>(n_tokens) * static_cast<size_t>(p.hidden_size), 0.5f);
        std::vector<float> output(input.size()), weights(s.expert_ids.size(), 0.5f);
        kt_expert_forward f;
        kt_expert_forward_init(&f);
        f.n_tokens = n_tokens;
        f.top_k = s.top_k;
        f.input = input.data();
        f.expert_ids = s.expert_ids.data();
        f.expert_weights = weights.data();
        f.output = output.data();
        const kt_status ran = kt_expert_pool_forward(pool, &f);
        trace("expert pool forward", ran, kt_expert_pool_last_error(pool));
        kt::fuzz::expect_clean(ran, kt_expert_pool_last_error(pool), "kt_expert_pool_forward");
    }
    kt_expert_pool_free(pool);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kt::fuzz::Bytes in(data, size);
    const uint8_t pick = in.u8();
    const int arch_index = pick % 7;
    const char *arch = kArchitectures[arch_index];
    TinyModel spec = base(in, arch, arch_index == 1 || arch_index == 4 || arch_index == 5 || arch_index == 6);
    const std::string prefix = std::string(arch) + ".";

    Settings settings;
    kt_context_params_init(&settings.context);
    settings.context.n_ctx = 64;
    settings.context.n_threads = 1;
    settings.context.kernels = (pick & 0x80) ? KT_KERNELS_REFERENCE : KT_KERNELS_AUTO;
    std::vector<std::pair<uint32_t, uint8_t>> patches;
    for (int op = 0; !in.empty() && op < 64; ++op) {
        switch (in.u8() % 9) {
            case 0:
            case 1: spec.keys.push_back({prefix + kKeys[in.below(sizeof kKeys / sizeof kKeys[0])], value(in, spec.n_layer)}); break;
            case 2:
                spec.keys_after_table.push_back({prefix + kKeys[in.below(sizeof kKeys / sizeof kKeys[0])], value(in, spec.n_layer)});
                break;
            case 3: spec.drop.push_back(tensor_name(in, spec.n_layer)); break;
            case 4: {
                std::vector<int64_t> ne(1 + in.below(3));
                for (int64_t &d : ne) d = 1 + in.below(64);
                spec.extra_tensors.push_back({tensor_name(in, spec.n_layer), ne});
                break;
            }
            case 5: patches.push_back({in.u32(), in.u8()}); break;
            case 6: {
                static const int64_t kCtx[] = {0, 1, 2, 8, 33, 64, 300};
                static const int64_t kBatch[] = {1, 3, 7, 512, 0, -1};
                static const int32_t kKv[] = {KT_TYPE_F16, KT_TYPE_BF16, KT_TYPE_F32, KT_TYPE_Q8_0, KT_TYPE_Q4_K};
                settings.context.n_ctx = kCtx[in.below(7)];
                settings.context.n_batch = kBatch[in.below(6)];
                settings.context.kv_type = kKv[in.below(5)];
                settings.context.n_threads = 1 + in.below(2);
                break;
            }
            case 7: {  // mostly inside the vocabulary, sometimes past it or negative
                settings.tokens.resize(in.below(40));
                for (int32_t &t : settings.tokens) {
                    const uint8_t b = in.u8();
                    t = b < 240 ? b % static_cast<int32_t>(spec.n_vocab + 1) : static_cast<int32_t>(b) - 250;
                }
                break;
            }
            default: {
                settings.pool_layer = static_cast<int32_t>(in.below(4)) - 1;
                settings.pool_format = static_cast<int32_t>(in.below(5));
                settings.pool_threads = 1 + static_cast<int32_t>(in.below(2));
                settings.top_k = 1 + static_cast<int32_t>(in.below(5));
                settings.expert_ids.resize(in.below(12));
                for (int32_t &id : settings.expert_ids) id = static_cast<int32_t>(in.below(7)) - 1;
                break;
            }
        }
    }

    std::vector<uint8_t> bytes;
    const kt::Status written = kt::test::write_tiny_model(spec, &bytes);
    if (std::getenv("KT_FUZZ_VERBOSE")) std::fprintf(stderr, "fuzz model: %s, %zu bytes: %s\n", arch, bytes.size(), written.message().c_str());
    if (!written.is_ok()) return 0;  // the architecture's table itself refused the metadata
    for (const auto &[at, byte] : patches) bytes[at % bytes.size()] ^= byte;
    if (!write_file(temp_path(), bytes)) kt::fuzz::broken_invariant("cannot write the model file");

    kt_model_params mp;
    kt_model_params_init(&mp);
    mp.prefetch = 0;
    // The device setup from the bits above the architecture; only the expert engine uses a device (not the
    // reference kernels, the 0x80 bit).
    switch ((pick / 7) % 4) {
        case 2:  // everything the hybrid path does: streamed long calls (the 3-token prompt), deferred experts
            mp.device = KT_DEVICE_CPU_STANDIN;
            mp.device_budget_bytes = 64ull << 20;
            mp.device_prefill_threshold = 2;
            mp.device_deferred_experts = 1;
            break;
        case 3:  // a budget of about the work buffer (its upload slots are 8 MiB): some fit, some are refused
            mp.device = KT_DEVICE_CPU_STANDIN;
            mp.device_budget_bytes = (8ull << 20) + (static_cast<uint64_t>(pick) << 14);
            mp.device_experts = pick % 3;
            break;
        default: break;
    }
    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status loaded = kt_model_load(temp_path().c_str(), &mp, &model, &err);
    trace("load", loaded, err.message);
    kt::fuzz::expect_clean(loaded, err.message, "kt_model_load");
    if (!model) return 0;
    run_context(model, settings);
    run_expert_pool(model, settings);
    kt_model_free(model);
    return 0;
}
