// read(write(x)) == x for random files, and the writer's atomicity.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "model/gguf/gguf.h"
#include "ops/types.h"
#include "support/test_support.h"

using namespace kt;
using gguf::Value;
using gguf::ValueType;

namespace {

std::string random_string(std::mt19937_64 &rng, size_t max_len) {
    std::uniform_int_distribution<size_t> len(0, max_len);
    std::uniform_int_distribution<int> byte(0, 255);
    std::string s(len(rng), '\0');
    for (char &c : s) c = static_cast<char>(byte(rng));  // any bytes, NULs included
    return s;
}

// Keys must be valid UTF-8 (the writer refuses others, as llama.cpp does): random code points of 1 to 4 bytes.
std::string random_utf8(std::mt19937_64 &rng, size_t max_chars) {
    std::uniform_int_distribution<size_t> len(0, max_chars);
    std::uniform_int_distribution<uint32_t> width(0, 3);
    const uint32_t lo[] = {0, 0x80, 0x800, 0x10000}, hi[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    std::string s;
    for (size_t n = len(rng); n > 0; --n) {
        const uint32_t w = width(rng);
        uint32_t cp = std::uniform_int_distribution<uint32_t>(lo[w], hi[w])(rng);
        if (cp >= 0xD800 && cp < 0xE000) cp -= 0x1000;  // no surrogates
        if (cp < 0x80) {
            s += static_cast<char>(cp);
        } else if (cp < 0x800) {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            s += static_cast<char>(0xE0 | (cp >> 12));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            s += static_cast<char>(0xF0 | (cp >> 18));
            s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }
    return s;
}

Value random_value(std::mt19937_64 &rng) {
    std::uniform_int_distribution<uint32_t> type_dist(0, 12);
    ValueType type = static_cast<ValueType>(type_dist(rng));
    const bool array = type == ValueType::kArray;
    if (array) {
        do type = static_cast<ValueType>(type_dist(rng));
        while (type == ValueType::kArray);
    }
    std::uniform_int_distribution<size_t> count_dist(0, 40);
    const size_t count = array ? count_dist(rng) : 1;
    if (type == ValueType::kString) {
        std::vector<std::string> strings;
        for (size_t i = 0; i < count; ++i) strings.push_back(random_string(rng, 30));
        return array ? Value::array_str(std::move(strings)) : Value::str(std::move(strings[0]));
    }
    std::vector<uint8_t> raw(count * gguf::value_type_size(type));
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t &b : raw) b = static_cast<uint8_t>(type == ValueType::kBool ? byte(rng) & 1 : byte(rng));
    if (array) return Value::array(type, std::move(raw));
    Value v;
    v.type = v.element_type = type;
    v.raw = std::move(raw);
    return v;
}

void check_same(const gguf::KeyValue &kv, const Value &v) {
    REQUIRE(kv.type == v.type);
    REQUIRE(kv.element_type == v.element_type);
    REQUIRE(kv.count == v.count());
    if (v.element_type == ValueType::kString) {
        REQUIRE(kv.strings.size() == v.strings.size());
        for (size_t i = 0; i < v.strings.size(); ++i) REQUIRE(kv.strings[i] == v.strings[i]);
    } else if (!v.raw.empty()) {
        REQUIRE(std::memcmp(kv.data, v.raw.data(), v.raw.size()) == 0);
    }
}

}  // namespace

TEST_CASE("gguf: read(write(x)) == x for random files") {
    const int32_t types[] = {KT_TYPE_F32, KT_TYPE_F16, KT_TYPE_BF16, KT_TYPE_Q4_0, KT_TYPE_Q8_0,
                             KT_TYPE_Q4_K, KT_TYPE_Q6_K, KT_TYPE_IQ4_XS, KT_TYPE_I32};
    for (uint64_t seed = 1; seed <= 60; ++seed) {
        INFO("seed " << seed);
        std::mt19937_64 rng(seed);
        const uint32_t alignment = 8u << std::uniform_int_distribution<int>(0, 4)(rng);
        gguf::Writer w(alignment);
        std::vector<std::pair<std::string, Value>> kvs;
        const int n_kv = std::uniform_int_distribution<int>(0, 25)(rng);
        for (int i = 0; i < n_kv; ++i) {
            kvs.emplace_back("k" + std::to_string(i) + "." + random_utf8(rng, 5), random_value(rng));
            w.add(kvs.back().first, kvs.back().second);
        }
        struct T {
            std::string name;
            int32_t type;
            std::vector<int64_t> ne;
            std::vector<uint8_t> bytes;
        };
        std::vector<T> tensors;
        const int n_tensors = std::uniform_int_distribution<int>(0, 6)(rng);
        for (int i = 0; i < n_tensors; ++i) {
            T t;
            t.name = "tensor." + std::to_string(i);
            t.type = types[std::uniform_int_distribution<size_t>(0, std::size(types) - 1)(rng)];
            const ops::TypeTraits &tr = *ops::type_traits(t.type);
            const int dims = std::uniform_int_distribution<int>(1, 4)(rng);
            t.ne.push_back(tr.block_size * std::uniform_int_distribution<int64_t>(1, 3)(rng));
            for (int d = 1; d < dims; ++d) t.ne.push_back(std::uniform_int_distribution<int64_t>(1, 4)(rng));
            int64_t n_bytes = ops::row_bytes(tr, t.ne[0]);
            for (int d = 1; d < dims; ++d) n_bytes *= t.ne[d];
            t.bytes.resize(static_cast<size_t>(n_bytes));
            for (uint8_t &b : t.bytes) b = static_cast<uint8_t>(rng());
            w.add_tensor_bytes(t.name, t.type, t.ne, t.bytes);
            tensors.push_back(std::move(t));
        }

        std::vector<uint8_t> bytes;
        Status s = w.write_buffer(&bytes);
        INFO(s.message());
        REQUIRE(s.is_ok());
        std::unique_ptr<gguf::File> f;
        s = gguf::File::parse(mem::MappedFile::borrow(bytes.data(), bytes.size()), "roundtrip", &f);
        INFO(s.message());
        REQUIRE(s.is_ok());
        CHECK(f->alignment() == alignment);
        const size_t extra = alignment != 32 ? 1 : 0;  // the writer adds general.alignment when not default
        REQUIRE(f->metadata().size() == kvs.size() + extra);
        for (size_t i = 0; i < kvs.size(); ++i) {
            const gguf::KeyValue &kv = f->metadata()[i + extra];
            REQUIRE(kv.key == kvs[i].first);
            check_same(kv, kvs[i].second);
        }
        REQUIRE(f->tensors().size() == tensors.size());
        for (size_t i = 0; i < tensors.size(); ++i) {
            const gguf::TensorInfo &t = f->tensors()[i];
            REQUIRE(t.name == tensors[i].name);
            REQUIRE(t.type == tensors[i].type);
            REQUIRE(t.n_dims == static_cast<int32_t>(tensors[i].ne.size()));
            for (size_t d = 0; d < tensors[i].ne.size(); ++d) REQUIRE(t.ne[d] == tensors[i].ne[d]);
            REQUIRE(t.n_bytes == tensors[i].bytes.size());
            REQUIRE(std::memcmp(t.data, tensors[i].bytes.data(), t.n_bytes) == 0);
            REQUIRE(static_cast<uint64_t>(t.data - bytes.data()) % alignment == 0);
        }
    }
}

TEST_CASE("gguf writer: rejects bad input before writing anything") {
    test::TempDir dir;
    const std::string path = dir.file("x.gguf");
    {
        gguf::Writer w;
        w.add("a", Value::u32(1));
        w.add("a", Value::u32(2));
        CHECK(w.write_file(path).code() == KT_STATUS_INVALID_ARGUMENT);
    }
    {
        gguf::Writer w;
        w.add_tensor_bytes("t", KT_TYPE_Q8_0, {33}, std::vector<uint8_t>(36));
        CHECK(w.write_file(path).code() == KT_STATUS_INVALID_ARGUMENT);
    }
    {
        gguf::Writer w;
        w.add_tensor_bytes("t", 99, {4}, std::vector<uint8_t>(4));
        CHECK(w.write_file(path).code() == KT_STATUS_INVALID_ARGUMENT);
    }
    {
        gguf::Writer w(12);
        CHECK(w.write_file(path).code() == KT_STATUS_INVALID_ARGUMENT);
    }
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("gguf writer: a failing tensor fill leaves the old file untouched and no temporary behind") {
    test::TempDir dir;
    const std::string path = dir.file("model.gguf");
    test::write_file(path, {1, 2, 3});
    gguf::Writer w;
    w.add("general.architecture", Value::str("llama"));
    w.add_tensor("ok", KT_TYPE_F32, {4}, [](uint8_t *dst, uint64_t n) {
        std::memset(dst, 0, n);
        return Status::ok();
    });
    w.add_tensor("fails", KT_TYPE_F32, {4}, [](uint8_t *, uint64_t) {
        return Status::error(KT_STATUS_CANCELLED, "stopped by the test");
    });
    Status s = w.write_file(path);
    CHECK(s.code() == KT_STATUS_CANCELLED);
    CHECK(test::read_file(path) == std::vector<uint8_t>{1, 2, 3});
    int entries = 0;
    for (const auto &e : std::filesystem::directory_iterator(dir.path())) {
        (void)e;
        ++entries;
    }
    CHECK(entries == 1);
}

TEST_CASE("gguf writer: write_file output equals write_buffer output and is world-readable") {
    test::TempDir dir;
    gguf::Writer w(64);
    w.add("general.architecture", Value::str("llama"));
    w.add("x", Value::array_f32({1.0f, 2.0f}));
    w.add_tensor_bytes("t", KT_TYPE_F16, {5, 3}, std::vector<uint8_t>(30, 7));
    std::vector<uint8_t> buffer;
    REQUIRE(w.write_buffer(&buffer).is_ok());
    const std::string path = dir.file("m.gguf");
    REQUIRE(w.write_file(path).is_ok());
    CHECK(test::read_file(path) == buffer);
    struct stat st;
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0444) == 0444);
}

TEST_CASE("gguf writer: a fill that throws leaves no temporary file, and the writer reports entries it will reject") {
    test::TempDir dir;
    gguf::Writer w;
    w.add_tensor("throws", KT_TYPE_F32, {4}, [](uint8_t *, uint64_t) -> Status { throw std::runtime_error("boom"); });
    CHECK_THROWS_AS(w.write_file(dir.file("m.gguf")), std::runtime_error);
    CHECK(std::filesystem::is_empty(dir.path()));

    // check_value / tensor_bytes apply write_file's rules to one entry.
    CHECK(w.check_value("a", Value::u32(1)).is_ok());
    CHECK(w.check_value("", Value::u32(1)).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(w.check_value("general.alignment", Value::u32(64)).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(w.check_value("general.alignment", Value::u32(32)).is_ok());
    CHECK(w.check_value("b", Value::array(gguf::ValueType::kBool, {0, 2})).code() == KT_STATUS_INVALID_ARGUMENT);
    uint64_t n_bytes = 0;
    REQUIRE(gguf::Writer::tensor_bytes("t", KT_TYPE_Q4_K, {512, 3}, &n_bytes).is_ok());
    CHECK(n_bytes == 2 * 3 * 144);
    CHECK(gguf::Writer::tensor_bytes("t", KT_TYPE_Q4_K, {100}, &n_bytes).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gguf::Writer::tensor_bytes("t", KT_TYPE_F32, {1ll << 62, 1ll << 62}, &n_bytes).code() ==
          KT_STATUS_INVALID_ARGUMENT);
    CHECK(gguf::Writer::valid_alignment(64));
    CHECK_FALSE(gguf::Writer::valid_alignment(48));
}
