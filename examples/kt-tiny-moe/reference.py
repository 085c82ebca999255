"""An independent float64 NumPy forward pass of a qwen3moe GGUF, reading everything it needs (hyper-parameters
from the metadata, tensors dequantized by kt) through kt's C ABI. It shares no code with model.py: agreement
between the two checks the export (names, shapes, ne order, metadata) as well as the PyTorch model.

    KT_LIBRARY=build/src/libkt.so /usr/bin/python3 examples/kt-tiny-moe/reference.py MODEL.gguf [TOKEN_ID ...]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib", "python"))
import kt  # noqa: E402


class Qwen3MoeReference:
    def __init__(self, path):
        with kt.Model(path) as m:
            arch = m.architecture
            assert arch == "qwen3moe", arch
            g = lambda key: m.meta(f"{arch}.{key}")  # noqa: E731
            self.n_layers = g("block_count")
            self.n_heads = g("attention.head_count")
            self.n_kv = g("attention.head_count_kv")
            self.head_dim = g("attention.key_length")
            self.eps = g("attention.layer_norm_rms_epsilon")
            self.base = g("rope.freq_base")
            self.k = g("expert_used_count")
            assert g("rope.dimension_count") == self.head_dim
            self.w = {t.name: m.tensor_f32(t.index).astype(np.float64) for t in m.tensors()}
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])

    def _norm(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def _rope(self, x):  # x: [T, H, D], NEOX halves
        t, d = x.shape[0], x.shape[-1]
        theta = np.arange(t)[:, None] * self.base ** (-np.arange(d // 2) * 2.0 / d)[None, :]
        cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        a, b = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def forward(self, ids):
        """Returns (logits [T, V], route_gap [T]) where route_gap[t] is the smallest difference, over the
        layers, between the k-th and (k+1)-th largest router logit at position t."""
        w = self.w
        x = w["token_embd.weight"][np.asarray(ids)]
        t = x.shape[0]
        gap = np.full(t, np.inf)
        mask = np.triu(np.full((t, t), -np.inf), 1)
        for i in range(self.n_layers):
            p = f"blk.{i}."
            h = self._norm(x, w[p + "attn_norm.weight"])
            q = (h @ w[p + "attn_q.weight"].T).reshape(t, self.n_heads, self.head_dim)
            k = (h @ w[p + "attn_k.weight"].T).reshape(t, self.n_kv, self.head_dim)
            v = (h @ w[p + "attn_v.weight"].T).reshape(t, self.n_kv, self.head_dim)
            q = self._rope(self._norm(q, w[p + "attn_q_norm.weight"]))
            k = self._rope(self._norm(k, w[p + "attn_k_norm.weight"]))
            o = np.empty_like(q)
            for hq in range(self.n_heads):
                hk = hq // (self.n_heads // self.n_kv)
                s = q[:, hq] @ k[:, hk].T / np.sqrt(self.head_dim) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                o[:, hq] = (s / s.sum(-1, keepdims=True)) @ v[:, hk]
            x = x + o.reshape(t, -1) @ w[p + "attn_output.weight"].T

            h = self._norm(x, w[p + "ffn_norm.weight"])
            logits = h @ w[p + "ffn_gate_inp.weight"].T                      # [T, X]
            order = np.argsort(-logits, axis=-1, kind="stable")
            top = order[:, : self.k]
            srt = np.take_along_axis(logits, order, -1)
            gap = np.minimum(gap, srt[:, self.k - 1] - srt[:, self.k])
            prob = np.exp(logits - logits.max(-1, keepdims=True))
            prob /= prob.sum(-1, keepdims=True)
            out = np.zeros_like(x)
            for r in range(t):
                sel = np.take(prob[r], top[r])
                sel = sel / max(sel.sum(), 6.1035e-5)
                for e, we in zip(top[r], sel):
                    y = h[r]
                    g = w[p + "ffn_gate_exps.weight"][e] @ y
                    u = w[p + "ffn_up_exps.weight"][e] @ y
                    out[r] += we * (w[p + "ffn_down_exps.weight"][e] @ (g / (1 + np.exp(-g)) * u))
            x = x + out
        return self._norm(x, w["output_norm.weight"]) @ self.head.T, gap


def main():
    ref = Qwen3MoeReference(sys.argv[1])
    ids = [int(a) for a in sys.argv[2:]] or [0]
    logits, gap = ref.forward(ids)
    for pos, row in enumerate(logits):
        print(f"pos {pos}: argmax {int(row.argmax())} logit {row.max():.6f} route_gap {gap[pos]:.4f}")


if __name__ == "__main__":
    main()
