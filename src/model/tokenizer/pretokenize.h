// Pre-tokenization for byte-level BPE: splitting text into the pieces that BPE then merges inside, by the
// patterns tokenizer.ggml.pre selects (reference/gguf-and-quants.md §4.3). The patterns are matched by hand-written
// code, one function per pattern, that follows the regex semantics exactly (ordered alternation, greedy
// quantifiers with backtracking, lookahead at the piece end) instead of depending on a regex engine.
//
// Where llama.cpp's matching differs from the Unicode meaning of a pattern, kt follows llama.cpp, since its ids are
// the reference; each such place says so.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/vocab.h"

namespace kt::tokenizer {

// Reusable buffers, so tokenizing many fragments allocates once.
struct PretokenizeScratch {
    std::string recoded;            // the text re-encoded when it held invalid or non-shortest UTF-8
    std::vector<uint32_t> cpts;     // code points
    std::vector<uint8_t> flags;     // unicode::flags of each code point
    std::vector<uint32_t> offsets;  // byte offset of each code point in the (re-encoded) text, plus the end
    std::vector<uint32_t> ends, next_ends;  // piece ends (code point indices), per stage
};

// Splits `text` into pieces and appends them (views into `text` or into scratch->recoded) to *pieces.
// Invalid UTF-8 is replaced by U+FFFD per bad byte first, as llama.cpp does. `text` must be under 4 GiB.
void pretokenize(PreTokenizer pre, std::string_view text, PretokenizeScratch *scratch,
                 std::vector<std::string_view> *pieces);

}  // namespace kt::tokenizer
