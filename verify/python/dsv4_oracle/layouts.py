"""Engine cache layouts as torch-ready buffers (docs/engine-layouts.md).

The converters themselves are _core's (layout_names, encode_values, quantize_to_layout, decode,
to_pool_indices, ...); these helpers build the paged pools an engine kernel reads.
"""
import numpy as np

from . import _core
from ._arrays import numpy as _np


def paged_pool(layout, sequences, num_blocks, gen=None, poison=True):
    """Places each sequence's rows (values on the layout's grid, [n_b, head_dim]) in a shared pool of
    num_blocks pages, pages handed out in a random order (gen: numpy Generator) so addressing bugs
    show. Unused slots hold NaN rows when poison (e4m3 NaN codes, bf16 NaN) else zeros.
    -> (pool uint8 [num_blocks * page_bytes], block_table int32 [b, max_pages])"""
    pages_needed = [layout.pages_for(len(s)) for s in sequences]
    if sum(pages_needed) > num_blocks:
        raise ValueError(f"{sum(pages_needed)} pages needed, the pool has {num_blocks}")
    filler = np.full((layout.page_size, layout.head_dim), np.nan if poison else 0.0)
    if poison and layout.element == _core.Element.e2m1:
        filler[:] = 0.0  # e2m1 has no NaN code
    page = np.asarray(_core.encode_values(layout, filler))
    pool = np.tile(page, num_blocks)
    order = (gen or np.random.default_rng(0)).permutation(num_blocks).astype(np.int32)
    table = np.full((len(sequences), max(pages_needed + [1])), -1, dtype=np.int32)
    next_block = 0
    for b, rows in enumerate(sequences):
        n = len(rows)
        filled = np.concatenate([_np(rows), np.full((pages_needed[b] * layout.page_size - n, layout.head_dim),
                                                       filler[0, 0])]) if n else np.zeros((0, layout.head_dim))
        table[b, :pages_needed[b]] = order[next_block:next_block + pages_needed[b]]
        next_block += pages_needed[b]
        if n:
            _core.scatter_pages(layout, np.asarray(_core.encode_values(layout, filled)), table[b, :pages_needed[b]].copy(), pool)
    return pool, table


def torch_cache_view(pool, layout, dtype=None):
    """A uint8 pool as the 4-D cache tensor engines take: [num_blocks, page_size, 1, token_bytes] with the
    page stride page_bytes (FlashMLA's MODEL1 pages are padded to a multiple of 576 B)."""
    import torch

    t = pool if isinstance(pool, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(pool))
    blocks = t.numel() // layout.page_bytes
    view = t.as_strided((blocks, layout.page_size, 1, layout.token_bytes),
                        (layout.page_bytes, layout.token_bytes, layout.token_bytes, 1))
    return view if dtype is None else view.view(dtype)
