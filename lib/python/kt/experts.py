"""KTMoEWrapper: kt's expert pool with the Python shape of KTransformers' kt-kernel wrapper (kt_kernel.experts), so an
engine written against kt-kernel's API (SGLang's KTEPWrapperMethod and the like) can use kt instead.

    wrapper = KTMoEWrapper(layer_idx=3, num_experts=128, num_experts_per_tok=8, hidden_size=2048,
                           moe_intermediate_size=768, gpu_experts_mask=mask, cpuinfer_threads=32,
                           threadpool_count=2, weight_path="model.gguf", chunked_prefill_size=512,
                           max_deferred_experts_per_token=0, method="AMXINT8")
    wrapper.load_weights()                      # blk.3.ffn_*_exps of weight_path; or load_weights_from_tensors(...)
    wrapper.submit_forward(hidden_states, topk_ids, topk_weights, stream)
    ...                                         # the GPU works meanwhile
    out = wrapper.sync_forward(hidden_states, stream)

Arrays are NumPy arrays or CPU torch tensors (float32 or bfloat16 hidden states; the output has the input's type
and kind). How kt-kernel's arguments map onto kt:
  - method: AMXINT8 / MOE_INT8 -> int8 weights; AMXINT4 / RAWINT4 / MOE_INT4 -> int4 (groups of 128); BF16 -> bf16;
    LLAMAFILE -> the GGUF file's own quantization. kt picks AMX, AVX-512 or AVX2 kernels at run time for each.
    Other methods (FP8, GPTQ, MXFP4 ...) raise ValueError.
  - cpuinfer_threads: the pool's threads (0: one per physical core); threadpool_count > 1 (or numa_nodes): one worker
    group per NUMA node, the intermediate dimension split across them, as kt-kernel's subpools do.
  - gpu_experts_mask (bool [num_experts]) or num_gpu_experts (the first N): experts the GPU computes, skipped here.
    The mask is read again at every submit_forward, so updating the array in place takes effect, as in kt-kernel.
  - chunked_prefill_size: the most tokens per kt call; longer batches are split.
  - max_deferred_experts_per_token: kt-kernel's deferral. Per batch, the experts among each token's top
    (k - max_deferred) by weight run now; the others run as a second job whose result sync_forward of the next
    layer's wrapper (layer_idx + 1) adds to its own output, one layer late. 0 (default) defers nothing.
    Deferred results wait in a table of this module keyed by layer index, so wrappers of one model per process.
  - cuda_stream arguments are accepted and unused: kt computes on the CPU and sync_forward returns host memory;
    cpu_save is accepted and does nothing (kt converts weights at load and writes no converted copy).
"""
import os

import numpy as np

from . import (WEIGHTS_AS_SOURCE, WEIGHTS_BF16, WEIGHTS_INT4, WEIGHTS_INT8, Error, ExpertPool, Model,
               STATUS_INVALID_ARGUMENT, STATUS_MISUSE, _as_numpy)

_METHODS = {"AMXINT8": WEIGHTS_INT8, "MOE_INT8": WEIGHTS_INT8, "AMXINT4": WEIGHTS_INT4, "RAWINT4": WEIGHTS_INT4,
            "MOE_INT4": WEIGHTS_INT4, "BF16": WEIGHTS_BF16, "LLAMAFILE": WEIGHTS_AS_SOURCE}

# Deferred results waiting for the next layer: layer index -> (pool, ticket, output array).
_deferred = {}


def _to_host(array, dtype=np.float32):
    """float32 NumPy data of a NumPy array or CPU torch tensor (bfloat16 widened exactly)."""
    data, kind = _as_numpy(array)
    if data.dtype == np.uint16:  # bfloat16 bits
        return (data.astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(data, dtype=dtype)


def _like(result, template):
    """`result` (float32 NumPy) as the kind and dtype of `template` (NumPy array or torch tensor)."""
    if hasattr(template, "detach"):
        import torch
        return torch.from_numpy(result).to(template.dtype)
    return result.astype(template.dtype, copy=False)


class KTMoEWrapper:
    """One MoE layer's routed experts on kt's CPU expert engine, with kt-kernel's constructor and methods."""

    def __init__(self, layer_idx, num_experts, num_experts_per_tok, hidden_size, moe_intermediate_size,
                 gpu_experts_mask=None, cpuinfer_threads=0, threadpool_count=1, weight_path=None,
                 chunked_prefill_size=512, max_deferred_experts_per_token=0, method="AMXINT8", num_gpu_experts=None,
                 numa_nodes=None, swiglu_limit=0.0, swiglu_alpha=0.0, cpu_save=False, mode="inference"):
        if method not in _METHODS:
            raise ValueError(f"method {method!r} is not one kt runs (kt: {', '.join(sorted(_METHODS))})")
        if mode != "inference":
            raise ValueError("kt runs inference only (mode='inference')")
        if not 0 <= max_deferred_experts_per_token < num_experts_per_tok:
            raise ValueError(f"max_deferred_experts_per_token {max_deferred_experts_per_token} must be in "
                             f"[0, num_experts_per_tok {num_experts_per_tok})")
        self.layer_idx = layer_idx
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.hidden_size = hidden_size
        self.moe_intermediate_size = moe_intermediate_size
        self.weight_path = weight_path
        self.chunked_prefill_size = chunked_prefill_size
        self.max_deferred_experts_per_token = max_deferred_experts_per_token
        self.method = method
        if gpu_experts_mask is None and num_gpu_experts:
            gpu_experts_mask = np.arange(num_experts) < num_gpu_experts
        self.gpu_experts_mask = gpu_experts_mask
        self._applied_mask = None
        if numa_nodes is None and threadpool_count > 1:
            numa_nodes = list(range(threadpool_count))
        self._pool = ExpertPool(num_experts, hidden_size, moe_intermediate_size, weight_format=_METHODS[method],
                                max_tokens=chunked_prefill_size, max_top_k=num_experts_per_tok,
                                n_threads=cpuinfer_threads, numa_nodes=numa_nodes, swiglu_limit=swiglu_limit,
                                swiglu_alpha=swiglu_alpha)
        self._submitted = None  # (ticket, output, template) of the call in flight

    # ---- weights

    def load_weights_from_tensors(self, gate_proj, up_proj, down_proj, physical_to_logical_map=None):
        """gate and up [num_experts, moe_intermediate_size, hidden_size], down [num_experts, hidden_size,
        moe_intermediate_size], float32 / float16 / bfloat16, indexed by logical expert; physical expert p computes
        logical expert physical_to_logical_map[p] (None: the identity)."""
        weights = [w if physical_to_logical_map is None else self._reorder(w, physical_to_logical_map)
                   for w in (gate_proj, up_proj, down_proj)]
        self._pool.load(*weights)

    def load_weights(self, physical_to_logical_map=None):
        """Loads blk.<layer_idx>.ffn_{gate,up,down}_exps from weight_path (a GGUF file, any type kt reads)."""
        if not self.weight_path or not os.path.exists(self.weight_path):
            raise Error(STATUS_INVALID_ARGUMENT, f"weight_path {self.weight_path!r} is not a GGUF file")
        with Model(self.weight_path) as model:
            if physical_to_logical_map is None:
                self._pool.load_model(model, self.layer_idx)
                return
            names = [f"blk.{self.layer_idx}.ffn_{p}_exps.weight" for p in ("gate", "up", "down")]
            self.load_weights_from_tensors(*[model.tensor_f32(n) for n in names],
                                           physical_to_logical_map=physical_to_logical_map)

    @staticmethod
    def _reorder(weights, physical_to_logical_map):
        data, _ = _as_numpy(weights)
        index = np.asarray(_to_host(physical_to_logical_map, np.int64), dtype=np.int64)
        return np.ascontiguousarray(data[index])

    # ---- forward

    def _sync_mask(self):
        mask = self.gpu_experts_mask
        current = None if mask is None else _to_host(mask, np.float32) != 0
        if (current is None) != (self._applied_mask is None) or (
                current is not None and not np.array_equal(current, self._applied_mask)):
            self._pool.set_mask(current)
            self._applied_mask = current

    def _split_deferred(self, ids, weights):
        """kt-kernel's rule: the experts among each token's top (k - max_deferred) by weight are immediate for the
        whole batch; the other slots are deferred. Gives (immediate ids, deferred ids), -1 where a slot is not."""
        protected_k = self.num_experts_per_tok - self.max_deferred_experts_per_token
        order = np.argsort(-weights, axis=1, kind="stable")[:, :protected_k]
        protected = np.zeros(self.num_experts, dtype=bool)
        top = np.take_along_axis(ids, order, axis=1)
        protected[top[top >= 0]] = True
        immediate = np.where((ids >= 0) & protected[np.clip(ids, 0, None)], ids, -1)
        deferred = np.where((ids >= 0) & ~protected[np.clip(ids, 0, None)], ids, -1)
        return immediate, deferred

    def submit_forward(self, hidden_states, topk_ids, topk_weights, cuda_stream=None):
        """Queues the layer's expert computation for hidden_states [T, hidden_size] with topk_ids / topk_weights
        [T, num_experts_per_tok]; returns at once."""
        if self._submitted is not None:
            raise Error(STATUS_MISUSE, f"layer {self.layer_idx}: submit_forward twice without sync_forward")
        x = _to_host(hidden_states)
        ids = np.ascontiguousarray(_to_host(topk_ids, np.int64), dtype=np.int64)
        w = _to_host(topk_weights)
        if x.ndim != 2 or ids.shape != (x.shape[0], self.num_experts_per_tok) or w.shape != ids.shape:
            raise Error(STATUS_INVALID_ARGUMENT, f"layer {self.layer_idx}: hidden states {x.shape}, ids {ids.shape}, "
                        f"weights {w.shape} (want [T, {self.hidden_size}] and [T, {self.num_experts_per_tok}])")
        self._sync_mask()
        immediate, deferred = (ids, None) if self.max_deferred_experts_per_token == 0 else \
            self._split_deferred(ids, w)
        out = np.zeros_like(x)
        ticket = self._submit_chunks(x, immediate, w, out)
        if deferred is not None:
            later = np.zeros_like(x)
            _deferred[self.layer_idx + 1] = (self._pool, self._submit_chunks(x, deferred, w, later), later)
        self._submitted = (ticket, out, hidden_states)

    def _submit_chunks(self, x, ids, w, out):
        """Submits [T, ...] in chunks of chunked_prefill_size tokens (views into x, ids, w and out, held by the pool
        until waited for); gives the last ticket, which waits for them all."""
        ticket = 0
        for t0 in range(0, x.shape[0], self.chunked_prefill_size):
            t1 = min(t0 + self.chunked_prefill_size, x.shape[0])
            ticket = self._pool.submit(x[t0:t1], ids[t0:t1], w[t0:t1], out[t0:t1])
        return ticket

    def sync_forward(self, hidden_states=None, cuda_stream=None):
        """Waits for the submitted computation and gives its output [T, hidden_size], as hidden_states' kind and
        dtype, plus the previous layer's deferred experts when it deferred some."""
        if self._submitted is None:
            raise Error(STATUS_MISUSE, f"layer {self.layer_idx}: sync_forward without submit_forward")
        ticket, out, template = self._submitted
        self._submitted = None
        if ticket:
            self._pool.wait(ticket)
        late = _deferred.pop(self.layer_idx, None)
        if late is not None:
            pool, late_ticket, late_out = late
            pool.wait(late_ticket)
            if late_out.shape == out.shape:
                out += late_out
        return _like(out, hidden_states if hidden_states is not None else template)

    def forward(self, hidden_states, topk_ids, topk_weights, cuda_stream=None):
        """submit_forward then sync_forward."""
        self.submit_forward(hidden_states, topk_ids, topk_weights, cuda_stream)
        return self.sync_forward(hidden_states, cuda_stream)

    def close(self):
        self._pool.close()
