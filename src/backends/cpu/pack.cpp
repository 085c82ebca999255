#include "backends/cpu/pack.h"

#include <algorithm>
#include <cstring>

namespace kt::cpu {
namespace {

template <typename T>
T *at(uint8_t *base, size_t offset) {
    return reinterpret_cast<T *>(base + offset);
}

// Zeroes everything panel p owns: its tiles, high bits and side-array entries.
void clear_panel(const PackedLayout &L, int64_t p, uint8_t *dst) {
    const size_t tiles_per_panel = static_cast<size_t>(L.tiles_per_half) * 2;
    std::memset(dst + static_cast<size_t>(p) * tiles_per_panel * kTileBytes, 0, tiles_per_panel * kTileBytes);
    const size_t cols = kPanel;
    const size_t g = static_cast<size_t>(L.groups), sb = static_cast<size_t>(L.superblocks);
    if (L.hbits) {
        const size_t per_tile = L.type == PackedType::kQ5_K ? 256 : 512;
        std::memset(dst + L.hbits + static_cast<size_t>(p) * tiles_per_panel * per_tile, 0, tiles_per_panel * per_tile);
    }
    auto clear = [&](size_t offset, size_t entries_per_col, size_t elem) {
        if (offset) std::memset(dst + offset + static_cast<size_t>(p) * entries_per_col * cols * elem, 0, entries_per_col * cols * elem);
    };
    switch (L.type) {
        case PackedType::kInt8: clear(L.colscale, 1, 4); break;
        case PackedType::kInt4: clear(L.gscale, g, 4); break;
        case PackedType::kBf16: break;
        case PackedType::kQ8_0:
        case PackedType::kQ4_0: clear(L.gscale, g, 2); break;
        case PackedType::kQ4_K:
        case PackedType::kQ5_K:
            clear(L.gscale, g, 1);
            clear(L.gmin, g, 1);
            clear(L.sscale, sb, 2);
            clear(L.smin, sb, 2);
            break;
        case PackedType::kQ6_K:
        case PackedType::kIq4Xs:
            clear(L.gscale, g, 1);
            clear(L.sscale, sb, 2);
            break;
        case PackedType::kMxfp4: clear(L.gscale, g, 1); break;
    }
}

void pack_row(const PackedLayout &L, int64_t p, int col, const RowFields &f, uint8_t *dst) {
    const int h = col / static_cast<int>(kHalf), j = col % static_cast<int>(kHalf);
    const int64_t k = L.k;
    auto tile = [&](int64_t s) { return dst + ((p * L.tiles_per_half + s) * 2 + h) * kTileBytes; };
    auto tile_index = [&](int64_t s) { return (p * L.tiles_per_half + s) * 2 + h; };
    const TileKind kind = packed_type_info(L.type).tile;

    if (kind == TileKind::kBf16) {
        for (int64_t i = 0; i < k; ++i) {
            uint16_t *t = reinterpret_cast<uint16_t *>(tile(i / 32));
            t[((i % 32) / 2) * 32 + 2 * j + (i % 2)] = f.bf16[i];
        }
        return;
    }
    // Four consecutive K values of a row are one 32-bit word of a tile row: handle them together.
    if (kind == TileKind::kInt8) {
        for (int64_t i = 0; i < k; i += 4) {
            uint8_t *dst4 = tile(i / 64) + ((i % 64) / 4) * kTileRowBytes + 4 * j;
            const int64_t n = std::min<int64_t>(4, k - i);
            std::memcpy(dst4, f.codes + i, static_cast<size_t>(n));
        }
    } else {
        const bool offset8 = L.type == PackedType::kInt4 || L.type == PackedType::kQ4_0;
        for (int64_t i = 0; i < k; i += 4) {
            const int64_t s = i / 128, kk = i % 128;
            const int part = static_cast<int>(kk / 64), r = static_cast<int>((kk % 64) / 4);
            uint8_t *dst4 = tile(s) + r * kTileRowBytes + 4 * j;
            const int64_t n = std::min<int64_t>(4, k - i);
            for (int64_t b = 0; b < n; ++b) {
                const uint8_t code = f.codes[i + b];
                const int byte = 4 * j + static_cast<int>(b);
                // INT4: the code's two's complement nibble; Q4_0: q - 8 the same way; the others: the low 4 bits.
                const uint8_t nibble = static_cast<uint8_t>((offset8 && L.type == PackedType::kQ4_0 ? code - 8 : code) & 0x0F);
                dst4[b] |= static_cast<uint8_t>(part ? nibble << 4 : nibble);
                if (L.type == PackedType::kQ5_K && (code & 0x10)) {
                    uint8_t *hb = dst + L.hbits + tile_index(s) * 256 + (r * 2 + part) * 8;
                    hb[byte / 8] |= static_cast<uint8_t>(1u << (byte % 8));
                } else if (L.type == PackedType::kQ6_K) {
                    uint8_t *hb = dst + L.hbits + tile_index(s) * 512 + (r * 2 + part) * 16;
                    hb[byte % 16] |= static_cast<uint8_t>(((code >> 4) & 3) << (2 * (byte / 16)));
                }
            }
        }
    }

    const int64_t gi0 = p * L.groups * kPanel + col;
    const int64_t si0 = p * L.superblocks * kPanel + col;
    switch (L.type) {
        case PackedType::kInt8: at<float>(dst, L.colscale)[p * kPanel + col] = f.f32_scale[0]; break;
        case PackedType::kInt4:
            for (int64_t g = 0; g < L.groups; ++g) at<float>(dst, L.gscale)[gi0 + g * kPanel] = f.f32_scale[g] / 16.0f;
            break;
        case PackedType::kQ8_0:
        case PackedType::kQ4_0:
            for (int64_t g = 0; g < L.groups; ++g) at<uint16_t>(dst, L.gscale)[gi0 + g * kPanel] = f.f16_group[g];
            break;
        case PackedType::kQ4_K:
        case PackedType::kQ5_K:
            for (int64_t g = 0; g < L.groups; ++g) {
                at<uint8_t>(dst, L.gscale)[gi0 + g * kPanel] = f.u8_group[g];
                at<uint8_t>(dst, L.gmin)[gi0 + g * kPanel] = f.u8_group2[g];
            }
            for (int64_t b = 0; b < L.superblocks; ++b) {
                at<uint16_t>(dst, L.sscale)[si0 + b * kPanel] = f.f16_super[b];
                at<uint16_t>(dst, L.smin)[si0 + b * kPanel] = f.f16_super2[b];
            }
            break;
        case PackedType::kQ6_K:
        case PackedType::kIq4Xs:
            for (int64_t g = 0; g < L.groups; ++g) at<int8_t>(dst, L.gscale)[gi0 + g * kPanel] = f.i8_group[g];
            for (int64_t b = 0; b < L.superblocks; ++b) at<uint16_t>(dst, L.sscale)[si0 + b * kPanel] = f.f16_super[b];
            break;
        case PackedType::kMxfp4:
            for (int64_t g = 0; g < L.groups; ++g) at<uint8_t>(dst, L.gscale)[gi0 + g * kPanel] = f.u8_group[g];
            break;
        case PackedType::kBf16: break;
    }
}

}  // namespace

void pack_panels(const PackedLayout &layout, int64_t p_begin, int64_t p_end, RowSource source, uint8_t *dst) {
    for (int64_t p = p_begin; p < p_end; ++p) {
        clear_panel(layout, p, dst);
        for (int col = 0; col < kPanel; ++col) {
            const int64_t row = p * kPanel + col;
            if (row >= layout.n) break;
            RowFields f;
            source(row, &f);
            pack_row(layout, p, col, f, dst);
        }
    }
}

}  // namespace kt::cpu
