#!/usr/bin/env python3
"""Writes a small capture with h5py, the way a Python producer would, for test_capture_h5py.

    write_h5py_capture.py valid OUT   a valid capture: layers 3 (ratio 4) and 10 (ratio 0), batch 2,
                                      a 9-token prefill then a decode at 9; chunked gzip+shuffle
                                      datasets, float64 and float32 values, int64 indices, string
                                      attributes of both HDF5 kinds, and unknown extras to be ignored
    write_h5py_capture.py lzf OUT     the same with x compressed by h5py's own lzf filter, which
                                      libhdf5 alone cannot decode
    write_h5py_capture.py minimal OUT root and config attributes and one call's attributes, no
                                      datasets: a small seed for the fuzzer (the reader refuses it)

Shapes follow capture-format.md, computed here independently of the C++ stage table. Values follow
value() below, which the C++ test recomputes: every value is exact in float32.
"""
import sys

import h5py
import numpy as np

CONFIG = dict(dim=128, n_heads=2, head_dim=128, rope_head_dim=64, q_lora_rank=128, o_groups=2,
              o_lora_rank=64, window_size=8, index_n_heads=2, index_head_dim=64, index_topk=4,
              original_seq_len=65536, max_seq_len=256)
REALS = dict(rope_theta=10000.0, compress_rope_theta=160000.0, rope_factor=16.0, beta_fast=32.0,
             beta_slow=1.0, norm_eps=1e-6)
BATCH = 2
CALLS = [(0, 9), (9, 1)]  # (start_pos, seqlen)


def salt(name):
    return sum(name.encode()) % 101


def value(name, shape):
    """Element i of dataset `name` (its path under the layer group) is ((7 i + salt) mod 101)/16 - 3."""
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return (((7 * i + salt(name)) % 101) / 16.0 - 3.0).reshape(shape)


def indices(name, shape, rows):
    """Element i is (5 i + salt) mod (rows + 1) - 1: every value in [-1, rows)."""
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    return ((5 * i + salt(name)) % (rows + 1) - 1).reshape(shape)


def weight_shapes(c, r):
    H, d, G = c["n_heads"], c["head_dim"], c["o_groups"]
    IH, ID, coff = c["index_n_heads"], c["index_head_dim"], 2 if r == 4 else 1
    w = {"wq_a": (c["q_lora_rank"], c["dim"]), "q_norm": (c["q_lora_rank"],),
         "wq_b": (H * d, c["q_lora_rank"]), "wkv": (d, c["dim"]), "kv_norm": (d,), "attn_sink": (H,),
         "wo_a": (G * c["o_lora_rank"], H * d // G), "wo_b": (c["dim"], G * c["o_lora_rank"])}
    if r:
        w.update({"compressor/wkv": (coff * d, c["dim"]), "compressor/wgate": (coff * d, c["dim"]),
                  "compressor/ape": (r, coff * d), "compressor/norm": (d,)})
    if r == 4:
        w.update({"indexer/wq_b": (IH * ID, c["q_lora_rank"]), "indexer/weights_proj": (IH, c["dim"]),
                  "indexer/compressor/wkv": (2 * ID, c["dim"]), "indexer/compressor/wgate": (2 * ID, c["dim"]),
                  "indexer/compressor/ape": (4, 2 * ID), "indexer/compressor/norm": (ID,)})
    return w


def stage_shapes(c, r, b, start, s):
    H, d, W = c["n_heads"], c["head_dim"], c["window_size"]
    IH, ID, coff = c["index_n_heads"], c["index_head_dim"], 2 if r == 4 else 1
    end = start + s
    n_visible = end // 4
    k = min(c["index_topk"], n_visible)
    window = min(s, W) if start == 0 else W
    compressed = {0: 0, 4: k, 128: end // 128}[r]
    st = {"x": (b, s, c["dim"]), "q_latent": (b, s, c["q_lora_rank"]), "q": (b, s, H, d), "kv": (b, s, d),
          "topk_idxs": (b, s, window + compressed), "attn/core": (b, s, H, d), "attn/out_heads": (b, s, H, d),
          "attn/wo_a": (b, s, c["o_groups"], c["o_lora_rank"]), "out": (b, s, c["dim"]),
          "cache/window_kv": (b, W, d)}
    if r:
        st.update({"compressor/entries": (b, end // r - start // r, d),
                   "compressor/state_kv": (b, coff * r, coff * d), "compressor/state_score": (b, coff * r, coff * d),
                   "cache/compressed_kv": (b, start // r, d),
                   "cache/compressor_state_kv": (b, coff * r, coff * d),
                   "cache/compressor_state_score": (b, coff * r, coff * d)})
    if r == 4:
        st.update({"indexer/q": (b, s, IH, ID), "indexer/weights": (b, s, IH),
                   "indexer/compressor/entries": (b, end // 4 - start // 4, ID),
                   "indexer/compressor/state_kv": (b, 8, 2 * ID), "indexer/compressor/state_score": (b, 8, 2 * ID),
                   "indexer/scores": (b, s, n_visible), "indexer/topk": (b, s, k),
                   "cache/indexer_kv": (b, start // 4, ID),
                   "cache/indexer_compressor_state_kv": (b, 8, 2 * ID),
                   "cache/indexer_compressor_state_score": (b, 8, 2 * ID)})
    rows = (s if start == 0 else W) + (end // r if r else 0)  # prefill s + entries, decode W + entries
    return st, rows


def write_minimal(path):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "dsv4-capture"
        f.attrs["format_version"] = 1
        cfg = f.create_group("config")
        for name, v in {**CONFIG, **REALS}.items():
            cfg.attrs[name] = v
        cfg.attrs["precision"] = "official"
        g = f.create_group("layers/0")
        g.attrs["compress_ratio"] = 4
        c = g.create_group("calls/0")
        c.attrs["start_pos"] = 0
        c.attrs["seqlen"] = 4


def write(path, lzf_x):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "dsv4-capture"                      # variable-length UTF-8 (Python str)
        f.attrs["format_version"] = 1                           # int64
        f.attrs["producer"] = np.bytes_("h5py fixture")         # fixed-length ASCII
        f.attrs["model"] = "micro"
        f.attrs["captured_at"] = "2025-01-01"                   # unknown: noted, ignored
        cfg = f.create_group("config")
        for name, v in CONFIG.items():
            cfg.attrs[name] = np.int32(v) if name in ("dim", "n_heads") else v
        for name, v in REALS.items():
            cfg.attrs[name] = v
        cfg.attrs.create("precision", "official", dtype=h5py.string_dtype("utf-8", 8))  # fixed-length UTF-8
        for layer, ratio in ((3, 4), (10, 0)):
            g = f.create_group(f"layers/{layer}")
            g.attrs["compress_ratio"] = ratio
            for name, shape in weight_shapes(CONFIG, ratio).items():
                d = g.create_dataset(f"weights/{name}", data=value(f"weights/{name}", shape).astype(np.float32),
                                     chunks=True, compression="gzip", shuffle=True)
                if name in ("wq_a", "wq_b", "wkv", "wo_b", "indexer/wq_b"):
                    d.attrs["linear"] = "fp8"
                elif name in ("wo_a", "indexer/weights_proj"):
                    d.attrs["linear"] = np.bytes_("bf16")
            for k, (start, s) in enumerate(CALLS):
                c = g.create_group(f"calls/{k}")
                c.attrs["start_pos"] = start
                c.attrs["seqlen"] = np.int64(s)
                shapes, rows = stage_shapes(CONFIG, ratio, BATCH, start, s)
                for name, shape in shapes.items():
                    key = f"calls/{k}/{name}"
                    if name in ("topk_idxs", "indexer/topk"):
                        c.create_dataset(name, data=indices(key, shape, rows), compression="gzip", shuffle=True)
                        continue
                    data = value(key, shape)
                    if "score" in name:
                        data.reshape(-1)[::5] = -np.inf             # masked scores, empty state slots
                    dtype = np.float64 if name in ("x", "attn/core") else np.float32
                    if name == "x" and lzf_x:
                        d = c.create_dataset(name, data=data.astype(dtype), compression="lzf")
                    elif int(np.prod(shape)) > 0:
                        d = c.create_dataset(name, data=data.astype(dtype), chunks=True, compression="gzip",
                                             compression_opts=6, shuffle=True)
                    else:
                        d = c.create_dataset(name, data=data.astype(dtype))
                    if name in ("x", "q", "kv", "out"):
                        d.attrs["dtype"] = "bfloat16"
                c.create_dataset("debug_extra", data=np.zeros(3))  # unknown: noted, ignored


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("valid", "lzf", "minimal"):
        sys.exit(__doc__)
    if sys.argv[1] == "minimal":
        write_minimal(sys.argv[2])
    else:
        write(sys.argv[2], lzf_x=sys.argv[1] == "lzf")
