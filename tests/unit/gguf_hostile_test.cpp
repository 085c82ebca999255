// Every hostile file derived from the small valid one must be rejected with a status and a message, never a
// crash or an out-of-bounds read (this suite also runs under ASan+UBSan: each input lives in a heap buffer of
// exactly its size, so a one-byte over-read is caught).
#include <catch2/catch.hpp>
#include <cstring>

#include "kt.h"
#include "model/gguf/gguf.h"
#include "support/hostile_gguf.h"
#include "support/test_support.h"

using namespace kt;

namespace {

Status parse_exact(const std::vector<uint8_t> &bytes) {
    // A heap copy of exactly bytes.size(), so ASan sees any read past the end.
    std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size() ? bytes.size() : 1]);
    if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
    std::unique_ptr<gguf::File> file;
    return gguf::File::parse(mem::MappedFile::borrow(copy.get(), bytes.size()), "hostile", &file);
}

}  // namespace

TEST_CASE("hostile: the base file is valid") {
    Status s = parse_exact(test::small_valid_gguf().serialize());
    INFO(s.message());
    CHECK(s.is_ok());
}

TEST_CASE("hostile: every crafted case is rejected with the expected status and a message") {
    const auto cases = test::hostile_gguf_cases();
    CHECK(cases.size() >= 60);
    for (const auto &c : cases) {
        INFO("case: " << c.name);
        Status s = parse_exact(c.bytes);
        INFO("message: " << s.message());
        CHECK(s.code() == c.expected);
        CHECK(s.message().size() > 10);
        CHECK(s.message().find("hostile") == 0);  // prefixed with the source name
    }
}

TEST_CASE("hostile: truncation at every byte offset is rejected") {
    const std::vector<uint8_t> full = test::small_valid_gguf().serialize();
    for (size_t n = 0; n < full.size(); ++n) {
        INFO("truncated to " << n << " of " << full.size() << " bytes");
        Status s = parse_exact(std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(n)));
        CHECK(s.code() == KT_STATUS_INVALID_FILE);
        CHECK_FALSE(s.message().empty());
    }
}

TEST_CASE("hostile: the C API reports each case through kt_error and leaves *out_model NULL") {
    test::TempDir dir;
    const auto cases = test::hostile_gguf_cases();
    int index = 0;
    for (const auto &c : cases) {
        INFO("case: " << c.name);
        const std::string path = dir.file("case" + std::to_string(index++) + ".gguf");
        test::write_file(path, c.bytes);
        for (int use_mmap = 0; use_mmap <= 1; ++use_mmap) {
            kt_model_params p;
            kt_model_params_init(&p);
            p.use_mmap = use_mmap;
            kt_model *model = reinterpret_cast<kt_model *>(0x1);
            kt_error err = {sizeof(kt_error), 0, {0}};
            const kt_status st = kt_model_load(path.c_str(), &p, &model, &err);
            CHECK(st == c.expected);
            CHECK(err.status == c.expected);
            CHECK(model == nullptr);
            CHECK(std::string(err.message).find(path) == 0);
        }
    }
}
