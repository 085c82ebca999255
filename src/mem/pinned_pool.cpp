#include "mem/pinned_pool.h"

#include <algorithm>
#include <thread>

#include "mem/thread_placement.h"
#include "mem/topology.h"

namespace kt::mem {

Status create_pinned_pool(int n_threads, const char *name, std::unique_ptr<ThreadPool> *out, int64_t spin_ns) {
    KT_RETURN_IF(n_threads < 0, KT_STATUS_INVALID_ARGUMENT, "thread count %d is negative", n_threads);
    ThreadPoolOptions options;
    options.name = name;
    options.spin_ns = spin_ns;
    const Topology *topology = nullptr;
    auto plan = std::make_shared<ThreadPlan>();
    if (Topology::shared(&topology).is_ok() && plan_threads(*topology, n_threads, {}, plan.get()).is_ok()) {
        options.n_threads = static_cast<int>(plan->threads.size());
        options.on_worker_start = [topology, plan](int worker) {
            const int pu = plan->threads[static_cast<size_t>(worker)].pu;
            if (pu >= 0) (void)topology->bind_current_thread(pu);
        };
    } else {
        options.n_threads = n_threads > 0 ? n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    return ThreadPool::create(std::move(options), out);
}

}  // namespace kt::mem
