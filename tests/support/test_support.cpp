#include "support/test_support.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace kt::test {

std::string testdata_dir() {
    const std::string dir = KT_TESTDATA_DIR;
    struct stat st;
    if (stat((dir + "/README.md").c_str(), &st) != 0)
        FAIL("golden test data not found at KT_TESTDATA_DIR='" << dir
                                                               << "'; configure with -DKT_TESTDATA_DIR=<shared/testdata>");
    return dir;
}

std::string testdata_path(const std::string &relative) { return testdata_dir() + "/" + relative; }

TempDir::TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kt-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) FAIL("mkdtemp failed");
    path_ = pattern;
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string &path, const std::vector<uint8_t> &bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
}

std::vector<uint8_t> read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in.good());
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

ProgramRun run_program(const std::string &command, const std::string &stdin_text) {
    TempDir dir;
    const std::string in_path = dir.file("stdin"), err_path = dir.file("stderr");
    write_file(in_path, std::vector<uint8_t>(stdin_text.begin(), stdin_text.end()));
    FILE *pipe = popen((command + " <'" + in_path + "' 2>'" + err_path + "'").c_str(), "r");
    REQUIRE(pipe != nullptr);
    ProgramRun r{-1, "", ""};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
    const int status = pclose(pipe);
    const std::vector<uint8_t> err = read_file(err_path);
    r.err.assign(err.begin(), err.end());
    INFO(command << "\nstderr: " << r.err);
    REQUIRE(WIFEXITED(status));
    r.exit_code = WEXITSTATUS(status);
    return r;
}

std::vector<float> random_normal(size_t n, uint64_t seed, float scale) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float &x : v) x = dist(rng);
    return v;
}

std::vector<float> random_uniform(size_t n, uint64_t seed, float lo, float hi) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float &x : v) x = dist(rng);
    return v;
}

}  // namespace kt::test
