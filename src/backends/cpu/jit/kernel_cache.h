// A process-wide cache of generated kernels keyed by their descriptor.
//
// Kernels are generated on first use and live as long as the cache (normally the process): a kernel pointer
// handed out stays valid, so callers resolve their kernels once per call and then run them without locking.
// Generation happens under the lock; it takes microseconds and happens once per descriptor.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "backends/cpu/jit/jit_code.h"
#include "core/status.h"

namespace kt::jit {

// Desc: equality-comparable, hashed by Hash. Factory: Status(const Desc &, std::unique_ptr<JitCode> *).
template <typename Desc, typename Hash>
class KernelCache {
public:
    template <typename Factory>
    Status get(const Desc &desc, Factory &&factory, const JitCode **out) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = kernels_.find(desc);
        if (it == kernels_.end()) {
            std::unique_ptr<JitCode> code;
            KT_TRY(factory(desc, &code));
            it = kernels_.emplace(desc, std::move(code)).first;
        }
        *out = it->second.get();
        return Status::ok();
    }

    size_t size() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return kernels_.size();
    }

private:
    mutable std::mutex mutex_;
    std::unordered_map<Desc, std::unique_ptr<JitCode>, Hash> kernels_;
};

}  // namespace kt::jit
