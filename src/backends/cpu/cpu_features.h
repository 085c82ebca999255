// What the CPU and the OS let this process execute, detected once.
//
// An instruction set counts as usable only when the CPU reports it (CPUID), the OS saves its register state
// (XCR0 via XGETBV), and, for AMX, a tile palette exists and Linux granted the XTILEDATA permission
// (reference/amx-hwloc.md §2.7). kt never executes an instruction that this says is unusable: a missing ISA means
// a slower path, never SIGILL.
#pragma once

#include <cstdint>
#include <string>

namespace kt::cpu {

struct CpuFeatures {
    std::string vendor;  // "AuthenticAMD", "GenuineIntel", ...
    std::string brand;   // marketing name, may be empty
    int family = 0;      // CPUID display family (base, plus extended where base is 15): Zen 4 25, Zen 5 26

    // Usable (CPU and OS agree).
    bool sse42 = false;
    bool avx = false;
    bool avx2 = false;
    bool fma = false;
    bool f16c = false;
    bool avx_vnni = false;      // VEX-encoded vpdpbusd (Alder Lake and later, Zen 5)
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512dq = false;
    bool avx512vl = false;
    bool avx512_vnni = false;
    bool avx512_bf16 = false;
    bool avx512_vbmi = false;
    bool gfni = false;  // with AVX-512: the EVEX forms on 512-bit vectors
    bool amx_tile = false;
    bool amx_int8 = false;
    bool amx_bf16 = false;

    // Why AMX is unusable when the CPU reports it ("" when usable or absent): "no XCR0 tile state", "no tile
    // palette", "arch_prctl(ARCH_REQ_XCOMP_PERM): <errno>".
    std::string amx_unusable_reason;
};

// Detected on first call (thread-safe), then cached.
const CpuFeatures &host_cpu_features();

// ISA levels, ordered: each level implies the ones below it. A kernel family is selected per level.
enum class IsaLevel : int32_t {
    kScalar = 0,  // portable C++
    kAvx2 = 1,    // AVX2 + FMA + F16C
    kAvx512 = 2,  // AVX-512 F/BW/DQ/VL (VNNI and BF16 used when present, emulated otherwise)
    kAmx = 3,     // AMX tile + int8 + bf16, on top of kAvx512
};

const char *isa_level_name(IsaLevel level);
// Parses "scalar", "avx2", "avx512", "amx" (case-insensitive); false if unknown.
bool parse_isa_level(const char *text, IsaLevel *out);

// The highest level the host supports, ignoring any cap.
IsaLevel host_isa_level();

// The level kernels should use: host_isa_level() capped by the KT_MAX_ISA environment variable (read once) and
// by set_max_isa_level(). Thread-safe.
IsaLevel active_isa_level();
void set_max_isa_level(IsaLevel cap);
IsaLevel max_isa_level();

}  // namespace kt::cpu
