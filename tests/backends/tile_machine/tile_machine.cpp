#include "tile_machine.h"

#include <Zydis/Zydis.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>

#include "backends/cpu/amx/amx_gemm.h"
#include "backends/cpu/jit/jit_code.h"
#include "core/fp16.h"

namespace kt::test {
namespace {

// ---- faults and decoding -------------------------------------------------------------------------------------

struct Fault {
    std::string kind;  // "#UD", "#GP(0)", "#PF", "unsupported", "bad control flow", "limit"
    std::string reason;
};

[[noreturn]] void fault(const char *kind, std::string reason) { throw Fault{kind, std::move(reason)}; }

std::string strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::string s = kt::vformat(fmt, args);
    va_end(args);
    return s;
}

constexpr uint64_t kReturnSentinel = 0x7E7E00005E170001ull;  // the machine's return address: not in any code
constexpr uint64_t kNullPage = 0x10000;                       // accesses below this are reported as #PF

const ZydisDecoder &decoder() {
    static const ZydisDecoder d = [] {
        ZydisDecoder dec;
        ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
        return dec;
    }();
    return d;
}

const ZydisFormatter &formatter() {
    static const ZydisFormatter f = [] {
        ZydisFormatter fmt;
        ZydisFormatterInit(&fmt, ZYDIS_FORMATTER_STYLE_INTEL);
        return fmt;
    }();
    return f;
}

struct Decoded {
    ZydisDecodedInstruction ins;
    ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
    // The explicit operands in order, without the EVEX mask operand (its state is in ins.avx.mask).
    const ZydisDecodedOperand *op[ZYDIS_MAX_OPERAND_COUNT] = {};
    int n_op = 0;
};

// `offset`: where the instruction sits in its code, so that branch targets print as offsets too.
std::string format(const Decoded &d, uint64_t offset) {
    char buf[256];
    if (!ZYAN_SUCCESS(ZydisFormatterFormatInstruction(&formatter(), &d.ins, d.ops, d.ins.operand_count_visible, buf,
                                                      sizeof buf, offset, nullptr)))
        return "(unformattable)";
    return buf;
}

bool decode(const uint8_t *code, size_t size, size_t offset, Decoded *out) {
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder(), code + offset, size - offset, &out->ins, out->ops)))
        return false;
    out->n_op = 0;
    for (int i = 0; i < out->ins.operand_count; ++i) {
        const ZydisDecodedOperand &o = out->ops[i];
        if (o.visibility == ZYDIS_OPERAND_VISIBILITY_HIDDEN) continue;
        if (o.encoding == ZYDIS_OPERAND_ENCODING_MASK) continue;
        out->op[out->n_op++] = &o;
    }
    return true;
}

uint64_t width_mask(int bits) { return bits >= 64 ? ~0ull : (1ull << bits) - 1; }

// ---- bf16 arithmetic of TDPBF16PS: DAZ on inputs, FTZ on outputs, RNE ----------------------------------------

float flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
float fma_daz_ftz(float a, float b, float c) { return flush(std::fma(flush(a), flush(b), flush(c))); }
float add_daz_ftz(float a, float b) { return flush(flush(a) + flush(b)); }

// ---- the mnemonics implemented -------------------------------------------------------------------------------

constexpr ZydisMnemonic kSupported[] = {
    // general purpose
    ZYDIS_MNEMONIC_MOV, ZYDIS_MNEMONIC_LEA, ZYDIS_MNEMONIC_ADD, ZYDIS_MNEMONIC_SUB, ZYDIS_MNEMONIC_AND,
    ZYDIS_MNEMONIC_OR, ZYDIS_MNEMONIC_XOR, ZYDIS_MNEMONIC_CMP, ZYDIS_MNEMONIC_TEST, ZYDIS_MNEMONIC_INC,
    ZYDIS_MNEMONIC_DEC, ZYDIS_MNEMONIC_NEG, ZYDIS_MNEMONIC_SHL, ZYDIS_MNEMONIC_SHR, ZYDIS_MNEMONIC_SAR,
    ZYDIS_MNEMONIC_IMUL, ZYDIS_MNEMONIC_PUSH, ZYDIS_MNEMONIC_POP, ZYDIS_MNEMONIC_JMP, ZYDIS_MNEMONIC_JZ,
    ZYDIS_MNEMONIC_JNZ, ZYDIS_MNEMONIC_JB, ZYDIS_MNEMONIC_JNB, ZYDIS_MNEMONIC_JBE, ZYDIS_MNEMONIC_JNBE,
    ZYDIS_MNEMONIC_JL, ZYDIS_MNEMONIC_JNL, ZYDIS_MNEMONIC_JLE, ZYDIS_MNEMONIC_JNLE, ZYDIS_MNEMONIC_JS,
    ZYDIS_MNEMONIC_JNS, ZYDIS_MNEMONIC_RET, ZYDIS_MNEMONIC_NOP,
    // AVX-512 (zmm forms only) and opmasks
    ZYDIS_MNEMONIC_VZEROUPPER, ZYDIS_MNEMONIC_VMOVDQU8, ZYDIS_MNEMONIC_VMOVDQU32, ZYDIS_MNEMONIC_VMOVUPS,
    ZYDIS_MNEMONIC_VPXORD, ZYDIS_MNEMONIC_VPANDD, ZYDIS_MNEMONIC_VPSLLW, ZYDIS_MNEMONIC_VPBROADCASTD,
    ZYDIS_MNEMONIC_VBROADCASTSS, ZYDIS_MNEMONIC_VCVTDQ2PS, ZYDIS_MNEMONIC_VMULPS, ZYDIS_MNEMONIC_VFMADD231PS,
    ZYDIS_MNEMONIC_KMOVW, ZYDIS_MNEMONIC_KMOVD, ZYDIS_MNEMONIC_KMOVQ,
    // AMX-TILE, AMX-INT8, AMX-BF16
    ZYDIS_MNEMONIC_LDTILECFG, ZYDIS_MNEMONIC_STTILECFG, ZYDIS_MNEMONIC_TILERELEASE, ZYDIS_MNEMONIC_TILEZERO,
    ZYDIS_MNEMONIC_TILELOADD, ZYDIS_MNEMONIC_TILELOADDT1, ZYDIS_MNEMONIC_TILESTORED, ZYDIS_MNEMONIC_TDPBSSD,
    ZYDIS_MNEMONIC_TDPBSUD, ZYDIS_MNEMONIC_TDPBUSD, ZYDIS_MNEMONIC_TDPBUUD, ZYDIS_MNEMONIC_TDPBF16PS,
};

}  // namespace

// ---- the interpreter -----------------------------------------------------------------------------------------

class Interpreter {
public:
    Interpreter(TileMachine &m, const uint8_t *code, size_t size)
        : m_(m), code_(code), size_(size), slot_(size, -1) {}

    // Runs until the function returns to the machine. Throws Fault; `where()` then names the instruction.
    void run() {
        for (uint64_t count = 0;; ++count) {
            if (count >= TileMachine::kMaxInstructions)
                fault("limit", strf("more than %llu instructions", (unsigned long long)TileMachine::kMaxInstructions));
            if (rip_ >= size_) fault("bad control flow", strf("execution left the code at +0x%llx", (unsigned long long)rip_));
            cur_ = &fetch(rip_);
            if (m_.coverage) (*m_.coverage)[code_].insert(rip_);
            next_ = rip_ + cur_->ins.length;
            exec(*cur_);
            ++m_.instructions;
            ++m_.executed_[cur_->ins.mnemonic];
            if (returned_) return;
            rip_ = next_;
        }
    }

    std::string where() const {
        return strf("+0x%04llx (%s)", (unsigned long long)rip_, cur_ ? format(*cur_, rip_).c_str() : "?");
    }

private:
    const Decoded &fetch(uint64_t offset) {
        if (slot_[offset] < 0) {
            // Decoded in place: its operand pointers point into itself, and a deque never moves its elements.
            Decoded &d = decoded_.emplace_back();
            if (!decode(code_, size_, offset, &d)) {
                decoded_.pop_back();
                cur_ = nullptr;
                std::string bytes;
                for (size_t i = offset; i < std::min(size_, static_cast<size_t>(offset) + 15); ++i)
                    bytes += strf(" %02x", code_[i]);
                fault("unsupported", strf("cannot decode the bytes at +0x%llx:%s", (unsigned long long)offset,
                                          bytes.c_str()));
            }
            slot_[offset] = static_cast<int32_t>(decoded_.size() - 1);
        }
        return decoded_[static_cast<size_t>(slot_[offset])];
    }

    [[noreturn]] void unsupported(const char *why) { fault("unsupported", why); }

    // ---- general purpose registers ----

    static bool is_gpr(ZydisRegister r) {
        const ZydisRegisterClass c = ZydisRegisterGetClass(r);
        return c == ZYDIS_REGCLASS_GPR8 || c == ZYDIS_REGCLASS_GPR16 || c == ZYDIS_REGCLASS_GPR32 ||
               c == ZYDIS_REGCLASS_GPR64;
    }

    int gpr_index(ZydisRegister r) {
        if (!is_gpr(r)) unsupported("a general purpose register was expected");
        if (r == ZYDIS_REGISTER_AH || r == ZYDIS_REGISTER_CH || r == ZYDIS_REGISTER_DH || r == ZYDIS_REGISTER_BH)
            unsupported("high-byte registers are not modelled");
        return ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, r) - ZYDIS_REGISTER_RAX;
    }

    uint64_t read_gpr(ZydisRegister r) {
        return m_.gpr[gpr_index(r)] & width_mask(ZydisRegisterGetWidth(ZYDIS_MACHINE_MODE_LONG_64, r));
    }

    void write_gpr(ZydisRegister r, uint64_t v) {
        const int bits = ZydisRegisterGetWidth(ZYDIS_MACHINE_MODE_LONG_64, r);
        uint64_t &g = m_.gpr[gpr_index(r)];
        if (bits == 64 || bits == 32) {
            g = v & width_mask(bits);  // 32-bit writes zero the upper half
        } else {
            g = (g & ~width_mask(bits)) | (v & width_mask(bits));
        }
    }

    // ---- memory ----

    uint64_t address(const ZydisDecodedOperand &o) {
        if (o.type != ZYDIS_OPERAND_TYPE_MEMORY) unsupported("a memory operand was expected");
        if (o.mem.type != ZYDIS_MEMOP_TYPE_MEM && o.mem.type != ZYDIS_MEMOP_TYPE_AGEN)
            unsupported("this kind of memory operand is not modelled");
        if (o.mem.segment == ZYDIS_REGISTER_FS || o.mem.segment == ZYDIS_REGISTER_GS)
            unsupported("segment overrides are not modelled");
        if (cur_->ins.address_width != 64) unsupported("32-bit addressing is not modelled");
        uint64_t a = 0;
        if (o.mem.base == ZYDIS_REGISTER_RIP) {
            a = reinterpret_cast<uint64_t>(code_) + next_;
        } else if (o.mem.base != ZYDIS_REGISTER_NONE) {
            a = read_gpr(o.mem.base);
        }
        if (o.mem.index != ZYDIS_REGISTER_NONE) a += read_gpr(o.mem.index) * o.mem.scale;
        if (o.mem.disp.has_displacement) a += static_cast<uint64_t>(o.mem.disp.value);
        return a;
    }

    void check_access(uint64_t a) {
        if (a < kNullPage) fault("#PF", strf("access to address 0x%llx", (unsigned long long)a));
    }
    void load(uint64_t a, void *dst, size_t n) {
        check_access(a);
        std::memcpy(dst, reinterpret_cast<const void *>(a), n);
    }
    void store(uint64_t a, const void *src, size_t n) {
        check_access(a);
        std::memcpy(reinterpret_cast<void *>(a), src, n);
    }

    // ---- integer operands ----

    uint64_t read_int(const ZydisDecodedOperand &o, int bits) {
        switch (o.type) {
            case ZYDIS_OPERAND_TYPE_REGISTER: return read_gpr(o.reg.value) & width_mask(bits);
            case ZYDIS_OPERAND_TYPE_IMMEDIATE:
                return (o.imm.is_signed ? static_cast<uint64_t>(o.imm.value.s) : o.imm.value.u) & width_mask(bits);
            case ZYDIS_OPERAND_TYPE_MEMORY: {
                uint64_t v = 0;
                load(address(o), &v, static_cast<size_t>(bits / 8));
                return v;
            }
            default: unsupported("an integer operand was expected");
        }
    }

    void write_int(const ZydisDecodedOperand &o, int bits, uint64_t v) {
        if (o.type == ZYDIS_OPERAND_TYPE_REGISTER) {
            write_gpr(o.reg.value, v);
        } else if (o.type == ZYDIS_OPERAND_TYPE_MEMORY) {
            store(address(o), &v, static_cast<size_t>(bits / 8));
        } else {
            unsupported("an integer destination was expected");
        }
    }

    void set_zs(uint64_t r, int bits) {
        m_.zf = (r & width_mask(bits)) == 0;
        m_.sf = (r >> (bits - 1)) & 1;
    }

    void push64(uint64_t v) {
        m_.gpr[4] -= 8;
        store(m_.gpr[4], &v, 8);
    }
    uint64_t pop64() {
        uint64_t v;
        load(m_.gpr[4], &v, 8);
        m_.gpr[4] += 8;
        return v;
    }

    void need_ops(int n) {
        if (cur_->n_op != n) unsupported("this operand form is not modelled");
    }

    void jump_relative(const ZydisDecodedOperand &o) {
        if (o.type != ZYDIS_OPERAND_TYPE_IMMEDIATE || !o.imm.is_relative) unsupported("indirect jumps are not modelled");
        const int64_t target = static_cast<int64_t>(next_) + o.imm.value.s;
        if (target < 0 || static_cast<uint64_t>(target) >= size_)
            fault("bad control flow", strf("jump to +0x%llx, outside the %zu-byte code", (long long)target, size_));
        next_ = static_cast<uint64_t>(target);
    }

    void exec_integer(const Decoded &d) {
        const ZydisMnemonic mn = d.ins.mnemonic;
        switch (mn) {
            case ZYDIS_MNEMONIC_MOV: {
                need_ops(2);
                const int bits = d.op[0]->size;
                write_int(*d.op[0], bits, read_int(*d.op[1], bits));
                return;
            }
            case ZYDIS_MNEMONIC_LEA: {
                need_ops(2);
                write_gpr(d.op[0]->reg.value, address(*d.op[1]));
                return;
            }
            case ZYDIS_MNEMONIC_ADD:
            case ZYDIS_MNEMONIC_SUB:
            case ZYDIS_MNEMONIC_CMP:
            case ZYDIS_MNEMONIC_AND:
            case ZYDIS_MNEMONIC_OR:
            case ZYDIS_MNEMONIC_XOR:
            case ZYDIS_MNEMONIC_TEST: {
                need_ops(2);
                const int bits = d.op[0]->size;
                const uint64_t mask = width_mask(bits), sign = 1ull << (bits - 1);
                const uint64_t a = read_int(*d.op[0], bits), b = read_int(*d.op[1], bits);
                uint64_t r = 0;
                if (mn == ZYDIS_MNEMONIC_ADD) {
                    r = (a + b) & mask;
                    m_.cf = r < a;
                    m_.of = ((a ^ r) & (b ^ r) & sign) != 0;
                } else if (mn == ZYDIS_MNEMONIC_SUB || mn == ZYDIS_MNEMONIC_CMP) {
                    r = (a - b) & mask;
                    m_.cf = a < b;
                    m_.of = ((a ^ b) & (a ^ r) & sign) != 0;
                } else {
                    r = mn == ZYDIS_MNEMONIC_OR ? (a | b) : mn == ZYDIS_MNEMONIC_XOR ? (a ^ b) : (a & b);
                    m_.cf = m_.of = false;
                }
                set_zs(r, bits);
                if (mn != ZYDIS_MNEMONIC_CMP && mn != ZYDIS_MNEMONIC_TEST) write_int(*d.op[0], bits, r);
                return;
            }
            case ZYDIS_MNEMONIC_INC:
            case ZYDIS_MNEMONIC_DEC:
            case ZYDIS_MNEMONIC_NEG: {
                need_ops(1);
                const int bits = d.op[0]->size;
                const uint64_t mask = width_mask(bits), sign = 1ull << (bits - 1);
                const uint64_t a = read_int(*d.op[0], bits);
                uint64_t r;
                if (mn == ZYDIS_MNEMONIC_INC) {
                    r = (a + 1) & mask;
                    m_.of = r == sign;
                } else if (mn == ZYDIS_MNEMONIC_DEC) {
                    r = (a - 1) & mask;
                    m_.of = a == sign;
                } else {
                    r = (0 - a) & mask;
                    m_.cf = a != 0;
                    m_.of = a == sign;
                }
                set_zs(r, bits);
                write_int(*d.op[0], bits, r);
                return;
            }
            case ZYDIS_MNEMONIC_SHL:
            case ZYDIS_MNEMONIC_SHR:
            case ZYDIS_MNEMONIC_SAR: {
                need_ops(2);
                const int bits = d.op[0]->size;
                const uint64_t mask = width_mask(bits);
                const unsigned count = static_cast<unsigned>(read_int(*d.op[1], 8) & (bits == 64 ? 63 : 31));
                const uint64_t a = read_int(*d.op[0], bits);
                if (count == 0) return;  // flags unchanged
                uint64_t r;
                if (mn == ZYDIS_MNEMONIC_SHL) {
                    r = count >= 64 ? 0 : (a << count) & mask;
                    m_.cf = count <= static_cast<unsigned>(bits) && ((a >> (bits - count)) & 1);
                    m_.of = count == 1 && (((r >> (bits - 1)) & 1) != m_.cf);
                } else if (mn == ZYDIS_MNEMONIC_SHR) {
                    r = a >> count;
                    m_.cf = (a >> (count - 1)) & 1;
                    m_.of = count == 1 && ((a >> (bits - 1)) & 1);
                } else {
                    const int64_t s = static_cast<int64_t>(a << (64 - bits)) >> (64 - bits);
                    r = static_cast<uint64_t>(s >> count) & mask;
                    m_.cf = (static_cast<uint64_t>(s) >> (count - 1)) & 1;
                    m_.of = false;
                }
                set_zs(r, bits);
                write_int(*d.op[0], bits, r);
                return;
            }
            case ZYDIS_MNEMONIC_IMUL: {
                if (d.n_op != 2 && d.n_op != 3) unsupported("one-operand imul is not modelled");
                const int bits = d.op[0]->size;
                const int64_t a = static_cast<int64_t>(read_int(*d.op[d.n_op == 2 ? 0 : 1], bits) << (64 - bits)) >>
                                  (64 - bits);
                const int64_t b = static_cast<int64_t>(read_int(*d.op[d.n_op - 1], bits) << (64 - bits)) >>
                                  (64 - bits);
                __int128 full = static_cast<__int128>(a) * b;
                const uint64_t r = static_cast<uint64_t>(full) & width_mask(bits);
                const int64_t back = static_cast<int64_t>(r << (64 - bits)) >> (64 - bits);
                m_.cf = m_.of = static_cast<__int128>(back) != full;
                set_zs(r, bits);
                write_int(*d.op[0], bits, r);
                return;
            }
            case ZYDIS_MNEMONIC_PUSH:
                need_ops(1);
                if (d.op[0]->type == ZYDIS_OPERAND_TYPE_REGISTER && d.op[0]->size != 64)
                    unsupported("only 64-bit pushes are modelled");
                push64(read_int(*d.op[0], 64));
                return;
            case ZYDIS_MNEMONIC_POP:
                need_ops(1);
                if (d.op[0]->type != ZYDIS_OPERAND_TYPE_REGISTER || d.op[0]->size != 64)
                    unsupported("only pops into 64-bit registers are modelled");
                write_gpr(d.op[0]->reg.value, pop64());
                return;
            case ZYDIS_MNEMONIC_RET: {
                if (d.n_op != 0) unsupported("ret imm16 is not modelled");
                const uint64_t target = pop64();
                if (target != kReturnSentinel)
                    fault("bad control flow", strf("return to 0x%llx, not to the caller", (unsigned long long)target));
                returned_ = true;
                return;
            }
            case ZYDIS_MNEMONIC_JMP: need_ops(1); jump_relative(*d.op[0]); return;
            case ZYDIS_MNEMONIC_NOP: return;
            default: break;
        }
        // Conditional branches.
        bool taken;
        switch (mn) {
            case ZYDIS_MNEMONIC_JZ: taken = m_.zf; break;
            case ZYDIS_MNEMONIC_JNZ: taken = !m_.zf; break;
            case ZYDIS_MNEMONIC_JB: taken = m_.cf; break;
            case ZYDIS_MNEMONIC_JNB: taken = !m_.cf; break;
            case ZYDIS_MNEMONIC_JBE: taken = m_.cf || m_.zf; break;
            case ZYDIS_MNEMONIC_JNBE: taken = !m_.cf && !m_.zf; break;
            case ZYDIS_MNEMONIC_JL: taken = m_.sf != m_.of; break;
            case ZYDIS_MNEMONIC_JNL: taken = m_.sf == m_.of; break;
            case ZYDIS_MNEMONIC_JLE: taken = m_.zf || m_.sf != m_.of; break;
            case ZYDIS_MNEMONIC_JNLE: taken = !m_.zf && m_.sf == m_.of; break;
            case ZYDIS_MNEMONIC_JS: taken = m_.sf; break;
            case ZYDIS_MNEMONIC_JNS: taken = !m_.sf; break;
            default: unsupported("this instruction is not in the tile machine's subset");
        }
        need_ops(1);
        const uint64_t fallthrough = next_;
        jump_relative(*d.op[0]);  // validates the target even when not taken
        if (!taken) next_ = fallthrough;
    }

    // ---- AVX-512 ----

    int zmm_index(const ZydisDecodedOperand &o) {
        if (o.type != ZYDIS_OPERAND_TYPE_REGISTER || ZydisRegisterGetClass(o.reg.value) != ZYDIS_REGCLASS_ZMM)
            unsupported("only zmm vector operands are modelled");
        return ZydisRegisterGetId(o.reg.value);
    }

    int mask_index(const ZydisDecodedOperand &o) {
        if (o.type != ZYDIS_OPERAND_TYPE_REGISTER || ZydisRegisterGetClass(o.reg.value) != ZYDIS_REGCLASS_MASK)
            unsupported("an opmask register was expected");
        return ZydisRegisterGetId(o.reg.value);
    }

    // Element selection of the EVEX mask: all ones without masking.
    uint64_t write_mask() const {
        const auto &mk = cur_->ins.avx.mask;
        if (mk.mode == ZYDIS_MASK_MODE_INVALID || mk.mode == ZYDIS_MASK_MODE_DISABLED) return ~0ull;
        return m_.k[ZydisRegisterGetId(mk.reg)];
    }
    bool zeroing() const { return cur_->ins.avx.mask.mode == ZYDIS_MASK_MODE_ZEROING; }

    void check_evex_plain() {
        const auto &avx = cur_->ins.avx;
        if (avx.vector_length != 512) unsupported("only 512-bit vector forms are modelled");
        if (avx.rounding.mode != ZYDIS_ROUNDING_MODE_INVALID || avx.has_sae)
            unsupported("embedded rounding / SAE is not modelled");
    }

    // Reads a full-width vector source: a zmm, 64 bytes of memory, or one element broadcast ({1toN}).
    void read_vec(const ZydisDecodedOperand &o, int esize, uint8_t out[64]) {
        if (o.type == ZYDIS_OPERAND_TYPE_REGISTER) {
            std::memcpy(out, m_.zmm[zmm_index(o)], 64);
        } else if (o.type == ZYDIS_OPERAND_TYPE_MEMORY && o.size == 512) {
            load(address(o), out, 64);
        } else if (o.type == ZYDIS_OPERAND_TYPE_MEMORY && o.size == esize * 8 &&
                   cur_->ins.avx.broadcast.mode != ZYDIS_BROADCAST_MODE_INVALID) {
            uint8_t e[8];
            load(address(o), e, static_cast<size_t>(esize));
            for (int i = 0; i < 64; i += esize) std::memcpy(out + i, e, static_cast<size_t>(esize));
        } else {
            unsupported("this vector source form is not modelled");
        }
    }

    // Writes `v` into zmm `reg` under the EVEX write mask (merging or zeroing) at element size `esize`.
    void write_zmm(int reg, const uint8_t v[64], int esize) {
        const uint64_t mask = write_mask();
        uint8_t *dst = m_.zmm[reg];
        for (int i = 0; i < 64 / esize; ++i) {
            uint8_t *e = dst + i * esize;
            if ((mask >> i) & 1) {
                std::memcpy(e, v + i * esize, static_cast<size_t>(esize));
            } else if (zeroing()) {
                std::memset(e, 0, static_cast<size_t>(esize));
            }
        }
    }

    // vmovdqu8 / vmovdqu32 / vmovups: masked elements of a load are not read, of a store not written (fault
    // suppression: a masked tail never touches memory past the end of a row).
    void vector_move(const Decoded &d, int esize) {
        check_evex_plain();
        need_ops(2);
        const uint64_t mask = write_mask();
        const int n = 64 / esize;
        if (d.op[0]->type == ZYDIS_OPERAND_TYPE_MEMORY) {
            if (zeroing()) fault("#UD", "zeroing-masking with a memory destination");
            const uint64_t a = address(*d.op[0]);
            const uint8_t *src = m_.zmm[zmm_index(*d.op[1])];
            for (int i = 0; i < n; ++i)
                if ((mask >> i) & 1) store(a + static_cast<uint64_t>(i * esize), src + i * esize, static_cast<size_t>(esize));
            return;
        }
        const int dst = zmm_index(*d.op[0]);
        uint8_t v[64] = {};
        if (d.op[1]->type == ZYDIS_OPERAND_TYPE_MEMORY) {
            const uint64_t a = address(*d.op[1]);
            for (int i = 0; i < n; ++i)
                if ((mask >> i) & 1) load(a + static_cast<uint64_t>(i * esize), v + i * esize, static_cast<size_t>(esize));
        } else {
            std::memcpy(v, m_.zmm[zmm_index(*d.op[1])], 64);
        }
        write_zmm(dst, v, esize);
    }

    template <typename T, typename Op>
    void lanewise(const Decoded &d, Op op) {
        check_evex_plain();
        need_ops(3);
        uint8_t a[64], b[64], r[64];
        read_vec(*d.op[1], sizeof(T), a);
        read_vec(*d.op[2], sizeof(T), b);
        for (size_t i = 0; i < 64 / sizeof(T); ++i) {
            T x, y;
            std::memcpy(&x, a + i * sizeof(T), sizeof(T));
            std::memcpy(&y, b + i * sizeof(T), sizeof(T));
            const T z = op(x, y);
            std::memcpy(r + i * sizeof(T), &z, sizeof(T));
        }
        write_zmm(zmm_index(*d.op[0]), r, sizeof(T));
    }

    void broadcast32(const Decoded &d) {
        check_evex_plain();
        need_ops(2);
        const ZydisDecodedOperand &src = *d.op[1];
        uint32_t v;
        if (src.type == ZYDIS_OPERAND_TYPE_REGISTER && is_gpr(src.reg.value)) {
            if (d.ins.mnemonic != ZYDIS_MNEMONIC_VPBROADCASTD) unsupported("vbroadcastss from a GPR does not exist");
            v = static_cast<uint32_t>(read_gpr(src.reg.value));
        } else if (src.type == ZYDIS_OPERAND_TYPE_REGISTER &&
                   ZydisRegisterGetClass(src.reg.value) == ZYDIS_REGCLASS_XMM) {
            std::memcpy(&v, m_.zmm[ZydisRegisterGetId(src.reg.value)], 4);
        } else if (src.type == ZYDIS_OPERAND_TYPE_MEMORY && src.size == 32) {
            load(address(src), &v, 4);
        } else {
            unsupported("this broadcast source is not modelled");
        }
        uint8_t r[64];
        for (int i = 0; i < 16; ++i) std::memcpy(r + 4 * i, &v, 4);
        write_zmm(zmm_index(*d.op[0]), r, 4);
    }

    bool exec_vector(const Decoded &d) {
        switch (d.ins.mnemonic) {
            case ZYDIS_MNEMONIC_VZEROUPPER:
                for (int r = 0; r < 16; ++r) std::memset(m_.zmm[r] + 16, 0, 48);
                return true;
            case ZYDIS_MNEMONIC_VMOVDQU8: vector_move(d, 1); return true;
            case ZYDIS_MNEMONIC_VMOVDQU32:
            case ZYDIS_MNEMONIC_VMOVUPS: vector_move(d, 4); return true;
            case ZYDIS_MNEMONIC_VPXORD: lanewise<uint32_t>(d, [](uint32_t x, uint32_t y) { return x ^ y; }); return true;
            case ZYDIS_MNEMONIC_VPANDD: lanewise<uint32_t>(d, [](uint32_t x, uint32_t y) { return x & y; }); return true;
            case ZYDIS_MNEMONIC_VMULPS: lanewise<float>(d, [](float x, float y) { return x * y; }); return true;
            case ZYDIS_MNEMONIC_VPBROADCASTD:
            case ZYDIS_MNEMONIC_VBROADCASTSS: broadcast32(d); return true;
            case ZYDIS_MNEMONIC_VPSLLW: {
                check_evex_plain();
                need_ops(3);
                if (d.op[2]->type != ZYDIS_OPERAND_TYPE_IMMEDIATE) unsupported("vpsllw by a register count is not modelled");
                const uint64_t count = d.op[2]->imm.value.u & 0xFF;
                uint8_t a[64], r[64];
                read_vec(*d.op[1], 2, a);
                for (int i = 0; i < 32; ++i) {
                    uint16_t x;
                    std::memcpy(&x, a + 2 * i, 2);
                    x = count > 15 ? 0 : static_cast<uint16_t>(x << count);
                    std::memcpy(r + 2 * i, &x, 2);
                }
                write_zmm(zmm_index(*d.op[0]), r, 2);
                return true;
            }
            case ZYDIS_MNEMONIC_VCVTDQ2PS: {
                check_evex_plain();
                need_ops(2);
                uint8_t a[64], r[64];
                read_vec(*d.op[1], 4, a);
                for (int i = 0; i < 16; ++i) {
                    int32_t x;
                    std::memcpy(&x, a + 4 * i, 4);
                    const float f = static_cast<float>(x);  // MXCSR default: round to nearest even
                    std::memcpy(r + 4 * i, &f, 4);
                }
                write_zmm(zmm_index(*d.op[0]), r, 4);
                return true;
            }
            case ZYDIS_MNEMONIC_VFMADD231PS: {
                check_evex_plain();
                need_ops(3);
                const int dst = zmm_index(*d.op[0]);
                uint8_t a[64], b[64], r[64];
                read_vec(*d.op[1], 4, a);
                read_vec(*d.op[2], 4, b);
                for (int i = 0; i < 16; ++i) {
                    float x, y, c;
                    std::memcpy(&x, a + 4 * i, 4);
                    std::memcpy(&y, b + 4 * i, 4);
                    std::memcpy(&c, m_.zmm[dst] + 4 * i, 4);
                    const float z = std::fma(x, y, c);
                    std::memcpy(r + 4 * i, &z, 4);
                }
                write_zmm(dst, r, 4);
                return true;
            }
            case ZYDIS_MNEMONIC_KMOVW:
            case ZYDIS_MNEMONIC_KMOVD:
            case ZYDIS_MNEMONIC_KMOVQ: {
                need_ops(2);
                const int bits = d.ins.mnemonic == ZYDIS_MNEMONIC_KMOVW ? 16 : d.ins.mnemonic == ZYDIS_MNEMONIC_KMOVD ? 32 : 64;
                const ZydisDecodedOperand &dst = *d.op[0], &src = *d.op[1];
                if (dst.type == ZYDIS_OPERAND_TYPE_REGISTER && ZydisRegisterGetClass(dst.reg.value) == ZYDIS_REGCLASS_MASK) {
                    uint64_t v;
                    if (src.type == ZYDIS_OPERAND_TYPE_REGISTER && ZydisRegisterGetClass(src.reg.value) == ZYDIS_REGCLASS_MASK) {
                        v = m_.k[mask_index(src)];
                    } else if (src.type == ZYDIS_OPERAND_TYPE_REGISTER) {
                        v = read_gpr(src.reg.value);
                    } else {
                        v = read_int(src, bits);
                    }
                    m_.k[mask_index(dst)] = v & width_mask(bits);
                } else if (dst.type == ZYDIS_OPERAND_TYPE_REGISTER) {
                    write_gpr(dst.reg.value, m_.k[mask_index(src)] & width_mask(bits));
                } else {
                    unsupported("kmov to memory is not modelled");
                }
                return true;
            }
            default: return false;
        }
    }

    // ---- AMX ----

    void require_amx() {
        if (!m_.xcr0_tile_state) fault("#UD", "XCR0[18:17] != 11b: the OS has not enabled tile state");
        if (cur_->ins.encoding == ZYDIS_INSTRUCTION_ENCODING_VEX && (cur_->ins.raw.vex.L || cur_->ins.raw.vex.W))
            fault("#UD", "VEX.L or VEX.W set on an AMX instruction");
    }

    int tmm_index(const ZydisDecodedOperand &o) {
        if (o.type != ZYDIS_OPERAND_TYPE_REGISTER || ZydisRegisterGetClass(o.reg.value) != ZYDIS_REGCLASS_TMM)
            fault("#UD", "a tile register operand was expected");
        return ZydisRegisterGetId(o.reg.value);
    }

    // #UD unless tiles are configured and tile t is valid with colsb % 4 == 0 (SDM AMX-E3/E4).
    void check_tile(int t, const char *role) {
        if (!m_.tiles_configured) fault("#UD", "tiles are not configured (TILECFG is INIT)");
        if (m_.tilecfg.rows[t] == 0)
            fault("#UD", strf("%s tmm%d is not valid in the current configuration (0 rows)", role, t));
        if (m_.tilecfg.colsb[t] % 4 != 0)
            fault("#UD", strf("%s tmm%d colsb %u is not a multiple of 4", role, t, m_.tilecfg.colsb[t]));
    }

    void release_tiles() {
        m_.tiles_configured = false;
        m_.tilecfg = TileMachine::TileConfigState{};
        std::memset(m_.tmm, 0, sizeof m_.tmm);
    }

    void ldtilecfg(const Decoded &d) {
        need_ops(1);
        uint8_t img[64];
        load(address(*d.op[0]), img, 64);
        if (img[0] > 1) fault("#GP(0)", strf("LDTILECFG: palette %u", img[0]));
        if (img[0] == 0) {
            release_tiles();
            return;
        }
        for (int i = 2; i < 16; ++i)
            if (img[i]) fault("#GP(0)", strf("LDTILECFG: reserved byte %d is 0x%02x", i, img[i]));
        TileMachine::TileConfigState cfg;
        cfg.palette = img[0];
        cfg.start_row = img[1];
        for (int t = 0; t < 16; ++t) {
            uint16_t colsb;
            std::memcpy(&colsb, img + 16 + 2 * t, 2);
            const uint8_t rows = img[48 + t];
            if (t >= 8) {
                if (colsb || rows) fault("#GP(0)", strf("LDTILECFG: tile %d does not exist in palette 1", t));
                continue;
            }
            if (colsb > 64) fault("#GP(0)", strf("LDTILECFG: tmm%d colsb %u > 64", t, colsb));
            if (rows > 16) fault("#GP(0)", strf("LDTILECFG: tmm%d rows %u > 16", t, rows));
            if ((rows == 0) != (colsb == 0))
                fault("#GP(0)", strf("LDTILECFG: tmm%d has %u rows but %u bytes per row", t, rows, colsb));
            cfg.colsb[t] = colsb;
            cfg.rows[t] = rows;
        }
        m_.tilecfg = cfg;
        m_.tiles_configured = true;
        std::memset(m_.tmm, 0, sizeof m_.tmm);  // LDTILECFG zeroes all tile data
    }

    void sttilecfg(const Decoded &d) {
        need_ops(1);
        uint8_t img[64] = {};
        if (m_.tiles_configured) {
            img[0] = m_.tilecfg.palette;
            img[1] = m_.tilecfg.start_row;
            for (int t = 0; t < 8; ++t) {
                std::memcpy(img + 16 + 2 * t, &m_.tilecfg.colsb[t], 2);
                img[48 + t] = m_.tilecfg.rows[t];
            }
        }
        store(address(*d.op[0]), img, 64);
    }

    // The stride of a tile load/store: the SIB index register shifted by the scale (0 without an index).
    void tile_memory(const ZydisDecodedOperand &o, uint64_t *start, uint64_t *stride) {
        if (!(cur_->ins.attributes & ZYDIS_ATTRIB_HAS_SIB)) fault("#UD", "tile load/store without a SIB byte");
        if (o.type != ZYDIS_OPERAND_TYPE_MEMORY) fault("#UD", "tile load/store needs a memory operand");
        *stride = o.mem.index == ZYDIS_REGISTER_NONE ? 0 : read_gpr(o.mem.index) * o.mem.scale;
        uint64_t a = o.mem.base == ZYDIS_REGISTER_NONE ? 0 : read_gpr(o.mem.base);
        if (o.mem.disp.has_displacement) a += static_cast<uint64_t>(o.mem.disp.value);
        *start = a;
    }

    void tile_load(const Decoded &d) {
        need_ops(2);
        const int t = tmm_index(*d.op[0]);
        check_tile(t, "destination");
        uint64_t base, stride;
        tile_memory(*d.op[1], &base, &stride);
        const int start = m_.tilecfg.start_row, rows = m_.tilecfg.rows[t], colsb = m_.tilecfg.colsb[t];
        if (start >= rows) fault("#UD", strf("start_row %d >= rows %d of tmm%d", start, rows, t));
        for (int r = start; r < 16; ++r) std::memset(m_.tmm[t][r], 0, 64);
        for (int r = start; r < rows; ++r) load(base + static_cast<uint64_t>(r) * stride, m_.tmm[t][r], static_cast<size_t>(colsb));
        m_.tilecfg.start_row = 0;
    }

    void tile_store(const Decoded &d) {
        need_ops(2);
        const int t = tmm_index(*d.op[1]);
        check_tile(t, "source");
        uint64_t base, stride;
        tile_memory(*d.op[0], &base, &stride);
        const int start = m_.tilecfg.start_row, rows = m_.tilecfg.rows[t], colsb = m_.tilecfg.colsb[t];
        if (start >= rows) fault("#UD", strf("start_row %d >= rows %d of tmm%d", start, rows, t));
        for (int r = start; r < rows; ++r) store(base + static_cast<uint64_t>(r) * stride, m_.tmm[t][r], static_cast<size_t>(colsb));
        m_.tilecfg.start_row = 0;
    }

    // The #UD rules of the TMUL instructions (SDM AMX-E4; reference §4.4), in the order the SDM lists them.
    void check_tmul(int c, int a, int b) {
        if (!m_.tiles_configured) fault("#UD", "tiles are not configured (TILECFG is INIT)");
        if (c == a || c == b || a == b) fault("#UD", strf("TMUL operands tmm%d, tmm%d, tmm%d are not distinct", c, a, b));
        check_tile(c, "C");
        check_tile(a, "A");
        check_tile(b, "B");
        const auto &g = m_.tilecfg;
        if (g.rows[c] != g.rows[a]) fault("#UD", strf("C rows %u != A rows %u (M)", g.rows[c], g.rows[a]));
        if (g.colsb[c] != g.colsb[b]) fault("#UD", strf("C colsb %u != B colsb %u (N)", g.colsb[c], g.colsb[b]));
        if (g.colsb[a] / 4 != g.rows[b]) fault("#UD", strf("A colsb/4 %u != B rows %u (K)", g.colsb[a] / 4, g.rows[b]));
        if (g.colsb[c] / 4 > 16 || g.rows[b] > 16) fault("#UD", "N or K above the TMUL limits");
    }

    void finish_tmul(int c) {
        const auto &g = m_.tilecfg;
        for (int r = 0; r < 16; ++r) {
            if (r >= g.rows[c]) {
                std::memset(m_.tmm[c][r], 0, 64);
            } else {
                std::memset(m_.tmm[c][r] + g.colsb[c], 0, static_cast<size_t>(64 - g.colsb[c]));
            }
        }
        m_.tilecfg.start_row = 0;
    }

    void tdp_int8(const Decoded &d, bool a_signed, bool b_signed) {
        require_amx();
        need_ops(3);
        const int c = tmm_index(*d.op[0]), a = tmm_index(*d.op[1]), b = tmm_index(*d.op[2]);
        check_tmul(c, a, b);
        const auto &g = m_.tilecfg;
        for (int m = 0; m < g.rows[c]; ++m) {
            for (int n = 0; n < g.colsb[c] / 4; ++n) {
                uint32_t acc;
                std::memcpy(&acc, &m_.tmm[c][m][4 * n], 4);
                for (int kk = 0; kk < g.colsb[a] / 4; ++kk) {
                    for (int i = 0; i < 4; ++i) {
                        const uint8_t x = m_.tmm[a][m][4 * kk + i], y = m_.tmm[b][kk][4 * n + i];
                        const int32_t xa = a_signed ? static_cast<int8_t>(x) : static_cast<int32_t>(x);
                        const int32_t yb = b_signed ? static_cast<int8_t>(y) : static_cast<int32_t>(y);
                        acc += static_cast<uint32_t>(xa * yb);  // int32 wrap-around, no saturation
                    }
                }
                std::memcpy(&m_.tmm[c][m][4 * n], &acc, 4);
            }
        }
        finish_tmul(c);
    }

    void tdp_bf16(const Decoded &d) {
        require_amx();
        need_ops(3);
        const int c = tmm_index(*d.op[0]), a = tmm_index(*d.op[1]), b = tmm_index(*d.op[2]);
        check_tmul(c, a, b);
        const auto &g = m_.tilecfg;
        auto bf16_at = [&](int t, int row, int elem) {
            uint16_t v;
            std::memcpy(&v, &m_.tmm[t][row][2 * elem], 2);
            return bf16_to_f32(v);
        };
        for (int m = 0; m < g.rows[c]; ++m) {
            for (int n = 0; n < g.colsb[c] / 4; ++n) {
                float even = 0.0f, odd = 0.0f;
                for (int kk = 0; kk < g.colsb[a] / 4; ++kk) {
                    even = fma_daz_ftz(bf16_at(a, m, 2 * kk), bf16_at(b, kk, 2 * n), even);
                    odd = fma_daz_ftz(bf16_at(a, m, 2 * kk + 1), bf16_at(b, kk, 2 * n + 1), odd);
                }
                float acc;
                std::memcpy(&acc, &m_.tmm[c][m][4 * n], 4);
                acc = add_daz_ftz(acc, add_daz_ftz(even, odd));
                std::memcpy(&m_.tmm[c][m][4 * n], &acc, 4);
            }
        }
        finish_tmul(c);
    }

    bool exec_amx(const Decoded &d) {
        switch (d.ins.mnemonic) {
            case ZYDIS_MNEMONIC_LDTILECFG: require_amx(); ldtilecfg(d); return true;
            case ZYDIS_MNEMONIC_STTILECFG: require_amx(); sttilecfg(d); return true;
            case ZYDIS_MNEMONIC_TILERELEASE: require_amx(); release_tiles(); return true;
            case ZYDIS_MNEMONIC_TILEZERO: {
                require_amx();
                need_ops(1);
                const int t = tmm_index(*d.op[0]);
                check_tile(t, "destination");
                std::memset(m_.tmm[t], 0, sizeof m_.tmm[t]);
                m_.tilecfg.start_row = 0;
                return true;
            }
            case ZYDIS_MNEMONIC_TILELOADD:
            case ZYDIS_MNEMONIC_TILELOADDT1: require_amx(); tile_load(d); return true;
            case ZYDIS_MNEMONIC_TILESTORED: require_amx(); tile_store(d); return true;
            case ZYDIS_MNEMONIC_TDPBSSD: tdp_int8(d, true, true); return true;
            case ZYDIS_MNEMONIC_TDPBSUD: tdp_int8(d, true, false); return true;
            case ZYDIS_MNEMONIC_TDPBUSD: tdp_int8(d, false, true); return true;
            case ZYDIS_MNEMONIC_TDPBUUD: tdp_int8(d, false, false); return true;
            case ZYDIS_MNEMONIC_TDPBF16PS: tdp_bf16(d); return true;
            default: return false;
        }
    }

    void exec(const Decoded &d) {
        if (exec_amx(d) || exec_vector(d)) return;
        exec_integer(d);
    }

    TileMachine &m_;
    const uint8_t *code_;
    size_t size_;
    std::vector<int32_t> slot_;  // offset -> index into decoded_, -1 until decoded
    std::deque<Decoded> decoded_;
    const Decoded *cur_ = nullptr;
    uint64_t rip_ = 0, next_ = 0;
    bool returned_ = false;
};

// ---- TileMachine ---------------------------------------------------------------------------------------------

TileMachine::TileMachine() : executed_(ZYDIS_MNEMONIC_MAX_VALUE + 1, 0), stack_(kStackBytes + 64) {}

Status TileMachine::call(const uint8_t *code, size_t size, uint64_t arg0) {
    if (!code || size == 0) return Status(KT_STATUS_INVALID_ARGUMENT, "tile machine: no code");
    // Registers hold recognisable garbage, as after a real call; the callee-saved ones must survive.
    for (int r = 0; r < 16; ++r) gpr[r] = 0x6A7BA6E000000000ull | static_cast<uint64_t>(r);
    gpr[7] = arg0;
    const uint64_t top = (reinterpret_cast<uint64_t>(stack_.data()) + kStackBytes) & ~uint64_t{63};
    gpr[4] = top - 8;  // rsp = 8 mod 16 at entry, as after a call
    std::memcpy(reinterpret_cast<void *>(gpr[4]), &kReturnSentinel, 8);
    constexpr int kCalleeSaved[] = {3, 5, 12, 13, 14, 15};
    uint64_t saved[6];
    for (int i = 0; i < 6; ++i) saved[i] = gpr[kCalleeSaved[i]];

    Interpreter interp(*this, code, size);
    try {
        interp.run();
    } catch (const Fault &f) {
        return Status(KT_STATUS_INTERNAL, f.kind + " at " + interp.where() + ": " + f.reason);
    }
    if (gpr[4] != top) return Status(KT_STATUS_INTERNAL, "tile machine: rsp was not restored on return");
    static const char *const kNames[] = {"rbx", "rbp", "r12", "r13", "r14", "r15"};
    for (int i = 0; i < 6; ++i)
        if (gpr[kCalleeSaved[i]] != saved[i])
            return Status(KT_STATUS_INTERNAL, std::string("tile machine: callee-saved ") + kNames[i] + " was not restored");
    return Status::ok();
}

std::vector<std::pair<std::string, uint64_t>> TileMachine::executed_mnemonics() const {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (size_t i = 0; i < executed_.size(); ++i)
        if (executed_[i]) out.emplace_back(ZydisMnemonicGetString(static_cast<ZydisMnemonic>(i)), executed_[i]);
    return out;
}

std::vector<std::string> supported_mnemonics() {
    std::vector<std::string> out;
    for (ZydisMnemonic m : kSupported) out.emplace_back(ZydisMnemonicGetString(m));
    return out;
}

std::string disassemble(const uint8_t *code, size_t size) {
    std::string out;
    size_t offset = 0;
    while (offset < size) {
        Decoded d;
        char line[320];
        if (!decode(code, size, offset, &d)) {
            std::snprintf(line, sizeof line, "0x%04zx  (bad) %02x\n", offset, code[offset]);
            out += line;
            ++offset;
            continue;
        }
        std::snprintf(line, sizeof line, "0x%04zx  %s\n", offset, format(d, offset).c_str());
        out += line;
        offset += d.ins.length;
    }
    return out;
}

TileMachine &thread_tile_machine() {
    static thread_local TileMachine machine;
    return machine;
}

namespace {
Status run_on_tile_machine(const jit::JitCode &code, const void *params, void *) {
    return thread_tile_machine().call(code.code_ptr(), code.code_size(), reinterpret_cast<uint64_t>(params));
}
}  // namespace

void install_tile_machine_runner() { cpu::amx::set_code_runner(&run_on_tile_machine, nullptr); }
void uninstall_tile_machine_runner() { cpu::amx::set_code_runner(nullptr, nullptr); }

}  // namespace kt::test
