// kt-inspect: print what a GGUF file holds (header, metadata, tensors, totals by type), as text or JSON, and
// dump one tensor's dequantized values.
//
//   kt-inspect FILE                   human-readable summary
//   kt-inspect --json FILE            the same, as one JSON object
//   kt-inspect --dump NAME OUT FILE   write tensor NAME as raw little-endian f32 to OUT
//
// A broken file prints the reader's message and exits with status 1; usage errors exit with 2.
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <string_view>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "kt.h"

namespace {

constexpr uint64_t kArrayPreview = 8;  // elements shown before a long array is summarised

int usage() {
    std::fprintf(stderr,
                 "usage: kt-inspect [--json] FILE\n"
                 "       kt-inspect --dump TENSOR OUT.f32 FILE\n");
    return 2;
}

const char *meta_type_name(int32_t t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
    return t >= 0 && t < 13 ? names[t] : "?";
}

std::string json_escape(const char *s, uint64_t n) { return kt_cli::json_escape(std::string_view(s, n)); }

// Text for terminals: control characters escaped, long strings cut.
std::string printable(const char *s, uint64_t n, uint64_t max = 60) {
    std::string out = json_escape(s, n < max ? n : max);
    if (n > max) out += "...";
    return out;
}

// One scalar element (type `t`) as text; arrays use the element getters.
std::string scalar_text(const kt_model *m, const char *key, int32_t t, bool json, bool in_array, uint64_t index) {
    char buf[64];
    if (t == KT_META_STRING) {
        const char *s = nullptr;
        uint64_t n = 0;
        if (in_array) kt_model_meta_array_get_string(m, key, index, &s, &n);
        else kt_model_meta_get_string(m, key, &s, &n);
        return json ? "\"" + json_escape(s, n) + "\"" : "\"" + printable(s, n) + "\"";
    }
    if (t == KT_META_FLOAT32 || t == KT_META_FLOAT64) {
        double d = 0;
        if (in_array) kt_model_meta_array_get_float(m, key, index, &d);
        else kt_model_meta_get_float(m, key, &d);
        std::snprintf(buf, sizeof buf, "%.9g", d);
        return buf;
    }
    int64_t i = 0;
    const kt_status s = in_array ? kt_model_meta_array_get_int(m, key, index, &i) : kt_model_meta_get_int(m, key, &i);
    if (s != KT_STATUS_OK) {
        // A UINT64 above INT64_MAX: the float getter gives its magnitude (marked approximate).
        double d = 0;
        if (in_array) kt_model_meta_array_get_float(m, key, index, &d);
        else kt_model_meta_get_float(m, key, &d);
        std::snprintf(buf, sizeof buf, json ? "%.17g" : "~%.17g", d);
        return buf;
    }
    if (t == KT_META_BOOL) return i ? "true" : "false";
    std::snprintf(buf, sizeof buf, "%" PRId64, i);
    return buf;
}

std::string value_text(const kt_model *m, const char *key, bool json) {
    int32_t type = -1, element = -1;
    kt_model_meta_type(m, key, &type, &element);
    if (type != KT_META_ARRAY) return scalar_text(m, key, type, json, false, 0);
    uint64_t n = 0;
    kt_model_meta_array_length(m, key, &n);
    if (json) {
        // JSON gets a preview too: a 150k-token vocabulary would drown the output.
        std::string out = "{\"type\": \"" + std::string(meta_type_name(element)) + "\", \"length\": " + std::to_string(n) +
                          ", \"head\": [";
        for (uint64_t i = 0; i < n && i < kArrayPreview; ++i) {
            if (i) out += ", ";
            out += scalar_text(m, key, element, true, true, i);
        }
        return out + "]}";
    }
    std::string out = "[" + std::string(meta_type_name(element)) + " x " + std::to_string(n) + "] ";
    for (uint64_t i = 0; i < n && i < kArrayPreview; ++i) {
        if (i) out += ", ";
        out += scalar_text(m, key, element, false, true, i);
    }
    if (n > kArrayPreview) out += ", ...";
    return out;
}

std::string shape_text(const kt_tensor_info &t) {
    std::string s;
    for (int d = 0; d < t.n_dims; ++d) {
        if (d) s += " x ";
        s += std::to_string(t.ne[d]);
    }
    return s;
}

struct TypeTotal {
    uint64_t tensors = 0, elements = 0, bytes = 0;
};

int inspect(const kt_model *m, const char *path, bool json) {
    const int64_t n_meta = kt_model_meta_count(m), n_tensors = kt_model_tensor_count(m);
    const int64_t n_warnings = kt_model_interop_warning_count(m);
    std::map<std::string, TypeTotal> totals;
    std::vector<kt_tensor_info> infos(static_cast<size_t>(n_tensors));
    uint64_t total_bytes = 0, total_elements = 0;
    for (int64_t i = 0; i < n_tensors; ++i) {
        kt_tensor_info &t = infos[static_cast<size_t>(i)];
        t.struct_size = sizeof t;
        if (kt_model_tensor_info(m, i, &t) != KT_STATUS_OK) return 1;
        TypeTotal &tt = totals[kt_type_name(t.type)];
        ++tt.tensors;
        tt.elements += t.n_elements;
        tt.bytes += t.n_bytes;
        total_bytes += t.n_bytes;
        total_elements += t.n_elements;
    }

    if (json) {
        std::printf("{\n  \"file\": \"%s\",\n  \"gguf_version\": %u,\n  \"architecture\": \"%s\",\n", json_escape(path, std::strlen(path)).c_str(),
                    kt_model_gguf_version(m), json_escape(kt_model_architecture(m), std::strlen(kt_model_architecture(m))).c_str());
        std::printf("  \"metadata\": {");
        for (int64_t i = 0; i < n_meta; ++i) {
            const char *key = nullptr;
            kt_model_meta_key(m, i, &key);
            std::printf("%s\n    \"%s\": %s", i ? "," : "", json_escape(key, std::strlen(key)).c_str(), value_text(m, key, true).c_str());
        }
        std::printf("\n  },\n  \"tensors\": [");
        for (size_t i = 0; i < infos.size(); ++i) {
            const kt_tensor_info &t = infos[i];
            std::printf("%s\n    {\"name\": \"%s\", \"type\": \"%s\", \"shape\": [", i ? "," : "",
                        json_escape(t.name, std::strlen(t.name)).c_str(), kt_type_name(t.type));
            for (int d = 0; d < t.n_dims; ++d) std::printf("%s%" PRId64, d ? ", " : "", t.ne[d]);
            std::printf("], \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", t.file_offset, t.n_bytes);
        }
        std::printf("\n  ],\n  \"totals\": {");
        bool first = true;
        for (const auto &[name, tt] : totals) {
            std::printf("%s\n    \"%s\": {\"tensors\": %" PRIu64 ", \"elements\": %" PRIu64 ", \"bytes\": %" PRIu64 "}",
                        first ? "" : ",", name.c_str(), tt.tensors, tt.elements, tt.bytes);
            first = false;
        }
        std::printf("\n  },\n  \"tensor_bytes\": %" PRIu64 ",\n  \"parameters\": %" PRIu64 ",\n  \"warnings\": [", total_bytes,
                    total_elements);
        for (int64_t i = 0; i < n_warnings; ++i) {
            const char *w = kt_model_interop_warning(m, i);
            std::printf("%s\n    \"%s\"", i ? "," : "", json_escape(w, std::strlen(w)).c_str());
        }
        std::printf("%s]\n}\n", n_warnings ? "\n  " : "");
        return 0;
    }

    std::printf("file:         %s\n", path);
    std::printf("gguf version: %u\n", kt_model_gguf_version(m));
    std::printf("architecture: %s\n", *kt_model_architecture(m) ? kt_model_architecture(m) : "(none)");
    std::printf("metadata:     %" PRId64 " keys\ntensors:      %" PRId64 " (%" PRIu64 " parameters, %.2f MiB)\n\n", n_meta,
                n_tensors, total_elements, static_cast<double>(total_bytes) / (1 << 20));
    if (n_warnings > 0) {
        // Not errors for kt, but other GGUF readers (llama.cpp) will not load this file.
        std::printf("-- warnings: other GGUF readers refuse this file --\n");
        for (int64_t i = 0; i < n_warnings; ++i) std::printf("  %s\n", kt_model_interop_warning(m, i));
        std::printf("\n");
        std::fprintf(stderr, "kt-inspect: %s: %" PRId64 " warning%s: other GGUF readers refuse this file\n", path,
                     n_warnings, n_warnings == 1 ? "" : "s");
    }
    std::printf("-- metadata --\n");
    for (int64_t i = 0; i < n_meta; ++i) {
        const char *key = nullptr;
        int32_t type = -1;
        kt_model_meta_key(m, i, &key);
        kt_model_meta_type(m, key, &type, nullptr);
        std::printf("  %-44s %-4s %s\n", printable(key, std::strlen(key), 200).c_str(), meta_type_name(type),
                    value_text(m, key, false).c_str());
    }
    if (n_tensors > 0) {
        std::printf("\n-- tensors --\n  %-5s %-40s %-7s %-24s %14s %14s\n", "#", "name", "type", "shape", "offset", "bytes");
        for (size_t i = 0; i < infos.size(); ++i) {
            const kt_tensor_info &t = infos[i];
            std::printf("  %-5zu %-40s %-7s %-24s %14" PRIu64 " %14" PRIu64 "\n", i, t.name, kt_type_name(t.type),
                        shape_text(t).c_str(), t.file_offset, t.n_bytes);
        }
        std::printf("\n-- totals by type --\n  %-7s %8s %16s %16s\n", "type", "tensors", "elements", "bytes");
        for (const auto &[name, tt] : totals)
            std::printf("  %-7s %8" PRIu64 " %16" PRIu64 " %16" PRIu64 "\n", name.c_str(), tt.tensors, tt.elements, tt.bytes);
        std::printf("  %-7s %8" PRId64 " %16" PRIu64 " %16" PRIu64 "\n", "all", n_tensors, total_elements, total_bytes);
    }
    return 0;
}

int dump(const kt_model *m, const char *name, const char *out_path) {
    int64_t index = -1;
    if (kt_model_tensor_find(m, name, &index) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-inspect: %s\n", kt_model_last_error(m));
        return 1;
    }
    kt_tensor_info t;
    t.struct_size = sizeof t;
    if (kt_model_tensor_info(m, index, &t) != KT_STATUS_OK) return 1;
    std::vector<float> values(t.n_elements);
    if (kt_model_tensor_read_f32(m, index, values.data(), values.size(), nullptr) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-inspect: %s\n", kt_model_last_error(m));
        return 1;
    }
    // x86-64 is little-endian, so the in-memory floats are already the promised byte order.
    FILE *out = std::fopen(out_path, "wb");
    if (!out || std::fwrite(values.data(), sizeof(float), values.size(), out) != values.size() || std::fclose(out) != 0) {
        std::fprintf(stderr, "kt-inspect: cannot write %s: %s\n", out_path, std::strerror(errno));
        return 1;
    }
    std::printf("wrote %" PRIu64 " f32 values of %s (%s, %s) to %s\n", t.n_elements, t.name, kt_type_name(t.type),
                shape_text(t).c_str(), out_path);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    bool json = false;
    const char *dump_name = nullptr, *dump_out = nullptr, *path = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--json")) json = true;
        else if (!std::strcmp(argv[i], "--dump") && i + 2 < argc) {
            dump_name = argv[++i];
            dump_out = argv[++i];
        } else if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else if (argv[i][0] == '-' || path) return usage();
        else path = argv[i];
    }
    if (!path) return usage();

    kt_model_params params;
    kt_model_params_init(&params);
    params.prefetch = 0;  // inspecting touches only the header (and one tensor for --dump)
    kt_model *model = nullptr;
    kt_error err = {sizeof(kt_error), 0, {0}};
    if (kt_model_load(path, &params, &model, &err) != KT_STATUS_OK) {
        std::fprintf(stderr, "kt-inspect: %s (%s)\n", err.message, kt_status_string(err.status));
        return 1;
    }
    const int rc = dump_name ? dump(model, dump_name, dump_out) : inspect(model, path, json);
    kt_model_free(model);
    return rc;
}
