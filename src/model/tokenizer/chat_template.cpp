// Chat template selection, context and the built-in families; see chat_template.h.
#include "model/tokenizer/chat_template.h"

#include <memory>

#include "core/json.h"
#include "model/tokenizer/jinja.h"

namespace kt::tokenizer {

namespace {

struct Builtin {
    const char *name;
    const char *source;
};

// Written from each family's documented prompt format. Like the models' own templates they start with
// bos_token where the format has one; render_chat removes it when the tokenizer adds BOS anyway.
constexpr Builtin kBuiltins[] = {
    {"chatml",
     "{%- for message in messages -%}"
     "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"},
    {"llama3",
     "{{- bos_token -}}"
     "{%- for message in messages -%}"
     "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' -}}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"},
    {"deepseek3",
     "{%- set ns = namespace(system='') -%}"
     "{%- for message in messages if message.role == 'system' -%}"
     "{%- set ns.system = ns.system + ('' if loop.first else '\\n\\n') + message.content -%}"
     "{%- endfor -%}"
     "{{- bos_token + ns.system -}}"
     "{%- for message in messages -%}"
     "{%- if message.role == 'user' -%}{{- '<\xef\xbd\x9cUser\xef\xbd\x9c>' + message.content -}}"
     "{%- elif message.role == 'assistant' -%}"
     "{{- '<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>' + message.content + '<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>' -}}"
     "{%- elif message.role != 'system' -%}{{- raise_exception('deepseek3: unsupported role ' + message.role) -}}"
     "{%- endif -%}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>' -}}{%- endif -%}"},
    {"mistral",
     "{{- bos_token -}}"
     "{%- for message in messages -%}"
     "{%- if (message.role == 'user') != (loop.index0 % 2 == 0) -%}"
     "{{- raise_exception('mistral: conversation roles must alternate user/assistant/user/assistant/...') -}}"
     "{%- endif -%}"
     "{%- if message.role == 'user' -%}{{- '[INST] ' + message.content + ' [/INST]' -}}"
     "{%- elif message.role == 'assistant' -%}{{- message.content + eos_token -}}"
     "{%- else -%}{{- raise_exception('mistral: only user and assistant roles are supported') -}}"
     "{%- endif -%}"
     "{%- endfor -%}"},
    // GLM-4.5 / 4.6: [gMASK]<sop>, then <|system|>, <|user|>, <|assistant|> headers each followed by a newline and
    // the text; an assistant turn opens with its reasoning in <think></think> (empty except after the last user
    // turn); a tool result is an <|observation|> turn. enable_thinking = false appends /nothink to user turns and
    // an empty think block to the generation prompt. (GLM's own template also renders tools; kt's Jinja subset
    // has no macros, which it uses, so this built-in covers the conversation itself.)
    {"glm4",
     "[gMASK]<sop>"
     "{%- set ns = namespace(last_user=-1) -%}"
     "{%- for message in messages -%}{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
     "{%- endfor -%}"
     "{%- set no_think = enable_thinking is defined and not enable_thinking -%}"
     "{%- for message in messages -%}"
     "{%- if message.role == 'system' -%}{{- '<|system|>\n' + message.content -}}"
     "{%- elif message.role == 'user' -%}{{- '<|user|>\n' + message.content -}}"
     "{%- if no_think and not message.content.endswith('/nothink') -%}{{- '/nothink' -}}{%- endif -%}"
     "{%- elif message.role == 'assistant' -%}"
     "{%- set content = message.content -%}{%- set reasoning = '' -%}"
     "{%- if '</think>' in content -%}"
     "{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}"
     "{%- set content = content.split('</think>')[-1].lstrip('\n') -%}"
     "{%- endif -%}"
     "{{- '<|assistant|>' -}}"
     "{%- if loop.index0 > ns.last_user and reasoning.strip() -%}{{- '\n<think>' + reasoning.strip() + '</think>' -}}"
     "{%- else -%}{{- '\n<think></think>' -}}{%- endif -%}"
     "{%- if content.strip() -%}{{- '\n' + content.strip() -}}{%- endif -%}"
     "{%- elif message.role == 'tool' -%}{{- '<|observation|>\n' + message.content -}}"
     "{%- else -%}{{- raise_exception('glm4: unsupported role ' + message.role) -}}"
     "{%- endif -%}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- if no_think -%}{{- '\n<think></think>' -}}{%- endif -%}"
     "{%- endif -%}"},
    // gpt-oss's harmony format: a system message (model identity, knowledge cutoff, current date, reasoning
    // effort, the valid channels), the caller's system prompt as the developer's "# Instructions", then
    // <|start|>role<|message|>text<|end|> turns, earlier assistant answers on the final channel, and <|start|>assistant
    // to generate. Variables: model_identity, reasoning_effort (low / medium / high, default medium), current_date
    // (default: today, as strftime_now gives it).
    {"harmony",
     "{%- set identity = model_identity if model_identity is defined else "
     "'You are ChatGPT, a large language model trained by OpenAI.' -%}"
     "{%- set effort = reasoning_effort if reasoning_effort is defined else 'medium' -%}"
     "{%- set date = current_date if current_date is defined else strftime_now('%Y-%m-%d') -%}"
     "{{- '<|start|>system<|message|>' + identity + '\nKnowledge cutoff: 2024-06\nCurrent date: ' + date +"
     " '\n\nReasoning: ' + effort + '\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
     "every message.<|end|>' -}}"
     "{%- set ns = namespace(developer='') -%}"
     "{%- for message in messages if message.role == 'system' or message.role == 'developer' -%}"
     "{%- set ns.developer = ns.developer + ('' if loop.first else '\n\n') + message.content -%}"
     "{%- endfor -%}"
     "{%- if ns.developer -%}{{- '<|start|>developer<|message|># Instructions\n\n' + ns.developer + '<|end|>' -}}{%- endif -%}"
     "{%- for message in messages -%}"
     "{%- if message.role == 'user' -%}{{- '<|start|>user<|message|>' + message.content + '<|end|>' -}}"
     "{%- elif message.role == 'assistant' -%}"
     "{{- '<|start|>assistant<|channel|>final<|message|>' + message.content + '<|end|>' -}}"
     // A tool result names its tool in harmony (functions.NAME); kt's messages carry no name, so it is 'functions'.
     "{%- elif message.role == 'tool' -%}"
     "{{- '<|start|>functions to=assistant<|channel|>commentary<|message|>' + message.content + '<|end|>' -}}"
     "{%- elif message.role != 'system' and message.role != 'developer' -%}"
     "{{- raise_exception('harmony: unsupported role ' + message.role) -}}"
     "{%- endif -%}"
     "{%- endfor -%}"
     "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}"},
};

constexpr const char *kReserved[] = {"messages", "add_generation_prompt", "bos_token", "eos_token"};

}  // namespace

const std::vector<std::string> &builtin_chat_template_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const Builtin &b : kBuiltins) v.emplace_back(b.name);
        return v;
    }();
    return names;
}

const char *builtin_chat_template(std::string_view name) {
    for (const Builtin &b : kBuiltins)
        if (name == b.name) return b.source;
    return nullptr;
}

Status render_chat(const Vocab &vocab, const std::vector<ChatMessage> &messages, const ChatOptions &options,
                   std::string *out) {
    std::string builtins;
    for (const std::string &n : builtin_chat_template_names()) builtins += (builtins.empty() ? "" : ", ") + n;

    std::string_view source;
    if (!options.template_source.empty()) {
        source = options.template_source;
    } else if (!options.template_name.empty()) {
        if (const char *b = builtin_chat_template(options.template_name)) {
            source = b;
        } else {
            auto it = vocab.named_chat_templates().find(options.template_name);
            if (it == vocab.named_chat_templates().end()) {
                std::string named;
                for (const auto &kv : vocab.named_chat_templates()) named += (named.empty() ? "" : ", ") + kv.first;
                return Status::error(KT_STATUS_NOT_FOUND,
                                     "chat template '%s' is neither built in (%s) nor in the model (%s)",
                                     options.template_name.c_str(), builtins.c_str(),
                                     named.empty() ? "it has no named templates" : named.c_str());
            }
            source = it->second;
        }
    } else {
        source = vocab.chat_template();
        KT_RETURN_IF(source.empty(), KT_STATUS_NOT_FOUND,
                     "the model has no tokenizer.chat_template: pass a template or name a built-in family (%s)",
                     builtins.c_str());
    }

    jinja::Dict context;
    if (!options.extra_context_json.empty()) {
        json::Value extra;
        Status s = json::parse(options.extra_context_json, &extra);
        KT_RETURN_IF(!s.is_ok(), KT_STATUS_INVALID_ARGUMENT, "chat extra context: %s", s.message().c_str());
        KT_RETURN_IF(extra.kind() != json::Value::Kind::kObject, KT_STATUS_INVALID_ARGUMENT,
                     "chat extra context must be a JSON object");
        for (const auto &[key, value] : extra.members()) {
            for (const char *r : kReserved)
                KT_RETURN_IF(key == r, KT_STATUS_INVALID_ARGUMENT, "chat extra context may not set '%s'", r);
            context.set(key, jinja::Value::from_json(value));
        }
    }
    jinja::List list;
    for (const ChatMessage &m : messages) {
        jinja::Dict d;
        d.set("role", jinja::Value::string(m.role));
        d.set("content", jinja::Value::string(m.content));
        list.push_back(jinja::Value::dict(std::move(d)));
    }
    const std::string bos = vocab.bos() >= 0 ? std::string(vocab.text(vocab.bos())) : std::string();
    const std::string eos = vocab.eos() >= 0 ? std::string(vocab.text(vocab.eos())) : std::string();
    context.set("messages", jinja::Value::list(std::move(list)));
    context.set("add_generation_prompt", jinja::Value::boolean(options.add_generation_prompt));
    context.set("bos_token", jinja::Value::string(bos));
    context.set("eos_token", jinja::Value::string(eos));

    std::unique_ptr<jinja::Template> tmpl;
    KT_TRY(jinja::Template::parse(source, &tmpl));
    std::string text;
    KT_TRY(tmpl->render(jinja::Value::dict(std::move(context)), &text, nullptr, options.limits));
    if (vocab.add_bos() && !bos.empty() && text.compare(0, bos.size(), bos) == 0) text.erase(0, bos.size());
    out->append(text);
    return Status::ok();
}

}  // namespace kt::tokenizer
