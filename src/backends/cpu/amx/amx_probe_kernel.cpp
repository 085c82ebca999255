// Emitter and runner of the TMUL peak probe (amx_probe.h).
#include <cstring>
#include <memory>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/amx/amx_gemm_kernel.h"
#include "backends/cpu/amx/amx_generator.h"
#include "backends/cpu/amx/amx_probe.h"
#include "backends/cpu/jit/kernel_cache.h"
#include "core/fp16.h"

namespace kt::cpu::amx {
namespace {

struct ProbeParams {
    int64_t rounds = 0;
    const uint8_t *src = nullptr;  // 4 tiles of 1 KiB: A0, A1, B0, B1 (rows of 64 bytes; a tile reads its first rows / bytes)
    uint8_t *dst = nullptr;        // 4 tiles of 1 KiB: the accumulators (kInt8Group32Out: the last round's sums)
};

int32_t group_of(TmulArith arith) {
    switch (arith) {
        case TmulArith::kInt8Group32:
        case TmulArith::kInt8Group32Out: return 32;
        case TmulArith::kInt8Group16: return 16;
        default: return 0;
    }
}

const char *probe_name(TmulArith arith) {
    switch (arith) {
        case TmulArith::kInt8: return "amx_probe_tdpbssd";
        case TmulArith::kBf16: return "amx_probe_tdpbf16ps";
        case TmulArith::kInt8Group32: return "amx_probe_tdpbssd_g32";
        case TmulArith::kInt8Group16: return "amx_probe_tdpbssd_g16";
        case TmulArith::kInt8Group32Out: return "amx_probe_tdpbssd_g32_out";
    }
    return "amx_probe";
}

class TmulProbeGenerator final : public AmxGenerator {
public:
    explicit TmulProbeGenerator(TmulArith arith)
        : AmxGenerator(probe_name(arith), group_of(arith) ? group_palette(group_of(arith)) : kt_palette()),
          arith_(arith) {}

private:
    // Tile roles of every palette here: A tmm0/1, B tmm2/3, C tmm4..7 (C(i, j) = tmm(4 + 2i + j)).
    void generate() override {
        using namespace Xbyak::util;
        const Xbyak::Reg64 &p = abi_param1;
        const bool out = arith_ == TmulArith::kInt8Group32Out;
        preamble();
        mov(r8, ptr[p + offsetof(ProbeParams, src)]);
        mov(r9, kMaxTileColsb);  // row stride of every tile
        for (int t = 0; t < 4; ++t) tile_load(t, r8, r9, t * static_cast<int32_t>(kTileBytes));
        for (int t = 0; t < 4; ++t) tile_zero(4 + t);
        const Tdp op = arith_ == TmulArith::kBf16 ? Tdp::kBf16ps : Tdp::kBssd;
        mov(r8, ptr[p + offsetof(ProbeParams, dst)]);
        mov(rcx, ptr[p + offsetof(ProbeParams, rounds)]);
        Xbyak::Label loop;
        L(loop);
        for (int i = 0; i < 2; ++i) {
            for (int j = 0; j < 2; ++j) {
                const int c = 4 + 2 * i + j;
                if (out) tile_zero(c);
                tile_dp(op, c, i, 2 + j);
                if (out) tile_store(c, r8, r9, (c - 4) * static_cast<int32_t>(kTileBytes));
            }
        }
        dec(rcx);
        jnz(loop);
        if (!out)
            for (int t = 0; t < 4; ++t) tile_store(4 + t, r8, r9, t * static_cast<int32_t>(kTileBytes));
        postamble(false);
    }

    TmulArith arith_;
};

struct ArithHash {
    size_t operator()(TmulArith a) const { return static_cast<size_t>(a); }
};

}  // namespace

int64_t probe_macs_per_round(TmulArith arith) {
    if (arith == TmulArith::kInt8) return kProbeMacsPerRoundInt8;
    if (arith == TmulArith::kBf16) return kProbeMacsPerRoundBf16;
    return 4 * 16 * 16 * int64_t{group_of(arith)};
}

Status tmul_peak_probe(TmulArith arith, int64_t rounds, double *result) {
    KT_RETURN_IF(rounds < 1 || !result, KT_STATUS_INVALID_ARGUMENT, "amx probe: %lld rounds",
                 static_cast<long long>(rounds));
    KT_RETURN_IF(static_cast<int>(arith) < 0 || static_cast<int>(arith) > static_cast<int>(TmulArith::kInt8Group32Out),
                 KT_STATUS_INVALID_ARGUMENT, "amx probe: unknown arithmetic %d", static_cast<int>(arith));
    static jit::KernelCache<TmulArith, ArithHash> cache;
    const jit::JitCode *code = nullptr;
    KT_TRY(cache.get(
        arith,
        [](TmulArith a, std::unique_ptr<jit::JitCode> *out) { return jit::build<TmulProbeGenerator>(out, a); },
        &code));

    // Inputs small enough that millions of rounds neither overflow nor go subnormal: int8 1..7, bf16 2^-8.
    alignas(64) uint8_t src[4 * kTileBytes];
    alignas(64) uint8_t dst[4 * kTileBytes];
    if (arith != TmulArith::kBf16) {
        for (size_t i = 0; i < sizeof src; ++i) src[i] = static_cast<uint8_t>(1 + i % 7);
    } else {
        const uint16_t v = f32_to_bf16(1.0f / 256.0f);
        for (size_t i = 0; i < sizeof src; i += 2) std::memcpy(src + i, &v, 2);
    }
    ProbeParams params;
    params.rounds = rounds;
    params.src = src;
    params.dst = dst;

    TileSession session;
    KT_TRY(session.configure(group_of(arith) ? group_palette(group_of(arith)) : kt_palette()));
    const Status ran = run_code(*code, &params);
    KT_TRY(session.end());
    KT_TRY(ran);
    double sum = 0;
    for (size_t i = 0; i < sizeof dst; i += 4) {
        if (arith != TmulArith::kBf16) {
            int32_t v;
            std::memcpy(&v, dst + i, 4);
            sum += v;
        } else {
            float v;
            std::memcpy(&v, dst + i, 4);
            sum += v;
        }
    }
    *result = sum;
    return Status::ok();
}

}  // namespace kt::cpu::amx
