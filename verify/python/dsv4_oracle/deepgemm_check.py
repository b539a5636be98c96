"""DeepGEMM's lightning-indexer logits against the oracle (docs/python.md "DeepGEMM check").

fp8_mqa_logits (prefill, clean_logits: -inf outside [ks, ke) must match exactly) and
fp8_paged_mqa_logits (decode over the paged FP8 indexer cache in the deepgemm_indexer_fp8 layout,
block_kv 64, block tables scrambled; logits past context_len are not compared) on FP8 e4m3 queries
and keys (one fp32 scale per key, sglang's amax / 448) with fp32 weights. The reference is the
oracle's indexer_scores in the exact policy on the dequantized values (DeepGEMM's "simulated"
tier): calc_diff < 5e-6, plus 20 reruns bitwise. Writes DIR/deepgemm_check.{json,md}.

    python -m dsv4_oracle.deepgemm_check --out DIR

Exit status: 0 all pass, 1 a case failed, 77 deep_gemm or CUDA missing (no report written).
"""
import argparse
import faulthandler
import sys

import numpy as np

from . import _core, testing
from . import layouts as _layouts
from ._report import environment, write_reports
from .compare import calc_diff

HEADS, DIM, BLOCK_KV = 64, 128, 64
SIMULATED_TOL = 5e-6  # DeepGEMM's gate against the quantize-dequantize reference (fp32 logits)


def fp8_keys(gen, n):
    """Keys [n, 128] as DeepGEMM's FP8 cache holds them: e4m3 codes times one fp32 scale per key."""
    x = testing.bf16_values(gen, (n, DIM))
    layout = _core.PagedLayout("deepgemm_indexer_fp8", BLOCK_KV)
    fmt = _core.BlockFormat(_core.Element.e4m3, DIM, _core.ScaleRule.fp32_amax)
    return _core.decode_stored(layout, _core.quantize_to_layout_with(layout, x, fmt), n)


def oracle_logits(q, w, keys, context_len):
    """sum_h w_h relu(q_h . k_j) for j < context_len, fp64 (the oracle's indexer_scores, exact policy,
    ratio 1 so that every key up to the query's position is visible). q [s, H*D] -> [s, context_len]"""
    return _core.indexer_scores(q, w, keys[:context_len], context_len - q.shape[0], 1, "exact")


def paged_case(dg, torch, gen, batch, reruns):
    dev = torch.device("cuda")
    lens = gen.integers(1, 4096, size=batch)
    layout = _core.PagedLayout("deepgemm_indexer_fp8", BLOCK_KV)
    keys = [fp8_keys(gen, int(n)) for n in lens]  # (codes, scales, _) per sequence
    values = [c * s for c, s, _ in keys]
    blocks = sum(layout.pages_for(int(n)) for n in lens) + 1
    fmt = _core.BlockFormat(_core.Element.e4m3, DIM, _core.ScaleRule.fp32_amax)
    pool = np.zeros(blocks * layout.page_bytes, dtype=np.uint8)
    order = gen.permutation(blocks).astype(np.int32)
    table = np.zeros((batch, max(layout.pages_for(int(n)) for n in lens)), dtype=np.int32)
    used = 0
    for b, (codes, scales, _) in enumerate(keys):
        pages = layout.pages_for(int(lens[b]))
        table[b, :pages] = order[used:used + pages]
        used += pages
        seq_bytes = _core.encode_stored(layout, codes, scales, np.zeros((len(codes), 0)))
        _core.scatter_pages(layout, seq_bytes, table[b, :pages].copy(), pool)
    q = _core.e4m3(testing.bf16_values(gen, (batch, HEADS * DIM)))[0]
    w = gen.standard_normal((batch, HEADS)).astype(np.float32).astype(np.float64)
    ctx = torch.from_numpy(lens.astype(np.int32)).to(dev).view(batch, 1)
    kv_cache = torch.from_numpy(pool).to(dev).view(blocks, BLOCK_KV, 1, DIM + 4)
    fn = getattr(dg, "fp8_paged_mqa_logits", None) or dg.fp8_fp4_paged_mqa_logits
    meta = dg.get_paged_mqa_logits_metadata(ctx, BLOCK_KV, dg.get_num_sms())
    q_t = torch.from_numpy(q.astype(np.float32)).to(dev).view(batch, 1, HEADS, DIM).to(torch.float8_e4m3fn)
    if fn.__name__.startswith("fp8_fp4"):
        q_t = (q_t, None)
    args = (q_t, kv_cache, torch.from_numpy(w.astype(np.float32)).to(dev), ctx,
            torch.from_numpy(table).to(dev), meta, int(table.shape[1] * BLOCK_KV), False)
    got = fn(*args).float().cpu().numpy()
    rerun = all(np.array_equal(fn(*args).float().cpu().numpy(), got, equal_nan=True) for _ in range(reruns))
    diffs = []
    for b in range(batch):
        ref = oracle_logits(q[b:b + 1], w[b:b + 1], values[b], int(lens[b]))[0]
        diffs.append(calc_diff(got[b, :lens[b]], ref))
    worst = max(diffs)
    return {"case": f"paged-b{batch}", "kernel": fn.__name__, "worst_calc_diff": worst, "rerun_bitwise": rerun,
            "verdict": "PASS" if worst < SIMULATED_TOL and rerun else "FAIL"}


def prefill_case(dg, torch, gen, seq_len, n_keys, reruns):
    dev = torch.device("cuda")
    codes, scales, _ = fp8_keys(gen, n_keys)
    keys = codes * scales
    q = _core.e4m3(testing.bf16_values(gen, (seq_len, HEADS * DIM)))[0]
    w = gen.standard_normal((seq_len, HEADS)).astype(np.float32).astype(np.float64)
    ke = np.sort(gen.integers(1, n_keys + 1, size=seq_len)).astype(np.int32)
    ks = np.zeros(seq_len, dtype=np.int32)
    fn = getattr(dg, "fp8_mqa_logits", None) or dg.fp8_fp4_mqa_logits
    q_t = torch.from_numpy(q.astype(np.float32)).to(dev).view(seq_len, HEADS, DIM).to(torch.float8_e4m3fn)
    kv = (torch.from_numpy(codes.astype(np.float32)).to(dev).to(torch.float8_e4m3fn),
          torch.from_numpy(scales[:, 0].astype(np.float32)).to(dev))
    q_arg = (q_t, None) if fn.__name__.startswith("fp8_fp4") else q_t
    args = (q_arg, kv, torch.from_numpy(w.astype(np.float32)).to(dev), torch.from_numpy(ks).to(dev),
            torch.from_numpy(ke).to(dev), True)
    got = fn(*args).float().cpu().numpy()
    rerun = all(np.array_equal(fn(*args).float().cpu().numpy(), got, equal_nan=True) for _ in range(reruns))
    ref = np.full((seq_len, n_keys), -np.inf)
    for i in range(seq_len):
        ref[i, :ke[i]] = _core.indexer_scores(q[i:i + 1], w[i:i + 1], keys[:ke[i]], int(ke[i]) - 1, 1, "exact")[0]
    mask_equal = bool(np.array_equal(np.isneginf(got), np.isneginf(ref)))
    diff = calc_diff(np.where(np.isneginf(ref), 0, got), np.where(np.isneginf(ref), 0, ref))
    return {"case": f"prefill-s{seq_len}-kv{n_keys}", "kernel": fn.__name__, "worst_calc_diff": diff,
            "minus_inf_mask_equal": mask_equal, "rerun_bitwise": rerun,
            "verdict": "PASS" if diff < SIMULATED_TOL and mask_equal and rerun else "FAIL"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reruns", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    # A crash inside a native library (the engine's, torch's or ours) prints the Python stack that led to it.
    faulthandler.enable()
    try:
        import torch
        import deep_gemm
    except ImportError as e:
        print(f"deepgemm_check: {e}; nothing checked, no report written", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("deepgemm_check: no CUDA device; nothing checked, no report written", file=sys.stderr)
        return 77
    gen = np.random.default_rng(args.seed)
    rows = []
    for seq_len, n_keys in ((128, 1024), (512, 4096)):
        rows.append(prefill_case(deep_gemm, torch, gen, seq_len, n_keys, args.reruns))
        print(rows[-1], flush=True)
    for batch in (1, 32, 128):
        rows.append(paged_case(deep_gemm, torch, gen, batch, args.reruns))
        print(rows[-1], flush=True)
    write_reports(args.out, "deepgemm_check", "DeepGEMM indexer logits vs the dsv4 oracle", environment(deep_gemm, "DEEPGEMM_COMMIT"),
                  rows, ["case", "kernel", "verdict", "worst_calc_diff", "minus_inf_mask_equal", "rerun_bitwise"])
    failed = sum(r["verdict"] != "PASS" for r in rows)
    print(f"{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
