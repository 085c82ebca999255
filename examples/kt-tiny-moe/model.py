"""The qwen3moe architecture in PyTorch, written from the math llama.cpp and kt compute
(reference/gguf-and-quants.md §5.1-5.2), so that the exported tensors mean the same thing in kt:

    per layer:  h = x + Wo · Attn(RoPE_neox(QNorm(Wq·RMSNorm(x))), RoPE_neox(KNorm(Wk·RMSNorm(x))), Wv·RMSNorm(x))
                out = h + Σ_{i ∈ topk(p)} p_i / max(Σ_topk p, 6.1035e-5) · Wdown_i(silu(Wgate_i·y) ⊙ Wup_i·y),
                      y = RMSNorm(h),  p = softmax(Wrouter · y)
    head:       logits = Wout · RMSNorm(x_L)   (Wout is token_embd when the head is tied)

RMSNorm is x / sqrt(mean(x²) + eps) ⊙ w; Q/K norm is the same per head vector with shared weights {head_dim},
applied before RoPE; NEOX RoPE rotates (x[i], x[i + d/2]) by pos · base^(-2i/d); attention is causal with scale
1/sqrt(head_dim); no biases anywhere.

Parameter names and shapes are PyTorch's ([out, in]); `gguf_tensors()` maps them to GGUF names (whose ne order
is the reverse of these shapes).
"""
import dataclasses
import math

import torch
import torch.nn.functional as F

ROUTER_SUM_FLOOR = 6.1035e-5  # llama.cpp clamps the top-k probability sum from below by this before dividing


@dataclasses.dataclass
class Config:
    vocab_size: int = 4096
    hidden: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 64
    n_experts: int = 8
    n_experts_used: int = 2
    expert_ffn: int = 256
    context_length: int = 256
    rope_base: float = 10000.0
    rms_eps: float = 1e-6
    tied_head: bool = True


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_neox(x, base):
    """x: [B, T, H, D]; rotates (x[..., i], x[..., i + D/2]) by position · base^(-2i/D)."""
    t, d = x.shape[1], x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2.0 / d)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [T, D/2]
    cos = angle.cos().to(x.dtype)[None, :, None, :]
    sin = angle.sin().to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        e, q, kv = c.hidden, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        self.attn_norm = torch.nn.Parameter(torch.ones(e))
        self.wq = torch.nn.Parameter(torch.empty(q, e))                   # [H·Dk, E]
        self.wk = torch.nn.Parameter(torch.empty(kv, e))                  # [Hkv·Dk, E]
        self.wv = torch.nn.Parameter(torch.empty(kv, e))                  # [Hkv·Dk, E]
        self.wo = torch.nn.Parameter(torch.empty(e, q))                   # [E, H·Dk]
        self.q_norm = torch.nn.Parameter(torch.ones(c.head_dim))          # [Dk]
        self.k_norm = torch.nn.Parameter(torch.ones(c.head_dim))          # [Dk]
        self.ffn_norm = torch.nn.Parameter(torch.ones(e))
        self.router = torch.nn.Parameter(torch.empty(c.n_experts, e))     # [X, E]
        self.w_gate = torch.nn.Parameter(torch.empty(c.n_experts, c.expert_ffn, e))  # [X, Fe, E]
        self.w_up = torch.nn.Parameter(torch.empty(c.n_experts, c.expert_ffn, e))    # [X, Fe, E]
        self.w_down = torch.nn.Parameter(torch.empty(c.n_experts, e, c.expert_ffn))  # [X, E, Fe]

    def attention(self, x):
        c = self.c
        b, t, _ = x.shape
        h = rms_norm(x, self.attn_norm, c.rms_eps)
        q = (h @ self.wq.T).view(b, t, c.n_heads, c.head_dim)
        k = (h @ self.wk.T).view(b, t, c.n_kv_heads, c.head_dim)
        v = (h @ self.wv.T).view(b, t, c.n_kv_heads, c.head_dim)
        q = rope_neox(rms_norm(q, self.q_norm, c.rms_eps), c.rope_base)
        k = rope_neox(rms_norm(k, self.k_norm, c.rms_eps), c.rope_base)
        group = c.n_heads // c.n_kv_heads  # query head j uses kv head j // group
        k = k.repeat_interleave(group, dim=2)
        v = v.repeat_interleave(group, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # [B, H, T, Dk]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c.n_heads * c.head_dim)
        return x + o @ self.wo.T

    def moe(self, x, stats=None):
        """Routes every token to its top-k experts. `stats` (a list) receives (router probs, chosen ids) for the
        load-balancing loss and for the routing-gap report."""
        c = self.c
        shape = x.shape
        h = rms_norm(x, self.ffn_norm, c.rms_eps).reshape(-1, c.hidden)  # [N, E]
        router_logits = h @ self.router.T                                 # [N, X]
        probs = router_logits.softmax(-1)
        top_p, top_i = probs.topk(c.n_experts_used, dim=-1)               # [N, k]
        top_w = top_p / top_p.sum(-1, keepdim=True).clamp_min(ROUTER_SUM_FLOOR)
        if stats is not None:
            stats.append((router_logits, probs, top_i))
        out = torch.zeros_like(h)
        # unbind once: indexing the stacked weight per expert would make autograd build a full-size zero gradient
        # for every expert and add them up.
        gates, ups, downs = self.w_gate.unbind(0), self.w_up.unbind(0), self.w_down.unbind(0)
        for e in range(c.n_experts):
            token, slot = (top_i == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            y = h[token]
            y = (F.silu(y @ gates[e].T) * (y @ ups[e].T)) @ downs[e].T
            out.index_add_(0, token, y * top_w[token, slot, None])
        return x + out.view(shape)

    def forward(self, x, stats=None):
        return self.moe(self.attention(x), stats)


class Model(torch.nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.token_embd = torch.nn.Parameter(torch.empty(c.vocab_size, c.hidden))  # [V, E]
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c.n_layers))
        self.output_norm = torch.nn.Parameter(torch.ones(c.hidden))
        self.output = None if c.tied_head else torch.nn.Parameter(torch.empty(c.vocab_size, c.hidden))

    def init_weights(self, generator):
        """GPT-2 style: N(0, 0.02), the projections that write into the residual stream scaled down by
        1/sqrt(2·layers) so the residual does not grow with depth. Norm weights start at 1."""
        std = 0.02
        residual_std = std / math.sqrt(2 * self.c.n_layers)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                continue
            s = residual_std if name.endswith(("wo", "w_down")) else std
            with torch.no_grad():
                p.normal_(0.0, s, generator=generator)

    def head(self):
        return self.token_embd if self.output is None else self.output

    def forward(self, ids, stats=None):
        """ids: [B, T] int64 -> logits [B, T, V]."""
        x = self.token_embd[ids]
        for layer in self.layers:
            x = layer(x, stats)
        return rms_norm(x, self.output_norm, self.c.rms_eps) @ self.head().T

    # --------------------------------------------------------------------------------------------------------
    # GGUF naming: name -> tensor in PyTorch shape (GGUF's ne is the reverse)

    def gguf_tensors(self):
        out = {"token_embd.weight": self.token_embd, "output_norm.weight": self.output_norm}
        if self.output is not None:
            out["output.weight"] = self.output
        for i, l in enumerate(self.layers):
            p = f"blk.{i}."
            out.update({
                p + "attn_norm.weight": l.attn_norm,
                p + "attn_q.weight": l.wq,
                p + "attn_k.weight": l.wk,
                p + "attn_v.weight": l.wv,
                p + "attn_output.weight": l.wo,
                p + "attn_q_norm.weight": l.q_norm,
                p + "attn_k_norm.weight": l.k_norm,
                p + "ffn_norm.weight": l.ffn_norm,
                p + "ffn_gate_inp.weight": l.router,
                p + "ffn_gate_exps.weight": l.w_gate,
                p + "ffn_up_exps.weight": l.w_up,
                p + "ffn_down_exps.weight": l.w_down,
            })
        return out
