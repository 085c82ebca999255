// Who holds which KV block: the engine's block allocator and prefix cache (bookkeeping only; runtime/kv_cache
// holds the memory).
//
// Every block has a reference count: the sequences whose block tables contain it. A block nobody holds is either
// free or, when the prefix cache knows its content, cached: kept with its keys and values so that a later
// sequence whose tokens start the same way can take it instead of computing it again. Cached blocks nobody holds
// are evicted least recently released first when allocate() runs out of free ones.
//
// Content keys (vLLM's scheme, block-granular): a full block's key is hash(parent key, its block_tokens tokens),
// the parent being the key of the block before it in the sequence (0 for the first), so a key stands for the whole
// prefix up to the block's end. Lookups compare the tokens and the parent key too, so a false match needs two
// different prefixes whose 64-bit keys collide at the same parent key.
//
// Not thread-safe: the engine's scheduler thread is its only user.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace kt::runtime {

class KvBlocks {
public:
    KvBlocks(int64_t n_blocks, int64_t block_tokens, bool prefix_cache);

    int64_t n_blocks() const { return n_blocks_; }
    int64_t block_tokens() const { return block_tokens_; }
    bool prefix_cache() const { return prefix_cache_; }
    int64_t n_free() const { return n_free_; }
    int64_t n_cached_idle() const { return n_idle_; }        // cached and held by nobody: evictable
    int64_t n_held() const { return n_blocks_ - n_free_ - n_idle_; }
    int64_t n_available() const { return n_free_ + n_idle_; }  // what allocate() can still hand out
    int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }
    bool is_cached(int32_t block) const { return entries_[static_cast<size_t>(block)].cached; }

    // A block with reference count 1: a free one, else the least recently released cached one (forgotten by the
    // cache). -1 when every block is held.
    int32_t allocate();
    // Takes another reference (a cached block nobody held leaves the eviction order).
    void retain(int32_t block);
    // Drops a reference. At zero the block becomes free, or, when cached, the most recently released evictable one.
    void release(int32_t block);

    // The key of a full block holding `tokens` (block_tokens of them) after the prefix whose key is `parent`.
    uint64_t key(uint64_t parent, const int32_t *tokens) const;
    // The cached block with that content, or -1. Does not take a reference.
    int32_t find(uint64_t key, uint64_t parent, const int32_t *tokens) const;
    // Records that `block` (held by the caller, full) holds that content. No effect when the cache is off or
    // already knows the key (another sequence computed the same prefix first: its block stays the cached one).
    void publish(int32_t block, uint64_t key, uint64_t parent, const int32_t *tokens);

private:
    struct Entry {
        bool cached = false;
        uint64_t key = 0, parent = 0;
        int32_t prev = -1, next = -1;  // the eviction list (cached blocks with no reference), oldest at head
    };
    void unlink(int32_t block);
    void forget(int32_t block);

    int64_t n_blocks_, block_tokens_;
    bool prefix_cache_;
    std::vector<int32_t> refs_;
    std::vector<Entry> entries_;
    std::vector<int32_t> tokens_;   // [n_blocks][block_tokens]: the content of cached blocks
    std::vector<int32_t> free_;     // a stack of free blocks
    int64_t n_free_ = 0, n_idle_ = 0;
    int32_t lru_head_ = -1, lru_tail_ = -1;
    std::unordered_map<uint64_t, int32_t> by_key_;
};

}  // namespace kt::runtime
