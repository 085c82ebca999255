// kt-server's command line, parsed without side effects (files named by flags are read later, by main).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kt.h"

namespace kt_server {

struct ServerOptions {
    std::string model_path;              // "": the model kt ships (examples/kt-tiny-moe)
    std::string host = "127.0.0.1";
    int32_t port = 8080;                 // 0: any free port (printed when listening)
    std::vector<std::string> api_keys;   // --api-key, repeatable; none (and no key file): no authentication
    std::string api_key_file;            // one key per line
    std::string alias;                   // the model id; "": general.name, else the file name
    int32_t parallel = 4;                // sequences decoded at once
    int64_t ctx_size = 0;                // positions per sequence; 0: the model's, at most 4096
    uint64_t kv_budget_bytes = 0;        // 0: enough for `parallel` full sequences
    int32_t kv_type = KT_TYPE_F16;
    int32_t threads = 0;                 // 0: one per physical core
    int32_t queue = 64;                  // requests waiting beyond the running ones; more get 503
    uint64_t body_limit = 8u << 20;      // bytes; larger bodies get 413
    int32_t request_timeout = 30;        // seconds to send a request (+1 s per 16 KiB); later: 408. 0: no limit
    std::vector<std::string> cors_origins;  // "*" or exact origins; none: no CORS headers
    std::string request_log;             // "": none; "-": standard error; else a file appended to
    std::string chat_template;           // a built-in family or a template the model names; "": the model's
    std::string chat_template_file;      // a Jinja template from a file (wins over chat_template)
    kt_sampler_params sampling{};        // defaults for fields a request leaves out
    int64_t n_predict = -1;              // most tokens per request when it gives no max_tokens; -1: no limit
    int32_t ping_ms = 2000;              // SSE comment every this many ms while no token comes
    int32_t drain_seconds = 30;          // after SIGTERM, in-flight requests get this long to finish
    int32_t http_threads = 0;            // connection threads; 0: 2 * (parallel + queue) + 8
    // How the model is loaded: its weights packed for the expert engine before the server listens (prepare,
    // on `threads`), --pack-cache's file and the --device flags (kt_cli::device_flag).
    kt_model_params load{};
    std::string pack_cache_path;         // with load.pack_cache: "" = the model's path + ".ktpack"
};

// Fills *out from argv. Returns "" on success, "help" for -h/--help, else the usage error.
std::string parse_server_options(int argc, const char *const *argv, ServerOptions *out);
// The usage text.
const char *server_usage();

}  // namespace kt_server
