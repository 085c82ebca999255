#include "mem/numa_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/log.h"
#include "mem/topology.h"

namespace kt::mem {

const char *placement_name(Placement p) {
    switch (p) {
        case Placement::kAnywhere: return "anywhere";
        case Placement::kBound: return "bound";
        case Placement::kFirstTouch: return "first-touch";
    }
    return "unknown";
}

NumaBuffer::~NumaBuffer() { release(); }

NumaBuffer::NumaBuffer(NumaBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      placement_(other.placement_),
      node_(other.node_),
      heap_(other.heap_) {}

NumaBuffer &NumaBuffer::operator=(NumaBuffer &&other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        placement_ = other.placement_;
        node_ = other.node_;
        heap_ = other.heap_;
    }
    return *this;
}

void NumaBuffer::release() {
    if (heap_)
        std::free(data_);
    else if (data_)
        munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
    heap_ = false;
}

Status NumaBuffer::allocate(size_t bytes, const Topology *topology, int node, NumaBuffer *out) {
    NumaBuffer b;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const bool placed = topology && node >= 0;
    if (bytes > 0 && bytes <= kHeapBytes && !placed) {
        // A small buffer that no node was asked for comes from the C heap: as its own mapping it would cost a
        // system call, a page fault per page and, when released, a TLB shootdown on every CPU the process runs on
        // (a tiny model's load and free did about a hundred of each).
        const size_t size = (bytes + page - 1) / page * page;
        b.data_ = std::aligned_alloc(page, size);
        KT_RETURN_IF(!b.data_, KT_STATUS_OUT_OF_MEMORY, "numa buffer: %zu bytes from the heap failed", size);
        std::memset(b.data_, 0, size);  // zero-filled, as a fresh mapping is
        b.size_ = size;
        b.heap_ = true;
    } else if (bytes > 0) {
        const bool huge = bytes >= kHugePageBytes;
        const size_t align = huge ? kHugePageBytes : page;
        KT_RETURN_IF(bytes > SIZE_MAX - 2 * align, KT_STATUS_OUT_OF_MEMORY, "numa buffer: %zu bytes", bytes);
        const size_t size = (bytes + align - 1) / align * align;
        // Over-reserve by one alignment unit, then trim both ends so the start is aligned.
        const size_t reserve = huge ? size + align : size;
        void *raw = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        KT_RETURN_IF(raw == MAP_FAILED, KT_STATUS_OUT_OF_MEMORY, "numa buffer: mmap of %zu bytes failed: %s", reserve,
                     std::strerror(errno));
        const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
        const uintptr_t aligned = (start + align - 1) / align * align;
        if (aligned > start) munmap(raw, aligned - start);
        const uintptr_t end = start + reserve, used_end = aligned + size;
        if (end > used_end) munmap(reinterpret_cast<void *>(used_end), end - used_end);
        b.data_ = reinterpret_cast<void *>(aligned);
        b.size_ = size;
        // THP: a hint; kernels without it (or with THP "never") keep 4 KiB pages, which is still correct.
        if (huge) madvise(b.data_, b.size_, MADV_HUGEPAGE);
    }
    if (placed) {
        b.node_ = node;
        b.placement_ = Placement::kFirstTouch;
        if (bytes > 0 && topology->can_bind_memory()) {
            const Status s = topology->bind_memory(b.data_, b.size_, node);
            if (s.is_ok()) {
                b.placement_ = Placement::kBound;
            } else {
                static std::atomic<bool> logged{false};
                if (!logged.exchange(true))
                    KT_LOG_INFO_MSG("%s; placing memory by first touch from threads on the node instead",
                                    s.message().c_str());
            }
        }
    }
    *out = std::move(b);
    return Status::ok();
}

void NumaBuffer::prefault() {
    if (heap_ || !data_ || placement_ == Placement::kFirstTouch) return;  // heap memory was zeroed by allocate
    // A zero written to each page, as the first use would. MADV_POPULATE_WRITE also makes the pages resident, but
    // on this project's KVM guests (Zen 5, Linux 6.18) the first job after it still ran as if cold: quantizing a
    // 512-token prompt's x took 1.4 ms against 0.3 after these writes and 2.3 with no prefault at all.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    volatile uint8_t *bytes = static_cast<volatile uint8_t *>(data_);
    for (size_t off = 0; off < size_; off += page) bytes[off] = 0;
}

}  // namespace kt::mem
