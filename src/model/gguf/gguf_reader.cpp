// The GGUF reader. Every value read from the file is validated before use; see gguf.h for the contract.
#include <algorithm>
#include <cstring>
#include <limits>

#include "core/checked_math.h"
#include "core/utf8.h"
#include "model/gguf/gguf.h"
#include "ops/types.h"

namespace kt::gguf {

const char *value_type_name(ValueType type) {
    switch (type) {
        case ValueType::kUint8: return "UINT8";
        case ValueType::kInt8: return "INT8";
        case ValueType::kUint16: return "UINT16";
        case ValueType::kInt16: return "INT16";
        case ValueType::kUint32: return "UINT32";
        case ValueType::kInt32: return "INT32";
        case ValueType::kFloat32: return "FLOAT32";
        case ValueType::kBool: return "BOOL";
        case ValueType::kString: return "STRING";
        case ValueType::kArray: return "ARRAY";
        case ValueType::kUint64: return "UINT64";
        case ValueType::kInt64: return "INT64";
        case ValueType::kFloat64: return "FLOAT64";
    }
    return "?";
}

uint64_t value_type_size(ValueType type) {
    switch (type) {
        case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
        case ValueType::kUint16: case ValueType::kInt16: return 2;
        case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
        case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
        case ValueType::kString: case ValueType::kArray: return 0;
    }
    return 0;
}

bool is_integer_type(ValueType type) {
    switch (type) {
        case ValueType::kUint8: case ValueType::kInt8: case ValueType::kUint16: case ValueType::kInt16:
        case ValueType::kUint32: case ValueType::kInt32: case ValueType::kUint64: case ValueType::kInt64:
            return true;
        default:
            return false;
    }
}

namespace {

template <typename T>
T load(const uint8_t *p) {
    T v{};
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Type ids of ggml types kt does not implement, so a valid-but-unsupported file gets a precise message.
const char *unsupported_ggml_type_name(uint32_t type) {
    switch (type) {
        case 34: return "TQ1_0";
        case 35: return "TQ2_0";
        case 40: return "NVFP4";
        default: return nullptr;
    }
}

// Minimum encoded sizes, used to bound counts by the bytes left before anything is allocated.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key length, 1-byte key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name length, name, n_dims, one dim, type, offset

}  // namespace

bool value_to_int(ValueType type, const uint8_t *p, int64_t *out) {
    switch (type) {
        case ValueType::kUint8: *out = load<uint8_t>(p); return true;
        case ValueType::kInt8: *out = load<int8_t>(p); return true;
        case ValueType::kUint16: *out = load<uint16_t>(p); return true;
        case ValueType::kInt16: *out = load<int16_t>(p); return true;
        case ValueType::kUint32: *out = load<uint32_t>(p); return true;
        case ValueType::kInt32: *out = load<int32_t>(p); return true;
        case ValueType::kInt64: *out = load<int64_t>(p); return true;
        case ValueType::kBool: *out = load<uint8_t>(p); return true;
        case ValueType::kUint64: {
            const uint64_t v = load<uint64_t>(p);
            if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
            *out = static_cast<int64_t>(v);
            return true;
        }
        default: return false;
    }
}

bool value_to_float(ValueType type, const uint8_t *p, double *out) {
    if (type == ValueType::kFloat32) {
        *out = load<float>(p);
        return true;
    }
    if (type == ValueType::kFloat64) {
        *out = load<double>(p);
        return true;
    }
    if (type == ValueType::kUint64) {
        *out = static_cast<double>(load<uint64_t>(p));
        return true;
    }
    int64_t i;
    if (type == ValueType::kBool || !value_to_int(type, p, &i)) return false;
    *out = static_cast<double>(i);
    return true;
}

// ------------------------------------------------------------------------------------------------------------
// Parser: a bounds-checked cursor over the file's bytes plus the validation rules.

class Parser {
public:
    explicit Parser(File *file) : f_(file), data_(file->bytes_.data()), size_(file->bytes_.size()) {}

    Status run() {
        KT_TRY(read_header());
        for (uint64_t i = 0; i < kv_count_; ++i) KT_TRY(read_kv(i));
        KT_TRY(read_alignment());
        for (uint64_t i = 0; i < tensor_count_; ++i) KT_TRY(read_tensor_info(i));
        return place_tensors();
    }

private:
    uint64_t left() const { return size_ - pos_; }

    Status fail(const char *fmt, ...) const __attribute__((format(printf, 2, 3))) {
        va_list args;
        va_start(args, fmt);
        std::string msg = vformat(fmt, args);
        va_end(args);
        return Status(KT_STATUS_INVALID_FILE, f_->source_name_ + ": " + msg);
    }

    // Reads `n` raw bytes; `what` describes them for the error ("key length of entry 3").
    Status take(uint64_t n, const uint8_t **out, const std::string &what) {
        if (n > left())
            return fail("%s at byte %llu: needs %llu bytes but only %llu remain (file truncated?)", what.c_str(),
                        ull(pos_), ull(n), ull(left()));
        *out = data_ + pos_;
        pos_ += n;
        return Status::ok();
    }

    template <typename T>
    Status read(T *out, const std::string &what) {
        const uint8_t *p = nullptr;
        KT_TRY(take(sizeof(T), &p, what));
        *out = load<T>(p);
        return Status::ok();
    }

    static unsigned long long ull(uint64_t v) { return v; }

    // Copies bytes into the arena with a terminating NUL, so the C API can hand out C strings. The arena grows in
    // chunks (a vocabulary has ~150k strings; one allocation each would dominate load time).
    std::string_view intern(const uint8_t *p, uint64_t n) {
        if (n + 1 > arena_left_) {
            const uint64_t chunk = std::max<uint64_t>(n + 1, kArenaChunk);
            f_->arena_.push_back(std::make_unique<char[]>(chunk));
            arena_next_ = f_->arena_.back().get();
            arena_left_ = chunk;
        }
        char *dst = arena_next_;
        std::memcpy(dst, p, n);
        dst[n] = '\0';
        arena_next_ += n + 1;
        arena_left_ -= n + 1;
        return std::string_view(dst, n);
    }

    // A GGUF string: u64 length then bytes. `max` bounds the length beyond the bytes left.
    Status read_string(std::string_view *out, uint64_t max, const std::string &what) {
        const uint64_t at = pos_;
        uint64_t n = 0;
        KT_TRY(read(&n, what + " length"));
        if (n > max) return fail("%s at byte %llu: length %llu exceeds the limit of %llu", what.c_str(), ull(at),
                                 ull(n), ull(max));
        const uint8_t *p = nullptr;
        KT_TRY(take(n, &p, what));
        *out = intern(p, n);
        return Status::ok();
    }

    Status read_header() {
        uint32_t magic = 0;
        KT_TRY(read(&magic, "magic"));
        if (magic != kMagic) return fail("not a GGUF file (magic at byte 0 is 0x%08x, expected 0x%08x \"GGUF\")", magic, kMagic);
        KT_TRY(read(&f_->version_, "version"));
        const uint32_t v = f_->version_;
        if (v == 1) return fail("GGUF version 1 at byte 4 is not supported (32-bit counts; re-convert the model)");
        if (v != 0 && (v & 0xFFFF) == 0)
            return fail("GGUF version field at byte 4 is 0x%08x: this is a big-endian file, which kt does not read "
                        "(convert it with gguf_convert_endian.py)", v);
        if (v != 2 && v != 3) return fail("unsupported GGUF version %u at byte 4 (kt reads versions 2 and 3)", v);

        // Counts are u64 in the spec but int64 in ggml; anything with the top bit set is garbage either way. Each
        // count is bounded by the bytes left divided by the smallest possible entry, before any allocation.
        const uint64_t tensor_at = pos_;
        KT_TRY(read(&tensor_count_, "tensor count"));
        const uint64_t kv_at = pos_;
        KT_TRY(read(&kv_count_, "metadata count"));
        if (kv_count_ > left() / kMinKvBytes)
            return fail("metadata count %llu at byte %llu cannot fit in the %llu bytes left", ull(kv_count_),
                        ull(kv_at), ull(left()));
        if (tensor_count_ > left() / kMinTensorInfoBytes)
            return fail("tensor count %llu at byte %llu cannot fit in the %llu bytes left", ull(tensor_count_),
                        ull(tensor_at), ull(left()));
        f_->kvs_.reserve(kv_count_);
        f_->tensors_.reserve(tensor_count_);
        return Status::ok();
    }

    Status read_value_type(ValueType *out, const std::string &what) {
        const uint64_t at = pos_;
        uint32_t raw = 0;
        KT_TRY(read(&raw, what));
        if (raw >= kValueTypeCount) return fail("%s at byte %llu: unknown value type %u", what.c_str(), ull(at), raw);
        *out = static_cast<ValueType>(raw);
        return Status::ok();
    }

    Status check_bools(const uint8_t *p, uint64_t count, const std::string &ctx, uint64_t at) const {
        for (uint64_t i = 0; i < count; ++i)
            if (p[i] > 1)
                return fail("%s: bool value %u at byte %llu is neither 0 nor 1", ctx.c_str(), p[i], ull(at + i));
        return Status::ok();
    }

    Status read_kv(uint64_t index) {
        KeyValue kv{};
        kv.file_offset = pos_;
        const std::string entry = "metadata entry " + std::to_string(index);
        KT_TRY(read_string(&kv.key, kMaxKeyLength, entry + " key"));
        if (kv.key.empty()) return fail("%s at byte %llu: empty key", entry.c_str(), ull(kv.file_offset));
        const std::string ctx = "key '" + std::string(kv.key) + "' (at byte " + std::to_string(kv.file_offset) + ")";
        if (f_->kv_index_.count(kv.key)) return fail("%s: duplicate key", ctx.c_str());
        if (!valid_utf8(kv.key))
            f_->interop_warnings_.push_back("metadata key '" + printable(kv.key) + "' (at byte " + std::to_string(kv.file_offset) +
                                            ") is not valid UTF-8: llama.cpp refuses the file");

        KT_TRY(read_value_type(&kv.type, ctx + " value type"));
        kv.element_type = kv.type;
        kv.count = 1;
        if (kv.type == ValueType::kArray) {
            KT_TRY(read_value_type(&kv.element_type, ctx + " array element type"));
            if (kv.element_type == ValueType::kArray)
                return fail("%s: nested arrays are not supported", ctx.c_str());
            const uint64_t count_at = pos_;
            KT_TRY(read(&kv.count, ctx + " array length"));
            // Every element takes at least its fixed size (strings: their 8-byte length prefix).
            const uint64_t min_element = kv.element_type == ValueType::kString ? 8 : value_type_size(kv.element_type);
            if (kv.count > left() / min_element)
                return fail("%s: array length %llu at byte %llu cannot fit in the %llu bytes left", ctx.c_str(),
                            ull(kv.count), ull(count_at), ull(left()));
        }

        if (kv.element_type == ValueType::kString) {
            kv.strings.reserve(kv.count);
            for (uint64_t i = 0; i < kv.count; ++i) {
                std::string_view s;
                KT_TRY(read_string(&s, left(), kv.is_array() ? ctx + " element " + std::to_string(i) : ctx + " value"));
                kv.strings.push_back(s);
            }
        } else {
            const uint64_t at = pos_;
            const uint64_t n = kv.count * value_type_size(kv.element_type);  // bounded by left() above
            KT_TRY(take(n, &kv.data, ctx + " value"));
            if (kv.element_type == ValueType::kBool) KT_TRY(check_bools(kv.data, kv.count, ctx, at));
        }
        f_->kv_index_.emplace(kv.key, f_->kvs_.size());
        f_->kvs_.push_back(std::move(kv));
        return Status::ok();
    }

    Status read_alignment() {
        const KeyValue *kv = f_->find("general.alignment");
        if (!kv) return Status::ok();
        const std::string ctx = "key 'general.alignment' (at byte " + std::to_string(kv->file_offset) + ")";
        if (kv->type != ValueType::kUint32)
            return fail("%s: must be UINT32, found %s", ctx.c_str(), value_type_name(kv->type));
        const uint32_t a = load<uint32_t>(kv->data);
        // The spec asks for a multiple of 8 and ggml for a power of two; kt requires both, which also keeps every
        // tensor (and so every block's f16/f32 fields) naturally aligned in memory.
        if (a < kMinAlignment || (a & (a - 1)) != 0 || a > kMaxAlignment)
            return fail("%s: alignment %u is not a power of two between 8 and 2^30", ctx.c_str(), a);
        f_->alignment_ = a;
        return Status::ok();
    }

    Status read_tensor_info(uint64_t index) {
        TensorInfo t{};
        t.info_offset = pos_;
        const std::string entry = "tensor info " + std::to_string(index);
        KT_TRY(read_string(&t.name, kMaxTensorNameLength, entry + " name"));
        if (t.name.empty()) return fail("%s at byte %llu: empty tensor name", entry.c_str(), ull(t.info_offset));
        const std::string ctx = "tensor '" + std::string(t.name) + "' (info at byte " + std::to_string(t.info_offset) + ")";
        if (f_->tensor_index_.count(t.name)) return fail("%s: duplicate tensor name", ctx.c_str());
        if (t.name.size() > kGgmlMaxTensorName)
            f_->interop_warnings_.push_back("tensor '" + printable(t.name) + "' has a " + std::to_string(t.name.size()) +
                                            "-byte name: ggml takes at most " + std::to_string(kGgmlMaxTensorName));

        uint32_t n_dims = 0;
        KT_TRY(read(&n_dims, ctx + " n_dims"));
        if (n_dims < 1 || n_dims > kMaxDims) return fail("%s: n_dims is %u, must be 1..%d", ctx.c_str(), n_dims, kMaxDims);
        t.n_dims = static_cast<int32_t>(n_dims);
        int64_t n_elements = 1;
        for (int d = 0; d < kMaxDims; ++d) {
            t.ne[d] = 1;
            if (d >= t.n_dims) continue;
            const uint64_t at = pos_;
            uint64_t raw = 0;
            KT_TRY(read(&raw, ctx + " dimension " + std::to_string(d)));
            const int64_t ne = static_cast<int64_t>(raw);
            if (ne <= 0) return fail("%s: dimension %d at byte %llu is %lld, must be positive", ctx.c_str(), d, ull(at),
                                     static_cast<long long>(ne));
            if (!checked_mul(n_elements, ne, &n_elements))
                return fail("%s: element count overflows at dimension %d (byte %llu)", ctx.c_str(), d, ull(at));
            t.ne[d] = ne;
        }
        t.n_elements = static_cast<uint64_t>(n_elements);

        const uint64_t type_at = pos_;
        uint32_t type = 0;
        KT_TRY(read(&type, ctx + " type"));
        const ops::TypeTraits *traits = ops::type_traits(static_cast<int32_t>(type));
        if (!traits) {
            if (const char *name = unsupported_ggml_type_name(type))
                return Status::error(KT_STATUS_UNSUPPORTED, "%s: %s: tensor type %u (%s) at byte %llu is not supported by kt",
                                     f_->source_name_.c_str(), ctx.c_str(), type, name, ull(type_at));
            return fail("%s: unknown tensor type id %u at byte %llu", ctx.c_str(), type, ull(type_at));
        }
        t.type = traits->type;
        if (t.ne[0] % traits->block_size != 0)
            return fail("%s: row length %lld is not a multiple of the %s block size %lld", ctx.c_str(),
                        static_cast<long long>(t.ne[0]), traits->name, static_cast<long long>(traits->block_size));
        // n_bytes = (ne0 / block) * block_bytes * ne1 * ne2 * ne3, every step checked.
        uint64_t n_bytes = static_cast<uint64_t>(t.ne[0] / traits->block_size);
        bool ok = checked_mul(n_bytes, static_cast<uint64_t>(traits->block_bytes), &n_bytes);
        for (int d = 1; d < kMaxDims && ok; ++d) ok = checked_mul(n_bytes, static_cast<uint64_t>(t.ne[d]), &n_bytes);
        if (!ok) return fail("%s: byte size overflows 64 bits", ctx.c_str());
        t.n_bytes = n_bytes;

        const uint64_t offset_at = pos_;
        KT_TRY(read(&t.offset, ctx + " offset"));
        if (t.offset % f_->alignment_ != 0)
            return fail("%s: data offset %llu (at byte %llu) is not a multiple of the alignment %llu", ctx.c_str(),
                        ull(t.offset), ull(offset_at), ull(f_->alignment_));
        f_->tensor_index_.emplace(t.name, f_->tensors_.size());
        f_->tensors_.push_back(t);
        return Status::ok();
    }

    Status place_tensors() {
        const uint64_t infos_end = pos_;
        if (f_->tensors_.empty()) {
            f_->data_offset_ = std::min(size_, infos_end);
            return Status::ok();
        }
        uint64_t data_offset;
        if (!checked_align_up(infos_end, f_->alignment_, &data_offset) || data_offset > size_)
            return fail("the data section (aligned start after byte %llu) lies beyond the end of the %llu-byte file",
                        ull(infos_end), ull(size_));
        f_->data_offset_ = data_offset;
        const uint64_t data_size = size_ - data_offset;

        std::vector<size_t> order(f_->tensors_.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        for (TensorInfo &t : f_->tensors_) {
            uint64_t end;
            if (!checked_add(t.offset, t.n_bytes, &end) || end > data_size)
                return fail("tensor '%.*s' (info at byte %llu): data [%llu, +%llu) extends past the end of the file "
                            "(data section holds %llu bytes from byte %llu)",
                            static_cast<int>(t.name.size()), t.name.data(), ull(t.info_offset), ull(t.offset),
                            ull(t.n_bytes), ull(data_size), ull(data_offset));
            t.data = data_ + data_offset + t.offset;
        }
        note_layout();
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return f_->tensors_[a].offset < f_->tensors_[b].offset; });
        for (size_t i = 1; i < order.size(); ++i) {
            const TensorInfo &prev = f_->tensors_[order[i - 1]];
            const TensorInfo &cur = f_->tensors_[order[i]];
            if (cur.offset < prev.offset + prev.n_bytes)
                return fail("tensor '%.*s' (info at byte %llu): data at offset %llu overlaps tensor '%.*s' [%llu, +%llu)",
                            static_cast<int>(cur.name.size()), cur.name.data(), ull(cur.info_offset), ull(cur.offset),
                            static_cast<int>(prev.name.size()), prev.name.data(), ull(prev.offset), ull(prev.n_bytes));
        }
        return Status::ok();
    }

    // ggml places tensor i at exactly Σ_{j<i} PAD(n_bytes_j, alignment) and refuses anything else (gaps, another
    // order); kt only needs the ranges to be inside the file and disjoint. The first tensor off that layout is
    // reported (the ones after it follow from it).
    void note_layout() {
        uint64_t expected = 0;
        for (size_t i = 0; i < f_->tensors_.size(); ++i) {
            const TensorInfo &t = f_->tensors_[i];
            if (t.offset != expected) {
                f_->interop_warnings_.push_back(
                    "tensor '" + printable(t.name) + "' (info " + std::to_string(i) + ") has its data at offset " +
                    std::to_string(t.offset) + " where ggml expects " + std::to_string(expected) +
                    ": llama.cpp needs tensor data in tensor-info order without gaps");
                return;
            }
            uint64_t next;
            if (!checked_add(expected, t.n_bytes, &next) || !checked_align_up(next, f_->alignment_, &expected)) return;
        }
    }

    // A key or name for a message: bytes that are not valid UTF-8, and control characters, as \xNN.
    static std::string printable(std::string_view s) {
        std::string out;
        for (size_t i = 0; i < s.size();) {
            const size_t n = utf8_sequence_length(s, i);
            if (n == 0 || static_cast<unsigned char>(s[i]) < 0x20) {
                static const char kHex[] = "0123456789abcdef";
                const unsigned char c = static_cast<unsigned char>(s[i]);
                out += "\\x";
                out += kHex[c >> 4];
                out += kHex[c & 15];
                ++i;
            } else {
                out.append(s.substr(i, n));
                i += n;
            }
        }
        return out;
    }

    File *f_;
    const uint8_t *data_;
    uint64_t size_;
    uint64_t pos_ = 0;
    uint64_t kv_count_ = 0;
    uint64_t tensor_count_ = 0;
    static constexpr uint64_t kArenaChunk = 1 << 20;
    char *arena_next_ = nullptr;
    uint64_t arena_left_ = 0;
};

Status File::parse(mem::MappedFile bytes, const std::string &source_name, std::unique_ptr<File> *out) {
    std::unique_ptr<File> file(new File());
    file->bytes_ = std::move(bytes);
    file->source_name_ = source_name;
    Parser parser(file.get());
    KT_TRY(parser.run());
    *out = std::move(file);
    return Status::ok();
}

const KeyValue *File::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const TensorInfo *File::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

int64_t File::tensor_index(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? -1 : static_cast<int64_t>(it->second);
}

// ------------------------------------------------------------------------------------------------------------
// Typed getters

namespace {

Status not_found(std::string_view key) {
    return Status::error(KT_STATUS_NOT_FOUND, "metadata key '%.*s' not found", static_cast<int>(key.size()), key.data());
}

Status mismatch(const KeyValue &kv, const char *wanted) {
    const std::string have = kv.is_array() ? std::string("ARRAY of ") + value_type_name(kv.element_type)
                                           : value_type_name(kv.type);
    return Status::error(KT_STATUS_TYPE_MISMATCH, "metadata key '%.*s' holds %s, not %s",
                         static_cast<int>(kv.key.size()), kv.key.data(), have.c_str(), wanted);
}

Status element(const File &f, std::string_view key, uint64_t index, const KeyValue **out) {
    const KeyValue *kv = f.find(key);
    if (!kv) return not_found(key);
    if (!kv->is_array()) return mismatch(*kv, "an array");
    if (index >= kv->count)
        return Status::error(KT_STATUS_NOT_FOUND, "metadata key '%.*s': index %llu is out of range (length %llu)",
                             static_cast<int>(key.size()), key.data(), static_cast<unsigned long long>(index),
                             static_cast<unsigned long long>(kv->count));
    *out = kv;
    return Status::ok();
}

}  // namespace

Status File::get_int(std::string_view key, int64_t *out) const {
    const KeyValue *kv = find(key);
    if (!kv) return not_found(key);
    if (kv->is_array() || !value_to_int(kv->type, kv->data, out)) return mismatch(*kv, "an integer (in int64 range)");
    return Status::ok();
}

Status File::get_float(std::string_view key, double *out) const {
    const KeyValue *kv = find(key);
    if (!kv) return not_found(key);
    if (kv->is_array() || kv->type == ValueType::kString || !value_to_float(kv->type, kv->data, out))
        return mismatch(*kv, "a number");
    return Status::ok();
}

Status File::get_string(std::string_view key, std::string_view *out) const {
    const KeyValue *kv = find(key);
    if (!kv) return not_found(key);
    if (kv->type != ValueType::kString) return mismatch(*kv, "STRING");
    *out = kv->strings[0];
    return Status::ok();
}

Status File::get_bool(std::string_view key, bool *out) const {
    const KeyValue *kv = find(key);
    if (!kv) return not_found(key);
    if (kv->type != ValueType::kBool) return mismatch(*kv, "BOOL");
    *out = kv->data[0] != 0;
    return Status::ok();
}

Status File::array_length(std::string_view key, uint64_t *out) const {
    const KeyValue *kv = find(key);
    if (!kv) return not_found(key);
    if (!kv->is_array()) return mismatch(*kv, "an array");
    *out = kv->count;
    return Status::ok();
}

Status File::array_get_int(std::string_view key, uint64_t index, int64_t *out) const {
    const KeyValue *kv = nullptr;
    KT_TRY(element(*this, key, index, &kv));
    const uint64_t size = value_type_size(kv->element_type);
    if (size == 0 || !value_to_int(kv->element_type, kv->data + index * size, out))
        return mismatch(*kv, "an array of integers (in int64 range)");
    return Status::ok();
}

Status File::array_get_float(std::string_view key, uint64_t index, double *out) const {
    const KeyValue *kv = nullptr;
    KT_TRY(element(*this, key, index, &kv));
    const uint64_t size = value_type_size(kv->element_type);
    if (size == 0 || kv->element_type == ValueType::kBool ||
        !value_to_float(kv->element_type, kv->data + index * size, out))
        return mismatch(*kv, "an array of numbers");
    return Status::ok();
}

Status File::array_get_string(std::string_view key, uint64_t index, std::string_view *out) const {
    const KeyValue *kv = nullptr;
    KT_TRY(element(*this, key, index, &kv));
    if (kv->element_type != ValueType::kString) return mismatch(*kv, "an array of STRING");
    *out = kv->strings[index];
    return Status::ok();
}

}  // namespace kt::gguf
