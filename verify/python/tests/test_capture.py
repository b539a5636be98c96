"""Capture files from Python: record stage outputs, read them back, replay them with dsv4-verify."""
import numpy as np
import pytest

import dsv4_oracle as d
from dsv4_oracle import capture


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The oracle's own stages of two calls (prefill 8 tokens, decode 1) of a tiny CSA layer, as an
    engine's test would record its kernels' outputs."""
    cfg = d.ModelConfig("tiny")
    w = d.AttentionWeights.random(cfg, 4, 3)
    layer = d.AttentionLayer(cfg, w, "official")
    cache = d.KvCache.ring(cfg, 4, 1)
    x = d.testing.bf16_values(np.random.default_rng(5), (9, cfg.dim))
    cap = capture.new_capture(cfg, precision="official", model="tiny")
    lc = capture.add_layer(cap, 1, 4, w)
    for start, stop in ((0, 8), (8, 9)):
        stages = layer.forward(x[start:stop], start, cache, 0)
        stages["x"] = x[start:stop]
        capture.add_call(lc, start, stages, cfg)
    path = tmp_path_factory.mktemp("capture") / "recorded.h5"
    capture.write(path, cap)
    return path, cap


def test_written_capture_reads_back(recorded):
    path, cap = recorded
    back = capture.read(path)
    layer = back.layers[1]
    assert [c.seqlen for c in layer.calls] == [8, 1]
    q = layer.calls[0].stages["q"]
    cfg = back.config
    assert q.shape == [1, 8, cfg.n_heads, cfg.head_dim]
    assert np.array_equal(q.values, cap.layers[1].calls[0].stages["q"].values.astype(np.float32))
    assert layer.calls[1].stages["topk_idxs"].is_index


def test_dsv4_verify_replays_the_recorded_capture(recorded):
    path, _ = recorded
    if capture.find_dsv4_verify() is None:
        pytest.skip("dsv4-verify not built (set DSV4_VERIFY)")
    result = capture.replay(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 failed" in result.stdout


def test_a_corrupted_stage_is_the_first_failure(recorded, tmp_path):
    path, cap = recorded
    if capture.find_dsv4_verify() is None:
        pytest.skip("dsv4-verify not built (set DSV4_VERIFY)")
    call = cap.layers[1].calls[1]
    core = call.stages["attn/core"]
    values = core.values
    values[0, 0, 0, :] += 1.0
    core.values = values
    call.stages["attn/core"] = core
    bad = tmp_path / "bad.h5"
    capture.write(bad, cap)
    result = capture.replay(bad)
    assert result.returncode != 0
    assert "first failure: layer 1, call 1, attn/core" in result.stdout
