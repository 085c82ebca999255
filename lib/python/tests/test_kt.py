"""Tests of kt's Python module (lib/python/kt) against libkt.so. Needs NumPy.

    KT_LIBRARY=build/src/libkt.so KT_TESTDATA_DIR=../shared/testdata /usr/bin/python3 lib/python/tests/test_kt.py
"""
import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "lib", "python"))

import kt  # noqa: E402

TESTDATA = os.environ.get("KT_TESTDATA_DIR", os.path.join(ROOT, "..", "shared", "testdata"))


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


if __name__ == "__main__":
    unittest.main()
