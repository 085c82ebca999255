// kt_gguf_writer_*: kt::gguf::Writer behind the C ABI. Each setter validates its entry at once (the Writer alone
// would report a bad entry only when writing), so a caller learns which call was wrong.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "core/checked_math.h"
#include "core/log.h"

using kt::Status;
using kt::api::guard_on;
using kt::gguf::Value;
using kt::gguf::ValueType;

namespace {

Status check_writer(const kt_gguf_writer *w) {
    KT_RETURN_IF(!w, KT_STATUS_INVALID_ARGUMENT, "writer is NULL");
    return Status::ok();
}

// Validates and adds one metadata entry.
Status add_value(kt_gguf_writer *w, const char *key, Value value) {
    KT_TRY(check_writer(w));
    KT_RETURN_IF(!key, KT_STATUS_INVALID_ARGUMENT, "gguf writer: key is NULL");
    std::string k(key);
    KT_TRY(w->writer.check_value(k, value));
    KT_RETURN_IF(w->keys.count(k) != 0, KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s' is already set", key);
    w->keys.insert(k);
    w->writer.add(std::move(k), std::move(value));
    return Status::ok();
}

// The integer types kt_gguf_writer_set_int takes, with their ranges.
struct IntRange {
    ValueType type;
    int64_t lo, hi;
};

const IntRange *int_range(int32_t meta_type) {
    static const IntRange kRanges[] = {
        {ValueType::kUint8, 0, UINT8_MAX},          {ValueType::kInt8, INT8_MIN, INT8_MAX},
        {ValueType::kUint16, 0, UINT16_MAX},        {ValueType::kInt16, INT16_MIN, INT16_MAX},
        {ValueType::kUint32, 0, UINT32_MAX},        {ValueType::kInt32, INT32_MIN, INT32_MAX},
        {ValueType::kInt64, INT64_MIN, INT64_MAX},  {ValueType::kUint64, 0, INT64_MAX},
    };
    for (const IntRange &r : kRanges)
        if (static_cast<int32_t>(r.type) == meta_type) return &r;
    return nullptr;
}

// A fixed-size little-endian value of `size` bytes holding v (x86-64 is little-endian, so the low bytes).
Value fixed_value(ValueType type, const void *v, size_t size) {
    Value out;
    out.type = out.element_type = type;
    out.raw.resize(size);
    std::memcpy(out.raw.data(), v, size);
    return out;
}

Status check_shape(const char *name, int32_t n_dims, const int64_t *ne, std::vector<int64_t> *out) {
    KT_RETURN_IF(!name, KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor name is NULL");
    KT_RETURN_IF(n_dims < 1 || n_dims > KT_MAX_DIMS, KT_STATUS_INVALID_ARGUMENT,
                 "gguf writer: tensor '%s' must have 1..4 dimensions, not %d", name, n_dims);
    KT_RETURN_IF(!ne, KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor '%s': ne is NULL", name);
    out->assign(ne, ne + n_dims);
    return Status::ok();
}

// Validates a tensor (name, type, shape, uniqueness) and gives its size in bytes.
Status check_tensor(kt_gguf_writer *w, const char *name, int32_t type, int32_t n_dims, const int64_t *ne,
                    std::vector<int64_t> *shape, uint64_t *n_bytes) {
    KT_TRY(check_writer(w));
    KT_TRY(check_shape(name, n_dims, ne, shape));
    KT_TRY(kt::gguf::Writer::tensor_bytes(name, type, *shape, n_bytes));
    KT_RETURN_IF(w->tensor_names.count(name) != 0, KT_STATUS_INVALID_ARGUMENT,
                 "gguf writer: tensor '%s' is already added", name);
    return Status::ok();
}

}  // namespace

extern "C" {

KT_API kt_status kt_gguf_writer_create_v2(uint32_t alignment, kt_gguf_writer **out_writer, kt_error *err) {
    if (out_writer) *out_writer = nullptr;
    const Status s = kt::api::guard([&]() -> Status {
        KT_RETURN_IF(!out_writer, KT_STATUS_INVALID_ARGUMENT, "kt_gguf_writer_create: out_writer is NULL");
        const uint32_t a = alignment ? alignment : kt::gguf::kDefaultAlignment;
        KT_RETURN_IF(!kt::gguf::Writer::valid_alignment(a), KT_STATUS_INVALID_ARGUMENT,
                     "kt_gguf_writer_create: alignment %u is not a power of two between 8 and 2^30", alignment);
        *out_writer = new kt_gguf_writer{kt::gguf::Writer(a), {}, {}, {}};
        return Status::ok();
    });
    kt::api::fill_error(err, s);
    if (!s.is_ok()) KT_LOG_ERROR_MSG("%s", s.message().c_str());
    return s.code();
}

KT_API kt_status kt_gguf_writer_create(uint32_t alignment, kt_gguf_writer **out_writer) {
    return kt_gguf_writer_create_v2(alignment, out_writer, nullptr);
}

KT_API void kt_gguf_writer_free(kt_gguf_writer *writer) { delete writer; }

KT_API const char *kt_gguf_writer_last_error(const kt_gguf_writer *writer) {
    if (!writer) return "writer is NULL";
    return writer->error.get();
}

KT_API kt_status kt_gguf_writer_set_int(kt_gguf_writer *writer, const char *key, int32_t meta_type, int64_t value) {
    return guard_on(writer, [&]() -> Status {
        const IntRange *r = int_range(meta_type);
        KT_RETURN_IF(!r, KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s': type %d is not an integer type",
                     key ? key : "(null)", meta_type);
        KT_RETURN_IF(value < r->lo || value > r->hi, KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: key '%s': %lld is out of range for %s", key ? key : "(null)",
                     static_cast<long long>(value), kt::gguf::value_type_name(r->type));
        // Every range above fits the type, so the low bytes of the little-endian int64 are the value.
        return add_value(writer, key, fixed_value(r->type, &value, kt::gguf::value_type_size(r->type)));
    });
}

KT_API kt_status kt_gguf_writer_set_uint64(kt_gguf_writer *writer, const char *key, uint64_t value) {
    return guard_on(writer, [&]() -> Status { return add_value(writer, key, Value::u64(value)); });
}

KT_API kt_status kt_gguf_writer_set_float(kt_gguf_writer *writer, const char *key, int32_t meta_type, double value) {
    return guard_on(writer, [&]() -> Status {
        if (meta_type == KT_META_FLOAT64) return add_value(writer, key, Value::f64(value));
        KT_RETURN_IF(meta_type != KT_META_FLOAT32, KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: key '%s': type %d is not a float type", key ? key : "(null)", meta_type);
        KT_RETURN_IF(std::isfinite(value) && std::fabs(value) > std::numeric_limits<float>::max(),
                     KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s': %g is out of range for FLOAT32",
                     key ? key : "(null)", value);
        return add_value(writer, key, Value::f32(static_cast<float>(value)));
    });
}

KT_API kt_status kt_gguf_writer_set_bool(kt_gguf_writer *writer, const char *key, int32_t value) {
    return guard_on(writer, [&]() -> Status {
        KT_RETURN_IF(value != 0 && value != 1, KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s': bool value %d is not 0 or 1",
                     key ? key : "(null)", value);
        return add_value(writer, key, Value::boolean(value != 0));
    });
}

KT_API kt_status kt_gguf_writer_set_string(kt_gguf_writer *writer, const char *key, const char *value, uint64_t length) {
    return guard_on(writer, [&]() -> Status {
        KT_RETURN_IF(!value && length != 0, KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s': value is NULL",
                     key ? key : "(null)");
        return add_value(writer, key, Value::str(length ? std::string(value, length) : std::string()));
    });
}

KT_API kt_status kt_gguf_writer_set_array(kt_gguf_writer *writer, const char *key, int32_t element_type,
                                          const void *data, uint64_t count) {
    return guard_on(writer, [&]() -> Status {
        const char *k = key ? key : "(null)";
        KT_RETURN_IF(element_type < 0 || static_cast<uint32_t>(element_type) >= kt::gguf::kValueTypeCount ||
                         element_type == KT_META_STRING || element_type == KT_META_ARRAY,
                     KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: key '%s': element type %d is not a fixed-size type (use "
                     "kt_gguf_writer_set_array_string for strings)",
                     k, element_type);
        const auto type = static_cast<ValueType>(element_type);
        uint64_t bytes = 0;
        KT_RETURN_IF(!kt::checked_mul(count, kt::gguf::value_type_size(type), &bytes), KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: key '%s': %llu elements is too many", k, static_cast<unsigned long long>(count));
        KT_RETURN_IF(!data && count != 0, KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s': data is NULL", k);
        const auto *p = static_cast<const uint8_t *>(data);
        return add_value(writer, key, Value::array(type, count ? std::vector<uint8_t>(p, p + bytes) : std::vector<uint8_t>()));
    });
}

KT_API kt_status kt_gguf_writer_set_array_string(kt_gguf_writer *writer, const char *key, const char *const *values,
                                                 const uint64_t *lengths, uint64_t count) {
    return guard_on(writer, [&]() -> Status {
        const char *k = key ? key : "(null)";
        KT_RETURN_IF(!values && count != 0, KT_STATUS_INVALID_ARGUMENT, "gguf writer: key '%s': values is NULL", k);
        std::vector<std::string> strings;
        strings.reserve(count);
        for (uint64_t i = 0; i < count; ++i) {
            KT_RETURN_IF(!values[i] && (!lengths || lengths[i] != 0), KT_STATUS_INVALID_ARGUMENT,
                         "gguf writer: key '%s': string %llu is NULL", k, static_cast<unsigned long long>(i));
            const uint64_t length = lengths ? lengths[i] : std::strlen(values[i]);
            strings.emplace_back(length ? std::string(values[i], length) : std::string());
        }
        return add_value(writer, key, Value::array_str(std::move(strings)));
    });
}

KT_API kt_status kt_gguf_writer_add_tensor(kt_gguf_writer *writer, const char *name, int32_t type, int32_t n_dims,
                                           const int64_t *ne, const void *data, uint64_t n_bytes) {
    return guard_on(writer, [&]() -> Status {
        std::vector<int64_t> shape;
        uint64_t expected = 0;
        KT_TRY(check_tensor(writer, name, type, n_dims, ne, &shape, &expected));
        KT_RETURN_IF(n_bytes != expected, KT_STATUS_INVALID_ARGUMENT,
                     "gguf writer: tensor '%s' of type %s needs %llu bytes, not %llu", name, kt_type_name(type),
                     static_cast<unsigned long long>(expected), static_cast<unsigned long long>(n_bytes));
        KT_RETURN_IF(!data, KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor '%s': data is NULL", name);
        const auto *p = static_cast<const uint8_t *>(data);
        writer->tensor_names.insert(name);
        writer->writer.add_tensor_bytes(name, type, std::move(shape), std::vector<uint8_t>(p, p + n_bytes));
        return Status::ok();
    });
}

KT_API kt_status kt_gguf_writer_add_tensor_fill(kt_gguf_writer *writer, const char *name, int32_t type,
                                                int32_t n_dims, const int64_t *ne, kt_gguf_fill_callback fill,
                                                void *user_data) {
    return guard_on(writer, [&]() -> Status {
        std::vector<int64_t> shape;
        uint64_t n_bytes = 0;
        KT_TRY(check_tensor(writer, name, type, n_dims, ne, &shape, &n_bytes));
        KT_RETURN_IF(!fill, KT_STATUS_INVALID_ARGUMENT, "gguf writer: tensor '%s': fill callback is NULL", name);
        std::string label(name);
        writer->tensor_names.insert(label);
        writer->writer.add_tensor(label, type, std::move(shape),
                                  [fill, user_data, label](uint8_t *dst, uint64_t n) -> Status {
                                      const int32_t r = fill(dst, n, user_data);
                                      KT_RETURN_IF(r != 0, KT_STATUS_CANCELLED,
                                                   "gguf writer: the fill callback of tensor '%s' returned %d",
                                                   label.c_str(), r);
                                      return Status::ok();
                                  });
        return Status::ok();
    });
}

KT_API kt_status kt_gguf_writer_write_file(kt_gguf_writer *writer, const char *path) {
    return guard_on(writer, [&]() -> Status {
        KT_TRY(check_writer(writer));
        KT_RETURN_IF(!path, KT_STATUS_INVALID_ARGUMENT, "kt_gguf_writer_write_file: path is NULL");
        return writer->writer.write_file(path);
    });
}

}  // extern "C"
