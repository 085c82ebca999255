// A GGUF opened through kt.h for tests that read tensors and metadata (golden references, oracles).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kt.h"

namespace kt::test {

// Loads the file (the calling test fails if it cannot) and frees it at destruction.
struct ModelFile {
    kt_model *model = nullptr;
    explicit ModelFile(const std::string &path);
    ~ModelFile();
    ModelFile(const ModelFile &) = delete;
    ModelFile &operator=(const ModelFile &) = delete;

    // A tensor dequantized to f32 (info, when given, receives its description).
    std::vector<float> tensor(const std::string &name, kt_tensor_info *info = nullptr) const;
    // A tensor of token ids (stored as I32, read back through the f32 reader: exact below 2^24).
    std::vector<int32_t> tokens(const std::string &name) const;
    int64_t meta_int(const std::string &key) const;
    std::string meta_string(const std::string &key) const;
};

}  // namespace kt::test
