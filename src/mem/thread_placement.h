// Thread placement: how a pool of n threads is spread over NUMA nodes and pinned to physical cores.
//
// One worker group per node, one thread per physical core (SMT siblings unused: MoE kernels saturate a core's
// vector units, and sharing them halves each thread's speed while doubling cache pressure; kt-kernel users saw
// decode collapse ~10x with hyperthreads, PR #2088). Threads are numbered group by group, so thread 0 is the first
// thread of the first group (the expert pool's driver).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace kt::mem {

class Topology;

struct ThreadSlot {
    int group = 0;  // index into ThreadPlan::nodes
    int pu = -1;    // OS CPU to pin to; -1 when the node has fewer cores than threads (left unpinned)
};

struct ThreadPlan {
    std::vector<int> nodes;               // logical NUMA node of each group
    std::vector<int> group_begin;         // first thread index of each group; group_begin[nodes.size()] = total
    std::vector<ThreadSlot> threads;      // one per thread

    int groups() const { return static_cast<int>(nodes.size()); }
    int group_size(int g) const { return group_begin[static_cast<size_t>(g) + 1] - group_begin[static_cast<size_t>(g)]; }
};

// Spreads n_threads (0: one per physical core of the chosen nodes) over `nodes` (logical indexes; empty: every
// node that has cores), proportionally to their core counts, at least one thread per node. INVALID_ARGUMENT for
// an unknown or core-less node, or fewer threads than nodes.
Status plan_threads(const Topology &topology, int n_threads, const std::vector<int> &nodes, ThreadPlan *out);

}  // namespace kt::mem
