"""Comparators: the project's (records as dsv4-verify prints them, with its tolerance tables) and
the engines' own, DeepGEMM's calc_diff and FlashMLA's allclose, plus a tie-aware top-k set check."""
import dataclasses
import functools
import os

import numpy as np

from . import _core
from ._arrays import numpy as _np


@functools.lru_cache(maxsize=None)
def tolerance_table(precision="official"):
    """The tolerance table of a precision policy (data/tolerances/<precision>.json): the copy an installed
    package carries, else the source tree's."""
    installed = os.path.join(os.path.dirname(__file__), "tolerances")
    return _core.ToleranceTable.for_precision(precision, installed if os.path.isdir(installed) else "")


def compare(stage, reference, tested, precision="official", *, scores=None, offset=0, row_mask=None, layer=0, call=0,
            dtype="", table=None):
    """Compares a tested stage output with the reference, with the tolerance row of `stage`.

    stage: a capture stage name ('attn/core', 'indexer/scores', 'indexer/topk', ...).
    Dense stages: reference and tested of one shape. Index stages ('indexer/topk', 'topk_idxs'):
    sets per row, ties resolved with `scores` [rows, n] (column = index - offset; the registry names the
    scores stage of each). Compressor states: `row_mask` (one byte per row of all axes but the last)
    keeps the rows a reader relies on (CompressorState.meaningful_rows).
    Returns a Record: .passed, .status ('PASS'/'FAIL'), .metrics, .reason; str(record) is the line
    dsv4-verify prints for it.
    """
    table = table or tolerance_table(precision)
    s = None if scores is None else _np(scores)
    mask = None if row_mask is None else _np(row_mask, dtype=np.uint8)
    return _core.compare_stage(stage, _np(reference), _np(tested), table, s, offset, mask, layer, call, dtype)


def assert_stage(stage, reference, tested, precision="official", **kwargs):
    """compare(), raising AssertionError with the record's line and reason when it fails."""
    record = compare(stage, reference, tested, precision, **kwargs)
    if not record.passed:
        raise AssertionError(str(record))
    return record


def calc_diff(x, y):
    """DeepGEMM's metric in float64: 1 - 2 sum(x y) / sum(x^2 + y^2); 0 when both are all zero."""
    x, y = _np(x), _np(y)
    denominator = float((x * x + y * y).sum())
    if denominator == 0:
        return 0.0
    return 1.0 - 2.0 * float((x * y).sum()) / denominator


@dataclasses.dataclass
class AllcloseResult:
    passed: bool
    message: str
    max_abs: float = 0.0
    max_abs_at: tuple = ()
    max_rel: float = 0.0
    max_rel_at: tuple = ()
    pass_fraction: float = 1.0
    cos_diff: float = 0.0
    nonfinite_mismatches: int = 0

    def __bool__(self):
        return self.passed


def check_allclose(ans, ref, abs_tol=1e-5, rel_tol=1e-2, cos_diff_tol=1e-7, name="tensor"):
    """FlashMLA's check: +inf, -inf and NaN at exactly the same positions (then zeroed); every element
    within abs_tol OR relative error |a - r| / (|r| + 1e-6) within rel_tol; calc_diff <= cos_diff_tol
    (None: not checked). Returns an AllcloseResult (truthy when it passes) naming the worst elements."""
    a, r = _np(ans), _np(ref)
    if a.shape != r.shape:
        return AllcloseResult(False, f"{name}: shape {a.shape} vs reference {r.shape}")
    masks = [(np.isposinf(a), np.isposinf(r)), (np.isneginf(a), np.isneginf(r)), (np.isnan(a), np.isnan(r))]
    mismatch = np.zeros(a.shape, dtype=bool)
    for got, want in masks:
        mismatch |= got != want
    if mismatch.any():
        at = tuple(int(i) for i in np.argwhere(mismatch)[0])
        return AllcloseResult(False, f"{name}: {int(mismatch.sum())} non-finite position(s) differ, first at {at} "
                              f"(got {a[at]}, ref {r[at]})", nonfinite_mismatches=int(mismatch.sum()))
    finite = np.isfinite(a) & np.isfinite(r)
    a, r = np.where(finite, a, 0.0), np.where(finite, r, 0.0)
    abs_err = np.abs(a - r)
    rel_err = abs_err / (np.abs(r) + 1e-6)
    ok = (abs_err < abs_tol) | (rel_err < rel_tol)
    cos = calc_diff(a, r)
    result = AllcloseResult(True, "", pass_fraction=float(ok.mean()) if ok.size else 1.0, cos_diff=cos)
    if abs_err.size:
        i = np.unravel_index(int(abs_err.argmax()), abs_err.shape)
        j = np.unravel_index(int(rel_err.argmax()), rel_err.shape)
        result.max_abs, result.max_abs_at = float(abs_err[i]), tuple(int(v) for v in i)
        result.max_rel, result.max_rel_at = float(rel_err[j]), tuple(int(v) for v in j)
    problems = []
    if not ok.all():
        k = tuple(int(v) for v in np.argwhere(~ok)[0])
        problems.append(f"{int((~ok).sum())} element(s) outside abs {abs_tol:g} and rel {rel_tol:g}, first at {k} "
                        f"(got {a[k]!r}, ref {r[k]!r})")
    if cos_diff_tol is not None and not cos <= cos_diff_tol:
        problems.append(f"cos_diff {cos:.3e} > {cos_diff_tol:g}")
    result.passed = not problems
    result.message = (f"{name}: " + "; ".join(problems)) if problems else (
        f"{name}: ok (max abs {result.max_abs:.3e} at {result.max_abs_at}, max rel {result.max_rel:.3e}, cos_diff {cos:.3e})")
    return result


def compare_topk(reference, tested, scores=None, atol=0.0, rtol=0.0, offset=0):
    """Tie-aware top-k set comparison per row (-1 unused); returns IndexSetMetrics (.status, .rows_failed,
    .first_failure, .mean_recall). A differing row passes only when every missing and extra index scores
    within atol + rtol |thr| of the row's k-th reference score."""
    s = None if scores is None else _np(scores)
    return _core.compare_index_sets(_np(reference), _np(tested), s, atol, rtol, offset)


def assert_bitwise_equal(a, b, name="tensor"):
    """Byte-for-byte equality (DeepGEMM's assert_bitwise_equal): names the first differing element."""
    a = np.ascontiguousarray(_np(a, dtype=None) if not isinstance(a, np.ndarray) else a)
    b = np.ascontiguousarray(_np(b, dtype=None) if not isinstance(b, np.ndarray) else b)
    if a.shape != b.shape or a.dtype != b.dtype:
        raise AssertionError(f"{name}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
    ab, bb = a.view(np.uint8).reshape(a.size, -1), b.view(np.uint8).reshape(b.size, -1)
    differ = (ab != bb).any(axis=1)
    if differ.any():
        i = int(np.argmax(differ))
        at = np.unravel_index(i, a.shape)
        raise AssertionError(f"{name}: {int(differ.sum())} element(s) differ bitwise, first at {tuple(int(v) for v in at)}: "
                             f"{a.reshape(-1)[i]!r} (bytes {ab[i].tobytes().hex()}) vs {b.reshape(-1)[i]!r} "
                             f"(bytes {bb[i].tobytes().hex()})")
