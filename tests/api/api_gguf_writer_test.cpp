// kt_gguf_writer_* through the C ABI: a file with every metadata type and several tensor types (quantized with
// kt_quantize, copied and streamed), read back with kt_model_load; and every error path.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "kt.h"
#include "support/test_support.h"

namespace {

struct Writer {
    kt_gguf_writer *w = nullptr;
    explicit Writer(uint32_t alignment = 0) { REQUIRE(kt_gguf_writer_create(alignment, &w) == KT_STATUS_OK); }
    ~Writer() { kt_gguf_writer_free(w); }
    std::string error() const { return kt_gguf_writer_last_error(w); }
};

struct Model {
    kt_model *m = nullptr;
    explicit Model(const std::string &path) {
        kt_error err = {sizeof(kt_error), 0, {0}};
        const kt_status s = kt_model_load(path.c_str(), nullptr, &m, &err);
        INFO(err.message);
        REQUIRE(s == KT_STATUS_OK);
    }
    ~Model() { kt_model_free(m); }
};

std::vector<uint8_t> quantize(int32_t type, const std::vector<float> &x, int64_t n_per_row) {
    uint64_t bytes = 0;
    const int64_t rows = static_cast<int64_t>(x.size()) / n_per_row;
    REQUIRE(kt_quantize(type, x.data(), rows, n_per_row, nullptr, 0, &bytes) == KT_STATUS_BUFFER_TOO_SMALL);
    std::vector<uint8_t> q(bytes);
    REQUIRE(kt_quantize(type, x.data(), rows, n_per_row, q.data(), q.size(), nullptr) == KT_STATUS_OK);
    return q;
}

// A tensor to write and what to expect back.
struct TensorCase {
    std::string name;
    int32_t type;
    std::vector<int64_t> ne;
    bool streamed;
    std::vector<float> values;  // the f32 source
    std::vector<uint8_t> bytes;  // kt_quantize's result
    int fills = 0;               // calls of the fill callback
};

int64_t elements(const std::vector<int64_t> &ne) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
}

// The fill callback quantizes on demand, as a streaming exporter would.
int32_t fill_tensor(void *dst, uint64_t n_bytes, void *user_data) {
    auto *t = static_cast<TensorCase *>(user_data);
    ++t->fills;
    uint64_t written = 0;
    const kt_status s = kt_quantize(t->type, t->values.data(), elements(t->ne) / t->ne[0], t->ne[0], dst, n_bytes, &written);
    return s == KT_STATUS_OK && written == n_bytes ? 0 : 1;
}

int32_t fail_fill(void *, uint64_t, void *user_data) {
    ++*static_cast<int *>(user_data);
    return 7;
}

std::vector<std::string> directory_entries(const std::string &dir) {
    std::vector<std::string> names;
    for (const auto &e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    return names;
}

int64_t get_int(kt_model *m, const char *key) {
    int64_t v = 0;
    INFO(key);
    REQUIRE(kt_model_meta_get_int(m, key, &v) == KT_STATUS_OK);
    return v;
}

void check_type(kt_model *m, const char *key, int32_t type, int32_t element_type = -1) {
    int32_t t = -2, e = -2;
    INFO(key);
    REQUIRE(kt_model_meta_type(m, key, &t, &e) == KT_STATUS_OK);
    CHECK(t == type);
    CHECK(e == element_type);
}

template <typename T>
void set_array(kt_gguf_writer *w, const char *key, int32_t element_type, const std::vector<T> &v) {
    INFO(key);
    REQUIRE(kt_gguf_writer_set_array(w, key, element_type, v.data(), v.size()) == KT_STATUS_OK);
}

template <typename T>
void check_int_array(kt_model *m, const char *key, int32_t element_type, const std::vector<T> &v) {
    check_type(m, key, KT_META_ARRAY, element_type);
    uint64_t length = 0;
    REQUIRE(kt_model_meta_array_length(m, key, &length) == KT_STATUS_OK);
    REQUIRE(length == v.size());
    for (uint64_t i = 0; i < length; ++i) {
        int64_t got = 0;
        REQUIRE(kt_model_meta_array_get_int(m, key, i, &got) == KT_STATUS_OK);
        CHECK(got == static_cast<int64_t>(v[i]));
    }
}

}  // namespace

TEST_CASE("api: a GGUF written through the C ABI reads back with every value and tensor intact") {
    kt::test::TempDir dir;
    const std::string path = dir.file("synthetic.gguf");
    constexpr uint32_t kAlignment = 64;
    Writer w(kAlignment);
    kt_gguf_writer *g = w.w;

    // ---- metadata: every GGUF value type ----
    REQUIRE(kt_gguf_writer_set_string(g, "general.architecture", "synth", 5) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_int(g, "t.u8", KT_META_UINT8, 255) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_int(g, "t.i8", KT_META_INT8, -128) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_int(g, "t.u16", KT_META_UINT16, 65535) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_int(g, "t.i16", KT_META_INT16, -32768) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_int(g, "t.u32", KT_META_UINT32, 4294967295ll) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_int(g, "t.i32", KT_META_INT32, INT32_MIN) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_int(g, "t.i64", KT_META_INT64, INT64_MIN) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_int(g, "t.u64.small", KT_META_UINT64, 12345) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_uint64(g, "t.u64", UINT64_MAX) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_float(g, "t.f32", KT_META_FLOAT32, 1.5) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_float(g, "t.f32.inf", KT_META_FLOAT32, -INFINITY) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_float(g, "t.f64", KT_META_FLOAT64, 1e300) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_bool(g, "t.bool", 1) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_string(g, "t.str", "a\0b", 3) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_string(g, "t.str.empty", nullptr, 0) == KT_STATUS_OK);
    set_array(g, "t.a.u8", KT_META_UINT8, std::vector<uint8_t>{0, 1, 255});
    set_array(g, "t.a.i8", KT_META_INT8, std::vector<int8_t>{-128, 0, 127});
    set_array(g, "t.a.u16", KT_META_UINT16, std::vector<uint16_t>{1, 65535});
    set_array(g, "t.a.i16", KT_META_INT16, std::vector<int16_t>{-32768, 32767});
    set_array(g, "t.a.u32", KT_META_UINT32, std::vector<uint32_t>{7, 4294967295u});
    set_array(g, "t.a.i32", KT_META_INT32, std::vector<int32_t>{INT32_MIN, -1, INT32_MAX});
    set_array(g, "t.a.u64", KT_META_UINT64, std::vector<uint64_t>{0, 1ull << 40});
    set_array(g, "t.a.i64", KT_META_INT64, std::vector<int64_t>{INT64_MIN, INT64_MAX});
    set_array(g, "t.a.f32", KT_META_FLOAT32, std::vector<float>{0.25f, -3.5f});
    set_array(g, "t.a.f64", KT_META_FLOAT64, std::vector<double>{1e-300, 2.0});
    set_array(g, "t.a.bool", KT_META_BOOL, std::vector<uint8_t>{1, 0, 1});
    REQUIRE(kt_gguf_writer_set_array(g, "t.a.empty", KT_META_INT32, nullptr, 0) == KT_STATUS_OK);
    const char *strings[] = {"first", "x\0y", "", "last"};
    const uint64_t lengths[] = {5, 3, 0, 4};
    REQUIRE(kt_gguf_writer_set_array_string(g, "t.a.str", strings, lengths, 4) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_array_string(g, "t.a.str.nul", strings, nullptr, 4) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_set_array_string(g, "t.a.str.empty", nullptr, nullptr, 0) == KT_STATUS_OK);
    constexpr int64_t kKeysSet = 31;

    // ---- tensors: block formats of both widths, plain types, 1-D to 4-D, copied and streamed ----
    std::vector<TensorCase> tensors = {
        {"w.q4_k", KT_TYPE_Q4_K, {512, 3}, false, {}, {}, 0},
        {"w.q6_k", KT_TYPE_Q6_K, {256}, true, {}, {}, 0},
        {"w.q8_0", KT_TYPE_Q8_0, {64, 2, 2}, true, {}, {}, 0},
        {"w.iq4_nl", KT_TYPE_IQ4_NL, {32, 2, 2, 2}, false, {}, {}, 0},
        {"w.q2_k", KT_TYPE_Q2_K, {256, 2}, false, {}, {}, 0},
        {"w.f16", KT_TYPE_F16, {7, 5}, false, {}, {}, 0},
        {"w.bf16", KT_TYPE_BF16, {9}, true, {}, {}, 0},
        {"w.f32", KT_TYPE_F32, {10, 1}, false, {}, {}, 0},
    };
    uint64_t seed = 100;
    for (TensorCase &t : tensors) {
        t.values = kt::test::random_normal(static_cast<size_t>(elements(t.ne)), seed++);
        t.bytes = quantize(t.type, t.values, t.ne[0]);
        INFO(t.name);
        if (t.streamed) {
            REQUIRE(kt_gguf_writer_add_tensor_fill(g, t.name.c_str(), t.type, static_cast<int32_t>(t.ne.size()),
                                                   t.ne.data(), fill_tensor, &t) == KT_STATUS_OK);
        } else {
            std::vector<uint8_t> callers = t.bytes;
            REQUIRE(kt_gguf_writer_add_tensor(g, t.name.c_str(), t.type, static_cast<int32_t>(t.ne.size()), t.ne.data(),
                                              callers.data(), callers.size()) == KT_STATUS_OK);
            std::fill(callers.begin(), callers.end(), 0);  // the writer made its own copy
        }
    }
    INFO(w.error());
    REQUIRE(kt_gguf_writer_write_file(g, path.c_str()) == KT_STATUS_OK);
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{"synthetic.gguf"});
    for (const TensorCase &t : tensors) CHECK(t.fills == (t.streamed ? 1 : 0));

    Model model(path);
    kt_model *m = model.m;

    // ---- metadata back ----
    CHECK(kt_model_gguf_version(m) == 3);
    CHECK(std::string(kt_model_architecture(m)) == "synth");
    REQUIRE(kt_model_meta_count(m) == kKeysSet + 1);  // + general.alignment, added for a non-default alignment
    const char *key = nullptr;
    REQUIRE(kt_model_meta_key(m, 0, &key) == KT_STATUS_OK);
    CHECK(std::string(key) == "general.alignment");
    CHECK(get_int(m, "general.alignment") == kAlignment);
    REQUIRE(kt_model_meta_key(m, 1, &key) == KT_STATUS_OK);
    CHECK(std::string(key) == "general.architecture");  // then insertion order
    REQUIRE(kt_model_meta_key(m, kKeysSet, &key) == KT_STATUS_OK);
    CHECK(std::string(key) == "t.a.str.empty");

    check_type(m, "t.u8", KT_META_UINT8);
    CHECK(get_int(m, "t.u8") == 255);
    check_type(m, "t.i8", KT_META_INT8);
    CHECK(get_int(m, "t.i8") == -128);
    check_type(m, "t.u16", KT_META_UINT16);
    CHECK(get_int(m, "t.u16") == 65535);
    check_type(m, "t.i16", KT_META_INT16);
    CHECK(get_int(m, "t.i16") == -32768);
    check_type(m, "t.u32", KT_META_UINT32);
    CHECK(get_int(m, "t.u32") == 4294967295ll);
    check_type(m, "t.i32", KT_META_INT32);
    CHECK(get_int(m, "t.i32") == INT32_MIN);
    check_type(m, "t.i64", KT_META_INT64);
    CHECK(get_int(m, "t.i64") == INT64_MIN);
    check_type(m, "t.u64.small", KT_META_UINT64);
    CHECK(get_int(m, "t.u64.small") == 12345);
    check_type(m, "t.u64", KT_META_UINT64);
    int64_t too_big = 0;
    CHECK(kt_model_meta_get_int(m, "t.u64", &too_big) == KT_STATUS_TYPE_MISMATCH);  // above INT64_MAX
    double f = 0;
    REQUIRE(kt_model_meta_get_float(m, "t.u64", &f) == KT_STATUS_OK);
    CHECK(f == 18446744073709551615.0);
    check_type(m, "t.f32", KT_META_FLOAT32);
    REQUIRE(kt_model_meta_get_float(m, "t.f32", &f) == KT_STATUS_OK);
    CHECK(f == 1.5);
    REQUIRE(kt_model_meta_get_float(m, "t.f32.inf", &f) == KT_STATUS_OK);
    CHECK(f == -INFINITY);
    check_type(m, "t.f64", KT_META_FLOAT64);
    REQUIRE(kt_model_meta_get_float(m, "t.f64", &f) == KT_STATUS_OK);
    CHECK(f == 1e300);
    check_type(m, "t.bool", KT_META_BOOL);
    CHECK(get_int(m, "t.bool") == 1);
    check_type(m, "t.str", KT_META_STRING);
    const char *s = nullptr;
    uint64_t length = 0;
    REQUIRE(kt_model_meta_get_string(m, "t.str", &s, &length) == KT_STATUS_OK);
    CHECK(std::string(s, length) == std::string("a\0b", 3));
    REQUIRE(kt_model_meta_get_string(m, "t.str.empty", &s, &length) == KT_STATUS_OK);
    CHECK(length == 0);

    check_int_array(m, "t.a.u8", KT_META_UINT8, std::vector<uint8_t>{0, 1, 255});
    check_int_array(m, "t.a.i8", KT_META_INT8, std::vector<int8_t>{-128, 0, 127});
    check_int_array(m, "t.a.u16", KT_META_UINT16, std::vector<uint16_t>{1, 65535});
    check_int_array(m, "t.a.i16", KT_META_INT16, std::vector<int16_t>{-32768, 32767});
    check_int_array(m, "t.a.u32", KT_META_UINT32, std::vector<uint32_t>{7, 4294967295u});
    check_int_array(m, "t.a.i32", KT_META_INT32, std::vector<int32_t>{INT32_MIN, -1, INT32_MAX});
    check_int_array(m, "t.a.u64", KT_META_UINT64, std::vector<uint64_t>{0, 1ull << 40});
    check_int_array(m, "t.a.i64", KT_META_INT64, std::vector<int64_t>{INT64_MIN, INT64_MAX});
    check_int_array(m, "t.a.bool", KT_META_BOOL, std::vector<uint8_t>{1, 0, 1});
    check_int_array(m, "t.a.empty", KT_META_INT32, std::vector<int32_t>{});
    check_type(m, "t.a.f32", KT_META_ARRAY, KT_META_FLOAT32);
    REQUIRE(kt_model_meta_array_get_float(m, "t.a.f32", 1, &f) == KT_STATUS_OK);
    CHECK(f == -3.5);
    check_type(m, "t.a.f64", KT_META_ARRAY, KT_META_FLOAT64);
    REQUIRE(kt_model_meta_array_get_float(m, "t.a.f64", 0, &f) == KT_STATUS_OK);
    CHECK(f == 1e-300);
    for (const char *k : {"t.a.str", "t.a.str.nul"}) {
        INFO(k);
        check_type(m, k, KT_META_ARRAY, KT_META_STRING);
        REQUIRE(kt_model_meta_array_length(m, k, &length) == KT_STATUS_OK);
        REQUIRE(length == 4);
        const bool nul_terminated = std::string(k) == "t.a.str.nul";
        for (uint64_t i = 0; i < 4; ++i) {
            REQUIRE(kt_model_meta_array_get_string(m, k, i, &s, &length) == KT_STATUS_OK);
            // Given NUL-terminated, "x\0y" ends at its NUL.
            const std::string expected = nul_terminated ? std::string(strings[i]) : std::string(strings[i], lengths[i]);
            CHECK(std::string(s, length) == expected);
        }
    }
    REQUIRE(kt_model_meta_array_length(m, "t.a.str.empty", &length) == KT_STATUS_OK);
    CHECK(length == 0);

    // ---- tensors back: shape, type, placement, raw bytes, and values equal to kt_dequantize of those bytes ----
    const std::vector<uint8_t> file = kt::test::read_file(path);
    REQUIRE(kt_model_tensor_count(m) == static_cast<int64_t>(tensors.size()));
    for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorCase &t = tensors[i];
        INFO(t.name);
        int64_t index = -1;
        REQUIRE(kt_model_tensor_find(m, t.name.c_str(), &index) == KT_STATUS_OK);
        CHECK(index == static_cast<int64_t>(i));
        kt_tensor_info info;
        info.struct_size = sizeof info;
        REQUIRE(kt_model_tensor_info(m, index, &info) == KT_STATUS_OK);
        CHECK(info.type == t.type);
        REQUIRE(info.n_dims == static_cast<int32_t>(t.ne.size()));
        for (int d = 0; d < KT_MAX_DIMS; ++d)
            CHECK(info.ne[d] == (d < info.n_dims ? t.ne[static_cast<size_t>(d)] : 1));
        REQUIRE(info.n_bytes == t.bytes.size());
        CHECK(info.file_offset % kAlignment == 0);
        REQUIRE(info.file_offset + info.n_bytes <= file.size());
        CHECK(std::memcmp(file.data() + info.file_offset, t.bytes.data(), t.bytes.size()) == 0);

        std::vector<float> read(info.n_elements), expected(info.n_elements);
        REQUIRE(kt_model_tensor_read_f32(m, index, read.data(), read.size(), nullptr) == KT_STATUS_OK);
        REQUIRE(kt_dequantize(t.type, t.bytes.data(), t.bytes.size(), elements(t.ne) / t.ne[0], t.ne[0],
                              expected.data(), expected.size()) == KT_STATUS_OK);
        CHECK(std::memcmp(read.data(), expected.data(), read.size() * sizeof(float)) == 0);
        if (t.type == KT_TYPE_F32) CHECK(read == t.values);
    }

    // The writer is still usable: a second write produces the same file, calling each fill once more.
    const std::string again = dir.file("again.gguf");
    REQUIRE(kt_gguf_writer_write_file(g, again.c_str()) == KT_STATUS_OK);
    CHECK(kt::test::read_file(again) == file);
    for (const TensorCase &t : tensors) CHECK(t.fills == (t.streamed ? 2 : 0));
}

TEST_CASE("api: GGUF writer creation, NULL handles and NULL arguments") {
    kt_gguf_writer *w = reinterpret_cast<kt_gguf_writer *>(1);
    CHECK(kt_gguf_writer_create(12, &w) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(w == nullptr);
    CHECK(kt_gguf_writer_create(4, &w) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_create(1u << 31, &w) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_create(0, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    kt_gguf_writer_free(nullptr);
    CHECK(std::string(kt_gguf_writer_last_error(nullptr)) == "writer is NULL");

    const int64_t ne[] = {32};
    const uint8_t byte = 1;
    CHECK(kt_gguf_writer_set_int(nullptr, "k", KT_META_INT32, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_uint64(nullptr, "k", 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_float(nullptr, "k", KT_META_FLOAT32, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_bool(nullptr, "k", 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_string(nullptr, "k", "v", 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array(nullptr, "k", KT_META_UINT8, &byte, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array_string(nullptr, "k", nullptr, nullptr, 0) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(nullptr, "t", KT_TYPE_F32, 1, ne, &byte, 128) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor_fill(nullptr, "t", KT_TYPE_F32, 1, ne, fail_fill, nullptr) ==
          KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_write_file(nullptr, "x.gguf") == KT_STATUS_INVALID_ARGUMENT);

    Writer wr;
    CHECK(kt_gguf_writer_set_int(wr.w, nullptr, KT_META_INT32, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(wr.error().find("key is NULL") != std::string::npos);
    CHECK(kt_gguf_writer_set_string(wr.w, "k", nullptr, 3) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array(wr.w, "k", KT_META_UINT8, nullptr, 2) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array_string(wr.w, "k", nullptr, nullptr, 2) == KT_STATUS_INVALID_ARGUMENT);
    const char *with_null[] = {"a", nullptr};
    CHECK(kt_gguf_writer_set_array_string(wr.w, "k", with_null, nullptr, 2) == KT_STATUS_INVALID_ARGUMENT);
    const uint64_t zero_lengths[] = {1, 0};
    CHECK(kt_gguf_writer_set_array_string(wr.w, "k", with_null, zero_lengths, 2) == KT_STATUS_OK);
    CHECK(kt_gguf_writer_write_file(wr.w, nullptr) == KT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("api: GGUF writer setters reject bad keys, types and values, and add nothing when they do") {
    kt::test::TempDir dir;
    Writer wr;
    kt_gguf_writer *w = wr.w;
    // Range checks per integer type.
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_UINT8, 256) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(wr.error().find("'k'") != std::string::npos);
    CHECK(wr.error().find("256") != std::string::npos);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_UINT8, -1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_INT8, -129) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_INT8, 128) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_UINT16, 65536) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_INT16, -32769) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_UINT32, 1ll << 32) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_INT32, 1ll << 31) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_UINT64, -1) == KT_STATUS_INVALID_ARGUMENT);
    // Types a setter does not take.
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_FLOAT32, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_BOOL, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_STRING, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "k", 99, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_float(w, "k", KT_META_INT32, 1) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_float(w, "k", KT_META_FLOAT32, 1e39) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_bool(w, "k", 2) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_bool(w, "k", -1) == KT_STATUS_INVALID_ARGUMENT);
    const uint8_t bools[] = {1, 2};
    CHECK(kt_gguf_writer_set_array(w, "k", KT_META_BOOL, bools, 2) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array(w, "k", KT_META_STRING, bools, 2) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array(w, "k", KT_META_ARRAY, bools, 2) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array(w, "k", 13, bools, 2) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array(w, "k", -1, bools, 2) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_array(w, "k", KT_META_UINT64, bools, UINT64_MAX / 4) == KT_STATUS_INVALID_ARGUMENT);
    // Keys: empty, too long, duplicated (whatever the types).
    CHECK(kt_gguf_writer_set_int(w, "", KT_META_INT32, 1) == KT_STATUS_INVALID_ARGUMENT);
    const std::string long_key(65536, 'k');
    CHECK(kt_gguf_writer_set_int(w, long_key.c_str(), KT_META_INT32, 1) == KT_STATUS_INVALID_ARGUMENT);
    // A key that is not valid UTF-8 (llama.cpp refuses such a file): a stray byte, an overlong '/', a surrogate.
    for (const char *bad : {"test.\xff", "test.\xc0\xaf", "test.\xed\xa0\x80", "test.\xe4\xbd"}) {
        CHECK(kt_gguf_writer_set_int(w, bad, KT_META_INT32, 1) == KT_STATUS_INVALID_ARGUMENT);
        CHECK(wr.error().find("not valid UTF-8") != std::string::npos);
    }
    CHECK(kt_gguf_writer_set_int(w, "test.\xe4\xbd\xa0", KT_META_INT32, 1) == KT_STATUS_OK);  // U+4F60 is fine
    // None of the failures added "k": it can be set now, once.
    REQUIRE(kt_gguf_writer_set_int(w, "k", KT_META_UINT8, 3) == KT_STATUS_OK);
    CHECK(kt_gguf_writer_set_int(w, "k", KT_META_UINT8, 4) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(wr.error().find("'k' is already set") != std::string::npos);
    CHECK(kt_gguf_writer_set_string(w, "k", "v", 1) == KT_STATUS_INVALID_ARGUMENT);
    // general.alignment must be the writer's own, as UINT32.
    CHECK(kt_gguf_writer_set_int(w, "general.alignment", KT_META_INT32, 32) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "general.alignment", KT_META_UINT32, 64) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_set_int(w, "general.alignment", KT_META_UINT32, 32) == KT_STATUS_OK);

    const std::string path = dir.file("m.gguf");
    REQUIRE(kt_gguf_writer_write_file(w, path.c_str()) == KT_STATUS_OK);
    Model model(path);
    CHECK(kt_model_meta_count(model.m) == 3);
    CHECK(get_int(model.m, "k") == 3);
    CHECK(kt_model_interop_warning_count(model.m) == 0);
}

TEST_CASE("api: GGUF writer rejects bad tensors at the call that adds them") {
    Writer wr;
    kt_gguf_writer *w = wr.w;
    std::vector<uint8_t> bytes(4096);
    const int64_t ne_q4k[] = {256, 2}, ne_bad_row[] = {100, 2}, ne_zero[] = {32, 0}, ne_negative[] = {32, -1};
    const int64_t q4k_bytes = 2 * 144;
    CHECK(kt_gguf_writer_add_tensor(w, nullptr, KT_TYPE_Q4_K, 2, ne_q4k, bytes.data(), q4k_bytes) ==
          KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(w, "", KT_TYPE_Q4_K, 2, ne_q4k, bytes.data(), q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    // 64 bytes: the spec allows it, ggml (GGML_MAX_NAME with its NUL) does not, so kt never writes it.
    const std::string long_name(64, 'n');
    CHECK(kt_gguf_writer_add_tensor(w, long_name.c_str(), KT_TYPE_Q4_K, 2, ne_q4k, bytes.data(), q4k_bytes) ==
          KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(w, "t\xff", KT_TYPE_Q4_K, 2, ne_q4k, bytes.data(), q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(wr.error().find("not valid UTF-8") != std::string::npos);
    CHECK(kt_gguf_writer_add_tensor(w, std::string(63, 'n').c_str(), KT_TYPE_Q4_K, 2, ne_q4k, bytes.data(), q4k_bytes) ==
          KT_STATUS_OK);
    CHECK(kt_gguf_writer_add_tensor(w, "t", 4, 2, ne_q4k, bytes.data(), q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(wr.error().find("unknown type 4") != std::string::npos);
    CHECK(kt_gguf_writer_add_tensor(w, "t", 99, 2, ne_q4k, bytes.data(), q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_Q4_K, 0, ne_q4k, bytes.data(), q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_Q4_K, 5, ne_q4k, bytes.data(), q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_Q4_K, 2, nullptr, bytes.data(), q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_Q4_K, 2, ne_bad_row, bytes.data(), q4k_bytes) ==
          KT_STATUS_INVALID_ARGUMENT);
    CHECK(wr.error().find("not a multiple") != std::string::npos);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_F32, 2, ne_zero, bytes.data(), 0) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_F32, 2, ne_negative, bytes.data(), 0) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_Q4_K, 2, ne_q4k, bytes.data(), q4k_bytes - 1) ==
          KT_STATUS_INVALID_ARGUMENT);
    CHECK(wr.error().find("needs 288 bytes") != std::string::npos);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_Q4_K, 2, ne_q4k, nullptr, q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_gguf_writer_add_tensor_fill(w, "t", KT_TYPE_Q4_K, 2, ne_q4k, nullptr, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    // After all that, "t" is still free; once added, its name is taken for both kinds of tensor.
    REQUIRE(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_Q4_K, 2, ne_q4k, bytes.data(), q4k_bytes) == KT_STATUS_OK);
    CHECK(kt_gguf_writer_add_tensor(w, "t", KT_TYPE_Q4_K, 2, ne_q4k, bytes.data(), q4k_bytes) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(wr.error().find("'t' is already added") != std::string::npos);
    CHECK(kt_gguf_writer_add_tensor_fill(w, "t", KT_TYPE_Q4_K, 2, ne_q4k, fail_fill, nullptr) ==
          KT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("api: a failing fill callback or an unwritable path leaves no file behind") {
    kt::test::TempDir dir;
    Writer wr;
    kt_gguf_writer *w = wr.w;
    std::vector<float> values(64, 0.5f);
    const int64_t ne[] = {64};
    REQUIRE(kt_gguf_writer_set_string(w, "general.architecture", "synth", 5) == KT_STATUS_OK);
    REQUIRE(kt_gguf_writer_add_tensor(w, "a", KT_TYPE_F32, 1, ne, values.data(), 256) == KT_STATUS_OK);
    int calls = 0;
    REQUIRE(kt_gguf_writer_add_tensor_fill(w, "b", KT_TYPE_Q8_0, 1, ne, fail_fill, &calls) == KT_STATUS_OK);

    const std::string path = dir.file("model.gguf");
    CHECK(kt_gguf_writer_write_file(w, path.c_str()) == KT_STATUS_CANCELLED);
    CHECK(calls == 1);
    CHECK(wr.error().find("'b'") != std::string::npos);
    CHECK(wr.error().find("returned 7") != std::string::npos);
    CHECK(directory_entries(dir.path()).empty());

    // An existing file keeps its contents.
    kt::test::write_file(path, {1, 2, 3});
    CHECK(kt_gguf_writer_write_file(w, path.c_str()) == KT_STATUS_CANCELLED);
    CHECK(kt::test::read_file(path) == std::vector<uint8_t>{1, 2, 3});
    CHECK(directory_entries(dir.path()) == std::vector<std::string>{"model.gguf"});

    CHECK(kt_gguf_writer_write_file(w, dir.file("no/such/dir/m.gguf").c_str()) == KT_STATUS_IO_ERROR);
    CHECK(wr.error().find("no/such/dir") != std::string::npos);
}
