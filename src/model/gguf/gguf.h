// GGUF: the file format of GGML models (reference/gguf-and-quants.md §1), read and written.
//
// The reader treats every file as hostile. Each count and length is checked against the bytes left before
// anything is allocated, every size is computed with overflow checks, tensor ranges must lie inside the file,
// be aligned and not overlap, and every error names the key or tensor and the byte offset where it was found.
// Parsing never reads outside [data, data + size).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "mem/mapped_file.h"

namespace kt::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;
constexpr uint64_t kMaxKeyLength = 65535;      // the spec's limit for keys
constexpr uint64_t kMaxTensorNameLength = 64;  // the spec's limit for tensor names (read)
constexpr uint64_t kGgmlMaxTensorName = 63;     // ggml's (GGML_MAX_NAME 64 with the NUL): what kt writes
constexpr uint64_t kMinAlignment = 8;
constexpr uint64_t kMaxAlignment = 1ull << 30;

enum class ValueType : uint32_t {
    kUint8 = 0,
    kInt8 = 1,
    kUint16 = 2,
    kInt16 = 3,
    kUint32 = 4,
    kInt32 = 5,
    kFloat32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kUint64 = 10,
    kInt64 = 11,
    kFloat64 = 12,
};
constexpr uint32_t kValueTypeCount = 13;

const char *value_type_name(ValueType type);
// Bytes of one value of a fixed-size type; 0 for kString and kArray.
uint64_t value_type_size(ValueType type);
bool is_integer_type(ValueType type);

// ------------------------------------------------------------------------------------------------------------
// Reading

// One metadata entry. Strings are views into the File's string arena and are NUL-terminated there.
struct KeyValue {
    std::string_view key;
    ValueType type;
    ValueType element_type;  // for kArray; equal to `type` otherwise
    uint64_t count;          // array length; 1 for scalars
    const uint8_t *data;     // fixed-size values (scalar, or the first array element), little-endian, unaligned
    std::vector<std::string_view> strings;  // kString: one entry; array of strings: `count` entries
    uint64_t file_offset;    // where the entry (its key) starts

    bool is_array() const { return type == ValueType::kArray; }
};

struct TensorInfo {
    std::string_view name;  // NUL-terminated in the File's arena
    int32_t type;           // KT_TYPE_*
    int32_t n_dims;
    int64_t ne[kMaxDims];   // unused dims are 1
    uint64_t n_elements;
    uint64_t n_bytes;
    uint64_t offset;        // relative to the data section
    uint64_t info_offset;   // where this tensor's info starts in the file
    const uint8_t *data;    // data_section + offset
};

class File {
public:
    // Parses and validates `bytes`, taking ownership of the mapping. `source_name` prefixes every error message
    // (usually the path).
    static Status parse(mem::MappedFile bytes, const std::string &source_name, std::unique_ptr<File> *out);

    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // start of the data section in the file
    uint64_t file_size() const { return bytes_.size(); }
    const mem::MappedFile &bytes() const { return bytes_; }
    const std::string &source_name() const { return source_name_; }

    const std::vector<KeyValue> &metadata() const { return kvs_; }
    const KeyValue *find(std::string_view key) const;
    const std::vector<TensorInfo> &tensors() const { return tensors_; }
    // What other readers refuse although kt reads it (ggml: a key that is not valid UTF-8, a tensor name of 64
    // bytes, tensor data not at Σ PAD(n_bytes) in tensor-info order), one line each; kt's writer never writes these.
    const std::vector<std::string> &interop_warnings() const { return interop_warnings_; }
    const TensorInfo *find_tensor(std::string_view name) const;
    int64_t tensor_index(std::string_view name) const;  // -1 if absent

    // Typed access, with the conversions kt.h documents. Errors name the key: NOT_FOUND when absent,
    // TYPE_MISMATCH when the stored type cannot be converted (or is out of range).
    Status get_int(std::string_view key, int64_t *out) const;
    Status get_float(std::string_view key, double *out) const;
    Status get_string(std::string_view key, std::string_view *out) const;
    Status get_bool(std::string_view key, bool *out) const;
    Status array_length(std::string_view key, uint64_t *out) const;
    Status array_get_int(std::string_view key, uint64_t index, int64_t *out) const;
    Status array_get_float(std::string_view key, uint64_t index, double *out) const;
    Status array_get_string(std::string_view key, uint64_t index, std::string_view *out) const;

private:
    File() = default;
    friend class Parser;

    mem::MappedFile bytes_;
    std::string source_name_;
    uint32_t version_ = 0;
    uint64_t alignment_ = kDefaultAlignment;
    uint64_t data_offset_ = 0;
    std::vector<KeyValue> kvs_;
    std::vector<TensorInfo> tensors_;
    std::vector<std::string> interop_warnings_;
    std::unordered_map<std::string_view, size_t> kv_index_;
    std::unordered_map<std::string_view, size_t> tensor_index_;
    std::vector<std::unique_ptr<char[]>> arena_;  // NUL-terminated copies of every key, string and name
};

// Reads one element of a fixed-size value as int64 / double (kt.h's conversions). False when not convertible.
bool value_to_int(ValueType type, const uint8_t *p, int64_t *out);
bool value_to_float(ValueType type, const uint8_t *p, double *out);

// ------------------------------------------------------------------------------------------------------------
// Writing

// A metadata value to write. Build with the factories; fixed-size values are stored little-endian in `raw`.
struct Value {
    ValueType type = ValueType::kUint8;
    ValueType element_type = ValueType::kUint8;  // for arrays
    std::vector<uint8_t> raw;                    // fixed-size scalar or array elements
    std::vector<std::string> strings;            // kString (one) or array of strings

    static Value u8(uint8_t v);
    static Value i8(int8_t v);
    static Value u16(uint16_t v);
    static Value i16(int16_t v);
    static Value u32(uint32_t v);
    static Value i32(int32_t v);
    static Value u64(uint64_t v);
    static Value i64(int64_t v);
    static Value f32(float v);
    static Value f64(double v);
    static Value boolean(bool v);
    static Value str(std::string v);
    // An array of fixed-size elements given as raw little-endian bytes (count = raw.size() / element size).
    static Value array(ValueType element_type, std::vector<uint8_t> raw);
    static Value array_i32(const std::vector<int32_t> &v);
    static Value array_f32(const std::vector<float> &v);
    static Value array_str(std::vector<std::string> v);

    uint64_t count() const;
};

// Produces the bytes of one tensor into dst (exactly the tensor's n_bytes). Called once, during write.
using TensorFill = std::function<Status(uint8_t *dst, uint64_t n_bytes)>;

class Writer {
public:
    explicit Writer(uint32_t alignment = kDefaultAlignment) : alignment_(alignment) {}

    // Keys and names are written in insertion order. Duplicates, bad shapes and unknown types are reported by
    // write_*, not here, so a builder can be filled without checking each call.
    void add(std::string key, Value value);
    void add_tensor(std::string name, int32_t type, std::vector<int64_t> ne, TensorFill fill);
    // Convenience: the tensor's bytes are copied from `data` (which must hold the tensor's n_bytes).
    void add_tensor_bytes(std::string name, int32_t type, std::vector<int64_t> ne, std::vector<uint8_t> data);

    // Writes atomically: a temporary file in the same directory is filled, flushed and renamed over `path`, so
    // a failure (or a cancelled fill, or an exception from one) never leaves a half-written file behind. Each
    // fill is called once per write, in order; the writer holds one tensor's bytes at a time.
    Status write_file(const std::string &path) const;
    Status write_buffer(std::vector<uint8_t> *out) const;

    // The checks write_* applies to one entry, for callers that add entries one by one and want a bad one
    // rejected at once (the C ABI). check_value: key length, value type and size, bools, general.alignment (must
    // be the UINT32 this writer was created with). tensor_bytes: name length, type, shape; gives the tensor's
    // size. Neither checks for duplicates.
    Status check_value(std::string_view key, const Value &value) const;
    static Status tensor_bytes(std::string_view name, int32_t type, const std::vector<int64_t> &ne, uint64_t *n_bytes);

    uint32_t alignment() const { return alignment_; }
    // A writer with this one's metadata and no tensors: its bytes are a metadata-only file, from which the
    // hyperparameters (and so every tensor's shape) can be read back before any tensor exists.
    Writer metadata_only() const {
        Writer w(alignment_);
        w.kvs_ = kvs_;
        return w;
    }
    // Whether `alignment` is one write_* accepts: a power of two in [kMinAlignment, kMaxAlignment].
    static bool valid_alignment(uint64_t alignment);

private:
    struct PendingTensor {
        std::string name;
        int32_t type;
        std::vector<int64_t> ne;
        TensorFill fill;
    };
    struct Layout;
    Status plan(Layout *layout) const;
    Status emit(const Layout &layout, const std::function<Status(const uint8_t *, uint64_t)> &sink,
                std::vector<uint8_t> *scratch) const;

    uint32_t alignment_;
    std::vector<std::pair<std::string, Value>> kvs_;
    std::vector<PendingTensor> tensors_;
};

}  // namespace kt::gguf
