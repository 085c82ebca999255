// Overflow-checked integer arithmetic for sizes read from untrusted files.
//
// Every product of dimensions, byte size, padding and offset computed from a GGUF header goes through these:
// the historical GGUF heap overflows (reference/gguf-and-quants.md §1.9) all came from sums and products that
// wrapped silently.
#pragma once

#include <cstdint>

namespace kt {

// Each returns false (and leaves *out unspecified) when the exact result does not fit.
inline bool checked_add(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
inline bool checked_mul(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }

// Rounds x up to a multiple of `alignment` (any non-zero value, not only powers of two).
inline bool checked_align_up(uint64_t x, uint64_t alignment, uint64_t *out) {
    if (alignment == 0) return false;
    const uint64_t rem = x % alignment;
    if (rem == 0) {
        *out = x;
        return true;
    }
    return checked_add(x, alignment - rem, out);
}

}  // namespace kt
