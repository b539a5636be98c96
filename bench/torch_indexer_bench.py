#!/usr/bin/env python3
"""What a user would otherwise run for the lightning indexer: PyTorch, beside bench/cuda_indexer_bench.cu.

Same shapes and accounting as the C++ benchmark:
  logits prefill  64 heads x 128, s 4096 queries x n keys (1024 .. 16384), every query against every
                  key: logits = sum_h w_h relu(q_h . k) as bf16 einsum (fp32 accumulate) + relu +
                  weighted head sum in fp32; FLOP = 2 s n 64 128;
  logits decode   batch 128 x 65536 keys, one query each, bf16 keys (dense per sequence; the paged
                  gather is not counted); effective bandwidth over the FP8 cache bytes the CUDA kernel
                  reads (132 B a key + 4 B logit), for comparison;
  top-k           torch.topk (sorted) of 262144 x 1 and 16384 x 128 candidates, k 512 and 1024.
If DeepGEMM imports (deep_gemm.fp8_mqa_logits), its prefill logits run on the same shapes too.
Timing: CUDA events, median of repeated runs after warm-up.

  python3 bench/torch_indexer_bench.py [--json out.json]
"""
import argparse
import json
import statistics

import torch

HEADS, DIM = 64, 128


def time_ms(fn, warmup=3, reps=10):
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


def logits_einsum(q, k, w):
    """q [s, H, D] bf16, k [n, D] bf16, w [s, H] fp32 -> [s, n] fp32."""
    scores = torch.einsum("shd,nd->shn", q, k).float().relu_()
    return torch.einsum("shn,sh->sn", scores, w)


def bench_prefill(results):
    dev = "cuda"
    s = 4096
    for n in (1024, 2048, 4096, 8192, 16384):
        q = torch.randn(s, HEADS, DIM, device=dev, dtype=torch.bfloat16)
        k = torch.randn(n, DIM, device=dev, dtype=torch.bfloat16)
        w = torch.randn(s, HEADS, device=dev) * 0.05
        ms = time_ms(lambda: logits_einsum(q, k, w))
        flop = 2.0 * s * n * HEADS * DIM
        results.append({"name": f"torch/logits_prefill/bf16_einsum/s{s}/n{n}", "ms": ms, "TFLOPS": flop / ms / 1e9})
        print(f"logits prefill bf16 einsum s {s} n {n}: {ms * 1e3:.1f} us, {flop / ms / 1e9:.1f} TFLOPS", flush=True)
        del q, k, w
        torch.cuda.empty_cache()


def bench_decode(results):
    dev = "cuda"
    batch, ctx = 128, 65536
    q = torch.randn(batch, HEADS, DIM, device=dev, dtype=torch.bfloat16)
    k = torch.randn(batch, ctx, DIM, device=dev, dtype=torch.bfloat16)
    w = torch.randn(batch, HEADS, device=dev) * 0.05

    def run():
        scores = torch.einsum("bhd,bnd->bhn", q, k).float().relu_()
        return torch.einsum("bhn,bh->bn", scores, w)

    ms = time_ms(run, reps=5)
    cache_bytes = batch * ctx * (DIM + 4 + 4)
    results.append({"name": f"torch/logits_decode/bf16_einsum/b{batch}/ctx{ctx}", "ms": ms,
                    "fp8_cache_equivalent_TBps": cache_bytes / ms / 1e9})
    print(f"logits decode bf16 einsum b {batch} ctx {ctx}: {ms * 1e3:.1f} us "
          f"({cache_bytes / ms / 1e9:.2f} TB/s over the FP8 cache bytes)", flush=True)
    del q, k, w
    torch.cuda.empty_cache()


def bench_topk(results):
    dev = "cuda"
    for rows, n in ((1, 262144), (128, 16384)):
        x = torch.rand(rows, n, device=dev) * 2 - 1
        for kk in (512, 1024):
            ms = time_ms(lambda: torch.topk(x, kk, dim=-1, sorted=True), reps=50)
            results.append({"name": f"torch/topk/b{rows}/n{n}/k{kk}", "ms": ms})
            print(f"torch.topk b {rows} n {n} k {kk}: {ms * 1e3:.1f} us", flush=True)


def bench_deepgemm(results):
    try:
        import deep_gemm  # noqa: F401
    except Exception as e:  # not installed, or its JIT cannot build here
        print(f"deep_gemm not importable ({type(e).__name__}: {e}); its logits are not measured", flush=True)
        return
    dev = "cuda"
    s = 4096
    for n in (4096, 16384):
        q = torch.randn(s, HEADS, DIM, device=dev).to(torch.float8_e4m3fn)
        kv = torch.randn(n, DIM, device=dev).to(torch.float8_e4m3fn)
        kv_scale = torch.ones(n, device=dev)
        w = torch.randn(s, HEADS, device=dev) * 0.05
        ks = torch.zeros(s, dtype=torch.int32, device=dev)
        ke = torch.full((s,), n, dtype=torch.int32, device=dev)
        try:
            ms = time_ms(lambda: deep_gemm.fp8_mqa_logits(q, (kv, kv_scale), w, ks, ke))
        except Exception as e:
            print(f"deep_gemm.fp8_mqa_logits failed ({type(e).__name__}: {e})", flush=True)
            return
        flop = 2.0 * s * n * HEADS * DIM
        results.append({"name": f"deepgemm/fp8_mqa_logits/s{s}/n{n}", "ms": ms, "TFLOPS": flop / ms / 1e9})
        print(f"DeepGEMM fp8_mqa_logits s {s} n {n}: {ms * 1e3:.1f} us, {flop / ms / 1e9:.1f} TFLOPS", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        raise SystemExit(77)
    results = []
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    bench_prefill(results)
    bench_decode(results)
    bench_topk(results)
    bench_deepgemm(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
