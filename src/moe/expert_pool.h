// ExpertPool: the routed experts of one MoE layer on the CPU, behind kt_expert_pool_*.
//
// Per call (T tokens routed to top_k experts each):
//   0. bucket (token, slot) pairs by expert, skipping id -1 and masked experts           (driver thread, O(T k))
//   1. quantize each token's activations once (int8 + scale + group sums, or bf16)      (all threads)
//   2. per NUMA group g, tasks (expert, block of its I shard): gate and up GEMMs of the expert's tokens on the
//      same weights tile (plus their biases, if any), SwiGLU in fp32 into h                (group g)
//   3. quantize each (token, slot) row of h once for the down projection, with one scale from the whole row
//      (max |h| over all shards), so that sharded results equal unsharded ones           (group g)
//   4. tasks (block of H): for every active expert, down GEMM of its rows (plus its bias, in the first group only)
//      and the weighted fp32 add into the group's partial output (a task owns its output columns, so no two
//      threads add to the same value)
//   5. out = (accumulate ? out : 0) + sum of the groups' partial outputs                   (all threads)
// A phase waits for the tasks it depends on to be done, never for threads to arrive (no barriers), and a thread
// takes its own group's tasks first, then the other groups' leftovers: a worker that has not started the job (its
// core busy with another process) delays nothing, and the threads that run do its share.
// Each expert's intermediate dimension I is split across the executor's NUMA groups (shards sized by thread count,
// on boundaries every format allows); each shard's gate/up rows and down columns live in its node's memory,
// packed by that node's threads (first touch where binding is unavailable). Sharding is decided here, at load,
// from the same sources: the packed layout does not depend on the node count.
//
// Pools with the same thread settings share an Executor (threads, FIFO job queue, scratch; see executor.h): the
// layers of a model run on one set of warm threads. forward() is submit() + wait(). Nothing is allocated per call.
//
// Thread safety: every method may be called from any thread. load() and set_mask() are serialized with submit();
// wait() only waits. Buffers passed to submit() must stay valid until the job completes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/status.h"
#include "moe/executor.h"
#include "moe/packed_store.h"
#include "moe/weights.h"

namespace kt::moe {

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
    // Threads (see executor.h): pools with equal settings share one executor unless private_threads.
    int32_t n_threads = 0;  // 0: one per physical core of the nodes used
    NumaPolicy numa = NumaPolicy::kAuto;
    std::vector<int> numa_nodes;  // kNodes: logical node indexes
    int64_t spin_ns = kDefaultSpinNs;
    const mem::Topology *topology = nullptr;  // nullptr: the process topology (honours HWLOC_* variables)
    bool private_threads = false;
    std::function<void(int worker_index)> on_worker_start;  // tests only: see ExecutorConfig (implies private threads)
    cpu::SwigluParams swiglu;
    // Per-expert biases (gpt-oss), empty for none: gate = W_gate x + gate_bias[e], up likewise, out = W_down h +
    // down_bias[e]. gate_bias / up_bias: [n_experts][I], down_bias: [n_experts][H].
    std::vector<float> gate_bias, up_bias, down_bias;
    int32_t max_in_flight = 4;  // jobs this pool may have queued before submit blocks
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
    // Optional, for schedulers that overlap this job with other work (the hybrid FFN): when `times` is set, the
    // driver thread writes the job's begin and end (monotonic_ns) there; wait() makes them visible. `on_begin` (if
    // set) is called on the driver thread as the job begins, before any work; it must not call into this pool.
    JobTimes *times = nullptr;
    const FunctionRef<void()> *on_begin = nullptr;
};

// What load produced, for diagnostics and benchmarks.
struct PoolInfo {
    std::string kernel_set;       // "avx512-vnni-bf16", ...
    std::string gate_type, up_type, down_type;  // packed types, e.g. "Q4_K"
    int groups = 0;               // NUMA groups (= shards)
    std::vector<int> group_nodes; // logical node of each group (-1: memory left to the OS)
    std::vector<int> group_threads;
    std::vector<int64_t> shard_begin;  // I range of group g: [shard_begin[g], shard_begin[g+1])
    std::vector<std::string> placement;  // per group: "bound" / "first-touch" / "anywhere" / "empty"
    uint64_t weight_bytes = 0;    // packed bytes of all experts, all shards
    uint64_t expert_bytes = 0;    // packed bytes of one expert (gate + up + down, all shards)
    double load_seconds = 0.0;
};

class ExpertPool {
public:
    static Status create(const ExpertPoolConfig &config, std::unique_ptr<ExpertPool> *out);
    ~ExpertPool();  // waits for this pool's queued jobs
    ExpertPool(const ExpertPool &) = delete;
    ExpertPool &operator=(const ExpertPool &) = delete;

    // gate, up: [n * I][H] (expert first_expert + j in rows j*I .. j*I+I-1); down: [n * H][I], for experts
    // [first_expert, first_expert + n) (n < 0: to the last one). Loading all experts, or packed types other than
    // those in place, starts over (experts not loaded since hold zeros); otherwise only these experts are replaced,
    // so a host can convert a layer expert by expert.
    // With a store (may be nullptr; used by loads of all experts), each shard's gate, up and down buffers are first
    // asked of it under the tensors' names (names: gate, up, down; may be nullptr for ""): when it has all of them
    // the sources' data is never read; otherwise the experts are packed and the packed buffers handed to it.
    Status load(const MatrixSource &gate, const MatrixSource &up, const MatrixSource &down, int64_t first_expert = 0,
                int64_t n_experts = -1, PackedStore *store = nullptr, const char *const *names = nullptr);
    bool loaded() const { return loaded_; }
    // Whether the packed weights in place are views of a store's (a cache file's) instead of packed here.
    bool from_store() const { return from_store_; }

    // mask[e] != 0: expert e is computed elsewhere and skipped. nullptr clears the mask. Applies to jobs submitted
    // afterwards.
    Status set_mask(const uint8_t *mask, int64_t n);

    Status forward(const ForwardArgs &args);
    // Validates and queues a job (blocking while max_in_flight of this pool's jobs are queued). *ticket numbers
    // jobs from 1 (shared with the pools on the same executor, in the order they run).
    Status submit(const ForwardArgs &args, uint64_t *ticket);
    // Waits until job `ticket` (and every earlier one) has finished; 0 waits for all of this pool's jobs. Returns
    // the first failure of this pool's jobs finished since the previous wait, if any.
    Status wait(uint64_t ticket);

    const ExpertPoolConfig &config() const { return config_; }
    const PoolInfo &info() const { return info_; }
    const cpu::KernelSet &kernels() const { return *kernels_; }
    const Executor &executor() const { return *executor_; }
    // This pool's GEMM calls since it was created, by the ISA that ran them (gemm_counters.h).
    cpu::GemmCounts gemm_counts() const;

    // Runs one job; called by the executor's driver thread.
    void execute(Executor &ex, Job &job);

private:
    struct Group;  // this pool's shard of each executor group

    ExpertPool() = default;
    Status init(const ExpertPoolConfig &config);
    Status validate(const ForwardArgs &args) const;
    Status prepare(const PackSpec &gate, const PackSpec &up, const PackSpec &down, int64_t granularity,
                   PackedStore *store, const char *const names[3]);
    Status pack_experts(const MatrixSource &gate, const MatrixSource &up, const MatrixSource &down, int64_t first_expert,
                        int64_t n);
    void run_phases(Executor &ex, const Job &job, int tid);
    void execute_forward(Executor &ex, Job &job);

    ExpertPoolConfig config_;
    std::shared_ptr<Executor> executor_;
    const cpu::KernelSet *kernels_ = nullptr;
    std::unique_ptr<cpu::GemmCounter[]> thread_counters_;  // one per executor thread, written only by it
    std::vector<std::unique_ptr<Group>> groups_;
    PoolInfo info_;
    bool loaded_ = false;
    bool allocated_ = false;
    bool from_store_ = false;  // the buffers are a store's views (read-only): partial loads must start over
    PackSpec specs_[3];        // gate, up, down as packed now
    int64_t granularity_ = 0;  // K granularity of the down slices the shards were cut with
    int shards_ = 0;           // groups with a non-empty shard

    // Activation formats, fixed at load.
    bool gate_up_int_ = true, down_int_ = true;
    cpu::QuantSpec gate_spec_, up_spec_, down_spec_;
    bool separate_up_sums_ = false;
    int64_t x_ld_ = 0, sums_gate_ld_ = 0, sums_up_ld_ = 0;
    size_t thread_scratch_ = 0;  // bytes of each thread's share of a group's tiles (run_phases)

    std::mutex mutex_;                 // submit, load, set_mask
    std::vector<uint8_t> mask_;
    std::vector<uint64_t> recent_;     // this pool's last max_in_flight tickets (a ring)
    uint64_t submitted_jobs_ = 0;
    std::atomic<uint64_t> last_ticket_{0};
    std::mutex error_mutex_;
    Status first_error_;
    // The running job's GemmActs::rows_id values: gate/up rows of slot chunk s0 are job_rows_id_ + s0, down rows
    // job_rows_id_ + n_slots + s0 (set by the driver thread before the workers start).
    uint64_t job_rows_id_ = 0;

    // KT_EXPERT_TRACE=1: per-phase timing of every job, summarised in the log when the pool is freed. Each thread
    // records when it finishes its own work in a phase (before the barrier); the driver adds up each phase's wall
    // time and the threads' mean work time, whose difference is time lost to imbalance and synchronisation.
    static constexpr int kPhases = 5;  // quantize x, gate/up + SwiGLU, quantize h, down, merge
    struct alignas(64) ThreadTrace {
        int64_t done_ns[kPhases] = {};
    };
    bool trace_ = false;
    std::vector<ThreadTrace> thread_trace_;
    int64_t trace_jobs_ = 0, trace_bucket_ns_ = 0;
    int64_t trace_wall_ns_[kPhases] = {}, trace_work_ns_[kPhases] = {};
    // How the routed rows fell on the experts, summed over jobs: active experts, and those with fewer than 8, 8-31,
    // 32-63 and at least 64 rows (an expert's GEMMs read its weights once whatever its rows, so the share of
    // experts with few rows says how much of a prefill runs at a decode's rate).
    static constexpr int kRowBuckets = 4;
    int64_t trace_active_ = 0, trace_rows_[kRowBuckets] = {};
};

}  // namespace kt::moe
