// kt-inspect as a program: output on golden files, --json, --dump against the golden values, and exit codes
// on broken input and bad usage.

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/utf8.h"
#include "kt.h"
#include "support/hostile_gguf.h"
#include "support/test_support.h"

namespace {

kt::test::ProgramRun run(const std::string &args) { return kt::test::run_program(std::string(KT_INSPECT_EXE) + " " + args); }

}  // namespace

TEST_CASE("kt-inspect prints header, metadata, tensors and totals") {
    const std::string file = kt::test::testdata_path("models/qwen3moe.q4_k_m.gguf");
    kt::test::ProgramRun r = run("'" + file + "'");
    INFO(r.all());
    REQUIRE(r.exit_code == 0);
    CHECK(r.all().find("architecture: qwen3moe") != std::string::npos);
    CHECK(r.all().find("tokenizer.ggml.tokens") != std::string::npos);
    CHECK(r.all().find("[str x 512]") != std::string::npos);  // long arrays are summarised
    CHECK(r.all().find("blk.1.ffn_down_exps.weight") != std::string::npos);
    CHECK(r.all().find("-- totals by type --") != std::string::npos);
    // The README of the golden models lists this file as F32x11, Q4_Kx7, Q5_0x1, Q5_1x2, Q6_Kx1, Q8_0x5.
    CHECK(r.all().find("Q4_K           7") != std::string::npos);
    CHECK(r.all().find("Q5_1           2") != std::string::npos);
}

TEST_CASE("kt-inspect --json is one JSON object with every tensor") {
    kt::test::ProgramRun r = run("--json '" + kt::test::testdata_path("quants/Q4_K.gguf") + "'");
    REQUIRE(r.exit_code == 0);
    CHECK(r.all().front() == '{');
    CHECK(r.all().find("\"architecture\": \"quant-golden\"") != std::string::npos);
    CHECK(r.all().find("\"name\": \"t3.src\", \"type\": \"F32\", \"shape\": [512, 2]") != std::string::npos);
}

TEST_CASE("kt-inspect warns about what other readers refuse, and --json stays valid UTF-8 JSON") {
    kt::test::TempDir dir;
    kt::test::RawGguf g = kt::test::small_valid_gguf();
    g.kvs[1].key = "general.\xff\xfe\"name\n";  // invalid UTF-8, a quote and a newline in one key
    g.kvs[0].payload = kt::test::raw_string("ll\xc3" "ama");  // and a broken string value
    std::swap(g.tensors[0], g.tensors[1]);
    g.tensors[2].name = std::string(64, 'n');
    const std::string path = dir.file("refused-elsewhere.gguf");
    kt::test::write_file(path, g.serialize());

    const kt::test::ProgramRun text = run("'" + path + "'");
    INFO(text.all());
    REQUIRE(text.exit_code == 0);  // kt reads the file
    CHECK(text.all().find("-- warnings: other GGUF readers refuse this file --") != std::string::npos);
    CHECK(text.all().find("is not valid UTF-8") != std::string::npos);
    CHECK(text.all().find("where ggml expects 0") != std::string::npos);
    CHECK(text.all().find("64-byte name") != std::string::npos);

    const kt::test::ProgramRun js = run("--json '" + path + "'");
    REQUIRE(js.exit_code == 0);
    const std::string out = js.out;
    CHECK(kt::valid_utf8(out));
    kt::json::Value v;
    const kt::Status parsed = kt::json::parse(out, &v);
    INFO(out << "\n" << parsed.message());
    REQUIRE(parsed.is_ok());
    REQUIRE(v.find("warnings") != nullptr);
    CHECK(v.find("warnings")->items().size() == 3);
    CHECK(v.find("architecture")->as_string() == "ll\xef\xbf\xbd" "ama");  // the bad byte became U+FFFD
    CHECK(v.find("metadata")->find("general.\xef\xbf\xbd\xef\xbf\xbd\"name\n") != nullptr);
    // A clean file has an empty warning list.
    const kt::test::ProgramRun clean = run("--json '" + kt::test::testdata_path("quants/Q4_K.gguf") + "'");
    kt::json::Value w;
    REQUIRE(kt::json::parse(clean.out, &w).is_ok());
    CHECK(w.find("warnings")->items().empty());
}

TEST_CASE("kt-inspect --dump writes the golden dequantized values") {
    kt::test::TempDir dir;
    const std::string out = dir.file("t2.f32");
    const std::string file = kt::test::testdata_path("quants/Q6_K.gguf");
    kt::test::ProgramRun r = run("--dump t2 '" + out + "' '" + file + "'");
    INFO(r.all());
    REQUIRE(r.exit_code == 0);
    const std::vector<uint8_t> dumped = kt::test::read_file(out);

    // Independent truth: the t2.f32 tensor that llama.cpp wrote into the same file.
    kt_model *m = nullptr;
    REQUIRE(kt_model_load(file.c_str(), nullptr, &m, nullptr) == KT_STATUS_OK);
    int64_t index = -1;
    REQUIRE(kt_model_tensor_find(m, "t2.f32", &index) == KT_STATUS_OK);
    kt_tensor_info info;
    info.struct_size = sizeof info;
    REQUIRE(kt_model_tensor_info(m, index, &info) == KT_STATUS_OK);
    REQUIRE(dumped.size() == info.n_elements * 4);
    // The F32 tensor's bytes in the file are exactly the expected little-endian floats.
    std::vector<float> expected(info.n_elements);
    REQUIRE(kt_model_tensor_read_f32(m, index, expected.data(), expected.size(), nullptr) == KT_STATUS_OK);
    CHECK(std::memcmp(dumped.data(), expected.data(), dumped.size()) == 0);
    kt_model_free(m);
}

TEST_CASE("kt-inspect on broken files: the reader's message and exit status 1, never a crash") {
    for (const char *name : {"hostile-huge-tensor-count-18446744073709551615.gguf", "hostile-overlapping-tensors.gguf",
                             "hostile-nested-array.gguf", "hostile-unsupported-tensor-type-IQ2-XXS.gguf"}) {
        kt::test::ProgramRun r = run(std::string("'") + KT_HOSTILE_CORPUS + "/" + name + "'");
        INFO(name << ": " << r.all());
        CHECK(r.exit_code == 1);
        CHECK(r.all().rfind("kt-inspect: ", 0) == 0);
        CHECK(r.all().find(name) != std::string::npos);  // the message names the file
    }
    kt::test::ProgramRun missing = run("/nonexistent/model.gguf");
    CHECK(missing.exit_code == 1);
    CHECK(missing.all().find("No such file") != std::string::npos);
}

TEST_CASE("kt-inspect usage errors exit with 2") {
    CHECK(run("").exit_code == 2);
    CHECK(run("--frobnicate x.gguf").exit_code == 2);
    CHECK(run("--dump onlyname").exit_code == 2);
}
