// The AMX tile configuration (the 64-byte LDTILECFG/STTILECFG image), kt's palette, and the three tiny generated
// functions that load, store and release a thread's tile state.
//
// Palette 1 (SPR/EMR/GNR): 8 tiles of up to 16 rows x 64 bytes. The INT8 / INT4 / BF16 kernels share kt's palette
// (all eight tiles 16 x 64, see amx_gemm.h "Blocking"); the group-wise kernels of the GGUF formats use one palette
// per group size (A tiles one group wide). A TileSession loads a palette only when it differs from the loaded one.
#pragma once

#include <cstdint>

#include "backends/cpu/jit/jit_code.h"
#include "core/status.h"

namespace kt::cpu::amx {

inline constexpr int kNumTiles = 8;       // palette 1: tmm0..tmm7
inline constexpr int kMaxTileRows = 16;   // palette 1: rows per tile
inline constexpr int kMaxTileColsb = 64;  // palette 1: bytes per tile row
inline constexpr int kTmulMaxK = 16;      // CPUID.1E: rows of B (= 64 int8 / 32 bf16 of K)
inline constexpr int kTmulMaxN = 16;      // CPUID.1E: 64 bytes of C columns / 4

// The LDTILECFG memory image (SDM LDTILECFG; reference/amx-hwloc.md §4.2).
struct alignas(64) TileConfig {
    uint8_t palette_id = 0;  // 0: INIT (tiles released), 1: the only configured palette
    uint8_t start_row = 0;   // restart row of an interrupted tile load/store
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};  // bytes per row of tmm0..7; 8..15 must be 0
    uint8_t rows[16] = {};    // rows of tmm0..7; 8..15 must be 0
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads exactly 64 bytes");

// The palette of the INT8 / INT4 / BF16 kernels: palette 1, tmm0..tmm7 all 16 rows x 64 bytes.
const TileConfig &kt_palette();
// The palette of the group-wise kernels for groups of `group` (16 or 32) int8 along K: tmm0, tmm1 (A) 16 rows x
// `group` bytes, tmm2, tmm3 (B) group / 4 rows x 64 bytes, tmm4..tmm7 (C) 16 x 64; every TMUL is then one group.
// Any other group gives kt_palette().
const TileConfig &group_palette(int32_t group);

// The checks LDTILECFG makes (#GP(0) on failure): palette <= 1, reserved bytes 0, per tile colsb <= 64 and rows <= 16
// and (rows == 0) == (colsb == 0), entries 8..15 zero. Palette 0 is valid (it releases the tiles).
Status validate_tile_config(const TileConfig &config);

// Generated stubs, each `void f(void *cfg)`: LDTILECFG [cfg], STTILECFG [cfg], TILERELEASE (cfg unused).
enum class TileStub : int32_t { kLoadConfig = 0, kStoreConfig = 1, kRelease = 2 };
Status tile_stub(TileStub which, const jit::JitCode **out);

}  // namespace kt::cpu::amx
