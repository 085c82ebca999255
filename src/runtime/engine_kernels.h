// The expert engine behind ops::KernelFactory: what a model runs on unless the caller asks for the reference.
//
//   Linear     a moe::PackedLinear: the matrix packed once at load into the engine's layout (kept in its GGUF format
//              where a kernel reads it, as moe/weights.h lists; F32/F16 as BF16; other formats as Q8_0), each call
//              quantizing the activations once (int8 per token, or bf16) and running the GEMM kernels over 32-column
//              panels on the context's threads. Dense projections and the output head run on the same kernels as
//              the experts.
//   ExpertFfn  a moe::ExpertPool per layer (a dense FFN is a one-expert pool); the pools of a model share one
//              executor (pinned threads, job queue, scratch). Routed experts count their activations. With a
//              device and a placement plan, a MoE layer's planned experts run on the device (runtime/hybrid_ffn.h).
#pragma once

#include <memory>

#include "core/status.h"
#include "core/thread_pool.h"
#include "device/device.h"
#include "device/placement.h"
#include "ops/linear.h"

namespace kt::moe {
class PackedStore;
}

namespace kt::runtime {

struct EngineOptions {
    int n_threads = 0;         // threads of the expert pools and of packing at load (0: one per physical core)
    int64_t max_tokens = 512;  // tokens per expert-pool call (longer batches are split)
    // Where packed buffers come from instead of packing, and where packed ones are handed (moe/packed_store.h):
    // the pack cache file of the model being loaded. Null: everything is packed.
    std::shared_ptr<moe::PackedStore> store;
    // The hybrid path: with a device and a plan, the routed experts of each layer the plan names are split: those
    // it lists run on the device (uploaded at load), the rest on the CPU pool (a runtime::HybridFfn). The layer
    // is found by the gate tensor's name ("blk.<layer>.ffn_gate_exps").
    std::shared_ptr<device::Device> device;
    std::shared_ptr<const device::Plan> plan;
    // With a device and a plan: at most this many of each token's lowest-weighted CPU experts land one MoE layer
    // late (runtime/deferred_experts.h); 0: none.
    int32_t deferred_experts = 0;
    // With a device and a plan: MoE calls of more tokens than this run the whole layer on the device, through one
    // stream buffer of stream_slots layers of stream_shape (the shape of the model's MoE layers) that the plan
    // counted; 0: never.
    int64_t prefill_threshold = 0;
    device::LayerShape stream_shape;
    int32_t stream_slots = 1;
};

// The shape a device layer gets for a MoE layer of n_experts experts [I x H] under these options.
device::LayerShape device_layer_shape(const EngineOptions &options, int64_t n_experts, int64_t hidden, int64_t intermediate);

// The layer index in a GGUF block tensor name ("blk.12.ffn_gate_exps.weight" -> 12), or -1.
int64_t block_of(const char *tensor_name);

// Creates the factory. Its kernels outlive it: a Linear or ExpertFfn it built holds everything it needs.
Status create_engine_kernels(const EngineOptions &options, std::unique_ptr<ops::KernelFactory> *out);

}  // namespace kt::runtime
