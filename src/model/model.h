// A model ready to run: its architecture, hyperparameters and bound weights, with the kernels built for them.
//
// Built from a parsed GGUF file (which it borrows: the file must outlive it) and a KernelFactory. Immutable after
// load, so any number of contexts may run it at once.
#pragma once

#include <memory>

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

    // Finds the architecture, reads and validates its hyperparameters, binds every tensor of its table (shape
    // and type checked; a missing tensor or one the architecture does not use is an error naming it) and builds
    // the kernels.
    static Status load(const gguf::File &file, const ops::KernelFactory &kernels, std::unique_ptr<Model> *out);
};

}  // namespace kt::model
