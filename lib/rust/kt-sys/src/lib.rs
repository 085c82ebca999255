//! Raw declarations of kt's C ABI (`include/kt.h`): constants, `#[repr(C)]` structs laid out as C lays them out
//! (checked against `tests/api/kt_layout.h` by this crate's tests), opaque handles and the functions. Everything
//! here is `unsafe` to use and follows kt.h's rules; the `kt` crate is the safe API.
//!
//! kt.h marks the roofline probes, CUDA and the expert pool's tuning knobs EXPERIMENTAL: they are declared here as
//! they are, and may change in any minor version of kt.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_void};

pub const KT_VERSION_MAJOR: i32 = 0;
pub const KT_VERSION_MINOR: i32 = 1;
pub const KT_VERSION_PATCH: i32 = 0;
pub const KT_VERSION_NUMBER: i32 = KT_VERSION_MAJOR * 1_000_000 + KT_VERSION_MINOR * 1000 + KT_VERSION_PATCH;

pub type kt_status = i32;

pub const KT_STATUS_OK: i32 = 0;
pub const KT_STATUS_INVALID_ARGUMENT: i32 = 1;
pub const KT_STATUS_OUT_OF_MEMORY: i32 = 2;
pub const KT_STATUS_IO_ERROR: i32 = 3;
pub const KT_STATUS_INVALID_FILE: i32 = 4;
pub const KT_STATUS_UNSUPPORTED: i32 = 5;
pub const KT_STATUS_NOT_FOUND: i32 = 6;
pub const KT_STATUS_TYPE_MISMATCH: i32 = 7;
pub const KT_STATUS_BUFFER_TOO_SMALL: i32 = 8;
pub const KT_STATUS_CANCELLED: i32 = 9;
pub const KT_STATUS_MISUSE: i32 = 10;
pub const KT_STATUS_INTERNAL: i32 = 11;
pub const KT_STATUS_CONTEXT_FULL: i32 = 12;
pub const KT_ERROR_MESSAGE_CAPACITY: usize = 1024;
pub const KT_LOG_ERROR: i32 = 0;
pub const KT_LOG_WARN: i32 = 1;
pub const KT_LOG_INFO: i32 = 2;
pub const KT_LOG_DEBUG: i32 = 3;
pub const KT_TYPE_F32: i32 = 0;
pub const KT_TYPE_F16: i32 = 1;
pub const KT_TYPE_Q4_0: i32 = 2;
pub const KT_TYPE_Q4_1: i32 = 3;
pub const KT_TYPE_Q5_0: i32 = 6;
pub const KT_TYPE_Q5_1: i32 = 7;
pub const KT_TYPE_Q8_0: i32 = 8;
pub const KT_TYPE_Q8_1: i32 = 9;
pub const KT_TYPE_Q2_K: i32 = 10;
pub const KT_TYPE_Q3_K: i32 = 11;
pub const KT_TYPE_Q4_K: i32 = 12;
pub const KT_TYPE_Q5_K: i32 = 13;
pub const KT_TYPE_Q6_K: i32 = 14;
pub const KT_TYPE_Q8_K: i32 = 15;
pub const KT_TYPE_IQ4_NL: i32 = 20;
pub const KT_TYPE_IQ4_XS: i32 = 23;
pub const KT_TYPE_I8: i32 = 24;
pub const KT_TYPE_I16: i32 = 25;
pub const KT_TYPE_I32: i32 = 26;
pub const KT_TYPE_I64: i32 = 27;
pub const KT_TYPE_F64: i32 = 28;
pub const KT_TYPE_BF16: i32 = 30;
pub const KT_TYPE_MXFP4: i32 = 39;
pub const KT_META_UINT8: i32 = 0;
pub const KT_META_INT8: i32 = 1;
pub const KT_META_UINT16: i32 = 2;
pub const KT_META_INT16: i32 = 3;
pub const KT_META_UINT32: i32 = 4;
pub const KT_META_INT32: i32 = 5;
pub const KT_META_FLOAT32: i32 = 6;
pub const KT_META_BOOL: i32 = 7;
pub const KT_META_STRING: i32 = 8;
pub const KT_META_ARRAY: i32 = 9;
pub const KT_META_UINT64: i32 = 10;
pub const KT_META_INT64: i32 = 11;
pub const KT_META_FLOAT64: i32 = 12;
pub const KT_MAX_DIMS: usize = 4;
pub const KT_TENSOR_ROLE_EMBEDDING: i32 = 0;
pub const KT_TENSOR_ROLE_VECTOR: i32 = 1;
pub const KT_TENSOR_ROLE_MATRIX: i32 = 2;
pub const KT_TENSOR_ROLE_EXPERTS: i32 = 3;
pub const KT_KERNELS_AUTO: i32 = 0;
pub const KT_KERNELS_REFERENCE: i32 = 1;
pub const KT_LOGITS_NONE: i32 = 0;
pub const KT_LOGITS_LAST: i32 = 1;
pub const KT_LOGITS_ALL: i32 = 2;
pub const KT_STOP_MAX_TOKENS: i32 = 0;
pub const KT_STOP_TOKEN: i32 = 1;
pub const KT_STOP_CALLBACK: i32 = 2;
pub const KT_STOP_CONTEXT_FULL: i32 = 3;
pub const KT_ISA_SCALAR: i32 = 0;
pub const KT_ISA_AVX2: i32 = 1;
pub const KT_ISA_AVX512: i32 = 2;
pub const KT_ISA_AMX: i32 = 3;
pub const KT_EXPERT_WEIGHTS_AS_SOURCE: i32 = 0;
pub const KT_EXPERT_WEIGHTS_INT8: i32 = 1;
pub const KT_EXPERT_WEIGHTS_INT4: i32 = 2;
pub const KT_EXPERT_WEIGHTS_BF16: i32 = 3;
pub const KT_NUMA_AUTO: i32 = 0;
pub const KT_NUMA_OFF: i32 = 1;
pub const KT_NUMA_NODES: i32 = 2;
pub const KT_TOKEN_TYPE_UNDEFINED: i32 = 0;
pub const KT_TOKEN_TYPE_NORMAL: i32 = 1;
pub const KT_TOKEN_TYPE_UNKNOWN: i32 = 2;
pub const KT_TOKEN_TYPE_CONTROL: i32 = 3;
pub const KT_TOKEN_TYPE_USER_DEFINED: i32 = 4;
pub const KT_TOKEN_TYPE_UNUSED: i32 = 5;
pub const KT_TOKEN_TYPE_BYTE: i32 = 6;
pub const KT_TOKEN_NONE: i32 = -1;
pub const KT_VOCAB_BPE: i32 = 1;
pub const KT_VOCAB_SPM: i32 = 2;

// ---- opaque handles ----

macro_rules! opaque {
    ($($name:ident),*) => { $(
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )* };
}
opaque!(kt_model, kt_context, kt_expert_pool, kt_gguf_writer, kt_detokenizer);

// ---- callbacks (all return 0 to go on) ----

pub type kt_log_callback = Option<unsafe extern "C" fn(level: i32, message: *const c_char, user_data: *mut c_void)>;
pub type kt_progress_callback = Option<unsafe extern "C" fn(progress: f32, user_data: *mut c_void) -> i32>;
pub type kt_abort_callback = Option<unsafe extern "C" fn(user_data: *mut c_void) -> i32>;
pub type kt_token_callback = Option<unsafe extern "C" fn(token: i32, user_data: *mut c_void) -> i32>;
pub type kt_gguf_fill_callback =
    Option<unsafe extern "C" fn(dst: *mut c_void, n_bytes: u64, user_data: *mut c_void) -> i32>;
pub type kt_tensor_spec_callback =
    Option<unsafe extern "C" fn(spec: *const kt_tensor_spec, user_data: *mut c_void) -> i32>;

// ---- structs, in kt.h's order ----

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_error {
    pub struct_size: u32,
    pub status: kt_status,
    pub message: [c_char; KT_ERROR_MESSAGE_CAPACITY],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_model_params {
    pub struct_size: u32,
    pub use_mmap: i32,
    pub prefetch: i32,
    pub reserved0: i32,
    pub progress_callback: kt_progress_callback,
    pub progress_user_data: *mut c_void,
    pub prepare: i32,
    pub n_threads: i32,
    pub pack_cache: i32,
    pub reserved1: i32,
    pub pack_cache_path: *const c_char,
    pub device: i32,
    pub device_index: i32,
    pub device_budget_bytes: u64,
    pub device_experts: i64,
    pub device_expert_counts: *const u64,
    pub device_expert_counts_len: u64,
    pub device_deferred_experts: i32,
    pub device_prefill_threshold: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_tensor_info {
    pub struct_size: u32,
    pub r#type: i32,
    pub n_dims: i32,
    pub reserved0: i32,
    pub ne: [i64; KT_MAX_DIMS],
    pub n_elements: u64,
    pub n_bytes: u64,
    pub file_offset: u64,
    pub name: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_tensor_spec {
    pub struct_size: u32,
    pub role: i32,
    pub optional: i32,
    pub n_dims: i32,
    pub ne: [i64; KT_MAX_DIMS],
    pub name: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_context_params {
    pub struct_size: u32,
    pub n_threads: i32,
    pub n_ctx: i64,
    pub n_batch: i64,
    pub kv_type: i32,
    pub kernels: i32,
    pub abort_callback: kt_abort_callback,
    pub abort_user_data: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_sampler_params {
    pub struct_size: u32,
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub repeat_last_n: i32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub reserved0: u32,
    pub seed: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_generate_params {
    pub struct_size: u32,
    pub reserved0: i32,
    pub max_tokens: i64,
    pub stop_tokens: *const i32,
    pub n_stop_tokens: i64,
    pub sampler: *const kt_sampler_params,
    pub on_token: kt_token_callback,
    pub user_data: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_perf {
    pub struct_size: u32,
    pub reserved0: u32,
    pub n_prefill_tokens: i64,
    pub prefill_seconds: f64,
    pub n_decode_tokens: i64,
    pub decode_seconds: f64,
    pub attention_seconds: f64,
    pub experts_seconds: f64,
    pub dense_ffn_seconds: f64,
    pub head_seconds: f64,
    pub other_seconds: f64,
}

/// EXPERIMENTAL in kt.h.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_roofline {
    pub struct_size: u32,
    pub n_threads: i32,
    pub buffer_bytes: u64,
    pub read_bytes_per_s: f64,
    pub int8_ops_per_s: f64,
    pub int8_isa: [c_char; 16],
    pub bf16_flops_per_s: f64,
    pub bf16_isa: [c_char; 16],
    pub amx_int8_ops_per_s: f64,
    pub amx_bf16_flops_per_s: f64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_expert_pool_params {
    pub struct_size: u32,
    pub n_experts: i32,
    pub hidden_size: i32,
    pub intermediate_size: i32,
    pub max_tokens: i32,
    pub max_top_k: i32,
    pub weight_format: i32,
    pub int4_group_size: i32,
    pub input_type: i32,
    pub output_type: i32,
    pub n_threads: i32,
    pub numa_policy: i32,
    pub n_numa_nodes: i32,
    pub numa_nodes: *const i32,
    pub swiglu_limit: f32,
    pub swiglu_alpha: f32,
    pub max_in_flight: i32,
    /// EXPERIMENTAL in kt.h.
    pub spin_microseconds: i32,
    /// EXPERIMENTAL in kt.h.
    pub private_threads: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_expert_weights {
    pub struct_size: u32,
    pub gate_type: i32,
    pub up_type: i32,
    pub down_type: i32,
    pub gate: *const c_void,
    pub up: *const c_void,
    pub down: *const c_void,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_expert_forward {
    pub struct_size: u32,
    pub n_tokens: i32,
    pub top_k: i32,
    pub ids_type: i32,
    pub accumulate: i32,
    pub reserved0: i32,
    pub input: *const c_void,
    pub expert_ids: *const c_void,
    pub expert_weights: *const f32,
    pub output: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_expert_pool_info {
    pub struct_size: u32,
    pub isa: i32,
    pub n_threads: i32,
    pub n_numa_groups: i32,
    pub loaded: i32,
    pub weight_bytes: u64,
    pub expert_bytes: u64,
    pub load_seconds: f64,
    pub kernels: *const c_char,
    pub weight_formats: *const c_char,
    pub description: *const c_char,
    pub gemm_calls: [u64; 4],
    pub gemm_int8_macs: [u64; 4],
    pub gemm_bf16_macs: [u64; 4],
    pub amx_fallbacks: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_gemm_counts {
    pub struct_size: u32,
    pub reserved0: u32,
    pub calls: [u64; 4],
    pub int8_macs: [u64; 4],
    pub bf16_macs: [u64; 4],
    pub amx_fallbacks: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_vocab_info {
    pub struct_size: u32,
    pub kind: i32,
    pub n_tokens: i32,
    pub bos: i32,
    pub eos: i32,
    pub eot: i32,
    pub eom: i32,
    pub unk: i32,
    pub pad: i32,
    pub add_bos: i32,
    pub add_eos: i32,
    pub add_space_prefix: i32,
    pub pre: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct kt_chat_params {
    pub struct_size: u32,
    pub add_generation_prompt: i32,
    pub template_name: *const c_char,
    pub template_source: *const c_char,
    pub extra_context_json: *const c_char,
}

// ---- functions, in kt.h's order ----

extern "C" {
    pub fn kt_version_number() -> i32;
    pub fn kt_version_string() -> *const c_char;
    pub fn kt_build_info() -> *const c_char;
    pub fn kt_status_string(status: kt_status) -> *const c_char;
    pub fn kt_cuda_device_count(out_count: *mut i32) -> kt_status;
    pub fn kt_log_set(callback: kt_log_callback, user_data: *mut c_void, max_level: i32);
    pub fn kt_type_name(type_: i32) -> *const c_char;
    pub fn kt_type_block_size(type_: i32) -> i64;
    pub fn kt_type_block_bytes(type_: i32) -> i64;
    pub fn kt_model_params_init(params: *mut kt_model_params);
    pub fn kt_model_load(
        path: *const c_char,
        params: *const kt_model_params,
        out_model: *mut *mut kt_model,
        err: *mut kt_error,
    ) -> kt_status;
    pub fn kt_model_free(model: *mut kt_model);
    pub fn kt_model_last_error(model: *const kt_model) -> *const c_char;
    pub fn kt_model_gguf_version(model: *const kt_model) -> u32;
    pub fn kt_model_architecture(model: *const kt_model) -> *const c_char;
    pub fn kt_model_meta_count(model: *const kt_model) -> i64;
    pub fn kt_model_meta_key(model: *const kt_model, index: i64, out_key: *mut *const c_char) -> kt_status;
    pub fn kt_model_meta_type(
        model: *const kt_model,
        key: *const c_char,
        out_type: *mut i32,
        out_element_type: *mut i32,
    ) -> kt_status;
    pub fn kt_model_meta_get_int(model: *const kt_model, key: *const c_char, out_value: *mut i64) -> kt_status;
    pub fn kt_model_meta_get_float(model: *const kt_model, key: *const c_char, out_value: *mut f64) -> kt_status;
    pub fn kt_model_meta_get_string(
        model: *const kt_model,
        key: *const c_char,
        out_value: *mut *const c_char,
        out_length: *mut u64,
    ) -> kt_status;
    pub fn kt_model_meta_array_length(model: *const kt_model, key: *const c_char, out_length: *mut u64) -> kt_status;
    pub fn kt_model_meta_array_get_int(
        model: *const kt_model,
        key: *const c_char,
        index: u64,
        out_value: *mut i64,
    ) -> kt_status;
    pub fn kt_model_meta_array_get_float(
        model: *const kt_model,
        key: *const c_char,
        index: u64,
        out_value: *mut f64,
    ) -> kt_status;
    pub fn kt_model_meta_array_get_string(
        model: *const kt_model,
        key: *const c_char,
        index: u64,
        out_value: *mut *const c_char,
        out_length: *mut u64,
    ) -> kt_status;
    pub fn kt_model_tensor_count(model: *const kt_model) -> i64;
    pub fn kt_model_tensor_find(model: *const kt_model, name: *const c_char, out_index: *mut i64) -> kt_status;
    pub fn kt_model_tensor_info(model: *const kt_model, index: i64, out_info: *mut kt_tensor_info) -> kt_status;
    pub fn kt_model_tensor_read_f32(
        model: *const kt_model,
        index: i64,
        dst: *mut f32,
        dst_capacity: u64,
        out_needed: *mut u64,
    ) -> kt_status;
    pub fn kt_type_can_quantize(type_: i32) -> i32;
    pub fn kt_type_can_dequantize(type_: i32) -> i32;
    pub fn kt_quantize(
        type_: i32,
        src: *const f32,
        n_rows: i64,
        n_per_row: i64,
        dst: *mut c_void,
        dst_capacity: u64,
        out_bytes: *mut u64,
    ) -> kt_status;
    pub fn kt_dequantize(
        type_: i32,
        src: *const c_void,
        src_bytes: u64,
        n_rows: i64,
        n_per_row: i64,
        dst: *mut f32,
        dst_capacity: u64,
    ) -> kt_status;
    pub fn kt_gguf_writer_create(alignment: u32, out_writer: *mut *mut kt_gguf_writer) -> kt_status;
    pub fn kt_gguf_writer_create_v2(
        alignment: u32,
        out_writer: *mut *mut kt_gguf_writer,
        err: *mut kt_error,
    ) -> kt_status;
    pub fn kt_gguf_writer_free(writer: *mut kt_gguf_writer);
    pub fn kt_gguf_writer_last_error(writer: *const kt_gguf_writer) -> *const c_char;
    pub fn kt_gguf_writer_set_int(
        writer: *mut kt_gguf_writer,
        key: *const c_char,
        meta_type: i32,
        value: i64,
    ) -> kt_status;
    pub fn kt_gguf_writer_set_uint64(writer: *mut kt_gguf_writer, key: *const c_char, value: u64) -> kt_status;
    pub fn kt_gguf_writer_set_float(
        writer: *mut kt_gguf_writer,
        key: *const c_char,
        meta_type: i32,
        value: f64,
    ) -> kt_status;
    pub fn kt_gguf_writer_set_bool(writer: *mut kt_gguf_writer, key: *const c_char, value: i32) -> kt_status;
    pub fn kt_gguf_writer_set_string(
        writer: *mut kt_gguf_writer,
        key: *const c_char,
        value: *const c_char,
        length: u64,
    ) -> kt_status;
    pub fn kt_gguf_writer_set_array(
        writer: *mut kt_gguf_writer,
        key: *const c_char,
        element_type: i32,
        data: *const c_void,
        count: u64,
    ) -> kt_status;
    pub fn kt_gguf_writer_set_array_string(
        writer: *mut kt_gguf_writer,
        key: *const c_char,
        values: *const *const c_char,
        lengths: *const u64,
        count: u64,
    ) -> kt_status;
    pub fn kt_gguf_writer_add_tensor(
        writer: *mut kt_gguf_writer,
        name: *const c_char,
        type_: i32,
        n_dims: i32,
        ne: *const i64,
        data: *const c_void,
        n_bytes: u64,
    ) -> kt_status;
    pub fn kt_gguf_writer_add_tensor_fill(
        writer: *mut kt_gguf_writer,
        name: *const c_char,
        type_: i32,
        n_dims: i32,
        ne: *const i64,
        fill: kt_gguf_fill_callback,
        user_data: *mut c_void,
    ) -> kt_status;
    pub fn kt_gguf_writer_write_file(writer: *mut kt_gguf_writer, path: *const c_char) -> kt_status;
    pub fn kt_gguf_writer_expected_tensors(
        writer: *const kt_gguf_writer,
        callback: kt_tensor_spec_callback,
        user_data: *mut c_void,
    ) -> kt_status;
    pub fn kt_context_params_init(params: *mut kt_context_params);
    pub fn kt_context_create(
        model: *mut kt_model,
        params: *const kt_context_params,
        out_context: *mut *mut kt_context,
        err: *mut kt_error,
    ) -> kt_status;
    pub fn kt_context_free(context: *mut kt_context);
    pub fn kt_context_last_error(context: *const kt_context) -> *const c_char;
    pub fn kt_context_n_vocab(context: *const kt_context) -> i64;
    pub fn kt_context_n_threads(context: *const kt_context) -> i32;
    pub fn kt_context_n_ctx(context: *const kt_context) -> i64;
    pub fn kt_context_n_past(context: *const kt_context) -> i64;
    pub fn kt_context_kv_size(context: *const kt_context, out_bytes: *mut u64, out_bytes_per_position: *mut u64) -> kt_status;
    pub fn kt_context_decode(
        context: *mut kt_context,
        tokens: *const i32,
        n_tokens: i64,
        logits_mode: i32,
    ) -> kt_status;
    pub fn kt_context_logits(
        context: *mut kt_context,
        row: i64,
        out_logits: *mut *const f32,
        out_rows: *mut i64,
    ) -> kt_status;
    pub fn kt_context_reset(context: *mut kt_context);
    pub fn kt_sampler_params_init(params: *mut kt_sampler_params);
    pub fn kt_context_sample(
        context: *mut kt_context,
        params: *const kt_sampler_params,
        out_token: *mut i32,
    ) -> kt_status;
    pub fn kt_generate_params_init(params: *mut kt_generate_params);
    pub fn kt_context_generate(
        context: *mut kt_context,
        prompt: *const i32,
        n_prompt: i64,
        params: *const kt_generate_params,
        out_tokens: *mut i32,
        capacity: i64,
        out_n_tokens: *mut i64,
        out_stop_reason: *mut i32,
    ) -> kt_status;
    pub fn kt_context_perf(context: *const kt_context, out_perf: *mut kt_perf) -> kt_status;
    pub fn kt_context_perf_reset(context: *mut kt_context);
    pub fn kt_measure_roofline(n_threads: i32, buffer_bytes: u64, out: *mut kt_roofline) -> kt_status;
    pub fn kt_set_max_isa(level: i32) -> kt_status;
    pub fn kt_get_isa() -> i32;
    pub fn kt_get_gemm_counts(out: *mut kt_gemm_counts) -> kt_status;
    pub fn kt_get_host_isa() -> i32;
    pub fn kt_isa_name(level: i32) -> *const c_char;
    pub fn kt_expert_pool_params_init(params: *mut kt_expert_pool_params);
    pub fn kt_expert_pool_create(
        params: *const kt_expert_pool_params,
        out_pool: *mut *mut kt_expert_pool,
        err: *mut kt_error,
    ) -> kt_status;
    pub fn kt_expert_pool_free(pool: *mut kt_expert_pool);
    pub fn kt_expert_pool_last_error(pool: *const kt_expert_pool) -> *const c_char;
    pub fn kt_expert_pool_load_model(pool: *mut kt_expert_pool, model: *const kt_model, layer: i32) -> kt_status;
    pub fn kt_expert_pool_load(pool: *mut kt_expert_pool, weights: *const kt_expert_weights) -> kt_status;
    pub fn kt_expert_pool_load_experts(
        pool: *mut kt_expert_pool,
        weights: *const kt_expert_weights,
        first_expert: i32,
        n_experts: i32,
    ) -> kt_status;
    pub fn kt_expert_pool_set_mask(pool: *mut kt_expert_pool, mask: *const u8, n_experts: i32) -> kt_status;
    pub fn kt_expert_forward_init(args: *mut kt_expert_forward);
    pub fn kt_expert_pool_forward(pool: *mut kt_expert_pool, args: *const kt_expert_forward) -> kt_status;
    pub fn kt_expert_pool_submit(
        pool: *mut kt_expert_pool,
        args: *const kt_expert_forward,
        out_ticket: *mut u64,
    ) -> kt_status;
    pub fn kt_expert_pool_wait(pool: *mut kt_expert_pool, ticket: u64) -> kt_status;
    pub fn kt_expert_pool_get_info(pool: *const kt_expert_pool, out_info: *mut kt_expert_pool_info) -> kt_status;
    pub fn kt_vocab_get_info(model: *const kt_model, out_info: *mut kt_vocab_info) -> kt_status;
    pub fn kt_token_text(
        model: *const kt_model,
        token: i32,
        out_text: *mut *const c_char,
        out_length: *mut u64,
    ) -> kt_status;
    pub fn kt_token_type(model: *const kt_model, token: i32, out_type: *mut i32) -> kt_status;
    pub fn kt_token_is_eog(model: *const kt_model, token: i32, out_is_eog: *mut i32) -> kt_status;
    pub fn kt_token_find(model: *const kt_model, text: *const c_char, text_len: u64, out_token: *mut i32) -> kt_status;
    pub fn kt_tokenize(
        model: *const kt_model,
        text: *const c_char,
        text_len: u64,
        add_special: i32,
        parse_special: i32,
        tokens: *mut i32,
        capacity: i64,
        out_count: *mut i64,
    ) -> kt_status;
    pub fn kt_token_to_piece(
        model: *const kt_model,
        token: i32,
        special: i32,
        lstrip: i32,
        buf: *mut c_char,
        capacity: i64,
        out_length: *mut i64,
    ) -> kt_status;
    pub fn kt_detokenize(
        model: *const kt_model,
        tokens: *const i32,
        n_tokens: i64,
        remove_special: i32,
        unparse_special: i32,
        buf: *mut c_char,
        capacity: i64,
        out_length: *mut i64,
    ) -> kt_status;
    pub fn kt_detokenizer_create(
        model: *const kt_model,
        unparse_special: i32,
        out: *mut *mut kt_detokenizer,
        err: *mut kt_error,
    ) -> kt_status;
    pub fn kt_detokenizer_free(detokenizer: *mut kt_detokenizer);
    pub fn kt_detokenizer_push(
        detokenizer: *mut kt_detokenizer,
        token: i32,
        buf: *mut c_char,
        capacity: i64,
        out_length: *mut i64,
    ) -> kt_status;
    pub fn kt_detokenizer_flush(
        detokenizer: *mut kt_detokenizer,
        buf: *mut c_char,
        capacity: i64,
        out_length: *mut i64,
    ) -> kt_status;
    pub fn kt_detokenizer_last_error(detokenizer: *const kt_detokenizer) -> *const c_char;
    pub fn kt_chat_params_init(params: *mut kt_chat_params);
    pub fn kt_chat_apply_template(
        model: *const kt_model,
        messages: *const kt_chat_message,
        n_messages: i64,
        params: *const kt_chat_params,
        buf: *mut c_char,
        capacity: i64,
        out_length: *mut i64,
    ) -> kt_status;
}
