// AVX-512 integer GEMM with AVX512-VNNI (vpdpbusd), GFNI (Q6_K's high bits in one affine transform) and AVX512-VBMI
// (IQ4_XS and MXFP4 code books by vpermb), and the panel unpacking the AMX set runs on the same decoding. Compiled with
// -mavx512vnni -mgfni -mavx512vbmi.
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx512.h"

namespace kt::cpu::detail {

using GfniVbmiKernels = impl::Kernels<simd::Avx512<true, false, true>, 6>;

GemmFn gemm_int_avx512_vnni_gfni_vbmi() { return &GfniVbmiKernels::gemm_int; }

UnpackFn unpack_panel_s8_avx512_gfni_vbmi() { return &GfniVbmiKernels::unpack_panel_s8; }

}  // namespace kt::cpu::detail
