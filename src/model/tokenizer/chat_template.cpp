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
    KT_TRY(tmpl->render(jinja::Value::dict(std::move(context)), &text));
    if (vocab.add_bos() && !bos.empty() && text.compare(0, bos.size(), bos) == 0) text.erase(0, bos.size());
    out->append(text);
    return Status::ok();
}

}  // namespace kt::tokenizer
