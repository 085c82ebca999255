#include "backends/cpu/jit/jit_generator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/log.h"

namespace kt::jit {
namespace {

// The callee-saved registers of the SysV ABI, in push order (rbp last: it becomes the frame pointer).
constexpr int kCalleeSaved[] = {Xbyak::Operand::RBX, Xbyak::Operand::R12, Xbyak::Operand::R13,
                                Xbyak::Operand::R14, Xbyak::Operand::R15, Xbyak::Operand::RBP};

kt_status status_of_xbyak_error(int err) {
    return err == Xbyak::ERR_CANT_ALLOC ? KT_STATUS_OUT_OF_MEMORY : KT_STATUS_INTERNAL;
}

bool dump_enabled() {
    const char *env = std::getenv("KT_JIT_DUMP");
    return env && std::strcmp(env, "1") == 0;
}

}  // namespace

JitGenerator::JitGenerator(std::string name, size_t max_code_size)
    : JitCode(std::move(name)), Xbyak::CodeGenerator(max_code_size, Xbyak::DontSetProtectRWE) {}

void JitGenerator::jit_fail(Status status) {
    if (lint_.is_ok()) lint_ = std::move(status).with_context("jit: kernel '" + name() + "'");
}

void JitGenerator::preamble(int32_t frame_bytes, int32_t frame_alignment) {
    for (int reg : kCalleeSaved) push(Xbyak::Reg64(reg));
    mov(rbp, rsp);
    if (frame_bytes > 0) {
        sub(rsp, frame_bytes);
        and_(rsp, -frame_alignment);
    }
}

void JitGenerator::postamble(bool vzeroupper_needed) {
    mov(rsp, rbp);
    for (int i = static_cast<int>(std::size(kCalleeSaved)) - 1; i >= 0; --i) pop(Xbyak::Reg64(kCalleeSaved[i]));
    if (vzeroupper_needed) vzeroupper();
    ret();
}

Status JitGenerator::create() noexcept {
    try {
        generate();
        KT_TRY(lint_);
        ready();  // only checks for undefined labels: the buffer is not AutoGrow
        setProtectModeRE();
    } catch (const Xbyak::Error &e) {
        return Status::error(status_of_xbyak_error(static_cast<int>(e)), "jit: kernel '%s': xbyak: %s",
                             name().c_str(), e.what());
    } catch (const std::bad_alloc &) {
        return Status::error(KT_STATUS_OUT_OF_MEMORY, "jit: kernel '%s': out of memory", name().c_str());
    } catch (const std::exception &e) {
        return Status::error(KT_STATUS_INTERNAL, "jit: kernel '%s': %s", name().c_str(), e.what());
    }
    jit_code_ = getCode();
    jit_size_ = getSize();
    if (dump_enabled()) dump();
    return Status::ok();
}

void JitGenerator::dump() const {
    const char *dir = std::getenv("KT_JIT_DUMP_DIR");
    const std::string path = std::string(dir && *dir ? dir : ".") + "/kt_jit_" + name() + ".bin";
    FILE *f = std::fopen(path.c_str(), "wb");
    const bool ok = f && std::fwrite(jit_code_, 1, jit_size_, f) == jit_size_;
    if (f) std::fclose(f);
    if (!ok) KT_LOG_WARN_MSG("KT_JIT_DUMP: cannot write %s", path.c_str());
}

}  // namespace kt::jit
