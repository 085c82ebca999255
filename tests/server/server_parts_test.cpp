// The smaller parts of kt-server: the JSON of responses and stream chunks, the Prometheus exposition, the
// command line, and the listening socket.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

#include "http_server.h"
#include "metrics.h"
#include "openai_json.h"
#include "server_options.h"

using namespace kt_server;
using nlohmann::json;

TEST_CASE("chat responses and chunks have the fields the OpenAI clients read") {
    const ResponseJson r(Endpoint::kChat, "chatcmpl-1", 1700000000, "m", true);
    const json full = json::parse(r.full("Hi \xEF\xBF\xBD", "stop", {12, 3, 5}));
    CHECK(full["id"] == "chatcmpl-1");
    CHECK(full["object"] == "chat.completion");
    CHECK(full["created"] == 1700000000);
    CHECK(full["model"] == "m");
    CHECK(full["choices"][0]["index"] == 0);
    CHECK(full["choices"][0]["message"] == json({{"role", "assistant"}, {"content", "Hi \xEF\xBF\xBD"}}));
    CHECK(full["choices"][0]["finish_reason"] == "stop");
    CHECK(full["usage"] == json({{"prompt_tokens", 12},
                                 {"completion_tokens", 3},
                                 {"total_tokens", 15},
                                 {"prompt_tokens_details", {{"cached_tokens", 5}}}}));

    const json role = json::parse(r.role_chunk());
    CHECK(role["object"] == "chat.completion.chunk");
    CHECK(role["choices"][0]["delta"] == json({{"role", "assistant"}, {"content", ""}}));
    CHECK(role["choices"][0]["finish_reason"].is_null());
    CHECK(role.contains("usage"));
    CHECK(role["usage"].is_null());  // include_usage: every chunk carries "usage": null
    const json text = json::parse(r.text_chunk("a\"b\n"));
    CHECK(text["id"] == "chatcmpl-1");
    CHECK(text["choices"][0]["delta"] == json({{"content", "a\"b\n"}}));
    const json finish = json::parse(r.finish_chunk("length"));
    CHECK(finish["choices"][0]["delta"] == json::object());
    CHECK(finish["choices"][0]["finish_reason"] == "length");
    const json usage = json::parse(r.usage_chunk({4, 2, 0}));
    CHECK(usage["choices"] == json::array());
    CHECK(usage["usage"]["total_tokens"] == 6);

    // Without include_usage no chunk mentions usage.
    const ResponseJson plain(Endpoint::kChat, "chatcmpl-2", 1, "m", false);
    CHECK_FALSE(json::parse(plain.text_chunk("x")).contains("usage"));
    // Bytes that are not UTF-8 never make the JSON fail: they become U+FFFD.
    CHECK(json::parse(plain.text_chunk("\xff"))["choices"][0]["delta"]["content"] == "\xEF\xBF\xBD");
}

TEST_CASE("completion responses and chunks") {
    const ResponseJson r(Endpoint::kCompletion, "cmpl-1", 5, "m", false);
    const json full = json::parse(r.full("text", "length", {1, 2, 0}));
    CHECK(full["object"] == "text_completion");
    CHECK(full["choices"][0]["text"] == "text");
    CHECK(full["choices"][0]["logprobs"].is_null());
    const json chunk = json::parse(r.text_chunk("t"));
    CHECK(chunk["object"] == "text_completion");
    CHECK(chunk["choices"][0]["text"] == "t");
    CHECK(json::parse(r.finish_chunk("stop"))["choices"][0]["text"] == "");
    CHECK(sse_data("{}") == "data: {}\n\n");
}

TEST_CASE("metrics render as Prometheus text: counters, gauges and cumulative histograms") {
    Metrics m;
    m.count_request("chat", 200);
    m.count_request("chat", 200);
    m.count_request("chat", 400);
    m.count_prompt(10, 4);
    m.count_generated(3);
    m.count_generated(4);
    m.observe_time_to_first_token(0.02);
    m.observe_time_to_first_token(0.3);
    m.observe_time_to_first_token(100);
    GeneratorStats stats;
    stats.running = 3;
    stats.queued = 1;
    stats.kv_blocks_used = 5;
    stats.kv_blocks_total = 64;
    const std::string text = m.render(stats);
    CHECK(text.find("kt_requests_total{route=\"chat\",code=\"200\"} 2\n") != std::string::npos);
    CHECK(text.find("kt_requests_total{route=\"chat\",code=\"400\"} 1\n") != std::string::npos);
    CHECK(text.find("kt_requests_running 3\n") != std::string::npos);
    CHECK(text.find("kt_requests_queued 1\n") != std::string::npos);
    CHECK(text.find("kt_prompt_tokens_total 10\n") != std::string::npos);
    CHECK(text.find("kt_prompt_tokens_cached_total 4\n") != std::string::npos);
    CHECK(text.find("kt_generated_tokens_total 7\n") != std::string::npos);
    CHECK(text.find("kt_kv_blocks_used 5\n") != std::string::npos);
    CHECK(text.find("kt_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n") != std::string::npos);
    CHECK(text.find("kt_time_to_first_token_seconds_bucket{le=\"0.5\"} 2\n") != std::string::npos);
    CHECK(text.find("kt_time_to_first_token_seconds_bucket{le=\"60\"} 2\n") != std::string::npos);
    CHECK(text.find("kt_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n") != std::string::npos);
    CHECK(text.find("kt_time_to_first_token_seconds_count 3\n") != std::string::npos);
    CHECK(text.find("kt_time_to_first_token_seconds_sum 100.32\n") != std::string::npos);

    // Every line is a comment or "name{labels} value", and every metric has its HELP and TYPE.
    const std::regex sample_line(R"(^[a-z_]+(\{[a-z]+="[^"]*"(,[a-z]+="[^"]*")*\})? [-+0-9.eInf]+$)");
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        INFO(line);
        if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
        CHECK(std::regex_match(line, sample_line));
    }
    for (const char *name : {"kt_requests_total", "kt_time_per_output_token_seconds", "kt_request_duration_seconds",
                             "kt_kv_blocks_total", "kt_kv_blocks_cached", "kt_preemptions_total"}) {
        CHECK(text.find(std::string("# TYPE ") + name + " ") != std::string::npos);
    }
}

TEST_CASE("server options: defaults, every flag, and usage errors") {
    auto parse = [](std::vector<const char *> args, ServerOptions *o) {
        args.insert(args.begin(), "kt-server");
        return parse_server_options(static_cast<int>(args.size()), args.data(), o);
    };
    ServerOptions o;
    REQUIRE(parse({}, &o).empty());
    CHECK(o.model_path.empty());
    CHECK(o.host == "127.0.0.1");
    CHECK(o.port == 8080);
    CHECK(o.parallel == 4);
    CHECK(o.http_threads == 2 * (4 + 64) + 8);
    CHECK(o.request_timeout == 30);
    CHECK(o.sampling.temperature == Approx(0.8f));  // kt_sampler_params_init's
    CHECK(o.load.struct_size == sizeof(kt_model_params));  // kt_model_params_init's
    CHECK(o.load.pack_cache == 0);
    CHECK(o.load.device == KT_DEVICE_NONE);

    REQUIRE(parse({"-m", "x.gguf", "--host", "0.0.0.0", "--port", "0", "--api-key", "k1", "--api-key", "k2",
                   "--api-key-file", "keys.txt", "--alias", "my-model", "-np", "8", "-c", "2048", "--kv-budget", "64",
                   "--kv-type", "q8_0", "-t", "2", "--queue", "3", "--body-limit", "1000", "--request-timeout", "0",
                   "--cors-origin", "*",
                   "--request-log", "-", "--chat-template", "chatml", "-n", "50", "--ping-ms", "10",
                   "--drain-seconds", "5", "--http-threads", "12", "--temp", "0", "--seed", "9",
                   "--pack-cache", "/tmp/x.ktpack", "--device", "standin", "--device-budget", "3M",
                   "--device-experts", "2", "--device-deferred", "3", "--device-prefill", "64"},
                  &o)
                .empty());
    CHECK(o.model_path == "x.gguf");
    CHECK(o.host == "0.0.0.0");
    CHECK(o.port == 0);
    CHECK(o.api_keys == std::vector<std::string>{"k1", "k2"});
    CHECK(o.api_key_file == "keys.txt");
    CHECK(o.alias == "my-model");
    CHECK(o.parallel == 8);
    CHECK(o.ctx_size == 2048);
    CHECK(o.kv_budget_bytes == 64ull << 20);
    CHECK(o.kv_type == KT_TYPE_Q8_0);
    CHECK(o.threads == 2);
    CHECK(o.queue == 3);
    CHECK(o.body_limit == 1000);
    CHECK(o.request_timeout == 0);
    CHECK(o.cors_origins == std::vector<std::string>{"*"});
    CHECK(o.request_log == "-");
    CHECK(o.chat_template == "chatml");
    CHECK(o.n_predict == 50);
    CHECK(o.ping_ms == 10);
    CHECK(o.drain_seconds == 5);
    CHECK(o.http_threads == 12);
    CHECK(o.sampling.temperature == 0.0f);
    CHECK(o.sampling.seed == 9);
    CHECK(o.load.pack_cache == 1);
    CHECK(o.pack_cache_path == "/tmp/x.ktpack");
    CHECK(o.load.device == KT_DEVICE_CPU_STANDIN);
    CHECK(o.load.device_budget_bytes == 3ull << 20);
    CHECK(o.load.device_experts == 2);
    CHECK(o.load.device_deferred_experts == 3);
    CHECK(o.load.device_prefill_threshold == 64);
    REQUIRE(parse({"--pack-cache", "on", "--device", "cuda:1"}, &o).empty());
    CHECK(o.load.pack_cache == 1);
    CHECK(o.pack_cache_path.empty());  // next to the model
    CHECK(o.load.device == KT_DEVICE_CUDA);
    CHECK(o.load.device_index == 1);

    CHECK(parse({"--help"}, &o) == "help");
    for (std::vector<const char *> bad : std::vector<std::vector<const char *>>{
             {"--port"}, {"--port", "70000"}, {"--port", "80x"}, {"-np", "0"}, {"--kv-type", "q4_0"},
             {"--frobnicate", "1"}, {"--api-key", ""}, {"-n", "0"}, {"--temp", "warm"}, {"--body-limit", "10"},
             {"--request-timeout", "-1"}, {"--request-timeout", "86401"},
             {"--pack-cache", ""}, {"--device", "tpu"}, {"--device", "cuda:x"}, {"--device-budget", "lots"},
             {"--device-experts", "-1"}, {"--device-deferred", "-2"}, {"--device-deferred", "1x"},
             {"--device-prefill", "-1"}, {"--device-prefill", "3000000000"}}) {
        INFO(bad[0]);
        const std::string problem = parse(bad, &o);
        CHECK_FALSE(problem.empty());
        CHECK(problem != "help");
    }
}

TEST_CASE("the listening socket takes a burst of 64 connections before the first accept") {
    // With httplib's backlog of 5 the kernel drops the SYNs of the 7th and later connections while nothing accepts,
    // and their clients send them again only after a second: they could not complete within the half second here.
    HttpServer http;
    const int port = http.bind("127.0.0.1", 0);
    REQUIRE(port > 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::vector<pollfd> clients;
    for (int i = 0; i < 64; ++i) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        REQUIRE(fd >= 0);
        const int rc = ::connect(fd, reinterpret_cast<const sockaddr *>(&addr), sizeof addr);
        REQUIRE((rc == 0 || errno == EINPROGRESS));
        clients.push_back({fd, POLLOUT, 0});
    }
    int connected = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (connected < 64 && std::chrono::steady_clock::now() < deadline) {
        ::poll(clients.data(), clients.size(), 50);
        connected = 0;
        for (pollfd &c : clients) {
            int error = -1;
            socklen_t len = sizeof error;
            if ((c.revents & POLLOUT) && ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0)
                ++connected;
        }
    }
    for (pollfd &c : clients) ::close(c.fd);
    CHECK(connected == 64);
}
