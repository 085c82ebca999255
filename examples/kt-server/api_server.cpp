#include "api_server.h"

#include <chrono>
#include <ctime>
#include <random>

#include <nlohmann/json.hpp>

#include "chat_page.h"
#include "common/cli.h"
#include "openai_json.h"
#include "request_parser.h"
#include "text_output.h"

namespace kt_server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What the request log line and the metrics need to know about the request this thread is serving. The handler,
// the content provider that streams its reply and httplib's logger all run on the connection's thread.
struct RequestRecord {
    Clock::time_point start;
    int64_t prompt_tokens = -1;  // -1: not a generation
    int64_t cached_tokens = 0;
    int64_t completion_tokens = 0;
    const char *finish_reason = nullptr;
};
thread_local RequestRecord t_record;

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response &res, const ApiError &e) {
    res.status = e.http_status;
    res.set_content(e.body(), "application/json");
}

void send_json(httplib::Response &res, int status, const json &body) {
    res.status = status;
    res.set_content(dump(body), "application/json");
}

ApiError server_error(int status, std::string message, std::string code = "") {
    return {status, "server_error", std::move(message), "", std::move(code)};
}

// The route a path belongs to, as the metrics label it.
const char *route_of(const std::string &path) {
    if (path == "/v1/chat/completions" || path == "/chat/completions") return "chat";
    if (path == "/v1/completions" || path == "/completions") return "completions";
    if (path.rfind("/v1/models", 0) == 0 || path.rfind("/models", 0) == 0) return "models";
    if (path == "/tokenize") return "tokenize";
    if (path == "/detokenize") return "detokenize";
    if (path == "/health") return "health";
    if (path == "/metrics") return "metrics";
    if (find_page_asset(path)) return "page";
    return "other";
}

// Routes anyone may use: the chat page (it asks for the key itself) and the health check.
bool is_public(const std::string &path) { return path == "/health" || find_page_asset(path) != nullptr; }

// Compares in a time that does not depend on where the strings differ, so a key cannot be guessed byte by byte.
// `key` is never empty (the options refuse empty keys).
bool same_secret(const std::string &given, const std::string &key) {
    unsigned char diff = given.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
    return diff == 0;
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// "chatcmpl-" + 24 random hex digits, as OpenAI's ids look.
std::string new_id(const char *prefix) {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    char hex[25];
    std::snprintf(hex, sizeof hex, "%012llx%012llx", static_cast<unsigned long long>(rng() & 0xFFFFFFFFFFFFull),
                  static_cast<unsigned long long>(rng() & 0xFFFFFFFFFFFFull));
    return std::string(prefix) + hex;
}

const char *finish_reason_of(Finish finish) {
    // A generation cut short by the drain ends as if it had hit its limit.
    return finish == Finish::kStopToken ? "stop" : "length";
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// One request's generation, from its submission to the last byte of its answer: tokens become text (whole UTF-8
// characters, ill-formed bytes as U+FFFD), cut at the first stop string.

class Generation {
public:
    Generation(ApiServer *api, std::unique_ptr<Sequence> sequence, kt_detokenizer *detokenizer,
               std::vector<std::string> stops, ResponseJson shape, int64_t n_prompt, Clock::time_point start)
        : api_(api), sequence_(std::move(sequence)), detokenizer_(detokenizer), pieces_(detokenizer),
          stop_(std::move(stops)), shape_(std::move(shape)), n_prompt_(n_prompt), start_(start) {
        api_->register_generation(this);
    }

    ~Generation() {
        if (!done_) record();  // the client left before the end
        api_->unregister_generation(this);
        sequence_.reset();  // cancels a generation that still runs
        kt_detokenizer_free(detokenizer_);
    }

    // Waits up to timeout_ms for more text and returns it: one piece per token that completed some text, as
    // OpenAI streams a delta per token (none when nothing came). After the end, done() is true.
    std::vector<std::string> advance(int32_t timeout_ms) {
        std::vector<std::string> pieces;
        if (done_) return pieces;
        tokens_.clear();
        const SequenceRead r = sequence_->read(&tokens_, timeout_ms);
        if (!tokens_.empty()) {
            const auto now = Clock::now();
            if (n_generated_ == 0) api_->metrics().observe_time_to_first_token(seconds_since(start_));
            else api_->metrics().observe_time_per_token(std::chrono::duration<double>(now - last_token_).count() /
                                                        static_cast<double>(tokens_.size()));
            api_->metrics().count_generated(static_cast<int64_t>(tokens_.size()));
            last_token_ = now;
            n_generated_ += static_cast<int64_t>(tokens_.size());
        }
        for (int32_t token : tokens_) {
            add_piece(token, &pieces);
            if (stop_.stopped()) break;
        }
        if (stop_.stopped()) {
            finish("stop");
            sequence_->cancel();
            return pieces;
        }
        if (r.finish == Finish::kRunning) return pieces;
        if (r.finish == Finish::kError) {
            error_ = r.error.empty() ? "the generation failed" : r.error;
        }
        add_piece(-1, &pieces);
        if (std::string rest = stop_.finish(); !rest.empty()) pieces.push_back(std::move(rest));
        finish(finish_reason_of(r.finish));
        return pieces;
    }

    bool done() const { return done_; }
    const char *finish_reason() const { return finish_reason_; }
    const std::string &error() const { return error_; }
    const ResponseJson &shape() const { return shape_; }
    void cancel() { sequence_->cancel(); }

    Usage usage() const { return {n_prompt_, n_generated_, info_.n_prompt_cached}; }

private:
    // The text a token (-1: the end of the stream) completes, after the stop strings, if there is any.
    void add_piece(int32_t token, std::vector<std::string> *pieces) {
        piece_.clear();
        // A failing push can only mean an id outside the vocabulary, which the engine never produces; the text
        // just goes without it.
        pieces_.push(token, &piece_);
        std::string text = stop_.push(sanitize_utf8(piece_));
        if (!text.empty()) pieces->push_back(std::move(text));
    }

    void finish(const char *reason) {
        done_ = true;
        finish_reason_ = reason;
        record();
    }

    // Into the metrics and this thread's request record (the log line is written after the last byte is sent,
    // before the response, which holds this generation, is destroyed).
    void record() {
        info_ = sequence_->info();
        api_->metrics().count_prompt(n_prompt_, info_.n_prompt_cached);
        api_->metrics().observe_request_seconds(seconds_since(start_));
        t_record.prompt_tokens = n_prompt_;
        t_record.cached_tokens = info_.n_prompt_cached;
        t_record.completion_tokens = n_generated_;
        t_record.finish_reason = finish_reason_;
    }

    ApiServer *api_;
    std::unique_ptr<Sequence> sequence_;
    kt_detokenizer *detokenizer_;  // owned
    kt_cli::TextPieces pieces_;
    StopMatcher stop_;
    ResponseJson shape_;
    int64_t n_prompt_;
    Clock::time_point start_, last_token_;
    std::vector<int32_t> tokens_;
    std::string piece_;
    int64_t n_generated_ = 0;
    bool done_ = false;
    const char *finish_reason_ = nullptr;
    std::string error_;
    SequenceInfo info_;
};

// ---------------------------------------------------------------------------------------------------------------
// The route handlers.

struct Handlers {
    ApiServer &api;

    const ServedModel &served() const { return api.served_; }

    // Everything a generation needs before it is submitted, or the error to answer instead.
    struct Prepared {
        GenerationJob job;
        std::vector<std::string> stops;
        bool stream = false;
        bool include_usage = false;
    };

    // Request fields over the server's defaults.
    kt_sampler_params sampler_for(const SamplingFields &f) const {
        kt_sampler_params sp = api.options_.sampling;
        if (f.temperature) sp.temperature = *f.temperature;
        if (f.top_p) sp.top_p = *f.top_p;
        if (f.top_k) sp.top_k = *f.top_k;
        if (f.min_p) sp.min_p = *f.min_p;
        if (f.presence_penalty) sp.presence_penalty = *f.presence_penalty;
        if (f.frequency_penalty) sp.frequency_penalty = *f.frequency_penalty;
        if (f.repeat_penalty) sp.repeat_penalty = *f.repeat_penalty;
        // Without a seed every request draws its own, so repeated requests differ as they do with OpenAI.
        static thread_local std::mt19937_64 rng(std::random_device{}());
        sp.seed = f.seed ? *f.seed : rng();
        return sp;
    }

    std::optional<ApiError> prepare(const GenerationFields &g, std::vector<int32_t> prompt, const char *prompt_param,
                                    Prepared *out) const {
        const int64_t n_ctx = served().generator->n_ctx();
        const int64_t n_prompt = static_cast<int64_t>(prompt.size());
        if (n_prompt == 0) return ApiError::invalid(prompt_param, "the prompt is empty");
        if (n_prompt >= n_ctx) {
            ApiError e = ApiError::invalid(prompt_param, "This model's maximum context length is " +
                                                             std::to_string(n_ctx) + " tokens. However, your " +
                                                             (std::string(prompt_param) == "messages" ? "messages" : "prompt") +
                                                             " resulted in " + std::to_string(n_prompt) +
                                                             " tokens, leaving no room for a reply.");
            e.code = "context_length_exceeded";
            return e;
        }
        int64_t max_tokens = n_ctx - n_prompt;  // the reply may fill the context, never more
        if (g.max_tokens) max_tokens = std::min(max_tokens, *g.max_tokens);
        else if (api.options_.n_predict > 0) max_tokens = std::min(max_tokens, api.options_.n_predict);
        out->job.prompt = std::move(prompt);
        out->job.max_tokens = max_tokens;
        out->job.sampler = sampler_for(g.sampling);
        if (!g.ignore_eos) out->job.stop_tokens = served().stop_tokens;
        out->stops = g.stop;
        out->stream = g.stream;
        out->include_usage = g.include_usage;
        return std::nullopt;
    }

    std::optional<ApiError> prompt_of(const ChatRequest &request, std::vector<int32_t> *out) {
        std::vector<kt_chat_message> turns;
        for (const ChatMessage &m : request.messages) turns.push_back({m.role.c_str(), m.content.c_str()});
        kt_chat_params params;
        kt_chat_params_init(&params);
        if (!served().chat_template_name.empty()) params.template_name = served().chat_template_name.c_str();
        if (!served().chat_template_source.empty()) params.template_source = served().chat_template_source.c_str();
        std::lock_guard<std::mutex> lock(api.model_calls_);
        std::string text;
        const kt_status s = kt_cli::render_chat(served().model, turns, params, &text);
        if (s == KT_STATUS_INVALID_ARGUMENT)
            return ApiError::invalid("messages", std::string("the chat template rejected the conversation: ") +
                                                     kt_model_last_error(served().model));
        if (s != KT_STATUS_OK)
            return server_error(500, std::string("the chat template failed: ") + kt_model_last_error(served().model));
        if (kt_cli::tokenize(served().model, text, true, true, out) != KT_STATUS_OK)
            return server_error(500, std::string("tokenizing the prompt failed: ") + kt_model_last_error(served().model));
        return std::nullopt;
    }

    std::optional<ApiError> prompt_of(const CompletionRequest &request, std::vector<int32_t> *out) {
        if (request.prompt_is_tokens) {
            for (size_t i = 0; i < request.prompt_tokens.size(); ++i) {
                if (request.prompt_tokens[i] >= served().n_vocab) {
                    return ApiError::invalid("prompt[" + std::to_string(i) + "]",
                                             "token id " + std::to_string(request.prompt_tokens[i]) +
                                                 " is outside the vocabulary (" + std::to_string(served().n_vocab) +
                                                 " tokens)");
                }
            }
            *out = request.prompt_tokens;
            return std::nullopt;
        }
        std::lock_guard<std::mutex> lock(api.model_calls_);
        if (kt_cli::tokenize(served().model, request.prompt_text, true, true, out) != KT_STATUS_OK)
            return server_error(500, std::string("tokenizing the prompt failed: ") + kt_model_last_error(served().model));
        return std::nullopt;
    }

    // A parsed chat or completion request made into a job; prompt_param names its prompt field in errors.
    template <class Request>
    std::optional<ApiError> prepare(Parsed<Request> parsed, const char *prompt_param, Prepared *out) {
        if (auto *e = std::get_if<ApiError>(&parsed)) return *e;
        const Request &request = std::get<Request>(parsed);
        std::vector<int32_t> prompt;
        if (auto e = prompt_of(request, &prompt)) return e;
        return prepare(request.generation, std::move(prompt), prompt_param, out);
    }

    void generate(const httplib::Request &req, httplib::Response &res, Endpoint endpoint) {
        const Clock::time_point start = t_record.start;
        Prepared p;
        const std::optional<ApiError> error = endpoint == Endpoint::kChat
                                                  ? prepare(parse_chat_request(req.body), "messages", &p)
                                                  : prepare(parse_completion_request(req.body), "prompt", &p);
        if (error) return send_error(res, *error);

        kt_detokenizer *detokenizer = nullptr;
        kt_error err = {sizeof(kt_error), 0, {0}};
        if (kt_detokenizer_create(served().model, 0, &detokenizer, &err) != KT_STATUS_OK)
            return send_error(res, server_error(500, std::string("kt_detokenizer_create: ") + err.message));
        std::unique_ptr<Sequence> sequence;
        std::string message;
        const int64_t n_prompt = static_cast<int64_t>(p.job.prompt.size());
        const SubmitStatus submitted = served().generator->submit(p.job, &sequence, &message);
        if (submitted != SubmitStatus::kOk) {
            kt_detokenizer_free(detokenizer);
            if (submitted == SubmitStatus::kBusy) {
                res.set_header("Retry-After", "1");
                return send_error(res, server_error(503, message, "server_busy"));
            }
            if (submitted == SubmitStatus::kInvalid) return send_error(res, ApiError::invalid("", message));
            return send_error(res, server_error(500, message));
        }
        ResponseJson shape(endpoint, new_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-"),
                           static_cast<int64_t>(std::time(nullptr)), served().id, p.include_usage);
        auto generation = std::make_shared<Generation>(&api, std::move(sequence), detokenizer, std::move(p.stops),
                                                       std::move(shape), n_prompt, start);
        if (p.stream) return stream(res, std::move(generation));

        // Not streamed: generate to the end, watching for the client to leave.
        std::string text;
        while (!generation->done()) {
            if (HttpServer::peer_closed()) {
                generation->cancel();
                res.status = 499;  // nginx's "client closed request": for the log and the metrics only
                return;
            }
            for (const std::string &piece : generation->advance(100)) text += piece;
        }
        if (!generation->error().empty())
            return send_error(res, server_error(500, "the generation failed: " + generation->error()));
        res.status = 200;
        res.set_content(generation->shape().full(text, generation->finish_reason(), generation->usage()),
                        "application/json");
    }

    struct StreamState {
        std::shared_ptr<Generation> generation;
        bool started = false;
        Clock::time_point last_write;
    };

    void stream(httplib::Response &res, std::shared_ptr<Generation> generation) {
        res.status = 200;
        res.set_header("Cache-Control", "no-cache");
        res.set_header("X-Accel-Buffering", "no");  // nginx passes each event on at once
        const int32_t ping_ms = api.options_.ping_ms;
        // The provider runs on this connection's thread, called again after each return of true until done().
        auto state = std::make_shared<StreamState>(StreamState{std::move(generation), false, Clock::now()});
        res.set_chunked_content_provider(
            "text/event-stream", [state, ping_ms](size_t, httplib::DataSink &sink) {
                try {
                    return stream_some(*state, ping_ms, sink);
                } catch (...) {
                    return false;  // out of memory: this connection ends, the server goes on
                }
            });
    }

    // Writes what the stream has next: the role chunk first, then whatever text came within a short wait, a
    // ping when nothing has been written for ping_ms, and at the end the finish, the usage and [DONE]. Returns
    // false when the client is gone.
    static bool stream_some(StreamState &state, int32_t ping_ms, httplib::DataSink &sink) {
        Generation &g = *state.generation;
        auto write = [&](const std::string &bytes) {
            state.last_write = Clock::now();
            return sink.write(bytes.data(), bytes.size());
        };
        if (!state.started) {
            state.started = true;
            if (g.shape().endpoint() == Endpoint::kChat) return write(sse_data(g.shape().role_chunk()));
            return true;
        }
        if (HttpServer::peer_closed()) return false;  // the client left: the generation is cancelled
        std::string events;  // one write for all the chunks that came at once
        for (const std::string &piece : g.advance(std::min<int32_t>(ping_ms, 100)))
            events += sse_data(g.shape().text_chunk(piece));
        if (!events.empty() && !write(events)) return false;
        if (!g.done()) {
            if (events.empty() && Clock::now() - state.last_write >= std::chrono::milliseconds(ping_ms))
                return write(kSsePing);
            return true;
        }
        if (!g.error().empty()) {
            const ApiError e = server_error(500, "the generation failed: " + g.error());
            if (!write(sse_data(e.body()))) return false;
        } else {
            if (!write(sse_data(g.shape().finish_chunk(g.finish_reason())))) return false;
            if (g.shape().include_usage() && !write(sse_data(g.shape().usage_chunk(g.usage())))) return false;
        }
        if (!write(kSseDone)) return false;
        sink.done();
        return true;
    }

    void models(httplib::Response &res) {
        json data = json::array();
        data.push_back({{"id", served().id}, {"object", "model"}, {"created", served().created}, {"owned_by", "kt"}});
        send_json(res, 200, {{"object", "list"}, {"data", std::move(data)}});
    }

    void model(const httplib::Request &req, httplib::Response &res) {
        const std::string id = req.matches[1];
        if (id != served().id) {
            return send_error(res, {404, "invalid_request_error", "The model '" + id + "' does not exist", "model",
                                    "model_not_found"});
        }
        send_json(res, 200, {{"id", served().id}, {"object", "model"}, {"created", served().created}, {"owned_by", "kt"}});
    }

    void tokenize(const httplib::Request &req, httplib::Response &res) {
        Parsed<TokenizeRequest> parsed = parse_tokenize_request(req.body);
        if (auto *e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
        const auto &request = std::get<TokenizeRequest>(parsed);
        std::vector<int32_t> ids;
        std::lock_guard<std::mutex> lock(api.model_calls_);
        if (kt_cli::tokenize(served().model, request.content, request.add_special, request.parse_special, &ids) !=
            KT_STATUS_OK)
            return send_error(res, server_error(500, std::string("kt_tokenize: ") + kt_model_last_error(served().model)));
        send_json(res, 200, {{"tokens", ids}});
    }

    void detokenize(const httplib::Request &req, httplib::Response &res) {
        Parsed<DetokenizeRequest> parsed = parse_detokenize_request(req.body);
        if (auto *e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
        const auto &request = std::get<DetokenizeRequest>(parsed);
        for (size_t i = 0; i < request.tokens.size(); ++i) {
            if (request.tokens[i] >= served().n_vocab) {
                return send_error(res, ApiError::invalid("tokens[" + std::to_string(i) + "]",
                                                         "token id " + std::to_string(request.tokens[i]) +
                                                             " is outside the vocabulary (" +
                                                             std::to_string(served().n_vocab) + " tokens)"));
            }
        }
        std::string text;
        std::lock_guard<std::mutex> lock(api.model_calls_);
        if (kt_cli::detokenize(served().model, request.tokens, &text) != KT_STATUS_OK)
            return send_error(res, server_error(500, std::string("kt_detokenize: ") + kt_model_last_error(served().model)));
        send_json(res, 200, {{"content", sanitize_utf8(text)}});
    }

    // Runs before routing: the request's clock and record, CORS, authentication, and the states in which the
    // API cannot answer yet (loading) or any more (draining).
    httplib::Server::HandlerResponse before_routing(const httplib::Request &req, httplib::Response &res) {
        t_record = RequestRecord{};
        t_record.start = Clock::now();
        // httplib reads a request's body after this hook: a request answered here leaves its body unread on the
        // connection, where it would be taken for the next request. Such answers close the connection.
        const bool has_body = req.has_header("Content-Length") || req.has_header("Transfer-Encoding");
        auto answered = [&] {
            if (has_body) res.set_header("Connection", "close");
            return httplib::Server::HandlerResponse::Handled;
        };
        const std::string origin = req.get_header_value("Origin");
        if (!origin.empty() && allowed_origin(origin)) {
            res.set_header("Access-Control-Allow-Origin", origin);
            res.set_header("Vary", "Origin");
            if (req.method == "OPTIONS") {  // a preflight: answered here, before authentication
                res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                const std::string asked = req.get_header_value("Access-Control-Request-Headers");
                res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
                res.set_header("Access-Control-Max-Age", "600");
                res.status = 204;
                return answered();
            }
        }
        if (!api.api_keys_.empty() && !is_public(req.path) && !authorized(req)) {
            res.set_header("WWW-Authenticate", "Bearer");
            send_error(res, {401, "invalid_request_error",
                             req.has_header("Authorization") ? "Incorrect API key provided"
                                                             : "Missing API key: send 'Authorization: Bearer <key>'",
                             "", "invalid_api_key"});
            return answered();
        }
        const char *route = route_of(req.path);
        const bool needs_model = std::string(route) != "health" && std::string(route) != "page" &&
                                 std::string(route) != "other" && std::string(route) != "metrics";
        if (needs_model && api.http_->draining()) {
            res.set_header("Retry-After", "5");
            send_error(res, server_error(503, "the server is shutting down", "server_shutting_down"));
            return answered();
        }
        if (needs_model && !api.ready_) {
            res.set_header("Retry-After", "1");
            send_error(res, server_error(503, "the model is still loading", "model_loading"));
            return answered();
        }
        return httplib::Server::HandlerResponse::Unhandled;
    }

    bool allowed_origin(const std::string &origin) const {
        for (const std::string &o : api.options_.cors_origins)
            if (o == "*" || o == origin) return true;
        return false;
    }

    bool authorized(const httplib::Request &req) const {
        const std::string header = req.get_header_value("Authorization");
        const std::string prefix = "Bearer ";
        if (header.size() <= prefix.size() || header.compare(0, prefix.size(), prefix) != 0) return false;
        const std::string key = header.substr(prefix.size());
        bool ok = false;
        for (const std::string &k : api.api_keys_) ok |= same_secret(key, k);
        return ok;
    }

    // Errors httplib produces itself (404, 413 for a body over the limit, 400 for a malformed request line or a
    // request cut short by its deadline) get the OpenAI shape too.
    httplib::Server::HandlerResponse on_error(const httplib::Request &req, httplib::Response &res) {
        if (!res.body.empty() || res.status == 499) return httplib::Server::HandlerResponse::Unhandled;
        if (HttpServer::request_timed_out()) {  // the connection closes after this answer
            send_error(res, ApiError{408, "invalid_request_error", api.http_->request_timeout_message(), "",
                                     "request_timeout"});
            res.set_header("Connection", "close");
        } else if (res.status == 413) {
            send_error(res, ApiError{413, "invalid_request_error",
                                     "the request body is larger than the server's limit of " +
                                         std::to_string(api.options_.body_limit) + " bytes",
                                     "", "request_too_large"});
        } else if (res.status == 404) {
            send_error(res, ApiError{404, "invalid_request_error", "no route for " + req.method + " " + req.path, "",
                                     "not_found"});
        } else {
            send_error(res, ApiError{res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                                     "the HTTP request could not be served (status " + std::to_string(res.status) + ")",
                                     "", ""});
        }
        return httplib::Server::HandlerResponse::Handled;
    }

    void log(const httplib::Request &req, const httplib::Response &res) {
        api.metrics_.count_request(route_of(req.path), res.status);
        if (!api.request_log_) return;
        const RequestRecord &r = t_record;
        std::string line = utc_now() + " " + req.remote_addr + " \"" + req.method + " " + req.path + "\" " +
                           std::to_string(res.status) + " " +
                           std::to_string(static_cast<int64_t>(seconds_since(r.start) * 1000.0)) + "ms";
        if (r.prompt_tokens >= 0) {
            line += " prompt=" + std::to_string(r.prompt_tokens) + " cached=" + std::to_string(r.cached_tokens) +
                    " completion=" + std::to_string(r.completion_tokens) +
                    " finish=" + (r.finish_reason ? r.finish_reason : "none");
        }
        line += '\n';
        std::fwrite(line.data(), 1, line.size(), api.request_log_);
        std::fflush(api.request_log_);
    }
};

// ---------------------------------------------------------------------------------------------------------------

ApiServer::ApiServer(const ServerOptions &options, std::vector<std::string> api_keys, std::FILE *request_log)
    : options_(options), api_keys_(std::move(api_keys)), request_log_(request_log) {}

ApiServer::~ApiServer() {
    {
        std::lock_guard<std::mutex> lock(generations_mutex_);
        timer_stop_ = true;
    }
    generations_changed_.notify_all();
    if (drain_timer_.joinable()) drain_timer_.join();
}

void ApiServer::install(HttpServer *http) {
    http_ = http;
    auto h = std::make_shared<Handlers>(Handlers{*this});
    http->set_pre_routing_handler([h](const httplib::Request &req, httplib::Response &res) { return h->before_routing(req, res); });
    http->set_error_handler(httplib::Server::HandlerWithResponse(
        [h](const httplib::Request &req, httplib::Response &res) { return h->on_error(req, res); }));
    http->set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception &e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, server_error(500, "internal error: " + what));
    });
    http->set_logger([h](const httplib::Request &req, const httplib::Response &res) { h->log(req, res); });
    http->set_payload_max_length(options_.body_limit);
    http->set_request_timeout(options_.request_timeout);

    http->Post("(?:/v1)?/chat/completions", [h](const httplib::Request &req, httplib::Response &res) {
        h->generate(req, res, Endpoint::kChat);
    });
    http->Post("(?:/v1)?/completions", [h](const httplib::Request &req, httplib::Response &res) {
        h->generate(req, res, Endpoint::kCompletion);
    });
    http->Get("(?:/v1)?/models", [h](const httplib::Request &, httplib::Response &res) { h->models(res); });
    http->Get("(?:/v1)?/models/(.+)", [h](const httplib::Request &req, httplib::Response &res) { h->model(req, res); });
    http->Post("/tokenize", [h](const httplib::Request &req, httplib::Response &res) { h->tokenize(req, res); });
    http->Post("/detokenize", [h](const httplib::Request &req, httplib::Response &res) { h->detokenize(req, res); });
    http->Get("/health", [this](const httplib::Request &, httplib::Response &res) {
        if (http_->draining()) return send_json(res, 503, {{"status", "shutting down"}});
        if (!ready_) return send_json(res, 503, {{"status", "loading"}});
        send_json(res, 200, {{"status", "ok"}});
    });
    http->Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
        const GeneratorStats stats = ready_ ? served_.generator->stats() : GeneratorStats{};
        res.set_content(metrics_.render(stats), "text/plain; version=0.0.4");
    });
    http->Get("/(|chat\\.js|chat\\.css)", [](const httplib::Request &req, httplib::Response &res) {
        const PageAsset *asset = find_page_asset(req.path);
        res.set_content(asset->body.data(), asset->body.size(), asset->content_type);
    });
}

void ApiServer::set_ready(ServedModel served) {
    served_ = std::move(served);
    ready_ = true;
}

void ApiServer::register_generation(Generation *g) {
    std::lock_guard<std::mutex> lock(generations_mutex_);
    generations_.insert(g);
}

void ApiServer::unregister_generation(Generation *g) {
    {
        std::lock_guard<std::mutex> lock(generations_mutex_);
        generations_.erase(g);
    }
    generations_changed_.notify_all();
}

void ApiServer::cancel_all() {
    std::lock_guard<std::mutex> lock(generations_mutex_);
    for (Generation *g : generations_) g->cancel();
}

void ApiServer::begin_drain() {
    {
        std::lock_guard<std::mutex> lock(generations_mutex_);
        ++drain_requests_;
    }
    generations_changed_.notify_all();
    if (http_) http_->stop_accepting();
    if (drain_timer_.joinable()) return;  // a second SIGTERM: the timer wakes and cuts everything short now
    drain_timer_ = std::thread([this] {
        std::unique_lock<std::mutex> lock(generations_mutex_);
        generations_changed_.wait_until(lock, Clock::now() + std::chrono::seconds(options_.drain_seconds),
                                        [&] { return drain_requests_ > 1 || timer_stop_; });
        // From now on every generation still running is cut short, also one whose request was being prepared
        // when the drain began; their answers then end normally. A generation cannot be destroyed while this
        // holds the lock (it unregisters first).
        while (!timer_stop_) {
            for (Generation *g : generations_) g->cancel();
            generations_changed_.wait_for(lock, std::chrono::milliseconds(50));
        }
    });
}

}  // namespace kt_server
