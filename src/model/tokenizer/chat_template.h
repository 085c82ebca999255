// Chat templates: turning a conversation (role/content messages) into the prompt text a model was trained on.
//
// The template is the model's own tokenizer.chat_template (or a named variant tokenizer.chat_template.<name>),
// run by kt's Jinja-subset interpreter (jinja.h), so any template within that subset renders exactly as Hugging
// Face's apply_chat_template would. The caller may override it with a template source, or name one of kt's
// built-in families, written from each family's documented format:
//   chatml     <|im_start|>role\ncontent<|im_end|>\n ... (Qwen, many others)
//   llama3     <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> ...
//   deepseek3  system prompt, <｜User｜>content, <｜Assistant｜>content<｜end▁of▁sentence｜>
//   mistral    [INST] user [/INST]assistant</s> (user and assistant alternate; no system role)
//   glm4       [gMASK]<sop><|system|>\n... <|user|>\n... <|assistant|>\n<think></think>\n... (GLM-4.5 / 4.6)
//   harmony    <|start|>role<|message|>...<|end|> with a system and a developer message (gpt-oss)
// When the vocabulary adds BOS itself, a BOS at the start of the rendering is removed (as llama.cpp does), so the
// text tokenized with add_special and parse_special has exactly one BOS.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/tokenizer/jinja.h"
#include "model/tokenizer/vocab.h"

namespace kt::tokenizer {

struct ChatMessage {
    std::string role;
    std::string content;
};

struct ChatOptions {
    bool add_generation_prompt = true;
    std::string template_name;       // a built-in family or a tokenizer.chat_template.<name>; "" for the default
    std::string template_source;     // a Jinja template overriding everything else; "" for none
    std::string extra_context_json;  // a JSON object of further template variables, e.g. {"enable_thinking": false}
    jinja::Limits limits;            // the render's budgets: kt.h always uses the defaults (jinja.h)
};

// The built-in family templates' names, and the source of one (nullptr for an unknown name).
const std::vector<std::string> &builtin_chat_template_names();
const char *builtin_chat_template(std::string_view name);

// Renders `messages` and appends the text to *out. NOT_FOUND when no template is given and the model has none
// (or the named one does not exist); UNSUPPORTED when the template uses Jinja that kt does not implement;
// INVALID_ARGUMENT for malformed extra context or when the template rejects the conversation (raise_exception,
// e.g. roles that do not alternate).
Status render_chat(const Vocab &vocab, const std::vector<ChatMessage> &messages, const ChatOptions &options,
                   std::string *out);

}  // namespace kt::tokenizer
