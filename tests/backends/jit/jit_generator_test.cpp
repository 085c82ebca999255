// The JIT layer: errors become statuses (xbyak throws; nothing may escape), the semantic lint refuses #UD
// combinations, code memory is W^X, KT_JIT_DUMP writes the exact bytes, kernels are cached by descriptor, the
// preamble/postamble keep the SysV ABI (checked natively, since that code needs no AMX) - and the AMX tile session
// saves, loads and restores the thread's tile configuration as amx_gemm.h promises (on the tile machine).
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/amx/amx_gemm_kernel.h"
#include "backends/cpu/amx/amx_generator.h"
#include "backends/cpu/amx/amx_tile_config.h"
#include "backends/cpu/jit/jit_generator.h"
#include "backends/cpu/jit/kernel_cache.h"
#include "support/test_support.h"
#include "tile_machine/tile_machine.h"

using namespace kt;
using namespace kt::cpu::amx;

namespace {

// A generator whose body is a lambda.
class LambdaGenerator : public jit::JitGenerator {
public:
    LambdaGenerator(std::string name, std::function<void(LambdaGenerator &)> body, size_t max_size = 4096)
        : JitGenerator(std::move(name), max_size), body_(std::move(body)) {}
    using JitGenerator::postamble;
    using JitGenerator::preamble;

private:
    void generate() override { body_(*this); }
    std::function<void(LambdaGenerator &)> body_;
};

// An AMX generator under a custom tile configuration whose body is a lambda.
class LintProbe : public AmxGenerator {
public:
    LintProbe(const TileConfig &cfg, std::function<void(LintProbe &)> body)
        : AmxGenerator("lint_probe", cfg), body_(std::move(body)) {}
    using AmxGenerator::tile_dp;
    using AmxGenerator::tile_load;
    using AmxGenerator::tile_store;
    using AmxGenerator::tile_zero;

private:
    void generate() override {
        body_(*this);
        ret();
    }
    std::function<void(LintProbe &)> body_;
};

TileConfig config_with(std::initializer_list<std::array<int, 3>> tiles) {
    TileConfig c;
    c.palette_id = 1;
    for (const auto &t : tiles) {
        c.rows[t[0]] = static_cast<uint8_t>(t[1]);
        c.colsb[t[0]] = static_cast<uint16_t>(t[2]);
    }
    return c;
}

Status lint(const TileConfig &cfg, std::function<void(LintProbe &)> body) {
    std::unique_ptr<jit::JitCode> code;
    return jit::build<LintProbe>(&code, cfg, std::move(body));
}

void require_lint_error(const Status &s, const char *needle) {
    INFO(s.message());
    REQUIRE(s.code() == KT_STATUS_INTERNAL);
    CHECK(s.message().find(needle) != std::string::npos);
    CHECK(s.message().find("lint_probe") != std::string::npos);
}

// "r-xp" etc. for the mapping that contains `p`.
std::string protection_of(const void *p) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    const auto addr = reinterpret_cast<uintptr_t>(p);
    while (std::getline(maps, line)) {
        uintptr_t lo = 0, hi = 0;
        char perms[8] = {};
        if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= addr && addr < hi) return perms;
    }
    return "";
}

}  // namespace

TEST_CASE("jit: xbyak errors become statuses, never exceptions") {
    std::unique_ptr<jit::JitCode> code;
    const Status too_big = jit::build<LambdaGenerator>(
        &code, "too_big",
        [](LambdaGenerator &g) {
            for (int i = 0; i < 1000; ++i) g.nop();
        },
        64);
    INFO(too_big.message());
    CHECK(too_big.code() == KT_STATUS_INTERNAL);
    CHECK(too_big.message().find("too_big") != std::string::npos);
    CHECK(code == nullptr);

    const Status label = jit::build<LambdaGenerator>(&code, "undefined_label", [](LambdaGenerator &g) {
        Xbyak::Label nowhere;
        g.jmp(nowhere);
    });
    INFO(label.message());
    CHECK(label.code() == KT_STATUS_INTERNAL);
    CHECK(label.message().find("label") != std::string::npos);

    const Status tile_no_index = jit::build<LambdaGenerator>(&code, "tileload_without_index", [](LambdaGenerator &g) {
        g.tileloadd(Xbyak::Tmm(0), g.ptr[g.rsi]);  // xbyak throws "not supported" (reference §1.5)
    });
    CHECK(tile_no_index.code() == KT_STATUS_INTERNAL);
}

TEST_CASE("jit: the semantic lint refuses operand combinations that raise #UD") {
    const TileConfig good = config_with({{0, 8, 32}, {1, 8, 16}, {2, 4, 32}});  // C, A (K = 4), B
    REQUIRE(lint(good, [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBssd, 0, 1, 2); }).is_ok());
    REQUIRE(lint(good, [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBf16ps, 0, 1, 2); }).is_ok());

    require_lint_error(lint(good, [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBssd, 0, 0, 2); }), "distinct");
    require_lint_error(lint(good, [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBusd, 0, 1, 0); }), "distinct");
    require_lint_error(lint(good, [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBuud, 0, 1, 1); }), "distinct");
    require_lint_error(lint(good, [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBssd, 0, 1, 5); }),
                       "tmm5 is not configured");
    require_lint_error(lint(config_with({{0, 8, 32}, {1, 7, 16}, {2, 4, 32}}),
                            [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBssd, 0, 1, 2); }),
                       "rows");  // M
    require_lint_error(lint(config_with({{0, 8, 32}, {1, 8, 16}, {2, 4, 28}}),
                            [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBsud, 0, 1, 2); }),
                       "bytes per row");  // N
    require_lint_error(lint(config_with({{0, 8, 32}, {1, 8, 16}, {2, 5, 32}}),
                            [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBf16ps, 0, 1, 2); }),
                       "colsb/4");  // K
    require_lint_error(lint(config_with({{0, 8, 30}, {1, 8, 16}, {2, 4, 30}}),
                            [](LintProbe &g) { g.tile_dp(AmxGenerator::Tdp::kBssd, 0, 1, 2); }),
                       "multiple of 4");
    // Loads and stores: configured tile, colsb % 4, a real index register for the stride.
    require_lint_error(lint(good, [](LintProbe &g) { g.tile_load(4, g.rsi, g.r8); }), "tmm4 is not configured");
    require_lint_error(lint(config_with({{3, 2, 6}}), [](LintProbe &g) { g.tile_store(3, g.rsi, g.r8); }),
                       "multiple of 4");
    require_lint_error(lint(good, [](LintProbe &g) { g.tile_load(0, g.rsi, g.rsp); }), "rsp cannot be the stride");
    require_lint_error(lint(good, [](LintProbe &g) { g.tile_store(0, g.rsi, g.rsi); }), "also serves as the stride");
    require_lint_error(lint(good, [](LintProbe &g) { g.tile_zero(7); }), "tmm7 is not configured");
    // An invalid configuration is refused before anything is emitted.
    require_lint_error(lint(config_with({{0, 17, 64}}), [](LintProbe &) {}), "rows 17");
    TileConfig released;
    require_lint_error(lint(released, [](LintProbe &) {}), "palette 1");
}

TEST_CASE("jit: code memory is never writable and executable at once") {
    const jit::JitCode *code = nullptr;
    REQUIRE(gemm_kernel({GemmKind::kS8S32, 32, 32, 128, 0}, &code).is_ok());
    const std::string perms = protection_of(code->code_ptr());
    INFO("mapping of the kernel: " << perms);
    REQUIRE(perms.size() >= 3);
    CHECK(perms[0] == 'r');
    CHECK(perms[1] == '-');
    CHECK(perms[2] == 'x');
}

TEST_CASE("jit: KT_JIT_DUMP=1 writes each kernel's exact bytes") {
    test::TempDir dir;
    setenv("KT_JIT_DUMP", "1", 1);
    setenv("KT_JIT_DUMP_DIR", dir.path().c_str(), 1);
    std::unique_ptr<jit::JitCode> code;
    const Status s = generate_gemm_kernel({GemmKind::kBf16F32, 5, 20, 70, 0}, &code);
    unsetenv("KT_JIT_DUMP");
    unsetenv("KT_JIT_DUMP_DIR");
    REQUIRE(s.is_ok());
    const auto bytes = test::read_file(dir.file("kt_jit_amx_gemm_bf16f32_m5_n20_k70.bin"));
    REQUIRE(bytes.size() == code->code_size());
    CHECK(std::memcmp(bytes.data(), code->code_ptr(), bytes.size()) == 0);
}

TEST_CASE("jit: kernels are cached by descriptor, and bad descriptors are refused") {
    const jit::JitCode *a = nullptr, *b = nullptr, *c = nullptr;
    REQUIRE(gemm_kernel({GemmKind::kS8F32, 7, 9, 65, 0}, &a).is_ok());
    REQUIRE(gemm_kernel({GemmKind::kS8F32, 7, 9, 65, 0}, &b).is_ok());
    REQUIRE(gemm_kernel({GemmKind::kS8F32, 7, 9, 66, 0}, &c).is_ok());
    CHECK(a == b);
    CHECK(a != c);
    CHECK(a->name() == "amx_gemm_s8f32_m7_n9_k65");
    const jit::JitCode *bad = nullptr;
    CHECK(gemm_kernel({GemmKind::kS8S32, 0, 32, 64, 0}, &bad).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gemm_kernel({GemmKind::kS8S32, 33, 32, 64, 0}, &bad).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gemm_kernel({GemmKind::kS8S32, 32, 33, 64, 0}, &bad).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gemm_kernel({GemmKind::kS8S32, 32, 32, 0, 0}, &bad).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gemm_kernel({GemmKind::kS8S32, 32, 32, 64, 32}, &bad).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gemm_kernel({GemmKind::kS4F32, 32, 32, 96, 64}, &bad).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gemm_kernel({GemmKind::kS4F32, 32, 32, 96, 48}, &bad).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(gemm_kernel({static_cast<GemmKind>(7), 32, 32, 64, 0}, &bad).code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(bad == nullptr);
}

TEST_CASE("jit: preamble and postamble keep the SysV ABI (run natively)") {
    // Clobbers every callee-saved register, uses an aligned stack frame and returns a value computed through it.
    std::unique_ptr<jit::JitCode> code;
    REQUIRE(jit::build<LambdaGenerator>(&code, "abi_probe", [](LambdaGenerator &g) {
                g.preamble(200, 64);
                for (const Xbyak::Reg64 &r : {g.rbx, g.r12, g.r13, g.r14, g.r15}) g.mov(r, -1);
                g.mov(g.qword[g.rsp + 192], g.rdi);
                g.mov(g.rax, g.rsp);
                g.and_(g.rax, 63);  // 0 when the frame is 64-byte aligned
                g.add(g.rax, g.qword[g.rsp + 192]);
                g.postamble(false);
            }).is_ok());
    auto fn = code->entry<uint64_t (*)(uint64_t)>();
    CHECK(fn(41) == 41);
    CHECK(fn(7) == 7);
    // The tile machine agrees (and checks the callee-saved registers itself).
    test::TileMachine m;
    REQUIRE(m.call(code->code_ptr(), code->code_size(), 41).is_ok());
    CHECK(m.gpr[0] == 41);
}

// ---------------------------------------------------------------------------------------------------------------
// Tile sessions (on the tile machine: its per-thread state stands for the hardware's)
// ---------------------------------------------------------------------------------------------------------------

TEST_CASE("amx tile session: a thread without tiles gets kt's palette, then its tiles released") {
    test::ScopedTileMachineRunner runner;
    test::TileMachine &m = test::thread_tile_machine();
    REQUIRE_FALSE(m.tiles_configured);
    TileSession session;
    REQUIRE(session.configure().is_ok());
    CHECK(session.active());
    CHECK(m.tiles_configured);
    for (int t = 0; t < kNumTiles; ++t) {
        CHECK(m.tilecfg.rows[t] == kMaxTileRows);
        CHECK(m.tilecfg.colsb[t] == kMaxTileColsb);
    }
    REQUIRE(session.configure().is_ok());  // already active: nothing to do
    REQUIRE(session.end().is_ok());
    CHECK_FALSE(m.tiles_configured);  // TILERELEASE
    REQUIRE(session.end().is_ok());   // idempotent
}

TEST_CASE("amx tile session: the caller's own configuration is restored") {
    test::ScopedTileMachineRunner runner;
    test::TileMachine &m = test::thread_tile_machine();
    m.tiles_configured = true;
    m.tilecfg = {};
    m.tilecfg.palette = 1;
    m.tilecfg.rows[2] = 3;
    m.tilecfg.colsb[2] = 12;
    const auto before = m.tilecfg;
    {
        TileSession session;
        REQUIRE(session.configure().is_ok());
        CHECK(m.tilecfg.rows[2] == kMaxTileRows);
        // The destructor restores when end() was not called.
    }
    CHECK(m.tiles_configured);
    CHECK(std::memcmp(&m.tilecfg, &before, sizeof before) == 0);

    // A GEMM without a session brackets itself the same way.
    const PackedBDesc desc{WeightType::kInt8, 16, 64, 0};
    size_t size = 0;
    REQUIRE(packed_b_size(desc, &size).is_ok());
    std::vector<int8_t> w(16 * 64, 1), a(64, 2);
    std::vector<float> scale(16, 1.0f);
    alignas(64) static uint8_t packed[16 * 1024];
    REQUIRE(size <= sizeof packed);
    REQUIRE(pack_b_int8(desc, w.data(), 64, scale.data(), packed, size).is_ok());
    std::vector<int32_t> c(16);
    REQUIRE(gemm_s8_s32(nullptr, {desc, packed}, 1, 0, 16, a.data(), 64, c.data(), 16).is_ok());
    CHECK(c[0] == 128);
    CHECK(std::memcmp(&m.tilecfg, &before, sizeof before) == 0);
    m.tiles_configured = false;
    m.tilecfg = {};
}

TEST_CASE("amx tile session: belongs to the thread that created it") {
    test::ScopedTileMachineRunner runner;
    TileSession session;
    Status other;
    std::thread t([&] { other = session.configure(); });
    t.join();
    CHECK(other.code() == KT_STATUS_MISUSE);
    CHECK_FALSE(session.active());
}
