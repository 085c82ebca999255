#include "mem/weight_storage.h"

#include <utility>

namespace kt::mem {

Status WeightStorage::allocate(size_t bytes, const Topology *topology, int node, WeightStorage *out) {
    WeightStorage s;
    KT_TRY(NumaBuffer::allocate(bytes, topology, node, &s.owned_));
    *out = std::move(s);
    return Status::ok();
}

Status WeightStorage::view(std::shared_ptr<const MappedFile> mapping, const uint8_t *data, size_t bytes,
                           WeightStorage *out) {
    KT_RETURN_IF(!mapping || !mapping->data(), KT_STATUS_INVALID_ARGUMENT, "weight view: no mapping");
    const uint8_t *begin = mapping->data();
    KT_RETURN_IF(data < begin || static_cast<uint64_t>(data - begin) > mapping->size() ||
                     bytes > mapping->size() - static_cast<uint64_t>(data - begin),
                 KT_STATUS_INVALID_ARGUMENT, "weight view: %zu bytes at offset %lld lie outside the %llu-byte mapping",
                 bytes, static_cast<long long>(data - begin), static_cast<unsigned long long>(mapping->size()));
    KT_RETURN_IF(reinterpret_cast<uintptr_t>(data) % kViewAlignment != 0, KT_STATUS_INVALID_ARGUMENT,
                 "weight view: offset %lld is not %zu-byte aligned", static_cast<long long>(data - begin),
                 kViewAlignment);
    WeightStorage s;
    s.view_ = std::move(mapping);
    s.view_data_ = data;
    s.view_bytes_ = bytes;
    *out = std::move(s);
    return Status::ok();
}

}  // namespace kt::mem
