#include "support/model_file.h"

#include <catch2/catch.hpp>

namespace kt::test {

ModelFile::ModelFile(const std::string &path) {
    kt_error err = {sizeof(kt_error), 0, {0}};
    INFO("loading " << path);
    const kt_status s = kt_model_load(path.c_str(), nullptr, &model, &err);
    INFO(err.message);
    REQUIRE(s == KT_STATUS_OK);
}

ModelFile::~ModelFile() { kt_model_free(model); }

std::vector<float> ModelFile::tensor(const std::string &name, kt_tensor_info *info) const {
    int64_t index = -1;
    INFO("tensor " << name);
    REQUIRE(kt_model_tensor_find(model, name.c_str(), &index) == KT_STATUS_OK);
    kt_tensor_info local;
    kt_tensor_info *i = info ? info : &local;
    i->struct_size = sizeof *i;
    REQUIRE(kt_model_tensor_info(model, index, i) == KT_STATUS_OK);
    std::vector<float> values(i->n_elements);
    REQUIRE(kt_model_tensor_read_f32(model, index, values.data(), values.size(), nullptr) == KT_STATUS_OK);
    return values;
}

std::vector<int32_t> ModelFile::tokens(const std::string &name) const {
    std::vector<int32_t> ids;
    for (float f : tensor(name)) ids.push_back(static_cast<int32_t>(f));
    return ids;
}

int64_t ModelFile::meta_int(const std::string &key) const {
    int64_t v = 0;
    INFO("metadata key " << key);
    REQUIRE(kt_model_meta_get_int(model, key.c_str(), &v) == KT_STATUS_OK);
    return v;
}

std::string ModelFile::meta_string(const std::string &key) const {
    const char *s = nullptr;
    uint64_t n = 0;
    INFO("metadata key " << key);
    REQUIRE(kt_model_meta_get_string(model, key.c_str(), &s, &n) == KT_STATUS_OK);
    return std::string(s, n);
}

}  // namespace kt::test
