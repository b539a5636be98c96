#!/usr/bin/env python3
"""Tests of kernel_standins.py against independent brute-force computations.

    python3 verify/adapters/test_kernel_standins.py        (needs torch; no GPU, no DeepSeek code)
"""
import itertools
import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_standins as ks  # noqa: E402

E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # code c has an even mantissa iff c is even


def e2m1_brute(v: float) -> float:
    """Nearest grid point by distance; at an exact tie the even code wins."""
    a = min(abs(v), 6.0)
    dist = [abs(a - g) for g in E2M1_GRID]
    best = min(dist)
    codes = [c for c, dd in enumerate(dist) if dd == best]
    code = next((c for c in codes if c % 2 == 0), codes[0])
    return math.copysign(E2M1_GRID[code], v)


def e4m3_values():
    """Every finite positive e4m3fn value, from its bit fields (bias 7, no inf, 0x7F is NaN)."""
    vals = []
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue
            vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return sorted(vals)


class PowerOfTwoScales(unittest.TestCase):
    def test_pow2_ceil_equals_float64_formula(self):
        g = torch.Generator().manual_seed(1)
        v = torch.exp2(torch.rand(20000, generator=g, dtype=torch.float64) * 200 - 120).float()
        v = torch.cat([v, torch.exp2(torch.arange(-126, 127, dtype=torch.float32))])  # exact powers stay
        expected = [2.0 ** math.ceil(math.log2(float(x))) for x in v]
        self.assertEqual(ks.pow2_ceil(v).double().tolist(), expected)

    def test_act_scale_floor_and_fp32_product(self):
        x = torch.zeros(1, 64, dtype=torch.bfloat16)  # amax 0 -> floor 1e-4 -> 2^ceil(log2(1e-4/448)) = 2^-22
        self.assertEqual(ks.act_scales(x, 64, "ue8m0").item(), 2.0 ** -22)
        x[0, 5] = 448.0  # amax/448 = 1 exactly -> scale 1, not 2
        self.assertEqual(ks.act_scales(x, 64, "ue8m0").item(), 1.0)
        x[0, 5] = 450.0  # the next bf16 above 448: amax/448 > 1 -> scale 2
        self.assertEqual(ks.act_scales(x, 64, "ue8m0").item(), 2.0)

    def test_fp4_scale_floor(self):
        x = torch.zeros(1, 32, dtype=torch.bfloat16)
        self.assertEqual(ks.fp4_scales(x, 32).item(), 2.0 ** -126)


class Fp8FakeQuant(unittest.TestCase):
    def test_inplace_rounds_each_block_to_nearest_even_e4m3_multiple(self):
        g = torch.Generator().manual_seed(2)
        x = (torch.randn(6, 448, generator=g) * torch.exp2(torch.randint(-8, 8, (6, 1), generator=g).float())).bfloat16()
        y = x.clone()
        ks.act_quant(y, 64, "ue8m0", torch.float8_e8m0fnu, True)
        grid = e4m3_values()
        for r, blk in itertools.product(range(6), range(7)):
            xs = x[r, blk * 64:(blk + 1) * 64].double()
            amax = max(float(xs.abs().max()), 1e-4)
            s = 2.0 ** math.ceil(math.log2(amax / 448))  # amax/448 > 2^-23, far from a power-of-two edge here
            for xv, yv in zip(xs.tolist(), y[r, blk * 64:(blk + 1) * 64].double().tolist()):
                a = abs(xv) / s
                lo = max([gv for gv in grid if gv <= a], default=0.0)
                hi = min([gv for gv in grid if gv >= a], default=448.0)
                if a - lo < hi - a:
                    want = lo
                elif hi - a < a - lo:
                    want = hi
                else:  # tie: the even mantissa; the e4m3 grid index parity is the mantissa parity
                    want = lo if grid.index(lo) % 2 == 0 else hi
                self.assertEqual(yv, math.copysign(want * s, xv), f"x={xv} s={s}")

    def test_non_inplace_returns_e4m3_values_and_scales(self):
        x = torch.tensor([[1.0, -3.0] + [0.5] * 126], dtype=torch.bfloat16)
        q, s = ks.act_quant(x, 128, "ue8m0", torch.float8_e8m0fnu)
        self.assertEqual(q.dtype, torch.float8_e4m3fn)
        self.assertEqual(s.dtype, torch.float8_e8m0fnu)
        self.assertEqual(s.float().item(), 2.0 ** -7)  # 3/448 in (2^-8, 2^-7]
        self.assertEqual(q.float()[0, :2].tolist(), [128.0, -384.0])


class Fp4FakeQuant(unittest.TestCase):
    def test_rounding_table_ties_to_even(self):
        cases = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0, -0.75: -1.0, -5.0: -4.0}
        got = ks.round_to_e2m1(torch.tensor(list(cases), dtype=torch.float32)).tolist()
        self.assertEqual(got, list(cases.values()))

    def test_rounding_equals_brute_force_on_dense_sweep(self):
        v = torch.arange(-6 * 256, 6 * 256 + 1, dtype=torch.float32) / 256  # every tie point is a multiple of 1/4
        got = ks.round_to_e2m1(v).tolist()
        self.assertEqual(got, [e2m1_brute(x) for x in v.tolist()])

    def test_inplace_block_scale_and_values(self):
        x = torch.zeros(1, 64, dtype=torch.bfloat16)
        x[0, :4] = torch.tensor([6.0, 1.75, 0.25, -2.5])  # block 0: amax 6 -> scale 1
        x[0, 32:34] = torch.tensor([12.0, 5.0])           # block 1: amax 12 -> scale 2; 5/2 = 2.5 -> 2 -> 4
        ks.fp4_act_quant(x, 32, True)
        self.assertEqual(x[0, :4].float().tolist(), [6.0, 2.0, 0.0, -2.0])
        self.assertEqual(x[0, 32:34].float().tolist(), [12.0, 4.0])


class Fp8Gemm(unittest.TestCase):
    def test_matches_float64_block_scaled_product(self):
        g = torch.Generator().manual_seed(3)
        a_val = (torch.randn(5, 256, generator=g) * 8).to(torch.float8_e4m3fn)
        b_val = (torch.randn(200, 256, generator=g) * 8).to(torch.float8_e4m3fn)
        a_s = torch.exp2(torch.randint(-4, 4, (5, 2), generator=g).float())
        b_s = torch.exp2(torch.randint(-4, 4, (2, 2), generator=g).float())  # ceil(200/128) = 2 row blocks
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            c = ks.fp8_gemm(a_val, a_s, b_val, b_s.to(torch.float8_e8m0fnu), torch.float8_e8m0fnu)
        finally:
            torch.set_default_dtype(prev)
        a64 = a_val.double() * a_s.double().repeat_interleave(128, 1)
        b64 = b_val.double() * b_s.double().repeat_interleave(128, 0)[:200].repeat_interleave(128, 1)
        exact = a64 @ b64.T
        self.assertEqual(c.dtype, torch.bfloat16)
        # Two fp32 roundings (block partial sums, one addition) sit 2^16 below bf16's half ulp: the
        # result may differ from bf16(exact) only where exact lies within ~2^-22 relative of a bf16 tie.
        ulp = torch.exp2(torch.floor(torch.log2(exact.abs())) - 7)
        self.assertLessEqual(float(((c.double() - exact).abs() / ulp).max()), 0.5 + 2.0 ** -14)


class SparseAttention(unittest.TestCase):
    def reference(self, q, kv, sink, idx, scale):
        """Plain softmax over the valid indices plus the sink logit, in float64, with the kernel's
        one rounding that changes results at this level: P to bf16 before P.V. Single block only."""
        b, m, h, d = q.shape
        out = torch.empty(b, m, h, d, dtype=torch.float64)
        for bi, mi in itertools.product(range(b), range(m)):
            rows = [int(i) for i in idx[bi, mi] if i != -1]
            k = kv[bi, rows].double()
            s = (q[bi, mi].double() @ k.T).float().double() * scale
            mx = s.max(-1, keepdim=True).values
            p = torch.exp(s - mx)
            denom = p.sum(-1) + torch.exp(sink.double() - mx[:, 0])
            out[bi, mi] = (p.float().bfloat16().double() @ k) / denom[:, None]
        return out

    def test_single_block_matches_reference_within_one_bf16_ulp(self):
        g = torch.Generator().manual_seed(4)
        q = torch.randn(2, 3, 4, 128, generator=g).bfloat16()
        kv = torch.randn(2, 40, 128, generator=g).bfloat16()
        sink = torch.randn(4, generator=g)
        idx = torch.randint(0, 40, (2, 3, 30), generator=g, dtype=torch.int32)
        idx[:, :, 20:] = -1
        o = ks.sparse_attn(q, kv, sink, idx, 128 ** -0.5)
        ref = self.reference(q, kv, sink, idx, 128 ** -0.5)
        # fp32 exp / sums versus float64 ones move P by a few fp32 ulps, which can flip a bf16
        # rounding of P or of the output: at most one bf16 ulp of the output's magnitude (<= 4).
        self.assertLessEqual(float((o.double() - ref).abs().max()), 2.0 ** -6)

    def test_blocks_split_equals_one_block_up_to_rescaling(self):
        """Indices spread over three 64-blocks with -1 holes give the plain softmax with sink."""
        g = torch.Generator().manual_seed(5)
        q = torch.randn(1, 2, 16, 64, generator=g).bfloat16()
        kv = torch.randn(1, 300, 64, generator=g).bfloat16()
        sink = torch.randn(16, generator=g)
        idx = torch.randperm(300, generator=g)[:150].int().reshape(1, 1, 150).repeat(1, 2, 1)
        idx[0, 1, 70:100] = -1
        o = ks.sparse_attn(q, kv, sink, idx, 0.125).double()
        qd, kd = q.double(), kv.double()
        for mi in range(2):
            rows = [int(i) for i in idx[0, mi] if i != -1]
            s = qd[0, mi] @ kd[0, rows].T * 0.125
            w = torch.softmax(torch.cat([s, sink.double()[:, None]], 1), 1)[:, :-1]
            ref = w @ kd[0, rows]
            # bf16 P (relative 2^-9 each) and the bf16 output: within 2^-7 of values of magnitude <= 1.
            self.assertLessEqual(float((o[0, mi] - ref).abs().max()), 2.0 ** -7)

    def test_sink_adds_to_the_denominator_with_a_zero_value(self):
        q = torch.zeros(1, 1, 2, 64, dtype=torch.bfloat16)  # every score 0
        kv = torch.randn(1, 3, 64, generator=torch.Generator().manual_seed(6)).bfloat16()
        idx = torch.tensor([[[2, -1, 0]]], dtype=torch.int32)
        sink = torch.tensor([0.0, math.log(2.0)])
        o = ks.sparse_attn(q, kv, sink, idx, 1.0).double()
        mean = (kv[0, 0].double() + kv[0, 2].double()) / 2  # P = 1, 1 (exact in bf16)
        # head 0: (v0 + v2) / (2 + 1); head 1: (v0 + v2) / (2 + 2), both rounded once to bf16
        self.assertTrue(torch.equal(o[0, 0, 0], (2 * mean / 3).float().bfloat16().double()))
        self.assertTrue(torch.equal(o[0, 0, 1], (2 * mean / 4).float().bfloat16().double()))


class CudaRsqrt(unittest.TestCase):
    def test_bf16_rsqrt_is_correctly_rounded(self):
        # Every bf16 in [2^-40, 2^41) (the per-head norm's mean square lies far inside):
        # the stand-in equals 1/sqrt(x) in float64 rounded once to bf16 (torch's CPU kernel does not).
        bits = torch.arange(0x2B80, 0x53FF, dtype=torch.int32).to(torch.int16)
        x = bits.view(torch.bfloat16)
        want = (1.0 / x.double().sqrt()).to(torch.bfloat16)
        self.assertTrue(torch.equal(ks.rsqrt_bf16_as_cuda(x).view(torch.int16), want.view(torch.int16)))

    def test_proxy_changes_only_bf16_cpu_rsqrt(self):
        proxy = ks.TorchWithCudaRsqrt(torch)
        x = torch.tensor([3.0, 5.0, 7.0]).bfloat16()
        self.assertTrue(torch.equal(proxy.rsqrt(x), ks.rsqrt_bf16_as_cuda(x)))
        f = torch.tensor([3.0, 5.0])
        self.assertTrue(torch.equal(proxy.rsqrt(f), torch.rsqrt(f)))
        self.assertIs(proxy.arange, torch.arange)


class Hadamard(unittest.TestCase):
    def test_sylvester_natural_order(self):
        h = ks.sylvester_hadamard(128, "cpu")
        for i, j in [(0, 5), (3, 5), (127, 127), (64, 65), (6, 3)]:
            self.assertEqual(h[i, j].item(), (-1) ** bin(i & j).count("1"))
        self.assertTrue(torch.equal(h @ h.T, 128 * torch.eye(128, dtype=torch.float64)))

    def test_transform_scale_and_dtype(self):
        x = torch.zeros(2, 128, dtype=torch.bfloat16)
        x[0, 0] = 1.0
        x[1, 3] = 2.0
        y = ks.hadamard_transform(x, 128 ** -0.5)
        self.assertEqual(y.dtype, torch.bfloat16)
        expected0 = torch.full((128,), 128 ** -0.5, dtype=torch.float32).bfloat16()
        self.assertTrue(torch.equal(y[0], expected0))
        sign = torch.tensor([(-1) ** bin(3 & j).count("1") for j in range(128)], dtype=torch.float32)
        self.assertTrue(torch.equal(y[1], (2 * sign * torch.tensor(128 ** -0.5, dtype=torch.float32)).bfloat16()))


if __name__ == "__main__":
    unittest.main()
