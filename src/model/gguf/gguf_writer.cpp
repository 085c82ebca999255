// The GGUF writer: builds v3 files for tests, converters and kt-synth.
//
// Everything is validated before the first byte is written, and files are written atomically (temporary file,
// fsync, rename), so a failed or cancelled write leaves the destination untouched.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "core/checked_math.h"
#include "core/utf8.h"
#include "model/gguf/gguf.h"
#include "ops/types.h"

namespace kt::gguf {

// ------------------------------------------------------------------------------------------------------------
// Value factories

namespace {

template <typename T>
Value scalar(ValueType type, T v) {
    Value out;
    out.type = out.element_type = type;
    out.raw.resize(sizeof v);
    std::memcpy(out.raw.data(), &v, sizeof v);
    return out;
}

template <typename T>
std::vector<uint8_t> to_bytes(const std::vector<T> &v) {
    std::vector<uint8_t> raw(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(raw.data(), v.data(), raw.size());
    return raw;
}

}  // namespace

Value Value::u8(uint8_t v) { return scalar(ValueType::kUint8, v); }
Value Value::i8(int8_t v) { return scalar(ValueType::kInt8, v); }
Value Value::u16(uint16_t v) { return scalar(ValueType::kUint16, v); }
Value Value::i16(int16_t v) { return scalar(ValueType::kInt16, v); }
Value Value::u32(uint32_t v) { return scalar(ValueType::kUint32, v); }
Value Value::i32(int32_t v) { return scalar(ValueType::kInt32, v); }
Value Value::u64(uint64_t v) { return scalar(ValueType::kUint64, v); }
Value Value::i64(int64_t v) { return scalar(ValueType::kInt64, v); }
Value Value::f32(float v) { return scalar(ValueType::kFloat32, v); }
Value Value::f64(double v) { return scalar(ValueType::kFloat64, v); }
Value Value::boolean(bool v) { return scalar(ValueType::kBool, static_cast<uint8_t>(v ? 1 : 0)); }

Value Value::str(std::string v) {
    Value out;
    out.type = out.element_type = ValueType::kString;
    out.strings.push_back(std::move(v));
    return out;
}

Value Value::array(ValueType element_type, std::vector<uint8_t> raw) {
    Value out;
    out.type = ValueType::kArray;
    out.element_type = element_type;
    out.raw = std::move(raw);
    return out;
}

Value Value::array_i32(const std::vector<int32_t> &v) { return array(ValueType::kInt32, to_bytes(v)); }
Value Value::array_f32(const std::vector<float> &v) { return array(ValueType::kFloat32, to_bytes(v)); }

Value Value::array_str(std::vector<std::string> v) {
    Value out;
    out.type = ValueType::kArray;
    out.element_type = ValueType::kString;
    out.strings = std::move(v);
    return out;
}

uint64_t Value::count() const {
    if (element_type == ValueType::kString) return strings.size();
    const uint64_t size = value_type_size(element_type);
    return size ? raw.size() / size : 0;
}

// ------------------------------------------------------------------------------------------------------------
// Writer

void Writer::add(std::string key, Value value) { kvs_.emplace_back(std::move(key), std::move(value)); }

void Writer::add_tensor(std::string name, int32_t type, std::vector<int64_t> ne, TensorFill fill) {
    tensors_.push_back(PendingTensor{std::move(name), type, std::move(ne), std::move(fill)});
}

void Writer::add_tensor_bytes(std::string name, int32_t type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
    auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
    const std::string label = name;
    add_tensor(std::move(name), type, std::move(ne), [shared, label](uint8_t *dst, uint64_t n) -> Status {
        KT_RETURN_IF(shared->size() != n, KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: tensor '%s' was given %zu bytes but its shape needs %llu", label.c_str(),
                     shared->size(), static_cast<unsigned long long>(n));
        if (n) std::memcpy(dst, shared->data(), n);
        return Status::ok();
    });
}

struct Writer::Layout {
    std::vector<uint64_t> n_bytes;  // per tensor
    std::vector<uint64_t> offsets;  // per tensor, relative to the data section
    bool add_alignment_key = false;
    uint64_t largest = 0;
};

bool Writer::valid_alignment(uint64_t alignment) {
    return alignment >= kMinAlignment && alignment <= kMaxAlignment && (alignment & (alignment - 1)) == 0;
}

Status Writer::check_value(std::string_view key, const Value &value) const {
    const std::string k(key);  // NUL-terminated for the messages
    KT_RETURN_IF(key.empty() || key.size() > kMaxKeyLength, KT_STATUS_INVALID_ARGUMENT,
                 "gguf writer: key '%s' must be 1..%llu bytes", k.c_str(), static_cast<unsigned long long>(kMaxKeyLength));
    // llama.cpp refuses a file with such a key, and JSON (kt-inspect --json, Python's gguf) cannot hold it.
    KT_RETURN_IF(!valid_utf8(key), KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s' is not valid UTF-8", k.c_str());
    const bool is_array = value.type == ValueType::kArray;
    KT_RETURN_IF(static_cast<uint32_t>(value.element_type) >= kValueTypeCount || value.element_type == ValueType::kArray ||
                     (!is_array && value.type != value.element_type),
                 KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s' has an invalid value type", k.c_str());
    if (value.element_type == ValueType::kString) {
        KT_RETURN_IF(!is_array && value.strings.size() != 1, KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: string key '%s' must hold exactly one string", k.c_str());
    } else {
        const uint64_t size = value_type_size(value.element_type);
        KT_RETURN_IF(value.raw.size() % size != 0 || (!is_array && value.raw.size() != size), KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: key '%s' has %zu value bytes for type %s", k.c_str(), value.raw.size(),
                     value_type_name(value.element_type));
        if (value.element_type == ValueType::kBool)
            for (uint8_t b : value.raw)
                KT_RETURN_IF(b > 1, KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s' has a bool that is not 0/1",
                             k.c_str());
    }
    if (key == "general.alignment") {
        uint32_t a = 0;
        if (value.type == ValueType::kUint32) std::memcpy(&a, value.raw.data(), 4);
        KT_RETURN_IF(a != alignment_, KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: general.alignment must be the UINT32 %u the writer was created with", alignment_);
    }
    return Status::ok();
}

Status Writer::tensor_bytes(std::string_view name, int32_t type, const std::vector<int64_t> &ne, uint64_t *n_bytes) {
    const std::string n(name);
    // The spec allows 64 bytes, ggml 63 (GGML_MAX_NAME with its NUL): files kt writes load everywhere.
    KT_RETURN_IF(name.empty() || name.size() > kGgmlMaxTensorName, KT_STATUS_INVALID_ARGUMENT,
                 "gguf writer: tensor name '%s' must be 1..%llu bytes", n.c_str(),
                 static_cast<unsigned long long>(kGgmlMaxTensorName));
    KT_RETURN_IF(!valid_utf8(name), KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor name '%s' is not valid UTF-8", n.c_str());
    const ops::TypeTraits *traits = ops::type_traits(type);
    KT_RETURN_IF(!traits, KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor '%s' has unknown type %d", n.c_str(), type);
    KT_RETURN_IF(ne.empty() || ne.size() > kMaxDims, KT_STATUS_INVALID_ARGUMENT,
                 "gguf writer: tensor '%s' must have 1..4 dimensions, not %zu", n.c_str(), ne.size());
    uint64_t bytes = 1;
    bool ok = true;
    for (size_t d = 0; d < ne.size(); ++d) {
        KT_RETURN_IF(ne[d] <= 0, KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor '%s' dimension %zu is %lld",
                     n.c_str(), d, static_cast<long long>(ne[d]));
        if (d == 0) {
            KT_RETURN_IF(ne[0] % traits->block_size != 0, KT_STATUS_INVALID_ARGUMENT,
                         "gguf writer: tensor '%s' row length %lld is not a multiple of the %s block size %lld",
                         n.c_str(), static_cast<long long>(ne[0]), traits->name,
                         static_cast<long long>(traits->block_size));
            ok = checked_mul(static_cast<uint64_t>(ne[0] / traits->block_size),
                             static_cast<uint64_t>(traits->block_bytes), &bytes);
        } else {
            ok = ok && checked_mul(bytes, static_cast<uint64_t>(ne[d]), &bytes);
        }
    }
    KT_RETURN_IF(!ok, KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor '%s' is too large", n.c_str());
    *n_bytes = bytes;
    return Status::ok();
}

Status Writer::plan(Layout *layout) const {
    KT_RETURN_IF(!valid_alignment(alignment_), KT_STATUS_INVALID_ARGUMENT,
                 "gguf writer: alignment %u is not a power of two between 8 and 2^30", alignment_);
    std::unordered_set<std::string_view> keys;
    bool has_alignment_key = false;
    for (const auto &[key, value] : kvs_) {
        KT_TRY(check_value(key, value));
        KT_RETURN_IF(!keys.insert(key).second, KT_STATUS_INVALID_ARGUMENT, "gguf writer: duplicate key '%s'", key.c_str());
        has_alignment_key = has_alignment_key || key == "general.alignment";
    }
    layout->add_alignment_key = !has_alignment_key && alignment_ != kDefaultAlignment;

    std::unordered_set<std::string_view> names;
    uint64_t offset = 0;
    for (const PendingTensor &t : tensors_) {
        uint64_t n_bytes = 0;
        KT_TRY(tensor_bytes(t.name, t.type, t.ne, &n_bytes));
        KT_RETURN_IF(!names.insert(t.name).second, KT_STATUS_INVALID_ARGUMENT, "gguf writer: duplicate tensor '%s'",
                     t.name.c_str());
        uint64_t next;
        const bool ok = checked_add(offset, n_bytes, &next) && checked_align_up(next, alignment_, &next);
        KT_RETURN_IF(!ok, KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor '%s' is too large", t.name.c_str());
        layout->n_bytes.push_back(n_bytes);
        layout->offsets.push_back(offset);
        layout->largest = std::max(layout->largest, n_bytes);
        offset = next;
    }
    return Status::ok();
}

namespace {

// Serialises the header pieces into a byte vector.
class Bytes {
public:
    template <typename T>
    void put(T v) {
        const size_t at = buf_.size();
        buf_.resize(at + sizeof v);
        std::memcpy(buf_.data() + at, &v, sizeof v);
    }
    void put_string(std::string_view s) {
        put<uint64_t>(s.size());
        buf_.insert(buf_.end(), s.begin(), s.end());
    }
    void put_raw(const std::vector<uint8_t> &raw) { buf_.insert(buf_.end(), raw.begin(), raw.end()); }
    void pad_to(uint64_t alignment) {
        while (buf_.size() % alignment) buf_.push_back(0);
    }
    std::vector<uint8_t> &data() { return buf_; }

private:
    std::vector<uint8_t> buf_;
};

void put_value(Bytes &b, const Value &v) {
    b.put<uint32_t>(static_cast<uint32_t>(v.type));
    if (v.type == ValueType::kArray) {
        b.put<uint32_t>(static_cast<uint32_t>(v.element_type));
        b.put<uint64_t>(v.count());
    }
    if (v.element_type == ValueType::kString)
        for (const std::string &s : v.strings) b.put_string(s);
    else
        b.put_raw(v.raw);
}

}  // namespace

Status Writer::emit(const Layout &layout, const std::function<Status(const uint8_t *, uint64_t)> &sink,
                    std::vector<uint8_t> *scratch) const {
    Bytes header;
    header.put<uint32_t>(kMagic);
    header.put<uint32_t>(3);
    header.put<uint64_t>(tensors_.size());
    header.put<uint64_t>(kvs_.size() + (layout.add_alignment_key ? 1 : 0));
    if (layout.add_alignment_key) {
        header.put_string("general.alignment");
        put_value(header, Value::u32(alignment_));
    }
    for (const auto &[key, value] : kvs_) {
        header.put_string(key);
        put_value(header, value);
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const PendingTensor &t = tensors_[i];
        header.put_string(t.name);
        header.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
        for (int64_t ne : t.ne) header.put<uint64_t>(static_cast<uint64_t>(ne));
        header.put<uint32_t>(static_cast<uint32_t>(t.type));
        header.put<uint64_t>(layout.offsets[i]);
    }
    if (!tensors_.empty()) header.pad_to(alignment_);
    KT_TRY(sink(header.data().data(), header.data().size()));

    static const uint8_t kZeros[256] = {};
    scratch->resize(layout.largest);
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const uint64_t n = layout.n_bytes[i];
        KT_TRY(tensors_[i].fill(scratch->data(), n));
        KT_TRY(sink(scratch->data(), n));
        uint64_t pad = (alignment_ - n % alignment_) % alignment_;
        while (pad > 0) {
            const uint64_t step = pad < sizeof kZeros ? pad : sizeof kZeros;
            KT_TRY(sink(kZeros, step));
            pad -= step;
        }
    }
    return Status::ok();
}

Status Writer::write_buffer(std::vector<uint8_t> *out) const {
    Layout layout;
    KT_TRY(plan(&layout));
    std::vector<uint8_t> result, scratch;
    KT_TRY(emit(layout,
                [&](const uint8_t *p, uint64_t n) {
                    result.insert(result.end(), p, p + n);
                    return Status::ok();
                },
                &scratch));
    *out = std::move(result);
    return Status::ok();
}

Status Writer::write_file(const std::string &path) const {
    Layout layout;
    KT_TRY(plan(&layout));
    // Until it is renamed into place, the temporary file is closed and removed on every way out, including an
    // exception thrown by a fill callback or an allocation.
    struct TempFile {
        std::string path;
        int fd = -1;
        bool keep = false;
        ~TempFile() {
            if (fd >= 0) ::close(fd);
            if (!keep) ::unlink(path.c_str());
        }
    } temp{path + ".tmp.XXXXXX"};
    temp.fd = mkstemp(temp.path.data());
    if (temp.fd < 0) {
        temp.keep = true;  // nothing was created
        return Status::error(KT_STATUS_IO_ERROR, "%s: cannot create a temporary file next to it: %s", path.c_str(),
                             std::strerror(errno));
    }
    std::vector<uint8_t> scratch;
    KT_TRY(emit(layout,
                [&](const uint8_t *p, uint64_t n) -> Status {
                    while (n > 0) {
                        const ssize_t w = ::write(temp.fd, p, n);
                        if (w < 0 && errno == EINTR) continue;
                        KT_RETURN_IF(w <= 0, KT_STATUS_IO_ERROR, "%s: write failed: %s", temp.path.c_str(),
                                     std::strerror(errno));
                        p += w;
                        n -= static_cast<uint64_t>(w);
                    }
                    return Status::ok();
                },
                &scratch));
    KT_RETURN_IF(fsync(temp.fd) != 0, KT_STATUS_IO_ERROR, "%s: fsync failed: %s", temp.path.c_str(), std::strerror(errno));
    // mkstemp creates 0600; a model file should be readable like any other file the user writes. (Reading the
    // umask would need umask(), which is not thread-safe, so use the common default.)
    fchmod(temp.fd, 0644);
    const int fd = temp.fd;
    temp.fd = -1;
    KT_RETURN_IF(::close(fd) != 0, KT_STATUS_IO_ERROR, "%s: close failed: %s", temp.path.c_str(), std::strerror(errno));
    KT_RETURN_IF(std::rename(temp.path.c_str(), path.c_str()) != 0, KT_STATUS_IO_ERROR,
                 "%s: cannot rename the finished file into place: %s", path.c_str(), std::strerror(errno));
    temp.keep = true;
    return Status::ok();
}

}  // namespace kt::gguf
