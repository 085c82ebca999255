#include "runtime/kv_blocks.h"

#include <algorithm>
#include <cstddef>

#include "model/tokenizer/flat_hash.h"

namespace kt::runtime {

KvBlocks::KvBlocks(int64_t n_blocks, int64_t block_tokens, bool prefix_cache)
    : n_blocks_(n_blocks), block_tokens_(block_tokens), prefix_cache_(prefix_cache) {
    refs_.assign(static_cast<size_t>(n_blocks), 0);
    entries_.resize(static_cast<size_t>(n_blocks));
    if (prefix_cache) tokens_.resize(static_cast<size_t>(n_blocks * block_tokens));
    // Handed out lowest id first (the stack's top is its end).
    free_.resize(static_cast<size_t>(n_blocks));
    for (int64_t i = 0; i < n_blocks; ++i) free_[static_cast<size_t>(i)] = static_cast<int32_t>(n_blocks - 1 - i);
    n_free_ = n_blocks;
}

int32_t KvBlocks::allocate() {
    int32_t block = -1;
    if (!free_.empty()) {
        block = free_.back();
        free_.pop_back();
        --n_free_;
    } else if (lru_head_ >= 0) {
        block = lru_head_;
        unlink(block);
        forget(block);
    } else {
        return -1;
    }
    refs_[static_cast<size_t>(block)] = 1;
    return block;
}

void KvBlocks::retain(int32_t block) {
    int32_t &refs = refs_[static_cast<size_t>(block)];
    if (refs == 0) unlink(block);  // only cached blocks are found with no reference
    ++refs;
}

void KvBlocks::release(int32_t block) {
    int32_t &refs = refs_[static_cast<size_t>(block)];
    if (--refs > 0) return;
    Entry &e = entries_[static_cast<size_t>(block)];
    if (!e.cached) {
        free_.push_back(block);
        ++n_free_;
        return;
    }
    e.prev = lru_tail_;
    e.next = -1;
    if (lru_tail_ >= 0) entries_[static_cast<size_t>(lru_tail_)].next = block;
    else lru_head_ = block;
    lru_tail_ = block;
    ++n_idle_;
}

void KvBlocks::unlink(int32_t block) {
    Entry &e = entries_[static_cast<size_t>(block)];
    if (e.prev >= 0) entries_[static_cast<size_t>(e.prev)].next = e.next;
    else lru_head_ = e.next;
    if (e.next >= 0) entries_[static_cast<size_t>(e.next)].prev = e.prev;
    else lru_tail_ = e.prev;
    e.prev = e.next = -1;
    --n_idle_;
}

void KvBlocks::forget(int32_t block) {
    Entry &e = entries_[static_cast<size_t>(block)];
    by_key_.erase(e.key);
    e.cached = false;
}

uint64_t KvBlocks::key(uint64_t parent, const int32_t *tokens) const {
    // A 64-bit finalizer (every input bit reaches every output bit) over the parent key, then each token.
    uint64_t h = tokenizer::hash_u64(parent + 0x9e3779b97f4a7c15ull);
    for (int64_t i = 0; i < block_tokens_; ++i) h = tokenizer::hash_u64(h ^ static_cast<uint32_t>(tokens[i]));
    return h;
}

int32_t KvBlocks::find(uint64_t key, uint64_t parent, const int32_t *tokens) const {
    if (!prefix_cache_) return -1;
    const auto it = by_key_.find(key);
    if (it == by_key_.end()) return -1;
    const Entry &e = entries_[static_cast<size_t>(it->second)];
    const int32_t *stored = tokens_.data() + static_cast<size_t>(it->second) * block_tokens_;
    if (e.parent != parent || !std::equal(tokens, tokens + block_tokens_, stored)) return -1;
    return it->second;
}

void KvBlocks::publish(int32_t block, uint64_t key, uint64_t parent, const int32_t *tokens) {
    if (!prefix_cache_ || entries_[static_cast<size_t>(block)].cached) return;
    if (!by_key_.emplace(key, block).second) return;
    Entry &e = entries_[static_cast<size_t>(block)];
    e.cached = true;
    e.key = key;
    e.parent = parent;
    std::copy(tokens, tokens + block_tokens_, tokens_.begin() + static_cast<std::ptrdiff_t>(block) * block_tokens_);
}

}  // namespace kt::runtime
