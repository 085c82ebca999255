// GEMM checks shared by the AMX tests: pack a random problem, run the AMX GEMM on every runner available (tile
// machine; natively with AMX hardware) and compare with amx_reference.h: INT8 / INT4 exactly, BF16 bit for bit
// against the SDM-order model (tile machine) and within a K-dependent bound of fp64. C carries sentinel columns and
// every buffer is sized exactly, so writes outside C[0..M)[n_begin..n_end) and reads past A are caught.
#pragma once

#include <cstdint>
#include <string>

namespace kt::test {

struct Shape {
    int64_t m, n, k;
    int32_t group = 0;
};

std::string describe(const Shape &s);

void check_int8(const Shape &sh, uint32_t seed);   // gemm_s8_s32 and gemm_s8_f32 on INT8 weights
void check_int4(const Shape &sh, uint32_t seed);   // gemm_s8_f32 on INT4 weights (sh.group)
void check_bf16(const Shape &sh, uint32_t seed);   // gemm_bf16_f32
void check_grouped(const Shape &sh, bool mins, uint32_t seed);  // gemm_s8_grouped_f32 (sh.group 16 or 32)

}  // namespace kt::test
