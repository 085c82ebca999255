// The kernel sets each ISA translation unit provides (kernels.cpp assembles them; nothing else includes this).
#pragma once

#include "backends/cpu/kernels.h"

namespace kt::cpu::detail {

using GemmFn = void (*)(const PackedMatrix &, const GemmActs &, int64_t, int64_t, int64_t, float *, int64_t);
using UnpackFn = decltype(KernelSet::unpack_panel_s8);

// Complete sets: every pointer filled.
void fill_scalar(KernelSet *ks);
void fill_avx2(KernelSet *ks);
void fill_avx512(KernelSet *ks);  // AVX-512 F/BW/DQ/VL only: software dot products for VNNI and BF16

// The AMX set: `base` (an AVX-512 set) with the GEMMs routed to AMX where they apply.
void fill_amx(const KernelSet &base, KernelSet *ks);

// The parts that need more than AVX-512 F/BW/DQ/VL.
GemmFn gemm_int_avx512_vnni();
GemmFn gemm_int_avx512_vnni_gfni_vbmi();
UnpackFn unpack_panel_s8_avx512_gfni_vbmi();  // the AMX set's GGUF decoding on such hosts (every AMX CPU so far)
GemmFn gemm_bf16_avx512_bf16();

}  // namespace kt::cpu::detail
