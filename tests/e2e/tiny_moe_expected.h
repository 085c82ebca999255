// The parity expectations for the shipped model kt-tiny-moe (tests/e2e/data/kt_tiny_moe_expected.txt), written by
// examples/kt-tiny-moe/train.py from PyTorch. Line format: `<key> <value...>`; '#' starts a comment line.
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kt::test {

struct TinyMoePerplexity {
    std::string model_file;         // e.g. "kt-tiny-moe.f32.gguf", in examples/kt-tiny-moe
    double ppl = 0;                 // the framework's perplexity over the parity chunks
    std::vector<double> chunk_nll;  // sum of -log p per chunk
};

struct TinyMoeGreedy {
    std::string prompt;
    std::vector<int32_t> prompt_ids;  // BOS + ids, as tokenizing with add_special gives
    std::vector<int32_t> greedy;      // the framework's argmax continuation
};

struct TinyMoeExpected {
    std::string heldout_file;         // in tests/e2e/data
    std::vector<int32_t> heldout_ids;  // tokenizing heldout_file without BOS
    int64_t chunk_tokens = 0;          // tokens scored per chunk (the context length minus the BOS)
    int64_t chunks = 0;
    std::vector<TinyMoePerplexity> perplexity;
    std::string greedy_model;
    std::vector<TinyMoeGreedy> greedy;
};

inline std::vector<int32_t> parse_ids(const std::string &text) {
    std::istringstream in(text);
    std::vector<int32_t> ids;
    int64_t v;
    while (in >> v) ids.push_back(static_cast<int32_t>(v));
    if (!in.eof()) throw std::runtime_error("bad token id list: " + text.substr(0, 40));
    return ids;
}

inline TinyMoeExpected read_tiny_moe_expected(const std::string &path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    TinyMoeExpected e;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        const size_t space = line.find(' ');
        const std::string key = line.substr(0, space);
        const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
        if (key == "heldout.file") {
            e.heldout_file = value;
        } else if (key == "heldout.ids") {
            e.heldout_ids = parse_ids(value);
        } else if (key == "ppl.chunk_tokens") {
            e.chunk_tokens = std::stoll(value);
        } else if (key == "ppl.chunks") {
            e.chunks = std::stoll(value);
        } else if (key == "model") {
            e.perplexity.push_back({value, 0, {}});
        } else if (key == "ppl" && !e.perplexity.empty()) {
            e.perplexity.back().ppl = std::stod(value);
        } else if (key == "ppl.chunk_nll" && !e.perplexity.empty()) {
            std::istringstream values(value);
            double v;
            while (values >> v) e.perplexity.back().chunk_nll.push_back(v);
        } else if (key == "greedy.model") {
            e.greedy_model = value;
        } else if (key == "prompt") {
            e.greedy.push_back({value, {}, {}});
        } else if (key == "prompt.ids" && !e.greedy.empty()) {
            e.greedy.back().prompt_ids = parse_ids(value);
        } else if (key == "greedy" && !e.greedy.empty()) {
            e.greedy.back().greedy = parse_ids(value);
        } else {
            throw std::runtime_error(path + ": unexpected line: " + line.substr(0, 60));
        }
    }
    return e;
}

}  // namespace kt::test
