"""The FlashMLA and DeepGEMM checks on a GPU (skipped without one, or without the engine's package)."""
import numpy as np
import pytest

import dsv4_oracle as d
from dsv4_oracle import deepgemm_check, flashmla_check


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["random", "minus1_front", "no_valid", "past_length"])
def test_flashmla_sparse_decode_passes_on_a_small_case(kind):
    flash_mla = pytest.importorskip("flash_mla")
    torch = pytest.importorskip("torch")
    case = d.testing.sparse_decode_case(64, 4, window=128, topk=512, n_window=256, n_compressed=768, kind=kind, poison=True)
    row = flashmla_check.check_case(flash_mla, torch, case, reruns=2)
    assert row["verdict"] == "PASS", row


@pytest.mark.gpu
def test_deepgemm_paged_logits_pass():
    deep_gemm = pytest.importorskip("deep_gemm")
    torch = pytest.importorskip("torch")
    row = deepgemm_check.paged_case(deep_gemm, torch, np.random.default_rng(0), 4, 2)
    assert row["verdict"] == "PASS", row


def test_checks_exit_77_without_the_engine(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_engines(name, *args, **kwargs):
        if name in ("flash_mla", "deep_gemm"):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_engines)
    assert flashmla_check.main(["--out", str(tmp_path)]) == 77
    assert deepgemm_check.main(["--out", str(tmp_path)]) == 77
    assert list(tmp_path.iterdir()) == []  # no partial report
