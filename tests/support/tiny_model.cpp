#include "support/tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "core/fp16.h"
#include "kt.h"
#include "mem/mapped_file.h"
#include "model/model.h"

namespace kt::test {
namespace {

// A splitmix64 stream: 64 random bits per step, far cheaper than std::normal_distribution (which matters at 100s of
// MB, and in the fuzz target's every execution).
class SplitMix64 {
public:
    explicit SplitMix64(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }

private:
    uint64_t state_;
};

// Q8_0 blocks (an f16 scale, then 32 int8) of uniform random quants scaled to standard deviation `sigma`, 8 quants
// per step of the stream.
std::vector<uint8_t> random_q8_0(size_t n, uint64_t seed, float sigma) {
    constexpr size_t kBlock = 32, kBlockBytes = 2 + kBlock;
    std::vector<uint8_t> bytes(n / kBlock * kBlockBytes);
    // Uniform quants in [-127, 127] have standard deviation 127 / sqrt(3).
    const uint16_t scale = f32_to_fp16(sigma * std::sqrt(3.0f) / 127.0f);
    SplitMix64 stream(seed);
    for (size_t b = 0; b < n / kBlock; ++b) {
        uint8_t *block = bytes.data() + b * kBlockBytes;
        std::memcpy(block, &scale, 2);
        for (size_t i = 0; i < kBlock; i += 8) {
            const uint64_t z = stream.next();
            for (size_t j = 0; j < 8; ++j) {
                const int8_t q = static_cast<int8_t>(static_cast<uint8_t>(z >> (8 * j)));
                block[2 + i + j] = static_cast<uint8_t>(q == -128 ? -127 : q);
            }
        }
    }
    return bytes;
}

Status tiny_model_writer(const TinyModel &spec, gguf::Writer *writer) {
    gguf::Writer &w = *writer;
    const std::string a = spec.arch + ".";
    std::vector<std::pair<std::string, gguf::Value>> keys = {
        {"general.architecture", gguf::Value::str(spec.arch)},
        {a + "context_length", gguf::Value::u32(256)},
        {a + "embedding_length", gguf::Value::u32(static_cast<uint32_t>(spec.n_embd))},
        {a + "block_count", gguf::Value::u32(static_cast<uint32_t>(spec.n_layer))},
        {a + "feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(spec.n_ff))},
        {a + "attention.head_count", gguf::Value::u32(static_cast<uint32_t>(spec.n_head))},
        {a + "attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(spec.n_head_kv))},
        {a + "attention.key_length", gguf::Value::u32(static_cast<uint32_t>(spec.head_dim))},
        {a + "attention.value_length", gguf::Value::u32(static_cast<uint32_t>(spec.head_dim))},
        {a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-6f)},
        {a + "rope.freq_base", gguf::Value::f32(10000.0f)},
        {a + "vocab_size", gguf::Value::u32(static_cast<uint32_t>(spec.n_vocab))},
    };
    if (spec.n_expert > 0) {
        keys.push_back({a + "expert_count", gguf::Value::u32(static_cast<uint32_t>(spec.n_expert))});
        keys.push_back({a + "expert_used_count", gguf::Value::u32(static_cast<uint32_t>(spec.n_expert_used))});
        keys.push_back({a + "expert_feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(spec.n_ff))});
        keys.push_back({a + "expert_shared_feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(spec.n_ff))});
    }
    auto set_keys = [&keys](const std::vector<std::pair<std::string, gguf::Value>> &changes) {
        for (const auto &[key, value] : changes) {
            bool replaced = false;
            for (auto &kv : keys)
                if (kv.first == key) kv.second = value, replaced = true;
            if (!replaced) keys.push_back({key, value});
        }
    };
    set_keys(spec.keys);

    // The architecture's table for these hyperparameters, from a metadata-only file.
    gguf::Writer meta;
    for (const auto &[key, value] : keys) meta.add(key, value);
    std::vector<uint8_t> meta_bytes;
    KT_TRY(meta.write_buffer(&meta_bytes));
    std::unique_ptr<gguf::File> meta_file;
    KT_TRY(gguf::File::parse(mem::MappedFile::borrow(meta_bytes.data(), meta_bytes.size()), "tiny", &meta_file));
    std::vector<model::TensorSpec> specs;
    KT_TRY(model::list_tensors(*meta_file, &specs));
    if (spec.max_elements > 0) {
        uint64_t total = 0;
        for (const model::TensorSpec &t : specs) {
            uint64_t n = 1;
            for (int64_t d : t.ne) n = d > 0 && n <= spec.max_elements ? n * static_cast<uint64_t>(d) : spec.max_elements + 1;
            total += std::min<uint64_t>(n, spec.max_elements + 1);
        }
        KT_RETURN_IF(total > spec.max_elements, KT_STATUS_INVALID_ARGUMENT, "tiny model: %llu elements, more than %llu",
                     static_cast<unsigned long long>(total), static_cast<unsigned long long>(spec.max_elements));
    }

    KT_RETURN_IF(spec.weight_type != KT_TYPE_F32 && spec.weight_type != KT_TYPE_Q8_0, KT_STATUS_INVALID_ARGUMENT,
                 "tiny model: weight_type %d (F32 or Q8_0)", spec.weight_type);
    set_keys(spec.keys_after_table);
    for (const auto &[key, value] : keys) w.add(key, value);
    uint64_t seed = spec.seed;
    auto add = [&](const std::string &name, const std::vector<int64_t> &ne, float mean, float sigma) -> Status {
        size_t n = 1;
        for (int64_t d : ne) n *= static_cast<size_t>(d);
        if (spec.weight_type == KT_TYPE_Q8_0 && ne.size() >= 2) {
            KT_RETURN_IF(mean != 0.0f || ne[0] % 32 != 0, KT_STATUS_INVALID_ARGUMENT,
                         "tiny model: %s cannot be random Q8_0", name.c_str());
            w.add_tensor_bytes(name, KT_TYPE_Q8_0, ne, random_q8_0(n, ++seed, sigma));
            return Status::ok();
        }
        std::vector<float> v(n);
        if (spec.uniform_values) {
            // Uniform in [-√3 σ, √3 σ): 24 random bits per value.
            SplitMix64 stream(++seed);
            const float half_width = sigma * std::sqrt(3.0f), step = 2.0f * half_width / 16777216.0f;
            for (float &x : v) x = static_cast<float>(stream.next() >> 40) * step - half_width + mean;
        } else {
            std::mt19937_64 rng(++seed);  // one stream per tensor, as test::random_normal draws them
            std::normal_distribution<float> normal(0.0f, sigma);
            for (float &x : v) x = normal(rng) + mean;
        }
        const gguf::TensorInfo *same = spec.copy_from ? spec.copy_from->find_tensor(name) : nullptr;
        if (same && same->type == KT_TYPE_F32 && same->n_elements == n) std::memcpy(v.data(), same->data, n * sizeof(float));
        int32_t type = KT_TYPE_F32;
        for (const auto &[part, t] : spec.types)
            if (name.find(part) != std::string::npos) type = t;
        if (type == KT_TYPE_F32) {
            std::vector<uint8_t> bytes(n * sizeof(float));
            std::memcpy(bytes.data(), v.data(), bytes.size());
            w.add_tensor_bytes(name, KT_TYPE_F32, ne, std::move(bytes));
            return Status::ok();
        }
        uint64_t size = 0;
        const int64_t rows = static_cast<int64_t>(n) / ne[0];
        KT_RETURN_IF(kt_quantize(type, v.data(), rows, ne[0], nullptr, 0, &size) != KT_STATUS_BUFFER_TOO_SMALL,
                     KT_STATUS_INVALID_ARGUMENT, "tiny model: %s cannot be stored as %s", name.c_str(), kt_type_name(type));
        std::vector<uint8_t> bytes(size);
        KT_RETURN_IF(kt_quantize(type, v.data(), rows, ne[0], bytes.data(), size, nullptr) != KT_STATUS_OK,
                     KT_STATUS_INVALID_ARGUMENT, "tiny model: quantizing %s to %s failed", name.c_str(), kt_type_name(type));
        w.add_tensor_bytes(name, type, ne, std::move(bytes));
        return Status::ok();
    };
    for (const model::TensorSpec &t : specs) {
        if (t.optional && t.name == "rope_freqs.weight") continue;  // other optional tensors (biases, an untied head) are written
        bool dropped = false;
        for (const std::string &d : spec.drop) dropped |= d == t.name;
        if (dropped) continue;
        switch (t.role) {
            case model::TensorSpec::Role::kEmbedding: KT_TRY(add(t.name, t.ne, 0.0f, 1.0f)); break;
            case model::TensorSpec::Role::kVector:
                KT_TRY(add(t.name, t.ne, t.name.find(".bias") == std::string::npos ? 1.0f : 0.0f, 0.1f));
                break;
            default: {
                const bool router = t.name.find("ffn_gate_inp.") != std::string::npos && spec.router_sigma > 0.0f;
                KT_TRY(add(t.name, t.ne, 0.0f, router ? spec.router_sigma : 1.0f / std::sqrt(static_cast<float>(t.ne[0]))));
                break;
            }
        }
    }
    for (const auto &[name, ne] : spec.extra_tensors) KT_TRY(add(name, ne, 0.0f, 1.0f));
    for (const TinyModel::Values &t : spec.extra_values) {
        std::vector<uint8_t> bytes(t.values.size() * sizeof(float));
        std::memcpy(bytes.data(), t.values.data(), bytes.size());
        w.add_tensor_bytes(t.name, KT_TYPE_F32, t.ne, std::move(bytes));
    }
    return Status::ok();
}

}  // namespace

Status write_tiny_model(const TinyModel &spec, std::vector<uint8_t> *out) {
    gguf::Writer w;
    KT_TRY(tiny_model_writer(spec, &w));
    return w.write_buffer(out);
}

Status write_tiny_model_file(const TinyModel &spec, const std::string &path) {
    gguf::Writer w;
    KT_TRY(tiny_model_writer(spec, &w));
    return w.write_file(path);
}

}  // namespace kt::test
