// A tokenizer vocabulary read from GGUF metadata (reference/gguf-and-quants.md §4), validated in full.
//
// Every array is checked for element type and length before use, special-token ids must lie inside the
// vocabulary, merges must be "LEFT RIGHT" pairs and byte tokens "<0xNN>"; a malformed vocabulary is
// KT_STATUS_INVALID_FILE with a message naming the key and the index (llama.cpp read these arrays through
// unchecked pointers: GHSA-8wwf-w4qm-gpqr, GHSA-g4cc-763q-h9h6, the <0x-1> byte token, special-id OOB reads).
//
// The token texts are copied into one buffer the Vocab owns, so it does not depend on the GGUF file afterwards.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/flat_hash.h"

namespace kt::tokenizer {

// GGUF's tokenizer.ggml.token_type values (the numbering of kt.h's KT_TOKEN_TYPE_*).
enum class TokenType : uint8_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
};
constexpr int32_t kTokenTypeCount = 7;

// What the tokenizer does with a token, as bits (llama.cpp's token attributes): GGUF's type sets one bit, and
// tokens recognised by their text (end-of-generation markers) gain kControl on top, as in llama.cpp.
enum TokenAttr : uint8_t {
    kAttrUnknown = 1 << 0,
    kAttrUnused = 1 << 1,
    kAttrNormal = 1 << 2,
    kAttrControl = 1 << 3,
    kAttrUserDefined = 1 << 4,
    kAttrByte = 1 << 5,
};

enum class ModelKind { kBpe, kSpm };  // tokenizer.ggml.model "gpt2" / "llama"

// tokenizer.ggml.pre for byte-level BPE: selects the splitting patterns (pretokenize.h).
enum class PreTokenizer { kDefault, kGpt2, kLlama3, kQwen2, kDeepseek3, kGlm4, kGpt4o };

constexpr int32_t kNoToken = -1;

// Merge ranks for byte-level BPE. Every string that appears in a merge (either side or the result) gets a
// symbol id: a token's id when the string is a token, else an id past the vocabulary. BPE then works on
// integer pairs and never builds a string.
struct BpeMerges {
    struct Merge {
        int32_t rank;
        int32_t result;  // symbol id of LEFT+RIGHT
    };
    U64Map<Merge> by_pair;                         // key: left symbol id << 32 | right symbol id
    std::array<int32_t, 256> byte_symbol{};        // symbol id of each byte's mapped character (-1: none)
    // What llama.cpp emits for a final symbol that is not a token: each byte of the symbol's mapped text looked
    // up as a one-byte token (bytes that are no token are dropped). Indexed by the raw byte.
    std::array<std::vector<int32_t>, 256> byte_fallback;
    std::vector<std::string> extra_symbols;  // texts of symbol ids >= vocabulary size, in id order

    static uint64_t key(int32_t left, int32_t right) {
        return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
    }
    const Merge *find(int32_t left, int32_t right) const { return by_pair.find(key(left, right)); }
};

class Vocab {
public:
    // Reads and validates the tokenizer.ggml.* keys of `file`. NOT_FOUND when the file has no tokenizer,
    // UNSUPPORTED for a tokenizer model or pre-tokenizer kt does not implement, INVALID_FILE when malformed.
    static Status load(const gguf::File &file, std::unique_ptr<Vocab> *out);

    ModelKind model() const { return model_; }
    PreTokenizer pre() const { return pre_; }
    const std::string &pre_name() const { return pre_name_; }
    int32_t size() const { return static_cast<int32_t>(attrs_.size()); }
    bool valid(int32_t id) const { return id >= 0 && id < size(); }

    std::string_view text(int32_t id) const {
        const size_t i = static_cast<size_t>(id);
        return std::string_view(texts_.data() + offsets_[i], offsets_[i + 1] - offsets_[i] - 1);
    }
    const char *text_c_str(int32_t id) const { return texts_.data() + offsets_[static_cast<size_t>(id)]; }
    uint8_t attr(int32_t id) const { return attrs_[static_cast<size_t>(id)]; }
    // The token's type as the tokenizer treats it: control > user-defined > unknown > byte > unused > normal.
    TokenType type(int32_t id) const;
    float score(int32_t id) const { return scores_.empty() ? 0.0f : scores_[static_cast<size_t>(id)]; }
    // The id whose text is `text` (the last one when texts repeat, as in llama.cpp), or kNoToken.
    int32_t find(std::string_view text) const {
        return by_text_.find(text, [this](int32_t id) { return this->text(id); });
    }
    int32_t find_hashed(std::string_view text, uint64_t hash) const {
        return by_text_.find_hashed(text, hash, [this](int32_t id) { return this->text(id); });
    }
    // Tokens matched whole before pre-tokenization: CONTROL, USER_DEFINED and UNKNOWN, longest text first.
    const std::vector<int32_t> &special_tokens() const { return special_tokens_; }
    // The byte value of a BYTE token ("<0x41>" -> 0x41), or -1.
    int byte_value(int32_t id) const { return byte_values_.empty() ? -1 : byte_values_[static_cast<size_t>(id)]; }
    // SentencePiece: the token for a raw byte ("<0xNN>", else the one-character token), or kNoToken.
    int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }

    int32_t bos() const { return bos_; }
    int32_t eos() const { return eos_; }
    int32_t eot() const { return eot_; }
    int32_t eom() const { return eom_; }
    int32_t unk() const { return unk_; }
    int32_t pad() const { return pad_; }
    int32_t sep() const { return sep_; }
    // Ends generation: eos, eot, eom, fim pad/rep/sep and the tokens llama.cpp recognises by text (<|im_end|>,
    // <|eot_id|>, </s> ...).
    bool is_eog(int32_t id) const;
    const std::vector<int32_t> &eog_tokens() const { return eog_; }

    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool add_space_prefix() const { return add_space_prefix_; }
    bool clean_spaces() const { return clean_spaces_; }
    bool ignore_merges() const { return ignore_merges_; }

    const BpeMerges &merges() const { return merges_; }
    // tokenizer.chat_template ("" when absent) and the named variants tokenizer.chat_template.<name>.
    const std::string &chat_template() const { return chat_template_; }
    const std::unordered_map<std::string, std::string> &named_chat_templates() const { return named_templates_; }

private:
    Vocab() = default;
    Status read_tokens(const gguf::File &file);
    Status read_settings(const gguf::File &file);
    Status read_special_ids(const gguf::File &file);
    Status read_merges(const gguf::File &file);
    Status read_byte_tokens();
    void detect_special_by_text();

    ModelKind model_ = ModelKind::kBpe;
    PreTokenizer pre_ = PreTokenizer::kDefault;
    std::string pre_name_;
    std::string texts_;              // all token texts, back to back, each followed by a NUL
    std::vector<uint32_t> offsets_;  // [size + 1]: token i is texts_[offsets_[i], offsets_[i + 1] - 1)
    std::vector<uint8_t> attrs_;     // TokenAttr bits
    std::vector<float> scores_;      // empty when the file has none (all 0)
    std::vector<int16_t> byte_values_;
    std::array<int32_t, 256> byte_tokens_{};
    TextIdMap by_text_;
    std::vector<int32_t> special_tokens_;
    std::vector<int32_t> eog_;

    int32_t bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken, unk_ = kNoToken;
    int32_t pad_ = kNoToken, sep_ = kNoToken;
    int32_t fim_pre_ = kNoToken, fim_suf_ = kNoToken, fim_mid_ = kNoToken, fim_pad_ = kNoToken, fim_rep_ = kNoToken,
            fim_sep_ = kNoToken;
    bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false, clean_spaces_ = false;
    bool ignore_merges_ = false;

    BpeMerges merges_;
    std::string chat_template_;
    std::unordered_map<std::string, std::string> named_templates_;
};

}  // namespace kt::tokenizer
