// kt-server's request parser: every field the OpenAI APIs define that kt-server reads, the errors it answers
// (each naming the field), and a corpus of malformed bodies that must each give an error and nothing worse.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "request_parser.h"

using namespace kt_server;

namespace {

template <class T>
T ok(Parsed<T> p) {
    if (const ApiError *e = std::get_if<ApiError>(&p)) FAIL("unexpected error: " << e->message << " (" << e->param << ")");
    return std::get<T>(std::move(p));
}

template <class T>
ApiError error(const Parsed<T> &p) {
    REQUIRE(std::holds_alternative<ApiError>(p));
    return std::get<ApiError>(p);
}

}  // namespace

TEST_CASE("chat request: messages, content parts and every generation field") {
    const auto r = ok(parse_chat_request(R"({
        "model": "kt-tiny-moe",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "user", "content": "Again", "name": "bob"}
        ],
        "max_tokens": 10, "max_completion_tokens": 20,
        "temperature": 0.5, "top_p": 0.9, "top_k": 7, "min_p": 0.1, "seed": -1,
        "presence_penalty": 0.25, "frequency_penalty": -0.5, "repeat_penalty": 1.1,
        "stop": ["\n\n", "END"], "stream": true, "stream_options": {"include_usage": true},
        "n": 1, "logprobs": false, "user": "someone", "response_format": {"type": "text"}, "ignore_eos": true
    })"));
    REQUIRE(r.messages.size() == 4);
    CHECK(r.messages[0].role == "system");
    CHECK(r.messages[0].content == "Be brief.");
    CHECK(r.messages[1].content == "Hello\nthere");
    CHECK(r.messages[2].role == "assistant");
    CHECK(r.messages[2].content.empty());
    const GenerationFields &g = r.generation;
    CHECK(g.model == "kt-tiny-moe");
    CHECK(g.max_tokens == 20);  // max_completion_tokens wins
    CHECK(*g.sampling.temperature == 0.5f);
    CHECK(*g.sampling.top_p == 0.9f);
    CHECK(*g.sampling.top_k == 7);
    CHECK(*g.sampling.min_p == 0.1f);
    CHECK(*g.sampling.seed == UINT64_MAX);  // -1 modulo 2^64
    CHECK(*g.sampling.presence_penalty == 0.25f);
    CHECK(*g.sampling.frequency_penalty == -0.5f);
    CHECK(*g.sampling.repeat_penalty == 1.1f);
    CHECK(g.stop == std::vector<std::string>{"\n\n", "END"});
    CHECK(g.stream);
    CHECK(g.include_usage);
    CHECK(g.ignore_eos);
}

TEST_CASE("chat request: absent and null fields take the server's defaults") {
    const auto r = ok(parse_chat_request(
        R"({"messages": [{"role": "user", "content": "hi"}], "temperature": null, "stop": null, "max_tokens": null})"));
    CHECK_FALSE(r.generation.max_tokens);
    CHECK_FALSE(r.generation.sampling.temperature);
    CHECK_FALSE(r.generation.sampling.seed);
    CHECK(r.generation.stop.empty());
    CHECK_FALSE(r.generation.stream);
    CHECK(ok(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "stop": "##"})")).generation.stop ==
          std::vector<std::string>{"##"});
    CHECK(*ok(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3.0})"))
               .generation.max_tokens == 3);
    CHECK(*ok(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "top_k": -1})"))
               .generation.sampling.top_k == 0);
    CHECK(*ok(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "seed": 18446744073709551615})"))
               .generation.sampling.seed == UINT64_MAX);
}

TEST_CASE("chat request: each mistake is a 400 naming the field") {
    struct Case {
        const char *body, *param, *says;
    };
    const Case cases[] = {
        {R"({})", "messages", "required"},
        {R"({"messages": "hi"})", "messages", "array"},
        {R"({"messages": []})", "messages", "empty"},
        {R"({"messages": [1]})", "messages[0]", "object"},
        {R"({"messages": [{"content": "x"}]})", "messages[0].role", "string"},
        {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role", "robot"},
        {R"({"messages": [{"role": "user"}]})", "messages[0].content", "required"},
        {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "string"},
        {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
         "messages[0].content[0].type", "image_url"},
        {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text", "string"},
        {R"({"messages": [{"role": "user", "content": "a\u0000b"}]})", "messages[0].content", "NUL"},
        {R"({"messages": [{"role": "user", "content": "x"}], "model": 3})", "model", "string"},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens", "at least 1"},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"})", "max_tokens", "integer"},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 2.5})", "max_completion_tokens", "integer"},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e300})", "max_tokens", "at least"},
        {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature", "number"},
        {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 2.5})", "temperature", "between 0 and 2"},
        {R"({"messages": [{"role": "user", "content": "x"}], "top_p": -0.1})", "top_p", "between"},
        {R"({"messages": [{"role": "user", "content": "x"}], "min_p": 1.5})", "min_p", "between"},
        {R"({"messages": [{"role": "user", "content": "x"}], "top_k": 1.5})", "top_k", "integer"},
        {R"({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 3})", "presence_penalty", "between"},
        {R"({"messages": [{"role": "user", "content": "x"}], "repeat_penalty": 0})", "repeat_penalty", "between"},
        {R"({"messages": [{"role": "user", "content": "x"}], "seed": "42"})", "seed", "integer"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stop": 7})", "stop", "string"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", 1]})", "stop[1]", "string"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})", "stop[0]", "empty"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"]})",
         "stop", "more than 16"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream", "boolean"},
        {R"({"messages": [{"role": "user", "content": "x"}], "ignore_eos": 1})", "ignore_eos", "boolean"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": true})", "stream_options", "object"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": 1}})",
         "stream_options.include_usage", "boolean"},
        {R"({"messages": [{"role": "user", "content": "x"}], "n": 2})", "n", "n = 1"},
        {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", "logprobs", "not supported"},
    };
    for (const Case &c : cases) {
        INFO(c.body);
        const ApiError e = error(parse_chat_request(c.body));
        CHECK(e.http_status == 400);
        CHECK(e.type == "invalid_request_error");
        CHECK(e.param == c.param);
        CHECK(e.message.find(c.says) != std::string::npos);
    }
    CHECK(error(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "stop": [")" +
                                   std::string(kMaxStopBytes + 1, 'a') + R"("]})"))
              .param == "stop[0]");
}

TEST_CASE("request bodies that are not JSON objects") {
    for (const char *body : {"", "{", "nope", "[1, 2]", "\"text\"", "null", "{\"messages\": [}", "{} trailing",
                             "{\"a\": 1,}", "{\"a\": NaN}"}) {
        INFO(body);
        const ApiError e = error(parse_chat_request(body));
        CHECK(e.http_status == 400);
        CHECK(e.param.empty());
        CHECK((e.message.find("JSON") != std::string::npos));
    }
    // A string with bytes that are not UTF-8 is not JSON either.
    CHECK(error(parse_chat_request("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}"))
              .message.find("not valid JSON") != std::string::npos);
    // Deep nesting costs memory (bounded by the body limit), never the stack.
    const std::string deep = "{\"messages\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
    CHECK(error(parse_chat_request(deep)).param == "messages[0]");
}

TEST_CASE("completion request: the prompt's forms") {
    CHECK(ok(parse_completion_request(R"({"prompt": "And God said"})")).prompt_text == "And God said");
    CHECK(ok(parse_completion_request(R"({"prompt": ["only one"]})")).prompt_text == "only one");
    const auto tokens = ok(parse_completion_request(R"({"prompt": [1, 2, 3], "max_tokens": 4, "echo": false})"));
    CHECK(tokens.prompt_is_tokens);
    CHECK(tokens.prompt_tokens == std::vector<int32_t>{1, 2, 3});
    CHECK(tokens.generation.max_tokens == 4);
    // A NUL is fine in a completion prompt: it is tokenized with its length.
    CHECK(ok(parse_completion_request(R"({"prompt": "a\u0000b"})")).prompt_text.size() == 3);

    CHECK(error(parse_completion_request(R"({})")).param == "prompt");
    CHECK(error(parse_completion_request(R"({"prompt": 5})")).param == "prompt");
    CHECK(error(parse_completion_request(R"({"prompt": ["a", "b"]})")).message.find("one prompt") != std::string::npos);
    CHECK(error(parse_completion_request(R"({"prompt": []})")).param == "prompt");
    CHECK(error(parse_completion_request(R"({"prompt": [1, -2]})")).param == "prompt[1]");
    CHECK(error(parse_completion_request(R"({"prompt": [1, 3000000000]})")).param == "prompt[1]");
    CHECK(error(parse_completion_request(R"({"prompt": "x", "echo": true})")).param == "echo");
    CHECK(error(parse_completion_request(R"({"prompt": "x", "suffix": "y"})")).param == "suffix");
    CHECK(error(parse_completion_request(R"({"prompt": "x", "logprobs": 3})")).param == "logprobs");
    CHECK(ok(parse_completion_request(R"({"prompt": "x", "logprobs": null, "best_of": 1})")).prompt_text == "x");
}

TEST_CASE("tokenize and detokenize requests") {
    const auto t = ok(parse_tokenize_request(R"({"content": "hi", "add_special": true, "parse_special": false})"));
    CHECK(t.content == "hi");
    CHECK(t.add_special);
    CHECK_FALSE(t.parse_special);
    CHECK(error(parse_tokenize_request(R"({"text": "hi"})")).param == "content");
    CHECK(error(parse_tokenize_request(R"({"content": 1})")).param == "content");
    CHECK(error(parse_tokenize_request(R"({"content": "x", "add_special": "no"})")).param == "add_special");
    CHECK(ok(parse_detokenize_request(R"({"tokens": [5, 6]})")).tokens == std::vector<int32_t>{5, 6});
    CHECK(ok(parse_detokenize_request(R"({"tokens": []})")).tokens.empty());
    CHECK(error(parse_detokenize_request(R"({})")).param == "tokens");
    CHECK(error(parse_detokenize_request(R"({"tokens": "5"})")).param == "tokens");
    CHECK(error(parse_detokenize_request(R"({"tokens": [5, "6"]})")).param == "tokens[1]");
}

TEST_CASE("the malformed-request corpus: every body is answered with an error, none crashes") {
    namespace fs = std::filesystem;
    size_t files = 0;
    for (const auto &entry : fs::directory_iterator(KT_SERVER_REQUEST_CORPUS)) {
        std::ifstream in(entry.path(), std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string body = ss.str();
        INFO(entry.path().filename().string());
        // Every parser sees every body; the corpus holds bodies none of them accepts.
        const ApiError chat = error(parse_chat_request(body));
        CHECK(chat.http_status == 400);
        CHECK_FALSE(chat.message.empty());
        CHECK(std::holds_alternative<ApiError>(parse_completion_request(body)));
        CHECK(std::holds_alternative<ApiError>(parse_tokenize_request(body)));
        CHECK(std::holds_alternative<ApiError>(parse_detokenize_request(body)));
        ++files;
    }
    CHECK(files >= 20);
}

TEST_CASE("the error body has OpenAI's shape") {
    ApiError e = ApiError::invalid("messages[0].role", "bad \"role\"");
    CHECK(e.body() ==
          R"({"error":{"code":null,"message":"bad \"role\"","param":"messages[0].role","type":"invalid_request_error"}})");
    e.code = "context_length_exceeded";
    e.param.clear();
    CHECK(e.body().find(R"("code":"context_length_exceeded")") != std::string::npos);
    CHECK(e.body().find(R"("param":null)") != std::string::npos);
}
