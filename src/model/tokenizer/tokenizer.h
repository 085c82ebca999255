// Text to token ids and back, for the two GGUF tokenizer models: byte-level BPE ("gpt2") and SentencePiece
// ("llama"). The behaviour follows llama.cpp's, whose ids are kt's golden reference
// (shared/testdata/tokenizer/README.md): same special-token partitioning, same pre-tokenizers, same merge order
// and tie-breaking, same detokenization (including llama3's clean-up of spaces).
//
// A Tokenizer is immutable after creation and safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/vocab.h"

namespace kt::tokenizer {

class Tokenizer {
public:
    // Reads the vocabulary from the file's metadata (Vocab::load) and prepares the lookup tables.
    static Status create(const gguf::File &file, std::unique_ptr<Tokenizer> *out);
    explicit Tokenizer(std::unique_ptr<Vocab> vocab);

    const Vocab &vocab() const { return *vocab_; }

    // Appends the ids of `text` to *out. add_special: add BOS/EOS as the vocabulary asks (add_bos/add_eos).
    // parse_special: the texts of CONTROL and UNKNOWN tokens ("<|im_start|>") become those tokens; without it they
    // are tokenized as ordinary text. USER_DEFINED tokens are matched whole either way (llama.cpp's rule).
    // Invalid UTF-8 is tokenized deterministically (see unicode::decode_utf8). Fails only when a SentencePiece
    // vocabulary can represent a byte neither as <0xNN> nor as an unknown token.
    Status tokenize(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t> *out) const;

    // The bytes a token stands for (llama.cpp's token_to_piece): CONTROL and UNKNOWN tokens give "" unless
    // `special`; UNUSED tokens always give "". With `lstrip`, one leading space is dropped. The bytes of a
    // byte-level token may be part of a UTF-8 character. INVALID_ARGUMENT for an id outside the vocabulary.
    Status token_to_piece(int32_t id, bool special, bool lstrip, std::string_view *out) const;

    // Appends the text of `ids` (llama.cpp's detokenize): remove_special drops a leading BOS / trailing EOS that
    // the vocabulary would add; unparse_special renders CONTROL tokens as their text. SentencePiece drops the
    // first token's leading space (its add_space_prefix); vocabularies with clean_spaces ("llama-bpe", "gpt-2")
    // remove the space before ? ! . , and in " 's", " 'm", " 're", " 've" and around a lone "'".
    Status detokenize(const int32_t *ids, size_t n, bool remove_special, bool unparse_special, std::string *out) const;

private:
    void build_pieces();

    std::unique_ptr<Vocab> vocab_;
    std::string pieces_;                    // every token's piece (as token_to_piece with special), back to back
    std::vector<uint32_t> piece_offsets_;   // [size + 1]
    // Special tokens grouped by their first two bytes (one-byte tokens by their byte), so a text is scanned once
    // for the ones it contains instead of once per special token (DeepSeek-V3 has 800).
    std::vector<std::vector<int32_t>> special_by_prefix_;  // [65536 + 256], indices into vocab.special_tokens()
    std::vector<uint64_t> special_prefix_bits_;            // which buckets are non-empty: the scan's fast path
};

// Incremental detokenization for streaming output: push one token at a time and get the text that is complete so
// far. A UTF-8 character split across tokens is held back until its last byte arrives; bytes that can never
// become valid UTF-8 are passed through as they are. The concatenated output equals detokenize(remove_special =
// false) except that no clean-up of spaces is applied (it needs the whole text). One stream per thread.
class DetokenizeStream {
public:
    DetokenizeStream(const Tokenizer &tokenizer, bool unparse_special)
        : tokenizer_(&tokenizer), unparse_special_(unparse_special) {}

    // Appends to *out what `id` completes. INVALID_ARGUMENT (and no change) for an id outside the vocabulary.
    Status push(int32_t id, std::string *out);
    // Appends whatever is held back (an incomplete character at the end of the stream) and resets the stream.
    void flush(std::string *out);
    // Bytes held back right now.
    size_t pending() const { return pending_.size(); }

private:
    const Tokenizer *tokenizer_;
    bool unparse_special_;
    bool first_ = true;
    std::string pending_;
};

// The tokenizer of a model, built on first use and kept: a model handle may be shared by threads, so the first
// caller builds it under std::call_once and everyone gets the same result (or the same error).
class LazyTokenizer {
public:
    Status get(const gguf::File &file, const Tokenizer **out) const;

private:
    mutable std::once_flag once_;
    mutable std::unique_ptr<Tokenizer> tokenizer_;
    mutable Status status_;
};

}  // namespace kt::tokenizer
