#include "backends/cpu/gemm_counters.h"

#include <memory>
#include <mutex>
#include <vector>

namespace kt::cpu {

GemmCounts &GemmCounts::operator+=(const GemmCounts &o) {
    for (int l = 0; l < kIsaLevels; ++l) {
        calls[l] += o.calls[l];
        int8_macs[l] += o.int8_macs[l];
        bf16_macs[l] += o.bf16_macs[l];
    }
    amx_fallbacks += o.amx_fallbacks;
    return *this;
}

GemmCounts GemmCounts::operator-(const GemmCounts &o) const {
    GemmCounts d;
    for (int l = 0; l < kIsaLevels; ++l) {
        d.calls[l] = calls[l] - o.calls[l];
        d.int8_macs[l] = int8_macs[l] - o.int8_macs[l];
        d.bf16_macs[l] = bf16_macs[l] - o.bf16_macs[l];
    }
    d.amx_fallbacks = amx_fallbacks - o.amx_fallbacks;
    return d;
}

uint64_t GemmCounts::total_calls() const {
    uint64_t n = 0;
    for (uint64_t c : calls) n += c;
    return n;
}

GemmCounts GemmCounter::read() const {
    GemmCounts c;
    for (int l = 0; l < kIsaLevels; ++l) {
        c.calls[l] = calls_[l].load(std::memory_order_relaxed);
        c.int8_macs[l] = int8_macs_[l].load(std::memory_order_relaxed);
        c.bf16_macs[l] = bf16_macs_[l].load(std::memory_order_relaxed);
    }
    c.amx_fallbacks = amx_fallbacks_.load(std::memory_order_relaxed);
    return c;
}

namespace {

// The live threads' counters, and the sum of those whose threads have exited.
struct Registry {
    std::mutex mutex;
    std::vector<GemmCounter *> live;
    GemmCounts retired;
};

Registry &registry() {
    static Registry *r = new Registry;  // never destroyed: threads may exit during static destruction
    return *r;
}

struct ThreadSlot {
    std::unique_ptr<GemmCounter> counter = std::make_unique<GemmCounter>();
    ThreadSlot() {
        Registry &r = registry();
        std::lock_guard<std::mutex> lock(r.mutex);
        r.live.push_back(counter.get());
    }
    ~ThreadSlot() {
        Registry &r = registry();
        std::lock_guard<std::mutex> lock(r.mutex);
        r.retired += counter->read();
        for (size_t i = 0; i < r.live.size(); ++i) {
            if (r.live[i] == counter.get()) {
                r.live[i] = r.live.back();
                r.live.pop_back();
                break;
            }
        }
    }
};

}  // namespace

GemmCounter &thread_gemm_counter() {
    thread_local ThreadSlot slot;
    return *slot.counter;
}

GemmCounts process_gemm_counts() {
    Registry &r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    GemmCounts sum = r.retired;
    for (const GemmCounter *c : r.live) sum += c->read();
    return sum;
}

}  // namespace kt::cpu
