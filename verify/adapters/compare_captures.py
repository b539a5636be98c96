#!/usr/bin/env python3
"""Compares two captures of the same layers, inputs and weights dataset by dataset.

Made for checking the kernel stand-ins against DeepSeek's TileLang kernels: capture once with
`--kernels official` and once with `--kernels standin` (same --seed, --device cuda), then

    python3 verify/adapters/compare_captures.py A.h5 B.h5

prints, for every dataset both files hold, how many values are bitwise equal, the largest
absolute difference, and that difference in units of the bf16 spacing at the value (for
datasets held in bf16). A stage that differs makes every later stage of the call differ too, so
read the first differing stage of each call. Index datasets are compared as sets per row.
"""
import argparse
import sys

import h5py
import numpy as np


def bf16_ulp(values: np.ndarray) -> np.ndarray:
    mag = np.maximum(np.abs(values.astype(np.float64)), 2.0 ** -126)
    return 2.0 ** (np.floor(np.log2(mag)) - 7)


def compare_dense(a: np.ndarray, b: np.ndarray, dtype: str):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
    finite = np.isfinite(a64) & np.isfinite(b64)
    with np.errstate(invalid="ignore"):  # -inf - -inf where both hold a masked score
        diff = np.where(finite, np.abs(a64 - b64), np.where(same, 0.0, np.inf))
    worst = float(diff.max()) if diff.size else 0.0
    ulps = float((diff / bf16_ulp(np.maximum(np.abs(a64), np.abs(b64)))).max()) if dtype == "bfloat16" and diff.size else None
    return int(same.sum()), worst, ulps


def compare_index_sets(a: np.ndarray, b: np.ndarray):
    rows = a.reshape(-1, a.shape[-1]) if a.size else a.reshape(0, 0)
    other = b.reshape(-1, b.shape[-1]) if b.size else b.reshape(0, 0)
    differing = sum(1 for x, y in zip(rows, other) if set(x[x >= 0].tolist()) != set(y[y >= 0].tolist()))
    return len(rows), differing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--only-different", action="store_true", help="print only datasets that differ")
    opts = p.parse_args(argv)
    fa, fb = h5py.File(opts.a, "r"), h5py.File(opts.b, "r")
    names = []
    fa.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    n_diff = 0
    for name in names:
        if name not in fb:
            print(f"{name}: only in {opts.a}")
            continue
        a, b = fa[name][()], fb[name][()]
        if a.shape != b.shape:
            print(f"{name}: shape {a.shape} vs {b.shape}")
            n_diff += 1
            continue
        if np.issubdtype(a.dtype, np.integer):
            rows, differing = compare_index_sets(a, b)
            if differing:
                n_diff += 1
            if differing or not opts.only_different:
                print(f"{name}: {rows - differing}/{rows} rows select the same set")
            continue
        dtype = fa[name].attrs.get("dtype", "float32")
        same, worst, ulps = compare_dense(a, b, dtype)
        if same != a.size:
            n_diff += 1
        if same != a.size or not opts.only_different:
            ulp_text = f", {ulps:.3g} bf16 ulp" if ulps is not None else ""
            print(f"{name}: {same}/{a.size} bitwise equal, max |diff| {worst:.3g}{ulp_text}")
    print(f"{n_diff} of {len(names)} datasets differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
