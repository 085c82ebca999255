// Loading and validating a vocabulary; see vocab.h.
#include "model/tokenizer/vocab.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>

#include "model/tokenizer/unicode.h"

namespace kt::tokenizer {

namespace {

constexpr const char *kModelKey = "tokenizer.ggml.model";
constexpr const char *kPreKey = "tokenizer.ggml.pre";
constexpr const char *kTokensKey = "tokenizer.ggml.tokens";
constexpr const char *kScoresKey = "tokenizer.ggml.scores";
constexpr const char *kTypesKey = "tokenizer.ggml.token_type";
constexpr const char *kMergesKey = "tokenizer.ggml.merges";
constexpr const char *kTemplateKey = "tokenizer.chat_template";

Status invalid(const gguf::File &file, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
Status invalid(const gguf::File &file, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::string message = vformat(fmt, args);
    va_end(args);
    return Status(KT_STATUS_INVALID_FILE, file.source_name() + ": " + message);
}

// The array under `key`, checked for element type (and, when expected_count is not 0, length).
Status get_array(const gguf::File &file, const char *key, gguf::ValueType element_type, uint64_t expected_count,
                 const gguf::KeyValue **out) {
    const gguf::KeyValue *kv = file.find(key);
    if (!kv) return Status(KT_STATUS_NOT_FOUND, file.source_name() + ": " + key + " is absent");
    if (!kv->is_array() || kv->element_type != element_type)
        return invalid(file, "%s must be an array of %s, found %s%s", key, gguf::value_type_name(element_type),
                       kv->is_array() ? "an array of " : "", gguf::value_type_name(kv->is_array() ? kv->element_type : kv->type));
    if (expected_count && kv->count != expected_count)
        return invalid(file, "%s has %llu elements but %s has %llu", key, static_cast<unsigned long long>(kv->count),
                       kTokensKey, static_cast<unsigned long long>(expected_count));
    *out = kv;
    return Status::ok();
}

template <typename T>
T element(const gguf::KeyValue &kv, uint64_t i) {
    T v;
    std::memcpy(&v, kv.data + i * sizeof(T), sizeof v);
    return v;
}

// Optional bool flag: absent leaves *value unchanged.
Status read_flag(const gguf::File &file, const char *key, bool *value) {
    const gguf::KeyValue *kv = file.find(key);
    if (!kv) return Status::ok();
    if (kv->type != gguf::ValueType::kBool)
        return invalid(file, "%s must be BOOL, found %s", key, gguf::value_type_name(kv->type));
    *value = kv->data[0] != 0;
    return Status::ok();
}

struct PreInfo {
    const char *name;
    PreTokenizer pre;
};
// The tokenizer.ggml.pre values kt implements (reference §4.2); "" and "default" select kDefault.
constexpr PreInfo kPreTokenizers[] = {
    {"default", PreTokenizer::kDefault},  {"gpt-2", PreTokenizer::kGpt2},
    {"llama3", PreTokenizer::kLlama3},    {"llama-bpe", PreTokenizer::kLlama3},
    {"llama-v3", PreTokenizer::kLlama3},  {"qwen2", PreTokenizer::kQwen2},
    {"deepseek-r1-qwen", PreTokenizer::kQwen2}, {"deepseek-v3", PreTokenizer::kDeepseek3},
    {"glm4", PreTokenizer::kGlm4},        {"chatglm-bpe", PreTokenizer::kGlm4},
    {"gpt-4o", PreTokenizer::kGpt4o},
};

// Tokens llama.cpp recognises by their text when the metadata does not name them (its lists, as of the commit the
// golden ids come from). A recognised token that is not CONTROL becomes CONTROL as well, which changes how it is
// tokenized; kt does the same so that its ids agree. Where several texts of one list exist, kt takes the first in
// list order (llama.cpp takes whichever its hash map yields first).
constexpr const char *kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "[EOT]", "<end_of_utterance>",
};
constexpr const char *kEomTexts[] = {"<|eom_id|>"};
constexpr const char *kFimPreTexts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>", "<|prefix|>"};
constexpr const char *kFimSufTexts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>", "<|suffix|>"};
constexpr const char *kFimMidTexts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>", "<|middle|>"};
constexpr const char *kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr const char *kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr const char *kFimSepTexts[] = {"<|file_sep|>"};
// End-of-generation markers (every one present counts, not just the first).
constexpr const char *kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
};
// gpt-oss: always rendered, so USER_DEFINED whatever the file says.
constexpr const char *kUserDefinedTexts[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

uint8_t attr_of_type(TokenType t) {
    switch (t) {
        case TokenType::kNormal: return kAttrNormal;
        case TokenType::kUnknown: return kAttrUnknown;
        case TokenType::kControl: return kAttrControl;
        case TokenType::kUserDefined: return kAttrUserDefined;
        case TokenType::kUnused: return kAttrUnused;
        case TokenType::kByte: return kAttrByte;
        case TokenType::kUndefined: break;
    }
    return 0;
}

bool parse_byte_token(std::string_view text, int *value) {
    const auto hex = [](char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    };
    if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return false;
    const int hi = hex(text[3]), lo = hex(text[4]);
    if (hi < 0 || lo < 0) return false;
    *value = hi * 16 + lo;
    return true;
}

}  // namespace

Status Vocab::load(const gguf::File &file, std::unique_ptr<Vocab> *out) {
    std::unique_ptr<Vocab> v(new Vocab());
    KT_TRY(v->read_settings(file));
    KT_TRY(v->read_tokens(file));
    KT_TRY(v->read_special_ids(file));
    KT_TRY(v->read_byte_tokens());
    if (v->model_ == ModelKind::kBpe) KT_TRY(v->read_merges(file));
    v->detect_special_by_text();

    if (v->add_bos_ && v->bos_ == kNoToken)
        return invalid(file, "tokenizer.ggml.add_bos_token is true but the vocabulary has no BOS token");
    if (v->add_eos_ && v->eos_ == kNoToken)
        return invalid(file, "tokenizer.ggml.add_eos_token is true but the vocabulary has no EOS token");

    // Special tokens are matched longest first; equal lengths by id, so the order never depends on a sort's
    // stability (llama.cpp leaves ties to std::sort).
    for (int32_t id = 0; id < v->size(); ++id) {
        if (v->attr(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v->special_tokens_.push_back(id);
    }
    std::stable_sort(v->special_tokens_.begin(), v->special_tokens_.end(),
                     [&](int32_t a, int32_t b) { return v->text(a).size() > v->text(b).size(); });

    // Chat templates: the default and the named variants.
    const std::string_view template_key = kTemplateKey;
    for (const gguf::KeyValue &kv : file.metadata()) {
        const bool is_default = kv.key == template_key;
        const bool is_named = kv.key.size() > template_key.size() + 1 && kv.key.substr(0, template_key.size()) == template_key &&
                              kv.key[template_key.size()] == '.';
        if (!is_default && !is_named) continue;
        if (kv.type != gguf::ValueType::kString)
            return invalid(file, "%s must be STRING, found %s", std::string(kv.key).c_str(), gguf::value_type_name(kv.type));
        if (is_default) v->chat_template_ = std::string(kv.strings[0]);
        else v->named_templates_[std::string(kv.key.substr(template_key.size() + 1))] = std::string(kv.strings[0]);
    }
    *out = std::move(v);
    return Status::ok();
}

Status Vocab::read_settings(const gguf::File &file) {
    const gguf::KeyValue *kv = file.find(kModelKey);
    if (!kv) return Status(KT_STATUS_NOT_FOUND, file.source_name() + ": the file has no tokenizer (" + kModelKey + " is absent)");
    if (kv->type != gguf::ValueType::kString)
        return invalid(file, "%s must be STRING, found %s", kModelKey, gguf::value_type_name(kv->type));
    const std::string_view model = kv->strings[0];
    if (model == "gpt2") {
        model_ = ModelKind::kBpe;
        clean_spaces_ = true;
        const gguf::KeyValue *pre = file.find(kPreKey);
        if (pre && pre->type != gguf::ValueType::kString)
            return invalid(file, "%s must be STRING, found %s", kPreKey, gguf::value_type_name(pre->type));
        pre_name_ = pre ? std::string(pre->strings[0]) : std::string();
        const PreInfo *found = nullptr;
        for (const PreInfo &p : kPreTokenizers)
            if (pre_name_ == p.name) found = &p;
        if (pre_name_.empty()) found = &kPreTokenizers[0];  // llama.cpp: missing means "default"
        if (!found) {
            std::string known;
            for (const PreInfo &p : kPreTokenizers) known += std::string(known.empty() ? "" : ", ") + p.name;
            return Status(KT_STATUS_UNSUPPORTED, file.source_name() + ": " + kPreKey + " '" + pre_name_ +
                                                     "' is not supported (kt implements: " + known + ")");
        }
        pre_ = found->pre;
        if (pre_ == PreTokenizer::kLlama3) {
            ignore_merges_ = true;  // a whole pre-token found in the vocabulary is emitted as is
            add_bos_ = true;
        }
        // Which pre-tokenizers skip Hugging Face's clean-up of spaces in detokenized text (llama.cpp's per-type
        // settings; glm4 and gpt-4o from its source, not checked against its output here: no llama.cpp on this
        // machine).
        if (pre_ == PreTokenizer::kQwen2 || pre_ == PreTokenizer::kDeepseek3 || pre_ == PreTokenizer::kGlm4 ||
            pre_ == PreTokenizer::kGpt4o)
            clean_spaces_ = false;
    } else if (model == "llama") {
        model_ = ModelKind::kSpm;
        add_bos_ = true;
        add_space_prefix_ = true;
        pre_name_ = "default";
    } else {
        return Status(KT_STATUS_UNSUPPORTED, file.source_name() + ": " + kModelKey + " '" + std::string(model) +
                                                 "' is not supported (kt implements \"gpt2\" and \"llama\")");
    }
    KT_TRY(read_flag(file, "tokenizer.ggml.add_bos_token", &add_bos_));
    KT_TRY(read_flag(file, "tokenizer.ggml.add_eos_token", &add_eos_));
    KT_TRY(read_flag(file, "tokenizer.ggml.add_space_prefix", &add_space_prefix_));
    return Status::ok();
}

Status Vocab::read_tokens(const gguf::File &file) {
    const gguf::KeyValue *tokens = nullptr;
    KT_TRY(get_array(file, kTokensKey, gguf::ValueType::kString, 0, &tokens));
    const uint64_t n = tokens->count;
    if (n == 0) return invalid(file, "%s is empty", kTokensKey);
    if (n > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        return invalid(file, "%s has %llu tokens, more than token ids can address", kTokensKey, static_cast<unsigned long long>(n));

    // Texts into one buffer. An empty token becomes "[EMPTY_<id>]", as in llama.cpp, so every id has a piece.
    uint64_t total = 0;
    for (std::string_view s : tokens->strings) total += (s.empty() ? 32 : s.size()) + 1;
    if (total > std::numeric_limits<uint32_t>::max()) return invalid(file, "%s: token texts exceed 4 GiB", kTokensKey);
    texts_.reserve(total);
    offsets_.reserve(n + 1);
    offsets_.push_back(0);
    for (uint64_t i = 0; i < n; ++i) {
        const std::string_view s = tokens->strings[i];
        if (s.empty()) texts_ += "[EMPTY_" + std::to_string(i) + "]";
        else texts_.append(s);
        texts_.push_back('\0');
        offsets_.push_back(static_cast<uint32_t>(texts_.size()));
    }

    attrs_.assign(n, kAttrNormal);
    const gguf::KeyValue *types = nullptr;
    Status s = get_array(file, kTypesKey, gguf::ValueType::kInt32, n, &types);
    if (s.is_ok()) {
        for (uint64_t i = 0; i < n; ++i) {
            const int32_t t = element<int32_t>(*types, i);
            if (t < 0 || t >= kTokenTypeCount)
                return invalid(file, "%s[%llu] = %d is not a token type (0..6)", kTypesKey, static_cast<unsigned long long>(i), t);
            attrs_[i] = attr_of_type(static_cast<TokenType>(t));
        }
    } else if (s.code() != KT_STATUS_NOT_FOUND) {
        return s;
    }

    const gguf::KeyValue *scores = nullptr;
    s = get_array(file, kScoresKey, gguf::ValueType::kFloat32, n, &scores);
    if (s.is_ok()) {
        scores_.resize(n);
        for (uint64_t i = 0; i < n; ++i) scores_[i] = element<float>(*scores, i);
    } else if (s.code() != KT_STATUS_NOT_FOUND) {
        return s;
    }

    by_text_.build(size(), [this](int32_t id) { return text(id); });  // the last of repeated texts wins

    byte_values_.assign(n, -1);
    for (uint64_t i = 0; i < n; ++i) {
        if (!(attrs_[i] & kAttrByte)) continue;
        int value;
        if (!parse_byte_token(text(static_cast<int32_t>(i)), &value))
            return invalid(file, "%s[%llu] has type BYTE but its text '%s' is not <0xNN>", kTokensKey,
                           static_cast<unsigned long long>(i), std::string(text(static_cast<int32_t>(i))).c_str());
        byte_values_[i] = static_cast<int16_t>(value);
    }
    return Status::ok();
}

Status Vocab::read_special_ids(const gguf::File &file) {
    if (model_ == ModelKind::kSpm) {  // llama.cpp's SentencePiece defaults, when they exist
        if (size() > 0) unk_ = 0;
        if (size() > 1) bos_ = 1;
        if (size() > 2) eos_ = 2;
    }
    struct Special {
        const char *key;
        int32_t *id;  // nullptr: validated only
    };
    const Special specials[] = {
        {"tokenizer.ggml.bos_token_id", &bos_},        {"tokenizer.ggml.eos_token_id", &eos_},
        {"tokenizer.ggml.eot_token_id", &eot_},        {"tokenizer.ggml.eom_token_id", &eom_},
        {"tokenizer.ggml.unknown_token_id", &unk_},    {"tokenizer.ggml.seperator_token_id", &sep_},
        {"tokenizer.ggml.padding_token_id", &pad_},    {"tokenizer.ggml.cls_token_id", nullptr},
        {"tokenizer.ggml.mask_token_id", nullptr},     {"tokenizer.ggml.fim_pre_token_id", &fim_pre_},
        {"tokenizer.ggml.fim_suf_token_id", &fim_suf_}, {"tokenizer.ggml.fim_mid_token_id", &fim_mid_},
        {"tokenizer.ggml.fim_pad_token_id", &fim_pad_}, {"tokenizer.ggml.fim_rep_token_id", &fim_rep_},
        {"tokenizer.ggml.fim_sep_token_id", &fim_sep_}, {"tokenizer.ggml.prefix_token_id", &fim_pre_},
        {"tokenizer.ggml.suffix_token_id", &fim_suf_},  {"tokenizer.ggml.middle_token_id", &fim_mid_},
    };
    for (const Special &sp : specials) {
        const gguf::KeyValue *kv = file.find(sp.key);
        if (!kv) continue;
        int64_t id;
        if (kv->is_array() || !gguf::is_integer_type(kv->type) || !gguf::value_to_int(kv->type, kv->data, &id))
            return invalid(file, "%s must be an integer, found %s", sp.key, gguf::value_type_name(kv->type));
        if (id < 0 || id >= size())
            return invalid(file, "%s = %lld is outside the vocabulary (%d tokens)", sp.key, static_cast<long long>(id), size());
        if (sp.id) *sp.id = static_cast<int32_t>(id);
    }
    return Status::ok();
}

Status Vocab::read_byte_tokens() {
    static const char *hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = find(std::string_view(name, 6));
        if (id == kNoToken) {
            const char c = static_cast<char>(b);
            id = find(std::string_view(&c, 1));
        }
        byte_tokens_[static_cast<size_t>(b)] = id;
    }
    return Status::ok();
}

Status Vocab::read_merges(const gguf::File &file) {
    const gguf::KeyValue *merges = nullptr;
    Status s = get_array(file, kMergesKey, gguf::ValueType::kString, 0, &merges);
    if (s.code() == KT_STATUS_NOT_FOUND) return invalid(file, "%s is required for tokenizer model gpt2", kMergesKey);
    KT_TRY(std::move(s));
    if (merges->count > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
        return invalid(file, "%s has too many entries", kMergesKey);

    // Symbol ids: token ids for token texts, ids past the vocabulary for other strings met in merges.
    std::unordered_map<std::string, int32_t> extra;
    const auto symbol = [&](std::string_view text, uint64_t hash) -> int32_t {
        const int32_t id = find_hashed(text, hash);
        if (id != kNoToken) return id;
        auto [it, inserted] = extra.emplace(std::string(text), size() + static_cast<int32_t>(extra.size()));
        if (inserted) merges_.extra_symbols.push_back(it->first);
        return it->second;
    };

    // Three lookups per merge in a table of megabytes are cache misses; doing them in batches, with the slots
    // prefetched while the next strings are hashed, cuts the load time of a 280k-merge vocabulary severalfold.
    constexpr size_t kBatch = 32;
    struct Pending {
        std::string_view left, right;
        std::string joined;
        uint64_t h_left, h_right, h_joined;
    };
    std::vector<Pending> batch(kBatch);
    merges_.by_pair.reserve(static_cast<size_t>(merges->count));
    for (uint64_t first = 0; first < merges->count; first += kBatch) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kBatch, merges->count - first));
        for (size_t k = 0; k < n; ++k) {
            const uint64_t i = first + k;
            const std::string_view m = merges->strings[i];
            // "LEFT RIGHT": split at the first space after the first byte (a left side may itself be a space).
            const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
            if (space == std::string_view::npos || space + 1 >= m.size())
                return invalid(file, "%s[%llu] = '%s' is not a 'LEFT RIGHT' pair", kMergesKey,
                               static_cast<unsigned long long>(i), std::string(m.substr(0, 64)).c_str());
            Pending &p = batch[k];
            p.left = m.substr(0, space);
            p.right = m.substr(space + 1);
            p.joined.assign(p.left).append(p.right);
            p.h_left = hash_bytes(p.left);
            p.h_right = hash_bytes(p.right);
            p.h_joined = hash_bytes(p.joined);
            by_text_.prefetch(p.h_left);
            by_text_.prefetch(p.h_right);
            by_text_.prefetch(p.h_joined);
        }
        for (size_t k = 0; k < n; ++k) {
            const Pending &p = batch[k];
            const int32_t l = symbol(p.left, p.h_left), r = symbol(p.right, p.h_right), result = symbol(p.joined, p.h_joined);
            // The first of repeated pairs wins, as in llama.cpp.
            merges_.by_pair.insert(BpeMerges::key(l, r), BpeMerges::Merge{static_cast<int32_t>(first + k), result});
        }
    }

    for (int b = 0; b < 256; ++b) {
        std::string mapped;
        unicode::append_utf8(&mapped, unicode::byte_to_code_point(static_cast<uint8_t>(b)));
        const int32_t id = find(mapped);
        auto it = extra.find(mapped);
        merges_.byte_symbol[static_cast<size_t>(b)] = id != kNoToken ? id : it != extra.end() ? it->second : kNoToken;
        for (char c : mapped) {
            const int32_t single = find(std::string_view(&c, 1));
            if (single != kNoToken) merges_.byte_fallback[static_cast<size_t>(b)].push_back(single);
        }
    }
    return Status::ok();
}

void Vocab::detect_special_by_text() {
    const auto make_control = [&](int32_t id) { attrs_[static_cast<size_t>(id)] |= kAttrControl; };
    struct Role {
        int32_t *id;
        const char *const *texts;
        size_t count;
    };
    const Role roles[] = {
        {&eot_, kEotTexts, std::size(kEotTexts)},          {&eom_, kEomTexts, std::size(kEomTexts)},
        {&fim_pre_, kFimPreTexts, std::size(kFimPreTexts)}, {&fim_suf_, kFimSufTexts, std::size(kFimSufTexts)},
        {&fim_mid_, kFimMidTexts, std::size(kFimMidTexts)}, {&fim_pad_, kFimPadTexts, std::size(kFimPadTexts)},
        {&fim_rep_, kFimRepTexts, std::size(kFimRepTexts)}, {&fim_sep_, kFimSepTexts, std::size(kFimSepTexts)},
    };
    for (const Role &r : roles) {
        if (*r.id != kNoToken) continue;
        for (size_t i = 0; i < r.count; ++i) {
            const int32_t id = find(r.texts[i]);
            if (id == kNoToken) continue;
            *r.id = id;
            make_control(id);
            break;
        }
    }
    for (const char *t : kEogTexts) {
        const int32_t id = find(t);
        if (id == kNoToken) continue;
        eog_.push_back(id);
        make_control(id);
    }
    for (const char *t : kUserDefinedTexts) {
        const int32_t id = find(t);
        if (id != kNoToken) attrs_[static_cast<size_t>(id)] = kAttrUserDefined;
    }
    for (int32_t id : {eos_, eot_, eom_, fim_pad_, fim_rep_, fim_sep_})
        if (id != kNoToken) eog_.push_back(id);
    std::sort(eog_.begin(), eog_.end());
    eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());

    // llama.cpp's two corrections: with <|return|> and <|call|> (gpt-oss) or <|calls|> and <|flush|> (solar-open),
    // <|end|> does not end generation and becomes USER_DEFINED; with <|tool_response> (gemma4), </s> is ordinary.
    const auto eog_has = [&](const char *text) {
        const int32_t id = find(text);
        return id != kNoToken && is_eog(id) ? id : kNoToken;
    };
    const auto drop_eog = [&](int32_t id, uint8_t attr) {
        eog_.erase(std::find(eog_.begin(), eog_.end(), id));
        attrs_[static_cast<size_t>(id)] = attr;
    };
    const int32_t end = eog_has("<|end|>");
    const bool has_call = eog_has("<|call|>") != kNoToken || eog_has("<|calls|>") != kNoToken;
    if (end != kNoToken && has_call && (eog_has("<|return|>") != kNoToken || eog_has("<|flush|>") != kNoToken))
        drop_eog(end, kAttrUserDefined);
    const int32_t s_end = eog_has("</s>");
    if (s_end != kNoToken && eog_has("<|tool_response>") != kNoToken) drop_eog(s_end, kAttrNormal);
}

TokenType Vocab::type(int32_t id) const {
    const uint8_t a = attr(id);
    if (a & kAttrControl) return TokenType::kControl;
    if (a & kAttrUserDefined) return TokenType::kUserDefined;
    if (a & kAttrUnknown) return TokenType::kUnknown;
    if (a & kAttrByte) return TokenType::kByte;
    if (a & kAttrUnused) return TokenType::kUnused;
    if (a & kAttrNormal) return TokenType::kNormal;
    return TokenType::kUndefined;
}

bool Vocab::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

}  // namespace kt::tokenizer
