#include "backends/cpu/kernels.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/kernels_detail.h"
#include "backends/cpu/prefetch_target.h"
#include "core/log.h"

namespace kt::cpu {

QuantSpec quant_spec(const PackedLayout &layout) {
    const PackedTypeInfo &info = packed_type_info(layout.type);
    QuantSpec spec;
    spec.group = layout.type == PackedType::kInt8 ? 0 : layout.group;
    spec.multiplier = info.has_mins ? 1 : -info.u_offset;
    return spec;
}

int64_t quant_sums_per_row(const QuantSpec &spec, int64_t k) {
    return spec.group == 0 ? 1 : (k + spec.group - 1) / spec.group;
}

void group_sums_row(const int8_t *q, int64_t k, const QuantSpec &spec, int32_t *sums) {
    const int64_t group = spec.group == 0 ? k : spec.group;
    for (int64_t g = 0, begin = 0; begin < k; ++g, begin += group) {
        const int64_t end = begin + group < k ? begin + group : k;
        int32_t s = 0;
        for (int64_t i = begin; i < end; ++i) s += q[i];
        sums[g] = s * spec.multiplier;
    }
}

uint64_t new_rows_ids(uint64_t count) {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(count, std::memory_order_relaxed);
}

void count_gemm(const GemmActs &a, IsaLevel level, const PackedMatrix &w, int64_t m, int64_t n_begin, int64_t n_end) {
    const GemmArith arith = w.layout.type == PackedType::kBf16 ? GemmArith::kBf16 : GemmArith::kInt8;
    const uint64_t macs = static_cast<uint64_t>(m) * static_cast<uint64_t>(n_end - n_begin) * static_cast<uint64_t>(w.layout.k);
    thread_gemm_counter().count(level, arith, macs);
    if (a.counter) a.counter->count(level, arith, macs);
}

namespace simd {
PrefetchTarget g_avx512_prefetch = PrefetchTarget::kL1;  // declared in prefetch_target.h
}  // namespace simd

namespace {

// The names of the choices, as KT_PREFETCH spells them, in the enum's order.
constexpr const char *kPrefetchNames[] = {"l1", "l1nta", "l2"};
static_assert(static_cast<int>(simd::PrefetchTarget::kL1StreamNta) == 1 &&
              static_cast<int>(simd::PrefetchTarget::kL2) == 2);

// KT_PREFETCH's choice, or false when it is unset or names none.
bool prefetch_from_environment(simd::PrefetchTarget *out) {
    const char *env = std::getenv("KT_PREFETCH");
    for (size_t i = 0; env && i < std::size(kPrefetchNames); ++i)
        if (std::strcmp(env, kPrefetchNames[i]) == 0) {
            *out = static_cast<simd::PrefetchTarget>(i);
            return true;
        }
    return false;
}

// Where the AVX-512 kernels' software prefetches go (simd_avx512.h says what each choice measured): L1 on Zen 5
// (AMD family 26) and later, L2 only elsewhere (Intel, Zen 4); KT_PREFETCH=l1, l1nta or l2 chooses.
simd::PrefetchTarget prefetch_target(const CpuFeatures &f) {
    simd::PrefetchTarget chosen;
    if (prefetch_from_environment(&chosen)) return chosen;
    const bool zen5_or_later = f.vendor == "AuthenticAMD" && f.family >= 26;
    return zen5_or_later ? simd::PrefetchTarget::kL1 : simd::PrefetchTarget::kL2;
}

// kAvx512GfniVbmiSet: the host's best AVX-512 VNNI set (with BF16 where the host has it) with the integer GEMM and the
// panel unpacking (the AMX set's GGUF decoding) in their forms for GFNI and AVX512-VBMI, which best_kernel_set
// prefers; the set without them stays listed, so that tests run both on such a host.
enum SetIndex {
    kScalarSet,
    kAvx2Set,
    kAvx512Set,
    kAvx512VnniSet,
    kAvx512Bf16Set,
    kAvx512VnniBf16Set,
    kAvx512GfniVbmiSet,
    kAmxSet,
    kSetCount
};

struct Sets {
    KernelSet sets[kSetCount];
    bool available[kSetCount] = {};
};

const Sets &all_sets() {
    static const Sets s = [] {
        Sets r;
        const CpuFeatures &f = host_cpu_features();
        const IsaLevel host = host_isa_level();
        auto make = [&](SetIndex i, const char *name, IsaLevel level, bool vnni, bool bf16) {
            KernelSet &ks = r.sets[i];
            ks.name = name;
            ks.level = level;
            ks.vnni = vnni;
            ks.bf16 = bf16;
        };
        make(kScalarSet, "scalar", IsaLevel::kScalar, false, false);
        detail::fill_scalar(&r.sets[kScalarSet]);
        r.available[kScalarSet] = true;

        make(kAvx2Set, "avx2", IsaLevel::kAvx2, false, false);
        detail::fill_scalar(&r.sets[kAvx2Set]);  // placeholders until the host is known to run AVX2
        if (static_cast<int>(host) >= static_cast<int>(IsaLevel::kAvx2)) {
            detail::fill_avx2(&r.sets[kAvx2Set]);
            r.available[kAvx2Set] = true;
        }

        const bool avx512 = static_cast<int>(host) >= static_cast<int>(IsaLevel::kAvx512);
        simd::g_avx512_prefetch = prefetch_target(f);
        const char *names[4] = {"avx512", "avx512-vnni", "avx512-bf16", "avx512-vnni-bf16"};
        for (int v = 0; v < 4; ++v) {
            const bool vnni = v & 1, bf16 = v & 2;
            const SetIndex i = static_cast<SetIndex>(kAvx512Set + v);
            make(i, names[v], IsaLevel::kAvx512, vnni, bf16);
            detail::fill_scalar(&r.sets[i]);
            if (!avx512 || (vnni && !f.avx512_vnni) || (bf16 && !f.avx512_bf16)) continue;
            detail::fill_avx512(&r.sets[i]);
            if (vnni) r.sets[i].gemm_int = detail::gemm_int_avx512_vnni();
            if (bf16) r.sets[i].gemm_bf16 = detail::gemm_bf16_avx512_bf16();
            r.available[i] = true;
        }
        const SetIndex best_avx512 =
            static_cast<SetIndex>(kAvx512Set + (f.avx512_vnni ? 1 : 0) + (f.avx512_bf16 ? 2 : 0));
        const char *gfni_vbmi_name = f.avx512_bf16 ? "avx512-vnni-bf16-gfni-vbmi" : "avx512-vnni-gfni-vbmi";
        make(kAvx512GfniVbmiSet, gfni_vbmi_name, IsaLevel::kAvx512, true, f.avx512_bf16);
        detail::fill_scalar(&r.sets[kAvx512GfniVbmiSet]);
        if (avx512 && f.avx512_vnni && f.gfni && f.avx512_vbmi) {
            r.sets[kAvx512GfniVbmiSet] = r.sets[best_avx512];
            r.sets[kAvx512GfniVbmiSet].name = gfni_vbmi_name;
            r.sets[kAvx512GfniVbmiSet].gemm_int = detail::gemm_int_avx512_vnni_gfni_vbmi();
            r.sets[kAvx512GfniVbmiSet].unpack_panel_s8 = detail::unpack_panel_s8_avx512_gfni_vbmi();
            r.available[kAvx512GfniVbmiSet] = true;
        }

        // AMX over the host's best AVX-512 set. Built whenever AVX-512 is there: whether AMX code may run is
        // decided per call (amx::available(): the CPU's AMX, or a test's tile machine).
        make(kAmxSet, "amx", IsaLevel::kAmx, f.avx512_vnni, f.avx512_bf16);
        detail::fill_scalar(&r.sets[kAmxSet]);
        if (avx512) {
            const SetIndex base = r.available[kAvx512GfniVbmiSet] ? kAvx512GfniVbmiSet : best_avx512;
            detail::fill_amx(r.sets[base], &r.sets[kAmxSet]);
            r.available[kAmxSet] = true;
        }
        return r;
    }();
    return s;
}

std::atomic<uint32_t> g_disabled{0};

}  // namespace

const KernelSet *kernel_set(IsaLevel level, bool vnni, bool bf16) {
    const Sets &s = all_sets();
    int i = kScalarSet;
    switch (level) {
        case IsaLevel::kScalar: i = (vnni || bf16) ? -1 : kScalarSet; break;
        case IsaLevel::kAvx2: i = (vnni || bf16) ? -1 : kAvx2Set; break;
        case IsaLevel::kAvx512: i = kAvx512Set + (vnni ? 1 : 0) + (bf16 ? 2 : 0); break;
        case IsaLevel::kAmx: i = kAmxSet; break;
    }
    if (i < 0 || !s.available[i]) return nullptr;
    return &s.sets[i];
}

IsaLevel kernel_level() { return amx::available() ? IsaLevel::kAmx : active_isa_level(); }

const KernelSet &best_kernel_set(IsaLevel level) {
    if (level == IsaLevel::kAmx && amx::available() && all_sets().available[kAmxSet]) return all_sets().sets[kAmxSet];
    const IsaLevel host = host_isa_level();
    if (static_cast<int>(level) > static_cast<int>(host)) level = host;
    const CpuFeatures &f = host_cpu_features();
    const uint32_t off = g_disabled.load(std::memory_order_acquire);
    if (static_cast<int>(level) >= static_cast<int>(IsaLevel::kAvx512)) {
        const bool vnni = f.avx512_vnni && !(off & kDisableVnni);
        const bool bf16 = f.avx512_bf16 && !(off & kDisableBf16);
        const Sets &s = all_sets();
        if (vnni && bf16 == f.avx512_bf16 && s.available[kAvx512GfniVbmiSet]) return s.sets[kAvx512GfniVbmiSet];
        return *kernel_set(IsaLevel::kAvx512, vnni, bf16);
    }
    if (level == IsaLevel::kAvx2) return *kernel_set(IsaLevel::kAvx2, false, false);
    return *kernel_set(IsaLevel::kScalar, false, false);
}

const char *avx512_prefetch_name() {
    all_sets();  // chooses the target
    return kPrefetchNames[static_cast<int>(simd::g_avx512_prefetch)];
}

void warn_ignored_kernel_environment() {
    static std::atomic<bool> warned{false};
    if (!log_enabled(KT_LOG_WARN) || warned.exchange(true)) return;
    IsaLevel level;
    const char *max_isa = std::getenv("KT_MAX_ISA");
    if (max_isa && !parse_isa_level(max_isa, &level))
        KT_LOG_WARN_MSG("KT_MAX_ISA=%s is not scalar, avx2, avx512 or amx: ignored", max_isa);
    simd::PrefetchTarget target;
    const char *prefetch = std::getenv("KT_PREFETCH");
    if (prefetch && !prefetch_from_environment(&target))
        KT_LOG_WARN_MSG("KT_PREFETCH=%s is not l1, l1nta or l2: ignored (prefetching into %s)", prefetch,
                        avx512_prefetch_name());
}

int supported_kernel_sets(const KernelSet **out, int capacity) {
    const Sets &s = all_sets();
    int n = 0;
    for (int i = 0; i < kSetCount; ++i)
        if (s.available[i] && (i != kAmxSet || amx::available()) && n < capacity) out[n++] = &s.sets[i];
    return n;
}

void set_disabled_features(uint32_t mask) { g_disabled.store(mask, std::memory_order_release); }
uint32_t disabled_features() { return g_disabled.load(std::memory_order_acquire); }

}  // namespace kt::cpu
