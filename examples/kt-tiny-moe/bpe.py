"""Byte-level BPE as llama.cpp runs it for `tokenizer.ggml.model = gpt2`, `tokenizer.ggml.pre = qwen2`.

Three pieces, each written from the behaviour llama.cpp documents (reference/gguf-and-quants.md §4):

- `pretokenize`: the QWEN2 pre-tokenizer regex, evaluated by hand with the regex engine's semantics (ordered
  alternation, greedy quantifiers with backtracking), because Debian's Python has no `regex` module for \\p{L}:

      (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}
      | ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

- `BYTE_TO_UNICODE`: GPT-2's byte-to-printable-character table, so that every token is a printable string and
  "Ġ" stands for a space.
- `Tokenizer.encode_word`: merge the adjacent pair of lowest merge rank (leftmost on ties) until no pair has a
  rank, which is exactly llama.cpp's priority-queue loop.

Character classes: letters are Unicode categories L*, numbers N*, whitespace is llama.cpp's whitespace set. The
training text is plain ASCII (asserted by the training script), where these classes are unambiguous; for other
text, Python's Unicode tables may differ from llama.cpp's in rare code points.
"""
import collections
import unicodedata

# llama.cpp's `is_whitespace` set (unicode-data.cpp).
_WHITESPACE = frozenset([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                         0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


def _is_space(c):
    return ord(c) in _WHITESPACE


def _is_letter(c):
    return unicodedata.category(c).startswith("L")


def _is_number(c):
    return unicodedata.category(c).startswith("N")


def _is_punct(c):  # [^\s\p{L}\p{N}]
    return not (_is_space(c) or _is_letter(c) or _is_number(c))


def _match_at(s, i):
    """Length of the QWEN2 regex match starting at s[i] (always >= 1: the alternatives cover every character)."""
    n = len(s)
    c = s[i]
    # 1. English contractions, case-insensitive letters.
    if c == "'" and i + 1 < n:
        c1 = s[i + 1].lower()
        if i + 2 < n and (c1 + s[i + 2].lower()) in ("re", "ve", "ll"):
            return 3
        if c1 in "stmd":
            return 2
    # 2. [^\r\n\p{L}\p{N}]?\p{L}+ : the optional prefix is tried first, then dropped.
    start = i
    if not _is_letter(c) and not _is_number(c) and c not in "\r\n" and i + 1 < n and _is_letter(s[i + 1]):
        start = i + 1
    if _is_letter(s[start]):
        j = start
        while j < n and _is_letter(s[j]):
            j += 1
        return j - i
    # 3. \p{N}: one digit at a time (QWEN2; LLAMA3 would take up to three).
    if _is_number(c):
        return 1
    # 4. " ?[^\s\p{L}\p{N}]+[\r\n]*"
    j = i + 1 if c == " " and i + 1 < n and _is_punct(s[i + 1]) else i
    if _is_punct(s[j]):
        while j < n and _is_punct(s[j]):
            j += 1
        while j < n and s[j] in "\r\n":
            j += 1
        return j - i
    # From here c is whitespace. Find the maximal whitespace run [i, e).
    e = i
    while e < n and _is_space(s[e]):
        e += 1
    # 5. \s*[\r\n]+ : greedy \s* backs off to the last CR/LF of the run, which [\r\n]+ then takes.
    last_newline = max((k for k in range(i, e) if s[k] in "\r\n"), default=-1)
    if last_newline >= 0:
        return last_newline + 1 - i
    # 6. \s+(?!\S): the whole run at the end of the text, else the run minus its last character.
    if e == n:
        return e - i
    if e - i >= 2:
        return e - i - 1
    # 7. \s+
    return e - i


def pretokenize(text):
    pieces = []
    i = 0
    while i < len(text):
        length = _match_at(text, i)
        pieces.append(text[i:i + length])
        i += length
    return pieces


def _bytes_to_unicode():
    # GPT-2: printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 upwards, in byte order.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_UNICODE = _bytes_to_unicode()
UNICODE_TO_BYTE = {u: b for b, u in BYTE_TO_UNICODE.items()}


def to_symbols(piece):
    """A pre-token as GPT-2 byte symbols: its UTF-8 bytes, each mapped through BYTE_TO_UNICODE."""
    return "".join(BYTE_TO_UNICODE[b] for b in piece.encode("utf-8"))


# ------------------------------------------------------------------------------------------------------------
# Training

def train_merges(texts, n_merges, log=None):
    """Learns `n_merges` merges from an iterable of texts. Deterministic: the most frequent pair wins, ties go to
    the lexicographically smallest pair. Returns a list of (left, right) symbol strings in rank order."""
    word_counts = collections.Counter()
    for text in texts:
        word_counts.update(to_symbols(p) for p in pretokenize(text))
    words = [list(w) for w in word_counts]
    freqs = [word_counts[w] for w in word_counts]

    pair_counts = collections.Counter()
    pair_words = collections.defaultdict(set)  # pair -> indices of words that contain it
    for wi, (w, f) in enumerate(zip(words, freqs)):
        for a, b in zip(w, w[1:]):
            pair_counts[(a, b)] += f
            pair_words[(a, b)].add(wi)

    merges = []
    for step in range(n_merges):
        if not pair_counts:
            break
        best = min(pair_counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        if pair_counts[best] < 2:
            break
        merges.append(best)
        merged = best[0] + best[1]
        for wi in list(pair_words[best]):
            w, f = words[wi], freqs[wi]
            for a, b in zip(w, w[1:]):
                pair_counts[(a, b)] -= f
                if pair_counts[(a, b)] <= 0:
                    del pair_counts[(a, b)]
            out = []
            k = 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == best[0] and w[k + 1] == best[1]:
                    out.append(merged)
                    k += 2
                else:
                    out.append(w[k])
                    k += 1
            words[wi] = out
            for a, b in zip(out, out[1:]):
                pair_counts[(a, b)] += f
                pair_words[(a, b)].add(wi)
        del pair_words[best]
        if log and (step + 1) % 500 == 0:
            log(f"bpe: {step + 1} merges, last {merged!r}")
    return merges


# ------------------------------------------------------------------------------------------------------------
# Encoding and decoding

class Tokenizer:
    """A byte-level BPE vocabulary: `tokens` in id order (GPT-2 byte symbols), `merges` as (left, right) in rank
    order, `specials` the control tokens (plain text never produces them)."""

    def __init__(self, tokens, merges, specials=()):
        self.tokens = list(tokens)
        self.merges = [tuple(m) for m in merges]
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        assert len(self.ids) == len(self.tokens), "duplicate token"
        self.ranks = {m: r for r, m in enumerate(self.merges)}
        self.specials = {s: self.ids[s] for s in specials}
        self._cache = {}

    @classmethod
    def from_merges(cls, merges, specials):
        """kt-tiny-moe's layout: the 256 byte symbols (ids 0..255, in byte order), one token per merge (in rank
        order), then the special tokens."""
        tokens = [BYTE_TO_UNICODE[b] for b in range(256)] + [a + b for a, b in merges] + list(specials)
        return cls(tokens, merges, specials)

    def encode_word(self, symbols):
        cached = self._cache.get(symbols)
        if cached is not None:
            return cached
        parts = list(symbols)
        while len(parts) > 1:
            best_rank, best_k = None, -1
            for k in range(len(parts) - 1):
                r = self.ranks.get((parts[k], parts[k + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best_rank, best_k = r, k
            if best_rank is None:
                break
            parts[best_k:best_k + 2] = [parts[best_k] + parts[best_k + 1]]
        ids = [self.ids[p] for p in parts]
        self._cache[symbols] = ids
        return ids

    def encode(self, text):
        """Plain text only (no special-token parsing, no BOS): what kt_tokenize gives without specials."""
        out = []
        for piece in pretokenize(text):
            out.extend(self.encode_word(to_symbols(piece)))
        return out

    def decode(self, ids):
        data = bytearray()
        for i in ids:
            t = self.tokens[i]
            if t in self.specials:
                data += t.encode("utf-8")
            else:
                data += bytes(UNICODE_TO_BYTE[ch] for ch in t)
        return data.decode("utf-8", errors="replace")
