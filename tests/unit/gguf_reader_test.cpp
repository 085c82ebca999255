// The reader on a known valid file: every value type, conversions and tensor placement.
#include <catch2/catch.hpp>
#include <cstring>

#include "model/gguf/gguf.h"
#include "support/hostile_gguf.h"

using namespace kt;

namespace {

std::unique_ptr<gguf::File> parse_bytes(const std::vector<uint8_t> &bytes) {
    std::unique_ptr<gguf::File> file;
    Status s = gguf::File::parse(mem::MappedFile::borrow(bytes.data(), bytes.size()), "mem", &file);
    INFO(s.message());
    REQUIRE(s.is_ok());
    return file;
}

}  // namespace

TEST_CASE("reader: small valid file") {
    const std::vector<uint8_t> bytes = test::small_valid_gguf().serialize();
    auto f = parse_bytes(bytes);
    CHECK(f->version() == 3);
    CHECK(f->alignment() == 32);
    CHECK(f->metadata().size() == 17);

    int64_t i = 0;
    double d = 0;
    std::string_view s;
    bool b = false;
    REQUIRE(f->get_int("test.u8", &i).is_ok());
    CHECK(i == 200);
    REQUIRE(f->get_int("test.i8", &i).is_ok());
    CHECK(i == -128);
    REQUIRE(f->get_int("test.u16", &i).is_ok());
    CHECK(i == 0x1234);
    REQUIRE(f->get_int("test.i16", &i).is_ok());
    CHECK(i == -1);
    REQUIRE(f->get_int("test.i32", &i).is_ok());
    CHECK(i == -5);
    REQUIRE(f->get_int("test.u64", &i).is_ok());
    CHECK(i == (1ll << 40));
    REQUIRE(f->get_int("test.i64", &i).is_ok());
    CHECK(i == -7);
    REQUIRE(f->get_float("test.f32", &d).is_ok());
    CHECK(d == 1.5);
    REQUIRE(f->get_float("test.f64", &d).is_ok());
    CHECK(d == 2.5);
    REQUIRE(f->get_float("test.u32", &d).is_ok());
    CHECK(d == 123456.0);
    REQUIRE(f->get_bool("test.bool", &b).is_ok());
    CHECK(b);
    REQUIRE(f->get_string("general.name", &s).is_ok());
    CHECK(s == "hostile-base");
    CHECK(s.data()[s.size()] == '\0');

    uint64_t n = 0;
    REQUIRE(f->array_length("test.strings", &n).is_ok());
    CHECK(n == 3);
    REQUIRE(f->array_get_string("test.strings", 1, &s).is_ok());
    CHECK(s == "bc");
    REQUIRE(f->array_get_string("test.strings", 2, &s).is_ok());
    CHECK(s.empty());
    REQUIRE(f->array_get_int("test.ints", 3, &i).is_ok());
    CHECK(i == -4);
    REQUIRE(f->array_get_float("test.ints", 1, &d).is_ok());
    CHECK(d == -2.0);
    REQUIRE(f->array_length("test.empty", &n).is_ok());
    CHECK(n == 0);

    // Errors name the key and use the right code.
    Status st = f->get_string("test.u8", &s);
    CHECK(st.code() == KT_STATUS_TYPE_MISMATCH);
    CHECK(st.message().find("test.u8") != std::string::npos);
    CHECK(f->get_int("missing.key", &i).code() == KT_STATUS_NOT_FOUND);
    CHECK(f->array_get_int("test.ints", 4, &i).code() == KT_STATUS_NOT_FOUND);
    CHECK(f->array_get_int("test.strings", 0, &i).code() == KT_STATUS_TYPE_MISMATCH);
    CHECK(f->get_int("test.f32", &i).code() == KT_STATUS_TYPE_MISMATCH);
    CHECK(f->array_length("test.u8", &n).code() == KT_STATUS_TYPE_MISMATCH);

    REQUIRE(f->tensors().size() == 3);
    const gguf::TensorInfo *t = f->find_tensor("t_f16");
    REQUIRE(t != nullptr);
    CHECK(t->type == KT_TYPE_F16);
    CHECK(t->n_dims == 2);
    CHECK(t->ne[0] == 3);
    CHECK(t->ne[1] == 2);
    CHECK(t->ne[2] == 1);
    CHECK(t->n_elements == 6);
    CHECK(t->n_bytes == 12);
    CHECK(t->data == bytes.data() + f->data_offset() + 96);
    CHECK(f->data_offset() % 32 == 0);
    CHECK(f->tensor_index("t_q8") == 1);
    CHECK(f->tensor_index("nope") == -1);
}

TEST_CASE("reader: u64 above int64 range is not an int") {
    test::RawGguf g;
    g.kvs.push_back({"big", 10, test::raw_u64(~0ull)});
    const auto bytes = g.serialize();
    auto f = parse_bytes(bytes);
    int64_t i;
    CHECK(f->get_int("big", &i).code() == KT_STATUS_TYPE_MISMATCH);
    double d;
    REQUIRE(f->get_float("big", &d).is_ok());
    CHECK(d == 18446744073709551615.0);
}

TEST_CASE("reader: a vocabulary-only file needs no data section") {
    test::RawGguf g;
    g.kvs.push_back({"general.architecture", 8, test::raw_string("llama")});
    const auto bytes = g.serialize();
    auto f = parse_bytes(bytes);
    CHECK(f->tensors().empty());
    CHECK(f->data_offset() == bytes.size());
}

TEST_CASE("reader: custom alignment") {
    test::RawGguf g = test::small_valid_gguf();
    g.alignment = 64;
    g.kvs.push_back({"general.alignment", 4, test::raw_u32(64)});
    g.tensors[1].offset = 64;
    g.tensors[2].offset = 128;
    g.data.resize(140);
    const auto bytes = g.serialize();
    auto f = parse_bytes(bytes);
    CHECK(f->alignment() == 64);
    CHECK(f->data_offset() % 64 == 0);
}
