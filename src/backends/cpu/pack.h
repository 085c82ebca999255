// Packing: writing weights into the layouts of packed.h.
//
// The packer takes each row of W as its format's raw fields (codes and scales, already decoded from GGUF blocks or
// produced by quantizing fp32; src/moe/weights.cpp does that) and writes tiles and side arrays. Rows are requested
// panel by panel, so callers can pack panels in parallel and NUMA shards (a row range or a K range of the
// original) independently.
#pragma once

#include <cstdint>

#include "backends/cpu/packed.h"
#include "core/function_ref.h"

namespace kt::cpu {

// One row of W over the matrix's K range, in the format's own fields (pointers the format does not use stay null):
//   kInt8   codes: int8 weights (as bytes); f32_scale[0]: the row's scale.
//   kInt4   codes: int8 weights in [-8, 7]; f32_scale[K/G]: the group scales (the real ones; the packer stores /16).
//   kBf16   bf16[K].
//   kQ8_0   codes: int8 q; f16_group[K/32]: d.
//   kQ4_0   codes: q in 0..15 (w = d * (q - 8)); f16_group[K/32]: d.
//   kQ4_K   codes: q in 0..15; u8_group[K/32]: sc, u8_group2[K/32]: m; f16_super[SB]: d, f16_super2[SB]: dmin.
//   kQ5_K   as kQ4_K with q in 0..31.
//   kQ6_K   codes: q in 0..63 (w = d * sc * (q - 32)); i8_group[K/16]: sc; f16_super[SB]: d.
//   kIq4Xs  codes: code book index 0..15; i8_group[K/32]: ls - 32; f16_super[SB]: d.
//   kMxfp4  codes: e2m1 code 0..15; u8_group[K/32]: the E8M0 exponent byte.
//   kQ2_K   codes: q in 0..3; u8_group[K/16]: sc | m << 4 (GGUF's byte); f16_super[SB]: d, f16_super2[SB]: dmin.
//   kQ3_K   codes: q in 0..7 (w = d * sc * (q - 4)); i8_group[K/16]: sc; f16_super[SB]: d.
//   kQ5_0   codes: q in 0..31 (w = d * (q - 16)); f16_group[K/32]: d.
//   kIq4Nl  codes: code book index 0..15; f16_group[K/32]: d.
//   kQ4_1   codes: q in 0..15 (w = d * q + m); f16_group[K/32]: d, f16_group2[K/32]: m (as GGUF stores it).
//   kQ5_1   as kQ4_1 with q in 0..31.
//   kIqGrid codes: index 0..15 into codebook; i8_group[K/G]: sc; f32_scale[SB]: d; codebook[16]: the matrix's
//           book (the same for every row; the packer stores it with panel 0).
//   kIqGrid3 as kIqGrid with indices 0..7.
// Super-block arrays are indexed as the layout's: K position k uses (k + superblock_k_offset) / 256.
struct RowFields {
    const uint8_t *codes = nullptr;
    const uint16_t *bf16 = nullptr;
    const float *f32_scale = nullptr;
    const uint16_t *f16_group = nullptr;
    const uint16_t *f16_group2 = nullptr;
    const uint8_t *u8_group = nullptr;
    const uint8_t *u8_group2 = nullptr;
    const int8_t *i8_group = nullptr;
    const uint16_t *f16_super = nullptr;
    const uint16_t *f16_super2 = nullptr;
    const int8_t *codebook = nullptr;
};

// Fills *fields for row `row` (0 <= row < N). Called once per row, in order within a panel; the pointers must stay
// valid until the next call.
using RowSource = FunctionRef<void(int64_t row, RowFields *fields)>;

// Packs panels [p_begin, p_end) into dst (the layout's bytes, 64-byte aligned). Every byte of those panels' tiles
// and side arrays is written (padding rows and K positions are zero), and with panel 0 the code book of kIqGrid
// and kIqGrid3; nothing else.
void pack_panels(const PackedLayout &layout, int64_t p_begin, int64_t p_end, RowSource source, uint8_t *dst);

}  // namespace kt::cpu
