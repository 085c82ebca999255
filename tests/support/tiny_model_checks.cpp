// The Catch2 side of tiny_model.h: the same models, with a refusal failing the calling test.
#include <catch2/catch.hpp>

#include "kt.h"
#include "mem/mapped_file.h"
#include "support/tiny_model.h"

namespace kt::test {

std::vector<uint8_t> write_tiny_model(const TinyModel &spec) {
    std::vector<uint8_t> bytes;
    const Status written = write_tiny_model(spec, &bytes);
    INFO(written.message());
    REQUIRE(written.is_ok());
    return bytes;
}

void write_tiny_model_file_or_fail(const TinyModel &spec, const std::string &path) {
    const Status written = write_tiny_model_file(spec, path);
    INFO(written.message());
    REQUIRE(written.is_ok());
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
