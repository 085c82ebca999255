// Packed weight layouts: how every weight format kt computes with is laid out for the CPU kernels.
//
// One family of layouts serves every ISA level (scalar, AVX2, AVX-512, AMX), so the layout is fixed when weights are
// loaded and never depends on the NUMA node count: a NUMA shard is simply a packed matrix of its own (rows or a K
// range of the original), packed with the same rules.
//
// Common structure (W [N][K] row-major in the source: N outputs, K inputs):
//   - N is padded to Np = round_up(N, 32) with zero weights: P = Np / 32 *panels* of 32 columns, each two *halves*
//     of 16 columns. A kernel call covers whole panels.
//   - K is cut into *tiles* of 1 KiB per half: 16 tile rows of 64 bytes, each tile row holding, for the 16 columns
//     of the half, 4 consecutive bytes of K (VNNI order: the 32-bit words of W transposed). One tile row is one
//     AVX-512 operand of vpdpbusd against a broadcast 32-bit word of activations, or two AVX2 operands; 16 tile
//     rows with stride 64 are one AMX B tile.
//   - int8 tiles cover 64 K (one byte per weight); bf16 tiles 32 K (pairs of bf16); nibble tiles 128 K (the low
//     nibble of tile row r holds K 4r..4r+3, the high nibble K 64+4r..64+4r+3, as in the AMX INT4 layout); crumb
//     tiles 256 K (bits 2q..2q+1 of tile row r hold K 64q+4r..64q+4r+3: the nibble order with four parts).
//   - Tile (p, s, h) starts at ((p * S + s) * 2 + h) * 1024, S = tiles per half along K; after the tiles come the
//     per-format side arrays (scales, high bits) at 64-byte aligned offsets.
//
// Per format (u = the unsigned byte a kernel feeds vpdpbusd, a = the signed int8 activation):
//   kInt8   AMX contract INT8: tile byte = w (int8), then fp32 scale[Np]. u = w + 128.
//   kInt4   AMX contract INT4 (group G = 32/64/128): nibble = w in two's complement, then fp32 scale[P][K/G][32]
//           holding w_scale / 16. u = w + 8 (nibble ^ 8).
//   kBf16   AMX contract BF16: bf16 pairs, nothing else.
//   kQ8_0   int8 tiles of the GGUF q (int8), then f16 d[P][K/32][32]. u = q + 128.
//   kQ4_0   nibble tiles of the GGUF q ^ 8 (so that, as in kInt4, the nibble is q - 8 in two's complement), then
//           f16 d[P][K/32][32]. u = q.
//   kQ4_K   nibble tiles of q (0..15), then u8 sc[P][K/32][32], u8 m[P][K/32][32], f16 d[P][SB][32],
//           f16 dmin[P][SB][32]. w = d*sc*q - dmin*m. u = q.
//   kQ5_K   as kQ4_K for the low 4 bits, plus high bits: for each tile row and nibble half 8 bytes whose bit i is
//           the 5th bit of tile-row byte i, at hbits[tile][r][2][8] (256 bytes per tile). u = q (0..31).
//   kQ6_K   nibble tiles of the low 4 bits, plus 2-bit fields: for each tile row and nibble half 16 bytes, byte j
//           holding the high bits of tile-row bytes j, j+16, j+32, j+48 at bit 0, 2, 4, 6, at hbits[tile][r][2][16]
//           (512 bytes per tile); then i8 sc[P][K/16][32], f16 d[P][SB][32]. w = d*sc*(q - 32). u = q (0..63).
//   kIq4Xs  nibble tiles of the code book index, then i8 (ls - 32)[P][K/32][32], f16 d[P][SB][32].
//           w = d*(ls-32)*T[index]. u = T[index] + 128.
//   kMxfp4  nibble tiles of the e2m1 code (GGUF MXFP4 as stored), then the E8M0 byte e[P][K/32][32].
//           w = M[code] * 2^(e - 128), M the doubled e2m1 values -12 .. 12. u = M[code] + 12 (0 .. 24).
//   kQ2_K   crumb tiles of q (0..3), then u8 (sc | m << 4)[P][K/16][32] (GGUF's 4-bit scale and min, in its byte),
//           f16 d and dmin[P][SB][32]: as kQ4_K with groups of 16. w = d*sc*q - dmin*m. u = q.
//   kQ3_K   crumb tiles of the low 2 bits of q (0..7: GGUF's 2 low bits, and 4 where its hmask bit is set), plus
//           the third bits as kQ5_K's fifth: for each tile row and crumb part 8 bytes, bit i for tile-row byte i,
//           at hbits[tile][r][4][8] (512 bytes per 4 KiB of codes); then i8 sc[P][K/16][32] (GGUF's 6-bit scale
//           - 32), f16 d[P][SB][32]. w = d*sc*(q - 4). u = q.
//           Q2_K takes GGUF's 2.625 bits a weight exactly, Q3_K 3.5625 for 3.4375 (its scales a byte each); as the
//           Q8_0 they were converted to before, 8.5.
//   kQ5_0   as kQ4_0 with kQ5_K's high bits: nibble tiles of the low 4 bits of q (0..31), hbits[tile][r][2][8], then
//           f16 d[P][K/32][32]. w = d*(q - 16). u = q.
//   kIq4Nl  as kIq4Xs with kQ4_0's scales: nibble tiles of the code book index, then f16 d[P][K/32][32].
//           w = d*T[index]. u = T[index] + 128.
//   kQ4_1   nibble tiles of q (0..15), then f16 d[P][K/32][32], f16 -m[P][K/32][32] (GGUF's m negated: the kernels
//           subtract the min term, as the K-quants' dmin*m). w = d*q + m. u = q.
//   kQ5_1   as kQ4_1 with kQ5_0's high bits (q 0..31).
//           The four are the 32-wide GGUF formats llama.cpp writes where a K-quant or IQ4_XS does not fit the row
//           (K not a multiple of 256, as the 1,408-wide experts of DeepSeek-V2-Lite and GLM-4.5-Air): Q5_0 and Q5_1
//           for Q4_K and Q5_K, IQ4_NL for the 2- and 3-bit formats and IQ4_XS. Each takes its file's bits a weight
//           plus at most 1/16 (high bits a byte per 8 weights where GGUF packs 32 in 4 bytes: the same).
//   kIqGrid nibble tiles of an index into the matrix's own code book B of 16 signed bytes (in [-127, 127]), then
//           i8 sc[P][K/G][32] (G = 16 or 32, the format's scale group), f32 d[P][SB][32], then the code book stored
//           4 times over (64 bytes, the kernels' lookup table as it is). w = d*sc*B[index]. u = B[index] + 128.
//           The IQ1-IQ3 grid formats: every weight of one is its block's f16 d times a power of two (1/8 for IQ2 and
//           IQ1, 1/4 for IQ3_XXS) times a small odd scale code times one of at most 16 grid values (IQ2: +-8, 25,
//           43; IQ1: eighths +-1, 7, 9; IQ3_XXS: +-4 .. 62; IQ3_S: +-1 .. 15). The book holds the values and the f32
//           d the rest, exactly (an f16 d / 8 would lose bits below f16's normal range), in 4.375 bits a weight
//           (4.625 with scales per 16, as IQ1_M's, IQ2_XS's and IQ2_S's). kIqGrid holds IQ3_XXS and IQ3_S (16 values);
//           the IQ1 and IQ2 formats (6) are kIqGrid3.
//   kIqGrid3 kIqGrid's fields for a book of at most 8 values (the IQ1 and IQ2 formats have 6), the index in 3 bits
//           as kQ3_K holds its codes: crumb tiles of the low 2 bits plus the third bit in hbits[tile][r][4][8], then
//           kIqGrid's sc, d and code book (entries 8-15 zero). 3.375 bits a weight (3.625 for groups of 16): 23 %
//           less memory and bytes per token than kIqGrid, for a decode of more instructions (a core decodes about
//           as many weights a second from memory, 0.8x in cache; bench/results/zen4.md).
// SB = ceil((K + superblock_k_offset) / 256) super-blocks. For the super-block formats a matrix may start in the middle of a GGUF super-block (a NUMA shard whose K range
// starts at a multiple of 128 that is not one of 256): `superblock_k_offset` (0 or 128) is how much of the first
// super-block lies before K = 0, and K position k of the matrix uses super-block (k + offset) / 256.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace kt::cpu {

enum class PackedType : int32_t {
    kInt8 = 0,
    kInt4 = 1,
    kBf16 = 2,
    kQ8_0 = 3,
    kQ4_0 = 4,
    kQ4_K = 5,
    kQ5_K = 6,
    kQ6_K = 7,
    kIq4Xs = 8,
    kMxfp4 = 9,
    kQ2_K = 10,
    kQ3_K = 11,
    kQ5_0 = 12,
    kIq4Nl = 13,
    kQ4_1 = 14,
    kQ5_1 = 15,
    kIqGrid = 16,
    kIqGrid3 = 17,
};
inline constexpr int kPackedTypeCount = 18;

// The version of these layouts as bytes: packed buffers kept across processes (runtime/pack_cache.h) record it and
// are refused when it differs. Increment it with any change to what pack_slice writes for any type.
// 2: Q2_K and Q3_K kept as stored in crumb tiles (Q8_0 before); 3: Q5_0, IQ4_NL, Q4_1 and Q5_1 likewise (nibble tiles);
// 4: the grid formats as kIqGrid (Q6_K, Q5_K, Q4_K or Q8_0 fields before); 5: the IQ1 and IQ2 formats as kIqGrid3.
inline constexpr uint32_t kPackedLayoutVersion = 5;

inline constexpr int64_t kPanel = 32;      // columns per panel
inline constexpr int64_t kHalf = 16;       // columns per half panel (one AVX-512 vector of int32 / fp32)
inline constexpr int64_t kTileBytes = 1024;
inline constexpr int64_t kTileRowBytes = 64;
inline constexpr int64_t kCodebookSize = 16;   // kIqGrid's book: 16 signed bytes
inline constexpr int64_t kCodebookBytes = 64;  // ... stored 4 times over, one AVX-512 lookup table
inline constexpr size_t kPackedAlignment = 64;

enum class TileKind : int32_t { kInt8, kNibble, kBf16, kCrumb };

struct PackedTypeInfo {
    PackedType type;
    const char *name;
    TileKind tile;
    int64_t tile_k;        // K per tile: 64 (int8), 128 (nibble), 32 (bf16), 256 (crumb)
    int32_t group;         // K per scale group (0: per column over the whole K; kInt4, kIqGrid(3): chosen per matrix)
    int32_t superblock;    // K per super-block scale (256 for K-quants, IQ4_XS and IQ_GRID(3), else 0)
    int32_t u_offset;      // u = w_code + u_offset for symmetric formats (0: asymmetric formats with mins)
    bool has_mins;         // Q2_K, Q4_K, Q5_K, Q4_1, Q5_1
    int32_t u_max;         // largest u the kernel sees (decides whether 16-bit fallbacks can overflow)
    int32_t hbits_per_tile;  // bytes of high bits per 1 KiB tile: Q5_K, Q5_0, Q5_1 256; Q6_K, Q3_K, IQ_GRID3 512
};

// Every format's entry, in PackedType's order: the packer and the kernels (kernels_impl.h's Fmt) read the facts of a
// format from here only.
// type, name, tile, tile_k, group, superblock, u_offset, has_mins, u_max, hbits_per_tile
inline constexpr PackedTypeInfo kPackedTypeInfo[kPackedTypeCount] = {
    {PackedType::kInt8, "INT8", TileKind::kInt8, 64, 0, 0, 128, false, 255, 0},
    {PackedType::kInt4, "INT4", TileKind::kNibble, 128, 0, 0, 8, false, 15, 0},
    {PackedType::kBf16, "BF16", TileKind::kBf16, 32, 0, 0, 0, false, 0, 0},
    {PackedType::kQ8_0, "Q8_0", TileKind::kInt8, 64, 32, 0, 128, false, 255, 0},
    {PackedType::kQ4_0, "Q4_0", TileKind::kNibble, 128, 32, 0, 8, false, 15, 0},
    {PackedType::kQ4_K, "Q4_K", TileKind::kNibble, 128, 32, 256, 0, true, 15, 0},
    {PackedType::kQ5_K, "Q5_K", TileKind::kNibble, 128, 32, 256, 0, true, 31, 256},
    {PackedType::kQ6_K, "Q6_K", TileKind::kNibble, 128, 16, 256, 32, false, 63, 512},
    {PackedType::kIq4Xs, "IQ4_XS", TileKind::kNibble, 128, 32, 256, 128, false, 241, 0},
    {PackedType::kMxfp4, "MXFP4", TileKind::kNibble, 128, 32, 0, 12, false, 24, 0},
    {PackedType::kQ2_K, "Q2_K", TileKind::kCrumb, 256, 16, 256, 0, true, 3, 0},
    {PackedType::kQ3_K, "Q3_K", TileKind::kCrumb, 256, 16, 256, 4, false, 7, 512},
    {PackedType::kQ5_0, "Q5_0", TileKind::kNibble, 128, 32, 0, 16, false, 31, 256},
    {PackedType::kIq4Nl, "IQ4_NL", TileKind::kNibble, 128, 32, 0, 128, false, 241, 0},
    {PackedType::kQ4_1, "Q4_1", TileKind::kNibble, 128, 32, 0, 0, true, 15, 0},
    {PackedType::kQ5_1, "Q5_1", TileKind::kNibble, 128, 32, 0, 0, true, 31, 256},
    {PackedType::kIqGrid, "IQ_GRID", TileKind::kNibble, 128, 0, 256, 128, false, 255, 0},
    {PackedType::kIqGrid3, "IQ_GRID3", TileKind::kCrumb, 256, 0, 256, 128, false, 255, 512},
};

constexpr const PackedTypeInfo &packed_type_info(PackedType type) { return kPackedTypeInfo[static_cast<int>(type)]; }

// Sizes and offsets of one packed matrix.
struct PackedLayout {
    PackedType type = PackedType::kInt8;
    int64_t n = 0, k = 0;     // logical shape
    int64_t np = 0, kp = 0;   // padded
    int32_t group = 0;        // K per scale group (kInt8: kp, i.e. one group)
    int64_t panels = 0;
    int64_t tiles_per_half = 0;  // S
    int64_t groups = 0;          // k / group (1 for kInt8): scale groups, covering K and not the padding
    int64_t superblocks = 0;     // ceil((kp + superblock_k_offset) / 256) for super-block formats
    int32_t superblock_k_offset = 0;
    // Byte offsets from the start (0 = absent).
    size_t hbits = 0, gscale = 0, gmin = 0, sscale = 0, smin = 0, colscale = 0, codebook = 0;
    size_t bytes = 0;  // total
};

// Computes the layout. group: kInt4 (32, 64 or 128) and kIqGrid, kIqGrid3 (16 or 32) only, K a multiple of it;
// superblock_k_offset: 0 or 128, super-block formats only. INVALID_ARGUMENT for shapes the format cannot represent
// (K not a multiple of the GGUF block, a bad group) or sizes that overflow.
Status packed_layout(PackedType type, int64_t n, int64_t k, int32_t group, int32_t superblock_k_offset,
                     PackedLayout *out);

// A packed matrix as the kernels see it: the layout plus the base pointer (64-byte aligned).
struct PackedMatrix {
    PackedLayout layout;
    const uint8_t *data = nullptr;

    const uint8_t *tile(int64_t panel, int64_t s, int64_t half) const {
        return data + ((panel * layout.tiles_per_half + s) * 2 + half) * kTileBytes;
    }
};

}  // namespace kt::cpu
