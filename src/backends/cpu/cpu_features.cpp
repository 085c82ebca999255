#include "backends/cpu/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace kt::cpu {
namespace {

struct Regs {
    uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs cpuid(uint32_t leaf, uint32_t subleaf = 0) {
    Regs r;
    __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
    return r;
}

uint64_t xgetbv0() {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t value, int n) { return (value >> n) & 1u; }

// Linux: ask for permission to use the AMX tile data state. Permission is per process and sticky, so asking
// twice is harmless; GET first so a host that already asked costs nothing.
constexpr long kArchGetXcompPerm = 0x1022;
constexpr long kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

std::string request_amx_permission() {
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) == 0 && (perm & (1ul << kXfeatureXtiledata))) return "";
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
        return std::string("arch_prctl(ARCH_REQ_XCOMP_PERM): ") + std::strerror(errno);
    perm = 0;
    if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) != 0 || !(perm & (1ul << kXfeatureXtiledata)))
        return "arch_prctl(ARCH_GET_XCOMP_PERM) does not report XTILEDATA after the request";
    return "";
}

CpuFeatures detect() {
    CpuFeatures f;
    const Regs r0 = cpuid(0);
    const uint32_t max_leaf = r0.eax;
    char vendor[13] = {};
    std::memcpy(vendor + 0, &r0.ebx, 4);
    std::memcpy(vendor + 4, &r0.edx, 4);
    std::memcpy(vendor + 8, &r0.ecx, 4);
    f.vendor = vendor;

    if (cpuid(0x80000000).eax >= 0x80000004) {
        char brand[49] = {};
        for (uint32_t i = 0; i < 3; ++i) {
            const Regs r = cpuid(0x80000002 + i);
            std::memcpy(brand + 16 * i + 0, &r.eax, 4);
            std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
            std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
            std::memcpy(brand + 16 * i + 12, &r.edx, 4);
        }
        f.brand = brand;
        while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
        while (!f.brand.empty() && f.brand.front() == ' ') f.brand.erase(f.brand.begin());
    }
    if (max_leaf < 1) return f;

    const Regs r1 = cpuid(1);
    const int base_family = static_cast<int>((r1.eax >> 8) & 0xF);
    f.family = base_family == 0xF ? base_family + static_cast<int>((r1.eax >> 20) & 0xFF) : base_family;
    f.sse42 = bit(r1.ecx, 20);
    const bool osxsave = bit(r1.ecx, 27);
    const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    const bool os_avx = (xcr0 & 0x6) == 0x6;          // XMM and YMM state
    const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
    const bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG, XTILEDATA

    f.avx = os_avx && bit(r1.ecx, 28);
    f.fma = f.avx && bit(r1.ecx, 12);
    f.f16c = f.avx && bit(r1.ecx, 29);
    if (max_leaf < 7) return f;

    const Regs r7 = cpuid(7, 0);
    const Regs r7_1 = cpuid(7, 1);
    f.avx2 = f.avx && bit(r7.ebx, 5);
    f.avx_vnni = f.avx && bit(r7_1.eax, 4);
    f.avx512f = os_avx512 && bit(r7.ebx, 16);
    f.avx512dq = f.avx512f && bit(r7.ebx, 17);
    f.avx512bw = f.avx512f && bit(r7.ebx, 30);
    f.avx512vl = f.avx512f && bit(r7.ebx, 31);
    f.avx512_vnni = f.avx512f && bit(r7.ecx, 11);
    f.avx512_bf16 = f.avx512f && bit(r7_1.eax, 5);
    f.avx512_vbmi = f.avx512f && bit(r7.ecx, 1);
    f.gfni = f.avx && bit(r7.ecx, 8);

    const bool cpu_amx = bit(r7.edx, 24) && bit(r7.edx, 25);  // AMX-TILE and AMX-INT8
    if (cpu_amx) {
        if (!os_amx) {
            f.amx_unusable_reason = "the OS does not enable tile state in XCR0";
        } else if (max_leaf < 0x1d || cpuid(0x1d, 0).eax < 1) {
            // Some hypervisors advertise AMX without a palette; LDTILECFG then raises #UD.
            f.amx_unusable_reason = "CPUID leaf 0x1D reports no tile palette";
        } else {
            f.amx_unusable_reason = request_amx_permission();
        }
        if (f.amx_unusable_reason.empty()) {
            f.amx_tile = true;
            f.amx_int8 = true;
            f.amx_bf16 = bit(r7.edx, 22);
        }
    }
    return f;
}

IsaLevel compute_host_level(const CpuFeatures &f) {
    const bool avx2 = f.avx2 && f.fma && f.f16c;
    const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
    if (avx512 && f.amx_int8 && f.amx_bf16) return IsaLevel::kAmx;
    if (avx512) return IsaLevel::kAvx512;
    if (avx2) return IsaLevel::kAvx2;
    return IsaLevel::kScalar;
}

IsaLevel env_cap() {
    const char *env = std::getenv("KT_MAX_ISA");
    IsaLevel level;
    if (env && parse_isa_level(env, &level)) return level;
    return IsaLevel::kAmx;
}

std::atomic<int32_t> g_cap{-1};  // -1: not yet initialised from the environment

}  // namespace

const CpuFeatures &host_cpu_features() {
    static const CpuFeatures features = detect();
    return features;
}

const char *isa_level_name(IsaLevel level) {
    switch (level) {
        case IsaLevel::kScalar: return "scalar";
        case IsaLevel::kAvx2: return "avx2";
        case IsaLevel::kAvx512: return "avx512";
        case IsaLevel::kAmx: return "amx";
    }
    return "unknown";
}

bool parse_isa_level(const char *text, IsaLevel *out) {
    for (IsaLevel l : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAmx}) {
        if (strcasecmp(text, isa_level_name(l)) == 0) {
            *out = l;
            return true;
        }
    }
    return false;
}

IsaLevel host_isa_level() {
    static const IsaLevel level = compute_host_level(host_cpu_features());
    return level;
}

IsaLevel max_isa_level() {
    int32_t cap = g_cap.load(std::memory_order_acquire);
    if (cap < 0) {
        int32_t expected = -1;
        g_cap.compare_exchange_strong(expected, static_cast<int32_t>(env_cap()), std::memory_order_acq_rel);
        cap = g_cap.load(std::memory_order_acquire);
    }
    return static_cast<IsaLevel>(cap);
}

void set_max_isa_level(IsaLevel cap) { g_cap.store(static_cast<int32_t>(cap), std::memory_order_release); }

IsaLevel active_isa_level() {
    const IsaLevel host = host_isa_level();
    const IsaLevel cap = max_isa_level();
    return static_cast<int32_t>(cap) < static_cast<int32_t>(host) ? cap : host;
}

}  // namespace kt::cpu
