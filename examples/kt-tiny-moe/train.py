#!/usr/bin/python3
"""Trains kt-tiny-moe, a small qwen3moe language model, on the King James Bible, and exports it to GGUF with
kt's own writer. Every step is seeded; see README.md (the model card) for the exact commands.

    nice -n 19 /usr/bin/python3 examples/kt-tiny-moe/train.py            # the shipped model (see below)
    /usr/bin/python3 examples/kt-tiny-moe/train.py --tiny                # a one-minute smoke run into --work
    /usr/bin/python3 examples/kt-tiny-moe/train.py --export-only         # re-export the last checkpoint

Stages: read the corpus (corpus.py) -> learn a byte-level BPE on the training split (bpe.py) -> train
(model.py) -> save a checkpoint in --work -> export F32 and Q8_0 GGUFs, the run record and the parity
expectations (export.py). PyTorch runs on one thread: on the shared 2-core machines a second OpenMP thread
made every step several times slower, and one thread keeps the run reproducible. The shipped run took 78 minutes
on a 2-core machine shared with compilers and a fuzzer; a step takes about 1.4 s on an idle core (about 30 minutes).
"""
import argparse
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import bpe  # noqa: E402
import corpus  # noqa: E402
from model import Config, Model  # noqa: E402

BOS, EOS = "<|bos|>", "<|endoftext|>"

# The shipped run. Changing any value changes the model; record.json keeps the values a model was trained with.
SETTINGS = dict(
    seed=20260101,
    vocab_size=4096,                 # 256 bytes + 3838 merges + 2 special tokens
    model=dict(hidden=256, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=64, n_experts=8, n_experts_used=2,
               expert_ffn=128, context_length=512, rope_base=10000.0, rms_eps=1e-6, tied_head=True),
    steps=1200,
    batch=8,                         # sequences of context_length tokens: [BOS] + 511 tokens of the stream
    lr=2e-3, min_lr=2e-4, warmup=50, betas=(0.9, 0.95), weight_decay=0.1, grad_clip=1.0,
    aux_loss=0.01,                   # Switch-style load balancing: n_experts · Σ_e f_e · P_e
    eval_every=200, eval_chunks=16,
)

# A quick configuration to check the whole pipeline end to end.
TINY = dict(SETTINGS, vocab_size=512, steps=30, batch=4, warmup=5, eval_every=10, eval_chunks=4,
            model=dict(SETTINGS["model"], hidden=64, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=32,
                       n_experts=4, expert_ffn=32, context_length=128))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_tokenizer(merges):
    return bpe.Tokenizer.from_merges(merges, [BOS, EOS])


def encode_documents(tok, chapters):
    """The training stream: [BOS] chapter [EOS] for every chapter, concatenated."""
    stream = []
    for _, text in chapters:
        stream += [tok.specials[BOS]] + tok.encode(text) + [tok.specials[EOS]]
    return torch.tensor(stream, dtype=torch.int64)


def chunks(ids, context, bos):
    """Evaluation chunks: every full run of (context - 1) tokens, each prefixed with BOS. All text tokens of a
    chunk are scored (BOS predicts the first one). Returns [n_chunks, context]."""
    n = (context - 1)
    k = len(ids) // n
    body = torch.as_tensor(ids[: k * n], dtype=torch.int64).view(k, n)
    return torch.cat([torch.full((k, 1), bos, dtype=torch.int64), body], dim=1)


def chunk_nll(model, batch):
    """Sum of the negative log-likelihoods of every text token of each chunk: [n_chunks] (float64)."""
    with torch.no_grad():
        out = []
        for row in batch:
            logits = model(row[None, :-1])[0]
            logp = torch.log_softmax(logits.double(), dim=-1)
            out.append(-logp.gather(1, row[1:, None]).sum())
        return torch.stack(out)


def lr_at(step, s):
    if step < s["warmup"]:
        return s["lr"] * (step + 1) / s["warmup"]
    t = (step - s["warmup"]) / max(1, s["steps"] - s["warmup"])
    return s["min_lr"] + 0.5 * (s["lr"] - s["min_lr"]) * (1 + math.cos(math.pi * t))


def train(s, stream, held_batch, bos):
    cfg = Config(vocab_size=s["vocab_size"], **s["model"])
    torch.manual_seed(s["seed"])
    model = Model(cfg)
    model.init_weights(torch.Generator().manual_seed(s["seed"]))
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params} parameters ({n_params / 1e6:.2f} M)")

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=s["lr"], betas=s["betas"])
    sampler = torch.Generator().manual_seed(s["seed"] + 1)
    n_text = cfg.context_length - 1
    history = []
    t_start = time.time()
    for step in range(s["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, s)
        starts = torch.randint(0, len(stream) - n_text - 1, (s["batch"],), generator=sampler)
        window = torch.stack([stream[i: i + n_text + 1] for i in starts.tolist()])   # [B, n_text + 1]
        x = torch.cat([torch.full((s["batch"], 1), bos, dtype=torch.int64), window[:, :-1]], dim=1)
        y = window                                                                    # x[t] predicts y[t]
        stats = []
        logits = model(x, stats)
        lm_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size), y.reshape(-1))
        aux = 0.0
        for _, probs, top_i in stats:
            frac = torch.zeros(cfg.n_experts).index_add_(0, top_i.reshape(-1), torch.ones(top_i.numel()))
            frac = frac / top_i.numel()
            aux = aux + cfg.n_experts * (frac * probs.mean(0)).sum()
        aux = aux / len(stats)
        loss = lm_loss + s["aux_loss"] * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s["grad_clip"])
        opt.step()
        if step % 10 == 0 or step == s["steps"] - 1:
            elapsed = time.time() - t_start
            log(f"step {step:5d}  loss {lm_loss.item():.4f}  aux {float(aux):.4f}  lr {lr_at(step, s):.2e}  "
                f"{elapsed:7.0f} s")
        if (step + 1) % s["eval_every"] == 0 or step == s["steps"] - 1:
            model.eval()
            nll = chunk_nll(model, held_batch[: s["eval_chunks"]])
            model.train()
            ppl = math.exp(nll.sum().item() / (nll.numel() * n_text))
            history.append(dict(step=step + 1, train_loss=lm_loss.item(), heldout_ppl_subset=ppl,
                                seconds=time.time() - t_start))
            log(f"step {step + 1}: held-out perplexity (first {nll.numel()} chunks) {ppl:.3f}")
    return model, history, time.time() - t_start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="small smoke-test configuration; outputs go to --work")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "kt-tiny-moe"),
                    help="checkpoint and scratch directory (default: build/kt-tiny-moe)")
    ap.add_argument("--export-only", action="store_true", help="skip training; export the checkpoint in --work")
    ap.add_argument("--no-export", action="store_true", help="stop after saving the checkpoint")
    args = ap.parse_args()
    torch.set_num_threads(1)
    s = TINY if args.tiny else SETTINGS
    work = os.path.join(args.work, "tiny") if args.tiny else args.work
    os.makedirs(work, exist_ok=True)
    checkpoint = os.path.join(work, "checkpoint.pt")

    t0 = time.time()
    chapters, kjv_sha256 = corpus.read_kjv()
    train_chapters, held_chapters = corpus.split(chapters)
    log(f"corpus: {len(chapters)} chapters ({len(train_chapters)} training, {len(held_chapters)} held out), "
        f"sha256 {kjv_sha256}")

    if args.export_only:
        ck = torch.load(checkpoint)
        s = ck["settings"]
        merges = [tuple(m) for m in ck["merges"]]
    else:
        merges = bpe.train_merges((t for _, t in train_chapters), s["vocab_size"] - 256 - 2, log=log)
    tok = make_tokenizer(merges)
    assert len(tok.tokens) == s["vocab_size"]
    stream = encode_documents(tok, train_chapters)
    held_text = "".join(t for _, t in held_chapters)
    held_ids = tok.encode(held_text)
    context = s["model"]["context_length"]
    held_batch = chunks(held_ids, context, tok.specials[BOS])
    log(f"tokens: training stream {len(stream)}, held-out {len(held_ids)} ({held_batch.shape[0]} chunks of "
        f"{context - 1}); bytes per token {len(held_text) / len(held_ids):.2f}; prep {time.time() - t0:.0f} s")

    if args.export_only:
        model = Model(Config(vocab_size=s["vocab_size"], **s["model"]))
        model.load_state_dict(ck["state"])
        history, train_seconds = ck["history"], ck["train_seconds"]
    else:
        model, history, train_seconds = train(s, stream, held_batch, tok.specials[BOS])
        torch.save(dict(settings=s, merges=merges, state=model.state_dict(), history=history,
                        train_seconds=train_seconds), checkpoint)
        log(f"training took {train_seconds:.0f} s; checkpoint {checkpoint}")
    model.eval()
    if args.no_export:
        return

    import export  # noqa: E402  (needs libkt.so; imported late so training runs without it)
    export.export_all(model=model, tok=tok, settings=s, history=history, train_seconds=train_seconds,
                      kjv_sha256=kjv_sha256, held_chapters=held_chapters, held_ids=held_ids,
                      held_batch=held_batch, n_train_tokens=len(stream), chunk_nll=chunk_nll,
                      dest=work if args.tiny else None, log=log)


if __name__ == "__main__":
    main()
