#include "moe/expert_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "backends/cpu/amx/amx_gemm.h"
#include "core/log.h"
#include "ops/types.h"

namespace kt::moe {

using cpu::GemmActs;
using cpu::PackedLayout;
using cpu::PackedMatrix;

namespace {

// Task granularity, chosen per call: gate/up tasks cover a block of rows of an expert's I shard, down tasks a block
// of H columns (whole 32-wide panels). Long blocks make long contiguous weight streams (a block's panels are
// adjacent in memory), which the prefetchers sustain better than many short ones: decode is bandwidth bound. Blocks
// shrink (to one panel) until each group has at least kTasksPerThread tasks per thread, so that the last tasks
// of a phase leave threads idle for a small share of it.
constexpr int64_t kMaxBlock = 256;
constexpr int64_t kTasksPerThread = 8;
// Except in the down projection of a streaming job (decode: fewer than kStreamingRowsPerExpert rows per active
// expert on average, so its GEMMs are weight streams). A down task reads its block of H columns from every active
// expert, one stream each, so there the length of the streams pays more than finer balance: with 2 tasks per
// thread instead of 8, kt-expert-bench on the AMX host (Qwen3 shapes, 2 threads, one token, median of 3
// alternating runs) read Q4_K at 76 -> 79 %, INT4 at 73 -> 82 %, Q6_K at 81 -> 84 % of the bandwidth. Prefill keeps
// 8: there INT8 at 2048 tokens lost 13 % with 2.
constexpr int64_t kStreamingDownTasksPerThread = 2;
constexpr int64_t kStreamingRowsPerExpert = 4;
// Tokens per GEMM call inside a task: bounds the task's fp32 scratch (kTokenChunk x block floats per matrix). 128:
// the AMX kernels do per-call work (gathering rows, unpacking each GGUF panel) that 128 rows (four 32-row tile
// blocks) share, where 64 left an expert of 2048 routed tokens (Qwen3: ~128 rows) with two calls per block.
constexpr int64_t kTokenChunk = 128;
constexpr int64_t kTileFloats = kTokenChunk * 2 * kMaxBlock;  // per thread: gate and up outputs (or down's)
// Rows per item when quantizing activations / merging outputs.
constexpr int64_t kRowChunk = 4;
constexpr int64_t kMergeChunk = 1024;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The largest block (a multiple of 32, at most kMaxBlock) that still cuts `extent` x `count` into tasks_per_thread
// tasks per thread.
int64_t task_block(int64_t extent, int64_t count, int threads, int64_t tasks_per_thread = kTasksPerThread) {
    int64_t block = kMaxBlock;
    while (block > cpu::kPanel && count * ((extent + block - 1) / block) < tasks_per_thread * threads) block /= 2;
    return block;
}

// The three projections, in this order wherever they come as a set: specs_, the names a PackedStore keeps them
// under, and a group's packed weights.
enum Projection : int { kGateProj, kUpProj, kDownProj, kProjections };
constexpr int32_t kStorePart[kProjections] = {PackedBufferDesc::kGate, PackedBufferDesc::kUp, PackedBufferDesc::kDown};

}  // namespace

// This pool's part of one executor group: its I shard, the shard's packed weights (on the group's node).
struct ExpertPool::Group {
    int node = 0;
    int64_t i_begin = 0, i_end = 0;
    int64_t shard() const { return i_end - i_begin; }
    // Per projection: the shard's packed layout, its bytes per expert, and the experts' weights (owned and packed
    // here, or views of a PackedStore's).
    PackedLayout layout[kProjections];
    size_t stride[kProjections] = {};
    mem::WeightStorage weights[kProjections];
    int64_t h_sums_ld = 0;

    PackedMatrix matrix(int p, int64_t e) const { return {layout[p], weights[p].data() + e * stride[p]}; }
    PackedMatrix gate(int64_t e) const { return matrix(kGateProj, e); }
    PackedMatrix up(int64_t e) const { return matrix(kUpProj, e); }
    PackedMatrix down(int64_t e) const { return matrix(kDownProj, e); }

    // The descriptor of projection p's buffer in this shard (as a PackedStore knows it), for n_experts experts.
    moe::PackedBufferDesc desc(int p, int g, int64_t n_experts) const {
        moe::PackedBufferDesc d;
        d.part = kStorePart[p];
        d.shard = g;
        d.shard_begin = i_begin;
        d.layout = layout[p];
        d.stride = stride[p];
        d.count = n_experts;
        return d;
    }
};

// ------------------------------------------------------------------------------------------------------------
// Creation

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
    KT_RETURN_IF(!(c.swiglu.limit >= 0.0f) || !(c.swiglu.alpha >= 0.0f), KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: swiglu limit %g / alpha %g must be >= 0", c.swiglu.limit, c.swiglu.alpha);
    const size_t gate_up_bias = static_cast<size_t>(c.n_experts * c.intermediate);
    KT_RETURN_IF((!c.gate_bias.empty() && c.gate_bias.size() != gate_up_bias) ||
                     (!c.up_bias.empty() && c.up_bias.size() != gate_up_bias) ||
                     (!c.down_bias.empty() && c.down_bias.size() != static_cast<size_t>(c.n_experts * c.hidden)),
                 KT_STATUS_INVALID_ARGUMENT, "expert pool: bias sizes %zu, %zu, %zu do not match the experts' shapes",
                 c.gate_bias.size(), c.up_bias.size(), c.down_bias.size());
    config_ = c;
    ExecutorConfig ec;
    ec.n_threads = c.n_threads;
    ec.numa = c.numa;
    ec.numa_nodes = c.numa_nodes;
    ec.spin_ns = c.spin_ns;
    ec.topology = c.topology;
    ec.on_worker_start = c.on_worker_start;
    KT_TRY(Executor::acquire(ec, !c.private_threads, &executor_));
    cpu::IsaLevel level = cpu::kernel_level();
    if (static_cast<int>(c.max_isa) < static_cast<int>(level)) level = c.max_isa;
    kernels_ = &cpu::best_kernel_set(level);
    thread_counters_ = std::make_unique<cpu::GemmCounter[]>(static_cast<size_t>(executor_->pool().size()));
    for (int g = 0; g < executor_->groups(); ++g) {
        auto grp = std::make_unique<Group>();
        grp->node = executor_->group(g).node;
        groups_.push_back(std::move(grp));
    }
    recent_.assign(static_cast<size_t>(c.max_in_flight), 0);
    const char *trace = std::getenv("KT_EXPERT_TRACE");
    trace_ = trace && trace[0] && trace[0] != '0';
    thread_trace_.resize(static_cast<size_t>(executor_->threads()));
    mask_.reserve(static_cast<size_t>(c.n_experts));
    info_.kernel_set = kernels_->name;
    info_.groups = executor_->groups();
    for (int g = 0; g < executor_->groups(); ++g) {
        info_.group_nodes.push_back(executor_->group(g).node);
        info_.group_threads.push_back(executor_->group(g).threads());
    }
    return Status::ok();
}

ExpertPool::~ExpertPool() {
    if (executor_) executor_->wait_for(last_ticket_.load(std::memory_order_acquire));
    if (trace_ && trace_jobs_ > 0) {
        static const char *const names[kPhases] = {"quantize x", "gate/up", "quantize h", "down", "merge"};
        std::string line = format("expert pool trace: %lld jobs, per job: bucketing %.1f us", static_cast<long long>(trace_jobs_),
                                  1e-3 * static_cast<double>(trace_bucket_ns_) / static_cast<double>(trace_jobs_));
        for (int p = 0; p < kPhases; ++p)
            line += format("; %s %.1f us (threads busy %.1f us)", names[p],
                           1e-3 * static_cast<double>(trace_wall_ns_[p]) / static_cast<double>(trace_jobs_),
                           1e-3 * static_cast<double>(trace_work_ns_[p]) / static_cast<double>(trace_jobs_));
        line += format("; active experts %.1f, of them with < 8 / 8-31 / 32-63 / >= 64 rows %.1f / %.1f / %.1f / %.1f",
                       static_cast<double>(trace_active_) / static_cast<double>(trace_jobs_),
                       static_cast<double>(trace_rows_[0]) / static_cast<double>(trace_jobs_),
                       static_cast<double>(trace_rows_[1]) / static_cast<double>(trace_jobs_),
                       static_cast<double>(trace_rows_[2]) / static_cast<double>(trace_jobs_),
                       static_cast<double>(trace_rows_[3]) / static_cast<double>(trace_jobs_));
        KT_LOG_INFO_MSG("%s", line.c_str());
    }
}

// ------------------------------------------------------------------------------------------------------------
// Jobs

Status ExpertPool::submit(const ForwardArgs &args, uint64_t *ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    KT_RETURN_IF(!loaded_, KT_STATUS_MISUSE, "expert pool: no weights loaded");
    KT_TRY(validate(args));
    // At most max_in_flight of this pool's jobs queued: wait for the one submitted max_in_flight jobs ago.
    uint64_t &oldest = recent_[static_cast<size_t>(submitted_jobs_ % recent_.size())];
    if (oldest) executor_->wait_for(oldest);
    Job job;
    job.kind = Job::kForward;
    job.pool = this;
    job.n_tokens = args.n_tokens;
    job.top_k = args.top_k;
    job.input = args.input;
    job.ids = args.ids;
    job.ids_i64 = args.ids_i64;
    job.weights = args.weights;
    job.output = args.output;
    job.accumulate = args.accumulate;
    job.times = args.times;
    job.on_begin = args.on_begin;
    job.masked = !mask_.empty();
    job.mask.swap(mask_);  // lent to the executor, which copies it into the ring slot
    uint64_t t = 0;
    const Status s = executor_->enqueue(job, &t);
    mask_.swap(job.mask);
    KT_TRY(s);
    oldest = t;
    ++submitted_jobs_;
    last_ticket_.store(t, std::memory_order_release);
    if (ticket) *ticket = t;
    return Status::ok();
}

Status ExpertPool::wait(uint64_t ticket) {
    const uint64_t target = ticket == 0 ? last_ticket_.load(std::memory_order_acquire) : ticket;
    KT_RETURN_IF(target > executor_->submitted(), KT_STATUS_INVALID_ARGUMENT,
                 "expert pool: wait for ticket %llu, but only %llu jobs were submitted",
                 static_cast<unsigned long long>(target), static_cast<unsigned long long>(executor_->submitted()));
    executor_->wait_for(target);
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

Status ExpertPool::set_mask(const uint8_t *mask, int64_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!mask) {
        mask_.clear();
        return Status::ok();
    }
    KT_RETURN_IF(n != config_.n_experts, KT_STATUS_INVALID_ARGUMENT, "expert pool: mask of %lld entries for %lld experts",
                 static_cast<long long>(n), static_cast<long long>(config_.n_experts));
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
                        int64_t first_expert, int64_t n_experts, PackedStore *store, const char *const *given_names) {
    const char *const unnamed[3] = {"", "", ""};
    const char *const *names = given_names ? given_names : unnamed;
    std::lock_guard<std::mutex> lock(mutex_);
    executor_->wait_for(last_ticket_.load(std::memory_order_acquire));  // none of this pool's jobs may be running
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
    KT_RETURN_IF((gs.type == cpu::PackedType::kBf16) != (us.type == cpu::PackedType::kBf16), KT_STATUS_UNSUPPORTED,
                 "expert pool: gate (%s) and up (%s) must both be BF16 or both integer formats",
                 cpu::packed_type_info(gs.type).name, cpu::packed_type_info(us.type).name);
    const int64_t gran = std::lcm(int64_t{32}, slice_k_granularity(down, ds));
    // A load of all experts, or of experts whose packed types differ from those in place, starts over; a load of
    // some experts in the types in place replaces just those.
    const bool same = allocated_ && !from_store_ && gs.type == specs_[0].type && gs.group == specs_[0].group &&
                      us.type == specs_[1].type && us.group == specs_[1].group && ds.type == specs_[2].type &&
                      ds.group == specs_[2].group && gran == granularity_;
    if (!same || n == E) {
        loaded_ = false;
        allocated_ = false;
        KT_TRY(prepare(gs, us, ds, gran, n == E ? store : nullptr, names));
        specs_[0] = gs;
        specs_[1] = us;
        specs_[2] = ds;
        granularity_ = gran;
        allocated_ = true;
    }
    // Sources in a file mapping are packed a few experts at a time, each batch's pages given back before the next
    // (MatrixSource::drop_after_packing), so that the packed copy grows while the mapping shrinks instead of the
    // two being resident side by side. A batch gives every thread of a group at least two pack items.
    const bool dropping = gate.drop_after_packing || up.drop_after_packing || down.drop_after_packing;
    const int64_t batch = dropping ? std::max<int64_t>(4, (2 * executor_->threads() + 2) / 3) : n;
    for (int64_t j0 = 0; j0 < n && !from_store_; j0 += batch) {
        const int64_t j1 = std::min(n, j0 + batch);
        KT_TRY(pack_experts(rows_of(gate, j0 * I, j1 * I), rows_of(up, j0 * I, j1 * I), rows_of(down, j0 * H, j1 * H),
                            first_expert + j0, j1 - j0));
        drop_packed_rows(gate, j0 * I, j1 * I);
        drop_packed_rows(up, j0 * I, j1 * I);
        drop_packed_rows(down, j0 * H, j1 * H);
    }
    if (store && n == E && !from_store_) {
        for (size_t g = 0; g < groups_.size(); ++g) {
            const Group &grp = *groups_[g];
            if (grp.shard() == 0) continue;
            for (int p = 0; p < kProjections; ++p) store->keep(names[p], grp.desc(p, static_cast<int>(g), E), grp.weights[p]);
        }
    }
    loaded_ = true;
    info_.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    KT_LOG_INFO_MSG("expert pool: loaded experts [%lld, %lld) of %lld (gate %s, up %s, down %s), %.1f MiB %s in %.2f s",
                    static_cast<long long>(first_expert), static_cast<long long>(first_expert + n), static_cast<long long>(E),
                    info_.gate_type.c_str(), info_.up_type.c_str(), info_.down_type.c_str(),
                    static_cast<double>(info_.expert_bytes * static_cast<uint64_t>(n)) / (1 << 20),
                    from_store_ ? "mapped from the pack cache" : "packed", info_.load_seconds);
    return Status::ok();
}

Status ExpertPool::prepare(const PackSpec &gs, const PackSpec &us, const PackSpec &ds, int64_t gran, PackedStore *store,
                           const char *const names[3]) {
    const int64_t E = config_.n_experts, H = config_.hidden, I = config_.intermediate;
    Executor &ex = *executor_;
    // Shards of I: proportional to each group's threads, cut where every format allows (32-row panels for gate/up,
    // the down format's K granularity).
    const int n_groups = static_cast<int>(groups_.size());
    int64_t begin = 0;
    for (int g = 0; g < n_groups; ++g) {
        Group &grp = *groups_[static_cast<size_t>(g)];
        int64_t end = I;
        if (g + 1 < n_groups) {
            const int before = ex.group(g).t_end;  // threads of groups 0..g
            end = std::max(begin, std::min(I, round_up(I * before / ex.threads(), gran)));
        }
        grp.i_begin = begin;
        grp.i_end = end;
        begin = end;
    }

    // Weights per group on its node; the scratch this pool needs, which the executor provides.
    const int64_t max_slots = config_.max_tokens * config_.max_top_k;
    ScratchNeeds need;
    need.groups.resize(groups_.size());
    need.experts = E;
    need.slots = max_slots;
    info_.weight_bytes = 0;
    info_.shard_begin.clear();
    info_.placement.clear();
    shards_ = 0;
    const Group *first = nullptr;
    for (size_t g = 0; g < groups_.size(); ++g) {
        Group &grp = *groups_[g];
        info_.shard_begin.push_back(grp.i_begin);
        for (mem::WeightStorage &w : grp.weights) w = mem::WeightStorage();
        info_.placement.emplace_back("empty");
        if (grp.shard() == 0) continue;
        ++shards_;
        if (!first) first = &grp;
        KT_TRY(cpu::packed_layout(gs.type, grp.shard(), H, gs.group, 0, &grp.layout[kGateProj]).with_context("gate"));
        KT_TRY(cpu::packed_layout(us.type, grp.shard(), H, us.group, 0, &grp.layout[kUpProj]).with_context("up"));
        const int32_t offset = cpu::packed_type_info(ds.type).superblock > 0 ? static_cast<int32_t>(grp.i_begin % 256) : 0;
        KT_TRY(cpu::packed_layout(ds.type, H, grp.shard(), ds.group, offset, &grp.layout[kDownProj]).with_context("down"));
        for (int p = 0; p < kProjections; ++p) {
            grp.stride[p] = static_cast<size_t>(round_up(static_cast<int64_t>(grp.layout[p].bytes), 64));
            info_.weight_bytes += grp.stride[p] * static_cast<uint64_t>(E);
        }

        ScratchNeeds::PerGroup &pg = need.groups[g];
        const PackedLayout &down_l = grp.layout[kDownProj];
        const bool down_int = down_l.type != cpu::PackedType::kBf16;
        const size_t dkp = static_cast<size_t>(down_l.kp), slots = static_cast<size_t>(max_slots);
        pg.h = sizeof(float) * slots * static_cast<size_t>(grp.shard());
        pg.hq = (down_int ? 1 : 2) * slots * dkp;
        if (down_int) {
            down_spec_ = cpu::quant_spec(down_l);
            grp.h_sums_ld = cpu::quant_sums_per_row(down_spec_, grp.shard());
            pg.h_scale = sizeof(float) * slots;
            pg.slot_amax = sizeof(float) * slots;
            pg.h_sums = sizeof(int32_t) * slots * static_cast<size_t>(grp.h_sums_ld);
        }
        pg.partial = sizeof(float) * static_cast<size_t>(config_.max_tokens * H);
    }
    KT_RETURN_IF(!first, KT_STATUS_INTERNAL, "expert pool: no group received a shard of I = %lld", static_cast<long long>(I));
    // Each thread's tiles: its GEMM outputs, then the kernels' scratch (GemmActs::scratch) for the largest K of any
    // shard's matrices, as a thread also takes other groups' tasks.
    size_t gemm_bytes = 0;
    for (const std::unique_ptr<Group> &grp : groups_)
        if (grp->shard() > 0)
            for (const PackedLayout &l : grp->layout) gemm_bytes = std::max(gemm_bytes, cpu::gemm_scratch_bytes(l));
    thread_scratch_ = sizeof(float) * static_cast<size_t>(kTileFloats) + static_cast<size_t>(round_up(static_cast<int64_t>(gemm_bytes), 64));
    for (size_t g = 0; g < groups_.size(); ++g)
        if (groups_[g]->shard() > 0) need.groups[g].tiles = thread_scratch_ * static_cast<size_t>(ex.group(static_cast<int>(g)).threads());

    // The weights: every shard's three buffers from the store, or (when it lacks any of them) all allocated here on
    // the shard's node, to be packed.
    from_store_ = false;
    if (store) {
        std::vector<PackedRequest> requests;
        for (size_t g = 0; g < groups_.size(); ++g) {
            Group &grp = *groups_[g];
            if (grp.shard() == 0) continue;
            const int gi = static_cast<int>(g);
            for (int p = 0; p < kProjections; ++p) requests.push_back({names[p], grp.desc(p, gi, E), &grp.weights[p]});
        }
        from_store_ = store->take(requests.data(), requests.size());
    }
    for (size_t g = 0; g < groups_.size(); ++g) {
        Group &grp = *groups_[g];
        if (grp.shard() == 0) continue;
        if (!from_store_) {
            const mem::Topology *topo = grp.node >= 0 ? &ex.topology() : nullptr;
            for (int p = 0; p < kProjections; ++p)
                KT_TRY(mem::WeightStorage::allocate(grp.stride[p] * static_cast<size_t>(E), topo, grp.node, &grp.weights[p]));
        }
        info_.placement[g] = from_store_ ? "mapped" : mem::placement_name(grp.weights[kGateProj].placement());
    }
    const PackedLayout &gate_l = first->layout[kGateProj], &up_l = first->layout[kUpProj], &down_l = first->layout[kDownProj];
    info_.gate_type = cpu::packed_type_info(gate_l.type).name;
    info_.up_type = cpu::packed_type_info(up_l.type).name;
    info_.down_type = cpu::packed_type_info(down_l.type).name;
    info_.expert_bytes = info_.weight_bytes / static_cast<uint64_t>(E);
    info_.shard_begin.push_back(I);

    // The input's activation buffers (one quantization shared by gate and up when their formats agree).
    gate_up_int_ = gate_l.type != cpu::PackedType::kBf16;
    down_int_ = down_l.type != cpu::PackedType::kBf16;
    x_ld_ = std::max(gate_l.kp, up_l.kp);
    const size_t tokens = static_cast<size_t>(config_.max_tokens);
    need.xq = (gate_up_int_ ? 1 : 2) * tokens * static_cast<size_t>(x_ld_);
    if (gate_up_int_) {
        gate_spec_ = cpu::quant_spec(gate_l);
        up_spec_ = cpu::quant_spec(up_l);
        separate_up_sums_ = !(up_spec_ == gate_spec_);
        sums_gate_ld_ = cpu::quant_sums_per_row(gate_spec_, H);
        sums_up_ld_ = cpu::quant_sums_per_row(up_spec_, H);
        need.x_scale = sizeof(float) * tokens;
        need.x_sums_gate = sizeof(int32_t) * tokens * static_cast<size_t>(sums_gate_ld_);
        if (separate_up_sums_) need.x_sums_up = sizeof(int32_t) * tokens * static_cast<size_t>(sums_up_ld_);
    }
    return ex.reserve(need);
}

Status ExpertPool::pack_experts(const MatrixSource &gate, const MatrixSource &up, const MatrixSource &down,
                                int64_t first_expert, int64_t n) {
    const int64_t H = config_.hidden, I = config_.intermediate;
    const PackSpec gs = specs_[0], us = specs_[1], ds = specs_[2];
    Executor &ex = *executor_;
    // Each group's threads pack that group's shard of every expert (first touch on the right node), from the
    // driver thread so that thread 0 is on the first node too. Then they take what is left of the other groups'
    // (a group whose threads have not started, their cores busy elsewhere, holds nobody up).
    std::vector<Counter> next(groups_.size());
    std::mutex err_mutex;
    Status err;
    auto pack_group = [&](int g) {
        const Group &grp = *groups_[static_cast<size_t>(g)];
        if (grp.shard() == 0) return;
        for (;;) {
            const int64_t item = next[static_cast<size_t>(g)].next.fetch_add(1, std::memory_order_relaxed);
            if (item >= 3 * n) return;
            const int64_t j = item / 3, e = first_expert + j;  // j: the expert's index in the sources
            Status s;
            const int p = static_cast<int>(item % 3);
            const PackedLayout &layout = grp.layout[p];
            uint8_t *dst = grp.weights[p].writable() + e * grp.stride[p];
            switch (p) {
                case kGateProj: s = pack_slice(gate, gs, j * I + grp.i_begin, 0, layout, 0, layout.panels, dst); break;
                case kUpProj: s = pack_slice(up, us, j * I + grp.i_begin, 0, layout, 0, layout.panels, dst); break;
                default: s = pack_slice(down, ds, j * H, grp.i_begin, layout, 0, layout.panels, dst); break;
            }
            if (!s.is_ok()) {
                std::lock_guard<std::mutex> l(err_mutex);
                if (err.is_ok()) err = std::move(s);
            }
        }
    };
    auto pack_all = [&]() -> Status {
        return ex.pool().run_available([&](int tid) {
            for (int k = 0; k < ex.groups(); ++k) pack_group((ex.group_of(tid) + k) % ex.groups());
        });
    };
    KT_TRY(ex.run_on_driver(pack_all));
    return err;
}

// ------------------------------------------------------------------------------------------------------------
// Execution (on the executor's driver thread and workers)

void ExpertPool::execute(Executor &ex, Job &job) {
    if (job.times) job.times->begin_ns = monotonic_ns();
    if (job.on_begin) (*job.on_begin)();
    execute_forward(ex, job);
    if (job.times) job.times->end_ns = monotonic_ns();
}

void ExpertPool::execute_forward(Executor &ex, Job &job) {
    if (job.n_tokens == 0) return;
    const int64_t bucket_start = trace_ ? monotonic_ns() : 0;
    Executor::Shared &sc = ex.shared();
    const int64_t E = config_.n_experts;

    // Bucket (token, slot) pairs by expert: counts, offsets, then a stable fill (tokens ascending per expert).
    std::fill(sc.count.begin(), sc.count.begin() + E, 0);
    auto id_at = [&](int64_t i) -> int64_t {
        return job.ids_i64 ? static_cast<const int64_t *>(job.ids)[i] : static_cast<const int32_t *>(job.ids)[i];
    };
    auto skipped = [&](int64_t e) { return e < 0 || (job.masked && job.mask[static_cast<size_t>(e)]); };
    const int64_t n = job.n_tokens * job.top_k;
    for (int64_t i = 0; i < n; ++i)
        if (!skipped(id_at(i))) ++sc.count[static_cast<size_t>(id_at(i))];
    sc.n_active = 0;
    sc.offset[0] = 0;
    for (int64_t e = 0; e < E; ++e) {
        sc.offset[static_cast<size_t>(e) + 1] = sc.offset[static_cast<size_t>(e)] + sc.count[static_cast<size_t>(e)];
        if (sc.count[static_cast<size_t>(e)] > 0) sc.active[static_cast<size_t>(sc.n_active++)] = static_cast<int32_t>(e);
    }
    sc.n_slots = sc.offset[static_cast<size_t>(E)];
    for (int64_t e = 0; e < E; ++e) sc.count[static_cast<size_t>(e)] = sc.offset[static_cast<size_t>(e)];  // write cursors
    for (int64_t i = 0; i < n; ++i) {
        const int64_t e = id_at(i);
        if (skipped(e)) continue;
        const int32_t s = sc.count[static_cast<size_t>(e)]++;
        sc.slot_token[static_cast<size_t>(s)] = static_cast<int32_t>(i / job.top_k);
        sc.slot_weight[static_cast<size_t>(s)] = job.weights[i];
    }

    job_rows_id_ = cpu::new_rows_ids(2 * static_cast<uint64_t>(sc.n_slots));
    sc.x_tasks.reset();
    sc.merge_tasks.reset();
    const bool streaming = sc.n_slots < kStreamingRowsPerExpert * sc.n_active;
    for (int g = 0; g < ex.groups(); ++g) {
        Executor::Group &eg = ex.group(g);
        eg.gate_up_tasks.reset();
        eg.amax_tasks.reset();
        eg.hq_tasks.reset();
        eg.down_tasks.reset();
        const int64_t shard = groups_[static_cast<size_t>(g)]->shard();
        eg.i_block = task_block(shard, sc.n_active, eg.threads());
        eg.h_block = task_block(config_.hidden, 1, eg.threads(), streaming ? kStreamingDownTasksPerThread : kTasksPerThread);
    }
    const int64_t start = trace_ ? monotonic_ns() : 0;
    if (trace_)
        for (ThreadTrace &t : thread_trace_) std::fill(std::begin(t.done_ns), std::end(t.done_ns), int64_t{0});
    // No thread waits for another to arrive: phases wait for their tasks to be done, and the job for the threads
    // that started it (a worker whose core is busy elsewhere leaves its share to the others).
    // Gate, up and down: three hidden x intermediate products per (token, expert) slot.
    const int64_t macs = 3 * sc.n_slots * config_.hidden * config_.intermediate;
    auto phases = [&](int tid) { run_phases(ex, job, tid); };
    job.status = macs < kMinParallelMacs ? ex.pool().run_alone(phases) : ex.pool().run_available(phases);
    if (trace_) {
        ++trace_jobs_;
        trace_bucket_ns_ += start - bucket_start;
        trace_active_ += sc.n_active;
        for (int64_t i = 0; i < sc.n_active; ++i) {
            const int64_t e = sc.active[static_cast<size_t>(i)];
            const int64_t rows = sc.offset[static_cast<size_t>(e) + 1] - sc.offset[static_cast<size_t>(e)];
            ++trace_rows_[rows < 8 ? 0 : rows < 32 ? 1 : rows < 64 ? 2 : 3];
        }
        // Phase p ends when the last thread is done with it; busy time is a thread's time from the end of the
        // previous phase to its own end of this one (none for a thread that did not start the job).
        const int threads = ex.threads();
        int64_t prev_end = start;
        for (int p = 0; p < kPhases; ++p) {
            int64_t end = prev_end, busy = 0;
            for (int t = 0; t < threads; ++t) {
                const int64_t d = thread_trace_[static_cast<size_t>(t)].done_ns[p];
                end = std::max(end, d);
                busy += std::max<int64_t>(0, d - prev_end);
            }
            trace_wall_ns_[p] += end - prev_end;
            trace_work_ns_[p] += busy / threads;
            prev_end = end;
        }
    }
    if (!job.status.is_ok()) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (first_error_.is_ok()) first_error_ = job.status;
    }
}

void ExpertPool::run_phases(Executor &ex, const Job &job, int tid) {
    int64_t *done = trace_ ? thread_trace_[static_cast<size_t>(tid)].done_ns : nullptr;
    auto mark = [&](int phase) {
        if (done) done[phase] = monotonic_ns();
    };
    Executor::Shared &sc = ex.shared();
    const cpu::KernelSet &ks = *kernels_;
    const int64_t H = config_.hidden, T = job.n_tokens;
    const int64_t spin_ns = ex.spin_ns();
    const int my_group = ex.group_of(tid), n_groups = ex.groups();
    const Executor::Group &own = ex.group(my_group);
    uint8_t *const thread_tiles = own.tiles.as<uint8_t>() + static_cast<size_t>(tid - own.t_begin) * thread_scratch_;
    float *tile = reinterpret_cast<float *>(thread_tiles);
    uint8_t *const gemm_scratch = thread_tiles + sizeof(float) * static_cast<size_t>(kTileFloats);
    // AMX kernels configure this thread's tiles once per job (the session restores them at the end).
    cpu::amx::TileSession tile_session;
    void *const session = ks.level == cpu::IsaLevel::kAmx ? &tile_session : nullptr;
    cpu::GemmCounter *const counter = &thread_counters_[static_cast<size_t>(tid)];
    int8_t *xq = sc.xq.as<int8_t>();
    uint16_t *xb = sc.xq.as<uint16_t>();
    float *x_scale = sc.x_scale.as<float>();
    int32_t *x_sums_gate = sc.x_sums_gate.as<int32_t>(), *x_sums_up = sc.x_sums_up.as<int32_t>();

    // Phases 2-4 have tasks per group, on the group's shard. A thread takes its own group's tasks first, then what
    // is left of the other groups' (those whose threads are slow to start, or have not started at all). Groups
    // without a shard have no tasks.
    auto each_group = [&](auto &&fn) {
        for (int k = 0; k < n_groups; ++k) {
            const int g = (my_group + k) % n_groups;
            if (groups_[static_cast<size_t>(g)]->shard() > 0) fn(g, ex.group(g), *groups_[static_cast<size_t>(g)]);
        }
    };
    auto gate_up_count = [&](const Executor::Group &eg, const Group &grp) {
        return sc.n_active * ((grp.shard() + eg.i_block - 1) / eg.i_block);
    };
    auto down_count = [&](const Executor::Group &eg) { return (H + eg.h_block - 1) / eg.h_block; };

    // 1. The input, quantized (or converted to bf16) once per token.
    const size_t in_elt = config_.input_bf16 ? 2 : 4;
    sc.x_tasks.run_claims(T, kRowChunk, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const void *src = static_cast<const uint8_t *>(job.input) + static_cast<size_t>(t * H) * in_elt;
            if (gate_up_int_) {
                int8_t *q = xq + t * x_ld_;
                x_scale[t] = ks.quantize_row(src, config_.input_bf16, H, x_ld_, q);
                cpu::group_sums_row(q, H, gate_spec_, x_sums_gate + t * sums_gate_ld_);
                if (separate_up_sums_) cpu::group_sums_row(q, H, up_spec_, x_sums_up + t * sums_up_ld_);
            } else {
                ks.convert_row_bf16(src, config_.input_bf16, H, x_ld_, xb + t * x_ld_);
            }
        }
    });
    mark(0);
    sc.x_tasks.wait_done(T, kRowChunk, spin_ns);

    // 2. Gate and up on the same rows of each expert, then SwiGLU into h.
    each_group([&](int, Executor::Group &eg, const Group &grp) {
        const int64_t shard = grp.shard(), ib = eg.i_block;
        const int64_t iblocks = (shard + ib - 1) / ib;
        const int64_t items = gate_up_count(eg, grp);
        float *h_all = eg.h.as<float>();
        float *tg = tile, *tu = tile + kTokenChunk * ib;
        eg.gate_up_tasks.run_claims(items, 1, [&](int64_t item, int64_t) {
            const int64_t e = sc.active[static_cast<size_t>(item / iblocks)];
            const int64_t n0 = (item % iblocks) * ib, n1 = std::min(shard, n0 + ib);
            const int64_t s_begin = sc.offset[static_cast<size_t>(e)], s_end = sc.offset[static_cast<size_t>(e) + 1];
            for (int64_t s0 = s_begin; s0 < s_end; s0 += kTokenChunk) {
                const int64_t m = std::min(kTokenChunk, s_end - s0);
                GemmActs acts;
                acts.tile_session = session;
                acts.counter = counter;
                acts.scratch = gemm_scratch;
                acts.rows = sc.slot_token.data() + s0;
                acts.rows_id = job_rows_id_ + static_cast<uint64_t>(s0);  // gate and up read the same rows
                if (gate_up_int_) {
                    acts.q = xq;
                    acts.q_ld = x_ld_;
                    acts.scale = x_scale;
                    acts.sums = x_sums_gate;
                    acts.sums_ld = sums_gate_ld_;
                } else {
                    acts.bf16 = xb;
                    acts.bf16_ld = x_ld_;
                }
                // Each GEMM prefetches the weights the next one reads: up's panels of this block, then gate's
                // panels of the next item.
                acts.prefetch_next = grp.up(e).tile(n0 / cpu::kPanel, 0, 0);
                cpu::gemm(ks, grp.gate(e), acts, m, n0, n1, tg, ib);
                if (separate_up_sums_) {
                    acts.sums = x_sums_up;
                    acts.sums_ld = sums_up_ld_;
                }
                acts.prefetch_next = nullptr;
                if (item + 1 < items && s0 + kTokenChunk >= s_end) {
                    const int64_t ne = sc.active[static_cast<size_t>((item + 1) / iblocks)];
                    acts.prefetch_next = grp.gate(ne).tile(((item + 1) % iblocks) * ib / cpu::kPanel, 0, 0);
                }
                cpu::gemm(ks, grp.up(e), acts, m, n0, n1, tu, ib);
                const int64_t bias_at = e * config_.intermediate + grp.i_begin + n0;
                for (int64_t i = 0; i < m; ++i) {
                    if (!config_.gate_bias.empty()) ks.axpy_row(1.0f, config_.gate_bias.data() + bias_at, n1 - n0, tg + i * ib);
                    if (!config_.up_bias.empty()) ks.axpy_row(1.0f, config_.up_bias.data() + bias_at, n1 - n0, tu + i * ib);
                    ks.swiglu_row(tg + i * ib, tu + i * ib, n1 - n0, config_.swiglu, h_all + (s0 + i) * shard + n0);
                }
            }
        });
    });
    mark(1);

    // 3a. With several shards, each row of h is quantized with one scale from the whole row (max |h| over all
    //     shards), so that sharded results equal unsharded ones up to fp32 rounding.
    const bool whole_row_scale = down_int_ && shards_ > 1;
    if (whole_row_scale) {
        each_group([&](int, Executor::Group &eg, const Group &grp) {
            eg.gate_up_tasks.wait_done(gate_up_count(eg, grp), 1, spin_ns);
            const float *h_all = eg.h.as<float>();
            eg.amax_tasks.run_claims(sc.n_slots, kRowChunk, [&](int64_t s0, int64_t s1) {
                for (int64_t s = s0; s < s1; ++s) eg.slot_amax.as<float>()[s] = ks.row_amax(h_all + s * grp.shard(), false, grp.shard());
            });
        });
        each_group([&](int, Executor::Group &eg, const Group &) { eg.amax_tasks.wait_done(sc.n_slots, kRowChunk, spin_ns); });
    }

    // 3b. h quantized once per (token, slot) row for the down projection.
    each_group([&](int, Executor::Group &eg, const Group &grp) {
        eg.gate_up_tasks.wait_done(gate_up_count(eg, grp), 1, spin_ns);
        const int64_t shard = grp.shard(), dkp = grp.layout[kDownProj].kp;
        const float *h_all = eg.h.as<float>();
        eg.hq_tasks.run_claims(sc.n_slots, kRowChunk, [&](int64_t s0, int64_t s1) {
            for (int64_t s = s0; s < s1; ++s) {
                const float *h = h_all + s * shard;
                if (down_int_) {
                    int8_t *q = eg.hq.as<int8_t>() + s * dkp;
                    float amax;
                    if (whole_row_scale) {
                        amax = 0.0f;
                        for (int og = 0; og < n_groups; ++og)
                            if (groups_[static_cast<size_t>(og)]->shard() > 0)
                                amax = std::max(amax, ex.group(og).slot_amax.as<float>()[s]);
                    } else {
                        amax = ks.row_amax(h, false, shard);
                    }
                    eg.h_scale.as<float>()[s] = ks.quantize_row_amax(h, false, shard, dkp, amax, q);
                    cpu::group_sums_row(q, shard, down_spec_, eg.h_sums.as<int32_t>() + s * grp.h_sums_ld);
                } else {
                    ks.convert_row_bf16(h, false, shard, dkp, eg.hq.as<uint16_t>() + s * dkp);
                }
            }
        });
    });
    mark(2);

    // 4. Down projection per block of H columns over every active expert, weighted into the group's partial output.
    //    The down bias belongs to the whole row: only the first group with a shard adds it.
    int first_shard_group = 0;
    while (first_shard_group < n_groups && groups_[static_cast<size_t>(first_shard_group)]->shard() == 0) ++first_shard_group;
    each_group([&](int g, Executor::Group &eg, const Group &grp) {
        eg.hq_tasks.wait_done(sc.n_slots, kRowChunk, spin_ns);
        const float *down_bias = g == first_shard_group && !config_.down_bias.empty() ? config_.down_bias.data() : nullptr;
        const int64_t hblk = eg.h_block, dkp = grp.layout[kDownProj].kp;
        float *td = tile;
        float *partial = eg.partial.as<float>();
        eg.down_tasks.run_claims(down_count(eg), 1, [&](int64_t hb, int64_t) {
            const int64_t h0 = hb * hblk, h1 = std::min(H, h0 + hblk);
            for (int64_t t = 0; t < T; ++t) std::memset(partial + t * H + h0, 0, sizeof(float) * static_cast<size_t>(h1 - h0));
            for (int64_t ai = 0; ai < sc.n_active; ++ai) {
                const int64_t e = sc.active[static_cast<size_t>(ai)];
                const int64_t s_begin = sc.offset[static_cast<size_t>(e)], s_end = sc.offset[static_cast<size_t>(e) + 1];
                for (int64_t s0 = s_begin; s0 < s_end; s0 += kTokenChunk) {
                    const int64_t m = std::min(kTokenChunk, s_end - s0);
                    GemmActs acts;
                    acts.tile_session = session;
                    acts.counter = counter;
                    acts.scratch = gemm_scratch;
                    acts.rows_id = job_rows_id_ + static_cast<uint64_t>(sc.n_slots + s0);
                    if (down_int_) {
                        acts.q = eg.hq.as<int8_t>() + s0 * dkp;
                        acts.q_ld = dkp;
                        acts.scale = eg.h_scale.as<float>() + s0;
                        acts.sums = eg.h_sums.as<int32_t>() + s0 * grp.h_sums_ld;
                        acts.sums_ld = grp.h_sums_ld;
                    } else {
                        acts.bf16 = eg.hq.as<uint16_t>() + s0 * dkp;
                        acts.bf16_ld = dkp;
                    }
                    // Prefetch the next active expert's panels of these columns while this one computes.
                    if (ai + 1 < sc.n_active && s0 + kTokenChunk >= s_end)
                        acts.prefetch_next = grp.down(sc.active[static_cast<size_t>(ai) + 1]).tile(h0 / cpu::kPanel, 0, 0);
                    cpu::gemm(ks, grp.down(e), acts, m, h0, h1, td, hblk);
                    for (int64_t i = 0; i < m; ++i) {
                        const int64_t s = s0 + i;
                        if (down_bias) ks.axpy_row(1.0f, down_bias + e * H + h0, h1 - h0, td + i * hblk);
                        ks.axpy_row(sc.slot_weight[static_cast<size_t>(s)], td + i * hblk, h1 - h0,
                                    partial + sc.slot_token[static_cast<size_t>(s)] * H + h0);
                    }
                }
            }
        });
    });
    mark(3);
    each_group([&](int, Executor::Group &eg, const Group &) { eg.down_tasks.wait_done(down_count(eg), 1, spin_ns); });

    // 5. out = (accumulate ? out : 0) + the groups' partial sums, in group order.
    const float *srcs[64];
    const int64_t chunks = (H + kMergeChunk - 1) / kMergeChunk;
    const size_t out_elt = config_.output_bf16 ? 2 : 4;
    sc.merge_tasks.run_claims(T * chunks, 1, [&](int64_t item, int64_t) {
        const int64_t t = item / chunks, c0 = (item % chunks) * kMergeChunk, c1 = std::min(H, c0 + kMergeChunk);
        int n_src = 0;
        for (int og = 0; og < n_groups; ++og)
            if (groups_[static_cast<size_t>(og)]->shard() > 0) srcs[n_src++] = ex.group(og).partial.as<float>() + t * H + c0;
        void *dst = static_cast<uint8_t *>(job.output) + static_cast<size_t>(t * H + c0) * out_elt;
        ks.merge_row(srcs, n_src, c1 - c0, dst, config_.output_bf16, job.accumulate);
    });
    mark(4);
    (void)tile_session.end();  // a no-op unless AMX ran on this thread
}

cpu::GemmCounts ExpertPool::gemm_counts() const {
    cpu::GemmCounts sum;
    for (int t = 0; t < executor_->pool().size(); ++t) sum += thread_counters_[static_cast<size_t>(t)].read();
    return sum;
}

}  // namespace kt::moe
