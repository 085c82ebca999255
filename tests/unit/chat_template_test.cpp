// The Jinja-subset interpreter (expected values follow Jinja2/Python semantics, worked out by hand) and chat
// templates: the real templates carried by the golden vocabularies and kt's built-in families, rendered text
// compared exactly with the families' documented formats.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "mem/mapped_file.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/chat_template.h"
#include "model/tokenizer/jinja.h"
#include "model/tokenizer/tokenizer.h"
#include "support/test_support.h"

using namespace kt;
using namespace kt::tokenizer;

namespace {

Status render(const std::string &source, std::string *out, const std::string &context_json = "{}") {
    std::unique_ptr<jinja::Template> t;
    KT_TRY(jinja::Template::parse(source, &t));
    json::Value ctx;
    REQUIRE(json::parse(context_json, &ctx).is_ok());
    return t->render(jinja::Value::from_json(ctx), out);
}

std::string render_ok(const std::string &source, const std::string &context_json = "{}") {
    std::string out;
    const Status s = render(source, &out, context_json);
    INFO(source << "\n-> " << s.message());
    REQUIRE(s.is_ok());
    return out;
}

Status render_error(const std::string &source) {
    std::string out;
    return render(source, &out);
}

}  // namespace

TEST_CASE("jinja: whitespace control, trim_blocks and lstrip_blocks") {
    CHECK(render_ok("{% if true %}\n  x\n{% endif %}\n") == "  x\n");
    CHECK(render_ok("  {% if true %}y{% endif %}") == "y");
    CHECK(render_ok("a {{- ' b ' -}} c") == "a b c");
    CHECK(render_ok("a\n  {%- if true %} b{% endif %}") == "a b");
    CHECK(render_ok("{# comment #}\nz") == "z");
    CHECK(render_ok("x  {%+ if true %}y{% endif %}") == "x  y");
    CHECK(render_ok("{{ 'a' }}\n{{ 'b' }}") == "a\nb");  // trim_blocks leaves {{ }} alone
    CHECK(render_ok("{% if true %}\n  {% if true %}\n    z\n  {% endif %}\n{% endif %}\n") == "    z\n");
}

TEST_CASE("jinja: expressions, output and operators") {
    CHECK(render_ok("{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 2 ** 10 }}") ==
          "7|3|-4|1|2|3.5|2.0|1024");
    CHECK(render_ok("{{ 'a' ~ 1 }}|{{ 'ab' * 2 }}|{{ [1, 2] + [3] }}|{{ none }}|{{ true }}|{{ x }}|{{ 1.5 }}") ==
          "a1|abab|[1, 2, 3]|None|True||1.5");
    CHECK(render_ok("{{ {'a': 1, 'b': 'x'} }}|{{ ['it\\'s'] }}") == "{'a': 1, 'b': 'x'}|[\"it's\"]");
    CHECK(render_ok("{{ 'y' if 1 > 2 else 'n' }}|{{ 'y' if 3 >= 2 }}|{{ 'q' if false }}") == "n|y|");
    CHECK(render_ok("{{ 1 < 2 and 'b' < 'a' }}|{{ 0 or 'z' }}|{{ not x is defined }}|{{ 'b' in 'abc' }}|{{ 2 not in [1] }}") ==
          "False|z|True|True|True");
    CHECK(render_ok("{{ 'a' 'b' }}|{{ (1, 2) }}|{{ -(3) }}") == "ab|[1, 2]|-3");
}

TEST_CASE("jinja: filters, tests, methods, subscripts") {
    CHECK(render_ok("{{ '  hi  ' | trim }}|{{ [1, 2, 3] | length }}|{{ 'h\xc3\xa9llo' | length }}|{{ nope | default('d') }}|"
                    "{{ '' | default('e', true) }}") == "hi|3|5|d|e");
    CHECK(render_ok("{{ [1, 2] | join(', ') }}|{{ 'Hello' | upper }}|{{ 'a b' | title }}|{{ [3, 1] | first }}|{{ 'x' | list }}") ==
          "1, 2|HELLO|A B|3|['x']");
    CHECK(render_ok("{{ {'a': [1, 'x', true], 'b': none, 'c': 'q\"\\n'} | tojson }}") ==
          "{\"a\": [1, \"x\", true], \"b\": null, \"c\": \"q\\\"\\n\"}");
    CHECK(render_ok("{{ {'a': [1]} | tojson(indent=2) }}") == "{\n  \"a\": [\n    1\n  ]\n}");
    CHECK(render_ok("{{ 3 is odd }}|{{ x is defined }}|{{ none is none }}|{{ 'a' is string }}|{{ 6 is divisibleby 3 }}|"
                    "{{ 1 is not none }}|{{ {} is mapping }}") == "True|False|True|True|True|True|True");
    CHECK(render_ok("{{ 'hello'[1:3] }}|{{ [1, 2, 3][::-1] }}|{{ 'abc'[-1] }}|{{ [1, 2, 3][5] }}|{{ [1, 2, 3, 4][1::2] }}") ==
          "el|[3, 2, 1]|c||[2, 4]");
    CHECK(render_ok("{{ 'a,b,c'.split(',') }}|{{ ' a  b '.split() }}|{{ ' x '.strip() }}|{{ 'abc'.startswith('ab') }}|"
                    "{{ 'xxhixx'.strip('x') }}|{{ 'a-b'.replace('-', '+') }}|{{ ', '.join(['p', 'q']) }}") ==
          "['a', 'b', 'c']|['a', 'b']|x|True|hi|a+b|p, q");
    CHECK(render_ok("{{ d.get('k', 'z') }}|{{ d.get('a') }}|{{ d['a'] }}|{{ d.a }}|{{ d.keys() }}", R"({"d": {"a": 1}})") ==
          "z|1|1|1|['a']");
    CHECK(render_ok("{{ m | selectattr('role', 'equalto', 'system') | list | length }}|{{ m | map(attribute='role') | join(',') }}|"
                    "{{ m | rejectattr('role', 'equalto', 'system') | map(attribute='role') | first }}",
                    R"({"m": [{"role": "system"}, {"role": "user"}, {"role": "system"}]})") == "2|system,user,system|user");
}

TEST_CASE("jinja: loops, scoping, namespaces, set blocks") {
    CHECK(render_ok("{% for x in [1, 2, 3] %}{{ loop.index }}{{ ',' if not loop.last }}{% endfor %}") == "1,2,3");
    CHECK(render_ok("{% for x in [] %}a{% else %}empty{% endfor %}") == "empty");
    CHECK(render_ok("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.index }}{% endfor %}") == "2142");
    CHECK(render_ok("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}") == "a=1;b=2;");
    CHECK(render_ok("{% for x in 'ab' %}{{ loop.revindex }}{{ x }}{% endfor %}") == "2a1b");
    CHECK(render_ok("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}") == "1");
    CHECK(render_ok("{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = ns.x + 1 %}{% endfor %}{{ ns.x }}") == "2");
    CHECK(render_ok("{% set s %}a{{ 1 }}{% endset %}{{ s }}") == "a1");
    CHECK(render_ok("{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}") == "012531");
    CHECK(render_ok("{% if a %}A{% elif b %}B{% else %}C{% endif %}", R"({"b": 1})") == "B");
    CHECK(render_ok("{% generation %}g{% endgeneration %}") == "g");
}

TEST_CASE("jinja: what kt does not implement, and hostile templates, are clear errors") {
    Status s = render_error("line one\n{% macro f() %}{% endmacro %}");
    CHECK(s.code() == KT_STATUS_UNSUPPORTED);
    CHECK(s.message().find("line 2") != std::string::npos);
    CHECK(s.message().find("macro") != std::string::npos);
    s = render_error("{{ x | nosuchfilter }}");
    CHECK(s.code() == KT_STATUS_UNSUPPORTED);
    CHECK(s.message().find("nosuchfilter") != std::string::npos);
    s = render_error("{{ raise_exception('roles must alternate') }}");
    CHECK(s.code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(s.message().find("roles must alternate") != std::string::npos);
    CHECK(render_error("{% if %}x{% endif %}").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{{ x").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{% for x in y %}").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{% endfor %}").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{{ 'abc").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{{ 1 / 0 }}").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{{ 'a' - 1 }}").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{{ undefined_function() }}").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}").code() ==
          KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").code() == KT_STATUS_UNSUPPORTED);
    CHECK(render_error("{{ '" + std::string(1000, 'x') + "' * 100000000 }}").code() == KT_STATUS_UNSUPPORTED);
    const std::string nested = [] {
        std::string t;
        for (int i = 0; i < 1000; ++i) t += "{% if true %}";
        return t;
    }();
    CHECK(render_error(nested).code() == KT_STATUS_UNSUPPORTED);
}

// ------------------------------------------------------------------------------------------------------------
// Chat templates

namespace {

struct Loaded {
    std::unique_ptr<gguf::File> file;
    std::unique_ptr<Tokenizer> tokenizer;
};

// A vocabulary of shared/testdata: tokenizer/<name>.gguf, or a path under testdata given as "models/x.gguf".
Loaded load(const std::string &name) {
    Loaded l;
    mem::MappedFile bytes;
    const std::string path = test::testdata_path(name.find('/') != std::string::npos ? name : "tokenizer/" + name + ".gguf");
    REQUIRE(mem::MappedFile::open(path, true, nullptr, &bytes).is_ok());
    REQUIRE(gguf::File::parse(std::move(bytes), path, &l.file).is_ok());
    REQUIRE(Tokenizer::create(*l.file, &l.tokenizer).is_ok());
    return l;
}

std::string chat(const Loaded &l, const std::vector<ChatMessage> &messages, ChatOptions options = {}) {
    std::string out;
    const Status s = render_chat(l.tokenizer->vocab(), messages, options, &out);
    INFO(s.message());
    REQUIRE(s.is_ok());
    return out;
}

const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant."},
    {"user", "Hi"},
    {"assistant", "Hello! How can I help?"},
    {"user", "Tell me a joke."},
};

}  // namespace

TEST_CASE("chat: Qwen3's own template (ChatML with thinking)") {
    const Loaded q = load("qwen3");
    REQUIRE(!q.tokenizer->vocab().chat_template().empty());
    const std::string expected =
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
        "<|im_start|>user\nTell me a joke.<|im_end|>\n"
        "<|im_start|>assistant\n";
    CHECK(chat(q, kConversation) == expected);
    ChatOptions no_think;
    no_think.extra_context_json = R"({"enable_thinking": false})";
    CHECK(chat(q, kConversation, no_think) == expected + "<think>\n\n</think>\n\n");
    ChatOptions no_prompt;
    no_prompt.add_generation_prompt = false;
    CHECK(chat(q, kConversation, no_prompt) == expected.substr(0, expected.size() - std::string("<|im_start|>assistant\n").size()));
    // Reasoning in an earlier turn is dropped; in the turn after the last user message it is kept.
    const std::vector<ChatMessage> thinking = {
        {"user", "Q1"}, {"assistant", "<think>\nr1\n</think>\n\nA1"}, {"user", "Q2"}, {"assistant", "<think>r2</think>A2"}};
    CHECK(chat(q, thinking, no_prompt) ==
          "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
          "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n");
    // The built-in ChatML family gives the same text for plain turns.
    ChatOptions builtin;
    builtin.template_name = "chatml";
    CHECK(chat(q, kConversation, builtin) == expected);
    // And the rendered prompt tokenizes into the control tokens.
    std::vector<int32_t> ids;
    REQUIRE(q.tokenizer->tokenize(expected, true, true, &ids).is_ok());
    CHECK(ids.front() == 151644);  // <|im_start|>
    CHECK(std::count(ids.begin(), ids.end(), 151645) == 4);  // <|im_end|>
}

TEST_CASE("chat: Llama 3's own template and the llama3 family") {
    const Loaded l = load("llama3");
    const std::string body =
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|>";
    const std::string prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n";
    // The BOS the template starts with is removed: tokenization adds it (add_bos_token).
    CHECK(chat(l, kConversation) == body + prompt);
    ChatOptions no_prompt;
    no_prompt.add_generation_prompt = false;
    CHECK(chat(l, kConversation, no_prompt) == body + prompt);  // this (original Llama 3) template always adds it
    ChatOptions builtin;
    builtin.template_name = "llama3";
    CHECK(chat(l, {{"user", "  padded  "}}, builtin) == "<|start_header_id|>user<|end_header_id|>\n\npadded<|eot_id|>" + prompt);
    builtin.add_generation_prompt = false;
    CHECK(chat(l, kConversation, builtin) == body);
}

TEST_CASE("chat: DeepSeek V3's own template and the deepseek3 family") {
    const Loaded d = load("deepseek-v3");
    const std::string expected =
        "You are a helpful assistant."
        "<\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
        "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>Hello! How can I help?<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
        "<\xef\xbd\x9cUser\xef\xbd\x9c>Tell me a joke."
        "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";
    CHECK(chat(d, kConversation) == expected);
    ChatOptions builtin;
    builtin.template_name = "deepseek3";
    CHECK(chat(d, kConversation, builtin) == expected);
    CHECK(chat(d, {{"system", "A"}, {"system", "B"}, {"user", "u"}}, builtin) ==
          "A\n\nB<\xef\xbd\x9cUser\xef\xbd\x9c>u<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
}

// The glm4 and harmony built-ins, with the vocabularies of the shared glm4moe and gpt-oss golden models (their
// special tokens are GLM-4.5's and gpt-oss's). The expected texts are written from the documented formats.
TEST_CASE("chat: the glm4 family (GLM-4.5 / 4.6) with GLM's special tokens") {
    const Loaded g = load("models/glm4moe.f32.gguf");
    ChatOptions glm;
    glm.template_name = "glm4";
    const std::string expected =
        "[gMASK]<sop><|system|>\nYou are a helpful assistant.<|user|>\nHi<|assistant|>\n<think></think>\n"
        "Hello! How can I help?<|user|>\nTell me a joke.<|assistant|>";
    CHECK(chat(g, kConversation, glm) == expected);
    glm.extra_context_json = R"({"enable_thinking": false})";
    CHECK(chat(g, {{"user", "Hi"}}, glm) == "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>");
    glm.extra_context_json.clear();
    // Reasoning is kept only after the last user turn.
    glm.add_generation_prompt = false;
    CHECK(chat(g, {{"user", "Q1"}, {"assistant", "<think>r1</think>A1"}, {"user", "Q2"}, {"assistant", "<think>\nr2\n</think>\nA2"}}, glm) ==
          "[gMASK]<sop><|user|>\nQ1<|assistant|>\n<think></think>\nA1<|user|>\nQ2<|assistant|>\n<think>r2</think>\nA2");
    // [gMASK] is the BOS but the vocabulary does not add it: it stays, and the headers are single tokens.
    std::vector<int32_t> ids;
    REQUIRE(g.tokenizer->tokenize(expected, true, true, &ids).is_ok());
    const Vocab &v = g.tokenizer->vocab();
    CHECK(ids[0] == v.bos());
    CHECK(std::string(v.text(ids[1])) == "<sop>");
    CHECK(std::count(ids.begin(), ids.end(), v.eot()) == 2);  // <|user|> ends a turn
    CHECK(std::string(v.text(ids.back())) == "<|assistant|>");
}

TEST_CASE("chat: the harmony family (gpt-oss) with gpt-oss's special tokens, and <|end|> does not end generation") {
    const Loaded o = load("models/gpt-oss.f32.gguf");
    ChatOptions harmony;
    harmony.template_name = "harmony";
    harmony.extra_context_json = R"({"current_date": "2026-01-15", "reasoning_effort": "high"})";
    const std::string expected =
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: 2026-01-15\n\nReasoning: high\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
        "<|start|>developer<|message|># Instructions\n\nYou are a helpful assistant.<|end|>"
        "<|start|>user<|message|>Hi<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|end|>"
        "<|start|>user<|message|>Tell me a joke.<|end|>"
        "<|start|>assistant";
    CHECK(chat(o, kConversation, harmony) == expected);
    harmony.extra_context_json.clear();  // today's date, medium effort
    CHECK(chat(o, {{"user", "Hi"}}, harmony).find("\n\nReasoning: medium\n\n") != std::string::npos);
    std::vector<int32_t> ids;
    REQUIRE(o.tokenizer->tokenize(expected, true, true, &ids).is_ok());
    const Vocab &v = o.tokenizer->vocab();
    int32_t start = -1, end = -1, ret = -1, call = -1;
    for (int32_t id = 0; id < v.size(); ++id) {
        const std::string_view t = v.text(id);
        if (t == "<|start|>") start = id;
        if (t == "<|end|>") end = id;
        if (t == "<|return|>") ret = id;
        if (t == "<|call|>") call = id;
    }
    CHECK(ids.front() == start);
    CHECK(std::count(ids.begin(), ids.end(), end) == 5);
    // llama.cpp's rule for harmony vocabularies: <|return|> and <|call|> end generation, <|end|> (between the
    // analysis and the final message) does not.
    CHECK(v.is_eog(ret));
    CHECK(v.is_eog(call));
    CHECK_FALSE(v.is_eog(end));
}

TEST_CASE("chat: the mistral family, and errors") {
    const Loaded m = load("mistral-spm");
    CHECK(m.tokenizer->vocab().chat_template().empty());
    std::string out;
    Status s = render_chat(m.tokenizer->vocab(), kConversation, ChatOptions{}, &out);
    CHECK(s.code() == KT_STATUS_NOT_FOUND);
    CHECK(s.message().find("chatml, llama3, deepseek3, mistral") != std::string::npos);

    ChatOptions mistral;
    mistral.template_name = "mistral";
    const std::vector<ChatMessage> turns = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Joke?"}};
    CHECK(chat(m, turns, mistral) == "[INST] Hi [/INST]Hello</s>[INST] Joke? [/INST]");
    s = render_chat(m.tokenizer->vocab(), kConversation, mistral, &out);  // has a system message
    CHECK(s.code() == KT_STATUS_INVALID_ARGUMENT);
    CHECK(s.message().find("alternate") != std::string::npos);
    s = render_chat(m.tokenizer->vocab(), {{"user", "a"}, {"user", "b"}}, mistral, &out);
    CHECK(s.code() == KT_STATUS_INVALID_ARGUMENT);

    ChatOptions unknown;
    unknown.template_name = "vicuna";
    s = render_chat(m.tokenizer->vocab(), turns, unknown, &out);
    CHECK(s.code() == KT_STATUS_NOT_FOUND);
    CHECK(s.message().find("vicuna") != std::string::npos);

    ChatOptions custom;
    custom.template_source = "{% for m in messages %}{{ m.role[0] | upper }}: {{ m.content }}\n{% endfor %}";
    CHECK(chat(m, turns, custom) == "U: Hi\nA: Hello\nU: Joke?\n");
    custom.template_source = "{% macro x() %}{% endmacro %}";
    s = render_chat(m.tokenizer->vocab(), turns, custom, &out);
    CHECK(s.code() == KT_STATUS_UNSUPPORTED);

    ChatOptions bad_extra;
    bad_extra.template_name = "chatml";
    bad_extra.extra_context_json = "[1]";
    CHECK(render_chat(m.tokenizer->vocab(), turns, bad_extra, &out).code() == KT_STATUS_INVALID_ARGUMENT);
    bad_extra.extra_context_json = "{\"messages\": []}";
    CHECK(render_chat(m.tokenizer->vocab(), turns, bad_extra, &out).code() == KT_STATUS_INVALID_ARGUMENT);
    bad_extra.extra_context_json = "{oops";
    CHECK(render_chat(m.tokenizer->vocab(), turns, bad_extra, &out).code() == KT_STATUS_INVALID_ARGUMENT);
}
