// ExpertPool: the CPU expert engine behind kt_expert_pool_*.
//
// Per call (one MoE layer, T tokens routed to top_k experts each):
//   0. bucket (token, slot) pairs by expert, skipping id -1 and masked experts           (driver thread, O(T k))
//   1. quantize each token's activations once (int8 + scale + group sums, or bf16)      (all threads)
//   2. per NUMA group g, tasks (expert, block of its I shard): gate and up GEMMs of the expert's tokens on the
//      same weights tile, SwiGLU in fp32 into h                                          (group g)
//   3. quantize each (token, slot) row of h once for the down projection                  (group g)
//   4. tasks (block of H): for every active expert, down GEMM of its rows and the weighted fp32 add into the
//      group's partial output (a task owns its output columns, so no two threads add to the same value)
//   5. out = (accumulate ? out : 0) + sum of the groups' partial outputs                   (all threads)
// Each expert's intermediate dimension I is split across the NUMA groups (shards sized by thread count, on
// boundaries the formats allow); each shard's gate/up rows and down columns live in its node's memory, packed by
// that node's threads (first touch where binding is unavailable). Sharding is decided here, at load, from the same
// sources: the packed layout does not depend on the node count.
//
// Jobs go through a FIFO ring of max_in_flight slots, executed by a driver thread that is also thread 0 of the
// worker pool; forward() is submit() + wait(). Everything a job needs is allocated at creation: the hot path
// allocates nothing.
//
// Thread safety: every method may be called from any thread; calls are serialized internally, except that wait()
// only waits (it does not block submissions from other threads). load() and set_mask() wait for jobs in flight to
// finish first. Buffers passed to submit() must stay valid until the job completes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "mem/numa_buffer.h"
#include "mem/thread_placement.h"
#include "mem/topology.h"
#include "moe/weights.h"

namespace kt::moe {

enum class NumaPolicy : int32_t { kAuto = 0, kOff = 1, kNodes = 2 };

struct ExpertPoolConfig {
    int64_t n_experts = 0;
    int64_t hidden = 0;        // H
    int64_t intermediate = 0;  // I
    int64_t max_tokens = 0;    // per call
    int32_t max_top_k = 8;
    TargetFormat format = TargetFormat::kAsSource;
    int32_t int4_group = 128;
    bool input_bf16 = false;
    bool output_bf16 = false;
    int32_t n_threads = 0;  // 0: one per physical core of the nodes used
    NumaPolicy numa = NumaPolicy::kAuto;
    std::vector<int> numa_nodes;  // kNodes: logical node indexes
    cpu::SwigluParams swiglu;
    int32_t max_in_flight = 4;
    int64_t spin_ns = kDefaultSpinNs;
    const mem::Topology *topology = nullptr;  // nullptr: the process topology (honours HWLOC_* variables)
    cpu::IsaLevel max_isa = cpu::IsaLevel::kAmx;  // further cap on top of kt::cpu::active_isa_level()
};

struct ForwardArgs {
    int64_t n_tokens = 0;
    int32_t top_k = 0;
    const void *input = nullptr;       // [n_tokens][H], fp32 or bf16 per config
    const void *ids = nullptr;         // [n_tokens][top_k] int32 (or int64 when ids_i64); -1 = none
    bool ids_i64 = false;
    const float *weights = nullptr;    // [n_tokens][top_k]
    void *output = nullptr;            // [n_tokens][H], fp32 or bf16 per config
    bool accumulate = false;           // out += result instead of out = result
};

// What load produced, for diagnostics and benchmarks.
struct PoolInfo {
    std::string kernel_set;       // "avx512-vnni-bf16", ...
    std::string gate_type, up_type, down_type;  // packed types, e.g. "Q4_K"
    int groups = 0;               // NUMA groups (= shards)
    std::vector<int> group_nodes; // logical node of each group
    std::vector<int> group_threads;
    std::vector<int64_t> shard_begin;  // I range of group g: [shard_begin[g], shard_begin[g+1])
    std::vector<std::string> placement;  // per group: "bound" / "first-touch" / "anywhere"
    uint64_t weight_bytes = 0;    // packed bytes of all experts, all shards
    uint64_t expert_bytes = 0;    // packed bytes of one expert (gate + up + down, all shards)
    double load_seconds = 0.0;
};

class ExpertPool {
public:
    static Status create(const ExpertPoolConfig &config, std::unique_ptr<ExpertPool> *out);
    ~ExpertPool();
    ExpertPool(const ExpertPool &) = delete;
    ExpertPool &operator=(const ExpertPool &) = delete;

    // gate, up: [n * I][H] (expert first_expert + j in rows j*I .. j*I+I-1); down: [n * H][I], for experts
    // [first_expert, first_expert + n) (n < 0: to the last one). Loading all experts, or packed types other than
    // those in place, starts over (experts not loaded since hold zeros); otherwise only these experts are replaced,
    // so a host can convert a layer expert by expert.
    Status load(const MatrixSource &gate, const MatrixSource &up, const MatrixSource &down, int64_t first_expert = 0,
                int64_t n_experts = -1);
    bool loaded() const { return loaded_; }

    // mask[e] != 0: expert e is computed elsewhere and skipped. nullptr clears the mask. Applies to jobs submitted
    // afterwards.
    Status set_mask(const uint8_t *mask, int64_t n);

    Status forward(const ForwardArgs &args);
    // Validates and queues a job (blocking while max_in_flight jobs are queued). *ticket numbers jobs from 1.
    Status submit(const ForwardArgs &args, uint64_t *ticket);
    // Waits until job `ticket` (and every earlier one) has finished; 0 waits for all. Returns the first failure of
    // the jobs finished since the previous wait, if any.
    Status wait(uint64_t ticket);

    const ExpertPoolConfig &config() const { return config_; }
    const PoolInfo &info() const { return info_; }
    const cpu::KernelSet &kernels() const { return *kernels_; }

private:
    struct Group;
    struct Job;
    struct Scratch;

    ExpertPool() = default;
    Status init(const ExpertPoolConfig &config);
    Status prepare(const PackSpec &gate, const PackSpec &up, const PackSpec &down, int64_t granularity);
    Status pack_experts(const MatrixSource &gate, const MatrixSource &up, const MatrixSource &down, int64_t first_expert,
                        int64_t n);
    Status validate(const ForwardArgs &args) const;
    void driver_main();
    void execute(Job &job);
    void run_phases(Job &job, int tid);
    void drain();

    ExpertPoolConfig config_;
    const mem::Topology *topology_ = nullptr;
    std::unique_ptr<mem::Topology> owned_topology_;
    mem::ThreadPlan plan_;
    const cpu::KernelSet *kernels_ = nullptr;
    std::unique_ptr<ThreadPool> pool_;
    std::vector<std::unique_ptr<Group>> groups_;
    std::vector<int> thread_group_;  // group of each thread index
    std::unique_ptr<Scratch> scratch_;
    PoolInfo info_;
    bool loaded_ = false;
    bool allocated_ = false;
    PackSpec specs_[3];        // gate, up, down as packed now
    int64_t granularity_ = 0;  // K granularity of the down slices the shards were cut with

    // Runs fn on the driver thread (placed on node 0, like worker 0 of a job), after the jobs queued before it.
    Status run_on_driver(FunctionRef<Status()> fn);
    Status enqueue(Job &&job, uint64_t *ticket);

    // Job ring: ticket t (from 1) lives in slot (t - 1) % capacity. The 64-bit counters say how far submission and
    // execution have got; the 32-bit event words change with them and are what sleeping threads wait on.
    std::vector<std::unique_ptr<Job>> ring_;
    std::vector<uint8_t> mask_;
    std::mutex api_mutex_;
    alignas(64) std::atomic<uint64_t> submitted_{0};
    alignas(64) std::atomic<uint64_t> completed_{0};
    alignas(64) std::atomic<uint32_t> submit_event_{0};
    alignas(64) std::atomic<uint32_t> complete_event_{0};
    std::atomic<bool> stop_{false};
    std::thread driver_;
    std::mutex error_mutex_;
    Status first_error_;
    Status driver_start_status_;
};

}  // namespace kt::moe
