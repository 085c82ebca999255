// PackedStore: where packed weight buffers can come from instead of being packed, and where freshly packed ones are
// handed to be kept (runtime/pack_cache.h implements it with a cache file next to the model).
//
// A packer (PackedLinear::create, ExpertPool::load) describes each buffer it is about to fill by a PackedBufferDesc,
// computed from the sources' shapes and types alone. take() answers all of a packer's buffers at once (a pool's
// gate, up and down of every shard) with views holding exactly the bytes packing would have written, or with false
// and no view at all, and the packer then packs from the source as without a store. After packing, keep() hands
// the store each filled buffer (which stays alive, unchanged, for as long as the model that owns it).
//
// Buffers are asked for in the order the model's loader builds its kernels, which a given source file and kt
// version make deterministic; `name` (the tensor's) and the descriptor are checked against what was stored, so a
// store never hands out bytes for another buffer. Called from one thread at a time (the loader's).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/packed.h"
#include "mem/weight_storage.h"

namespace kt::moe {

struct PackedBufferDesc {
    enum Part : int32_t { kLinear = 1, kGate = 2, kUp = 3, kDown = 4 };
    int32_t part = kLinear;
    int32_t shard = 0;           // NUMA shard (executor group) of an expert pool; 0 for a linear
    int64_t shard_begin = 0;     // the shard's first row of I (expert pools)
    cpu::PackedLayout layout;    // of one matrix (one expert's shard)
    uint64_t stride = 0;         // bytes from one expert's matrix to the next (count 1: layout.bytes)
    int64_t count = 1;           // matrices in the buffer (experts)
    uint64_t bytes() const { return stride * static_cast<uint64_t>(count); }
};

struct PackedRequest {
    const char *name = "";  // the tensor's
    PackedBufferDesc desc;
    mem::WeightStorage *out = nullptr;
};

class PackedStore {
public:
    virtual ~PackedStore() = default;
    virtual bool take(const PackedRequest *requests, size_t n) = 0;
    virtual void keep(const char *name, const PackedBufferDesc &desc, const mem::WeightStorage &buffer) = 0;
};

}  // namespace kt::moe
