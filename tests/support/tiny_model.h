// Tiny random-weight models of any architecture kt runs, written from the architecture's own tensor table
// (model::list_tensors), for tests that need a model with a particular defect or shape.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/gguf/gguf.h"

namespace kt::test {

struct TinyModel {
    std::string arch = "qwen3moe";
    int64_t n_vocab = 64, n_embd = 32, n_layer = 2, n_head = 4, n_head_kv = 2, head_dim = 8, n_ff = 48;
    int64_t n_expert = 4, n_expert_used = 2;
    uint64_t seed = 1;
    std::vector<std::string> drop;                          // tensors to leave out
    std::vector<std::pair<std::string, gguf::Value>> keys;  // metadata to add or override
    // Metadata replaced after the tensors were chosen (a file whose keys contradict its tensors).
    std::vector<std::pair<std::string, gguf::Value>> keys_after_table;
    std::vector<std::pair<std::string, std::vector<int64_t>>> extra_tensors;  // f32 tensors the table does not list
    uint64_t max_elements = 0;  // > 0: refuse (INVALID_ARGUMENT) a table of more elements than this, before writing
};

// The GGUF bytes (all tensors F32, normal random values from `seed`), or the status of the architecture's table or
// the writer refusing the spec. No Catch2: the fuzz targets build their base models with it too.
Status write_tiny_model(const TinyModel &spec, std::vector<uint8_t> *out);

}  // namespace kt::test
