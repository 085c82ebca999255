// Tiny random-weight models of any architecture kt runs, written from the architecture's own tensor table
// (model::list_tensors), for tests that need a model with a particular defect or shape.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kt.h"
#include "model/gguf/gguf.h"

namespace kt::test {

struct TinyModel {
    std::string arch = "qwen3moe";
    int64_t n_vocab = 64, n_embd = 32, n_layer = 2, n_head = 4, n_head_kv = 2, head_dim = 8, n_ff = 48;
    int64_t n_expert = 4, n_expert_used = 2;
    uint64_t seed = 1;
    // KT_TYPE_F32, or KT_TYPE_Q8_0: the embedding and every matrix as random Q8_0 blocks (cheap to make at hundreds
    // of megabytes; vectors stay F32).
    int32_t weight_type = KT_TYPE_F32;
    // True: F32 values uniform with the same mean and σ, from a splitmix64 stream, instead of normals. For files whose
    // values never matter (the model fuzz target's), where drawing normals was 40 % of each execution.
    bool uniform_values = false;
    std::vector<std::string> drop;                          // tensors to leave out
    std::vector<std::pair<std::string, gguf::Value>> keys;  // metadata to add or override
    // Metadata replaced after the tensors were chosen (a file whose keys contradict its tensors).
    std::vector<std::pair<std::string, gguf::Value>> keys_after_table;
    std::vector<std::pair<std::string, std::vector<int64_t>>> extra_tensors;  // f32 tensors the table does not list
    // Tensors of the table found in this (F32) file under the same name and size take its values instead of random
    // ones: a second layout of the same weights.
    const gguf::File *copy_from = nullptr;
    struct Values {
        std::string name;
        std::vector<int64_t> ne;
        std::vector<float> values;
    };
    std::vector<Values> extra_values;  // f32 tensors with given values, added after the table's
    float router_sigma = 0.0f;         // > 0: ffn_gate_inp's σ (default 1/√n_embd, like every projection)
    // Tensors whose name contains `first` are stored as type `second` (kt_quantize of the f32 values) instead of F32.
    std::vector<std::pair<std::string, int32_t>> types;
    uint64_t max_elements = 0;  // > 0: refuse (INVALID_ARGUMENT) a table of more elements than this, before writing
};

// The GGUF bytes (normal random values from `seed`), or the status of the architecture's table, the quantizer or
// the writer refusing the spec. No Catch2: the fuzz targets build their base models with it too.
Status write_tiny_model(const TinyModel &spec, std::vector<uint8_t> *out);
// The same model written straight to `path` (a large model need not be held twice in memory).
Status write_tiny_model_file(const TinyModel &spec, const std::string &path);

// For Catch2 tests (defined in kt_test_support): the bytes, failing the calling test if anything refuses.
std::vector<uint8_t> write_tiny_model(const TinyModel &spec);
void write_tiny_model_file_or_fail(const TinyModel &spec, const std::string &path);

// The values a tensor of a tiny model holds, dequantized (its name must exist; Catch2, kt_test_support).
std::vector<float> tiny_model_values(const std::vector<uint8_t> &gguf_bytes, const std::string &name);

}  // namespace kt::test
