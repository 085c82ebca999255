// WeightStorage: the bytes of a packed weight buffer, either owned (a NumaBuffer this object allocated and its owner
// fills) or a read-only view into a file mapping that some other object keeps alive (a packed cache file, shared by
// every process that maps it). The kernels only ever read through data(), so one type serves both and the code that
// computes with packed weights never knows which it has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "mem/mapped_file.h"
#include "mem/numa_buffer.h"

namespace kt::mem {

class WeightStorage {
public:
    WeightStorage() = default;
    WeightStorage(WeightStorage &&) noexcept = default;
    WeightStorage &operator=(WeightStorage &&) noexcept = default;
    WeightStorage(const WeightStorage &) = delete;
    WeightStorage &operator=(const WeightStorage &) = delete;

    // Owned memory: NumaBuffer::allocate's rules (2 MiB aligned and THP-advised from 2 MiB, bound to `node` where
    // the system allows), to be written by the owner through writable().
    static Status allocate(size_t bytes, const Topology *topology, int node, WeightStorage *out);

    // A view of `bytes` bytes at `data` inside `mapping` (which the view keeps alive). INVALID_ARGUMENT unless the
    // range lies inside the mapping and starts on kViewAlignment bytes.
    static Status view(std::shared_ptr<const MappedFile> mapping, const uint8_t *data, size_t bytes,
                       WeightStorage *out);

    // The kernels read 64-byte lines (AMX B tiles, AVX-512 operands): every buffer starts on one.
    static constexpr size_t kViewAlignment = 64;

    const uint8_t *data() const { return view_ ? view_data_ : static_cast<const uint8_t *>(owned_.data()); }
    template <typename T>
    const T *as() const {
        return reinterpret_cast<const T *>(data());
    }
    // The owned bytes to fill; nullptr for a view (a mapping is read-only).
    uint8_t *writable() const { return view_ ? nullptr : owned_.as<uint8_t>(); }
    size_t size() const { return view_ ? view_bytes_ : owned_.size(); }
    bool is_view() const { return view_ != nullptr; }
    // Where the pages live: the NumaBuffer's placement, kAnywhere for a view (the page cache's pages).
    Placement placement() const { return view_ ? Placement::kAnywhere : owned_.placement(); }

private:
    NumaBuffer owned_;
    std::shared_ptr<const MappedFile> view_;
    const uint8_t *view_data_ = nullptr;
    size_t view_bytes_ = 0;
};

}  // namespace kt::mem
