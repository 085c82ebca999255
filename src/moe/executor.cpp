#include "moe/executor.h"

#include <sched.h>

#include <algorithm>

#include "core/log.h"
#include "moe/expert_pool.h"

namespace kt::moe {
namespace {

std::mutex g_registry_mutex;
std::vector<std::pair<ExecutorConfig, std::weak_ptr<Executor>>> g_registry;

int usable_cpus() {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return 1;
    return CPU_COUNT(&mask);
}

// Grows `buf` (on `node`) to at least `bytes`, keeping nothing: scratch holds no state between jobs. The scratch
// is sized for the largest job (max_tokens) and its pages are faulted in here, when a pool loads, rather than by
// the first job that reaches its size: at a 512-token prompt of the eight-layer Qwen3-30B-A3B file, the first
// layer's experts took about 25 ms longer than the others (quantizing x 2.3 against 0.3 ms, gate/up 42-44 against
// 29, quantizing h 6-7 against 1.1; Zen 5), which a server's first request after loading would pay.
Status grow(mem::NumaBuffer *buf, size_t bytes, const mem::Topology *topo, int node) {
    if (bytes <= buf->size()) return Status::ok();
    *buf = mem::NumaBuffer();
    KT_TRY(mem::NumaBuffer::allocate(bytes, node >= 0 ? topo : nullptr, node, buf));
    buf->prefault();
    return Status::ok();
}

}  // namespace

Status Executor::acquire(const ExecutorConfig &config, bool shared, std::shared_ptr<Executor> *out) {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    shared = shared && !config.on_worker_start;
    if (shared) {
        for (auto &entry : g_registry) {
            if (!(entry.first == config)) continue;
            if (std::shared_ptr<Executor> e = entry.second.lock()) {
                *out = std::move(e);
                return Status::ok();
            }
        }
    }
    std::shared_ptr<Executor> e(new Executor());
    KT_TRY(e->init(config));
    if (shared) {
        g_registry.erase(std::remove_if(g_registry.begin(), g_registry.end(),
                                        [](const auto &entry) { return entry.second.expired(); }),
                         g_registry.end());
        g_registry.emplace_back(config, e);
    }
    *out = std::move(e);
    return Status::ok();
}

Status Executor::init(const ExecutorConfig &c) {
    KT_RETURN_IF(c.n_threads < 0 || c.n_threads > 4096, KT_STATUS_INVALID_ARGUMENT, "expert pool: n_threads = %d",
                 c.n_threads);
    KT_RETURN_IF(c.spin_ns < 0, KT_STATUS_INVALID_ARGUMENT, "expert pool: negative spin time");
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
            if (c.n_threads > 0 && static_cast<int>(plan_.threads.size()) > c.n_threads)
                plan_.threads.resize(static_cast<size_t>(c.n_threads));
            for (auto &t : plan_.threads) t.group = 0;
            plan_.nodes = {-1};
            plan_.group_begin = {0, static_cast<int>(plan_.threads.size())};
            break;
        }
        default: return Status::error(KT_STATUS_INVALID_ARGUMENT, "expert pool: numa policy %d", static_cast<int>(c.numa));
    }
    KT_RETURN_IF(plan_.groups() > 64, KT_STATUS_UNSUPPORTED, "expert pool: %d NUMA groups (at most 64)", plan_.groups());

    const int n = static_cast<int>(plan_.threads.size());
    wait_spin_ns_ = n >= usable_cpus() ? 0 : c.spin_ns;
    thread_group_.resize(static_cast<size_t>(n));
    for (int g = 0; g < plan_.groups(); ++g) {
        auto grp = std::make_unique<Group>();
        grp->node = plan_.nodes[static_cast<size_t>(g)];
        grp->t_begin = plan_.group_begin[static_cast<size_t>(g)];
        grp->t_end = plan_.group_begin[static_cast<size_t>(g) + 1];
        for (int t = grp->t_begin; t < grp->t_end; ++t) thread_group_[static_cast<size_t>(t)] = g;
        groups_.push_back(std::move(grp));
    }
    have_.groups.resize(groups_.size());

    ThreadPoolOptions po;
    po.n_threads = n;
    po.spin_ns = c.spin_ns;
    po.name = "kt-expert";
    const mem::Topology *topo = topology_;
    const mem::ThreadPlan *plan = &plan_;
    po.on_worker_start = [topo, plan, then = c.on_worker_start](int index) {
        const int pu = plan->threads[static_cast<size_t>(index)].pu;
        if (pu >= 0 && topo->can_bind_threads()) {
            const Status s = topo->bind_current_thread(pu);
            if (!s.is_ok()) KT_LOG_WARN_MSG("expert pool: worker %d stays unpinned: %s", index, s.message().c_str());
        }
        if (then) then(index);
    };
    KT_TRY(ThreadPool::create(po, &pool_));
    ring_.resize(kRingCapacity);
    for (auto &j : ring_) j = std::make_unique<Job>();
    try {
        driver_ = std::thread([this] { driver_main(); });
    } catch (const std::system_error &e) {
        return Status::error(KT_STATUS_OUT_OF_MEMORY, "expert pool: cannot start the driver thread: %s", e.what());
    }
    KT_LOG_INFO_MSG("expert pool executor: %d threads in %d group(s); %s", n, plan_.groups(), topology_->describe().c_str());
    return Status::ok();
}

Executor::~Executor() {
    if (driver_.joinable()) {
        stop_.store(true, std::memory_order_release);
        submit_event_.fetch_add(1, std::memory_order_release);
        submit_event_.notify_all();
        driver_.join();
    }
}

void Executor::driver_main() {
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
        if (job.kind == Job::kCallback)
            job.status = (*job.callback)();
        else
            job.pool->execute(*this, job);
        completed_.store(next, std::memory_order_release);
        complete_event_.fetch_add(1, std::memory_order_release);
        complete_event_.notify_all();
    }
}

Status Executor::enqueue_locked(const Job &job, uint64_t *ticket) {
    const uint64_t t = submitted_.load(std::memory_order_relaxed) + 1;
    const uint64_t cap = ring_.size();
    // Job t may be written once job t - cap has completed.
    spin_then_wait(complete_event_, wait_spin_ns_,
                   [&](uint32_t) { return t <= completed_.load(std::memory_order_acquire) + cap; });
    Job &slot = *ring_[static_cast<size_t>((t - 1) % cap)];
    std::vector<uint8_t> mask = std::move(slot.mask);
    slot = Job();
    slot.kind = job.kind;
    slot.pool = job.pool;
    slot.n_tokens = job.n_tokens;
    slot.top_k = job.top_k;
    slot.input = job.input;
    slot.ids = job.ids;
    slot.ids_i64 = job.ids_i64;
    slot.weights = job.weights;
    slot.output = job.output;
    slot.accumulate = job.accumulate;
    slot.masked = job.masked;
    slot.callback = job.callback;
    slot.times = job.times;
    slot.on_begin = job.on_begin;
    mask.assign(job.mask.begin(), job.mask.end());  // capacity reserved by reserve(): no allocation
    slot.mask = std::move(mask);
    submitted_.store(t, std::memory_order_release);
    submit_event_.fetch_add(1, std::memory_order_release);
    submit_event_.notify_all();
    *ticket = t;
    return Status::ok();
}

Status Executor::enqueue(const Job &job, uint64_t *ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    return enqueue_locked(job, ticket);
}

void Executor::wait_for(uint64_t ticket) {
    spin_then_wait(complete_event_, wait_spin_ns_,
                   [&](uint32_t) { return completed_.load(std::memory_order_acquire) >= ticket; });
}

void Executor::drain() { wait_for(submitted_.load(std::memory_order_acquire)); }

Status Executor::run_on_driver(FunctionRef<Status()> fn) {
    Job job;
    job.kind = Job::kCallback;
    job.callback = &fn;
    uint64_t ticket = 0;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        KT_TRY(enqueue_locked(job, &ticket));
    }
    wait_for(ticket);
    return ring_[static_cast<size_t>((ticket - 1) % ring_.size())]->status;
}

Status Executor::reserve(const ScratchNeeds &need) {
    std::lock_guard<std::mutex> lock(mutex_);
    drain();  // nothing runs while buffers move
    const mem::Topology *topo = topology_;
    for (size_t g = 0; g < groups_.size() && g < need.groups.size(); ++g) {
        Group &grp = *groups_[g];
        const ScratchNeeds::PerGroup &n = need.groups[g];
        ScratchNeeds::PerGroup &h = have_.groups[g];
        KT_TRY(grow(&grp.h, n.h, topo, grp.node));
        KT_TRY(grow(&grp.hq, n.hq, topo, grp.node));
        KT_TRY(grow(&grp.h_scale, n.h_scale, topo, grp.node));
        KT_TRY(grow(&grp.h_sums, n.h_sums, topo, grp.node));
        KT_TRY(grow(&grp.slot_amax, n.slot_amax, topo, grp.node));
        KT_TRY(grow(&grp.partial, n.partial, topo, grp.node));
        KT_TRY(grow(&grp.tiles, n.tiles, topo, grp.node));
        h.h = std::max(h.h, n.h);
    }
    const int node0 = groups_.front()->node;
    KT_TRY(grow(&shared_.xq, need.xq, topo, node0));
    KT_TRY(grow(&shared_.x_scale, need.x_scale, topo, node0));
    KT_TRY(grow(&shared_.x_sums_gate, need.x_sums_gate, topo, node0));
    KT_TRY(grow(&shared_.x_sums_up, need.x_sums_up, topo, node0));
    if (need.experts > have_.experts) {
        shared_.count.resize(static_cast<size_t>(need.experts));
        shared_.offset.resize(static_cast<size_t>(need.experts + 1));
        shared_.active.resize(static_cast<size_t>(need.experts));
        for (auto &j : ring_) j->mask.reserve(static_cast<size_t>(need.experts));
        have_.experts = need.experts;
    }
    if (need.slots > have_.slots) {
        shared_.slot_token.resize(static_cast<size_t>(need.slots));
        shared_.slot_weight.resize(static_cast<size_t>(need.slots));
        have_.slots = need.slots;
    }
    return Status::ok();
}

}  // namespace kt::moe
