// The generated text on its way to the client: always valid UTF-8, and cut at the first stop string.
//
// kt_detokenizer hands out whole characters while a sequence streams, but passes through bytes that can never
// become UTF-8 (a model may emit any byte token) and flushes an unfinished character at the end. JSON needs valid
// UTF-8, so every piece is sanitized first: each ill-formed sequence becomes U+FFFD, as a browser's decoder does.
//
// Stop strings are matched on the text, not on tokens, so a stop string that spans several tokens is found, and
// text that might be the start of one is held back until it is known not to be. The stop string itself is never
// emitted. The text stops where the first stop string is complete (as a model that stops there would never
// write the rest of a longer one), whatever the pieces were.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kt_server {

// `text` with every ill-formed UTF-8 sequence replaced by U+FFFD (one per maximal ill-formed subpart, the
// Unicode "substitution of maximal subparts" practice). Overlong forms, surrogates and code points above
// U+10FFFF are ill-formed.
std::string sanitize_utf8(std::string_view text);

class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

    // Takes the next piece of text (valid UTF-8) and returns what may be sent now. Once a stop string has been
    // seen, stopped() is true, the text before it has been returned, and every later push returns "".
    std::string push(std::string_view piece);
    // The end of the stream: returns what was held back (nothing once stopped).
    std::string finish();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string pending_;  // text that may be the beginning of a stop string
    bool stopped_ = false;
};

}  // namespace kt_server
