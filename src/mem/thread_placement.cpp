#include "mem/thread_placement.h"

#include <algorithm>

#include "mem/topology.h"

namespace kt::mem {

Status plan_threads(const Topology &topology, int n_threads, const std::vector<int> &nodes, ThreadPlan *out) {
    ThreadPlan plan;
    const int n_nodes = static_cast<int>(topology.nodes().size());
    if (nodes.empty()) {
        for (const NumaNode &n : topology.nodes())
            if (!n.core_pus.empty()) plan.nodes.push_back(n.index);
    } else {
        for (int node : nodes) {
            KT_RETURN_IF(node < 0 || node >= n_nodes, KT_STATUS_INVALID_ARGUMENT,
                         "NUMA node %d does not exist (the topology has %d)", node, n_nodes);
            KT_RETURN_IF(topology.nodes()[static_cast<size_t>(node)].core_pus.empty(), KT_STATUS_INVALID_ARGUMENT,
                         "NUMA node %d has no CPU this process may use", node);
            KT_RETURN_IF(std::count(plan.nodes.begin(), plan.nodes.end(), node) != 0, KT_STATUS_INVALID_ARGUMENT,
                         "NUMA node %d is listed twice", node);
            plan.nodes.push_back(node);
        }
    }
    KT_RETURN_IF(plan.nodes.empty(), KT_STATUS_INVALID_ARGUMENT, "no NUMA node has a usable CPU");
    const int groups = static_cast<int>(plan.nodes.size());

    std::vector<int> cores(static_cast<size_t>(groups));
    int total_cores = 0;
    for (int g = 0; g < groups; ++g) {
        cores[static_cast<size_t>(g)] =
            static_cast<int>(topology.nodes()[static_cast<size_t>(plan.nodes[static_cast<size_t>(g)])].core_pus.size());
        total_cores += cores[static_cast<size_t>(g)];
    }
    if (n_threads == 0) n_threads = total_cores;
    KT_RETURN_IF(n_threads < groups, KT_STATUS_INVALID_ARGUMENT,
                 "%d threads cannot serve %d NUMA nodes (at least one thread per node)", n_threads, groups);

    // Apportion by core count with a floor of one thread per group: each further thread goes to the group
    // furthest below its proportional target.
    std::vector<int> count(static_cast<size_t>(groups), 1);
    for (int left = n_threads - groups; left > 0; --left) {
        int best = 0;
        double best_gap = -1e300;
        for (int g = 0; g < groups; ++g) {
            const double target = static_cast<double>(n_threads) * cores[static_cast<size_t>(g)] / total_cores;
            const double gap = target - count[static_cast<size_t>(g)];
            if (gap > best_gap) {
                best_gap = gap;
                best = g;
            }
        }
        ++count[static_cast<size_t>(best)];
    }

    plan.group_begin.push_back(0);
    for (int g = 0; g < groups; ++g) {
        const NumaNode &node = topology.nodes()[static_cast<size_t>(plan.nodes[static_cast<size_t>(g)])];
        for (int i = 0; i < count[static_cast<size_t>(g)]; ++i) {
            ThreadSlot slot;
            slot.group = g;
            slot.pu = i < static_cast<int>(node.core_pus.size()) ? node.core_pus[static_cast<size_t>(i)] : -1;
            plan.threads.push_back(slot);
        }
        plan.group_begin.push_back(static_cast<int>(plan.threads.size()));
    }
    *out = std::move(plan);
    return Status::ok();
}

}  // namespace kt::mem
