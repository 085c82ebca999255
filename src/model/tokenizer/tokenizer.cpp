// Tokenization and detokenization; see tokenizer.h.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "model/tokenizer/pretokenize.h"
#include "model/tokenizer/unicode.h"

namespace kt::tokenizer {

namespace {

constexpr std::string_view kSpmSpace = "\xe2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

// CONTROL and UNKNOWN tokens are "special": matched in text and rendered only when the caller asks.
bool is_special(uint8_t attr) { return attr & (kAttrControl | kAttrUnknown); }

// ------------------------------------------------------------------------------------------------------------
// Special-token partitioning

// A stretch of the input: raw text still to tokenize, or a special token already recognised.
struct Fragment {
    int32_t token;  // kNoToken for raw text
    size_t offset, length;
};

// ------------------------------------------------------------------------------------------------------------
// Byte-level BPE on one pre-token

struct BpeSymbol {
    int32_t sid;          // symbol id (BpeMerges); a token id when below the vocabulary size
    int32_t prev, next;   // neighbours in the chain, -1 at the ends
    uint32_t start, len;  // bytes of the pre-token; len 0 once merged into the left neighbour
};

struct BpePair {
    int32_t rank;
    int32_t left, right;
    int32_t left_sid, right_sid;  // the symbols' ids when queued: a changed id means the pair is stale
};

// Lowest rank first; among equal ranks the leftmost (llama.cpp's order, and the one BPE training defines).
struct BpePairLater {
    bool operator()(const BpePair &a, const BpePair &b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

struct SpmSymbol {
    int32_t prev, next;
    uint32_t start, len;
};

struct SpmPair {
    float score;
    int32_t left, right;
    uint32_t size;  // bytes of the merged text: a different sum means a side changed since
};

// Highest score first; among equal scores the leftmost.
struct SpmPairLater {
    bool operator()(const SpmPair &a, const SpmPair &b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

// Per-call working memory (the Tokenizer itself stays immutable and shareable).
struct Session {
    PretokenizeScratch pre;
    std::vector<std::string_view> pieces;
    std::vector<BpeSymbol> bpe_symbols;
    std::vector<BpePair> bpe_heap;
    std::vector<SpmSymbol> spm_symbols;
    std::vector<SpmPair> spm_heap;
    std::string mapped;
    std::string spm_text;
};

template <typename T, typename Later>
void heap_push(std::vector<T> *heap, const T &v) {
    heap->push_back(v);
    std::push_heap(heap->begin(), heap->end(), Later());
}

template <typename T, typename Later>
T heap_pop(std::vector<T> *heap) {
    std::pop_heap(heap->begin(), heap->end(), Later());
    T v = heap->back();
    heap->pop_back();
    return v;
}

void bpe_queue_pair(const BpeMerges &merges, Session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const BpeSymbol &l = s->bpe_symbols[static_cast<size_t>(left)], &r = s->bpe_symbols[static_cast<size_t>(right)];
    if (l.sid < 0 || r.sid < 0) return;
    const BpeMerges::Merge *m = merges.find(l.sid, r.sid);
    if (!m) return;
    heap_push<BpePair, BpePairLater>(&s->bpe_heap, BpePair{m->rank, left, right, l.sid, r.sid});
}

void bpe_word(const Vocab &vocab, std::string_view word, Session *s, std::vector<int32_t> *out) {
    const BpeMerges &merges = vocab.merges();
    if (vocab.ignore_merges()) {
        // LLAMA3: a pre-token that is itself a token is emitted whole, whatever the merges would have made.
        s->mapped.clear();
        for (char c : word) unicode::append_utf8(&s->mapped, unicode::byte_to_code_point(static_cast<uint8_t>(c)));
        const int32_t id = vocab.find(s->mapped);
        if (id != kNoToken) {
            out->push_back(id);
            return;
        }
    }
    // One symbol per byte: the byte-level mapping turns each byte into exactly one character.
    auto &sym = s->bpe_symbols;
    sym.clear();
    const int32_t n = static_cast<int32_t>(word.size());
    for (int32_t i = 0; i < n; ++i)
        sym.push_back(BpeSymbol{merges.byte_symbol[static_cast<uint8_t>(word[static_cast<size_t>(i)])], i - 1,
                                i + 1 < n ? i + 1 : -1, static_cast<uint32_t>(i), 1});
    s->bpe_heap.clear();
    for (int32_t i = 1; i < n; ++i) bpe_queue_pair(merges, s, i - 1, i);

    while (!s->bpe_heap.empty()) {
        const BpePair p = heap_pop<BpePair, BpePairLater>(&s->bpe_heap);
        BpeSymbol &l = sym[static_cast<size_t>(p.left)], &r = sym[static_cast<size_t>(p.right)];
        // Both alive with unchanged texts implies they are still neighbours (a symbol only ever absorbs its right
        // neighbour).
        if (l.len == 0 || r.len == 0 || l.sid != p.left_sid || r.sid != p.right_sid) continue;
        l.sid = merges.find(l.sid, r.sid)->result;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = p.left;
        bpe_queue_pair(merges, s, l.prev, p.left);
        bpe_queue_pair(merges, s, p.left, l.next);
    }

    for (int32_t i = 0; i >= 0 && i < n; i = sym[static_cast<size_t>(i)].next) {
        const BpeSymbol &x = sym[static_cast<size_t>(i)];
        if (vocab.valid(x.sid)) {
            out->push_back(x.sid);
            continue;
        }
        for (uint32_t b = x.start; b < x.start + x.len; ++b) {
            const auto &fallback = merges.byte_fallback[static_cast<uint8_t>(word[b])];
            out->insert(out->end(), fallback.begin(), fallback.end());
        }
    }
}

void spm_queue_pair(const Vocab &vocab, Session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const SpmSymbol &l = s->spm_symbols[static_cast<size_t>(left)], &r = s->spm_symbols[static_cast<size_t>(right)];
    const std::string_view text = std::string_view(s->spm_text).substr(l.start, l.len + r.len);
    const int32_t id = vocab.find(text);
    if (id == kNoToken) return;
    heap_push<SpmPair, SpmPairLater>(&s->spm_heap, SpmPair{vocab.score(id), left, right, l.len + r.len});
}

Status spm_fragment(const Vocab &vocab, Session *s, std::vector<int32_t> *out) {
    const std::string_view text = s->spm_text;
    auto &sym = s->spm_symbols;
    sym.clear();
    // Symbols are the UTF-8 characters as their lead bytes announce them (truncated at the end), unvalidated.
    for (size_t at = 0; at < text.size();) {
        const size_t len = std::min(unicode::sequence_length(static_cast<uint8_t>(text[at])), text.size() - at);
        const int32_t index = static_cast<int32_t>(sym.size());
        sym.push_back(SpmSymbol{index - 1, at + len < text.size() ? index + 1 : -1, static_cast<uint32_t>(at),
                                static_cast<uint32_t>(len)});
        at += len;
    }
    s->spm_heap.clear();
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) spm_queue_pair(vocab, s, i - 1, i);

    while (!s->spm_heap.empty()) {
        const SpmPair p = heap_pop<SpmPair, SpmPairLater>(&s->spm_heap);
        SpmSymbol &l = sym[static_cast<size_t>(p.left)], &r = sym[static_cast<size_t>(p.right)];
        if (l.len == 0 || r.len == 0 || l.len + r.len != p.size) continue;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = p.left;
        spm_queue_pair(vocab, s, l.prev, p.left);
        spm_queue_pair(vocab, s, p.left, l.next);
    }

    // Every merged symbol is a token (pairs are only queued when their text is one), so a symbol that is not a
    // token is a single character: it falls back to its bytes. (llama.cpp's reverse-merge lookup for such
    // symbols can never fire: a character's text never equals the text of two adjacent characters.)
    for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
        const SpmSymbol &x = sym[static_cast<size_t>(i)];
        const int32_t id = vocab.find(text.substr(x.start, x.len));
        if (id != kNoToken) {
            out->push_back(id);
            continue;
        }
        for (uint32_t b = x.start; b < x.start + x.len; ++b) {
            int32_t byte_id = vocab.byte_token(static_cast<uint8_t>(text[b]));
            if (byte_id == kNoToken) byte_id = vocab.unk();
            KT_RETURN_IF(byte_id == kNoToken, KT_STATUS_UNSUPPORTED,
                         "tokenize: byte 0x%02X has no <0x%02X> token and the vocabulary has no unknown token",
                         static_cast<uint8_t>(text[b]), static_cast<uint8_t>(text[b]));
            out->push_back(byte_id);
        }
    }
    return Status::ok();
}

// llama.cpp's clean_up_tokenization for vocabularies with clean_spaces, three passes over the text.
void clean_up_spaces(std::string *text) {
    std::string &t = *text;
    // " ?", " !", " .", " ," lose the space.
    size_t w = t.empty() ? 0 : 1;
    for (size_t i = 1; i < t.size(); ++i) {
        const char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --w;
        t[w++] = x;
    }
    t.resize(w);
    // " ' " becomes "'".
    w = t.empty() ? 0 : 1;
    for (size_t i = 1; i < t.size(); ++i) {
        const char x = t[i];
        if (x == '\'' && i + 1 < t.size() && t[i - 1] == ' ' && t[i + 1] == ' ') {
            --w;
            t[++i] = '\0';  // the space after it goes too; llama.cpp blanks it in place, and the next look-behind sees that
        }
        t[w++] = x;
    }
    t.resize(w);
    // " 's", " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it).
    w = t.empty() ? 0 : 1;
    for (size_t i = 1; i < t.size(); ++i) {
        const char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < t.size()) {
            const char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm') {
                --w;
            } else if (i + 2 < t.size() && t[i + 2] == 'e' && (x1 == 'r' || x1 == 'v')) {
                --w;
            }
        }
        t[w++] = x;
    }
    t.resize(w);
}

}  // namespace

// ------------------------------------------------------------------------------------------------------------
// Tokenizer

Status Tokenizer::create(const gguf::File &file, std::unique_ptr<Tokenizer> *out) {
    std::unique_ptr<Vocab> vocab;
    KT_TRY(Vocab::load(file, &vocab));
    *out = std::make_unique<Tokenizer>(std::move(vocab));
    return Status::ok();
}

Tokenizer::Tokenizer(std::unique_ptr<Vocab> vocab) : vocab_(std::move(vocab)) {
    build_pieces();
    special_by_prefix_.resize(65536 + 256);
    const auto &specials = vocab_->special_tokens();
    for (size_t i = 0; i < specials.size(); ++i) {
        const std::string_view t = vocab_->text(specials[i]);
        const size_t bucket = t.size() == 1 ? 65536 + static_cast<uint8_t>(t[0])
                                            : static_cast<size_t>(static_cast<uint8_t>(t[0])) << 8 | static_cast<uint8_t>(t[1]);
        special_by_prefix_[bucket].push_back(static_cast<int32_t>(i));
    }
    special_prefix_bits_.assign(special_by_prefix_.size() / 64, 0);
    for (size_t b = 0; b < special_by_prefix_.size(); ++b)
        if (!special_by_prefix_[b].empty()) special_prefix_bits_[b / 64] |= 1ull << (b % 64);
}

void Tokenizer::build_pieces() {
    const Vocab &v = *vocab_;
    piece_offsets_.reserve(static_cast<size_t>(v.size()) + 1);
    piece_offsets_.push_back(0);
    for (int32_t id = 0; id < v.size(); ++id) {
        const std::string_view text = v.text(id);
        const uint8_t attr = v.attr(id);
        if (attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) {
            pieces_.append(text);
        } else if ((attr & kAttrNormal) && v.model() == ModelKind::kSpm) {
            for (size_t at = 0; at < text.size();) {
                if (text.substr(at, kSpmSpace.size()) == kSpmSpace) {
                    pieces_.push_back(' ');
                    at += kSpmSpace.size();
                } else {
                    pieces_.push_back(text[at++]);
                }
            }
        } else if (attr & kAttrNormal) {
            // Each character of a byte-level token stands for one byte. llama.cpp renders a character outside the
            // mapping as "[UNK_BYTE_0x<its UTF-8 in hex><the token text>]"; so does kt.
            for (size_t at = 0; at < text.size();) {
                const uint32_t c = unicode::decode_utf8(text, &at);
                const int byte = unicode::unicode_to_byte(c);
                if (byte >= 0) {
                    pieces_.push_back(static_cast<char>(byte));
                    continue;
                }
                std::string utf8;
                unicode::append_utf8(&utf8, c);
                pieces_ += "[UNK_BYTE_0x";
                for (char b : utf8) pieces_ += format("%02x", static_cast<uint8_t>(b));
                pieces_.append(text).push_back(']');
            }
        } else if ((attr & kAttrByte) && v.model() == ModelKind::kSpm) {
            pieces_.push_back(static_cast<char>(v.byte_value(id)));
        }
        // UNUSED and UNDEFINED tokens (and BYTE tokens of a BPE vocabulary) have no text.
        piece_offsets_.push_back(static_cast<uint32_t>(pieces_.size()));
    }
}

Status Tokenizer::tokenize(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t> *out) const {
    const Vocab &v = *vocab_;
    KT_RETURN_IF(text.size() > 0xFFFFFFF0u, KT_STATUS_INVALID_ARGUMENT, "tokenize: text of %zu bytes exceeds 4 GiB",
                 text.size());

    // 1. Special tokens, longest first: each one splits every raw fragment at all its occurrences. Only tokens
    //    that occur in the text at all are tried (found by one scan over the text's byte pairs).
    std::vector<Fragment> fragments, next;
    if (!text.empty()) fragments.push_back(Fragment{kNoToken, 0, text.size()});
    const auto &specials = v.special_tokens();
    std::vector<uint8_t> present(specials.size(), 0);
    bool any = false;
    for (size_t at = 0; at < text.size(); ++at) {
        const uint8_t b0 = static_cast<uint8_t>(text[at]);
        for (int pass = 0; pass < 2; ++pass) {
            if (pass == 0 && at + 1 >= text.size()) continue;
            const size_t bucket = pass == 0 ? static_cast<size_t>(b0) << 8 | static_cast<uint8_t>(text[at + 1]) : 65536 + b0;
            if (!(special_prefix_bits_[bucket / 64] >> (bucket % 64) & 1)) continue;
            for (int32_t i : special_by_prefix_[bucket]) {
                if (present[static_cast<size_t>(i)]) continue;
                const std::string_view t = v.text(specials[static_cast<size_t>(i)]);
                if (text.substr(at, t.size()) == t) present[static_cast<size_t>(i)] = any = true;
            }
        }
    }
    for (size_t i = 0; any && i < specials.size(); ++i) {
        if (!present[i]) continue;
        const int32_t id = specials[i];
        if (!parse_special && is_special(v.attr(id))) continue;
        const std::string_view t = v.text(id);
        next.clear();
        for (const Fragment &f : fragments) {
            if (f.token != kNoToken) {
                next.push_back(f);
                continue;
            }
            const std::string_view raw = text.substr(f.offset, f.length);
            size_t from = 0;
            for (size_t hit; (hit = raw.find(t, from)) != std::string_view::npos; from = hit + t.size()) {
                if (hit > from) next.push_back(Fragment{kNoToken, f.offset + from, hit - from});
                next.push_back(Fragment{id, 0, 0});
            }
            if (from < raw.size()) next.push_back(Fragment{kNoToken, f.offset + from, raw.size() - from});
        }
        fragments.swap(next);
    }

    // 2. Each raw fragment through the model; BOS/EOS around everything.
    if (add_special && v.add_bos()) out->push_back(v.bos());
    Session s;
    bool previous_special = true;  // SentencePiece: a space prefix at the start and after each special token
    for (const Fragment &f : fragments) {
        if (f.token != kNoToken) {
            out->push_back(f.token);
            previous_special = true;
            continue;
        }
        const std::string_view raw = text.substr(f.offset, f.length);
        if (v.model() == ModelKind::kBpe) {
            s.pieces.clear();
            pretokenize(v.pre(), raw, &s.pre, &s.pieces);
            for (std::string_view piece : s.pieces) bpe_word(v, piece, &s, out);
        } else {
            s.spm_text.clear();
            if (v.add_space_prefix() && previous_special) s.spm_text.append(kSpmSpace);
            for (char c : raw) {
                if (c == ' ') s.spm_text.append(kSpmSpace);
                else s.spm_text.push_back(c);
            }
            KT_TRY(spm_fragment(v, &s, out));
        }
        previous_special = false;
    }
    if (add_special && v.add_eos()) out->push_back(v.eos());
    return Status::ok();
}

Status Tokenizer::token_to_piece(int32_t id, bool special, bool lstrip, std::string_view *out) const {
    KT_RETURN_IF(!vocab_->valid(id), KT_STATUS_INVALID_ARGUMENT, "token id %d is outside the vocabulary (%d tokens)", id,
                 vocab_->size());
    if (!special && is_special(vocab_->attr(id))) {
        *out = std::string_view();
        return Status::ok();
    }
    std::string_view piece = std::string_view(pieces_).substr(piece_offsets_[static_cast<size_t>(id)],
                                                              piece_offsets_[static_cast<size_t>(id) + 1] -
                                                                  piece_offsets_[static_cast<size_t>(id)]);
    if (lstrip && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    *out = piece;
    return Status::ok();
}

Status Tokenizer::detokenize(const int32_t *ids, size_t n, bool remove_special, bool unparse_special,
                             std::string *out) const {
    const Vocab &v = *vocab_;
    for (size_t i = 0; i < n; ++i)
        KT_RETURN_IF(!v.valid(ids[i]), KT_STATUS_INVALID_ARGUMENT, "detokenize: ids[%zu] = %d is outside the vocabulary (%d tokens)",
                     i, ids[i], v.size());
    bool remove_space = v.add_space_prefix();
    if (remove_special && v.add_bos() && n > 0 && ids[0] == v.bos()) {
        remove_space = false;  // llama.cpp keeps the first piece's space once a BOS was dropped
        ++ids;
        --n;
    }
    if (remove_special && v.add_eos() && n > 0 && ids[n - 1] == v.eos()) --n;

    std::string text;
    for (size_t i = 0; i < n; ++i) {
        std::string_view piece;
        KT_TRY(token_to_piece(ids[i], unparse_special, remove_space, &piece));
        remove_space = false;
        text.append(piece);
    }
    if (v.clean_spaces()) clean_up_spaces(&text);
    out->append(text);
    return Status::ok();
}

// ------------------------------------------------------------------------------------------------------------
// Streaming

Status DetokenizeStream::push(int32_t id, std::string *out) {
    std::string_view piece;
    KT_TRY(tokenizer_->token_to_piece(id, unparse_special_, first_ && tokenizer_->vocab().add_space_prefix(), &piece));
    first_ = false;
    pending_.append(piece);
    const size_t complete = unicode::complete_prefix_length(pending_);
    out->append(pending_, 0, complete);
    pending_.erase(0, complete);
    return Status::ok();
}

void DetokenizeStream::flush(std::string *out) {
    out->append(pending_);
    pending_.clear();
    first_ = true;
}

// ------------------------------------------------------------------------------------------------------------
// LazyTokenizer

Status LazyTokenizer::get(const gguf::File &file, const Tokenizer **out) const {
    std::call_once(once_, [&] {
        try {
            status_ = Tokenizer::create(file, &tokenizer_);
        } catch (const std::bad_alloc &) {
            status_ = Status(KT_STATUS_OUT_OF_MEMORY, "out of memory while building the tokenizer");
        } catch (const std::exception &e) {
            status_ = Status(KT_STATUS_INTERNAL, std::string("internal error while building the tokenizer: ") + e.what());
        }
    });
    if (!status_.is_ok()) return status_;
    *out = tokenizer_.get();
    return Status::ok();
}

}  // namespace kt::tokenizer
