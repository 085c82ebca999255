// kt_quantize / kt_dequantize: the reference block-format code on caller buffers.
#include <cstdint>
#include <cstring>
#include <vector>

#include "api/api_internal.h"
#include "core/checked_math.h"
#include "core/log.h"
#include "moe/weights.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

using kt::Status;

namespace {

// The geometry of n_rows rows of n_per_row elements of `type`, validated.
struct Rows {
    const kt::ops::TypeTraits *traits = nullptr;
    uint64_t n_rows = 0;
    int64_t n_per_row = 0;
    uint64_t row_bytes = 0;
    uint64_t total_bytes = 0;
    uint64_t n_elements = 0;
};

Status check_rows(const char *fn, int32_t type, bool (*supported)(int32_t), int64_t n_rows, int64_t n_per_row,
                  Rows *out) {
    const kt::ops::TypeTraits *t = kt::ops::type_traits(type);
    KT_RETURN_IF(!t, KT_STATUS_INVALID_ARGUMENT, "%s: unknown type id %d", fn, type);
    KT_RETURN_IF(!supported(type), KT_STATUS_UNSUPPORTED, "%s: type %s is not supported", fn, t->name);
    KT_RETURN_IF(n_rows < 0, KT_STATUS_INVALID_ARGUMENT, "%s: n_rows is %lld", fn, static_cast<long long>(n_rows));
    KT_RETURN_IF(n_per_row <= 0 || n_per_row % t->block_size != 0, KT_STATUS_INVALID_ARGUMENT,
                 "%s: n_per_row %lld is not a positive multiple of the %s block size %lld", fn,
                 static_cast<long long>(n_per_row), t->name, static_cast<long long>(t->block_size));
    out->traits = t;
    out->n_rows = static_cast<uint64_t>(n_rows);
    out->n_per_row = n_per_row;
    int64_t row_bytes = 0;
    KT_RETURN_IF(!kt::ops::checked_row_bytes(*t, n_per_row, &row_bytes), KT_STATUS_INVALID_ARGUMENT,
                 "%s: rows of %lld %s elements are too large", fn, static_cast<long long>(n_per_row), t->name);
    out->row_bytes = static_cast<uint64_t>(row_bytes);
    KT_RETURN_IF(!kt::checked_mul(out->n_rows, out->row_bytes, &out->total_bytes) ||
                     !kt::checked_mul(out->n_rows, static_cast<uint64_t>(n_per_row), &out->n_elements),
                 KT_STATUS_INVALID_ARGUMENT, "%s: %lld rows of %lld elements is too large", fn,
                 static_cast<long long>(n_rows), static_cast<long long>(n_per_row));
    return Status::ok();
}

// The reference dequantizers read blocks in place, which needs 4-byte alignment (the widest block field is Q8_K's
// f32 d; every block size is even and every row of a 4-aligned type stays 4-aligned). A caller's buffer may start
// anywhere, so a misaligned row is copied first.
bool aligned_for_blocks(const void *p) { return reinterpret_cast<uintptr_t>(p) % alignof(float) == 0; }

// Logs a failure (the stateless functions have no handle to keep the message); a size query is not a failure.
kt_status finish(const Status &s) {
    if (!s.is_ok() && s.code() != KT_STATUS_BUFFER_TOO_SMALL) KT_LOG_ERROR_MSG("%s", s.message().c_str());
    return s.code();
}

}  // namespace

extern "C" {

KT_API int32_t kt_type_can_quantize(int32_t type) { return kt::ref::can_quantize(type) ? 1 : 0; }

KT_API int32_t kt_type_can_dequantize(int32_t type) { return kt::ref::can_dequantize(type) ? 1 : 0; }

KT_API kt_status kt_quantize(int32_t type, const float *src, int64_t n_rows, int64_t n_per_row, void *dst,
                             uint64_t dst_capacity, uint64_t *out_bytes) {
    return finish(kt::api::guard([&]() -> Status {
        Rows r;
        KT_TRY(check_rows("kt_quantize", type, kt::ref::can_quantize, n_rows, n_per_row, &r));
        if (out_bytes) *out_bytes = r.total_bytes;
        KT_RETURN_IF(dst_capacity < r.total_bytes, KT_STATUS_BUFFER_TOO_SMALL,
                     "kt_quantize: the result needs %llu bytes but dst holds %llu",
                     static_cast<unsigned long long>(r.total_bytes), static_cast<unsigned long long>(dst_capacity));
        if (r.n_elements == 0) return Status::ok();
        KT_RETURN_IF(!src || !dst, KT_STATUS_INVALID_ARGUMENT, "kt_quantize: %s is NULL", !src ? "src" : "dst");
        auto *out = static_cast<uint8_t *>(dst);
        for (uint64_t i = 0; i < r.n_rows; ++i)
            kt::ref::quantize_row(type, src + i * static_cast<uint64_t>(r.n_per_row), out + i * r.row_bytes, r.n_per_row);
        return Status::ok();
    }));
}

KT_API kt_status kt_dequantize(int32_t type, const void *src, uint64_t src_bytes, int64_t n_rows, int64_t n_per_row,
                               float *dst, uint64_t dst_capacity) {
    return finish(kt::api::guard([&]() -> Status {
        Rows r;
        KT_TRY(check_rows("kt_dequantize", type, kt::ref::can_dequantize, n_rows, n_per_row, &r));
        KT_RETURN_IF(src_bytes < r.total_bytes, KT_STATUS_INVALID_ARGUMENT,
                     "kt_dequantize: %llu rows of %lld %s elements need %llu bytes but src has %llu",
                     static_cast<unsigned long long>(r.n_rows), static_cast<long long>(n_per_row), r.traits->name,
                     static_cast<unsigned long long>(r.total_bytes), static_cast<unsigned long long>(src_bytes));
        KT_RETURN_IF(dst_capacity < r.n_elements, KT_STATUS_BUFFER_TOO_SMALL,
                     "kt_dequantize: the result has %llu floats but dst holds %llu",
                     static_cast<unsigned long long>(r.n_elements), static_cast<unsigned long long>(dst_capacity));
        if (r.n_elements == 0) return Status::ok();
        KT_RETURN_IF(!src || !dst, KT_STATUS_INVALID_ARGUMENT, "kt_dequantize: %s is NULL", !src ? "src" : "dst");
        const auto *in = static_cast<const uint8_t *>(src);
        std::vector<uint8_t> aligned_row;
        for (uint64_t i = 0; i < r.n_rows; ++i) {
            const uint8_t *row = in + i * r.row_bytes;
            if (!aligned_for_blocks(row)) {
                aligned_row.assign(row, row + r.row_bytes);  // vector storage is aligned for any scalar
                row = aligned_row.data();
            }
            kt::ref::dequantize_row(type, row, dst + i * static_cast<uint64_t>(r.n_per_row), r.n_per_row);
        }
        return Status::ok();
    }));
}

KT_API kt_status kt_packed_matrix_bytes(int32_t type, int64_t n_rows, int64_t n_per_row, uint64_t *out_bytes) {
    return finish(kt::api::guard([&]() -> Status {
        KT_RETURN_IF(!out_bytes, KT_STATUS_INVALID_ARGUMENT, "kt_packed_matrix_bytes: out_bytes is NULL");
        return kt::moe::packed_matrix_bytes(type, n_rows, n_per_row, kt::moe::TargetFormat::kAsSource, 128, out_bytes);
    }));
}

}  // extern "C"
