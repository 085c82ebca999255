"""Tests of kt's Python module (lib/python/kt) against libkt.so. Needs NumPy; uses torch where it is installed.

    KT_LIBRARY=build/src/libkt.so KT_TESTDATA_DIR=../shared/testdata /usr/bin/python3 lib/python/tests/test_kt.py

Struct layouts against tests/api/kt_layout.h; models, tokenizer, generation, the streaming detokenizer; expert
pools and KTMoEWrapper against a NumPy MoE FFN in float64; quantization and the GGUF writer.
"""
import os
import re
import sys
import tempfile
import threading
import unittest

import ctypes

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))

import kt  # noqa: E402
from kt.experts import KTMoEWrapper  # noqa: E402

TESTDATA = os.environ.get("KT_TESTDATA_DIR", os.path.join(ROOT, "..", "shared", "testdata"))
TINY_MODEL = os.environ.get("KT_TEST_MODEL", os.path.join(ROOT, "examples", "kt-tiny-moe", "kt-tiny-moe.q8_0.gguf"))
LAYOUT_H = os.environ.get("KT_LAYOUT_H", os.path.join(ROOT, "tests", "api", "kt_layout.h"))

try:
    import torch
except ImportError:
    torch = None


class LayoutTest(unittest.TestCase):
    def test_every_struct_matches_the_c_layout(self):
        want = {}
        with open(LAYOUT_H) as f:
            text = f.read()
        for kind, args in re.findall(r"^KT_LAYOUT_(STRUCT|FIELD)\(([^)]*)\)", text, re.M):
            a = [x.strip() for x in args.split(",")]
            if kind == "STRUCT":
                want[a[0]] = (int(a[1]), [])
            else:
                want[a[0]][1].append((a[1], int(a[2]), int(a[3])))
        # Each mirror must be C's struct or an older version of it (its fields a prefix of C's): kt accepts an older
        # struct's size. Structs kt.h has and the module does not mirror are not failures.
        for name, cls in kt.STRUCTS.items():
            self.assertIn(name, want)
            size, fields = want[name]
            have = [(f, getattr(cls, f).offset, getattr(cls, f).size) for f, _ in cls._fields_]
            self.assertEqual(have, fields[:len(have)], name)
            if len(have) == len(fields):
                self.assertEqual(ctypes.sizeof(cls), size, name)
            else:
                self.assertLessEqual(ctypes.sizeof(cls), size, name)
        self.assertGreaterEqual(len(kt.STRUCTS), 16)


class ModelTest(unittest.TestCase):
    def test_reads_metadata_and_tensors_of_a_golden_model(self):
        with kt.Model(os.path.join(TESTDATA, "models", "qwen3moe.f32.gguf")) as m:
            self.assertEqual(m.architecture, "qwen3moe")
            self.assertEqual(m.gguf_version, 3)
            self.assertEqual(m.meta("qwen3moe.block_count"), 2)
            self.assertAlmostEqual(m.meta("qwen3moe.attention.layer_norm_rms_epsilon"), 1e-6, places=12)
            self.assertEqual(m.meta("tokenizer.ggml.pre"), "qwen2")
            self.assertIs(m.meta("tokenizer.ggml.add_bos_token"), False)
            self.assertEqual(len(m.meta("tokenizer.ggml.tokens")), 512)
            self.assertIn("general.architecture", m.keys())
            self.assertNotIn("no.such.key", m)
            info = m.tensor_info("blk.0.ffn_down_exps.weight")
            self.assertEqual(info.ne, (32, 256, 8))
            self.assertEqual(info.shape, (8, 256, 32))
            w = m.tensor_f32("blk.0.ffn_down_exps.weight")
            self.assertEqual(w.shape, (8, 256, 32))
            self.assertTrue(np.isfinite(w).all())

    def test_errors_carry_status_and_message(self):
        with self.assertRaises(kt.Error) as cm:
            kt.Model(os.path.join(TESTDATA, "no-such-file.gguf"))
        self.assertEqual(cm.exception.status, 3)  # KT_STATUS_IO_ERROR
        self.assertIn("no-such-file.gguf", str(cm.exception))
        with kt.Model(os.path.join(TESTDATA, "models", "qwen3moe.f32.gguf")) as m:
            with self.assertRaises(kt.Error) as cm:
                m.meta("no.such.key")
            self.assertEqual(cm.exception.status, kt.STATUS_NOT_FOUND)
            with self.assertRaises(kt.Error):
                m.tensor_f32("no.such.tensor")


class QuantizeTest(unittest.TestCase):
    def test_q8_0_round_trip_is_within_half_a_step(self):
        x = np.random.default_rng(7).normal(size=(3, 64)).astype(np.float32)
        data = kt.quantize(kt.TYPE_Q8_0, x)
        self.assertEqual(len(data), 3 * 2 * 34)
        y = kt.dequantize(kt.TYPE_Q8_0, data, x.shape)
        step = np.abs(x.reshape(3, 2, 32)).max(-1, keepdims=True) / 127
        self.assertTrue((np.abs(y - x).reshape(3, 2, 32) <= 0.57 * step).all())

    def test_bad_row_length_raises(self):
        with self.assertRaises(kt.Error):
            kt.quantize(kt.TYPE_Q8_0, np.zeros((2, 33), dtype=np.float32))


class WriterTest(unittest.TestCase):
    def test_written_file_reads_back(self):
        a = np.arange(2 * 3 * 32, dtype=np.float32).reshape(2, 3, 32) / 100
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.gguf")
            with kt.GgufWriter() as w:
                w.add("general.architecture", "str", "test")
                w.add("test.u32", "u32", 7)
                w.add("test.f32", "f32", 0.5)
                w.add("test.flag", "bool", True)
                w.add("test.names", "str[]", ["a", "Ġb", ""])
                w.add("test.ids", "i32[]", [-1, 2, 3])
                w.add_tensor("a", a)
                w.add_tensor("q", a, kt.TYPE_Q8_0)
                w.write(path)
            with kt.Model(path) as m:
                self.assertEqual(m.meta("general.architecture"), "test")
                self.assertEqual(m.meta("test.u32"), 7)
                self.assertEqual(m.meta("test.f32"), 0.5)
                self.assertIs(m.meta("test.flag"), True)
                self.assertEqual(m.meta("test.names"), ["a", "Ġb", ""])
                self.assertEqual(m.meta("test.ids"), [-1, 2, 3])
                self.assertEqual(m.tensor_info("a").ne, (32, 3, 2))
                np.testing.assert_array_equal(m.tensor_f32("a"), a)
                self.assertEqual(m.tensor_info("q").type, kt.TYPE_Q8_0)
                np.testing.assert_array_equal(m.tensor_f32("q"),
                                              kt.dequantize(kt.TYPE_Q8_0, kt.quantize(kt.TYPE_Q8_0, a), a.shape))

    def test_duplicate_key_is_rejected_with_kts_message(self):
        with kt.GgufWriter() as w:
            w.add("k", "u32", 1)
            with self.assertRaises(kt.Error) as cm:
                w.add("k", "u32", 2)
            self.assertIn("k", str(cm.exception))


class TinyModelTest(unittest.TestCase):
    def setUp(self):
        self.model = kt.Model(TINY_MODEL)

    def tearDown(self):
        self.model.close()

    def test_tokenizer_round_trips(self):
        m = self.model
        info = m.vocab_info()
        self.assertEqual(info["kind"], kt.VOCAB_BPE)
        text = "In the beginning God created the heaven and the earth."
        ids = m.tokenize(text, add_special=False, parse_special=False)
        self.assertTrue(0 < len(ids) < len(text))
        self.assertEqual(m.detokenize(ids), text)
        self.assertEqual(b"".join(m.token_to_piece(t) for t in ids), text.encode())
        self.assertEqual(m.tokenize("", add_special=False), [])
        self.assertFalse(any(m.is_eog(t) for t in ids))

    def test_greedy_generation_streams_and_matches_the_argmax(self):
        m = self.model
        prompt = m.tokenize("And God said")
        with kt.Context(m, n_ctx=128, n_threads=2) as ctx:
            streamed = []
            tokens, why = ctx.generate(prompt, 12, on_token=lambda t: streamed.append(t) and False)
            self.assertEqual((tokens, why), (streamed, kt.STOP_MAX_TOKENS))
            self.assertEqual(ctx.n_past, len(prompt) + 12)
            ctx.reset()
            ctx.decode(prompt)
            logits = ctx.logits()
            self.assertEqual(logits.shape, (ctx.n_vocab,))
            self.assertEqual(int(np.argmax(logits)), tokens[0])
            self.assertEqual(ctx.sample(kt.Sampler.greedy()), tokens[0])
            with self.assertRaises(kt.Error) as cm:
                ctx.decode([1 << 30])
            self.assertIn("vocabulary", str(cm.exception))
            self.assertEqual(ctx.n_past, len(prompt))
            ctx.reset()
            seeded = [ctx.generate(prompt, 8, kt.Sampler(temperature=0.9, seed=3))[0] for _ in range(1)]
            ctx.reset()
            self.assertEqual(ctx.generate(prompt, 8, kt.Sampler(temperature=0.9, seed=3))[0], seeded[0])
            ctx.reset()
            self.assertEqual(ctx.generate(prompt, 50, on_token=lambda t: True), (tokens[:1], kt.STOP_CALLBACK))
            self.assertGreater(ctx.perf()["n_prefill_tokens"], 0)
            with self.assertRaises(kt.Error) as cm:
                m.close()  # the context borrows the model
            self.assertEqual(cm.exception.status, kt.STATUS_MISUSE)
        with kt.Detokenizer(m) as d:
            pieces = b"".join(d.push(t) for t in tokens) + d.flush()
        self.assertEqual(pieces.decode(), m.detokenize(tokens))

    def test_threads_share_the_model(self):
        prompt = self.model.tokenize("And God said")

        def run(results):
            with kt.Context(self.model, n_ctx=64, n_threads=1) as ctx:
                results.append(ctx.generate(prompt, 6)[0])
        results = []
        threads = [threading.Thread(target=run, args=(results,)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), 3)
        self.assertTrue(all(r == results[0] for r in results))

    def test_chat_template_and_cancelled_load(self):
        text = self.model.apply_chat_template([{"role": "user", "content": "Hi"}], template="chatml")
        self.assertEqual(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
        with self.assertRaises(kt.Error) as cm:
            kt.Model(TINY_MODEL, progress=lambda fraction: True)
        self.assertEqual(cm.exception.status, kt.STATUS_CANCELLED)

        def broken(fraction):
            raise KeyError("from progress")
        with self.assertRaises(KeyError):  # an exception in a callback stops kt and reaches the caller
            kt.Model(TINY_MODEL, progress=broken)
        with kt.Context(self.model, n_ctx=32) as ctx, self.assertRaises(ZeroDivisionError):
            ctx.generate(self.model.tokenize("And"), 5, on_token=lambda t: 1 / 0)


# ---- expert pools and KTMoEWrapper against NumPy ----

E, H, I, K = 6, 64, 96, 2


def moe_reference(gate, up, down, x, ids, w, skip=()):
    """out[t] = sum_k w[t, k] * down_e(silu(gate_e x[t]) * up_e x[t]) in float64; ids -1 and `skip` add nothing."""
    gate, up, down, x = (np.asarray(a, dtype=np.float64) for a in (gate, up, down, x))
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            if e < 0 or e in skip:
                continue
            g, u = gate[e] @ x[t], up[e] @ x[t]
            out[t] += w[t, k] * (down[e] @ (g / (1 + np.exp(-g)) * u))
    return out


def int4_weights(w, group):
    """The int4 format kt packs to (kt.h: one scale per group of values along the input): symmetric, scale = the
    group's max |w| / 7, codes rounded to nearest even and clamped to [-8, 7]."""
    g = w.reshape(*w.shape[:-1], -1, group).astype(np.float64)
    scale = np.abs(g).max(axis=-1, keepdims=True) / 7
    codes = np.clip(np.rint(g / np.where(scale == 0, 1, scale)), -8, 7)
    return (codes * scale).reshape(w.shape)


def rel_error(y, ref):
    return float(np.abs(np.asarray(y, dtype=np.float64) - ref).max() / np.abs(ref).max())


def random_layer(seed):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * 0.2).astype(np.float32) for shape in ((E, I, H), (E, I, H), (E, H, I))]


def random_routing(n, seed, n_experts=E, k=K):
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(n_experts, size=k, replace=False) for _ in range(n)]).astype(np.int64)
    ids[4::5, -1] = -1  # some empty slots
    w = rng.uniform(0.1, 1.0, size=(n, k)).astype(np.float32)
    return ids, w / w.sum(axis=1, keepdims=True)


class ExpertPoolTest(unittest.TestCase):
    def test_every_format_matches_numpy(self):
        layer = random_layer(1)
        # bf16 rounds weights and activations to 8 mantissa bits; int8 quantizes both per channel / per token. Int4
        # loses too much to compare with the exact FFN, so its reference uses the int4 weights themselves: what is
        # left is the activations' int8 rounding.
        int4 = [int4_weights(w, 32) for w in layer]
        for fmt, reference, tolerance in ((kt.WEIGHTS_BF16, layer, 0.02), (kt.WEIGHTS_INT8, layer, 0.03),
                                          (kt.WEIGHTS_INT4, int4, 0.03)):
            with kt.ExpertPool(E, H, I, weight_format=fmt, n_threads=2, int4_group_size=32) as pool:
                pool.load(*layer)
                for n in (1, 7, 33):
                    x = np.random.default_rng(n).standard_normal((n, H)).astype(np.float32)
                    ids, w = random_routing(n, n)
                    err = rel_error(pool.forward(x, ids.astype(np.int32), w), moe_reference(*reference, x, ids, w))
                    self.assertLess(err, tolerance, (fmt, n))
            if fmt == kt.WEIGHTS_INT4:  # and the int4 reference is far from the exact one: the comparison has teeth
                self.assertGreater(rel_error(moe_reference(*int4, x, ids, w), moe_reference(*layer, x, ids, w)), 0.05)

    def test_queued_jobs_masks_and_errors(self):
        layer = random_layer(2)
        with kt.ExpertPool(E, H, I, weight_format=kt.WEIGHTS_BF16, n_threads=2) as pool:
            pool.load(*layer)
            x = np.random.default_rng(3).standard_normal((9, H)).astype(np.float32)
            ids, w = random_routing(9, 4)
            want = moe_reference(*layer, x, ids, w)
            a = pool.submit(x, ids, w)
            b = pool.submit(x, ids, w, out=np.ones_like(x), accumulate=True)
            self.assertLess(rel_error(pool.wait(a), want), 0.02)
            self.assertLess(rel_error(pool.wait(b), want + 1), 0.02)
            mask = np.zeros(E, dtype=bool)
            mask[[1, 4]] = True
            pool.set_mask(mask)
            self.assertLess(rel_error(pool.forward(x, ids, w), moe_reference(*layer, x, ids, w, skip=(1, 4))), 0.02)
            pool.set_mask(None)
            bad = ids.copy()
            bad[0, 0] = E
            with self.assertRaises(kt.Error) as cm:
                pool.forward(x, bad, w)
            self.assertIn("out of range", str(cm.exception))
            with self.assertRaises(kt.Error):
                pool.forward(x[:, :-1], ids, w)


class KTMoEWrapperTest(unittest.TestCase):
    def wrapper(self, **kw):
        args = dict(layer_idx=0, num_experts=E, num_experts_per_tok=K, hidden_size=H, moe_intermediate_size=I,
                    cpuinfer_threads=2, method="BF16")
        args.update(kw)
        return KTMoEWrapper(**args)

    def test_forward_chunks_and_a_live_gpu_mask(self):
        layer = random_layer(5)
        w = self.wrapper(chunked_prefill_size=8, gpu_experts_mask=np.zeros(E, dtype=bool))
        w.load_weights_from_tensors(*layer)
        x = np.random.default_rng(6).standard_normal((21, H)).astype(np.float32)  # three chunks of at most 8
        ids, weights = random_routing(21, 7)
        self.assertLess(rel_error(w.forward(x, ids, weights), moe_reference(*layer, x, ids, weights)), 0.02)
        w.gpu_experts_mask[2] = True  # updated in place, as SGLang does
        w.submit_forward(x, ids, weights, None)
        y = w.sync_forward(x, None)
        self.assertEqual((y.shape, y.dtype), (x.shape, np.float32))
        self.assertLess(rel_error(y, moe_reference(*layer, x, ids, weights, skip=(2,))), 0.02)
        with self.assertRaises(kt.Error):
            w.sync_forward(x)
        w.close()

    def test_num_gpu_experts_and_physical_to_logical_map(self):
        layer = random_layer(8)
        w = self.wrapper(num_gpu_experts=2, method="AMXINT8")
        physical = np.array([3, 0, 5, 1, 4, 2])  # physical expert p computes logical expert physical[p]
        w.load_weights_from_tensors(*layer, physical_to_logical_map=physical)
        x = np.random.default_rng(9).standard_normal((5, H)).astype(np.float32)
        ids, weights = random_routing(5, 10)
        logical = np.where(ids >= 0, physical[np.clip(ids, 0, None)], -1)
        skipped = tuple(int(physical[p]) for p in (0, 1))  # physical experts 0 and 1 are on the GPU
        want = moe_reference(*layer, x, logical, weights, skip=skipped)
        self.assertLess(rel_error(w.forward(x, ids, weights), want), 0.03)
        w.close()

    def test_deferred_experts_land_in_the_next_layer(self):
        k = 4
        layers = [random_layer(11), random_layer(12)]
        wrappers = [self.wrapper(layer_idx=i, num_experts_per_tok=k, max_deferred_experts_per_token=2 if i == 0 else 0)
                    for i in range(2)]
        for w, layer in zip(wrappers, layers):
            w.load_weights_from_tensors(*layer)
        x = np.random.default_rng(13).standard_normal((6, H)).astype(np.float32)
        ids, weights = random_routing(6, 14, k=k)
        ids[ids < 0] = 0  # every slot used, so that deferral has something to move
        # kt-kernel's rule: experts among any token's top (k - 2) by weight run now for every token.
        top = np.take_along_axis(ids, np.argsort(-weights, axis=1, kind="stable")[:, :k - 2], axis=1)
        immediate = set(int(e) for e in top.ravel())
        deferred_only = tuple(e for e in range(E) if e not in immediate)
        y0 = wrappers[0].forward(x, ids, weights)
        self.assertLess(rel_error(y0, moe_reference(*layers[0], x, ids, weights, skip=deferred_only)), 0.02)
        y1 = wrappers[1].forward(x, ids, weights)
        late = moe_reference(*layers[0], x, ids, weights, skip=tuple(immediate))
        self.assertGreater(np.abs(late).max(), 0)
        self.assertLess(rel_error(y1, moe_reference(*layers[1], x, ids, weights) + late), 0.02)
        for w in wrappers:
            w.close()

    def test_load_weights_from_a_gguf_file(self):
        with kt.Model(TINY_MODEL) as m:
            e, h, i = (m.meta(f"qwen3moe.{key}") for key in ("expert_count", "embedding_length",
                                                              "expert_feed_forward_length"))
            gate, up, down = (m.tensor_f32(f"blk.1.ffn_{p}_exps.weight") for p in ("gate", "up", "down"))
        w = KTMoEWrapper(layer_idx=1, num_experts=e, num_experts_per_tok=2, hidden_size=h, moe_intermediate_size=i,
                         weight_path=TINY_MODEL, method="LLAMAFILE", cpuinfer_threads=2)
        w.load_weights()
        x = np.random.default_rng(15).standard_normal((4, h)).astype(np.float32)
        ids, weights = random_routing(4, 16, n_experts=e)
        # Q8_0 weights as kt dequantizes them, with int8-quantized activations.
        self.assertLess(rel_error(w.forward(x, ids, weights), moe_reference(gate, up, down, x, ids, weights)), 0.03)
        w.close()
        with self.assertRaises(ValueError):
            KTMoEWrapper(0, E, K, H, I, method="FP8")

    @unittest.skipIf(torch is None, "torch is not installed: the torch-tensor path is not tested")
    def test_torch_tensors_in_and_out(self):
        layer = random_layer(17)
        w = self.wrapper()
        w.load_weights_from_tensors(*[torch.from_numpy(a).to(torch.bfloat16) for a in layer])
        x = torch.randn(5, H, generator=torch.Generator().manual_seed(18)).to(torch.bfloat16)
        ids, weights = random_routing(5, 19)
        y = w.forward(x, torch.from_numpy(ids), torch.from_numpy(weights))
        self.assertEqual((tuple(y.shape), y.dtype), ((5, H), torch.bfloat16))
        bf16 = [torch.from_numpy(a).to(torch.bfloat16).float().numpy() for a in layer]
        self.assertLess(rel_error(y.float().numpy(), moe_reference(*bf16, x.float().numpy(), ids, weights)), 0.02)
        w.close()


if __name__ == "__main__":
    unittest.main()
