#!/usr/bin/env python3
"""FlashMLA (when `flash_mla` is importable) and PyTorch gather + einsum on the attention benchmark's
own inputs, beside this project's kernels.

The inputs are the bytes `dsv4-cuda-attention-export OUT_DIR` wrote (the very tensors
bench/cuda_attention_bench.cu times: MODEL1 FP8 pages for decode, bf16 rows for prefill) together with
this project's v2, v3, v4, v5 and v7 kernel outputs on them (out_v2.bin, lse_v2.bin, out_v3.bin, ...; their
timings are in the C++ benchmark of the same run). The MODEL1 pools are handed to FlashMLA as its k_cache
tensors [num_pages, page_size, 1, 584] (a view of the pages, page stride = the padded page bytes of
verify/layouts/flashmla_model1.h), the index lists as they are (`page * page_size + offset`).
Nothing of FlashMLA is built or shipped here: the script only calls its Python API.

Per shape and batch: time (CUDA events, mean of 10 back-to-back calls, median of 5 repeats), TFLOPS
(FlashMLA's count 2 h (512 + 512) per attended key) and GB/s (the C++ benchmark's byte count), and
the out / lse differences to each of this project's versions (max abs, max rel, cos-diff as FlashMLA's
tests compute it, inf positions), v3, v4, v5 and v7 against v2, and whether v5's bits are v4's.

  python3 bench/python_attention_bench.py CASE_DIR [--json out.json] [--no-torch]
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch

REPEATS, LAUNCHES = 5, 10
VERSIONS = ("v2", "v3", "v4", "v5", "v7")  # this project's kernels whose outputs the export writes
MISSING = []  # cases without some version's outputs: reported, and the script then exits 1


def time_us(fn):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(LAUNCHES):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / LAUNCHES)
    return statistics.median(times)


def load(case, name, dtype, shape=None):
    a = np.fromfile(os.path.join(case, name), dtype=dtype)
    t = torch.from_numpy(a)
    if shape is not None:
        t = t.view(*shape)
    return t.cuda()


def bf16(t_uint16):
    return t_uint16.view(torch.bfloat16)


def diff(name, got, ref):
    """FlashMLA's kernelkit comparison: inf / NaN positions, max abs and rel, cos-diff."""
    got, ref = got.double(), ref.double()
    same_inf = bool(torch.equal(torch.isinf(got), torch.isinf(ref)) and torch.equal(torch.isnan(got), torch.isnan(ref)))
    finite = torch.isfinite(got) & torch.isfinite(ref)
    g, r = got[finite], ref[finite]
    denom = (g * g + r * r).sum().item()
    cos_diff = 0.0 if denom == 0 else 1 - 2 * (g * r).sum().item() / denom
    abs_err = (g - r).abs()
    rel_err = abs_err / (r.abs() + 1e-6)
    return {f"{name}_inf_nan_positions_equal": same_inf, f"{name}_max_abs": abs_err.max().item() if abs_err.numel() else 0.0,
            f"{name}_max_rel": rel_err.max().item() if rel_err.numel() else 0.0, f"{name}_cos_diff": cos_diff}


def exported(case):
    """The versions whose outputs the export wrote (v2's for every shape before any v3, v3's before v4's, ...)."""
    found = [v for v in VERSIONS if os.path.isfile(os.path.join(case, f"out_{v}.bin"))]
    missing = sorted(set(VERSIONS) - set(found))
    if missing:
        MISSING.append(f"{os.path.basename(case)}: no outputs of {', '.join(missing)} (the export failed there)")
    return found


def compare_versions(entry, ours):
    """v3, v4, v5 and v7 against v2 on the same inputs (all within their bounds of the oracle in the GPU tests);
    v5 against v4 bit for bit (same tiles, same consumer arithmetic)."""
    if "v4" in ours and "v5" in ours:
        entry["v5_bits_equal_v4"] = bool(torch.equal(ours["v5"][0].view(torch.int16), ours["v4"][0].view(torch.int16))
                                         and torch.equal(ours["v5"][1].view(torch.int32), ours["v4"][1].view(torch.int32)))
    for v in ("v3", "v4", "v5", "v7"):
        if "v2" not in ours or v not in ours:
            entry[f"{v}_vs_v2"] = "not compared: outputs missing"
            continue
        (o2, l2), (o, l) = ours["v2"], ours[v]
        entry.update(diff(f"{v}_vs_v2_out", o, o2))
        entry.update(diff(f"{v}_vs_v2_lse", l, l2))


def dequant_model1(pool, pages, page_size, page_bytes):
    """A MODEL1 pool [pages * page_bytes] uint8 -> [pages * page_size, 512] bf16 (codes x 2^(e - 127))."""
    p = pool.view(pages, page_bytes)
    data = p[:, : page_size * 576].reshape(pages, page_size, 576)
    scales = p[:, page_size * 576 : page_size * 584].reshape(pages, page_size, 8)[..., :7]
    nope = data[..., :448].contiguous().view(torch.float8_e4m3fn).float().view(pages, page_size, 7, 64)
    scale = torch.pow(2.0, scales.float() - 127).unsqueeze(-1)
    rope = data[..., 448:].contiguous().view(torch.bfloat16).float()
    return torch.cat([(nope * scale).view(pages, page_size, 448), rope], dim=-1).view(-1, 512).to(torch.bfloat16)


def torch_sparse_attention(q, kv, idx, sink, scale, chunk=None):
    """PyTorch gather + einsum: q [n, h, d] bf16, kv [N, d] bf16, idx [n, k] (-1 invalid) -> out bf16, lse fp32 [n, h]."""
    n = q.shape[0]
    chunk = chunk or n
    outs, lses = [], []
    for s in range(0, n, chunk):
        qi, ii = q[s : s + chunk], idx[s : s + chunk]
        valid = ii >= 0
        rows = kv[ii.clamp(min=0)]                                        # [c, k, d] bf16 gather
        logits = torch.einsum("chd,ckd->chk", qi, rows).float() * scale
        logits = logits.masked_fill(~valid[:, None, :], float("-inf"))
        lse = torch.logsumexp(logits, dim=-1)                             # [c, h]
        m = torch.maximum(lse, sink[None, :])
        p = torch.exp(logits - m[..., None])
        denom = torch.exp(lse - m) + torch.exp(sink[None, :] - m)
        out = torch.einsum("chk,ckd->chd", p.to(torch.bfloat16), rows).float() / denom[..., None]
        outs.append(out.to(torch.bfloat16))
        lses.append(lse.masked_fill(lse == float("-inf"), float("inf")))  # FlashMLA's convention: +inf
    return torch.cat(outs), torch.cat(lses)


def decode_case(case, meta, flash_mla, use_torch, results):
    b_all, s_q, h = meta["batch"], meta["s_q"], meta["n_heads"]
    topk, extra_topk = meta["topk"], meta["extra_topk"]
    ps, eps = meta["page_size"], meta["extra_page_size"]
    wpages, epages = meta["window_pages"], meta["extra_pages"]
    wbytes, ebytes = meta["window_page_bytes"], meta["extra_page_bytes"]
    scale = meta["softmax_scale"]
    q_all = bf16(load(case, "q.bin", np.uint16, (b_all, s_q, h, 512)))
    wpool = load(case, "window_pool.bin", np.uint8)
    epool = load(case, "extra_pool.bin", np.uint8)
    widx_all = load(case, "window_idx.bin", np.int32, (b_all, s_q, topk))
    eidx_all = load(case, "extra_idx.bin", np.int32, (b_all, s_q, extra_topk))
    sink = load(case, "sink.bin", np.float32)
    ours = {v: (bf16(load(case, f"out_{v}.bin", np.uint16, (b_all, s_q, h, 512))),
                load(case, f"lse_{v}.bin", np.float32, (b_all, h, s_q))) for v in exported(case)}

    def k_cache(pool, pages, page, page_bytes):  # FlashMLA's view: [pages, page, 1, 584], page stride page_bytes
        return pool.view(torch.float8_e4m3fn).view(pages, page_bytes)[:, : page * 584].view(pages, page, 1, 584)

    wcache, ecache = k_cache(wpool, wpages, ps, wbytes), k_cache(epool, epages, eps, ebytes)
    if use_torch:
        kv_all = torch.cat([dequant_model1(wpool, wpages, ps, wbytes), dequant_model1(epool, epages, eps, ebytes)])
    for b in meta["batches"]:
        rows = b * s_q
        q, widx, eidx = q_all[:b].contiguous(), widx_all[:b].contiguous(), eidx_all[:b].contiguous()
        flops = meta["flops_per_row"] * rows
        entry = {"case": meta["name"], "kind": "decode", "batch": b, "flops": flops}
        compare_versions(entry, {v: (o[:b], l[:b]) for v, (o, l) in ours.items()})
        if flash_mla is not None:
            sched, _ = flash_mla.get_mla_metadata()

            def run():
                return flash_mla.flash_mla_with_kvcache(
                    q, wcache, None, None, 512, sched, None, scale, False, True, indices=widx, attn_sink=sink,
                    extra_k_cache=ecache, extra_indices_in_kvcache=eidx, topk_length=None, extra_topk_length=None)

            out, lse = run()
            us = time_us(run)
            entry.update({"flashmla_us": us, "flashmla_tflops": flops / us * 1e-6})
            for v, (o, l) in ours.items():
                entry.update(diff(f"flashmla_vs_{v}_out", out, o[:b]))
                entry.update(diff(f"flashmla_vs_{v}_lse", lse, l[:b]))
        if use_torch:
            idx = torch.cat([widx, eidx + wpages * ps], dim=-1).view(rows, topk + extra_topk)
            qf = q.view(rows, h, 512)

            def run_torch():
                return torch_sparse_attention(qf, kv_all, idx, sink, scale)

            out, lse = run_torch()
            us = time_us(run_torch)
            entry.update({"torch_us": us, "torch_tflops": flops / us * 1e-6})
            for v, (o, l) in ours.items():
                entry.update(diff(f"torch_vs_{v}_out", out.view(b, s_q, h, 512), o[:b]))
                entry.update(diff(f"torch_vs_{v}_lse", lse.view(b, s_q, h).transpose(1, 2), l[:b]))
        results.append(entry)
        print(json.dumps(entry), flush=True)


def prefill_case(case, meta, flash_mla, use_torch, results):
    s_q, h, topk, s_kv = meta["s_q"], meta["n_heads"], meta["topk"], meta["s_kv"]
    scale = meta["softmax_scale"]
    q = bf16(load(case, "q.bin", np.uint16, (s_q, h, 512)))
    kv = bf16(load(case, "kv.bin", np.uint16, (s_kv, 512)))
    idx = load(case, "idx.bin", np.int32, (s_q, topk))
    sink = load(case, "sink.bin", np.float32)
    ours = {v: (bf16(load(case, f"out_{v}.bin", np.uint16, (s_q, h, 512))), load(case, f"lse_{v}.bin", np.float32, (s_q, h)))
            for v in exported(case)}
    flops = meta["flops"]
    entry = {"case": meta["name"], "kind": "prefill", "s_q": s_q, "flops": flops}
    compare_versions(entry, ours)
    if flash_mla is not None:
        kv3, idx3 = kv.view(s_kv, 1, 512), idx.view(s_q, 1, topk)

        def run():
            return flash_mla.flash_mla_sparse_fwd(q, kv3, idx3, scale, 512, attn_sink=sink)

        out, _max_logits, lse = run()[:3]
        us = time_us(run)
        entry.update({"flashmla_us": us, "flashmla_tflops": flops / us * 1e-6})
        for v, (o, l) in ours.items():
            entry.update(diff(f"flashmla_vs_{v}_out", out, o))
            entry.update(diff(f"flashmla_vs_{v}_lse", lse, l))
    if use_torch:
        chunk = 256 if h * topk > 64 * 512 else 512  # bounds the gathered [chunk, topk, 512] rows

        def run_torch():
            return torch_sparse_attention(q, kv, idx, sink, scale, chunk=chunk)

        out, lse = run_torch()
        us = time_us(run_torch)
        entry.update({"torch_us": us, "torch_tflops": flops / us * 1e-6})
        for v, (o, l) in ours.items():
            entry.update(diff(f"torch_vs_{v}_out", out, o))
            entry.update(diff(f"torch_vs_{v}_lse", lse, l))
    results.append(entry)
    print(json.dumps(entry), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case_dir")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch gather + einsum baseline")
    args = ap.parse_args()
    try:
        import flash_mla  # built on the machine by whoever runs this; never part of this repository
        print(f"flash_mla imported from {os.path.dirname(flash_mla.__file__)}", flush=True)
    except ImportError as e:
        flash_mla = None
        print(f"flash_mla not importable ({e}): FlashMLA columns skipped", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    results = []
    for name in sorted(os.listdir(args.case_dir)):
        case = os.path.join(args.case_dir, name)
        meta_path = os.path.join(case, "meta.json")
        if not os.path.isfile(meta_path):
            continue
        with open(meta_path) as f:
            meta = json.load(f)
        try:
            if meta["kind"] == "decode":
                decode_case(case, meta, flash_mla, not args.no_torch, results)
            else:
                prefill_case(case, meta, flash_mla, not args.no_torch, results)
        except Exception as e:  # one failing engine call must not lose the other cases' numbers
            print(f"{name}: {type(e).__name__}: {e}", flush=True)
            results.append({"case": meta.get("name", name), "error": f"{type(e).__name__}: {e}"})
        torch.cuda.empty_cache()
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp, args.json)
    print(f"{len(results)} results", flush=True)
    for m in MISSING:
        print(f"missing: {m}", flush=True)
    return 1 if MISSING else 0


if __name__ == "__main__":
    sys.exit(main())
