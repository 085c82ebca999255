// kt_model_*: loading a GGUF file and querying its metadata and tensors.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "api/api_internal.h"
#include "backends/cpu/kernels.h"
#include "core/log.h"
#include "kt_git_revision.h"  // generated at build time (src/api/CMakeLists.txt)
#include "mem/mapped_file.h"
#include "moe/weights.h"
#include "runtime/pack_cache.h"
#include "ops/ref/quants_ref.h"
#include "ops/types.h"

using kt::Status;
using kt::api::guard;
using kt::api::guard_on;

namespace {

// Prefetching faults pages in 16 MiB steps: small enough for smooth progress and prompt cancellation, large
// enough that the callback costs nothing.
constexpr uint64_t kPrefetchStep = 16ull << 20;

Status require(bool condition, const char *what) {
    if (condition) return Status::ok();
    return Status::error(KT_STATUS_INVALID_ARGUMENT, "%s", what);
}

// Reports progress monotonically and remembers whether the caller cancelled.
class Progress {
public:
    explicit Progress(const kt_model_params &p) : callback_(p.progress_callback), user_data_(p.progress_user_data) {}

    bool report(float fraction) {
        if (!callback_) return true;
        fraction = std::clamp(fraction, last_, 1.0f);
        last_ = fraction;
        return callback_(fraction, user_data_) == 0;
    }

private:
    kt_progress_callback callback_;
    void *user_data_;
    float last_ = 0.0f;
};

Status load_model(const char *path, const kt_model_params &params, kt_model **out) {
    KT_TRY(require(path != nullptr, "kt_model_load: path is NULL"));
    KT_TRY(require(out != nullptr, "kt_model_load: out_model is NULL"));
    KT_TRY(require(params.reserved0 == 0, "kt_model_load: params.reserved0 must be 0"));

    KT_TRY(require(params.prepare == 0 || params.prepare == 1, "kt_model_load: params.prepare must be 0 or 1"));
    KT_TRY(require(params.n_threads >= 0, "kt_model_load: params.n_threads is negative"));
    KT_TRY(require(params.pack_cache == 0 || params.pack_cache == 1, "kt_model_load: params.pack_cache must be 0 or 1"));
    KT_TRY(require(params.pack_cache == 0 || params.prepare == 1,
                   "kt_model_load: params.pack_cache needs params.prepare = 1 (the cache holds what preparing packs)"));
    KT_TRY(require(params.reserved1 == 0, "kt_model_load: params.reserved1 must be 0"));

    Progress progress(params);
    // Reading without mmap is the bulk of the work, so it gets most of the bar; with mmap, prefetching does. When the
    // weights are packed too, that takes longer than reading them from the page cache: the file gets the first
    // fifth of the bar and the packing the rest.
    const bool prefetching = params.use_mmap && params.prefetch;
    const float file_share = params.prepare ? 0.2f : 1.0f;
    kt::mem::MappedFile bytes;
    KT_TRY(kt::mem::MappedFile::open(path, params.use_mmap != 0,
                                     [&](uint64_t done, uint64_t total) {
                                         return progress.report(file_share * 0.95f * static_cast<float>(done) /
                                                                static_cast<float>(total));
                                     },
                                     &bytes));
    auto model = std::make_unique<kt_model>();
    KT_TRY(kt::gguf::File::parse(std::move(bytes), path, &model->file));
    const kt::gguf::File &file = *model->file;

    // The pack cache, when asked for: checked completely (which reads it once: its prefetch) before anything else is
    // touched, so that a refused one leaves the load exactly as without it.
    std::shared_ptr<kt::runtime::PackCache> cache;
    if (params.pack_cache) {
        const std::string cache_path =
            params.pack_cache_path ? std::string(params.pack_cache_path) : kt::runtime::default_pack_cache_path(path);
        kt::runtime::PackCacheBuild build;
        build.kt_version = KT_VERSION_NUMBER;
        build.git_revision = KT_GIT_REVISION;
        // The expert pools' kernel set (the engine's linears use the same layouts at the level below AMX).
        const kt::cpu::KernelSet &ks = kt::cpu::best_kernel_set(kt::cpu::kernel_level());
        build.kernel_set = ks.name;
        build.isa_level = static_cast<int32_t>(ks.level);
        build.target_format = static_cast<int32_t>(kt::moe::TargetFormat::kAsSource);
        build.int4_group = 128;
        KT_TRY(kt::runtime::PackCache::open(cache_path, path, file, build,
                                            [&](uint64_t done, uint64_t total) {
                                                return progress.report(file_share * 0.99f * static_cast<float>(done) /
                                                                       static_cast<float>(total));
                                            },
                                            &cache)
                   .with_context(path));
        if (cache->reading())
            KT_LOG_INFO_MSG("pack cache %s: valid (%.2f GB, checked): the packed weights are mapped from it, not repacked",
                            cache_path.c_str(), static_cast<double>(cache->file_bytes()) * 1e-9);
        else if (cache->found())
            KT_LOG_WARN_MSG("pack cache %s refused: %s; packing from the model and writing a new one", cache_path.c_str(),
                            cache->refusal().c_str());
        else
            KT_LOG_INFO_MSG("pack cache %s: %s; packing from the model and writing one", cache_path.c_str(),
                            cache->refusal().c_str());
    }

    if (prefetching) {
        const uint64_t begin = file.data_offset(), end = file.file_size();
        if (cache && cache->reading()) {
            // Only the tensors the cache does not hold (embedding, norms, biases): the others' pages stay on disk.
            for (const kt::gguf::TensorInfo &t : file.tensors())
                if (!cache->covers(t.name)) file.bytes().prefetch(static_cast<uint64_t>(t.data - file.bytes().data()), t.n_bytes);
        } else {
            for (uint64_t at = begin; at < end; at += kPrefetchStep) {
                file.bytes().prefetch(at, std::min(kPrefetchStep, end - at));
                const float done = static_cast<float>(std::min(at + kPrefetchStep, end) - begin) /
                                   static_cast<float>(end - begin);
                KT_RETURN_IF(!progress.report(file_share * 0.99f * done), KT_STATUS_CANCELLED, "%s: loading cancelled",
                             path);
            }
        }
    }
    KT_TRY(kt::api::setup_device(model.get(), params));
    if (params.prepare) {
        std::shared_ptr<const kt::model::Model> prepared;
        KT_TRY(kt::api::prepared_model(model.get(), KT_KERNELS_AUTO, params.n_threads, &prepared,
                                       [&](uint64_t done, uint64_t total) {
                                           const float packed = static_cast<float>(done) / static_cast<float>(total);
                                           return progress.report(file_share + (1.0f - file_share) * 0.99f * packed);
                                       },
                                       cache));
        // Writes the cache when none was used (after packing, so a cancelled or failed load never writes one).
        if (cache) cache->finish();
    }
    KT_RETURN_IF(!progress.report(1.0f), KT_STATUS_CANCELLED, "%s: loading cancelled", path);
    KT_LOG_INFO_MSG("loaded %s: GGUF v%u, %zu metadata keys, %zu tensors, %llu bytes", path, file.version(),
                    file.metadata().size(), file.tensors().size(), static_cast<unsigned long long>(file.file_size()));
    *out = model.release();
    return Status::ok();
}

const kt::gguf::File &file_of(const kt_model *m) { return *m->file; }

Status check_model(const kt_model *m) { return require(m != nullptr, "model is NULL"); }

Status check_key(const char *key) { return require(key != nullptr, "key is NULL"); }

// Copies a string_view result (which the reader keeps NUL-terminated) to the C out-parameters.
void put_string(std::string_view s, const char **out, uint64_t *out_length) {
    *out = s.data();
    if (out_length) *out_length = s.size();
}

Status tensor_at(const kt_model *model, int64_t index, const kt::gguf::TensorInfo **out) {
    KT_TRY(check_model(model));
    const auto &tensors = file_of(model).tensors();
    KT_RETURN_IF(index < 0 || static_cast<uint64_t>(index) >= tensors.size(), KT_STATUS_NOT_FOUND,
                 "tensor index %lld is out of range (count %zu)", static_cast<long long>(index), tensors.size());
    *out = &tensors[static_cast<size_t>(index)];
    return Status::ok();
}

}  // namespace

extern "C" {

KT_API void kt_model_params_init(kt_model_params *params) {
    if (!params) return;
    *params = kt::api::zeroed_struct<kt_model_params>();
    params->use_mmap = 1;
    params->prefetch = 1;
}

KT_API kt_status kt_model_load(const char *path, const kt_model_params *params, kt_model **out_model,
                               kt_error *err) {
    if (out_model) *out_model = nullptr;
    kt_model_params p;
    kt_model_params_init(&p);
    Status s = guard([&]() -> Status {
        if (params) KT_TRY(kt::api::read_struct(params, &p, "kt_model_load: params"));
        return load_model(path, p, out_model);
    });
    kt::api::fill_error(err, s);
    if (!s.is_ok()) KT_LOG_ERROR_MSG("%s", s.message().c_str());
    return s.code();
}

KT_API void kt_model_free(kt_model *model) { delete model; }

KT_API const char *kt_model_last_error(const kt_model *model) {
    if (!model) return "model is NULL";
    return model->error.get();
}

KT_API uint32_t kt_model_gguf_version(const kt_model *model) { return model ? file_of(model).version() : 0; }

KT_API int64_t kt_model_interop_warning_count(const kt_model *model) {
    return model ? static_cast<int64_t>(file_of(model).interop_warnings().size()) : 0;
}

KT_API const char *kt_model_interop_warning(const kt_model *model, int64_t index) {
    if (!model || index < 0 || index >= kt_model_interop_warning_count(model)) return nullptr;
    return file_of(model).interop_warnings()[static_cast<size_t>(index)].c_str();
}

KT_API const char *kt_model_architecture(const kt_model *model) {
    if (!model) return "";
    std::string_view arch;
    return file_of(model).get_string("general.architecture", &arch).is_ok() ? arch.data() : "";
}

KT_API int64_t kt_model_meta_count(const kt_model *model) {
    return model ? static_cast<int64_t>(file_of(model).metadata().size()) : 0;
}

KT_API kt_status kt_model_meta_key(const kt_model *model, int64_t index, const char **out_key) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(require(out_key != nullptr, "kt_model_meta_key: out_key is NULL"));
        const auto &kvs = file_of(model).metadata();
        KT_RETURN_IF(index < 0 || static_cast<uint64_t>(index) >= kvs.size(), KT_STATUS_NOT_FOUND,
                     "metadata index %lld is out of range (count %zu)", static_cast<long long>(index), kvs.size());
        *out_key = kvs[static_cast<size_t>(index)].key.data();
        return Status::ok();
    });
}

KT_API kt_status kt_model_meta_type(const kt_model *model, const char *key, int32_t *out_type,
                                    int32_t *out_element_type) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(check_key(key));
        const kt::gguf::KeyValue *kv = file_of(model).find(key);
        KT_RETURN_IF(!kv, KT_STATUS_NOT_FOUND, "metadata key '%s' not found", key);
        if (out_type) *out_type = static_cast<int32_t>(kv->type);
        if (out_element_type) *out_element_type = kv->is_array() ? static_cast<int32_t>(kv->element_type) : -1;
        return Status::ok();
    });
}

KT_API kt_status kt_model_meta_get_int(const kt_model *model, const char *key, int64_t *out_value) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(check_key(key));
        KT_TRY(require(out_value != nullptr, "kt_model_meta_get_int: out_value is NULL"));
        return file_of(model).get_int(key, out_value);
    });
}

KT_API kt_status kt_model_meta_get_float(const kt_model *model, const char *key, double *out_value) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(check_key(key));
        KT_TRY(require(out_value != nullptr, "kt_model_meta_get_float: out_value is NULL"));
        return file_of(model).get_float(key, out_value);
    });
}

KT_API kt_status kt_model_meta_get_string(const kt_model *model, const char *key, const char **out_value,
                                          uint64_t *out_length) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(check_key(key));
        KT_TRY(require(out_value != nullptr, "kt_model_meta_get_string: out_value is NULL"));
        std::string_view s;
        KT_TRY(file_of(model).get_string(key, &s));
        put_string(s, out_value, out_length);
        return Status::ok();
    });
}

KT_API kt_status kt_model_meta_array_length(const kt_model *model, const char *key, uint64_t *out_length) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(check_key(key));
        KT_TRY(require(out_length != nullptr, "kt_model_meta_array_length: out_length is NULL"));
        return file_of(model).array_length(key, out_length);
    });
}

KT_API kt_status kt_model_meta_array_get_int(const kt_model *model, const char *key, uint64_t index,
                                             int64_t *out_value) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(check_key(key));
        KT_TRY(require(out_value != nullptr, "kt_model_meta_array_get_int: out_value is NULL"));
        return file_of(model).array_get_int(key, index, out_value);
    });
}

KT_API kt_status kt_model_meta_array_get_float(const kt_model *model, const char *key, uint64_t index,
                                               double *out_value) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(check_key(key));
        KT_TRY(require(out_value != nullptr, "kt_model_meta_array_get_float: out_value is NULL"));
        return file_of(model).array_get_float(key, index, out_value);
    });
}

KT_API kt_status kt_model_meta_array_get_string(const kt_model *model, const char *key, uint64_t index,
                                                const char **out_value, uint64_t *out_length) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(check_key(key));
        KT_TRY(require(out_value != nullptr, "kt_model_meta_array_get_string: out_value is NULL"));
        std::string_view s;
        KT_TRY(file_of(model).array_get_string(key, index, &s));
        put_string(s, out_value, out_length);
        return Status::ok();
    });
}

KT_API int64_t kt_model_tensor_count(const kt_model *model) {
    return model ? static_cast<int64_t>(file_of(model).tensors().size()) : 0;
}

KT_API kt_status kt_model_tensor_find(const kt_model *model, const char *name, int64_t *out_index) {
    return guard_on(model, [&]() -> Status {
        KT_TRY(check_model(model));
        KT_TRY(require(name != nullptr, "kt_model_tensor_find: name is NULL"));
        KT_TRY(require(out_index != nullptr, "kt_model_tensor_find: out_index is NULL"));
        const int64_t index = file_of(model).tensor_index(name);
        KT_RETURN_IF(index < 0, KT_STATUS_NOT_FOUND, "tensor '%s' not found", name);
        *out_index = index;
        return Status::ok();
    });
}

KT_API kt_status kt_model_tensor_info(const kt_model *model, int64_t index, kt_tensor_info *out_info) {
    return guard_on(model, [&]() -> Status {
        const kt::gguf::TensorInfo *t;
        KT_TRY(tensor_at(model, index, &t));
        KT_TRY(require(out_info != nullptr, "kt_model_tensor_info: out_info is NULL"));
        kt_tensor_info info = kt::api::zeroed_struct<kt_tensor_info>();
        info.type = t->type;
        info.n_dims = t->n_dims;
        for (int d = 0; d < KT_MAX_DIMS; ++d) info.ne[d] = t->ne[d];
        info.n_elements = t->n_elements;
        info.n_bytes = t->n_bytes;
        info.file_offset = file_of(model).data_offset() + t->offset;
        info.name = t->name.data();
        KT_TRY(kt::api::write_struct(info, out_info, "kt_model_tensor_info: out_info"));
        return Status::ok();
    });
}

KT_API kt_status kt_model_tensor_read_f32(const kt_model *model, int64_t index, float *dst, uint64_t dst_capacity,
                                          uint64_t *out_needed) {
    return guard_on(model, [&]() -> Status {
        const kt::gguf::TensorInfo *t;
        KT_TRY(tensor_at(model, index, &t));
        if (out_needed) *out_needed = t->n_elements;
        KT_RETURN_IF(dst_capacity < t->n_elements, KT_STATUS_BUFFER_TOO_SMALL,
                     "tensor '%s' has %llu elements but the buffer holds %llu", t->name.data(),
                     static_cast<unsigned long long>(t->n_elements), static_cast<unsigned long long>(dst_capacity));
        KT_TRY(require(dst != nullptr, "kt_model_tensor_read_f32: dst is NULL"));
        KT_RETURN_IF(!kt::ref::can_dequantize(t->type), KT_STATUS_UNSUPPORTED, "tensor '%s': type %s cannot be read as f32",
                     t->name.data(), kt_type_name(t->type));
        const kt::ops::TypeTraits &traits = *kt::ops::type_traits(t->type);
        const uint64_t rows = t->n_elements / static_cast<uint64_t>(t->ne[0]);
        const int64_t row_bytes = kt::ops::row_bytes(traits, t->ne[0]);
        for (uint64_t r = 0; r < rows; ++r)
            kt::ref::dequantize_row(t->type, t->data + r * static_cast<uint64_t>(row_bytes), dst + r * t->ne[0], t->ne[0]);
        return Status::ok();
    });
}

}  // extern "C"
