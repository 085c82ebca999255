// Model architectures: hyperparameters, the weights each family has, and its forward pass.
//
// One file per family (llama.cpp's src/models/, gemma.cpp's configs): llama.cpp, qwen2.cpp, qwen3.cpp,
// qwen2moe.cpp, qwen3moe.cpp, deepseek2.cpp, glm4moe.cpp, gpt_oss.cpp. Each provides three things, registered in the explicit table in arch.cpp:
//   read_hparams     the GGUF keys it needs, validated and bounded (reference/gguf-and-quants.md §3.2, §1.8);
//   for_each_tensor  every tensor it uses, listed once (§3.3); the loader binds and checks them through this
//                    table, and anything that plans memory (placement, offload) walks the same table;
//   forward          the graph, top to bottom, written against ForwardHost (attention over the KV cache, scratch
//                    buffers, timers) and the Linear / ExpertFfn kernels bound at load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf/gguf.h"
#include "ops/linear.h"
#include "ops/transformer_ops.h"

namespace kt::model {

// ------------------------------------------------------------------------------------------------------------
// Hyperparameters

// Bounds on sizes read from a file (reference §1.8 item 6): far above any published model, low enough that every
// buffer size computed from them fits comfortably in 64 bits.
constexpr int64_t kMaxLayers = 512;
constexpr int64_t kMaxExperts = 512;
constexpr int64_t kMaxEmbedding = 1 << 16;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxFeedForward = 1 << 20;
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxContext = 1 << 24;
constexpr int64_t kMaxAttentionWidth = 1 << 17;  // head_count x key_length (DeepSeek-V3: 128 x 192 = 24576)

struct HParams {
    std::string arch;           // general.architecture
    int64_t n_vocab = 0;        // V
    int64_t n_embd = 0;         // E: hidden size
    int64_t n_layer = 0;        // layers computed (glm4moe: block_count less the NextN blocks)
    int64_t n_ctx_train = 0;    // context_length
    int64_t n_head = 0;         // H
    int64_t n_head_kv = 0;      // Hkv (GQA: H is a multiple)
    int64_t head_dim_k = 0;     // Dk
    int64_t head_dim_v = 0;     // Dv
    int64_t n_ff = 0;           // F: dense FFN width (llama MoE: expert width)
    int64_t n_expert = 0;       // X (0: dense)
    int64_t n_expert_used = 0;  // k
    int64_t n_ff_exp = 0;       // Fe: expert FFN width
    int64_t n_ff_shexp = 0;     // Fs: shared expert width (qwen2moe)
    float rms_eps = 0.0f;
    ops::RopeParams rope;       // mode set by the family; n_ctx_orig for YaRN
    float kq_scale = 0.0f;      // attention logit scale, 1/sqrt(Dk) unless the family says otherwise
    float yarn_log_multiplier = 0.0f;  // rope.scaling.yarn_log_multiplier as stored (0.1 · mscale_all_dim)

    // deepseek2 (MLA attention served as MQA over the compressed latent; reference §3.2, §5.5, §5.6)
    int64_t q_lora_rank = 0;       // 0: "lite", a plain attn_q
    int64_t kv_lora_rank = 0;      // the latent c_kv; head_dim_v = kv_lora_rank, head_dim_k = kv_lora + n_rot
    int64_t head_dim_k_mla = 0;    // qk_nope + qk_rope per query head before absorption
    int64_t head_dim_v_mla = 0;    // per-head value width after decompression
    int64_t n_layer_dense_lead = 0;  // leading layers with a dense FFN
    int64_t n_expert_shared = 0;   // shared experts (their width is n_ff_exp · n_expert_shared)
    float expert_weights_scale = 1.0f;
    bool expert_weights_norm = false;
    ops::Gating gating = ops::Gating::kSoftmax;
    int64_t n_group = 1, n_group_used = 1;  // group-limited routing
    bool legacy_kv_b = false;      // deepseek2 file with one attn_kv_b per layer (split into k_b / v_b at load)
    int64_t v_in_k = -1;           // >= 0: the values are dims [v_in_k, v_in_k + Dv) of the keys (MLA: the latent
                                   // after the RoPE key), so the KV cache keeps them once

    int64_t n_layer_nextn = 0;     // glm4moe: trailing NextN/MTP blocks after the n_layer computed ones (skipped)

    // gpt-oss: sliding-window attention on layers il with il % swa_period < swa_period - 1 (0: none)
    int64_t n_swa = 0;             // window: a query sees itself and the n_swa - 1 positions before it
    int64_t swa_period = 0;
};


// Reads `<arch>.<suffix>` keys with the conversions and bounds a family needs; every error names the key.
class HParamReader {
public:
    HParamReader(const gguf::File &file, std::string arch) : file_(file), arch_(std::move(arch)) {}

    // Integer keys. A per-layer array is accepted when all its elements are equal (kt runs uniform layers).
    Status get_int(const char *suffix, int64_t lo, int64_t hi, int64_t *out) const;
    Status get_int_or(const char *suffix, int64_t fallback, int64_t lo, int64_t hi, int64_t *out) const;
    Status get_float(const char *suffix, float *out) const;
    Status get_float_or(const char *suffix, float fallback, float *out) const;
    // Float keys with a range [lo, hi] (a scale, a factor, a multiplier): the message names the key, the value and
    // the range.
    Status get_float(const char *suffix, float lo, float hi, float *out) const;
    Status get_float_or(const char *suffix, float fallback, float lo, float hi, float *out) const;
    Status get_string_or(const char *suffix, std::string fallback, std::string *out) const;
    Status get_bool_or(const char *suffix, bool fallback, bool *out) const;
    bool has(const char *suffix) const;
    std::string key(const char *suffix) const { return arch_ + "." + suffix; }

private:
    const gguf::File &file_;
    std::string arch_;
};

// The generic keys every family here uses (§3.2): sizes, heads, head dims, RMS epsilon, RoPE with linear or
// YaRN scaling, expert counts. n_vocab is the vocab_size key or, without it, token_embd's row count, so a
// metadata-only file with vocab_size is enough to know every tensor's shape.
Status read_common_hparams(const gguf::File &file, const HParamReader &r, HParams *hp);

// The routed-expert keys deepseek2 and glm4moe share: expert and shared-expert widths, the weights' scale and
// renormalisation, the gating function (`default_gating` when the key is absent) and group-limited routing.
Status read_routed_experts(const HParamReader &r, ops::Gating default_gating, HParams *hp);

// ------------------------------------------------------------------------------------------------------------
// Weights

// A vector of f32 values (norm weights, biases, gates), copied out of the file at load (they are tiny, and
// files may store them as F16).
struct Vector {
    const gguf::TensorInfo *tensor = nullptr;  // null: optional and absent
    std::vector<float> values;
    explicit operator bool() const { return tensor != nullptr; }
    const float *data() const { return tensor ? values.data() : nullptr; }
};

// y = W x (+ b). `linear` is built by the KernelFactory; the bias (if any) is applied inside it.
struct Projection {
    const gguf::TensorInfo *weight = nullptr;
    Vector bias;
    std::unique_ptr<ops::Linear> linear;
    explicit operator bool() const { return weight != nullptr; }
    Status forward(const float *x, int64_t n_tokens, float *y, ThreadPool &pool) const {
        return linear->forward(x, n_tokens, y, pool);
    }
};

// A SwiGLU feed-forward: dense (one expert) or a stack of experts, with per-expert biases when the family has them.
struct Ffn {
    const gguf::TensorInfo *gate = nullptr, *up = nullptr, *down = nullptr;
    Vector gate_bias, up_bias, down_bias;  // [X][I], [X][I], [X][E] (gpt-oss), else absent
    std::unique_ptr<ops::ExpertFfn> experts;
    explicit operator bool() const { return gate != nullptr; }
};

// A stack of same-shaped matrices used one at a time (deepseek2's per-head attn_k_b / attn_v_b): one Linear each.
// Split from a legacy attn_kv_b, the k_b half is a transposed copy that the stack owns (`owned`, in F32, F16 or
// BF16 as the source: a transpose is exact in each), the v_b half views the file's rows.
struct Stack {
    const gguf::TensorInfo *tensor = nullptr;
    std::vector<uint8_t> owned;
    std::vector<std::unique_ptr<ops::Linear>> linears;
    explicit operator bool() const { return tensor != nullptr; }
};

// token_embd: rows read by token id.
struct Embedding {
    const gguf::TensorInfo *tensor = nullptr;
    // dst[0, E) = row `token` as f32.
    void row(int64_t token, float *dst) const;
};

struct LayerWeights {
    Vector attn_norm;                  // [E]
    Projection wq, wk, wv, wo;         // [E -> H·Dk], [E -> Hkv·Dk], [E -> Hkv·Dv], [H·Dv -> E]
    Vector attn_q_norm, attn_k_norm;   // [Dk]: per-head RMSNorm of Q and K before RoPE (qwen3, qwen3moe)
    Vector ffn_norm;                   // [E]
    Ffn ffn;                           // dense SwiGLU [E -> F -> E]
    Projection router;                 // ffn_gate_inp [E -> X]
    Ffn experts;                       // routed experts [X][E -> Fe -> E]
    Ffn shared;                        // shared expert [E -> Fs -> E] (qwen2moe, deepseek2)
    Vector shared_gate;                // ffn_gate_inp_shexp [E]: sigmoid(shared_gate · h) scales the shared expert
    Vector expert_bias;                // exp_probs_b [X]: added to the gate probabilities for selection (deepseek2)
    Vector attn_sinks;                 // [H]: one extra softmax logit per head (gpt-oss)

    // deepseek2 MLA
    Projection wq_a;                   // [E -> q_lora]
    Vector q_a_norm;                   // [q_lora]
    Projection wq_b;                   // [q_lora -> H·(qk_nope + qk_rope)]  (lite models: wq [E -> ...] instead)
    Projection wkv_a;                  // attn_kv_a_mqa [E -> kv_lora + qk_rope]
    Vector kv_a_norm;                  // [kv_lora]
    Stack k_b;                         // attn_k_b [H][qk_nope -> kv_lora]: absorbs q_nope into the latent space
    Stack v_b;                         // attn_v_b [H][kv_lora -> Dv_mla]: decompresses each head's output
};

struct Weights {
    Embedding token_embd;              // [V, E]
    Vector rope_freqs;                 // [n_rot/2] per-pair frequency divisors (llama 3.1), optional
    Vector output_norm;                // [E]
    Projection output;                 // [E -> V]; token_embd when the file ties them
    std::vector<LayerWeights> layers;
};

// How a family lists its tensors (§3.3). Names are GGUF tensor names without ".weight" / ".bias"; shapes are the
// mathematical ones (in, out), checked against the file's ne = {in, out}. Loading binds and builds each part;
// a planner can walk the same calls to size memory.
enum Need : uint32_t {
    kRequired = 0,
    kOptional = 1u << 0,          // the tensor may be absent
    kOptionalBias = 1u << 1,      // linear: "<name>.bias" [out] is used when present
    kBias = 1u << 2,              // linear: "<name>.bias" [out] is required
    kTiedToEmbedding = 1u << 3,   // linear: when absent, token_embd serves (the output head of tied models)
};

class TensorTable {
public:
    virtual ~TensorTable() = default;
    virtual void embedding(const std::string &name, int64_t n_embd, int64_t n_vocab, Embedding &slot) = 0;
    // "<name>.weight" with ne = {n}.
    void vector(const std::string &name, int64_t n, uint32_t need, Vector &slot) {
        vector_tensor(name + ".weight", n, need, slot);
    }
    // The same for a tensor named in full (deepseek2's "exp_probs_b.bias").
    virtual void vector_tensor(const std::string &tensor_name, int64_t n, uint32_t need, Vector &slot) = 0;
    virtual void linear(const std::string &name, int64_t in, int64_t out, uint32_t need, Projection &slot) = 0;
    // "<prefix>_gate<suffix>", "_up", "_down": gate/up {in: E, out: I} and down {I -> E}, stacked over n_expert
    // (ne[2]) when n_expert > 0, plain matrices when n_expert == 0. With kBias, "<name>.bias" {I or E, n_expert}
    // for each of the three. `variant` selects the SwiGLU form (its bias pointers are filled in by the table).
    virtual void ffn(const std::string &prefix, const std::string &suffix, int64_t n_embd, int64_t n_ff,
                     int64_t n_expert, uint32_t need, const ops::ExpertOptions &variant, Ffn &slot) = 0;
    void ffn(const std::string &prefix, const std::string &suffix, int64_t n_embd, int64_t n_ff, int64_t n_expert,
             uint32_t need, Ffn &slot) {
        ffn(prefix, suffix, n_embd, n_ff, n_expert, need, ops::ExpertOptions(), slot);
    }
    // "<name>.weight" with ne = {in, out, count}: count matrices {in -> out}, each used as its own projection.
    virtual void stack(const std::string &name, int64_t in, int64_t out, int64_t count, uint32_t need, Stack &slot) = 0;
    // deepseek2's legacy "<name>.weight" {kv_lora, n_head · (qk_nope + v_head)}: per head qk_nope key rows then
    // v_head value rows, each a map from the latent. Split into the MLA stacks: k_b [n_head] {qk_nope -> kv_lora}
    // (the key rows transposed, so that they absorb the query) and v_b [n_head] {kv_lora -> v_head}.
    virtual void split_kv_b(const std::string &name, int64_t kv_lora, int64_t qk_nope, int64_t v_head, int64_t n_head,
                            Stack &k_b, Stack &v_b) = 0;
    // Every tensor whose name starts with `prefix` belongs to the file's architecture but is not computed (glm4moe's
    // NextN blocks): accepted, never bound.
    virtual void skip(const std::string &prefix) = 0;
};

// "blk.<layer>."
std::string block_prefix(int64_t layer);

// ------------------------------------------------------------------------------------------------------------
// Hyperparameter helpers of several families

// The net cos/sin scale llama.cpp gives YaRN RoPE (1 without YaRN): hp.rope.attn_factor times the 1 + 0.1 ln(s)
// that rope_table multiplies in.
float rope_magnitude(const HParams &hp);

// ------------------------------------------------------------------------------------------------------------
// Running a forward pass

// Buffers for one batch of up to n_batch tokens, allocated once per context (the forward pass allocates nothing).
struct Scratch {
    std::vector<float> x;        // [T, E] residual stream
    std::vector<float> h;        // [T, E] normalised input of a block / block output
    std::vector<float> q;        // [T, H·Dk]
    std::vector<float> k;        // [T, Hkv·Dk]
    std::vector<float> v;        // [T, Hkv·Dv]
    std::vector<float> attn;     // [T, H·Dv]
    std::vector<float> ffn_out;  // [T, E]
    std::vector<float> shared;   // [T, E] shared-expert output
    std::vector<float> router;   // [T, X] router logits, then gate probabilities
    std::vector<int32_t> ids;    // [T, k] chosen experts
    std::vector<float> gates;    // [T, k] their weights (dense FFN: [T] per-token scales)
    std::vector<float> shared_scale;  // [T] sigmoid gate of the shared expert
    std::vector<int32_t> zeros;  // [T] expert id 0, for dense FFNs run as one-expert pools
    std::vector<float> rope;     // [T, n_rot/2, 2] cos/sin
    // deepseek2 MLA (empty otherwise)
    std::vector<float> mla_qa;   // [T, q_lora]
    std::vector<float> mla_q;    // [T, H, qk_nope + qk_rope] queries before absorption
    std::vector<float> mla_c;    // [T, kv_lora + qk_rope] compressed KV and the shared RoPE key
    std::vector<float> mla_in;   // [T, max(qk_nope, kv_lora)] one head's rows, gathered
    std::vector<float> mla_out;  // [T, max(kv_lora, Dv_mla)]
    std::vector<float> mla_o;    // [T, H, Dv_mla] decompressed attention output

    void reserve(const HParams &hp, int64_t n_batch);
};

// Where the time of a forward pass goes (kt_context's performance counters).
enum class Phase : int32_t { kOther = 0, kAttention, kExperts, kDenseFfn, kHead, kCount };

struct Batch {
    const int32_t *tokens = nullptr;     // [n_tokens], validated < n_vocab
    const int32_t *positions = nullptr;  // [n_tokens]
    int64_t n_tokens = 0;
    int64_t n_outputs = 0;               // rows whose logits are wanted
    const int32_t *output_rows = nullptr;  // [n_outputs] those rows, ascending; null: the last n_outputs rows
    float *logits = nullptr;             // [n_outputs, V]
};

// Which cached positions a layer's queries see beyond causality, and extra logits in its softmax.
struct AttentionMask {
    int64_t window = 0;            // > 0: a query at position p sees p - window + 1 .. p only (sliding window)
    const float *sinks = nullptr;  // [H] or null: per query head one more logit in the softmax denominator, with no
                                   // value (gpt-oss's attention sinks; not scaled by kq_scale)
};

// What a forward pass borrows from the context that runs it (runtime/ implements this).
class ForwardHost {
public:
    virtual ~ForwardHost() = default;
    virtual Scratch &scratch() = 0;
    virtual ThreadPool &pool() = 0;
    // Causal attention of the batch's queries over the cache, after appending this batch's keys and values.
    // q: [T, H, Dk] (RoPE applied); k: [T, Hkv, Dk]; v: [T, Hkv, Dv]; out: [T, H, Dv].
    virtual Status attention(int64_t layer, const float *q, const float *k, const float *v, const AttentionMask &mask,
                             float *out) = 0;
    // Charges the time since the previous call to the phase given then, and starts timing `phase`.
    virtual void enter(Phase phase) = 0;
    // Called after each layer; a non-OK status (the abort callback) stops the pass.
    virtual Status layer_done(int64_t layer) = 0;
};

struct Model;

struct Architecture {
    const char *name;  // general.architecture
    Status (*read_hparams)(const gguf::File &file, HParams *hp);
    void (*for_each_tensor)(const HParams &hp, Weights &w, TensorTable &table);
    Status (*forward)(const Model &m, const Batch &batch, ForwardHost &host);
};

// nullptr for an architecture kt does not run.
const Architecture *find_architecture(const std::string &name);
// "llama, qwen2, ..." for messages.
std::string known_architectures();

}  // namespace kt::model
