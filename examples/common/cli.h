// What kt's command-line programs share: strict number parsing, the sampling flags, the kt calls that fill caller
// buffers (asked for their size, then called again), and streaming generated text through a kt_detokenizer.
// Header-only and built on kt.h alone, like the programs themselves.
#pragma once

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kt.h"

namespace kt_cli {

// The whole text must be the number: "12x", "", and out-of-range values are rejected.
inline bool parse_int(const char *text, int64_t *out) {
    char *end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') return false;
    *out = v;
    return true;
}

inline bool parse_float(const char *text, float *out) {
    char *end = nullptr;
    errno = 0;
    const float v = std::strtof(text, &end);
    if (errno != 0 || end == text || *end != '\0') return false;
    *out = v;
    return true;
}

// "1,8,32": non-negative integers separated by commas, at least one.
inline bool parse_int_list(const char *text, std::vector<int64_t> *out) {
    out->clear();
    const std::string s = text;
    size_t at = 0;
    while (at <= s.size()) {
        const size_t comma = s.find(',', at);
        const std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        int64_t v = 0;
        if (!parse_int(item.c_str(), &v) || v < 0) return false;
        out->push_back(v);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return !out->empty();
}

// The machine's 1-minute load average (/proc/loadavg), to be stated next to every number taken on a shared
// machine; -1 when unknown.
inline double load_average() {
    FILE *f = std::fopen("/proc/loadavg", "r");
    double load = -1;
    if (f) {
        if (std::fscanf(f, "%lf", &load) != 1) load = -1;
        std::fclose(f);
    }
    return load;
}

enum class Flag { kNotMine, kTaken, kBadValue };

// Applies one sampling flag with its value to *sp: --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n
// --presence-penalty --frequency-penalty --seed (the programs' usage texts list them).
inline Flag sampling_flag(const std::string &flag, const char *value, kt_sampler_params *sp) {
    int64_t n = 0;
    float f = 0.0f;
    if (flag == "--top-k" || flag == "--repeat-last-n" || flag == "--seed") {
        const int64_t lowest = flag == "--repeat-last-n" ? -1 : 0;  // -1: the whole sequence
        const int64_t highest = flag == "--seed" ? INT64_MAX : INT32_MAX;
        if (!parse_int(value, &n) || n < lowest || n > highest) return Flag::kBadValue;
        if (flag == "--top-k") sp->top_k = static_cast<int32_t>(n);
        else if (flag == "--repeat-last-n") sp->repeat_last_n = static_cast<int32_t>(n);
        else sp->seed = static_cast<uint64_t>(n);
        return Flag::kTaken;
    }
    if (flag == "--temp" || flag == "--top-p" || flag == "--min-p" || flag == "--repeat-penalty" ||
        flag == "--presence-penalty" || flag == "--frequency-penalty") {
        if (!parse_float(value, &f)) return Flag::kBadValue;
        if (flag == "--temp") sp->temperature = f;
        else if (flag == "--top-p") sp->top_p = f;
        else if (flag == "--min-p") sp->min_p = f;
        else if (flag == "--repeat-penalty") sp->repeat_penalty = f;
        else if (flag == "--presence-penalty") sp->presence_penalty = f;
        else sp->frequency_penalty = f;
        return Flag::kTaken;
    }
    return Flag::kNotMine;
}

// A byte count with an optional binary suffix: 512M, 24G, 1048576 (K, M, G, T; "B"/"iB" after it accepted).
inline bool parse_bytes(const char *text, uint64_t *out) {
    if (!text || !*text) return false;
    char *end = nullptr;
    errno = 0;
    const double v = std::strtod(text, &end);
    if (errno != 0 || end == text || v < 0) return false;
    std::string unit(end);
    double scale = 1;
    if (!unit.empty()) {
        const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
        scale = c == 'K' ? 1024.0 : c == 'M' ? 1048576.0 : c == 'G' ? 1073741824.0 : c == 'T' ? 1099511627776.0 : 0.0;
        if (c == 'B' && unit.size() == 1) scale = 1;
        const std::string rest = unit.substr(1);
        if (scale == 0 || !(rest.empty() || rest == "B" || rest == "iB")) return false;
    }
    *out = static_cast<uint64_t>(v * scale);
    return true;
}

// The hybrid path's flags, applied to *mp: --device none|standin|cuda[:N], --device-budget BYTES,
// --device-experts N (per MoE layer; 0 = as many as fit), --device-deferred N (CPU experts per token landing one
// MoE layer late), --device-prefill N (MoE calls of more tokens than N run the whole layer on the device).
inline Flag device_flag(const std::string &flag, const char *value, kt_model_params *mp) {
    if (flag == "--device") {
        const std::string d = value;
        if (d == "none") mp->device = KT_DEVICE_NONE;
        else if (d == "standin") mp->device = KT_DEVICE_CPU_STANDIN;
        else if (d.rfind("cuda", 0) == 0) {
            mp->device = KT_DEVICE_CUDA;
            int64_t index = 0;
            if (d.size() > 4 && (d[4] != ':' || !parse_int(d.c_str() + 5, &index) || index < 0 || index > INT32_MAX))
                return Flag::kBadValue;
            mp->device_index = static_cast<int32_t>(index);
        } else return Flag::kBadValue;
        return Flag::kTaken;
    }
    if (flag == "--device-budget") return parse_bytes(value, &mp->device_budget_bytes) ? Flag::kTaken : Flag::kBadValue;
    if (flag == "--device-experts") {
        int64_t n = 0;
        if (!parse_int(value, &n) || n < 0) return Flag::kBadValue;
        mp->device_experts = n;
        return Flag::kTaken;
    }
    if (flag == "--device-deferred") {
        int64_t n = 0;
        if (!parse_int(value, &n) || n < 0 || n > INT32_MAX) return Flag::kBadValue;
        mp->device_deferred_experts = static_cast<int32_t>(n);
        return Flag::kTaken;
    }
    if (flag == "--device-prefill") {
        int64_t n = 0;
        if (!parse_int(value, &n) || n < 0 || n > INT32_MAX) return Flag::kBadValue;
        mp->device_prefill_threshold = static_cast<int32_t>(n);
        return Flag::kTaken;
    }
    return Flag::kNotMine;
}

// The usage lines of device_flag's flags.
inline const char *device_usage() {
    return "      --device D          run the hottest experts on a device as well: none (default), standin (the\n"
           "                          CPU stand-in: placement and overlap without a GPU), cuda or cuda:N\n"
           "      --device-budget B   device memory for the experts and the work buffer (e.g. 20G)\n"
           "      --device-experts N  experts per MoE layer on the device (default 0: as many as fit)\n"
           "      --device-deferred N at most N of each token's lowest-weighted CPU experts land one MoE layer\n"
           "                          late, computed while the next layer runs (default 0; it changes the numbers)\n"
           "      --device-prefill N  a MoE layer called with more than N tokens (a long prompt's chunk) runs all\n"
           "                          its experts on the device, copying them there (default 0: never)\n";
}

// The placement (and, once the model ran, the CPU/device split) as kt_model_device_plan gives it; "" without one.
inline std::string device_plan(const kt_model *model) {
    uint64_t n = 0;
    if (kt_model_device_plan(model, nullptr, 0, &n) != KT_STATUS_BUFFER_TOO_SMALL) return "";
    std::string text(n + 1, '\0');
    if (kt_model_device_plan(model, text.data(), text.size(), &n) != KT_STATUS_OK) return "";
    text.resize(n);
    return text;
}

// The bytes of a tensor's weights as the default kernels hold them, which a decode step reads: each matrix as
// kt_packed_matrix_bytes gives it, a vector or a type kt does not pack as the file holds it.
inline double packed_tensor_bytes(const kt_tensor_info &t) {
    uint64_t one = 0;
    if (t.n_dims < 2 || kt_packed_matrix_bytes(t.type, t.ne[1], t.ne[0], &one) != KT_STATUS_OK)
        return static_cast<double>(t.n_bytes);
    return static_cast<double>(one) * static_cast<double>(t.ne[2]) * static_cast<double>(t.ne[3]);
}

// ---------------------------------------------------------------------------------------------------------------
// The kt calls that fill caller buffers negotiate their size: ask, grow, ask again. Errors are the calls' own
// statuses; the message is in kt_model_last_error.

// The conversation rendered with the model's chat template (or the one `params` names).
inline kt_status render_chat(const kt_model *model, const std::vector<kt_chat_message> &turns,
                             const kt_chat_params &params, std::string *out) {
    int64_t length = 0;
    const int64_t n = static_cast<int64_t>(turns.size());
    kt_status s = kt_chat_apply_template(model, turns.data(), n, &params, nullptr, 0, &length);
    if (s != KT_STATUS_OK && s != KT_STATUS_BUFFER_TOO_SMALL) return s;
    out->assign(static_cast<size_t>(length) + 1, '\0');  // + the NUL kt writes
    s = kt_chat_apply_template(model, turns.data(), n, &params, out->data(), static_cast<int64_t>(out->size()), &length);
    out->resize(s == KT_STATUS_OK ? static_cast<size_t>(length) : 0);
    return s;
}

inline kt_status tokenize(const kt_model *model, const std::string &text, bool add_special, bool parse_special,
                          std::vector<int32_t> *out) {
    int64_t count = 0;
    kt_status s = kt_tokenize(model, text.data(), text.size(), add_special, parse_special, nullptr, 0, &count);
    if (s != KT_STATUS_OK && s != KT_STATUS_BUFFER_TOO_SMALL) return s;
    out->resize(static_cast<size_t>(count));
    s = kt_tokenize(model, text.data(), text.size(), add_special, parse_special, out->data(), count, &count);
    out->resize(s == KT_STATUS_OK ? static_cast<size_t>(count) : 0);
    return s;
}

// The text of `ids` (special tokens omitted, nothing removed), as kt_detokenize gives it.
inline kt_status detokenize(const kt_model *model, const std::vector<int32_t> &ids, std::string *out) {
    int64_t length = 0;
    const int64_t n = static_cast<int64_t>(ids.size());
    kt_status s = kt_detokenize(model, ids.data(), n, 0, 0, nullptr, 0, &length);
    if (s != KT_STATUS_OK && s != KT_STATUS_BUFFER_TOO_SMALL) return s;
    out->assign(static_cast<size_t>(length) + 1, '\0');
    s = kt_detokenize(model, ids.data(), n, 0, 0, out->data(), static_cast<int64_t>(out->size()), &length);
    out->resize(s == KT_STATUS_OK ? static_cast<size_t>(length) : 0);
    return s;
}

// Generated tokens as text: the detokenizer holds back an incomplete UTF-8 character until it is whole, and the
// buffer grows when a piece needs more room.
class TextPieces {
public:
    explicit TextPieces(kt_detokenizer *detokenizer) : detokenizer_(detokenizer) {}

    // Pushes a token (token < 0: flushes what is held back) and appends the text it completes to *out.
    kt_status push(int32_t token, std::string *out) {
        int64_t n = 0;
        kt_status s = KT_STATUS_BUFFER_TOO_SMALL;
        for (int attempt = 0; attempt < 2 && s == KT_STATUS_BUFFER_TOO_SMALL; ++attempt) {
            if (attempt > 0) buf_.resize(static_cast<size_t>(n) + 1);
            const int64_t capacity = static_cast<int64_t>(buf_.size());
            s = token >= 0 ? kt_detokenizer_push(detokenizer_, token, buf_.data(), capacity, &n)
                           : kt_detokenizer_flush(detokenizer_, buf_.data(), capacity, &n);
        }
        if (s == KT_STATUS_OK) out->append(buf_.data(), static_cast<size_t>(n));
        return s;
    }

private:
    kt_detokenizer *detokenizer_;
    std::vector<char> buf_ = std::vector<char>(256);
};

// Writes generated tokens to stdout as text.
class TextStream {
public:
    explicit TextStream(kt_detokenizer *detokenizer) : pieces_(detokenizer) {}

    // Pushes a token (token < 0: flushes what is held back) and prints the text it completes.
    void push(int32_t token) {
        text_.clear();
        if (pieces_.push(token, &text_) == KT_STATUS_OK) std::fwrite(text_.data(), 1, text_.size(), stdout);
        std::fflush(stdout);
    }

private:
    TextPieces pieces_;
    std::string text_;
};

}  // namespace kt_cli
