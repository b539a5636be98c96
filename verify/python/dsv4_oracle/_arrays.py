"""Arrays across the boundary: numpy arrays, torch tensors (CPU or CUDA) and array-likes in,
float64 / int32 host arrays to the C++ oracle, results back as numpy (or as CPU torch tensors when
the inputs were torch tensors).

A C-contiguous float64 CPU tensor reaches the oracle without a copy (DLPack); any other dtype or
layout is converted once; CUDA tensors are copied to the host. bf16 / fp8 tensors are widened to
float32 first (exact), since neither numpy nor DLPack carry them everywhere.
"""
import functools

import numpy as np

try:  # torch is optional
    import torch
except ImportError:  # pragma: no cover - exercised on machines without torch
    torch = None

_NARROW_NUMPY = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn"}


def is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def to_host(x):
    """A value the bindings accept: torch CPU tensor (wide dtype) or numpy array; others unchanged."""
    if is_torch(x):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype in (torch.bfloat16, torch.float16) or "float8" in str(t.dtype):
            t = t.float()
        return t
    if isinstance(x, np.ndarray) and x.dtype.name in _NARROW_NUMPY:
        return x.astype(np.float32)
    if isinstance(x, (list, tuple)) and x and all(isinstance(e, (int, float)) for e in x):
        return np.asarray(x)
    if isinstance(x, (list, tuple)) and x and all(isinstance(e, np.ndarray) or is_torch(e) for e in x):
        return [to_host(e) for e in x]
    return x


def numpy(x, dtype=np.float64):
    """Any array-like (numpy, torch on any device, nested lists) as a numpy array of dtype."""
    x = to_host(x)
    if is_torch(x):
        x = x.numpy()
    return np.ascontiguousarray(np.asarray(x), dtype=dtype)


def _to_torch(value):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, dict):
        return {k: _to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_torch(v) for v in value)
    return value


def adapt(fn):
    """Wraps a binding so that it takes numpy / torch / array-likes and answers in kind."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        had_torch = any(is_torch(a) for a in args) or any(is_torch(v) for v in kwargs.values())
        result = fn(*(to_host(a) for a in args), **{k: to_host(v) for k, v in kwargs.items()})
        return _to_torch(result) if had_torch else result

    return wrapper
