// kt-server: an OpenAI-compatible HTTP server for a GGUF model.
//
//   kt-server [-m MODEL] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [-np 4] ...   (kt-server --help)
//
// POST /v1/chat/completions and /v1/completions (streamed as Server-Sent Events or not), GET /v1/models,
// /health, /metrics (Prometheus), POST /tokenize and /detokenize, and a chat page at /. With no flags it serves
// the model kt ships (examples/kt-tiny-moe) on 127.0.0.1:8080.
//
// It listens before the model is loaded (/health answers 503 until it is), prints
// "kt-server: listening on http://HOST:PORT" once requests can be served, and on SIGTERM or SIGINT stops
// accepting, lets in-flight requests finish (at most --drain-seconds), and exits 0.
// Exit status: 0 after a drain, 1 when the model cannot be served or the port cannot be bound, 2 on a usage error.
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "api_server.h"
#include "common/cli.h"
#include "generator.h"
#include "http_server.h"
#include "server_options.h"

namespace {

using namespace kt_server;

int usage_error(const std::string &message) {
    std::fprintf(stderr, "kt-server: %s\n\n%s", message.c_str(), server_usage());
    return 2;
}

bool read_file(const std::string &path, std::string *out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return true;
}

// The model kt ships: next to the sources this program was built from, or where `make install` put it.
std::string default_model() {
    for (const char *path : {KT_SERVER_SOURCE_MODEL, KT_SERVER_INSTALLED_MODEL}) {
        struct stat st;
        if (::stat(path, &st) == 0) return path;
    }
    return KT_SERVER_SOURCE_MODEL;
}

// Keys from --api-key and --api-key-file (one per line; blank lines and surrounding spaces ignored).
bool collect_keys(const ServerOptions &o, std::vector<std::string> *keys) {
    *keys = o.api_keys;
    if (o.api_key_file.empty()) return true;
    std::string text;
    if (!read_file(o.api_key_file, &text)) return false;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        const size_t a = line.find_first_not_of(" \t\r"), b = line.find_last_not_of(" \t\r");
        if (a != std::string::npos) keys->push_back(line.substr(a, b - a + 1));
    }
    return !keys->empty();
}

// The model id clients see: --alias, else general.name, else the file name without .gguf.
std::string model_id(const ServerOptions &o, const kt_model *model, const std::string &path) {
    if (!o.alias.empty()) return o.alias;
    const char *name = nullptr;
    if (kt_model_meta_get_string(model, "general.name", &name, nullptr) == KT_STATUS_OK && name && *name) return name;
    std::string base = path.substr(path.find_last_of('/') + 1);
    if (base.size() > 5 && base.compare(base.size() - 5, 5, ".gguf") == 0) base.resize(base.size() - 5);
    return base;
}

// Positions per sequence: -c, else the model's training context, at most 4096 (kt_engine's own default, made
// explicit so the server knows the limit it checks prompts against).
int64_t context_length(const ServerOptions &o, const kt_model *model) {
    if (o.ctx_size > 0) return o.ctx_size;
    int64_t trained = 0;
    const std::string key = std::string(kt_model_architecture(model)) + ".context_length";
    if (kt_model_meta_get_int(model, key.c_str(), &trained) != KT_STATUS_OK || trained <= 0) return 4096;
    return std::min<int64_t>(trained, 4096);
}

std::atomic<bool> g_stop_loading{false};

// 0 continues the load; SIGTERM while loading cancels it (kt.h 0.2.0: every callback continues on 0).
int32_t keep_loading(float, void *) { return g_stop_loading ? 1 : 0; }

}  // namespace

int main(int argc, char **argv) {
    ServerOptions o;
    const std::string problem = parse_server_options(argc, argv, &o);
    if (problem == "help") {
        std::fputs(server_usage(), stdout);
        return 0;
    }
    if (!problem.empty()) return usage_error(problem);
    if (o.model_path.empty()) o.model_path = default_model();

    std::vector<std::string> keys;
    if (!collect_keys(o, &keys)) return usage_error("cannot read API keys from " + o.api_key_file);
    std::string template_source;
    if (!o.chat_template_file.empty() && !read_file(o.chat_template_file, &template_source))
        return usage_error("cannot read " + o.chat_template_file);
    std::FILE *request_log = nullptr;
    if (o.request_log == "-") request_log = stderr;
    else if (!o.request_log.empty() && !(request_log = std::fopen(o.request_log.c_str(), "a")))
        return usage_error("cannot open " + o.request_log + " for appending");

    // Signals are taken by one thread with sigwait, so every other thread (httplib's, kt's) runs with them
    // blocked and a request never sees EINTR from them. SIGUSR1 only ends that thread at exit.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    ::signal(SIGPIPE, SIG_IGN);  // a client that went away must not end the process

    HttpServer http;
    http.new_task_queue = [n = o.http_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    ApiServer api(o, keys, request_log);
    api.install(&http);

    const int port = http.bind(o.host, o.port);
    if (port < 0) {
        std::fprintf(stderr, "kt-server: cannot listen on %s:%d\n", o.host.c_str(), o.port);
        return 1;
    }
    std::thread listener([&] { http.listen_after_bind(); });
    std::thread signal_thread([&] {
        for (;;) {
            int sig = 0;
            if (sigwait(&signals, &sig) != 0 || sig == SIGUSR1) return;
            std::fprintf(stderr, "kt-server: %s: %s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                         http.draining() ? "cutting in-flight requests short" : "draining");
            g_stop_loading = true;
            api.begin_drain();
        }
    });

    int status = 0;
    kt_model *model = nullptr;
    std::unique_ptr<Generator> generator;
    {
        // The weights are packed for the expert engine while loading, before the server listens: the first
        // request does not pay for it, and a SIGTERM meanwhile cancels it.
        kt_model_params mp = o.load;
        mp.prepare = 1;
        mp.n_threads = o.threads;
        mp.pack_cache_path = o.pack_cache_path.empty() ? nullptr : o.pack_cache_path.c_str();
        mp.progress_callback = keep_loading;
        kt_error err = {sizeof(kt_error), 0, {0}};
        if (kt_model_load(o.model_path.c_str(), &mp, &model, &err) != KT_STATUS_OK) {
            if (err.status != KT_STATUS_CANCELLED) {
                std::fprintf(stderr, "kt-server: load %s: %s\n", o.model_path.c_str(), err.message);
                status = 1;
            }
        }
    }
    if (model && o.load.device != KT_DEVICE_NONE) std::fprintf(stderr, "%s", kt_cli::device_plan(model).c_str());
    ServedModel served;
    if (model) {
        kt_vocab_info vocab;
        vocab.struct_size = sizeof vocab;
        if (kt_vocab_get_info(model, &vocab) != KT_STATUS_OK) {
            std::fprintf(stderr, "kt-server: %s has no usable vocabulary: %s\n", o.model_path.c_str(),
                         kt_model_last_error(model));
            status = 1;
        } else {
            std::vector<int32_t> stops;
            for (int32_t id = 0; id < vocab.n_tokens; ++id) {
                int32_t eog = 0;
                if (kt_token_is_eog(model, id, &eog) == KT_STATUS_OK && eog) stops.push_back(id);
            }
            kt_engine_params ep;
            kt_engine_params_init(&ep);
            ep.n_threads = o.threads;
            ep.max_sequences = o.parallel;
            ep.max_queued = o.queue;
            ep.n_ctx = context_length(o, model);
            ep.kv_budget_bytes = o.kv_budget_bytes;
            ep.kv_type = o.kv_type;
            ep.max_step_tokens = std::max<int64_t>(ep.max_step_tokens, o.parallel);
            std::string error;
            generator = Generator::create(model, ep, &error);
            if (!generator) {
                std::fprintf(stderr, "kt-server: cannot run %s: %s\n", o.model_path.c_str(), error.c_str());
                status = 1;
            }
            served.n_vocab = vocab.n_tokens;
            served.stop_tokens = std::move(stops);
        }
    }
    if (status == 0 && generator) {
        served.model = model;
        served.generator = generator.get();
        served.id = model_id(o, model, o.model_path);
        served.created = static_cast<int64_t>(std::time(nullptr));
        served.chat_template_name = o.chat_template;
        served.chat_template_source = template_source;
        const std::string id = served.id;
        api.set_ready(std::move(served));
        std::fprintf(stderr, "kt-server: serving %s (%s) with %d sequences of %lld positions\n", id.c_str(),
                     o.model_path.c_str(), o.parallel, static_cast<long long>(generator->n_ctx()));
        std::fprintf(stderr, "kt-server: listening on http://%s:%d\n", o.host.c_str(), port);
    } else if (status != 0) {
        api.begin_drain();  // nothing to serve: close the socket and end
    }

    listener.join();  // returns once the drain has answered every request
    pthread_kill(signal_thread.native_handle(), SIGUSR1);
    signal_thread.join();
    generator.reset();
    kt_model_free(model);
    if (request_log && request_log != stderr) std::fclose(request_log);
    if (status == 0) std::fprintf(stderr, "kt-server: stopped\n");
    return status;
}
