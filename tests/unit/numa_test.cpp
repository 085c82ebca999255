// Topology, thread placement and NUMA buffers on the real machine and on synthetic topologies, including the ways
// fake topologies lie (reference/amx-hwloc.md §5.4).
#include <catch2/catch.hpp>

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "mem/numa_buffer.h"
#include "mem/thread_placement.h"
#include "mem/topology.h"

using namespace kt;
using namespace kt::mem;

namespace {

std::unique_ptr<Topology> synthetic(const char *desc, bool this_system) {
    std::unique_ptr<Topology> t;
    const Status s = Topology::load_synthetic(desc, this_system, &t);
    INFO(s.message());
    REQUIRE(s.is_ok());
    return t;
}

// How many of the buffer's pages are resident (mincore).
size_t resident_pages(const NumaBuffer &b) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> v((b.size() + page - 1) / page);
    REQUIRE(mincore(b.data(), b.size(), v.data()) == 0);
    return static_cast<size_t>(std::count_if(v.begin(), v.end(), [](unsigned char c) { return c & 1; }));
}

bool cpu_allowed(int cpu) {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    return sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_ISSET(cpu, &mask);
}

}  // namespace

TEST_CASE("numa: the real topology has nodes and cores and binds threads for real") {
    const Topology *t = nullptr;
    REQUIRE(Topology::shared(&t).is_ok());
    INFO(t->describe());
    REQUIRE(!t->nodes().empty());
    CHECK(t->core_count() >= 1);
    const int pu = t->nodes()[0].core_pus.empty() ? -1 : t->nodes()[0].core_pus[0];
    if (t->can_bind_threads() && pu >= 0) {
        Status s;
        std::thread th([&] { s = t->bind_current_thread(pu); });
        th.join();
        INFO(s.message());
        CHECK(s.is_ok());
    }
}

TEST_CASE("numa: buffers are aligned and sized") {
    NumaBuffer small, big, empty;
    REQUIRE(NumaBuffer::allocate(100, nullptr, -1, &small).is_ok());
    CHECK(reinterpret_cast<uintptr_t>(small.data()) % 4096 == 0);
    CHECK(small.size() >= 100);
    CHECK(small.placement() == Placement::kAnywhere);
    std::memset(small.data(), 0xAB, small.size());

    REQUIRE(NumaBuffer::allocate((3u << 20) + 5, nullptr, -1, &big).is_ok());
    CHECK(reinterpret_cast<uintptr_t>(big.data()) % kHugePageBytes == 0);
    CHECK(big.size() == (4u << 20));
    std::memset(big.data(), 1, big.size());

    REQUIRE(NumaBuffer::allocate(0, nullptr, -1, &empty).is_ok());
    CHECK(empty.data() == nullptr);

    NumaBuffer moved = std::move(big);
    CHECK(big.data() == nullptr);
    CHECK(moved.as<uint8_t>()[123] == 1);
}

TEST_CASE("numa: small buffers without a node come from the heap, page aligned and zeroed like a mapping") {
    // Released and asked for again, a heap block usually comes back the same: the bytes written into it before
    // must not show through.
    for (size_t bytes : {size_t{1}, size_t{100}, size_t{4097}, kHeapBytes}) {
        INFO(bytes);
        for (int round = 0; round < 3; ++round) {
            NumaBuffer b;
            REQUIRE(NumaBuffer::allocate(bytes, nullptr, -1, &b).is_ok());
            REQUIRE(b.data() != nullptr);
            CHECK(reinterpret_cast<uintptr_t>(b.data()) % 4096 == 0);
            CHECK(b.size() >= bytes);
            CHECK(b.size() % 4096 == 0);
            CHECK(b.placement() == Placement::kAnywhere);
            CHECK(b.node() == -1);
            const uint8_t *p = b.as<uint8_t>();
            CHECK(std::all_of(p, p + b.size(), [](uint8_t v) { return v == 0; }));
            std::memset(b.data(), 0xAB, b.size());
            NumaBuffer moved = std::move(b);  // the heap block is freed once, by its last owner
            CHECK(b.data() == nullptr);
            CHECK(moved.as<uint8_t>()[bytes - 1] == 0xAB);
        }
    }
}

TEST_CASE("numa: prefault makes a mapped buffer resident and zero, and leaves a first-touch buffer alone") {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    NumaBuffer b;
    REQUIRE(NumaBuffer::allocate(6u << 20, nullptr, -1, &b).is_ok());
    CHECK(resident_pages(b) == 0);  // a fresh mapping: nothing touched by allocate
    b.prefault();
    CHECK(resident_pages(b) == b.size() / page);
    const unsigned char *bytes = b.as<unsigned char>();
    CHECK(std::all_of(bytes, bytes + b.size(), [](unsigned char c) { return c == 0; }));

    auto t = synthetic("pack:2 [numa(memory=4GB)] core:4 pu:2", false);  // binds nothing: first touch
    NumaBuffer f;
    REQUIRE(NumaBuffer::allocate(4u << 20, t.get(), 1, &f).is_ok());
    REQUIRE(f.placement() == Placement::kFirstTouch);
    f.prefault();
    CHECK(resident_pages(f) == 0);
}

TEST_CASE("numa: a buffer on node 0 of the real machine lands on node 0") {
    const Topology *t = nullptr;
    REQUIRE(Topology::shared(&t).is_ok());
    NumaBuffer b;
    REQUIRE(NumaBuffer::allocate(4u << 20, t, 0, &b).is_ok());
    CHECK(b.node() == 0);
    if (t->can_bind_memory()) {
        CHECK(b.placement() == Placement::kBound);
        std::memset(b.data(), 7, b.size());
        CHECK(t->memory_nodes(b.data(), b.size()) == std::vector<int>{0});
    } else {
        CHECK(b.placement() == Placement::kFirstTouch);
    }
}

TEST_CASE("numa: a synthetic topology without HWLOC_THISSYSTEM binds nothing and says so") {
    auto t = synthetic("pack:2 [numa(memory=4GB)] core:4 pu:2", false);
    INFO(t->describe());
    REQUIRE(t->nodes().size() == 2);
    CHECK(t->nodes()[0].core_pus == std::vector<int>{0, 2, 4, 6});  // one PU per core: SMT siblings skipped
    CHECK(t->nodes()[1].core_pus == std::vector<int>{8, 10, 12, 14});
    CHECK(t->nodes()[1].memory_bytes == 4000000000ull);  // hwloc reads "GB" as 10^9
    CHECK_FALSE(t->is_this_system());
    CHECK_FALSE(t->can_bind_threads());
    CHECK_FALSE(t->can_bind_memory());
    CHECK(t->bind_current_thread(0).code() == KT_STATUS_UNSUPPORTED);  // hwloc itself would claim success

    NumaBuffer b;
    REQUIRE(NumaBuffer::allocate(4u << 20, t.get(), 1, &b).is_ok());
    CHECK(b.placement() == Placement::kFirstTouch);
    CHECK(t->memory_nodes(b.data(), b.size()).empty());
}

TEST_CASE("numa: a synthetic topology with HWLOC_THISSYSTEM binds what exists and refuses the rest") {
    // Two nodes of one core each, whose PUs are the real CPUs 0 and 1; node 1 does not exist for the kernel.
    auto t = synthetic("pack:2 [numa(memory=4GB)] core:1 pu:1", true);
    INFO(t->describe());
    REQUIRE(t->nodes().size() == 2);
    CHECK(t->nodes()[0].core_pus == std::vector<int>{0});
    CHECK(t->nodes()[1].core_pus == std::vector<int>{1});
    CHECK(t->is_this_system());

    NumaBuffer on1;
    REQUIRE(NumaBuffer::allocate(4u << 20, t.get(), 1, &on1).is_ok());
    CHECK(on1.placement() == Placement::kFirstTouch);  // the kernel has no node 1: degrade, don't fail
    CHECK(t->bind_memory(on1.data(), on1.size(), 1).code() == KT_STATUS_IO_ERROR);

    Status s;
    std::thread th([&] { s = t->bind_current_thread(1); });
    th.join();
    INFO(s.message());
    if (cpu_allowed(1)) {
        CHECK(s.is_ok());
    } else {
        CHECK(s.code() == KT_STATUS_IO_ERROR);
    }
    std::thread th2([&] { s = t->bind_current_thread(7); });  // a CPU this machine does not have
    th2.join();
    if (!cpu_allowed(7)) CHECK(s.code() == KT_STATUS_IO_ERROR);
}

TEST_CASE("numa: thread plans spread threads over nodes by core count") {
    auto t = synthetic("pack:2 [numa(memory=4GB)] core:4 pu:2", false);
    ThreadPlan p;
    REQUIRE(plan_threads(*t, 0, {}, &p).is_ok());
    REQUIRE(p.groups() == 2);
    CHECK(p.group_begin == std::vector<int>{0, 4, 8});
    CHECK(p.threads[0].pu == 0);
    CHECK(p.threads[3].pu == 6);
    CHECK(p.threads[4].group == 1);
    CHECK(p.threads[4].pu == 8);

    REQUIRE(plan_threads(*t, 3, {}, &p).is_ok());
    CHECK(p.group_begin == std::vector<int>{0, 2, 3});

    REQUIRE(plan_threads(*t, 10, {}, &p).is_ok());  // more threads than cores: the extra ones are not pinned
    CHECK(p.group_begin == std::vector<int>{0, 5, 10});
    CHECK(p.threads[4].pu == -1);
    CHECK(p.threads[9].pu == -1);

    REQUIRE(plan_threads(*t, 2, {1}, &p).is_ok());
    CHECK(p.nodes == std::vector<int>{1});
    CHECK(p.threads[1].pu == 10);

    CHECK(plan_threads(*t, 1, {}, &p).code() == KT_STATUS_INVALID_ARGUMENT);      // fewer threads than nodes
    CHECK(plan_threads(*t, 4, {2}, &p).code() == KT_STATUS_INVALID_ARGUMENT);     // no such node
    CHECK(plan_threads(*t, 4, {0, 0}, &p).code() == KT_STATUS_INVALID_ARGUMENT);  // listed twice
}
