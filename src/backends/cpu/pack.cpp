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
        const size_t per_tile = static_cast<size_t>(packed_type_info(L.type).hbits_per_tile);
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
        case PackedType::kQ4_0:
        case PackedType::kQ5_0:
        case PackedType::kIq4Nl: clear(L.gscale, g, 2); break;
        case PackedType::kQ4_1:
        case PackedType::kQ5_1:
            clear(L.gscale, g, 2);
            clear(L.gmin, g, 2);
            break;
        case PackedType::kQ2_K:  // no gmin (its scale byte holds the min): clear skips it
        case PackedType::kQ4_K:
        case PackedType::kQ5_K:
            clear(L.gscale, g, 1);
            clear(L.gmin, g, 1);
            clear(L.sscale, sb, 2);
            clear(L.smin, sb, 2);
            break;
        case PackedType::kQ3_K:
        case PackedType::kQ6_K:
        case PackedType::kIq4Xs:
            clear(L.gscale, g, 1);
            clear(L.sscale, sb, 2);
            break;
        case PackedType::kIqGrid:  // its code book is the matrix's, not the panel's: pack_row writes it with panel 0
        case PackedType::kIqGrid3:
            clear(L.gscale, g, 1);
            clear(L.sscale, sb, 4);
            break;
        case PackedType::kMxfp4: clear(L.gscale, g, 1); break;
    }
}

// *p |= v for the four bytes at p.
void or_word(uint8_t *p, uint32_t v) {
    uint32_t word;
    std::memcpy(&word, p, 4);
    word |= v;
    std::memcpy(p, &word, 4);
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
        // Nibble tiles: byte b of word j of tile row r holds K value 4r + b of the tile's first 64 in its low nibble
        // (part 0) and 64 + 4r + b in its high one (part 1); crumb tiles the same with four 2-bit parts, K
        // 64 * part + 4r + b at bits 2 * part. Each word is built in a register and ored in once: stored byte by
        // byte through uint8_t pointers, which may alias anything, every field of L and f was loaded again after
        // each store, and packing took most of a model's load time.
        const PackedType type = L.type;
        const uint8_t *codes = f.codes;
        uint8_t *const hbits = dst + L.hbits;
        const int parts = kind == TileKind::kCrumb ? 4 : 2, bits = 8 / parts;
        const int64_t tile_k = 64 * parts;
        const uint32_t field = kind == TileKind::kCrumb ? 0x03030303u : 0x0F0F0F0Fu;
        // High bits per code: a tile's 1 KiB holds 1024 * parts codes (2048 in nibbles, 4096 in crumbs).
        const int64_t hbits_per_tile = packed_type_info(type).hbits_per_tile;
        const int hbits_per_code = static_cast<int>(hbits_per_tile * 8 / (1024 * parts));
        for (int64_t s = 0; s * tile_k < k; ++s) {
            uint8_t *const t = tile(s) + 4 * j;
            const int64_t hb_tile = tile_index(s) * hbits_per_tile;
            for (int part = 0; part < parts; ++part) {
                for (int r = 0; r < 16; ++r) {
                    const int64_t i = s * tile_k + part * 64 + 4 * r;
                    const int n = static_cast<int>(std::clamp<int64_t>(k - i, 0, 4));  // K positions past K stay zero
                    // The four codes as one word (little-endian): byte b = the code of K position i + b, zero past K.
                    uint32_t w = 0;
                    if (n == 4)
                        std::memcpy(&w, codes + i, 4);
                    else
                        for (int b = 0; b < n; ++b) w |= static_cast<uint32_t>(codes[i + b]) << (8 * b);
                    // INT4: the code's two's complement nibble; Q4_0: q - 8 the same way, which on four bits is
                    // q ^ 8; the others: the low 4 (crumbs: 2) bits. Past K the field stays zero.
                    const uint32_t live = n == 4 ? 0xFFFFFFFFu : (1u << (8 * n)) - 1;
                    const uint32_t fields = (type == PackedType::kQ4_0 ? w ^ 0x08080808u : w) & field & live;
                    or_word(t + r * kTileRowBytes, fields << (bits * part));
                    // High bits of tile-row byte 4j + b: the 5-bit formats, Q3_K and IQ_GRID3 one bit each (the bit
                    // above the field), bit (4j + b) % 8 of byte (4j + b) / 8 of the row part's 8 (the multiply
                    // gathers bit 0 of the four bytes into bits 24-27, and no two of its other products meet below
                    // them); Q6_K two, bits 2 ((4j + b) / 16) of byte (4j + b) % 16 of its 16.
                    if (hbits_per_code == 1) {
                        const uint32_t high = ((((w >> bits) & 0x01010101u) * 0x01020408u) >> 24) & 0x0F;
                        hbits[hb_tile + (r * parts + part) * 8 + j / 2] |= static_cast<uint8_t>(high << (4 * (j % 2)));
                    } else if (hbits_per_code == 2) {
                        const uint32_t high = ((w >> 4) & 0x03030303u) << (2 * (j / 4));
                        or_word(hbits + hb_tile + (r * 2 + part) * 16 + 4 * (j % 4), high);
                    }
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
        case PackedType::kQ5_0:
        case PackedType::kIq4Nl:
        case PackedType::kQ4_1:
        case PackedType::kQ5_1:
            for (int64_t g = 0; g < L.groups; ++g) {
                at<uint16_t>(dst, L.gscale)[gi0 + g * kPanel] = f.f16_group[g];
                if (L.gmin)  // -m: the sign bit flipped, exact (packed.h)
                    at<uint16_t>(dst, L.gmin)[gi0 + g * kPanel] = static_cast<uint16_t>(f.f16_group2[g] ^ 0x8000u);
            }
            break;
        case PackedType::kQ2_K:  // no gmin: its u8_group byte holds scale and min
        case PackedType::kQ4_K:
        case PackedType::kQ5_K:
            for (int64_t g = 0; g < L.groups; ++g) {
                at<uint8_t>(dst, L.gscale)[gi0 + g * kPanel] = f.u8_group[g];
                if (L.gmin) at<uint8_t>(dst, L.gmin)[gi0 + g * kPanel] = f.u8_group2[g];
            }
            for (int64_t b = 0; b < L.superblocks; ++b) {
                at<uint16_t>(dst, L.sscale)[si0 + b * kPanel] = f.f16_super[b];
                at<uint16_t>(dst, L.smin)[si0 + b * kPanel] = f.f16_super2[b];
            }
            break;
        case PackedType::kQ3_K:
        case PackedType::kQ6_K:
        case PackedType::kIq4Xs:
            for (int64_t g = 0; g < L.groups; ++g) at<int8_t>(dst, L.gscale)[gi0 + g * kPanel] = f.i8_group[g];
            for (int64_t b = 0; b < L.superblocks; ++b) at<uint16_t>(dst, L.sscale)[si0 + b * kPanel] = f.f16_super[b];
            break;
        case PackedType::kIqGrid:
        case PackedType::kIqGrid3:
            for (int64_t g = 0; g < L.groups; ++g) at<int8_t>(dst, L.gscale)[gi0 + g * kPanel] = f.i8_group[g];
            for (int64_t b = 0; b < L.superblocks; ++b) at<float>(dst, L.sscale)[si0 + b * kPanel] = f.f32_scale[b];
            if (p == 0 && col == 0)
                for (int64_t i = 0; i < kCodebookBytes; ++i)
                    at<int8_t>(dst, L.codebook)[i] = f.codebook[i % kCodebookSize];
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
