"""Comparators: the project's records, DeepGEMM's calc_diff, FlashMLA's allclose, top-k sets."""
import numpy as np
import pytest

import dsv4_oracle as d


def test_calc_diff_by_hand():
    assert d.calc_diff([1.0, 2.0], [1.0, 3.0]) == pytest.approx(1 - 14 / 15, rel=1e-15)
    assert d.calc_diff([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert d.calc_diff([1.0], [-1.0]) == 2.0
    assert d.calc_diff([0.0], [0.0]) == 0.0


def test_check_allclose_nonfinite_positions_must_match_exactly():
    ref = np.array([1.0, np.inf, np.nan, -np.inf])
    assert d.check_allclose(ref.copy(), ref)
    bad = ref.copy()
    bad[1] = 1e30
    r = d.check_allclose(bad, ref)
    assert not r and "(1,)" in r.message and r.nonfinite_mismatches == 1
    # An element passes within abs OR rel; the cosine gate sees everything.
    assert d.check_allclose([1.0 + 5e-3], [1.0], abs_tol=1e-3, rel_tol=1e-2, cos_diff_tol=None)
    assert not d.check_allclose([1.02], [1.0], abs_tol=1e-3, rel_tol=1e-2, cos_diff_tol=None)
    assert not d.check_allclose([1.0, 1.0], [1.0, 1.0005], abs_tol=1e-3, rel_tol=0, cos_diff_tol=1e-12)


def test_compare_returns_the_record_dsv4_verify_prints():
    ref = np.random.default_rng(0).standard_normal((1, 2, 4, 8))
    record = d.compare("attn/core", ref, ref.copy())
    assert record.passed and record.status == "PASS" and str(record).startswith("PASS")
    assert "L0 c0 attn/core" in str(record) and record.metrics.max_abs == 0.0
    bad = ref.copy()
    bad[0, 1, 2, 3] += 1.0
    record = d.compare("attn/core", ref, bad)
    assert not record.passed and record.reason and "FAIL" in str(record)
    assert record.metrics.max_abs_at.coord == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="not a compared stage"):
        d.compare("attn/nothing", ref, ref)
    assert d.tolerance_table("official").at("attn/core").reason


def test_topk_sets_forgive_swaps_among_ties_only():
    scores = np.array([[5.0, 3.0, 3.0, 1.0]])
    ref = np.array([[0, 1]])
    assert d.compare_topk(ref, np.array([[2, 0]]), scores).status == "PASS"  # 1 and 2 tie at the k-th score
    failed = d.compare_topk(ref, np.array([[3, 0]]), scores)
    assert failed.status == "FAIL" and failed.first_failure.missing == [1]
    assert d.compare("indexer/topk", ref.reshape(1, 1, 2), np.array([[[1, 0]]]), scores=scores).passed


def test_assert_bitwise_equal_sees_the_sign_of_zero():
    d.assert_bitwise_equal(np.array([1.0, 0.0]), np.array([1.0, 0.0]))
    with pytest.raises(AssertionError, match=r"first at \(1,\)"):
        d.assert_bitwise_equal(np.array([1.0, 0.0]), np.array([1.0, -0.0]))
