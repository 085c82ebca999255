// Executor: the worker threads, job queue and scratch memory that expert pools run on.
//
// A model has one expert pool per MoE layer, and its layers run one after the other. Pools created with the same
// thread settings therefore share one executor: one pinned driver thread and one set of workers (one group per
// NUMA node), one FIFO of jobs, and one set of scratch buffers sized for the largest pool. Workers stay warm from
// one layer to the next (they spin briefly after each job, then sleep), and no two pools' threads fight over the
// same cores - which is what per-layer thread pools would do, each spinning while the next layer runs.
//
// Thread safety: every method may be called from any thread. enqueue/reserve/run_on_driver are serialized by the
// executor's mutex; wait_for only waits.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "mem/numa_buffer.h"
#include "mem/thread_placement.h"
#include "mem/topology.h"

namespace kt::moe {

class ExpertPool;

enum class NumaPolicy : int32_t { kAuto = 0, kOff = 1, kNodes = 2 };

struct ExecutorConfig {
    int32_t n_threads = 0;  // 0: one per physical core of the nodes used
    NumaPolicy numa = NumaPolicy::kAuto;
    std::vector<int> numa_nodes;  // kNodes
    int64_t spin_ns = kDefaultSpinNs;
    const mem::Topology *topology = nullptr;  // nullptr: the process topology
    // Tests: runs on each worker after its placement, before it takes a job (e.g. to hold it, as a busy core
    // would). An executor with it is never shared.
    std::function<void(int worker_index)> on_worker_start;

    bool operator==(const ExecutorConfig &o) const {
        return n_threads == o.n_threads && numa == o.numa && numa_nodes == o.numa_nodes && spin_ns == o.spin_ns &&
               topology == o.topology;
    }
};

struct alignas(64) Counter {
    std::atomic<int64_t> next{0};
};

// The tasks of one phase of a job: claimed through `next`, counted in `done` once finished. A thread that needs a
// phase's results waits for its tasks to be done (wait_done), not for the other threads to arrive, so a thread
// that has not started the job (its core busy with another process) holds nobody up: whoever runs claims its share.
struct TaskCounter {
    alignas(64) std::atomic<int64_t> next{0};
    // Finished claims. 32 bits suffice: no phase has more claims than the job's fp32 partial output has KiB.
    alignas(64) std::atomic<uint32_t> done{0};

    void reset() {
        next.store(0, std::memory_order_relaxed);
        done.store(0, std::memory_order_relaxed);
    }
    static uint32_t claims(int64_t total, int64_t step) { return static_cast<uint32_t>((total + step - 1) / step); }

    // Claims [0, total) in steps of `step` until none is left, calling fn(begin, end) on each claim.
    template <typename Fn>
    void run_claims(int64_t total, int64_t step, Fn &&fn) {
        const uint32_t all = claims(total, step);
        for (;;) {
            const int64_t begin = next.fetch_add(step, std::memory_order_relaxed);
            if (begin >= total) return;
            fn(begin, std::min(total, begin + step));
            if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == all) done.notify_all();
        }
    }
    // Waits until every claim of [0, total) has finished; its results are then visible to this thread.
    void wait_done(int64_t total, int64_t step, int64_t spin_ns) const {
        const uint32_t all = claims(total, step);
        spin_then_wait(done, spin_ns, [all](uint32_t v) { return v >= all; });
    }
};

// Scratch a pool needs per call (bytes), per group and shared. The executor keeps the largest of its pools'.
struct ScratchNeeds {
    struct PerGroup {
        size_t h = 0, hq = 0, h_scale = 0, h_sums = 0, slot_amax = 0, partial = 0, tiles = 0;
    };
    std::vector<PerGroup> groups;
    size_t xq = 0, x_scale = 0, x_sums_gate = 0, x_sums_up = 0;
    int64_t experts = 0, slots = 0;
};

// When a job ran, on the monotonic_ns clock (core/thread_pool.h); written by the driver thread.
struct JobTimes {
    int64_t begin_ns = 0, end_ns = 0;
};

struct Job {
    enum Kind { kForward, kCallback } kind = kForward;
    ExpertPool *pool = nullptr;
    int64_t n_tokens = 0;
    int32_t top_k = 0;
    const void *input = nullptr;
    const void *ids = nullptr;
    bool ids_i64 = false;
    const float *weights = nullptr;
    void *output = nullptr;
    bool accumulate = false;
    bool masked = false;
    std::vector<uint8_t> mask;  // a snapshot of the pool's mask at submission (capacity reserved: no allocation)
    const FunctionRef<Status()> *callback = nullptr;
    JobTimes *times = nullptr;                     // kForward: see ForwardArgs::times
    const FunctionRef<void()> *on_begin = nullptr;  // kForward: see ForwardArgs::on_begin
    Status status;
};

class Executor {
public:
    struct Group {
        int node = 0;                // logical NUMA node, -1 when memory is left to the OS
        int t_begin = 0, t_end = 0;  // thread indexes
        TaskCounter gate_up_tasks, amax_tasks, hq_tasks, down_tasks;  // the running job's phases on this group's shard
        int64_t i_block = 0, h_block = 0;  // task sizes of the running job
        // Scratch on the group's node: h [slots][shard] fp32, hq (int8 or bf16), h_scale, h_sums, slot_amax,
        // partial [tokens][H] fp32, tiles (per-thread GEMM outputs).
        mem::NumaBuffer h, hq, h_scale, h_sums, slot_amax, partial, tiles;
        int threads() const { return t_end - t_begin; }
    };
    struct Shared {
        TaskCounter x_tasks, merge_tasks;  // the running job's phases over all tokens
        std::vector<int32_t> count, offset, active, slot_token;  // routing buckets
        std::vector<float> slot_weight;
        int64_t n_slots = 0, n_active = 0;
        mem::NumaBuffer xq, x_scale, x_sums_gate, x_sums_up;  // on the first group's node
    };

    // The executor for `config`: an existing one when `shared` and one with an equal config is alive.
    static Status acquire(const ExecutorConfig &config, bool shared, std::shared_ptr<Executor> *out);
    ~Executor();
    Executor(const Executor &) = delete;
    Executor &operator=(const Executor &) = delete;

    const mem::Topology &topology() const { return *topology_; }
    const mem::ThreadPlan &plan() const { return plan_; }
    int threads() const { return static_cast<int>(plan_.threads.size()); }
    int groups() const { return static_cast<int>(groups_.size()); }
    Group &group(int g) { return *groups_[static_cast<size_t>(g)]; }
    int group_of(int thread) const { return thread_group_[static_cast<size_t>(thread)]; }
    Shared &shared() { return shared_; }
    ThreadPool &pool() { return *pool_; }
    int64_t spin_ns() const { return config_.spin_ns; }
    // How long a caller waiting for a job spins before sleeping: not at all when the executor has a thread on every
    // CPU this process may use (the waiter would take a core from a worker).
    int64_t wait_spin_ns() const { return wait_spin_ns_; }

    // Grows the scratch to cover `needs` (after the queued jobs finish); never shrinks.
    Status reserve(const ScratchNeeds &needs);

    // Queues a copy of `job` (blocking while the ring is full); *ticket numbers it, from 1, across all pools.
    Status enqueue(const Job &job, uint64_t *ticket);
    // Waits until every job up to `ticket` has finished.
    void wait_for(uint64_t ticket);
    void drain();
    uint64_t submitted() const { return submitted_.load(std::memory_order_acquire); }
    // Runs fn on the driver thread (after the jobs queued before it) and returns its status.
    Status run_on_driver(FunctionRef<Status()> fn);

private:
    Executor() = default;
    Status init(const ExecutorConfig &config);
    void driver_main();
    Status enqueue_locked(const Job &job, uint64_t *ticket);

    ExecutorConfig config_;
    const mem::Topology *topology_ = nullptr;
    mem::ThreadPlan plan_;
    std::vector<int> thread_group_;
    std::vector<std::unique_ptr<Group>> groups_;
    Shared shared_;
    ScratchNeeds have_;
    std::unique_ptr<ThreadPool> pool_;
    int64_t wait_spin_ns_ = 0;

    // Job ring: ticket t lives in slot (t - 1) % capacity. The 64-bit counters say how far submission and execution
    // have got; the 32-bit event words change with them and are what sleeping threads wait on.
    static constexpr int kRingCapacity = 16;
    std::vector<std::unique_ptr<Job>> ring_;
    std::mutex mutex_;
    alignas(64) std::atomic<uint64_t> submitted_{0};
    alignas(64) std::atomic<uint64_t> completed_{0};
    alignas(64) std::atomic<uint32_t> submit_event_{0};
    alignas(64) std::atomic<uint32_t> complete_event_{0};
    std::atomic<bool> stop_{false};
    std::thread driver_;
};

}  // namespace kt::moe
