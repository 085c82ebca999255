#include "moe/expert_pool.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "core/log.h"
#include "ops/types.h"

namespace kt::moe {

using cpu::GemmActs;
using cpu::PackedLayout;
using cpu::PackedMatrix;

namespace {

// Task granularity. Gate/up tasks cover 64 rows of an expert's I shard (two panels), down tasks 64 columns of H:
// small enough that decode (one token, ~10 active experts) yields a hundred tasks for dynamic balancing, large
// enough that the per-task overhead (an atomic increment, pointer setup) is noise next to 64 x H weights.
constexpr int64_t kIBlock = 64;
constexpr int64_t kHBlock = 64;
// Tokens per GEMM call inside a task: bounds the task's fp32 scratch (kTokenChunk x 64 floats per matrix, in L1/L2).
constexpr int64_t kTokenChunk = 64;
// Rows per item when quantizing activations / merging outputs.
constexpr int64_t kRowChunk = 4;
constexpr int64_t kMergeChunk = 1024;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct alignas(64) Counter {
    std::atomic<int64_t> next{0};
};

Status allocate(size_t bytes, const mem::Topology *topo, int node, mem::NumaBuffer *out) {
    return mem::NumaBuffer::allocate(std::max<size_t>(bytes, 64), topo, node, out);
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// State

struct ExpertPool::Job {
    enum Kind { kForward, kCallback } kind = kForward;
    ForwardArgs args;
    bool masked = false;
    std::vector<uint8_t> mask;  // [E], a snapshot of the pool's mask at submission
    const FunctionRef<Status()> *callback = nullptr;
    Status status;
};

// One NUMA group: its threads, its I shard, its weights and scratch (all on its node).
struct ExpertPool::Group {
    int node = 0;
    int t_begin = 0, t_end = 0;  // thread indexes
    std::unique_ptr<Barrier> barrier;
    int64_t i_begin = 0, i_end = 0;  // I shard
    int64_t shard() const { return i_end - i_begin; }

    PackedLayout gate_l, up_l, down_l;
    size_t gate_stride = 0, up_stride = 0, down_stride = 0;  // bytes per expert
    mem::NumaBuffer gate_w, up_w, down_w;

    // Scratch: h [slots][shard] fp32; its quantized form [slots][down kp] (+ scale, sums) or bf16; partial output
    // [tokens][H] fp32; per-thread GEMM tiles.
    mem::NumaBuffer h, hq, h_scale, h_sums, partial, tiles;
    mem::NumaBuffer slot_amax;  // [slots]: max |h| over this shard, combined across shards into one scale per row
    int64_t h_sums_ld = 0;
    int64_t tile_floats = 0;  // per thread

    Counter gate_up_next, amax_next, hq_next, down_next;

    PackedMatrix gate(int64_t e) const { return {gate_l, gate_w.as<uint8_t>() + e * gate_stride}; }
    PackedMatrix up(int64_t e) const { return {up_l, up_w.as<uint8_t>() + e * up_stride}; }
    PackedMatrix down(int64_t e) const { return {down_l, down_w.as<uint8_t>() + e * down_stride}; }
};

// Shared scratch: routing buckets and the quantized input (on the first group's node).
struct ExpertPool::Scratch {
    int64_t n_slots = 0, n_active = 0;
    std::vector<int32_t> count, offset, active;        // [E], [E + 1], [E]
    std::vector<int32_t> slot_token;                   // [max_slots], grouped by expert
    std::vector<float> slot_weight;                    // [max_slots]
    int64_t x_ld = 0;                                  // padded H
    cpu::QuantSpec gate_spec, up_spec, down_spec;
    bool gate_up_int = true, down_int = true;
    int shards = 0;  // groups with a non-empty shard of I
    mem::NumaBuffer xq, x_scale, x_sums_gate, x_sums_up;  // or xq holds bf16 rows
    int64_t sums_gate_ld = 0, sums_up_ld = 0;
    Counter x_next, merge_next;
};

// ------------------------------------------------------------------------------------------------------------
// Creation and teardown

Status ExpertPool::create(const ExpertPoolConfig &config, std::unique_ptr<ExpertPool> *out) {
    std::unique_ptr<ExpertPool> pool(new ExpertPool());
    KT_TRY(pool->init(config));
    *out = std::move(pool);
    return Status::ok();
}

Status ExpertPool::init(const ExpertPoolConfig &c) {
    KT_RETURN_IF(c.n_experts < 1 || c.n_experts > (1 << 20), KT_STATUS_INVALID_ARGUMENT, "expert pool: n_experts = %lld",
                 static_cast<long long>(c.n_experts));
    KT_RETURN_IF(c.hidden < 1 || c.hidden > (1 << 20) || c.intermediate < 1 || c.intermediate > (1 << 20),
                 KT_STATUS_INVALID_ARGUMENT, "expert pool: hidden = %lld, intermediate = %lld",
                 static_cast<long long>(c.hidden), static_cast<long long>(c.intermediate));
    KT_RETURN_IF(c.max_tokens < 1 || c.max_tokens > (1 << 24), KT_STATUS_INVALID_ARGUMENT, "expert pool: max_tokens = %lld",
                 static_cast<long long>(c.max_tokens));
    KT_RETURN_IF(c.max_top_k < 1 || c.max_top_k > 256 || c.max_top_k > c.n_experts * 4, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: max_top_k = %d", c.max_top_k);
    KT_RETURN_IF(c.max_in_flight < 1 || c.max_in_flight > 1024, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: max_in_flight = %d", c.max_in_flight);
    KT_RETURN_IF(c.n_threads < 0 || c.n_threads > 4096, KT_STATUS_INVALID_ARGUMENT, "expert pool: n_threads = %d",
                 c.n_threads);
    KT_RETURN_IF(c.spin_ns < 0, KT_STATUS_INVALID_ARGUMENT, "expert pool: negative spin time");
    KT_RETURN_IF(!(c.swiglu.limit >= 0.0f) || !(c.swiglu.alpha >= 0.0f), KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: swiglu limit %g / alpha %g must be >= 0", c.swiglu.limit, c.swiglu.alpha);
    config_ = c;

    topology_ = c.topology;
    if (!topology_) KT_TRY(mem::Topology::shared(&topology_));
    switch (c.numa) {
        case NumaPolicy::kAuto: KT_TRY(mem::plan_threads(*topology_, c.n_threads, {}, &plan_)); break;
        case NumaPolicy::kNodes:
            KT_RETURN_IF(c.numa_nodes.empty(), KT_STATUS_INVALID_ARGUMENT, "expert pool: an empty NUMA node list");
            KT_TRY(mem::plan_threads(*topology_, c.n_threads, c.numa_nodes, &plan_));
            break;
        case NumaPolicy::kOff: {
            // One group; threads still pinned to distinct cores, memory left to the OS.
            KT_TRY(mem::plan_threads(*topology_, std::max<int>(c.n_threads, static_cast<int>(topology_->nodes().size())),
                                     {}, &plan_));
            if (c.n_threads > 0 && static_cast<int>(plan_.threads.size()) > c.n_threads) plan_.threads.resize(static_cast<size_t>(c.n_threads));
            for (auto &t : plan_.threads) t.group = 0;
            plan_.nodes = {-1};
            plan_.group_begin = {0, static_cast<int>(plan_.threads.size())};
            break;
        }
        default: return Status::error(KT_STATUS_INVALID_ARGUMENT, "expert pool: numa policy %d", static_cast<int>(c.numa));
    }

    cpu::IsaLevel level = cpu::active_isa_level();
    if (static_cast<int>(c.max_isa) < static_cast<int>(level)) level = c.max_isa;
    kernels_ = &cpu::best_kernel_set(level);

    const int n = static_cast<int>(plan_.threads.size());
    thread_group_.resize(static_cast<size_t>(n));
    for (int g = 0; g < plan_.groups(); ++g) {
        auto grp = std::make_unique<Group>();
        grp->node = plan_.nodes[static_cast<size_t>(g)];
        grp->t_begin = plan_.group_begin[static_cast<size_t>(g)];
        grp->t_end = plan_.group_begin[static_cast<size_t>(g) + 1];
        grp->barrier = std::make_unique<Barrier>(grp->t_end - grp->t_begin, c.spin_ns);
        for (int t = grp->t_begin; t < grp->t_end; ++t) thread_group_[static_cast<size_t>(t)] = g;
        groups_.push_back(std::move(grp));
    }

    ThreadPoolOptions po;
    po.n_threads = n;
    po.spin_ns = c.spin_ns;
    po.name = "kt-expert";
    const mem::Topology *topo = topology_;
    const mem::ThreadPlan *plan = &plan_;
    po.on_worker_start = [topo, plan](int index) {
        const int pu = plan->threads[static_cast<size_t>(index)].pu;
        if (pu >= 0 && topo->can_bind_threads()) {
            const Status s = topo->bind_current_thread(pu);
            if (!s.is_ok()) KT_LOG_WARN_MSG("expert pool: worker %d stays unpinned: %s", index, s.message().c_str());
        }
    };
    KT_TRY(ThreadPool::create(po, &pool_));

    ring_.resize(static_cast<size_t>(c.max_in_flight));
    for (auto &j : ring_) {
        j = std::make_unique<Job>();
        j->mask.reserve(static_cast<size_t>(c.n_experts));
    }
    scratch_ = std::make_unique<Scratch>();
    info_.kernel_set = kernels_->name;
    info_.groups = plan_.groups();
    for (int g = 0; g < plan_.groups(); ++g) {
        info_.group_nodes.push_back(plan_.nodes[static_cast<size_t>(g)]);
        info_.group_threads.push_back(plan_.group_size(g));
    }
    try {
        driver_ = std::thread([this] { driver_main(); });
    } catch (const std::system_error &e) {
        return Status::error(KT_STATUS_OUT_OF_MEMORY, "expert pool: cannot start the driver thread: %s", e.what());
    }
    KT_LOG_INFO_MSG("expert pool: %d threads in %d group(s), kernels %s; %s", n, plan_.groups(), kernels_->name,
                    topology_->describe().c_str());
    return Status::ok();
}

ExpertPool::~ExpertPool() {
    if (driver_.joinable()) {
        stop_.store(true, std::memory_order_release);
        submit_event_.fetch_add(1, std::memory_order_release);
        submit_event_.notify_all();
        driver_.join();
    }
}

// ------------------------------------------------------------------------------------------------------------
// The job queue

void ExpertPool::driver_main() {
    const int pu = plan_.threads.empty() ? -1 : plan_.threads[0].pu;
    if (pu >= 0 && topology_->can_bind_threads()) {
        const Status s = topology_->bind_current_thread(pu);
        if (!s.is_ok()) KT_LOG_WARN_MSG("expert pool: driver stays unpinned: %s", s.message().c_str());
    }
    for (uint64_t next = 1;; ++next) {
        spin_then_wait(submit_event_, config_.spin_ns, [&](uint32_t) {
            return submitted_.load(std::memory_order_acquire) >= next || stop_.load(std::memory_order_acquire);
        });
        if (submitted_.load(std::memory_order_acquire) < next) return;  // stopping, queue empty
        Job &job = *ring_[static_cast<size_t>((next - 1) % ring_.size())];
        execute(job);
        if (!job.status.is_ok()) {
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (first_error_.is_ok()) first_error_ = job.status;
        }
        completed_.store(next, std::memory_order_release);
        complete_event_.fetch_add(1, std::memory_order_release);
        complete_event_.notify_all();
    }
}

Status ExpertPool::enqueue(Job &&job, uint64_t *ticket) {
    const uint64_t t = submitted_.load(std::memory_order_relaxed) + 1;
    const uint64_t cap = ring_.size();
    // Wait for a free slot: job t may be written once job t - cap has completed.
    spin_then_wait(complete_event_, config_.spin_ns,
                   [&](uint32_t) { return t <= completed_.load(std::memory_order_acquire) + cap; });
    Job &slot = *ring_[static_cast<size_t>((t - 1) % cap)];
    slot.kind = job.kind;
    slot.args = job.args;
    slot.masked = job.masked;
    slot.mask.assign(job.mask.begin(), job.mask.end());  // capacity reserved at creation: no allocation
    slot.callback = job.callback;
    slot.status = Status::ok();
    submitted_.store(t, std::memory_order_release);
    submit_event_.fetch_add(1, std::memory_order_release);
    submit_event_.notify_all();
    if (ticket) *ticket = t;
    return Status::ok();
}

Status ExpertPool::submit(const ForwardArgs &args, uint64_t *ticket) {
    std::lock_guard<std::mutex> lock(api_mutex_);
    KT_RETURN_IF(!loaded_, KT_STATUS_MISUSE, "expert pool: no weights loaded");
    KT_TRY(validate(args));
    Job job;
    job.kind = Job::kForward;
    job.args = args;
    job.masked = !mask_.empty();
    job.mask.swap(mask_);  // moved in and back below: no copy on this thread beyond the one into the slot
    const Status s = enqueue(std::move(job), ticket);
    mask_.swap(job.mask);
    return s;
}

Status ExpertPool::wait(uint64_t ticket) {
    const uint64_t target = ticket == 0 ? submitted_.load(std::memory_order_acquire) : ticket;
    KT_RETURN_IF(target > submitted_.load(std::memory_order_acquire), KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: wait for ticket %llu, but only %llu jobs were submitted",
                 static_cast<unsigned long long>(target), static_cast<unsigned long long>(submitted_.load()));
    spin_then_wait(complete_event_, config_.spin_ns,
                   [&](uint32_t) { return completed_.load(std::memory_order_acquire) >= target; });
    std::lock_guard<std::mutex> lock(error_mutex_);
    Status s = std::move(first_error_);
    first_error_ = Status::ok();
    return s;
}

Status ExpertPool::forward(const ForwardArgs &args) {
    uint64_t ticket = 0;
    KT_TRY(submit(args, &ticket));
    return wait(ticket);
}

void ExpertPool::drain() {
    const uint64_t target = submitted_.load(std::memory_order_acquire);
    spin_then_wait(complete_event_, config_.spin_ns,
                   [&](uint32_t) { return completed_.load(std::memory_order_acquire) >= target; });
}

Status ExpertPool::run_on_driver(FunctionRef<Status()> fn) {
    Job job;
    job.kind = Job::kCallback;
    job.callback = &fn;
    uint64_t ticket = 0;
    KT_TRY(enqueue(std::move(job), &ticket));
    spin_then_wait(complete_event_, config_.spin_ns,
                   [&](uint32_t) { return completed_.load(std::memory_order_acquire) >= ticket; });
    const Job &done = *ring_[static_cast<size_t>((ticket - 1) % ring_.size())];
    Status s = done.status;
    std::lock_guard<std::mutex> lock(error_mutex_);
    first_error_ = Status::ok();  // reported here, not by a later wait()
    return s;
}

Status ExpertPool::set_mask(const uint8_t *mask, int64_t n) {
    std::lock_guard<std::mutex> lock(api_mutex_);
    if (!mask) {
        mask_.clear();
        return Status::ok();
    }
    KT_RETURN_IF(n != config_.n_experts, KT_STATUS_INVALID_ARGUMENT, "expert pool: mask of %lld entries for %lld experts",
                 static_cast<long long>(n), static_cast<long long>(config_.n_experts));
    mask_.reserve(static_cast<size_t>(n));
    mask_.assign(mask, mask + n);
    return Status::ok();
}

Status ExpertPool::validate(const ForwardArgs &a) const {
    KT_RETURN_IF(a.n_tokens < 0 || a.n_tokens > config_.max_tokens, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: n_tokens = %lld (max_tokens %lld)", static_cast<long long>(a.n_tokens),
                 static_cast<long long>(config_.max_tokens));
    KT_RETURN_IF(a.top_k < 1 || a.top_k > config_.max_top_k, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: top_k = %d (max_top_k %d)", a.top_k, config_.max_top_k);
    if (a.n_tokens == 0) return Status::ok();
    KT_RETURN_IF(!a.input || !a.ids || !a.weights || !a.output, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: input, ids, weights and output must not be NULL");
    const int64_t n = a.n_tokens * a.top_k;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t id = a.ids_i64 ? static_cast<const int64_t *>(a.ids)[i] : static_cast<const int32_t *>(a.ids)[i];
        KT_RETURN_IF(id < -1 || id >= config_.n_experts, KT_STATUS_INVALID_ARGUMENT,
                     "expert pool: expert id %lld at token %lld slot %lld is out of range [-1, %lld)",
                     static_cast<long long>(id), static_cast<long long>(i / a.top_k), static_cast<long long>(i % a.top_k),
                     static_cast<long long>(config_.n_experts));
    }
    return Status::ok();
}

// ------------------------------------------------------------------------------------------------------------
// Loading

Status ExpertPool::load(const MatrixSource &gate, const MatrixSource &up, const MatrixSource &down,
                        int64_t first_expert, int64_t n_experts) {
    std::lock_guard<std::mutex> lock(api_mutex_);
    drain();
    const auto start = std::chrono::steady_clock::now();
    const int64_t E = config_.n_experts, H = config_.hidden, I = config_.intermediate;
    if (n_experts < 0) n_experts = E - first_expert;
    KT_RETURN_IF(first_expert < 0 || n_experts < 1 || first_expert + n_experts > E, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: experts [%lld, %lld + %lld) of %lld", static_cast<long long>(first_expert),
                 static_cast<long long>(first_expert), static_cast<long long>(n_experts), static_cast<long long>(E));
    const int64_t n = n_experts;
    KT_RETURN_IF(gate.rows != n * I || gate.cols != H || up.rows != n * I || up.cols != H, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: gate/up must be [%lld x %lld][%lld], got [%lld][%lld] and [%lld][%lld]",
                 static_cast<long long>(n), static_cast<long long>(I), static_cast<long long>(H),
                 static_cast<long long>(gate.rows), static_cast<long long>(gate.cols), static_cast<long long>(up.rows),
                 static_cast<long long>(up.cols));
    KT_RETURN_IF(down.rows != n * H || down.cols != I, KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: down must be [%lld x %lld][%lld], got [%lld][%lld]", static_cast<long long>(n),
                 static_cast<long long>(H), static_cast<long long>(I), static_cast<long long>(down.rows),
                 static_cast<long long>(down.cols));
    PackSpec gs, us, ds;
    KT_TRY(pack_spec_for(gate, config_.format, config_.int4_group, &gs).with_context("gate"));
    KT_TRY(pack_spec_for(up, config_.format, config_.int4_group, &us).with_context("up"));
    KT_TRY(pack_spec_for(down, config_.format, config_.int4_group, &ds).with_context("down"));
    const int64_t gran = std::lcm(int64_t{32}, slice_k_granularity(down, ds));
    // A load of all experts, or of experts whose packed types differ from those in place, starts over; a load of
    // some experts in the types in place replaces just those.
    const bool same = allocated_ && gs.type == specs_[0].type && gs.group == specs_[0].group &&
                      us.type == specs_[1].type && us.group == specs_[1].group && ds.type == specs_[2].type &&
                      ds.group == specs_[2].group && gran == granularity_;
    if (!same || n == E) {
        loaded_ = false;
        allocated_ = false;
        KT_TRY(prepare(gs, us, ds, gran));
        specs_[0] = gs;
        specs_[1] = us;
        specs_[2] = ds;
        granularity_ = gran;
        allocated_ = true;
    }
    KT_TRY(pack_experts(gate, up, down, first_expert, n));
    loaded_ = true;
    info_.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    KT_LOG_INFO_MSG("expert pool: loaded experts [%lld, %lld) of %lld (gate %s, up %s, down %s), %.1f MiB packed in %.2f s",
                    static_cast<long long>(first_expert), static_cast<long long>(first_expert + n), static_cast<long long>(E),
                    info_.gate_type.c_str(), info_.up_type.c_str(), info_.down_type.c_str(),
                    static_cast<double>(info_.expert_bytes * static_cast<uint64_t>(n)) / (1 << 20), info_.load_seconds);
    return Status::ok();
}

Status ExpertPool::prepare(const PackSpec &gs, const PackSpec &us, const PackSpec &ds, int64_t gran) {
    const int64_t E = config_.n_experts, H = config_.hidden, I = config_.intermediate;
    // Shards of I: proportional to each group's threads, cut where every format allows (32-row panels for gate/up,
    // the down format's K granularity).
    const int n_groups = static_cast<int>(groups_.size());
    const int total_threads = static_cast<int>(plan_.threads.size());
    int64_t begin = 0;
    for (int g = 0; g < n_groups; ++g) {
        Group &grp = *groups_[static_cast<size_t>(g)];
        int64_t end = I;
        if (g + 1 < n_groups) {
            const int before = grp.t_end;  // threads of groups 0..g
            end = std::min(I, round_up(I * before / total_threads, gran));
            end = std::max(end, begin);
        }
        grp.i_begin = begin;
        grp.i_end = end;
        begin = end;
    }

    // Layouts and buffers, per group on its node.
    Scratch &sc = *scratch_;
    const int64_t max_slots = config_.max_tokens * config_.max_top_k;
    info_.weight_bytes = 0;
    info_.shard_begin.clear();
    info_.placement.clear();
    for (auto &gp : groups_) {
        Group &grp = *gp;
        const mem::Topology *topo = grp.node >= 0 ? topology_ : nullptr;
        info_.shard_begin.push_back(grp.i_begin);
        grp.gate_w = mem::NumaBuffer();
        grp.up_w = mem::NumaBuffer();
        grp.down_w = mem::NumaBuffer();
        if (grp.shard() == 0) {
            info_.placement.emplace_back("empty");
            continue;
        }
        KT_TRY(cpu::packed_layout(gs.type, grp.shard(), H, gs.group, 0, &grp.gate_l).with_context("gate"));
        KT_TRY(cpu::packed_layout(us.type, grp.shard(), H, us.group, 0, &grp.up_l).with_context("up"));
        const int32_t offset = cpu::packed_type_info(ds.type).superblock > 0 ? static_cast<int32_t>(grp.i_begin % 256) : 0;
        KT_TRY(cpu::packed_layout(ds.type, H, grp.shard(), ds.group, offset, &grp.down_l).with_context("down"));
        grp.gate_stride = round_up(static_cast<int64_t>(grp.gate_l.bytes), 64);
        grp.up_stride = round_up(static_cast<int64_t>(grp.up_l.bytes), 64);
        grp.down_stride = round_up(static_cast<int64_t>(grp.down_l.bytes), 64);
        KT_TRY(allocate(grp.gate_stride * E, topo, grp.node, &grp.gate_w));
        KT_TRY(allocate(grp.up_stride * E, topo, grp.node, &grp.up_w));
        KT_TRY(allocate(grp.down_stride * E, topo, grp.node, &grp.down_w));
        info_.weight_bytes += (grp.gate_stride + grp.up_stride + grp.down_stride) * static_cast<uint64_t>(E);
        info_.placement.emplace_back(mem::placement_name(grp.gate_w.placement()));

        // Scratch.
        const bool down_int = grp.down_l.type != cpu::PackedType::kBf16;
        const int64_t dkp = grp.down_l.kp;
        KT_TRY(allocate(sizeof(float) * max_slots * grp.shard(), topo, grp.node, &grp.h));
        KT_TRY(allocate((down_int ? 1 : 2) * max_slots * dkp, topo, grp.node, &grp.hq));
        if (down_int) {
            sc.down_spec = cpu::quant_spec(grp.down_l);
            grp.h_sums_ld = cpu::quant_sums_per_row(sc.down_spec, grp.shard());
            KT_TRY(allocate(sizeof(float) * max_slots, topo, grp.node, &grp.h_scale));
            KT_TRY(allocate(sizeof(float) * max_slots, topo, grp.node, &grp.slot_amax));
            KT_TRY(allocate(sizeof(int32_t) * max_slots * grp.h_sums_ld, topo, grp.node, &grp.h_sums));
        }
        KT_TRY(allocate(sizeof(float) * config_.max_tokens * H, topo, grp.node, &grp.partial));
        grp.tile_floats = kTokenChunk * std::max(2 * kIBlock, kHBlock);
        KT_TRY(allocate(sizeof(float) * grp.tile_floats * (grp.t_end - grp.t_begin), topo, grp.node, &grp.tiles));
    }
    const Group *first = nullptr;
    for (auto &gp : groups_)
        if (gp->shard() > 0) {
            first = gp.get();
            break;
        }
    KT_RETURN_IF(!first, KT_STATUS_INTERNAL, "expert pool: no group received a shard of I = %lld", static_cast<long long>(I));
    info_.gate_type = cpu::packed_type_info(first->gate_l.type).name;
    info_.up_type = cpu::packed_type_info(first->up_l.type).name;
    info_.down_type = cpu::packed_type_info(first->down_l.type).name;
    info_.expert_bytes = info_.weight_bytes / static_cast<uint64_t>(E);
    sc.shards = 0;
    for (auto &gp : groups_) sc.shards += gp->shard() > 0;
    info_.shard_begin.push_back(I);

    // The input's activation buffers (one quantization shared by gate and up when their formats agree).
    sc.gate_up_int = first->gate_l.type != cpu::PackedType::kBf16;
    KT_RETURN_IF(sc.gate_up_int != (first->up_l.type != cpu::PackedType::kBf16), KT_STATUS_UNSUPPORTED,
                 "expert pool: gate (%s) and up (%s) must both be BF16 or both integer formats", info_.gate_type.c_str(),
                 info_.up_type.c_str());
    sc.down_int = first->down_l.type != cpu::PackedType::kBf16;
    sc.x_ld = std::max(first->gate_l.kp, first->up_l.kp);
    const mem::Topology *topo0 = first->node >= 0 ? topology_ : nullptr;
    KT_TRY(allocate((sc.gate_up_int ? 1 : 2) * config_.max_tokens * sc.x_ld, topo0, first->node, &sc.xq));
    if (sc.gate_up_int) {
        sc.gate_spec = cpu::quant_spec(first->gate_l);
        sc.up_spec = cpu::quant_spec(first->up_l);
        sc.sums_gate_ld = cpu::quant_sums_per_row(sc.gate_spec, H);
        sc.sums_up_ld = cpu::quant_sums_per_row(sc.up_spec, H);
        KT_TRY(allocate(sizeof(float) * config_.max_tokens, topo0, first->node, &sc.x_scale));
        KT_TRY(allocate(sizeof(int32_t) * config_.max_tokens * sc.sums_gate_ld, topo0, first->node, &sc.x_sums_gate));
        if (!(sc.up_spec == sc.gate_spec))
            KT_TRY(allocate(sizeof(int32_t) * config_.max_tokens * sc.sums_up_ld, topo0, first->node, &sc.x_sums_up));
    }
    sc.count.assign(static_cast<size_t>(E), 0);
    sc.offset.assign(static_cast<size_t>(E + 1), 0);
    sc.active.assign(static_cast<size_t>(E), 0);
    sc.slot_token.assign(static_cast<size_t>(max_slots), 0);
    sc.slot_weight.assign(static_cast<size_t>(max_slots), 0.0f);

    return Status::ok();
}

Status ExpertPool::pack_experts(const MatrixSource &gate, const MatrixSource &up, const MatrixSource &down,
                                int64_t first_expert, int64_t n) {
    const int64_t H = config_.hidden, I = config_.intermediate;
    const PackSpec gs = specs_[0], us = specs_[1], ds = specs_[2];
    // Pack: each group's threads pack that group's shard of every expert (first touch on the right node), from
    // the driver thread so that thread 0 is on the first node too.
    std::vector<Counter> next(groups_.size());
    std::mutex err_mutex;
    Status err;
    auto pack_all = [&]() -> Status {
        return pool_->run([&](int tid) {
            Group &grp = *groups_[static_cast<size_t>(thread_group_[static_cast<size_t>(tid)])];
            if (grp.shard() == 0) return;
            Counter &ctr = next[static_cast<size_t>(thread_group_[static_cast<size_t>(tid)])];
            for (;;) {
                const int64_t item = ctr.next.fetch_add(1, std::memory_order_relaxed);
                if (item >= 3 * n) return;
                const int64_t j = item / 3, e = first_expert + j;  // j: the expert's index in the sources
                Status s;
                switch (item % 3) {
                    case 0:
                        s = pack_slice(gate, gs, j * I + grp.i_begin, 0, grp.gate_l, 0, grp.gate_l.panels,
                                       grp.gate_w.as<uint8_t>() + e * grp.gate_stride);
                        break;
                    case 1:
                        s = pack_slice(up, us, j * I + grp.i_begin, 0, grp.up_l, 0, grp.up_l.panels,
                                       grp.up_w.as<uint8_t>() + e * grp.up_stride);
                        break;
                    default:
                        s = pack_slice(down, ds, j * H, grp.i_begin, grp.down_l, 0, grp.down_l.panels,
                                       grp.down_w.as<uint8_t>() + e * grp.down_stride);
                        break;
                }
                if (!s.is_ok()) {
                    std::lock_guard<std::mutex> l(err_mutex);
                    if (err.is_ok()) err = std::move(s);
                }
            }
        });
    };
    KT_TRY(run_on_driver(pack_all));
    return err;
}

// ------------------------------------------------------------------------------------------------------------
// Execution

void ExpertPool::execute(Job &job) {
    if (job.kind == Job::kCallback) {
        job.status = (*job.callback)();
        return;
    }
    const ForwardArgs &a = job.args;
    if (a.n_tokens == 0) return;
    Scratch &sc = *scratch_;
    const int64_t E = config_.n_experts;

    // Bucket (token, slot) pairs by expert: counts, offsets, then a stable fill (tokens ascending per expert).
    std::fill(sc.count.begin(), sc.count.end(), 0);
    auto id_at = [&](int64_t i) -> int64_t {
        return a.ids_i64 ? static_cast<const int64_t *>(a.ids)[i] : static_cast<const int32_t *>(a.ids)[i];
    };
    const int64_t n = a.n_tokens * a.top_k;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t e = id_at(i);
        if (e < 0 || (job.masked && job.mask[static_cast<size_t>(e)])) continue;
        ++sc.count[static_cast<size_t>(e)];
    }
    sc.n_active = 0;
    sc.offset[0] = 0;
    for (int64_t e = 0; e < E; ++e) {
        sc.offset[static_cast<size_t>(e) + 1] = sc.offset[static_cast<size_t>(e)] + sc.count[static_cast<size_t>(e)];
        if (sc.count[static_cast<size_t>(e)] > 0) sc.active[static_cast<size_t>(sc.n_active++)] = static_cast<int32_t>(e);
    }
    sc.n_slots = sc.offset[static_cast<size_t>(E)];
    // Fill: count[] becomes each expert's write cursor.
    for (int64_t e = 0; e < E; ++e) sc.count[static_cast<size_t>(e)] = sc.offset[static_cast<size_t>(e)];
    for (int64_t i = 0; i < n; ++i) {
        const int64_t e = id_at(i);
        if (e < 0 || (job.masked && job.mask[static_cast<size_t>(e)])) continue;
        const int32_t s = sc.count[static_cast<size_t>(e)]++;
        sc.slot_token[static_cast<size_t>(s)] = static_cast<int32_t>(i / a.top_k);
        sc.slot_weight[static_cast<size_t>(s)] = a.weights[i];
    }

    sc.x_next.next.store(0, std::memory_order_relaxed);
    sc.merge_next.next.store(0, std::memory_order_relaxed);
    for (auto &g : groups_) {
        g->gate_up_next.next.store(0, std::memory_order_relaxed);
        g->amax_next.next.store(0, std::memory_order_relaxed);
        g->hq_next.next.store(0, std::memory_order_relaxed);
        g->down_next.next.store(0, std::memory_order_relaxed);
    }
    job.status = pool_->run([&](int tid) { run_phases(job, tid); });
}

void ExpertPool::run_phases(Job &job, int tid) {
    const ForwardArgs &a = job.args;
    Scratch &sc = *scratch_;
    const cpu::KernelSet &ks = *kernels_;
    const int64_t H = config_.hidden, T = a.n_tokens;
    Group &grp = *groups_[static_cast<size_t>(thread_group_[static_cast<size_t>(tid)])];
    float *tile = grp.tiles.as<float>() + static_cast<int64_t>(tid - grp.t_begin) * grp.tile_floats;

    // 1. The input, quantized (or converted to bf16) once per token.
    const size_t in_elt = config_.input_bf16 ? 2 : 4;
    for (;;) {
        const int64_t t0 = sc.x_next.next.fetch_add(kRowChunk, std::memory_order_relaxed);
        if (t0 >= T) break;
        for (int64_t t = t0; t < std::min(T, t0 + kRowChunk); ++t) {
            const void *src = static_cast<const uint8_t *>(a.input) + static_cast<size_t>(t * H) * in_elt;
            if (sc.gate_up_int) {
                int8_t *q = sc.xq.as<int8_t>() + t * sc.x_ld;
                sc.x_scale.as<float>()[t] = ks.quantize_row(src, config_.input_bf16, H, sc.x_ld, q);
                cpu::group_sums_row(q, H, sc.gate_spec, sc.x_sums_gate.as<int32_t>() + t * sc.sums_gate_ld);
                if (sc.x_sums_up.data()) cpu::group_sums_row(q, H, sc.up_spec, sc.x_sums_up.as<int32_t>() + t * sc.sums_up_ld);
            } else {
                ks.convert_row_bf16(src, config_.input_bf16, H, sc.x_ld, sc.xq.as<uint16_t>() + t * sc.x_ld);
            }
        }
    }
    pool_->barrier();

    // Phases 2-4 run per group on its shard; every thread still reaches every all-thread barrier.
    const int64_t shard = grp.shard();
    if (shard > 0) {
        // 2. Gate and up on the same rows of each expert, then SwiGLU into h.
        const int64_t iblocks = (shard + kIBlock - 1) / kIBlock;
        const int64_t items = sc.n_active * iblocks;
        float *tg = tile, *tu = tile + kTokenChunk * kIBlock;
        for (;;) {
            const int64_t item = grp.gate_up_next.next.fetch_add(1, std::memory_order_relaxed);
            if (item >= items) break;
            const int64_t e = sc.active[static_cast<size_t>(item / iblocks)];
            const int64_t n0 = (item % iblocks) * kIBlock, n1 = std::min(shard, n0 + kIBlock);
            const int64_t s_begin = sc.offset[static_cast<size_t>(e)], s_end = sc.offset[static_cast<size_t>(e) + 1];
            for (int64_t s0 = s_begin; s0 < s_end; s0 += kTokenChunk) {
                const int64_t m = std::min(kTokenChunk, s_end - s0);
                GemmActs acts;
                acts.rows = sc.slot_token.data() + s0;
                if (sc.gate_up_int) {
                    acts.q = sc.xq.as<int8_t>();
                    acts.q_ld = sc.x_ld;
                    acts.scale = sc.x_scale.as<float>();
                    acts.sums = sc.x_sums_gate.as<int32_t>();
                    acts.sums_ld = sc.sums_gate_ld;
                } else {
                    acts.bf16 = sc.xq.as<uint16_t>();
                    acts.bf16_ld = sc.x_ld;
                }
                cpu::gemm(ks, grp.gate(e), acts, m, n0, n1, tg, kIBlock);
                if (sc.x_sums_up.data()) {
                    acts.sums = sc.x_sums_up.as<int32_t>();
                    acts.sums_ld = sc.sums_up_ld;
                }
                cpu::gemm(ks, grp.up(e), acts, m, n0, n1, tu, kIBlock);
                for (int64_t i = 0; i < m; ++i)
                    ks.swiglu_row(tg + i * kIBlock, tu + i * kIBlock, n1 - n0, config_.swiglu,
                                  grp.h.as<float>() + (s0 + i) * shard + n0);
            }
        }
        grp.barrier->arrive_and_wait();

        // 3a. With several shards, each row of h is quantized with one scale from the whole row (max |h| over all
        //     shards), so that sharded results equal unsharded ones up to fp32 rounding.
        if (sc.down_int && sc.shards > 1) {
            for (;;) {
                const int64_t s0 = grp.amax_next.next.fetch_add(kRowChunk, std::memory_order_relaxed);
                if (s0 >= sc.n_slots) break;
                for (int64_t s = s0; s < std::min(sc.n_slots, s0 + kRowChunk); ++s)
                    grp.slot_amax.as<float>()[s] = ks.row_amax(grp.h.as<float>() + s * shard, false, shard);
            }
        }
    }
    if (sc.down_int && sc.shards > 1) pool_->barrier();
    if (shard > 0) {
        // 3b. h quantized once per (token, slot) row for the down projection.
        const int64_t dkp = grp.down_l.kp;
        for (;;) {
            const int64_t s0 = grp.hq_next.next.fetch_add(kRowChunk, std::memory_order_relaxed);
            if (s0 >= sc.n_slots) break;
            for (int64_t s = s0; s < std::min(sc.n_slots, s0 + kRowChunk); ++s) {
                const float *h = grp.h.as<float>() + s * shard;
                if (sc.down_int) {
                    int8_t *q = grp.hq.as<int8_t>() + s * dkp;
                    float amax;
                    if (sc.shards > 1) {
                        amax = 0.0f;
                        for (auto &g : groups_)
                            if (g->shard() > 0) amax = std::max(amax, g->slot_amax.as<float>()[s]);
                    } else {
                        amax = ks.row_amax(h, false, shard);
                    }
                    grp.h_scale.as<float>()[s] = ks.quantize_row_amax(h, false, shard, dkp, amax, q);
                    cpu::group_sums_row(q, shard, sc.down_spec, grp.h_sums.as<int32_t>() + s * grp.h_sums_ld);
                } else {
                    ks.convert_row_bf16(h, false, shard, dkp, grp.hq.as<uint16_t>() + s * dkp);
                }
            }
        }
        grp.barrier->arrive_and_wait();

        // 4. Down projection per block of H columns over every active expert, weighted into the partial output.
        const int64_t hblocks = (H + kHBlock - 1) / kHBlock;
        float *td = tile;
        float *partial = grp.partial.as<float>();
        for (;;) {
            const int64_t hb = grp.down_next.next.fetch_add(1, std::memory_order_relaxed);
            if (hb >= hblocks) break;
            const int64_t h0 = hb * kHBlock, h1 = std::min(H, h0 + kHBlock);
            for (int64_t t = 0; t < T; ++t) std::memset(partial + t * H + h0, 0, sizeof(float) * static_cast<size_t>(h1 - h0));
            for (int64_t ai = 0; ai < sc.n_active; ++ai) {
                const int64_t e = sc.active[static_cast<size_t>(ai)];
                const int64_t s_begin = sc.offset[static_cast<size_t>(e)], s_end = sc.offset[static_cast<size_t>(e) + 1];
                for (int64_t s0 = s_begin; s0 < s_end; s0 += kTokenChunk) {
                    const int64_t m = std::min(kTokenChunk, s_end - s0);
                    GemmActs acts;
                    if (sc.down_int) {
                        acts.q = grp.hq.as<int8_t>() + s0 * dkp;
                        acts.q_ld = dkp;
                        acts.scale = grp.h_scale.as<float>() + s0;
                        acts.sums = grp.h_sums.as<int32_t>() + s0 * grp.h_sums_ld;
                        acts.sums_ld = grp.h_sums_ld;
                    } else {
                        acts.bf16 = grp.hq.as<uint16_t>() + s0 * dkp;
                        acts.bf16_ld = dkp;
                    }
                    cpu::gemm(ks, grp.down(e), acts, m, h0, h1, td, kHBlock);
                    for (int64_t i = 0; i < m; ++i) {
                        const int64_t s = s0 + i;
                        ks.axpy_row(sc.slot_weight[static_cast<size_t>(s)], td + i * kHBlock, h1 - h0,
                                    partial + sc.slot_token[static_cast<size_t>(s)] * H + h0);
                    }
                }
            }
        }
    }
    pool_->barrier();

    // 5. out = (accumulate ? out : 0) + the groups' partial sums, in group order.
    const float *srcs[64];
    int n_src = 0;
    const int64_t chunks = (H + kMergeChunk - 1) / kMergeChunk;
    const size_t out_elt = config_.output_bf16 ? 2 : 4;
    for (;;) {
        const int64_t item = sc.merge_next.next.fetch_add(1, std::memory_order_relaxed);
        if (item >= T * chunks) break;
        const int64_t t = item / chunks, c0 = (item % chunks) * kMergeChunk, c1 = std::min(H, c0 + kMergeChunk);
        n_src = 0;
        for (auto &g : groups_)
            if (g->shard() > 0 && n_src < 64) srcs[n_src++] = g->partial.as<float>() + t * H + c0;
        void *dst = static_cast<uint8_t *>(a.output) + static_cast<size_t>(t * H + c0) * out_elt;
        ks.merge_row(srcs, n_src, c1 - c0, dst, config_.output_bf16, a.accumulate);
    }
}

}  // namespace kt::moe
