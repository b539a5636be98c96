"""The bindings: every stage callable, the same numbers as the layer, numpy / torch / float32 inputs."""
import numpy as np
import pytest

import dsv4_oracle as d


@pytest.fixture(scope="module")
def tiny_layer():
    cfg = d.ModelConfig("tiny")
    w = d.AttentionWeights.random(cfg, 4, 7)
    layer = d.AttentionLayer(cfg, w, "official")
    x = d.testing.bf16_values(np.random.default_rng(1), (9, cfg.dim))
    cache = d.KvCache.ring(cfg, 4, 1)
    return cfg, w, layer, x, layer.forward(x, 0, cache, 0)


STAGE_DOCS = {
    "q_latent": "'q_latent'", "q_heads": "'q'", "window_kv": "'kv'", "compress": "'compressor/entries'",
    "indexer_q": "'indexer/q'", "indexer_weights": "'indexer/weights'", "indexer_scores": "'indexer/scores'",
    "topk_indices": "'indexer/topk'", "concat_indices": "'topk_idxs'", "sparse_mqa": "'attn/core'",
    "inverse_rope_heads": "'attn/out_heads'", "grouped_wo_a": "'attn/wo_a'", "wo_b": "'out'",
}


def test_stage_docstrings_give_the_capture_name_and_shapes():
    for fn, stage in STAGE_DOCS.items():
        doc = getattr(d, fn).__doc__
        assert stage in doc and "[" in doc, fn


def test_layer_stages_equal_the_stage_functions_bit_for_bit(tiny_layer):
    cfg, w, layer, x, st = tiny_layer
    p, rope = layer.policy, layer.rope
    ql = d.q_latent(w, x, cfg, p)
    assert np.array_equal(ql, st["q_latent"])
    assert np.array_equal(d.q_heads(w, ql, 0, rope, cfg, p), st["q"])
    assert np.array_equal(d.window_kv(w, x, 0, rope, cfg, p), st["kv"])
    iq = d.indexer_q(w.indexer, ql, 0, rope, cfg, p)
    assert np.array_equal(iq, st["indexer/q"])
    iw = d.indexer_weights(w.indexer, x, cfg, p)
    assert np.array_equal(iw, st["indexer/weights"])
    keys = st["indexer/compressor/entries"]
    scores = d.indexer_scores(iq, iw, keys, 0, 4, p)
    assert np.array_equal(scores, st["indexer/scores"])
    assert np.array_equal(d.inverse_rope_heads(st["attn/core"], 0, rope, cfg, p), st["attn/out_heads"])
    assert np.array_equal(d.grouped_wo_a(w, st["attn/out_heads"], cfg, p), st["attn/wo_a"])
    assert np.array_equal(d.wo_b(w, st["attn/wo_a"], p), st["out"])
    state = d.CompressorState.fresh(4, cfg.head_dim)
    out = d.compress(w.compressor, d.CompressorKind.main, x, 0, state, rope, cfg.norm_eps, p)
    assert np.array_equal(out.entries, st["compressor/entries"])
    assert np.array_equal(state.kv, st["compressor/state_kv"])


def test_chunked_compression_with_an_explicit_state_equals_the_prefill(tiny_layer):
    cfg, w, layer, x, _ = tiny_layer
    args = (layer.rope, cfg.norm_eps, layer.policy)
    whole = d.CompressorState.fresh(4, cfg.head_dim)
    prefill = d.compress(w.compressor, d.CompressorKind.main, x, 0, whole, *args)
    split = d.CompressorState.fresh(4, cfg.head_dim)
    first = d.compress(w.compressor, d.CompressorKind.main, x[:5], 0, split, *args)
    rest = d.compress(w.compressor, d.CompressorKind.main, x[5:], 5, split, *args)
    assert np.array_equal(np.concatenate([first.entries, rest.entries]), prefill.entries)
    assert np.array_equal(split.kv, whole.kv) and np.array_equal(split.score, whole.score)


def test_float32_and_fortran_order_inputs_are_converted(tiny_layer):
    cfg, w, layer, x, st = tiny_layer
    x32 = np.asfortranarray(x.astype(np.float32))  # x is on the bf16 grid: exact in float32
    assert np.array_equal(d.q_latent(w, x32, cfg, "official"), st["q_latent"])


def test_torch_tensors_in_torch_tensors_out(tiny_layer):
    torch = pytest.importorskip("torch")
    cfg, w, layer, x, st = tiny_layer
    got = d.q_latent(w, torch.from_numpy(x).to(torch.bfloat16), cfg, "official")
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    assert np.array_equal(got.numpy(), st["q_latent"])


def test_policies_and_configs_by_name():
    assert {"exact", "official"} <= set(d.PrecisionPolicy.names())
    with pytest.raises(ValueError, match="official"):
        d.PrecisionPolicy("no-such-policy")
    assert d.ModelConfig("flash").n_heads == 64 and d.ModelConfig("pro").n_heads == 128
    assert d.ModelConfig("flash").index_topk == 512 and d.ModelConfig("pro").index_topk == 1024


def test_sparse_mqa_one_key_with_a_sink_and_an_empty_row():
    q = np.array([[1.0, 0.0]])  # one head, d = 2
    kv = np.array([[2.0, 3.0]])
    sink = np.array([0.5])
    out = d.sparse_mqa(q, kv, sink, np.array([[0]], dtype=np.int32), 1, 1.0, "exact")
    s = 2.0  # q . k
    assert np.allclose(out, kv * np.exp(s) / (np.exp(s) + np.exp(0.5)), rtol=1e-15, atol=0)
    empty = d.sparse_mqa(q, kv, sink, np.array([[-1]], dtype=np.int32), 1, 1.0, "exact")
    assert np.array_equal(empty, np.zeros((1, 2)))


def test_overlap_transform_rows():
    r, dd = 4, 2
    b0 = np.arange(r * 2 * dd, dtype=float).reshape(r, 2 * dd)
    b1 = b0 + 100
    t0, t1 = d.overlap_transform([b0, b1], -7.0)
    assert t0.shape == (2 * r, dd)
    assert np.array_equal(t0[:r], np.full((r, dd), -7.0))    # block 0's previous rows: the fill
    assert np.array_equal(t0[r:], b0[:, dd:])                # its own tokens' "b" half
    assert np.array_equal(t1[:r], b0[:, :dd])                # the previous block's "a" half
    assert np.array_equal(d.softmax_pool(np.array([[1.0], [3.0]]), np.zeros((2, 1)), "exact"), [2.0])
