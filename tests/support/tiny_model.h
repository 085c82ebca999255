// Tiny random-weight models of any architecture kt runs, written from the architecture's own tensor table
// (model::list_tensors), for tests that need a model with a particular defect or shape.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
    std::vector<std::string> drop;                          // tensors to leave out
    std::vector<std::pair<std::string, gguf::Value>> keys;  // metadata to add or override
    // Metadata replaced after the tensors were chosen (a file whose keys contradict its tensors).
    std::vector<std::pair<std::string, gguf::Value>> keys_after_table;
    std::vector<std::pair<std::string, std::vector<int64_t>>> extra_tensors;  // f32 tensors the table does not list
};

// The GGUF bytes (tensors F32 unless weight_type says otherwise). Fails the calling test if the writer or the table
// refuses.
std::vector<uint8_t> write_tiny_model(const TinyModel &spec);
// The same model written straight to `path` (a large model need not be held twice in memory).
void write_tiny_model_file(const TinyModel &spec, const std::string &path);

}  // namespace kt::test
