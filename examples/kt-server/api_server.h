// kt-server's HTTP API on an HttpServer: the OpenAI routes, /tokenize and /detokenize, /health, /metrics, and the
// chat page; authentication, CORS and the request log around them; the drain on shutdown.
//
// The server starts answering before the model is loaded (/health says 503 "loading" until set_ready), so a
// supervisor can watch it come up.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "generator.h"
#include "http_server.h"
#include "metrics.h"
#include "server_options.h"

namespace kt_server {

class Generation;

// What the API serves once the model is loaded. The model and generator must outlive the ApiServer's requests.
struct ServedModel {
    kt_model *model = nullptr;
    Generator *generator = nullptr;
    std::string id;                   // the model id clients see
    int64_t created = 0;              // Unix time the model was loaded
    int64_t n_vocab = 0;
    std::vector<int32_t> stop_tokens; // the vocabulary's end-of-generation tokens
    std::string chat_template_name;   // "": the model's own template
    std::string chat_template_source; // a Jinja template that overrides both
};

class ApiServer {
public:
    // request_log: where request lines go (null: nowhere); not owned.
    ApiServer(const ServerOptions &options, std::vector<std::string> api_keys, std::FILE *request_log);
    ~ApiServer();

    // Registers every route and hook on `http`.
    void install(HttpServer *http);
    // The model is loaded: generation routes and /health start answering 200.
    void set_ready(ServedModel served);

    // SIGTERM: new generation requests get 503, the listening socket closes; in-flight requests get
    // drain_seconds to finish, then are cut short (finish_reason "length"). A second call cuts them short now.
    void begin_drain();

    // For the handlers (public so the route functions in api_server.cpp can reach them).
    Metrics &metrics() { return metrics_; }
    void register_generation(Generation *g);
    void unregister_generation(Generation *g);

private:
    void cancel_all();

    ServerOptions options_;
    std::vector<std::string> api_keys_;
    std::FILE *request_log_;
    HttpServer *http_ = nullptr;
    Metrics metrics_;

    std::atomic<bool> ready_{false};
    ServedModel served_;
    std::mutex model_calls_;  // kt_model_last_error is per model: calls that may fail are serialized

    std::mutex generations_mutex_;
    std::condition_variable generations_changed_;
    std::set<Generation *> generations_;
    int drain_requests_ = 0;  // SIGTERMs seen
    bool timer_stop_ = false;
    std::thread drain_timer_;

    friend struct Handlers;
};

}  // namespace kt_server
