/*
 * kt.h: the C ABI of libkt, CPU-first inference for Mixture-of-Experts language models.
 *
 * This is the only public header. It is C99, uses fixed-width types in every struct, and is stable within a
 * major version: functions and status codes are only ever added; fields are only ever appended to params
 * structs (each starts with `struct_size`, so old callers keep working).
 *
 * Rules every function follows:
 *   - It never aborts, exits, throws or prints. Failures return a kt_status; the detailed message (which file,
 *     key, tensor, byte offset) is kept per handle: kt_model_last_error(model), or in the caller's optional
 *     kt_error for constructors. There is no thread-local "last error": consecutive calls may come from
 *     different OS threads (Go does this).
 *   - Out-parameters are written only on success, unless stated otherwise.
 *   - Every *_create / *_load has a *_free; *_free(NULL) is a no-op.
 *   - Callbacks always receive the caller's `void *user_data`.
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
#define KT_VERSION_MINOR 1
#define KT_VERSION_PATCH 0
#define KT_VERSION_NUMBER (KT_VERSION_MAJOR * 1000000 + KT_VERSION_MINOR * 1000 + KT_VERSION_PATCH)

/* The library's version as KT_VERSION_NUMBER computes it. Same major version = compatible ABI. */
KT_API int32_t kt_version_number(void);
/* "0.1.0". Static storage. */
KT_API const char *kt_version_string(void);
/* One line naming the version, git revision, compiler, enabled backends and the CPU ISAs this process can use,
 * e.g. "kt 0.1.0 (git abc123) gcc 12.2; backends: cpu; cpu isa: avx2 avx512 (vnni bf16); amx: no". Static
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
/* Backends                                                                                                      */

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
 * invoked from kt's worker threads; it must be thread-safe. */
typedef void (*kt_log_callback)(int32_t level, const char *message, void *user_data);

/* Installs the process-wide log callback (NULL: silence) and the most verbose level delivered. Thread-safe. */
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
#define KT_TYPE_IQ4_NL 20
#define KT_TYPE_IQ4_XS 23
#define KT_TYPE_I8 24
#define KT_TYPE_I16 25
#define KT_TYPE_I32 26
#define KT_TYPE_I64 27
#define KT_TYPE_F64 28
#define KT_TYPE_BF16 30

/* "Q4_K", or NULL for a type kt does not know. */
KT_API const char *kt_type_name(int32_t type);
/* Elements per block (1 for plain types) and bytes per block; 0 for unknown types. */
KT_API int64_t kt_type_block_size(int32_t type);
KT_API int64_t kt_type_block_bytes(int32_t type);

/* ------------------------------------------------------------------------------------------------------------ */
/* Models: a GGUF file, memory-mapped and validated.                                                             */

typedef struct kt_model kt_model;

/* Called during loading with the fraction done in [0, 1] (monotone; 1 is reported exactly once, at the end).
 * Return non-zero to continue, 0 to cancel: kt_model_load then frees everything and returns
 * KT_STATUS_CANCELLED. */
typedef int32_t (*kt_progress_callback)(float progress, void *user_data);

typedef struct kt_model_params {
    uint32_t struct_size;       /* sizeof(kt_model_params) */
    int32_t use_mmap;           /* default 1: map the file; 0: read it into memory */
    int32_t prefetch;           /* default 1: fault every tensor page in during load (progress is reported over
                                   this); 0: pages come in on first use */
    int32_t reserved0;          /* must be 0 */
    kt_progress_callback progress_callback; /* default NULL */
    void *progress_user_data;
} kt_model_params;

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

/* The message of the last failed call on this model ("" if none). Valid until the next failing call on the
 * same model or kt_model_free. Calls that only read a model record their error under a lock, so concurrent
 * readers are safe; which message survives is then unspecified. */
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
 * Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS. */
KT_API int32_t kt_type_can_quantize(int32_t type);
/* 1 if kt_dequantize (and kt_model_tensor_read_f32) can read the type, else 0: every type above plus I8, I16, I32,
 * I64 and F64 (converted to the nearest float). */
KT_API int32_t kt_type_can_dequantize(int32_t type);

/* Quantizes n_rows rows of n_per_row floats (rows back to back) into dst, as a GGUF tensor of shape
 * [n_per_row, n_rows] stores them: rows back to back, each n_per_row / kt_type_block_size(type) blocks of
 * kt_type_block_bytes(type) bytes. dst needs no particular alignment. *out_bytes (may be NULL) receives the size of
 * the result, also when the call fails with KT_STATUS_BUFFER_TOO_SMALL: pass dst = NULL and dst_capacity = 0 to ask.
 *
 * How each type is produced:
 *   - Q8_0, Q8_1, Q8_K (the activation formats of dot-product kernels), Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, F16, BF16:
 *     ggml's reference rules, byte for byte (tests compare with llama.cpp's output).
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

/* ------------------------------------------------------------------------------------------------------------ */
/* GGUF writing: metadata and tensors collected in a writer, then written as a GGUF v3 file in one go.           */

/* A writer is used by one thread at a time (different writers are independent). Every setter copies what it is
 * given (keys, strings, arrays, tensor bytes), so the caller's buffers may be reused as soon as it returns;
 * streamed tensors (kt_gguf_writer_add_tensor_fill) are produced by the caller's callback during
 * kt_gguf_writer_write_file instead. Keys and tensors are written in the order they were added.
 *
 * Every setter checks its entry at once: on failure nothing is added, the status is returned and
 * kt_gguf_writer_last_error names the key or tensor. Statuses common to all setters: KT_STATUS_INVALID_ARGUMENT
 * for a NULL writer or key, a key that is empty, longer than 65535 bytes or already set, a value out of range for
 * its type, a type id that is not a GGUF value type the setter takes; KT_STATUS_OUT_OF_MEMORY. */

typedef struct kt_gguf_writer kt_gguf_writer;

/* Creates an empty writer. alignment: of the tensor data, a power of two in [8, 2^30], or 0 for the GGUF default
 * of 32; a non-default alignment is recorded in the file as general.alignment (UINT32) automatically. On failure
 * (KT_STATUS_INVALID_ARGUMENT for a bad alignment or a NULL out_writer, KT_STATUS_OUT_OF_MEMORY) *out_writer is
 * set to NULL. Free with kt_gguf_writer_free. */
KT_API kt_status kt_gguf_writer_create(uint32_t alignment, kt_gguf_writer **out_writer);
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
 * tensor's size (kt_quantize's out_bytes for its rows). Names are 1..64 bytes and unique. Statuses:
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

/* ------------------------------------------------------------------------------------------------------------ */
/* Tokenizer: text to token ids and back with the model's own vocabulary (the GGUF tokenizer.ggml.* keys).       */
/*                                                                                                                */
/* Byte-level BPE ("gpt2": Qwen, Llama 3, DeepSeek V3, GPT-2 and "default" pre-tokenizers) and SentencePiece       */
/* ("llama": LLaMA 1/2, Mistral) are implemented; the ids agree with llama.cpp's. The tokenizer is built from the   */
/* model's metadata on first use and kept in the model; every function here is safe to call from several threads  */
/* on one model (the first use builds it exactly once). A vocabulary that is malformed (arrays of different        */
/* lengths or wrong element types, special ids outside the vocabulary, bad merges or byte tokens) gives            */
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
                                        family ("chatml", "llama3", "deepseek3", "mistral") or the name of a
                                        template the model carries (tokenizer.chat_template.<name>) */
    const char *template_source;     /* default NULL; a Jinja template that overrides the two above */
    const char *extra_context_json;  /* default NULL; a JSON object of further template variables, e.g.
                                        {"enable_thinking": false} for Qwen3 or {"tools": [...]} */
} kt_chat_params;

/* Fills *params with struct_size and the defaults above. */
KT_API void kt_chat_params_init(kt_chat_params *params);

/* Renders messages[0, n_messages) into the prompt text the model expects. The template runs in kt's interpreter
 * for the Jinja subset chat templates use (as Hugging Face's apply_chat_template would render it); kt never
 * guesses: a template using Jinja that kt does not implement gives KT_STATUS_UNSUPPORTED (the message names the
 * construct and line), no template at all (none in the model, none named or given) KT_STATUS_NOT_FOUND, and a
 * conversation the template rejects (its raise_exception, e.g. roles that must alternate) or malformed
 * extra_context_json KT_STATUS_INVALID_ARGUMENT. Variables: messages, add_generation_prompt, bos_token,
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
