// Package kt is kt for Go: load GGUF models, tokenize, generate, and run Mixture-of-Experts layers on kt's CPU
// expert engine, through kt's C ABI (include/kt.h) with cgo.
//
// It finds kt with pkg-config (`#cgo pkg-config: kt`): set PKG_CONFIG_PATH to an installed kt's lib/pkgconfig.
// With libkt.so installed, -lkt links it (the loader must find it at run time, e.g. LD_LIBRARY_PATH); with only
// libkt.a, build with CGO_LDFLAGS="$(pkg-config --static --libs kt)" so its C++ and hwloc dependencies are linked.
//
// Every failing call returns an *Error with kt's status code and message. Handles are freed by Close; a finalizer
// frees one that is dropped without Close, as a safety net. A Model and an ExpertPool may be used from many
// goroutines at once (kt allows it); a Context, Detokenizer and GgufWriter serialize their calls with a mutex, as
// kt uses them one thread at a time. kt keeps the error message of a failed call per OS thread for shared handles,
// so every call that may fail runs with its goroutine locked to its thread until the message is read.
//
// Not bound: the EXPERIMENTAL parts of kt.h (roofline probes, CUDA, the pool's tuning knobs).
package kt

/*
#cgo pkg-config: kt
#include <kt.h>
#include <stdlib.h>

extern int32_t ktGoProgress(float progress, void *user_data);
extern int32_t ktGoToken(int32_t token, void *user_data);
extern int32_t ktGoTensorSpec(kt_tensor_spec *spec, void *user_data);
extern void ktGoLog(int32_t level, char *message, void *user_data);
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Status codes (kt.h's KT_STATUS_*).
const (
	StatusOK              = 0
	StatusInvalidArgument = 1
	StatusOutOfMemory     = 2
	StatusIOError         = 3
	StatusInvalidFile     = 4
	StatusUnsupported     = 5
	StatusNotFound        = 6
	StatusTypeMismatch    = 7
	StatusBufferTooSmall  = 8
	StatusCancelled       = 9
	StatusMisuse          = 10
	StatusInternal        = 11
	StatusContextFull     = 12
)

// Tensor element types (GGML numbering, as in GGUF files).
const (
	TypeF32   = 0
	TypeF16   = 1
	TypeQ4_0  = 2
	TypeQ8_0  = 8
	TypeQ4_K  = 12
	TypeQ5_K  = 13
	TypeQ6_K  = 14
	TypeIQ4XS = 23
	TypeBF16  = 30
	TypeMXFP4 = 39
)

// Log levels.
const (
	LogError = 0
	LogWarn  = 1
	LogInfo  = 2
	LogDebug = 3
)

// Error is a failed kt call: its status code and kt's message (naming the file, key, tensor or argument).
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%s)", e.Message, StatusString(e.Status)) }

// Is makes errors.Is(err, &kt.Error{Status: kt.StatusNotFound}) match by status.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Status == e.Status
}

// StatusString is a status code's fixed text ("not found").
func StatusString(status int) string { return C.GoString(C.kt_status_string(C.kt_status(status))) }

func invalid(format string, args ...interface{}) error {
	return &Error{StatusInvalidArgument, fmt.Sprintf(format, args...)}
}

// Version is the library's version, "0.2.0".
func Version() string { return C.GoString(C.kt_version_string()) }

// VersionNumber is major*1000000 + minor*1000 + patch of the library linked.
func VersionNumber() int { return int(C.kt_version_number()) }

// BuildInfo is one line: version, git revision, compiler, backends, the CPU's ISAs.
func BuildInfo() string { return C.GoString(C.kt_build_info()) }

// TypeName is "Q4_K" for a type id, "" for one kt does not know.
func TypeName(t int) string {
	p := C.kt_type_name(C.int32_t(t))
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

func newErrorStruct() C.kt_error {
	var e C.kt_error
	e.struct_size = C.uint32_t(unsafe.Sizeof(e))
	return e
}

func fromErrorStruct(status C.kt_status, e *C.kt_error) error {
	return &Error{int(status), C.GoString(&e.message[0])}
}

// lockedCall runs a kt call with the goroutine on one OS thread, and on failure reads the handle's message there:
// kt keeps a shared handle's messages per thread.
func lockedCall(call func() C.kt_status, lastError func() *C.char) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	status := call()
	if status == C.KT_STATUS_OK {
		return nil
	}
	return &Error{int(status), C.GoString(lastError())}
}

// cString copies a Go string into C memory (the caller frees it); kt is given its length where it may hold NULs.
func cString(s string) *C.char { return C.CString(s) }

// fillBytes runs a kt call that fills a caller buffer, growing the buffer as kt's size negotiation asks, and
// gives the bytes and the final status (the caller reads the message on the same thread).
func fillBytes(call func(buf *C.char, capacity C.int64_t, length *C.int64_t) C.kt_status) ([]byte, C.kt_status) {
	capacity := 256
	for {
		buf := C.malloc(C.size_t(capacity))
		var length C.int64_t
		status := call((*C.char)(buf), C.int64_t(capacity), &length)
		if status == C.KT_STATUS_BUFFER_TOO_SMALL && int(length)+1 > capacity {
			C.free(buf)
			capacity = int(length) + 1
			continue
		}
		var out []byte
		if status == C.KT_STATUS_OK {
			out = C.GoBytes(buf, C.int(length))
		}
		C.free(buf)
		return out, status
	}
}

// ------------------------------------------------------------------------------------------------------------
// Handle lifetime: every handle type embeds owned, so Close and the finalizer free it once, the same way.

// owned frees a kt handle exactly once, by Close or, as a safety net, by a finalizer. Its mutex also serializes the
// calls of the handle types kt uses one thread at a time (Context, Detokenizer, GgufWriter).
type owned struct {
	mu      sync.Mutex
	ptr     unsafe.Pointer       // the C handle; nil once freed (kt answers a NULL handle with an error)
	release func(unsafe.Pointer) // frees it
}

func (o *owned) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ptr != nil {
		o.release(o.ptr)
		o.ptr = nil
		finalizedOrClosed.Add(1)
	}
}

// track makes obj own the C handle ptr, freed by release once: at Close or when obj is collected. Neither the
// finalizer nor release may refer to obj (a finalizer on an object in a cycle never runs): the finalizer reaches
// it only through its argument.
func track[T any, PT interface {
	*T
	owner() *owned
}](obj PT, ptr unsafe.Pointer, release func(unsafe.Pointer)) {
	o := obj.owner()
	o.ptr, o.release = ptr, release
	runtime.SetFinalizer(obj, func(x PT) { x.owner().close() })
}

func (m *Model) owner() *owned       { return &m.owned }
func (d *Detokenizer) owner() *owned { return &d.owned }
func (c *Context) owner() *owned     { return &c.owned }
func (p *ExpertPool) owner() *owned  { return &p.owned }
func (w *GgufWriter) owner() *owned  { return &w.owned }

// The typed C handles.
func (m *Model) raw() *C.kt_model             { return (*C.kt_model)(m.ptr) }
func (d *Detokenizer) raw() *C.kt_detokenizer { return (*C.kt_detokenizer)(d.ptr) }
func (c *Context) raw() *C.kt_context         { return (*C.kt_context)(c.ptr) }
func (p *ExpertPool) raw() *C.kt_expert_pool  { return (*C.kt_expert_pool)(p.ptr) }
func (w *GgufWriter) raw() *C.kt_gguf_writer  { return (*C.kt_gguf_writer)(w.ptr) }

// ------------------------------------------------------------------------------------------------------------
// Callbacks from kt into Go

// goCallback is what a C callback's user_data leads to: the Go function, and the panic it raised, if any. A panic
// must not unwind through kt's C frames: it is caught, the callback tells kt to stop, and the Go caller re-raises
// it once kt has returned.
type goCallback[T any] struct {
	f        func(T) bool // true: go on
	panicked interface{}
}

func (cb *goCallback[T]) call(v T) (stop C.int32_t) {
	defer func() {
		if r := recover(); r != nil {
			cb.panicked, stop = r, 1
		}
	}()
	if cb.f(v) {
		return 0
	}
	return 1
}

func (cb *goCallback[T]) repanic() {
	if cb.panicked != nil {
		panic(cb.panicked)
	}
}

// cHandle puts a cgo.Handle of v in C memory, as user_data must be (a struct kt reads may not point into Go
// memory); release frees both.
func cHandle(v interface{}) (userData unsafe.Pointer, release func()) {
	p := (*cgo.Handle)(C.malloc(C.size_t(unsafe.Sizeof(cgo.Handle(0)))))
	*p = cgo.NewHandle(v)
	return unsafe.Pointer(p), func() { p.Delete(); C.free(unsafe.Pointer(p)) }
}

func callbackOf[T any](userData unsafe.Pointer) *goCallback[T] {
	return (*(*cgo.Handle)(userData)).Value().(*goCallback[T])
}

// ------------------------------------------------------------------------------------------------------------
// Logging

var logMutex sync.Mutex
var logHandle cgo.Handle
var logHandleMemory unsafe.Pointer // C memory holding logHandle, passed as user_data
var logRunning atomic.Int32        // callbacks in progress

//export ktGoLog
func ktGoLog(level C.int32_t, message *C.char, userData unsafe.Pointer) {
	logRunning.Add(1)
	defer logRunning.Add(-1)
	defer func() { _ = recover() }() // a panicking log callback loses its message, never the process
	h := cgo.Handle(*(*C.uintptr_t)(userData))
	h.Value().(func(int, string))(int(level), C.GoString(message))
}

// SetLogCallback sends kt's messages up to maxLevel (LogError .. LogDebug) to f, which kt may call from its worker
// threads, several at once; nil silences kt. When it returns, the callback it replaced is no longer running, except
// when it is called from inside a callback.
func SetLogCallback(maxLevel int, f func(level int, message string)) {
	logMutex.Lock()
	defer logMutex.Unlock()
	oldHandle, oldMemory := logHandle, logHandleMemory
	if f == nil {
		C.kt_log_set(nil, nil, C.int32_t(maxLevel))
		logHandle, logHandleMemory = 0, nil
	} else {
		logHandle = cgo.NewHandle(f)
		logHandleMemory = C.malloc(C.size_t(unsafe.Sizeof(C.uintptr_t(0))))
		*(*C.uintptr_t)(logHandleMemory) = C.uintptr_t(logHandle)
		C.kt_log_set(C.kt_log_callback(C.ktGoLog), logHandleMemory, C.int32_t(maxLevel))
	}
	// kt_log_set waited for callbacks of the old one to return, unless it was called from a callback (which kt does
	// not wait for): with any callback still running, the old handle is kept rather than freed under it.
	if oldMemory != nil && logRunning.Load() == 0 {
		oldHandle.Delete()
		C.free(oldMemory)
	}
}

// ------------------------------------------------------------------------------------------------------------
// Quantization

// Quantize turns rows of nPerRow floats into block format t, as a GGUF tensor stores them.
func Quantize(t int, values []float32, nPerRow int) ([]byte, error) {
	if nPerRow <= 0 || len(values)%nPerRow != 0 || len(values) == 0 {
		return nil, invalid("%d values are not rows of %d", len(values), nPerRow)
	}
	rows := C.int64_t(len(values) / nPerRow)
	src := (*C.float)(unsafe.Pointer(&values[0]))
	var size C.uint64_t
	status := C.kt_quantize(C.int32_t(t), src, rows, C.int64_t(nPerRow), nil, 0, &size)
	if status != C.KT_STATUS_OK && status != C.KT_STATUS_BUFFER_TOO_SMALL {
		return nil, &Error{int(status), fmt.Sprintf("kt_quantize to type %d failed (kt logs why)", t)}
	}
	out := make([]byte, int(size))
	status = C.kt_quantize(C.int32_t(t), src, rows, C.int64_t(nPerRow), unsafe.Pointer(&out[0]), size, nil)
	if status != C.KT_STATUS_OK {
		return nil, &Error{int(status), fmt.Sprintf("kt_quantize to type %d failed (kt logs why)", t)}
	}
	return out, nil
}

// Dequantize is the inverse of Quantize: rows x nPerRow values of type t from data.
func Dequantize(t int, data []byte, rows, nPerRow int) ([]float32, error) {
	if len(data) == 0 || rows*nPerRow == 0 {
		return nil, invalid("nothing to dequantize")
	}
	out := make([]float32, rows*nPerRow)
	status := C.kt_dequantize(C.int32_t(t), unsafe.Pointer(&data[0]), C.uint64_t(len(data)), C.int64_t(rows),
		C.int64_t(nPerRow), (*C.float)(unsafe.Pointer(&out[0])), C.uint64_t(len(out)))
	if status != C.KT_STATUS_OK {
		return nil, &Error{int(status), fmt.Sprintf("kt_dequantize of type %d failed (kt logs why)", t)}
	}
	return out, nil
}

// ------------------------------------------------------------------------------------------------------------
// Models

// Model is a GGUF file, memory-mapped and validated. Safe for concurrent use.
type Model struct {
	owned
	deps int32 // open contexts and detokenizers, which borrow the model
}

// ModelParams says how LoadModelWith loads.
type ModelParams struct {
	NoMmap     bool                    // read the file into memory instead of mapping it
	NoPrefetch bool                    // let pages come in on first use
	Progress   func(done float32) bool // called with the fraction done; false cancels (StatusCancelled)
}

//export ktGoProgress
func ktGoProgress(progress C.float, userData unsafe.Pointer) C.int32_t {
	return callbackOf[float32](userData).call(float32(progress))
}

// LoadModel loads a GGUF file with the default parameters.
func LoadModel(path string) (*Model, error) { return LoadModelWith(path, ModelParams{}) }

// LoadModelWith loads a GGUF file.
func LoadModelWith(path string, params ModelParams) (*Model, error) {
	var p C.kt_model_params
	C.kt_model_params_init(&p)
	if params.NoMmap {
		p.use_mmap = 0
	}
	if params.NoPrefetch {
		p.prefetch = 0
	}
	var progress *goCallback[float32]
	if params.Progress != nil {
		progress = &goCallback[float32]{f: params.Progress}
		userData, release := cHandle(progress)
		defer release()
		p.progress_callback = C.kt_progress_callback(C.ktGoProgress)
		p.progress_user_data = userData
	}
	cpath := cString(path)
	defer C.free(unsafe.Pointer(cpath))
	var h *C.kt_model
	e := newErrorStruct()
	status := C.kt_model_load(cpath, &p, &h, &e)
	if progress != nil {
		progress.repanic()
	}
	if status != C.KT_STATUS_OK {
		return nil, fromErrorStruct(status, &e)
	}
	m := &Model{}
	track(m, unsafe.Pointer(h), func(p unsafe.Pointer) { C.kt_model_free((*C.kt_model)(p)) })
	return m, nil
}

// Close frees the model. It fails while contexts or detokenizers made from it are open.
func (m *Model) Close() error {
	if n := atomic.LoadInt32(&m.deps); n != 0 {
		return &Error{StatusMisuse, fmt.Sprintf("the model still has %d open contexts or detokenizers", n)}
	}
	m.close()
	return nil
}

func (m *Model) check(call func() C.kt_status) error {
	if m.ptr == nil {
		return &Error{StatusMisuse, "the model is closed"}
	}
	err := lockedCall(call, func() *C.char { return C.kt_model_last_error(m.raw()) })
	runtime.KeepAlive(m)
	return err
}

// Architecture is general.architecture, e.g. "qwen3moe".
func (m *Model) Architecture() string {
	defer runtime.KeepAlive(m)
	return C.GoString(C.kt_model_architecture(m.raw()))
}

// MetaKeys lists the metadata keys in file order.
func (m *Model) MetaKeys() ([]string, error) {
	n := int(C.kt_model_meta_count(m.raw()))
	keys := make([]string, 0, n)
	for i := 0; i < n; i++ {
		var k *C.char
		if err := m.check(func() C.kt_status { return C.kt_model_meta_key(m.raw(), C.int64_t(i), &k) }); err != nil {
			return nil, err
		}
		keys = append(keys, C.GoString(k))
	}
	return keys, nil
}

// MetaInt reads an integer or bool key.
func (m *Model) MetaInt(key string) (int64, error) {
	k := cString(key)
	defer C.free(unsafe.Pointer(k))
	var v C.int64_t
	err := m.check(func() C.kt_status { return C.kt_model_meta_get_int(m.raw(), k, &v) })
	return int64(v), err
}

// MetaFloat reads a float or integer key.
func (m *Model) MetaFloat(key string) (float64, error) {
	k := cString(key)
	defer C.free(unsafe.Pointer(k))
	var v C.double
	err := m.check(func() C.kt_status { return C.kt_model_meta_get_float(m.raw(), k, &v) })
	return float64(v), err
}

// MetaString reads a string key.
func (m *Model) MetaString(key string) (string, error) {
	k := cString(key)
	defer C.free(unsafe.Pointer(k))
	var p *C.char
	var n C.uint64_t
	if err := m.check(func() C.kt_status { return C.kt_model_meta_get_string(m.raw(), k, &p, &n) }); err != nil {
		return "", err
	}
	defer runtime.KeepAlive(m)
	return C.GoStringN(p, C.int(n)), nil
}

// TensorInfo describes one tensor. Ne is GGUF's order (Ne[0] contiguous).
type TensorInfo struct {
	Index      int
	Name       string
	Type       int
	Ne         []int64
	NElements  uint64
	NBytes     uint64
	FileOffset uint64
}

// TensorCount is the number of tensors.
func (m *Model) TensorCount() int {
	defer runtime.KeepAlive(m)
	return int(C.kt_model_tensor_count(m.raw()))
}

// TensorFind gives a tensor's index by name.
func (m *Model) TensorFind(name string) (int, error) {
	n := cString(name)
	defer C.free(unsafe.Pointer(n))
	var i C.int64_t
	err := m.check(func() C.kt_status { return C.kt_model_tensor_find(m.raw(), n, &i) })
	return int(i), err
}

// TensorInfo describes tensor `index`.
func (m *Model) TensorInfo(index int) (TensorInfo, error) {
	var raw C.kt_tensor_info
	raw.struct_size = C.uint32_t(unsafe.Sizeof(raw))
	if err := m.check(func() C.kt_status { return C.kt_model_tensor_info(m.raw(), C.int64_t(index), &raw) }); err != nil {
		return TensorInfo{}, err
	}
	defer runtime.KeepAlive(m)
	ne := make([]int64, int(raw.n_dims))
	for d := range ne {
		ne[d] = int64(raw.ne[d])
	}
	return TensorInfo{Index: index, Name: C.GoString(raw.name), Type: int(raw._type), Ne: ne,
		NElements: uint64(raw.n_elements), NBytes: uint64(raw.n_bytes), FileOffset: uint64(raw.file_offset)}, nil
}

// TensorF32 reads a tensor dequantized to float32, in GGML order.
func (m *Model) TensorF32(index int) ([]float32, error) {
	info, err := m.TensorInfo(index)
	if err != nil {
		return nil, err
	}
	out := make([]float32, info.NElements)
	err = m.check(func() C.kt_status {
		return C.kt_model_tensor_read_f32(m.raw(), C.int64_t(index), (*C.float)(unsafe.Pointer(&out[0])),
			C.uint64_t(len(out)), nil)
	})
	return out, err
}

// Tokenizer is the model's vocabulary (built on first use). Safe for concurrent use.
func (m *Model) Tokenizer() Tokenizer { return Tokenizer{m} }

// ------------------------------------------------------------------------------------------------------------
// Tokenizer

// Tokenizer turns text into token ids and back with a model's own vocabulary.
type Tokenizer struct{ m *Model }

// VocabInfo describes a vocabulary. Special ids are -1 when absent.
type VocabInfo struct {
	Kind, NTokens, BOS, EOS, EOT int
	AddBOS, AddEOS               bool
	Pre                          string
}

// Vocabulary kinds.
const (
	VocabBPE = 1
	VocabSPM = 2
)

// VocabInfo describes the vocabulary.
func (t Tokenizer) VocabInfo() (VocabInfo, error) {
	var raw C.kt_vocab_info
	raw.struct_size = C.uint32_t(unsafe.Sizeof(raw))
	if err := t.m.check(func() C.kt_status { return C.kt_vocab_get_info(t.m.raw(), &raw) }); err != nil {
		return VocabInfo{}, err
	}
	defer runtime.KeepAlive(t.m)
	return VocabInfo{Kind: int(raw.kind), NTokens: int(raw.n_tokens), BOS: int(raw.bos), EOS: int(raw.eos),
		EOT: int(raw.eot), AddBOS: raw.add_bos != 0, AddEOS: raw.add_eos != 0, Pre: C.GoString(raw.pre)}, nil
}

func boolInt(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// Tokenize gives the token ids of text. addSpecial: BOS/EOS as the vocabulary says; parseSpecial: "<|im_start|>"
// and the like become their tokens.
func (t Tokenizer) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	ctext := cString(text)
	defer C.free(unsafe.Pointer(ctext))
	n, add, parse := C.uint64_t(len(text)), boolInt(addSpecial), boolInt(parseSpecial)
	ids := []int32{}
	err := t.m.check(func() C.kt_status {
		var count C.int64_t
		status := C.kt_tokenize(t.m.raw(), ctext, n, add, parse, nil, 0, &count)
		if status != C.KT_STATUS_BUFFER_TOO_SMALL {
			return status // OK: no tokens
		}
		buf := (*C.int32_t)(C.malloc(C.size_t(count) * 4))
		defer C.free(unsafe.Pointer(buf))
		if status = C.kt_tokenize(t.m.raw(), ctext, n, add, parse, buf, count, &count); status == C.KT_STATUS_OK {
			ids = append(ids, unsafe.Slice((*int32)(unsafe.Pointer(buf)), int(count))...)
		}
		return status
	})
	return ids, err
}

func withTokens(tokens []int32, use func(p *C.int32_t) error) error {
	if len(tokens) == 0 {
		return use(nil)
	}
	p := (*C.int32_t)(C.malloc(C.size_t(len(tokens)) * 4))
	defer C.free(unsafe.Pointer(p))
	copy(unsafe.Slice((*int32)(unsafe.Pointer(p)), len(tokens)), tokens)
	return use(p)
}

// Detokenize gives the text of tokens. removeSpecial: drop the BOS/EOS the vocabulary adds; unparseSpecial: render
// control tokens as their text.
func (t Tokenizer) Detokenize(tokens []int32, removeSpecial, unparseSpecial bool) (string, error) {
	var out []byte
	err := withTokens(tokens, func(p *C.int32_t) error {
		return t.m.check(func() (status C.kt_status) {
			out, status = fillBytes(func(buf *C.char, capacity C.int64_t, length *C.int64_t) C.kt_status {
				return C.kt_detokenize(t.m.raw(), p, C.int64_t(len(tokens)), boolInt(removeSpecial),
					boolInt(unparseSpecial), buf, capacity, length)
			})
			return status
		})
	})
	return string(out), err
}

// TokenToPiece gives the bytes of one token (possibly part of a UTF-8 character).
func (t Tokenizer) TokenToPiece(token int32, special bool) ([]byte, error) {
	var out []byte
	err := t.m.check(func() (status C.kt_status) {
		out, status = fillBytes(func(buf *C.char, capacity C.int64_t, length *C.int64_t) C.kt_status {
			return C.kt_token_to_piece(t.m.raw(), C.int32_t(token), boolInt(special), 0, buf, capacity, length)
		})
		return status
	})
	return out, err
}

// IsEOG says whether token ends generation (EOS, EOT, EOM ...).
func (t Tokenizer) IsEOG(token int32) (bool, error) {
	var v C.int32_t
	err := t.m.check(func() C.kt_status { return C.kt_token_is_eog(t.m.raw(), C.int32_t(token), &v) })
	return v != 0, err
}

// ChatMessage is one turn of a conversation.
type ChatMessage struct{ Role, Content string }

// ApplyChatTemplate renders a conversation into the prompt text the model expects, with the model's template or
// the built-in or named one `template` ("" for the model's; "chatml", "llama3" ...).
func (t Tokenizer) ApplyChatTemplate(messages []ChatMessage, template string, addGenerationPrompt bool) (string, error) {
	n := len(messages)
	raw := (*C.kt_chat_message)(C.malloc(C.size_t(n+1) * C.size_t(unsafe.Sizeof(C.kt_chat_message{}))))
	defer C.free(unsafe.Pointer(raw))
	list := unsafe.Slice(raw, n+1)
	for i, msg := range messages {
		list[i].role, list[i].content = cString(msg.Role), cString(msg.Content)
		defer C.free(unsafe.Pointer(list[i].role))
		defer C.free(unsafe.Pointer(list[i].content))
	}
	var p C.kt_chat_params
	C.kt_chat_params_init(&p)
	p.add_generation_prompt = boolInt(addGenerationPrompt)
	if template != "" {
		p.template_name = cString(template)
		defer C.free(unsafe.Pointer(p.template_name))
	}
	var out []byte
	err := t.m.check(func() (status C.kt_status) {
		out, status = fillBytes(func(buf *C.char, capacity C.int64_t, length *C.int64_t) C.kt_status {
			return C.kt_chat_apply_template(t.m.raw(), raw, C.int64_t(n), &p, buf, capacity, length)
		})
		return status
	})
	return string(out), err
}

// Detokenizer turns generated tokens into text one at a time without splitting a UTF-8 character.
type Detokenizer struct {
	owned
	model *Model
}

// NewDetokenizer makes a streaming detokenizer for m (close it before the model).
func NewDetokenizer(m *Model, unparseSpecial bool) (*Detokenizer, error) {
	var h *C.kt_detokenizer
	e := newErrorStruct()
	if status := C.kt_detokenizer_create(m.raw(), boolInt(unparseSpecial), &h, &e); status != C.KT_STATUS_OK {
		return nil, fromErrorStruct(status, &e)
	}
	atomic.AddInt32(&m.deps, 1)
	d := &Detokenizer{model: m}
	track(d, unsafe.Pointer(h), func(p unsafe.Pointer) {
		C.kt_detokenizer_free((*C.kt_detokenizer)(p))
		atomic.AddInt32(&m.deps, -1)
	})
	return d, nil
}

// Close frees the detokenizer.
func (d *Detokenizer) Close() error { d.close(); return nil }

func (d *Detokenizer) check(s C.kt_status) error {
	if s == C.KT_STATUS_OK {
		return nil
	}
	return &Error{int(s), C.GoString(C.kt_detokenizer_last_error(d.raw()))}
}

// Push feeds one token and returns the bytes it completes (possibly none).
func (d *Detokenizer) Push(token int32) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out, status := fillBytes(func(buf *C.char, capacity C.int64_t, length *C.int64_t) C.kt_status {
		return C.kt_detokenizer_push(d.raw(), C.int32_t(token), buf, capacity, length)
	})
	return out, d.check(status)
}

// Flush returns whatever is held back at the end of a stream and starts a new one.
func (d *Detokenizer) Flush() ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out, status := fillBytes(func(buf *C.char, capacity C.int64_t, length *C.int64_t) C.kt_status {
		return C.kt_detokenizer_flush(d.raw(), buf, capacity, length)
	})
	return out, d.check(status)
}

// ------------------------------------------------------------------------------------------------------------
// Contexts

// ContextParams says how NewContext makes a context; zero values take kt's defaults.
type ContextParams struct {
	NThreads         int   // 0: one per physical core
	NCtx             int64 // KV cache positions; 0: the model's training context, at most 4096
	NBatch           int64 // tokens per forward step; 0: 512
	KVType           int   // KV cache type: TypeBF16, TypeQ8_0 ...; 0: kt's default, TypeF16
	KVF32            bool  // an f32 KV cache (TypeF32 is 0, which means the default above)
	ReferenceKernels bool  // exact and slow, for validation
}

// Logits modes of Decode.
const (
	LogitsNone = 0
	LogitsLast = 1
	LogitsAll  = 2
)

// Sampler holds sampling settings; DefaultSampler gives kt's.
type Sampler struct {
	Temperature, TopP, MinP, RepeatPenalty, PresencePenalty, FrequencyPenalty float32
	TopK, RepeatLastN                                                         int
	Seed                                                                      uint64
}

// DefaultSampler is kt's: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalties, seed 0.
func DefaultSampler() Sampler {
	var p C.kt_sampler_params
	C.kt_sampler_params_init(&p)
	return Sampler{Temperature: float32(p.temperature), TopP: float32(p.top_p), MinP: float32(p.min_p),
		RepeatPenalty: float32(p.repeat_penalty), TopK: int(p.top_k), RepeatLastN: int(p.repeat_last_n),
		Seed: uint64(p.seed)}
}

func (s *Sampler) raw() C.kt_sampler_params {
	var p C.kt_sampler_params
	C.kt_sampler_params_init(&p)
	p.temperature, p.top_p, p.min_p = C.float(s.Temperature), C.float(s.TopP), C.float(s.MinP)
	p.repeat_penalty, p.repeat_last_n = C.float(s.RepeatPenalty), C.int32_t(s.RepeatLastN)
	p.presence_penalty, p.frequency_penalty = C.float(s.PresencePenalty), C.float(s.FrequencyPenalty)
	p.top_k, p.seed = C.int32_t(s.TopK), C.uint64_t(s.Seed)
	return p
}

// StopReason says why Generate stopped.
type StopReason int

const (
	StopMaxTokens   StopReason = 0
	StopToken       StopReason = 1
	StopCallback    StopReason = 2
	StopContextFull StopReason = 3
)

// Perf holds a context's prefill and decode counters.
type Perf struct {
	NPrefillTokens, NDecodeTokens                                  int64
	PrefillSeconds, DecodeSeconds                                  float64
	AttentionSeconds, ExpertsSeconds, DenseFFNSeconds, HeadSeconds float64
}

// Context is one sequence of a model (KV cache, logits, sampler). Its methods serialize on a mutex.
type Context struct {
	owned
	model *Model
}

// NewContext makes a context for m (close it before the model).
func NewContext(m *Model, params ContextParams) (*Context, error) {
	var p C.kt_context_params
	C.kt_context_params_init(&p)
	p.n_threads = C.int32_t(params.NThreads)
	p.n_ctx = C.int64_t(params.NCtx)
	if params.NBatch > 0 {
		p.n_batch = C.int64_t(params.NBatch)
	}
	if params.KVType != 0 {
		p.kv_type = C.int32_t(params.KVType)
	}
	if params.KVF32 {
		p.kv_type = TypeF32
	}
	if params.ReferenceKernels {
		p.kernels = C.KT_KERNELS_REFERENCE
	}
	var h *C.kt_context
	e := newErrorStruct()
	if status := C.kt_context_create(m.raw(), &p, &h, &e); status != C.KT_STATUS_OK {
		return nil, fromErrorStruct(status, &e)
	}
	atomic.AddInt32(&m.deps, 1)
	c := &Context{model: m}
	track(c, unsafe.Pointer(h), func(p unsafe.Pointer) {
		C.kt_context_free((*C.kt_context)(p))
		atomic.AddInt32(&m.deps, -1)
	})
	return c, nil
}

// Close frees the context.
func (c *Context) Close() error { c.close(); return nil }

func (c *Context) check(s C.kt_status) error {
	if s == C.KT_STATUS_OK {
		return nil
	}
	return &Error{int(s), C.GoString(C.kt_context_last_error(c.raw()))}
}

// NVocab, NCtx and NPast: logits per row, positions the context holds, positions used.
func (c *Context) NVocab() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(C.kt_context_n_vocab(c.raw()))
}
func (c *Context) NCtx() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(C.kt_context_n_ctx(c.raw()))
}
func (c *Context) NPast() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(C.kt_context_n_past(c.raw()))
}

// Decode appends tokens to the sequence and runs them through the model (all or nothing).
func (c *Context) Decode(tokens []int32, logits int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return withTokens(tokens, func(p *C.int32_t) error {
		return c.check(C.kt_context_decode(c.raw(), p, C.int64_t(len(tokens)), C.int32_t(logits)))
	})
}

// Logits copies row `row` of the last decode's logits (-1: the last row).
func (c *Context) Logits(row int64) ([]float32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var p *C.float
	if err := c.check(C.kt_context_logits(c.raw(), C.int64_t(row), &p, nil)); err != nil {
		return nil, err
	}
	n := int(C.kt_context_n_vocab(c.raw()))
	out := make([]float32, n)
	copy(out, unsafe.Slice((*float32)(unsafe.Pointer(p)), n))
	return out, nil
}

// Sample picks a token from the last logits row; nil is greedy.
func (c *Context) Sample(s *Sampler) (int32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var token C.int32_t
	var raw *C.kt_sampler_params
	if s != nil {
		r := s.raw()
		raw = &r
	}
	err := c.check(C.kt_context_sample(c.raw(), raw, &token))
	return int32(token), err
}

// Generation is what Generate produced.
type Generation struct {
	Tokens []int32
	Stop   StopReason
}

//export ktGoToken
func ktGoToken(token C.int32_t, userData unsafe.Pointer) C.int32_t {
	return callbackOf[int32](userData).call(int32(token))
}

// Generate decodes prompt (may be empty to continue), then samples and decodes up to maxTokens tokens, stopping at
// any of stop or when onToken (may be nil) returns false. s nil: greedy.
func (c *Context) Generate(prompt []int32, maxTokens int, s *Sampler, stop []int32, onToken func(int32) bool) (Generation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var p C.kt_generate_params
	C.kt_generate_params_init(&p)
	p.max_tokens = C.int64_t(maxTokens)
	// C memory for everything kt reads through pointers inside the params struct (cgo forbids Go pointers there).
	var sampler *C.kt_sampler_params
	if s != nil {
		sampler = (*C.kt_sampler_params)(C.malloc(C.size_t(unsafe.Sizeof(C.kt_sampler_params{}))))
		defer C.free(unsafe.Pointer(sampler))
		*sampler = s.raw()
		p.sampler = sampler
	}
	if onToken == nil {
		onToken = func(int32) bool { return true }
	}
	callback := &goCallback[int32]{f: onToken}
	userData, release := cHandle(callback)
	defer release()
	p.on_token = C.kt_token_callback(C.ktGoToken)
	p.user_data = userData
	out := (*C.int32_t)(C.malloc(C.size_t(maxTokens+1) * 4))
	defer C.free(unsafe.Pointer(out))
	var n C.int64_t
	var why C.int32_t
	err := withTokens(stop, func(stopTokens *C.int32_t) error {
		p.stop_tokens, p.n_stop_tokens = stopTokens, C.int64_t(len(stop))
		return withTokens(prompt, func(pr *C.int32_t) error {
			status := C.kt_context_generate(c.raw(), pr, C.int64_t(len(prompt)), &p, out, C.int64_t(maxTokens), &n, &why)
			callback.repanic()
			return c.check(status)
		})
	})
	if err != nil {
		return Generation{}, err
	}
	tokens := make([]int32, int(n))
	copy(tokens, unsafe.Slice((*int32)(unsafe.Pointer(out)), int(n)))
	return Generation{Tokens: tokens, Stop: StopReason(why)}, nil
}

// Reset forgets the sequence (the KV cache memory is kept).
func (c *Context) Reset() { c.mu.Lock(); defer c.mu.Unlock(); C.kt_context_reset(c.raw()) }

// Perf gives the counters since creation or the last reset of them.
func (c *Context) Perf() (Perf, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var raw C.kt_perf
	raw.struct_size = C.uint32_t(unsafe.Sizeof(raw))
	if err := c.check(C.kt_context_perf(c.raw(), &raw)); err != nil {
		return Perf{}, err
	}
	return Perf{NPrefillTokens: int64(raw.n_prefill_tokens), NDecodeTokens: int64(raw.n_decode_tokens),
		PrefillSeconds: float64(raw.prefill_seconds), DecodeSeconds: float64(raw.decode_seconds),
		AttentionSeconds: float64(raw.attention_seconds), ExpertsSeconds: float64(raw.experts_seconds),
		DenseFFNSeconds: float64(raw.dense_ffn_seconds), HeadSeconds: float64(raw.head_seconds)}, nil
}

// ------------------------------------------------------------------------------------------------------------
// Expert pools

// Weight formats of an expert pool.
const (
	WeightsAsSource = 0 // keep the source's quantization where a kernel reads it
	WeightsInt8     = 1
	WeightsInt4     = 2 // with Int4GroupSize inputs per scale
	WeightsBF16     = 3
)

// ExpertPoolParams says how NewExpertPool makes a pool; the three sizes are required, zero values elsewhere take
// kt's defaults.
type ExpertPoolParams struct {
	NExperts, HiddenSize, IntermediateSize int
	MaxTokens, MaxTopK                     int // defaults 512 and 8
	WeightFormat, Int4GroupSize            int // WeightsAsSource; 128
	NThreads                               int // 0: one per physical core
	MaxInFlight                            int // jobs Submit queues before it blocks; 4
}

// ExpertPool holds the routed experts of one MoE layer and computes them on the CPU:
// out[t] = sum_k w[t][k] * down_e(silu(gate_e x[t]) * up_e x[t]), e = ids[t][k]. Safe for concurrent use.
type ExpertPool struct {
	owned
	nExperts, hidden, intermediate int
}

// NewExpertPool makes a pool and starts its threads.
func NewExpertPool(params ExpertPoolParams) (*ExpertPool, error) {
	var p C.kt_expert_pool_params
	C.kt_expert_pool_params_init(&p)
	p.n_experts, p.hidden_size = C.int32_t(params.NExperts), C.int32_t(params.HiddenSize)
	p.intermediate_size = C.int32_t(params.IntermediateSize)
	p.weight_format = C.int32_t(params.WeightFormat)
	p.n_threads = C.int32_t(params.NThreads)
	for _, f := range []struct {
		value int
		dst   *C.int32_t
	}{{params.MaxTokens, &p.max_tokens}, {params.MaxTopK, &p.max_top_k}, {params.Int4GroupSize, &p.int4_group_size},
		{params.MaxInFlight, &p.max_in_flight}} {
		if f.value != 0 {
			*f.dst = C.int32_t(f.value)
		}
	}
	var h *C.kt_expert_pool
	e := newErrorStruct()
	if status := C.kt_expert_pool_create(&p, &h, &e); status != C.KT_STATUS_OK {
		return nil, fromErrorStruct(status, &e)
	}
	pool := &ExpertPool{nExperts: params.NExperts, hidden: params.HiddenSize, intermediate: params.IntermediateSize}
	track(pool, unsafe.Pointer(h), func(p unsafe.Pointer) { C.kt_expert_pool_free((*C.kt_expert_pool)(p)) })
	return pool, nil
}

// Close waits for queued jobs and frees the pool. No other call on it may be running.
func (p *ExpertPool) Close() error { p.close(); return nil }

func (p *ExpertPool) check(call func() C.kt_status) error {
	if p.ptr == nil {
		return &Error{StatusMisuse, "the expert pool is closed"}
	}
	err := lockedCall(call, func() *C.char { return C.kt_expert_pool_last_error(p.raw()) })
	runtime.KeepAlive(p)
	return err
}

// LoadModel loads blk.<layer>.ffn_{gate,up,down}_exps of a model.
func (p *ExpertPool) LoadModel(m *Model, layer int) error {
	defer runtime.KeepAlive(m)
	return p.check(func() C.kt_status { return C.kt_expert_pool_load_model(p.raw(), m.raw(), C.int32_t(layer)) })
}

// LoadF32 loads every expert from f32 weights: gate and up [experts][intermediate][hidden], down
// [experts][hidden][intermediate], packed to the pool's format. kt reads the weights through pointers inside a
// struct, which cgo allows only for C memory, so they are copied expert by expert through one expert's C buffer.
func (p *ExpertPool) LoadF32(gate, up, down []float32) error {
	per := p.intermediate * p.hidden // one expert's gate, up or down
	if len(gate) != p.nExperts*per || len(up) != len(gate) || len(down) != len(gate) || per == 0 {
		return invalid("expert weights: gate %d, up %d, down %d floats; the pool needs %d each", len(gate), len(up),
			len(down), p.nExperts*per)
	}
	buf := C.malloc(C.size_t(3*per) * 4)
	defer C.free(buf)
	staging := unsafe.Slice((*float32)(buf), 3*per)
	w := (*C.kt_expert_weights)(C.calloc(1, C.size_t(unsafe.Sizeof(C.kt_expert_weights{}))))
	defer C.free(unsafe.Pointer(w))
	w.struct_size = C.uint32_t(unsafe.Sizeof(*w))
	w.gate_type, w.up_type, w.down_type = TypeF32, TypeF32, TypeF32
	w.gate, w.up, w.down = buf, unsafe.Pointer(&staging[per]), unsafe.Pointer(&staging[2*per])
	for e := 0; e < p.nExperts; e++ {
		copy(staging[:per], gate[e*per:(e+1)*per])
		copy(staging[per:2*per], up[e*per:(e+1)*per])
		copy(staging[2*per:], down[e*per:(e+1)*per])
		if err := p.check(func() C.kt_status { return C.kt_expert_pool_load_experts(p.raw(), w, C.int32_t(e), 1) }); err != nil {
			return err
		}
	}
	return nil
}

// SetMask marks experts computed elsewhere (the pool skips them); nil clears it.
func (p *ExpertPool) SetMask(mask []bool) error {
	if mask == nil {
		return p.check(func() C.kt_status { return C.kt_expert_pool_set_mask(p.raw(), nil, C.int32_t(p.nExperts)) })
	}
	bytes := make([]byte, len(mask))
	for i, m := range mask {
		if m {
			bytes[i] = 1
		}
	}
	return p.check(func() C.kt_status {
		return C.kt_expert_pool_set_mask(p.raw(), (*C.uint8_t)(unsafe.Pointer(&bytes[0])), C.int32_t(len(mask)))
	})
}

// Forward computes one call now (after queued jobs): output = (or += with accumulate) the weighted expert sum.
// input and output are [tokens][hidden], ids (-1: no expert) and weights [tokens][topK]. The slices are copied
// through C memory (cgo rules); a Job avoids the copies.
func (p *ExpertPool) Forward(input []float32, ids []int32, weights []float32, topK int, output []float32,
	accumulate bool) error {
	nTokens := 0
	if p.hidden > 0 && topK > 0 {
		nTokens = len(input) / p.hidden
	}
	if nTokens == 0 || len(input) != nTokens*p.hidden || len(output) != len(input) || len(ids) != nTokens*topK ||
		len(weights) != len(ids) {
		return invalid("expert call: input %d and output %d floats must be tokens x hidden %d, ids %d and weights %d "+
			"tokens x top_k %d", len(input), len(output), p.hidden, len(ids), len(weights), topK)
	}
	j := p.NewJob(nTokens, topK)
	defer j.Free()
	copy(j.Input, input)
	copy(j.IDs, ids)
	copy(j.Weights, weights)
	if accumulate {
		copy(j.Output, output)
	}
	j.Accumulate = accumulate
	if err := p.Run(j); err != nil {
		return err
	}
	copy(output, j.Output)
	return nil
}

// args points kt at a job's C buffers.
func (p *ExpertPool) args(j *Job) (*C.kt_expert_forward, error) {
	if j.memory == nil {
		return nil, &Error{StatusMisuse, "the job is freed"}
	}
	f := (*C.kt_expert_forward)(unsafe.Pointer(uintptr(j.memory) + uintptr(j.argsOffset)))
	C.kt_expert_forward_init(f)
	f.n_tokens, f.top_k, f.accumulate = C.int32_t(j.nTokens), C.int32_t(j.TopK), boolInt(j.Accumulate)
	f.input, f.expert_ids = unsafe.Pointer(&j.Input[0]), unsafe.Pointer(&j.IDs[0])
	f.expert_weights, f.output = (*C.float)(unsafe.Pointer(&j.Weights[0])), unsafe.Pointer(&j.Output[0])
	return f, nil
}

// Run computes a job now (after queued jobs).
func (p *ExpertPool) Run(j *Job) error {
	f, err := p.args(j)
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(j)
	return p.check(func() C.kt_status { return C.kt_expert_pool_forward(p.raw(), f) })
}

// Job holds the buffers of one expert call in C memory, which kt may use after Submit returns (Go memory may not
// be). Fill Input, IDs and Weights, then Run, or Submit and Wait; read Output. Free when done (a finalizer frees a
// forgotten one).
type Job struct {
	Input, Weights, Output []float32 // [tokens][hidden], [tokens][topK], [tokens][hidden]
	IDs                    []int32   // [tokens][topK]; -1: no expert
	TopK                   int
	Accumulate             bool // add to Output instead of overwriting it
	nTokens                int
	memory                 unsafe.Pointer // the buffers, then the kt_expert_forward that points at them
	argsOffset             int
	pending                bool
}

// NewJob allocates a job for nTokens tokens of topK experts each.
func (p *ExpertPool) NewJob(nTokens, topK int) *Job {
	nx, nk := nTokens*p.hidden, nTokens*topK
	floats := 2*nx + 2*nk
	argsOffset := (floats*4 + 15) &^ 15
	memory := C.calloc(C.size_t(argsOffset)+C.size_t(unsafe.Sizeof(C.kt_expert_forward{})), 1)
	base := unsafe.Slice((*float32)(memory), floats)
	j := &Job{Input: base[:nx:nx], Output: base[nx : 2*nx : 2*nx], Weights: base[2*nx : 2*nx+nk : 2*nx+nk],
		IDs: unsafe.Slice((*int32)(unsafe.Pointer(&base[2*nx+nk])), nk), TopK: topK, nTokens: nTokens,
		memory: memory, argsOffset: argsOffset}
	runtime.SetFinalizer(j, func(j *Job) { j.Free() })
	return j
}

// Free releases a job's memory; a job still pending is not freed.
func (j *Job) Free() {
	if j.memory != nil && !j.pending {
		C.free(j.memory)
		j.memory, j.Input, j.Output, j.Weights, j.IDs = nil, nil, nil, nil, nil
	}
}

// Pending is a submitted job.
type Pending struct {
	pool   *ExpertPool
	job    *Job
	ticket C.uint64_t
}

// Submit queues a job and returns at once (blocking while MaxInFlight jobs are pending); jobs run in order.
func (p *ExpertPool) Submit(j *Job) (*Pending, error) {
	if j.pending {
		return nil, &Error{StatusMisuse, "the job is already submitted"}
	}
	f, err := p.args(j)
	if err != nil {
		return nil, err
	}
	var ticket C.uint64_t
	if err := p.check(func() C.kt_status { return C.kt_expert_pool_submit(p.raw(), f, &ticket) }); err != nil {
		return nil, err
	}
	j.pending = true
	return &Pending{pool: p, job: j, ticket: ticket}, nil
}

// Wait waits for the job (and the jobs before it); its Output is then filled.
func (w *Pending) Wait() error {
	err := w.pool.check(func() C.kt_status { return C.kt_expert_pool_wait(w.pool.raw(), w.ticket) })
	w.job.pending = false
	runtime.KeepAlive(w.job)
	return err
}

// PoolInfo says what a pool chose and loaded.
type PoolInfo struct {
	ISA, NThreads, NNUMAGroups int
	Loaded                     bool
	WeightBytes                uint64
	Kernels, WeightFormats     string
	Description                string
}

// Info describes the pool.
func (p *ExpertPool) Info() (PoolInfo, error) {
	var raw C.kt_expert_pool_info
	raw.struct_size = C.uint32_t(unsafe.Sizeof(raw))
	if err := p.check(func() C.kt_status { return C.kt_expert_pool_get_info(p.raw(), &raw) }); err != nil {
		return PoolInfo{}, err
	}
	defer runtime.KeepAlive(p)
	return PoolInfo{ISA: int(raw.isa), NThreads: int(raw.n_threads), NNUMAGroups: int(raw.n_numa_groups),
		Loaded: raw.loaded != 0, WeightBytes: uint64(raw.weight_bytes), Kernels: C.GoString(raw.kernels),
		WeightFormats: C.GoString(raw.weight_formats), Description: C.GoString(raw.description)}, nil
}

// ------------------------------------------------------------------------------------------------------------
// Writing GGUF files

// GGUF metadata value types (KT_META_*).
const (
	MetaUint8   = 0
	MetaInt8    = 1
	MetaUint16  = 2
	MetaInt16   = 3
	MetaUint32  = 4
	MetaInt32   = 5
	MetaFloat32 = 6
	MetaBool    = 7
	MetaUint64  = 10
	MetaInt64   = 11
	MetaFloat64 = 12
)

// GgufWriter collects metadata and tensors, then writes a GGUF v3 file atomically. Its methods serialize on a mutex.
type GgufWriter struct {
	owned
}

// NewGgufWriter makes a writer; alignment of the tensor data is a power of two in [8, 2^30], or 0 for 32.
func NewGgufWriter(alignment uint32) (*GgufWriter, error) {
	var h *C.kt_gguf_writer
	e := newErrorStruct()
	if status := C.kt_gguf_writer_create_v2(C.uint32_t(alignment), &h, &e); status != C.KT_STATUS_OK {
		return nil, fromErrorStruct(status, &e)
	}
	w := &GgufWriter{}
	track(w, unsafe.Pointer(h), func(p unsafe.Pointer) { C.kt_gguf_writer_free((*C.kt_gguf_writer)(p)) })
	return w, nil
}

// Close frees the writer.
func (w *GgufWriter) Close() error { w.close(); return nil }

func (w *GgufWriter) call(key string, f func(k *C.char) C.kt_status) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := cString(key)
	defer C.free(unsafe.Pointer(k))
	if s := f(k); s != C.KT_STATUS_OK {
		return &Error{int(s), C.GoString(C.kt_gguf_writer_last_error(w.raw()))}
	}
	return nil
}

// SetInt sets an integer key of GGUF type metaType (MetaUint32 ...).
func (w *GgufWriter) SetInt(key string, metaType int, value int64) error {
	return w.call(key, func(k *C.char) C.kt_status {
		return C.kt_gguf_writer_set_int(w.raw(), k, C.int32_t(metaType), C.int64_t(value))
	})
}

// SetUint32 sets a UINT32 key.
func (w *GgufWriter) SetUint32(key string, value uint32) error {
	return w.SetInt(key, MetaUint32, int64(value))
}

// SetFloat32 sets a FLOAT32 key.
func (w *GgufWriter) SetFloat32(key string, value float32) error {
	return w.call(key, func(k *C.char) C.kt_status {
		return C.kt_gguf_writer_set_float(w.raw(), k, MetaFloat32, C.double(value))
	})
}

// SetBool sets a BOOL key.
func (w *GgufWriter) SetBool(key string, value bool) error {
	return w.call(key, func(k *C.char) C.kt_status { return C.kt_gguf_writer_set_bool(w.raw(), k, boolInt(value)) })
}

// SetString sets a STRING key.
func (w *GgufWriter) SetString(key, value string) error {
	v := cString(value)
	defer C.free(unsafe.Pointer(v))
	return w.call(key, func(k *C.char) C.kt_status {
		return C.kt_gguf_writer_set_string(w.raw(), k, v, C.uint64_t(len(value)))
	})
}

// SetArrayInt32 sets an array of INT32.
func (w *GgufWriter) SetArrayInt32(key string, values []int32) error {
	var data unsafe.Pointer
	if len(values) > 0 {
		data = unsafe.Pointer(&values[0])
	}
	return w.call(key, func(k *C.char) C.kt_status {
		return C.kt_gguf_writer_set_array(w.raw(), k, MetaInt32, data, C.uint64_t(len(values)))
	})
}

// SetArrayString sets an array of strings.
func (w *GgufWriter) SetArrayString(key string, values []string) error {
	n := len(values)
	ptrs := (**C.char)(C.malloc(C.size_t(n+1) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	defer C.free(unsafe.Pointer(ptrs))
	lengths := (*C.uint64_t)(C.malloc(C.size_t(n+1) * 8))
	defer C.free(unsafe.Pointer(lengths))
	ps, ls := unsafe.Slice(ptrs, n+1), unsafe.Slice(lengths, n+1)
	for i, v := range values {
		ps[i], ls[i] = cString(v), C.uint64_t(len(v))
		defer C.free(unsafe.Pointer(ps[i]))
	}
	return w.call(key, func(k *C.char) C.kt_status {
		return C.kt_gguf_writer_set_array_string(w.raw(), k, ptrs, lengths, C.uint64_t(n))
	})
}

// AddTensor adds a tensor of type t and shape ne (GGML order), copying data (exactly the tensor's size).
func (w *GgufWriter) AddTensor(name string, t int, ne []int64, data []byte) error {
	if len(ne) == 0 || len(ne) > 4 || len(data) == 0 {
		return invalid("tensor '%s': %d dimensions and %d bytes", name, len(ne), len(data))
	}
	var shape [4]C.int64_t
	for i, d := range ne {
		shape[i] = C.int64_t(d)
	}
	return w.call(name, func(n *C.char) C.kt_status {
		return C.kt_gguf_writer_add_tensor(w.raw(), n, C.int32_t(t), C.int32_t(len(ne)), &shape[0], unsafe.Pointer(&data[0]),
			C.uint64_t(len(data)))
	})
}

// AddTensorF32 adds f32 values stored as type t (quantized by kt along ne[0]).
func (w *GgufWriter) AddTensorF32(name string, t int, ne []int64, values []float32) error {
	if len(ne) == 0 {
		return invalid("tensor '%s' has no dimensions", name)
	}
	data, err := Quantize(t, values, int(ne[0]))
	if err != nil {
		return err
	}
	return w.AddTensor(name, t, ne, data)
}

// Write writes everything added so far to path, atomically.
func (w *GgufWriter) Write(path string) error {
	return w.call(path, func(p *C.char) C.kt_status { return C.kt_gguf_writer_write_file(w.raw(), p) })
}

// TensorSpec is a tensor an architecture needs.
type TensorSpec struct {
	Name     string
	Role     int
	Optional bool
	Ne       []int64
}

//export ktGoTensorSpec
func ktGoTensorSpec(spec *C.kt_tensor_spec, userData unsafe.Pointer) C.int32_t {
	out := (*(*cgo.Handle)(userData)).Value().(*[]TensorSpec)
	ne := make([]int64, int(spec.n_dims))
	for d := range ne {
		ne[d] = int64(spec.ne[d])
	}
	*out = append(*out, TensorSpec{Name: C.GoString(spec.name), Role: int(spec.role), Optional: spec.optional != 0, Ne: ne})
	return 0
}

// ExpectedTensors lists the tensors kt needs for the model the metadata so far describes.
func (w *GgufWriter) ExpectedTensors() ([]TensorSpec, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []TensorSpec
	userData, release := cHandle(&out)
	defer release()
	s := C.kt_gguf_writer_expected_tensors(w.raw(), C.kt_tensor_spec_callback(C.ktGoTensorSpec), userData)
	if s != C.KT_STATUS_OK {
		return nil, &Error{int(s), C.GoString(C.kt_gguf_writer_last_error(w.raw()))}
	}
	return out, nil
}

// finalizedOrClosed counts handles freed, by Close or by a finalizer (the finalizer test reads it).
var finalizedOrClosed atomic.Int64
