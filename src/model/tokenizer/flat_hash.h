// Open-addressing hash tables for the tokenizer's two hot lookups: token text -> id (every SentencePiece pair,
// every whole-word check) and BPE pair -> merge (every BPE step). std::unordered_map allocates a node per entry and
// chases a pointer per probe; these keep entries in one array with linear probing at load factor <= 1/2, so a
// lookup is usually one cache line. Both are built once and then only read (safe to share between threads).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace kt::tokenizer {

// 64-bit hash of a byte string (FNV-1a over 8-byte words, then a final mix): fast on the short strings tokens
// are, and good enough for a table that is never exposed to adversarial keys that could degrade it beyond
// longer probe runs.
inline uint64_t hash_bytes(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, s.data() + i, s.size() - i);
    h = (h ^ tail) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

inline uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

inline size_t table_capacity(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    return cap;
}

// Text -> int32 id, where the texts live elsewhere: the table stores ids and a hash tag, and asks `text_of(id)`
// to confirm a match. Inserting an existing text replaces its id (the last of repeated texts wins).
class TextIdMap {
public:
    template <typename TextOf>
    void build(int32_t n, const TextOf &text_of) {
        slots_.assign(table_capacity(static_cast<size_t>(n)), Slot{0, -1});
        mask_ = slots_.size() - 1;
        for (int32_t id = 0; id < n; ++id) {
            const std::string_view t = text_of(id);
            const uint64_t h = hash_bytes(t);
            for (size_t i = h & mask_;; i = (i + 1) & mask_) {
                Slot &s = slots_[i];
                if (s.id < 0) {
                    s = Slot{static_cast<uint32_t>(h >> 32), id};
                    break;
                }
                if (s.tag == static_cast<uint32_t>(h >> 32) && text_of(s.id) == t) {
                    s.id = id;
                    break;
                }
            }
        }
    }

    template <typename TextOf>
    int32_t find(std::string_view t, const TextOf &text_of) const {
        return find_hashed(t, hash_bytes(t), text_of);
    }

    // For batched lookups: hash first, prefetch the slot, look up later (hides the cache miss of a large table).
    void prefetch(uint64_t h) const {
        if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
    }
    template <typename TextOf>
    int32_t find_hashed(std::string_view t, uint64_t h, const TextOf &text_of) const {
        if (slots_.empty()) return -1;
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            const Slot &s = slots_[i];
            if (s.id < 0) return -1;
            if (s.tag == static_cast<uint32_t>(h >> 32) && text_of(s.id) == t) return s.id;
        }
    }

private:
    struct Slot {
        uint32_t tag;
        int32_t id;  // -1: empty
    };
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

// uint64 key -> small value; the first insertion of a key wins. Key ~0 is reserved for empty slots.
template <typename V>
class U64Map {
public:
    static constexpr uint64_t kEmpty = ~0ull;

    void reserve(size_t n) {
        slots_.assign(table_capacity(n), Slot{kEmpty, V{}});
        mask_ = slots_.size() - 1;
    }
    // Returns false when the key was already present (its value is kept). reserve() must have room for it.
    bool insert(uint64_t key, const V &value) {
        for (size_t i = hash_u64(key) & mask_;; i = (i + 1) & mask_) {
            Slot &s = slots_[i];
            if (s.key == kEmpty) {
                s = Slot{key, value};
                return true;
            }
            if (s.key == key) return false;
        }
    }
    const V *find(uint64_t key) const {
        if (slots_.empty()) return nullptr;
        for (size_t i = hash_u64(key) & mask_;; i = (i + 1) & mask_) {
            const Slot &s = slots_[i];
            if (s.key == key) return &s.value;
            if (s.key == kEmpty) return nullptr;
        }
    }

private:
    struct Slot {
        uint64_t key;
        V value;
    };
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

}  // namespace kt::tokenizer
