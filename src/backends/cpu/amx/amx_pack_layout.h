// The packed B layouts of amx_gemm.h as code: byte offsets of elements, scales and panels. Used by the packers,
// the driver and the layout tests, so the formula exists once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/amx/amx_gemm.h"

namespace kt::cpu::amx {

inline constexpr int64_t kMaxPackedDim = int64_t{1} << 24;  // n, k: keeps every offset far inside 64 bits

struct PackedLayout {
    WeightType type = WeightType::kInt8;
    int64_t n = 0, k = 0, group = 0;
    int64_t panels = 0;       // P = Np / 32
    int64_t k_padded = 0;     // Kp
    int64_t k_blocks = 0;     // S (INT8, BF16: K steps) or U (INT4: nibble units) per panel
    int64_t groups = 0;       // INT4: K / G; INT8: 1; BF16: 0
    size_t panel_bytes = 0;   // data bytes of one panel
    size_t data_bytes = 0;    // P * panel_bytes
    size_t bytes = 0;         // data + scales

    // Byte holding W[n][k] (INT4: the nibble at nibble_shift(k)).
    size_t element_offset(int64_t row, int64_t col) const {
        const int64_t p = row / kNPanel, h = (row % kNPanel) / 16, j = row % 16;
        int64_t block = 0, r = 0, byte_in_word = 0;
        switch (type) {
            case WeightType::kInt8:
                block = col / kKStepS8, r = (col % kKStepS8) / 4, byte_in_word = col % 4;
                break;
            case WeightType::kInt4:
                block = col / kKUnitS4, r = (col % kKStepS8) / 4, byte_in_word = col % 4;
                break;
            case WeightType::kBf16:
                block = col / kKStepBf16, r = (col % kKStepBf16) / 2, byte_in_word = 2 * (col % 2);
                break;
        }
        return static_cast<size_t>(((p * k_blocks + block) * 2 + h) * kTileBytes + r * 64 + 4 * j + byte_in_word);
    }
    // INT4: 0 for the first K step of a unit (low nibble), 4 for the second.
    int nibble_shift(int64_t col) const { return static_cast<int>((col % kKUnitS4) / kKStepS8) * 4; }
    // fp32 scale of row `row`, group g (INT8: g = 0).
    size_t scale_offset(int64_t row, int64_t g) const {
        if (type == WeightType::kInt8) return data_bytes + 4 * static_cast<size_t>(row);
        return data_bytes + 4 * static_cast<size_t>(((row / kNPanel) * groups + g) * kNPanel + row % kNPanel);
    }
    size_t panel_offset(int64_t p) const { return static_cast<size_t>(p) * panel_bytes; }
    size_t panel_scale_offset(int64_t p) const { return scale_offset(p * kNPanel, 0); }
};

// Validates the descriptor (INVALID_ARGUMENT with the reason) and computes its layout.
inline Status packed_layout(const PackedBDesc &d, PackedLayout *out) {
    KT_RETURN_IF(d.type != WeightType::kInt8 && d.type != WeightType::kInt4 && d.type != WeightType::kBf16,
                 KT_STATUS_INVALID_ARGUMENT, "amx pack: unknown weight type %d", static_cast<int>(d.type));
    KT_RETURN_IF(d.n < 1 || d.n > kMaxPackedDim || d.k < 1 || d.k > kMaxPackedDim, KT_STATUS_INVALID_ARGUMENT,
                 "amx pack: n = %lld, k = %lld not in 1..%lld", static_cast<long long>(d.n),
                 static_cast<long long>(d.k), static_cast<long long>(kMaxPackedDim));
    if (d.type == WeightType::kInt4) {
        KT_RETURN_IF(d.group != 32 && d.group != 64 && d.group != 128, KT_STATUS_INVALID_ARGUMENT,
                     "amx pack: INT4 group %d is not 32, 64 or 128", d.group);
        KT_RETURN_IF(d.k % d.group != 0, KT_STATUS_INVALID_ARGUMENT,
                     "amx pack: INT4 k = %lld is not a multiple of the group %d", static_cast<long long>(d.k),
                     d.group);
    } else {
        KT_RETURN_IF(d.group != 0, KT_STATUS_INVALID_ARGUMENT, "amx pack: group %d given for a non-INT4 type",
                     d.group);
    }
    PackedLayout l;
    l.type = d.type;
    l.n = d.n;
    l.k = d.k;
    l.group = d.group;
    l.panels = (d.n + kNPanel - 1) / kNPanel;
    const int64_t n_padded = l.panels * kNPanel;
    size_t scale_bytes = 0;
    switch (d.type) {
        case WeightType::kInt8:
            l.k_padded = (d.k + kKStepS8 - 1) / kKStepS8 * kKStepS8;
            l.k_blocks = l.k_padded / kKStepS8;
            l.groups = 1;
            scale_bytes = 4 * static_cast<size_t>(n_padded);
            break;
        case WeightType::kInt4:
            l.k_padded = (d.k + kKUnitS4 - 1) / kKUnitS4 * kKUnitS4;
            l.k_blocks = l.k_padded / kKUnitS4;
            l.groups = d.k / d.group;
            scale_bytes = 4 * static_cast<size_t>(n_padded * l.groups);
            break;
        case WeightType::kBf16:
            l.k_padded = (d.k + kKStepBf16 - 1) / kKStepBf16 * kKStepBf16;
            l.k_blocks = l.k_padded / kKStepBf16;
            break;
    }
    l.panel_bytes = static_cast<size_t>(l.k_blocks) * 2 * kTileBytes;
    l.data_bytes = static_cast<size_t>(l.panels) * l.panel_bytes;
    l.bytes = l.data_bytes + scale_bytes;
    *out = l;
    return Status::ok();
}

}  // namespace kt::cpu::amx
