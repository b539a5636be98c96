#!/usr/bin/env python3
"""End-to-end test of deepseek_capture.py: runs DeepSeek's official model.py (tiny config, CPU,
kernel stand-ins) and checks the capture against capture-format.md and against itself.

    DSV4_DEEPSEEK_INFERENCE=PATH/inference python3 verify/adapters/test_deepseek_capture.py

Skipped when the official folder is absent (the project never ships it): the folder is taken
from DSV4_DEEPSEEK_INFERENCE, else <repo>/.official/inference.
"""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
INFERENCE = os.environ.get("DSV4_DEEPSEEK_INFERENCE", os.path.join(REPO, ".official", "inference"))
BATCH, PREFILL, DECODE = 2, 9, 4  # decode positions 9..12: CSA blocks complete at 11 (decode) and 3, 7 (prefill)


@unittest.skipUnless(os.path.isfile(os.path.join(INFERENCE, "model.py")), f"no official model.py in {INFERENCE}")
class TinyCapture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import h5py
        cls.tmp = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.tmp.name, "cap.h5")
        subprocess.run([sys.executable, os.path.join(HERE, "deepseek_capture.py"), "--inference-dir", INFERENCE,
                        "--out", cls.path, "--config", "tiny", "--layers", "0,1,2", "--batch", str(BATCH),
                        "--prefill", str(PREFILL), "--decode", str(DECODE)], check=True, capture_output=True)
        cls.f = h5py.File(cls.path, "r")
        cls.cfg = {k: v for k, v in cls.f["config"].attrs.items()}

    @classmethod
    def tearDownClass(cls):
        cls.f.close()
        cls.tmp.cleanup()

    def calls(self, layer):
        g = self.f[f"layers/{layer}/calls"]
        return [g[str(k)] for k in range(len(g))]

    def test_root_and_config(self):
        self.assertEqual(self.f.attrs["format"], "dsv4-capture")
        self.assertEqual(int(self.f.attrs["format_version"]), 1)
        self.assertTrue(self.f.attrs["producer"].startswith("deepseek-official-adapter "))
        self.assertEqual(self.f.attrs["probs_convention"], "deepseek")
        self.assertEqual(self.cfg["precision"], "official")
        self.assertEqual(int(self.cfg["dim"]), 256)
        self.assertEqual([int(self.f[f"layers/{i}"].attrs["compress_ratio"]) for i in range(3)], [0, 4, 128])

    def test_call_sequence_and_shapes(self):
        c = self.cfg
        H, d, W = int(c["n_heads"]), int(c["head_dim"]), int(c["window_size"])
        for layer, ratio in [(0, 0), (1, 4), (2, 128)]:
            calls = self.calls(layer)
            self.assertEqual([int(k.attrs["start_pos"]) for k in calls], [0] + list(range(PREFILL, PREFILL + DECODE)))
            for call in calls:
                sp, s = int(call.attrs["start_pos"]), int(call.attrs["seqlen"])
                self.assertEqual(call["x"].shape, (BATCH, s, 256))
                self.assertEqual(call["q"].shape, (BATCH, s, H, d))
                self.assertEqual(call["kv"].shape, (BATCH, s, d))
                self.assertEqual(call["attn/wo_a"].shape, (BATCH, s, int(c["o_groups"]), int(c["o_lora_rank"])))
                self.assertEqual(call["cache/window_kv"].shape, (BATCH, W, d))
                window = min(s, W) if sp == 0 else W
                if ratio == 4:
                    visible = (sp + s) // 4
                    k = min(int(c["index_topk"]), visible)
                    self.assertEqual(call["indexer/scores"].shape, (BATCH, s, visible))
                    self.assertEqual(call["indexer/topk"].shape, (BATCH, s, k))
                    self.assertEqual(call["topk_idxs"].shape, (BATCH, s, window + k))
                    self.assertEqual(call["compressor/state_kv"].shape, (BATCH, 8, 2 * d))
                    n_new = (sp + s) // 4 - sp // 4
                    self.assertEqual(call["compressor/entries"].shape, (BATCH, n_new, d))
                    self.assertEqual(call["indexer/compressor/entries"].shape, (BATCH, n_new, 128))
                elif ratio == 128:
                    self.assertEqual(call["topk_idxs"].shape, (BATCH, s, window + (sp + s) // 128))
                else:
                    self.assertNotIn("compressor", call)
                    self.assertEqual(call["topk_idxs"].shape, (BATCH, s, window))

    def test_index_spaces(self):
        """Prefill: token positions [0, s) then s + j; decode: ring slots [0, W) then W + j."""
        W = int(self.cfg["window_size"])
        for call in self.calls(1):
            sp, s = int(call.attrs["start_pos"]), int(call.attrs["seqlen"])
            idx = call["topk_idxs"][()]
            window, comp = idx[..., : (min(s, W) if sp == 0 else W)], idx[..., (min(s, W) if sp == 0 else W):]
            base = s if sp == 0 else W
            if sp == 0:
                for t in range(s):
                    self.assertTrue(set(window[:, t].ravel()) - {-1} <= set(range(t + 1)))
                    valid = comp[:, t][comp[:, t] >= 0]
                    self.assertTrue(np.all((valid >= base) & (valid < base + (t + 1) // 4)))
            else:
                slots = set(range(W)) if sp >= W - 1 else set(range(sp + 1))  # ring slots in use, -1 padding
                self.assertEqual(set(window.ravel()) - {-1}, slots)
                self.assertEqual(int((window == -1).sum()), window[..., 0].size * (W - len(slots)))
                self.assertTrue(np.all((comp >= base) & (comp < base + (sp + 1) // 4)))

    def test_caches_chain_between_calls(self):
        """The state after call k (and its kv row and entries) is the cache before call k + 1."""
        W = int(self.cfg["window_size"])
        calls = self.calls(1)
        for before, after in zip(calls[:-1], calls[1:]):
            sp = int(after.attrs["start_pos"])
            np.testing.assert_array_equal(before["compressor/state_kv"][()], after["cache/compressor_state_kv"][()])
            np.testing.assert_array_equal(before["indexer/compressor/state_score"][()],
                                          after["cache/indexer_compressor_state_score"][()])
            n_before = sp // 4
            entries = before["compressor/entries"][()]
            if entries.shape[1]:
                np.testing.assert_array_equal(entries, after["cache/compressed_kv"][()][:, n_before - entries.shape[1]:])
            if int(before.attrs["start_pos"]) > 0:
                slot = int(before.attrs["start_pos"]) % W
                np.testing.assert_array_equal(before["kv"][()][:, 0], after["cache/window_kv"][()][:, slot])

    def test_out_heads_is_inverse_rope_of_core_on_the_rope_dims_only(self):
        for call in self.calls(0):
            core, heads = call["attn/core"][()], call["attn/out_heads"][()]
            np.testing.assert_array_equal(core[..., :-64], heads[..., :-64])
            self.assertFalse(np.array_equal(core[..., -64:], heads[..., -64:]))

    def test_masked_scores_are_minus_inf_in_prefill_only(self):
        calls = self.calls(1)
        scores = calls[0]["indexer/scores"][()]
        for t in range(PREFILL):
            self.assertTrue(np.all(np.isneginf(scores[:, t, (t + 1) // 4:])))
            self.assertTrue(np.all(np.isfinite(scores[:, t, : (t + 1) // 4])))
        for call in calls[1:]:
            self.assertTrue(np.all(np.isfinite(call["indexer/scores"][()])))

    def test_weights_are_fp8_block_values(self):
        """FP8 weights dequantised: every 128x128 block is a power of two times e4m3 values."""
        w = self.f["layers/1/weights/wq_b"]
        self.assertEqual(w.attrs["linear"], "fp8")
        block = w[()][:128, :128].astype(np.float64)
        scale = 2.0 ** np.ceil(np.log2(np.abs(block).max() / 448))
        q = block / scale
        self.assertLessEqual(np.abs(q).max(), 448)
        mant = np.abs(q[q != 0]) / 2.0 ** np.floor(np.log2(np.abs(q[q != 0])))
        normal = np.abs(q[q != 0]) >= 2.0 ** -6
        self.assertTrue(np.all(((mant * 8) % 1 == 0) | ~normal))  # 3 mantissa bits


if __name__ == "__main__":
    unittest.main()
