// Fuzz target: the GGUF reader on arbitrary bytes, then every metadata getter, a dequantization of every
// tensor the reader accepted, and the tokenizer built from the metadata (vocabulary validation, tokenization,
// detokenization and the chat template of whatever vocabulary the file holds). Anything other than a clean Status
// is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/tokenizer/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::unique_ptr<kt::gguf::File> file;
    kt::Status s = kt::gguf::File::parse(kt::mem::MappedFile::borrow(data, size), "fuzz", &file);
    if (!s.is_ok()) return 0;
    for (const kt::gguf::KeyValue &kv : file->metadata()) {
        int64_t i;
        double d;
        std::string_view str;
        bool b;
        uint64_t n = 0;
        (void)file->get_int(kv.key, &i);
        (void)file->get_float(kv.key, &d);
        (void)file->get_string(kv.key, &str);
        (void)file->get_bool(kv.key, &b);
        if (file->array_length(kv.key, &n).is_ok()) {
            for (uint64_t k = 0; k < n && k < 64; ++k) {
                (void)file->array_get_int(kv.key, k, &i);
                (void)file->array_get_float(kv.key, k, &d);
                (void)file->array_get_string(kv.key, k, &str);
            }
        }
    }
    std::vector<float> row;
    for (const kt::gguf::TensorInfo &t : file->tensors()) {
        if (!kt::ref::can_dequantize(t.type) || t.ne[0] > (1 << 20)) continue;
        row.resize(static_cast<size_t>(t.ne[0]));
        // The first row only: enough to touch the data's first and (via n_bytes) last bytes of the row.
        kt::ref::dequantize_row(t.type, t.data, row.data(), t.ne[0]);
    }

    std::unique_ptr<kt::tokenizer::Tokenizer> tok;
    if (!kt::tokenizer::Tokenizer::create(*file, &tok).is_ok()) return 0;
    for (const char *text : {"Hello world", "<|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd 123 \xf0\x9f\xa6\x99<|im_end|>", "\xff\xc0 x"}) {
        std::vector<int32_t> ids;
        if (!tok->tokenize(text, true, true, &ids).is_ok()) continue;
        std::string back;
        (void)tok->detokenize(ids.data(), ids.size(), false, true, &back);
    }
    std::string prompt;
    (void)kt::tokenizer::render_chat(tok->vocab(), {{"system", "s"}, {"user", "u"}, {"assistant", "a"}}, {}, &prompt);
    return 0;
}
