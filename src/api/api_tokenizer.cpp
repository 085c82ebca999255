// kt_vocab_*, kt_token_*, kt_tokenize, kt_detokenize, kt_detokenizer_*, kt_chat_*: the tokenizer behind the C ABI.
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/api_internal.h"
#include "model/tokenizer/chat_template.h"

using kt::Status;
using kt::api::guard;
using kt::api::guard_on;
using kt::tokenizer::Tokenizer;

struct kt_detokenizer {
    kt_detokenizer(const Tokenizer &tokenizer, bool unparse_special) : stream(tokenizer, unparse_special) {}
    kt::tokenizer::DetokenizeStream stream;
    kt_error_slot error;
};

namespace {

Status require(bool condition, const char *what) {
    if (condition) return Status::ok();
    return Status::error(KT_STATUS_INVALID_ARGUMENT, "%s", what);
}

Status tokenizer_of(const kt_model *model, const Tokenizer **out) {
    KT_TRY(require(model != nullptr, "model is NULL"));
    return model->tokenizer.get(*model->file, out);
}

Status check_token(const Tokenizer &tok, int32_t token) {
    KT_RETURN_IF(!tok.vocab().valid(token), KT_STATUS_INVALID_ARGUMENT, "token id %d is outside the vocabulary (%d tokens)",
                 token, tok.vocab().size());
    return Status::ok();
}

// Copies `bytes` plus a NUL into the caller's buffer, or reports the size needed (see kt.h's size negotiation).
Status put_text(std::string_view bytes, char *buf, int64_t capacity, int64_t *out_length, const char *what) {
    KT_TRY(require(out_length != nullptr, "out_length is NULL"));
    KT_TRY(require(capacity >= 0, "capacity is negative"));
    *out_length = static_cast<int64_t>(bytes.size());
    KT_RETURN_IF(static_cast<uint64_t>(capacity) < bytes.size() + 1, KT_STATUS_BUFFER_TOO_SMALL,
                 "%s: %zu bytes (plus a NUL) do not fit in a buffer of %lld", what, bytes.size(),
                 static_cast<long long>(capacity));
    KT_TRY(require(buf != nullptr, "buf is NULL"));
    if (!bytes.empty()) std::memcpy(buf, bytes.data(), bytes.size());  // an empty view may have a null data()
    buf[bytes.size()] = '\0';
    return Status::ok();
}

}  // namespace

extern "C" {

KT_API kt_status kt_vocab_get_info(const kt_model *model, kt_vocab_info *out_info) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        KT_TRY(require(out_info != nullptr, "kt_vocab_get_info: out_info is NULL"));
        const kt::tokenizer::Vocab &v = tok->vocab();
        kt_vocab_info info = kt::api::zeroed_struct<kt_vocab_info>();
        info.kind = v.model() == kt::tokenizer::ModelKind::kBpe ? KT_VOCAB_BPE : KT_VOCAB_SPM;
        info.n_tokens = v.size();
        info.bos = v.bos();
        info.eos = v.eos();
        info.eot = v.eot();
        info.eom = v.eom();
        info.unk = v.unk();
        info.pad = v.pad();
        info.add_bos = v.add_bos();
        info.add_eos = v.add_eos();
        info.add_space_prefix = v.add_space_prefix();
        info.pre = v.pre_name().c_str();
        return kt::api::write_struct(info, out_info, "kt_vocab_get_info: out_info");
    });
}

KT_API kt_status kt_token_text(const kt_model *model, int32_t token, const char **out_text, uint64_t *out_length) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        KT_TRY(require(out_text != nullptr, "kt_token_text: out_text is NULL"));
        KT_TRY(check_token(*tok, token));
        const std::string_view text = tok->vocab().text(token);
        *out_text = tok->vocab().text_c_str(token);
        if (out_length) *out_length = text.size();
        return Status::ok();
    });
}

KT_API kt_status kt_token_type(const kt_model *model, int32_t token, int32_t *out_type) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        KT_TRY(require(out_type != nullptr, "kt_token_type: out_type is NULL"));
        KT_TRY(check_token(*tok, token));
        *out_type = static_cast<int32_t>(tok->vocab().type(token));
        return Status::ok();
    });
}

KT_API kt_status kt_token_is_eog(const kt_model *model, int32_t token, int32_t *out_is_eog) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        KT_TRY(require(out_is_eog != nullptr, "kt_token_is_eog: out_is_eog is NULL"));
        KT_TRY(check_token(*tok, token));
        *out_is_eog = tok->vocab().is_eog(token) ? 1 : 0;
        return Status::ok();
    });
}

KT_API kt_status kt_token_find(const kt_model *model, const char *text, uint64_t text_len, int32_t *out_token) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        KT_TRY(require(text != nullptr || text_len == 0, "kt_token_find: text is NULL"));
        KT_TRY(require(out_token != nullptr, "kt_token_find: out_token is NULL"));
        const int32_t id = tok->vocab().find(std::string_view(text ? text : "", static_cast<size_t>(text_len)));
        KT_RETURN_IF(id == kt::tokenizer::kNoToken, KT_STATUS_NOT_FOUND, "no token has the text '%.*s'",
                     static_cast<int>(std::min<uint64_t>(text_len, 200)), text);
        *out_token = id;
        return Status::ok();
    });
}

KT_API kt_status kt_tokenize(const kt_model *model, const char *text, uint64_t text_len, int32_t add_special,
                             int32_t parse_special, int32_t *tokens, int64_t capacity, int64_t *out_count) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        KT_TRY(require(text != nullptr || text_len == 0, "kt_tokenize: text is NULL"));
        KT_TRY(require(out_count != nullptr, "kt_tokenize: out_count is NULL"));
        KT_TRY(require(capacity >= 0, "kt_tokenize: capacity is negative"));
        std::vector<int32_t> ids;
        KT_TRY(tok->tokenize(std::string_view(text ? text : "", static_cast<size_t>(text_len)), add_special != 0,
                             parse_special != 0, &ids));
        *out_count = static_cast<int64_t>(ids.size());
        KT_RETURN_IF(static_cast<uint64_t>(capacity) < ids.size(), KT_STATUS_BUFFER_TOO_SMALL,
                     "kt_tokenize: %zu tokens do not fit in a buffer of %lld", ids.size(), static_cast<long long>(capacity));
        KT_TRY(require(tokens != nullptr || ids.empty(), "kt_tokenize: tokens is NULL"));
        if (!ids.empty()) std::memcpy(tokens, ids.data(), ids.size() * sizeof(int32_t));
        return Status::ok();
    });
}

KT_API kt_status kt_token_to_piece(const kt_model *model, int32_t token, int32_t special, int32_t lstrip, char *buf,
                                   int64_t capacity, int64_t *out_length) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        std::string_view piece;
        KT_TRY(tok->token_to_piece(token, special != 0, lstrip != 0, &piece));
        return put_text(piece, buf, capacity, out_length, "kt_token_to_piece");
    });
}

KT_API kt_status kt_detokenize(const kt_model *model, const int32_t *tokens, int64_t n_tokens, int32_t remove_special,
                               int32_t unparse_special, char *buf, int64_t capacity, int64_t *out_length) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        KT_TRY(require(n_tokens >= 0, "kt_detokenize: n_tokens is negative"));
        KT_TRY(require(tokens != nullptr || n_tokens == 0, "kt_detokenize: tokens is NULL"));
        std::string text;
        KT_TRY(tok->detokenize(tokens, static_cast<size_t>(n_tokens), remove_special != 0, unparse_special != 0, &text));
        return put_text(text, buf, capacity, out_length, "kt_detokenize");
    });
}

KT_API kt_status kt_detokenizer_create(const kt_model *model, int32_t unparse_special, kt_detokenizer **out,
                                       kt_error *err) {
    if (out) *out = nullptr;
    Status s = guard([&]() -> Status {
        KT_TRY(require(out != nullptr, "kt_detokenizer_create: out is NULL"));
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        *out = new kt_detokenizer(*tok, unparse_special != 0);
        return Status::ok();
    });
    kt::api::fill_error(err, s);
    return s.code();
}

KT_API void kt_detokenizer_free(kt_detokenizer *detokenizer) { delete detokenizer; }

KT_API kt_status kt_detokenizer_push(kt_detokenizer *detokenizer, int32_t token, char *buf, int64_t capacity,
                                     int64_t *out_length) {
    return guard_on(detokenizer, [&]() -> Status {
        KT_TRY(require(detokenizer != nullptr, "detokenizer is NULL"));
        // Work on a copy, so a buffer that is too small leaves the stream as it was.
        kt::tokenizer::DetokenizeStream next = detokenizer->stream;
        std::string text;
        KT_TRY(next.push(token, &text));
        KT_TRY(put_text(text, buf, capacity, out_length, "kt_detokenizer_push"));
        detokenizer->stream = std::move(next);
        return Status::ok();
    });
}

KT_API kt_status kt_detokenizer_flush(kt_detokenizer *detokenizer, char *buf, int64_t capacity, int64_t *out_length) {
    return guard_on(detokenizer, [&]() -> Status {
        KT_TRY(require(detokenizer != nullptr, "detokenizer is NULL"));
        kt::tokenizer::DetokenizeStream next = detokenizer->stream;
        std::string text;
        next.flush(&text);
        KT_TRY(put_text(text, buf, capacity, out_length, "kt_detokenizer_flush"));
        detokenizer->stream = std::move(next);
        return Status::ok();
    });
}

KT_API const char *kt_detokenizer_last_error(const kt_detokenizer *detokenizer) {
    if (!detokenizer) return "detokenizer is NULL";
    return detokenizer->error.get();
}

KT_API void kt_chat_params_init(kt_chat_params *params) {
    if (!params) return;
    *params = kt::api::zeroed_struct<kt_chat_params>();
    params->add_generation_prompt = 1;
}

KT_API kt_status kt_chat_apply_template(const kt_model *model, const kt_chat_message *messages, int64_t n_messages,
                                        const kt_chat_params *params, char *buf, int64_t capacity,
                                        int64_t *out_length) {
    return guard_on(model, [&]() -> Status {
        const Tokenizer *tok;
        KT_TRY(tokenizer_of(model, &tok));
        KT_TRY(require(n_messages >= 0, "kt_chat_apply_template: n_messages is negative"));
        KT_TRY(require(messages != nullptr || n_messages == 0, "kt_chat_apply_template: messages is NULL"));
        kt_chat_params p;
        kt_chat_params_init(&p);
        if (params) KT_TRY(kt::api::read_struct(params, &p, "kt_chat_apply_template: params"));
        kt::tokenizer::ChatOptions options;
        options.add_generation_prompt = p.add_generation_prompt != 0;
        if (p.template_name) options.template_name = p.template_name;
        if (p.template_source) options.template_source = p.template_source;
        if (p.extra_context_json) options.extra_context_json = p.extra_context_json;
        std::vector<kt::tokenizer::ChatMessage> list;
        for (int64_t i = 0; i < n_messages; ++i) {
            KT_RETURN_IF(!messages[i].role || !messages[i].content, KT_STATUS_INVALID_ARGUMENT,
                         "kt_chat_apply_template: messages[%lld] has a NULL role or content", static_cast<long long>(i));
            list.push_back({messages[i].role, messages[i].content});
        }
        std::string text;
        KT_TRY(kt::tokenizer::render_chat(tok->vocab(), list, options, &text));
        return put_text(text, buf, capacity, out_length, "kt_chat_apply_template");
    });
}

}  // extern "C"
