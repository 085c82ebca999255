// The GGML tensor types kt knows: block geometry and names.
//
// Block formats are laid out exactly as in ggml-common.h (reference/gguf-and-quants.md §2); the sizes below are
// what a GGUF file's tensor byte sizes are computed from, so a wrong entry would make the reader accept
// truncated tensors. Each entry is pinned by a static_assert against the block structs in ref/blocks.h.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/checked_math.h"
#include "kt.h"

namespace kt::ops {

struct TypeTraits {
    int32_t type;           // KT_TYPE_*
    const char *name;       // "Q4_K"
    int64_t block_size;     // elements per block (1 for plain types)
    int64_t block_bytes;    // bytes per block
};

// nullptr for unknown or removed type ids.
const TypeTraits *type_traits(int32_t type);

// Lookup by name ("q4_k" and "Q4_K" both work); nullptr if unknown.
const TypeTraits *type_traits_by_name(std::string_view name);

// Bytes of one row of `n` elements; requires n % block_size == 0 (callers validate first).
inline int64_t row_bytes(const TypeTraits &t, int64_t n) { return n / t.block_size * t.block_bytes; }

// row_bytes for a length nothing has bounded yet (a caller's argument): false where the size does not fit.
inline bool checked_row_bytes(const TypeTraits &t, int64_t n, int64_t *out) {
    return checked_mul(n / t.block_size, t.block_bytes, out);
}

}  // namespace kt::ops
