// A model ready to run: its architecture, hyperparameters and bound weights, with the kernels built for them.
//
// Built from a parsed GGUF file (which it borrows: the file must outlive it) and a KernelFactory. Immutable after
// load, so any number of contexts may run it at once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/arch/arch.h"
#include "model/gguf/gguf.h"
#include "ops/linear.h"

namespace kt::model {

struct Model {
    const gguf::File *file = nullptr;
    const Architecture *arch = nullptr;
    HParams hp;
    Weights w;
    const ops::KernelFactory *kernels = nullptr;
    uint64_t weight_bytes = 0;  // bytes of every tensor the model uses, as stored in the file

    // Called after each kernel built (a projection, an FFN's expert stack, a stack of per-head projections) with
    // the file bytes of the tensors bound so far and of all of them. Return false to cancel the load.
    using Progress = std::function<bool(uint64_t done_bytes, uint64_t total_bytes)>;

    // Finds the architecture, reads and validates its hyperparameters, binds every tensor of its table (shape
    // and type checked; a missing tensor or one the architecture does not use is an error naming it) and builds
    // the kernels. A cancelled load returns KT_STATUS_CANCELLED and nothing it built.
    static Status load(const gguf::File &file, const ops::KernelFactory &kernels, std::unique_ptr<Model> *out,
                       const Progress &progress = nullptr);
};

// One tensor an architecture uses, as its table lists it for a file's hyperparameters.
struct TensorSpec {
    enum class Role : int32_t {
        kEmbedding = 0,  // token_embd: rows read by token id
        kVector = 1,     // norm weights, biases, gates: f32 vectors
        kMatrix = 2,     // a projection (ne = {in, out})
        kExperts = 3,    // a stack of matrices (ne = {in, out, count}): experts, or deepseek2's per-head projections
    };
    std::string name;
    std::vector<int64_t> ne;  // GGML order
    Role role = Role::kMatrix;
    bool optional = false;
};

// Every tensor the file's architecture would use (optional ones flagged), from its metadata alone: the tensors
// themselves need not exist (vocab_size gives the vocabulary then). For writers of synthetic models and for
// planners.
Status list_tensors(const gguf::File &file, std::vector<TensorSpec> *out);

}  // namespace kt::model
