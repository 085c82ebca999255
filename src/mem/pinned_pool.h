// A ThreadPool whose workers are pinned one per physical core (mem::plan_threads), for code that runs its own
// parallel work outside the expert pool: a kt_context's attention and element-wise work, the roofline probes.
#pragma once

#include <memory>

#include "core/status.h"
#include "core/thread_pool.h"

namespace kt::mem {

// n_threads 0: one per physical core. The calling thread joins every job as thread 0 and is never re-pinned;
// workers 1..n-1 are pinned where the system allows (unpinned is slower, not wrong), spread over NUMA nodes as
// plan_threads does. Without a usable topology the pool is unpinned, n_threads 0 meaning the online CPUs.
// spin_ns: how long idle workers spin before sleeping (ThreadPoolOptions::spin_ns).
Status create_pinned_pool(int n_threads, const char *name, std::unique_ptr<ThreadPool> *out,
                          int64_t spin_ns = kDefaultSpinNs);

}  // namespace kt::mem
