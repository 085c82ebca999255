// Tokenizer throughput: ~1 MiB of mixed-language text (English prose, code, Chinese, Japanese, Korean, Arabic,
// Hindi, Russian, Greek/Thai/Vietnamese, emoji, numbers, whitespace runs, chat markup: the 61 golden texts of
// shared/testdata/tokenizer, repeated) tokenized in one kt_tokenize call per vocabulary, plus the cost of loading
// each GGUF (kt_model_load: parsing and validating the file) and of building its tokenizer from the metadata
// (kt_vocab_get_info's first call). Prints the median and best of several runs, through the public API.
//
//   bench_tokenizer [TESTDATA_DIR] [RUNS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "kt.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string read_text_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string mixed_text(const std::string &dir) {
    kt::json::Value entries;
    const std::string json = read_text_file(dir + "/tokenizer/qwen3.expected.json");
    if (!kt::json::parse(json, &entries).is_ok() || entries.items().empty()) {
        std::fprintf(stderr, "cannot read %s/tokenizer/qwen3.expected.json\n", dir.c_str());
        std::exit(1);
    }
    std::string text;
    while (text.size() < (1u << 20)) {
        for (const kt::json::Value &e : entries.items()) {
            if (!e.find("parse_special")->as_bool()) continue;
            text += e.find("text")->as_string();
            text += "\n\n";
        }
    }
    return text;
}

}  // namespace

int main(int argc, char **argv) {
    const std::string dir = argc > 1 ? argv[1] : KT_TESTDATA_DIR;
    const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 7;
    const std::string text = mixed_text(dir);
    std::printf("%s\n", kt_build_info());
    std::printf("text: %zu bytes of mixed-language text; %d runs per vocabulary (median, best)\n\n", text.size(), runs);
    std::printf("%-12s %10s %10s %10s %10s %12s %12s\n", "vocabulary", "tokens", "load ms", "build ms", "tok/byte",
                "MB/s median", "MB/s best");

    for (const char *name : {"qwen3", "llama3", "deepseek-v3", "llama2-spm", "mistral-spm"}) {
        const std::string path = dir + "/tokenizer/" + name + ".gguf";
        kt_model *model = nullptr;
        kt_error err = {sizeof(kt_error), 0, {0}};
        const auto t_load = Clock::now();
        const kt_status loaded = kt_model_load(path.c_str(), nullptr, &model, &err);
        const double load_ms = ms_since(t_load);
        if (loaded != KT_STATUS_OK) {
            std::fprintf(stderr, "%s: %s\n", path.c_str(), err.message);
            return 1;
        }
        kt_vocab_info info;
        info.struct_size = sizeof info;
        const auto t0 = Clock::now();
        if (kt_vocab_get_info(model, &info) != KT_STATUS_OK) {
            std::fprintf(stderr, "%s: %s\n", name, kt_model_last_error(model));
            return 1;
        }
        const double build_ms = ms_since(t0);

        std::vector<int32_t> ids(text.size() + 2);
        std::vector<double> seconds;
        int64_t count = 0;
        for (int r = 0; r < runs; ++r) {
            const auto t1 = Clock::now();
            if (kt_tokenize(model, text.data(), text.size(), 1, 1, ids.data(), static_cast<int64_t>(ids.size()), &count) !=
                KT_STATUS_OK) {
                std::fprintf(stderr, "%s: %s\n", name, kt_model_last_error(model));
                return 1;
            }
            seconds.push_back(ms_since(t1) / 1000.0);
        }
        std::sort(seconds.begin(), seconds.end());
        const double mb = static_cast<double>(text.size()) / 1e6;
        std::printf("%-12s %10lld %10.1f %10.1f %10.3f %12.2f %12.2f\n", name, static_cast<long long>(count), load_ms, build_ms,
                    static_cast<double>(count) / static_cast<double>(text.size()), mb / seconds[seconds.size() / 2],
                    mb / seconds[0]);
        kt_model_free(model);
    }
    return 0;
}
