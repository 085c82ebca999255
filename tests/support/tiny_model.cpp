#include "support/tiny_model.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>

#include "mem/mapped_file.h"
#include "model/model.h"
#include "support/test_support.h"

namespace kt::test {

std::vector<uint8_t> write_tiny_model(const TinyModel &spec) {
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
    REQUIRE(meta.write_buffer(&meta_bytes).is_ok());
    std::unique_ptr<gguf::File> meta_file;
    REQUIRE(gguf::File::parse(mem::MappedFile::borrow(meta_bytes.data(), meta_bytes.size()), "tiny", &meta_file).is_ok());
    std::vector<model::TensorSpec> specs;
    const Status listed = model::list_tensors(*meta_file, &specs);
    INFO(listed.message());
    REQUIRE(listed.is_ok());

    gguf::Writer w;
    set_keys(spec.keys_after_table);
    for (const auto &[key, value] : keys) w.add(key, value);
    uint64_t seed = spec.seed;
    auto add = [&](const std::string &name, const std::vector<int64_t> &ne, float mean, float sigma) {
        size_t n = 1;
        for (int64_t d : ne) n *= static_cast<size_t>(d);
        std::vector<float> v = random_normal(n, ++seed, sigma);
        for (float &x : v) x += mean;
        const gguf::TensorInfo *same = spec.copy_from ? spec.copy_from->find_tensor(name) : nullptr;
        if (same && same->type == KT_TYPE_F32 && same->n_elements == n) std::memcpy(v.data(), same->data, n * sizeof(float));
        int32_t type = KT_TYPE_F32;
        for (const auto &[part, t] : spec.types)
            if (name.find(part) != std::string::npos) type = t;
        if (type == KT_TYPE_F32) {
            std::vector<uint8_t> bytes(n * sizeof(float));
            std::memcpy(bytes.data(), v.data(), bytes.size());
            w.add_tensor_bytes(name, KT_TYPE_F32, ne, std::move(bytes));
            return;
        }
        uint64_t size = 0;
        const int64_t rows = static_cast<int64_t>(n) / ne[0];
        REQUIRE(kt_quantize(type, v.data(), rows, ne[0], nullptr, 0, &size) == KT_STATUS_BUFFER_TOO_SMALL);
        std::vector<uint8_t> bytes(size);
        REQUIRE(kt_quantize(type, v.data(), rows, ne[0], bytes.data(), size, nullptr) == KT_STATUS_OK);
        w.add_tensor_bytes(name, type, ne, std::move(bytes));
    };
    for (const model::TensorSpec &t : specs) {
        if (t.optional && t.name == "rope_freqs.weight") continue;  // other optional tensors (biases, an untied head) are written
        bool dropped = false;
        for (const std::string &d : spec.drop) dropped |= d == t.name;
        if (dropped) continue;
        switch (t.role) {
            case model::TensorSpec::Role::kEmbedding: add(t.name, t.ne, 0.0f, 1.0f); break;
            case model::TensorSpec::Role::kVector:
                add(t.name, t.ne, t.name.find(".bias") == std::string::npos ? 1.0f : 0.0f, 0.1f);
                break;
            default: {
                const bool router = t.name.find("ffn_gate_inp.") != std::string::npos && spec.router_sigma > 0.0f;
                add(t.name, t.ne, 0.0f, router ? spec.router_sigma : 1.0f / std::sqrt(static_cast<float>(t.ne[0])));
                break;
            }
        }
    }
    for (const auto &[name, ne] : spec.extra_tensors) add(name, ne, 0.0f, 1.0f);
    for (const TinyModel::Values &t : spec.extra_values) {
        std::vector<uint8_t> bytes(t.values.size() * sizeof(float));
        std::memcpy(bytes.data(), t.values.data(), bytes.size());
        w.add_tensor_bytes(t.name, KT_TYPE_F32, t.ne, std::move(bytes));
    }
    std::vector<uint8_t> bytes;
    const Status written = w.write_buffer(&bytes);
    INFO(written.message());
    REQUIRE(written.is_ok());
    return bytes;
}

std::vector<float> tiny_model_values(const std::vector<uint8_t> &gguf_bytes, const std::string &name) {
    std::unique_ptr<gguf::File> file;
    REQUIRE(gguf::File::parse(mem::MappedFile::borrow(gguf_bytes.data(), gguf_bytes.size()), "tiny", &file).is_ok());
    const gguf::TensorInfo *t = file->find_tensor(name);
    INFO("tensor " << name);
    REQUIRE(t != nullptr);
    std::vector<float> values(t->n_elements);
    const int64_t rows = static_cast<int64_t>(t->n_elements) / t->ne[0];
    REQUIRE(kt_dequantize(t->type, t->data, t->n_bytes, rows, t->ne[0], values.data(), values.size()) == KT_STATUS_OK);
    return values;
}

}  // namespace kt::test
