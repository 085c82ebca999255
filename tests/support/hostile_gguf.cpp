#include "support/hostile_gguf.h"

#include <algorithm>
#include <cstring>

namespace kt::test {
namespace {

template <typename T>
void put(std::vector<uint8_t> &out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof v);
    std::memcpy(out.data() + at, &v, sizeof v);
}

void put_string(std::vector<uint8_t> &out, const std::string &s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

// GGUF value type ids (kept local: this file deliberately does not use kt's reader or writer).
enum : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

constexpr uint32_t kF32 = 0, kF16 = 1, kQ8_0 = 8;

}  // namespace

std::vector<uint8_t> raw_u32(uint32_t v) {
    std::vector<uint8_t> out;
    put(out, v);
    return out;
}

std::vector<uint8_t> raw_u64(uint64_t v) {
    std::vector<uint8_t> out;
    put(out, v);
    return out;
}

std::vector<uint8_t> raw_string(const std::string &s) {
    std::vector<uint8_t> out;
    put_string(out, s);
    return out;
}

std::vector<uint8_t> raw_array_header(uint32_t element_type, uint64_t count) {
    std::vector<uint8_t> out;
    put(out, element_type);
    put(out, count);
    return out;
}

std::vector<uint8_t> RawGguf::serialize() const {
    std::vector<uint8_t> out;
    put(out, magic);
    put(out, version);
    put<uint64_t>(out, override_counts ? tensor_count : tensors.size());
    put<uint64_t>(out, override_counts ? kv_count : kvs.size());
    for (const RawKv &kv : kvs) {
        put_string(out, kv.key);
        put(out, kv.type);
        out.insert(out.end(), kv.payload.begin(), kv.payload.end());
    }
    for (const RawTensor &t : tensors) {
        put_string(out, t.name);
        put(out, t.n_dims);
        for (uint64_t d : t.dims) put(out, d);
        put(out, t.type);
        put(out, t.offset);
    }
    if (!tensors.empty() && alignment > 0)
        while (out.size() % alignment) out.push_back(0);
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

RawGguf small_valid_gguf() {
    RawGguf g;
    auto scalar = [&](const std::string &key, uint32_t type, std::vector<uint8_t> payload) {
        g.kvs.push_back({key, type, std::move(payload)});
    };
    scalar("general.architecture", STRING, raw_string("llama"));
    scalar("general.name", STRING, raw_string("hostile-base"));
    scalar("test.u8", U8, {200});
    scalar("test.i8", I8, {0x80});
    scalar("test.u16", U16, {0x34, 0x12});
    scalar("test.i16", I16, {0xFF, 0xFF});
    scalar("test.u32", U32, raw_u32(123456));
    scalar("test.i32", I32, raw_u32(static_cast<uint32_t>(-5)));
    scalar("test.f32", F32, raw_u32(0x3FC00000));  // 1.5
    scalar("test.bool", BOOL, {1});
    scalar("test.u64", U64, raw_u64(1ull << 40));
    scalar("test.i64", I64, raw_u64(static_cast<uint64_t>(-7)));
    scalar("test.f64", F64, raw_u64(0x4004000000000000ull));  // 2.5
    {
        std::vector<uint8_t> p = raw_array_header(STRING, 3);
        for (const char *s : {"a", "bc", ""}) {
            const std::vector<uint8_t> e = raw_string(s);
            p.insert(p.end(), e.begin(), e.end());
        }
        scalar("test.strings", ARRAY, p);
    }
    {
        std::vector<uint8_t> p = raw_array_header(I32, 4);
        for (int32_t v : {1, -2, 3, -4}) put(p, v);
        scalar("test.ints", ARRAY, p);
    }
    {
        std::vector<uint8_t> p = raw_array_header(BOOL, 2);
        p.push_back(0);
        p.push_back(1);
        scalar("test.bools", ARRAY, p);
    }
    scalar("test.empty", ARRAY, raw_array_header(F32, 0));

    // t_f32: 8 floats (32 bytes) at 0; t_q8: one Q8_0 block (34 bytes) at 32; t_f16: 2x3 halves (12 bytes) at 96.
    // The file ends exactly where t_f16 ends, so every truncation cuts a tensor.
    g.tensors.push_back({"t_f32", 1, {8}, kF32, 0});
    g.tensors.push_back({"t_q8", 1, {32}, kQ8_0, 32});
    g.tensors.push_back({"t_f16", 2, {3, 2}, kF16, 96});
    g.data.assign(108, 0);
    for (int i = 0; i < 8; ++i) {
        const float v = static_cast<float>(i) - 3.5f;
        std::memcpy(g.data.data() + 4 * i, &v, 4);
    }
    g.data[32] = 0x00;  // Q8_0 d = 1.0 (0x3C00)
    g.data[33] = 0x3C;
    for (int i = 0; i < 32; ++i) g.data[34 + i] = static_cast<uint8_t>(i - 16);
    const uint16_t halves[6] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x8000, 0x3555};
    std::memcpy(g.data.data() + 96, halves, sizeof halves);
    return g;
}

std::vector<InteropCase> interop_gguf_cases() {
    RawGguf bad_key = small_valid_gguf();
    bad_key.kvs[1].key = "general.\xff\xfename";
    RawGguf reordered = small_valid_gguf();
    std::swap(reordered.tensors[0], reordered.tensors[1]);  // t_q8's info first, its data still second
    RawGguf long_name = small_valid_gguf();
    long_name.tensors[2].name = std::string(64, 'n');
    return {
        {"key-not-utf8", bad_key.serialize(), "metadata key 'general.\\xff\\xfename' (at byte"},
        {"data-out-of-info-order", reordered.serialize(), "tensor 't_q8' (info 0) has its data at offset 32 where ggml expects 0"},
        {"tensor-name-64-bytes", long_name.serialize(), "has a 64-byte name: ggml takes at most 63"},
    };
}

std::vector<HostileCase> hostile_gguf_cases() {
    std::vector<HostileCase> cases;
    auto add = [&](const std::string &name, const RawGguf &g, kt_status expected = KT_STATUS_INVALID_FILE) {
        cases.push_back({name, g.serialize(), expected});
    };
    auto mutate = [&](const std::string &name, auto &&change, kt_status expected = KT_STATUS_INVALID_FILE) {
        RawGguf g = small_valid_gguf();
        change(g);
        add(name, g, expected);
    };
    auto kv_named = [](RawGguf &g, const std::string &key) -> RawKv & {
        for (RawKv &kv : g.kvs)
            if (kv.key == key) return kv;
        return g.kvs.front();
    };

    // Header.
    mutate("bad magic", [](RawGguf &g) { g.magic = 0x46554748; });
    mutate("version 1", [](RawGguf &g) { g.version = 1; });
    mutate("version 0", [](RawGguf &g) { g.version = 0; });
    mutate("version 4", [](RawGguf &g) { g.version = 4; });
    mutate("big-endian version", [](RawGguf &g) { g.version = 0x03000000; });
    for (uint64_t n : {1ull << 63, 1ull << 40, ~0ull, 1000000ull}) {
        mutate("huge kv count " + std::to_string(n), [n](RawGguf &g) {
            g.override_counts = true;
            g.tensor_count = g.tensors.size();
            g.kv_count = n;
        });
        mutate("huge tensor count " + std::to_string(n), [n](RawGguf &g) {
            g.override_counts = true;
            g.tensor_count = n;
            g.kv_count = g.kvs.size();
        });
    }
    mutate("kv count one too many", [](RawGguf &g) {
        g.override_counts = true;
        g.tensor_count = 0;
        g.kv_count = g.kvs.size() + 1;
        g.tensors.clear();
        g.data.clear();
    });
    mutate("tensor count one too many", [](RawGguf &g) {
        g.override_counts = true;
        g.tensor_count = g.tensors.size() + 1;
        g.kv_count = g.kvs.size();
    });

    // Keys and values.
    mutate("empty key", [&](RawGguf &g) { kv_named(g, "test.u8").key = ""; });
    mutate("duplicate key", [](RawGguf &g) { g.kvs.push_back({"test.u32", U32, raw_u32(1)}); });
    mutate("unknown value type 13", [&](RawGguf &g) { kv_named(g, "test.u32").type = 13; });
    mutate("unknown value type 0xffffffff", [&](RawGguf &g) { kv_named(g, "test.u32").type = 0xFFFFFFFFu; });
    mutate("bad bool 2", [&](RawGguf &g) { kv_named(g, "test.bool").payload = {2}; });
    mutate("bad bool in array", [&](RawGguf &g) {
        RawKv &kv = kv_named(g, "test.bools");
        kv.payload.back() = 0xFF;
    });
    mutate("nested array", [](RawGguf &g) {
        std::vector<uint8_t> p = raw_array_header(ARRAY, 1);
        const std::vector<uint8_t> inner = raw_array_header(U8, 1);
        p.insert(p.end(), inner.begin(), inner.end());
        p.push_back(7);
        g.kvs.push_back({"test.nested", ARRAY, p});
    });
    mutate("unknown array element type", [](RawGguf &g) {
        g.kvs.push_back({"test.badarray", ARRAY, raw_array_header(42, 1)});
    });
    for (uint64_t n : {1ull << 62, ~0ull, 1ull << 32}) {
        mutate("huge u32 array count " + std::to_string(n),
               [n](RawGguf &g) { g.kvs.push_back({"test.hugearray", ARRAY, raw_array_header(U32, n)}); });
        mutate("huge string array count " + std::to_string(n),
               [n](RawGguf &g) { g.kvs.push_back({"test.hugestrings", ARRAY, raw_array_header(STRING, n)}); });
    }
    for (uint64_t n : {~0ull, 1ull << 63, 1ull << 31}) {
        mutate("huge string length " + std::to_string(n), [n](RawGguf &g) {
            std::vector<uint8_t> p = raw_u64(n);
            p.push_back('x');
            g.kvs.push_back({"test.hugestring", STRING, p});
        });
    }
    for (uint64_t n : {~0ull, 1ull << 63, 70000ull}) {
        RawGguf g = small_valid_gguf();
        std::vector<uint8_t> bytes = g.serialize();
        std::memcpy(bytes.data() + 24, &n, sizeof n);  // first key's length, right after the 24-byte header
        cases.push_back({"huge key length " + std::to_string(n), bytes, KT_STATUS_INVALID_FILE});
    }
    mutate("string one byte longer than the file", [](RawGguf &g) {
        g.tensors.clear();
        g.data.clear();
        std::vector<uint8_t> p = raw_u64(4);
        p.insert(p.end(), {'a', 'b', 'c'});
        g.kvs.push_back({"test.short", STRING, p});
    });

    // Alignment.
    for (uint32_t a : {0u, 3u, 4u, 7u, 48u, 0x80000000u}) {
        mutate("alignment " + std::to_string(a),
               [a](RawGguf &g) { g.kvs.push_back({"general.alignment", U32, raw_u32(a)}); });
    }
    mutate("alignment as UINT64", [](RawGguf &g) { g.kvs.push_back({"general.alignment", U64, raw_u64(32)}); });
    mutate("alignment as STRING", [](RawGguf &g) { g.kvs.push_back({"general.alignment", STRING, raw_string("32")}); });

    // Tensor infos.
    mutate("empty tensor name", [](RawGguf &g) { g.tensors[0].name = ""; });
    mutate("tensor name of 65 bytes", [](RawGguf &g) { g.tensors[0].name = std::string(65, 'n'); });
    mutate("duplicate tensor name", [](RawGguf &g) { g.tensors[2].name = g.tensors[0].name; });
    for (uint32_t n : {0u, 5u, 0xFFFFFFFFu}) {
        mutate("n_dims " + std::to_string(n), [n](RawGguf &g) {
            g.tensors[0].n_dims = n;
            g.tensors[0].dims.assign(n <= 5 ? n : 5, 1);
            if (n >= 1 && n <= 5) g.tensors[0].dims[0] = 8;
        });
    }
    mutate("zero dimension", [](RawGguf &g) { g.tensors[2].dims = {3, 0}; });
    mutate("negative dimension", [](RawGguf &g) { g.tensors[2].dims = {3, static_cast<uint64_t>(-2)}; });
    mutate("element count overflow", [](RawGguf &g) {
        g.tensors[0].n_dims = 3;
        g.tensors[0].dims = {1ull << 32, 1ull << 32, 1ull << 32};
    });
    mutate("ne [4, 2^30-1, 2^30+1, 1] F32 (byte size 2^64-16)", [](RawGguf &g) {
        g.tensors[0].n_dims = 4;
        g.tensors[0].dims = {4, (1ull << 30) - 1, (1ull << 30) + 1, 1};
    });
    mutate("byte size overflow", [](RawGguf &g) {
        g.tensors[0].n_dims = 2;
        g.tensors[0].dims = {1ull << 31, 1ull << 31};  // 2^62 elements * 4 bytes
    });
    mutate("unknown tensor type 99", [](RawGguf &g) { g.tensors[0].type = 99; });
    mutate("removed tensor type 4", [](RawGguf &g) { g.tensors[0].type = 4; });
    mutate("tensor type 0xffffffff", [](RawGguf &g) { g.tensors[0].type = 0xFFFFFFFFu; });
    mutate("unsupported tensor type TQ1_0", [](RawGguf &g) { g.tensors[0].type = 34; }, KT_STATUS_UNSUPPORTED);
    mutate("row not a multiple of the block", [](RawGguf &g) { g.tensors[1].dims = {33}; });
    mutate("misaligned offset", [](RawGguf &g) { g.tensors[1].offset = 33; });
    mutate("offset past the end", [](RawGguf &g) { g.tensors[1].offset = 1 << 20; });
    mutate("data one byte past the end", [](RawGguf &g) { g.data.pop_back(); });
    mutate("offset near 2^64", [](RawGguf &g) { g.tensors[1].offset = ~0ull - 31; });
    mutate("overlapping tensors", [](RawGguf &g) { g.tensors[2].offset = 64; });
    mutate("same offset twice", [](RawGguf &g) { g.tensors[2].offset = 32; });
    mutate("data section beyond the end", [](RawGguf &g) {
        g.data.clear();
        g.alignment = 0;  // no padding: the aligned data start lies past the end of the file
    });
    return cases;
}

}  // namespace kt::test
