// The TMUL peak probe behind the roofline (backends/cpu/roofline.h): how many int8 or bf16 multiply-adds the AMX
// unit of one core retires per second when nothing else limits it.
//
// The probe's loop is the GEMM kernels' inner loop without its loads: four independent TMULs per round, 2 x 2 on
// the register tiles (tmm0..3 accumulate, tmm4/5 are A, tmm6/7 are B, all 16 rows x 64 bytes of kt's palette), so
// every TMUL is a full 16 x 16 x K tile product and consecutive TMULs never wait on each other's accumulator.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace kt::cpu::amx {

enum class TmulArith : int32_t { kInt8 = 0, kBf16 = 1 };  // TDPBSSD, TDPBF16PS

// Multiply-adds per probe round: 4 TMULs x 16 x 16 x (64 int8 or 32 bf16).
inline constexpr int64_t kProbeMacsPerRoundInt8 = 4 * 16 * 16 * 64;
inline constexpr int64_t kProbeMacsPerRoundBf16 = 4 * 16 * 16 * 32;

// Runs `rounds` (>= 1) probe rounds on the calling thread, where AMX code runs (natively, or on an installed
// CodeRunner), and returns a value that depends on every TMUL in *result. UNSUPPORTED when available() is false.
Status tmul_peak_probe(TmulArith arith, int64_t rounds, double *result);

}  // namespace kt::cpu::amx
