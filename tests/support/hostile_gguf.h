// Hostile GGUF files, derived from one small valid file.
//
// RawGguf describes a file field by field and serialises it without any validation, so tests can produce the
// malformed inputs that the real writer refuses to write: the CVE patterns of reference/gguf-and-quants.md
// §1.8-1.9 (huge counts and lengths, overflowing shapes, bad type ids, misaligned / overlapping / out-of-file
// tensor data, duplicate keys, nested arrays, bad bools, bad alignment) and truncations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kt.h"

namespace kt::test {

struct RawKv {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> payload;  // everything after the type field (for arrays: element type, count, elements)
};

struct RawTensor {
    std::string name;
    uint32_t n_dims;
    std::vector<uint64_t> dims;
    uint32_t type;
    uint64_t offset;
};

struct RawGguf {
    uint32_t magic = 0x46554747;
    uint32_t version = 3;
    bool override_counts = false;  // use the two counts below instead of the real ones
    uint64_t tensor_count = 0;
    uint64_t kv_count = 0;
    uint64_t alignment = 32;       // padding applied before the data section
    std::vector<RawKv> kvs;
    std::vector<RawTensor> tensors;
    std::vector<uint8_t> data;     // the data section, verbatim

    std::vector<uint8_t> serialize() const;
};

// Payload builders.
std::vector<uint8_t> raw_u32(uint32_t v);
std::vector<uint8_t> raw_u64(uint64_t v);
std::vector<uint8_t> raw_string(const std::string &s);
std::vector<uint8_t> raw_array_header(uint32_t element_type, uint64_t count);

// A small valid file: metadata of every value type (scalars, arrays, strings) and three tensors (F32, Q8_0, F16)
// with data. kt must load it.
RawGguf small_valid_gguf();

struct HostileCase {
    std::string name;
    std::vector<uint8_t> bytes;
    kt_status expected;  // the status kt must return
};

// Every case must be rejected with `expected` and a message.
std::vector<HostileCase> hostile_gguf_cases();

// Files kt reads but llama.cpp refuses: each must load, with one interoperability warning containing `warning`.
struct InteropCase {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string warning;
};
std::vector<InteropCase> interop_gguf_cases();

}  // namespace kt::test
