"""The fixtures and the adversarial generators."""
import numpy as np
import pytest

import dsv4_oracle as d


def test_default_config_is_tiny(dsv4_config):
    assert dsv4_config.name == "tiny"


@pytest.mark.parametrize("dsv4_config", ["flash", "pro"], indirect=True)
def test_configs_can_be_parametrized(dsv4_config):
    assert dsv4_config.n_heads in (64, 128)


def test_rerun_gate(dsv4_rerun):
    assert dsv4_rerun(lambda: np.arange(3.0))[2] == 2.0
    counter = iter(range(100))
    with pytest.raises(AssertionError, match="rerun 1"):
        dsv4_rerun(lambda: np.array([float(next(counter))]))


def test_index_kinds(dsv4_rng):
    rows = d.testing.make_index_rows(dsv4_rng, 3, 128, 1000, 40, "minus1_front")
    assert (rows[:, :64] == -1).all() and ((rows >= 0).sum(axis=1) == 40).all()
    rows = d.testing.make_index_rows(dsv4_rng, 3, 128, 1000, 40, "minus1_anywhere")
    assert all(len(set(r[r >= 0])) == 40 for r in rows)
    assert (d.testing.make_index_rows(dsv4_rng, 2, 16, 10, 5, "no_valid") == -1).all()
    kv = d.testing.poison_unreferenced(np.ones((5, 2)), np.array([[0, -1, 3]]))
    assert np.isnan(kv[[1, 2, 4]]).all() and not np.isnan(kv[[0, 3]]).any()


def test_tied_scores_tie_at_the_kth_position(dsv4_rng):
    s = d.testing.tied_scores(dsv4_rng, 4, 200, 50, n_tied=8)
    for row in s:
        kth = np.sort(row)[::-1][49]
        assert (row == kth).sum() >= 8


@pytest.mark.parametrize("kind", ["no_valid", "zero_length"])
def test_rows_without_keys_give_zero_and_plus_inf(kind):
    case = d.testing.sparse_decode_case(4, 2, window=128, topk=64, n_window=256, n_compressed=128, kind=kind)
    out, lse = case.oracle("official"), case.lse()
    empty = [0, 1] if kind == "no_valid" else [1]
    assert np.array_equal(out[empty], np.zeros_like(out[empty]))
    assert np.isposinf(lse[empty]).all()
    if kind == "zero_length":
        assert np.isfinite(lse[0]).all()


def test_poisoned_case_reads_no_nan(dsv4_rng):
    case = d.testing.sparse_decode_case(4, 2, window=128, topk=64, n_window=256, n_compressed=128, poison=True,
                                        kind="past_length")
    assert np.isnan(case.compressed_kv).any()
    assert np.isfinite(case.oracle("official")).all() and np.isfinite(case.lse()).all()
