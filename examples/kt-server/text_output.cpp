#include "text_output.h"

#include <algorithm>
#include <utility>

namespace kt_server {

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// The sequence length a lead byte starts (0: never a lead byte) and the allowed range of the second byte, which
// is where overlong forms, surrogates and code points above U+10FFFF are excluded (Unicode Table 3-7).
struct Lead {
    int length;
    unsigned char second_lo, second_hi;
};

Lead classify(unsigned char b) {
    if (b < 0x80) return {1, 0, 0};
    if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

}  // namespace

std::string sanitize_utf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        const unsigned char b = static_cast<unsigned char>(text[i]);
        const Lead lead = classify(b);
        if (lead.length == 1) {
            out.push_back(static_cast<char>(b));
            ++i;
            continue;
        }
        if (lead.length == 0) {
            out += kReplacement;
            ++i;
            continue;
        }
        // Take continuation bytes while they fit; a maximal ill-formed prefix becomes one U+FFFD and the byte
        // that broke it starts over.
        size_t n = 1;
        while (n < static_cast<size_t>(lead.length) && i + n < text.size()) {
            const unsigned char c = static_cast<unsigned char>(text[i + n]);
            const unsigned char lo = n == 1 ? lead.second_lo : 0x80, hi = n == 1 ? lead.second_hi : 0xBF;
            if (c < lo || c > hi) break;
            ++n;
        }
        if (n == static_cast<size_t>(lead.length)) out.append(text.substr(i, n));
        else out += kReplacement;
        i += n;
    }
    return out;
}

std::string StopMatcher::push(std::string_view piece) {
    if (stopped_) return {};
    const size_t checked = pending_.size();  // every end position up to here was looked at by earlier pushes
    pending_.append(piece);
    if (stops_.empty()) return std::exchange(pending_, {});

    // The generation stops as soon as some stop string is complete: the first end position at which one ends,
    // and of those ending there the one that starts first. Text already sent never holds the start of a stop
    // string (that part is always kept back), so every candidate lies within pending_; and the answer does
    // not depend on how the text was split into pieces.
    for (size_t end = checked + 1; end <= pending_.size(); ++end) {
        size_t first = std::string::npos;
        for (const std::string &stop : stops_) {
            if (stop.size() <= end && pending_.compare(end - stop.size(), stop.size(), stop) == 0)
                first = std::min(first, end - stop.size());
        }
        if (first != std::string::npos) {
            stopped_ = true;
            std::string out = pending_.substr(0, first);
            pending_.clear();
            return out;
        }
    }

    // Keep back the longest end of pending_ that begins some stop string.
    size_t hold = 0;
    for (const std::string &stop : stops_) {
        for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k) {
            if (pending_.compare(pending_.size() - k, k, stop, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
}

std::string StopMatcher::finish() {
    if (stopped_) return {};
    return std::exchange(pending_, {});
}

}  // namespace kt_server
