// The expert engine behind ops::KernelFactory: what a model runs on unless the caller asks for the reference.
//
//   Linear     a moe::PackedLinear: the matrix packed once at load into the engine's layout (kept in its GGUF format
//              where a kernel reads it directly, Q8_0 Q4_0 Q4_K Q5_K Q6_K IQ4_XS MXFP4 BF16; F32/F16 as BF16; other
//              formats as Q8_0), each call quantizing the activations once (int8 per token, or bf16) and running
//              the GEMM kernels over 32-column panels on the context's threads. Dense projections and the output
//              head run on the same kernels as the experts.
//   ExpertFfn  a moe::ExpertPool per layer (a dense FFN is a one-expert pool); the pools of a model share one
//              executor (pinned threads, job queue, scratch).
#pragma once

#include <memory>

#include "core/status.h"
#include "core/thread_pool.h"
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
};

// Creates the factory. Its kernels outlive it: a Linear or ExpertFfn it built holds everything it needs.
Status create_engine_kernels(const EngineOptions &options, std::unique_ptr<ops::KernelFactory> *out);

}  // namespace kt::runtime
