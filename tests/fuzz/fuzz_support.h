// What the fuzz targets share: reading structured choices out of the fuzzer's bytes, and the rule that kt may
// refuse anything but must say why, never report an internal error, and never crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "kt.h"

namespace kt::fuzz {

// Consumes the input front to back; once it runs out every read gives zeros, so any input decodes to something.
class Bytes {
public:
    Bytes(const uint8_t *data, size_t size) : data_(data), size_(size) {}
    bool empty() const { return at_ >= size_; }
    size_t left() const { return empty() ? 0 : size_ - at_; }
    uint8_t u8() { return empty() ? 0 : data_[at_++]; }
    uint32_t u32() {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(u8()) << (8 * i);
        return v;
    }
    uint64_t u64() { return u32() | (static_cast<uint64_t>(u32()) << 32); }
    // An integer in [0, n) (n > 0).
    uint32_t below(uint32_t n) { return n <= 256 ? u8() % n : u32() % n; }
    float f32() {
        const uint32_t bits = u32();
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
    }
    // Up to `max` bytes, as a string.
    std::string text(size_t max) {
        const size_t n = std::min(left(), max);
        std::string s(reinterpret_cast<const char *>(data_ + at_), n);
        at_ += n;
        return s;
    }
    std::string rest() { return text(left()); }

private:
    const uint8_t *data_;
    size_t size_;
    size_t at_ = 0;
};

// A failed call must carry a status kt.h documents and a message; KT_STATUS_INTERNAL is a bug by definition.
// Either breach aborts, which the fuzzer reports with the input that caused it.
inline void expect_clean(kt_status status, const char *message, const char *call) {
    if (status == KT_STATUS_OK) return;
    if (status == KT_STATUS_INTERNAL || status < 0 || !message || !*message) {
        std::fprintf(stderr, "fuzz: %s returned status %d (%s) with message '%s'\n", call, status, kt_status_string(status),
                     message ? message : "(null)");
        std::abort();
    }
}

[[noreturn]] inline void broken_invariant(const char *what) {
    std::fprintf(stderr, "fuzz: %s\n", what);
    std::abort();
}

// shared/testdata/<relative>; the build passes KT_TESTDATA_DIR.
inline std::string testdata(const char *relative) { return std::string(KT_TESTDATA_DIR) + "/" + relative; }

// Loads a vocabulary the target needs and builds its tokenizer (kt builds it on first use, seconds for 151k
// tokens under the sanitizers), or stops the run: without it the target would test nothing.
inline kt_model *load_vocabulary_or_die(const std::string &path) {
    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt_vocab_info info;
    info.struct_size = sizeof info;
    if (kt_model_load(path.c_str(), nullptr, &model, &err) != KT_STATUS_OK || kt_vocab_get_info(model, &info) != KT_STATUS_OK) {
        std::fprintf(stderr, "fuzz: cannot load the vocabulary %s: %s\n", path.c_str(), model ? kt_model_last_error(model) : err.message);
        std::exit(1);
    }
    return model;
}

}  // namespace kt::fuzz
