// Logging: kt prints nothing itself; messages go to the callback installed with kt_log_set, if any.
#pragma once

#include "kt.h"

namespace kt {

void log_set(kt_log_callback callback, void *user_data, int32_t max_level);
bool log_enabled(int32_t level);
void log(int32_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace kt

#define KT_LOG_ERROR_MSG(...) ::kt::log(KT_LOG_ERROR, __VA_ARGS__)
#define KT_LOG_WARN_MSG(...) ::kt::log(KT_LOG_WARN, __VA_ARGS__)
#define KT_LOG_INFO_MSG(...) ::kt::log(KT_LOG_INFO, __VA_ARGS__)
#define KT_LOG_DEBUG_MSG(...) ::kt::log(KT_LOG_DEBUG, __VA_ARGS__)
