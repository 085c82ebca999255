// The text kt-server sends: UTF-8 sanitized as browsers decode it, and cut at stop strings however the text is
// split into pieces.
#include <catch2/catch.hpp>

#include <random>

#include "text_output.h"

using namespace kt_server;

namespace {

// True when `s` is well-formed UTF-8, checked by decoding code points (a different method from sanitize_utf8's
// table of second-byte ranges).
bool well_formed(const std::string &s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char b = static_cast<unsigned char>(s[i]);
        int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? b : b & (0x7F >> n);
        for (int k = 1; k < n; ++k) {
            const unsigned char c = static_cast<unsigned char>(s[i + k]);
            if ((c >> 6) != 2) return false;
            cp = (cp << 6) | (c & 0x3F);
        }
        const uint32_t lowest[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < lowest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

TEST_CASE("sanitize_utf8 replaces ill-formed sequences as Unicode's maximal-subpart practice says") {
    // Expected values from CPython's bytes.decode("utf-8", "replace"), which follows that practice; the first is
    // the example of the Unicode Standard, section 3.9 ("U+FFFD Substitution of Maximal Subparts").
    const std::pair<std::string, std::string> cases[] = {
        {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
         "\x61\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\x62\xEF\xBF\xBD\x63\xEF\xBF\xBD\xEF\xBF\xBD\x64"},
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},                          // overlong "/"
        {"\xE0\x80\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},          // overlong, 3 bytes
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},          // a surrogate
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},  // above U+10FFFF
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},                                  // a cut-off emoji: one U+FFFD
        {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},                          // the whole emoji
        {"\xFF\xFE", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xE2\x82\xAC\xE2\x82", "\xE2\x82\xAC\xEF\xBF\xBD"},
        {"\x63\x61\x66\xC3\xA9", "\x63\x61\x66\xC3\xA9"},
        {"\xC3", "\xEF\xBF\xBD"},
        {"\xF8\x88\x80\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {std::string("a\0b", 3), std::string("a\0b", 3)},                 // NUL is a character
    };
    for (const auto &[in, expected] : cases) {
        INFO(in.size() << " bytes in");
        CHECK(sanitize_utf8(in) == expected);
    }
}

TEST_CASE("sanitize_utf8 on random bytes: always well-formed, and well-formed text comes back unchanged") {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 20000; ++trial) {
        std::string s(rng() % 12, '\0');
        for (char &c : s) {
            // Mostly bytes around the interesting ranges: continuation bytes, lead bytes, ASCII.
            const uint32_t r = rng() % 4;
            c = static_cast<char>(r == 0 ? rng() % 0x80 : r == 1 ? 0x80 + rng() % 0x40 : 0xC0 + rng() % 0x40);
        }
        const std::string out = sanitize_utf8(s);
        INFO("trial " << trial);
        REQUIRE(well_formed(out));
        if (well_formed(s)) REQUIRE(out == s);
        REQUIRE(sanitize_utf8(out) == out);
    }
}

TEST_CASE("StopMatcher: the text before the first stop string, however the text is split") {
    std::mt19937 rng(11);
    const char alphabet[] = "ab\n";
    for (int trial = 0; trial < 5000; ++trial) {
        std::string text(rng() % 40, 'a');
        for (char &c : text) c = alphabet[rng() % 3];
        std::vector<std::string> stops;
        for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
            std::string s(1 + rng() % 4, 'a');
            for (char &c : s) c = alphabet[rng() % 3];
            stops.push_back(s);
        }
        // Reference, on the whole text: the first position at which some stop string is complete, cut where the
        // longest of those ending there begins.
        size_t cut = std::string::npos;
        for (size_t end = 1; end <= text.size() && cut == std::string::npos; ++end) {
            for (const std::string &s : stops) {
                if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) cut = std::min(cut, end - s.size());
            }
        }
        const std::string expected = cut == std::string::npos ? text : text.substr(0, cut);

        StopMatcher m(stops);
        std::string out;
        size_t at = 0;
        while (at < text.size()) {
            const size_t n = std::min(text.size() - at, static_cast<size_t>(rng() % 5));
            const std::string sent = m.push(text.substr(at, n));
            // Nothing is ever sent that the full text's answer does not start with at that point.
            out += sent;
            REQUIRE(expected.compare(0, out.size(), out) == 0);
            at += n;
        }
        out += m.finish();
        INFO("trial " << trial);
        REQUIRE(out == expected);
        REQUIRE(m.stopped() == (cut != std::string::npos));
    }
}

TEST_CASE("StopMatcher: a stop string across pieces, held-back text released, nothing after the stop") {
    StopMatcher m({"</s>", "\n\n"});
    CHECK(m.push("Hello <") == "Hello ");  // "<" may begin "</s>"
    CHECK(m.push("/") == "");
    CHECK(m.push("x") == "</x");           // it did not
    CHECK(m.push(" end\n") == " end");
    CHECK(m.push("\nmore") == "");
    CHECK(m.stopped());
    CHECK(m.push("later") == "");
    CHECK(m.finish() == "");

    StopMatcher none({});
    CHECK(none.push("a\n\n") == "a\n\n");
    CHECK(none.finish() == "");

    StopMatcher tail({"STOP"});
    CHECK(tail.push("ST") == "");
    CHECK(tail.finish() == "ST");  // the stream ended before the stop string did
    CHECK_FALSE(tail.stopped());

    // The first stop string to be complete wins, also when a longer one began earlier.
    StopMatcher overlap({"abc", "b"});
    CHECK(overlap.push("ab") == "a");

    // Multi-byte characters are never split: held-back text starts where a stop string starts.
    StopMatcher utf8({"\xC3\xA9t\xC3\xA9"});  // "été"
    CHECK(utf8.push("caf\xC3\xA9") == "caf");
    CHECK(utf8.push(" ") == "\xC3\xA9 ");
}
