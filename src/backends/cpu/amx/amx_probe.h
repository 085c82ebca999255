// The TMUL peak probe behind the roofline (backends/cpu/roofline.h): how many int8 or bf16 multiply-adds the AMX
// unit of one core retires per second when nothing else limits it.
//
// The probe's loop is the GEMM kernels' inner loop without its loads: four independent TMULs per round, 2 x 2 on
// the register tiles (tmm4..7 accumulate, tmm0/1 are A, tmm2/3 are B, all 16 rows x 64 bytes of kt's palette), so
// every TMUL is a full 16 x 16 x K tile product and consecutive TMULs never wait on each other's accumulator.
//
// The group variants measure what the group-wise kernels of the GGUF formats can reach (amx_gemm.h): TMULs one
// scale group deep under group_palette (K = 32 or 16 int8), and the same with each group's sums taken out of the
// tiles as the kernels must (tilezero, TMUL, TILESTORED per group).
#pragma once

#include <cstdint>

#include "core/status.h"

namespace kt::cpu::amx {

enum class TmulArith : int32_t {
    kInt8 = 0,            // TDPBSSD, K = 64
    kBf16 = 1,            // TDPBF16PS, K = 32
    kInt8Group32 = 2,     // TDPBSSD, K = 32 (group_palette(32))
    kInt8Group16 = 3,     // TDPBSSD, K = 16 (group_palette(16))
    kInt8Group32Out = 4,  // K = 32 with every TMUL's sums stored: tilezero, TDPBSSD, TILESTORED
};

// Multiply-adds per probe round: 4 TMULs x 16 x 16 x K.
inline constexpr int64_t kProbeMacsPerRoundInt8 = 4 * 16 * 16 * 64;
inline constexpr int64_t kProbeMacsPerRoundBf16 = 4 * 16 * 16 * 32;
int64_t probe_macs_per_round(TmulArith arith);

// Runs `rounds` (>= 1) probe rounds on the calling thread, where AMX code runs (natively, or on an installed
// CodeRunner), and returns a value that depends on every TMUL in *result. UNSUPPORTED when available() is false.
Status tmul_peak_probe(TmulArith arith, int64_t rounds, double *result);

}  // namespace kt::cpu::amx
