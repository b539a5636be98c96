"""Pure-torch stand-ins for the kernels that DeepSeek-V4's `inference/model.py` imports.

DeepSeek's `inference/kernel.py` is written in TileLang and needs a CUDA GPU; its
`fast_hadamard_transform` dependency is a CUDA extension. To run the official `model.py` on a
CPU (or on a GPU without TileLang), `deepseek_capture.py` registers this file as the module
`kernel` and `HADAMARD_MODULE` below as the module `fast_hadamard_transform` before it imports
`model.py`, and `install_cuda_rsqrt` gives `model.py` a `torch` whose bf16 `rsqrt` on the CPU is
rounded as CUDA rounds it. The official files are never edited.

Every function computes the numerics that docs/deepseek-capture.md ("The kernel stand-ins") pins for the current
kernel.py (sha256 59b32508...): the same block sizes, the same power-of-two scale rule, the same
clamps and casts, the same online-softmax structure. Where the GPU's order of fp32 additions is not
knowable (inside a GEMM tile), a sum is taken exactly in float64 and rounded once to float32; the
differences this leaves are listed in docs/deepseek-capture.md.

Written for this project from the spec's mathematics; no line is taken from DeepSeek's code.
"""
from __future__ import annotations

import dataclasses
import sys
import types
from typing import Optional, Tuple

import torch

FP8_E4M3_MAX = 448.0
FP4_E2M1_MAX = 6.0
ACT_AMAX_FLOOR = 1e-4               # act_quant: amax = max(amax, 1e-4)          (docs/deepseek-capture.md)
FP4_AMAX_FLOOR = 6.0 * 2.0 ** -126  # fp4_act_quant: amax = max(amax, 6*2^-126)  (docs/deepseek-capture.md)
GEMM_K_BLOCK = 128                  # fp8_gemm: scales per 128 along K, weights in 128x128 blocks (docs/deepseek-capture.md)
ATTN_KV_BLOCK = 64                  # sparse_attn walks the index list in blocks of 64        (docs/deepseek-capture.md)


# --------------------------------------------------------------------------------------------
# Power-of-two (UE8M0) block scales
# --------------------------------------------------------------------------------------------

def _fp32(value: float, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32, device=like.device)


def pow2_ceil(v: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2 v) for positive normal float32 v, read from the IEEE fields.

    v = 2^(E-127) * 1.m: the result is 2^(E-127) when m == 0, else 2^(E-127+1). Built back from
    the biased exponent so that it is exact (kernel.py: the ceiling is read from the IEEE bits).
    """
    assert v.dtype == torch.float32
    bits = v.contiguous().view(torch.int32)
    biased_exp = (bits >> 23) & 0xFF
    has_mantissa = (bits & 0x7FFFFF) != 0
    out_exp = biased_exp + has_mantissa.to(torch.int32)
    return (out_exp << 23).view(torch.float32)


def block_amax(x: torch.Tensor, block: int) -> torch.Tensor:
    """x [..., N] -> max |x| per block of `block` along the last dim, float32 [..., N/block]."""
    n = x.size(-1)
    assert n % block == 0, f"last dim {n} is not a multiple of the block {block}"
    return x.float().abs().unflatten(-1, (n // block, block)).amax(-1)


def _expand_blocks(s: torch.Tensor, block: int) -> torch.Tensor:
    """s [..., N/block] -> [..., N], each scale repeated over its block."""
    return s.repeat_interleave(block, dim=-1)


# --------------------------------------------------------------------------------------------
# act_quant: FP8 e4m3 block quantisation (docs/deepseek-capture.md)
# --------------------------------------------------------------------------------------------

def act_scales(x: torch.Tensor, block_size: int, scale_fmt: Optional[str]) -> torch.Tensor:
    """Per-block scale, float32 [..., N/block]: 2^ceil(log2(fp32(amax * fp32(1/448)))) with
    amax floored at 1e-4 when scale_fmt is set (always in V4), else amax * fp32(1/448)."""
    amax = block_amax(x, block_size).clamp_min(ACT_AMAX_FLOOR)
    scaled = amax * _fp32(1.0 / FP8_E4M3_MAX, amax)
    return pow2_ceil(scaled) if scale_fmt is not None else scaled


def to_e4m3(x: torch.Tensor, s: torch.Tensor, block_size: int) -> torch.Tensor:
    """e4m3(clamp(x / s, +-448)): the division is exact for power-of-two s; torch's cast to
    float8_e4m3fn rounds to nearest, ties to even, and the clamp keeps it away from NaN."""
    q = x.float() / _expand_blocks(s, block_size)
    return q.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def act_quant(x: torch.Tensor, block_size: int = 128, scale_fmt: Optional[str] = None,
              scale_dtype: torch.dtype = torch.float32, inplace: bool = False):
    """x [..., N] (bf16) -> (e4m3 [..., N], scales [..., N/block] in scale_dtype), or, with
    inplace, x overwritten by the fake-quantised bf16(s * e4m3(clamp(x/s))) and returned."""
    s = act_scales(x, block_size, scale_fmt)
    q = to_e4m3(x, s, block_size)
    if inplace:
        x.copy_((q.float() * _expand_blocks(s, block_size)).to(x.dtype))
        return x
    return q, s.to(scale_dtype)


# --------------------------------------------------------------------------------------------
# fp4_act_quant: FP4 e2m1 block fake-quantisation (docs/deepseek-capture.md)
# --------------------------------------------------------------------------------------------

def round_to_e2m1(v: torch.Tensor) -> torch.Tensor:
    """Round float32 v (|v| <= 6) to the e2m1 grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} (with sign),
    to nearest, ties to even.

    The grid spacing is 0.5 below 2, 1 in [2, 4) and 2 in [4, 6]. Dividing by the spacing (a power
    of two, exact) maps the grid of the binade onto the integers, where an even integer is an even
    e2m1 mantissa; torch.round rounds half to even. So 0.25 -> 0, 0.75 -> 1, 1.75 -> 2, 2.5 -> 2,
    3.5 -> 4, 5 -> 4. The sign is kept on zero, as the hardware cast keeps it.
    """
    a = v.abs()
    step = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a),
                                                                    torch.full_like(a, 2.0)))
    return torch.copysign(torch.round(a / step) * step, v)


def fp4_scales(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Per-block scale, float32 [..., N/block]: 2^ceil(log2(fp32(amax * fp32(1/6)))), amax >= 6*2^-126."""
    amax = block_amax(x, block_size).clamp_min(FP4_AMAX_FLOOR)
    return pow2_ceil(amax * _fp32(1.0 / FP4_E2M1_MAX, amax))


def fp4_act_quant(x: torch.Tensor, block_size: int = 32, inplace: bool = False):
    """inplace: x [..., N] (bf16) overwritten by bf16(s * e2m1(clamp(x/s, +-6))) and returned.
    The packed non-inplace form is not used on the attention path."""
    if not inplace:
        raise NotImplementedError("fp4_act_quant(inplace=False) is outside the attention path")
    s = _expand_blocks(fp4_scales(x, block_size), block_size)
    q = round_to_e2m1((x.float() / s).clamp(-FP4_E2M1_MAX, FP4_E2M1_MAX))
    x.copy_((q * s).to(x.dtype))
    return x


# --------------------------------------------------------------------------------------------
# Quantizer variants: the bug classes of docs/math.md "Numerics variants", for bug injection
# (verify/adapters/bug_injection.py). DeepSeek's own kernels are the functions above.
# --------------------------------------------------------------------------------------------

ROUNDINGS = ("nearest_even", "toward_zero", "ties_toward_zero")


@dataclasses.dataclass(frozen=True)
class QuantVariant:
    """How act_quant / fp4_act_quant deviate: the element rounding, the amax floor (None: the
    kernel's own), and the power-of-two scale rounded up ("ceil", DeepSeek's) or down ("floor")."""
    rounding: str = "nearest_even"
    amax_floor: Optional[float] = None
    scale_rule: str = "ceil"


def pow2_floor(v: torch.Tensor) -> torch.Tensor:
    """2^floor(log2 v) for positive normal float32 v: the IEEE exponent with the mantissa cleared."""
    assert v.dtype == torch.float32
    bits = v.contiguous().view(torch.int32)
    return ((bits >> 23) << 23).view(torch.float32)


def _round_on_grid(a: torch.Tensor, quantum: torch.Tensor, top: float, rounding: str) -> torch.Tensor:
    """|x| = a (float64, >= 0) onto the grid of spacing `quantum`, saturating at `top`."""
    steps = a / quantum  # exact: quantum is a power of two
    if rounding == "nearest_even":
        r = torch.round(steps)
    elif rounding == "toward_zero":
        r = torch.trunc(steps)
    elif rounding == "ties_toward_zero":
        r = torch.ceil(steps - 0.5)
    else:
        raise ValueError(f"rounding {rounding!r}: expected one of {ROUNDINGS}")
    return torch.clamp(r * quantum, max=top)


def round_e4m3(v: torch.Tensor, rounding: str) -> torch.Tensor:
    """v (|v| <= 448) onto the e4m3 grid (min subnormal 2^-9) by `rounding`, as float64."""
    v = v.double()
    a = v.abs()
    _, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
    lead = torch.where(a == 0, torch.full_like(e, -6), torch.clamp(e - 1, min=-6))
    quantum = torch.ldexp(torch.ones_like(a), lead - 3)
    return torch.copysign(_round_on_grid(a, quantum, FP8_E4M3_MAX, rounding), v)


def round_e2m1_by(v: torch.Tensor, rounding: str) -> torch.Tensor:
    """v (|v| <= 6) onto the e2m1 grid by `rounding`, as float64 (round_to_e2m1 is nearest_even)."""
    v = v.double()
    a = v.abs()
    quantum = torch.where(a < 2, torch.full_like(a, 0.5), torch.where(a < 4, torch.ones_like(a), torch.full_like(a, 2.0)))
    return torch.copysign(_round_on_grid(a, quantum, FP4_E2M1_MAX, rounding), v)


def _variant_scales(x: torch.Tensor, block_size: int, qmax: float, floor: float, variant: QuantVariant) -> torch.Tensor:
    amax = block_amax(x, block_size).clamp_min(variant.amax_floor if variant.amax_floor is not None else floor)
    t = amax * _fp32(1.0 / qmax, amax)
    if variant.scale_rule == "ceil":
        return pow2_ceil(t)
    if variant.scale_rule == "floor":
        return pow2_floor(t)
    raise ValueError(f"scale_rule {variant.scale_rule!r}: expected ceil or floor")


def act_quant_variant(x: torch.Tensor, block_size: int, variant: QuantVariant) -> torch.Tensor:
    """act_quant(x, block_size, "ue8m0", inplace=True) under `variant`: x <- bf16(s * e4m3(clamp(x/s)))."""
    s = _expand_blocks(_variant_scales(x, block_size, FP8_E4M3_MAX, ACT_AMAX_FLOOR, variant), block_size)
    q = round_e4m3((x.float() / s).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX), variant.rounding)
    x.copy_((q * s.double()).to(x.dtype))
    return x


def fp4_act_quant_variant(x: torch.Tensor, block_size: int, variant: QuantVariant) -> torch.Tensor:
    """fp4_act_quant(x, block_size, inplace=True) under `variant`: x <- bf16(s * e2m1(clamp(x/s)))."""
    s = _expand_blocks(_variant_scales(x, block_size, FP4_E2M1_MAX, FP4_AMAX_FLOOR, variant), block_size)
    q = round_e2m1_by((x.float() / s).clamp(-FP4_E2M1_MAX, FP4_E2M1_MAX), variant.rounding)
    x.copy_((q * s.double()).to(x.dtype))
    return x


# --------------------------------------------------------------------------------------------
# fp8_gemm: block-scaled FP8 GEMM (docs/deepseek-capture.md)
# --------------------------------------------------------------------------------------------

def fp8_gemm(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor,
             scale_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """a [..., K] e4m3 with a_s [..., K/128]; b [N, K] e4m3 with b_s [ceil(N/128), K/128]
    -> [..., N] in torch's default dtype (bf16 in the model):
    C = sum over K-blocks kb, in order, of fp32(sum_{k in kb} a*b) * (a_s[kb] * b_s[n/128, kb]),
    accumulated in float32.

    Each product of two e4m3 values is exact, and the 128 of a block sum exactly in float64
    (their exponents span fewer than 53 bits), so the block's partial sum is the exact sum rounded
    once to float32; the GPU adds in an order that is not knowable (docs/deepseek-capture.md).
    """
    k = a.size(-1)
    n = b.size(0)
    assert k % GEMM_K_BLOCK == 0, f"K = {k} is not a multiple of {GEMM_K_BLOCK}"
    a2 = a.reshape(-1, k)
    a_scale = a_s.reshape(a2.size(0), -1).float()
    b_scale = b_s.float().repeat_interleave(GEMM_K_BLOCK, dim=0)[:n]          # [N, K/128]
    acc = torch.zeros(a2.size(0), n, dtype=torch.float32, device=a.device)
    for kb in range(k // GEMM_K_BLOCK):
        cols = slice(kb * GEMM_K_BLOCK, (kb + 1) * GEMM_K_BLOCK)
        partial = (a2[:, cols].double() @ b[:, cols].double().T).float()
        scale = a_scale[:, kb, None] * b_scale[None, :, kb]                   # powers of two: exact
        acc = acc + partial * scale
    return acc.to(torch.get_default_dtype()).reshape(*a.shape[:-1], n)


# --------------------------------------------------------------------------------------------
# sparse_attn: gather attention with a sink, online softmax over blocks of 64 (docs/deepseek-capture.md)
# --------------------------------------------------------------------------------------------

def sparse_attn(q: torch.Tensor, kv: torch.Tensor, attn_sink: torch.Tensor, topk_idxs: torch.Tensor,
                softmax_scale: float, query_chunk: int = 256, probs_bf16: bool = True) -> torch.Tensor:
    """q [b, m, h, d] bf16, kv [b, n, d] bf16 (K = V for every head), attn_sink [h] fp32,
    topk_idxs [b, m, K] int (-1 = skip) -> o [b, m, h, d] bf16.

    For each block of 64 indices, in order:
      s_j   = fp32(q . kv[idx_j]) * fp32(scale)      (-inf where idx_j == -1)
      M     = max(M_prev, max_j s_j)                 (the sink never enters the max)
      alpha = exp(M_prev - M)
      p_j   = exp(s_j - M)                           (fp32)
      l     = l * alpha + fp32(sum_j p_j)            (the denominator sums fp32 probabilities)
      acc   = acc * alpha + fp32(sum_j bf16(p_j) * kv[idx_j])   (P is cast to bf16 before P.V)
    then l += exp(sink - M) and o = bf16(acc / l). probs_bf16=False leaves P in fp32 (a bug class,
    for bug injection only).
    """
    b, m, h, d = q.shape
    out = torch.empty_like(q)
    for m0 in range(0, m, query_chunk):
        rows = slice(m0, min(m, m0 + query_chunk))
        out[:, rows] = _sparse_attn_rows(q[:, rows], kv, attn_sink, topk_idxs[:, rows], softmax_scale, probs_bf16)
    return out


def _sparse_attn_rows(q, kv, attn_sink, idxs, softmax_scale, probs_bf16=True):
    b, m, h, d = q.shape
    dev = q.device
    n_idx = idxs.size(-1)
    scale = _fp32(softmax_scale, q)
    q64 = q.double()
    running_max = torch.full((b, m, h), float("-inf"), dtype=torch.float32, device=dev)
    denom = torch.zeros((b, m, h), dtype=torch.float32, device=dev)
    acc = torch.zeros((b, m, h, d), dtype=torch.float32, device=dev)
    batch = torch.arange(b, device=dev)[:, None, None]
    n_blocks = max(1, -(-n_idx // ATTN_KV_BLOCK))
    for t in range(n_blocks):
        blk = idxs[..., t * ATTN_KV_BLOCK:(t + 1) * ATTN_KV_BLOCK].long()
        if blk.size(-1) < ATTN_KV_BLOCK:  # the kernel treats positions past K as -1
            pad = torch.full((b, m, ATTN_KV_BLOCK - blk.size(-1)), -1, dtype=torch.long, device=dev)
            blk = torch.cat([blk, pad], -1)
        valid = blk != -1                                                   # [b, m, 64]
        keys = torch.where(valid[..., None], kv[batch, blk.clamp_min(0)], 0)   # [b, m, 64, d], 0 where skipped
        dots = torch.einsum("bmhd,bmjd->bmhj", q64, keys.double()).float()
        s = torch.where(valid[:, :, None, :], dots * scale, _fp32(float("-inf"), dots))
        new_max = torch.maximum(running_max, s.amax(-1))
        alpha = torch.exp(running_max - new_max)
        p = torch.exp(s - new_max[..., None])                               # fp32, 0 where skipped
        denom = denom * alpha + p.double().sum(-1).float()
        p_stored = p.to(torch.bfloat16).double() if probs_bf16 else p.double()
        pv = torch.einsum("bmhj,bmjd->bmhd", p_stored, keys.double()).float()
        acc = acc * alpha[..., None] + pv
        running_max = new_max
    denom = denom + torch.exp(attn_sink.float()[None, None, :] - running_max)
    return (acc / denom[..., None]).to(torch.bfloat16)


# --------------------------------------------------------------------------------------------
# Hadamard transform (fast_hadamard_transform.hadamard_transform; spec 2.5)
# --------------------------------------------------------------------------------------------

_hadamard_cache: dict = {}


def sylvester_hadamard(n: int, device) -> torch.Tensor:
    """Natural-order Sylvester matrix, H[i, j] = (-1)^popcount(i & j), float64 [n, n]."""
    key = (n, str(device))
    if key not in _hadamard_cache:
        assert n > 0 and n & (n - 1) == 0, f"Hadamard size {n} is not a power of two"
        i = torch.arange(n, device=device)
        and_bits = i[:, None] & i[None, :]
        parity = torch.zeros_like(and_bits)
        while bool(and_bits.any()):
            parity ^= and_bits & 1
            and_bits = and_bits >> 1
        _hadamard_cache[key] = 1.0 - 2.0 * parity.double()
    return _hadamard_cache[key]


def hadamard_transform(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """x [..., n] -> bf16/x.dtype of fp32(x @ H^T) * fp32(scale). The signed sums of the n inputs
    are exact in float64 and rounded once to float32 (the CUDA butterfly's order is not pinned)."""
    h = sylvester_hadamard(x.size(-1), x.device)
    y = (x.double() @ h.T).float() * _fp32(scale, x)
    return y.to(x.dtype)


# --------------------------------------------------------------------------------------------
# torch.rsqrt on bf16 as CUDA computes it (model.py's per-head q norm; docs/deepseek-capture.md)
# --------------------------------------------------------------------------------------------

def rsqrt_bf16_as_cuda(x: torch.Tensor) -> torch.Tensor:
    """bf16 x -> bf16(fp32 rsqrt(fp32 x)): torch's CUDA kernel computes a bf16 rsqrt in fp32 and
    rounds once, which is the correctly rounded value (docs/deepseek-capture.md). torch's CPU kernel
    is not correctly rounded on bf16 (about 7 % of the elements its vectorised loop leaves to the
    scalar tail are one ulp off), which scales a whole head of q by a factor one ulp off."""
    return torch.rsqrt(x.float()).to(torch.bfloat16)


class TorchWithCudaRsqrt:
    """`torch` as model.py looks it up, except that rsqrt of a bf16 CPU tensor is computed as the
    GPU computes it (rsqrt_bf16_as_cuda); every other name, and rsqrt on the GPU or on fp32, is
    torch's own. Installed as model.py's `torch` by install_cuda_rsqrt."""

    def __init__(self, base):
        self._base = base

    def __getattr__(self, name):
        return getattr(self._base, name)

    def rsqrt(self, x, *args, **kwargs):
        if not args and not kwargs and x.dtype == torch.bfloat16 and x.device.type == "cpu":
            return rsqrt_bf16_as_cuda(x)
        return self._base.rsqrt(x, *args, **kwargs)


def install_cuda_rsqrt(model) -> None:
    """Rebinds the imported model.py module's `torch` to TorchWithCudaRsqrt (model.py is not edited;
    its only bf16 rsqrt on the attention path is Attention.forward's per-head norm of q)."""
    model.torch = TorchWithCudaRsqrt(model.torch)


# --------------------------------------------------------------------------------------------
# Kernels outside the attention path
# --------------------------------------------------------------------------------------------

def fp4_gemm(*args, **kwargs):
    raise NotImplementedError("fp4_gemm (MoE experts) is outside the attention path")


def hc_split_sinkhorn(*args, **kwargs):
    raise NotImplementedError("hc_split_sinkhorn (hyper-connections) is outside the attention path")


HADAMARD_MODULE = types.ModuleType("fast_hadamard_transform")
HADAMARD_MODULE.hadamard_transform = hadamard_transform
HADAMARD_MODULE.__doc__ = "Stand-in registered by verify/adapters/kernel_standins.py"


def install() -> None:
    """Registers this module as `kernel` and HADAMARD_MODULE as `fast_hadamard_transform`, so that
    the official model.py's imports resolve to the stand-ins."""
    sys.modules["kernel"] = sys.modules[__name__]
    sys.modules["fast_hadamard_transform"] = HADAMARD_MODULE
