"""kt for Python: the C ABI of libkt (include/kt.h) through ctypes.

The shared library is found, in order, at $KT_LIBRARY, by the system's search (`ctypes.util.find_library`), and
in the source tree's build/src/ (when this module runs from a kt checkout). Build it with `cmake -S . -B build -DKT_BUILD_SHARED=ON && cmake --build build --target kt_shared`
(it lands in build/src/libkt.so).

Every kt call that fails raises `kt.Error`, which carries the status code and kt's message (naming the file, key or
tensor). Tensor data comes back as NumPy arrays in NumPy order, i.e. the reverse of GGUF's `ne` order.
"""
import ctypes
import ctypes.util
import os

# ------------------------------------------------------------------------------------------------------------
# Constants (kt.h)

STATUS_OK = 0
STATUS_NOT_FOUND = 6
STATUS_BUFFER_TOO_SMALL = 8

TYPE_F32, TYPE_F16, TYPE_Q8_0, TYPE_Q4_K, TYPE_BF16 = 0, 1, 8, 12, 30

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


class _KtError(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("status", ctypes.c_int32),
                ("message", ctypes.c_char * _ERROR_MESSAGE_CAPACITY)]


class _TensorInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("type", ctypes.c_int32), ("n_dims", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("ne", ctypes.c_int64 * _MAX_DIMS),
                ("n_elements", ctypes.c_uint64), ("n_bytes", ctypes.c_uint64), ("file_offset", ctypes.c_uint64),
                ("name", ctypes.c_char_p)]


# ------------------------------------------------------------------------------------------------------------
# Loading the library and declaring the functions

_LIB = None

_P = ctypes.c_void_p
_S = ctypes.c_int32  # kt_status
_SIGNATURES = {
    "kt_version_number": (ctypes.c_int32, []),
    "kt_version_string": (ctypes.c_char_p, []),
    "kt_build_info": (ctypes.c_char_p, []),
    "kt_status_string": (ctypes.c_char_p, [_S]),
    "kt_type_name": (ctypes.c_char_p, [ctypes.c_int32]),
    "kt_type_block_size": (ctypes.c_int64, [ctypes.c_int32]),
    "kt_type_block_bytes": (ctypes.c_int64, [ctypes.c_int32]),
    "kt_model_load": (_S, [ctypes.c_char_p, _P, ctypes.POINTER(_P), ctypes.POINTER(_KtError)]),
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
    "kt_gguf_writer_create": (_S, [ctypes.c_uint32, ctypes.POINTER(_P)]),
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
        self.close()

    def _check(self, status):
        if status != STATUS_OK:
            message = getattr(_lib(), self._last_error)(self._handle)
            raise Error(status, message.decode(errors="replace"))


class Model(_Handle):
    """A GGUF file loaded by kt_model_load (memory-mapped, validated). Use as a context manager or call close()."""

    _free = "kt_model_free"
    _last_error = "kt_model_last_error"

    def __init__(self, path):
        self._handle = None
        lib = _lib()
        handle = ctypes.c_void_p()
        err = _KtError(struct_size=ctypes.sizeof(_KtError))
        status = lib.kt_model_load(os.fsencode(path), None, ctypes.byref(handle), ctypes.byref(err))
        if status != STATUS_OK:
            raise Error(status, err.message.decode(errors="replace"))
        self._handle = handle

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
        handle = ctypes.c_void_p()
        status = _lib().kt_gguf_writer_create(alignment, ctypes.byref(handle))
        if status != STATUS_OK:
            raise Error(status, f"kt_gguf_writer_create(alignment {alignment}) failed")
        self._handle = handle

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
