#!/usr/bin/env python3
"""Runs DeepSeek's TileLang kernels (the user's inference/kernel.py) and the stand-ins of
kernel_standins.py on the same inputs, on a GPU, and reports per kernel how many outputs agree bit
for bit.

    python3 verify/adapters/check_standins_vs_tilelang.py --inference-dir PATH/inference

Needs a CUDA GPU, torch and tilelang (fast_hadamard_transform too, else the Hadamard row is
skipped). Inputs include the rounding ties of act_quant and fp4_act_quant (docs/deepseek-capture.md) and the index
patterns of 5.4 (several 64-blocks, -1 holes, padding).
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kernel_standins as standin  # noqa: E402


def load_official_kernel(inference_dir: str):
    sys.path.insert(0, inference_dir)
    import kernel as official  # noqa: E402  (the user's kernel.py, TileLang)
    assert official.__file__.startswith(os.path.abspath(inference_dir)), official.__file__
    return official


def report(name: str, a: torch.Tensor, b: torch.Tensor) -> bool:
    a64, b64 = a.double(), b.double()
    same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
    diff = (a64 - b64).abs().nan_to_num(0.0)
    where = ""
    if not bool(same.all()):
        i = int((~same).flatten().nonzero()[0])
        where = f"; first at flat index {i}: official {a64.flatten()[i].item()!r}, stand-in {b64.flatten()[i].item()!r}"
    print(f"{name}: {int(same.sum())}/{same.numel()} bitwise equal, max |diff| {diff.max().item():.3g}{where}")
    return bool(same.all())


def fp8_ties(gen, rows, n, dev):
    """bf16 rows whose values divided by the block scale land on e4m3 ties and near the clamp."""
    x = torch.randn(rows, n, generator=gen, device=dev) * torch.exp2(torch.randint(-10, 10, (rows, 1), generator=gen, device=dev).float())
    x[0, :8] = torch.tensor([448.0, 1.0625, 1.1875, 3.25, -208.0, 0.0, -0.0, 2.0 ** -9 * 1.5], device=dev)  # amax 448 -> s = 1
    return x.bfloat16()


def fp4_ties(gen, rows, n, dev):
    x = torch.randn(rows, n, generator=gen, device=dev) * torch.exp2(torch.randint(-6, 6, (rows, 1), generator=gen, device=dev).float())
    ties = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -2.5, -5.0, 0.1, -0.0], device=dev)
    x[0, : ties.numel()] = ties  # amax 6 -> s = 1: x/s are exactly the ties
    return x.bfloat16()


def check_hadamard(gen, dev) -> bool:
    """The real fast_hadamard_transform (when installed) against the stand-in, n = 128 as in the
    indexer, on random rows and on rows with a wide exponent range (where fp32 partial sums round)."""
    try:
        import fast_hadamard_transform as fht
    except ImportError:
        print("hadamard_transform: fast_hadamard_transform not installed, skipped")
        return True
    x = torch.randn(8192, 128, generator=gen, device=dev)
    x[4096:] *= torch.exp2(torch.randint(-20, 20, (4096, 128), generator=gen, device=dev).float())
    x = x.bfloat16()
    return report("hadamard_transform n=128", fht.hadamard_transform(x, scale=128 ** -0.5),
                  standin.hadamard_transform(x, 128 ** -0.5))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inference-dir", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only-hadamard", action="store_true", help="check fast_hadamard_transform only (no TileLang)")
    opts = p.parse_args(argv)
    dev = "cuda"
    if opts.only_hadamard:
        torch.set_default_dtype(torch.bfloat16)
        ok = check_hadamard(torch.Generator(device=dev).manual_seed(opts.seed), dev)
        print("all bitwise equal" if ok else "some outputs differ")
        return 0
    official = load_official_kernel(os.path.abspath(opts.inference_dir))
    torch.set_default_dtype(torch.bfloat16)  # fp8_gemm's output dtype, as in generate.py
    gen = torch.Generator(device=dev).manual_seed(opts.seed)
    ok = True

    # act_quant inplace (kv nope dims: block 64) and non-inplace (Linear inputs: block 128)
    for n, block in [(448, 64), (64, 64)]:
        x = fp8_ties(gen, 300, n, dev)
        a, b = x.clone(), x.clone()
        official.act_quant(a, block, "ue8m0", torch.float8_e8m0fnu, True)
        standin.act_quant(b, block, "ue8m0", torch.float8_e8m0fnu, True)
        ok &= report(f"act_quant inplace N={n} block={block}", a, b)
    x = fp8_ties(gen, 300, 4096, dev)
    qa, sa = official.act_quant(x, 128, "ue8m0", torch.float8_e8m0fnu)
    qb, sb = standin.act_quant(x, 128, "ue8m0", torch.float8_e8m0fnu)
    ok &= report("act_quant values N=4096 block=128", qa.float(), qb.float())
    ok &= report("act_quant scales N=4096 block=128", sa.float(), sb.float())

    # fp4_act_quant inplace, block 32 over 128 dims
    x = fp4_ties(gen, 4096, 128, dev)
    a, b = x.clone(), x.clone()
    official.fp4_act_quant(a, 32, True)
    standin.fp4_act_quant(b, 32, True)
    ok &= report("fp4_act_quant inplace N=128 block=32", a, b)

    # fp8_gemm with e8m0 scales (Flash shapes: wq_a 4096 -> 1024, wkv 4096 -> 512, an odd M)
    for m, k, n in [(37, 4096, 1024), (5, 4096, 512), (300, 1024, 8192)]:
        x = (torch.randn(m, k, generator=gen, device=dev)).bfloat16()
        w = torch.randn(n, k, generator=gen, device=dev) * 0.02
        wq = (w / 2.0 ** -12).clamp(-448, 448).to(torch.float8_e4m3fn)
        ws = torch.exp2(torch.randint(-14, -10, (-(-n // 128), k // 128), generator=gen, device=dev).float()).to(torch.float8_e8m0fnu)
        xq, xs = official.act_quant(x, 128, "ue8m0", torch.float8_e8m0fnu)
        ok &= report(f"fp8_gemm M={m} K={k} N={n}", official.fp8_gemm(xq, xs, wq, ws, torch.float8_e8m0fnu),
                     standin.fp8_gemm(xq, xs, wq, ws, torch.float8_e8m0fnu))

    # sparse_attn: Flash sizes (64 heads, d 512, K = 128 window + 512 compressed) and tiny ones
    for b_, m, h, d, n_kv, k_idx, scale in [(2, 40, 64, 512, 700, 640, 512 ** -0.5), (2, 37, 4, 128, 46, 24, 128 ** -0.5)]:
        q = torch.randn(b_, m, h, d, generator=gen, device=dev).bfloat16()
        kv = torch.randn(b_, n_kv, d, generator=gen, device=dev).bfloat16()
        sink = torch.randn(h, generator=gen, device=dev).float()
        idx = torch.randint(0, n_kv, (b_, m, k_idx), generator=gen, device=dev).int()
        idx[:, ::3, k_idx // 2:] = -1            # holes after the first block
        idx[:, 1::5, 70:75] = -1
        ok &= report(f"sparse_attn b={b_} m={m} h={h} d={d} K={k_idx}",
                     official.sparse_attn(q, kv, sink, idx, scale), standin.sparse_attn(q, kv, sink, idx, scale))

    ok &= check_hadamard(gen, dev)
    print("all bitwise equal" if ok else "some outputs differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
