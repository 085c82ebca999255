//! kt for Rust: load GGUF models, tokenize, generate, and run Mixture-of-Experts layers on kt's CPU expert engine.
//!
//! A safe layer over [`kt_sys`] (kt's C ABI, `include/kt.h`). Handles are RAII types freed on drop; every failing
//! call returns [`Error`], which carries kt's status code and its message (naming the file, key, tensor or
//! argument). Borrowing encodes kt.h's lifetimes: a [`Context`], [`Tokenizer`] or [`Detokenizer`] borrows its
//! [`Model`], and the logits a context returns borrow the context until its next decode.
//!
//! Threads, as kt.h states them: a [`Model`] and an [`ExpertPool`] may be used from several threads at once
//! (`Send + Sync`); a [`Context`], [`Detokenizer`] and [`GgufWriter`] by one thread at a time (`Send`, not `Sync`:
//! their methods that change state take `&mut self`). kt keeps the error message of a shared handle per thread, and
//! this crate reads it on the thread whose call failed, right after the call.
//!
//! Not bound: the EXPERIMENTAL parts of kt.h (roofline probes, CUDA, the pool's tuning knobs); they are in kt-sys.
use std::ffi::{CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::Mutex;

pub use kt_sys as sys;

/// Tensor element types (GGML numbering, as in GGUF files).
pub mod types {
    use kt_sys as sys;
    pub const F32: i32 = sys::KT_TYPE_F32;
    pub const F16: i32 = sys::KT_TYPE_F16;
    pub const BF16: i32 = sys::KT_TYPE_BF16;
    pub const Q4_0: i32 = sys::KT_TYPE_Q4_0;
    pub const Q8_0: i32 = sys::KT_TYPE_Q8_0;
    pub const Q4_K: i32 = sys::KT_TYPE_Q4_K;
    pub const Q5_K: i32 = sys::KT_TYPE_Q5_K;
    pub const Q6_K: i32 = sys::KT_TYPE_Q6_K;
    pub const IQ4_XS: i32 = sys::KT_TYPE_IQ4_XS;
    pub const MXFP4: i32 = sys::KT_TYPE_MXFP4;
}

// ------------------------------------------------------------------------------------------------------------
// Errors

/// A failed kt call: its `kt_status` and kt's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: i32,
    message: String,
}

impl Error {
    fn new(status: i32, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
    /// The `KT_STATUS_*` code.
    pub fn status(&self) -> i32 {
        self.status
    }
    /// kt's message, e.g. "tensor 'blk.0.attn_q.weight' not found".
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The status code's fixed text ("not found").
    pub fn status_name(&self) -> &'static str {
        status_string(self.status)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.status_name())
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// The fixed text of a status code.
pub fn status_string(status: i32) -> &'static str {
    // SAFETY: kt_status_string returns static storage, never NULL.
    unsafe { static_str(sys::kt_status_string(status)) }
}

unsafe fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        ""
    } else {
        CStr::from_ptr(p).to_str().unwrap_or("")
    }
}

unsafe fn owned_string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

fn c_string(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(sys::KT_STATUS_INVALID_ARGUMENT, format!("{} contains a NUL byte", what)))
}

fn path_string(path: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::new(sys::KT_STATUS_INVALID_ARGUMENT, "path contains a NUL byte"))
}

fn new_error_struct() -> sys::kt_error {
    sys::kt_error {
        struct_size: std::mem::size_of::<sys::kt_error>() as u32,
        status: 0,
        message: [0; sys::KT_ERROR_MESSAGE_CAPACITY],
    }
}

fn from_error_struct(status: i32, err: &sys::kt_error) -> Error {
    // SAFETY: kt NUL-terminates the message; the array starts zeroed.
    Error::new(status, unsafe { owned_string(err.message.as_ptr()) })
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(sys::KT_STATUS_INVALID_ARGUMENT, message)
}

/// Runs a callback body from C without letting a panic unwind into kt; a panic counts as "stop" (and is lost: used
/// where there is no caller to give it back to).
fn guarded<T>(stop: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(stop)
}

/// What the user_data of a progress or token callback points at: the caller's closure, and its panic, if it
/// panicked. A panic must not unwind through kt's C frames: it is caught, kt is told to stop, and the panic resumes
/// in the caller once kt has returned.
struct Callback<'f, T> {
    f: &'f mut dyn FnMut(T) -> bool, // true: go on
    panic: Option<Box<dyn std::any::Any + Send>>,
}

impl<'f, T> Callback<'f, T> {
    fn user_data(&mut self) -> *mut c_void {
        self as *mut Self as *mut c_void
    }

    /// The C side: 0 to go on, 1 to stop.
    unsafe fn call(user_data: *mut c_void, value: T) -> i32 {
        let cb = &mut *(user_data as *mut Callback<'_, T>);
        match catch_unwind(AssertUnwindSafe(|| (cb.f)(value))) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(panic) => {
                cb.panic = Some(panic);
                1
            }
        }
    }

    fn resume_panic(&mut self) {
        if let Some(panic) = self.panic.take() {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Buffer-filling calls: ask for the size, then fill (kt.h's size negotiation: BUFFER_TOO_SMALL reports the size).
fn fill_bytes(
    mut call: impl FnMut(*mut c_char, i64, &mut i64) -> i32,
    check: impl Fn(i32) -> Result<()>,
) -> Result<Vec<u8>> {
    let mut buf: Vec<u8> = vec![0; 256];
    loop {
        let mut len: i64 = 0;
        let status = call(buf.as_mut_ptr() as *mut c_char, buf.len() as i64, &mut len);
        if status == sys::KT_STATUS_BUFFER_TOO_SMALL && len as usize + 1 > buf.len() {
            buf.resize(len as usize + 1, 0);
            continue;
        }
        check(status)?;
        buf.truncate(len as usize);
        return Ok(buf);
    }
}

// ------------------------------------------------------------------------------------------------------------
// The library

/// "0.2.0".
pub fn version() -> &'static str {
    unsafe { static_str(sys::kt_version_string()) }
}

/// The version number of the library linked (`major * 1000000 + minor * 1000 + patch`).
pub fn version_number() -> i32 {
    unsafe { sys::kt_version_number() }
}

/// One line: version, git revision, compiler, backends, the CPU's ISAs.
pub fn build_info() -> &'static str {
    unsafe { static_str(sys::kt_build_info()) }
}

/// "Q4_K" for a type id, None for one kt does not know.
pub fn type_name(ty: i32) -> Option<&'static str> {
    let p = unsafe { sys::kt_type_name(ty) };
    if p.is_null() {
        None
    } else {
        Some(unsafe { static_str(p) })
    }
}

type LogFn = Box<dyn Fn(i32, &str) + Send + Sync>;

// The installed callback, kept alive here while kt may call it.
static LOG: Mutex<Option<Box<LogFn>>> = Mutex::new(None);

thread_local! {
    static IN_LOG_CALLBACK: std::cell::Cell<bool> = std::cell::Cell::new(false);
}

unsafe extern "C" fn log_trampoline(level: i32, message: *const c_char, user_data: *mut c_void) {
    let f = &*(user_data as *const LogFn);
    let text = CStr::from_ptr(message).to_string_lossy();
    IN_LOG_CALLBACK.with(|c| c.set(true));
    guarded((), || f(level, &text));
    IN_LOG_CALLBACK.with(|c| c.set(false));
}

/// Sends kt's log messages up to `max_level` (`sys::KT_LOG_ERROR` .. `KT_LOG_DEBUG`) to `f`, which may be called
/// from kt's worker threads. `None` silences kt.
pub fn set_log_callback(max_level: i32, f: Option<LogFn>) {
    let mut slot = LOG.lock().unwrap_or_else(|e| e.into_inner());
    let new = f.map(Box::new);
    unsafe {
        match &new {
            Some(b) => sys::kt_log_set(Some(log_trampoline), &**b as *const LogFn as *mut c_void, max_level),
            None => sys::kt_log_set(None, ptr::null_mut(), max_level),
        }
    }
    let old = std::mem::replace(&mut *slot, new);
    // kt_log_set has waited for the old callback to return, except when called from inside a callback: then the old
    // closure may still be running on this very stack, and is leaked rather than freed under it.
    if IN_LOG_CALLBACK.with(|c| c.get()) {
        std::mem::forget(old);
    }
}

// ------------------------------------------------------------------------------------------------------------
// Quantization

/// `values` (rows of `n_per_row` floats) in block format `ty`, as a GGUF tensor stores them.
pub fn quantize(ty: i32, values: &[f32], n_per_row: usize) -> Result<Vec<u8>> {
    if n_per_row == 0 || values.len() % n_per_row != 0 {
        return Err(invalid(format!("{} values are not rows of {}", values.len(), n_per_row)));
    }
    let n_rows = (values.len() / n_per_row) as i64;
    let mut bytes: u64 = 0;
    let status =
        unsafe { sys::kt_quantize(ty, values.as_ptr(), n_rows, n_per_row as i64, ptr::null_mut(), 0, &mut bytes) };
    if status != sys::KT_STATUS_OK && status != sys::KT_STATUS_BUFFER_TOO_SMALL {
        return Err(Error::new(status, format!("kt_quantize to type {} failed (kt logs why)", ty)));
    }
    let mut out = vec![0u8; bytes as usize];
    let status = unsafe {
        sys::kt_quantize(
            ty,
            values.as_ptr(),
            n_rows,
            n_per_row as i64,
            out.as_mut_ptr() as *mut c_void,
            bytes,
            ptr::null_mut(),
        )
    };
    if status != sys::KT_STATUS_OK {
        return Err(Error::new(status, format!("kt_quantize to type {} failed (kt logs why)", ty)));
    }
    Ok(out)
}

/// The inverse of [`quantize`]: `n_rows` rows of `n_per_row` values of type `ty` from `data`.
pub fn dequantize(ty: i32, data: &[u8], n_rows: usize, n_per_row: usize) -> Result<Vec<f32>> {
    let mut out = vec![0f32; n_rows * n_per_row];
    let status = unsafe {
        sys::kt_dequantize(
            ty,
            data.as_ptr() as *const c_void,
            data.len() as u64,
            n_rows as i64,
            n_per_row as i64,
            out.as_mut_ptr(),
            out.len() as u64,
        )
    };
    if status != sys::KT_STATUS_OK {
        return Err(Error::new(status, format!("kt_dequantize of type {} failed (kt logs why)", ty)));
    }
    Ok(out)
}

// ------------------------------------------------------------------------------------------------------------
// Models

/// A GGUF file, memory-mapped and validated.
pub struct Model {
    raw: NonNull<sys::kt_model>,
}

// SAFETY: kt.h: a model is immutable after loading and may be queried from several threads at once; its error
// messages are kept per thread, so reading one after a failed call is not disturbed by other threads. Nothing in a
// model is tied to the thread that loaded it, so it may be moved and freed anywhere.
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

/// How [`Model::load_with`] loads.
#[derive(Debug, Clone)]
pub struct ModelParams {
    /// Map the file (default) rather than read it into memory.
    pub use_mmap: bool,
    /// Fault every tensor page in during the load (default).
    pub prefetch: bool,
}

impl Default for ModelParams {
    fn default() -> Self {
        ModelParams { use_mmap: true, prefetch: true }
    }
}

/// One tensor of a model. `ne` is GGUF's order (`ne[0]` contiguous).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub index: usize,
    pub name: String,
    pub ty: i32,
    pub ne: Vec<i64>,
    pub n_elements: u64,
    pub n_bytes: u64,
    pub file_offset: u64,
}

unsafe extern "C" fn progress_trampoline(progress: f32, user_data: *mut c_void) -> i32 {
    Callback::<f32>::call(user_data, progress)
}

impl Model {
    /// Loads with the default [`ModelParams`].
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Model::load_with(path, &ModelParams::default(), None)
    }

    /// Loads `path`; `progress` is called with the fraction done and returns false to cancel
    /// (`KT_STATUS_CANCELLED`).
    pub fn load_with(
        path: impl AsRef<Path>,
        params: &ModelParams,
        mut progress: Option<&mut dyn FnMut(f32) -> bool>,
    ) -> Result<Model> {
        let cpath = path_string(path.as_ref())?;
        let mut p = unsafe {
            let mut p = std::mem::zeroed::<sys::kt_model_params>();
            sys::kt_model_params_init(&mut p);
            p
        };
        p.use_mmap = params.use_mmap as i32;
        p.prefetch = params.prefetch as i32;
        let mut callback = progress.take().map(|f| Callback { f, panic: None });
        if let Some(cb) = callback.as_mut() {
            p.progress_callback = Some(progress_trampoline);
            p.progress_user_data = cb.user_data();
        }
        let mut raw = ptr::null_mut();
        let mut err = new_error_struct();
        let status = unsafe { sys::kt_model_load(cpath.as_ptr(), &p, &mut raw, &mut err) };
        if let Some(cb) = callback.as_mut() {
            cb.resume_panic();
        }
        if status != sys::KT_STATUS_OK {
            return Err(from_error_struct(status, &err));
        }
        Ok(Model { raw: NonNull::new(raw).expect("kt_model_load succeeded with NULL") })
    }

    /// The handle, for kt-sys calls.
    pub fn as_ptr(&self) -> *mut sys::kt_model {
        self.raw.as_ptr()
    }

    fn check(&self, status: i32) -> Result<()> {
        if status == sys::KT_STATUS_OK {
            Ok(())
        } else {
            // Read on the thread whose call failed: kt keeps a shared model's messages per thread.
            Err(Error::new(status, unsafe { owned_string(sys::kt_model_last_error(self.raw.as_ptr())) }))
        }
    }

    /// general.architecture, e.g. "qwen3moe" ("" when absent).
    pub fn architecture(&self) -> String {
        unsafe { owned_string(sys::kt_model_architecture(self.raw.as_ptr())) }
    }

    pub fn gguf_version(&self) -> u32 {
        unsafe { sys::kt_model_gguf_version(self.raw.as_ptr()) }
    }

    /// Metadata keys in file order.
    pub fn meta_keys(&self) -> Result<Vec<String>> {
        let n = unsafe { sys::kt_model_meta_count(self.raw.as_ptr()) };
        (0..n)
            .map(|i| {
                let mut key = ptr::null();
                self.check(unsafe { sys::kt_model_meta_key(self.raw.as_ptr(), i, &mut key) })?;
                Ok(unsafe { owned_string(key) })
            })
            .collect()
    }

    /// An integer or bool key (any GGUF integer type).
    pub fn meta_int(&self, key: &str) -> Result<i64> {
        let k = c_string(key, "key")?;
        let mut v = 0i64;
        self.check(unsafe { sys::kt_model_meta_get_int(self.raw.as_ptr(), k.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// A float or integer key.
    pub fn meta_float(&self, key: &str) -> Result<f64> {
        let k = c_string(key, "key")?;
        let mut v = 0f64;
        self.check(unsafe { sys::kt_model_meta_get_float(self.raw.as_ptr(), k.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// A string key (invalid UTF-8 is replaced).
    pub fn meta_string(&self, key: &str) -> Result<String> {
        let k = c_string(key, "key")?;
        let (mut p, mut n) = (ptr::null(), 0u64);
        self.check(unsafe { sys::kt_model_meta_get_string(self.raw.as_ptr(), k.as_ptr(), &mut p, &mut n) })?;
        let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, n as usize) };
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Elements of an array key.
    pub fn meta_array_len(&self, key: &str) -> Result<u64> {
        let k = c_string(key, "key")?;
        let mut n = 0u64;
        self.check(unsafe { sys::kt_model_meta_array_length(self.raw.as_ptr(), k.as_ptr(), &mut n) })?;
        Ok(n)
    }

    pub fn tensor_count(&self) -> usize {
        unsafe { sys::kt_model_tensor_count(self.raw.as_ptr()) as usize }
    }

    /// The index of a tensor by name (`KT_STATUS_NOT_FOUND`).
    pub fn tensor_find(&self, name: &str) -> Result<usize> {
        let n = c_string(name, "tensor name")?;
        let mut index = 0i64;
        self.check(unsafe { sys::kt_model_tensor_find(self.raw.as_ptr(), n.as_ptr(), &mut index) })?;
        Ok(index as usize)
    }

    pub fn tensor_info(&self, index: usize) -> Result<TensorInfo> {
        let mut raw = unsafe { std::mem::zeroed::<sys::kt_tensor_info>() };
        raw.struct_size = std::mem::size_of::<sys::kt_tensor_info>() as u32;
        self.check(unsafe { sys::kt_model_tensor_info(self.raw.as_ptr(), index as i64, &mut raw) })?;
        Ok(TensorInfo {
            index,
            name: unsafe { owned_string(raw.name) },
            ty: raw.r#type,
            ne: raw.ne[..raw.n_dims as usize].to_vec(),
            n_elements: raw.n_elements,
            n_bytes: raw.n_bytes,
            file_offset: raw.file_offset,
        })
    }

    /// A tensor's values dequantized to f32, in GGML order (element (i0, i1, ..) at i0 + ne0 * (i1 + ..)).
    pub fn tensor_f32(&self, index: usize) -> Result<Vec<f32>> {
        let info = self.tensor_info(index)?;
        let mut out = vec![0f32; info.n_elements as usize];
        self.check(unsafe {
            sys::kt_model_tensor_read_f32(
                self.raw.as_ptr(),
                index as i64,
                out.as_mut_ptr(),
                out.len() as u64,
                ptr::null_mut(),
            )
        })?;
        Ok(out)
    }

    /// The model's tokenizer (its vocabulary, built on first use).
    pub fn tokenizer(&self) -> Tokenizer<'_> {
        Tokenizer { model: self }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { sys::kt_model_free(self.raw.as_ptr()) }
    }
}

macro_rules! debug_handle {
    ($($t:ident),*) => { $(
        impl fmt::Debug for $t<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($t), "({:p})"), self.raw.as_ptr())
            }
        }
    )* };
}
debug_handle!(Context, Detokenizer);

impl fmt::Debug for ExpertPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExpertPool({} experts, hidden {}, intermediate {})", self.n_experts, self.hidden, self.intermediate)
    }
}

impl fmt::Debug for GgufWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GgufWriter({:p})", self.raw.as_ptr())
    }
}

impl fmt::Debug for Pending<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pending(ticket {})", self.ticket)
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Model({}, {} tensors)", self.architecture(), self.tensor_count())
    }
}

// ------------------------------------------------------------------------------------------------------------
// Tokenizer

/// What a model's vocabulary is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VocabInfo {
    /// `sys::KT_VOCAB_BPE` or `KT_VOCAB_SPM`.
    pub kind: i32,
    pub n_tokens: i32,
    /// Special ids; `None` when the vocabulary has none.
    pub bos: Option<i32>,
    pub eos: Option<i32>,
    pub eot: Option<i32>,
    pub add_bos: bool,
    pub add_eos: bool,
    /// tokenizer.ggml.pre as applied ("qwen2", "llama-bpe", "default" ...).
    pub pre: String,
}

/// Text to token ids and back with a model's own vocabulary. Safe to use from several threads.
#[derive(Clone, Copy)]
pub struct Tokenizer<'m> {
    model: &'m Model,
}

fn token_or_none(id: i32) -> Option<i32> {
    if id == sys::KT_TOKEN_NONE {
        None
    } else {
        Some(id)
    }
}

impl<'m> Tokenizer<'m> {
    pub fn vocab_info(&self) -> Result<VocabInfo> {
        let mut raw = unsafe { std::mem::zeroed::<sys::kt_vocab_info>() };
        raw.struct_size = std::mem::size_of::<sys::kt_vocab_info>() as u32;
        self.model.check(unsafe { sys::kt_vocab_get_info(self.model.as_ptr(), &mut raw) })?;
        Ok(VocabInfo {
            kind: raw.kind,
            n_tokens: raw.n_tokens,
            bos: token_or_none(raw.bos),
            eos: token_or_none(raw.eos),
            eot: token_or_none(raw.eot),
            add_bos: raw.add_bos != 0,
            add_eos: raw.add_eos != 0,
            pre: unsafe { owned_string(raw.pre) },
        })
    }

    /// Token ids of `text`. `add_special`: BOS/EOS as the vocabulary says; `parse_special`: "<|im_start|>" and the
    /// like become their tokens.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<i32>> {
        let m = self.model.as_ptr();
        let mut count = 0i64;
        let status = unsafe {
            sys::kt_tokenize(
                m,
                text.as_ptr() as *const c_char,
                text.len() as u64,
                add_special as i32,
                parse_special as i32,
                ptr::null_mut(),
                0,
                &mut count,
            )
        };
        if status != sys::KT_STATUS_BUFFER_TOO_SMALL {
            self.model.check(status)?;
        }
        let mut ids = vec![0i32; count as usize];
        self.model.check(unsafe {
            sys::kt_tokenize(
                m,
                text.as_ptr() as *const c_char,
                text.len() as u64,
                add_special as i32,
                parse_special as i32,
                ids.as_mut_ptr(),
                ids.len() as i64,
                &mut count,
            )
        })?;
        Ok(ids)
    }

    /// The text of `tokens` (invalid UTF-8 replaced). `remove_special`: drop the BOS/EOS the vocabulary adds;
    /// `unparse_special`: render control tokens as their text.
    pub fn detokenize(&self, tokens: &[i32], remove_special: bool, unparse_special: bool) -> Result<String> {
        let m = self.model.as_ptr();
        let bytes = fill_bytes(
            |buf, cap, len| unsafe {
                sys::kt_detokenize(
                    m,
                    tokens.as_ptr(),
                    tokens.len() as i64,
                    remove_special as i32,
                    unparse_special as i32,
                    buf,
                    cap,
                    len,
                )
            },
            |s| self.model.check(s),
        )?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The bytes of one token (a byte-level token may hold part of a UTF-8 character).
    pub fn token_to_piece(&self, token: i32, special: bool) -> Result<Vec<u8>> {
        let m = self.model.as_ptr();
        fill_bytes(
            |buf, cap, len| unsafe { sys::kt_token_to_piece(m, token, special as i32, 0, buf, cap, len) },
            |s| self.model.check(s),
        )
    }

    /// Whether `token` ends generation (EOS, EOT, EOM ...).
    pub fn is_eog(&self, token: i32) -> Result<bool> {
        let mut v = 0i32;
        self.model.check(unsafe { sys::kt_token_is_eog(self.model.as_ptr(), token, &mut v) })?;
        Ok(v != 0)
    }

    /// The prompt text for a conversation of (role, content) turns with the model's chat template, or the
    /// built-in or named one `template` ("chatml", "llama3" ...).
    pub fn apply_chat_template(
        &self,
        turns: &[(&str, &str)],
        template: Option<&str>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let owned: Vec<(CString, CString)> =
            turns.iter().map(|(r, c)| Ok((c_string(r, "role")?, c_string(c, "content")?))).collect::<Result<_>>()?;
        let messages: Vec<sys::kt_chat_message> =
            owned.iter().map(|(r, c)| sys::kt_chat_message { role: r.as_ptr(), content: c.as_ptr() }).collect();
        let name = template.map(|t| c_string(t, "template name")).transpose()?;
        let mut p = unsafe {
            let mut p = std::mem::zeroed::<sys::kt_chat_params>();
            sys::kt_chat_params_init(&mut p);
            p
        };
        p.add_generation_prompt = add_generation_prompt as i32;
        p.template_name = name.as_ref().map_or(ptr::null(), |n| n.as_ptr());
        let m = self.model.as_ptr();
        let bytes = fill_bytes(
            |buf, cap, len| unsafe {
                sys::kt_chat_apply_template(m, messages.as_ptr(), messages.len() as i64, &p, buf, cap, len)
            },
            |s| self.model.check(s),
        )?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Turns generated tokens into text one at a time without splitting a UTF-8 character.
pub struct Detokenizer<'m> {
    raw: NonNull<sys::kt_detokenizer>,
    _model: PhantomData<&'m Model>,
}

// SAFETY: kt.h: a detokenizer is used by one thread at a time; the methods that use it take &mut self, and it is
// tied to no thread, so moving it between threads is fine.
unsafe impl Send for Detokenizer<'_> {}

impl<'m> Detokenizer<'m> {
    pub fn new(model: &'m Model, unparse_special: bool) -> Result<Detokenizer<'m>> {
        let mut raw = ptr::null_mut();
        let mut err = new_error_struct();
        let status = unsafe { sys::kt_detokenizer_create(model.as_ptr(), unparse_special as i32, &mut raw, &mut err) };
        if status != sys::KT_STATUS_OK {
            return Err(from_error_struct(status, &err));
        }
        Ok(Detokenizer {
            raw: NonNull::new(raw).expect("kt_detokenizer_create succeeded with NULL"),
            _model: PhantomData,
        })
    }

    fn check(&self, status: i32) -> Result<()> {
        if status == sys::KT_STATUS_OK {
            return Ok(());
        }
        Err(Error::new(status, unsafe { owned_string(sys::kt_detokenizer_last_error(self.raw.as_ptr())) }))
    }

    /// The bytes `token` completes (possibly none).
    pub fn push(&mut self, token: i32) -> Result<Vec<u8>> {
        let d = self.raw.as_ptr();
        fill_bytes(|buf, cap, len| unsafe { sys::kt_detokenizer_push(d, token, buf, cap, len) }, |s| self.check(s))
    }

    /// Whatever is held back at the end of a stream; starts a new stream.
    pub fn flush(&mut self) -> Result<Vec<u8>> {
        let d = self.raw.as_ptr();
        fill_bytes(|buf, cap, len| unsafe { sys::kt_detokenizer_flush(d, buf, cap, len) }, |s| self.check(s))
    }
}

impl Drop for Detokenizer<'_> {
    fn drop(&mut self) {
        unsafe { sys::kt_detokenizer_free(self.raw.as_ptr()) }
    }
}

// ------------------------------------------------------------------------------------------------------------
// Contexts

/// How a [`Context`] is made.
#[derive(Debug, Clone)]
pub struct ContextParams {
    /// 0 (default): one per physical core.
    pub n_threads: i32,
    /// KV cache positions; 0 (default): the model's training context, at most 4096.
    pub n_ctx: i64,
    /// Tokens per forward step (default 512).
    pub n_batch: i64,
    /// KV cache type: `types::F16` (default), `BF16`, `F32` or `Q8_0`.
    pub kv_type: i32,
    /// Exact reference kernels (slow; for validation) instead of the expert engine.
    pub reference_kernels: bool,
}

impl Default for ContextParams {
    fn default() -> Self {
        let p = unsafe {
            let mut p = std::mem::zeroed::<sys::kt_context_params>();
            sys::kt_context_params_init(&mut p);
            p
        };
        ContextParams {
            n_threads: p.n_threads,
            n_ctx: p.n_ctx,
            n_batch: p.n_batch,
            kv_type: p.kv_type,
            reference_kernels: p.kernels == sys::KT_KERNELS_REFERENCE,
        }
    }
}

/// Which logits a decode keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    None,
    Last,
    All,
}

/// Sampling settings (kt_sampler_params); `Default` is kt's (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    raw: sys::kt_sampler_params,
}

impl Default for Sampler {
    fn default() -> Self {
        let mut raw = unsafe { std::mem::zeroed::<sys::kt_sampler_params>() };
        unsafe { sys::kt_sampler_params_init(&mut raw) };
        Sampler { raw }
    }
}

impl Sampler {
    /// Argmax (after penalties).
    pub fn greedy() -> Sampler {
        let mut s = Sampler::default();
        s.raw.temperature = 0.0;
        s
    }
    pub fn temperature(mut self, t: f32) -> Self {
        self.raw.temperature = t;
        self
    }
    pub fn top_k(mut self, k: i32) -> Self {
        self.raw.top_k = k;
        self
    }
    pub fn top_p(mut self, p: f32) -> Self {
        self.raw.top_p = p;
        self
    }
    pub fn min_p(mut self, p: f32) -> Self {
        self.raw.min_p = p;
        self
    }
    pub fn repeat_penalty(mut self, penalty: f32, last_n: i32) -> Self {
        self.raw.repeat_penalty = penalty;
        self.raw.repeat_last_n = last_n;
        self
    }
    pub fn seed(mut self, seed: u64) -> Self {
        self.raw.seed = seed;
        self
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    MaxTokens,
    StopToken,
    Callback,
    ContextFull,
}

/// The result of [`Context::generate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    pub tokens: Vec<i32>,
    pub stop: StopReason,
}

/// Prefill and decode counters of a context: kt's own struct (its `struct_size` and `reserved0` mean nothing here).
pub type Perf = sys::kt_perf;

/// One sequence of a model: its KV cache, the logits of its last decode, a sampler.
pub struct Context<'m> {
    raw: NonNull<sys::kt_context>,
    _model: PhantomData<&'m Model>,
}

// SAFETY: kt.h: a context is used by one thread at a time (its methods take &mut self, or &self for reads while no
// &mut exists); it holds no thread-bound state, so it may move between threads. Not Sync: two threads reading it at
// once would race with nothing kt promises to guard.
unsafe impl Send for Context<'_> {}

unsafe extern "C" fn token_trampoline(token: i32, user_data: *mut c_void) -> i32 {
    Callback::<i32>::call(user_data, token)
}

impl<'m> Context<'m> {
    pub fn new(model: &'m Model, params: &ContextParams) -> Result<Context<'m>> {
        let mut p = unsafe { std::mem::zeroed::<sys::kt_context_params>() };
        unsafe { sys::kt_context_params_init(&mut p) };
        p.n_threads = params.n_threads;
        p.n_ctx = params.n_ctx;
        p.n_batch = params.n_batch;
        p.kv_type = params.kv_type;
        p.kernels = if params.reference_kernels { sys::KT_KERNELS_REFERENCE } else { sys::KT_KERNELS_AUTO };
        let mut raw = ptr::null_mut();
        let mut err = new_error_struct();
        let status = unsafe { sys::kt_context_create(model.as_ptr(), &p, &mut raw, &mut err) };
        if status != sys::KT_STATUS_OK {
            return Err(from_error_struct(status, &err));
        }
        Ok(Context { raw: NonNull::new(raw).expect("kt_context_create succeeded with NULL"), _model: PhantomData })
    }

    fn check(&self, status: i32) -> Result<()> {
        if status == sys::KT_STATUS_OK {
            return Ok(());
        }
        Err(Error::new(status, unsafe { owned_string(sys::kt_context_last_error(self.raw.as_ptr())) }))
    }

    pub fn n_vocab(&self) -> usize {
        unsafe { sys::kt_context_n_vocab(self.raw.as_ptr()) as usize }
    }
    pub fn n_ctx(&self) -> i64 {
        unsafe { sys::kt_context_n_ctx(self.raw.as_ptr()) }
    }
    pub fn n_past(&self) -> i64 {
        unsafe { sys::kt_context_n_past(self.raw.as_ptr()) }
    }

    /// Appends `tokens` to the sequence and runs them through the model. All or nothing.
    pub fn decode(&mut self, tokens: &[i32], logits: Logits) -> Result<()> {
        let mode = match logits {
            Logits::None => sys::KT_LOGITS_NONE,
            Logits::Last => sys::KT_LOGITS_LAST,
            Logits::All => sys::KT_LOGITS_ALL,
        };
        self.check(unsafe { sys::kt_context_decode(self.raw.as_ptr(), tokens.as_ptr(), tokens.len() as i64, mode) })
    }

    /// Row `row` of the last decode's logits (-1: the last row); borrowed until the next change to the context.
    pub fn logits(&self, row: i64) -> Result<&[f32]> {
        let mut p = ptr::null();
        self.check(unsafe { sys::kt_context_logits(self.raw.as_ptr(), row, &mut p, ptr::null_mut()) })?;
        Ok(unsafe { std::slice::from_raw_parts(p, self.n_vocab()) })
    }

    /// A token from the last logits row; `None`: greedy.
    pub fn sample(&mut self, sampler: Option<&Sampler>) -> Result<i32> {
        let mut token = 0i32;
        let p = sampler.map_or(ptr::null(), |s| &s.raw as *const sys::kt_sampler_params);
        self.check(unsafe { sys::kt_context_sample(self.raw.as_ptr(), p, &mut token) })?;
        Ok(token)
    }

    /// Decodes `prompt` (may be empty to continue), then samples and decodes up to `max_tokens` tokens, stopping at
    /// any of `stop_tokens` or when `on_token` returns false. `sampler` None: greedy.
    pub fn generate(
        &mut self,
        prompt: &[i32],
        max_tokens: usize,
        sampler: Option<&Sampler>,
        stop_tokens: &[i32],
        mut on_token: impl FnMut(i32) -> bool,
    ) -> Result<Generation> {
        let mut p = unsafe { std::mem::zeroed::<sys::kt_generate_params>() };
        unsafe { sys::kt_generate_params_init(&mut p) };
        p.max_tokens = max_tokens as i64;
        p.stop_tokens = if stop_tokens.is_empty() { ptr::null() } else { stop_tokens.as_ptr() };
        p.n_stop_tokens = stop_tokens.len() as i64;
        p.sampler = sampler.map_or(ptr::null(), |s| &s.raw as *const sys::kt_sampler_params);
        let mut callback = Callback { f: &mut on_token, panic: None };
        p.on_token = Some(token_trampoline);
        p.user_data = callback.user_data();
        let mut tokens = vec![0i32; max_tokens];
        let (mut n, mut why) = (0i64, 0i32);
        let status = unsafe {
            sys::kt_context_generate(
                self.raw.as_ptr(),
                prompt.as_ptr(),
                prompt.len() as i64,
                &p,
                tokens.as_mut_ptr(),
                tokens.len() as i64,
                &mut n,
                &mut why,
            )
        };
        callback.resume_panic();
        self.check(status)?;
        tokens.truncate(n as usize);
        let stop = match why {
            sys::KT_STOP_TOKEN => StopReason::StopToken,
            sys::KT_STOP_CALLBACK => StopReason::Callback,
            sys::KT_STOP_CONTEXT_FULL => StopReason::ContextFull,
            _ => StopReason::MaxTokens,
        };
        Ok(Generation { tokens, stop })
    }

    /// Forgets the sequence (the KV cache memory is kept).
    pub fn reset(&mut self) {
        unsafe { sys::kt_context_reset(self.raw.as_ptr()) }
    }

    pub fn perf(&self) -> Result<Perf> {
        let mut raw = unsafe { std::mem::zeroed::<sys::kt_perf>() };
        raw.struct_size = std::mem::size_of::<sys::kt_perf>() as u32;
        self.check(unsafe { sys::kt_context_perf(self.raw.as_ptr(), &mut raw) })?;
        Ok(raw)
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        unsafe { sys::kt_context_free(self.raw.as_ptr()) }
    }
}

// ------------------------------------------------------------------------------------------------------------
// Expert pools

/// Weight formats an expert pool packs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// Keep the source's quantization where a kernel reads it (Q4_0, Q8_0, Q4_K ...), else the closest.
    AsSource,
    Int8,
    /// Int4 with one scale per `group` inputs (32, 64 or 128).
    Int4 {
        group: i32,
    },
    Bf16,
}

/// How an [`ExpertPool`] is made: the three sizes are required.
#[derive(Debug, Clone)]
pub struct ExpertPoolParams {
    pub n_experts: i32,
    pub hidden_size: i32,
    pub intermediate_size: i32,
    /// Most tokens per call (default 512).
    pub max_tokens: i32,
    /// Most experts per token (default 8).
    pub max_top_k: i32,
    pub weight_format: WeightFormat,
    /// 0 (default): one per physical core.
    pub n_threads: i32,
    /// Jobs `submit` queues before it blocks (default 4).
    pub max_in_flight: i32,
}

impl Default for ExpertPoolParams {
    fn default() -> Self {
        let mut p = unsafe { std::mem::zeroed::<sys::kt_expert_pool_params>() };
        unsafe { sys::kt_expert_pool_params_init(&mut p) };
        ExpertPoolParams {
            n_experts: 0,
            hidden_size: 0,
            intermediate_size: 0,
            max_tokens: p.max_tokens,
            max_top_k: p.max_top_k,
            weight_format: WeightFormat::AsSource,
            n_threads: p.n_threads,
            max_in_flight: p.max_in_flight,
        }
    }
}

/// One matrix stack in caller memory: `data` holds the stack in type `ty` (`types::*`), rows back to back.
#[derive(Debug, Clone, Copy)]
pub struct Weights<'a> {
    pub ty: i32,
    pub data: &'a [u8],
}

impl<'a> Weights<'a> {
    /// f32 values, viewed as bytes.
    pub fn f32(values: &'a [f32]) -> Weights<'a> {
        // SAFETY: any f32 is 4 plain bytes.
        let data = unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, values.len() * 4) };
        Weights { ty: types::F32, data }
    }
}

/// What a pool chose and loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolInfo {
    pub isa: i32,
    pub n_threads: i32,
    pub n_numa_groups: i32,
    pub loaded: bool,
    pub weight_bytes: u64,
    pub kernels: String,
    pub weight_formats: String,
    pub description: String,
}

/// The buffers of one queued expert call ([`ExpertPool::submit`]), owned by the job while kt may use them.
#[derive(Debug, Clone, Default)]
pub struct Job {
    /// [n_tokens][hidden]
    pub input: Vec<f32>,
    /// [n_tokens][top_k]; -1: no expert
    pub ids: Vec<i32>,
    /// [n_tokens][top_k]
    pub weights: Vec<f32>,
    /// [n_tokens][hidden]: written (or added to, with `accumulate`) by the job
    pub output: Vec<f32>,
    pub top_k: usize,
    pub accumulate: bool,
}

/// The routed experts of one MoE layer, computed on the CPU:
/// `out[t] = sum_k w[t][k] * down_e(silu(gate_e x[t]) * up_e x[t])` with `e = ids[t][k]`.
pub struct ExpertPool {
    raw: NonNull<sys::kt_expert_pool>,
    hidden: usize,
    intermediate: usize,
    n_experts: usize,
}

// SAFETY: kt.h: every pool function may be called from any thread (calls on one pool are serialized inside kt) and
// error messages are kept per thread; only kt_expert_pool_free must not race with other calls, which Drop's
// exclusive access guarantees.
unsafe impl Send for ExpertPool {}
unsafe impl Sync for ExpertPool {}

impl ExpertPool {
    pub fn new(params: &ExpertPoolParams) -> Result<ExpertPool> {
        let mut p = unsafe { std::mem::zeroed::<sys::kt_expert_pool_params>() };
        unsafe { sys::kt_expert_pool_params_init(&mut p) };
        p.n_experts = params.n_experts;
        p.hidden_size = params.hidden_size;
        p.intermediate_size = params.intermediate_size;
        p.max_tokens = params.max_tokens;
        p.max_top_k = params.max_top_k;
        p.n_threads = params.n_threads;
        p.max_in_flight = params.max_in_flight;
        match params.weight_format {
            WeightFormat::AsSource => p.weight_format = sys::KT_EXPERT_WEIGHTS_AS_SOURCE,
            WeightFormat::Int8 => p.weight_format = sys::KT_EXPERT_WEIGHTS_INT8,
            WeightFormat::Int4 { group } => {
                p.weight_format = sys::KT_EXPERT_WEIGHTS_INT4;
                p.int4_group_size = group;
            }
            WeightFormat::Bf16 => p.weight_format = sys::KT_EXPERT_WEIGHTS_BF16,
        }
        let mut raw = ptr::null_mut();
        let mut err = new_error_struct();
        let status = unsafe { sys::kt_expert_pool_create(&p, &mut raw, &mut err) };
        if status != sys::KT_STATUS_OK {
            return Err(from_error_struct(status, &err));
        }
        Ok(ExpertPool {
            raw: NonNull::new(raw).expect("kt_expert_pool_create succeeded with NULL"),
            hidden: params.hidden_size as usize,
            intermediate: params.intermediate_size as usize,
            n_experts: params.n_experts as usize,
        })
    }

    fn check(&self, status: i32) -> Result<()> {
        if status == sys::KT_STATUS_OK {
            return Ok(());
        }
        // Read on the thread whose call failed: kt keeps a shared pool's messages per thread.
        Err(Error::new(status, unsafe { owned_string(sys::kt_expert_pool_last_error(self.raw.as_ptr())) }))
    }

    /// Loads blk.<layer>.ffn_{gate,up,down}_exps of a model.
    pub fn load_model(&self, model: &Model, layer: i32) -> Result<()> {
        self.check(unsafe { sys::kt_expert_pool_load_model(self.raw.as_ptr(), model.as_ptr(), layer) })
    }

    /// Loads every expert: gate and up [n_experts][intermediate][hidden], down [n_experts][hidden][intermediate].
    pub fn load(&self, gate: Weights<'_>, up: Weights<'_>, down: Weights<'_>) -> Result<()> {
        self.load_experts(0, self.n_experts, gate, up, down)
    }

    /// Loads experts [first, first + count): the weights hold those experts only.
    pub fn load_experts(
        &self,
        first: usize,
        count: usize,
        gate: Weights<'_>,
        up: Weights<'_>,
        down: Weights<'_>,
    ) -> Result<()> {
        // kt reads exactly the bytes the shapes need: check the slices hold them, so it never reads past one.
        let need = |w: &Weights<'_>, rows: usize, cols: usize, what: &str| -> Result<()> {
            let (block, bytes) = unsafe { (sys::kt_type_block_size(w.ty), sys::kt_type_block_bytes(w.ty)) };
            if block <= 0 || cols % block as usize != 0 {
                return Err(Error::new(
                    sys::KT_STATUS_UNSUPPORTED,
                    format!("{}: type {} for rows of {}", what, w.ty, cols),
                ));
            }
            let n = rows * (cols / block as usize) * bytes as usize;
            if w.data.len() != n {
                return Err(invalid(format!(
                    "{}: {} bytes given, {} experts of type {} need {}",
                    what,
                    w.data.len(),
                    count,
                    type_name(w.ty).unwrap_or("?"),
                    n
                )));
            }
            Ok(())
        };
        let (h, i) = (self.hidden, self.intermediate);
        need(&gate, count * i, h, "gate")?;
        need(&up, count * i, h, "up")?;
        need(&down, count * h, i, "down")?;
        let w = sys::kt_expert_weights {
            struct_size: std::mem::size_of::<sys::kt_expert_weights>() as u32,
            gate_type: gate.ty,
            up_type: up.ty,
            down_type: down.ty,
            gate: gate.data.as_ptr() as *const c_void,
            up: up.data.as_ptr() as *const c_void,
            down: down.data.as_ptr() as *const c_void,
        };
        self.check(unsafe { sys::kt_expert_pool_load_experts(self.raw.as_ptr(), &w, first as i32, count as i32) })
    }

    /// `mask[e]`: expert e is computed elsewhere (the pool skips it); `None` clears the mask.
    pub fn set_mask(&self, mask: Option<&[bool]>) -> Result<()> {
        let bytes: Option<Vec<u8>> = mask.map(|m| m.iter().map(|&b| b as u8).collect());
        let (p, n) = match &bytes {
            Some(b) => (b.as_ptr(), b.len() as i32),
            None => (ptr::null(), self.n_experts as i32),
        };
        self.check(unsafe { sys::kt_expert_pool_set_mask(self.raw.as_ptr(), p, n) })
    }

    fn forward_args(
        &self,
        input: &[f32],
        ids: &[i32],
        weights: &[f32],
        top_k: usize,
        output: &mut [f32],
        accumulate: bool,
    ) -> Result<sys::kt_expert_forward> {
        let n_tokens = if self.hidden == 0 { 0 } else { input.len() / self.hidden };
        if input.len() != n_tokens * self.hidden
            || output.len() != input.len()
            || top_k == 0
            || ids.len() != n_tokens * top_k
            || weights.len() != ids.len()
        {
            return Err(invalid(format!(
                "expert call: input {} and output {} floats must be tokens x hidden {}, ids {} and weights {} tokens x top_k {}",
                input.len(), output.len(), self.hidden, ids.len(), weights.len(), top_k)));
        }
        let mut f = unsafe { std::mem::zeroed::<sys::kt_expert_forward>() };
        unsafe { sys::kt_expert_forward_init(&mut f) };
        f.n_tokens = n_tokens as i32;
        f.top_k = top_k as i32;
        f.accumulate = accumulate as i32;
        f.input = input.as_ptr() as *const c_void;
        f.expert_ids = ids.as_ptr() as *const c_void;
        f.expert_weights = weights.as_ptr();
        f.output = output.as_mut_ptr() as *mut c_void;
        Ok(f)
    }

    /// Computes one call now (after queued jobs): `output` = (or += with `accumulate`) the weighted expert sum.
    pub fn forward(
        &self,
        input: &[f32],
        ids: &[i32],
        weights: &[f32],
        top_k: usize,
        output: &mut [f32],
        accumulate: bool,
    ) -> Result<()> {
        let f = self.forward_args(input, ids, weights, top_k, output, accumulate)?;
        self.check(unsafe { sys::kt_expert_pool_forward(self.raw.as_ptr(), &f) })
    }

    /// Queues a call and returns at once (blocking while `max_in_flight` jobs are pending). The job's buffers stay
    /// with the returned [`Pending`] until [`Pending::wait`] gives them back (dropping it waits too).
    pub fn submit(&self, mut job: Job) -> Result<Pending<'_>> {
        let mut output = std::mem::take(&mut job.output);
        let f = self.forward_args(&job.input, &job.ids, &job.weights, job.top_k, &mut output, job.accumulate)?;
        job.output = output; // moving a Vec keeps its heap buffer where kt will write
        let mut ticket = 0u64;
        self.check(unsafe { sys::kt_expert_pool_submit(self.raw.as_ptr(), &f, &mut ticket) })?;
        Ok(Pending { pool: self, ticket, job: Some(job) })
    }

    pub fn info(&self) -> Result<PoolInfo> {
        let mut raw = unsafe { std::mem::zeroed::<sys::kt_expert_pool_info>() };
        raw.struct_size = std::mem::size_of::<sys::kt_expert_pool_info>() as u32;
        self.check(unsafe { sys::kt_expert_pool_get_info(self.raw.as_ptr(), &mut raw) })?;
        Ok(PoolInfo {
            isa: raw.isa,
            n_threads: raw.n_threads,
            n_numa_groups: raw.n_numa_groups,
            loaded: raw.loaded != 0,
            weight_bytes: raw.weight_bytes,
            kernels: unsafe { owned_string(raw.kernels) },
            weight_formats: unsafe { owned_string(raw.weight_formats) },
            description: unsafe { owned_string(raw.description) },
        })
    }
}

impl Drop for ExpertPool {
    fn drop(&mut self) {
        unsafe { sys::kt_expert_pool_free(self.raw.as_ptr()) }
    }
}

/// A submitted [`Job`]. Its buffers cannot be reached until the job is waited for, so kt can write its output
/// while the caller does other work; forgetting a `Pending` leaks them rather than freeing memory kt still uses.
pub struct Pending<'p> {
    pool: &'p ExpertPool,
    ticket: u64,
    job: Option<Job>,
}

impl Pending<'_> {
    /// Waits for this job (and every job before it) and gives its buffers back, output filled.
    pub fn wait(mut self) -> Result<Job> {
        let status = unsafe { sys::kt_expert_pool_wait(self.pool.raw.as_ptr(), self.ticket) };
        let job = self.job.take().expect("a pending job has its buffers");
        self.pool.check(status)?;
        Ok(job)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.job.is_some() {
            unsafe { sys::kt_expert_pool_wait(self.pool.raw.as_ptr(), self.ticket) };
        }
    }
}

// ------------------------------------------------------------------------------------------------------------
// Writing GGUF files

/// A tensor an architecture needs, as [`GgufWriter::expected_tensors`] lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    /// `sys::KT_TENSOR_ROLE_*`
    pub role: i32,
    pub optional: bool,
    pub ne: Vec<i64>,
}

/// Metadata and tensors collected, then written as a GGUF v3 file atomically.
pub struct GgufWriter {
    raw: NonNull<sys::kt_gguf_writer>,
}

// SAFETY: kt.h: a writer is used by one thread at a time (every method takes &mut self) and is bound to no thread.
unsafe impl Send for GgufWriter {}

unsafe extern "C" fn spec_trampoline(spec: *const sys::kt_tensor_spec, user_data: *mut c_void) -> i32 {
    let out = &mut *(user_data as *mut Vec<TensorSpec>);
    let s = &*spec;
    guarded(1, || {
        out.push(TensorSpec {
            name: owned_string(s.name),
            role: s.role,
            optional: s.optional != 0,
            ne: s.ne[..s.n_dims as usize].to_vec(),
        });
        0
    })
}

impl GgufWriter {
    /// `alignment` of the tensor data: a power of two in [8, 2^30], or 0 for GGUF's default of 32.
    pub fn new(alignment: u32) -> Result<GgufWriter> {
        let mut raw = ptr::null_mut();
        let mut err = new_error_struct();
        let status = unsafe { sys::kt_gguf_writer_create_v2(alignment, &mut raw, &mut err) };
        if status != sys::KT_STATUS_OK {
            return Err(from_error_struct(status, &err));
        }
        Ok(GgufWriter { raw: NonNull::new(raw).expect("kt_gguf_writer_create_v2 succeeded with NULL") })
    }

    fn check(&self, status: i32) -> Result<()> {
        if status == sys::KT_STATUS_OK {
            return Ok(());
        }
        Err(Error::new(status, unsafe { owned_string(sys::kt_gguf_writer_last_error(self.raw.as_ptr())) }))
    }

    /// Runs a setter on `key`: kt copies the value, and refuses a duplicate or bad key with a message naming it.
    fn set(&mut self, key: &str, call: impl FnOnce(*mut sys::kt_gguf_writer, *const c_char) -> i32) -> Result<()> {
        let k = c_string(key, "key")?;
        self.check(call(self.raw.as_ptr(), k.as_ptr()))
    }

    /// An integer of GGUF type `meta_type` (`sys::KT_META_UINT32`, ...); see kt.h for the ranges.
    pub fn set_int(&mut self, key: &str, meta_type: i32, value: i64) -> Result<()> {
        self.set(key, |w, k| unsafe { sys::kt_gguf_writer_set_int(w, k, meta_type, value) })
    }
    pub fn set_u32(&mut self, key: &str, value: u32) -> Result<()> {
        self.set_int(key, sys::KT_META_UINT32, value as i64)
    }
    pub fn set_u64(&mut self, key: &str, value: u64) -> Result<()> {
        self.set(key, |w, k| unsafe { sys::kt_gguf_writer_set_uint64(w, k, value) })
    }
    pub fn set_f32(&mut self, key: &str, value: f32) -> Result<()> {
        self.set(key, |w, k| unsafe { sys::kt_gguf_writer_set_float(w, k, sys::KT_META_FLOAT32, value as f64) })
    }
    pub fn set_f64(&mut self, key: &str, value: f64) -> Result<()> {
        self.set(key, |w, k| unsafe { sys::kt_gguf_writer_set_float(w, k, sys::KT_META_FLOAT64, value) })
    }
    pub fn set_bool(&mut self, key: &str, value: bool) -> Result<()> {
        self.set(key, |w, k| unsafe { sys::kt_gguf_writer_set_bool(w, k, value as i32) })
    }
    pub fn set_string(&mut self, key: &str, value: &str) -> Result<()> {
        let (p, n) = (value.as_ptr() as *const c_char, value.len() as u64);
        self.set(key, |w, k| unsafe { sys::kt_gguf_writer_set_string(w, k, p, n) })
    }
    fn set_array<T>(&mut self, key: &str, element_type: i32, values: &[T]) -> Result<()> {
        let (p, n) = (values.as_ptr() as *const c_void, values.len() as u64);
        self.set(key, |w, k| unsafe { sys::kt_gguf_writer_set_array(w, k, element_type, p, n) })
    }
    pub fn set_array_i32(&mut self, key: &str, values: &[i32]) -> Result<()> {
        self.set_array(key, sys::KT_META_INT32, values)
    }
    pub fn set_array_f32(&mut self, key: &str, values: &[f32]) -> Result<()> {
        self.set_array(key, sys::KT_META_FLOAT32, values)
    }
    pub fn set_array_string(&mut self, key: &str, values: &[&str]) -> Result<()> {
        let ptrs: Vec<*const c_char> = values.iter().map(|v| v.as_ptr() as *const c_char).collect();
        let lengths: Vec<u64> = values.iter().map(|v| v.len() as u64).collect();
        self.set(key, |w, k| unsafe {
            sys::kt_gguf_writer_set_array_string(w, k, ptrs.as_ptr(), lengths.as_ptr(), values.len() as u64)
        })
    }

    /// A tensor of type `ty` and shape `ne` (GGML order), its bytes copied from `data` (exactly the tensor's size).
    pub fn add_tensor(&mut self, name: &str, ty: i32, ne: &[i64], data: &[u8]) -> Result<()> {
        let n = c_string(name, "tensor name")?;
        self.check(unsafe {
            sys::kt_gguf_writer_add_tensor(
                self.raw.as_ptr(),
                n.as_ptr(),
                ty,
                ne.len() as i32,
                ne.as_ptr(),
                data.as_ptr() as *const c_void,
                data.len() as u64,
            )
        })
    }

    /// f32 values stored as type `ty` (quantized by kt along ne[0]).
    pub fn add_tensor_f32(&mut self, name: &str, ty: i32, ne: &[i64], values: &[f32]) -> Result<()> {
        let row = *ne.first().ok_or_else(|| invalid("a tensor needs at least one dimension"))? as usize;
        let bytes = quantize(ty, values, row)?;
        self.add_tensor(name, ty, ne, &bytes)
    }

    /// Writes everything added so far to `path` atomically; the writer may write again.
    pub fn write(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let p = path_string(path.as_ref())?;
        self.check(unsafe { sys::kt_gguf_writer_write_file(self.raw.as_ptr(), p.as_ptr()) })
    }

    /// The tensors kt needs for the model the metadata so far describes.
    pub fn expected_tensors(&self) -> Result<Vec<TensorSpec>> {
        let mut out: Vec<TensorSpec> = Vec::new();
        self.check(unsafe {
            sys::kt_gguf_writer_expected_tensors(
                self.raw.as_ptr(),
                Some(spec_trampoline),
                &mut out as *mut Vec<TensorSpec> as *mut c_void,
            )
        })?;
        Ok(out)
    }
}

impl Drop for GgufWriter {
    fn drop(&mut self) {
        unsafe { sys::kt_gguf_writer_free(self.raw.as_ptr()) }
    }
}
