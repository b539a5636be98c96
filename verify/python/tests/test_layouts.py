"""Engine layouts from Python: round trips, golden bytes, the paged-pool path a FlashMLA test takes."""
import numpy as np
import pytest

import dsv4_oracle as d
from dsv4_oracle import flashmla_check


@pytest.mark.parametrize("name", ["flashmla_model1", "flashmla_v32", "deepgemm_indexer_fp8", "deepgemm_indexer_fp4"])
@pytest.mark.parametrize("page", [2, 61, 64])
def test_every_layout_round_trips_bit_for_bit(name, page):
    layout = d.PagedLayout(name, page)
    x = np.random.default_rng(page).standard_normal((100, layout.head_dim)) * 0.3
    written = d.quantize_to_layout(layout, x)
    assert written.dtype == np.uint8 and written.size == layout.pages_for(100) * layout.page_bytes
    codes, scales, bf16 = d.decode_stored(layout, written, 100)
    assert np.array_equal(d.encode_stored(layout, codes, scales, bf16), written)
    values = d.decode(layout, written, 100)
    canonical = d.encode_values(layout, values)
    assert np.array_equal(d.decode(layout, canonical, 100), values)
    assert np.array_equal(d.encode_values(layout, d.decode(layout, canonical, 100)), canonical)


def test_model1_bytes_by_hand():
    layout = d.PagedLayout("flashmla_model1", 64)
    assert (layout.token_bytes, layout.page_bytes) == (584, 37440)
    row = np.zeros((1, 512))
    row[0, 448], row[0, 449] = 1.0, -2.5
    pool = d.encode_values(layout, row)
    assert bytes(pool[448:452]) == b"\x80\x3f\x20\xc0"  # bf16 0x3F80, 0xC020, little-endian
    assert list(pool[64 * 576:64 * 576 + 8]) == [105] * 7 + [0]  # zero tiles: 2^-22, then the pad byte
    row[0, 3] = 336.0
    with pytest.raises(ValueError, match="row 0, dim 3"):
        d.encode_values(layout, row)


def test_paged_pool_and_pool_indices_give_back_the_rows():
    gen = np.random.default_rng(3)
    layout = d.PagedLayout("flashmla_model1", 64)
    seqs = [d.testing.model1_values(gen, n) for n in (70, 1, 128)]
    pool, table = d.layouts.paged_pool(layout, seqs, 8, gen)
    logical = np.array([[69, 0, -1], [0, -1, -1], [127, 64, 63]], dtype=np.int32)
    pool_idx = d.to_pool_indices(logical, table, 64)
    assert np.array_equal(d.to_logical_indices(pool_idx, table, 64), logical)
    values = d.decode(layout, pool, 8 * 64)
    for b in range(3):
        for j in range(3):
            if logical[b, j] >= 0:
                assert np.array_equal(values[pool_idx[b, j]], seqs[b][logical[b, j]])
    unused = np.setdiff1d(np.arange(8), table[table >= 0])
    assert np.isnan(values[unused[0] * 64]).all()  # poisoned free pages


def test_flashmla_check_inputs_address_the_case_rows():
    case = d.testing.sparse_decode_case(8, 3, window=128, topk=64, n_window=256, n_compressed=192, seed=4,
                                        kind="minus1_anywhere", poison=True)
    inputs = flashmla_check.build_inputs(case)
    window_rows, compressed_rows = flashmla_check.emulate_gather(inputs)
    for b in range(3):
        for j, i in enumerate(case.window_idx[b]):
            if i >= 0:
                assert np.array_equal(window_rows[b, j], case.window_kv[b, i])
        for j, i in enumerate(case.topk_idx[b]):
            if i >= 0:
                assert np.array_equal(compressed_rows[b, j], case.compressed_kv[b, i])


def test_torch_cache_view_has_the_padded_page_stride():
    torch = pytest.importorskip("torch")
    layout = d.PagedLayout("flashmla_model1", 64)
    view = d.layouts.torch_cache_view(np.zeros(3 * layout.page_bytes, dtype=np.uint8), layout)
    assert tuple(view.shape) == (3, 64, 1, 584) and view.stride() == (37440, 584, 584, 1)


def test_lse_and_index_conventions():
    lse, sink = np.array([[1.5, np.inf]]), np.array([0.3, 0.3])
    got = d.convert_lse(lse, sink, "flashmla", "flashinfer_reference")
    assert got[0, 0] == pytest.approx(np.log2(np.exp(1.5) + np.exp(0.3)), rel=1e-15)
    assert got[0, 1] == pytest.approx(0.3 / np.log(2), rel=1e-15)  # empty row: the sink alone
    assert d.convert_lse(lse, sink, "flashmla", "vllm_reference")[0, 1] == -np.inf
    idx, lengths = d.compact_with_lengths(np.array([[-1, 5, -1, 7]], dtype=np.int32), 128)
    assert idx.shape == (1, 128) and list(idx[0, :3]) == [5, 7, -1] and list(lengths) == [2]
