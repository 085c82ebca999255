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
    const uint8_t *src = nullptr;  // 4 tiles of 1 KiB: A0, A1, B0, B1
    uint8_t *dst = nullptr;        // 4 tiles of 1 KiB: the accumulators
};

class TmulProbeGenerator final : public AmxGenerator {
public:
    explicit TmulProbeGenerator(TmulArith arith)
        : AmxGenerator(arith == TmulArith::kInt8 ? "amx_probe_tdpbssd" : "amx_probe_tdpbf16ps", kt_palette()),
          arith_(arith) {}

private:
    void generate() override {
        using namespace Xbyak::util;
        const Xbyak::Reg64 &p = abi_param1;
        preamble();
        mov(r8, ptr[p + offsetof(ProbeParams, src)]);
        mov(r9, kMaxTileColsb);  // row stride of every tile
        for (int t = 0; t < 4; ++t) tile_load(4 + t, r8, r9, t * static_cast<int32_t>(kTileBytes));
        for (int t = 0; t < 4; ++t) tile_zero(t);
        const Tdp op = arith_ == TmulArith::kInt8 ? Tdp::kBssd : Tdp::kBf16ps;
        mov(rcx, ptr[p + offsetof(ProbeParams, rounds)]);
        Xbyak::Label loop;
        L(loop);
        tile_dp(op, 0, 4, 6);
        tile_dp(op, 1, 4, 7);
        tile_dp(op, 2, 5, 6);
        tile_dp(op, 3, 5, 7);
        dec(rcx);
        jnz(loop);
        mov(r8, ptr[p + offsetof(ProbeParams, dst)]);
        for (int t = 0; t < 4; ++t) tile_store(t, r8, r9, t * static_cast<int32_t>(kTileBytes));
        postamble(false);
    }

    TmulArith arith_;
};

struct ArithHash {
    size_t operator()(TmulArith a) const { return static_cast<size_t>(a); }
};

}  // namespace

Status tmul_peak_probe(TmulArith arith, int64_t rounds, double *result) {
    KT_RETURN_IF(rounds < 1 || !result, KT_STATUS_INVALID_ARGUMENT, "amx probe: %lld rounds",
                 static_cast<long long>(rounds));
    static jit::KernelCache<TmulArith, ArithHash> cache;
    const jit::JitCode *code = nullptr;
    KT_TRY(cache.get(
        arith,
        [](TmulArith a, std::unique_ptr<jit::JitCode> *out) { return jit::build<TmulProbeGenerator>(out, a); },
        &code));

    // Inputs small enough that millions of rounds neither overflow nor go subnormal: int8 1..7, bf16 2^-8.
    alignas(64) uint8_t src[4 * kTileBytes];
    alignas(64) uint8_t dst[4 * kTileBytes];
    if (arith == TmulArith::kInt8) {
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
    KT_TRY(session.configure());
    const Status ran = run_code(*code, &params);
    KT_TRY(session.end());
    KT_TRY(ran);
    double sum = 0;
    for (size_t i = 0; i < sizeof dst; i += 4) {
        if (arith == TmulArith::kInt8) {
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
