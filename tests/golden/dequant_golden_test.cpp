// Golden dequantization: shared/testdata/quants holds tensors quantized by llama.cpp and the f32 values
// llama.cpp's dequantizer produced. kt must reproduce every value bit for bit (compared as bit patterns, so -0.0
// and +-inf count). See shared/testdata/quants/README.md.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "kt.h"
#include "support/test_support.h"

namespace {

struct ModelHandle {
    kt_model *model = nullptr;
    ~ModelHandle() { kt_model_free(model); }
};

std::vector<float> read_tensor(kt_model *model, const std::string &name, kt_tensor_info *info) {
    int64_t index = -1;
    REQUIRE(kt_model_tensor_find(model, name.c_str(), &index) == KT_STATUS_OK);
    info->struct_size = sizeof *info;
    REQUIRE(kt_model_tensor_info(model, index, info) == KT_STATUS_OK);
    std::vector<float> values(info->n_elements);
    REQUIRE(kt_model_tensor_read_f32(model, index, values.data(), values.size(), nullptr) == KT_STATUS_OK);
    return values;
}

// Loads one golden file and checks that dequantizing each of its tensors t0 .. t<count-1> gives tN.f32 bit for bit.
// Returns the number of values compared.
size_t check_golden_file(const std::string &path, const char *type, int count) {
    INFO("file " << path);
    ModelHandle h;
    kt_error err = {sizeof(kt_error), 0, {0}};
    REQUIRE(kt_model_load(path.c_str(), nullptr, &h.model, &err) == KT_STATUS_OK);
    const char *golden_type = nullptr;
    REQUIRE(kt_model_meta_get_string(h.model, "golden.type", &golden_type, nullptr) == KT_STATUS_OK);
    CHECK(std::string(golden_type) == type);

    size_t values = 0;
    for (int n = 0; n < count; ++n) {
        const std::string name = "t" + std::to_string(n);
        kt_tensor_info qinfo, finfo;
        const std::vector<float> got = read_tensor(h.model, name, &qinfo);
        const std::vector<float> expected = read_tensor(h.model, name + ".f32", &finfo);
        INFO("tensor " << name << " of type " << kt_type_name(qinfo.type));
        REQUIRE(std::string(kt_type_name(qinfo.type)) == type);
        REQUIRE(finfo.type == KT_TYPE_F32);
        REQUIRE(got.size() == expected.size());
        size_t mismatches = 0, first = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            uint32_t a, b;
            std::memcpy(&a, &got[i], 4);
            std::memcpy(&b, &expected[i], 4);
            if (a != b && mismatches++ == 0) first = i;
        }
        INFO("first mismatch at element " << first << ": kt " << got[first] << " vs llama.cpp " << expected[first]);
        CHECK(mismatches == 0);
        values += got.size();
    }
    return values;
}

}  // namespace

TEST_CASE("golden: dequantization matches llama.cpp bit for bit") {
    const char *types[] = {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                           "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"};
    size_t total_values = 0;
    for (const char *type : types)
        total_values += check_golden_file(kt::test::testdata_path(std::string("quants/") + type + ".gguf"), type, 4);
    CHECK(total_values > 100000);
}

// The grid formats' golden files live in this repository (tests/data/iq_quants, made by llama.cpp's ggml; its
// README says how): t0-t3 quantized by ggml from f32 data, t4 random bits, so every grid entry, sign pattern and
// scale code is decoded at least once with high probability.
TEST_CASE("golden: the IQ1-IQ3 grid formats dequantize as llama.cpp's do, bit for bit") {
    const char *types[] = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"};
    size_t total_values = 0;
    for (const char *type : types)
        total_values += check_golden_file(std::string(KT_REPO_TESTDATA_DIR "/iq_quants/") + type + ".gguf", type, 5);
    CHECK(total_values == 7u * (256 * 6 + 1024 * 3 + 256 * 8 + 512 * 2 + 4096 * 8));
}
