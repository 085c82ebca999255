// Emitter of the AMX GEMM microkernel (blocking and packing: amx_gemm.h; descriptor and parameters:
// amx_gemm_kernel.h).
//
// Shape of the generated function `void kernel(const GemmKernelParams *p)`, for a block of m x n (<= 32 x 32):
//
//   preamble; load parameters; set masks and constants; zero the stack buffers that need it; tilezero C
//   K loop (K steps of 64 bytes; INT4: units of two steps, the nibble halves of one packed tile)
//     A tiles: tileloadd straight from A, or (partial rows / the last partial K step) rows copied into a stack
//              tile first, with a zeroing byte mask for the partial K step
//     B tiles: tileloadd from the packed panel (INT4: from a stack tile the nibbles were unpacked into)
//     4 TMULs (2 x 2 blocking; fewer for a block of <= 16 rows or columns)
//     INT4, at the end of each group: C tiles -> stack, acc = fma(float(C), scale, acc), tilezero C
//   epilogue: C tiles straight to C (raw int32 / fp32 output, whole tiles), or through the stack with the
//             scales applied and masked stores for partial columns, one row per loop iteration
//   postamble
//
//   Group-wise kinds (GroupedPanel) have a structure of their own: see "group-wise kinds" below.
//
// Register use:
//   r8, r9   A row 0 and row 16 of the block at the current K          r10  lda (bytes)
//   r11      B: current packed step / unit                               r12  64, the stride of packed/stack tiles
//   r13      C row pointer                                               r14  ldc (bytes)
//   r15      B scales (INT8: the panel's; INT4: the current group's)     rbx  a_scale row pointer
//   rsi      K loop counter                                              rdi  params, then 128 (C stack stride)
//   rax, rcx, rdx  temporaries and the epilogue row loop
//   zmm0, zmm1 temporaries; zmm28 0xF0 bytes (INT4 unpack); zmm29 a_scale[m]; zmm30, zmm31 weight scales
//   k1, k2   column masks of the two 16-column halves (partial n); k3 byte mask of the partial K step
#include "backends/cpu/amx/amx_gemm_kernel.h"

#include <algorithm>
#include <cstddef>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/amx/amx_generator.h"
#include "backends/cpu/jit/kernel_cache.h"

namespace kt::cpu::amx {
namespace {

using Xbyak::Reg64;
using Xbyak::Zmm;

// ---- blocking constants --------------------------------------------------------------------------------------

constexpr int kTileRows = kMaxTileRows;           // 16 rows of A / C per tile
constexpr int kTileCols = kMaxTileColsb / 4;      // 16 int32 / fp32 columns of C per tile
constexpr int kRowBytes = kMaxTileColsb;          // 64: one tile row, one zmm
constexpr int kStepBytes = kMaxTileColsb;         // bytes of A row consumed per TMUL (64 int8, 32 bf16)
constexpr int kPanelStepBytes = 2 * kTileBytes;   // packed B per K step (INT8/BF16) or per nibble unit (INT4)
constexpr int kCStackStride = 2 * kRowBytes;      // a 32-column row of the C / accumulator stack buffers
constexpr int64_t kMaxK = int64_t{1} << 24;       // keeps loop counts and offsets far inside 32 bits
constexpr size_t kMaxCodeSize = 32 * 1024;

// Tile roles of the 2 x 2 blocking (amx_gemm.h).
constexpr int tile_a(int i) { return 0 + i; }
constexpr int tile_b(int j) { return 2 + j; }
constexpr int tile_c(int i, int j) { return 4 + 2 * i + j; }

int32_t offset_of(size_t offset) { return static_cast<int32_t>(offset); }

const char *kind_name(GemmKind kind) {
    switch (kind) {
        case GemmKind::kS8S32: return "s8s32";
        case GemmKind::kS8F32: return "s8f32";
        case GemmKind::kS4F32: return "s4f32";
        case GemmKind::kBf16F32: return "bf16f32";
        case GemmKind::kS8GroupF32: return "s8g";
        case GemmKind::kS8GroupMinF32: return "s8gm";
    }
    return "unknown";
}

bool is_grouped(GemmKind kind) { return kind == GemmKind::kS8GroupF32 || kind == GemmKind::kS8GroupMinF32; }

Status validate(const GemmKernelDesc &d) {
    KT_RETURN_IF(d.kind != GemmKind::kS8S32 && d.kind != GemmKind::kS8F32 && d.kind != GemmKind::kS4F32 &&
                     d.kind != GemmKind::kBf16F32 && !is_grouped(d.kind),
                 KT_STATUS_INVALID_ARGUMENT, "amx gemm kernel: unknown kind %d", static_cast<int>(d.kind));
    KT_RETURN_IF(d.m < 1 || d.m > kMBlock, KT_STATUS_INVALID_ARGUMENT, "amx gemm kernel: m = %d is not in 1..%lld",
                 d.m, static_cast<long long>(kMBlock));
    KT_RETURN_IF(d.n < 1 || d.n > kNPanel, KT_STATUS_INVALID_ARGUMENT, "amx gemm kernel: n = %d is not in 1..%lld",
                 d.n, static_cast<long long>(kNPanel));
    KT_RETURN_IF(d.k < 1 || d.k > kMaxK, KT_STATUS_INVALID_ARGUMENT, "amx gemm kernel: k = %lld is not in 1..%lld",
                 static_cast<long long>(d.k), static_cast<long long>(kMaxK));
    if (is_grouped(d.kind)) {
        KT_RETURN_IF(d.group != 16 && d.group != 32, KT_STATUS_INVALID_ARGUMENT,
                     "amx gemm kernel: group %d of a group-wise kernel is not 16 or 32", d.group);
        KT_RETURN_IF(d.k % d.group != 0, KT_STATUS_INVALID_ARGUMENT,
                     "amx gemm kernel: k = %lld is not a multiple of the group %d", static_cast<long long>(d.k),
                     d.group);
    } else if (d.kind == GemmKind::kS4F32) {
        KT_RETURN_IF(d.group != 32 && d.group != 64 && d.group != 128, KT_STATUS_INVALID_ARGUMENT,
                     "amx gemm kernel: INT4 group %d is not 32, 64 or 128", d.group);
        KT_RETURN_IF(d.k % d.group != 0, KT_STATUS_INVALID_ARGUMENT,
                     "amx gemm kernel: k = %lld is not a multiple of the group %d", static_cast<long long>(d.k),
                     d.group);
    } else {
        KT_RETURN_IF(d.group != 0, KT_STATUS_INVALID_ARGUMENT, "amx gemm kernel: group %d given for a non-INT4 kind",
                     d.group);
    }
    KT_RETURN_IF(d.a_padded && (is_grouped(d.kind) || d.m % kMaxTileRows == 0), KT_STATUS_INVALID_ARGUMENT,
                 "amx gemm kernel: a padded A is for dense kinds with partial row tiles (m = %d)", d.m);
    return Status::ok();
}

// ---- the generator -------------------------------------------------------------------------------------------

class GemmKernelGenerator final : public AmxGenerator {
public:
    explicit GemmKernelGenerator(const GemmKernelDesc &desc)
        : AmxGenerator(gemm_kernel_name(desc), is_grouped(desc.kind) ? group_palette(desc.group) : kt_palette(),
                       kMaxCodeSize),
          d_(desc) {
        tiles_m_ = (d_.m + kTileRows - 1) / kTileRows;
        tiles_n_ = (d_.n + kTileCols - 1) / kTileCols;
        for (int i = 0; i < 2; ++i) rows_[i] = std::clamp(d_.m - i * kTileRows, 0, kTileRows);
        for (int j = 0; j < 2; ++j) cols_[j] = std::clamp(d_.n - j * kTileCols, 0, kTileCols);
        s4_ = d_.kind == GemmKind::kS4F32;
        grouped_ = is_grouped(d_.kind);
        mins_ = d_.kind == GemmKind::kS8GroupMinF32;
        const int64_t k_bytes = d_.kind == GemmKind::kBf16F32 ? 2 * d_.k : d_.k;
        k_tail_bytes_ = grouped_ ? 0 : static_cast<int>(k_bytes % kStepBytes);  // groups cover K exactly
        // Stack frame: [A stage: 2 tiles][INT4 B stage][C: 32 rows x 128 B][accumulator: 32 x 128 B][pointers].
        int32_t offset = 0;
        stage_a_ = offset;
        if (!grouped_) offset += 2 * kTileBytes;  // grouped: A is padded by the caller, never staged
        stage_b_ = offset;
        if (s4_) offset += (d_.group == 32 ? 4 : 2) * kTileBytes;
        c_stack_ = offset;
        offset += kMBlock * kCStackStride;  // grouped: the four rotating C tiles
        acc_ = offset;
        if (s4_) offset += kMBlock * kCStackStride;
        slot_ldc_ = offset;
        slot_a_scale_ = offset + 8;
        if (grouped_) offset += 64;
        // A kernel of whole tiles with raw output and whole K steps touches no stack buffer.
        const bool stackless = !grouped_ && !scaled() && whole_tiles() && k_tail_bytes_ == 0;
        frame_bytes_ = stackless ? 0 : offset;
    }

private:
    // Registers (see the file comment).
    const Reg64 reg_a_[2] = {r8, r9};
    const Reg64 &reg_lda_ = r10;
    const Reg64 &reg_b_ = r11;
    const Reg64 &reg_64_ = r12;
    const Reg64 &reg_c_ = r13;
    const Reg64 &reg_ldc_ = r14;
    const Reg64 &reg_b_scale_ = r15;
    const Reg64 &reg_a_scale_ = rbx;
    const Reg64 &reg_k_loop_ = rsi;
    const Reg64 &reg_128_ = rdi;
    const Zmm &zmm_nibble_mask_ = zmm28;
    const Zmm &zmm_a_scale_ = zmm29;
    Zmm zmm_w_scale(int j) const { return Zmm(30 + j); }
    Xbyak::Opmask col_mask(int j) const { return Xbyak::Opmask(1 + j); }
    const Xbyak::Opmask &k_tail_mask_ = k3;

    bool scaled() const { return d_.kind == GemmKind::kS8F32 || accumulates(); }
    // Kinds that sum groups into an fp32 accumulator on the stack.
    bool accumulates() const { return s4_; }
    bool whole_tiles() const { return d_.m % kTileRows == 0 && d_.n % kTileCols == 0; }
    Tdp tdp_op() const { return d_.kind == GemmKind::kBf16F32 ? Tdp::kBf16ps : Tdp::kBssd; }

    void generate() override {
        if (grouped_) {
            preamble(frame_bytes_);
            grouped_body();
            postamble(true);
            return;
        }
        preamble(frame_bytes_);
        load_params();
        set_constants();
        zero_stack_buffers();
        for (int i = 0; i < tiles_m_; ++i)
            for (int j = 0; j < tiles_n_; ++j) tile_zero(tile_c(i, j));
        if (s4_) {
            k_loop_s4();
        } else {
            k_loop_dense();
        }
        store_c();
        postamble(vector_used_);
    }

    void load_params() {
        mov(reg_a_[0], ptr[abi_param1 + offset_of(offsetof(GemmKernelParams, a))]);
        mov(reg_lda_, ptr[abi_param1 + offset_of(offsetof(GemmKernelParams, lda))]);
        mov(reg_b_, ptr[abi_param1 + offset_of(offsetof(GemmKernelParams, b))]);
        mov(reg_c_, ptr[abi_param1 + offset_of(offsetof(GemmKernelParams, c))]);
        mov(reg_ldc_, ptr[abi_param1 + offset_of(offsetof(GemmKernelParams, ldc))]);
        if (scaled()) {
            mov(reg_b_scale_, ptr[abi_param1 + offset_of(offsetof(GemmKernelParams, b_scale))]);
            mov(reg_a_scale_, ptr[abi_param1 + offset_of(offsetof(GemmKernelParams, a_scale))]);
        }
        if (tiles_m_ == 2) {  // A row 16 = A + 16 * lda
            mov(reg_a_[1], reg_lda_);
            shl(reg_a_[1], 4);
            add(reg_a_[1], reg_a_[0]);
        }
    }

    void set_constants() {
        mov(reg_64_, kRowBytes);
        mov(reg_128_, kCStackStride);  // abi_param1 is not needed any more
        for (int j = 0; j < tiles_n_; ++j) {
            if (cols_[j] == kTileCols) continue;
            mov(eax, (1u << cols_[j]) - 1);
            kmovw(col_mask(j), eax);
            vector_used_ = true;
        }
        if (k_tail_bytes_ != 0) {  // INT4: 32 (the second group of a G = 32 step is missing)
            mov(rax, (uint64_t{1} << k_tail_bytes_) - 1);
            kmovq(k_tail_mask_, rax);
        }
        if (s4_) {
            mov(eax, 0xF0F0F0F0u);
            vpbroadcastd(zmm_nibble_mask_, eax);
        }
    }

    void store_zero_rows(int32_t offset, int rows) {
        for (int r = 0; r < rows; ++r) vmovdqu8(ptr[rsp + offset + r * kRowBytes], zmm0);
    }

    // Stack tiles whose unused rows must read as zero, and the INT4 accumulator.
    void zero_stack_buffers() {
        bool zeroed = false;
        auto zero_reg = [&] {
            if (!zeroed) vpxord(zmm0, zmm0, zmm0);
            zeroed = vector_used_ = true;
        };
        for (int i = 0; i < tiles_m_; ++i) {
            if (a_rows(i) == kTileRows) continue;  // partial rows: rows beyond m stay zero (finite for bf16)
            zero_reg();
            store_zero_rows(stage_a_ + i * kTileBytes + rows_[i] * kRowBytes, kTileRows - rows_[i]);
        }
        if (s4_ && d_.group == 32) {  // variant v of a B tile: rows of the other group are zero
            zero_reg();
            for (int j = 0; j < tiles_n_; ++j) {
                store_zero_rows(stage_b_s4(0, j, 8), 8);
                store_zero_rows(stage_b_s4(1, j, 0), 8);
            }
        }
        if (accumulates()) {
            zero_reg();
            for (int r = 0; r < d_.m; ++r)
                for (int j = 0; j < tiles_n_; ++j)
                    vmovups(ptr[rsp + acc_ + r * kCStackStride + j * kRowBytes], zmm0);
        }
    }

    // ---- K loop ----

    // Rows of A tile i read from A: the valid ones, or the whole tile when A is padded.
    int a_rows(int i) const { return d_.a_padded ? kTileRows : rows_[i]; }

    // Loads the A tiles for the current K step; `k_bytes` < 64 for the last partial step.
    void load_a(int k_bytes) {
        const bool partial_k = k_bytes < kStepBytes;
        for (int i = 0; i < tiles_m_; ++i) {
            if (a_rows(i) == kTileRows && !partial_k) {
                tile_load(tile_a(i), reg_a_[i], reg_lda_);
                continue;
            }
            const int32_t stage = stage_a_ + i * kTileBytes;
            mov(rax, reg_a_[i]);
            for (int r = 0; r < a_rows(i); ++r) {
                if (partial_k) {
                    vmovdqu8(zmm0 | k_tail_mask_ | T_z, ptr[rax]);
                } else {
                    vmovdqu8(zmm0, ptr[rax]);
                }
                vmovdqu8(ptr[rsp + stage + r * kRowBytes], zmm0);
                if (r + 1 < a_rows(i)) add(rax, reg_lda_);
            }
            tile_load(tile_a(i), rsp, reg_64_, stage);
            vector_used_ = true;
        }
    }

    void advance_a() {
        for (int i = 0; i < tiles_m_; ++i) add(reg_a_[i], kStepBytes);
    }

    void tmuls() {
        for (int i = 0; i < tiles_m_; ++i)
            for (int j = 0; j < tiles_n_; ++j) tile_dp(tdp_op(), tile_c(i, j), tile_a(i), tile_b(j));
    }

    void dense_step(int k_bytes) {
        load_a(k_bytes);
        for (int j = 0; j < tiles_n_; ++j) tile_load(tile_b(j), reg_b_, reg_64_, j * kTileBytes);
        tmuls();
    }

    // INT8 / BF16: full steps in a loop, then the partial step.
    void k_loop_dense() {
        const int64_t k_bytes = d_.kind == GemmKind::kBf16F32 ? 2 * d_.k : d_.k;
        const int64_t full_steps = k_bytes / kStepBytes;
        if (full_steps > 0) {
            Xbyak::Label loop;
            mov(reg_k_loop_, full_steps);
            L(loop);
            dense_step(kStepBytes);
            advance_a();
            add(reg_b_, kPanelStepBytes);
            dec(reg_k_loop_);
            jnz(loop, T_NEAR);
        }
        if (k_tail_bytes_ != 0) dense_step(k_tail_bytes_);
    }

    // Offset of row r of the unpacked INT4 B tile for half j and group variant v (G = 32: v = r / 8).
    int32_t stage_b_s4(int v, int j, int r) const {
        return stage_b_ + (d_.group == 32 ? (2 * v + j) : j) * kTileBytes + r * kRowBytes;
    }

    // Unpacks `rows` rows of nibble half `half` (0: bits 0-3, 1: bits 4-7) of the current unit into int8 16*q.
    void unpack_b(int half, int rows) {
        for (int j = 0; j < tiles_n_; ++j) {
            for (int r = 0; r < rows; ++r) {
                vmovdqu8(zmm0, ptr[reg_b_ + j * kTileBytes + r * kRowBytes]);
                if (half == 0) vpsllw(zmm0, zmm0, 4);
                vpandd(zmm0, zmm0, zmm_nibble_mask_);
                vmovdqu8(ptr[rsp + stage_b_s4(d_.group == 32 ? r / 8 : 0, j, r)], zmm0);
            }
        }
    }

    // INT4, end of a group: acc[m][n] = fma(float(C[m][n]), scale[g][n], acc[m][n]); C = 0; next group's scales.
    void group_epilogue() {
        for (int i = 0; i < tiles_m_; ++i)
            for (int j = 0; j < tiles_n_; ++j)
                tile_store(tile_c(i, j), rsp, reg_128_, c_stack_ + i * kTileRows * kCStackStride + j * kRowBytes);
        for (int j = 0; j < tiles_n_; ++j) vmovups(zmm_w_scale(j), ptr[reg_b_scale_ + j * kRowBytes]);
        add(reg_b_scale_, kNPanel * static_cast<int>(sizeof(float)));
        lea(rax, ptr[rsp + c_stack_]);
        lea(rcx, ptr[rsp + acc_]);
        mov(edx, d_.m);
        Xbyak::Label row;
        L(row);
        for (int j = 0; j < tiles_n_; ++j) {
            vcvtdq2ps(zmm0, ptr[rax + j * kRowBytes]);
            vmovups(zmm1, ptr[rcx + j * kRowBytes]);
            vfmadd231ps(zmm1, zmm0, zmm_w_scale(j));
            vmovups(ptr[rcx + j * kRowBytes], zmm1);
        }
        add(rax, kCStackStride);
        add(rcx, kCStackStride);
        dec(edx);
        jnz(row, T_NEAR);
        for (int i = 0; i < tiles_m_; ++i)
            for (int j = 0; j < tiles_n_; ++j) tile_zero(tile_c(i, j));
    }

    // One INT4 K step: nibble half `half` of the current unit, `k_bytes` (64, or 32 for G = 32's last half step).
    void s4_step(int half, int k_bytes) {
        load_a(k_bytes);
        unpack_b(half, k_bytes / 4);
        if (d_.group == 32) {
            for (int v = 0; v < k_bytes / 32; ++v) {
                for (int j = 0; j < tiles_n_; ++j) tile_load(tile_b(j), rsp, reg_64_, stage_b_s4(v, j, 0));
                tmuls();
                group_epilogue();
            }
        } else {
            for (int j = 0; j < tiles_n_; ++j) tile_load(tile_b(j), rsp, reg_64_, stage_b_s4(0, j, 0));
            tmuls();
            if (d_.group == 64 || half == 1) group_epilogue();
        }
    }

    // INT4: whole units (128 K) in a loop, then the remaining 32, 64 or 96 K (G <= 64 only).
    void k_loop_s4() {
        vector_used_ = true;
        const int64_t units = d_.k / kKUnitS4;
        if (units > 0) {
            Xbyak::Label loop;
            mov(reg_k_loop_, units);
            L(loop);
            s4_step(0, kStepBytes);
            advance_a();
            s4_step(1, kStepBytes);
            advance_a();
            add(reg_b_, kPanelStepBytes);
            dec(reg_k_loop_);
            jnz(loop, T_NEAR);
        }
        const int rest = static_cast<int>(d_.k % kKUnitS4);
        if (rest >= kStepBytes) {
            s4_step(0, kStepBytes);
            if (rest > kStepBytes) {
                advance_a();
                s4_step(1, rest - kStepBytes);
            }
        } else if (rest > 0) {
            s4_step(0, rest);
        }
    }

    // ---- group-wise kinds ------------------------------------------------------------------------------------
    //
    // The block is computed as 16 x 16 sub-blocks, each over the whole K with its fp32 accumulators in zmm0..15
    // (one per row), so the per-group epilogue never loads or stores an accumulator. Per group: one A tile (16
    // rows x group bytes), one B tile (group / 4 rows x 16 columns), tilezero + one TMUL into the next of four C
    // tiles (consecutive groups are independent, so TMULs overlap the previous groups' vector work), C -> stack,
    // then per row acc = fma(float(C), S, acc) [acc = fma(-min, asum, acc)]. Groups run in a loop of units of
    // four (one per C tile). Sub-blocks go (0,0) (0,1) (1,1) (1,0): each shares its A or B stream with the one
    // before, which the L1 still holds.
    //
    // A is packed (GroupedActs): the tile of rows 16i.. and group g is 16 * group contiguous bytes at
    // A + (32 g + 16 i) * group, so a tile load reads 8 (g32) or 4 (g16) whole cache lines, not 16 half-used ones
    // (measured: 7.3 ns per group with strided A rows, 5.5 contiguous).
    //
    // Registers: r8 / r9 A rows 0 / 16, r10 group (the A tile stride), r11 B, r12 64, r13 C, r15 scale, rdi -min,
    // rdx asum (all fixed);
    // rax A and rcx B of the current unit, r14 the unit's byte offset into scale / -min / asum, rbx the unit count;
    // zmm0..15 accumulators, zmm16..23 converted C, zmm24/25 scales, zmm26/27 -mins. ldc and a_scale wait in
    // stack slots until the sub-block's output.

    static constexpr int kUnitGroups = 4;  // groups per unit: one per C tile

    Zmm acc_reg(int r) const { return Zmm(r); }

    // Byte offset of group g's B rows (g < kUnitGroups) from the unit's B pointer, half j.
    int32_t grouped_b_offset(int g, int j) const {
        const int per_step = static_cast<int>(kStepBytes / d_.group);
        return (g / per_step) * kPanelStepBytes + (g % per_step) * d_.group * 16 + j * kTileBytes;
    }

    void grouped_load_params() {
        const Reg64 &p = abi_param1;
        mov(reg_a_[0], ptr[p + offset_of(offsetof(GemmKernelParams, a))]);
        mov(reg_lda_, d_.group);  // the A tile stride
        mov(reg_b_, ptr[p + offset_of(offsetof(GemmKernelParams, b))]);
        mov(reg_c_, ptr[p + offset_of(offsetof(GemmKernelParams, c))]);
        mov(rax, ptr[p + offset_of(offsetof(GemmKernelParams, ldc))]);
        mov(ptr[rsp + slot_ldc_], rax);
        mov(rax, ptr[p + offset_of(offsetof(GemmKernelParams, a_scale))]);
        mov(ptr[rsp + slot_a_scale_], rax);
        mov(reg_b_scale_, ptr[p + offset_of(offsetof(GemmKernelParams, b_scale))]);
        if (mins_) {
            mov(rdx, ptr[p + offset_of(offsetof(GemmKernelParams, a_sums))]);
            mov(rdi, ptr[p + offset_of(offsetof(GemmKernelParams, b_min))]);  // the params pointer last
        }
        if (tiles_m_ == 2) lea(reg_a_[1], ptr[reg_a_[0] + kTileRows * d_.group]);
    }

    // Group g of the current unit (C tile c) for sub-block (i, j): loads, TMUL, then its epilogue.
    void grouped_group(int i, int j, int g, int c) {
        const int ab = g % 2;  // A and B tiles alternate, so the next group's loads need not wait for this TMUL
        tile_load(tile_a(ab), rax, reg_lda_, g * static_cast<int32_t>(kMBlock) * d_.group);
        tile_load(tile_b(ab), rcx, reg_64_, grouped_b_offset(g, j));
        tile_zero(4 + c);
        tile_dp(Tdp::kBssd, 4 + c, tile_a(ab), tile_b(ab));
        const int32_t cbuf = c_stack_ + c * kTileBytes;
        tile_store(4 + c, rsp, reg_64_, cbuf);
        const Zmm scale(24 + ab), neg_min(26 + ab);
        vmovups(scale, ptr[reg_b_scale_ + r14 + g * kNPanel * 4 + j * kRowBytes]);
        if (mins_) vmovups(neg_min, ptr[rdi + r14 + g * kNPanel * 4 + j * kRowBytes]);
        for (int r = 0; r < kTileRows; ++r) {
            const Zmm t(16 + r % 8);
            vcvtdq2ps(t, ptr[rsp + cbuf + r * kRowBytes]);
            vfmadd231ps(acc_reg(r), t, scale);
            if (mins_) vfmadd231ps(acc_reg(r), neg_min, ptr_b[rdx + r14 + g * kNPanel * 4 + (i * kTileRows + r) * 4]);
        }
    }

    void grouped_sub_block(int i, int j) {
        const int64_t groups = d_.k / d_.group;
        const int64_t units = groups / kUnitGroups;
        for (int r = 0; r < kTileRows; ++r) vpxord(acc_reg(r), acc_reg(r), acc_reg(r));
        mov(rax, reg_a_[i]);
        mov(rcx, reg_b_);
        xor_(r14, r14);
        if (units > 0) {
            Xbyak::Label loop;
            mov(rbx, units);
            L(loop);
            for (int g = 0; g < kUnitGroups; ++g) grouped_group(i, j, g, g);
            add(rax, kUnitGroups * static_cast<int32_t>(kMBlock) * d_.group);
            add(rcx, kUnitGroups * d_.group * 32);  // = grouped_b_offset(kUnitGroups, 0)
            add(r14, kUnitGroups * kNPanel * 4);
            dec(rbx);
            jnz(loop, T_NEAR);
        }
        for (int g = 0; g < static_cast<int>(groups % kUnitGroups); ++g) grouped_group(i, j, g, g);
        // C[16i + r][16j ..] = acc * a_scale (masked for a partial half), valid rows only.
        mov(rbx, ptr[rsp + slot_a_scale_]);
        mov(r14, ptr[rsp + slot_ldc_]);
        mov(rax, reg_c_);
        if (i == 1) {
            mov(rcx, r14);
            shl(rcx, 4);
            add(rax, rcx);
        }
        for (int r = 0; r < rows_[i]; ++r) {
            const Zmm t(16 + r % 8);
            vmulps(t, acc_reg(r), ptr_b[rbx + (i * kTileRows + r) * 4]);
            if (cols_[j] < kTileCols) {
                vmovups(ptr[rax + j * kRowBytes] | col_mask(j), t);
            } else {
                vmovups(ptr[rax + j * kRowBytes], t);
            }
            if (r + 1 < rows_[i]) add(rax, r14);
        }
    }

    void grouped_body() {
        vector_used_ = true;
        grouped_load_params();
        mov(reg_64_, kRowBytes);
        for (int j = 0; j < tiles_n_; ++j) {
            if (cols_[j] == kTileCols) continue;
            mov(eax, (1u << cols_[j]) - 1);
            kmovw(col_mask(j), eax);
        }
        // (0,0) (0,1) (1,1) (1,0): consecutive sub-blocks share an operand.
        const int order[4][2] = {{0, 0}, {0, 1}, {1, 1}, {1, 0}};
        for (const auto &ij : order)
            if (ij[0] < tiles_m_ && ij[1] < tiles_n_) grouped_sub_block(ij[0], ij[1]);
    }

    // ---- epilogue ----

    void store_c() {
        if (!scaled() && whole_tiles()) {  // raw output in whole tiles: straight from the tiles
            if (tiles_m_ == 2) {
                mov(rax, reg_ldc_);
                shl(rax, 4);
                add(rax, reg_c_);
            }
            for (int i = 0; i < tiles_m_; ++i)
                for (int j = 0; j < tiles_n_; ++j)
                    tile_store(tile_c(i, j), i == 0 ? reg_c_ : rax, reg_ldc_, j * kRowBytes);
            return;
        }
        vector_used_ = true;
        if (!accumulates()) {
            for (int i = 0; i < tiles_m_; ++i)
                for (int j = 0; j < tiles_n_; ++j)
                    tile_store(tile_c(i, j), rsp, reg_128_, c_stack_ + i * kTileRows * kCStackStride + j * kRowBytes);
        }
        if (d_.kind == GemmKind::kS8F32)
            for (int j = 0; j < tiles_n_; ++j) vmovups(zmm_w_scale(j), ptr[reg_b_scale_ + j * kRowBytes]);
        lea(rax, ptr[rsp + (accumulates() ? acc_ : c_stack_)]);
        mov(edx, d_.m);
        Xbyak::Label row;
        L(row);
        if (scaled()) vbroadcastss(zmm_a_scale_, ptr[reg_a_scale_]);
        for (int j = 0; j < tiles_n_; ++j) {
            const Xbyak::Address src = ptr[rax + j * kRowBytes];
            switch (d_.kind) {
                case GemmKind::kS8S32: vmovdqu32(zmm0, src); break;
                case GemmKind::kBf16F32: vmovups(zmm0, src); break;
                case GemmKind::kS8F32:
                    vcvtdq2ps(zmm0, src);
                    vmulps(zmm0, zmm0, zmm_w_scale(j));
                    vmulps(zmm0, zmm0, zmm_a_scale_);
                    break;
                case GemmKind::kS4F32:
                case GemmKind::kS8GroupF32:  // (group-wise kernels store their output in grouped_sub_block)
                case GemmKind::kS8GroupMinF32:
                    vmovups(zmm0, src);
                    vmulps(zmm0, zmm0, zmm_a_scale_);
                    break;
            }
            const Xbyak::Address dst = ptr[reg_c_ + j * kRowBytes];
            const bool partial = cols_[j] < kTileCols;
            if (d_.kind == GemmKind::kS8S32) {
                if (partial) {
                    vmovdqu32(dst | col_mask(j), zmm0);
                } else {
                    vmovdqu32(dst, zmm0);
                }
            } else if (partial) {
                vmovups(dst | col_mask(j), zmm0);
            } else {
                vmovups(dst, zmm0);
            }
        }
        add(rax, kCStackStride);
        add(reg_c_, reg_ldc_);
        if (scaled()) add(reg_a_scale_, static_cast<int>(sizeof(float)));
        dec(edx);
        jnz(row, T_NEAR);
    }

    GemmKernelDesc d_;
    int tiles_m_ = 0, tiles_n_ = 0;
    int rows_[2] = {}, cols_[2] = {};  // valid rows of A tile i, valid columns of B / C half j
    bool s4_ = false, grouped_ = false, mins_ = false;
    int k_tail_bytes_ = 0;             // bytes of A row in the last, partial K step (INT4: 0 or 32)
    int32_t stage_a_ = 0, stage_b_ = 0, c_stack_ = 0, acc_ = 0, frame_bytes_ = 0;
    int32_t slot_ldc_ = 0, slot_a_scale_ = 0;  // grouped: stack slots of values needed only for the output
    bool vector_used_ = false;
};

}  // namespace

std::string gemm_kernel_name(const GemmKernelDesc &d) {
    std::string name = std::string("amx_gemm_") + kind_name(d.kind);
    if (d.kind == GemmKind::kS4F32 || is_grouped(d.kind)) name += "_g" + std::to_string(d.group);
    name += "_m" + std::to_string(d.m) + "_n" + std::to_string(d.n) + "_k" + std::to_string(d.k);
    return d.a_padded ? name + "_pa" : name;
}

Status generate_gemm_kernel(const GemmKernelDesc &desc, std::unique_ptr<jit::JitCode> *out) {
    KT_TRY(validate(desc));
    return jit::build<GemmKernelGenerator>(out, desc);
}

Status gemm_kernel(const GemmKernelDesc &desc, const jit::JitCode **out) {
    static jit::KernelCache<GemmKernelDesc, GemmKernelDescHash> cache;
    KT_TRY(validate(desc));
    return cache.get(desc, generate_gemm_kernel, out);
}

}  // namespace kt::cpu::amx
