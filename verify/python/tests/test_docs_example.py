# The kernel test of docs/python.md, verbatim (test_docs_example_is_in_the_docs keeps the two equal).
import numpy as np
import pytest

import dsv4_oracle as d


def my_sparse_decode(q, kv, idx, sink, scale):
    """The kernel under test, a numpy stand-in: q [b, H, d], kv [b, n, d], idx [b, K] (-1 unused)."""
    valid = idx >= 0
    gathered = np.where(valid[..., None], np.take_along_axis(kv, np.maximum(idx, 0)[..., None], 1), 0)
    logits = np.where(valid[:, None], scale * np.einsum("bhd,bkd->bhk", q, gathered), -np.inf)
    m = np.maximum(logits.max(-1, keepdims=True), sink[None, :, None])
    p = np.exp(logits - m)
    denom = p.sum(-1, keepdims=True) + np.exp(sink[None, :, None] - m)
    return d.bf16(np.einsum("bhk,bkd->bhd", d.bf16(p)[0], gathered) / denom)[0]


@pytest.mark.parametrize("kind", ["random", "minus1_front", "no_valid", "past_length"])
def test_sparse_decode_matches_the_oracle(kind, dsv4_rerun):
    case = d.testing.sparse_decode_case(heads=64, batch=2, topk=512, kind=kind, poison=True)
    kv = np.concatenate([case.window_kv, case.compressed_kv], axis=1)  # NaN where no index points
    idx = np.concatenate([case.effective_indices(b) for b in range(case.batch)])
    out = dsv4_rerun(lambda: my_sparse_decode(case.q, kv, idx, case.sink, case.softmax_scale))
    record = d.compare("attn/core", case.oracle("official")[:, None], out[:, None])
    assert record.passed, str(record)

# --- end of the example ---


def test_docs_example_is_in_the_docs():
    import os
    docs = os.path.join(os.environ.get("DSV4_REPO", os.path.join(os.path.dirname(__file__), "../../..")), "docs/python.md")
    with open(__file__) as f:
        example = f.read().split("# --- end of the example ---")[0].split("\n", 1)[1]
    with open(docs) as f:
        assert example.strip() in f.read()
