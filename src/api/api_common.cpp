// Version, build information, status strings, logging and type queries.
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/api_internal.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cuda/cuda_backend.h"
#include "core/log.h"
#include "kt_git_revision.h"  // generated at build time (src/api/CMakeLists.txt)
#include "ops/types.h"

// ---- per-thread error messages of shared handles ----

struct kt_thread_error_slot::Messages {
    std::mutex mutex;
    std::unordered_map<std::thread::id, std::string> by_thread;  // node-based: a string never moves
};

namespace {

// The slots this thread has written a message to. When the thread exits, its messages are erased from the slots
// whose handles still exist, so a long-lived handle never accumulates the messages of threads that are gone.
class ThreadMessages {
public:
    ~ThreadMessages() {
        destroyed_ = true;
        for (const std::weak_ptr<kt_thread_error_slot::Messages> &w : slots_) {
            if (std::shared_ptr<kt_thread_error_slot::Messages> m = w.lock()) {
                std::lock_guard<std::mutex> lock(m->mutex);
                m->by_thread.erase(std::this_thread::get_id());
            }
        }
    }

    void note(const std::shared_ptr<kt_thread_error_slot::Messages> &m) {
        slots_.erase(std::remove_if(slots_.begin(), slots_.end(), [](const auto &w) { return w.expired(); }),
                     slots_.end());
        for (const auto &w : slots_)
            if (w.lock() == m) return;
        slots_.push_back(m);
    }

    // A kt call that fails while this thread's thread_locals are being destroyed must not touch this object; its
    // message then stays in the slot until the handle is freed.
    static bool destroyed() { return destroyed_; }

private:
    std::vector<std::weak_ptr<kt_thread_error_slot::Messages>> slots_;
    static thread_local bool destroyed_;
};

thread_local bool ThreadMessages::destroyed_ = false;
thread_local ThreadMessages t_thread_messages;

}  // namespace

kt_thread_error_slot::kt_thread_error_slot() : messages_(std::make_shared<Messages>()) {}
kt_thread_error_slot::~kt_thread_error_slot() = default;

void kt_thread_error_slot::set(const std::string &m) const {
    {
        std::lock_guard<std::mutex> lock(messages_->mutex);
        messages_->by_thread[std::this_thread::get_id()] = m;
    }
    if (!ThreadMessages::destroyed()) t_thread_messages.note(messages_);
}

const char *kt_thread_error_slot::get() const {
    std::lock_guard<std::mutex> lock(messages_->mutex);
    const auto it = messages_->by_thread.find(std::this_thread::get_id());
    return it == messages_->by_thread.end() ? "" : it->second.c_str();
}

namespace kt::api {

void fill_error(kt_error *err, const Status &status) noexcept {
    if (!err || !struct_size_ok<kt_error>(err->struct_size)) return;  // nowhere to say so: the status still does
    kt_error e = kt::api::zeroed_struct<kt_error>();
    e.status = status.code();
    const std::string &m = status.message();
    const size_t n = std::min<size_t>(m.size(), KT_ERROR_MESSAGE_CAPACITY - 1);
    std::memcpy(e.message, m.data(), n);
    (void)write_struct(e, err, "kt_error");
}

namespace {

std::string describe_build() {
    const cpu::CpuFeatures &f = cpu::host_cpu_features();
    std::string s = "kt " + std::string(kt_version_string()) + " (git " KT_GIT_REVISION ")";
#if defined(__clang__)
    s += format(" clang %d.%d", __clang_major__, __clang_minor__);
#elif defined(__GNUC__)
    s += format(" gcc %d.%d", __GNUC__, __GNUC_MINOR__);
#endif
    s += cuda::compiled() ? "; backends: cpu cuda" : "; backends: cpu";
    s += "; cpu: ";
    s += f.brand.empty() ? f.vendor : f.brand;
    s += "; isa: ";
    s += cpu::isa_level_name(cpu::host_isa_level());
    std::string extras;
    if (f.avx512_vnni) extras += " avx512_vnni";
    if (f.avx512_bf16) extras += " avx512_bf16";
    if (f.avx512_vbmi) extras += " avx512_vbmi";
    if (f.gfni) extras += " gfni";
    if (f.avx_vnni) extras += " avx_vnni";
    if (!extras.empty()) s += " (" + extras.substr(1) + ")";
    s += "; amx: ";
    s += f.amx_int8 ? "yes" : (f.amx_unusable_reason.empty() ? "no" : "no (" + f.amx_unusable_reason + ")");
    return s;
}

}  // namespace
}  // namespace kt::api


extern "C" {

KT_API int32_t kt_version_number(void) { return KT_VERSION_NUMBER; }

#define KT_STRINGIFY_(x) #x
#define KT_STRINGIFY(x) KT_STRINGIFY_(x)
KT_API const char *kt_version_string(void) {
    return KT_STRINGIFY(KT_VERSION_MAJOR) "." KT_STRINGIFY(KT_VERSION_MINOR) "." KT_STRINGIFY(KT_VERSION_PATCH);
}

KT_API const char *kt_build_info(void) {
    // Computed once; if that fails (allocation), a fixed string is better than an exception across the ABI.
    try {
        static const std::string info = kt::api::describe_build();
        return info.c_str();
    } catch (...) {
        return "kt " KT_STRINGIFY(KT_VERSION_MAJOR) "." KT_STRINGIFY(KT_VERSION_MINOR) "." KT_STRINGIFY(KT_VERSION_PATCH);
    }
}

KT_API kt_status kt_cuda_device_count(int32_t *out_count) {
    kt::Status s = kt::api::guard([&]() -> kt::Status {
        KT_RETURN_IF(!out_count, KT_STATUS_INVALID_ARGUMENT, "kt_cuda_device_count: out_count is NULL");
        std::vector<kt::cuda::DeviceInfo> devices;
        KT_TRY(kt::cuda::list_devices(&devices, nullptr));
        *out_count = static_cast<int32_t>(devices.size());
        return kt::Status::ok();
    });
    return s.code();
}

KT_API const char *kt_status_string(kt_status status) {
    switch (status) {
        case KT_STATUS_OK: return "ok";
        case KT_STATUS_INVALID_ARGUMENT: return "invalid argument";
        case KT_STATUS_OUT_OF_MEMORY: return "out of memory";
        case KT_STATUS_IO_ERROR: return "I/O error";
        case KT_STATUS_INVALID_FILE: return "invalid file";
        case KT_STATUS_UNSUPPORTED: return "unsupported";
        case KT_STATUS_NOT_FOUND: return "not found";
        case KT_STATUS_TYPE_MISMATCH: return "type mismatch";
        case KT_STATUS_BUFFER_TOO_SMALL: return "buffer too small";
        case KT_STATUS_CANCELLED: return "cancelled";
        case KT_STATUS_MISUSE: return "misuse";
        case KT_STATUS_INTERNAL: return "internal error";
        case KT_STATUS_CONTEXT_FULL: return "context full";
        case KT_STATUS_BUSY: return "busy";
        default: return "unknown status";
    }
}

KT_API void kt_log_set(kt_log_callback callback, void *user_data, int32_t max_level) {
    kt::log_set(callback, user_data, max_level);
}

KT_API const char *kt_type_name(int32_t type) {
    const kt::ops::TypeTraits *t = kt::ops::type_traits(type);
    return t ? t->name : nullptr;
}

KT_API int64_t kt_type_block_size(int32_t type) {
    const kt::ops::TypeTraits *t = kt::ops::type_traits(type);
    return t ? t->block_size : 0;
}

KT_API int64_t kt_type_block_bytes(int32_t type) {
    const kt::ops::TypeTraits *t = kt::ops::type_traits(type);
    return t ? t->block_bytes : 0;
}

}  // extern "C"
