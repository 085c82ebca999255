// Helpers shared by kt's tests: where the golden data lives, scratch files, seeded random data.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kt::test {

// The shared golden data folder (CMake cache variable KT_TESTDATA_DIR). Fails the calling test, loudly, when the
// folder is missing: a golden test that silently skips proves nothing.
std::string testdata_dir();
std::string testdata_path(const std::string &relative);

// A fresh directory under the system temp dir, removed (with its contents) at destruction.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    const std::string &path() const { return path_; }
    std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

void write_file(const std::string &path, const std::vector<uint8_t> &bytes);
std::vector<uint8_t> read_file(const std::string &path);

// Runs a command line through the shell, with `stdin_text` on its standard input, and returns its exit status and
// what it wrote to standard output and standard error. A command killed by a signal (a crash) fails the test.
struct ProgramRun {
    int exit_code;
    std::string out, err;
};
ProgramRun run_program(const std::string &command, const std::string &stdin_text = "");

// Seeded normal / uniform data.
std::vector<float> random_normal(size_t n, uint64_t seed, float scale = 1.0f);
std::vector<float> random_uniform(size_t n, uint64_t seed, float lo, float hi);

}  // namespace kt::test
