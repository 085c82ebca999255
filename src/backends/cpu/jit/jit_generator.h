// JitGenerator: the base of every kt kernel emitted at run time with xbyak (STYLE.md §8.6, after oneDNN's
// jit_generator_t).
//
// Lifecycle: construct (a descriptor fixes everything) -> create() -> code_ptr(). create() runs generate(), checks
// the semantic lint the emitter recorded (jit_fail), resolves labels, and flips the buffer from read+write to
// read+execute (W^X: the buffer is never writable and executable at once: DontSetProtectRWE, then
// setProtectModeRE, reference/amx-hwloc.md §1.5). xbyak reports errors by throwing; create() and build() catch
// everything, so no exception leaves the JIT layer. KT_JIT_DUMP=1 writes each created kernel's bytes to
// kt_jit_<name>.bin in $KT_JIT_DUMP_DIR (default: the working directory), for `objdump -D -b binary -m i386:x86-64`.
//
// Include this header only from emitters (*_kernel.cpp); everyone else uses jit_code.h.
#pragma once

#include <xbyak/xbyak.h>

#include <memory>
#include <string>

#include "backends/cpu/jit/jit_code.h"
#include "core/status.h"

namespace kt::jit {

class JitGenerator : public JitCode, public Xbyak::CodeGenerator {
public:
    static constexpr size_t kDefaultMaxCodeSize = 16 * 1024;

    // Emits and finalises the code. Never throws.
    Status create() noexcept;

protected:
    // Throws only what xbyak throws (std::bad_alloc, Xbyak::Error); build() catches both.
    explicit JitGenerator(std::string name, size_t max_code_size = kDefaultMaxCodeSize);

    // Emits the whole function; called once by create().
    virtual void generate() = 0;

    // Records a broken invariant found while emitting (an operand combination the CPU would fault on, a
    // descriptor out of range). The first one wins; create() then fails with it instead of returning code.
    void jit_fail(Status status);
    bool jit_failed() const { return !lint_.is_ok(); }

    // SysV x86-64: the first argument, the callee-saved registers.
    const Xbyak::Reg64 &abi_param1 = rdi;

    // Saves the callee-saved registers, makes rbp the frame pointer and reserves `frame_bytes` of stack aligned to
    // `frame_alignment` (a power of two) at rsp. postamble() undoes it, clears the upper vector state when
    // `vzeroupper` (after AVX-512 code, so the caller's SSE code pays no transition penalty) and returns.
    void preamble(int32_t frame_bytes = 0, int32_t frame_alignment = 64);
    void postamble(bool vzeroupper);

private:
    void dump() const;

    Status lint_;
};

// Constructs a generator (a constructor that throws becomes a Status) and creates its code.
template <typename Generator, typename... Args>
Status build(std::unique_ptr<JitCode> *out, Args &&...args) noexcept {
    std::unique_ptr<Generator> generator;
    try {
        generator = std::make_unique<Generator>(std::forward<Args>(args)...);
    } catch (const std::bad_alloc &) {
        return Status(KT_STATUS_OUT_OF_MEMORY, "jit: out of memory for a code buffer");
    } catch (const Xbyak::Error &e) {  // the code buffer could not be allocated or protected
        return Status(static_cast<int>(e) == Xbyak::ERR_CANT_ALLOC ? KT_STATUS_OUT_OF_MEMORY : KT_STATUS_INTERNAL,
                      std::string("jit: cannot construct a generator: xbyak: ") + e.what());
    } catch (const std::exception &e) {
        return Status(KT_STATUS_INTERNAL, std::string("jit: cannot construct a generator: ") + e.what());
    }
    KT_TRY(generator->create());
    *out = std::move(generator);
    return Status::ok();
}

}  // namespace kt::jit
