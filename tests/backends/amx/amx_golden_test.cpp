// Golden disassembly listings (Intel syntax, Zydis) of one AMX kernel per code path the emitter has, plus the tile
// stubs, diffed against tests/backends/amx/golden/. A change in the generated code shows up as a reviewable diff.
//
// Regenerate only deliberately, and review the diff like code:
//     KT_UPDATE_GOLDEN=1 build/bin/kt_amx_golden_test
//
// The same kernels are also run here, each as a one-block GEMM of exactly its shape, on the tile machine, and every
// instruction of every listed kernel must have executed at least once (no dead or unverified code).
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "amx/amx_checks.h"
#include "amx/amx_test_util.h"
#include "backends/cpu/amx/amx_gemm_kernel.h"
#include "backends/cpu/amx/amx_tile_config.h"
#include "backends/cpu/jit/jit_code.h"

using namespace kt;
using namespace kt::cpu::amx;
using namespace kt::test;

namespace {

// One kernel per path of amx_gemm_kernel.cpp: whole tiles (stored straight from the tiles) and partial rows / columns
// (through the stack, masked); the A tile staged for partial rows (m < 16 and 16 < m < 32); the partial K step; a
// kernel that is only a tail step; every INT4 group size and every INT4 remainder (32, 64, 96 of a 128-K unit); the
// group-wise kernels of the GGUF formats.
const GemmKernelDesc kGolden[] = {
    {GemmKind::kS8S32, 32, 32, 256, 0},  {GemmKind::kS8S32, 7, 17, 100, 0},  {GemmKind::kS8S32, 20, 32, 64, 0},
    {GemmKind::kS8F32, 32, 32, 128, 0},  {GemmKind::kS8F32, 1, 1, 1, 0},     {GemmKind::kS4F32, 32, 32, 256, 128},
    {GemmKind::kS4F32, 16, 32, 192, 64}, {GemmKind::kS4F32, 32, 32, 128, 32}, {GemmKind::kS4F32, 7, 17, 96, 32},
    {GemmKind::kS4F32, 3, 9, 32, 32},    {GemmKind::kBf16F32, 32, 32, 64, 0}, {GemmKind::kBf16F32, 5, 20, 70, 0},
    // Group-wise: whole tiles and steps, with and without mins; partial rows, columns and a partial last step;
    // groups of 16 (four per step) with a 3-group last step.
    {GemmKind::kS8GroupF32, 32, 32, 256, 32}, {GemmKind::kS8GroupMinF32, 32, 32, 256, 32},
    {GemmKind::kS8GroupF32, 7, 17, 96, 32},   {GemmKind::kS8GroupMinF32, 20, 9, 112, 16},
    {GemmKind::kS8GroupF32, 16, 32, 64, 16},
    // A padded to whole row tiles: the partial tiles loaded directly, also in a partial K step.
    {GemmKind::kS8F32, 20, 32, 100, 0, true}, {GemmKind::kBf16F32, 7, 17, 70, 0, true},
    {GemmKind::kS4F32, 9, 32, 128, 32, true},
};

std::string golden_path(const std::string &name) { return std::string(KT_AMX_GOLDEN_DIR) + "/" + name + ".txt"; }

std::string listing(const jit::JitCode &code) {
    const std::string body = disassemble(code.code_ptr(), code.code_size());
    const size_t instructions = static_cast<size_t>(std::count(body.begin(), body.end(), '\n'));
    return "# " + code.name() + ": " + std::to_string(code.code_size()) + " bytes, " + std::to_string(instructions) +
           " instructions\n" + body;
}

void check_golden(const jit::JitCode &code) {
    const std::string got = listing(code);
    const std::string path = golden_path(code.name());
    if (const char *update = std::getenv("KT_UPDATE_GOLDEN"); update && std::string(update) == "1") {
        std::ofstream(path, std::ios::binary) << got;
        WARN("rewrote " << path);
        return;
    }
    std::ifstream in(path, std::ios::binary);
    INFO("golden listing " << path << " (create or refresh it with KT_UPDATE_GOLDEN=1, then review the diff)");
    REQUIRE(in.good());
    std::stringstream expect;
    expect << in.rdbuf();
    if (expect.str() == got) return;
    // Name the first differing line: that is where review starts.
    std::istringstream a(expect.str()), b(got);
    std::string la, lb;
    int line = 1;
    while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
    FAIL("line " << line << " differs:\n  golden:    " << la << "\n  generated: " << lb);
}

void run_shape(const GemmKernelDesc &d, uint32_t seed) {
    const Shape sh{d.m, d.n, d.k, d.group};
    switch (d.kind) {
        case GemmKind::kS8S32:
        case GemmKind::kS8F32: check_int8(sh, seed); break;
        case GemmKind::kS4F32: check_int4(sh, seed); break;
        case GemmKind::kBf16F32: check_bf16(sh, seed); break;
        case GemmKind::kS8GroupF32: check_grouped(sh, false, seed); break;
        case GemmKind::kS8GroupMinF32: check_grouped(sh, true, seed); break;
    }
}

}  // namespace

TEST_CASE("amx golden listings: one kernel per emitter path, and the tile stubs", "[amx][golden]") {
    for (const GemmKernelDesc &d : kGolden) {
        std::unique_ptr<jit::JitCode> code;
        const Status s = generate_gemm_kernel(d, &code);
        INFO(gemm_kernel_name(d) << ": " << s.message());
        REQUIRE(s.is_ok());
        check_golden(*code);
    }
    for (TileStub stub : {TileStub::kLoadConfig, TileStub::kStoreConfig, TileStub::kRelease}) {
        const jit::JitCode *code = nullptr;
        REQUIRE(tile_stub(stub, &code).is_ok());
        check_golden(*code);
    }
}

TEST_CASE("amx golden kernels compute the right results and execute every instruction", "[amx][golden]") {
    std::map<const uint8_t *, std::set<uint64_t>> coverage;
    thread_tile_machine().coverage = &coverage;
    uint32_t seed = 900;
    for (const GemmKernelDesc &d : kGolden) {
        INFO(gemm_kernel_name(d));
        run_shape(d, seed++);
        const jit::JitCode *code = nullptr;
        REQUIRE(gemm_kernel(d, &code).is_ok());
        const std::set<uint64_t> &ran = coverage[code->code_ptr()];
        // Every instruction start of the listing must have run.
        std::istringstream lines(disassemble(code->code_ptr(), code->code_size()));
        std::string line;
        size_t total = 0;
        while (std::getline(lines, line)) {
            const uint64_t offset = std::stoull(line.substr(0, line.find(' ')), nullptr, 16);
            ++total;
            INFO("instruction never executed: " << line);
            CHECK(ran.count(offset) == 1);
        }
        CHECK(ran.size() == total);
    }
    thread_tile_machine().coverage = nullptr;
    // For the record (build/bin/kt_amx_golden_test prints it): the mnemonics the kernels made the machine execute.
    std::string executed;
    for (const auto &[mnemonic, count] : thread_tile_machine().executed_mnemonics())
        executed += " " + mnemonic + ":" + std::to_string(count);
    WARN("tile machine executed" << executed);
}
