"""Bug injection into DeepSeek-V4's own attention code, for captures a verifier must fail.

`deepseek_capture.py --inject-bug STAGE:BUG` makes DeepSeek's `model.py` compute one stage with one
known bug class, so that the lead can make mutated captures of DeepSeek's code (on the GPU, with
its TileLang kernels everywhere else) and check that `dsv4-verify replay` fails at that stage and
its diagnosis names the bug. The names are the oracle's (`dsv4-verify mutations`; reference/
mutation.h), and each bug is the one the oracle injects with `dsv4-verify synth --inject-bug`
(docs/math.md "Numerics variants").

model.py is never edited. Every injection goes through a name model.py looks up at call time in
its module namespace (`act_quant`, `fp4_act_quant`, `apply_rotary_emb`, `sparse_attn`, `torch`),
rebound to a wrapper that finds which stage is running from its caller's frame, or through module
hooks (forward hooks, a compressor's `ape` swapped for the call and restored):

  quantizer bugs         act_quant / fp4_act_quant of the target stage run the stand-in variant
                         (kernel_standins.act_quant_variant / fp4_act_quant_variant), or nothing
  RoPE bugs              apply_rotary_emb of the target stage gets the table rows of t +- 1 (or
                         of j*r + r - 1), rotates the first rope dims, or pairs (i, i + 32)
  ape shift              the compressor's ape rolled by one row during its forward
  causal boundary        `torch.arange(1, s + 1)` inside Indexer.forward (the mask's t + 1)
                         becomes arange(1 + k, s + 1 + k)
  attention bugs         sparse_attn gets another softmax_scale, a -inf sink, or runs the
                         stand-in with fp32 probabilities
  output deviations      the stage's tensor altered in place right after it is computed (every
                         element one bf16 ulp high, times 1.1, one index replaced), exactly as the
                         oracle's MutatedStages alters its result

Written for this project; no line is taken from DeepSeek's code.
"""
from __future__ import annotations

import sys
from typing import Callable, Dict, Optional, Tuple

import torch

import kernel_standins as ks

# Every mutation this module can inject into DeepSeek's code: a subset of `dsv4-verify mutations`
# (ctest adapter_stage_list checks that every name here is one of the oracle's).
INJECTABLE_BUGS = (
    "kv:quant-skipped", "kv:round-toward-zero", "kv:ties-toward-zero", "kv:amax-floor-6x2^-126", "kv:ue8m0-floor",
    "compressor/entries:quant-skipped", "compressor/entries:round-toward-zero",
    "compressor/entries:ties-toward-zero", "compressor/entries:ue8m0-floor",
    "indexer/q:quant-skipped", "indexer/q:round-toward-zero", "indexer/q:ties-toward-zero",
    "indexer/q:amax-floor-1e-4", "indexer/q:ue8m0-floor",
    "indexer/compressor/entries:quant-skipped", "indexer/compressor/entries:ties-toward-zero",
    "indexer/compressor/entries:amax-floor-1e-4", "indexer/compressor/entries:ue8m0-floor",
    "q:rope-position+1", "q:rope-position-1", "q:rope-first-dims", "q:rope-halves",
    "kv:rope-position+1", "kv:rope-first-dims", "kv:rope-halves",
    "indexer/q:rope-position+1", "indexer/q:rope-halves",
    "compressor/entries:rope-position+1", "compressor/entries:rope-block-end", "compressor/entries:rope-halves",
    "indexer/compressor/entries:rope-position+1", "indexer/compressor/entries:rope-block-end",
    "attn/out_heads:rope-position+1",
    "compressor/entries:ape-shift+1", "compressor/entries:ape-shift-1", "indexer/compressor/entries:ape-shift+1",
    "indexer/scores:causal+1", "indexer/scores:causal-1",
    "attn/core:softmax-scale-nope-dim", "attn/core:softmax-scale-rope-dim", "attn/core:softmax-scale-index-head-dim",
    "attn/core:probs-fp32", "attn/core:sink-dropped",
    "q_latent:one-ulp-high", "q_latent:scaled-1.1", "q:one-ulp-high", "q:scaled-1.1",
    "kv:one-ulp-high", "kv:scaled-1.1", "compressor/entries:one-ulp-high", "compressor/entries:scaled-1.1",
    "indexer/q:one-ulp-high", "indexer/q:scaled-1.1", "indexer/q:scaled-0.5",
    "indexer/compressor/entries:one-ulp-high", "indexer/compressor/entries:scaled-1.1",
    "attn/core:one-ulp-high", "attn/core:scaled-1.1", "attn/out_heads:one-ulp-high", "attn/out_heads:scaled-1.1",
    "attn/wo_a:one-ulp-high", "attn/wo_a:scaled-1.1", "out:one-ulp-high", "out:scaled-1.1",
    "indexer/topk:index-replaced", "topk_idxs:index-replaced",
)

QUANT_VARIANTS = {
    "round-toward-zero": ks.QuantVariant(rounding="toward_zero"),
    "ties-toward-zero": ks.QuantVariant(rounding="ties_toward_zero"),
    "amax-floor-1e-4": ks.QuantVariant(amax_floor=1e-4),
    "amax-floor-6x2^-126": ks.QuantVariant(amax_floor=6.0 * 2.0 ** -126),
    "ue8m0-floor": ks.QuantVariant(scale_rule="floor"),
}


# --------------------------------------------------------------------------------------------
# Output deviations (the oracle's alter_output, reference/mutation.cpp)
# --------------------------------------------------------------------------------------------

def one_ulp_high(t: torch.Tensor) -> torch.Tensor:
    """bf16 t -> the next bf16 above each element (toward +inf); +-0 -> the smallest positive bf16;
    non-finite values kept."""
    assert t.dtype == torch.bfloat16, f"one ulp of a {t.dtype} tensor"
    bits = t.contiguous().view(torch.int16).to(torch.int32)
    magnitude = bits & 0x7FFF
    up = torch.where(magnitude == 0, torch.ones_like(bits), torch.where(bits < 0, bits - 1, bits + 1))
    out = ((up + 0x8000) % 0x10000 - 0x8000).to(torch.int16).view(torch.bfloat16)
    return torch.where(torch.isfinite(t), out, t)


def scaled_1_1(t: torch.Tensor) -> torch.Tensor:
    """t * 1.1 in float64, rounded to float32 then to t's dtype (the oracle's round_to)."""
    return torch.where(torch.isfinite(t), (t.double() * 1.1).float().to(t.dtype), t)


def scaled_0_5(t: torch.Tensor) -> torch.Tensor:
    """t * 0.5 in float64, rounded to float32 then to t's dtype (the oracle's round_to)."""
    return torch.where(torch.isfinite(t), (t.double() * 0.5).float().to(t.dtype), t)


DENSE_DEVIATIONS = {"one-ulp-high": one_ulp_high, "scaled-1.1": scaled_1_1, "scaled-0.5": scaled_0_5}


def alter_dense(t: torch.Tensor, bug: str) -> None:
    """In place: t <- one_ulp_high(t), scaled_1_1(t) or scaled_0_5(t)."""
    t.copy_(DENSE_DEVIATIONS[bug](t))


def replace_one_index(picks: torch.Tensor, first_valid: int, end_valid: int,
                      visible: Optional[Callable[[int, int], bool]] = None) -> torch.Tensor:
    """picks [b, rows, width] -> a copy where, for each sequence b, the first row with a pick that
    lacks an index u of [first_valid, end_valid) it can see (visible(row, u), default every u) has
    its first pick replaced by the smallest such u; when every row with a pick holds every index it
    can see, the first row with a pick loses its first pick (-1). A row never holds an index twice
    and never one outside the call's index space (reference/mutation.cpp alter_output)."""
    out = picks.clone()
    for b in range(out.size(0)):
        first_row = None
        for i, row in enumerate(out[b]):
            values = row.tolist()
            slots = [c for c, v in enumerate(values) if v != -1]
            if not slots:
                continue
            if first_row is None:
                first_row = (i, slots[0])
            held = set(values)
            replacement = next((u for u in range(first_valid, end_valid)
                                if u not in held and (visible is None or visible(i, u))), None)
            if replacement is not None:
                row[slots[0]] = replacement
                break
        else:
            if first_row is not None:
                out[b, first_row[0], first_row[1]] = -1
    return out


# --------------------------------------------------------------------------------------------
# The injector
# --------------------------------------------------------------------------------------------

class BugInjector:
    """Installs one bug into the imported model.py module (before any Attention runs)."""

    def __init__(self, model, name: str, args):
        if name not in INJECTABLE_BUGS:
            raise ValueError(f"--inject-bug {name!r}: expected one of {', '.join(INJECTABLE_BUGS)}")
        self.model = model
        self.name = name
        self.stage, self.bug = name.split(":")
        self.args = args
        self.codes = {
            "attention": model.Attention.forward.__code__,
            "indexer": model.Indexer.forward.__code__,
            "compressor": model.Compressor.forward.__code__,
        }

    # -- which stage is running ---------------------------------------------------------------
    def caller_stage(self, frame, x: Optional[torch.Tensor] = None, inverse: bool = False) -> Optional[str]:
        """The stage a quantizer or RoPE call in `frame` (model.py's) works on."""
        if frame is None:
            return None
        code, local = frame.f_code, frame.f_locals
        if code is self.codes["compressor"]:
            return "indexer/compressor/entries" if local["self"].rotate else "compressor/entries"
        if code is self.codes["indexer"]:
            return "indexer/q"
        if code is self.codes["attention"]:
            if inverse:
                return "attn/out_heads"
            for stage, var in (("q", "q"), ("kv", "kv")):
                t = local.get(var)
                if isinstance(t, torch.Tensor) and x is not None and _same_storage(t, x):
                    return stage
        return None

    # -- installation -------------------------------------------------------------------------
    def install(self) -> None:
        if self.bug in ("quant-skipped",) or self.bug in QUANT_VARIANTS or (
                self.bug in DENSE_DEVIATIONS and self.stage in (
                    "kv", "compressor/entries", "indexer/q", "indexer/compressor/entries")):
            self._wrap_quantizers()
        if self.bug.startswith("rope-") or (self.stage == "attn/out_heads" and self.bug in DENSE_DEVIATIONS):
            self._wrap_rope()
        if self.stage in ("attn/core", "topk_idxs") or (self.stage == "q" and self.bug in DENSE_DEVIATIONS):
            self._wrap_sparse_attn()
        if self.bug.startswith("causal"):
            self._shift_indexer_mask(+1 if self.bug == "causal+1" else -1)

    def attach(self, attn) -> None:
        """Hooks on one Attention module; call before the capture recorder hooks it."""
        if self.bug.startswith("ape-shift") and attn.compress_ratio:
            indexer = self.stage.startswith("indexer/")
            if not indexer or getattr(attn, "indexer", None) is not None:
                comp = attn.indexer.compressor if indexer else attn.compressor
                _roll_ape_during_forward(comp, +1 if self.bug == "ape-shift+1" else -1)
        if self.bug in DENSE_DEVIATIONS:
            bug = self.bug
            if self.stage == "q_latent":
                attn.q_norm.register_forward_hook(lambda m, a, out: _altered_copy(out, bug), prepend=True)
            elif self.stage == "out":
                attn.register_forward_hook(lambda m, a, out: _altered_copy(out, bug), prepend=True)
            elif self.stage == "attn/wo_a":
                attn.wo_b.register_forward_pre_hook(lambda m, a: (_altered_copy(a[0], bug),) + tuple(a[1:]),
                                                    prepend=True)
        if self.name == "indexer/topk:index-replaced" and getattr(attn, "indexer", None) is not None:
            def replace(module, a, out):
                start_pos, offset, ratio = int(a[2]), int(a[3]), module.compress_ratio
                end = start_pos + a[0].size(1)
                # Only the entries the row can see (the oracle: a finite score): in a prefill, entry j
                # is visible to token t iff j < (t + 1) // ratio (model.py's mask); a decode sees all.
                visible = (lambda row, u: u - offset < (row + 1) // ratio) if start_pos == 0 else None
                return replace_one_index(out, offset, offset + end // ratio, visible)
            attn.indexer.register_forward_hook(replace, prepend=True)

    # -- quantizers ---------------------------------------------------------------------------
    def _wrap_quantizers(self) -> None:
        model, injector = self.model, self
        fp8_kernel, fp4_kernel = model.act_quant, model.fp4_act_quant

        def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=torch.float32, inplace=False):
            frame = model_frame(model)
            stage = injector.caller_stage(frame, x) if inplace else None
            if stage != injector.stage:
                return fp8_kernel(x, block_size, scale_fmt, scale_dtype, inplace)
            result = injector._quantize(lambda: fp8_kernel(x, block_size, scale_fmt, scale_dtype, inplace),
                                        lambda v: ks.act_quant_variant(x, block_size, v), x)
            injector._alter_after_quant(frame, stage)
            return result

        def fp4_act_quant(x, block_size=32, inplace=False):
            frame = model_frame(model)
            stage = injector.caller_stage(frame, x) if inplace else None
            if stage != injector.stage:
                return fp4_kernel(x, block_size, inplace)
            result = injector._quantize(lambda: fp4_kernel(x, block_size, inplace),
                                        lambda v: ks.fp4_act_quant_variant(x, block_size, v), x)
            injector._alter_after_quant(frame, stage)
            return result

        model.act_quant, model.fp4_act_quant = act_quant, fp4_act_quant

    def _quantize(self, kernel: Callable, variant: Callable, x: torch.Tensor):
        if self.bug == "quant-skipped":
            return x
        if self.bug in QUANT_VARIANTS:
            return variant(QUANT_VARIANTS[self.bug])
        return kernel()

    def _alter_after_quant(self, frame, stage: str) -> None:
        """Output deviations of the quantized stages: the whole tensor (rope dims too) after its quantizer."""
        if self.bug not in DENSE_DEVIATIONS:
            return
        whole = frame.f_locals["q" if stage == "indexer/q" else "kv"]
        alter_dense(whole, self.bug)

    # -- RoPE ---------------------------------------------------------------------------------
    def _wrap_rope(self) -> None:
        model, injector = self.model, self
        rope_kernel = model.apply_rotary_emb

        def apply_rotary_emb(x, freqs_cis, inverse=False):
            frame = model_frame(model)
            stage = injector.caller_stage(frame, x, inverse)
            if stage != injector.stage:
                return rope_kernel(x, freqs_cis, inverse)
            if injector.bug in DENSE_DEVIATIONS:  # attn/out_heads after the inverse RoPE
                y = rope_kernel(x, freqs_cis, inverse)
                alter_dense(frame.f_locals["o"], injector.bug)
                return y
            table = frame.f_locals["self"].freqs_cis
            if injector.bug == "rope-position+1":
                return rope_kernel(x, _shifted_rows(freqs_cis, table, +1), inverse)
            if injector.bug == "rope-position-1":
                return rope_kernel(x, _shifted_rows(freqs_cis, table, -1), inverse)
            if injector.bug == "rope-block-end":
                ratio = frame.f_locals["self"].compress_ratio
                return rope_kernel(x, _shifted_rows(freqs_cis, table, ratio - 1), inverse)
            if injector.bug == "rope-first-dims":
                rd = x.size(-1)
                whole = frame.f_locals["o" if inverse else ("q" if stage in ("q", "indexer/q") else "kv")]
                rope_kernel(whole[..., :rd], freqs_cis, inverse)
                return x
            if injector.bug == "rope-halves":
                half = x.size(-1) // 2
                perm = torch.stack([torch.arange(half), torch.arange(half) + half], -1).flatten().to(x.device)
                y = x[..., perm].clone()
                rope_kernel(y, freqs_cis, inverse)
                x[..., perm] = y
                return x
            raise AssertionError(injector.bug)

        model.apply_rotary_emb = apply_rotary_emb

    # -- sparse attention ---------------------------------------------------------------------
    def _wrap_sparse_attn(self) -> None:
        model, injector, args = self.model, self, self.args
        attn_kernel = model.sparse_attn

        def sparse_attn(q, kv, attn_sink, topk_idxs, softmax_scale):
            bug, stage = injector.bug, injector.stage
            if stage == "q":  # one-ulp-high, scaled-1.1 (the RoPE bugs of q go through apply_rotary_emb)
                alter_dense(q, bug)
            if stage == "topk_idxs":  # in place: the recorder around this wrapper holds the same tensor
                topk_idxs.copy_(replace_one_index(topk_idxs, 0, _index_space_rows(model_frame(model))))
            if stage != "attn/core":
                return attn_kernel(q, kv, attn_sink, topk_idxs, softmax_scale)
            dims = {"softmax-scale-nope-dim": args.head_dim - args.rope_head_dim,
                    "softmax-scale-rope-dim": args.rope_head_dim,
                    "softmax-scale-index-head-dim": args.index_head_dim}
            if bug in dims:
                return attn_kernel(q, kv, attn_sink, topk_idxs, dims[bug] ** -0.5)
            if bug == "sink-dropped":
                return attn_kernel(q, kv, torch.full_like(attn_sink, float("-inf")), topk_idxs, softmax_scale)
            if bug == "probs-fp32":
                return ks.sparse_attn(q, kv, attn_sink, topk_idxs, softmax_scale, probs_bf16=False)
            o = attn_kernel(q, kv, attn_sink, topk_idxs, softmax_scale)
            alter_dense(o, bug)
            return o

        model.sparse_attn = sparse_attn

    # -- indexer mask -------------------------------------------------------------------------
    def _shift_indexer_mask(self, shift: int) -> None:
        """Indexer.forward's mask `j >= arange(1, s + 1) // ratio` (entry j visible to token t iff
        j < (t + 1) // ratio) with t + 1 + shift: model.py's `torch` is replaced by a proxy whose
        arange, called from Indexer.forward with start 1, starts at 1 + shift."""
        self.model.torch = _TorchProxy(self.model.torch, self.codes["indexer"], shift)


def model_frame(model):
    """The innermost frame running model.py's code: the caller of a kernel, through any wrappers
    (the capture recorder's and this module's wrap the same names)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals is not model.__dict__:
        frame = frame.f_back
    return frame


def _index_space_rows(frame) -> int:
    """Rows of the kv matrix sparse_attn reads in the Attention.forward call of `frame`
    (docs/deepseek-capture.md): prefill s + the s // ratio compressed entries, decode the window's
    W ring slots + the (start_pos + 1) // ratio entries; kv_cache's rows past them are not in the
    call's index space."""
    local = frame.f_locals
    attn, start_pos, seqlen = local["self"], int(local["start_pos"]), int(local["seqlen"])
    ratio = attn.compress_ratio
    entries = (start_pos + seqlen) // ratio if ratio else 0
    return (seqlen if start_pos == 0 else attn.window_size) + entries


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _altered_copy(t: torch.Tensor, bug: str) -> torch.Tensor:
    out = t.clone()
    alter_dense(out, bug)
    return out


def _shifted_rows(freqs_cis: torch.Tensor, table: torch.Tensor, shift: int) -> torch.Tensor:
    """The rows of `table` (the layer's [max_seq_len, rope_dim/2] complex table) at the positions of
    the view `freqs_cis` plus `shift`; a negative position gets the conjugate of its opposite."""
    row = table.stride(0)
    base = table.storage_offset()
    flat = freqs_cis.reshape(-1, freqs_cis.size(-1)) if freqs_cis.dim() > 1 else freqs_cis[None]
    # Each row of the view starts at storage offset base + position * row.
    positions = []
    start = freqs_cis.storage_offset() - base
    step = freqs_cis.stride(0) if freqs_cis.dim() > 1 else row
    for i in range(flat.size(0)):
        positions.append((start + i * step) // row + shift)
    if max(positions) >= table.size(0):
        raise ValueError(f"RoPE at position {max(positions)}: past the table ({table.size(0)} rows, max_seq_len)")
    rows = [table[p] if p >= 0 else table[-p].conj() for p in positions]
    return torch.stack(rows).reshape(freqs_cis.shape)


def _roll_ape_during_forward(comp, shift: int) -> None:
    """comp.ape[i] reads as ape[(i + shift) mod r] while comp runs; restored after."""
    saved: Dict[str, torch.Tensor] = {}

    def before(module, args):
        saved["ape"] = module.ape.data.clone()
        module.ape.data.copy_(torch.roll(saved["ape"], -shift, dims=0))

    def after(module, args, output):
        module.ape.data.copy_(saved.pop("ape"))

    comp.register_forward_pre_hook(before, prepend=True)
    comp.register_forward_hook(after)


class _TorchProxy:
    """model.py's `torch` (torch itself or the capture's TorchWithCudaRsqrt), except arange(1, n)
    called from the code object `code` (Indexer.forward)."""

    def __init__(self, base, code, shift: int):
        self._base, self._code, self._shift = base, code, shift

    def __getattr__(self, name):
        return getattr(self._base, name)

    def arange(self, *a, **kw):
        if sys._getframe(1).f_code is self._code and len(a) == 2 and a[0] == 1:
            return self._base.arange(1 + self._shift, a[1] + self._shift, **kw)
        return self._base.arange(*a, **kw)
