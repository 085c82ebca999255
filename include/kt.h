/*
 * kt.h: the C ABI of libkt, CPU-first inference for Mixture-of-Experts language models.
 *
 * This is the only public header. It is C99, uses fixed-width types in every struct, and is stable within a
 * major version: functions and status codes are only ever added; fields are only ever appended to structs.
 * What is marked EXPERIMENTAL (the roofline probes, CUDA, the expert pool's tuning knobs) may change or go away in
 * any minor version; language bindings leave it out or mark it so too. Everything else is stable.
 *
 * Rules every function follows:
 *   - It never aborts, exits, throws or prints. Failures return a kt_status; the detailed message (which file,
 *     key, tensor, byte offset) is kept per handle (kt_model_last_error(model) ...), or in the caller's optional
 *     kt_error for constructors. There is no process-wide "last error". A handle used by one thread at a time
 *     (context, GGUF writer, detokenizer) keeps the message of its last failed call, whichever thread read it. A
 *     handle that threads share (model, expert pool) keeps one message per thread: the thread whose call failed
 *     reads its own, unaffected by other threads' calls, so it must ask from the same OS thread (Go: within one
 *     runtime.LockOSThread section).
 *   - Out-parameters are written only on success, unless stated otherwise.
 *   - Every *_create / *_load has a *_free; *_free(NULL) is a no-op; *_last_error(NULL) gives a fixed message.
 *   - Callbacks always receive the caller's `void *user_data`, and all return 0 to go on and non-zero to stop
 *     (cancel, abandon), except the log callback, which returns nothing.
 *
 * Structs and struct_size. Every struct that may grow starts with `uint32_t struct_size`, which the caller sets to
 * sizeof the struct it was compiled with (the *_init functions do it). kt accepts any size the struct has had in
 * some version of this header and any larger size, and refuses others (smaller than the first version, or ending
 * inside a field) with KT_STATUS_INVALID_ARGUMENT:
 *   - structs the caller passes (params): fields beyond the caller's size read as 0, so every field appended to a
 *     struct is defined so that 0 keeps the behaviour from before it existed; fields of a larger (newer) struct
 *     that this library does not know are ignored;
 *   - structs kt fills (info, perf, kt_error): kt writes the caller's size, no more: an older caller gets the
 *     fields it knows, a newer one gets 0 in the fields this library does not know. struct_size is kept.
 *   - structs kt passes to a callback (kt_tensor_spec) carry the size kt filled: a caller reads fields beyond its
 *     own sizeof only when struct_size covers them.
 * kt_chat_message has no struct_size: it is an array element and never grows.
 *
 * While the major version is 0, a minor version may also change what an earlier one promised; every such change
 * is listed here:
 *   0.2: the load-progress callback returns 0 to continue and non-zero to cancel, like every other callback (in
 *        0.1 it returned non-zero to continue).
 *
 * Version check idiom (as in sqlite):
 *     assert(kt_version_number() == KT_VERSION_NUMBER);   // header and library agree exactly
 *     if (kt_version_number() / 1000000 != KT_VERSION_MAJOR) ... // ABI-compatible library?
 */
#ifndef KT_H
#define KT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  define KT_API
#elif defined(__GNUC__)
#  define KT_API __attribute__((visibility("default")))
#else
#  define KT_API
#endif

/* ------------------------------------------------------------------------------------------------------------ */
/* Version                                                                                                       */

#define KT_VERSION_MAJOR 0
#define KT_VERSION_MINOR 2
#define KT_VERSION_PATCH 0
#define KT_VERSION_NUMBER (KT_VERSION_MAJOR * 1000000 + KT_VERSION_MINOR * 1000 + KT_VERSION_PATCH)

/* The library's version as KT_VERSION_NUMBER computes it. Same major version = compatible ABI. */
KT_API int32_t kt_version_number(void);
/* "0.2.0". Static storage. */
KT_API const char *kt_version_string(void);
/* One line naming the version, git revision, compiler, enabled backends and the CPU ISAs this process can use,
 * e.g. "kt 0.2.0 (git abc123) gcc 12.2; backends: cpu; cpu isa: avx2 avx512 (vnni bf16); amx: no". Static
 * storage, computed once. */
KT_API const char *kt_build_info(void);

/* ------------------------------------------------------------------------------------------------------------ */
/* Status codes. Codes are only ever added, never renumbered.                                                    */

typedef int32_t kt_status;

#define KT_STATUS_OK 0
#define KT_STATUS_INVALID_ARGUMENT 1  /* a NULL pointer, a size out of range, an unknown enum value */
#define KT_STATUS_OUT_OF_MEMORY 2
#define KT_STATUS_IO_ERROR 3          /* open/read/write/mmap failed; the message carries errno's text */
#define KT_STATUS_INVALID_FILE 4      /* a malformed or hostile file; the message names the field and offset */
#define KT_STATUS_UNSUPPORTED 5       /* valid input that kt cannot handle (a tensor type, a version, an ISA) */
#define KT_STATUS_NOT_FOUND 6         /* no such key, tensor or index */
#define KT_STATUS_TYPE_MISMATCH 7     /* the key exists but holds another type */
#define KT_STATUS_BUFFER_TOO_SMALL 8  /* the caller's buffer is too small; the needed size is reported */
#define KT_STATUS_CANCELLED 9         /* a callback asked to stop */
#define KT_STATUS_MISUSE 10           /* the call is not allowed in the handle's current state */
#define KT_STATUS_INTERNAL 11         /* a bug in kt; please report the message */
#define KT_STATUS_CONTEXT_FULL 12     /* the tokens do not fit in the context's remaining positions */
#define KT_STATUS_BUSY 13             /* a queue is full (kt_engine_submit): try again later */

/* Fixed English text for a status code ("invalid file"); never NULL. */
KT_API const char *kt_status_string(kt_status status);

/* Filled by constructors when they fail (pass NULL if you do not want it). Set struct_size before the call:
 *     kt_error err = { sizeof(kt_error) };                                                                    */
#define KT_ERROR_MESSAGE_CAPACITY 1024
typedef struct kt_error {
    uint32_t struct_size;
    kt_status status;                              /* KT_STATUS_OK on success */
    char message[KT_ERROR_MESSAGE_CAPACITY];       /* NUL-terminated; truncated if longer */
} kt_error;

/* ------------------------------------------------------------------------------------------------------------ */
/* Backends. EXPERIMENTAL: the CUDA functions may change in any minor version.                                  */

/* Number of CUDA devices this process can use (0 when there is no driver or no GPU: a normal situation).
 * KT_STATUS_UNSUPPORTED when libkt was built without CUDA. */
KT_API kt_status kt_cuda_device_count(int32_t *out_count);

/* ------------------------------------------------------------------------------------------------------------ */
/* Logging. kt prints nothing unless a callback is installed.                                                    */

#define KT_LOG_ERROR 0
#define KT_LOG_WARN 1
#define KT_LOG_INFO 2
#define KT_LOG_DEBUG 3

/* `message` is NUL-terminated without a trailing newline and valid only during the call. The callback may be
 * invoked from kt's worker threads, several at once; it must be thread-safe. It runs outside kt's locks, so it
 * may call any kt function, kt_log_set included; what kt logs on that thread while the callback runs is dropped
 * (never delivered recursively). */
typedef void (*kt_log_callback)(int32_t level, const char *message, void *user_data);

/* Installs the process-wide log callback (NULL: silence) and the most verbose level delivered. Thread-safe. When it
 * returns, the callback it replaced is not running on any thread and will not be called again, so its user_data
 * may be freed; except when kt_log_set is called from inside a log callback, where it does not wait. */
KT_API void kt_log_set(kt_log_callback callback, void *user_data, int32_t max_level);

/* ------------------------------------------------------------------------------------------------------------ */
/* Tensor element types: the GGML numbering used in GGUF files.                                                  */

#define KT_TYPE_F32 0
#define KT_TYPE_F16 1
#define KT_TYPE_Q4_0 2
#define KT_TYPE_Q4_1 3
#define KT_TYPE_Q5_0 6
#define KT_TYPE_Q5_1 7
#define KT_TYPE_Q8_0 8
#define KT_TYPE_Q8_1 9
#define KT_TYPE_Q2_K 10
#define KT_TYPE_Q3_K 11
#define KT_TYPE_Q4_K 12
#define KT_TYPE_Q5_K 13
#define KT_TYPE_Q6_K 14
#define KT_TYPE_Q8_K 15
#define KT_TYPE_IQ2_XXS 16 /* IQ1_*, IQ2_*, IQ3_*: the grid formats (see KT_KERNELS_AUTO for how they compute) */
#define KT_TYPE_IQ2_XS 17
#define KT_TYPE_IQ3_XXS 18
#define KT_TYPE_IQ1_S 19
#define KT_TYPE_IQ4_NL 20
#define KT_TYPE_IQ3_S 21
#define KT_TYPE_IQ2_S 22
#define KT_TYPE_IQ4_XS 23
#define KT_TYPE_I8 24
#define KT_TYPE_I16 25
#define KT_TYPE_I32 26
#define KT_TYPE_I64 27
#define KT_TYPE_F64 28
#define KT_TYPE_IQ1_M 29
#define KT_TYPE_BF16 30
#define KT_TYPE_MXFP4 39   /* OCP MX FP4 (gpt-oss experts): 32 e2m1 values sharing one E8M0 power-of-two scale */

/* "Q4_K", or NULL for a type kt does not know. */
KT_API const char *kt_type_name(int32_t type);
/* Elements per block (1 for plain types) and bytes per block; 0 for unknown types. */
KT_API int64_t kt_type_block_size(int32_t type);
KT_API int64_t kt_type_block_bytes(int32_t type);

/* ------------------------------------------------------------------------------------------------------------ */
/* Models: a GGUF file, memory-mapped and validated.                                                             */

typedef struct kt_model kt_model;

/* Called during loading with the fraction done in [0, 1] (monotone; 1 is reported exactly once, at the end):
 * while the file is read or prefetched and, with kt_model_params.prepare, after each tensor the expert engine has
 * packed. Only ever called from within kt_model_load, on its thread.
 * Return 0 to continue, non-zero to cancel: kt_model_load then frees everything and returns KT_STATUS_CANCELLED. */
typedef int32_t (*kt_progress_callback)(float progress, void *user_data);

typedef struct kt_model_params {
    uint32_t struct_size;       /* sizeof(kt_model_params) */
    int32_t use_mmap;           /* default 1: map the file; 0: read it into memory */
    int32_t prefetch;           /* default 1: fault every tensor page in during load (progress is reported over
                                   this); 0: pages come in on first use */
    int32_t reserved0;          /* must be 0 */
    kt_progress_callback progress_callback; /* default NULL */
    void *progress_user_data;
    /* Added after the fields above: a caller built against an older kt.h (smaller struct_size) gets 0 for both. */
    int32_t prepare;            /* default 0: the weights are packed for the expert engine by the first
                                   KT_KERNELS_AUTO context or engine; 1: kt_model_load packs them now, reporting
                                   progress per tensor and logging the packing rate (KT_LOG_INFO). Either way a
                                   mapped file's pages are given back once packed, so the loaded model holds about
                                   the file's size of memory, not two copies */
    int32_t n_threads;          /* with prepare: threads of the packing and of the model's expert engine, which the
                                   contexts and engines created later share (0: one per physical core) */
    /* Added after the fields above (kt 0.2): a caller built against an older kt.h gets 0 / NULL for all three. */
    int32_t pack_cache;         /* default 0: off; 1 (with prepare = 1): keep the packed weights in a cache file and
                                   map it on later loads instead of repacking. A valid cache (same kt version and
                                   build, same kernel set, made from this very file: size, mtime, header and
                                   sampled bytes, and every packed byte's checksum) is mapped read-only and shared
                                   with every process using it, read once with progress; the model file's pages of
                                   the tensors it holds are never read. A missing, stale or corrupt cache is logged
                                   (KT_LOG_INFO / KT_LOG_WARN, with the reason) and replaced by a new one written
                                   atomically after packing; failing to write it (read-only directory, full disk)
                                   is logged, never an error of the load */
    int32_t reserved1;          /* must be 0 */
    const char *pack_cache_path;/* with pack_cache: the cache file (NULL: the model's path + ".ktpack"); copied */
    /* Added after the fields above (older callers get the defaults): the hybrid path. With a device, kt_model_load
       places the routed experts of each MoE layer under device_budget_bytes - the hottest by device_expert_counts,
       or the lowest ids without counts - and the expert engine (KT_KERNELS_AUTO) runs those on the device and the
       rest on the CPU at the same time, adding both. The dense FFNs (DeepSeek's leading dense layers) and shared
       experts run on the device too, all of them (placed before any routed expert). The device holds them as BF16
       (6 * hidden * intermediate bytes each; the host then keeps no copy of the dense FFNs and shared experts, and
       keeps the routed ones on the device for kt_model_device_replace) plus one work buffer; kt_model_device_plan
       prints the placement. KT_STATUS_OUT_OF_MEMORY when
       the work buffer or the requested experts do not fit the budget, KT_STATUS_INVALID_ARGUMENT when
       device_experts exceeds a layer's experts, KT_STATUS_UNSUPPORTED for KT_DEVICE_CUDA without CUDA or a GPU
       and for experts with biases or a clamped SwiGLU (gpt-oss). The reference kernels ignore the device. */
    int32_t device;             /* default KT_DEVICE_NONE; KT_DEVICE_CPU_STANDIN: the device work runs on a thread
                                   of its own, with its own copies (placement and overlap without a GPU);
                                   KT_DEVICE_CUDA: the GPU numbered device_index */
    int32_t device_index;       /* KT_DEVICE_CUDA: the CUDA device ordinal (default 0) */
    uint64_t device_budget_bytes; /* device memory kt may use, work buffer included (default 0) */
    int64_t device_experts;     /* per MoE layer: 0 (default) as many as fit the budget; > 0 exactly this many */
    const uint64_t *device_expert_counts; /* NULL (default) or [n_layer][n_expert] activation counts, e.g. from
                                   kt_model_expert_counts after a calibration prompt; read during kt_model_load */
    uint64_t device_expert_counts_len;    /* elements of device_expert_counts: n_layer * n_expert (or 0) */
    /* Added after the fields above (older callers get 0): with a device, at most this many of each token's
       lowest-weighted CPU experts in a MoE layer are deferred: computed on the CPU while the next layer's attention
       runs, their output added to the next MoE layer's (as KTransformers' max_deferred_experts_per_token). Each
       token keeps at least its highest-weighted expert in its own layer, an expert some token of the batch keeps is
       kept for all, the device's experts are never deferred, and the last MoE layer and batches of more than 512
       tokens defer nothing. 0 (default): none; it changes the numbers (KTransformers suggests 1 to 4); negative:
       KT_STATUS_INVALID_ARGUMENT, as is any value without a device. kt_model_device_plan counts the deferred rows. */
    int32_t device_deferred_experts;
    /* In the place of a reserved field that had to be 0, so older callers get 0: with a device, a MoE layer called
       with more than this many tokens at once (a prompt's chunk, up to the context's n_batch) runs all of its
       routed experts on the device, as KTransformers' GPU prefill threshold does: the layer's experts not resident
       there are copied into a stream buffer on the device and the CPU computes nothing for that layer. The buffer
       has two slots of n_expert * 6 * hidden * intermediate bytes (one for a model with one MoE layer), counted in
       device_budget_bytes before any resident expert: once a layer's call is done, a thread of the buffer copies
       the next layer's experts into the other slot while that layer's attention runs, so in a long prompt only
       each chunk's first layer waits for its whole copy. Worth it where
       the device computes a long prompt's experts faster than the CPU even counting the copy. 0 (default): never;
       negative, or any value without a device: KT_STATUS_INVALID_ARGUMENT. Such a call defers nothing.
       kt_model_device_plan prints the stream buffer and counts the streamed calls, their uploads and time, and
       the calls that found their layer uploaded ahead (and how long they waited for the rest of it). */
    int32_t device_prefill_threshold;
} kt_model_params;

/* Devices for kt_model_params.device. */
#define KT_DEVICE_NONE 0
#define KT_DEVICE_CPU_STANDIN 1
#define KT_DEVICE_CUDA 2

/* Fills *params with struct_size and the defaults above. */
KT_API void kt_model_params_init(kt_model_params *params);

/* Opens and validates a GGUF v2/v3 file. Every count, length, type, shape, offset and alignment is checked
 * before it is used; a malformed file gives KT_STATUS_INVALID_FILE and a message naming the key or tensor and
 * the byte offset. `params` may be NULL for defaults. On success *out_model owns the mapping until
 * kt_model_free. On failure *out_model is set to NULL and `err` (if not NULL) receives the status and message.
 * A model is immutable after loading: it may be queried from several threads at once. */
KT_API kt_status kt_model_load(const char *path, const kt_model_params *params, kt_model **out_model,
                               kt_error *err);
KT_API void kt_model_free(kt_model *model);

/* The hybrid path's placement as text (kt_model_params.device): a header line (budget, work buffer, expert and
 * used bytes), one line per MoE layer ("layer 3: 4/64 experts [1 5 9 12], 12582912 bytes"), the device's bytes in
 * use now (the plan's used bytes once the expert engine has prepared the model), once prepared a "host:" line (the
 * CPU side's packed weights: the routed experts', how much of that copies experts on the device, and those of the
 * dense FFNs and shared experts on the device, 0) and, once it has run, a "split:" line: calls, milliseconds on the
 * device, on the CPU, and hidden by running both at once. Writes the text and a NUL when capacity > its length, else KT_STATUS_BUFFER_TOO_SMALL and nothing;
 * *out_length (may be NULL) is the length without the NUL either way. KT_STATUS_NOT_FOUND for a model loaded
 * without a device. Safe to call from any thread. */
KT_API kt_status kt_model_device_plan(const kt_model *model, char *buf, uint64_t capacity, uint64_t *out_length);

/* How often the expert engine (KT_KERNELS_AUTO) routed tokens to each expert of MoE layer `layer` since the model
 * was prepared: counts[e] = the (token, slot) pairs routed to expert e, for e < *out_count = the layer's experts.
 * A calibration run's counts, laid out [n_layer][n_expert] (zeros for layers without routed experts), are what
 * kt_model_params.device_expert_counts takes. KT_STATUS_NOT_FOUND for a layer without routed experts or a model
 * the engine has not prepared; KT_STATUS_BUFFER_TOO_SMALL when capacity < the count (*out_count set). */
KT_API kt_status kt_model_expert_counts(const kt_model *model, int64_t layer, uint64_t *counts, int64_t capacity,
                                        int64_t *out_count);

/* Places the routed experts on the model's device again, from new activation counts ([n_layer][n_expert], as
 * kt_model_params.device_expert_counts; e.g. kt_model_expert_counts gathered while serving), without reloading:
 * the same budget and experts per layer as at load, the hottest experts now. Per MoE layer, between two of its
 * calls (contexts may keep running: a pass sees each layer either before or after, never half), the experts
 * that leave are freed on the device first, the new ones uploaded, and the CPU computes the rest; the output
 * stays the all-CPU one up to the order of the sums. kt_model_device_plan prints the new plan. KT_STATUS_NOT_FOUND
 * for a model loaded without a device, KT_STATUS_INVALID_ARGUMENT for counts of the wrong length; on a failed
 * upload the layers already re-placed stay so and the failing one keeps a consistent split. Safe to call from
 * any thread. */
KT_API kt_status kt_model_device_replace(kt_model *model, const uint64_t *counts, uint64_t counts_len);

/* The message of the calling thread's last failed call on this model ("" if none): other threads' calls on the
 * same model never change it. Valid until this thread's next failing call on the model, or kt_model_free.
 * "model is NULL" for NULL. */
KT_API const char *kt_model_last_error(const kt_model *model);

/* ---- metadata ---- */

/* GGUF metadata value types. */
#define KT_META_UINT8 0
#define KT_META_INT8 1
#define KT_META_UINT16 2
#define KT_META_INT16 3
#define KT_META_UINT32 4
#define KT_META_INT32 5
#define KT_META_FLOAT32 6
#define KT_META_BOOL 7
#define KT_META_STRING 8
#define KT_META_ARRAY 9
#define KT_META_UINT64 10
#define KT_META_INT64 11
#define KT_META_FLOAT64 12

/* The file's GGUF version (2 or 3). */
KT_API uint32_t kt_model_gguf_version(const kt_model *model);
/* general.architecture, e.g. "qwen3moe". Pointer valid until kt_model_free; "" when the key is absent. */
KT_API const char *kt_model_architecture(const kt_model *model);

/* What other GGUF readers refuse in this file although kt reads it: llama.cpp's ggml refuses a metadata key that
 * is not valid UTF-8, a tensor name of 64 bytes or more, and tensor data that is not laid out in tensor-info
 * order without gaps. The number of such findings (0 for NULL), and each as one line of text naming the key
 * (invalid bytes written \xNN) or the tensor; NULL for an index out of range. Pointers valid until kt_model_free.
 * kt's GGUF writer never produces them. */
KT_API int64_t kt_model_interop_warning_count(const kt_model *model);
KT_API const char *kt_model_interop_warning(const kt_model *model, int64_t index);

/* Number of metadata keys, and the key at an index in file order (pointer valid until kt_model_free). */
KT_API int64_t kt_model_meta_count(const kt_model *model);
KT_API kt_status kt_model_meta_key(const kt_model *model, int64_t index, const char **out_key);

/* Type of a key's value; for arrays also the element type (else *out_element_type = -1). Either out pointer
 * may be NULL. KT_STATUS_NOT_FOUND if the key is absent. */
KT_API kt_status kt_model_meta_type(const kt_model *model, const char *key, int32_t *out_type,
                                    int32_t *out_element_type);

/* Scalar getters. _int accepts any integer type and bool (UINT64 above INT64_MAX gives
 * KT_STATUS_TYPE_MISMATCH); _float accepts FLOAT32/FLOAT64 and integers; _string returns a pointer into the
 * model (valid until kt_model_free; not NUL-terminated in the file, so kt copies it once at load and the
 * pointer is NUL-terminated) and its length in bytes (out_length may be NULL). */
KT_API kt_status kt_model_meta_get_int(const kt_model *model, const char *key, int64_t *out_value);
KT_API kt_status kt_model_meta_get_float(const kt_model *model, const char *key, double *out_value);
KT_API kt_status kt_model_meta_get_string(const kt_model *model, const char *key, const char **out_value,
                                          uint64_t *out_length);

/* Arrays: length, and one element by index with the same conversions as the scalar getters. */
KT_API kt_status kt_model_meta_array_length(const kt_model *model, const char *key, uint64_t *out_length);
KT_API kt_status kt_model_meta_array_get_int(const kt_model *model, const char *key, uint64_t index,
                                             int64_t *out_value);
KT_API kt_status kt_model_meta_array_get_float(const kt_model *model, const char *key, uint64_t index,
                                               double *out_value);
KT_API kt_status kt_model_meta_array_get_string(const kt_model *model, const char *key, uint64_t index,
                                                const char **out_value, uint64_t *out_length);

/* ---- tensors ---- */

#define KT_MAX_DIMS 4

typedef struct kt_tensor_info {
    uint32_t struct_size;    /* set by the caller: sizeof(kt_tensor_info) */
    int32_t type;            /* KT_TYPE_* */
    int32_t n_dims;          /* 1..4 */
    int32_t reserved0;
    int64_t ne[KT_MAX_DIMS]; /* GGML order: ne[0] is contiguous; unused dims are 1 */
    uint64_t n_elements;
    uint64_t n_bytes;        /* bytes of data in the file */
    uint64_t file_offset;    /* absolute byte offset of the data in the file */
    const char *name;        /* NUL-terminated, valid until kt_model_free */
} kt_tensor_info;

KT_API int64_t kt_model_tensor_count(const kt_model *model);
/* Index of a tensor by name, or KT_STATUS_NOT_FOUND. */
KT_API kt_status kt_model_tensor_find(const kt_model *model, const char *name, int64_t *out_index);
/* Fills *out_info (whose struct_size the caller set) for a tensor index. */
KT_API kt_status kt_model_tensor_info(const kt_model *model, int64_t index, kt_tensor_info *out_info);

/* Writes the tensor's values, dequantized to f32, to dst (row-major in GGML order: element (i0, i1, i2, i3)
 * at i0 + ne0*(i1 + ne1*(i2 + ne2*i3))). dst_capacity is in floats; if it is below n_elements nothing is
 * written and KT_STATUS_BUFFER_TOO_SMALL is returned with *out_needed (may be NULL) set. Safe to call from
 * several threads on the same model. */
KT_API kt_status kt_model_tensor_read_f32(const kt_model *model, int64_t index, float *dst,
                                          uint64_t dst_capacity, uint64_t *out_needed);

/* ------------------------------------------------------------------------------------------------------------ */
/* Quantization: f32 to and from every block format, on caller buffers.                                          */

/* These functions keep no state: they are safe to call from several threads at once (on disjoint outputs), and a
 * caller with many rows may split them across its own threads. They run single-threaded scalar reference code. A
 * failure's detailed message goes to the log callback (KT_LOG_ERROR; a size query's KT_STATUS_BUFFER_TOO_SMALL is
 * not logged). */

/* 1 if kt_quantize can produce the type, else 0: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4. */
KT_API int32_t kt_type_can_quantize(int32_t type);
/* 1 if kt_dequantize (and kt_model_tensor_read_f32) can read the type, else 0: every type above, the grid formats
 * IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, and I8, I16, I32, I64 and F64 (converted to the nearest
 * float). */
KT_API int32_t kt_type_can_dequantize(int32_t type);

/* Quantizes n_rows rows of n_per_row floats (rows back to back) into dst, as a GGUF tensor of shape
 * [n_per_row, n_rows] stores them: rows back to back, each n_per_row / kt_type_block_size(type) blocks of
 * kt_type_block_bytes(type) bytes. dst needs no particular alignment. *out_bytes (may be NULL) receives the size of
 * the result, also when the call fails with KT_STATUS_BUFFER_TOO_SMALL: pass dst = NULL and dst_capacity = 0 to ask.
 *
 * How each type is produced:
 *   - Q8_0, Q8_1, Q8_K (the activation formats of dot-product kernels), Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, F16, BF16:
 *     ggml's reference rules, byte for byte (tests compare with llama.cpp's output).
 *   - MXFP4: per block of 32 the power-of-two scale (of the two that can hold the block's largest |x|, or clip it)
 *     whose nearest-value encoding has the smaller squared error; never less accurate than ggml's reference rule
 *     (relative RMS error on N(0,1) data 0.112; ggml's rule 0.127). A value equally near two codes takes the smaller
 *     magnitude.
 *   - Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS: kt's own least-squares search, at least as accurate as llama.cpp's
 *     reference quantizer without an importance matrix (relative RMS error on N(0,1) data: Q2_K 0.26, Q3_K 0.144,
 *     Q4_K 0.070, Q5_K 0.034, Q6_K 0.016, IQ4_XS 0.075), but not the same bytes. Slow: a few million elements
 *     per second per thread.
 *   - F32: copied.
 * Every finite input dequantizes to finite values, except with F16, which converts like IEEE (|x| >= 65520 becomes
 * +-inf, as in ggml). Scales beyond f16's range saturate. Blocks so small that their f16 scale becomes subnormal
 * (below 6.1e-5: e.g. a Q8_0 block whose largest |x| is below 7.8e-3) lose precision gradually, down to 0 with
 * ggml's rules (Q4_1 and Q5_1 can then even come out worse than 0, as in ggml); kt's K-quants round their
 * super-block scale up and keep a usable error down to about 1e-7. Q8_K's scale is f32 and has no such limit.
 *
 * Statuses: KT_STATUS_INVALID_ARGUMENT (src NULL while there are elements, n_rows < 0, n_per_row <= 0 or not a
 * multiple of the block size, a size that overflows, an unknown type id), KT_STATUS_UNSUPPORTED (a known type with
 * no quantizer: I8 ... F64), KT_STATUS_BUFFER_TOO_SMALL (dst_capacity below the size; nothing is written). */
KT_API kt_status kt_quantize(int32_t type, const float *src, int64_t n_rows, int64_t n_per_row, void *dst,
                             uint64_t dst_capacity, uint64_t *out_bytes);

/* The inverse: reads n_rows rows of n_per_row elements of `type` from src (laid out as kt_quantize writes them)
 * and writes n_rows * n_per_row floats to dst, bit for bit as ggml's dequantizers do. src needs no particular
 * alignment; src_bytes must be at least the size of the rows (further bytes are ignored); dst_capacity is in
 * floats. Statuses: KT_STATUS_INVALID_ARGUMENT (NULL pointers while there are elements, bad row counts or lengths
 * as for kt_quantize, src_bytes too small, an unknown type id), KT_STATUS_UNSUPPORTED (see
 * kt_type_can_dequantize), KT_STATUS_BUFFER_TOO_SMALL (dst_capacity below n_rows * n_per_row; nothing is written),
 * KT_STATUS_OUT_OF_MEMORY (a misaligned src is copied one row at a time). */
KT_API kt_status kt_dequantize(int32_t type, const void *src, uint64_t src_bytes, int64_t n_rows, int64_t n_per_row,
                               float *dst, uint64_t dst_capacity);

/* The bytes a weight matrix of `type` with n_rows rows of n_per_row values (a GGUF tensor of shape [n_per_row,
 * n_rows]) takes once the default kernels (KT_KERNELS_AUTO) have packed it, and so what one decode step reads of
 * it, where the file's bytes are what the disk holds: the format itself where a kernel reads it (about the file's
 * bytes, plus the layout's padding of rows to 32 and a few bytes of scales: Q4_K 148 bytes per 256 values against
 * the file's 144), the IQ1-IQ3 grid formats as indices into their grid values (IQ1 and IQ2: 3 bits, 3.375 or 3.625
 * bits a value with their scales; IQ3: 4 bits, 4.375; 1.3x to 2.2x their files), other quantized types as Q8_0,
 * F32, F16 and F64 as BF16. A stack of n experts takes n times one expert's matrix. Stateless. Statuses:
 * KT_STATUS_INVALID_ARGUMENT (out_bytes NULL, n_rows or n_per_row below 1, n_per_row not a multiple of the block
 * size), KT_STATUS_UNSUPPORTED (a type kt cannot read, unknown ids included). */
KT_API kt_status kt_packed_matrix_bytes(int32_t type, int64_t n_rows, int64_t n_per_row, uint64_t *out_bytes);

/* ------------------------------------------------------------------------------------------------------------ */
/* GGUF writing: metadata and tensors collected in a writer, then written as a GGUF v3 file in one go.           */

/* A writer is used by one thread at a time (different writers are independent). Every setter copies what it is
 * given (keys, strings, arrays, tensor bytes), so the caller's buffers may be reused as soon as it returns;
 * streamed tensors (kt_gguf_writer_add_tensor_fill) are produced by the caller's callback during
 * kt_gguf_writer_write_file instead. Keys and tensors are written in the order they were added.
 *
 * Every setter checks its entry at once: on failure nothing is added, the status is returned and
 * kt_gguf_writer_last_error names the key or tensor. Statuses common to all setters: KT_STATUS_INVALID_ARGUMENT
 * for a NULL writer or key, a key that is empty, longer than 65535 bytes, not valid UTF-8 or already set, a value
 * out of range for its type, a type id that is not a GGUF value type the setter takes; KT_STATUS_OUT_OF_MEMORY.
 * The writer never writes what other readers refuse (see kt_model_interop_warning). */

typedef struct kt_gguf_writer kt_gguf_writer;

/* Creates an empty writer. alignment: of the tensor data, a power of two in [8, 2^30], or 0 for the GGUF default
 * of 32; a non-default alignment is recorded in the file as general.alignment (UINT32) automatically. On failure
 * (KT_STATUS_INVALID_ARGUMENT for a bad alignment or a NULL out_writer, KT_STATUS_OUT_OF_MEMORY) *out_writer is
 * set to NULL. Free with kt_gguf_writer_free. */
KT_API kt_status kt_gguf_writer_create(uint32_t alignment, kt_gguf_writer **out_writer);
/* As kt_gguf_writer_create, and `err` (may be NULL) receives the status and message on failure, as every other
 * constructor's does. */
KT_API kt_status kt_gguf_writer_create_v2(uint32_t alignment, kt_gguf_writer **out_writer, kt_error *err);
KT_API void kt_gguf_writer_free(kt_gguf_writer *writer);

/* The message of the last failed call on this writer ("" if none). Valid until the next failing call on it or
 * kt_gguf_writer_free. */
KT_API const char *kt_gguf_writer_last_error(const kt_gguf_writer *writer);

/* An integer of type meta_type: KT_META_UINT8, INT8, UINT16, INT16, UINT32, INT32, INT64 or UINT64 (for values
 * above INT64_MAX use kt_gguf_writer_set_uint64). A value outside the type's range is KT_STATUS_INVALID_ARGUMENT. */
KT_API kt_status kt_gguf_writer_set_int(kt_gguf_writer *writer, const char *key, int32_t meta_type, int64_t value);
KT_API kt_status kt_gguf_writer_set_uint64(kt_gguf_writer *writer, const char *key, uint64_t value);
/* meta_type KT_META_FLOAT32 or KT_META_FLOAT64. A finite value beyond f32's range is KT_STATUS_INVALID_ARGUMENT for
 * FLOAT32 (infinities and NaN are stored as they are). */
KT_API kt_status kt_gguf_writer_set_float(kt_gguf_writer *writer, const char *key, int32_t meta_type, double value);
/* value 0 or 1; anything else is KT_STATUS_INVALID_ARGUMENT. */
KT_API kt_status kt_gguf_writer_set_bool(kt_gguf_writer *writer, const char *key, int32_t value);
/* `length` bytes from value (which need not be NUL-terminated and may contain NUL bytes; NULL only when length is
 * 0). GGUF expects UTF-8; kt does not check. */
KT_API kt_status kt_gguf_writer_set_string(kt_gguf_writer *writer, const char *key, const char *value,
                                           uint64_t length);
/* An array of `count` elements of a fixed-size type (any KT_META_* except STRING and ARRAY), packed little-endian
 * in data (NULL only when count is 0): 1 byte per UINT8/INT8/BOOL element, 2 per (U)INT16, 4 per (U)INT32 and
 * FLOAT32, 8 per (U)INT64 and FLOAT64. BOOL elements must be 0 or 1. */
KT_API kt_status kt_gguf_writer_set_array(kt_gguf_writer *writer, const char *key, int32_t element_type,
                                          const void *data, uint64_t count);
/* An array of `count` strings: values[i] holds lengths[i] bytes, or, when lengths is NULL, is NUL-terminated.
 * values may be NULL only when count is 0, and values[i] only when lengths[i] is 0. */
KT_API kt_status kt_gguf_writer_set_array_string(kt_gguf_writer *writer, const char *key, const char *const *values,
                                                 const uint64_t *lengths, uint64_t count);

/* Adds a tensor of `type` (KT_TYPE_*) and shape ne[0 .. n_dims-1] (GGML order: ne[0] is the row length, and must
 * be a multiple of kt_type_block_size(type)), copying its n_bytes bytes from data; n_bytes must be exactly the
 * tensor's size (kt_quantize's out_bytes for its rows). Names are 1..63 bytes of valid UTF-8 (ggml's limit; the
 * spec allows 64) and unique. Statuses:
 * KT_STATUS_INVALID_ARGUMENT (a bad name, an unknown type, n_dims outside 1..4, a dimension <= 0, a row length
 * that is not a multiple of the block size, a wrong n_bytes, a duplicate name). */
KT_API kt_status kt_gguf_writer_add_tensor(kt_gguf_writer *writer, const char *name, int32_t type, int32_t n_dims,
                                           const int64_t *ne, const void *data, uint64_t n_bytes);

/* Produces a streamed tensor's bytes: fill all n_bytes of dst (valid only during the call) and return 0; return
 * anything else to abandon the write. */
typedef int32_t (*kt_gguf_fill_callback)(void *dst, uint64_t n_bytes, void *user_data);

/* As kt_gguf_writer_add_tensor, but the bytes come from `fill`, called once per kt_gguf_writer_write_file, on the
 * calling thread, in tensor order, with a buffer of exactly the tensor's size. kt holds one tensor's bytes at a
 * time, so a model far larger than memory can be written tensor by tensor. user_data must stay valid for as long
 * as the writer may write. */
KT_API kt_status kt_gguf_writer_add_tensor_fill(kt_gguf_writer *writer, const char *name, int32_t type,
                                                int32_t n_dims, const int64_t *ne, kt_gguf_fill_callback fill,
                                                void *user_data);

/* Writes everything added so far to `path`, atomically: a temporary file next to it is written, flushed and renamed
 * over `path`, so on any failure `path` is left as it was (absent or with its old contents) and no temporary file
 * remains. The writer stays usable and may write again. Statuses: KT_STATUS_IO_ERROR (the message carries errno's
 * text), KT_STATUS_CANCELLED (a fill callback returned non-zero), KT_STATUS_OUT_OF_MEMORY,
 * KT_STATUS_INVALID_ARGUMENT (NULL path). */
KT_API kt_status kt_gguf_writer_write_file(kt_gguf_writer *writer, const char *path);

/* The tensors kt needs for the model that the writer's metadata describes (general.architecture and its
 * hyperparameters; <arch>.vocab_size gives the vocabulary size), listed from the architecture's own tensor table:
 * what a program writing a model (a converter, kt-synth) must add. Tensors already added are not looked at. */

#define KT_TENSOR_ROLE_EMBEDDING 0  /* token_embd: rows read by token id */
#define KT_TENSOR_ROLE_VECTOR 1     /* norm weights, biases, gate vectors (kept in F32 by converters) */
#define KT_TENSOR_ROLE_MATRIX 2     /* a projection, ne = {in, out} */
#define KT_TENSOR_ROLE_EXPERTS 3    /* a stack of matrices, ne = {in, out, count}: experts (or per-head projections) */

typedef struct kt_tensor_spec {
    uint32_t struct_size;    /* sizeof(kt_tensor_spec) */
    int32_t role;            /* KT_TENSOR_ROLE_* */
    int32_t optional;        /* 1: kt runs the model without it (a bias, an untied output head, rope_freqs) */
    int32_t n_dims;
    int64_t ne[KT_MAX_DIMS]; /* GGML order; unused dims are 1 */
    const char *name;        /* valid during the callback only */
} kt_tensor_spec;

/* Called once per tensor, in the order a converter would write them; return 0 to continue, non-zero to stop. */
typedef int32_t (*kt_tensor_spec_callback)(const kt_tensor_spec *spec, void *user_data);

/* Statuses: KT_STATUS_UNSUPPORTED (an architecture kt does not run), KT_STATUS_INVALID_FILE (a hyperparameter is
 * missing or out of range; kt_gguf_writer_last_error names the key), KT_STATUS_CANCELLED (the callback stopped),
 * KT_STATUS_INVALID_ARGUMENT (NULL writer or callback). */
KT_API kt_status kt_gguf_writer_expected_tensors(const kt_gguf_writer *writer, kt_tensor_spec_callback callback,
                                                 void *user_data);

/* ------------------------------------------------------------------------------------------------------------ */
/* Contexts: running a model. A context holds one token sequence (its KV cache), the logits of its last decode  */
/* and a sampler. Architectures: llama (dense and Mixtral-style MoE), qwen2, qwen3, qwen2moe, qwen3moe,        */
/* deepseek2 (DeepSeek-V2/V3/R1, Kimi-K2: MLA, also lite and legacy attn_kv_b files), glm4moe (GLM-4.5/4.6),     */
/* gpt-oss.                                                                                                     */
/*                                                                                                              */
/* Thread-safety: a context is used by one thread at a time. Any number of contexts may share one kt_model; the */
/* model must outlive them. The first context of a model prepares its weights for the kernels (binding every    */
/* tensor; with KT_KERNELS_AUTO, packing them into the expert engine's layout and starting one expert pool per  */
/* MoE or dense FFN layer on that context's n_threads); later contexts reuse that work.                         */

typedef struct kt_context kt_context;

/* Polled between layers while a context decodes; return non-zero to cancel (the decode then returns
 * KT_STATUS_CANCELLED and the sequence is as it was before the call). */
typedef int32_t (*kt_abort_callback)(void *user_data);

#define KT_KERNELS_AUTO 0       /* the expert engine's kernels for the best ISA this CPU allows: weights kept in their
                                   GGUF format where a kernel reads it (Q2_K Q3_K Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K
                                   Q5_K Q6_K IQ4_NL IQ4_XS MXFP4 BF16), the grid formats (IQ1_S IQ1_M IQ2_XXS
                                   IQ2_XS IQ2_S IQ3_XXS IQ3_S) exactly as 4-bit indices into their grid values,
                                   F32/F16 as BF16, other formats as Q8_0;
                                   activations quantized to int8 per token */
#define KT_KERNELS_REFERENCE 1  /* exact dequantization and f32 arithmetic everywhere: slow; for validation (it
                                   reproduces llama.cpp's f32 logits to ~1e-6) */

typedef struct kt_context_params {
    uint32_t struct_size;       /* sizeof(kt_context_params) */
    int32_t n_threads;          /* default 0: one per physical core */
    int64_t n_ctx;              /* positions the KV cache holds; default 0: the model's training context, at most
                                   4096 */
    int64_t n_batch;            /* tokens per forward step when decoding many at once (prefill); default 512 */
    int32_t kv_type;            /* KV cache element type: KT_TYPE_F16 (default), KT_TYPE_BF16, KT_TYPE_F32, or
                                   KT_TYPE_Q8_0 (int8 with a scale per 32 values; head dims multiples of 32) */
    int32_t kernels;            /* KT_KERNELS_AUTO (default) or KT_KERNELS_REFERENCE */
    kt_abort_callback abort_callback;  /* default NULL */
    void *abort_user_data;
} kt_context_params;

KT_API void kt_context_params_init(kt_context_params *params);

/* Creates a context for `model` (params may be NULL for defaults). Fails with KT_STATUS_UNSUPPORTED for an
 * architecture or tensor type kt cannot run, KT_STATUS_INVALID_FILE when a tensor the architecture needs is
 * missing or has the wrong shape (the message names it), KT_STATUS_OUT_OF_MEMORY when the KV cache does not fit.
 * On failure *out_context is NULL and `err` (if not NULL) receives the status and message. */
KT_API kt_status kt_context_create(kt_model *model, const kt_context_params *params, kt_context **out_context,
                                   kt_error *err);
KT_API void kt_context_free(kt_context *context);

/* The message of the last failed call on this context ("" if none); valid until the next call on it. */
KT_API const char *kt_context_last_error(const kt_context *context);

/* Sizes: vocabulary (logits per row), positions the context holds, positions used so far, threads it runs on. */
KT_API int64_t kt_context_n_vocab(const kt_context *context);
KT_API int32_t kt_context_n_threads(const kt_context *context);
KT_API int64_t kt_context_n_ctx(const kt_context *context);
KT_API int64_t kt_context_n_past(const kt_context *context);

/* The KV cache's size: *out_bytes (may be NULL) all of it, *out_bytes_per_position (may be NULL) what one position
 * of context takes over all layers (the keys and values as the cache stores them: deepseek2's latent and shared
 * RoPE key, once for keys and values; every position also for sliding-window layers). KT_STATUS_INVALID_ARGUMENT
 * for a NULL context. */
KT_API kt_status kt_context_kv_size(const kt_context *context, uint64_t *out_bytes, uint64_t *out_bytes_per_position);

#define KT_LOGITS_NONE 0  /* keep no logits (e.g. a prompt you will extend before sampling) */
#define KT_LOGITS_LAST 1  /* the last token's logits only (what sampling needs) */
#define KT_LOGITS_ALL 2   /* one row per token of the call */

/* Appends n_tokens token ids at positions kt_context_n_past(..) onward and runs them through the model, in
 * steps of n_batch. Keeps the logits `logits_mode` asks for (read them with kt_context_logits). All or nothing:
 * KT_STATUS_INVALID_ARGUMENT for an id outside the vocabulary (the message gives its index),
 * KT_STATUS_CONTEXT_FULL when the tokens do not fit, KT_STATUS_CANCELLED from the abort callback; the sequence is
 * then unchanged and no logits are kept. */
KT_API kt_status kt_context_decode(kt_context *context, const int32_t *tokens, int64_t n_tokens, int32_t logits_mode);

/* Row `row` of the logits the last decode kept (0 .. rows-1; -1 = the last row): n_vocab floats, valid until
 * the next decode, reset or free on this context. *out_rows (may be NULL) receives how many rows there are.
 * KT_STATUS_NOT_FOUND for a row out of range (also when none were kept). */
KT_API kt_status kt_context_logits(kt_context *context, int64_t row, const float **out_logits, int64_t *out_rows);

/* Forgets the sequence and its logits (the KV cache memory is kept for reuse). */
KT_API void kt_context_reset(kt_context *context);

/* ---- sampling ---- */

typedef struct kt_sampler_params {
    uint32_t struct_size;       /* sizeof(kt_sampler_params) */
    float temperature;          /* default 0.8; <= 0: greedy (argmax after penalties) */
    int32_t top_k;              /* default 40; <= 0: off */
    float top_p;                /* default 0.95; >= 1: off */
    float min_p;                /* default 0.05; <= 0: off */
    float repeat_penalty;       /* default 1 (off); > 1 discourages tokens seen in the last repeat_last_n */
    int32_t repeat_last_n;      /* default 64; -1: the whole sequence; window of all three penalties */
    float presence_penalty;     /* default 0: subtracted once from the logit of every token in the window */
    float frequency_penalty;    /* default 0: subtracted per occurrence in the window */
    uint32_t reserved0;         /* must be 0 */
    uint64_t seed;              /* default 0. The context's generator is seeded with it at the first sample after
                                   create or reset, and whenever the seed changes: same seed, same calls, same
                                   tokens, on every platform */
} kt_sampler_params;

KT_API void kt_sampler_params_init(kt_sampler_params *params);

/* Chooses a token from the last logits row (penalties look at the tokens decoded so far), in llama.cpp's
 * order: penalties, top-k, top-p, min-p, temperature, draw. `params` may be NULL for greedy.
 * KT_STATUS_MISUSE when the last decode kept no logits. Does not decode the token. */
KT_API kt_status kt_context_sample(kt_context *context, const kt_sampler_params *params, int32_t *out_token);

/* ---- generation ---- */

/* Called with each generated token as soon as it is decoded; return 0 to continue, non-zero to stop. */
typedef int32_t (*kt_token_callback)(int32_t token, void *user_data);

#define KT_STOP_MAX_TOKENS 0    /* max_tokens were generated */
#define KT_STOP_TOKEN 1         /* a stop token was sampled (it is not decoded, reported or stored) */
#define KT_STOP_CALLBACK 2      /* on_token returned non-zero */
#define KT_STOP_CONTEXT_FULL 3  /* the context has no room for another token */

typedef struct kt_generate_params {
    uint32_t struct_size;              /* sizeof(kt_generate_params) */
    int32_t reserved0;                 /* must be 0 */
    int64_t max_tokens;                /* default 128 */
    const int32_t *stop_tokens;        /* default NULL: e.g. the vocabulary's end-of-sequence ids */
    int64_t n_stop_tokens;
    const kt_sampler_params *sampler;  /* default NULL: greedy */
    kt_token_callback on_token;        /* default NULL */
    void *user_data;
} kt_generate_params;

KT_API void kt_generate_params_init(kt_generate_params *params);

/* Decodes the prompt (n_prompt may be 0 to continue from the context's last logits), then samples, decodes and
 * reports tokens until a stop condition. Every reported token has been decoded, so a later call continues the
 * sequence. Generated tokens are also written to out_tokens (may be NULL) up to `capacity`; *out_n_tokens (may
 * be NULL) receives how many were generated and *out_stop_reason (may be NULL) a KT_STOP_* code. Errors are
 * those of kt_context_decode; tokens generated before an error stay in the sequence. */
KT_API kt_status kt_context_generate(kt_context *context, const int32_t *prompt, int64_t n_prompt,
                                     const kt_generate_params *params, int32_t *out_tokens, int64_t capacity,
                                     int64_t *out_n_tokens, int32_t *out_stop_reason);

/* ---- performance counters ---- */

typedef struct kt_perf {
    uint32_t struct_size;          /* set by the caller: sizeof(kt_perf) */
    uint32_t reserved0;
    int64_t n_prefill_tokens;      /* tokens of decode calls with more than one token */
    double prefill_seconds;
    int64_t n_decode_tokens;       /* single-token decode calls */
    double decode_seconds;
    /* Where the time of all decodes went: */
    double attention_seconds;      /* attention blocks: norm, Q/K/V/O projections, RoPE, attention over the cache */
    double experts_seconds;        /* MoE blocks: norm, router, routed and shared experts */
    double dense_ffn_seconds;      /* dense feed-forward blocks: norm and SwiGLU */
    double head_seconds;           /* final norm and output projection (logits) */
    double other_seconds;          /* embedding lookup, residual adds, bookkeeping */
} kt_perf;

/* Fills *out_perf (struct_size set by the caller) with the counters accumulated since create or perf_reset. */
KT_API kt_status kt_context_perf(const kt_context *context, kt_perf *out_perf);
KT_API void kt_context_perf_reset(kt_context *context);

/* ------------------------------------------------------------------------------------------------------------ */
/* Engines: many sequences of one model decoded together (continuous batching), for servers.                    */
/*                                                                                                              */
/* An engine owns worker threads, a scheduler thread and a pool of KV-cache blocks. Callers submit sequences    */
/* (a prompt, sampling settings, stop tokens) from any thread and read their tokens as they come. Each forward  */
/* step of the scheduler takes the next token of every decoding sequence plus chunks of the prompts being       */
/* prefilled, up to max_step_tokens, so every layer (and each routed expert's weights) is read once for all of  */
/* them; attention runs per sequence over its own blocks. A sequence's results do not depend on which others    */
/* share its steps, up to floating-point rounding (the kernels may sum in another order for another batch size): */
/* at temperature 0 the tokens are those of a kt_context running it alone.                                      */
/*                                                                                                              */
/* KV memory: blocks of kv_block_tokens positions under kv_budget_bytes. A queued sequence is admitted when the */
/* blocks for its prompt are free; when a decoding sequence needs a block and none is free, the most recently   */
/* admitted sequence is preempted (its blocks released, its tokens kept) and later resumed by recomputing them: */
/* preemption delays a sequence, it never fails one. Prefix cache: full blocks are kept after their sequence   */
/* ends, keyed by their token content (and everything before it); a later prompt that starts with the same     */
/* tokens (a shared system prompt, the earlier turns of a chat) uses them instead of computing them again.      */
/* Cached blocks nobody uses are evicted, least recently used first, when blocks run out.                       */
/*                                                                                                              */
/* Thread-safety: every kt_engine_* and kt_sequence_* function may be called from any thread, concurrently,    */
/* except that a handle must not be freed while another call on it is running. No call waits for more than    */
/* one step of the scheduler (except kt_sequence_read's chosen timeout and kt_engine_free, which waits for the  */
/* step in progress); none delays other sequences. The model must outlive the engine; sequences may be freed    */
/* before or after their engine (a sequence whose engine was freed reads as finished, KT_STOP_CANCELLED).       */
/* The engine shares the model's prepared weights with its contexts (see Contexts).                             */

typedef struct kt_engine kt_engine;
typedef struct kt_sequence kt_sequence;

typedef struct kt_engine_params {
    uint32_t struct_size;       /* sizeof(kt_engine_params) */
    int32_t n_threads;          /* default 0: one per physical core */
    int32_t max_sequences;      /* sequences admitted (prefilling or decoding) at once; default 16; more wait */
    int32_t max_queued;         /* sequences waiting for admission (including preempted ones); default 256; a
                                   submit beyond it fails with KT_STATUS_BUSY */
    int64_t n_ctx;              /* positions per sequence (prompt + generated); default 0: the model's training
                                   context, at most 4096 */
    uint64_t kv_budget_bytes;   /* bytes of the KV block pool; default 0: max_sequences full sequences. It must
                                   hold at least one full sequence (n_ctx positions). Pages are touched on use. */
    int32_t kv_type;            /* KV element type as in kt_context_params: KT_TYPE_F16 (default), BF16, F32, Q8_0 */
    int32_t kv_block_tokens;    /* positions per KV block, a multiple of 16 in [16, 4096]; default 16 (also the
                                   granularity of prefix reuse) */
    int64_t max_step_tokens;    /* tokens per forward step (one per decoding sequence, the rest prefill chunks);
                                   default 512; at least max_sequences */
    int32_t prefix_cache;       /* default 1: reuse cached prompt prefixes; 0: off (blocks are freed at once) */
    int32_t kernels;            /* KT_KERNELS_AUTO (default) or KT_KERNELS_REFERENCE */
} kt_engine_params;

KT_API void kt_engine_params_init(kt_engine_params *params);

/* Creates an engine for `model` (params may be NULL for defaults) and starts its threads; an idle engine uses no
 * CPU. Fails as kt_context_create does, and with KT_STATUS_INVALID_ARGUMENT for parameters out of range (the
 * message names the field and, for kv_budget_bytes, the smallest budget that works). On failure *out_engine is
 * NULL and `err` (if not NULL) receives the status and message. */
KT_API kt_status kt_engine_create(kt_model *model, const kt_engine_params *params, kt_engine **out_engine,
                                  kt_error *err);
/* Cancels every sequence, waits for the step in progress and stops the threads. Sequence handles stay valid
 * until their own kt_sequence_free. */
KT_API void kt_engine_free(kt_engine *engine);

/* Called from the engine's scheduler thread after a step gave the sequence new tokens, and when it finishes
 * (possibly before kt_engine_submit has returned the handle it is given). It must return quickly and not block;
 * it may call kt_sequence_read with timeout 0, kt_sequence_get_info and kt_sequence_cancel (e.g. to wake an event
 * loop), but not kt_sequence_free or kt_engine_free. */
typedef void (*kt_sequence_notify_callback)(kt_sequence *sequence, void *user_data);

typedef struct kt_sequence_params {
    uint32_t struct_size;              /* sizeof(kt_sequence_params) */
    int32_t reserved0;                 /* must be 0 */
    const int32_t *prompt;             /* n_prompt >= 1 token ids, copied */
    int64_t n_prompt;
    int64_t max_tokens;                /* default 128: generation stops after this many (KT_STOP_MAX_TOKENS); 0:
                                          the prompt is only prefilled (e.g. to fill the prefix cache) */
    const kt_sampler_params *sampler;  /* default NULL: greedy; copied. The sequence's generator is seeded with
                                          its seed, so a seed gives the same tokens as a kt_context would */
    const int32_t *stop_tokens;        /* default NULL; copied: sampling one ends the sequence (KT_STOP_TOKEN; the
                                          token is not reported) */
    int64_t n_stop_tokens;
    kt_sequence_notify_callback notify;  /* default NULL */
    void *notify_user_data;
} kt_sequence_params;

KT_API void kt_sequence_params_init(kt_sequence_params *params);

/* Queues a new sequence; everything in params is copied. Returns at once: the sequence waits for admission,
 * then prefills and generates while the caller reads. Statuses: KT_STATUS_INVALID_ARGUMENT (no prompt, a token
 * outside the vocabulary, bad sampler settings), KT_STATUS_CONTEXT_FULL (the prompt has n_ctx tokens or more:
 * nothing was queued), KT_STATUS_BUSY (max_queued sequences are waiting already), KT_STATUS_MISUSE (the engine
 * is being freed). On failure *out_sequence is NULL and `err` (if not NULL) says why. Free the sequence with
 * kt_sequence_free. */
KT_API kt_status kt_engine_submit(kt_engine *engine, const kt_sequence_params *params, kt_sequence **out_sequence,
                                  kt_error *err);

#define KT_FINISH_NONE (-1)  /* *out_finish of kt_sequence_read while more tokens may come */

/* Hands out the tokens generated since the last read (at most `capacity`, >= 1, into tokens), waiting up to
 * timeout_ms (0: do not wait; -1: no limit) for at least one new token or the end. *out_n (may be NULL) gets how
 * many were written (0 when the wait timed out: KT_STATUS_OK all the same); *out_finish (may be NULL) gets
 * KT_FINISH_NONE, or the KT_STOP_* reason once the sequence has finished and every token has been read. Each
 * token is handed out once, whichever thread reads. KT_STATUS_INVALID_ARGUMENT for NULL tokens or capacity < 1. */
KT_API kt_status kt_sequence_read(kt_sequence *sequence, int32_t *tokens, int64_t capacity, int32_t timeout_ms,
                                  int64_t *out_n, int32_t *out_finish);

/* Ends the sequence (KT_STOP_CANCELLED) at the next step boundary and frees its KV blocks then; tokens already
 * generated can still be read. No effect on a finished sequence; NULL is a no-op. Never blocks. */
KT_API void kt_sequence_cancel(kt_sequence *sequence);

/* Cancels the sequence if it is still running and frees the handle (its blocks go back to the pool within one
 * step). NULL is a no-op. */
KT_API void kt_sequence_free(kt_sequence *sequence);

#define KT_SEQUENCE_QUEUED 0     /* waiting for admission */
#define KT_SEQUENCE_PREFILL 1    /* its prompt (or, after preemption, its tokens so far) is being computed */
#define KT_SEQUENCE_DECODING 2   /* generating, one token per step */
#define KT_SEQUENCE_PREEMPTED 3  /* its blocks were reclaimed; it waits to be resumed */
#define KT_SEQUENCE_FINISHED 4

#define KT_STOP_CANCELLED 4      /* kt_sequence_cancel, kt_sequence_free or kt_engine_free ended the sequence */
#define KT_STOP_ERROR 5          /* a step failed (kt_sequence_last_error says why); the engine goes on */

typedef struct kt_sequence_info {
    uint32_t struct_size;        /* set by the caller: sizeof(kt_sequence_info) */
    int32_t state;               /* KT_SEQUENCE_* */
    int32_t finish_reason;       /* KT_STOP_* once finished, else KT_FINISH_NONE */
    int32_t n_preemptions;       /* times its blocks were reclaimed */
    int64_t n_prompt;
    int64_t n_prompt_cached;     /* prompt tokens taken from the prefix cache instead of computed (first
                                    admission) */
    int64_t n_generated;         /* tokens generated so far (read or not) */
    double queued_seconds;       /* from submit to first admission (so far, while queued) */
    double first_token_seconds;  /* from submit to the first generated token; -1 until then */
    double elapsed_seconds;      /* from submit to finish (so far, while running) */
} kt_sequence_info;

/* Fills *out_info (struct_size set by the caller). Never blocks for more than a short lock. */
KT_API kt_status kt_sequence_get_info(const kt_sequence *sequence, kt_sequence_info *out_info);

/* The message of the sequence's error ("" if none): why it finished with KT_STOP_ERROR. Valid until
 * kt_sequence_free. */
KT_API const char *kt_sequence_last_error(const kt_sequence *sequence);

#define KT_ENGINE_STEP_BUCKETS 12  /* step_tokens[i] counts steps of [2^i, 2^(i+1)) tokens; the last, 2048 and up */

typedef struct kt_engine_stats {
    uint32_t struct_size;           /* set by the caller: sizeof(kt_engine_stats) */
    int32_t n_running;              /* admitted sequences (prefilling or decoding) */
    int32_t n_queued;               /* waiting for admission, preempted ones included */
    int32_t kv_block_tokens;
    int64_t kv_blocks_total;
    int64_t kv_blocks_used;         /* held by sequences (a block shared by several counts once) */
    int64_t kv_blocks_cached;       /* held only by the prefix cache: reusable, evicted when blocks run out */
    uint64_t kv_bytes;              /* bytes of the block pool */
    int64_t n_submitted;
    int64_t n_finished;
    int64_t n_preemptions;
    int64_t n_prompt_tokens;        /* prompt tokens of admitted sequences (first admissions) */
    int64_t n_prompt_tokens_cached; /* of those, taken from the prefix cache */
    int64_t n_prefill_tokens;       /* tokens computed in prefill chunks, recomputation after preemption included */
    int64_t n_generated_tokens;
    int64_t n_steps;
    double step_seconds;            /* time spent in forward steps */
    int64_t step_tokens[KT_ENGINE_STEP_BUCKETS];
} kt_engine_stats;

/* Fills *out_stats (struct_size set by the caller), as of the last step boundary. */
KT_API kt_status kt_engine_get_stats(const kt_engine *engine, kt_engine_stats *out_stats);

/* ------------------------------------------------------------------------------------------------------------ */
/* EXPERIMENTAL (the probes and their fields may change in any minor version).                                  */
/* The machine's roofline, for benchmarks: memory read bandwidth and the int8 and bf16 dot-product peaks,      */
/* measured now with the given threads, so that results can be stated as a fraction of what the machine does.   */

typedef struct kt_roofline {
    uint32_t struct_size;       /* set by the caller: sizeof(kt_roofline) */
    int32_t n_threads;          /* threads that ran the probes (one per physical core when 0 was asked for) */
    uint64_t buffer_bytes;      /* bytes streamed per bandwidth pass */
    double read_bytes_per_s;    /* best pass of every thread summing its own slice of the buffer */
    double int8_ops_per_s;      /* best of independent int8 dot instructions on every thread; 2 ops per
                                   multiply-add */
    char int8_isa[16];          /* the instruction measured: "avx512-vnni", "avx512", "avx-vnni", "avx2" or
                                   "scalar" (the AMX peaks are below) */
    double bf16_flops_per_s;    /* the same for the BF16 kernels' instruction: 2 flops per multiply-add */
    char bf16_isa[16];          /* "avx512-bf16" (vdpbf16ps), else the fp32 FMA used instead: "avx512-fma",
                                   "avx2-fma" or "scalar" */
    /* Appended (a caller with the smaller struct_size gets the fields above): the AMX tile peaks, measured with
       four independent TMULs per round on register tiles on every thread, when AMX runs natively at the level
       kt_set_max_isa allows; 0 otherwise. */
    double amx_int8_ops_per_s;  /* TDPBSSD, 2 ops per multiply-add */
    double amx_bf16_flops_per_s;  /* TDPBF16PS, 2 flops per multiply-add */
} kt_roofline;

/* Measures the roofline with n_threads (0: one per physical core, pinned as contexts pin theirs). buffer_bytes:
 * the bandwidth buffer, several times the last-level cache (0: 1 GiB). Takes about a second; allocates and frees
 * the buffer. */
KT_API kt_status kt_measure_roofline(int32_t n_threads, uint64_t buffer_bytes, kt_roofline *out);

/* ------------------------------------------------------------------------------------------------------------ */
/* CPU instruction sets. kt picks kernels by what the CPU and OS allow (CPUID, XCR0, and for AMX the tile palette  */
/* and Linux's permission), so one libkt runs on any x86-64 CPU; a missing ISA means a slower path, never SIGILL. */

#define KT_ISA_SCALAR 0  /* portable C++ */
#define KT_ISA_AVX2 1    /* AVX2 + FMA + F16C */
#define KT_ISA_AVX512 2  /* AVX-512 F/BW/DQ/VL; VNNI and AVX512-BF16 used when present, emulated exactly otherwise */
#define KT_ISA_AMX 3     /* AMX tiles (int8, bf16) on top of AVX-512 */

/* Caps the instruction set of kernels chosen from now on, process-wide. The environment variable KT_MAX_ISA
 * ("scalar", "avx2", "avx512" or "amx") sets the initial cap; another value is ignored, and logged once as a warning
 * (KT_LOG_WARN) when a model's engine or an expert pool is created while a log callback takes warnings. Expert
 * pools keep the kernels they chose when they were created. KT_STATUS_INVALID_ARGUMENT for an unknown level.
 * Thread-safe. */
KT_API kt_status kt_set_max_isa(int32_t level);
/* The level kernels use now (the host's best, capped), and the host's best ignoring the cap. Thread-safe. */
KT_API int32_t kt_get_isa(void);
KT_API int32_t kt_get_host_isa(void);
/* "scalar", "avx2", "avx512", "amx"; NULL for an unknown level. Static storage. */
KT_API const char *kt_isa_name(int32_t level);

/* Who ran the matrix products: GEMM calls of the expert engine's kernels (expert pools, and the dense layers of
 * contexts on KT_KERNELS_AUTO) by the instruction set whose code executed them, indexed by KT_ISA_*, with their
 * multiply-adds (rows x columns x K). A call the AMX kernels do not take by design (fewer than 8 rows, a format
 * without AMX kernels) counts under KT_ISA_AVX512; a call they were chosen for but failed is computed on AVX-512,
 * logged, and counted under KT_ISA_AVX512 and in amx_fallbacks, so a fallback never passes silently. */
typedef struct kt_gemm_counts {
    uint32_t struct_size;       /* set by the caller: sizeof(kt_gemm_counts) */
    uint32_t reserved0;
    uint64_t calls[4];          /* by KT_ISA_*: scalar, avx2, avx512, amx */
    uint64_t int8_macs[4];      /* int8 activations x integer weight formats */
    uint64_t bf16_macs[4];      /* bf16 activations x BF16 weights */
    uint64_t amx_fallbacks;
} kt_gemm_counts;

/* The counts of every thread of the process since it started. Thread-safe; the counts of calls running meanwhile
 * may be partly included. */
KT_API kt_status kt_get_gemm_counts(kt_gemm_counts *out);

/* ------------------------------------------------------------------------------------------------------------ */
/* Expert pools: the routed experts of one MoE layer, computed on the CPU.                                       */
/*                                                                                                               */
/* A host engine (which may keep attention and the router on its GPU) passes the hidden states of T tokens with  */
/* their top-k expert ids and routing weights; the pool computes, for every token,                               */
/*     out[t] = sum over its k slots with id != -1 and the expert not masked of                                  */
/*              weight * W_down[id] . swiglu(W_gate[id] . x[t], W_up[id] . x[t])                                  */
/* (swiglu(g, u) = silu(g) * u, see the params for the clamped and alpha variants), into the caller's output or   */
/* added to it. Weights: W_gate, W_up [n_experts][intermediate][hidden], W_down [n_experts][hidden][intermediate]. */
/* Numerics: with integer weight formats, each token's activations are quantized to int8 once per call (scale    */
/* per token) and so is each intermediate row for the down projection; accumulation is exact in int32 per scale  */
/* group and fp32 above it. BF16 weights use bf16 activations with fp32 accumulation.                            */
/*                                                                                                               */
/* Threads and NUMA: pools run on worker threads (by default one per physical core, pinned), grouped by NUMA node, */
/* shared by all pools created with the same thread settings (see private_threads); each expert's intermediate    */
/* dimension is split across the nodes used, each node holding its part of the weights in its own memory. Idle    */
/* workers sleep (they spin briefly after each call first).                                                       */
/*                                                                                                               */
/* Thread safety: every function may be called from any thread; calls on one pool are serialized internally, so  */
/* submissions from several threads are queued in the order the calls acquire the pool. kt_expert_pool_wait does */
/* not block submissions. kt_expert_pool_free must not race with other calls on the same pool.                  */

typedef struct kt_expert_pool kt_expert_pool;

/* Weight formats. */
#define KT_EXPERT_WEIGHTS_AS_SOURCE 0 /* keep the source's quantization: Q2_K, Q3_K, Q4_0, Q4_1, Q5_0, Q5_1,
                                          Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 and BF16 are computed as
                                          stored, the IQ1-IQ3 grid formats exactly as 4-bit indices into their
                                          grid values; other GGUF types become Q8_0, F32/F16 become BF16 */
#define KT_EXPERT_WEIGHTS_INT8 1      /* int8, one scale per output channel */
#define KT_EXPERT_WEIGHTS_INT4 2      /* int4, one scale per group of int4_group_size values along the input */
#define KT_EXPERT_WEIGHTS_BF16 3

/* NUMA policies. */
#define KT_NUMA_AUTO 0   /* every node that has usable cores: one worker group and one shard per node */
#define KT_NUMA_OFF 1    /* one group, memory placed by the OS */
#define KT_NUMA_NODES 2  /* the nodes listed in numa_nodes (hwloc logical indexes) */

typedef struct kt_expert_pool_params {
    uint32_t struct_size;       /* sizeof(kt_expert_pool_params) */
    int32_t n_experts;          /* E >= 1 (required) */
    int32_t hidden_size;        /* H >= 1 (required) */
    int32_t intermediate_size;  /* I >= 1 (required) */
    int32_t max_tokens;         /* most tokens per call; scratch is sized for it. Default 512 */
    int32_t max_top_k;          /* most experts per token. Default 8 */
    int32_t weight_format;      /* KT_EXPERT_WEIGHTS_*. Default AS_SOURCE */
    int32_t int4_group_size;    /* 32, 64 or 128 (INT4 only). Default 128 */
    int32_t input_type;         /* KT_TYPE_F32 (default) or KT_TYPE_BF16 */
    int32_t output_type;        /* KT_TYPE_F32 (default) or KT_TYPE_BF16 */
    int32_t n_threads;          /* 0 (default): one per physical core of the nodes used */
    int32_t numa_policy;        /* KT_NUMA_*. Default AUTO */
    int32_t n_numa_nodes;       /* KT_NUMA_NODES: entries in numa_nodes */
    const int32_t *numa_nodes;  /* copied at creation; may be NULL otherwise */
    float swiglu_limit;         /* > 0: gate = min(gate, limit), up = clamp(up, -limit, limit) first. Default 0 */
    float swiglu_alpha;         /* > 0: gate * sigmoid(alpha * gate) * (up + 1) instead of silu(gate) * up. Default 0 */
    int32_t max_in_flight;      /* jobs kt_expert_pool_submit may queue before it blocks. Default 4 */
    /* EXPERIMENTAL tuning knobs (they may be ignored or change meaning in a minor version): */
    int32_t spin_microseconds;  /* how long idle workers spin before sleeping. Default 100 */
    int32_t private_threads;    /* 0 (default): pools with equal n_threads, numa and spin settings share one set of
                                   worker threads, one job queue (FIFO across those pools) and one scratch memory, as
                                   the layers of a model should; 1: this pool gets its own */
} kt_expert_pool_params;

/* Fills *params with struct_size and the defaults above (the three sizes are 0 and must be set). */
KT_API void kt_expert_pool_params_init(kt_expert_pool_params *params);

/* Creates a pool and starts its threads. Weights are loaded separately. On failure *out_pool is NULL and `err`
 * (if not NULL) gets the status and message: KT_STATUS_INVALID_ARGUMENT for bad params, OUT_OF_MEMORY when
 * threads cannot start. */
KT_API kt_status kt_expert_pool_create(const kt_expert_pool_params *params, kt_expert_pool **out_pool, kt_error *err);
/* Waits for queued jobs, stops the threads and frees everything. NULL is a no-op. */
KT_API void kt_expert_pool_free(kt_expert_pool *pool);
/* The message of the calling thread's last failed call on this pool ("" if none), as for kt_model_last_error:
 * other threads' calls never change it. Valid until this thread's next failing call on the pool, or free. */
KT_API const char *kt_expert_pool_last_error(const kt_expert_pool *pool);

/* Loads blk.<layer>.ffn_gate_exps.weight, ffn_up_exps and ffn_down_exps from a model (any tensor type kt reads),
 * packing them per the pool's weight format; the model may be freed afterwards. Waits for queued jobs first and
 * replaces earlier weights. KT_STATUS_NOT_FOUND for a missing tensor, INVALID_ARGUMENT for shapes that do not
 * match the pool, OUT_OF_MEMORY. */
KT_API kt_status kt_expert_pool_load_model(kt_expert_pool *pool, const kt_model *model, int32_t layer);

/* Weights in caller memory, row-major: gate and up [n_experts][intermediate][hidden], down
 * [n_experts][hidden][intermediate], each of any KT_TYPE_* kt reads (F32, F16, BF16 or a GGUF block type whose
 * block divides the row). The buffers are only read during the call. */
typedef struct kt_expert_weights {
    uint32_t struct_size;  /* sizeof(kt_expert_weights) */
    int32_t gate_type;
    int32_t up_type;
    int32_t down_type;
    const void *gate;
    const void *up;
    const void *down;
} kt_expert_weights;

/* As kt_expert_pool_load_model, from caller buffers. KT_STATUS_UNSUPPORTED for a type kt cannot read. */
KT_API kt_status kt_expert_pool_load(kt_expert_pool *pool, const kt_expert_weights *weights);

/* Loads experts [first_expert, first_expert + n_experts) only: `weights` point at those experts' rows (gate and
 * up [n_experts][intermediate][hidden], down [n_experts][hidden][intermediate]). Lets a host convert a layer expert
 * by expert instead of holding all of it unconverted. If the pool holds weights of the same packed types, only
 * these experts are replaced; otherwise (or when n_experts covers all) the pool starts over and experts not loaded
 * since hold zeros (they add nothing). Same statuses as kt_expert_pool_load, INVALID_ARGUMENT for a bad range. */
KT_API kt_status kt_expert_pool_load_experts(kt_expert_pool *pool, const kt_expert_weights *weights,
                                             int32_t first_expert, int32_t n_experts);

/* mask[e] != 0 marks expert e as computed elsewhere (e.g. on the host's GPU): the pool skips it. The mask is
 * copied and applies to jobs submitted afterwards; NULL clears it. n_experts must equal the pool's. */
KT_API kt_status kt_expert_pool_set_mask(kt_expert_pool *pool, const uint8_t *mask, int32_t n_experts);

/* One call. input and output are [n_tokens][hidden] of the pool's input/output types; expert_ids and
 * expert_weights are [n_tokens][top_k]; id -1 means "no expert". */
typedef struct kt_expert_forward {
    uint32_t struct_size;          /* sizeof(kt_expert_forward) */
    int32_t n_tokens;              /* 0..max_tokens (0: nothing to do) */
    int32_t top_k;                 /* 1..max_top_k */
    int32_t ids_type;              /* KT_TYPE_I32 (default) or KT_TYPE_I64 */
    int32_t accumulate;            /* non-zero: add to output instead of overwriting it (default 0) */
    int32_t reserved0;             /* must be 0 */
    const void *input;
    const void *expert_ids;
    const float *expert_weights;
    void *output;
} kt_expert_forward;

/* Fills *args with struct_size and defaults (pointers NULL, counts 0). */
KT_API void kt_expert_forward_init(kt_expert_forward *args);

/* Computes one call synchronously (after any queued jobs). KT_STATUS_MISUSE before weights are loaded,
 * INVALID_ARGUMENT for bad counts, NULL pointers or an id outside [-1, n_experts). */
KT_API kt_status kt_expert_pool_forward(kt_expert_pool *pool, const kt_expert_forward *args);

/* Queues one call and returns once it is queued (blocking while max_in_flight jobs are pending); jobs run in
 * submission order. The arguments are checked now (same statuses as forward); the buffers they point to must stay
 * valid, and output untouched by the caller, until the job is waited for. *out_ticket (may be NULL) numbers the
 * job, from 1. */
KT_API kt_status kt_expert_pool_submit(kt_expert_pool *pool, const kt_expert_forward *args, uint64_t *out_ticket);

/* Waits until job `ticket` and every job before it have finished (0: all submitted jobs). Returns the first
 * failure among jobs finished since the previous wait, if any. KT_STATUS_INVALID_ARGUMENT for a ticket that was
 * never issued. */
KT_API kt_status kt_expert_pool_wait(kt_expert_pool *pool, uint64_t ticket);

/* What a pool chose and loaded. Strings are static or owned by the pool (valid until the next load or free). */
typedef struct kt_expert_pool_info {
    uint32_t struct_size;        /* set by the caller: sizeof(kt_expert_pool_info) */
    int32_t isa;                 /* KT_ISA_* of the kernels */
    int32_t n_threads;
    int32_t n_numa_groups;       /* worker groups = shards of the intermediate dimension */
    int32_t loaded;              /* 1 once weights are loaded */
    uint64_t weight_bytes;       /* packed weights, all experts */
    uint64_t expert_bytes;       /* packed weights of one expert (gate + up + down) */
    double load_seconds;
    const char *kernels;         /* e.g. "avx512-vnni-bf16" */
    const char *weight_formats;  /* e.g. "gate Q4_K, up Q4_K, down Q6_K" */
    const char *description;     /* one line: groups, nodes, threads, shards, memory placement */
    /* Appended (a caller with the smaller struct_size gets the fields above): this pool's GEMM calls since it
       was created, as kt_gemm_counts counts them. */
    uint64_t gemm_calls[4];      /* by KT_ISA_* of the code that ran them */
    uint64_t gemm_int8_macs[4];
    uint64_t gemm_bf16_macs[4];
    uint64_t amx_fallbacks;      /* calls chosen for AMX that failed and ran on AVX-512 (0 unless something broke) */
} kt_expert_pool_info;

KT_API kt_status kt_expert_pool_get_info(const kt_expert_pool *pool, kt_expert_pool_info *out_info);

/* ------------------------------------------------------------------------------------------------------------ */
/* Tokenizer: text to token ids and back with the model's own vocabulary (the GGUF tokenizer.ggml.* keys).       */
/*                                                                                                                */
/* Byte-level BPE ("gpt2": Qwen, Llama 3, DeepSeek V3, GLM-4 ("glm4"), gpt-oss ("gpt-4o"), GPT-2 and "default"  */
/* pre-tokenizers) and SentencePiece ("llama": LLaMA 1/2, Mistral) are implemented; the ids agree with llama.cpp's */
/* (glm4 and gpt-4o follow llama.cpp's patterns but are checked on hand-derived splits only). The tokenizer is    */
/* built from the model's metadata on first use and kept in the model; every function here is safe to call from   */
/* several threads on one model (the first use builds it exactly once). A vocabulary that is malformed (arrays of  */
/* different lengths or wrong element types, special ids outside the vocabulary, bad merges or byte tokens) gives  */
/* KT_STATUS_INVALID_FILE naming the key and index; a model without a tokenizer KT_STATUS_NOT_FOUND; a tokenizer    */
/* model or pre-tokenizer kt does not implement KT_STATUS_UNSUPPORTED. Messages go to kt_model_last_error.         */
/*                                                                                                                */
/* Size negotiation: functions that fill a caller's buffer take its capacity and report the size they need. When  */
/* the buffer is too small they return KT_STATUS_BUFFER_TOO_SMALL, write nothing to it, and still set the size     */
/* out-parameter to what is needed, so the caller can allocate and call again.                                     */

/* GGUF token types (tokenizer.ggml.token_type). */
#define KT_TOKEN_TYPE_UNDEFINED 0
#define KT_TOKEN_TYPE_NORMAL 1
#define KT_TOKEN_TYPE_UNKNOWN 2
#define KT_TOKEN_TYPE_CONTROL 3      /* <|im_start|>, <s>: special, matched in text only with parse_special */
#define KT_TOKEN_TYPE_USER_DEFINED 4 /* e.g. Qwen3's <think>: always matched whole, always rendered */
#define KT_TOKEN_TYPE_UNUSED 5
#define KT_TOKEN_TYPE_BYTE 6         /* SentencePiece <0xNN> byte fallback */

#define KT_TOKEN_NONE (-1)           /* "no such token" in kt_vocab_info */

#define KT_VOCAB_BPE 1               /* tokenizer.ggml.model "gpt2" */
#define KT_VOCAB_SPM 2               /* tokenizer.ggml.model "llama" */

typedef struct kt_vocab_info {
    uint32_t struct_size;     /* set by the caller: sizeof(kt_vocab_info) */
    int32_t kind;             /* KT_VOCAB_* */
    int32_t n_tokens;
    int32_t bos;              /* KT_TOKEN_NONE when absent */
    int32_t eos;
    int32_t eot;              /* end of turn (<|im_end|>, <|eot_id|>); from the metadata or recognised by text */
    int32_t eom;              /* end of message (<|eom_id|>) */
    int32_t unk;
    int32_t pad;
    int32_t add_bos;          /* 1 when kt_tokenize(add_special = 1) puts BOS first */
    int32_t add_eos;          /* 1 when kt_tokenize(add_special = 1) puts EOS last */
    int32_t add_space_prefix; /* SentencePiece: a space is put before the text */
    const char *pre;          /* tokenizer.ggml.pre as applied ("qwen2", "llama-bpe", "default" ...); valid until
                                 kt_model_free */
} kt_vocab_info;

/* Builds the tokenizer now (otherwise the first call below does) and fills *out_info (whose struct_size the
 * caller set). Building reads and validates the whole vocabulary: tens to hundreds of milliseconds for a
 * 150k-token BPE vocabulary. */
KT_API kt_status kt_vocab_get_info(const kt_model *model, kt_vocab_info *out_info);

/* A token's text as stored in the vocabulary (byte-level BPE shows bytes as their mapped characters, e.g.
 * "\xc4\xa0the" for " the"; use kt_token_to_piece for the bytes). Pointer into the model, valid until
 * kt_model_free, NUL-terminated; out_length may be NULL. KT_STATUS_INVALID_ARGUMENT for an id outside
 * [0, n_tokens). */
KT_API kt_status kt_token_text(const kt_model *model, int32_t token, const char **out_text, uint64_t *out_length);
/* The token's type (KT_TOKEN_TYPE_*) as the tokenizer treats it: tokens llama.cpp recognises by their text as
 * end markers (<|im_end|>, </s> ...) count as CONTROL even when the file says NORMAL. */
KT_API kt_status kt_token_type(const kt_model *model, int32_t token, int32_t *out_type);
/* *out_is_eog = 1 when the token ends generation: EOS, EOT, EOM and the end markers recognised by text. */
KT_API kt_status kt_token_is_eog(const kt_model *model, int32_t token, int32_t *out_is_eog);
/* The id whose text is exactly text[0, text_len), or KT_STATUS_NOT_FOUND. */
KT_API kt_status kt_token_find(const kt_model *model, const char *text, uint64_t text_len, int32_t *out_token);

/* Tokenizes text[0, text_len) (UTF-8; invalid bytes are handled deterministically, as llama.cpp does).
 *   add_special   1: put BOS / EOS around the ids when the vocabulary says so (kt_vocab_info.add_bos/add_eos).
 *   parse_special 1: the texts of CONTROL and UNKNOWN tokens ("<|im_start|>") become those tokens; 0: they are
 *                 tokenized as plain text. USER_DEFINED tokens are matched whole either way.
 * Writes the ids to tokens[0, *out_count). When capacity < the count: KT_STATUS_BUFFER_TOO_SMALL, nothing
 * written, *out_count = the count needed. `tokens` may be NULL when capacity is 0 (to ask for the count). */
KT_API kt_status kt_tokenize(const kt_model *model, const char *text, uint64_t text_len, int32_t add_special,
                             int32_t parse_special, int32_t *tokens, int64_t capacity, int64_t *out_count);

/* The bytes of one token. special 0: CONTROL/UNKNOWN tokens give "" (1: their text). lstrip 1: one leading space
 * is dropped. A byte-level token may hold part of a UTF-8 character (see kt_detokenizer for streaming). Writes
 * *out_length bytes and a NUL after them, so capacity must be at least *out_length + 1; otherwise
 * KT_STATUS_BUFFER_TOO_SMALL with *out_length set. A piece may contain NUL bytes: trust *out_length. */
KT_API kt_status kt_token_to_piece(const kt_model *model, int32_t token, int32_t special, int32_t lstrip, char *buf,
                                   int64_t capacity, int64_t *out_length);

/* The text of tokens[0, n_tokens), as llama.cpp's llama_detokenize gives it.
 *   remove_special  1: drop a leading BOS and a trailing EOS that the vocabulary adds.
 *   unparse_special 1: CONTROL/UNKNOWN tokens are rendered as their text (0: omitted).
 * SentencePiece drops the space its add_space_prefix put before the first piece; Llama 3 style vocabularies
 * ("llama-bpe", "gpt-2") clean up spaces as Hugging Face does (" ?" -> "?", " 's" -> "'s"). Writes *out_length
 * bytes plus a NUL (capacity >= *out_length + 1), else KT_STATUS_BUFFER_TOO_SMALL with *out_length set.
 * KT_STATUS_INVALID_ARGUMENT for an id outside the vocabulary. */
KT_API kt_status kt_detokenize(const kt_model *model, const int32_t *tokens, int64_t n_tokens, int32_t remove_special,
                               int32_t unparse_special, char *buf, int64_t capacity, int64_t *out_length);

/* ---- streaming detokenization ---- */

/* Turns generated tokens into text one token at a time. A UTF-8 character split across tokens is held back until
 * it is complete, so every piece of text handed out is whole characters (bytes that can never become valid UTF-8
 * are passed through as they are). The concatenation of everything returned equals kt_detokenize(remove_special
 * 0, unparse_special as given) without the clean-up of spaces. Borrows the model (free the detokenizer first);
 * used by one thread at a time. */
typedef struct kt_detokenizer kt_detokenizer;

KT_API kt_status kt_detokenizer_create(const kt_model *model, int32_t unparse_special, kt_detokenizer **out,
                                       kt_error *err);
KT_API void kt_detokenizer_free(kt_detokenizer *detokenizer);
/* Feeds one token and writes the text it completes (possibly none: *out_length 0) plus a NUL. With a buffer below
 * *out_length + 1: KT_STATUS_BUFFER_TOO_SMALL, *out_length set and the token NOT consumed (call again). */
KT_API kt_status kt_detokenizer_push(kt_detokenizer *detokenizer, int32_t token, char *buf, int64_t capacity,
                                     int64_t *out_length);
/* Writes whatever is held back (an incomplete character at the end of the stream) and starts a new stream. Same
 * size negotiation as push. */
KT_API kt_status kt_detokenizer_flush(kt_detokenizer *detokenizer, char *buf, int64_t capacity, int64_t *out_length);
/* The message of the last failed call on this detokenizer ("" if none). */
KT_API const char *kt_detokenizer_last_error(const kt_detokenizer *detokenizer);


/* ---- chat templates ---- */

/* One turn of a conversation: role ("system", "user", "assistant", "tool" ...) and content, NUL-terminated UTF-8. */
typedef struct kt_chat_message {
    const char *role;
    const char *content;
} kt_chat_message;

typedef struct kt_chat_params {
    uint32_t struct_size;            /* sizeof(kt_chat_params) */
    int32_t add_generation_prompt;   /* default 1: end with the header that starts the assistant's reply */
    const char *template_name;       /* default NULL: the model's tokenizer.chat_template. Otherwise a built-in
                                        family ("chatml", "llama3", "deepseek3", "mistral", "glm4" for GLM-4.5/4.6,
                                        "harmony" for gpt-oss) or the name of a
                                        template the model carries (tokenizer.chat_template.<name>) */
    const char *template_source;     /* default NULL; a Jinja template that overrides the two above */
    const char *extra_context_json;  /* default NULL; a JSON object of further template variables, e.g.
                                        {"enable_thinking": false} for Qwen3 or {"tools": [...]} */
} kt_chat_params;

/* Fills *params with struct_size and the defaults above. */
KT_API void kt_chat_params_init(kt_chat_params *params);

/* Renders messages[0, n_messages) into the prompt text the model expects. The template runs in kt's interpreter
 * for the Jinja subset chat templates use (as Hugging Face's apply_chat_template would render it); kt never
 * guesses: a template using Jinja that kt does not implement, or one that exceeds kt's limits on nesting, work,
 * value sizes or integer range (templates are untrusted programs; the families kt runs stay far inside), gives
 * KT_STATUS_UNSUPPORTED (the message names the construct and line), no template at all (none in the model, none
 * named or given) KT_STATUS_NOT_FOUND, and a conversation the template rejects (its raise_exception, e.g. roles
 * that must alternate) or malformed extra_context_json KT_STATUS_INVALID_ARGUMENT. Variables: messages, add_generation_prompt, bos_token,
 * eos_token, plus extra_context_json's (which may not redefine those four).
 * When the vocabulary adds BOS itself, a BOS at the start of the text is removed, so tokenize the result with
 * add_special = 1 and parse_special = 1 to get the model's prompt. Writes *out_length bytes plus a NUL
 * (capacity >= *out_length + 1), else KT_STATUS_BUFFER_TOO_SMALL with *out_length set (each call renders anew).
 * `params` may be NULL for defaults. */
KT_API kt_status kt_chat_apply_template(const kt_model *model, const kt_chat_message *messages, int64_t n_messages,
                                        const kt_chat_params *params, char *buf, int64_t capacity,
                                        int64_t *out_length);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KT_H */
