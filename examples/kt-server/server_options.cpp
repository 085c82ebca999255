#include "server_options.h"

#include "common/cli.h"

namespace kt_server {

const char *server_usage() {
    // The device flags' lines come from the same place as kt-run's.
    static const std::string text = [] {
        const char *format = "usage: kt-server [options]   (an OpenAI-compatible HTTP server; with no flags it serves the model kt ships)\n"
           "  -m, --model FILE          GGUF model (default: examples/kt-tiny-moe/kt-tiny-moe.q8_0.gguf)\n"
           "      --host ADDR           address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)\n"
           "      --port N              port (default 8080; 0: any free port)\n"
           "      --api-key KEY         require 'Authorization: Bearer KEY' (repeatable)\n"
           "      --api-key-file FILE   keys, one per line\n"
           "      --alias NAME          the model id clients see (default: the model's general.name)\n"
           "  -np, --parallel N         sequences decoded at once (default 4)\n"
           "  -c, --ctx-size N          positions per sequence (default: the model's, at most 4096)\n"
           "      --kv-budget MIB       KV cache memory for all sequences (default: parallel full contexts)\n"
           "      --kv-type T           KV cache type: f16 (default), bf16, f32, q8_0\n"
           "  -t, --threads N           compute threads (default: one per physical core)\n"
           "      --queue N             requests that may wait for a sequence (default 64); more get 503\n"
           "      --body-limit BYTES    largest request body (default 8388608); larger get 413\n"
           "      --request-timeout S   seconds a client has to send a whole request, plus 1 s per 16 KiB it sends\n"
           "                            (default 30; 0: no limit); later ones get 408\n"
           "      --cors-origin ORIGIN  allow browser pages from ORIGIN ('*' for any; repeatable)\n"
           "      --request-log FILE    one line per request ('-': standard error)\n"
           "      --chat-template NAME  a built-in template (chatml, llama3, deepseek3, mistral) or one the model\n"
           "                            names; default: the model's own\n"
           "      --chat-template-file F  a Jinja chat template from a file\n"
           "  -n, --n-predict N         most tokens per reply when a request sets no max_tokens (default: no limit)\n"
           "      --ping-ms N           SSE comment interval while no token comes (default 2000)\n"
           "      --drain-seconds N     on SIGTERM, time in-flight requests get to finish (default 30)\n"
           "      --http-threads N      connection threads (default 2 * (parallel + queue) + 8)\n"
           "      --pack-cache on|PATH  keep the packed weights in PATH (on: MODEL.ktpack) and map them on later\n"
           "                            starts instead of repacking\n"
           "%s"
           "default sampling, for fields a request leaves out (kt's defaults: temperature 0.8, top-k 40,\n"
           "top-p 0.95, min-p 0.05):\n"
           "      --temp T  --top-k N  --top-p P  --min-p P  --repeat-penalty R  --repeat-last-n N\n"
           "      --presence-penalty P  --frequency-penalty P  --seed N\n";
        std::string t(format);
        t.replace(t.find("%s"), 2, kt_cli::device_usage());
        return t;
    }();
    return text.c_str();
}

std::string parse_server_options(int argc, const char *const *argv, ServerOptions *out) {
    ServerOptions o;
    kt_sampler_params_init(&o.sampling);
    kt_model_params_init(&o.load);
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return "help";
        if (i + 1 >= argc) return "missing value for " + a;
        const char *v = argv[++i];
        int64_t n = 0;
        // Integer flags with their lower and upper bounds.
        auto integer = [&](int64_t lowest, int64_t highest, auto *field) {
            if (!kt_cli::parse_int(v, &n) || n < lowest || n > highest)
                return "bad value for " + a + ": " + v + " (expected an integer from " + std::to_string(lowest) +
                       " to " + std::to_string(highest) + ")";
            *field = static_cast<std::remove_reference_t<decltype(*field)>>(n);
            return std::string();
        };
        std::string problem;
        if (a == "-m" || a == "--model") o.model_path = v;
        else if (a == "--host") o.host = v;
        else if (a == "--port") problem = integer(0, 65535, &o.port);
        else if (a == "--api-key") {
            if (!*v) return "--api-key must not be empty";
            o.api_keys.push_back(v);
        } else if (a == "--api-key-file") o.api_key_file = v;
        else if (a == "--alias") o.alias = v;
        else if (a == "-np" || a == "--parallel") problem = integer(1, 4096, &o.parallel);
        else if (a == "-c" || a == "--ctx-size") problem = integer(0, INT32_MAX, &o.ctx_size);
        else if (a == "--kv-budget") {
            int64_t mib = 0;
            problem = integer(0, INT64_MAX >> 20, &mib);
            o.kv_budget_bytes = static_cast<uint64_t>(mib) << 20;
        } else if (a == "--kv-type") {
            const std::string t = v;
            if (t == "f16") o.kv_type = KT_TYPE_F16;
            else if (t == "bf16") o.kv_type = KT_TYPE_BF16;
            else if (t == "f32") o.kv_type = KT_TYPE_F32;
            else if (t == "q8_0") o.kv_type = KT_TYPE_Q8_0;
            else return "bad value for --kv-type: " + t + " (f16, bf16, f32 or q8_0)";
        } else if (a == "-t" || a == "--threads") problem = integer(0, 4096, &o.threads);
        else if (a == "--queue") problem = integer(0, 1 << 20, &o.queue);
        else if (a == "--body-limit") problem = integer(64, INT64_MAX, &o.body_limit);
        else if (a == "--request-timeout") problem = integer(0, 24 * 3600, &o.request_timeout);
        else if (a == "--cors-origin") o.cors_origins.push_back(v);
        else if (a == "--request-log") o.request_log = v;
        else if (a == "--chat-template") o.chat_template = v;
        else if (a == "--chat-template-file") o.chat_template_file = v;
        else if (a == "-n" || a == "--n-predict") problem = integer(-1, INT64_MAX, &o.n_predict);
        else if (a == "--ping-ms") problem = integer(1, 3600 * 1000, &o.ping_ms);
        else if (a == "--drain-seconds") problem = integer(0, 24 * 3600, &o.drain_seconds);
        else if (a == "--http-threads") problem = integer(0, 1 << 16, &o.http_threads);
        else if (a == "--pack-cache") {
            if (!*v) return "--pack-cache needs on or a path";
            o.load.pack_cache = 1;
            o.pack_cache_path = std::string(v) == "on" ? "" : v;
        } else if (const kt_cli::Flag flag = kt_cli::sampling_flag(a, v, &o.sampling); flag != kt_cli::Flag::kNotMine) {
            if (flag == kt_cli::Flag::kBadValue) return "bad value for " + a + ": " + v;
        } else if (const kt_cli::Flag dflag = kt_cli::device_flag(a, v, &o.load); dflag != kt_cli::Flag::kNotMine) {
            if (dflag == kt_cli::Flag::kBadValue) return "bad value for " + a + ": " + v;
        } else {
            return "unknown option " + a;
        }
        if (!problem.empty()) return problem;
    }
    if (o.n_predict == 0) return "-n must be -1 (no limit) or at least 1";
    if (o.http_threads == 0) o.http_threads = 2 * (o.parallel + o.queue) + 8;
    *out = std::move(o);
    return {};
}

}  // namespace kt_server
