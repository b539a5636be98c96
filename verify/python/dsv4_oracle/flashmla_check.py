"""FlashMLA's V4 sparse decode against the oracle (docs/python.md "FlashMLA check").

Runs flash_mla.flash_mla_with_kvcache with the FP8 KV cache in the MODEL1 layout (window pool of
256-token pages, compressed pool of 64-entry pages as extra_k_cache, pages scrambled through block
tables), attn_sink and topk_length / extra_topk_length, at V4-Flash (64 heads, window 128 + top-512)
and V4-Pro (128 heads, window 128 + top-1024) shapes, on inputs the oracle made and converted with
verify/layouts. Every case diffs out and lse against
  - the oracle's sparse attention in the official policy (P rounded to bf16 before P.V) and in the
    fp32-P variant (P kept in fp32): FlashMLA's own gate (out abs 1e-3 or rel 2.01/128, cos-diff
    5e-6), the project's 'attn/core' record, and the fraction of bf16 outputs equal bit for bit;
  - the lse in fp64 (natural log, sink excluded, +inf for rows with no key): abs 1e-6 or rel 8.01/65536;
and reruns the kernel for a bitwise gate. Writes DIR/flashmla_check.{json,md}.

    python -m dsv4_oracle.flashmla_check --out DIR [--models flash,pro] [--batches 1,2,32,74,128]

Needs torch with CUDA and an importable flash_mla (built elsewhere; this repository carries none of it).
Exit status: 0 all cases pass, 1 a case failed, 2 bad arguments, 77 flash_mla or CUDA missing.
"""
import argparse
import faulthandler
import sys
import time

import numpy as np

from . import _core, testing
from . import layouts as _layouts
from ._report import environment, write_reports
from .compare import calc_diff, check_allclose, compare

MODELS = {"flash": (64, 512), "pro": (128, 1024)}  # heads, top-k of the compressed pool
WINDOW = 128
WINDOW_PAGE, COMPRESSED_PAGE = 256, 64  # FlashMLA's MODEL1 configs: block_size 256, extra_block_size 64
ADVERSARIAL = [  # (kind, poison, sink)
    ("minus1_front", True, "random"),
    ("minus1_anywhere", True, "random"),
    ("no_valid", True, "random"),
    ("zero_length", True, "random"),
    ("past_length", True, "random"),
    ("random", True, "inf"),
    ("random", False, "none"),
]
OUT_TOL = dict(abs_tol=1e-3, rel_tol=2.01 / 128, cos_diff_tol=5e-6)  # FlashMLA's decode gate
LSE_TOL = dict(abs_tol=1e-6, rel_tol=8.01 / 65536, cos_diff_tol=None)


def build_inputs(case, seed=0):
    """The case as FlashMLA takes it (numpy): MODEL1 pools with scrambled block tables and unused slots
    NaN, pool indices [b, 1, K] (block * page + offset), lengths [b] or None."""
    gen = np.random.default_rng(seed)
    wl = _core.PagedLayout("flashmla_model1", WINDOW_PAGE)
    cl = _core.PagedLayout("flashmla_model1", COMPRESSED_PAGE)
    b = case.batch
    w_blocks = sum(wl.pages_for(case.window_kv.shape[1]) for _ in range(b)) + 2
    c_blocks = sum(cl.pages_for(case.compressed_kv.shape[1]) for _ in range(b)) + 2
    w_pool, w_table = _layouts.paged_pool(wl, list(case.window_kv), w_blocks, gen)
    c_pool, c_table = _layouts.paged_pool(cl, list(case.compressed_kv), c_blocks, gen)
    return {
        "window_layout": wl, "compressed_layout": cl,
        "window_pool": w_pool, "compressed_pool": c_pool,
        "window_table": w_table, "compressed_table": c_table,
        "indices": _core.to_pool_indices(case.window_idx, w_table, WINDOW_PAGE)[:, None, :],
        "extra_indices": _core.to_pool_indices(case.topk_idx, c_table, COMPRESSED_PAGE)[:, None, :],
        "topk_length": case.window_length, "extra_topk_length": case.topk_length,
    }


def emulate_gather(inputs):
    """CPU check of the conversion: the rows FlashMLA will read for each index (decoded from the pools at
    the pool indices; -1 gives NaN rows). -> (window rows [b, W, 512], compressed rows [b, K, 512])"""
    def gather(pool, layout, idx):
        n = pool.size // layout.page_bytes * layout.page_size
        values = _core.decode(layout, pool, n)
        flat = idx.reshape(idx.shape[0], -1)
        out = np.full(flat.shape + (512,), np.nan)
        out[flat >= 0] = values[flat[flat >= 0]]
        return out
    return (gather(inputs["window_pool"], inputs["window_layout"], inputs["indices"]),
            gather(inputs["compressed_pool"], inputs["compressed_layout"], inputs["extra_indices"]))


def run_flashmla(flash_mla, torch, case, inputs):
    """One call of flash_mla_with_kvcache -> (out [b, H, 512] float64, lse [b, H] float64)."""
    dev = torch.device("cuda")

    def cache(pool, layout):
        t = torch.from_numpy(np.ascontiguousarray(pool)).to(dev)
        return _layouts.torch_cache_view(t, layout, torch.float8_e4m3fn)

    def i32(a):
        return None if a is None else torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(dev)

    q = torch.from_numpy(case.q.astype(np.float32)).to(dev, torch.bfloat16)[:, None]  # [b, 1, H, 512]
    sched, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(
        q, cache(inputs["window_pool"], inputs["window_layout"]), None, None, 512, sched, None, case.softmax_scale,
        False, True, indices=i32(inputs["indices"]),
        attn_sink=torch.from_numpy(case.sink.astype(np.float32)).to(dev),
        extra_k_cache=cache(inputs["compressed_pool"], inputs["compressed_layout"]),
        extra_indices_in_kvcache=i32(inputs["extra_indices"]),
        topk_length=i32(inputs["topk_length"]), extra_topk_length=i32(inputs["extra_topk_length"]))
    torch.cuda.synchronize()
    return out[:, 0].float().cpu().numpy().astype(np.float64), lse[:, :, 0].float().cpu().numpy().astype(np.float64)


def fp32_p_policy():
    p = _core.PrecisionPolicy("official")
    p.attn_probs = _core.Storage.fp32
    p.name = "official-fp32-P"
    return p


def check_case(flash_mla, torch, case, reruns):
    inputs = build_inputs(case)
    start = time.time()
    out, lse = run_flashmla(flash_mla, torch, case, inputs)  # before any reference tensor exists
    rerun_equal = True
    for _ in range(reruns):
        out_again, lse_again = run_flashmla(flash_mla, torch, case, inputs)
        rerun_equal &= bool(np.array_equal(out_again, out, equal_nan=True) and np.array_equal(lse_again, lse, equal_nan=True))
    kernel_s = time.time() - start
    start = time.time()
    ref_lse = case.lse()
    row = {"case": case.name, "heads": case.heads, "batch": case.batch, "window": case.window_idx.shape[1],
           "topk": case.topk_idx.shape[1], "rerun_bitwise": rerun_equal, "kernel_s": round(kernel_s, 3)}
    b, h = out.shape[:2]
    for tag, policy in (("official", "official"), ("fp32P", fp32_p_policy())):
        ref = case.oracle(policy)
        gate = check_allclose(out, ref, name=f"out vs {tag}", **OUT_TOL)
        record = compare("attn/core", ref.reshape(b, 1, h, 512), out.reshape(b, 1, h, 512), "official")
        same = np.mean((out == ref) | (np.isnan(out) & np.isnan(ref)))
        row.update({f"{tag}_gate": gate.passed, f"{tag}_max_abs": gate.max_abs, f"{tag}_cos_diff": gate.cos_diff,
                    f"{tag}_calc_diff": calc_diff(np.nan_to_num(out), np.nan_to_num(ref)),
                    f"{tag}_bitwise_equal_fraction": float(same), f"{tag}_record": str(record),
                    f"{tag}_message": gate.message})
    lse_gate = check_allclose(lse, ref_lse, name="lse", **LSE_TOL)
    row.update({"lse_gate": lse_gate.passed, "lse_max_abs": lse_gate.max_abs, "lse_max_rel": lse_gate.max_rel,
                "lse_message": lse_gate.message, "oracle_s": round(time.time() - start, 3)})
    closer = "official" if row["official_max_abs"] <= row["fp32P_max_abs"] else "fp32P"
    row["p_rounding_closer"] = closer
    row["verdict"] = "PASS" if (row["official_gate"] and lse_gate.passed and rerun_equal) else "FAIL"
    return row


def cases(models, batches, adversarial_batch, seed):
    for model in models:
        heads, topk = MODELS[model]
        n_compressed = topk + 256
        for batch in batches:
            yield testing.sparse_decode_case(heads, batch, WINDOW, topk, n_window=WINDOW_PAGE, n_compressed=n_compressed,
                                             seed=seed + batch, kind="random", poison=True)
        for i, (kind, poison, sink) in enumerate(ADVERSARIAL):
            c = testing.sparse_decode_case(heads, adversarial_batch, WINDOW, topk, n_window=WINDOW_PAGE,
                                           n_compressed=n_compressed, seed=seed + 1000 + i, kind=kind, poison=poison,
                                           sink=sink)
            c.name += f"-sink_{sink}"
            yield c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for flashmla_check.json / .md")
    ap.add_argument("--models", default="flash,pro")
    ap.add_argument("--batches", default="1,2,32,74,128")
    ap.add_argument("--adversarial-batch", type=int, default=8)
    ap.add_argument("--reruns", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    # A crash inside a native library (the engine's, torch's or ours) prints the Python stack that led to it.
    faulthandler.enable()
    models = args.models.split(",")
    if any(m not in MODELS for m in models):
        print(f"flashmla_check: unknown model in {args.models!r} (known: {', '.join(MODELS)})", file=sys.stderr)
        return 2
    try:
        import torch
        import flash_mla
    except ImportError as e:
        print(f"flashmla_check: {e}; nothing checked, no report written", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("flashmla_check: no CUDA device; nothing checked, no report written", file=sys.stderr)
        return 77
    rows = []
    for case in cases(models, [int(b) for b in args.batches.split(",")], args.adversarial_batch, args.seed):
        row = check_case(flash_mla, torch, case, args.reruns)
        print(f"{row['verdict']}  {row['case']}  out-vs-official max_abs {row['official_max_abs']:.3e}  "
              f"fp32P {row['fp32P_max_abs']:.3e}  lse max_abs {row['lse_max_abs']:.3e}  closer: {row['p_rounding_closer']}",
              flush=True)
        rows.append(row)
    write_reports(args.out, "flashmla_check", "FlashMLA V4 sparse decode vs the dsv4 oracle",
                  environment(flash_mla, "FLASHMLA_COMMIT"), rows,
                  ["case", "verdict", "official_max_abs", "official_cos_diff", "official_bitwise_equal_fraction",
                   "fp32P_max_abs", "fp32P_cos_diff", "fp32P_bitwise_equal_fraction", "p_rounding_closer",
                   "lse_max_abs", "lse_max_rel", "rerun_bitwise"])
    failed = sum(r["verdict"] != "PASS" for r in rows)
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
