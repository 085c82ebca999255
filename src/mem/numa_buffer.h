// NumaBuffer: anonymous memory for weights and scratch, 2 MiB aligned, advised for transparent huge pages and
// bound to a NUMA node when the system allows it.
//
// Placement (reference/amx-hwloc.md §5.4, §6): the buffer is mmap'ed (never hwloc_alloc_membind, which may return
// unaligned malloc memory under fake topologies), rounded up and aligned to 2 MiB so that THP can back it
// (MADV_HUGEPAGE; falls back silently to 4 KiB pages), and given a strict BIND policy for its node before any page
// is touched. Where binding is impossible (a single-node machine without NUMA support, a synthetic topology, a
// node the kernel does not know) the buffer reports kFirstTouch: its owner must write it first from a thread
// running on that node, and Linux's first-touch policy puts the pages there. Nothing is touched here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace kt::mem {

class Topology;

enum class Placement : int32_t {
    kAnywhere = 0,    // no node was asked for
    kBound = 1,       // a BIND policy for the node is in place
    kFirstTouch = 2,  // binding was impossible: write the buffer first from a thread on the node
};

const char *placement_name(Placement p);

inline constexpr size_t kHugePageBytes = size_t{2} << 20;
// Buffers up to this size without a node come from the C heap, zeroed there (numa_buffer.cpp says why).
inline constexpr size_t kHeapBytes = size_t{64} << 10;

class NumaBuffer {
public:
    NumaBuffer() = default;
    ~NumaBuffer();
    NumaBuffer(NumaBuffer &&other) noexcept;
    NumaBuffer &operator=(NumaBuffer &&other) noexcept;
    NumaBuffer(const NumaBuffer &) = delete;
    NumaBuffer &operator=(const NumaBuffer &) = delete;

    // At least `bytes` bytes (0 gives an empty buffer), zero-filled. Buffers of 2 MiB or more are 2 MiB aligned
    // and THP-advised; smaller ones are page aligned. node < 0 or topology == nullptr: no placement (and up to
    // kHeapBytes, heap memory). The binding failure that leads to kFirstTouch is not an error (it is logged once).
    static Status allocate(size_t bytes, const Topology *topology, int node, NumaBuffer *out);

    // Writes a zero to every page now, so that the first use does not pay the page faults (the Executor's scratch,
    // when it grows). Pages come from where the buffer's placement says; a kFirstTouch buffer is left alone, since
    // its pages must be first written from its node's threads. The contents stay zero.
    void prefault();

    void *data() const { return data_; }
    template <typename T>
    T *as() const {
        return static_cast<T *>(data_);
    }
    size_t size() const { return size_; }
    Placement placement() const { return placement_; }
    int node() const { return node_; }

private:
    void release();

    void *data_ = nullptr;
    size_t size_ = 0;
    Placement placement_ = Placement::kAnywhere;
    int node_ = -1;
    bool heap_ = false;  // from std::aligned_alloc, not mmap
};

}  // namespace kt::mem
