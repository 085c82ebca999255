//! Every struct kt-sys declares has the layout C gives it: the sizes and offsets pinned in tests/api/kt_layout.h
//! (which the C99 API test checks against the C compiler). Every struct there must be here, and every field.
use kt_sys::*;
use std::collections::BTreeMap;
use std::mem::{size_of, MaybeUninit};

type Layout = (usize, Vec<(String, usize, usize)>); // size, (field, offset, size)

fn field_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

macro_rules! layouts {
    ($($ty:ident { $($field:ident),* $(,)? })*) => {{
        let mut all: BTreeMap<String, Layout> = BTreeMap::new();
        $(
            let value = MaybeUninit::<$ty>::uninit();
            let base = value.as_ptr();
            let mut fields = Vec::new();
            $(
                // SAFETY: addr_of! only computes the field's address inside the (uninitialised) value.
                let at = unsafe { std::ptr::addr_of!((*base).$field) };
                fields.push((stringify!($field).trim_start_matches("r#").to_string(),
                             at as usize - base as usize, field_size(at)));
            )*
            all.insert(stringify!($ty).to_string(), (size_of::<$ty>(), fields));
        )*
        all
    }};
}

fn rust_layouts() -> BTreeMap<String, Layout> {
    layouts! {
        kt_error { struct_size, status, message }
        kt_model_params { struct_size, use_mmap, prefetch, reserved0, progress_callback, progress_user_data, prepare,
                          n_threads, pack_cache, reserved1, pack_cache_path, device, device_index, device_budget_bytes, device_experts, device_expert_counts,
                          device_expert_counts_len, device_deferred_experts, device_prefill_threshold }
        kt_tensor_info { struct_size, r#type, n_dims, reserved0, ne, n_elements, n_bytes, file_offset, name }
        kt_tensor_spec { struct_size, role, optional, n_dims, ne, name }
        kt_context_params { struct_size, n_threads, n_ctx, n_batch, kv_type, kernels, abort_callback, abort_user_data }
        kt_sampler_params { struct_size, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                            presence_penalty, frequency_penalty, reserved0, seed }
        kt_generate_params { struct_size, reserved0, max_tokens, stop_tokens, n_stop_tokens, sampler, on_token,
                             user_data }
        kt_perf { struct_size, reserved0, n_prefill_tokens, prefill_seconds, n_decode_tokens, decode_seconds,
                  attention_seconds, experts_seconds, dense_ffn_seconds, head_seconds, other_seconds }
        kt_roofline { struct_size, n_threads, buffer_bytes, read_bytes_per_s, int8_ops_per_s, int8_isa,
                      bf16_flops_per_s, bf16_isa, amx_int8_ops_per_s, amx_bf16_flops_per_s }
        kt_expert_pool_params { struct_size, n_experts, hidden_size, intermediate_size, max_tokens, max_top_k,
                                weight_format, int4_group_size, input_type, output_type, n_threads, numa_policy,
                                n_numa_nodes, numa_nodes, swiglu_limit, swiglu_alpha, max_in_flight,
                                spin_microseconds, private_threads }
        kt_expert_weights { struct_size, gate_type, up_type, down_type, gate, up, down }
        kt_expert_forward { struct_size, n_tokens, top_k, ids_type, accumulate, reserved0, input, expert_ids,
                            expert_weights, output }
        kt_expert_pool_info { struct_size, isa, n_threads, n_numa_groups, loaded, weight_bytes, expert_bytes,
                              load_seconds, kernels, weight_formats, description, gemm_calls, gemm_int8_macs,
                              gemm_bf16_macs, amx_fallbacks }
        kt_gemm_counts { struct_size, reserved0, calls, int8_macs, bf16_macs, amx_fallbacks }
        kt_vocab_info { struct_size, kind, n_tokens, bos, eos, eot, eom, unk, pad, add_bos, add_eos,
                        add_space_prefix, pre }
        kt_chat_message { role, content }
        kt_chat_params { struct_size, add_generation_prompt, template_name, template_source, extra_context_json }
    }
}

/// The table in kt_layout.h: KT_LAYOUT_STRUCT(name, size) and KT_LAYOUT_FIELD(name, field, offset, size) lines.
fn c_layouts() -> BTreeMap<String, Layout> {
    let path = std::env::var("KT_LAYOUT_H")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../tests/api/kt_layout.h").to_string());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e));
    let mut all: BTreeMap<String, Layout> = BTreeMap::new();
    for line in text.lines() {
        let (kind, rest) = match line.strip_prefix("KT_LAYOUT_STRUCT(") {
            Some(rest) => ("struct", rest),
            None => match line.strip_prefix("KT_LAYOUT_FIELD(") {
                Some(rest) => ("field", rest),
                None => continue,
            },
        };
        let args: Vec<&str> = rest.trim_end_matches(')').split(',').map(str::trim).collect();
        if kind == "struct" {
            all.insert(args[0].to_string(), (args[1].parse().unwrap(), Vec::new()));
        } else {
            let entry = all.get_mut(args[0]).expect("a field before its struct");
            entry.1.push((args[1].to_string(), args[2].parse().unwrap(), args[3].parse().unwrap()));
        }
    }
    assert!(all.len() >= 16, "{}: only {} structs parsed", path, all.len());
    all
}

/// A struct kt-sys declares must be C's, or an older version of it: its fields the first fields of C's, at the same
/// offsets and sizes, and the same size when it has all of them (kt accepts an older struct's size: it is an older
/// caller). Structs kt.h has and kt-sys does not (added after kt-sys was written) are listed, not failures.
#[test]
fn every_struct_has_the_c_layout() {
    let (rust, c) = (rust_layouts(), c_layouts());
    for (name, (size, fields)) in &rust {
        let (c_size, c_fields) = c.get(name).unwrap_or_else(|| panic!("{} is not a struct of kt.h", name));
        assert!(
            fields.len() <= c_fields.len() && fields[..] == c_fields[..fields.len()],
            "{}: kt-sys fields {:?} are not a prefix of C's {:?}",
            name,
            fields,
            c_fields
        );
        if fields.len() == c_fields.len() {
            assert_eq!(size, c_size, "{}: kt-sys size differs from C's", name);
        } else {
            assert!(size <= c_size, "{}: kt-sys size {} beyond C's {}", name, size, c_size);
            println!("{}: kt-sys has an older version ({} of {} fields)", name, fields.len(), c_fields.len());
        }
    }
    for name in c.keys().filter(|n| !rust.contains_key(*n)) {
        println!("{} is in kt.h but not declared by kt-sys", name);
    }
    assert!(rust.len() >= 16);
}
