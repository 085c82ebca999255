// Generated machine code as the rest of kt sees it: bytes, a size and a name, without xbyak.
//
// Only the JIT translation units include xbyak (jit_generator.h); everything else holds kernels through this
// interface, so xbyak's headers and exceptions stay inside src/backends/cpu/jit and the *_kernel.cpp emitters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kt::jit {

class JitCode {
public:
    virtual ~JitCode() = default;

    // The entry point (the first byte) and the number of bytes emitted. Valid once create() succeeded; the memory
    // is read+execute, never writable and executable at once.
    const uint8_t *code_ptr() const { return jit_code_; }
    size_t code_size() const { return jit_size_; }
    // A stable, filesystem-safe name that describes the kernel ("amx_gemm_s8s32_m32_n32_k256").
    const std::string &name() const { return jit_name_; }

    template <typename Fn>
    Fn entry() const {
        return reinterpret_cast<Fn>(reinterpret_cast<uintptr_t>(jit_code_));
    }

protected:
    explicit JitCode(std::string name) : jit_name_(std::move(name)) {}

    const uint8_t *jit_code_ = nullptr;
    size_t jit_size_ = 0;
    std::string jit_name_;
};

}  // namespace kt::jit
