#include "backends/cpu/amx/amx_generator.h"

namespace kt::cpu::amx {
namespace {

const char *tdp_name(AmxGenerator::Tdp op) {
    switch (op) {
        case AmxGenerator::Tdp::kBssd: return "tdpbssd";
        case AmxGenerator::Tdp::kBsud: return "tdpbsud";
        case AmxGenerator::Tdp::kBusd: return "tdpbusd";
        case AmxGenerator::Tdp::kBuud: return "tdpbuud";
        case AmxGenerator::Tdp::kBf16ps: return "tdpbf16ps";
    }
    return "tdp?";
}

}  // namespace

AmxGenerator::AmxGenerator(std::string name, const TileConfig &config, size_t max_code_size)
    : JitGenerator(std::move(name), max_code_size), config_(config) {
    const Status s = validate_tile_config(config_);
    if (!s.is_ok()) jit_fail(Status(KT_STATUS_INTERNAL, s.message()));  // a kernel's own palette: a kt bug
    if (config_.palette_id != 1) jit_fail(Status(KT_STATUS_INTERNAL, "tile kernels need palette 1"));
}

bool AmxGenerator::check_tile(const char *what, int t) {
    if (t < 0 || t >= kNumTiles) {
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: tmm%d does not exist", what, t));
        return false;
    }
    if (config_.rows[t] == 0) {
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: tmm%d is not configured (#UD)", what, t));
        return false;
    }
    if (config_.colsb[t] % 4 != 0) {
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: tmm%d colsb %u is not a multiple of 4 (#UD)", what, t,
                               config_.colsb[t]));
        return false;
    }
    return true;
}

void AmxGenerator::check_stride(const char *what, const Xbyak::Reg64 &base, const Xbyak::Reg64 &stride) {
    if (stride.getIdx() == Xbyak::Operand::RSP)
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: rsp cannot be the stride (SIB index) register", what));
    if (stride.getIdx() == base.getIdx())
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: the base register also serves as the stride", what));
}

void AmxGenerator::tile_load(int t, const Xbyak::Reg64 &base, const Xbyak::Reg64 &stride, int32_t disp) {
    check_stride("tileloadd", base, stride);
    if (check_tile("tileloadd", t)) tileloadd(Xbyak::Tmm(t), ptr[base + stride + disp]);
}

void AmxGenerator::tile_load_t1(int t, const Xbyak::Reg64 &base, const Xbyak::Reg64 &stride, int32_t disp) {
    check_stride("tileloaddt1", base, stride);
    if (check_tile("tileloaddt1", t)) tileloaddt1(Xbyak::Tmm(t), ptr[base + stride + disp]);
}

void AmxGenerator::tile_store(int t, const Xbyak::Reg64 &base, const Xbyak::Reg64 &stride, int32_t disp) {
    check_stride("tilestored", base, stride);
    if (check_tile("tilestored", t)) tilestored(ptr[base + stride + disp], Xbyak::Tmm(t));
}

void AmxGenerator::tile_zero(int t) {
    if (check_tile("tilezero", t)) tilezero(Xbyak::Tmm(t));
}

void AmxGenerator::tile_dp(Tdp op, int c, int a, int b) {
    const char *what = tdp_name(op);
    if (c == a || c == b || a == b) {
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s tmm%d, tmm%d, tmm%d: operands must be distinct (#UD)", what, c,
                               a, b));
        return;
    }
    if (!check_tile(what, c) || !check_tile(what, a) || !check_tile(what, b)) return;
    const TileConfig &k = config_;
    if (k.rows[c] != k.rows[a]) {
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: C tmm%d has %u rows but A tmm%d has %u (#UD)", what, c,
                               k.rows[c], a, k.rows[a]));
        return;
    }
    if (k.colsb[c] != k.colsb[b]) {
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: C tmm%d has %u bytes per row but B tmm%d has %u (#UD)", what,
                               c, k.colsb[c], b, k.colsb[b]));
        return;
    }
    if (k.colsb[a] / 4 != k.rows[b]) {
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: A tmm%d colsb/4 = %u but B tmm%d has %u rows (#UD)", what, a,
                               k.colsb[a] / 4, b, k.rows[b]));
        return;
    }
    if (k.colsb[c] / 4 > kTmulMaxN || k.rows[b] > kTmulMaxK) {
        jit_fail(Status::error(KT_STATUS_INTERNAL, "%s: N %u or K %u exceeds the TMUL limits (#UD)", what,
                               k.colsb[c] / 4, k.rows[b]));
        return;
    }
    const Xbyak::Tmm tc(c), ta(a), tb(b);
    switch (op) {
        case Tdp::kBssd: tdpbssd(tc, ta, tb); break;
        case Tdp::kBsud: tdpbsud(tc, ta, tb); break;
        case Tdp::kBusd: tdpbusd(tc, ta, tb); break;
        case Tdp::kBuud: tdpbuud(tc, ta, tb); break;
        case Tdp::kBf16ps: tdpbf16ps(tc, ta, tb); break;
    }
}

}  // namespace kt::cpu::amx
