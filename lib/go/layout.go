package kt

// The layout cgo gives each kt.h struct, for the test that compares it with tests/api/kt_layout.h (test files cannot
// use cgo). The binding passes these C structs to kt as they are, so their layout is the C compiler's.

/*
#include <kt.h>
*/
import "C"

import "unsafe"

type fieldLayout struct {
	name         string
	offset, size uintptr
}

type structLayout struct {
	name   string
	size   uintptr
	fields []fieldLayout
}

func cLayouts() []structLayout {
	var errorStruct C.kt_error
	var modelParamsStruct C.kt_model_params
	var tensorInfoStruct C.kt_tensor_info
	var tensorSpecStruct C.kt_tensor_spec
	var contextParamsStruct C.kt_context_params
	var samplerParamsStruct C.kt_sampler_params
	var generateParamsStruct C.kt_generate_params
	var perfStruct C.kt_perf
	var rooflineStruct C.kt_roofline
	var expertPoolParamsStruct C.kt_expert_pool_params
	var expertWeightsStruct C.kt_expert_weights
	var expertForwardStruct C.kt_expert_forward
	var expertPoolInfoStruct C.kt_expert_pool_info
	var vocabInfoStruct C.kt_vocab_info
	var chatMessageStruct C.kt_chat_message
	var chatParamsStruct C.kt_chat_params
	return []structLayout{
		{"kt_error", unsafe.Sizeof(errorStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(errorStruct.struct_size), unsafe.Sizeof(errorStruct.struct_size)},
			{"status", unsafe.Offsetof(errorStruct.status), unsafe.Sizeof(errorStruct.status)},
			{"message", unsafe.Offsetof(errorStruct.message), unsafe.Sizeof(errorStruct.message)},
		}},
		{"kt_model_params", unsafe.Sizeof(modelParamsStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(modelParamsStruct.struct_size), unsafe.Sizeof(modelParamsStruct.struct_size)},
			{"use_mmap", unsafe.Offsetof(modelParamsStruct.use_mmap), unsafe.Sizeof(modelParamsStruct.use_mmap)},
			{"prefetch", unsafe.Offsetof(modelParamsStruct.prefetch), unsafe.Sizeof(modelParamsStruct.prefetch)},
			{"reserved0", unsafe.Offsetof(modelParamsStruct.reserved0), unsafe.Sizeof(modelParamsStruct.reserved0)},
			{"progress_callback", unsafe.Offsetof(modelParamsStruct.progress_callback), unsafe.Sizeof(modelParamsStruct.progress_callback)},
			{"progress_user_data", unsafe.Offsetof(modelParamsStruct.progress_user_data), unsafe.Sizeof(modelParamsStruct.progress_user_data)},
			{"prepare", unsafe.Offsetof(modelParamsStruct.prepare), unsafe.Sizeof(modelParamsStruct.prepare)},
			{"n_threads", unsafe.Offsetof(modelParamsStruct.n_threads), unsafe.Sizeof(modelParamsStruct.n_threads)},
			{"pack_cache", unsafe.Offsetof(modelParamsStruct.pack_cache), unsafe.Sizeof(modelParamsStruct.pack_cache)},
			{"reserved1", unsafe.Offsetof(modelParamsStruct.reserved1), unsafe.Sizeof(modelParamsStruct.reserved1)},
			{"pack_cache_path", unsafe.Offsetof(modelParamsStruct.pack_cache_path), unsafe.Sizeof(modelParamsStruct.pack_cache_path)},
			{"device", unsafe.Offsetof(modelParamsStruct.device), unsafe.Sizeof(modelParamsStruct.device)},
			{"device_index", unsafe.Offsetof(modelParamsStruct.device_index), unsafe.Sizeof(modelParamsStruct.device_index)},
			{"device_budget_bytes", unsafe.Offsetof(modelParamsStruct.device_budget_bytes), unsafe.Sizeof(modelParamsStruct.device_budget_bytes)},
			{"device_experts", unsafe.Offsetof(modelParamsStruct.device_experts), unsafe.Sizeof(modelParamsStruct.device_experts)},
			{"device_expert_counts", unsafe.Offsetof(modelParamsStruct.device_expert_counts), unsafe.Sizeof(modelParamsStruct.device_expert_counts)},
			{"device_expert_counts_len", unsafe.Offsetof(modelParamsStruct.device_expert_counts_len), unsafe.Sizeof(modelParamsStruct.device_expert_counts_len)},
			{"device_deferred_experts", unsafe.Offsetof(modelParamsStruct.device_deferred_experts), unsafe.Sizeof(modelParamsStruct.device_deferred_experts)},
			{"device_prefill_threshold", unsafe.Offsetof(modelParamsStruct.device_prefill_threshold), unsafe.Sizeof(modelParamsStruct.device_prefill_threshold)},
		}},
		{"kt_tensor_info", unsafe.Sizeof(tensorInfoStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(tensorInfoStruct.struct_size), unsafe.Sizeof(tensorInfoStruct.struct_size)},
			{"type", unsafe.Offsetof(tensorInfoStruct._type), unsafe.Sizeof(tensorInfoStruct._type)},
			{"n_dims", unsafe.Offsetof(tensorInfoStruct.n_dims), unsafe.Sizeof(tensorInfoStruct.n_dims)},
			{"reserved0", unsafe.Offsetof(tensorInfoStruct.reserved0), unsafe.Sizeof(tensorInfoStruct.reserved0)},
			{"ne", unsafe.Offsetof(tensorInfoStruct.ne), unsafe.Sizeof(tensorInfoStruct.ne)},
			{"n_elements", unsafe.Offsetof(tensorInfoStruct.n_elements), unsafe.Sizeof(tensorInfoStruct.n_elements)},
			{"n_bytes", unsafe.Offsetof(tensorInfoStruct.n_bytes), unsafe.Sizeof(tensorInfoStruct.n_bytes)},
			{"file_offset", unsafe.Offsetof(tensorInfoStruct.file_offset), unsafe.Sizeof(tensorInfoStruct.file_offset)},
			{"name", unsafe.Offsetof(tensorInfoStruct.name), unsafe.Sizeof(tensorInfoStruct.name)},
		}},
		{"kt_tensor_spec", unsafe.Sizeof(tensorSpecStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(tensorSpecStruct.struct_size), unsafe.Sizeof(tensorSpecStruct.struct_size)},
			{"role", unsafe.Offsetof(tensorSpecStruct.role), unsafe.Sizeof(tensorSpecStruct.role)},
			{"optional", unsafe.Offsetof(tensorSpecStruct.optional), unsafe.Sizeof(tensorSpecStruct.optional)},
			{"n_dims", unsafe.Offsetof(tensorSpecStruct.n_dims), unsafe.Sizeof(tensorSpecStruct.n_dims)},
			{"ne", unsafe.Offsetof(tensorSpecStruct.ne), unsafe.Sizeof(tensorSpecStruct.ne)},
			{"name", unsafe.Offsetof(tensorSpecStruct.name), unsafe.Sizeof(tensorSpecStruct.name)},
		}},
		{"kt_context_params", unsafe.Sizeof(contextParamsStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(contextParamsStruct.struct_size), unsafe.Sizeof(contextParamsStruct.struct_size)},
			{"n_threads", unsafe.Offsetof(contextParamsStruct.n_threads), unsafe.Sizeof(contextParamsStruct.n_threads)},
			{"n_ctx", unsafe.Offsetof(contextParamsStruct.n_ctx), unsafe.Sizeof(contextParamsStruct.n_ctx)},
			{"n_batch", unsafe.Offsetof(contextParamsStruct.n_batch), unsafe.Sizeof(contextParamsStruct.n_batch)},
			{"kv_type", unsafe.Offsetof(contextParamsStruct.kv_type), unsafe.Sizeof(contextParamsStruct.kv_type)},
			{"kernels", unsafe.Offsetof(contextParamsStruct.kernels), unsafe.Sizeof(contextParamsStruct.kernels)},
			{"abort_callback", unsafe.Offsetof(contextParamsStruct.abort_callback), unsafe.Sizeof(contextParamsStruct.abort_callback)},
			{"abort_user_data", unsafe.Offsetof(contextParamsStruct.abort_user_data), unsafe.Sizeof(contextParamsStruct.abort_user_data)},
		}},
		{"kt_sampler_params", unsafe.Sizeof(samplerParamsStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(samplerParamsStruct.struct_size), unsafe.Sizeof(samplerParamsStruct.struct_size)},
			{"temperature", unsafe.Offsetof(samplerParamsStruct.temperature), unsafe.Sizeof(samplerParamsStruct.temperature)},
			{"top_k", unsafe.Offsetof(samplerParamsStruct.top_k), unsafe.Sizeof(samplerParamsStruct.top_k)},
			{"top_p", unsafe.Offsetof(samplerParamsStruct.top_p), unsafe.Sizeof(samplerParamsStruct.top_p)},
			{"min_p", unsafe.Offsetof(samplerParamsStruct.min_p), unsafe.Sizeof(samplerParamsStruct.min_p)},
			{"repeat_penalty", unsafe.Offsetof(samplerParamsStruct.repeat_penalty), unsafe.Sizeof(samplerParamsStruct.repeat_penalty)},
			{"repeat_last_n", unsafe.Offsetof(samplerParamsStruct.repeat_last_n), unsafe.Sizeof(samplerParamsStruct.repeat_last_n)},
			{"presence_penalty", unsafe.Offsetof(samplerParamsStruct.presence_penalty), unsafe.Sizeof(samplerParamsStruct.presence_penalty)},
			{"frequency_penalty", unsafe.Offsetof(samplerParamsStruct.frequency_penalty), unsafe.Sizeof(samplerParamsStruct.frequency_penalty)},
			{"reserved0", unsafe.Offsetof(samplerParamsStruct.reserved0), unsafe.Sizeof(samplerParamsStruct.reserved0)},
			{"seed", unsafe.Offsetof(samplerParamsStruct.seed), unsafe.Sizeof(samplerParamsStruct.seed)},
		}},
		{"kt_generate_params", unsafe.Sizeof(generateParamsStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(generateParamsStruct.struct_size), unsafe.Sizeof(generateParamsStruct.struct_size)},
			{"reserved0", unsafe.Offsetof(generateParamsStruct.reserved0), unsafe.Sizeof(generateParamsStruct.reserved0)},
			{"max_tokens", unsafe.Offsetof(generateParamsStruct.max_tokens), unsafe.Sizeof(generateParamsStruct.max_tokens)},
			{"stop_tokens", unsafe.Offsetof(generateParamsStruct.stop_tokens), unsafe.Sizeof(generateParamsStruct.stop_tokens)},
			{"n_stop_tokens", unsafe.Offsetof(generateParamsStruct.n_stop_tokens), unsafe.Sizeof(generateParamsStruct.n_stop_tokens)},
			{"sampler", unsafe.Offsetof(generateParamsStruct.sampler), unsafe.Sizeof(generateParamsStruct.sampler)},
			{"on_token", unsafe.Offsetof(generateParamsStruct.on_token), unsafe.Sizeof(generateParamsStruct.on_token)},
			{"user_data", unsafe.Offsetof(generateParamsStruct.user_data), unsafe.Sizeof(generateParamsStruct.user_data)},
		}},
		{"kt_perf", unsafe.Sizeof(perfStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(perfStruct.struct_size), unsafe.Sizeof(perfStruct.struct_size)},
			{"reserved0", unsafe.Offsetof(perfStruct.reserved0), unsafe.Sizeof(perfStruct.reserved0)},
			{"n_prefill_tokens", unsafe.Offsetof(perfStruct.n_prefill_tokens), unsafe.Sizeof(perfStruct.n_prefill_tokens)},
			{"prefill_seconds", unsafe.Offsetof(perfStruct.prefill_seconds), unsafe.Sizeof(perfStruct.prefill_seconds)},
			{"n_decode_tokens", unsafe.Offsetof(perfStruct.n_decode_tokens), unsafe.Sizeof(perfStruct.n_decode_tokens)},
			{"decode_seconds", unsafe.Offsetof(perfStruct.decode_seconds), unsafe.Sizeof(perfStruct.decode_seconds)},
			{"attention_seconds", unsafe.Offsetof(perfStruct.attention_seconds), unsafe.Sizeof(perfStruct.attention_seconds)},
			{"experts_seconds", unsafe.Offsetof(perfStruct.experts_seconds), unsafe.Sizeof(perfStruct.experts_seconds)},
			{"dense_ffn_seconds", unsafe.Offsetof(perfStruct.dense_ffn_seconds), unsafe.Sizeof(perfStruct.dense_ffn_seconds)},
			{"head_seconds", unsafe.Offsetof(perfStruct.head_seconds), unsafe.Sizeof(perfStruct.head_seconds)},
			{"other_seconds", unsafe.Offsetof(perfStruct.other_seconds), unsafe.Sizeof(perfStruct.other_seconds)},
		}},
		{"kt_roofline", unsafe.Sizeof(rooflineStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(rooflineStruct.struct_size), unsafe.Sizeof(rooflineStruct.struct_size)},
			{"n_threads", unsafe.Offsetof(rooflineStruct.n_threads), unsafe.Sizeof(rooflineStruct.n_threads)},
			{"buffer_bytes", unsafe.Offsetof(rooflineStruct.buffer_bytes), unsafe.Sizeof(rooflineStruct.buffer_bytes)},
			{"read_bytes_per_s", unsafe.Offsetof(rooflineStruct.read_bytes_per_s), unsafe.Sizeof(rooflineStruct.read_bytes_per_s)},
			{"int8_ops_per_s", unsafe.Offsetof(rooflineStruct.int8_ops_per_s), unsafe.Sizeof(rooflineStruct.int8_ops_per_s)},
			{"int8_isa", unsafe.Offsetof(rooflineStruct.int8_isa), unsafe.Sizeof(rooflineStruct.int8_isa)},
			{"bf16_flops_per_s", unsafe.Offsetof(rooflineStruct.bf16_flops_per_s), unsafe.Sizeof(rooflineStruct.bf16_flops_per_s)},
			{"bf16_isa", unsafe.Offsetof(rooflineStruct.bf16_isa), unsafe.Sizeof(rooflineStruct.bf16_isa)},
		}},
		{"kt_expert_pool_params", unsafe.Sizeof(expertPoolParamsStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(expertPoolParamsStruct.struct_size), unsafe.Sizeof(expertPoolParamsStruct.struct_size)},
			{"n_experts", unsafe.Offsetof(expertPoolParamsStruct.n_experts), unsafe.Sizeof(expertPoolParamsStruct.n_experts)},
			{"hidden_size", unsafe.Offsetof(expertPoolParamsStruct.hidden_size), unsafe.Sizeof(expertPoolParamsStruct.hidden_size)},
			{"intermediate_size", unsafe.Offsetof(expertPoolParamsStruct.intermediate_size), unsafe.Sizeof(expertPoolParamsStruct.intermediate_size)},
			{"max_tokens", unsafe.Offsetof(expertPoolParamsStruct.max_tokens), unsafe.Sizeof(expertPoolParamsStruct.max_tokens)},
			{"max_top_k", unsafe.Offsetof(expertPoolParamsStruct.max_top_k), unsafe.Sizeof(expertPoolParamsStruct.max_top_k)},
			{"weight_format", unsafe.Offsetof(expertPoolParamsStruct.weight_format), unsafe.Sizeof(expertPoolParamsStruct.weight_format)},
			{"int4_group_size", unsafe.Offsetof(expertPoolParamsStruct.int4_group_size), unsafe.Sizeof(expertPoolParamsStruct.int4_group_size)},
			{"input_type", unsafe.Offsetof(expertPoolParamsStruct.input_type), unsafe.Sizeof(expertPoolParamsStruct.input_type)},
			{"output_type", unsafe.Offsetof(expertPoolParamsStruct.output_type), unsafe.Sizeof(expertPoolParamsStruct.output_type)},
			{"n_threads", unsafe.Offsetof(expertPoolParamsStruct.n_threads), unsafe.Sizeof(expertPoolParamsStruct.n_threads)},
			{"numa_policy", unsafe.Offsetof(expertPoolParamsStruct.numa_policy), unsafe.Sizeof(expertPoolParamsStruct.numa_policy)},
			{"n_numa_nodes", unsafe.Offsetof(expertPoolParamsStruct.n_numa_nodes), unsafe.Sizeof(expertPoolParamsStruct.n_numa_nodes)},
			{"numa_nodes", unsafe.Offsetof(expertPoolParamsStruct.numa_nodes), unsafe.Sizeof(expertPoolParamsStruct.numa_nodes)},
			{"swiglu_limit", unsafe.Offsetof(expertPoolParamsStruct.swiglu_limit), unsafe.Sizeof(expertPoolParamsStruct.swiglu_limit)},
			{"swiglu_alpha", unsafe.Offsetof(expertPoolParamsStruct.swiglu_alpha), unsafe.Sizeof(expertPoolParamsStruct.swiglu_alpha)},
			{"max_in_flight", unsafe.Offsetof(expertPoolParamsStruct.max_in_flight), unsafe.Sizeof(expertPoolParamsStruct.max_in_flight)},
			{"spin_microseconds", unsafe.Offsetof(expertPoolParamsStruct.spin_microseconds), unsafe.Sizeof(expertPoolParamsStruct.spin_microseconds)},
			{"private_threads", unsafe.Offsetof(expertPoolParamsStruct.private_threads), unsafe.Sizeof(expertPoolParamsStruct.private_threads)},
		}},
		{"kt_expert_weights", unsafe.Sizeof(expertWeightsStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(expertWeightsStruct.struct_size), unsafe.Sizeof(expertWeightsStruct.struct_size)},
			{"gate_type", unsafe.Offsetof(expertWeightsStruct.gate_type), unsafe.Sizeof(expertWeightsStruct.gate_type)},
			{"up_type", unsafe.Offsetof(expertWeightsStruct.up_type), unsafe.Sizeof(expertWeightsStruct.up_type)},
			{"down_type", unsafe.Offsetof(expertWeightsStruct.down_type), unsafe.Sizeof(expertWeightsStruct.down_type)},
			{"gate", unsafe.Offsetof(expertWeightsStruct.gate), unsafe.Sizeof(expertWeightsStruct.gate)},
			{"up", unsafe.Offsetof(expertWeightsStruct.up), unsafe.Sizeof(expertWeightsStruct.up)},
			{"down", unsafe.Offsetof(expertWeightsStruct.down), unsafe.Sizeof(expertWeightsStruct.down)},
		}},
		{"kt_expert_forward", unsafe.Sizeof(expertForwardStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(expertForwardStruct.struct_size), unsafe.Sizeof(expertForwardStruct.struct_size)},
			{"n_tokens", unsafe.Offsetof(expertForwardStruct.n_tokens), unsafe.Sizeof(expertForwardStruct.n_tokens)},
			{"top_k", unsafe.Offsetof(expertForwardStruct.top_k), unsafe.Sizeof(expertForwardStruct.top_k)},
			{"ids_type", unsafe.Offsetof(expertForwardStruct.ids_type), unsafe.Sizeof(expertForwardStruct.ids_type)},
			{"accumulate", unsafe.Offsetof(expertForwardStruct.accumulate), unsafe.Sizeof(expertForwardStruct.accumulate)},
			{"reserved0", unsafe.Offsetof(expertForwardStruct.reserved0), unsafe.Sizeof(expertForwardStruct.reserved0)},
			{"input", unsafe.Offsetof(expertForwardStruct.input), unsafe.Sizeof(expertForwardStruct.input)},
			{"expert_ids", unsafe.Offsetof(expertForwardStruct.expert_ids), unsafe.Sizeof(expertForwardStruct.expert_ids)},
			{"expert_weights", unsafe.Offsetof(expertForwardStruct.expert_weights), unsafe.Sizeof(expertForwardStruct.expert_weights)},
			{"output", unsafe.Offsetof(expertForwardStruct.output), unsafe.Sizeof(expertForwardStruct.output)},
		}},
		{"kt_expert_pool_info", unsafe.Sizeof(expertPoolInfoStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(expertPoolInfoStruct.struct_size), unsafe.Sizeof(expertPoolInfoStruct.struct_size)},
			{"isa", unsafe.Offsetof(expertPoolInfoStruct.isa), unsafe.Sizeof(expertPoolInfoStruct.isa)},
			{"n_threads", unsafe.Offsetof(expertPoolInfoStruct.n_threads), unsafe.Sizeof(expertPoolInfoStruct.n_threads)},
			{"n_numa_groups", unsafe.Offsetof(expertPoolInfoStruct.n_numa_groups), unsafe.Sizeof(expertPoolInfoStruct.n_numa_groups)},
			{"loaded", unsafe.Offsetof(expertPoolInfoStruct.loaded), unsafe.Sizeof(expertPoolInfoStruct.loaded)},
			{"weight_bytes", unsafe.Offsetof(expertPoolInfoStruct.weight_bytes), unsafe.Sizeof(expertPoolInfoStruct.weight_bytes)},
			{"expert_bytes", unsafe.Offsetof(expertPoolInfoStruct.expert_bytes), unsafe.Sizeof(expertPoolInfoStruct.expert_bytes)},
			{"load_seconds", unsafe.Offsetof(expertPoolInfoStruct.load_seconds), unsafe.Sizeof(expertPoolInfoStruct.load_seconds)},
			{"kernels", unsafe.Offsetof(expertPoolInfoStruct.kernels), unsafe.Sizeof(expertPoolInfoStruct.kernels)},
			{"weight_formats", unsafe.Offsetof(expertPoolInfoStruct.weight_formats), unsafe.Sizeof(expertPoolInfoStruct.weight_formats)},
			{"description", unsafe.Offsetof(expertPoolInfoStruct.description), unsafe.Sizeof(expertPoolInfoStruct.description)},
		}},
		{"kt_vocab_info", unsafe.Sizeof(vocabInfoStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(vocabInfoStruct.struct_size), unsafe.Sizeof(vocabInfoStruct.struct_size)},
			{"kind", unsafe.Offsetof(vocabInfoStruct.kind), unsafe.Sizeof(vocabInfoStruct.kind)},
			{"n_tokens", unsafe.Offsetof(vocabInfoStruct.n_tokens), unsafe.Sizeof(vocabInfoStruct.n_tokens)},
			{"bos", unsafe.Offsetof(vocabInfoStruct.bos), unsafe.Sizeof(vocabInfoStruct.bos)},
			{"eos", unsafe.Offsetof(vocabInfoStruct.eos), unsafe.Sizeof(vocabInfoStruct.eos)},
			{"eot", unsafe.Offsetof(vocabInfoStruct.eot), unsafe.Sizeof(vocabInfoStruct.eot)},
			{"eom", unsafe.Offsetof(vocabInfoStruct.eom), unsafe.Sizeof(vocabInfoStruct.eom)},
			{"unk", unsafe.Offsetof(vocabInfoStruct.unk), unsafe.Sizeof(vocabInfoStruct.unk)},
			{"pad", unsafe.Offsetof(vocabInfoStruct.pad), unsafe.Sizeof(vocabInfoStruct.pad)},
			{"add_bos", unsafe.Offsetof(vocabInfoStruct.add_bos), unsafe.Sizeof(vocabInfoStruct.add_bos)},
			{"add_eos", unsafe.Offsetof(vocabInfoStruct.add_eos), unsafe.Sizeof(vocabInfoStruct.add_eos)},
			{"add_space_prefix", unsafe.Offsetof(vocabInfoStruct.add_space_prefix), unsafe.Sizeof(vocabInfoStruct.add_space_prefix)},
			{"pre", unsafe.Offsetof(vocabInfoStruct.pre), unsafe.Sizeof(vocabInfoStruct.pre)},
		}},
		{"kt_chat_message", unsafe.Sizeof(chatMessageStruct), []fieldLayout{
			{"role", unsafe.Offsetof(chatMessageStruct.role), unsafe.Sizeof(chatMessageStruct.role)},
			{"content", unsafe.Offsetof(chatMessageStruct.content), unsafe.Sizeof(chatMessageStruct.content)},
		}},
		{"kt_chat_params", unsafe.Sizeof(chatParamsStruct), []fieldLayout{
			{"struct_size", unsafe.Offsetof(chatParamsStruct.struct_size), unsafe.Sizeof(chatParamsStruct.struct_size)},
			{"add_generation_prompt", unsafe.Offsetof(chatParamsStruct.add_generation_prompt), unsafe.Sizeof(chatParamsStruct.add_generation_prompt)},
			{"template_name", unsafe.Offsetof(chatParamsStruct.template_name), unsafe.Sizeof(chatParamsStruct.template_name)},
			{"template_source", unsafe.Offsetof(chatParamsStruct.template_source), unsafe.Sizeof(chatParamsStruct.template_source)},
			{"extra_context_json", unsafe.Offsetof(chatParamsStruct.extra_context_json), unsafe.Sizeof(chatParamsStruct.extra_context_json)},
		}},
	}
}
