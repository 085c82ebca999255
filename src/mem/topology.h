// Topology: the machine's NUMA nodes and physical cores as hwloc reports them, and thread / memory binding.
//
// hwloc can describe machines that are not this one (HWLOC_SYNTHETIC, HWLOC_XMLFILE): that is how kt's tests run
// on a fake 2-node machine. Such topologies lie in specific ways (reference/amx-hwloc.md §5.4): without
// HWLOC_THISSYSTEM=1 every bind call is a no-op that returns success; with it, binding to a CPU or node that does
// not exist fails with EINVAL. So this class never trusts a bind call by itself:
//   - it binds only when the topology is this system and hwloc reports support for the operation;
//   - it verifies a thread binding with sched_getaffinity;
//   - it reports failure as a status, and callers degrade (an unpinned worker; first-touch memory placement).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

struct hwloc_topology;  // hwloc_topology_t, kept out of this header

namespace kt::mem {

struct NumaNode {
    int index = 0;                 // logical index, 0..nodes()-1
    unsigned os_index = 0;         // the OS node number (P#)
    uint64_t memory_bytes = 0;     // local memory
    std::vector<int> core_pus;     // one PU (OS CPU number) per physical core of this node: SMT siblings unused
};

class Topology {
public:
    // The topology hwloc sees for this process: the machine itself, or what HWLOC_SYNTHETIC / HWLOC_XMLFILE /
    // HWLOC_THISSYSTEM in the environment describe. Only CPUs this process may run on are listed.
    static Status load(std::unique_ptr<Topology> *out);
    // A synthetic topology in hwloc's syntax, e.g. "pack:2 [numa(memory=4GB)] core:4 pu:2". this_system: issue
    // real binding calls, as HWLOC_THISSYSTEM=1 does.
    static Status load_synthetic(const std::string &description, bool this_system, std::unique_ptr<Topology> *out);
    // The process-wide topology from load(), loaded once on first use (thread-safe). The failure, if any, is
    // returned on every call.
    static Status shared(const Topology **out);

    ~Topology();
    Topology(const Topology &) = delete;
    Topology &operator=(const Topology &) = delete;

    const std::vector<NumaNode> &nodes() const { return nodes_; }
    int core_count() const;
    bool is_this_system() const { return this_system_; }
    bool can_bind_threads() const { return can_bind_threads_; }
    bool can_bind_memory() const { return can_bind_memory_; }
    // One line, e.g. "2 NUMA nodes (this system: no): node 0 P#0 4096 MiB cores [0 2 4 6]; node 1 ...".
    std::string describe() const;

    // Pins the calling thread to one PU (an OS CPU number). OK only when the kernel confirms the binding;
    // UNSUPPORTED when this topology cannot bind, IO_ERROR when the bind call or its check fails.
    Status bind_current_thread(int pu) const;

    // Gives [addr, addr + len) a strict BIND policy to node `node` (logical index): pages touched afterwards are
    // allocated there. UNSUPPORTED when this topology cannot bind memory, IO_ERROR when the call fails (e.g. the
    // node exists only in a synthetic topology).
    Status bind_memory(void *addr, size_t len, int node) const;

    // Logical indexes of the nodes holding the resident pages of [addr, addr + len); empty when unknown.
    std::vector<int> memory_nodes(const void *addr, size_t len) const;

private:
    Topology() = default;
    static Status finish_load(hwloc_topology *topo, std::unique_ptr<Topology> *out);

    hwloc_topology *topo_ = nullptr;
    std::vector<NumaNode> nodes_;
    bool this_system_ = false;
    bool can_bind_threads_ = false;
    bool can_bind_memory_ = false;
};

}  // namespace kt::mem
