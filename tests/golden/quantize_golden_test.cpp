// Golden quantization: shared/testdata/quants/<TYPE>.gguf holds, for each tensor tN, the f32 input (tN.src) and the
// bytes llama.cpp's reference quantizer made of it (tN), with its dequantization (tN.f32). See that README.
//   - For the formats kt quantizes by ggml's rules, kt_quantize(tN.src) must equal tN byte for byte.
//   - For the K-quants, IQ4_XS and MXFP4, which kt quantizes with its own search, kt's error must not exceed llama.cpp's
//     on any row (the relative RMS error of dequantize(quantize(src)) against src).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kt.h"
#include "support/test_support.h"

namespace {

struct Golden {
    kt_model *model = nullptr;
    std::vector<uint8_t> file;
    ~Golden() { kt_model_free(model); }
};

void open_golden(const char *type, Golden *g) {
    const std::string path = kt::test::testdata_path(std::string("quants/") + type + ".gguf");
    INFO("file " << path);
    kt_error err = {sizeof(kt_error), 0, {0}};
    REQUIRE(kt_model_load(path.c_str(), nullptr, &g->model, &err) == KT_STATUS_OK);
    g->file = kt::test::read_file(path);
}

kt_tensor_info info_of(const Golden &g, const std::string &name) {
    int64_t index = -1;
    REQUIRE(kt_model_tensor_find(g.model, name.c_str(), &index) == KT_STATUS_OK);
    kt_tensor_info info;
    info.struct_size = sizeof info;
    REQUIRE(kt_model_tensor_info(g.model, index, &info) == KT_STATUS_OK);
    return info;
}

std::vector<float> read_f32(const Golden &g, const std::string &name) {
    const kt_tensor_info info = info_of(g, name);
    REQUIRE(info.type == KT_TYPE_F32);
    std::vector<float> v(info.n_elements);
    int64_t index = -1;
    REQUIRE(kt_model_tensor_find(g.model, name.c_str(), &index) == KT_STATUS_OK);
    REQUIRE(kt_model_tensor_read_f32(g.model, index, v.data(), v.size(), nullptr) == KT_STATUS_OK);
    return v;
}

// kt's quantization of tN.src, with the tensor's geometry.
struct Quantized {
    std::vector<uint8_t> bytes;
    int64_t rows, row_length;
    uint64_t row_bytes;
};

Quantized quantize_source(const Golden &g, const std::string &name, const kt_tensor_info &info) {
    const std::vector<float> src = read_f32(g, name + ".src");
    REQUIRE(src.size() == info.n_elements);
    Quantized q;
    q.row_length = info.ne[0];
    q.rows = static_cast<int64_t>(info.n_elements) / q.row_length;
    q.bytes.resize(info.n_bytes);
    uint64_t written = 0;
    REQUIRE(kt_quantize(info.type, src.data(), q.rows, q.row_length, q.bytes.data(), q.bytes.size(), &written) ==
            KT_STATUS_OK);
    REQUIRE(written == info.n_bytes);
    q.row_bytes = written / static_cast<uint64_t>(q.rows);
    return q;
}

double sum_squares(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (static_cast<double>(a[i]) - (b ? b[i] : 0.0f)) * (a[i] - (b ? b[i] : 0.0f));
    return s;
}

}  // namespace

TEST_CASE("golden: quantizers with ggml's rules reproduce llama.cpp's bytes") {
    const char *types[] = {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL"};
    int rows_checked = 0;
    for (const char *type : types) {
        Golden g;
        open_golden(type, &g);
        for (int n = 0; n < 4; ++n) {
            const std::string name = "t" + std::to_string(n);
            const kt_tensor_info info = info_of(g, name);
            INFO(type << " tensor " << name);
            const Quantized q = quantize_source(g, name, info);
            REQUIRE(info.file_offset + info.n_bytes <= g.file.size());
            const uint8_t *expected = g.file.data() + info.file_offset;
            std::string mismatched_rows;
            for (int64_t r = 0; r < q.rows; ++r, ++rows_checked)
                if (std::memcmp(q.bytes.data() + r * q.row_bytes, expected + r * q.row_bytes, q.row_bytes) != 0)
                    mismatched_rows += " " + std::to_string(r);
            INFO("rows whose bytes differ:" << mismatched_rows);
            CHECK(mismatched_rows.empty());
        }
    }
    CHECK(rows_checked == 2 * 20 + 6 * 21);
}

TEST_CASE("golden: kt's K-quants, IQ4_XS and MXFP4 are at least as accurate as llama.cpp's on every row") {
    const char *types[] = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "MXFP4"};
    for (const char *type : types) {
        Golden g;
        open_golden(type, &g);
        double kt_total = 0, llama_total = 0;
        for (int n = 0; n < 4; ++n) {
            const std::string name = "t" + std::to_string(n);
            const kt_tensor_info info = info_of(g, name);
            const Quantized q = quantize_source(g, name, info);
            const std::vector<float> src = read_f32(g, name + ".src");
            const std::vector<float> llama = read_f32(g, name + ".f32");
            std::vector<float> ours(src.size());
            REQUIRE(kt_dequantize(info.type, q.bytes.data(), q.bytes.size(), q.rows, q.row_length, ours.data(),
                                  ours.size()) == KT_STATUS_OK);
            for (int64_t r = 0; r < q.rows; ++r) {
                const int64_t at = r * q.row_length;
                const double norm = sum_squares(src.data() + at, nullptr, q.row_length);
                const double e_kt = sum_squares(ours.data() + at, src.data() + at, q.row_length);
                const double e_llama = sum_squares(llama.data() + at, src.data() + at, q.row_length);
                INFO(type << " " << name << " row " << r << ": relative RMS error kt " << std::sqrt(e_kt / norm)
                          << ", llama.cpp " << std::sqrt(e_llama / norm));
                CHECK(e_kt <= e_llama * (1 + 1e-6));
                kt_total += e_kt;
                llama_total += e_llama;
            }
        }
        INFO(type << ": total squared error kt " << kt_total << ", llama.cpp " << llama_total);
        CHECK(kt_total < llama_total);
    }
}
