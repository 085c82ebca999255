// Fuzz target: the five real vocabularies of shared/testdata/tokenizer (Qwen3, Llama 3, DeepSeek-V3 byte-level
// BPE; LLaMA 2, Mistral SentencePiece) through kt.h. The first byte picks the vocabulary and the flags, the rest is
// text. The text is tokenized (size query, then the ids), detokenized back, streamed through a kt_detokenizer one
// token at a time, and its bytes are also read as token ids (any int32, in or out of the vocabulary) and
// detokenized and streamed. Invariants besides clean statuses:
//   - the size query and the call agree on the count;
//   - the stream's pieces concatenate to kt_detokenize(remove_special 0) for vocabularies without space clean-up;
//   - byte-level BPE is lossless: detokenize(tokenize(text)) == text for valid UTF-8 without special parsing
//     (Qwen3 and DeepSeek-V3, whose detokenizers do not clean up spaces).
#include <string>
#include <vector>

#include "core/utf8.h"
#include "fuzz_support.h"

namespace {

struct Vocabulary {
    const char *file;
    bool lossless;  // byte-level without clean-up: text -> ids -> text is the identity on valid UTF-8
};
constexpr Vocabulary kVocabularies[] = {
    {"tokenizer/qwen3.gguf", true},       {"tokenizer/llama3.gguf", false},       {"tokenizer/deepseek-v3.gguf", true},
    {"tokenizer/llama2-spm.gguf", false}, {"tokenizer/mistral-spm.gguf", false},
};
constexpr int kCount = sizeof kVocabularies / sizeof kVocabularies[0];

const kt_model *vocabulary(int i) {
    static kt_model *models[kCount] = {};
    if (!models[i]) models[i] = kt::fuzz::load_vocabulary_or_die(kt::fuzz::testdata(kVocabularies[i].file));
    return models[i];
}

std::vector<int32_t> tokenize(const kt_model *m, const std::string &text, int32_t add_special, int32_t parse_special) {
    int64_t count = 0;
    kt_status s = kt_tokenize(m, text.data(), text.size(), add_special, parse_special, nullptr, 0, &count);
    if (s != KT_STATUS_BUFFER_TOO_SMALL) {
        kt::fuzz::expect_clean(s, kt_model_last_error(m), "kt_tokenize (size query)");
        if (s != KT_STATUS_OK) return {};
    }
    std::vector<int32_t> ids(static_cast<size_t>(count));
    int64_t again = 0;
    s = kt_tokenize(m, text.data(), text.size(), add_special, parse_special, ids.data(), count, &again);
    kt::fuzz::expect_clean(s, kt_model_last_error(m), "kt_tokenize");
    if (s == KT_STATUS_OK && again != count) kt::fuzz::broken_invariant("kt_tokenize: the size query and the call disagree");
    return s == KT_STATUS_OK ? ids : std::vector<int32_t>{};
}

// kt_detokenize, negotiating the size; false when kt refused the ids (with a clean status).
bool detokenize(const kt_model *m, const std::vector<int32_t> &ids, int32_t remove_special, int32_t unparse_special, std::string *out) {
    int64_t length = 0;
    std::vector<char> buf(64);
    kt_status s = kt_detokenize(m, ids.data(), static_cast<int64_t>(ids.size()), remove_special, unparse_special, buf.data(),
                                static_cast<int64_t>(buf.size()), &length);
    if (s == KT_STATUS_BUFFER_TOO_SMALL) {
        buf.resize(static_cast<size_t>(length) + 1);
        s = kt_detokenize(m, ids.data(), static_cast<int64_t>(ids.size()), remove_special, unparse_special, buf.data(),
                          static_cast<int64_t>(buf.size()), &length);
    }
    kt::fuzz::expect_clean(s, kt_model_last_error(m), "kt_detokenize");
    if (s != KT_STATUS_OK) return false;
    out->assign(buf.data(), static_cast<size_t>(length));
    return true;
}

// The streaming detokenizer over `ids`; false when it refused one (with a clean status).
bool stream(const kt_model *m, const std::vector<int32_t> &ids, int32_t unparse_special, std::string *out) {
    kt_detokenizer *d = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    kt::fuzz::expect_clean(kt_detokenizer_create(m, unparse_special, &d, &err), err.message, "kt_detokenizer_create");
    if (!d) return false;
    bool ok = true;
    char small[8];  // small on purpose: the size negotiation runs often
    std::vector<char> big;
    for (size_t i = 0; i <= ids.size() && ok; ++i) {
        int64_t length = 0;
        const bool flush = i == ids.size();
        kt_status s = flush ? kt_detokenizer_flush(d, small, sizeof small, &length) : kt_detokenizer_push(d, ids[i], small, sizeof small, &length);
        const char *text = small;
        if (s == KT_STATUS_BUFFER_TOO_SMALL) {
            big.resize(static_cast<size_t>(length) + 1);
            s = flush ? kt_detokenizer_flush(d, big.data(), static_cast<int64_t>(big.size()), &length)
                      : kt_detokenizer_push(d, ids[i], big.data(), static_cast<int64_t>(big.size()), &length);
            text = big.data();
        }
        kt::fuzz::expect_clean(s, kt_detokenizer_last_error(d), flush ? "kt_detokenizer_flush" : "kt_detokenizer_push");
        ok = s == KT_STATUS_OK;
        if (ok) out->append(text, static_cast<size_t>(length));
    }
    kt_detokenizer_free(d);
    return ok;
}

}  // namespace

// The vocabularies load before the first input (Qwen3's 151k tokens take seconds under the sanitizers), so no
// input is charged for them.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    for (int i = 0; i < kCount; ++i) vocabulary(i);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kt::fuzz::Bytes in(data, size);
    const uint8_t choice = in.u8();
    const int which = choice % kCount;
    const int32_t add_special = (choice >> 3) & 1, parse_special = (choice >> 4) & 1, unparse_special = (choice >> 5) & 1;
    const kt_model *m = vocabulary(which);
    const std::string text = in.rest();

    const std::vector<int32_t> ids = tokenize(m, text, add_special, parse_special);
    std::string back, streamed;
    const bool detokenized = detokenize(m, ids, 0, unparse_special, &back);
    const bool was_streamed = stream(m, ids, unparse_special, &streamed);
    if (kVocabularies[which].lossless) {
        if (detokenized && was_streamed && back != streamed) kt::fuzz::broken_invariant("the stream differs from kt_detokenize");
        if (!add_special && !parse_special && unparse_special && kt::valid_utf8(text) && detokenized && back != text)
            kt::fuzz::broken_invariant("byte-level BPE did not round-trip");
    }

    // The same bytes as raw ids: most are outside the vocabulary, and must be refused cleanly.
    std::vector<int32_t> raw(text.size() / 4);
    if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
    for (int32_t &id : raw)
        if (choice & 0x40) id = static_cast<int32_t>(static_cast<uint32_t>(id) % 160000);  // mostly in range
    std::string ignored;
    detokenize(m, raw, 1, unparse_special, &ignored);
    ignored.clear();
    stream(m, raw, unparse_special, &ignored);
    for (size_t i = 0; i < raw.size() && i < 16; ++i) {
        const char *piece = nullptr;
        uint64_t length = 0;
        kt::fuzz::expect_clean(kt_token_text(m, raw[i], &piece, &length), kt_model_last_error(m), "kt_token_text");
        int32_t eog = 0;
        kt::fuzz::expect_clean(kt_token_is_eog(m, raw[i], &eog), kt_model_last_error(m), "kt_token_is_eog");
    }
    return 0;
}
