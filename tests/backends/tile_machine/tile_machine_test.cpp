// Unit tests of the tile machine itself, on hand-assembled snippets: every instruction it models against values
// worked out here by hand or by the host CPU, each fault rule of reference/amx-hwloc.md §4.4, and the failures it
// must report instead of skipping (unsupported instructions, bad control flow, ABI violations).
#include <xbyak/xbyak.h>

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/fp16.h"
#include "tile_machine/tile_machine.h"

using namespace kt;
using namespace Xbyak::util;
using kt::test::TileMachine;

namespace {

// A snippet of machine code assembled with xbyak. The tile machine only reads the bytes: the buffer never needs to
// be executable.
class Snippet : public Xbyak::CodeGenerator {
public:
    explicit Snippet(const std::function<void(Snippet &)> &body) : CodeGenerator(8192, Xbyak::DontSetProtectRWE) {
        body(*this);
    }
    Status run(TileMachine &m, const void *arg = nullptr) {
        return m.call(getCode(), getSize(), reinterpret_cast<uint64_t>(arg));
    }
    Xbyak::Tmm t(int i) const { return Xbyak::Tmm(i); }
    // Bytes that xbyak cannot or will not emit (encodings the CPU rejects).
    void raw(std::initializer_list<uint8_t> bytes) {
        for (uint8_t b : bytes) db(b);
    }
};

Status run_bytes(TileMachine &m, std::vector<uint8_t> bytes, const void *arg = nullptr) {
    return m.call(bytes.data(), bytes.size(), reinterpret_cast<uint64_t>(arg));
}

// The 64-byte LDTILECFG image.
struct Cfg {
    alignas(64) uint8_t bytes[64] = {};
    explicit Cfg(uint8_t palette = 1) { bytes[0] = palette; }
    Cfg &tile(int t, int rows, int colsb) {
        bytes[16 + 2 * t] = static_cast<uint8_t>(colsb & 0xFF);
        bytes[17 + 2 * t] = static_cast<uint8_t>(colsb >> 8);
        bytes[48 + t] = static_cast<uint8_t>(rows);
        return *this;
    }
};

// Loads `cfg` (pointer at [rdi]) then runs `body`; rdi points to a struct whose first field is the config pointer.
Snippet with_config(const std::function<void(Snippet &)> &body) {
    return Snippet([&](Snippet &g) {
        g.mov(rax, g.ptr[rdi]);
        g.ldtilecfg(g.ptr[rax]);
        body(g);
        g.ret();
    });
}

void require_fault(const Status &s, const char *kind, const char *needle) {
    INFO(s.message());
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.message().find(kind) != std::string::npos);
    CHECK(s.message().find(needle) != std::string::npos);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// General purpose subset
// ---------------------------------------------------------------------------------------------------------------

TEST_CASE("tile machine: integer arithmetic, loops, the stack and partial-register writes") {
    TileMachine m;
    int64_t out[10] = {};
    Snippet s([](Snippet &g) {
        Xbyak::Label loop, skip, zero_taken, done;
        g.xor_(eax, eax);
        g.mov(ecx, 10);
        g.L(loop);
        g.add(rax, rcx);
        g.dec(rcx);
        g.jnz(loop);
        g.mov(g.ptr[rdi], rax);  // 55
        g.mov(rdx, -5);
        g.imul(rdx, rdx, 7);
        g.mov(g.ptr[rdi + 8], rdx);  // -35
        g.lea(r8, g.ptr[rdi + rcx * 8 + 16]);
        g.mov(g.qword[r8], 1234);  // out[2]
        g.push(rbx);
        g.mov(rbx, 77);
        g.mov(g.ptr[rdi + 24], rbx);
        g.pop(rbx);
        g.mov(rax, -1);
        g.mov(eax, 0xFFFFFFF0);  // 32-bit writes zero the upper half
        g.mov(g.ptr[rdi + 32], rax);
        g.mov(rax, -1);
        g.mov(ax, 0x1234);  // 16-bit writes merge
        g.mov(g.ptr[rdi + 40], rax);
        g.mov(rax, -64);
        g.sar(rax, 3);
        g.shl(rax, 1);
        g.mov(g.ptr[rdi + 48], rax);  // -16
        g.mov(rax, 0x100);
        g.shr(rax, 4);
        g.sub(rax, 0x11);
        g.neg(rax);
        g.mov(g.ptr[rdi + 56], rax);  // 1
        g.mov(ecx, 0x30);
        g.or_(rcx, 0x0F);
        g.inc(rcx);
        g.jmp(skip);
        g.mov(rcx, 0);  // jumped over
        g.L(skip);
        g.mov(g.ptr[rdi + 64], rcx);  // 0x40
        g.mov(g.qword[rdi + 72], 0);
        g.test(rcx, 0x3F);
        g.jz(zero_taken);
        g.jmp(done);
        g.L(zero_taken);
        g.mov(g.qword[rdi + 72], 1);  // 0x40 & 0x3F == 0
        g.L(done);
        g.ret();
    });
    const Status status = s.run(m, out);
    INFO(status.message());
    REQUIRE(status.is_ok());
    CHECK(out[0] == 55);
    CHECK(out[1] == -35);
    CHECK(out[2] == 1234);
    CHECK(out[3] == 77);
    CHECK(static_cast<uint64_t>(out[4]) == 0xFFFFFFF0ull);
    CHECK(static_cast<uint64_t>(out[5]) == 0xFFFFFFFFFFFF1234ull);
    CHECK(out[6] == -16);
    CHECK(out[7] == 1);
    CHECK(out[8] == 0x40);
    CHECK(out[9] == 1);
    CHECK(m.instructions > 30);
}

TEST_CASE("tile machine: conditional branches follow the flags of cmp") {
    // For each pair, record which of the 12 conditions is taken and compare with C++.
    struct Io {
        int64_t a, b;
        int64_t taken[12];
    } io{};
    // Condition i: jz jnz jb jnb jbe ja jl jge jle jg js jns.
    auto jcc = [](Snippet &g, int i, const Xbyak::Label &l) {
        switch (i) {
            case 0: g.jz(l); break;
            case 1: g.jnz(l); break;
            case 2: g.jb(l); break;
            case 3: g.jnb(l); break;
            case 4: g.jbe(l); break;
            case 5: g.ja(l); break;
            case 6: g.jl(l); break;
            case 7: g.jge(l); break;
            case 8: g.jle(l); break;
            case 9: g.jg(l); break;
            case 10: g.js(l); break;
            default: g.jns(l); break;
        }
    };
    Snippet s([&](Snippet &g) {
        for (int i = 0; i < 12; ++i) {
            Xbyak::Label taken;
            g.mov(g.qword[rdi + 16 + 8 * i], 1);
            g.mov(rax, g.ptr[rdi]);
            g.cmp(rax, g.ptr[rdi + 8]);
            jcc(g, i, taken);
            g.mov(g.qword[rdi + 16 + 8 * i], 0);
            g.L(taken);
        }
        g.ret();
    });
    const int64_t values[] = {0, 1, -1, 5, INT64_MIN, INT64_MAX, 7};
    TileMachine m;
    for (int64_t a : values) {
        for (int64_t b : values) {
            io.a = a;
            io.b = b;
            REQUIRE(s.run(m, &io).is_ok());
            const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
            const int64_t diff = static_cast<int64_t>(ua - ub);
            const bool expect[12] = {a == b, a != b, ua < ub, ua >= ub, ua <= ub, ua > ub,
                                     a < b,  a >= b, a <= b, a > b,   diff < 0, diff >= 0};
            for (int i = 0; i < 12; ++i) {
                INFO("a=" << a << " b=" << b << " condition " << i);
                CHECK((io.taken[i] != 0) == expect[i]);
            }
        }
    }
}

TEST_CASE("tile machine: instructions outside the subset stop the run and are named") {
    TileMachine m;
    require_fault(Snippet([](Snippet &g) { g.cpuid(); g.ret(); }).run(m), "unsupported", "cpuid");
    require_fault(Snippet([](Snippet &g) { g.vpaddd(zmm0, zmm1, zmm2); g.ret(); }).run(m), "unsupported", "vpaddd");
    require_fault(Snippet([](Snippet &g) { g.vmovups(xmm0, g.ptr[rdi]); g.ret(); }).run(m), "unsupported",
                  "512-bit");
    require_fault(Snippet([](Snippet &g) { g.vmulps(zmm0, zmm1, zmm2 | g.T_rz_sae); g.ret(); }).run(m),
                  "unsupported", "rounding");
    require_fault(run_bytes(m, {0x64, 0x48, 0x8B, 0x07, 0xC3}), "unsupported", "segment");  // mov rax, fs:[rdi]
    require_fault(Snippet([](Snippet &g) { g.jmp(rax); g.ret(); }).run(m), "unsupported", "indirect");
    require_fault(Snippet([](Snippet &g) { g.mov(ah, 1); g.ret(); }).run(m), "unsupported", "high-byte");
    // Undecodable bytes (0x06 is invalid in 64-bit mode).
    require_fault(run_bytes(m, {0x06, 0xC3}), "unsupported", "cannot decode");
}

TEST_CASE("tile machine: control-flow and ABI violations are reported") {
    TileMachine m;
    require_fault(run_bytes(m, {0xE9, 0x00, 0x10, 0x00, 0x00}), "bad control flow", "outside");  // jmp +0x1000
    require_fault(run_bytes(m, {0x90}), "bad control flow", "left the code");                      // no ret
    require_fault(Snippet([](Snippet &g) { g.push(rax); g.ret(); }).run(m), "bad control flow", "return to");
    const Status clobber = Snippet([](Snippet &g) { g.mov(r13, 1); g.ret(); }).run(m);
    REQUIRE_FALSE(clobber.is_ok());
    CHECK(clobber.message().find("r13") != std::string::npos);
    require_fault(Snippet([](Snippet &g) { g.xor_(eax, eax); g.mov(rax, g.ptr[rax + 8]); g.ret(); }).run(m), "#PF",
                  "0x8");
}

// ---------------------------------------------------------------------------------------------------------------
// AVX-512 subset
// ---------------------------------------------------------------------------------------------------------------

TEST_CASE("tile machine: masked moves read and write only the selected elements") {
    TileMachine m;
    // A 10-byte heap buffer: reading a byte past it would be an AddressSanitizer error.
    std::vector<uint8_t> src = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    std::vector<uint32_t> dst(3, 0xAAAAAAAAu);
    struct Io {
        const uint8_t *src;
        uint32_t *dst;
        uint8_t zeroed[64], merged[64];
        uint64_t mask_back;
    } io{src.data(), dst.data(), {}, {}, 0};
    Snippet s([](Snippet &g) {
        g.mov(rax, (1ull << 10) - 1);
        g.kmovq(k3, rax);
        g.mov(rcx, g.ptr[rdi]);
        g.mov(eax, 0x7F7F7F7F);
        g.vpbroadcastd(zmm1, eax);
        g.vmovdqu8(zmm0 | k3 | g.T_z, g.ptr[rcx]);
        g.vmovdqu8(g.ptr[rdi + 16], zmm0);
        g.vmovdqu8(zmm1 | k3, g.ptr[rcx]);  // merging: bytes 10.. keep 0x7F
        g.vmovdqu8(g.ptr[rdi + 80], zmm1);
        g.mov(eax, 0x7);
        g.kmovw(k1, eax);
        g.mov(rcx, g.ptr[rdi + 8]);
        g.vmovdqu32(g.ptr[rcx] | k1, zmm0);  // writes 3 dwords only
        g.mov(eax, 0x80000001);
        g.kmovd(k2, eax);
        g.kmovq(rdx, k2);
        g.mov(g.ptr[rdi + 144], rdx);
        g.ret();
    });
    REQUIRE(s.run(m, &io).is_ok());
    for (int i = 0; i < 64; ++i) {
        CHECK(io.zeroed[i] == (i < 10 ? i + 1 : 0));
        CHECK(io.merged[i] == (i < 10 ? i + 1 : 0x7F));
    }
    CHECK(dst[0] == 0x04030201u);
    CHECK(dst[1] == 0x08070605u);
    CHECK(dst[2] == 0x00000A09u);
    CHECK(io.mask_back == 0x80000001u);
    // Zeroing-masking into memory is #UD (or undecodable): either way the run must fail.
    CHECK_FALSE(Snippet([](Snippet &g) {
                    g.raw({0x62, 0xF1, 0x7F, 0xCB, 0x7F, 0x07});  // vmovdqu8 [rdi]{k3}{z}, zmm0
                    g.ret();
                }).run(m, &io).is_ok());
}

TEST_CASE("tile machine: vector arithmetic rounds like the CPU (RNE, one rounding per FMA)") {
    TileMachine m;
    struct Io {
        int32_t ints[16];
        float x[16], y[16], c[16];
        float cvt[16], mul[16], fma[16], bcast[16];
        uint16_t words[32], shifted[32], anded[32], shifted16[32], xored[32];
    } io{};
    const float one_plus = 1.0f + std::ldexp(1.0f, -12);
    for (int i = 0; i < 16; ++i) {
        io.ints[i] = i == 0 ? (1 << 24) + 1 : i == 1 ? -((1 << 24) + 3) : i * 1000 - 7;
        io.x[i] = one_plus;
        io.y[i] = one_plus * static_cast<float>(i + 1);
        io.c[i] = -static_cast<float>(i + 1);
    }
    for (int i = 0; i < 32; ++i) io.words[i] = static_cast<uint16_t>(0x1234 * (i + 1));
    Snippet s([](Snippet &g) {
        g.vcvtdq2ps(zmm0, g.ptr[rdi]);
        g.vmovups(g.ptr[rdi + 256], zmm0);
        g.vmovups(zmm1, g.ptr[rdi + 64]);
        g.vmulps(zmm2, zmm1, g.ptr[rdi + 128]);
        g.vmovups(g.ptr[rdi + 320], zmm2);
        g.vmovups(zmm3, g.ptr[rdi + 192]);
        g.vfmadd231ps(zmm3, zmm1, g.ptr[rdi + 128]);
        g.vmovups(g.ptr[rdi + 384], zmm3);
        g.vbroadcastss(zmm4, g.ptr[rdi + 64 + 4]);
        g.vmovups(g.ptr[rdi + 448], zmm4);
        g.vmovdqu8(zmm5, g.ptr[rdi + 512]);
        g.vpsllw(zmm6, zmm5, 4);
        g.vmovdqu8(g.ptr[rdi + 576], zmm6);
        g.mov(eax, 0xF0F00FF0);
        g.vpbroadcastd(zmm7, eax);
        g.vpandd(zmm8, zmm5, zmm7);
        g.vmovdqu8(g.ptr[rdi + 640], zmm8);
        g.vpsllw(zmm9, zmm5, 16);  // counts above 15 give 0
        g.vmovdqu8(g.ptr[rdi + 704], zmm9);
        g.vpxord(zmm10, zmm5, zmm7);
        g.vmovdqu8(g.ptr[rdi + 768], zmm10);
        g.vzeroupper();
        g.ret();
    });
    REQUIRE(s.run(m, &io).is_ok());
    for (int i = 0; i < 16; ++i) {
        CHECK(io.cvt[i] == static_cast<float>(io.ints[i]));
        CHECK(io.mul[i] == io.x[i] * io.y[i]);
        CHECK(io.fma[i] == std::fma(io.x[i], io.y[i], io.c[i]));
        CHECK(io.bcast[i] == io.x[1]);
    }
    CHECK(io.cvt[0] == 16777216.0f);  // 2^24 + 1 rounds to even
    // The FMA is a single rounding: (1 + 2^-12)^2 - 1 keeps the 2^-24 term that a separate multiply loses.
    CHECK(io.fma[0] == std::ldexp(1.0f, -11) + std::ldexp(1.0f, -24));
    CHECK(io.mul[0] - 1.0f == std::ldexp(1.0f, -11));
    for (int i = 0; i < 32; ++i) {
        CHECK(io.shifted[i] == static_cast<uint16_t>(io.words[i] << 4));
        const uint16_t mask = (i % 2 == 0) ? 0x0FF0 : 0xF0F0;
        CHECK(io.anded[i] == (io.words[i] & mask));
        CHECK(io.shifted16[i] == 0);
        CHECK(io.xored[i] == (io.words[i] ^ mask));
    }
    CHECK(m.zmm[0][16] == 0);  // vzeroupper cleared bits 128..511 of zmm0..15
    CHECK(m.zmm[20][0] == 0);
}

// ---------------------------------------------------------------------------------------------------------------
// AMX: configuration
// ---------------------------------------------------------------------------------------------------------------

TEST_CASE("tile machine: LDTILECFG raises #GP(0) for every invalid configuration") {
    struct Case {
        const char *needle;
        std::function<void(Cfg &)> spoil;
    };
    const Case cases[] = {
        {"palette 2", [](Cfg &c) { c.bytes[0] = 2; }},
        {"reserved byte 5", [](Cfg &c) { c.bytes[5] = 1; }},
        {"colsb 65 > 64", [](Cfg &c) { c.tile(3, 4, 65); }},
        {"rows 17 > 16", [](Cfg &c) { c.tile(2, 17, 64); }},
        {"0 rows but 4 bytes", [](Cfg &c) { c.tile(1, 0, 4); }},
        {"3 rows but 0 bytes", [](Cfg &c) { c.tile(1, 3, 0); }},
        {"tile 8 does not exist", [](Cfg &c) { c.bytes[32] = 4; }},
        {"tile 12 does not exist", [](Cfg &c) { c.bytes[60] = 1; }},
    };
    for (const Case &k : cases) {
        TileMachine m;
        Cfg cfg;
        cfg.tile(0, 16, 64);
        k.spoil(cfg);
        const Cfg *arg = &cfg;
        require_fault(with_config([](Snippet &) {}).run(m, &arg), "#GP(0)", k.needle);
        CHECK_FALSE(m.tiles_configured);
    }
}

TEST_CASE("tile machine: STTILECFG, LDTILECFG palette 0 and TILERELEASE") {
    TileMachine m;
    Cfg cfg;
    cfg.tile(0, 16, 64).tile(5, 3, 12);
    cfg.bytes[1] = 2;  // start_row round-trips
    struct Io {
        const Cfg *cfg;
        alignas(64) uint8_t before[64], stored[64], after[64];
    } io{&cfg, {}, {}, {}};
    std::memset(io.before, 0xCC, 64);
    Snippet s([](Snippet &g) {
        g.sttilecfg(g.ptr[rdi + 64]);  // unconfigured: 64 zero bytes
        g.mov(rax, g.ptr[rdi]);
        g.ldtilecfg(g.ptr[rax]);
        g.sttilecfg(g.ptr[rdi + 128]);
        g.tilerelease();
        g.sttilecfg(g.ptr[rdi + 192]);
        g.ret();
    });
    REQUIRE(s.run(m, &io).is_ok());
    for (int i = 0; i < 64; ++i) {
        CHECK(io.before[i] == 0);
        CHECK(io.stored[i] == cfg.bytes[i]);
        CHECK(io.after[i] == 0);
    }
    CHECK_FALSE(m.tiles_configured);

    Cfg release(0);
    release.bytes[20] = 0xFF;  // palette 0 ignores the rest
    const Cfg *arg = &cfg;
    REQUIRE(with_config([](Snippet &) {}).run(m, &arg).is_ok());
    CHECK(m.tiles_configured);
    arg = &release;
    REQUIRE(with_config([](Snippet &) {}).run(m, &arg).is_ok());
    CHECK_FALSE(m.tiles_configured);
}

// ---------------------------------------------------------------------------------------------------------------
// AMX: loads and stores
// ---------------------------------------------------------------------------------------------------------------

TEST_CASE("tile machine: TILELOADD / TILESTORED use the SIB stride, rows and colsb of the tile") {
    TileMachine m;
    Cfg cfg;
    cfg.tile(2, 3, 12).tile(5, 3, 12);
    // Source: 3 rows of 12 bytes at a stride of 40; destination: 3 rows of 12 bytes at a stride of 12, exactly
    // sized so that a store of one byte too many is an AddressSanitizer error.
    std::vector<uint8_t> src(2 * 40 + 12), dst(3 * 12, 0xEE);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i + 1);
    struct Io {
        const Cfg *cfg;
        const uint8_t *src;
        uint8_t *dst;
    } io{&cfg, src.data(), dst.data()};
    auto s = with_config([](Snippet &g) {
        g.mov(rsi, g.ptr[rdi + 8]);
        g.mov(rdx, g.ptr[rdi + 16]);
        g.mov(r8, 10);
        g.tileloadd(g.t(2), g.ptr[rsi + r8 * 4]);  // stride = 10 << 2 = 40
        g.mov(r9, 12);
        g.tilestored(g.ptr[rdx + r9], g.t(2));
        g.tileloaddt1(g.t(5), g.ptr[rsi + r8 * 4]);  // same data, streaming hint
        g.ret();
    });
    REQUIRE(s.run(m, &io).is_ok());
    for (int r = 0; r < 16; ++r) {
        for (int c = 0; c < 64; ++c) {
            const uint8_t expect = (r < 3 && c < 12) ? src[static_cast<size_t>(r * 40 + c)] : 0;
            REQUIRE(m.tmm[2][r][c] == expect);
            REQUIRE(m.tmm[5][r][c] == expect);
        }
    }
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 12; ++c) CHECK(dst[static_cast<size_t>(r * 12 + c)] == src[static_cast<size_t>(r * 40 + c)]);

    // A SIB byte without an index register means stride 0: every row reads the same bytes.
    Cfg full;
    full.tile(0, 4, 8);
    struct Io2 {
        const Cfg *cfg;
        const uint8_t *src;
    } io2{&full, src.data()};
    auto s2 = with_config([](Snippet &g) {
        g.mov(rsi, g.ptr[rdi + 8]);
        g.raw({0xC4, 0xE2, 0x7B, 0x4B, 0x04, 0x26});  // tileloadd tmm0, [rsi] with SIB index = none
    });
    REQUIRE(s2.run(m, &io2).is_ok());
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 8; ++c) CHECK(m.tmm[0][r][c] == src[static_cast<size_t>(c)]);
}

TEST_CASE("tile machine: start_row restarts loads and stores, then is cleared") {
    TileMachine m;
    Cfg cfg;
    cfg.tile(1, 4, 8);
    cfg.bytes[1] = 2;  // start_row = 2
    std::vector<uint8_t> src(4 * 8);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(100 + i);
    struct Io {
        const Cfg *cfg;
        const uint8_t *src;
    } io{&cfg, src.data()};
    auto s = with_config([](Snippet &g) {
        g.mov(rsi, g.ptr[rdi + 8]);
        g.mov(r8, 8);
        g.tileloadd(g.t(1), g.ptr[rsi + r8]);
    });
    REQUIRE(s.run(m, &io).is_ok());
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 8; ++c) CHECK(m.tmm[1][r][c] == (r < 2 ? 0 : src[static_cast<size_t>(r * 8 + c)]));
    CHECK(m.tilecfg.start_row == 0);

    cfg.bytes[1] = 4;  // start_row >= rows
    require_fault(s.run(m, &io), "#UD", "start_row 4 >= rows 4");
}

TEST_CASE("tile machine: tile loads, stores and TILEZERO raise #UD when the SDM says so") {
    std::vector<uint8_t> buf(64 * 16);
    struct Io {
        const Cfg *cfg;
        uint8_t *buf;
    };
    auto load_tmm = [](int t) {
        return with_config([t](Snippet &g) {
            g.mov(rsi, g.ptr[rdi + 8]);
            g.mov(r8, 64);
            g.tileloadd(g.t(t), g.ptr[rsi + r8]);
        });
    };
    SECTION("tiles not configured") {
        TileMachine m;
        Snippet s([](Snippet &g) {
            g.mov(r8, 64);
            g.tileloadd(g.t(0), g.ptr[rdi + r8]);
            g.ret();
        });
        require_fault(s.run(m, buf.data()), "#UD", "not configured");
        require_fault(Snippet([](Snippet &g) { g.tilezero(g.t(3)); g.ret(); }).run(m), "#UD", "not configured");
        Snippet st([](Snippet &g) {
            g.mov(r8, 64);
            g.tilestored(g.ptr[rdi + r8], g.t(0));
            g.ret();
        });
        require_fault(st.run(m, buf.data()), "#UD", "not configured");
    }
    SECTION("a tile with 0 rows") {
        TileMachine m;
        Cfg cfg;
        cfg.tile(0, 16, 64);
        Io io{&cfg, buf.data()};
        require_fault(load_tmm(4).run(m, &io), "#UD", "tmm4 is not valid");
    }
    SECTION("colsb not a multiple of 4 (accepted by LDTILECFG, #UD at first use)") {
        TileMachine m;
        Cfg cfg;
        cfg.tile(6, 2, 6);
        Io io{&cfg, buf.data()};
        require_fault(load_tmm(6).run(m, &io), "#UD", "colsb 6 is not a multiple of 4");
    }
    SECTION("no SIB byte: Zydis 4.0 refuses the encoding, so the run stops") {
        TileMachine m;
        Cfg cfg;
        cfg.tile(0, 16, 64);
        Io io{&cfg, buf.data()};
        auto s = with_config([](Snippet &g) {
            g.mov(rsi, g.ptr[rdi + 8]);
            g.raw({0xC4, 0xE2, 0x7B, 0x4B, 0x06});  // tileloadd tmm0, [rsi] (ModRM without SIB)
        });
        require_fault(s.run(m, &io), "unsupported", "cannot decode");
    }
    SECTION("OS has not enabled tile state (XCR0)") {
        TileMachine m;
        m.xcr0_tile_state = false;
        require_fault(Snippet([](Snippet &g) { g.tilerelease(); g.ret(); }).run(m), "#UD", "XCR0");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// AMX: TMUL
// ---------------------------------------------------------------------------------------------------------------

namespace {

// Configures, runs one `tdpbssd c, a, b` (emitted with xbyak, which checks nothing) and returns the status.
Status run_tmul(TileMachine &m, const Cfg &cfg, int c, int a, int b) {
    const Cfg *arg = &cfg;
    return with_config([&](Snippet &g) { g.tdpbssd(g.t(c), g.t(a), g.t(b)); }).run(m, &arg);
}

// C = tmm0: 8 rows x 32 bytes (N = 8); A = tmm1: 8 rows x 16 bytes (K = 4 dwords); B = tmm2: 4 rows x 32 bytes.
Cfg good_tmul_cfg() {
    Cfg cfg;
    cfg.tile(0, 8, 32).tile(1, 8, 16).tile(2, 4, 32);
    return cfg;
}

}  // namespace

TEST_CASE("tile machine: TMUL #UD rules") {
    SECTION("a valid configuration runs") {
        TileMachine m;
        REQUIRE(run_tmul(m, good_tmul_cfg(), 0, 1, 2).is_ok());
    }
    SECTION("tiles not configured") {
        TileMachine m;
        require_fault(Snippet([](Snippet &g) { g.tdpbssd(g.t(0), g.t(1), g.t(2)); g.ret(); }).run(m), "#UD",
                      "not configured");
    }
    SECTION("operands not distinct") {
        // Zydis 4.0 already refuses these encodings (the run stops at decoding); the machine's own #UD check stands
        // behind it for a decoder that accepts them. Either way the run must fail and say why.
        for (const auto &ops : {std::array<int, 3>{0, 0, 2}, {0, 1, 0}, {0, 1, 1}}) {
            TileMachine m;
            const Status s = run_tmul(m, good_tmul_cfg(), ops[0], ops[1], ops[2]);
            INFO(s.message());
            REQUIRE_FALSE(s.is_ok());
            CHECK((s.message().find("not distinct") != std::string::npos ||
                   s.message().find("cannot decode") != std::string::npos));
        }
    }
    SECTION("an invalid tile") {
        TileMachine m;
        require_fault(run_tmul(m, good_tmul_cfg(), 0, 1, 5), "#UD", "B tmm5 is not valid");
    }
    SECTION("colsb % 4") {
        TileMachine m;
        Cfg cfg = good_tmul_cfg();
        cfg.tile(0, 8, 30);
        require_fault(run_tmul(m, cfg, 0, 1, 2), "#UD", "colsb 30 is not a multiple of 4");
    }
    SECTION("M: C rows != A rows") {
        TileMachine m;
        Cfg cfg = good_tmul_cfg();
        cfg.tile(1, 7, 16);
        require_fault(run_tmul(m, cfg, 0, 1, 2), "#UD", "(M)");
    }
    SECTION("N: C colsb != B colsb") {
        TileMachine m;
        Cfg cfg = good_tmul_cfg();
        cfg.tile(2, 4, 28);
        require_fault(run_tmul(m, cfg, 0, 1, 2), "#UD", "(N)");
    }
    SECTION("K: A colsb / 4 != B rows") {
        TileMachine m;
        Cfg cfg = good_tmul_cfg();
        cfg.tile(2, 5, 32);
        require_fault(run_tmul(m, cfg, 0, 1, 2), "#UD", "(K)");
    }
    SECTION("VEX.W set: Zydis 4.0 refuses the encoding, so the run stops") {
        TileMachine m;
        const Cfg cfg = good_tmul_cfg();
        const Cfg *arg = &cfg;
        auto s = with_config([](Snippet &g) { g.raw({0xC4, 0xE2, 0xCB, 0x5E, 0xC4}); });
        require_fault(s.run(m, &arg), "unsupported", "cannot decode");
    }
}

TEST_CASE("tile machine: TDPBSSD/SUD/USD/UUD signedness, partial shapes and int32 wrap-around") {
    // C tmm4: 3 rows x 5 dwords; A tmm0: 3 rows x 2 dwords (K = 8 bytes); B tmm2: 2 rows x 5 dwords.
    Cfg cfg;
    cfg.tile(4, 3, 20).tile(0, 3, 8).tile(2, 2, 20);
    int8_t a[3][8], b[2][20];
    int32_t c0[3][5];
    for (int r = 0; r < 3; ++r)
        for (int k = 0; k < 8; ++k) a[r][k] = static_cast<int8_t>(r == 0 ? -128 : (r * 37 + k * 91) % 256 - 128);
    for (int r = 0; r < 2; ++r)
        for (int k = 0; k < 20; ++k) b[r][k] = static_cast<int8_t>(r == 0 && k < 4 ? -128 : (r * 53 + k * 29) % 256 - 128);
    for (int r = 0; r < 3; ++r)
        for (int n = 0; n < 5; ++n) c0[r][n] = r == 0 && n == 0 ? INT32_MAX - 5 : (r + 1) * 1000 * (n - 2);
    struct Io {
        const Cfg *cfg;
        const void *a, *b;
        void *c;
    };
    for (int variant = 0; variant < 4; ++variant) {
        const bool sa = variant < 2, sb = variant % 2 == 0;
        int32_t c[3][5];
        std::memcpy(c, c0, sizeof c);
        Io io{&cfg, a, b, c};
        auto s = with_config([variant](Snippet &g) {
            g.mov(r8, 8);
            g.mov(r9, 20);
            g.mov(rsi, g.ptr[rdi + 8]);
            g.tileloadd(g.t(0), g.ptr[rsi + r8]);
            g.mov(rsi, g.ptr[rdi + 16]);
            g.tileloadd(g.t(2), g.ptr[rsi + r9]);
            g.mov(rsi, g.ptr[rdi + 24]);
            g.tileloadd(g.t(4), g.ptr[rsi + r9]);
            switch (variant) {
                case 0: g.tdpbssd(g.t(4), g.t(0), g.t(2)); break;
                case 1: g.tdpbsud(g.t(4), g.t(0), g.t(2)); break;
                case 2: g.tdpbusd(g.t(4), g.t(0), g.t(2)); break;
                default: g.tdpbuud(g.t(4), g.t(0), g.t(2)); break;
            }
            g.tilestored(g.ptr[rsi + r9], g.t(4));
        });
        TileMachine m;
        REQUIRE(s.run(m, &io).is_ok());
        for (int r = 0; r < 3; ++r) {
            for (int n = 0; n < 5; ++n) {
                uint32_t expect = static_cast<uint32_t>(c0[r][n]);
                for (int k = 0; k < 8; ++k) {
                    const int32_t x = sa ? a[r][k] : static_cast<uint8_t>(a[r][k]);
                    const int32_t y = sb ? b[k / 4][4 * n + k % 4] : static_cast<uint8_t>(b[k / 4][4 * n + k % 4]);
                    expect += static_cast<uint32_t>(x * y);
                }
                INFO("variant " << variant << " row " << r << " col " << n);
                CHECK(static_cast<uint32_t>(c[r][n]) == expect);
            }
        }
        // Bytes beyond C's colsb and rows beyond C's rows are zero after the TMUL.
        for (int r = 0; r < 16; ++r)
            for (int x = (r < 3 ? 20 : 0); x < 64; ++x) REQUIRE(m.tmm[4][r][x] == 0);
    }
    // The wrap-around case is really exercised: row 0, column 0 starts 5 below INT32_MAX and gains 65536 (ssd).
    CHECK(c0[0][0] == INT32_MAX - 5);
}

namespace {

// One TDPBF16PS of a 1 x 1 C (fp32) with K = 2 * kpairs bf16: A row = `a`, B column = `b`, C starts at `c0`.
float bf16_dot(const std::vector<float> &a, const std::vector<float> &b, float c0) {
    const int kpairs = static_cast<int>(a.size()) / 2;
    Cfg cfg;
    cfg.tile(4, 1, 4).tile(0, 1, 4 * kpairs).tile(2, kpairs, 4);
    std::vector<uint16_t> ab(a.size()), bb(b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        ab[i] = static_cast<uint16_t>(f32_bits(a[i]) >> 16);  // exact: the tests use bf16 values
        bb[i] = static_cast<uint16_t>(f32_bits(b[i]) >> 16);
    }
    float c = c0;
    struct Io {
        const Cfg *cfg;
        const void *a, *b;
        float *c;
    } io{&cfg, ab.data(), bb.data(), &c};
    auto s = with_config([](Snippet &g) {
        g.mov(r8, 4);
        g.mov(rsi, g.ptr[rdi + 8]);
        g.tileloadd(g.t(0), g.ptr[rsi + r8]);
        g.mov(rsi, g.ptr[rdi + 16]);
        g.tileloadd(g.t(2), g.ptr[rsi + r8]);
        g.mov(rsi, g.ptr[rdi + 24]);
        g.tileloadd(g.t(4), g.ptr[rsi + r8]);
        g.tdpbf16ps(g.t(4), g.t(0), g.t(2));
        g.tilestored(g.ptr[rsi + r8], g.t(4));
    });
    TileMachine m;
    const Status status = s.run(m, &io);
    INFO(status.message());
    REQUIRE(status.is_ok());
    return c;
}

}  // namespace

TEST_CASE("tile machine: TDPBF16PS keeps even and odd sums apart, with DAZ, FTZ and RNE") {
    const float big = std::ldexp(1.0f, 24);
    // Even lanes 2^24, 1, -2^24 in one chain: 2^24 + 1 rounds back to 2^24 (ties to even), so the sum is 0 where the
    // exact value is 1.
    CHECK(bf16_dot({big, 0, 1, 0, -big, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1}, 0.0f) == 0.0f);
    // Even lanes (2^24, -2^24) and odd lanes (1, 0) are summed apart: 0 + 1 = 1. VDPBF16PS's single chain into C
    // (odd, even, odd, even) gives 1 -> 2^24 + 1 = 2^24 -> 0 instead.
    CHECK(bf16_dot({big, 1, -big, 0}, {1, 1, 1, 1}, 0.0f) == 1.0f);
    // C joins only at the end: C = 2^24, pairs (1, 1): 2^24 + (1 + 1) = 2^24 + 2 (exact), where an FMA chain into C
    // would round after each 1.
    CHECK(bf16_dot({1, 1}, {1, 1}, big) == big + 2.0f);
    // DAZ: a subnormal bf16 input is zero even though its product with 2^100 would be normal.
    const float sub = bf16_to_f32(0x0001);
    REQUIRE(std::fpclassify(sub) == FP_SUBNORMAL);
    CHECK(bf16_dot({sub, 0}, {std::ldexp(1.0f, 100), 0}, 0.0f) == 0.0f);
    // FTZ: a subnormal result (2^-70 * 2^-60 = 2^-130) is flushed to zero.
    CHECK(bf16_dot({std::ldexp(1.0f, -70), 0}, {std::ldexp(1.0f, -60), 0}, 0.0f) == 0.0f);
    // DAZ on C: a subnormal C plus 0 is 0.
    CHECK(bf16_dot({0, 0}, {0, 0}, std::ldexp(1.0f, -140)) == 0.0f);
    // Normal values: plain fp32 arithmetic.
    CHECK(bf16_dot({1.5f, -2.0f, 0.25f, 3.0f}, {2.0f, 0.5f, 4.0f, -1.0f}, 10.0f) == 10.0f + ((3.0f + 1.0f) + (-1.0f - 3.0f)));
}

TEST_CASE("tile machine: coverage report names every executed mnemonic") {
    TileMachine m;
    REQUIRE(Snippet([](Snippet &g) { g.nop(); g.ret(); }).run(m).is_ok());
    const auto executed = m.executed_mnemonics();
    REQUIRE(executed.size() == 2);
    CHECK(executed[0].first == "nop");
    CHECK(executed[1].first == "ret");
    const auto supported = kt::test::supported_mnemonics();
    CHECK(std::find(supported.begin(), supported.end(), "tdpbf16ps") != supported.end());
    CHECK(kt::test::disassemble(reinterpret_cast<const uint8_t *>("\xC4\xE2\x78\x49\xC0\xC3"), 6) ==
          "0x0000  tilerelease\n0x0005  ret\n");
}
