// Unicode tables and UTF-8 helpers; see unicode.h.
#include "model/tokenizer/unicode.h"

#include <array>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kt::tokenizer::unicode {

namespace {

constexpr uint8_t kUnassigned = 0;

struct CategoryRun {
    uint32_t first;
    uint8_t flags;
};
struct WhiteSpaceRange {
    uint32_t first, last;
};

#include "model/tokenizer/unicode_tables.inc"

// A two-stage lookup table built once from the runs: stage 1 maps each 256-code-point block to a block of
// stage 2, identical blocks are shared. About 0x1100 + ~350 * 256 bytes, and a lookup is two loads.
class FlagTable {
public:
    FlagTable() {
        std::vector<uint8_t> all(kMaxCodePoint + 1);
        const size_t n_runs = sizeof kCategoryRuns / sizeof kCategoryRuns[0];
        for (size_t r = 0; r < n_runs; ++r) {
            const uint32_t end = r + 1 < n_runs ? kCategoryRuns[r + 1].first : kMaxCodePoint + 1;
            for (uint32_t c = kCategoryRuns[r].first; c < end; ++c) all[c] = kCategoryRuns[r].flags;
        }
        for (const WhiteSpaceRange &w : kWhiteSpaceRanges)
            for (uint32_t c = w.first; c <= w.last; ++c) all[c] |= kWhitespace;

        stage1_.resize(kBlocks);
        std::unordered_map<std::string_view, uint16_t> seen;
        for (uint32_t b = 0; b < kBlocks; ++b) {
            const std::string_view block(reinterpret_cast<const char *>(all.data()) + b * kBlockSize, kBlockSize);
            auto [it, inserted] = seen.emplace(block, static_cast<uint16_t>(seen.size()));
            if (inserted) blocks_.insert(blocks_.end(), block.begin(), block.end());
            stage1_[b] = it->second;
        }
    }

    uint8_t get(uint32_t cpt) const {
        if (cpt > kMaxCodePoint) return 0;
        return blocks_[static_cast<size_t>(stage1_[cpt >> 8]) * kBlockSize + (cpt & 0xFF)];
    }

private:
    static constexpr uint32_t kBlockSize = 256;
    static constexpr uint32_t kBlocks = (kMaxCodePoint + 1) / kBlockSize;
    std::vector<uint16_t> stage1_;
    std::vector<uint8_t> blocks_;
};

const FlagTable &flag_table() {
    static const FlagTable table;  // thread-safe initialisation (C++11 magic statics)
    return table;
}

// ASCII is the bulk of most text: answer it from a small table without touching the big one.
struct AsciiFlags {
    std::array<uint8_t, 128> v{};
    AsciiFlags() {
        for (uint32_t c = 0; c < 128; ++c) v[c] = flag_table().get(c);
    }
};

struct ByteMap {
    std::array<uint32_t, 256> to_cpt{};
    std::array<int16_t, 512> from_cpt{};  // the image lies below U+0200
    ByteMap() {
        from_cpt.fill(-1);
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            to_cpt[b] = printable ? b : next++;
            from_cpt[to_cpt[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteMap &byte_map() {
    static const ByteMap map;
    return map;
}

}  // namespace

uint8_t flags(uint32_t cpt) {
    static const AsciiFlags ascii;
    return cpt < 128 ? ascii.v[cpt] : flag_table().get(cpt);
}

uint32_t decode_utf8(std::string_view s, size_t *offset) {
    const size_t at = *offset;
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[at + i]); };
    const auto continuation = [&](size_t i) { return at + i < s.size() && (byte(i) & 0xC0) == 0x80; };
    const uint8_t b0 = byte(0);
    uint32_t cpt;
    size_t len;
    if (b0 < 0x80) {
        cpt = b0;
        len = 1;
    } else if ((b0 & 0xE0) == 0xC0 && continuation(1)) {
        cpt = (b0 & 0x1Fu) << 6 | (byte(1) & 0x3Fu);
        len = 2;
    } else if ((b0 & 0xF0) == 0xE0 && continuation(1) && continuation(2)) {
        cpt = (b0 & 0x0Fu) << 12 | (byte(1) & 0x3Fu) << 6 | (byte(2) & 0x3Fu);
        len = 3;
    } else if ((b0 & 0xF8) == 0xF0 && continuation(1) && continuation(2) && continuation(3)) {
        cpt = (b0 & 0x07u) << 18 | (byte(1) & 0x3Fu) << 12 | (byte(2) & 0x3Fu) << 6 | (byte(3) & 0x3Fu);
        len = 4;
        if (cpt > kMaxCodePoint) {
            cpt = kReplacementChar;
            len = 1;
        }
    } else {
        cpt = kReplacementChar;
        len = 1;
    }
    *offset = at + len;
    return cpt;
}

void append_utf8(std::string *dst, uint32_t cpt) {
    if (cpt > kMaxCodePoint) cpt = kReplacementChar;
    if (cpt < 0x80) {
        dst->push_back(static_cast<char>(cpt));
    } else if (cpt < 0x800) {
        dst->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
        dst->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else if (cpt < 0x10000) {
        dst->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
        dst->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        dst->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    } else {
        dst->push_back(static_cast<char>(0xF0 | (cpt >> 18)));
        dst->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
        dst->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
        dst->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
    }
}

size_t complete_prefix_length(std::string_view s) {
    // A split character has its lead byte among the last three bytes, followed only by continuation bytes.
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const uint8_t b = static_cast<uint8_t>(s[n - back]);
        if ((b & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for its lead
        const size_t need = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

uint32_t byte_to_code_point(uint8_t byte) { return byte_map().to_cpt[byte]; }

int unicode_to_byte(uint32_t cpt) { return cpt < 512 ? byte_map().from_cpt[cpt] : -1; }

}  // namespace kt::tokenizer::unicode
