"""The named block quantizers: values and raw bytes (codes and scales), per row of x [rows, n].

Each returns quantize_blocks's dict: 'values' (dequantized), 'codes', 'code_bytes', 'scales',
'scale_bytes', 'tensor_scale'. Elementwise formats are _core's bf16, e4m3, e2m1 and ue8m0.
"""
from . import _core
from ._arrays import adapt


@adapt
def fp8_kv(x):
    """DeepSeek's KV nope quantization: e4m3, blocks of 64, UE8M0 scale 2^ceil(log2(max(amax, 1e-4)/448))."""
    return _core.quantize_blocks(x, _core.BlockFormat.fp8_kv())


@adapt
def fp4_indexer(x):
    """DeepSeek's indexer quantization: e2m1 (RNE), blocks of 32, UE8M0 scale, amax floor 6 * 2^-126."""
    return _core.quantize_blocks(x, _core.BlockFormat.fp4_indexer())


@adapt
def mxfp4(x):
    """OCP MXFP4: e2m1, blocks of 32, E8M0 scale 2^(floor(log2 amax) - 2) (the block top may clip)."""
    return _core.quantize_blocks(x, _core.BlockFormat.mxfp4())


@adapt
def nvfp4(x):
    """NVFP4: e2m1, blocks of 16, e4m3 block scale times the row's fp32 scale amax / (6 * 448)."""
    return _core.quantize_blocks(x, _core.BlockFormat.nvfp4())
