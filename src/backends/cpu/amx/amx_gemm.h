// AMX GEMM kernels for the expert pool: the contract between src/backends/cpu/amx and its callers.
//
// The pool calls three kinds of functions, in this order:
//   1. at load time, per weight matrix W [N][K] (N outputs, K inputs, row-major): packed_b_size() then
//      pack_b_int8() / pack_b_int4() / pack_b_bf16() into a 64-byte aligned buffer it owns (NUMA placement is the
//      pool's business: pack each node's shard separately, one PackedB per shard);
//   2. at run time, per worker thread and job: a TileSession (below), then any number of
//      gemm_s8_s32() / gemm_s8_f32() / gemm_bf16_f32() calls over column ranges of that thread's share;
//   3. session.end().
// available() says whether AMX kernels can run in this process at all; when it is false the pool uses its AVX-512 /
// AVX2 / scalar kernels. Everything here is generated at run time with xbyak (src/backends/cpu/jit); nothing in
// libkt is compiled with AMX flags.
//
// ---------------------------------------------------------------------------------------------------------------
// Numerics (the int8 scheme proposed for the whole pool; AVX-512 paths can match it bit for bit on integers)
// ---------------------------------------------------------------------------------------------------------------
//   Activations, s8 per token: a_q[m][k] = clamp(round(x[m][k] / a_scale[m]), -127, 127), a_scale[m] = amax_m/127,
//     quantized once per token (not once per expert). Any int8 value is accepted, -128 included.
//   INT8 weights, per output channel: w_q[n][k] int8, w_scale[n] (= amax_n / 127 when the pool quantizes).
//     acc[m][n] = sum_k a_q[m][k] * w_q[n][k]      (int32, exact; TDPBSSD = s8 x s8)
//     gemm_s8_s32: C = acc.  gemm_s8_f32: C = (float(acc) * w_scale[n]) * a_scale[m]   (two fp32 roundings, RNE)
//   INT4 weights, group-wise along K, group G in {32, 64, 128}: w_q[n][k] in [-8, 7], w_scale[n][k / G].
//     per group g: isum_g = sum_{k in g} a_q[m][k] * w_q[n][k]                         (int32, exact)
//     acc = 0; for g in order: acc = fma(float(isum_g), w_scale[n][g], acc)            (one fp32 rounding each)
//     gemm_s8_f32: C = acc * a_scale[m]
//     The kernel unpacks nibbles to int8 16*q (two ops per 64 bytes) and the packing stores w_scale / 16, which
//     gives exactly the same fp32 results (power-of-two scaling is exact) unless a scale is below 2^-122.
//     A GGUF Q4_0 block (d, q in [0,15]) is INT4 G=32 with w_q = q - 8 and w_scale = d: lossless.
//   BF16: A and W bf16; C fp32 from TDPBF16PS, one instruction per 32-element K step: per output, an even-lane
//     and an odd-lane fp32 sum (FMA chains from +0, DAZ/FTZ, RNE) are added, then added to C. This is NOT the
//     order of AVX512-BF16 vdpbf16ps, so AMX and AVX-512 bf16 results differ in the last bits: compare bf16 paths
//     with a tolerance (reference/amx-hwloc.md §4.6).
//   An AVX-512 VNNI path without s8 x s8 dot products can reproduce INT8/INT4 exactly with vpdpbusd by using the
//   weight as the unsigned operand: sum (w+128) * a - 128 * sum a (INT4: (q+8), 8 * sum_{k in g} a), where sum a
//   is computed per token (per group) once, at activation quantization.
//
// ---------------------------------------------------------------------------------------------------------------
// Shapes and tails
// ---------------------------------------------------------------------------------------------------------------
//   M: any M >= 1. Blocks of 32 rows; a tail block uses partial tiles (no padding of A or C is required; nothing
//      outside A[0..M)[0..K) and the M x (n_end - n_begin) block of C is read or written, unless the caller says A
//      is padded to whole 16-row tiles).
//   N: any N >= 1 at packing (padded with zero weights to a multiple of kNPanel = 32). A GEMM call computes the
//      columns [n_begin, n_end) with n_begin % 32 == 0 and (n_end % 32 == 0 or n_end == N): threads split N by
//      panels.
//   K: INT8 and BF16: any K >= 1 (the last partial K step is staged through a zero-filled buffer in the kernel).
//      INT4: K % G == 0.
//   Strides lda, ldc are in elements (lda >= K, ldc >= n_end - n_begin); any alignment of A and C is fine.
//
// ---------------------------------------------------------------------------------------------------------------
// Blocking (why)
// ---------------------------------------------------------------------------------------------------------------
//   One kernel call computes a 32 x 32 block of C over the whole K, with 2 x 2 register blocking on the 8 tiles:
//     tmm0, tmm1  A   16 rows x 64 bytes  (rows m0..m0+15, m0+16..m0+31; 64 int8 or 32 bf16 of K)
//     tmm2, tmm3  B   16 rows x 64 bytes  (VNNI-packed: 16 rows = K step / 4 (int8) or / 2 (bf16), 16 columns)
//     tmm4..tmm7  C   16 rows x 64 bytes  (16 x 16 int32 / fp32; C(i,j) = tmm(4 + 2i + j))
//   - Each tile load feeds two TMULs (4 loads per 4 TDPxx), so loads hide behind the TMUL; 1 x 1 blocking would
//     need two loads per TMUL.
//   - K step = 64 int8 / 32 bf16: the widest A row (64 bytes) and the deepest B (16 rows = tmul_maxk).
//   - C stays in tiles for the whole K, so C is written once, never reloaded.
//   - The 32-column panel makes each K step's B one contiguous 2 KiB (two 1 KiB tiles, stride 64), so every
//     B tile load touches one page.
//   - These kernels share one palette (all eight tiles 16 x 64), so a thread configures its tiles once per
//     session, whatever the formats and tails (the group-wise kernels of the GGUF formats have one palette per
//     group size: see below). Tails are handled inside the kernels: partial A rows (unless A is padded) and the
//     last partial K step are copied into a zeroed stack tile, and C tiles that are not whole go through a stack
//     buffer and masked AVX-512 stores.
//   - INT4: per K step the nibbles of a 1 KiB packed tile are unpacked into a stack tile (vpsllw/vpandd) and
//     loaded from there. Per group, the four C tiles are stored to the stack, converted to fp32 and
//     fma-accumulated with the group's scales into an fp32 stack accumulator (AVX-512), and the C tiles are zeroed
//     again. G = 32 is half a K step: each step then runs two TMUL passes against B tiles whose other group's rows
//     are zero.
//   The driver walks N panels outermost and M blocks inside, so a B panel (32 x K) stays hot in L1/L2 while A
//   rows stream.
//
// ---------------------------------------------------------------------------------------------------------------
// Tile configuration and threads
// ---------------------------------------------------------------------------------------------------------------
//   Tile state (TILECFG and the tile data) is per thread and volatile in the SysV ABI, and the host may use AMX
//   itself. A TileSession brackets kt's AMX use on one thread: its first AMX call saves the thread's current
//   configuration (STTILECFG), then loads kt's palette (LDTILECFG, skipped when identical); end() restores the
//   saved configuration (LDTILECFG) or, when the thread had none, releases the tiles (TILERELEASE, so signal
//   frames and context switches stay small while the thread is idle). The caller's tile *data* is not preserved
//   (volatile by ABI). A worker thread makes one TileSession per job and passes it to every GEMM call of the job:
//   its tiles are configured once per job. Passing nullptr makes a GEMM call bracket itself (save, load, restore).
//
//   Thread safety: packing and GEMM calls are reentrant; generated kernels are cached process-wide (thread-safe).
//   A TileSession belongs to the thread that created it.
//
// ---------------------------------------------------------------------------------------------------------------
// Testing without AMX hardware
// ---------------------------------------------------------------------------------------------------------------
//   Generated code is run through a CodeRunner. The default runs it natively. Tests install the tile machine
//   (tests/backends/tile_machine), which decodes the exact bytes with Zydis and interprets them; available() is then
//   true on any host (still capped by kt::cpu::max_isa_level()), so the pool's AMX level can be tested here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>

#include "core/status.h"

namespace kt::jit {
class JitCode;
}

namespace kt::cpu::amx {

struct TileConfig;  // amx_tile_config.h

// ---- packed weights ------------------------------------------------------------------------------------------

inline constexpr int64_t kNPanel = 32;        // columns per packed panel and per kernel call
inline constexpr int64_t kMBlock = 32;        // rows per kernel call
inline constexpr int64_t kRowsPerTile = 16;   // rows per A / C tile
inline constexpr int64_t kTileBytes = 1024;   // 16 rows x 64 bytes
inline constexpr int64_t kKStepS8 = 64;       // int8 K per TMUL
inline constexpr int64_t kKStepBf16 = 32;     // bf16 K per TMUL
inline constexpr int64_t kKUnitS4 = 128;      // int4 K per packed nibble unit (two K steps)
inline constexpr size_t kPackedAlignment = 64;

enum class WeightType : int32_t {
    kInt8 = 0,  // int8 [N][K] + fp32 scale[N]
    kInt4 = 1,  // int8 [N][K] holding values in [-8, 7] + fp32 scale[N][K / group]
    kBf16 = 2,  // bf16 [N][K]
};

struct PackedBDesc {
    WeightType type = WeightType::kInt8;
    int64_t n = 0;      // output channels (rows of W)
    int64_t k = 0;      // input features (columns of W)
    int32_t group = 0;  // kInt4: 32, 64 or 128; otherwise 0
};

// Packed layouts (offsets in bytes from the 64-byte aligned start; Np = round_up(N, 32), P = Np / 32 panels,
// panel p holds columns 32p..32p+31, half h in {0, 1} its columns 32p+16h..+15, j in 0..15 the column in the half;
// everything outside W [N][K] is zero):
//   INT8: Kp = round_up(K, 64), S = Kp / 64.
//     byte W[32p+16h+j][64s+4r+i] (r < 16, i < 4) at ((p*S + s)*2 + h)*1024 + r*64 + 4j + i
//     then fp32 scale[Np] at Np*Kp.                                         size = Np*Kp + 4*Np
//   INT4: Kp = round_up(K, 128), U = Kp / 128 units, each two K steps of 64 (lo = first, hi = second).
//     byte ((p*U + u)*2 + h)*1024 + r*64 + 4j + i holds nibbles
//       lo (bits 0-3) = W[n][128u + 4r + i], hi (bits 4-7) = W[n][128u + 64 + 4r + i]  (two's complement, n = 32p+16h+j)
//     then fp32 scale[P][K / G][32] (value w_scale[32p + c][g] / 16) at Np*Kp/2.  size = Np*Kp/2 + 4*Np*(K/G)
//   BF16: Kp = round_up(K, 32), S = Kp / 32.
//     bf16 W[32p+16h+j][32s+2r+i] (r < 16, i < 2) at ((p*S + s)*2 + h)*1024 + r*64 + 4j + 2i
//                                                                            size = Np*Kp*2
// Each 1 KiB block is one B tile (VNNI order: a 64-byte row holds, for 16 columns, 4 consecutive int8 or 2
// consecutive bf16 of K), i.e. the 32-bit words of W transposed. An AVX-512 kernel reads the same layout: one
// 64-byte row is one zmm operand of vpdpbusd / vdpbf16ps against a broadcast 32-bit word of A.

// Size in bytes of the packed buffer; INVALID_ARGUMENT for a bad descriptor (n or k outside 1..2^24, a bad group,
// K % G != 0 for INT4).
Status packed_b_size(const PackedBDesc &desc, size_t *bytes);

// Pack W (w [n][ldw], ldw >= k) into dst (dst_bytes >= packed_b_size, 64-byte aligned). INVALID_ARGUMENT for
// null pointers, misalignment, a small buffer, a descriptor of another type, or (INT4) a value outside [-8, 7].
Status pack_b_int8(const PackedBDesc &desc, const int8_t *w, int64_t ldw, const float *scale /* [n] */, void *dst,
                   size_t dst_bytes);
Status pack_b_int4(const PackedBDesc &desc, const int8_t *w, int64_t ldw,
                   const float *scale /* [n][k / group] */, void *dst, size_t dst_bytes);
Status pack_b_bf16(const PackedBDesc &desc, const uint16_t *w, int64_t ldw, void *dst, size_t dst_bytes);

// A packed weight matrix: the descriptor it was packed with and the buffer (not owned).
struct PackedB {
    PackedBDesc desc;
    const void *data = nullptr;
};

// ---- tile sessions -------------------------------------------------------------------------------------------

// Brackets kt's AMX use on the calling thread (see "Tile configuration and threads"). Not copyable or movable.
class TileSession {
public:
    TileSession() = default;
    ~TileSession();  // calls end() if needed (its status is lost; call end() to see it)
    TileSession(const TileSession &) = delete;
    TileSession &operator=(const TileSession &) = delete;

    // Loads kt's tile palette (or `palette`, a kernel's own: amx_tile_config.h) on this thread unless it is loaded
    // already; the first call saves the thread's configuration. A change of palette costs one LDTILECFG (about
    // 60 ns measured; it also zeroes the tiles), so callers group calls of one palette. MISUSE from another
    // thread than the creator's.
    Status configure();
    Status configure(const TileConfig &palette);
    // Restores the saved configuration or releases the tiles. Idempotent; a later configure() starts over.
    Status end();

    bool active() const { return active_; }

private:
    alignas(64) uint8_t saved_[64] = {};
    alignas(64) uint8_t loaded_[64] = {};
    bool active_ = false;
    std::thread::id owner_ = std::this_thread::get_id();
};

// ---- GEMM ----------------------------------------------------------------------------------------------------
//
// C[m][n] for 0 <= m < M, n_begin <= n < n_end (see Numerics), written at c[m * ldc + (n - n_begin)]: c points at
// the first computed column, as in the expert pool's other kernels (a thread can own a column slice of C).
// `session` may be nullptr (the call brackets itself). `a_padded`: A has round_up(m, 16) readable rows, the rows
// from m on finite (e.g. zero), so the last partial tile of rows is loaded from A instead of being copied row by row
// into a stack tile every K step (measured: m = 24 runs at 2016 GOP/s staged, 2479 at m = 16). INVALID_ARGUMENT
// for bad pointers, ranges or strides; UNSUPPORTED when available() is false; INTERNAL for a kernel that failed to
// generate or (under the tile machine) faulted.

// b: INT8. C int32, exact.
Status gemm_s8_s32(TileSession *session, const PackedB &b, int64_t m, int64_t n_begin, int64_t n_end,
                   const int8_t *a /* [m][lda] */, int64_t lda, int32_t *c /* [m][ldc], column n_begin first */,
                   int64_t ldc, bool a_padded = false);

// b: INT8 or INT4. C fp32, scaled by a_scale[m] and the weight scales.
Status gemm_s8_f32(TileSession *session, const PackedB &b, int64_t m, int64_t n_begin, int64_t n_end,
                   const int8_t *a /* [m][lda] */, int64_t lda, const float *a_scale /* [m] */,
                   float *c /* [m][ldc], column n_begin first */, int64_t ldc, bool a_padded = false);

// b: BF16. C fp32.
Status gemm_bf16_f32(TileSession *session, const PackedB &b, int64_t m, int64_t n_begin, int64_t n_end,
                     const uint16_t *a /* [m][lda] */, int64_t lda, float *c /* [m][ldc], column n_begin first */,
                     int64_t ldc, bool a_padded = false);

// ---- group-wise int8 weights (the GGUF formats) --------------------------------------------------------------
//
// The GGUF formats kt keeps as stored (but MXFP4) keep their own packed layouts (backends/cpu/packed.h); the AMX kernel
// set turns one 32-column panel at a time into a GroupedPanel (signed int8 codes in the INT8 tile layout, fp32 group
// scales) and multiplies it with activations prepared once per call (GroupedActs). Numerics are the other kernel sets'
// (backends/cpu/kernels.h), so results are the same bits on every ISA:
//   per group g of `group` K positions, in order: isum = sum_{k in g} a_q[m][k] * w_q[n][k]   (int32, exact)
//     acc = fma(float(isum), scale[g][n], acc)                                    (acc from +0)
//     with mins: acc = fma(neg_min[g][n], asum[m][g], acc)   (= fnma(min, asum, acc) bit for bit: -min is exact)
//   C = acc * a_scale[m]
//
// Why this shape, and what it costs (measured on the Intel AMX host, one core, operands in L1, best of 2000 runs):
//   - A TMUL costs the same whatever its K: 16 x 16 outputs with K = 64, 32 or 16 int8 all take 4.9 ns (16 cycles),
//     M = 8 rows about 3 ns. So exact per-group sums cost one TMUL per group: at most 50 % of the int8 TMUL peak
//     for groups of 32 and 25 % for Q6_K's 16. No layout avoids it: keeping several groups' sums apart in one TMUL
//     means zeros in A or B, which the TMUL multiplies just the same.
//   - Each group's sums must leave the tiles (TILESTORED) and be scaled by AVX-512: per group and 16 x 16 block,
//     TMUL + loads 6.4 ns, + the tile store 12.4 ns (they do not overlap), + cvt and fma per row 19.5 ns, + the
//     mins' fma 24 ns: about 10 % of the TMUL peak, and the group-wise kernels run close to that (8-11 %, twice the
//     AVX-512 VNNI kernels of the same formats). Fewer stores and conversions need a different operation order
//     (e.g. integer sums over a super-block with the 6-bit scales folded in), i.e. other bits than every other
//     ISA: not done, so that results stay identical across ISAs.
//   - The group sizes get their own palettes (amx_tile_config.h: A one group wide, B group / 4 rows), so every
//     TMUL is exactly one group without zero rows, and A is packed so each A tile is contiguous (GroupedActs).
//     Switching palettes costs one LDTILECFG (about 60 ns); the expert pool runs one format per phase.
//   - Accumulators live in zmm registers (16 x 16 sub-blocks, one zmm per row): no accumulator loads or stores per
//     group. Four C tiles rotate so consecutive groups' TMULs do not wait for each other's stores.
struct GroupedPanel {
    int32_t n = 0;      // valid columns, 1..32 (the rest of the panel is zero)
    int64_t k = 0;      // K, a multiple of group
    int32_t group = 0;  // 16 or 32
    // The INT8 layout of one panel (see "Packed layouts"): ceil(K / 64) steps of two 1 KiB tiles, signed codes.
    const int8_t *tiles = nullptr;
    const float *scale = nullptr;    // [K / group][32]
    const float *neg_min = nullptr;  // [K / group][32] (formats with mins), or nullptr
};

// The activations, packed so that every A tile (16 rows x one group) is one contiguous run of 16 * group bytes:
// row r of 32-row block b, group g at a[((b * G + g) * 32 + r % 32) * group] (G = K / group), for ceil(m / 32)
// blocks; rows m.. of the last block are read too (keep them zero).
struct GroupedActs {
    int64_t m = 0;      // rows, >= 1
    int64_t k = 0;      // = the panel's K
    int32_t group = 0;  // = the panel's group
    const int8_t *a = nullptr;
    const float *a_scale = nullptr;  // [m]
    // With mins: asum[b][g][r] = float(sum_{k in g} a_q[32b + r][k]) ([ceil(m / 32)][G][32]; rows m.. finite).
    const float *asum = nullptr;
};

// C[m][0..b.n) (ldc in elements, c at the panel's first column). INVALID_ARGUMENT for bad shapes or pointers;
// UNSUPPORTED when available() is false; INTERNAL for a kernel that failed to generate or faulted.
Status gemm_s8_grouped_f32(TileSession *session, const GroupedPanel &b, const GroupedActs &a, float *c, int64_t ldc);

// ---- where generated code runs -------------------------------------------------------------------------------

// True when AMX kernels may run in this process: natively when kt::cpu::active_isa_level() is kAmx, or through an
// installed CodeRunner when kt::cpu::max_isa_level() allows kAmx.
bool available();
// True when AMX code runs on this CPU itself: available() with no CodeRunner installed (what a measurement of
// speed needs).
bool runs_natively();

// Runs generated code (every kt AMX function takes one pointer argument, `params`) and reports a fault as a
// Status. The tile machine implements this; the default calls the code natively.
using CodeRunner = Status (*)(const jit::JitCode &code, const void *params, void *user);

// Installs `runner` (nullptr: back to native) for every thread. For tests: install before any AMX call and leave it
// in place while sessions are active.
void set_code_runner(CodeRunner runner, void *user);

}  // namespace kt::cpu::amx
