"""Inputs for kernel tests: configurations, seeded values on the checkpoints' number grids, the
adversarial cases of production kernels' bug reports, and a bitwise rerun gate.

Everything is numpy (float64 holding bf16 / FP8 grid values, int32 indices); pass the arrays to a
kernel with torch.from_numpy(...).to(device, dtype).
"""
import dataclasses
import math
from typing import Callable, Optional

import numpy as np

from . import _core
from ._arrays import numpy as _np
from .compare import assert_bitwise_equal

CONFIG_NAMES = ("tiny", "flash", "pro")

#: Adversarial index-list kinds (make_index_rows) and the bug each one catches.
INDEX_KINDS = {
    "random": "valid entries first, -1 padding at the end",
    "minus1_front": "-1 in the first 64 slots (a fully masked first block: exp(-inf - -inf) = NaN, vLLM #48364)",
    "minus1_anywhere": "-1 scattered anywhere in the row",
    "no_valid": "a row with no valid index (out = 0; lse +inf in FlashMLA's convention)",
}


def config(name):
    """ModelConfig by name: 'tiny', 'flash' (V4-Flash: 64 heads, top-512) or 'pro' (128 heads, top-1024)."""
    return _core.ModelConfig(name)


def rng(seed=0):
    return np.random.default_rng(seed)


def bf16_values(gen, shape, scale=1.0, clamp=None):
    """Normal values times scale (clamped to +-clamp), rounded to bf16: [shape] float64."""
    x = gen.standard_normal(shape) * scale
    if clamp is not None:
        x = np.clip(x, -clamp, clamp)
    return _core.bf16(np.ascontiguousarray(x))[0]


def model1_values(gen, n, scale=0.1, clamp=1.0):
    """n rows [n, 512] on the MODEL1 grid (FlashMLA's V4 FP8 cache): the 448 nope dims FP8 e4m3 with a
    UE8M0 scale per 64 (DeepSeek's rule), the 64 rope dims bf16, as the cache writer leaves them."""
    x = np.clip(gen.standard_normal((n, 512)) * scale, -clamp, clamp)
    layout = _core.PagedLayout("flashmla_model1", 64)
    return _core.decode(layout, _core.quantize_to_layout(layout, x), n)


def make_index_rows(gen, rows, width, n_keys, n_valid, kind="random"):
    """Index rows [rows, width] int32 into n_keys keys: n_valid distinct valid entries per row
    (n_valid an int or an array per row), the rest -1, arranged by `kind` (INDEX_KINDS)."""
    if kind not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {kind!r} (known: {', '.join(INDEX_KINDS)})")
    out = np.full((rows, width), -1, dtype=np.int32)
    counts = np.broadcast_to(np.asarray(n_valid), (rows,))
    for r in range(rows):
        n = 0 if kind == "no_valid" else int(min(counts[r], width, n_keys))
        chosen = gen.choice(n_keys, size=n, replace=False).astype(np.int32)
        if kind == "random":
            out[r, :n] = chosen
        elif kind == "minus1_front":
            start = min(64, width - n)
            out[r, start:start + n] = chosen
        elif kind == "minus1_anywhere":
            out[r, np.sort(gen.choice(width, size=n, replace=False))] = chosen
    return out


def poison_unreferenced(kv, indices, value=np.nan):
    """kv [n, d] with every row no valid index of `indices` references set to NaN (FlashMLA's trick:
    a stray read poisons the output)."""
    kv = np.array(kv, dtype=np.float64, copy=True)
    used = np.zeros(kv.shape[0], dtype=bool)
    valid = indices[indices >= 0]
    used[valid[valid < kv.shape[0]]] = True
    kv[~used] = value
    return kv


def tied_scores(gen, rows, n, k, n_tied=8):
    """Scores [rows, n] where the k-th largest value of each row is shared by n_tied entries (bf16
    scores make such ties common at long context; ROCm aiter #4376): top-k sets are then only defined
    up to swaps among the tied entries."""
    s = bf16_values(gen, (rows, n))
    for r in range(rows):
        order = np.argsort(-s[r], kind="stable")
        lo = max(0, k - n_tied // 2)
        s[r, order[lo:lo + n_tied]] = s[r, order[k - 1]]
    return s


def assert_bitwise_rerun(fn: Callable, n: int = 20, name: str = "output"):
    """Calls fn() n times; every result (an array or a tuple of arrays) must be bitwise identical to
    the first (DeepGEMM's 20-rerun gate). Returns the first result."""
    first = fn()
    firsts = first if isinstance(first, (tuple, list)) else (first,)
    for run in range(1, n):
        again = fn()
        agains = again if isinstance(again, (tuple, list)) else (again,)
        for i, (a, b) in enumerate(zip(firsts, agains)):
            assert_bitwise_equal(_host(a), _host(b), name=f"{name}[{i}] rerun {run}")
    return first


def _host(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if "bfloat16" in str(x.dtype):
            x = x.view(dtype=__import__("torch").int16)
        return x.numpy()
    return np.asarray(x)


@dataclasses.dataclass
class SparseDecodeCase:
    """One decode step of V4 sparse attention over two KV scopes, as FlashMLA's sparse decode takes it.

    q [b, H, 512] (bf16 grid); window_kv [b, n_window, 512] and compressed_kv [b, n_compressed, 512]
    (MODEL1 grid; NaN in poisoned rows); window_idx [b, W] rows of window_kv and topk_idx [b, K] rows
    of compressed_kv (-1 unused); window_length / topk_length [b] (None: all columns; entries at or
    past a length are ignored whatever they hold); sink [H]; softmax_scale.
    """
    name: str
    q: np.ndarray
    window_kv: np.ndarray
    compressed_kv: np.ndarray
    window_idx: np.ndarray
    topk_idx: np.ndarray
    sink: np.ndarray
    softmax_scale: float
    window_length: Optional[np.ndarray] = None
    topk_length: Optional[np.ndarray] = None

    @property
    def batch(self):
        return self.q.shape[0]

    @property
    def heads(self):
        return self.q.shape[1]

    def effective_indices(self, b):
        """Row b's [window | compressed] list in the oracle's index space (compressed rows offset by
        n_window), lengths applied. -> [1, W + K] int32"""
        w = self.window_idx[b].copy()
        t = self.topk_idx[b].copy()
        if self.window_length is not None:
            w[int(self.window_length[b]):] = -1
        if self.topk_length is not None:
            t[int(self.topk_length[b]):] = -1
        t = np.where(t >= 0, t + self.window_kv.shape[1], -1)
        return np.concatenate([w, t]).astype(np.int32)[None, :]

    def oracle(self, policy="official"):
        """The oracle's sparse attention ('attn/core') per sequence -> out [b, H, 512]."""
        out = np.empty(self.q.shape)
        for b in range(self.batch):
            kv = np.concatenate([self.window_kv[b], self.compressed_kv[b]])
            o = _core.sparse_mqa(self.q[b].reshape(1, -1), kv, self.sink, self.effective_indices(b), self.heads,
                                 self.softmax_scale, policy)
            out[b] = o.reshape(self.heads, -1)
        return out

    def lse(self):
        """ln sum_j e^(scale q.k_j) over the valid keys, sink excluded, in fp64 (FlashMLA's convention:
        +inf for a row with no valid key) -> [b, H]. Computed here, not by the oracle's sparse_mqa
        (which returns the output only)."""
        lse = np.empty((self.batch, self.heads))
        for b in range(self.batch):
            kv = np.concatenate([self.window_kv[b], self.compressed_kv[b]])
            idx = self.effective_indices(b)[0]
            idx = idx[idx >= 0]
            if idx.size == 0:
                lse[b] = np.inf
                continue
            logits = self.softmax_scale * (self.q[b] @ kv[idx].T)  # [H, n]
            m = logits.max(axis=1, keepdims=True)
            lse[b] = (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))[:, 0]
        return lse


def sparse_decode_case(heads, batch, window=128, topk=512, n_window=256, n_compressed=2048, seed=0, kind="random",
                       poison=False, sink="random"):
    """A SparseDecodeCase with FlashMLA's V4 shapes (V4-Flash: heads 64, topk 512; V4-Pro: heads 128,
    topk 1024). kind: one of INDEX_KINDS, or 'zero_length' (every other sequence has window_length =
    topk_length = 0), or 'past_length' (valid indices past topk_length, pointing at NaN rows).
    poison: NaN in every kv row no valid index references. sink: 'random', 'inf' (+inf and -inf
    heads) or 'none' (-inf everywhere)."""
    gen = rng(seed)
    index_kind = kind if kind in INDEX_KINDS else "random"
    q = bf16_values(gen, (batch, heads, 512), scale=0.5, clamp=1.0)
    window_kv = model1_values(gen, batch * n_window).reshape(batch, n_window, 512)
    compressed_kv = model1_values(gen, batch * n_compressed).reshape(batch, n_compressed, 512)
    n_w = gen.integers(1, window + 1, size=batch)
    n_t = gen.integers(1, topk + 1, size=batch)
    n_w[0], n_t[0] = window, topk  # one full row
    window_idx = make_index_rows(gen, batch, window, n_window, n_w, index_kind)
    topk_idx = make_index_rows(gen, batch, topk, n_compressed, n_t, index_kind)
    window_length = topk_length = None
    if kind == "zero_length":
        window_length = np.where(np.arange(batch) % 2 == 1, 0, window).astype(np.int32)
        topk_length = np.where(np.arange(batch) % 2 == 1, 0, topk).astype(np.int32)
    elif kind == "past_length":
        topk_idx = make_index_rows(gen, batch, topk, n_compressed, topk, "random")
        topk_length = n_t.astype(np.int32)
    elif kind not in INDEX_KINDS:
        raise ValueError(f"unknown case kind {kind!r}")
    if sink == "random":
        sinks = gen.standard_normal(heads)
    elif sink == "inf":
        sinks = gen.standard_normal(heads)
        sinks[::3], sinks[1::3] = np.inf, -np.inf
    else:
        sinks = np.full(heads, -np.inf)
    sinks = sinks.astype(np.float32).astype(np.float64)
    case = SparseDecodeCase(f"{kind}{'-poisoned' if poison else ''}-h{heads}-b{batch}", q, window_kv, compressed_kv,
                            window_idx, topk_idx, sinks, 512 ** -0.5, window_length, topk_length)
    if poison or kind == "past_length":
        for b in range(batch):
            eff = case.effective_indices(b)[0]
            case.window_kv[b] = poison_unreferenced(case.window_kv[b], eff[:window])
            t = eff[window:]
            case.compressed_kv[b] = poison_unreferenced(case.compressed_kv[b], np.where(t >= 0, t - n_window, -1))
    return case


def as_numpy(x, dtype=np.float64):
    """Any array or tensor (any device) as numpy."""
    return _np(x, dtype)


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("dataclasses", "math", "np", "Callable", "Optional")]
