// How kt.h's structs cross the ABI as they grow: one reader for the structs callers pass in (params) and one
// writer for the structs kt fills (info, perf, kt_error), both driven by each struct's size history.
//
// A caller states the size of the struct it was compiled with in struct_size. kt accepts:
//   - a size the struct has had in some version of kt.h (an older or the current caller): an input struct's fields
//     past that size read 0 (so a field appended later must be defined so that 0 means what callers got before
//     it existed), and an output struct gets only that prefix written;
//   - a size larger than today's (a caller built against a newer kt.h): an input struct's fields this kt does not
//     know are ignored, and an output struct's are written as 0.
// Any other size, e.g. one that ends in the middle of a field or is smaller than the first version, is
// KT_STATUS_INVALID_ARGUMENT with a message naming the struct, the size and the sizes it has had.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/status.h"
#include "kt.h"

namespace kt::api {

// Every size a struct has had, oldest first; the last is today's sizeof. The list is the struct's history:
// appending a field adds the new size at the end, and no entry is ever removed or changed (old callers pass
// them). The sizes are literal numbers so that a struct that grows without its list growing stops the build
// (the static_assert in KT_STRUCT_SIZES) instead of silently turning away every older caller.
template <typename T>
struct StructSizes;

#define KT_STRUCT_SIZES(type, ...)                                                                              \
    template <>                                                                                                 \
    struct StructSizes<type> {                                                                                  \
        static constexpr const char *name = #type;                                                              \
        static constexpr uint32_t sizes[] = {__VA_ARGS__};                                                      \
        static constexpr size_t count = sizeof sizes / sizeof sizes[0];                                         \
        static_assert(sizes[count - 1] == sizeof(type),                                                         \
                      #type " changed size: append its new size to its KT_STRUCT_SIZES list in api_structs.h"); \
    }

// Input structs (kt reads them).
KT_STRUCT_SIZES(kt_model_params, 32, 40, 56, 96, 104);
KT_STRUCT_SIZES(kt_context_params, 48);
KT_STRUCT_SIZES(kt_sampler_params, 48);
KT_STRUCT_SIZES(kt_generate_params, 56);
KT_STRUCT_SIZES(kt_chat_params, 32);
KT_STRUCT_SIZES(kt_expert_pool_params, 88);
KT_STRUCT_SIZES(kt_expert_weights, 40);
KT_STRUCT_SIZES(kt_expert_forward, 56);
KT_STRUCT_SIZES(kt_engine_params, 56);
KT_STRUCT_SIZES(kt_sequence_params, 72);
// Output structs (kt writes them).
KT_STRUCT_SIZES(kt_error, 1032);
KT_STRUCT_SIZES(kt_tensor_info, 80);
KT_STRUCT_SIZES(kt_vocab_info, 56);
KT_STRUCT_SIZES(kt_perf, 80);
KT_STRUCT_SIZES(kt_roofline, 72, 88);
KT_STRUCT_SIZES(kt_expert_pool_info, 72, 176);
KT_STRUCT_SIZES(kt_gemm_counts, 112);
KT_STRUCT_SIZES(kt_sequence_info, 64);
KT_STRUCT_SIZES(kt_engine_stats, 216);

#undef KT_STRUCT_SIZES

// Whether `size` is one kt accepts for T (see the top of this file).
template <typename T>
bool struct_size_ok(uint32_t size) {
    using Sizes = StructSizes<T>;
    if (size > Sizes::sizes[Sizes::count - 1]) return true;
    for (uint32_t s : Sizes::sizes)
        if (s == size) return true;
    return false;
}

template <typename T>
Status check_struct_size(uint32_t size, const char *what) {
    if (struct_size_ok<T>(size)) return Status::ok();
    using Sizes = StructSizes<T>;
    std::string known;
    for (uint32_t s : Sizes::sizes) known += (known.empty() ? "" : ", ") + std::to_string(s);
    return Status::error(KT_STATUS_INVALID_ARGUMENT,
                         "%s: struct_size %u is not a size %s has had (%s, or larger from a newer kt.h); set it to "
                         "sizeof(%s) or use its _init function",
                         what, size, Sizes::name, known.c_str(), Sizes::name);
}

// A T of zeros with struct_size = sizeof(T): the start of every struct kt fills (defaults, results).
template <typename T>
T zeroed_struct() {
    static_assert(std::is_trivially_copyable_v<T>);
    T value;
    std::memset(static_cast<void *>(&value), 0, sizeof value);
    value.struct_size = sizeof value;
    return value;
}

// Reads the caller's input struct into *out: the prefix its struct_size declares, zeros after it. *out's
// struct_size becomes sizeof(T). `given` must not be NULL.
template <typename T>
Status read_struct(const T *given, T *out, const char *what) {
    static_assert(std::is_trivially_copyable_v<T>);
    KT_TRY(check_struct_size<T>(given->struct_size, what));
    const size_t n = given->struct_size < sizeof(T) ? given->struct_size : sizeof(T);
    std::memset(static_cast<void *>(out), 0, sizeof(T));
    std::memcpy(static_cast<void *>(out), given, n);
    out->struct_size = sizeof(T);
    return Status::ok();
}

// Writes `value` to the caller's output struct: the prefix its struct_size declares, and zeros from sizeof(T) up
// to a larger struct_size. The caller's struct_size is kept. `out` must not be NULL; nothing is written when its
// size is refused.
template <typename T>
Status write_struct(const T &value, T *out, const char *what) {
    static_assert(std::is_trivially_copyable_v<T>);
    const uint32_t size = out->struct_size;
    KT_TRY(check_struct_size<T>(size, what));
    auto *dst = reinterpret_cast<unsigned char *>(out);
    if (size <= sizeof(T)) {
        std::memcpy(dst, &value, size);
    } else {
        std::memcpy(dst, &value, sizeof(T));
        std::memset(dst + sizeof(T), 0, size - sizeof(T));
    }
    out->struct_size = size;
    return Status::ok();
}

}  // namespace kt::api
