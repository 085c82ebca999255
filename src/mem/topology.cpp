#include "mem/topology.h"

#include <hwloc.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace kt::mem {
namespace {

struct BitmapDeleter {
    void operator()(hwloc_bitmap_s *b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Bitmap make_bitmap() {
    Bitmap b(hwloc_bitmap_alloc());
    if (!b) throw std::bad_alloc();
    return b;
}

}  // namespace

Status Topology::finish_load(hwloc_topology *topo, std::unique_ptr<Topology> *out) {
    std::unique_ptr<Topology> t(new Topology());
    t->topo_ = topo;  // owned from here on, also on failure
    KT_RETURN_IF(hwloc_topology_load(topo) != 0, KT_STATUS_IO_ERROR, "hwloc: cannot load the topology: %s",
                 std::strerror(errno));
    t->this_system_ = hwloc_topology_is_thissystem(topo) != 0;
    const hwloc_topology_support *support = hwloc_topology_get_support(topo);
    t->can_bind_threads_ = t->this_system_ && support->cpubind->set_thread_cpubind;
    t->can_bind_memory_ = t->this_system_ && support->membind->set_area_membind && support->membind->bind_membind;

    const int n_nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    KT_RETURN_IF(n_nodes < 1, KT_STATUS_IO_ERROR, "hwloc: the topology has no NUMA node");
    // Cores (or PUs, on topologies that list no cores) are assigned to the node whose cpuset contains them.
    const hwloc_obj_type_t unit = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    for (int i = 0; i < n_nodes; ++i) {
        const hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
        NumaNode n;
        n.index = i;
        n.os_index = node->os_index;
        n.memory_bytes = node->attr ? node->attr->numanode.local_memory : 0;
        for (hwloc_obj_t core = hwloc_get_next_obj_by_type(topo, unit, nullptr); core;
             core = hwloc_get_next_obj_by_type(topo, unit, core)) {
            if (!core->cpuset || !hwloc_bitmap_isincluded(core->cpuset, node->cpuset)) continue;
            const int pu = hwloc_bitmap_first(core->cpuset);  // one PU per core: SMT siblings stay free
            if (pu >= 0) n.core_pus.push_back(pu);
        }
        t->nodes_.push_back(std::move(n));
    }
    *out = std::move(t);
    return Status::ok();
}

Status Topology::load(std::unique_ptr<Topology> *out) {
    hwloc_topology_t topo = nullptr;
    KT_RETURN_IF(hwloc_topology_init(&topo) != 0, KT_STATUS_OUT_OF_MEMORY, "hwloc: topology_init failed");
    return finish_load(topo, out);
}

Status Topology::load_synthetic(const std::string &description, bool this_system, std::unique_ptr<Topology> *out) {
    hwloc_topology_t topo = nullptr;
    KT_RETURN_IF(hwloc_topology_init(&topo) != 0, KT_STATUS_OUT_OF_MEMORY, "hwloc: topology_init failed");
    if (hwloc_topology_set_synthetic(topo, description.c_str()) != 0) {
        hwloc_topology_destroy(topo);
        return Status::error(KT_STATUS_INVALID_ARGUMENT, "hwloc: bad synthetic topology '%s'", description.c_str());
    }
    if (this_system) hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM);
    return finish_load(topo, out);
}

Status Topology::shared(const Topology **out) {
    static std::once_flag once;
    static std::unique_ptr<Topology> topology;
    static Status status;
    std::call_once(once, [] { status = load(&topology); });
    if (!status.is_ok()) return status;
    *out = topology.get();
    return Status::ok();
}

Topology::~Topology() {
    if (topo_) hwloc_topology_destroy(topo_);
}

int Topology::core_count() const {
    int n = 0;
    for (const NumaNode &node : nodes_) n += static_cast<int>(node.core_pus.size());
    return n;
}

std::string Topology::describe() const {
    std::string s = format("%zu NUMA node%s (this system: %s, thread binding: %s, memory binding: %s)",
                           nodes_.size(), nodes_.size() == 1 ? "" : "s", this_system_ ? "yes" : "no",
                           can_bind_threads_ ? "yes" : "no", can_bind_memory_ ? "yes" : "no");
    for (const NumaNode &n : nodes_) {
        s += format("; node %d P#%u %llu MiB cores [", n.index, n.os_index,
                    static_cast<unsigned long long>(n.memory_bytes >> 20));
        for (size_t i = 0; i < n.core_pus.size(); ++i) s += (i ? " " : "") + std::to_string(n.core_pus[i]);
        s += "]";
    }
    return s;
}

Status Topology::bind_current_thread(int pu) const {
    KT_RETURN_IF(!can_bind_threads_, KT_STATUS_UNSUPPORTED, "hwloc: this topology cannot bind threads (%s)",
                 this_system_ ? "no support reported" : "it does not describe this system");
    KT_RETURN_IF(pu < 0, KT_STATUS_INVALID_ARGUMENT, "bind thread: PU %d", pu);
    Bitmap set = make_bitmap();
    hwloc_bitmap_only(set.get(), static_cast<unsigned>(pu));
    KT_RETURN_IF(hwloc_set_cpubind(topo_, set.get(), HWLOC_CPUBIND_THREAD) != 0, KT_STATUS_IO_ERROR,
                 "hwloc: binding a thread to CPU %d failed: %s", pu, std::strerror(errno));
    // Check with the kernel: a bind call that reports success is not proof (see the header comment).
    cpu_set_t mask;
    CPU_ZERO(&mask);
    KT_RETURN_IF(sched_getaffinity(0, sizeof mask, &mask) != 0, KT_STATUS_IO_ERROR, "sched_getaffinity: %s",
                 std::strerror(errno));
    KT_RETURN_IF(CPU_COUNT(&mask) != 1 || !CPU_ISSET(pu, &mask), KT_STATUS_IO_ERROR,
                 "binding a thread to CPU %d did not take effect (the kernel reports %d CPUs)", pu, CPU_COUNT(&mask));
    return Status::ok();
}

Status Topology::bind_memory(void *addr, size_t len, int node) const {
    KT_RETURN_IF(!can_bind_memory_, KT_STATUS_UNSUPPORTED, "hwloc: this topology cannot bind memory (%s)",
                 this_system_ ? "no support reported" : "it does not describe this system");
    KT_RETURN_IF(node < 0 || node >= static_cast<int>(nodes_.size()), KT_STATUS_INVALID_ARGUMENT,
                 "bind memory: node %d of %zu", node, nodes_.size());
    const hwloc_obj_t obj = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(node));
    KT_RETURN_IF(hwloc_set_area_membind(topo_, addr, len, obj->nodeset, HWLOC_MEMBIND_BIND,
                                        HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT) != 0,
                 KT_STATUS_IO_ERROR, "hwloc: binding %zu bytes to NUMA node %d (P#%u) failed: %s", len, node,
                 obj->os_index, std::strerror(errno));
    return Status::ok();
}

std::vector<int> Topology::memory_nodes(const void *addr, size_t len) const {
    std::vector<int> result;
    if (!this_system_) return result;
    Bitmap set = make_bitmap();
    if (hwloc_get_area_memlocation(topo_, addr, len, set.get(), HWLOC_MEMBIND_BYNODESET) != 0) return result;
    for (const NumaNode &n : nodes_)
        if (hwloc_bitmap_isset(set.get(), n.os_index)) result.push_back(n.index);
    return result;
}

}  // namespace kt::mem
