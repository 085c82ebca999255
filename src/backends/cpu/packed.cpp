#include "backends/cpu/packed.h"

#include "core/checked_math.h"

namespace kt::cpu {
namespace {

// Appends a region of `bytes` at the next 64-byte boundary; returns false on overflow.
bool append(size_t *cursor, uint64_t bytes, size_t *offset) {
    uint64_t start = 0, end = 0;
    if (!checked_align_up(*cursor, kPackedAlignment, &start) || !checked_add(start, bytes, &end)) return false;
    *offset = static_cast<size_t>(start);
    *cursor = static_cast<size_t>(end);
    return true;
}

}  // namespace

Status packed_layout(PackedType type, int64_t n, int64_t k, int32_t group, int32_t superblock_k_offset,
                     PackedLayout *out) {
    KT_RETURN_IF(static_cast<int>(type) < 0 || static_cast<int>(type) >= kPackedTypeCount, KT_STATUS_INVALID_ARGUMENT,
                 "packed layout: unknown type %d", static_cast<int>(type));
    const PackedTypeInfo &info = packed_type_info(type);
    KT_RETURN_IF(n < 1 || k < 1 || n > (int64_t{1} << 40) || k > (int64_t{1} << 40), KT_STATUS_INVALID_ARGUMENT,
                 "packed layout %s: shape [%lld, %lld]", info.name, static_cast<long long>(n), static_cast<long long>(k));
    PackedLayout l;
    l.type = type;
    l.n = n;
    l.k = k;
    if (type == PackedType::kInt4) {
        KT_RETURN_IF(group != 32 && group != 64 && group != 128, KT_STATUS_INVALID_ARGUMENT,
                     "packed layout INT4: group %d (must be 32, 64 or 128)", group);
        l.group = group;
    } else if (type == PackedType::kIqGrid || type == PackedType::kIqGrid3) {
        KT_RETURN_IF(group != 16 && group != 32, KT_STATUS_INVALID_ARGUMENT,
                     "packed layout %s: group %d (must be 16 or 32)", info.name, group);
        l.group = group;
    } else {
        l.group = info.group;
    }
    if (l.group > 0)
        KT_RETURN_IF(k % l.group != 0, KT_STATUS_INVALID_ARGUMENT, "packed layout %s: K = %lld is not a multiple of %d",
                     info.name, static_cast<long long>(k), l.group);
    if (info.superblock > 0) {
        KT_RETURN_IF(superblock_k_offset != 0 && superblock_k_offset != 128, KT_STATUS_INVALID_ARGUMENT,
                     "packed layout %s: super-block offset %d (must be 0 or 128)", info.name, superblock_k_offset);
        l.superblock_k_offset = superblock_k_offset;
    } else {
        KT_RETURN_IF(superblock_k_offset != 0, KT_STATUS_INVALID_ARGUMENT,
                     "packed layout %s has no super-blocks (offset %d)", info.name, superblock_k_offset);
    }
    l.np = (n + kPanel - 1) / kPanel * kPanel;
    l.kp = (k + info.tile_k - 1) / info.tile_k * info.tile_k;
    l.panels = l.np / kPanel;
    l.tiles_per_half = l.kp / info.tile_k;
    // Groups cover K, not the padding: a kernel never visits K steps past the last group.
    if (type == PackedType::kInt8) l.group = static_cast<int32_t>(l.kp);
    if (l.group > 0) l.groups = type == PackedType::kInt8 ? 1 : k / l.group;
    if (info.superblock > 0) l.superblocks = (k + l.superblock_k_offset + info.superblock - 1) / info.superblock;

    // Every region below is at most 64 bytes per padded weight: bounding that keeps their products from wrapping.
    uint64_t padded = 0;
    KT_RETURN_IF(!checked_mul(static_cast<uint64_t>(l.np), static_cast<uint64_t>(l.kp), &padded) ||
                     !checked_mul(padded, uint64_t{64}, &padded),
                 KT_STATUS_INVALID_ARGUMENT, "packed layout %s: size overflows", info.name);
    const uint64_t tiles = static_cast<uint64_t>(l.panels) * static_cast<uint64_t>(l.tiles_per_half) * 2;
    const uint64_t cols = static_cast<uint64_t>(l.np);
    size_t cursor = 0, data = 0;
    bool ok = append(&cursor, tiles * kTileBytes, &data);
    const uint64_t group_entries = cols * static_cast<uint64_t>(l.groups);
    const uint64_t superblock_entries = cols * static_cast<uint64_t>(l.superblocks);
    if (info.hbits_per_tile > 0)
        ok = ok && append(&cursor, tiles * static_cast<uint64_t>(info.hbits_per_tile), &l.hbits);
    switch (type) {
        case PackedType::kInt8: ok = ok && append(&cursor, cols * 4, &l.colscale); break;
        case PackedType::kInt4: ok = ok && append(&cursor, group_entries * 4, &l.gscale); break;
        case PackedType::kBf16: break;
        case PackedType::kQ8_0:
        case PackedType::kQ4_0:
        case PackedType::kQ5_0:
        case PackedType::kIq4Nl: ok = ok && append(&cursor, group_entries * 2, &l.gscale); break;
        case PackedType::kQ4_1:
        case PackedType::kQ5_1:
            ok = ok && append(&cursor, group_entries * 2, &l.gscale) && append(&cursor, group_entries * 2, &l.gmin);
            break;
        case PackedType::kQ2_K:  // scale and min share a byte: no gmin
            ok = ok && append(&cursor, group_entries, &l.gscale) &&
                 append(&cursor, superblock_entries * 2, &l.sscale) && append(&cursor, superblock_entries * 2, &l.smin);
            break;
        case PackedType::kQ4_K:
        case PackedType::kQ5_K:
            ok = ok && append(&cursor, group_entries, &l.gscale) && append(&cursor, group_entries, &l.gmin) &&
                 append(&cursor, superblock_entries * 2, &l.sscale) && append(&cursor, superblock_entries * 2, &l.smin);
            break;
        case PackedType::kQ6_K:
        case PackedType::kQ3_K:
        case PackedType::kIq4Xs:
            ok = ok && append(&cursor, group_entries, &l.gscale) && append(&cursor, superblock_entries * 2, &l.sscale);
            break;
        case PackedType::kIqGrid:
        case PackedType::kIqGrid3:
            ok = ok && append(&cursor, group_entries, &l.gscale) &&
                 append(&cursor, superblock_entries * 4, &l.sscale) && append(&cursor, kCodebookBytes, &l.codebook);
            break;
        case PackedType::kMxfp4: ok = ok && append(&cursor, group_entries, &l.gscale); break;
    }
    KT_RETURN_IF(!ok, KT_STATUS_INVALID_ARGUMENT, "packed layout %s: size overflows", info.name);
    l.bytes = cursor;
    *out = l;
    return Status::ok();
}

}  // namespace kt::cpu
