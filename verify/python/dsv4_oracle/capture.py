"""Capture files (format v1, docs/capture-format.md) from Python: record an engine's stage outputs
so that `dsv4-verify replay` checks them stage by stage, and read captures back.

    cap = capture.new_capture(cfg, precision="official")
    layer = capture.add_layer(cap, index=2, compress_ratio=4, weights=w)
    capture.add_call(layer, start_pos=0, stages={"x": x, "q": q, "attn/core": o, ...}, cfg=cfg)
    capture.write("engine.h5", cap)          # then: dsv4-verify replay engine.h5
"""
import os
import shutil
import subprocess

import numpy as np

from . import _core
from ._arrays import numpy as _np

_STAGES = {name: (shape, is_index) for name, shape, is_index, *_ in _core.stage_names()}


def new_capture(cfg, precision="official", model="", producer="dsv4_oracle", probs_convention=""):
    """probs_convention: "deepseek" when the engine's attn/core forms its probabilities as kernel.py
    does (blocks of 64 in index order, running max, bf16 before P.V; docs/capture-format.md), "any"
    or "" (not written) otherwise."""
    cap = _core.Capture()
    cap.config = cfg if isinstance(cfg, _core.ModelConfig) else _core.ModelConfig(cfg)
    cap.precision, cap.model, cap.producer = precision, model, producer
    cap.probs_convention = probs_convention
    return cap


def add_layer(cap, index, compress_ratio, weights):
    layer = _core.LayerCapture()
    layer.index, layer.compress_ratio, layer.weights = index, compress_ratio, weights
    layers = cap.layers
    layers[index] = layer
    return layers[index]


def capture_shape(stage, array, cfg):
    """A stage's array in the capture's shape: arrays that lack the batch axis (one sequence, as the
    oracle returns them: q [s, H*d]) get it, and merged head axes are split ([1, s, H, d])."""
    if stage not in _STAGES:
        raise ValueError(f"{stage!r} is not a capture stage (stages: {', '.join(_STAGES)})")
    tokens = _STAGES[stage][0].strip("[]").split(",")
    if array.ndim == len(tokens):
        return array
    if array.ndim == len(tokens) - 1:
        return array[None]
    known = {"b": 1, "H": cfg.n_heads, "d": cfg.head_dim, "dim": cfg.dim, "q_lora_rank": cfg.q_lora_rank,
             "IH": cfg.index_n_heads, "ID": cfg.index_head_dim, "G": cfg.o_groups, "o_lora_rank": cfg.o_lora_rank,
             "W": cfg.window_size}
    return array.reshape([known.get(t, -1) for t in tokens])


def tensor(stage, array, cfg, dtype=None):
    """A CaptureTensor for a stage (index stages int32, others float with the producer's dtype)."""
    is_index = _STAGES[stage][1]
    a = capture_shape(stage, _np(array), cfg)
    return _core.CaptureTensor(np.ascontiguousarray(a), dtype or ("int32" if is_index else "float32"), is_index)


def add_call(layer, start_pos, stages, cfg, batch=1, dtypes=None):
    """Appends call len(layer.calls): stages {name: array} (per-sequence arrays get the batch axis)."""
    call = _core.CallCapture()
    call.index, call.start_pos, call.batch = len(layer.calls), start_pos, batch
    dtypes = dtypes or {}
    for name, array in stages.items():
        call.stages[name] = tensor(name, array, cfg, dtypes.get(name))
    x = call.stages["x"] if "x" in call.stages else next(iter(call.stages.values()))
    call.seqlen = int(x.shape[1])
    layer.calls.append(call)
    return layer.calls[len(layer.calls) - 1]


def write(path, cap, compress=False):
    _core.write_capture(os.fspath(path), cap, compress)


def read(path):
    return _core.read_capture(os.fspath(path))


def find_dsv4_verify():
    """The dsv4-verify executable: $DSV4_VERIFY, else PATH, else None."""
    explicit = os.environ.get("DSV4_VERIFY")
    if explicit:
        return explicit
    return shutil.which("dsv4-verify")


def replay(path, *args, binary=None):
    """Runs `dsv4-verify replay PATH ARGS...`; returns the CompletedProcess (stdout holds the report)."""
    exe = binary or find_dsv4_verify()
    if exe is None:
        raise FileNotFoundError("dsv4-verify not found: build it (cmake --build --preset release --target dsv4-verify) "
                                "and set DSV4_VERIFY or put it on PATH")
    return subprocess.run([exe, "replay", os.fspath(path), *args], capture_output=True, text=True)
