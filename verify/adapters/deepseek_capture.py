#!/usr/bin/env python3
"""Capture adapter: runs DeepSeek-V4's official attention code and writes a capture (format v1).

The user supplies the `inference/` folder of DeepSeek-V4 (model.py, kernel.py, config.json; the
project never ships it). The adapter imports that model.py unchanged, builds ONLY the Attention
modules of the chosen layers with random weights in the checkpoint's dtypes, runs one prefill call
and `--decode` one-token calls over a batch, and records every stage as the official code computed
it, in the layout of docs/capture-format.md. See docs/deepseek-capture.md.

    python3 verify/adapters/deepseek_capture.py --inference-dir PATH/inference --out cap.h5 \
        [--config tiny|flash|FILE.json] [--layers 0,1,2] [--batch 2] [--prefill 37] [--decode 5] \
        [--seed 0] [--device cpu|cuda] [--kernels standin|official] [--inject-bug STAGE:BUG] \
        [--no-pre-quant]

How each stage is read (never recomputed by our own formula):
  x, out                       the Attention module's input and output (forward hooks)
  q_latent                     output of attn.q_norm (forward hook): qr = q_norm(wq_a(x))
  q, kv, topk_idxs, attn/core  arguments and result of the sparse_attn call (the function is
                               wrapped in model.py's namespace); kv = the window rows of the kv
                               tensor given to attention (prefill rows [0, s), decode the ring slot
                               start_pos % window)
  attn/out_heads               the same sparse_attn result tensor after model.py's in-place
                               inverse RoPE, read when wo_b is entered (forward pre-hook on wo_b)
  attn/wo_a                    the input of wo_b, unflattened to [b, s, G, o_lora_rank]
  compressor/entries           output of the Compressor module (forward hook); state after the call
                               from its kv_state / score_state buffers
  indexer/q, indexer/weights,  local variables q, weights, index_score of Indexer.forward at its
  indexer/scores               return (sys.settrace on that one code object); indexer/topk is the
                               Indexer module's output
  cache/...                    the module buffers, copied in the Attention forward pre-hook
  pre_quant/...                the tensors act_quant / fp4_act_quant are about to round in place
                               (kv and the compressor entries before FP8, indexer q and the indexer
                               compressor's entries before FP4), read from the caller's frame

--inject-bug STAGE:BUG makes DeepSeek's code compute one stage with a known bug (bug_injection.py;
the names are the oracle's, `dsv4-verify mutations`), for captures a verifier must fail.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

ADAPTER_VERSION = "1.0"
PRODUCER = f"deepseek-official-adapter {ADAPTER_VERSION}"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bug_injection  # noqa: E402  (after the path insert)
import kernel_standins  # noqa: E402

# The project's tiny configuration (reference/config.cpp ModelConfig::tiny()): the V4 structure
# with small widths. Layer ratios 0, 4, 128 (plus the MTP layer 0), so layers 0,1,2 cover all three.
TINY_CONFIG = dict(
    dim=256, n_heads=4, head_dim=128, rope_head_dim=64, q_lora_rank=128, o_groups=2, o_lora_rank=64,
    window_size=16, index_n_heads=4, index_head_dim=128, index_topk=8, max_seq_len=1024,
    compress_rope_theta=160000.0, rope_theta=10000.0, original_seq_len=65536, rope_factor=16.0,
    beta_fast=32, beta_slow=1, norm_eps=1e-6, n_layers=3, compress_ratios=(0, 4, 128, 0),
    dtype="fp8", scale_fmt="ue8m0", scale_dtype="fp8",
)

# /config attributes of the format: (ModelArgs field, attribute type)
CONFIG_ATTRS = [
    ("dim", int), ("n_heads", int), ("head_dim", int), ("rope_head_dim", int), ("q_lora_rank", int),
    ("o_groups", int), ("o_lora_rank", int), ("window_size", int), ("index_n_heads", int),
    ("index_head_dim", int), ("index_topk", int), ("rope_theta", float), ("compress_rope_theta", float),
    ("original_seq_len", int), ("rope_factor", float), ("beta_fast", float), ("beta_slow", float),
    ("norm_eps", float), ("max_seq_len", int),
]

# Every dataset of calls/<k>/ the recorder writes (docs/capture-format.md): the project's stage
# registry lists the same names (`dsv4-verify stages`; ctest adapter_stage_list keeps them in step).
CAPTURED_STAGES = (
    "x", "q_latent", "q", "kv",
    "compressor/entries", "compressor/state_kv", "compressor/state_score",
    "indexer/q", "indexer/weights",
    "indexer/compressor/entries", "indexer/compressor/state_kv", "indexer/compressor/state_score",
    "indexer/scores", "indexer/topk", "topk_idxs",
    "attn/core", "attn/out_heads", "attn/wo_a", "out",
    "cache/window_kv", "cache/compressed_kv", "cache/indexer_kv",
    "cache/compressor_state_kv", "cache/compressor_state_score",
    "cache/indexer_compressor_state_kv", "cache/indexer_compressor_state_score",
)

# The optional pre-quantization datasets (docs/capture-format.md "Pre-quantization values"; the
# project's reference/pre_quant.h lists the same names, `dsv4-verify stages --json`).
PRE_QUANT_DATASETS = (
    "pre_quant/kv", "pre_quant/compressor/entries", "pre_quant/indexer/q", "pre_quant/indexer/compressor/entries",
)

DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float8_e4m3fn: "float8_e4m3fn"}


# --------------------------------------------------------------------------------------------
# Loading the official code
# --------------------------------------------------------------------------------------------

def sha256_of(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_official_model(inference_dir: str, kernels: str):
    """Imports <inference_dir>/model.py as the module `model`, its `kernel` import resolved to the
    stand-ins (kernels == "standin") or to the official kernel.py (needs TileLang and a GPU)."""
    model_py = os.path.join(inference_dir, "model.py")
    if not os.path.isfile(model_py):
        raise FileNotFoundError(f"--inference-dir: expected DeepSeek-V4's model.py at {model_py}")
    if kernels == "standin":
        kernel_standins.install()
    else:
        sys.path.insert(0, inference_dir)
        try:
            import fast_hadamard_transform  # noqa: F401
        except ImportError:
            sys.modules["fast_hadamard_transform"] = kernel_standins.HADAMARD_MODULE
    spec = importlib.util.spec_from_file_location("model", model_py)
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    return module


def make_model_args(model, config: str, inference_dir: str, batch: int, max_seq_len: Optional[int]):
    """ModelArgs for `config`: "tiny" (TINY_CONFIG), "flash" (<inference_dir>/config.json, as
    generate.py reads it) or a JSON file of ModelArgs fields."""
    if config == "tiny":
        fields = dict(TINY_CONFIG)
    else:
        path = os.path.join(inference_dir, "config.json") if config == "flash" else config
        with open(path) as f:
            fields = json.load(f)
    fields["max_batch_size"] = batch
    if max_seq_len is not None:
        fields["max_seq_len"] = max_seq_len
    known = {f.name for f in dataclasses.fields(model.ModelArgs)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"config {config!r}: fields {unknown} are not ModelArgs fields of this model.py")
    return model.ModelArgs(**fields)


def set_model_globals(model, args) -> None:
    """model.py's globals (world_size, rank, default_dtype, scale_fmt, scale_dtype) are set by
    Transformer.__init__. Run that constructor itself, on the meta device and with no layers, so
    that they get exactly the official values without building the model."""
    with torch.device("meta"):
        model.Transformer(dataclasses.replace(args, n_layers=0, n_mtp_layers=0, vocab_size=1))


# --------------------------------------------------------------------------------------------
# Random weights in the checkpoint's dtypes
# --------------------------------------------------------------------------------------------

class WeightMaker:
    """Random parameters drawn on the CPU from one generator (so CPU and GPU runs of a seed get the
    same weights), then rounded to what the checkpoint stores."""

    def __init__(self, seed: int):
        self.gen = torch.Generator().manual_seed(seed)

    def normal(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen, dtype=torch.float32, device="cpu")

    def projection(self, out_features: int, in_features: int) -> torch.Tensor:
        """W [out, in] ~ N(0, 1/in), each 128x128 block scaled by 2^u, u ~ U(-1, 1), so that the
        blocks get different UE8M0 scales."""
        w = self.normal(out_features, in_features) * in_features ** -0.5
        blocks = (-(-out_features // 128), -(-in_features // 128))
        gain = torch.exp2(torch.rand(*blocks, generator=self.gen, dtype=torch.float32, device="cpu") * 2 - 1)
        return w * gain.repeat_interleave(128, 0)[:out_features].repeat_interleave(128, 1)[:, :in_features]

    def fill_linear(self, lin) -> None:
        w = self.projection(lin.out_features, lin.in_features)
        dtype = lin.weight.dtype
        if dtype == torch.float8_e4m3fn:
            values, scales = quantize_weight_fp8(w)
            lin.weight.data.copy_(values.to(lin.weight.device))
            lin.scale.data.copy_(scales.to(lin.scale.dtype).to(lin.scale.device))
        elif dtype in (torch.bfloat16, torch.float32):  # fp32 ones are bf16 in the checkpoint
            lin.weight.data.copy_(w.bfloat16().to(dtype).to(lin.weight.device))
        else:
            raise TypeError(f"Linear weight dtype {dtype} is not on the attention path")

    def fill_norm(self, norm) -> None:  # RMSNorm weight: fp32 parameter, bf16 in the checkpoint
        w = 1.0 + 0.1 * self.normal(norm.dim)
        norm.weight.data.copy_(w.bfloat16().float().to(norm.weight.device))

    def fill_fp32(self, param, std: float) -> None:  # ape, attn_sink: fp32 in the checkpoint
        param.data.copy_((std * self.normal(*param.shape)).to(param.device))


def quantize_weight_fp8(w: torch.Tensor):
    """w [out, in] fp32 -> (e4m3 [out, in], fp32 power-of-two scales [ceil(out/128), ceil(in/128)]):
    one UE8M0 scale per 128x128 block, 2^ceil(log2(amax/448)), as the checkpoint's FP8 blocks."""
    out_f, in_f = w.shape
    bo, bi = -(-out_f // 128), -(-in_f // 128)
    padded = torch.zeros(bo * 128, bi * 128, dtype=torch.float32, device=w.device)
    padded[:out_f, :in_f] = w
    amax = padded.abs().reshape(bo, 128, bi, 128).amax(dim=(1, 3)).clamp_min(1e-4)
    scales = kernel_standins.pow2_ceil(amax * torch.tensor(1.0 / 448.0, dtype=torch.float32, device=w.device))
    full = scales.repeat_interleave(128, 0).repeat_interleave(128, 1)[:out_f, :in_f]
    values = (w / full).clamp(-448, 448).to(torch.float8_e4m3fn)
    return values, scales


def init_attention_weights(model, attn, maker: WeightMaker) -> None:
    for module in attn.modules():
        if isinstance(module, model.Linear):
            maker.fill_linear(module)
        elif isinstance(module, model.RMSNorm):
            maker.fill_norm(module)
        elif isinstance(module, model.Compressor):
            maker.fill_fp32(module.ape, 0.5)
    maker.fill_fp32(attn.attn_sink, 1.0)


def put_quantizers_on_edges(attn) -> None:
    """As `dsv4-verify synth --quantization-edges`: blocks with amax below 1e-4, where the amax floor
    decides the scale. Indexer head 0's rows of indexer.wq_b (its 128x128 block scales times 2^-16:
    still powers of two) and the first 64 weights of kv_norm and of the compressor's norm, x 2^-16.

    One addition: kv_norm's weights 32..63 a further 2^-12 down (x 2^-28 in all). FP8 rounds
    s * e4m3(x / s) to the same value for every power-of-two s while x / s stays a normal e4m3, so
    which amax floor set kv's first block scale (2^-23 from its amax ~4e-5, or 2^-22 from 1e-4)
    shows only in elements that fall to e4m3's subnormals (|x / s| < 2^-6); these ~3e-9 * N(0, 1)
    elements do (kv:amax-floor-6x2^-126 changes about a third of them; with 2^-16 alone none)."""
    with torch.no_grad():
        attn.kv_norm.weight[:64] *= 2.0 ** -16
        attn.kv_norm.weight[32:64] *= 2.0 ** -12
        if attn.compress_ratio:
            attn.compressor.norm.weight[:64] *= 2.0 ** -16
        if getattr(attn, "indexer", None) is not None:
            wq_b = attn.indexer.wq_b
            rows = attn.indexer.head_dim
            assert rows % 128 == 0 and wq_b.weight.dtype == torch.float8_e4m3fn
            wq_b.scale[: rows // 128] = (wq_b.scale[: rows // 128].float() * 2.0 ** -16).to(wq_b.scale.dtype)


def dequantized_weight(lin) -> torch.Tensor:
    """The values a Linear's GEMM multiplies by, float32: e4m3 * its 128x128 block scale, or the
    bf16 / fp32 weight as it is."""
    w = lin.weight.detach()
    if w.dtype == torch.float8_e4m3fn:
        s = lin.scale.detach().float().repeat_interleave(128, 0).repeat_interleave(128, 1)
        return w.float() * s[: w.size(0), : w.size(1)]
    return w.float()


def linear_kind(lin) -> str:
    return {torch.float8_e4m3fn: "fp8", torch.bfloat16: "bf16", torch.float32: "fp32"}[lin.weight.dtype]


def layer_weights(attn) -> Dict[str, tuple]:
    """{path under weights/: (float32 tensor, `linear` attr or None)} as capture-format lists them."""
    out = {
        "wq_a": (dequantized_weight(attn.wq_a), linear_kind(attn.wq_a)),
        "q_norm": (attn.q_norm.weight.detach().float(), None),
        "wq_b": (dequantized_weight(attn.wq_b), linear_kind(attn.wq_b)),
        "wkv": (dequantized_weight(attn.wkv), linear_kind(attn.wkv)),
        "kv_norm": (attn.kv_norm.weight.detach().float(), None),
        "attn_sink": (attn.attn_sink.detach().float(), None),
        "wo_a": (dequantized_weight(attn.wo_a), linear_kind(attn.wo_a)),
        "wo_b": (dequantized_weight(attn.wo_b), linear_kind(attn.wo_b)),
    }

    def compressor(prefix, comp):
        out[f"{prefix}/wkv"] = (dequantized_weight(comp.wkv), linear_kind(comp.wkv))
        out[f"{prefix}/wgate"] = (dequantized_weight(comp.wgate), linear_kind(comp.wgate))
        out[f"{prefix}/ape"] = (comp.ape.detach().float(), None)
        out[f"{prefix}/norm"] = (comp.norm.weight.detach().float(), None)

    if attn.compress_ratio:
        compressor("compressor", attn.compressor)
        if attn.indexer is not None:
            out["indexer/wq_b"] = (dequantized_weight(attn.indexer.wq_b), linear_kind(attn.indexer.wq_b))
            out["indexer/weights_proj"] = (dequantized_weight(attn.indexer.weights_proj),
                                           linear_kind(attn.indexer.weights_proj))
            compressor("indexer/compressor", attn.indexer.compressor)
    return out


# --------------------------------------------------------------------------------------------
# Recording the stages
# --------------------------------------------------------------------------------------------

class ReturnLocals:
    """While active, calls on_return(locals) each time a frame running `code` returns: the final
    values of a function's local variables, without touching its source."""

    def __init__(self, code, on_return: Callable[[dict], None]):
        self.code = code
        self.on_return = on_return
        self.previous = None

    def __enter__(self):
        self.previous = sys.gettrace()
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc):
        sys.settrace(self.previous)

    def _on_call(self, frame, event, arg):
        if frame.f_code is not self.code:
            return None
        frame.f_trace_lines = False
        return self._in_frame

    def _in_frame(self, frame, event, arg):
        if event == "return":
            self.on_return(dict(frame.f_locals))
        return self._in_frame


def snapshot(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


class LayerRecorder:
    """Hooks on one Attention module; `calls` gets one {dataset path: tensor} dict per call."""

    def __init__(self, attn):
        self.attn = attn
        self.calls: List[Dict[str, torch.Tensor]] = []
        self.call_attrs: List[Dict[str, int]] = []
        self.current: Optional[Dict[str, torch.Tensor]] = None
        self.core_output: Optional[torch.Tensor] = None  # sparse_attn's result, rotated in place later
        self.handles = []
        hook = self.handles.append
        hook(attn.register_forward_pre_hook(self._before_call))
        hook(attn.register_forward_hook(self._after_call))
        hook(attn.q_norm.register_forward_hook(self._q_norm_out))
        hook(attn.wo_b.register_forward_pre_hook(self._wo_b_in))
        if attn.compress_ratio:
            hook(attn.compressor.register_forward_hook(self._compressor_hook("compressor")))
            if attn.indexer is not None:
                hook(attn.indexer.register_forward_hook(self._indexer_out))
                hook(attn.indexer.compressor.register_forward_hook(self._compressor_hook("indexer/compressor")))

    # -- Attention ------------------------------------------------------------------------------
    def _before_call(self, module, args):
        x, start_pos = args[0], int(args[1])
        b, s = x.size(0), x.size(1)
        attn = self.attn
        win, ratio = attn.window_size, attn.compress_ratio
        self.current = {"x": snapshot(x)}
        self.call_attrs.append({"start_pos": start_pos, "seqlen": s})
        ACTIVE.append(self)
        cache = {"cache/window_kv": attn.kv_cache[:b, :win]}
        if ratio:
            cache["cache/compressed_kv"] = attn.kv_cache[:b, win: win + start_pos // ratio]
            cache["cache/compressor_state_kv"] = attn.compressor.kv_state[:b]
            cache["cache/compressor_state_score"] = attn.compressor.score_state[:b]
            if attn.indexer is not None:
                cache["cache/indexer_kv"] = attn.indexer.kv_cache[:b, : start_pos // ratio]
                cache["cache/indexer_compressor_state_kv"] = attn.indexer.compressor.kv_state[:b]
                cache["cache/indexer_compressor_state_score"] = attn.indexer.compressor.score_state[:b]
        self.current.update({k: snapshot(v) for k, v in cache.items()})

    def _after_call(self, module, args, output):
        self.current["out"] = snapshot(output)
        self.calls.append(self.current)
        self.current, self.core_output = None, None
        ACTIVE.pop()

    def _q_norm_out(self, module, args, output):
        self.current["q_latent"] = snapshot(output)

    def on_sparse_attn(self, q, kv, topk_idxs, o):
        start_pos, s = self.call_attrs[-1]["start_pos"], self.call_attrs[-1]["seqlen"]
        self.current["q"] = snapshot(q)
        if start_pos == 0:
            self.current["kv"] = snapshot(kv[:, :s])
        else:
            slot = start_pos % self.attn.window_size
            self.current["kv"] = snapshot(kv[:, slot: slot + 1])
        self.current["topk_idxs"] = snapshot(topk_idxs)
        self.current["attn/core"] = snapshot(o)
        self.core_output = o

    def _wo_b_in(self, module, args):
        o = args[0]
        b, s = o.size(0), o.size(1)
        self.current["attn/wo_a"] = snapshot(o.view(b, s, self.attn.n_local_groups, self.attn.o_lora_rank))
        self.current["attn/out_heads"] = snapshot(self.core_output)

    # -- Compressors and indexer ---------------------------------------------------------------
    def _compressor_hook(self, prefix: str):
        def hook(module, args, output):
            b = args[0].size(0)
            if output is None:  # no block completed in this call
                output = torch.empty(b, 0, module.head_dim, dtype=self.current["x"].dtype, device=args[0].device)
                if RECORD_PRE_QUANT:
                    self.current[f"pre_quant/{prefix}/entries"] = snapshot(output)
            self.current[f"{prefix}/entries"] = snapshot(output)
            self.current[f"{prefix}/state_kv"] = snapshot(module.kv_state[:b])
            self.current[f"{prefix}/state_score"] = snapshot(module.score_state[:b])
        return hook

    def on_indexer_return(self, local_vars: dict):
        self.current["indexer/q"] = snapshot(local_vars["q"])
        self.current["indexer/weights"] = snapshot(local_vars["weights"])
        self.current["indexer/scores"] = snapshot(local_vars["index_score"])

    def _indexer_out(self, module, args, output):
        self.current["indexer/topk"] = snapshot(output)


ACTIVE: List[LayerRecorder] = []  # the recorder of the Attention module now running


RECORD_PRE_QUANT = True  # main() clears it for --no-pre-quant


def wrap_quantizers(model) -> None:
    """Rebinds model.py's `act_quant` and `fp4_act_quant` to wrappers that record, before an
    in-place quantization of a stage, the whole tensor it belongs to (the caller's local `kv` or
    `q`: the rope dims of kv are not quantized but belong to the value) as pre_quant/<stage>."""
    fp8_kernel, fp4_kernel = model.act_quant, model.fp4_act_quant
    attention, indexer, compressor = (model.Attention.forward.__code__, model.Indexer.forward.__code__,
                                      model.Compressor.forward.__code__)

    def record(frame) -> None:
        if frame is None:
            return
        local = frame.f_locals
        if frame.f_code is attention:
            name, whole = "pre_quant/kv", local["kv"]
        elif frame.f_code is indexer:
            name, whole = "pre_quant/indexer/q", local["q"]
        elif frame.f_code is compressor:
            prefix = "indexer/compressor" if local["self"].rotate else "compressor"
            name, whole = f"pre_quant/{prefix}/entries", local["kv"]
        else:
            return
        ACTIVE[-1].current[name] = snapshot(whole)

    def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=torch.float32, inplace=False):
        if inplace and ACTIVE:
            record(bug_injection.model_frame(model))
        return fp8_kernel(x, block_size, scale_fmt, scale_dtype, inplace)

    def fp4_act_quant(x, block_size=32, inplace=False):
        if inplace and ACTIVE:
            record(bug_injection.model_frame(model))
        return fp4_kernel(x, block_size, inplace)

    model.act_quant, model.fp4_act_quant = act_quant, fp4_act_quant


def wrap_sparse_attn(model) -> None:
    """Replaces model.py's `sparse_attn` name by a wrapper that reports arguments and result."""
    kernel_fn = model.sparse_attn

    def recorded_sparse_attn(q, kv, attn_sink, topk_idxs, softmax_scale):
        o = kernel_fn(q, kv, attn_sink, topk_idxs, softmax_scale)
        ACTIVE[-1].on_sparse_attn(q, kv, topk_idxs, o)
        return o

    model.sparse_attn = recorded_sparse_attn


# --------------------------------------------------------------------------------------------
# Running and writing
# --------------------------------------------------------------------------------------------

def run_layer(model, args, layer_id: int, batch: int, prefill: int, decode: int, seed: int,
              device: str, injector: Optional[bug_injection.BugInjector] = None, quantization_edges: bool = False):
    """Fresh Attention(layer_id) with random weights; one prefill call and `decode` one-token calls.
    Returns (attention module, recorder)."""
    maker = WeightMaker(seed * 1000003 + layer_id)
    attn = model.Attention(layer_id, args)
    init_attention_weights(model, attn, maker)
    if quantization_edges:
        put_quantizers_on_edges(attn)
    if injector is not None:
        injector.attach(attn)
    # The attention input is attn_norm's output: unit-RMS-like bf16 values.
    x = maker.normal(batch, prefill + decode, args.dim).bfloat16().to(device)
    recorder = LayerRecorder(attn)
    trace = ReturnLocals(model.Indexer.forward.__code__, lambda loc: ACTIVE[-1].on_indexer_return(loc))
    with torch.inference_mode(), trace:
        attn(x[:, :prefill], 0)
        for i in range(decode):
            attn(x[:, prefill + i: prefill + i + 1], prefill + i)
    for h in recorder.handles:
        h.remove()
    return attn, recorder


def as_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype in (torch.int32, torch.int64):
        return t.to(torch.int32).cpu().numpy()
    return t.float().cpu().numpy()


def write_dataset(group, name: str, t: torch.Tensor, compress: bool, dtype_attr: bool = True):
    data = as_numpy(t)
    opts = dict(compression="gzip", compression_opts=4, shuffle=True) if compress and data.size > 0 else {}
    ds = group.create_dataset(name, data=data, **opts)
    if dtype_attr and t.dtype not in (torch.int32, torch.int64):
        ds.attrs["dtype"] = DTYPE_NAMES[t.dtype]
    return ds


def write_capture(path: str, args, layers, meta: dict, compress: bool) -> None:
    import h5py
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "dsv4-capture"
        f.attrs["format_version"] = np.int64(1)
        bug = meta.get("injected_bug", "none")
        f.attrs["producer"] = PRODUCER + ("" if bug == "none" else f" (bug injected: {bug})")
        f.attrs["model"] = meta["model"]
        # kernel.py's sparse_attn and its stand-in both walk the index list in blocks of 64 with a
        # running max and cast the probabilities to bf16 before P.V: DeepSeek's probability
        # convention, by which the verifier bounds attn/core per element (docs/capture-format.md).
        f.attrs["probs_convention"] = "deepseek"
        # One attribute, so that readers note one unknown member: what ran, as JSON.
        f.attrs["adapter_provenance"] = json.dumps({k: v for k, v in meta.items() if k != "model"}, sort_keys=True)
        cfg = f.create_group("config")
        for field, kind in CONFIG_ATTRS:
            value = getattr(args, field)
            cfg.attrs[field] = np.int64(value) if kind is int else np.float64(value)
        cfg.attrs["precision"] = "official"
        for layer_id, (attn, recorder) in layers.items():
            lg = f.create_group(f"layers/{layer_id}")
            lg.attrs["compress_ratio"] = np.int64(attn.compress_ratio)
            for name, (tensor, kind) in layer_weights(attn).items():
                ds = write_dataset(lg, f"weights/{name}", tensor, compress, dtype_attr=False)
                if kind is not None:
                    ds.attrs["linear"] = kind
            for k, (stages, attrs) in enumerate(zip(recorder.calls, recorder.call_attrs)):
                cg = lg.create_group(f"calls/{k}")
                cg.attrs["start_pos"] = np.int64(attrs["start_pos"])
                cg.attrs["seqlen"] = np.int64(attrs["seqlen"])
                for name, tensor in stages.items():
                    if name not in CAPTURED_STAGES and name not in PRE_QUANT_DATASETS:
                        raise KeyError(f"recorded dataset {name!r} is in neither CAPTURED_STAGES nor PRE_QUANT_DATASETS")
                    write_dataset(cg, name, tensor, compress)


def parse_layers(text: Optional[str], args) -> List[int]:
    if text is None:  # one layer of each ratio present, in model order
        seen, layers = set(), []
        for i, r in enumerate(args.compress_ratios[: args.n_layers]):
            if r not in seen:
                seen.add(r)
                layers.append(i)
        return layers
    layers = [int(v) for v in text.split(",") if v.strip()]
    for i in layers:
        if not 0 <= i < len(args.compress_ratios):
            raise ValueError(f"--layers: layer {i} outside [0, {len(args.compress_ratios)})")
    return layers


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inference-dir", required=True, help="DeepSeek-V4's inference/ folder (model.py, kernel.py, config.json)")
    p.add_argument("--out", required=True, help="capture file to write (HDF5)")
    p.add_argument("--config", default="tiny", help="tiny | flash (the folder's config.json) | a JSON file of ModelArgs fields")
    p.add_argument("--layers", default=None, help="comma-separated layer indices (default: the first layer of each ratio)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--prefill", type=int, default=37, help="tokens of the prefill call (start_pos 0)")
    p.add_argument("--decode", type=int, default=5, help="one-token decode calls after the prefill")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--kernels", choices=["standin", "official"], default="standin",
                   help="standin: verify/adapters/kernel_standins.py; official: the folder's kernel.py (TileLang, GPU)")
    p.add_argument("--max-seq-len", type=int, default=None, help="override ModelArgs.max_seq_len (cache and RoPE table size)")
    p.add_argument("--no-compress", action="store_true", help="write datasets without gzip")
    p.add_argument("--no-pre-quant", action="store_true",
                   help="leave out the pre_quant/ datasets (the values before the final FP8/FP4 rounding)")
    p.add_argument("--quantization-edges", action="store_true",
                   help="weights with blocks of amax below 1e-4 (indexer head 0's query, the first FP8 block of kv "
                        "and of the compressor's entries), where the amax floor decides the scale")
    p.add_argument("--inject-bug", default=None, metavar="STAGE:BUG",
                   help="compute STAGE with bug BUG (a capture the verifier must fail): one of "
                        + ", ".join(bug_injection.INJECTABLE_BUGS))
    opts = p.parse_args(argv)

    if opts.batch < 1 or opts.prefill < 1 or opts.decode < 0:
        p.error("need --batch >= 1, --prefill >= 1, --decode >= 0")
    inference_dir = os.path.abspath(opts.inference_dir)
    model = load_official_model(inference_dir, opts.kernels)
    args = make_model_args(model, opts.config, inference_dir, opts.batch, opts.max_seq_len)
    if opts.prefill + opts.decode > args.max_seq_len:
        p.error(f"prefill + decode = {opts.prefill + opts.decode} exceeds max_seq_len {args.max_seq_len}")
    layer_ids = parse_layers(opts.layers, args)

    # As generate.py: bf16 default dtype (kv caches, GEMM outputs) and the run's default device.
    torch.set_default_dtype(torch.bfloat16)
    torch.set_default_device(opts.device)
    set_model_globals(model, args)
    # The per-head q norm's bf16 rsqrt as the GPU computes it (fp32, rounded once); on the CPU
    # torch's own is one ulp off in some heads (docs/deepseek-capture.md). A no-op on the GPU.
    kernel_standins.install_cuda_rsqrt(model)
    # The bug first (it replaces kernels and the names model.py looks up), then the recorders
    # around it, so they record what the buggy code computed.
    injector = None
    if opts.inject_bug is not None:
        if opts.inject_bug not in bug_injection.INJECTABLE_BUGS:
            p.error(f"--inject-bug {opts.inject_bug!r}: expected one of {', '.join(bug_injection.INJECTABLE_BUGS)}")
        injector = bug_injection.BugInjector(model, opts.inject_bug, args)
        injector.install()
    global RECORD_PRE_QUANT
    RECORD_PRE_QUANT = not opts.no_pre_quant
    if RECORD_PRE_QUANT:
        wrap_quantizers(model)
    wrap_sparse_attn(model)

    layers = {}
    for layer_id in layer_ids:
        layers[layer_id] = run_layer(model, args, layer_id, opts.batch, opts.prefill, opts.decode,
                                     opts.seed, opts.device, injector, opts.quantization_edges)
        print(f"layer {layer_id}: ratio {layers[layer_id][0].compress_ratio}, "
              f"{len(layers[layer_id][1].calls)} calls captured", file=sys.stderr)

    kernel_py = os.path.join(inference_dir, "kernel.py")
    meta = {
        "model": f"DeepSeek-V4 attention, config {os.path.basename(opts.config)}, random weights (seed {opts.seed})",
        "model_py_sha256": sha256_of(os.path.join(inference_dir, "model.py")),
        "kernel_py_sha256": sha256_of(kernel_py) if os.path.isfile(kernel_py) else "absent",
        "kernels": ("pure-torch stand-ins, verify/adapters/kernel_standins.py" if opts.kernels == "standin"
                    else "official kernel.py (TileLang)"),
        "hadamard": ("pure-torch stand-in" if sys.modules.get("fast_hadamard_transform") is kernel_standins.HADAMARD_MODULE
                     else "fast_hadamard_transform"),
        "device": str(opts.device),
        "bf16_rsqrt": ("fp32 rsqrt rounded to bf16, as CUDA (torch's CPU bf16 rsqrt is not correctly rounded)"
                       if torch.device(opts.device).type == "cpu" else "torch's"),
        "torch_version": str(torch.__version__),
        "seed": opts.seed,
        "injected_bug": opts.inject_bug or "none",
        "quantization_edges": bool(opts.quantization_edges),
    }
    write_capture(opts.out, args, layers, meta, compress=not opts.no_compress)
    print(f"wrote {opts.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
