// AmxGenerator: a JitGenerator whose tile instructions are checked against the kernel's tile configuration as they
// are emitted (xbyak emits operand combinations that fault without complaint, reference/amx-hwloc.md §1.5).
//
// The semantic lint refuses what would raise #UD (SDM; reference §4.4):
//   TMUL (TDPBSSD/SUD/USD/UUD, TDPBF16PS): the three tiles distinct; each configured (rows > 0) with colsb % 4 == 0;
//     C.rows == A.rows (M), C.colsb == B.colsb (N), A.colsb / 4 == B.rows (K); N = C.colsb / 4 <= 16, K <= 16.
//   TILELOADD / TILELOADDT1 / TILESTORED: the tile configured with colsb % 4 == 0, and a SIB index register holding
//     the row stride (not rsp, which cannot be an index: xbyak would silently swap it into the base).
//   TILEZERO: the tile configured.
// A violation becomes jit_fail(): create() then returns INTERNAL with the message, and no code.
#pragma once

#include "backends/cpu/amx/amx_tile_config.h"
#include "backends/cpu/jit/jit_generator.h"

namespace kt::cpu::amx {

class AmxGenerator : public jit::JitGenerator {
public:
    enum class Tdp { kBssd, kBsud, kBusd, kBuud, kBf16ps };

protected:
    AmxGenerator(std::string name, const TileConfig &config, size_t max_code_size = kDefaultMaxCodeSize);

    const TileConfig &tile_config() const { return config_; }

    // tileloadd / tileloaddt1 t, [base + index*1 + disp]; tilestored [base + index*1 + disp], t.
    void tile_load(int t, const Xbyak::Reg64 &base, const Xbyak::Reg64 &stride, int32_t disp = 0);
    void tile_load_t1(int t, const Xbyak::Reg64 &base, const Xbyak::Reg64 &stride, int32_t disp = 0);
    void tile_store(int t, const Xbyak::Reg64 &base, const Xbyak::Reg64 &stride, int32_t disp = 0);
    void tile_zero(int t);
    // c += a * b.
    void tile_dp(Tdp op, int c, int a, int b);

private:
    bool check_tile(const char *what, int t);
    void check_stride(const char *what, const Xbyak::Reg64 &base, const Xbyak::Reg64 &stride);

    TileConfig config_;
};

}  // namespace kt::cpu::amx
