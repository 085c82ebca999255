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

#include "api/api_structs.h"
#include "core/status.h"
#include "kt.h"
#include "model/gguf/gguf.h"
#include "model/model.h"
#include "model/tokenizer/tokenizer.h"
#include "runtime/context.h"
#include "runtime/engine.h"
#include "runtime/engine_kernels.h"

// A handle's "last error" (kt_..._last_error) when one thread at a time uses the handle (kt_context,
// kt_gguf_writer, kt_detokenizer): one message, valid until the next failing call on the handle.
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

// The "last error" of a handle that several threads use at once (kt_model, kt_expert_pool): one message per
// thread, so the thread whose call failed reads its own message, and the pointer it got stays valid while other
// threads fail on the same handle (until its own next failing call on the handle, or the handle's free). A
// thread's entry is dropped when the thread exits, so a handle holds at most one message per live thread.
class kt_thread_error_slot {
public:
    kt_thread_error_slot();
    ~kt_thread_error_slot();
    kt_thread_error_slot(const kt_thread_error_slot &) = delete;
    kt_thread_error_slot &operator=(const kt_thread_error_slot &) = delete;

    void set(const std::string &m) const;
    const char *get() const;  // "" when this thread has no failed call on the handle

    struct Messages;  // api_common.cpp

private:
    std::shared_ptr<Messages> messages_;  // shared with the threads that wrote to it, which erase their entry on exit
};

struct kt_model {
    std::unique_ptr<kt::gguf::File> file;
    kt_thread_error_slot error;  // a model is shared by threads that read it
    kt::tokenizer::LazyTokenizer tokenizer;  // built from the metadata on first use (api_tokenizer.cpp)
    // The model prepared for running, built by the first context that needs it (per kernel choice) and shared
    // by every context after it. The engine's factory (its expert pools' thread count is the first context's)
    // is declared first so that it outlives the models built with it.
    std::mutex runners_mutex;
    // The hybrid path (kt_model_params.device): the device and the placement decided at load, handed to the engine's
    // factory when it is built (api_device.cpp). Null without a device.
    std::shared_ptr<kt::device::Device> device;
    std::shared_ptr<const kt::device::Plan> device_plan;
    int32_t device_deferred_experts = 0;
    int32_t device_prefill_threshold = 0;
    kt::device::LayerShape device_stream_shape;  // with a threshold: the shape of the model's MoE layers
    int32_t device_stream_slots = 1;             // and how many of them the stream buffer holds
    // What the plan was made from (kt_model_device_replace plans again with new counts).
    std::vector<kt::device::PlacementLayer> device_layers;
    kt::device::PlacementRequest device_request;  // without counts
    int64_t device_n_layer = 0;
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

namespace kt::moe {
class PackedStore;
}

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

// Sets up model->device and model->device_plan from the load parameters (nothing for KT_DEVICE_NONE).
Status setup_device(kt_model *model, const kt_model_params &params);

// The model prepared for `kernels`, built once per kt_model and shared by its contexts and engines. n_threads: the
// expert engine's (the first AUTO user's choice).
// `progress` (may be null) hears of each tensor packed when this call is the one that prepares the model.
// `store` (may be null): where the engine's packed buffers come from and go to (the load's pack cache), used when
// this call is the one that prepares the model.
Status prepared_model(kt_model *model, int32_t kernels, int32_t n_threads, std::shared_ptr<const model::Model> *out,
                      const model::Model::Progress &progress = nullptr,
                      std::shared_ptr<moe::PackedStore> store = nullptr);

// The sampler settings of a (possibly NULL) caller struct; NULL means greedy.
Status read_sampler(const kt_sampler_params *given, runtime::SamplerParams *out);

// Positions per sequence when the caller asks for the default: the model's training context, at most this.
inline constexpr int64_t kDefaultMaxContext = 4096;

}  // namespace kt::api
