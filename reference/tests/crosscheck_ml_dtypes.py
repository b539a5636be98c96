#!/usr/bin/env python3
"""Cross-check of the oracle's number formats against numpy + ml_dtypes, bit for bit.

usage: crosscheck_ml_dtypes.py PATH/TO/dsv4-quantizer-dump

1. Element roundings of about a million values (normal values at many scales, log-uniform
   magnitudes, every grid point, every midpoint between neighbours and the floats next to it,
   values around +-448 / 464, subnormals, zeros, NaN) against ml_dtypes' bfloat16,
   float8_e4m3fn and float4_e2m1fn casts.
2. Block fake-quant of rows (DeepSeek's UE8M0 FP8 and FP4, FP8 per head, OCP MXFP4, NVFP4, fp32
   scales) against the same rules written again here in numpy, with ml_dtypes doing the element
   casts.

Every input is float32-representable: ml_dtypes converts a float64 through float32 first (a
double just above a midpoint can round to the midpoint and then tie the other way), and the
oracle's bf16 rounds through fp32 too, so only on float32 inputs do both sides round once.
ml_dtypes' e4m3fn cast gives NaN above 464 (no saturation) and its NaN -> e2m1 is not CUDA's +6,
so values are clamped to +-448 / +-6 before the cast, as DeepSeek's kernels do, and NaN is left
out of the e2m1 comparison (the oracle's +6 is checked on its own).

Fails (exit 1) on any mismatch, and when numpy or ml_dtypes is missing: a skip would hide a
broken environment (scripts/install installs numpy and ml-dtypes).
"""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:
    print(f"FAIL: {e}: the cross-check needs numpy and ml_dtypes (python3 -m pip install numpy ml-dtypes)")
    sys.exit(1)

F32 = np.float32
BF16, E4M3, E2M1 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn


def as_f32_values(x):
    """float64 array of float32-representable values."""
    return np.asarray(x, dtype=np.float64).astype(F32).astype(np.float64)


def finite_grid(dtype, nbits):
    """Every finite value of an ml_dtypes format, ascending, positive side only."""
    codes = np.arange(2 ** nbits, dtype=np.uint8 if nbits <= 8 else np.uint16)
    with np.errstate(invalid="ignore"):  # the NaN codes
        v = codes.view(dtype).astype(np.float64)
    v = v[np.isfinite(v) & (v >= 0) & ~np.signbit(v)]
    return np.unique(v)


def midpoints_and_neighbours(grid):
    """Midpoints of adjacent grid values and the float32 values right next to them, both signs."""
    mid = (grid[:-1] + grid[1:]) / 2
    mid32 = mid.astype(F32)
    assert np.all(mid32.astype(np.float64) == mid), "a midpoint is not float32-representable"
    below = np.nextafter(mid32, F32(0))
    above = np.nextafter(mid32, F32(np.inf))
    v = np.concatenate([mid32, below, above]).astype(np.float64)
    return np.concatenate([v, -v])


def element_inputs(rng):
    parts = []
    # Normal values at many scales, and log-uniform magnitudes with random signs.
    for k in range(-14, 12, 2):
        parts.append(rng.standard_normal(12000) * 2.0 ** k)
    parts.append(rng.choice([-1.0, 1.0], 400000) * 2.0 ** rng.uniform(-30, 20, 400000))
    # Every grid point and every midpoint (+- one float32 step) of each format.
    for dtype, nbits in ((E4M3, 8), (E2M1, 4), (BF16, 16)):
        g = finite_grid(dtype, nbits)
        parts += [g, -g, midpoints_and_neighbours(g)]
    # Around the e4m3 saturation point: 448 (max), 464 (the tie above it), 480, and beyond.
    parts.append(rng.uniform(-500, 500, 50000))
    parts.append(np.array([448, 463.99, 464, 464.1, 480, 1e9, 3.4e38, np.inf]))
    parts.append(-parts[-1])
    near = F32(464)
    steps = [near]
    for _ in range(200):
        steps.append(np.nextafter(steps[-1], F32(np.inf)))
    steps.append(near)
    for _ in range(200):
        steps.append(np.nextafter(steps[-1], F32(0)))
    parts.append(np.array(steps, dtype=np.float64))
    # e4m3 subnormals (2^-9 steps below 2^-6) and their ties, e2m1 small values, float32 subnormals.
    parts.append(rng.uniform(-2.0 ** -5, 2.0 ** -5, 50000))
    parts.append(np.arange(-64, 65) * 2.0 ** -10)
    parts.append(rng.uniform(-1, 1, 30000))
    parts.append(rng.integers(1, 2 ** 23, 20000).astype(np.uint32).view(F32).astype(np.float64) *
                 rng.choice([-1.0, 1.0], 20000))
    parts.append(np.array([0.0, -0.0]))
    x = as_f32_values(np.concatenate(parts))
    assert np.all(np.isfinite(x) | np.isinf(x))
    return x


def same_bits(a, b):
    """Equal bit patterns, or both NaN (NaN payloads are not part of the contract)."""
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def report(name, x, ours, theirs, failures):
    bad = ~same_bits(ours, theirs)
    n_bad = int(bad.sum())
    print(f"{name}: {x.size} values, {n_bad} mismatches")
    for i in np.flatnonzero(bad)[:10]:
        print(f"  x={x.flat[i]!r} ({x.flat[i].hex()}): oracle {ours.flat[i]!r}, ml_dtypes/numpy {theirs.flat[i]!r}")
    if n_bad:
        failures.append(name)


def run_tool(tool, args, x):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.f64"), os.path.join(d, "out.f64")
        x.astype("<f8").tofile(src)
        subprocess.run([tool, *args, src, dst], check=True)
        return np.fromfile(dst, dtype="<f8")


# ------------------------------------------------------------------------------------------------
# Block rules written again in numpy (kernel.py act_quant / fp4_act_quant, OCP MX, ModelOpt NVFP4).

def ue8m0_fake_quant(x, block, qmax, floor, dtype):
    xb = x.reshape(-1, block)
    amax = np.maximum(np.abs(xb.astype(F32)).max(axis=1), floor)           # fp32
    t = amax * (F32(1) / F32(qmax))                                          # fp32 product
    bits = t.view(np.uint32)
    e = ((bits >> 23) & 0xFF).astype(np.int64) - 127 + ((bits & 0x7FFFFF) != 0)
    s = np.ldexp(1.0, e)[:, None]
    q = np.clip(xb / s, -qmax, qmax).astype(dtype).astype(np.float64)
    return (q * s).reshape(x.shape)


def mx_floor_fake_quant(x, block, qmax, emax, dtype):
    xb = x.reshape(-1, block)
    amax = np.abs(xb).max(axis=1)
    _, ex = np.frexp(amax)                                                    # amax = m 2^ex, m in [0.5, 1)
    e = np.where(amax > 0, ex - 1 - emax, -127).clip(-127, 127)
    s = np.ldexp(1.0, e)[:, None]
    q = np.clip(xb / s, -qmax, qmax).astype(dtype).astype(np.float64)
    return (q * s).reshape(x.shape)


def nvfp4_fake_quant(x, block):
    rows = x.reshape(x.shape[0], -1, block).astype(F32)
    g = np.abs(rows).max(axis=(1, 2)) / F32(6 * 448)                         # fp32, per row
    d = (F32(6) * g)[:, None]
    amax = np.abs(rows).max(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (amax / d).astype(E4M3).astype(F32)
    scale = np.where((scale == 0) | (d == 0), F32(1), scale)
    S = (scale * g[:, None])[:, :, None]                                      # fp32
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(S == 0, np.copysign(F32(0), rows), rows / S)
    q = np.clip(scaled, -6, 6).astype(E2M1).astype(F32)
    return (q * S).astype(np.float64).reshape(x.shape)


def fp32_amax_fake_quant(x, block, qmax, floor, dtype):
    xb = x.reshape(-1, block).astype(F32)
    s = (np.maximum(np.abs(xb).max(axis=1), floor) / F32(qmax))[:, None]     # fp32 division
    q = np.clip(xb / s, -qmax, qmax).astype(dtype).astype(F32)               # fp32 division
    return (q * s).astype(np.float64).reshape(x.shape)


FP8_FLOOR = F32(1e-4)
FP4_FLOOR = F32(6) * F32(2.0 ** -126)

BLOCK_CHECKS = [
    # (oracle format name, row length, numpy rule)
    ("e4m3/b64/ue8m0", 448, lambda x: ue8m0_fake_quant(x, 64, 448, FP8_FLOOR, E4M3)),
    ("e2m1/b32/ue8m0", 128, lambda x: ue8m0_fake_quant(x, 32, 6, FP4_FLOOR, E2M1)),
    ("e4m3/b128/ue8m0", 128, lambda x: ue8m0_fake_quant(x, 128, 448, FP8_FLOOR, E4M3)),
    ("e2m1/b32/e8m0-floor", 128, lambda x: mx_floor_fake_quant(x, 32, 6, 2, E2M1)),
    ("e2m1/b16/nvfp4-e4m3", 128, lambda x: nvfp4_fake_quant(x, 16)),
    ("e4m3/b128/fp32", 128, lambda x: fp32_amax_fake_quant(x, 128, 448, FP8_FLOOR, E4M3)),
]


def block_rows(rng, row_len, n_rows):
    """Rows of float32 values: Gaussian with a random scale per row and per 16 values, bf16-rounded
    rows (what DeepSeek's kernels see), outliers, all-zero blocks and rows, exact 448 * 2^k and
    6 * 2^k block maxima, and values on the midpoints of the scaled grids."""
    rows = rng.standard_normal((n_rows, row_len))
    rows *= 2.0 ** rng.uniform(-24, 24, (n_rows, 1))
    rows *= 2.0 ** rng.uniform(-6, 6, (n_rows, row_len // 16)).repeat(16, axis=1)
    q = n_rows // 8
    rows[:q] = rows[:q].astype(F32).astype(BF16).astype(np.float64)
    rows[q:2 * q, 0] *= 1e4                                                   # one outlier per row
    rows[2 * q:2 * q + 4] = 0                                                 # all-zero rows
    rows[2 * q + 4:3 * q, :16] = 0                                            # a zero block
    k = rng.integers(-30, 30, (q, 1))
    rows[3 * q:4 * q, ::16] = np.ldexp(448.0, k) * rng.choice([-1, 1], (q, row_len // 16))
    rows[4 * q:5 * q, ::16] = np.ldexp(6.0, k) * rng.choice([-1, 1], (q, row_len // 16))
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 1.0625, 432, 400])
    rows[5 * q:6 * q, 1::2] = rng.choice(mids, (q, row_len // 2)) * np.ldexp(1.0, k) * \
        rng.choice([-1, 1], (q, row_len // 2))
    return as_f32_values(rows)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    rng = np.random.default_rng(20250605)
    failures = []

    x = element_inputs(rng)
    out = run_tool(tool, [], x).reshape(-1, 3)
    x32 = x.astype(F32)
    report("bf16", x, out[:, 0], x32.astype(BF16).astype(np.float64), failures)
    report("e4m3 (clamped to +-448)", x, out[:, 1], np.clip(x32, -448, 448).astype(E4M3).astype(np.float64), failures)
    report("e2m1 (clamped to +-6)", x, out[:, 2], np.clip(x32, -6, 6).astype(E2M1).astype(np.float64), failures)

    nan = np.array([np.nan, -np.nan])
    out_nan = run_tool(tool, [], nan).reshape(-1, 3)
    if not (np.isnan(out_nan[:, 0]).all() and np.isnan(out_nan[:, 1]).all() and (out_nan[:, 2] == 6).all()):
        print(f"NaN: oracle gives {out_nan.tolist()}, expected [NaN, NaN, +6] (CUDA's e2m1 NaN -> +6)")
        failures.append("NaN")
    else:
        print("NaN: bf16 NaN, e4m3 NaN, e2m1 +6")

    for name, row_len, rule in BLOCK_CHECKS:
        rows = block_rows(rng, row_len, 4000)
        ours = run_tool(tool, ["--fake-quant", name, str(row_len)], rows.ravel()).reshape(rows.shape)
        report(f"fake-quant {name}", rows, ours, rule(rows), failures)

    if failures:
        print("FAILED: " + ", ".join(failures))
        return 1
    print("all equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
