// Packing of weight matrices W [N][K] into the AMX B layouts documented in amx_gemm.h.
//
// Load-time code, scalar on purpose: each element's destination is computed from the documented formula, so the
// code reads like the layout description and a layout test can check it line by line.
#include <cstring>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/amx/amx_pack_layout.h"

namespace kt::cpu::amx {
namespace {

Status check_pack_args(const PackedBDesc &desc, WeightType type, const void *w, int64_t ldw, const void *scale,
                       bool needs_scale, void *dst, size_t dst_bytes, PackedLayout *layout) {
    KT_RETURN_IF(desc.type != type, KT_STATUS_INVALID_ARGUMENT, "amx pack: descriptor type %d does not match",
                 static_cast<int>(desc.type));
    KT_TRY(packed_layout(desc, layout));
    KT_RETURN_IF(!w || !dst || (needs_scale && !scale), KT_STATUS_INVALID_ARGUMENT, "amx pack: null pointer");
    KT_RETURN_IF(ldw < desc.k, KT_STATUS_INVALID_ARGUMENT, "amx pack: ldw %lld < k %lld",
                 static_cast<long long>(ldw), static_cast<long long>(desc.k));
    KT_RETURN_IF(reinterpret_cast<uintptr_t>(dst) % kPackedAlignment != 0, KT_STATUS_INVALID_ARGUMENT,
                 "amx pack: destination %p is not %zu-byte aligned", dst, kPackedAlignment);
    KT_RETURN_IF(dst_bytes < layout->bytes, KT_STATUS_INVALID_ARGUMENT,
                 "amx pack: destination holds %zu bytes, the packed matrix needs %zu", dst_bytes, layout->bytes);
    return Status::ok();
}

}  // namespace

Status packed_b_size(const PackedBDesc &desc, size_t *bytes) {
    KT_RETURN_IF(!bytes, KT_STATUS_INVALID_ARGUMENT, "amx pack: null size pointer");
    PackedLayout layout;
    KT_TRY(packed_layout(desc, &layout));
    *bytes = layout.bytes;
    return Status::ok();
}

Status pack_b_int8(const PackedBDesc &desc, const int8_t *w, int64_t ldw, const float *scale, void *dst,
                   size_t dst_bytes) {
    PackedLayout l;
    KT_TRY(check_pack_args(desc, WeightType::kInt8, w, ldw, scale, true, dst, dst_bytes, &l));
    auto *out = static_cast<uint8_t *>(dst);
    std::memset(out, 0, l.bytes);
    for (int64_t n = 0; n < desc.n; ++n) {
        for (int64_t k = 0; k < desc.k; ++k) out[l.element_offset(n, k)] = static_cast<uint8_t>(w[n * ldw + k]);
        std::memcpy(out + l.scale_offset(n, 0), &scale[n], sizeof(float));
    }
    return Status::ok();
}

Status pack_b_int4(const PackedBDesc &desc, const int8_t *w, int64_t ldw, const float *scale, void *dst,
                   size_t dst_bytes) {
    PackedLayout l;
    KT_TRY(check_pack_args(desc, WeightType::kInt4, w, ldw, scale, true, dst, dst_bytes, &l));
    // Validate everything before writing anything: a rejected call leaves dst untouched.
    for (int64_t n = 0; n < desc.n; ++n)
        for (int64_t k = 0; k < desc.k; ++k)
            KT_RETURN_IF(w[n * ldw + k] < -8 || w[n * ldw + k] > 7, KT_STATUS_INVALID_ARGUMENT,
                         "amx pack: INT4 weight [%lld][%lld] = %d is outside [-8, 7]", static_cast<long long>(n),
                         static_cast<long long>(k), w[n * ldw + k]);
    auto *out = static_cast<uint8_t *>(dst);
    std::memset(out, 0, l.bytes);
    const int64_t groups = desc.k / desc.group;
    for (int64_t n = 0; n < desc.n; ++n) {
        for (int64_t k = 0; k < desc.k; ++k) {
            const uint8_t nibble = static_cast<uint8_t>(w[n * ldw + k]) & 0x0F;
            out[l.element_offset(n, k)] |= static_cast<uint8_t>(nibble << l.nibble_shift(k));
        }
        for (int64_t g = 0; g < groups; ++g) {
            // The kernel's int8 B is 16 * q; the scale absorbs the 16 exactly (a power of two).
            const float s = scale[n * groups + g] / 16.0f;
            std::memcpy(out + l.scale_offset(n, g), &s, sizeof(float));
        }
    }
    return Status::ok();
}

Status pack_b_bf16(const PackedBDesc &desc, const uint16_t *w, int64_t ldw, void *dst, size_t dst_bytes) {
    PackedLayout l;
    KT_TRY(check_pack_args(desc, WeightType::kBf16, w, ldw, nullptr, false, dst, dst_bytes, &l));
    auto *out = static_cast<uint8_t *>(dst);
    std::memset(out, 0, l.bytes);
    for (int64_t n = 0; n < desc.n; ++n)
        for (int64_t k = 0; k < desc.k; ++k) std::memcpy(out + l.element_offset(n, k), &w[n * ldw + k], 2);
    return Status::ok();
}

}  // namespace kt::cpu::amx
