// Shared by the api/ translation units: the handle structs behind kt.h's opaque types, and the guard that keeps
// exceptions and failures from crossing the ABI.
#pragma once

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

#include "core/status.h"
#include "kt.h"
#include "model/gguf/gguf.h"
#include "model/model.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/context.h"
#include "runtime/engine.h"

// Per-handle "last error": guarded by a mutex so that concurrent readers of a shared handle stay safe.
struct kt_error_slot {
    mutable std::mutex mutex;
    mutable std::string message;

    void set(const std::string &m) const {
        std::lock_guard<std::mutex> lock(mutex);
        message = m;
    }
    const char *get() const {
        std::lock_guard<std::mutex> lock(mutex);
        return message.c_str();
    }
};

struct kt_model {
    std::unique_ptr<kt::gguf::File> file;
    kt_error_slot error;
    kt::tokenizer::LazyTokenizer tokenizer;  // built from the metadata on first use (api_tokenizer.cpp)
    // The model prepared for running, built by the first context that needs it (per kernel choice) and shared
    // by every context after it. The engine's factory (its expert pools' thread count is the first context's)
    // is declared first so that it outlives the models built with it.
    std::mutex runners_mutex;
    std::unique_ptr<kt::ops::KernelFactory> engine;
    std::shared_ptr<const kt::model::Model> runners[2];  // [KT_KERNELS_AUTO, KT_KERNELS_REFERENCE]
};

struct kt_context {
    std::unique_ptr<kt::runtime::Context> context;
    kt_error_slot error;
};

struct kt_gguf_writer {
    kt::gguf::Writer writer;
    // Keys and tensor names added so far, so that a duplicate is rejected by the call that adds it.
    std::unordered_set<std::string> keys;
    std::unordered_set<std::string> tensor_names;
    kt_error_slot error;
};

namespace kt::api {

// Runs `body` (returning Status), converting any exception to a status. Never throws.
template <typename Body>
Status guard(Body &&body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc &) {
        return Status(KT_STATUS_OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception &e) {
        return Status(KT_STATUS_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
        return Status(KT_STATUS_INTERNAL, "internal error: unknown exception");
    }
}

// guard() for functions on a handle: a failure's message goes into the handle's error slot.
template <typename Handle, typename Body>
kt_status guard_on(const Handle *handle, Body &&body) noexcept {
    Status s = guard(std::forward<Body>(body));
    if (!s.is_ok() && handle) {
        try {
            handle->error.set(s.message());
        } catch (...) {  // allocation of the message failed: the status still tells the story
        }
    }
    return s.code();
}

// Copies a status into the caller's optional kt_error (constructors).
void fill_error(kt_error *err, const Status &status) noexcept;

// KT_STATUS_INVALID_ARGUMENT with `what` as the message unless `condition` holds.
Status require(bool condition, const char *what);

// Copies the prefix of a caller's params struct that its struct_size covers over the defaults, so that a caller
// built against an older, shorter struct keeps the defaults of the fields it does not know.
template <typename Params>
Status copy_params(const Params *given, size_t min_size, const char *what, Params *p) {
    if (!given) return Status::ok();
    KT_RETURN_IF(given->struct_size < min_size, KT_STATUS_INVALID_ARGUMENT,
                 "%s: struct_size %u is too small (use the *_params_init function)", what, given->struct_size);
    std::memcpy(p, given, std::min<size_t>(given->struct_size, sizeof *p));
    p->struct_size = sizeof *p;
    return Status::ok();
}


// The model prepared for `kernels`, built once per kt_model and shared by its contexts and engines. n_threads: the
// expert engine's (the first AUTO user's choice).
Status prepared_model(kt_model *model, int32_t kernels, int32_t n_threads, std::shared_ptr<const model::Model> *out);

// The sampler settings of a (possibly NULL) caller struct; NULL means greedy.
Status read_sampler(const kt_sampler_params *given, runtime::SamplerParams *out);

// Positions per sequence when the caller asks for the default: the model's training context, at most this.
inline constexpr int64_t kDefaultMaxContext = 4096;

}  // namespace kt::api
