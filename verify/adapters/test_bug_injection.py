#!/usr/bin/env python3
"""Tests of bug_injection.py and the quantizer variants of kernel_standins.py.

    python3 verify/adapters/test_bug_injection.py [PATH/TO/dsv4-verify]

Unit tests (torch only): the stand-in variants against brute force over the e4m3 / e2m1 grids,
the default variant equal to DeepSeek's kernels bit for bit, the output deviations as the oracle
defines them (reference/mutation.cpp). End to end (also DeepSeek's model.py, from
DSV4_DEEPSEEK_INFERENCE, <repo>/.official/inference or <repo>/.tp/official/inference, and the
dsv4-verify binary): for one bug of each class, the adapter's capture with --inject-bug replayed by
dsv4-verify --diagnose fails first at the injected stage in both modes and its diagnosis names the
bug; the clean captures pass every stage in both modes.
Exits 77 (ctest's skip) without torch.
"""
import math
import os
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:  # the project's install script does not install torch
    print("test_bug_injection: torch is not installed: skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bug_injection as bi  # noqa: E402
import kernel_standins as ks  # noqa: E402


def inference_dir():
    for d in (os.environ.get("DSV4_DEEPSEEK_INFERENCE", ""), os.path.join(REPO, ".official", "inference"),
              os.path.join(REPO, ".tp", "official", "inference")):
        if d and os.path.isfile(os.path.join(d, "model.py")):
            return d
    return None


DSV4_VERIFY = None  # set from argv


def e4m3_grid():
    vals = {0.0}
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue
            vals.add(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return sorted(vals)


E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def brute(grid, v, rounding):
    """toward_zero: the largest grid point <= |v|; ties_toward_zero: the nearest, the smaller at a tie."""
    a = min(abs(v), grid[-1])
    if rounding == "toward_zero":
        r = max(g for g in grid if g <= a)
    else:
        r = min(grid, key=lambda g: (abs(g - a), g))
    return math.copysign(r, v)


def probes(grid):
    out = []
    for lo, hi in zip(grid, grid[1:]):
        mid = (lo + hi) / 2
        out += [lo, mid, math.nextafter(mid, 0), math.nextafter(mid, 1e9)]
    g = torch.Generator().manual_seed(4)
    out += (torch.rand(5000, generator=g, dtype=torch.float64) * 2.2 - 1.1).mul(grid[-1]).tolist()
    return out + [-v for v in out]


class QuantizerVariants(unittest.TestCase):
    def test_rounding_against_brute_force(self):
        for grid, fn in ((e4m3_grid(), ks.round_e4m3), (E2M1_GRID, ks.round_e2m1_by)):
            xs = probes(grid)
            clamped = torch.tensor(xs, dtype=torch.float64).clamp(-grid[-1], grid[-1])
            for rounding in ("toward_zero", "ties_toward_zero"):
                got = fn(clamped, rounding).tolist()
                want = [brute(grid, v, rounding) for v in clamped.tolist()]
                self.assertEqual(got, want, f"{fn.__name__} {rounding}")

    def test_pow2_floor(self):
        v = torch.exp2(torch.rand(1000, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 100 - 60).float()
        self.assertEqual(ks.pow2_floor(v).double().tolist(), [2.0 ** math.floor(math.log2(float(x))) for x in v])

    def test_default_variant_is_deepseeks_kernel(self):
        g = torch.Generator().manual_seed(5)
        x = (torch.randn(7, 448, generator=g) * torch.exp2(torch.randint(-8, 8, (7, 1), generator=g).float())).bfloat16()
        a, b = x.clone(), x.clone()
        ks.act_quant(a, 64, "ue8m0", torch.float32, True)
        ks.act_quant_variant(b, 64, ks.QuantVariant())
        self.assertTrue(torch.equal(a.view(torch.int16), b.view(torch.int16)))
        y = (torch.randn(5, 128, generator=g)).bfloat16()
        a, b = y.clone(), y.clone()
        ks.fp4_act_quant(a, 32, True)
        ks.fp4_act_quant_variant(b, 32, ks.QuantVariant())
        self.assertTrue(torch.equal(a.view(torch.int16), b.view(torch.int16)))
        c = y.clone()
        ks.fp4_act_quant_variant(c, 32, ks.QuantVariant(rounding="ties_toward_zero"))
        self.assertFalse(torch.equal(a, c))  # bf16 inputs hit FP4 ties often enough

    def test_amax_floor_and_scale_floor(self):
        tiny = (torch.arange(32.0) * 1e-6)[None].bfloat16()  # amax 3.1e-5 < 1e-4: the floor decides the scale
        a, b = tiny.clone(), tiny.clone()
        ks.fp4_act_quant(a, 32, True)
        ks.fp4_act_quant_variant(b, 32, ks.QuantVariant(amax_floor=1e-4))
        self.assertFalse(torch.equal(a, b))
        x = torch.full((1, 32), 0.25).bfloat16()
        x[0, 0] = 5.0
        ks.fp4_act_quant_variant(x, 32, ks.QuantVariant(scale_rule="floor"))
        self.assertEqual(x[0, 0].item(), 3.0)  # scale 0.5: 10 saturates at 6 -> 3 (ceil: 5 -> 4)

    def test_output_deviations(self):
        t = torch.tensor([1.0, -1.0, 0.0, float("-inf"), 3.0]).bfloat16()
        up = bi.one_ulp_high(t).float().tolist()
        self.assertEqual(up[:3], [1.0 + 2 ** -7, -(1.0 - 2 ** -8), 2.0 ** -133])
        self.assertEqual(up[3], float("-inf"))
        self.assertEqual(bi.scaled_1_1(t)[4].item(), torch.tensor(3.3).bfloat16().item())
        picks = torch.tensor([[[-1, -1, -1], [0, -1, -1], [1, 0, -1]]])
        out = bi.replace_one_index(picks, 0, 2)
        self.assertEqual(out.tolist(), [[[-1, -1, -1], [1, -1, -1], [1, 0, -1]]])
        # Every index held: the first pick is lost, never duplicated (reference/mutation.cpp).
        self.assertEqual(bi.replace_one_index(torch.tensor([[[0, 1]]]), 0, 2).tolist(), [[[-1, 1]]])
        # Only indices the row can see: row 0 sees entry 0 only (lacks nothing), row 1 entries 0 and 1.
        causal = torch.tensor([[[0, -1], [0, -1]]])
        self.assertEqual(bi.replace_one_index(causal, 0, 2, lambda row, u: u <= row).tolist(), [[[0, -1], [1, -1]]])
        # Each sequence of the batch gets its own replacement.
        two = torch.tensor([[[0, -1]], [[1, -1]]])
        self.assertEqual(bi.replace_one_index(two, 0, 2).tolist(), [[[1, -1]], [[0, -1]]])


# One bug of each class; the diagnosis must name it.
END_TO_END_BUGS = (
    "kv:quant-skipped", "kv:round-toward-zero", "indexer/q:ties-toward-zero", "kv:ue8m0-floor",
    "indexer/q:amax-floor-1e-4", "kv:amax-floor-6x2^-126",
    "q:rope-position+1", "kv:rope-halves", "indexer/q:rope-position+1", "compressor/entries:rope-position+1",
    "indexer/compressor/entries:rope-block-end", "q:rope-first-dims", "compressor/entries:ape-shift+1",
    "indexer/scores:causal+1", "attn/core:softmax-scale-nope-dim", "attn/core:probs-fp32", "attn/core:sink-dropped",
    "topk_idxs:index-replaced", "indexer/topk:index-replaced", "q_latent:one-ulp-high", "kv:scaled-1.1",
    "attn/out_heads:scaled-1.1", "attn/wo_a:one-ulp-high",
)


# End to end through DeepSeek's model.py on the CPU with the stand-in kernels: opt-in with
# DSV4_BUG_INJECTION_E2E=1 (25 captures, 50 replays: about 3 minutes on one core):
#   DSV4_BUG_INJECTION_E2E=1 DSV4_DEEPSEEK_INFERENCE=PATH/inference \
#       python3 verify/adapters/test_bug_injection.py PATH/dsv4-verify
# Checked: every bug fails first at its own stage, in stage-local and in chained mode, and the
# stage-local diagnosis names it (measured: every differing value explained, none introduced;
# docs/deepseek-capture.md has the table); the clean captures of the same run, with and without
# --quantization-edges, pass every stage in both modes (measured: bitwise), which needs
# the adapter's CUDA-rounded bf16 rsqrt on the CPU (kernel_standins.rsqrt_bf16_as_cuda): with
# torch's CPU rsqrt every decode call failed `q` (a head scaled by a factor one ulp off: gate
# "rounding bias"), so every bug past `q` stopped there.
@unittest.skipUnless(inference_dir() and os.environ.get("DSV4_BUG_INJECTION_E2E") == "1",
                     "end to end: needs DeepSeek's model.py (DSV4_DEEPSEEK_INFERENCE, .official/inference or "
                     ".tp/official/inference) and DSV4_BUG_INJECTION_E2E=1")
class InjectedCaptures(unittest.TestCase):
    def setUp(self):
        if DSV4_VERIFY is None:
            self.skipTest("no dsv4-verify binary given")

    def options(self):
        import argparse
        return argparse.Namespace(inference_dir=inference_dir(), config="tiny", layers="0,1,2", batch=1, prefill=13,
                                  decode=3, device="cpu", kernels="standin")

    def test_clean_captures_pass_every_stage_in_both_modes(self):
        import injected_replays as ir
        for edges in (False, True):
            with self.subTest(quantization_edges=edges), tempfile.TemporaryDirectory() as tmp:
                cap = os.path.join(tmp, "cap.h5")
                ir.capture(None, cap, self.options(), quantization_edges=edges)
                for mode in ("stage-local", "chained"):
                    report = ir.replay(DSV4_VERIFY, cap, os.path.join(tmp, mode + ".json"), mode)
                    self.assertFalse(report["first_failure"], (mode, report["first_failure"]))

    def test_each_injected_bug_is_diagnosed_as_itself(self):
        import injected_replays as ir
        for bug in END_TO_END_BUGS:
            with self.subTest(bug=bug), tempfile.TemporaryDirectory() as tmp:
                cap = os.path.join(tmp, "cap.h5")
                ir.capture(bug, cap, self.options())
                row = ir.summarize(bug, ir.replay(DSV4_VERIFY, cap, os.path.join(tmp, "report.json")))
                # The first failure is at the injected stage, and its diagnosis names the bug:
                # DeepSeek's code differs from the oracle by a few flips of its own at other dims
                # (docs/deepseek-capture.md), so the bug must explain nearly all the differences and add none.
                self.assertTrue(row["fails_at_stage"], row)
                self.assertTrue(row["named"], row)
                chained = ir.summarize(bug, ir.replay(DSV4_VERIFY, cap, os.path.join(tmp, "chained.json"), "chained"))
                self.assertTrue(chained["fails_at_stage"], chained)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        DSV4_VERIFY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
