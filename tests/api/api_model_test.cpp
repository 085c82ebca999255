// kt_model_* through the C ABI: success paths, progress and cancellation, and every error path.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "kt.h"
#include "model/gguf/gguf.h"
#include "support/hostile_gguf.h"
#include "support/test_support.h"

namespace {

std::string write_valid(const kt::test::TempDir &dir, const std::string &name = "valid.gguf") {
    const std::string path = dir.file(name);
    kt::test::write_file(path, kt::test::small_valid_gguf().serialize());
    return path;
}

kt_model *load_ok(const std::string &path, const kt_model_params *params = nullptr) {
    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    const kt_status s = kt_model_load(path.c_str(), params, &model, &err);
    INFO(err.message);
    REQUIRE(s == KT_STATUS_OK);
    REQUIRE(model != nullptr);
    return model;
}

struct ProgressLog {
    std::vector<float> values;
    int cancel_after = -1;
};

int32_t log_progress(float p, void *user_data) {
    auto *log = static_cast<ProgressLog *>(user_data);
    log->values.push_back(p);
    return log->cancel_after >= 0 && static_cast<int>(log->values.size()) >= log->cancel_after;  // non-zero: cancel
}

}  // namespace

TEST_CASE("api: version and status strings") {
    CHECK(kt_version_number() == KT_VERSION_NUMBER);
    CHECK(std::string(kt_version_string()) ==
          std::to_string(KT_VERSION_MAJOR) + "." + std::to_string(KT_VERSION_MINOR) + "." + std::to_string(KT_VERSION_PATCH));
    CHECK(std::string(kt_build_info()).find("kt ") == 0);
    for (kt_status s = 0; s <= KT_STATUS_BUSY; ++s) CHECK(std::string(kt_status_string(s)) != "unknown status");
    CHECK(std::string(kt_status_string(9999)) == "unknown status");
    CHECK(std::string(kt_type_name(KT_TYPE_Q4_K)) == "Q4_K");
    CHECK(kt_type_name(4) == nullptr);
    CHECK(kt_type_block_size(KT_TYPE_Q4_K) == 256);
    CHECK(kt_type_block_bytes(KT_TYPE_Q4_K) == 144);
}

TEST_CASE("api: metadata and tensors of a valid file, with and without mmap") {
    kt::test::TempDir dir;
    const std::string path = write_valid(dir);
    for (int use_mmap = 0; use_mmap <= 1; ++use_mmap) {
        kt_model_params p;
        kt_model_params_init(&p);
        p.use_mmap = use_mmap;
        kt_model *m = load_ok(path, &p);
        CHECK(kt_model_gguf_version(m) == 3);
        CHECK(std::string(kt_model_architecture(m)) == "llama");
        CHECK(kt_model_meta_count(m) == 17);
        const char *key = nullptr;
        REQUIRE(kt_model_meta_key(m, 2, &key) == KT_STATUS_OK);
        CHECK(std::string(key) == "test.u8");
        CHECK(kt_model_meta_key(m, 17, &key) == KT_STATUS_NOT_FOUND);
        CHECK(std::string(kt_model_last_error(m)).find("17") != std::string::npos);

        int32_t type = -2, element = -2;
        REQUIRE(kt_model_meta_type(m, "test.strings", &type, &element) == KT_STATUS_OK);
        CHECK(type == KT_META_ARRAY);
        CHECK(element == KT_META_STRING);
        REQUIRE(kt_model_meta_type(m, "test.f64", &type, &element) == KT_STATUS_OK);
        CHECK(type == KT_META_FLOAT64);
        CHECK(element == -1);

        int64_t i = 0;
        double d = 0;
        const char *s = nullptr;
        uint64_t len = 0;
        REQUIRE(kt_model_meta_get_int(m, "test.i16", &i) == KT_STATUS_OK);
        CHECK(i == -1);
        REQUIRE(kt_model_meta_get_float(m, "test.f32", &d) == KT_STATUS_OK);
        CHECK(d == 1.5);
        REQUIRE(kt_model_meta_get_string(m, "general.name", &s, &len) == KT_STATUS_OK);
        CHECK(std::string(s) == "hostile-base");
        CHECK(len == 12);
        REQUIRE(kt_model_meta_array_length(m, "test.ints", &len) == KT_STATUS_OK);
        CHECK(len == 4);
        REQUIRE(kt_model_meta_array_get_int(m, "test.ints", 1, &i) == KT_STATUS_OK);
        CHECK(i == -2);
        REQUIRE(kt_model_meta_array_get_float(m, "test.ints", 2, &d) == KT_STATUS_OK);
        CHECK(d == 3.0);
        REQUIRE(kt_model_meta_array_get_string(m, "test.strings", 0, &s, nullptr) == KT_STATUS_OK);
        CHECK(std::string(s) == "a");

        CHECK(kt_model_meta_get_int(m, "general.name", &i) == KT_STATUS_TYPE_MISMATCH);
        CHECK(std::string(kt_model_last_error(m)).find("general.name") != std::string::npos);
        CHECK(kt_model_meta_get_int(m, "no.such.key", &i) == KT_STATUS_NOT_FOUND);
        CHECK(kt_model_meta_array_get_string(m, "test.strings", 3, &s, nullptr) == KT_STATUS_NOT_FOUND);

        REQUIRE(kt_model_tensor_count(m) == 3);
        int64_t index = -1;
        REQUIRE(kt_model_tensor_find(m, "t_q8", &index) == KT_STATUS_OK);
        kt_tensor_info info;
        info.struct_size = sizeof info;
        REQUIRE(kt_model_tensor_info(m, index, &info) == KT_STATUS_OK);
        CHECK(std::string(info.name) == "t_q8");
        CHECK(info.type == KT_TYPE_Q8_0);
        CHECK(info.n_bytes == 34);
        CHECK(info.file_offset % 32 == 0);

        std::vector<float> values(32);
        uint64_t needed = 0;
        CHECK(kt_model_tensor_read_f32(m, index, values.data(), 31, &needed) == KT_STATUS_BUFFER_TOO_SMALL);
        CHECK(needed == 32);
        REQUIRE(kt_model_tensor_read_f32(m, index, values.data(), values.size(), nullptr) == KT_STATUS_OK);
        for (int k = 0; k < 32; ++k) CHECK(values[static_cast<size_t>(k)] == static_cast<float>(k - 16));

        REQUIRE(kt_model_tensor_find(m, "t_f16", &index) == KT_STATUS_OK);
        std::vector<float> halves(6);
        REQUIRE(kt_model_tensor_read_f32(m, index, halves.data(), 6, nullptr) == KT_STATUS_OK);
        CHECK(halves[0] == 1.0f);
        CHECK(halves[1] == -2.0f);
        CHECK(halves[2] == 5.9604644775390625e-08f);
        CHECK(halves[3] == 65504.0f);
        CHECK(std::signbit(halves[4]));
        kt_model_free(m);
    }
}

TEST_CASE("api: what other GGUF readers refuse is reported as interoperability warnings") {
    kt::test::TempDir dir;
    // Files llama.cpp (and ggml's own reader) wrote, or would load: none.
    std::vector<std::string> golden;
    for (const char *f : {"models/qwen3moe.q4_k_m.gguf", "models/deepseek2.q8_0.gguf", "models/llama-dense.f32.ref.gguf",
                          "tokenizer/qwen3.gguf", "tokenizer/llama2-spm.gguf", "quants/Q4_K.gguf", "quants/IQ4_XS.gguf"})
        golden.push_back(kt::test::testdata_path(f));
    golden.push_back(write_valid(dir));
    for (const std::string &path : golden) {
        kt_model *m = load_ok(path);
        INFO(path << ": " << (kt_model_interop_warning(m, 0) ? kt_model_interop_warning(m, 0) : ""));
        CHECK(kt_model_interop_warning_count(m) == 0);
        CHECK(kt_model_interop_warning(m, 0) == nullptr);
        kt_model_free(m);
    }
    CHECK(kt_model_interop_warning_count(nullptr) == 0);
    CHECK(kt_model_interop_warning(nullptr, 0) == nullptr);

    // Files kt reads and llama.cpp refuses, one finding each.
    for (const kt::test::InteropCase &c : kt::test::interop_gguf_cases()) {
        const std::string path = dir.file(c.name + ".gguf");
        kt::test::write_file(path, c.bytes);
        kt_model *m = load_ok(path);
        INFO(c.name);
        REQUIRE(kt_model_interop_warning_count(m) == 1);
        INFO(kt_model_interop_warning(m, 0));
        CHECK(std::string(kt_model_interop_warning(m, 0)).find(c.warning) != std::string::npos);
        CHECK(kt_model_interop_warning(m, 1) == nullptr);
        CHECK(kt_model_interop_warning(m, -1) == nullptr);
        kt_model_free(m);
    }
}

TEST_CASE("api: NULL arguments and bad params are reported, never crash") {
    kt::test::TempDir dir;
    const std::string path = write_valid(dir);
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_model *m = nullptr;
    CHECK(kt_model_load(nullptr, nullptr, &m, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(err.message).find("path") != std::string::npos);
    CHECK(kt_model_load(path.c_str(), nullptr, nullptr, &err) == KT_STATUS_INVALID_ARGUMENT);
    kt_model_params p;
    kt_model_params_init(&p);
    p.struct_size = 4;
    CHECK(kt_model_load(path.c_str(), &p, &m, &err) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(m == nullptr);
    kt_model_params_init(&p);
    p.reserved0 = 1;
    CHECK(kt_model_load(path.c_str(), &p, &m, nullptr) == KT_STATUS_INVALID_ARGUMENT);

    m = load_ok(path);
    int64_t i;
    const char *s;
    CHECK(kt_model_meta_get_int(m, nullptr, &i) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_model_meta_get_int(m, "test.u8", nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_model_meta_get_string(nullptr, "x", &s, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_model_tensor_find(m, nullptr, &i) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_model_tensor_info(m, 0, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    kt_tensor_info small_info;
    small_info.struct_size = 8;
    CHECK(kt_model_tensor_info(m, 0, &small_info) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_model_tensor_info(m, 3, &small_info) == KT_STATUS_NOT_FOUND);
    CHECK(kt_model_tensor_info(m, -1, &small_info) == KT_STATUS_NOT_FOUND);
    CHECK(kt_model_tensor_read_f32(m, 0, nullptr, 100, nullptr) == KT_STATUS_INVALID_ARGUMENT);
    CHECK(kt_model_tensor_count(nullptr) == 0);
    CHECK(kt_model_meta_count(nullptr) == 0);
    CHECK(std::string(kt_model_architecture(nullptr)).empty());
    CHECK(std::string(kt_model_last_error(nullptr)) == "model is NULL");
    kt_model_free(m);
}

TEST_CASE("api: missing files, directories and empty files") {
    kt::test::TempDir dir;
    kt_model *m = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    CHECK(kt_model_load(dir.file("absent.gguf").c_str(), nullptr, &m, &err) == KT_STATUS_IO_ERROR);
    CHECK(std::string(err.message).find("absent.gguf") != std::string::npos);
    CHECK(kt_model_load(dir.path().c_str(), nullptr, &m, &err) == KT_STATUS_IO_ERROR);
    const std::string empty = dir.file("empty.gguf");
    kt::test::write_file(empty, {});
    for (int use_mmap = 0; use_mmap <= 1; ++use_mmap) {
        kt_model_params p;
        kt_model_params_init(&p);
        p.use_mmap = use_mmap;
        CHECK(kt_model_load(empty.c_str(), &p, &m, &err) == KT_STATUS_INVALID_FILE);
        CHECK(m == nullptr);
    }
}

TEST_CASE("api: load progress is monotone, ends at exactly 1, and cancellation frees everything") {
    kt::test::TempDir dir;
    // A file large enough to need several prefetch / read steps (16 MiB / 64 MiB chunks).
    kt::gguf::Writer w;
    w.add("general.architecture", kt::gguf::Value::str("llama"));
    w.add_tensor("big", KT_TYPE_F32, {1 << 20, 40}, [](uint8_t *dst, uint64_t n) {
        std::memset(dst, 0, n);
        return kt::Status::ok();
    });
    const std::string path = dir.file("big.gguf");
    REQUIRE(w.write_file(path).is_ok());

    for (int use_mmap = 0; use_mmap <= 1; ++use_mmap) {
        INFO("use_mmap " << use_mmap);
        ProgressLog log;
        kt_model_params p;
        kt_model_params_init(&p);
        p.use_mmap = use_mmap;
        p.progress_callback = log_progress;
        p.progress_user_data = &log;
        kt_model *m = load_ok(path, &p);
        kt_model_free(m);
        REQUIRE(log.values.size() >= 3);
        for (size_t k = 1; k < log.values.size(); ++k) CHECK(log.values[k] >= log.values[k - 1]);
        CHECK(log.values.back() == 1.0f);
        CHECK(std::count(log.values.begin(), log.values.end(), 1.0f) == 1);

        ProgressLog cancel;
        cancel.cancel_after = 2;
        p.progress_user_data = &cancel;
        kt_error err = {sizeof(kt_error), 0, {0}};
        m = reinterpret_cast<kt_model *>(0x1);
        CHECK(kt_model_load(path.c_str(), &p, &m, &err) == KT_STATUS_CANCELLED);
        CHECK(m == nullptr);
        CHECK(cancel.values.size() == 2);
        CHECK(std::string(err.message).find("cancel") != std::string::npos);
    }
}

TEST_CASE("api: logging goes only to the installed callback") {
    struct Log {
        std::vector<std::string> lines;
    } log;
    kt_log_set([](int32_t, const char *msg, void *ud) { static_cast<Log *>(ud)->lines.push_back(msg); }, &log,
               KT_LOG_INFO);
    kt::test::TempDir dir;
    kt_model *m = load_ok(write_valid(dir));
    kt_model_free(m);
    kt_log_set(nullptr, nullptr, 0);
    REQUIRE(log.lines.size() == 1);
    CHECK(log.lines[0].find("loaded") != std::string::npos);
    m = load_ok(write_valid(dir, "again.gguf"));
    kt_model_free(m);
    CHECK(log.lines.size() == 1);
}
