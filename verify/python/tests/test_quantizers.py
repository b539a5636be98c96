"""Quantizers against ml_dtypes (an independent implementation) and tables derived by hand."""
import numpy as np
import pytest

import dsv4_oracle as d

ml_dtypes = pytest.importorskip("ml_dtypes")


def test_bf16_bits_equal_ml_dtypes():
    x = np.random.default_rng(0).standard_normal(100_000).astype(np.float32) * 1e3
    values, bits = d.bf16(x)
    ref = x.astype(ml_dtypes.bfloat16)
    assert np.array_equal(bits, ref.view(np.uint16))
    assert np.array_equal(values, ref.astype(np.float64))


def test_e4m3_codes_equal_ml_dtypes_inside_the_range_and_saturate_outside():
    x = np.random.default_rng(1).standard_normal(100_000) * 100
    x = x[np.abs(x) <= 448]
    values, codes = d.e4m3(x)
    ref = x.astype(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(codes, ref.view(np.uint8))
    assert np.array_equal(values, ref.astype(np.float64))
    values, codes = d.e4m3(np.array([500.0, -1e9, 464.0]))
    assert list(codes) == [0x7E, 0xFE, 0x7E]  # satfinite: +-448; 464 ties to the even code 448


def test_e2m1_rounds_ties_to_even():
    x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.75])
    values, codes = d.e2m1(x)
    assert list(values) == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -1.0]
    assert list(codes) == [0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0x7, 0xA]
    assert np.array_equal(d.pack_e2m1(np.array([[0x1, 0xA, 0x7, 0x0]], dtype=np.uint8)), [[0xA1, 0x07]])


def test_fp8_kv_golden_bytes():
    x = np.zeros((1, 128))
    x[0, :64] = 336.0  # amax 336 -> scale 1; 336 ties to 320 (0x7A)
    q = d.fp8_kv(x)
    assert q["code_bytes"][0, 0] == 0x7A and q["values"][0, 0] == 320.0
    assert list(q["scale_bytes"][0]) == [127, 105]  # zero block: 1e-4 / 448 -> 2^-22
    with pytest.raises(ValueError):
        d.ue8m0(np.array([3.0]))


def test_mxfp4_and_nvfp4_values_are_codes_times_scales():
    x = np.random.default_rng(2).standard_normal((4, 64))
    mx = d.mxfp4(x)
    assert np.array_equal(mx["values"], mx["codes"] * np.repeat(mx["scales"], 32, axis=1))
    assert np.array_equal(mx["scale_bytes"], np.log2(mx["scales"]).astype(int) + 127)
    nv = d.nvfp4(x)
    scale = (np.repeat(nv["scales"], 16, axis=1).astype(np.float32) * nv["tensor_scale"][:, None].astype(np.float32))
    assert np.array_equal(nv["values"], (nv["codes"].astype(np.float32) * scale).astype(np.float64))
    assert nv["code_bytes"].shape == (4, 32)
