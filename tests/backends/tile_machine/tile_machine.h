// The tile machine: runs the exact bytes kt's JIT emitted, without AMX hardware.
//
// It decodes each instruction with Zydis (Debian libzydis-dev 4.0) and interprets it on a software model of the
// thread's architectural state: 16 GPRs, the flags the supported branches read, zmm0-31, k0-7, and the AMX tile
// state (TILECFG and tmm0-7) with the semantics of the SDM as summarised in shared/reference/amx-hwloc.md §4:
// LDTILECFG validation (#GP), every #UD rule of §4.4, TDPBxxD int32 wrap-around, and TDPBF16PS's separate even/odd
// fp32 sums (FMA, DAZ/FTZ, RNE) added at the end. Memory operands are real host pointers, so a stride or bounds
// bug in a kernel becomes an AddressSanitizer report; the stack is the machine's own heap buffer.
//
// The instruction subset is what kt's AMX kernels emit plus a few neighbours (see supported_mnemonics()). Anything
// else - another mnemonic, an xmm/ymm form, embedded rounding, a segment override, a jump outside the code - stops
// the run with a failure naming the instruction; nothing is skipped.
//
// Known limits of the model: subnormal results of the bf16 FMA are flushed after rounding ("tininess after
// rounding"); NaN payloads are the host's; faults are not restartable (start_row is honoured on entry only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace kt::test {

class TileMachine {
public:
    static constexpr size_t kStackBytes = 256 * 1024;
    static constexpr uint64_t kMaxInstructions = 200'000'000;

    TileMachine();

    // Calls the function at `code` (SysV: rdi = arg0) and runs it until it returns to the machine. Checks on
    // return that rsp and the callee-saved registers (rbx, rbp, r12-r15) are as they were. A fault or an
    // unsupported instruction returns INTERNAL: "<fault> at +0x<offset> (<instruction>): <reason>".
    Status call(const uint8_t *code, size_t size, uint64_t arg0);

    // ---- architectural state (public so that unit tests can set it up and inspect it) ----
    struct TileConfigState {
        uint8_t palette = 0;
        uint8_t start_row = 0;
        uint16_t colsb[8] = {};
        uint8_t rows[8] = {};
    };
    uint64_t gpr[16] = {};  // rax rcx rdx rbx rsp rbp rsi rdi r8..r15
    bool zf = false, sf = false, cf = false, of = false;
    alignas(64) uint8_t zmm[32][64] = {};
    uint64_t k[8] = {};
    bool tiles_configured = false;
    TileConfigState tilecfg;
    alignas(64) uint8_t tmm[8][16][64] = {};
    bool xcr0_tile_state = true;  // XCR0[18:17] == 11b; false: every AMX instruction raises #UD

    // When set, the offset of every executed instruction is recorded under its code's address (coverage of
    // generated code).
    std::map<const uint8_t *, std::set<uint64_t>> *coverage = nullptr;

    // Instructions executed so far, in total and per mnemonic (lower case), over all calls.
    uint64_t instructions = 0;
    std::vector<std::pair<std::string, uint64_t>> executed_mnemonics() const;

private:
    friend class Interpreter;
    std::vector<uint64_t> executed_;  // indexed by ZydisMnemonic
    std::vector<uint8_t> stack_;
};

// Mnemonics the machine implements (lower case), for coverage reports.
std::vector<std::string> supported_mnemonics();

// Intel-syntax listing, one instruction per line: "0x0012  tileloadd tmm0, [r8+r10*1]". Branch targets print as
// offsets from the start of the code. Undecodable bytes become a "(bad) xx xx ..." line.
std::string disassemble(const uint8_t *code, size_t size);

// The machine of the calling thread (tile state is per thread, as on hardware).
TileMachine &thread_tile_machine();

// Makes kt::cpu::amx run every generated function on the calling thread's tile machine (and makes
// kt::cpu::amx::available() true). uninstall: back to native execution.
void install_tile_machine_runner();
void uninstall_tile_machine_runner();

// Installs the tile machine for the lifetime of the object.
class ScopedTileMachineRunner {
public:
    ScopedTileMachineRunner() { install_tile_machine_runner(); }
    ~ScopedTileMachineRunner() { uninstall_tile_machine_runner(); }
    ScopedTileMachineRunner(const ScopedTileMachineRunner &) = delete;
    ScopedTileMachineRunner &operator=(const ScopedTileMachineRunner &) = delete;
};

}  // namespace kt::test
