"""Checks bpe.py against llama.cpp: tokenizes the golden texts of shared/testdata/tokenizer/qwen3.expected.json
with the real Qwen3 vocabulary (qwen3.gguf, pre-tokenizer qwen2, read through kt's C ABI) and compares with
llama.cpp's ids. Entries with special-token parsing are skipped (bpe.py encodes plain text only), and so are texts containing a
USER_DEFINED token such as Qwen3's <think>: llama.cpp splits those out even without special-token parsing, a
rule of the special-token layer, which kt-tiny-moe's vocabulary (no user-defined tokens) never meets.

    KT_LIBRARY=build/src/libkt.so /usr/bin/python3 examples/kt-tiny-moe/check_bpe.py [TESTDATA_DIR]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "lib", "python"))
sys.path.insert(0, HERE)

import bpe  # noqa: E402
import kt  # noqa: E402


def main():
    testdata = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "shared", "testdata")
    folder = os.path.join(testdata, "tokenizer")
    with kt.Model(os.path.join(folder, "qwen3.gguf")) as vocab:
        assert vocab.meta("tokenizer.ggml.model") == "gpt2" and vocab.meta("tokenizer.ggml.pre") == "qwen2"
        tokens = vocab.meta("tokenizer.ggml.tokens")
        merges = [m.split(" ") for m in vocab.meta("tokenizer.ggml.merges")]
        types = vocab.meta("tokenizer.ggml.token_type")
    user_defined = [t for t, ty in zip(tokens, types) if ty == 4]
    tok = bpe.Tokenizer(tokens, merges)
    with open(os.path.join(folder, "qwen3.expected.json"), encoding="utf-8") as f:
        cases = [c for c in json.load(f) if not c["parse_special"]]
    skipped = [c for c in cases if any(u in c["text"] for u in user_defined)]
    cases = [c for c in cases if c not in skipped]
    failures = 0
    for case in cases:
        assert not case["add_bos"]
        ids = tok.encode(case["text"])
        if ids != case["ids"]:
            failures += 1
            print(f"MISMATCH {case['text']!r}:\n  bpe.py    {ids}\n  llama.cpp {case['ids']}")
        if case["roundtrip"] and tok.decode(ids) != case["text"]:
            failures += 1
            print(f"DECODE MISMATCH {case['text']!r}")
    print(f"{len(cases) - failures}/{len(cases)} golden texts tokenized exactly as llama.cpp does "
          f"({len(skipped)} skipped: they contain user-defined tokens)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
