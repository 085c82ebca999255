#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <mutex>
#include <string>

#include "core/status.h"

namespace kt {
namespace {

// The callback and its user_data must change together, so they sit behind a mutex; the level is atomic so
// that a disabled level costs one relaxed load and no formatting.
std::mutex g_log_mutex;
kt_log_callback g_log_callback = nullptr;
void *g_log_user_data = nullptr;
std::atomic<int32_t> g_log_max_level{-1};

}  // namespace

void log_set(kt_log_callback callback, void *user_data, int32_t max_level) {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    g_log_callback = callback;
    g_log_user_data = user_data;
    g_log_max_level.store(callback ? max_level : -1, std::memory_order_relaxed);
}

bool log_enabled(int32_t level) { return level <= g_log_max_level.load(std::memory_order_relaxed); }

void log(int32_t level, const char *fmt, ...) {
    if (!log_enabled(level)) return;
    va_list args;
    va_start(args, fmt);
    std::string message = vformat(fmt, args);
    va_end(args);
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (g_log_callback) g_log_callback(level, message.c_str(), g_log_user_data);
}

}  // namespace kt
