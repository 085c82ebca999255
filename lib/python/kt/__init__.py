"""kt for Python: the C ABI of libkt (include/kt.h) through ctypes.

The shared library is found, in order, at $KT_LIBRARY, by the system's search (`ctypes.util.find_library`), and
in the source tree's build/src/ (when this module runs from a kt checkout). Build it with `cmake -S . -B build -DKT_BUILD_SHARED=ON && cmake --build build --target kt_shared`
(it lands in build/src/libkt.so).

Every kt call that fails raises `kt.Error`, which carries the status code and kt's message (naming the file, key or
tensor). Tensor data comes back as NumPy arrays in NumPy order, i.e. the reverse of GGUF's `ne` order.

What is here: models (metadata, tensors), the tokenizer and chat templates, contexts (decode, logits, sampling,
generation), streaming detokenization, expert pools, quantization and the GGUF writer; `kt.experts.KTMoEWrapper`
has the shape of KTransformers' kt-kernel wrapper. A Model and an ExpertPool may be used from several threads (kt
keeps their error messages per thread, and ctypes calls run on the calling thread); a Context, Detokenizer and
GgufWriter by one thread at a time. kt.h's EXPERIMENTAL parts (roofline, CUDA, tuning knobs) are not bound.
"""
import ctypes
import ctypes.util
import os
import weakref

# ------------------------------------------------------------------------------------------------------------
# Constants (kt.h)

(STATUS_OK, STATUS_INVALID_ARGUMENT, STATUS_OUT_OF_MEMORY, STATUS_IO_ERROR, STATUS_INVALID_FILE, STATUS_UNSUPPORTED,
 STATUS_NOT_FOUND, STATUS_TYPE_MISMATCH, STATUS_BUFFER_TOO_SMALL, STATUS_CANCELLED, STATUS_MISUSE, STATUS_INTERNAL,
 STATUS_CONTEXT_FULL) = range(13)

TYPE_F32, TYPE_F16, TYPE_Q4_0, TYPE_Q8_0, TYPE_Q4_K, TYPE_Q6_K, TYPE_I32, TYPE_I64, TYPE_BF16 = 0, 1, 2, 8, 12, 14, 26, 27, 30
TYPE_MXFP4 = 39

LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3
LOGITS_NONE, LOGITS_LAST, LOGITS_ALL = 0, 1, 2
KERNELS_AUTO, KERNELS_REFERENCE = 0, 1
STOP_MAX_TOKENS, STOP_TOKEN, STOP_CALLBACK, STOP_CONTEXT_FULL = 0, 1, 2, 3
WEIGHTS_AS_SOURCE, WEIGHTS_INT8, WEIGHTS_INT4, WEIGHTS_BF16 = 0, 1, 2, 3
NUMA_AUTO, NUMA_OFF, NUMA_NODES = 0, 1, 2
VOCAB_BPE, VOCAB_SPM = 1, 2
TOKEN_NONE = -1

META_UINT8, META_INT8, META_UINT16, META_INT16, META_UINT32, META_INT32 = 0, 1, 2, 3, 4, 5
META_FLOAT32, META_BOOL, META_STRING, META_ARRAY, META_UINT64, META_INT64, META_FLOAT64 = 6, 7, 8, 9, 10, 11, 12
_META_INTEGERS = (META_UINT8, META_INT8, META_UINT16, META_INT16, META_UINT32, META_INT32, META_UINT64, META_INT64)
_META_FLOATS = (META_FLOAT32, META_FLOAT64)

_ERROR_MESSAGE_CAPACITY = 1024
_MAX_DIMS = 4


class Error(Exception):
    def __init__(self, status, message):
        super().__init__(f"{message} ({_lib().kt_status_string(status).decode()}, status {status})")
        self.status = status


_P = ctypes.c_void_p
_I32, _U32, _I64, _U64, _F32, _F64 = (ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float,
                                      ctypes.c_double)
_PROGRESS = ctypes.CFUNCTYPE(_I32, _F32, _P)
_ABORT = ctypes.CFUNCTYPE(_I32, _P)
_TOKEN = ctypes.CFUNCTYPE(_I32, _I32, _P)
_LOG = ctypes.CFUNCTYPE(None, _I32, ctypes.c_char_p, _P)
_FILL = ctypes.CFUNCTYPE(_I32, _P, _U64, _P)


def _struct(name, fields):
    """A ctypes mirror of a kt.h struct (its layout is checked against tests/api/kt_layout.h by the tests)."""
    return type(name, (ctypes.Structure,), {"_fields_": fields})


_KtError = _struct("kt_error", [("struct_size", _U32), ("status", _I32), ("message", ctypes.c_char * _ERROR_MESSAGE_CAPACITY)])
_ModelParams = _struct("kt_model_params", [("struct_size", _U32), ("use_mmap", _I32), ("prefetch", _I32),
                                           ("reserved0", _I32), ("progress_callback", _PROGRESS),
                                           ("progress_user_data", _P), ("prepare", _I32), ("n_threads", _I32),
                                           ("pack_cache", _I32), ("reserved1", _I32),
                                           ("pack_cache_path", ctypes.c_char_p),
                                           ("device", _I32), ("device_index", _I32), ("device_budget_bytes", _U64),
                                           ("device_experts", _I64), ("device_expert_counts", ctypes.POINTER(_U64)),
                                           ("device_expert_counts_len", _U64), ("device_deferred_experts", _I32),
                                           ("device_prefill_threshold", _I32)])
_TensorInfo = _struct("kt_tensor_info", [("struct_size", _U32), ("type", _I32), ("n_dims", _I32), ("reserved0", _I32),
                                         ("ne", _I64 * _MAX_DIMS), ("n_elements", _U64), ("n_bytes", _U64),
                                         ("file_offset", _U64), ("name", ctypes.c_char_p)])
_TensorSpec = _struct("kt_tensor_spec", [("struct_size", _U32), ("role", _I32), ("optional", _I32), ("n_dims", _I32),
                                         ("ne", _I64 * _MAX_DIMS), ("name", ctypes.c_char_p)])
_ContextParams = _struct("kt_context_params", [("struct_size", _U32), ("n_threads", _I32), ("n_ctx", _I64),
                                               ("n_batch", _I64), ("kv_type", _I32), ("kernels", _I32),
                                               ("abort_callback", _ABORT), ("abort_user_data", _P)])
_SamplerParams = _struct("kt_sampler_params", [("struct_size", _U32), ("temperature", _F32), ("top_k", _I32),
                                               ("top_p", _F32), ("min_p", _F32), ("repeat_penalty", _F32),
                                               ("repeat_last_n", _I32), ("presence_penalty", _F32),
                                               ("frequency_penalty", _F32), ("reserved0", _U32), ("seed", _U64)])
_GenerateParams = _struct("kt_generate_params", [("struct_size", _U32), ("reserved0", _I32), ("max_tokens", _I64),
                                                 ("stop_tokens", ctypes.POINTER(_I32)), ("n_stop_tokens", _I64),
                                                 ("sampler", ctypes.POINTER(_SamplerParams)), ("on_token", _TOKEN),
                                                 ("user_data", _P)])
_Perf = _struct("kt_perf", [("struct_size", _U32), ("reserved0", _U32), ("n_prefill_tokens", _I64),
                            ("prefill_seconds", _F64), ("n_decode_tokens", _I64), ("decode_seconds", _F64),
                            ("attention_seconds", _F64), ("experts_seconds", _F64), ("dense_ffn_seconds", _F64),
                            ("head_seconds", _F64), ("other_seconds", _F64)])
_Roofline = _struct("kt_roofline", [("struct_size", _U32), ("n_threads", _I32), ("buffer_bytes", _U64),
                                    ("read_bytes_per_s", _F64), ("int8_ops_per_s", _F64),
                                    ("int8_isa", ctypes.c_char * 16), ("bf16_flops_per_s", _F64),
                                    ("bf16_isa", ctypes.c_char * 16), ("amx_int8_ops_per_s", _F64),
                                    ("amx_bf16_flops_per_s", _F64)])  # EXPERIMENTAL: declared for the layout check
_ExpertPoolParams = _struct("kt_expert_pool_params", [
    ("struct_size", _U32), ("n_experts", _I32), ("hidden_size", _I32), ("intermediate_size", _I32),
    ("max_tokens", _I32), ("max_top_k", _I32), ("weight_format", _I32), ("int4_group_size", _I32),
    ("input_type", _I32), ("output_type", _I32), ("n_threads", _I32), ("numa_policy", _I32), ("n_numa_nodes", _I32),
    ("numa_nodes", ctypes.POINTER(_I32)), ("swiglu_limit", _F32), ("swiglu_alpha", _F32), ("max_in_flight", _I32),
    ("spin_microseconds", _I32), ("private_threads", _I32)])
_ExpertWeights = _struct("kt_expert_weights", [("struct_size", _U32), ("gate_type", _I32), ("up_type", _I32),
                                               ("down_type", _I32), ("gate", _P), ("up", _P), ("down", _P)])
_ExpertForward = _struct("kt_expert_forward", [("struct_size", _U32), ("n_tokens", _I32), ("top_k", _I32),
                                               ("ids_type", _I32), ("accumulate", _I32), ("reserved0", _I32),
                                               ("input", _P), ("expert_ids", _P), ("expert_weights", _P),
                                               ("output", _P)])
_ExpertPoolInfo = _struct("kt_expert_pool_info", [("struct_size", _U32), ("isa", _I32), ("n_threads", _I32),
                                                  ("n_numa_groups", _I32), ("loaded", _I32), ("weight_bytes", _U64),
                                                  ("expert_bytes", _U64), ("load_seconds", _F64),
                                                  ("kernels", ctypes.c_char_p), ("weight_formats", ctypes.c_char_p),
                                                  ("description", ctypes.c_char_p), ("gemm_calls", _U64 * 4),
                                                  ("gemm_int8_macs", _U64 * 4), ("gemm_bf16_macs", _U64 * 4),
                                                  ("amx_fallbacks", _U64)])
_VocabInfo = _struct("kt_vocab_info", [("struct_size", _U32), ("kind", _I32), ("n_tokens", _I32), ("bos", _I32),
                                       ("eos", _I32), ("eot", _I32), ("eom", _I32), ("unk", _I32), ("pad", _I32),
                                       ("add_bos", _I32), ("add_eos", _I32), ("add_space_prefix", _I32),
                                       ("pre", ctypes.c_char_p)])
_ChatMessage = _struct("kt_chat_message", [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)])
_ChatParams = _struct("kt_chat_params", [("struct_size", _U32), ("add_generation_prompt", _I32),
                                         ("template_name", ctypes.c_char_p), ("template_source", ctypes.c_char_p),
                                         ("extra_context_json", ctypes.c_char_p)])

# Every struct of kt.h, by its C name, for the layout test.
STRUCTS = {cls.__name__: cls for cls in (_KtError, _ModelParams, _TensorInfo, _TensorSpec, _ContextParams,
                                         _SamplerParams, _GenerateParams, _Perf, _Roofline, _ExpertPoolParams,
                                         _ExpertWeights, _ExpertForward, _ExpertPoolInfo, _VocabInfo, _ChatMessage,
                                         _ChatParams)}


def _sized(cls, **fields):
    """A struct with struct_size set to the size this module knows, then `fields`."""
    value = cls(**fields)
    value.struct_size = ctypes.sizeof(cls)
    return value


# ------------------------------------------------------------------------------------------------------------
# Loading the library and declaring the functions

_LIB = None

_S = ctypes.c_int32  # kt_status
_PP = ctypes.POINTER(_P)
_CP = ctypes.c_char_p
_PI32, _PI64, _PU64 = ctypes.POINTER(_I32), ctypes.POINTER(_I64), ctypes.POINTER(_U64)
_SIGNATURES = {
    "kt_version_number": (ctypes.c_int32, []),
    "kt_version_string": (ctypes.c_char_p, []),
    "kt_build_info": (ctypes.c_char_p, []),
    "kt_status_string": (ctypes.c_char_p, [_S]),
    "kt_type_name": (ctypes.c_char_p, [ctypes.c_int32]),
    "kt_type_block_size": (ctypes.c_int64, [ctypes.c_int32]),
    "kt_type_block_bytes": (ctypes.c_int64, [ctypes.c_int32]),
    "kt_log_set": (None, [_LOG, _P, _I32]),
    "kt_model_params_init": (None, [ctypes.POINTER(_ModelParams)]),
    "kt_model_load": (_S, [ctypes.c_char_p, ctypes.POINTER(_ModelParams), ctypes.POINTER(_P), ctypes.POINTER(_KtError)]),
    "kt_model_free": (None, [_P]),
    "kt_model_last_error": (ctypes.c_char_p, [_P]),
    "kt_model_gguf_version": (ctypes.c_uint32, [_P]),
    "kt_model_architecture": (ctypes.c_char_p, [_P]),
    "kt_model_meta_count": (ctypes.c_int64, [_P]),
    "kt_model_meta_key": (_S, [_P, ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p)]),
    "kt_model_meta_type": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32)]),
    "kt_model_meta_get_int": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)]),
    "kt_model_meta_get_float": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_double)]),
    "kt_model_meta_get_string": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                      ctypes.POINTER(ctypes.c_uint64)]),
    "kt_model_meta_array_length": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]),
    "kt_model_meta_array_get_int": (_S, [_P, ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int64)]),
    "kt_model_meta_array_get_float": (_S, [_P, ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_double)]),
    "kt_model_meta_array_get_string": (_S, [_P, ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p),
                                            ctypes.POINTER(ctypes.c_uint64)]),
    "kt_model_tensor_count": (ctypes.c_int64, [_P]),
    "kt_model_tensor_find": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)]),
    "kt_model_tensor_info": (_S, [_P, ctypes.c_int64, ctypes.POINTER(_TensorInfo)]),
    "kt_model_tensor_read_f32": (_S, [_P, ctypes.c_int64, ctypes.c_void_p, ctypes.c_uint64,
                                      ctypes.POINTER(ctypes.c_uint64)]),
    "kt_type_can_quantize": (ctypes.c_int32, [ctypes.c_int32]),
    "kt_quantize": (_S, [ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                         ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]),
    "kt_dequantize": (_S, [ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_void_p, ctypes.c_uint64]),
    "kt_gguf_writer_create_v2": (_S, [ctypes.c_uint32, ctypes.POINTER(_P), ctypes.POINTER(_KtError)]),
    "kt_gguf_writer_free": (None, [_P]),
    "kt_gguf_writer_last_error": (ctypes.c_char_p, [_P]),
    "kt_gguf_writer_set_int": (_S, [_P, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64]),
    "kt_gguf_writer_set_uint64": (_S, [_P, ctypes.c_char_p, ctypes.c_uint64]),
    "kt_gguf_writer_set_float": (_S, [_P, ctypes.c_char_p, ctypes.c_int32, ctypes.c_double]),
    "kt_gguf_writer_set_bool": (_S, [_P, ctypes.c_char_p, ctypes.c_int32]),
    "kt_gguf_writer_set_string": (_S, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64]),
    "kt_gguf_writer_set_array": (_S, [_P, ctypes.c_char_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint64]),
    "kt_gguf_writer_set_array_string": (_S, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                             ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint64]),
    "kt_gguf_writer_add_tensor": (_S, [_P, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
                                       ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p, ctypes.c_uint64]),
    "kt_gguf_writer_write_file": (_S, [_P, ctypes.c_char_p]),
    # tokenizer
    "kt_vocab_get_info": (_S, [_P, ctypes.POINTER(_VocabInfo)]),
    "kt_token_is_eog": (_S, [_P, _I32, _PI32]),
    "kt_tokenize": (_S, [_P, _CP, _U64, _I32, _I32, _PI32, _I64, _PI64]),
    "kt_token_to_piece": (_S, [_P, _I32, _I32, _I32, _P, _I64, _PI64]),
    "kt_detokenize": (_S, [_P, _PI32, _I64, _I32, _I32, _P, _I64, _PI64]),
    "kt_detokenizer_create": (_S, [_P, _I32, _PP, ctypes.POINTER(_KtError)]),
    "kt_detokenizer_free": (None, [_P]),
    "kt_detokenizer_push": (_S, [_P, _I32, _P, _I64, _PI64]),
    "kt_detokenizer_flush": (_S, [_P, _P, _I64, _PI64]),
    "kt_detokenizer_last_error": (_CP, [_P]),
    "kt_chat_params_init": (None, [ctypes.POINTER(_ChatParams)]),
    "kt_chat_apply_template": (_S, [_P, ctypes.POINTER(_ChatMessage), _I64, ctypes.POINTER(_ChatParams), _P, _I64,
                                    _PI64]),
    # contexts
    "kt_context_params_init": (None, [ctypes.POINTER(_ContextParams)]),
    "kt_context_create": (_S, [_P, ctypes.POINTER(_ContextParams), _PP, ctypes.POINTER(_KtError)]),
    "kt_context_free": (None, [_P]),
    "kt_context_last_error": (_CP, [_P]),
    "kt_context_n_vocab": (_I64, [_P]),
    "kt_context_n_ctx": (_I64, [_P]),
    "kt_context_n_past": (_I64, [_P]),
    "kt_context_decode": (_S, [_P, _PI32, _I64, _I32]),
    "kt_context_logits": (_S, [_P, _I64, ctypes.POINTER(ctypes.POINTER(_F32)), _PI64]),
    "kt_context_reset": (None, [_P]),
    "kt_sampler_params_init": (None, [ctypes.POINTER(_SamplerParams)]),
    "kt_context_sample": (_S, [_P, ctypes.POINTER(_SamplerParams), _PI32]),
    "kt_generate_params_init": (None, [ctypes.POINTER(_GenerateParams)]),
    "kt_context_generate": (_S, [_P, _PI32, _I64, ctypes.POINTER(_GenerateParams), _PI32, _I64, _PI64, _PI32]),
    "kt_context_perf": (_S, [_P, ctypes.POINTER(_Perf)]),
    # expert pools
    "kt_expert_pool_params_init": (None, [ctypes.POINTER(_ExpertPoolParams)]),
    "kt_expert_forward_init": (None, [ctypes.POINTER(_ExpertForward)]),
    "kt_expert_pool_create": (_S, [ctypes.POINTER(_ExpertPoolParams), _PP, ctypes.POINTER(_KtError)]),
    "kt_expert_pool_free": (None, [_P]),
    "kt_expert_pool_last_error": (_CP, [_P]),
    "kt_expert_pool_load_model": (_S, [_P, _P, _I32]),
    "kt_expert_pool_load": (_S, [_P, ctypes.POINTER(_ExpertWeights)]),
    "kt_expert_pool_set_mask": (_S, [_P, _P, _I32]),
    "kt_expert_pool_forward": (_S, [_P, ctypes.POINTER(_ExpertForward)]),
    "kt_expert_pool_submit": (_S, [_P, ctypes.POINTER(_ExpertForward), _PU64]),
    "kt_expert_pool_wait": (_S, [_P, _U64]),
    "kt_expert_pool_get_info": (_S, [_P, ctypes.POINTER(_ExpertPoolInfo)]),
}


def _lib():
    global _LIB
    if _LIB is None:
        in_tree = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "build", "src",
                               "libkt.so")
        path = os.environ.get("KT_LIBRARY") or ctypes.util.find_library("kt")
        if not path and os.path.exists(in_tree):
            path = os.path.normpath(in_tree)
        if not path:
            raise OSError("libkt.so not found: set KT_LIBRARY to its path (build with -DKT_BUILD_SHARED=ON)")
        lib = ctypes.CDLL(path)
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        _LIB = lib
    return _LIB


def load_library(path):
    """Uses the libkt.so at `path` (call before anything else; the same as setting $KT_LIBRARY)."""
    global _LIB
    if _LIB is not None:
        raise RuntimeError("libkt is already loaded")
    os.environ["KT_LIBRARY"] = os.fspath(path)
    _lib()


def version():
    return _lib().kt_version_string().decode()


def build_info():
    return _lib().kt_build_info().decode()


def type_name(kt_type):
    name = _lib().kt_type_name(kt_type)
    return name.decode() if name else None


# ------------------------------------------------------------------------------------------------------------
# Models

class TensorInfo:
    """One tensor of a model. `ne` is GGUF's order (ne[0] contiguous); `shape` is NumPy's (reversed)."""

    def __init__(self, index, raw):
        self.index = index
        self.name = raw.name.decode()
        self.type = raw.type
        self.ne = tuple(raw.ne[:raw.n_dims])
        self.shape = tuple(reversed(self.ne))
        self.n_elements = raw.n_elements
        self.n_bytes = raw.n_bytes
        self.file_offset = raw.file_offset

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {type_name(self.type)}, ne={list(self.ne)})"


class _Handle:
    """A kt handle owned by a Python object: freed by close(), at the end of a with-block, or when collected.
    Subclasses name their kt_*_free and kt_*_last_error functions and set self._handle."""

    _free = None
    _last_error = None
    _handle = None

    def close(self):
        if self._handle:
            getattr(_lib(), self._free)(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Error:  # a model whose borrowers are still alive at interpreter exit: the process frees it
            pass

    def _check(self, status):
        if status != STATUS_OK:
            message = getattr(_lib(), self._last_error)(self._handle)
            raise Error(status, message.decode(errors="replace"))


def _construct(create, *args):
    """Calls a kt constructor `create(*args, &handle, &err)`; raises Error with the kt_error's message."""
    handle = ctypes.c_void_p()
    err = _sized(_KtError)
    status = create(*args, ctypes.byref(handle), ctypes.byref(err))
    if status != STATUS_OK:
        raise Error(status, err.message.decode(errors="replace"))
    return handle


def _fill_bytes(call):
    """Runs a kt call that fills a buffer `call(buf, capacity, byref(length))`, growing the buffer as kt's size
    negotiation asks; gives (status, bytes)."""
    capacity = 256
    while True:
        buf = ctypes.create_string_buffer(capacity)
        length = ctypes.c_int64()
        status = call(buf, capacity, ctypes.byref(length))
        if status == STATUS_BUFFER_TOO_SMALL and length.value + 1 > capacity:
            capacity = length.value + 1
            continue
        return status, (buf.raw[:length.value] if status == STATUS_OK else b"")


def _int32_array(values):
    values = list(values)
    return (ctypes.c_int32 * max(len(values), 1))(*values), len(values)


_log_callback = None  # the installed ctypes callback, kept alive while kt may call it


def set_log_callback(callback, max_level=LOG_INFO):
    """Sends kt's log messages up to max_level to callback(level, message) (from any of kt's threads; exceptions
    are swallowed); None silences kt. When it returns, the replaced callback is no longer running."""
    global _log_callback

    def deliver(level, message, _user_data):
        try:
            callback(level, message.decode(errors="replace"))
        except Exception:  # noqa: BLE001: an exception cannot cross into C
            pass

    new = _LOG(deliver) if callback else _LOG()
    _lib().kt_log_set(new, None, max_level)
    _log_callback = new if callback else None


class Model(_Handle):
    """A GGUF file loaded by kt_model_load (memory-mapped, validated). Use as a context manager or call close().
    `progress(fraction)` is called while loading; returning True cancels (kt.Error with STATUS_CANCELLED)."""

    _free = "kt_model_free"
    _last_error = "kt_model_last_error"

    def __init__(self, path, use_mmap=True, prefetch=True, progress=None):
        self._handle = None
        self._borrowers = weakref.WeakSet()  # open contexts and detokenizers, which kt requires to go first
        params = _ModelParams()
        _lib().kt_model_params_init(ctypes.byref(params))
        params.use_mmap, params.prefetch = int(use_mmap), int(prefetch)
        failure = []
        if progress is not None:
            def report(fraction, _user_data):
                try:
                    return 1 if progress(fraction) else 0
                except BaseException as e:  # noqa: BLE001: it cannot cross into C; it cancels and is re-raised
                    failure.append(e)
                    return 1
            params.progress_callback = _PROGRESS(report)
        try:
            self._handle = _construct(_lib().kt_model_load, os.fsencode(path), ctypes.byref(params))
        finally:
            if failure:
                raise failure[0]

    def close(self):
        """Frees the model; refused (kt.Error, STATUS_MISUSE) while a Context or Detokenizer made from it is open."""
        if any(b._handle for b in self._borrowers):
            raise Error(STATUS_MISUSE, "the model still has open contexts or detokenizers")
        super().close()

    # ---- metadata

    @property
    def architecture(self):
        return _lib().kt_model_architecture(self._handle).decode()

    @property
    def gguf_version(self):
        return _lib().kt_model_gguf_version(self._handle)

    def keys(self):
        lib = _lib()
        out = []
        for i in range(lib.kt_model_meta_count(self._handle)):
            key = ctypes.c_char_p()
            self._check(lib.kt_model_meta_key(self._handle, i, ctypes.byref(key)))
            out.append(key.value.decode())
        return out

    def meta_type(self, key):
        """(type, element type) of a key; element type is -1 for scalars."""
        t, et = ctypes.c_int32(), ctypes.c_int32()
        self._check(_lib().kt_model_meta_type(self._handle, key.encode(), ctypes.byref(t), ctypes.byref(et)))
        return t.value, et.value

    def __contains__(self, key):
        t = ctypes.c_int32()
        return _lib().kt_model_meta_type(self._handle, key.encode(), ctypes.byref(t), None) == STATUS_OK

    def meta(self, key):
        """The value of a metadata key as a Python int, float, bool, str or list."""
        t, et = self.meta_type(key)
        if t == META_ARRAY:
            return [self._element(key, i, et) for i in range(self.array_length(key))]
        return self._scalar(key, t)

    def array_length(self, key):
        n = ctypes.c_uint64()
        self._check(_lib().kt_model_meta_array_length(self._handle, key.encode(), ctypes.byref(n)))
        return n.value

    def _scalar(self, key, t):
        lib, k = _lib(), key.encode()
        if t == META_STRING:
            p, n = ctypes.c_void_p(), ctypes.c_uint64()
            self._check(lib.kt_model_meta_get_string(self._handle, k, ctypes.byref(p), ctypes.byref(n)))
            return ctypes.string_at(p, n.value).decode()
        if t in _META_FLOATS:
            v = ctypes.c_double()
            self._check(lib.kt_model_meta_get_float(self._handle, k, ctypes.byref(v)))
            return v.value
        v = ctypes.c_int64()
        self._check(lib.kt_model_meta_get_int(self._handle, k, ctypes.byref(v)))
        return bool(v.value) if t == META_BOOL else v.value

    def _element(self, key, i, et):
        lib, k = _lib(), key.encode()
        if et == META_STRING:
            p, n = ctypes.c_void_p(), ctypes.c_uint64()
            self._check(lib.kt_model_meta_array_get_string(self._handle, k, i, ctypes.byref(p), ctypes.byref(n)))
            return ctypes.string_at(p, n.value).decode()
        if et in _META_FLOATS:
            v = ctypes.c_double()
            self._check(lib.kt_model_meta_array_get_float(self._handle, k, i, ctypes.byref(v)))
            return v.value
        v = ctypes.c_int64()
        self._check(lib.kt_model_meta_array_get_int(self._handle, k, i, ctypes.byref(v)))
        return bool(v.value) if et == META_BOOL else v.value

    # ---- tensors

    def tensors(self):
        return [self.tensor_info(i) for i in range(_lib().kt_model_tensor_count(self._handle))]

    def tensor_info(self, index_or_name):
        lib = _lib()
        index = index_or_name
        if isinstance(index_or_name, str):
            i = ctypes.c_int64()
            self._check(lib.kt_model_tensor_find(self._handle, index_or_name.encode(), ctypes.byref(i)))
            index = i.value
        raw = _TensorInfo(struct_size=ctypes.sizeof(_TensorInfo))
        self._check(lib.kt_model_tensor_info(self._handle, index, ctypes.byref(raw)))
        return TensorInfo(index, raw)

    def has_tensor(self, name):
        i = ctypes.c_int64()
        return _lib().kt_model_tensor_find(self._handle, name.encode(), ctypes.byref(i)) == STATUS_OK

    def tensor_f32(self, index_or_name):
        """The tensor dequantized to float32 as a NumPy array of shape `info.shape`."""
        import numpy as np
        info = self.tensor_info(index_or_name)
        out = np.empty(info.shape, dtype=np.float32)
        self._check(_lib().kt_model_tensor_read_f32(self._handle, info.index, out.ctypes.data_as(ctypes.c_void_p),
                                                    out.size, None))
        return out


    # ---- tokenizer (the model's own vocabulary, built on first use)

    def vocab_info(self):
        """A dict: kind (VOCAB_BPE / VOCAB_SPM), n_tokens, bos, eos, eot (TOKEN_NONE when absent), add_bos, add_eos,
        pre."""
        raw = _sized(_VocabInfo)
        self._check(_lib().kt_vocab_get_info(self._handle, ctypes.byref(raw)))
        return {"kind": raw.kind, "n_tokens": raw.n_tokens, "bos": raw.bos, "eos": raw.eos, "eot": raw.eot,
                "add_bos": bool(raw.add_bos), "add_eos": bool(raw.add_eos), "pre": raw.pre.decode()}

    def tokenize(self, text, add_special=True, parse_special=True):
        """Token ids (a list of int) of a str or bytes."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        lib, count = _lib(), ctypes.c_int64()
        status = lib.kt_tokenize(self._handle, data, len(data), int(add_special), int(parse_special), None, 0,
                                 ctypes.byref(count))
        if status != STATUS_BUFFER_TOO_SMALL:
            self._check(status)
            return []
        ids = (ctypes.c_int32 * count.value)()
        self._check(lib.kt_tokenize(self._handle, data, len(data), int(add_special), int(parse_special), ids,
                                    count.value, ctypes.byref(count)))
        return list(ids)

    def detokenize(self, tokens, remove_special=False, unparse_special=False):
        """The text of token ids (invalid UTF-8 replaced)."""
        ids, n = _int32_array(tokens)
        status, data = _fill_bytes(lambda buf, cap, length: _lib().kt_detokenize(
            self._handle, ids, n, int(remove_special), int(unparse_special), buf, cap, length))
        self._check(status)
        return data.decode(errors="replace")

    def token_to_piece(self, token, special=False):
        """The bytes of one token (possibly part of a UTF-8 character)."""
        status, data = _fill_bytes(lambda buf, cap, length: _lib().kt_token_to_piece(
            self._handle, token, int(special), 0, buf, cap, length))
        self._check(status)
        return data

    def is_eog(self, token):
        v = ctypes.c_int32()
        self._check(_lib().kt_token_is_eog(self._handle, token, ctypes.byref(v)))
        return bool(v.value)

    def apply_chat_template(self, messages, template=None, add_generation_prompt=True):
        """The prompt text for `messages` ([{"role": ..., "content": ...}] or (role, content) pairs) with the model's
        chat template, or a built-in or named one ("chatml", "llama3" ...)."""
        pairs = [(m["role"], m["content"]) if isinstance(m, dict) else tuple(m) for m in messages]
        array = (_ChatMessage * max(len(pairs), 1))(*[_ChatMessage(r.encode(), c.encode()) for r, c in pairs])
        params = _ChatParams()
        _lib().kt_chat_params_init(ctypes.byref(params))
        params.add_generation_prompt = int(add_generation_prompt)
        params.template_name = template.encode() if template else None
        status, data = _fill_bytes(lambda buf, cap, length: _lib().kt_chat_apply_template(
            self._handle, array, len(pairs), ctypes.byref(params), buf, cap, length))
        self._check(status)
        return data.decode(errors="replace")


class Detokenizer(_Handle):
    """Turns generated tokens into text one at a time without splitting a UTF-8 character (close it before its
    model). One thread at a time."""

    _free = "kt_detokenizer_free"
    _last_error = "kt_detokenizer_last_error"

    def __init__(self, model, unparse_special=False):
        self._handle = None
        self._model = model  # the detokenizer borrows it: held until it is closed
        self._handle = _construct(_lib().kt_detokenizer_create, model._handle, int(unparse_special))
        model._borrowers.add(self)

    def push(self, token):
        """The bytes `token` completes (possibly b"")."""
        status, data = _fill_bytes(lambda buf, cap, length: _lib().kt_detokenizer_push(self._handle, token, buf, cap,
                                                                                      length))
        self._check(status)
        return data

    def flush(self):
        status, data = _fill_bytes(lambda buf, cap, length: _lib().kt_detokenizer_flush(self._handle, buf, cap, length))
        self._check(status)
        return data


# ------------------------------------------------------------------------------------------------------------
# Contexts: running a model

class Sampler:
    """Sampling settings; the defaults are kt's (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 0).
    Sampler.greedy() is the argmax."""

    def __init__(self, **settings):
        self._raw = _SamplerParams()
        _lib().kt_sampler_params_init(ctypes.byref(self._raw))
        for name, value in settings.items():
            if name not in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n",
                            "presence_penalty", "frequency_penalty", "seed"):
                raise TypeError(f"Sampler has no setting {name!r}")
            setattr(self._raw, name, value)

    @classmethod
    def greedy(cls):
        return cls(temperature=0.0)


class Context(_Handle):
    """One sequence of a model: its KV cache, the logits of its last decode, a sampler (kt_context). Close it before
    its model. One thread at a time."""

    _free = "kt_context_free"
    _last_error = "kt_context_last_error"

    def __init__(self, model, n_ctx=0, n_threads=0, n_batch=512, kv_type=TYPE_F16, reference_kernels=False):
        self._handle = None
        self._model = model  # the context borrows it
        params = _ContextParams()
        _lib().kt_context_params_init(ctypes.byref(params))
        params.n_ctx, params.n_threads, params.n_batch, params.kv_type = n_ctx, n_threads, n_batch, kv_type
        params.kernels = KERNELS_REFERENCE if reference_kernels else KERNELS_AUTO
        self._handle = _construct(_lib().kt_context_create, model._handle, ctypes.byref(params))
        model._borrowers.add(self)

    @property
    def n_vocab(self):
        return _lib().kt_context_n_vocab(self._handle)

    @property
    def n_ctx(self):
        return _lib().kt_context_n_ctx(self._handle)

    @property
    def n_past(self):
        return _lib().kt_context_n_past(self._handle)

    def decode(self, tokens, logits=LOGITS_LAST):
        """Appends tokens to the sequence and runs them through the model (all or nothing)."""
        ids, n = _int32_array(tokens)
        self._check(_lib().kt_context_decode(self._handle, ids, n, logits))

    def logits(self, row=-1):
        """A copy of one row of the last decode's logits as a float32 NumPy array (-1: the last row)."""
        import numpy as np
        p = ctypes.POINTER(ctypes.c_float)()
        self._check(_lib().kt_context_logits(self._handle, row, ctypes.byref(p), None))
        return np.ctypeslib.as_array(p, shape=(self.n_vocab,)).copy()

    def sample(self, sampler=None):
        """A token from the last logits row; None: greedy."""
        token = ctypes.c_int32()
        self._check(_lib().kt_context_sample(self._handle, ctypes.byref(sampler._raw) if sampler else None,
                                             ctypes.byref(token)))
        return token.value

    def generate(self, prompt, max_tokens=128, sampler=None, stop_tokens=(), on_token=None):
        """Decodes `prompt` (may be empty to continue), then samples and decodes up to max_tokens tokens, stopping at
        a stop token or when on_token(token) returns True. Gives (tokens, stop reason STOP_*)."""
        params = _GenerateParams()
        _lib().kt_generate_params_init(ctypes.byref(params))
        params.max_tokens = max_tokens
        stops, n_stops = _int32_array(stop_tokens)
        params.stop_tokens, params.n_stop_tokens = (stops, n_stops) if n_stops else (None, 0)
        if sampler is not None:
            params.sampler = ctypes.pointer(sampler._raw)
        failure = []
        if on_token is not None:
            def report(token, _user_data):
                try:
                    return 1 if on_token(token) else 0
                except BaseException as e:  # noqa: BLE001: it cannot cross into C; it stops and is re-raised
                    failure.append(e)
                    return 1
            params.on_token = _TOKEN(report)
        ids, n = _int32_array(prompt)
        out = (ctypes.c_int32 * max(max_tokens, 1))()
        count, why = ctypes.c_int64(), ctypes.c_int32()
        self._check(_lib().kt_context_generate(self._handle, ids, n, ctypes.byref(params), out, max_tokens,
                                               ctypes.byref(count), ctypes.byref(why)))
        if failure:
            raise failure[0]
        return list(out[:count.value]), why.value

    def reset(self):
        _lib().kt_context_reset(self._handle)

    def perf(self):
        """The prefill/decode counters as a dict."""
        raw = _sized(_Perf)
        self._check(_lib().kt_context_perf(self._handle, ctypes.byref(raw)))
        return {name: getattr(raw, name) for name, _ in _Perf._fields_ if name not in ("struct_size", "reserved0")}


# ------------------------------------------------------------------------------------------------------------
# Expert pools: the routed experts of one MoE layer on the CPU

_WEIGHT_TYPES = {"float32": TYPE_F32, "float16": TYPE_F16, "bfloat16": TYPE_BF16}


def _as_numpy(array, dtype=None):
    """A C-contiguous NumPy view or copy of a NumPy array or a CPU torch tensor (bfloat16 as its uint16 bits), and
    kt's type of it."""
    import numpy as np
    if hasattr(array, "detach") and hasattr(array, "dtype"):  # a torch tensor: no torch import needed
        tensor = array.detach().contiguous()
        if str(tensor.dtype) == "torch.bfloat16":
            import torch
            return np.ascontiguousarray(tensor.view(torch.int16).numpy().view(np.uint16)), TYPE_BF16
        array = tensor.numpy()
    array = np.ascontiguousarray(array, dtype=dtype) if dtype is not None else np.ascontiguousarray(array)
    kind = _WEIGHT_TYPES.get(array.dtype.name)
    return array, kind


class ExpertPool(_Handle):
    """The routed experts of one MoE layer, computed on kt's CPU engine (kt_expert_pool):
    out[t] = sum_k w[t, k] * down_e(silu(gate_e x[t]) * up_e x[t]) with e = ids[t, k] (-1: no expert).
    Safe to use from several threads."""

    _free = "kt_expert_pool_free"
    _last_error = "kt_expert_pool_last_error"

    def __init__(self, n_experts, hidden_size, intermediate_size, weight_format=WEIGHTS_AS_SOURCE, max_tokens=512,
                 max_top_k=8, n_threads=0, int4_group_size=128, numa_nodes=None, swiglu_limit=0.0,
                 swiglu_alpha=0.0):
        self._handle = None
        self.n_experts, self.hidden_size, self.intermediate_size = n_experts, hidden_size, intermediate_size
        self.max_tokens = max_tokens
        p = _ExpertPoolParams()
        _lib().kt_expert_pool_params_init(ctypes.byref(p))
        p.n_experts, p.hidden_size, p.intermediate_size = n_experts, hidden_size, intermediate_size
        p.weight_format, p.max_tokens, p.max_top_k, p.n_threads = weight_format, max_tokens, max_top_k, n_threads
        p.int4_group_size, p.swiglu_limit, p.swiglu_alpha = int4_group_size, swiglu_limit, swiglu_alpha
        if numa_nodes is not None:
            nodes, n = _int32_array(numa_nodes)
            p.numa_policy, p.numa_nodes, p.n_numa_nodes = NUMA_NODES, nodes, n
        self._handle = _construct(_lib().kt_expert_pool_create, ctypes.byref(p))
        self._pending = {}  # ticket -> the arrays a queued job reads and writes, alive until it is waited for

    def load(self, gate, up, down):
        """Loads every expert: gate and up [n_experts, intermediate, hidden], down [n_experts, hidden, intermediate],
        as float32, float16 or bfloat16 (torch) arrays, packed to the pool's format."""
        arrays = []
        for name, w, shape in (("gate", gate, (self.n_experts, self.intermediate_size, self.hidden_size)),
                               ("up", up, (self.n_experts, self.intermediate_size, self.hidden_size)),
                               ("down", down, (self.n_experts, self.hidden_size, self.intermediate_size))):
            array, kind = _as_numpy(w)
            if kind is None:
                array, kind = _as_numpy(array, "float32")
            if array.shape != shape:
                raise Error(STATUS_INVALID_ARGUMENT, f"{name} has shape {array.shape}, the pool needs {shape}")
            arrays.append((array, kind))
        (g, gt), (u, ut), (d, dt) = arrays
        weights = _sized(_ExpertWeights, gate_type=gt, up_type=ut, down_type=dt, gate=g.ctypes.data, up=u.ctypes.data,
                         down=d.ctypes.data)
        self._check(_lib().kt_expert_pool_load(self._handle, ctypes.byref(weights)))

    def load_model(self, model, layer):
        """Loads blk.<layer>.ffn_{gate,up,down}_exps of a Model (any type kt reads)."""
        self._check(_lib().kt_expert_pool_load_model(self._handle, model._handle, layer))

    def set_mask(self, mask):
        """mask[e] true: expert e is computed elsewhere (the pool skips it); None clears the mask."""
        import numpy as np
        if mask is None:
            self._check(_lib().kt_expert_pool_set_mask(self._handle, None, self.n_experts))
            return
        m = np.ascontiguousarray(np.asarray(mask).astype(np.uint8))
        self._check(_lib().kt_expert_pool_set_mask(self._handle, m.ctypes.data, m.size))

    def _args(self, x, ids, weights, out, accumulate):
        import numpy as np
        x = np.ascontiguousarray(x, dtype=np.float32)
        ids = np.ascontiguousarray(ids)
        ids_type = TYPE_I64 if ids.dtype == np.int64 else TYPE_I32
        ids = ids if ids_type == TYPE_I64 else np.ascontiguousarray(ids, dtype=np.int32)
        weights = np.ascontiguousarray(weights, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.hidden_size or ids.ndim != 2 or ids.shape[0] != x.shape[0] or \
                weights.shape != ids.shape:
            raise Error(STATUS_INVALID_ARGUMENT, f"expert call: hidden states {x.shape} must be [tokens, "
                        f"{self.hidden_size}], ids {ids.shape} and weights {weights.shape} [tokens, top_k]")
        if out is None:
            out = np.zeros_like(x)
        elif out.shape != x.shape or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise Error(STATUS_INVALID_ARGUMENT, f"output must be a C-contiguous float32 array of shape {x.shape}")
        f = _ExpertForward()
        _lib().kt_expert_forward_init(ctypes.byref(f))
        f.n_tokens, f.top_k, f.ids_type, f.accumulate = x.shape[0], ids.shape[1], ids_type, int(accumulate)
        f.input, f.expert_ids, f.expert_weights, f.output = x.ctypes.data, ids.ctypes.data, weights.ctypes.data, \
            out.ctypes.data
        return f, (x, ids, weights, out)

    def forward(self, x, ids, weights, out=None, accumulate=False):
        """x [T, hidden] float32, ids [T, k] (int32 or int64), weights [T, k]: the output [T, hidden] (written to
        `out` when given, added to it with accumulate)."""
        f, arrays = self._args(x, ids, weights, out, accumulate)
        self._check(_lib().kt_expert_pool_forward(self._handle, ctypes.byref(f)))
        return arrays[3]

    def submit(self, x, ids, weights, out=None, accumulate=False):
        """Queues a call and returns its ticket at once; the arrays are held until wait(ticket)."""
        f, arrays = self._args(x, ids, weights, out, accumulate)
        ticket = ctypes.c_uint64()
        self._check(_lib().kt_expert_pool_submit(self._handle, ctypes.byref(f), ctypes.byref(ticket)))
        self._pending[ticket.value] = arrays
        return ticket.value

    def wait(self, ticket=0):
        """Waits for job `ticket` and every job before it (0: all) and gives that job's output."""
        status = _lib().kt_expert_pool_wait(self._handle, ticket)
        done = [t for t in self._pending if ticket == 0 or t <= ticket]
        arrays = self._pending.get(ticket)
        for t in done:
            del self._pending[t]
        self._check(status)
        return arrays[3] if arrays else None

    def info(self):
        raw = _sized(_ExpertPoolInfo)
        self._check(_lib().kt_expert_pool_get_info(self._handle, ctypes.byref(raw)))
        return {"isa": raw.isa, "n_threads": raw.n_threads, "n_numa_groups": raw.n_numa_groups,
                "loaded": bool(raw.loaded), "weight_bytes": raw.weight_bytes, "kernels": raw.kernels.decode(),
                "weight_formats": raw.weight_formats.decode(), "description": raw.description.decode()}

    def close(self):
        if self._handle:
            _lib().kt_expert_pool_wait(self._handle, 0)  # queued jobs write into arrays held here
            self._pending = {}
        super().close()


# ------------------------------------------------------------------------------------------------------------
# Quantization

def quantize(kt_type, values):
    """Quantizes a float32 array (rows along its last axis) to `kt_type`; returns the bytes as GGUF stores them.
    Quantizer failures are logged by kt, not returned as text: the exception carries the status only."""
    import numpy as np
    src = np.ascontiguousarray(values, dtype=np.float32)
    n_per_row = src.shape[-1] if src.ndim else 1
    n_rows = src.size // n_per_row
    lib = _lib()
    size = ctypes.c_uint64()
    status = lib.kt_quantize(kt_type, src.ctypes.data_as(ctypes.c_void_p), n_rows, n_per_row, None, 0,
                             ctypes.byref(size))
    if status not in (STATUS_OK, STATUS_BUFFER_TOO_SMALL):
        raise Error(status, f"kt_quantize({type_name(kt_type)}, {n_rows} x {n_per_row}) failed")
    dst = ctypes.create_string_buffer(size.value)
    status = lib.kt_quantize(kt_type, src.ctypes.data_as(ctypes.c_void_p), n_rows, n_per_row, dst, size.value, None)
    if status != STATUS_OK:
        raise Error(status, f"kt_quantize({type_name(kt_type)}, {n_rows} x {n_per_row}) failed")
    return dst.raw


def dequantize(kt_type, data, shape):
    """The inverse of quantize(): float32 values of NumPy shape `shape` from `data` (bytes)."""
    import numpy as np
    out = np.empty(shape, dtype=np.float32)
    n_per_row = out.shape[-1] if out.ndim else 1
    status = _lib().kt_dequantize(kt_type, data, len(data), out.size // n_per_row, n_per_row,
                                  out.ctypes.data_as(ctypes.c_void_p), out.size)
    if status != STATUS_OK:
        raise Error(status, f"kt_dequantize({type_name(kt_type)}) failed")
    return out


# ------------------------------------------------------------------------------------------------------------
# Writing GGUF files

class GgufWriter(_Handle):
    """Collects metadata and tensors, then writes a GGUF v3 file atomically (kt_gguf_writer_*).

    Metadata setters take a GGUF type explicitly; `add(key, kind, value)` is a shorthand with kind one of
    "u8" "i8" "u16" "i16" "u32" "i32" "u64" "i64" "f32" "f64" "bool" "str", or an array of them ("str[]", "i32[]"
    ...). Tensors are given as NumPy arrays in NumPy order (GGUF's ne is the reverse) and quantized by kt."""

    _KINDS = {"u8": META_UINT8, "i8": META_INT8, "u16": META_UINT16, "i16": META_INT16, "u32": META_UINT32,
              "i32": META_INT32, "u64": META_UINT64, "i64": META_INT64, "f32": META_FLOAT32, "f64": META_FLOAT64,
              "bool": META_BOOL, "str": META_STRING}
    _NUMPY = {META_UINT8: "<u1", META_INT8: "<i1", META_UINT16: "<u2", META_INT16: "<i2", META_UINT32: "<u4",
              META_INT32: "<i4", META_UINT64: "<u8", META_INT64: "<i8", META_FLOAT32: "<f4", META_FLOAT64: "<f8",
              META_BOOL: "<u1"}

    _free = "kt_gguf_writer_free"
    _last_error = "kt_gguf_writer_last_error"

    def __init__(self, alignment=0):
        self._handle = None
        self._handle = _construct(_lib().kt_gguf_writer_create_v2, alignment)

    def set_int(self, key, meta_type, value):
        if meta_type == META_UINT64:
            self._check(_lib().kt_gguf_writer_set_uint64(self._handle, key.encode(), value))
        else:
            self._check(_lib().kt_gguf_writer_set_int(self._handle, key.encode(), meta_type, value))

    def set_float(self, key, meta_type, value):
        self._check(_lib().kt_gguf_writer_set_float(self._handle, key.encode(), meta_type, value))

    def set_bool(self, key, value):
        self._check(_lib().kt_gguf_writer_set_bool(self._handle, key.encode(), 1 if value else 0))

    def set_string(self, key, value):
        data = value.encode()
        self._check(_lib().kt_gguf_writer_set_string(self._handle, key.encode(), data, len(data)))

    def set_array(self, key, element_type, values):
        import numpy as np
        data = np.ascontiguousarray(values, dtype=self._NUMPY[element_type])
        self._check(_lib().kt_gguf_writer_set_array(self._handle, key.encode(), element_type,
                                                    data.ctypes.data_as(ctypes.c_void_p), data.size))

    def set_array_string(self, key, values):
        encoded = [v.encode() for v in values]
        ptrs = (ctypes.c_char_p * len(encoded))(*encoded)
        lengths = (ctypes.c_uint64 * len(encoded))(*[len(v) for v in encoded])
        self._check(_lib().kt_gguf_writer_set_array_string(self._handle, key.encode(), ptrs, lengths, len(encoded)))

    def add(self, key, kind, value):
        if kind.endswith("[]"):
            t = self._KINDS[kind[:-2]]
            if t == META_STRING:
                self.set_array_string(key, value)
            else:
                self.set_array(key, t, value)
            return
        t = self._KINDS[kind]
        if t == META_STRING:
            self.set_string(key, value)
        elif t == META_BOOL:
            self.set_bool(key, value)
        elif t in _META_FLOATS:
            self.set_float(key, t, value)
        else:
            self.set_int(key, t, value)

    def add_tensor(self, name, values, kt_type=TYPE_F32):
        """A float32 NumPy array, stored as `kt_type` (quantized by kt along its last axis)."""
        import numpy as np
        values = np.ascontiguousarray(values, dtype=np.float32)
        data = values.tobytes() if kt_type == TYPE_F32 else quantize(kt_type, values)
        ne = (ctypes.c_int64 * values.ndim)(*reversed(values.shape))
        self._check(_lib().kt_gguf_writer_add_tensor(self._handle, name.encode(), kt_type, values.ndim, ne, data,
                                                     len(data)))

    def write(self, path):
        self._check(_lib().kt_gguf_writer_write_file(self._handle, os.fsencode(path)))
