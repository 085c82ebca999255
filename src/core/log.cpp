#include "core/log.h"

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <mutex>
#include <string>

#include "core/status.h"

namespace kt {
namespace {

// The callback and its user_data change together, so they sit behind a mutex; the level is atomic so that a
// disabled level costs one relaxed load and no formatting. The callback itself runs outside the mutex, so that
// it may call kt (kt_log_set included) without deadlocking; `g_log_running` counts the calls in progress so that
// kt_log_set can wait for them: once it returns, the old callback is not running and will not be called again,
// and its user_data may be freed.
std::mutex g_log_mutex;
std::condition_variable g_log_idle;
kt_log_callback g_log_callback = nullptr;
void *g_log_user_data = nullptr;
int g_log_running = 0;
std::atomic<int32_t> g_log_max_level{-1};

// Set while this thread runs the callback. What kt logs meanwhile on this thread (the callback called kt) is
// dropped rather than delivered to a callback that is already on the stack.
thread_local bool t_in_callback = false;

}  // namespace

void log_set(kt_log_callback callback, void *user_data, int32_t max_level) {
    std::unique_lock<std::mutex> lock(g_log_mutex);
    g_log_callback = callback;
    g_log_user_data = user_data;
    g_log_max_level.store(callback ? max_level : -1, std::memory_order_relaxed);
    // Called from a callback: waiting would wait for this very call (and two callbacks doing so, for each other).
    if (t_in_callback) return;
    g_log_idle.wait(lock, [] { return g_log_running == 0; });
}

bool log_enabled(int32_t level) { return level <= g_log_max_level.load(std::memory_order_relaxed); }

void log(int32_t level, const char *fmt, ...) {
    if (!log_enabled(level) || t_in_callback) return;
    va_list args;
    va_start(args, fmt);
    std::string message = vformat(fmt, args);
    va_end(args);
    kt_log_callback callback;
    void *user_data;
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        // The level may have changed since the check above; the callback installed now decides.
        if (!g_log_callback || level > g_log_max_level.load(std::memory_order_relaxed)) return;
        callback = g_log_callback;
        user_data = g_log_user_data;
        ++g_log_running;
    }
    // Undone however the callback leaves (a C++ callback may throw), or kt_log_set would wait forever.
    struct Running {
        Running() { t_in_callback = true; }
        ~Running() {
            t_in_callback = false;
            std::lock_guard<std::mutex> lock(g_log_mutex);
            if (--g_log_running == 0) g_log_idle.notify_all();
        }
    } running;
    callback(level, message.c_str(), user_data);
}

}  // namespace kt
