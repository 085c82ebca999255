// kt-tokenize as a program: run the way the golden ids were produced (llama-tokenize -f FILE --no-escape --ids
// [--no-parse-special]) on a sample of the golden entries of every vocabulary, plus its other outputs and exit codes.

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "core/json.h"
#include "support/test_support.h"

namespace {

kt::test::ProgramRun run(const std::string &args, const std::string &stdin_text = "") {
    return kt::test::run_program(std::string(KT_TOKENIZE_EXE) + " " + args, stdin_text);
}

std::string vocab(const std::string &name) { return "'" + kt::test::testdata_path("tokenizer/" + name + ".gguf") + "'"; }

}  // namespace

TEST_CASE("kt-tokenize --ids reproduces the golden ids (sample of entries per vocabulary)") {
    // Entries: plain English, Chinese, emoji, chat markup with and without special parsing.
    const size_t sample[] = {0, 16, 44, 88, 89};
    for (const char *name : {"qwen3", "llama3", "deepseek-v3", "llama2-spm", "mistral-spm"}) {
        const std::vector<uint8_t> json = kt::test::read_file(kt::test::testdata_path(std::string("tokenizer/") + name + ".expected.json"));
        kt::json::Value entries;
        REQUIRE(kt::json::parse(std::string_view(reinterpret_cast<const char *>(json.data()), json.size()), &entries).is_ok());
        for (size_t e : sample) {
            const kt::json::Value &entry = entries.items().at(e);
            const std::string &text = entry.find("text")->as_string();
            std::string expected = "[";
            for (const auto &id : entry.find("ids")->items())
                expected += (expected.size() > 1 ? ", " : "") + std::to_string(id.as_int());
            expected += "]\n";
            kt::test::TempDir dir;
            const std::string file = dir.file("text.txt");
            kt::test::write_file(file, std::vector<uint8_t>(text.begin(), text.end()));
            const bool special = entry.find("parse_special")->as_bool();
            kt::test::ProgramRun r = run("-m " + vocab(name) + " -f '" + file + "' --no-escape --ids" + (special ? "" : " --no-parse-special"));
            INFO(name << " entry " << e << ": " << text);
            CHECK(r.exit_code == 0);
            CHECK(r.all() == expected);
        }
    }
}

TEST_CASE("kt-tokenize output formats and options") {
    kt::test::ProgramRun r = run("-m " + vocab("qwen3") + " 'Hello world'");
    CHECK(r.exit_code == 0);
    CHECK(r.all() == "  9707 -> 'Hello'\n  1879 -> ' world'\n");
    r = run("-m " + vocab("qwen3") + " --json -p 'a\\nb'");  // escapes are processed by default
    CHECK(r.all() == "[64,198,65]\n");
    r = run("-m " + vocab("qwen3") + " --json --no-escape -p 'a\\nb'");
    CHECK(r.all() == "[64,1699,65]\n");
    r = run("-m " + vocab("llama3") + " --ids --stdin", "hi");
    CHECK(r.all() == "[128000, 6151]\n");
    r = run("-m " + vocab("llama3") + " --ids --no-bos --show-count hi");
    CHECK(r.all() == "[6151]\nTotal number of tokens: 1\n");
    r = run("-m " + vocab("llama2-spm") + " \xf0\x9f\xa6\x99");  // a split character is shown as bytes
    CHECK(r.all().find("'<0xF0>'") != std::string::npos);
}

TEST_CASE("kt-tokenize exit codes") {
    CHECK(run("").exit_code == 2);
    CHECK(run("-m " + vocab("qwen3")).exit_code == 2);                 // no text
    CHECK(run("-m " + vocab("qwen3") + " a b").exit_code == 2);        // two texts
    CHECK(run("-m " + vocab("qwen3") + " --bogus a").exit_code == 2);
    CHECK(run("-m /nonexistent.gguf a").exit_code == 1);
    CHECK(run("-m " + vocab("qwen3") + " -f /nonexistent.txt").exit_code == 1);
    const std::string quants = "'" + kt::test::testdata_path("quants/Q4_0.gguf") + "'";
    kt::test::ProgramRun r = run("-m " + quants + " a");  // a GGUF without a vocabulary
    CHECK(r.exit_code == 1);
    CHECK(r.all().find("tokenizer.ggml.model") != std::string::npos);
}
