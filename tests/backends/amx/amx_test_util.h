// Shared by the AMX tests: random problems, packed buffers, and running a body on every way AMX code can run here
// (the tile machine always; natively as well when the host has usable AMX).
#pragma once

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/cpu_features.h"
#include "core/fp16.h"
#include "tile_machine/tile_machine.h"

namespace kt::test {

struct FreeDeleter {
    void operator()(void *p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], FreeDeleter>;

// Exactly `bytes` (a multiple of 64) of 64-byte aligned memory, so AddressSanitizer sees one byte too far.
inline AlignedBytes aligned_bytes(size_t bytes) {
    return AlignedBytes(static_cast<uint8_t *>(std::aligned_alloc(64, bytes)));
}

inline std::vector<int8_t> random_s8(size_t n, std::mt19937 &rng, int lo = -128, int hi = 127) {
    std::uniform_int_distribution<int> d(lo, hi);
    std::vector<int8_t> v(n);
    for (auto &x : v) x = static_cast<int8_t>(d(rng));
    return v;
}

inline std::vector<float> random_scales(size_t n, std::mt19937 &rng) {
    std::uniform_real_distribution<float> d(0.25f, 2.0f);
    std::vector<float> v(n);
    for (auto &x : v) x = d(rng) / 127.0f;
    return v;
}

inline std::vector<uint16_t> random_bf16(size_t n, std::mt19937 &rng) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<uint16_t> v(n);
    for (auto &x : v) x = f32_to_bf16(d(rng));
    return v;
}

constexpr int64_t kCPad = 3;  // sentinel columns right of n_end in every row of C
constexpr uint32_t kSentinel = 0x7FC0DEADu;

// A packed weight matrix that owns its buffer.
struct Packed {
    AlignedBytes bytes;
    cpu::amx::PackedB b;
};

inline Packed pack(const cpu::amx::PackedBDesc &desc, const std::function<Status(void *, size_t)> &packer) {
    size_t size = 0;
    REQUIRE(cpu::amx::packed_b_size(desc, &size).is_ok());
    Packed p{aligned_bytes(size), {desc, nullptr}};
    const Status s = packer(p.bytes.get(), size);
    INFO(s.message());
    REQUIRE(s.is_ok());
    p.b.data = p.bytes.get();
    return p;
}

// C with ldc = n + kCPad, prefilled with the sentinel; check_sentinels() verifies that nothing wrote past column n.
template <typename T>
struct OutC {
    int64_t m, n, ldc;
    std::vector<T> c;
    OutC(int64_t m_, int64_t n_) : m(m_), n(n_), ldc(n_ + kCPad), c(static_cast<size_t>(m_ * (n_ + kCPad))) {
        for (T &x : c) std::memcpy(&x, &kSentinel, 4);
    }
    void check_sentinels() const {
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = n; j < ldc; ++j) {
                uint32_t bits;
                std::memcpy(&bits, &c[static_cast<size_t>(i * ldc + j)], 4);
                INFO("row " << i << " column " << j);
                REQUIRE(bits == kSentinel);
            }
        }
    }
    T at(int64_t i, int64_t j) const { return c[static_cast<size_t>(i * ldc + j)]; }
};

inline bool host_has_amx() {
    const auto &f = cpu::host_cpu_features();
    return f.amx_int8 && f.amx_bf16;
}

// Says once per test case how its AMX code ran, so the test log shows whether the native half ran on this host.
inline void announce_amx_runners() {
    static std::string announced;
    const std::string test = Catch::getResultCapture().getCurrentTestName();
    if (test == announced) return;
    announced = test;
    if (host_has_amx()) {
        WARN("AMX code ran on the tile machine and natively on this CPU's AMX");
    } else {
        const std::string &why = cpu::host_cpu_features().amx_unusable_reason;
        WARN("AMX code ran on the tile machine only; the native half was skipped: "
             << (why.empty() ? "this CPU has no AMX" : why));
    }
}

// Runs `body(runner_name)` under the tile machine, then natively when the host has AMX (announce_amx_runners).
inline void for_each_amx_runner(const std::function<void(const char *)> &body) {
    {
        ScopedTileMachineRunner tile_machine;
        body("tile machine");
    }
    if (host_has_amx()) {
        REQUIRE(cpu::amx::available());
        body("native AMX");
    }
    announce_amx_runners();
}

}  // namespace kt::test
