// kt-tokenize: print the token ids of a text for a GGUF's vocabulary, following llama-tokenize's conventions.
//
//   kt-tokenize -m FILE [options] TEXT        (or -p TEXT, -f TEXTFILE, --stdin)
//
//   -m, --model FILE       the GGUF (a vocabulary-only file is enough)
//   -p, --prompt TEXT      the text (a bare argument works too)
//   -f, --file FILE        read the text from a file
//   --stdin                read the text from standard input
//   --no-bos               do not add BOS even when the vocabulary asks for it (add_special off)
//   --no-parse-special     tokenize "<|im_start|>" and friends as plain text
//   --no-escape            take \n, \t, \\ ... literally (by default they are processed, as llama-tokenize does)
//   --ids                  print the ids as one list: [1, 2, 3]   (llama-tokenize's --ids)
//   --json                 print a JSON array of ids: [1,2,3]
//   --show-count           print the number of tokens at the end
//
// Default output is llama-tokenize's: one line per token, "%6d -> '%s'" with the token's text (a piece that is not
// whole UTF-8 is shown as its bytes, <0xE4>). Exit status: 0 on success, 1 when the file or text cannot be
// processed, 2 on bad usage.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "kt.h"

namespace {

int usage(const char *problem) {
    if (problem) std::fprintf(stderr, "kt-tokenize: %s\n", problem);
    std::fprintf(stderr,
                 "usage: kt-tokenize -m FILE [--no-bos] [--no-parse-special] [--no-escape] [--ids | --json]\n"
                 "                   [--show-count] (TEXT | -p TEXT | -f FILE | --stdin)\n");
    return 2;
}

bool read_file(const char *path, std::string *out) {
    FILE *f = std::fopen(path, "rb");
    if (!f) return false;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
    const bool ok = !std::ferror(f);
    std::fclose(f);
    return ok;
}

// llama.cpp's escape processing: \n \r \t \' \" \\ and \xNN; anything else is kept as written.
std::string process_escapes(const std::string &in) {
    std::string out;
    for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '\\' || i + 1 >= in.size()) {
            out += in[i];
            continue;
        }
        const char c = in[++i];
        switch (c) {
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case '\'': out += '\''; break;
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case 'x':
                if (i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
                    std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
                    out += static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16));
                    i += 2;
                    break;
                }
                [[fallthrough]];
            default:
                out += '\\';
                out += c;
        }
    }
    return out;
}

// True when s is complete, valid UTF-8 (so it can be printed as text).
bool valid_utf8(const char *s, int64_t n) {
    for (int64_t i = 0; i < n;) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n) return false;
        for (int k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    const char *model_path = nullptr, *file_path = nullptr;
    std::string text;
    bool have_text = false, from_stdin = false, add_bos = true, parse_special = true, escape = true;
    bool ids_list = false, json = false, show_count = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> const char * { return i + 1 < argc ? argv[++i] : nullptr; };
        if (a == "-m" || a == "--model") {
            if (!(model_path = value())) return usage("-m needs a file");
        } else if (a == "-p" || a == "--prompt") {
            const char *v = value();
            if (!v) return usage("-p needs a text");
            text = v;
            have_text = true;
        } else if (a == "-f" || a == "--file") {
            if (!(file_path = value())) return usage("-f needs a file");
        } else if (a == "--stdin") {
            from_stdin = true;
        } else if (a == "--no-bos") {
            add_bos = false;
        } else if (a == "--no-parse-special") {
            parse_special = false;
        } else if (a == "--no-escape") {
            escape = false;
        } else if (a == "--ids") {
            ids_list = true;
        } else if (a == "--json") {
            json = true;
        } else if (a == "--show-count") {
            show_count = true;
        } else if (a == "-h" || a == "--help") {
            usage(nullptr);
            return 0;
        } else if (!a.empty() && a[0] == '-' && a != "-") {
            return usage(("unknown option " + a).c_str());
        } else {
            if (have_text) return usage("more than one text given");
            text = a;
            have_text = true;
        }
    }
    if (!model_path) return usage("no model given (-m FILE)");
    if (have_text + (file_path != nullptr) + from_stdin != 1) return usage("give exactly one of TEXT, -p, -f, --stdin");
    if (ids_list && json) return usage("--ids and --json exclude each other");
    if (file_path && !read_file(file_path, &text)) {
        std::fprintf(stderr, "kt-tokenize: cannot read %s: %s\n", file_path, std::strerror(errno));
        return 1;
    }
    if (from_stdin) text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (escape) text = process_escapes(text);

    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    if (kt_model_load(model_path, nullptr, &model, &err) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-tokenize: %s\n", err.message);
        return 1;
    }
    // Ask for the count first, then fill (the size negotiation every kt buffer call uses).
    int64_t count = 0;
    kt_status s = kt_tokenize(model, text.data(), text.size(), add_bos, parse_special, nullptr, 0, &count);
    std::vector<int32_t> ids(static_cast<size_t>(count));
    if (s == KT_STATUS_BUFFER_TOO_SMALL)
        s = kt_tokenize(model, text.data(), text.size(), add_bos, parse_special, ids.data(), count, &count);
    if (s != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-tokenize: %s\n", kt_model_last_error(model));
        kt_model_free(model);
        return 1;
    }

    if (json || ids_list) {
        std::string line = "[";
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? (json ? "," : ", ") : "") + std::to_string(ids[i]);
        std::printf("%s]\n", line.c_str());
    } else {
        std::vector<char> piece(256);
        for (int32_t id : ids) {
            int64_t len = 0;
            s = kt_token_to_piece(model, id, 1, 0, piece.data(), static_cast<int64_t>(piece.size()), &len);
            if (s == KT_STATUS_BUFFER_TOO_SMALL) {
                piece.resize(static_cast<size_t>(len) + 1);
                s = kt_token_to_piece(model, id, 1, 0, piece.data(), static_cast<int64_t>(piece.size()), &len);
            }
            if (s != KT_STATUS_OK) {
                std::fprintf(stderr, "kt-tokenize: %s\n", kt_model_last_error(model));
                kt_model_free(model);
                return 1;
            }
            std::string shown;
            if (valid_utf8(piece.data(), len)) {
                shown.assign(piece.data(), static_cast<size_t>(len));
            } else {
                for (int64_t k = 0; k < len; ++k) {
                    char hex[8];
                    std::snprintf(hex, sizeof hex, "<0x%02X>", static_cast<unsigned char>(piece[static_cast<size_t>(k)]));
                    shown += hex;
                }
            }
            std::printf("%6d -> '%s'\n", id, shown.c_str());
        }
    }
    if (show_count) std::printf("Total number of tokens: %zu\n", ids.size());
    kt_model_free(model);
    return 0;
}
