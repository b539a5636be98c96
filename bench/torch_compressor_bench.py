#!/usr/bin/env python3
"""What a user would otherwise write: the compressor stage in PyTorch, eager and torch.compile.

Same shapes and byte accounting as bench/cuda_compressor_bench.cu (4 sequences x 65536 tokens from
position 0; effective bandwidth = bytes the stage must move / time): C4 main (d 512, overlap) and
C128 (d 512), each = softmax pooling + bf16 + RMSNorm + RoPE on the last 64 dims (interleaved) +
FP8 e4m3 fake-quant of the 448 nope dims in blocks of 64 with power-of-two scales, following
DeepSeek's model.py formulation (docs/math.md "compressor/entries"). Also a device-to-device copy.
Timing: CUDA events, median of repeated runs after warm-up.

  python3 bench/torch_compressor_bench.py [--json out.json] [--no-compile]
"""
import argparse
import json
import statistics

import torch

BATCH, TOKENS, D, ROPE = 4, 65536, 512, 64


def time_ms(fn, warmup=3, reps=15):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def postprocess(pooled, norm_w, cos, sin, eps):
    """pooled [b, n, d] fp32 -> bf16 entries: bf16, RMSNorm, RoPE (interleaved, last 64), FP8 nope."""
    x = pooled.to(torch.bfloat16).float()
    x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    x = (norm_w * x).to(torch.bfloat16)
    nope, pe = x[..., :-ROPE].float(), x[..., -ROPE:].float()
    re, im = pe[..., 0::2], pe[..., 1::2]
    pe = torch.stack((re * cos - im * sin, re * sin + im * cos), dim=-1).flatten(-2).to(torch.bfloat16)
    blocks = nope.unflatten(-1, (-1, 64))
    amax = blocks.abs().amax(-1, keepdim=True).clamp(min=1e-4)
    scale = torch.exp2(torch.ceil(torch.log2(amax / 448.0)))
    q = (blocks / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale
    return torch.cat((q.flatten(-2).to(torch.bfloat16), pe), dim=-1)


def c4_prefill(kv, score, ape, norm_w, cos, sin, eps):
    """kv, score [b, s, 2d] fp32 -> entries [b, s/4, d] (DeepSeek's prefill with overlap_transform)."""
    b, s, _ = kv.shape
    r = 4
    kv = kv.unflatten(1, (-1, r))
    score = score.unflatten(1, (-1, r)) + ape
    n = s // r
    new_kv = kv.new_zeros(b, n, 2 * r, D)
    new_score = score.new_full((b, n, 2 * r, D), float("-inf"))
    new_kv[:, :, r:] = kv[..., D:]
    new_kv[:, 1:, :r] = kv[:, :-1, :, :D]
    new_score[:, :, r:] = score[..., D:]
    new_score[:, 1:, :r] = score[:, :-1, :, :D]
    pooled = (new_kv * new_score.softmax(dim=2)).sum(dim=2)
    return postprocess(pooled, norm_w, cos, sin, eps)


def c128_prefill(kv, score, ape, norm_w, cos, sin, eps):
    """kv, score [b, s, d] fp32 -> entries [b, s/128, d]."""
    kv = kv.unflatten(1, (-1, 128))
    score = score.unflatten(1, (-1, 128)) + ape
    pooled = (kv * score.softmax(dim=2)).sum(dim=2)
    return postprocess(pooled, norm_w, cos, sin, eps)


def stage_bytes(ratio, coff):
    """The bytes the stage must move, as the C++ benchmark counts them."""
    rows, width = BATCH * TOKENS, coff * D
    n = rows // ratio
    state_rows = 4 if ratio == 4 else 0
    return 2 * rows * width * 4 + n * D * 2 + n * ROPE * 4 + BATCH * state_rows * 2 * width * 4 + (ratio * width + D) * 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    results = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cases": []}

    n_copy = 2 << 30
    a = torch.empty(n_copy, dtype=torch.uint8, device=dev).fill_(0x5A)
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a))
    results["cases"].append({"name": "copy D2D 2 GiB", "ms": ms, "TB/s": 2 * n_copy / ms / 1e9})
    del a, b

    for ratio, coff, fn in ((4, 2, c4_prefill), (128, 1, c128_prefill)):
        kv = torch.rand(BATCH, TOKENS, coff * D, device=dev) * 4 - 2
        score = torch.rand(BATCH, TOKENS, coff * D, device=dev) * 6 - 3
        ape = torch.rand(ratio, coff * D, device=dev) * 2 - 1
        norm_w = torch.rand(D, device=dev) + 0.5
        n = TOKENS // ratio
        angle = torch.rand(n, ROPE // 2, device=dev) * 6.28
        cos, sin = torch.cos(angle), torch.sin(angle)
        nbytes = stage_bytes(ratio, coff)
        modes = [("eager", fn)]
        if not args.no_compile:
            modes.append(("torch.compile", torch.compile(fn)))
        for mode, f in modes:
            ms = time_ms(lambda: f(kv, score, ape, norm_w, cos, sin, 1e-6))
            name = f"C{ratio} prefill d{D} {BATCH}x{TOKENS} {mode}"
            results["cases"].append({"name": name, "ms": ms, "TB/s": nbytes / ms / 1e9, "MB": nbytes / 1e6})
        del kv, score
        torch.cuda.empty_cache()

    for c in results["cases"]:
        print(f"{c['name']:<45} {c['ms']:10.3f} ms {c['TB/s']:8.3f} TB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
