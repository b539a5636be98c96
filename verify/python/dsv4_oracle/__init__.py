"""dsv4_oracle: the CPU oracle of DeepSeek-V4 attention, for kernel tests (docs/python.md).

Every stage of the oracle (capture-format names in each docstring), the quantizers, the engine
cache layouts and conventions, the comparators with the project's tolerance tables, capture files,
and pytest fixtures (dsv4_oracle.pytest_plugin). Functions take numpy arrays or torch tensors
(CPU; CUDA tensors are copied to the host) and answer in kind.
"""
# _arrays imports torch (when installed) before _core is loaded: on the H200 machine (Ubuntu 24.04,
# torch 2.11+cu130) importing torch after _core aborts inside torch's import (free(): invalid pointer
# in torch._sources), while the other order works (bench/results/2026-12-01-h200-kernels.md, run 4).
from ._arrays import adapt as _adapt
from . import _core  # noqa: E402

__version__ = "0.1.0"

# Classes as they are; every function wrapped so that it takes numpy / torch / array-likes.
for _name in dir(_core):
    if _name.startswith("_"):
        continue
    _obj = getattr(_core, _name)
    globals()[_name] = _obj if isinstance(_obj, type) or not callable(_obj) else _adapt(_obj)
del _name, _obj

from .quantizers import fp8_kv, fp4_indexer, mxfp4, nvfp4  # noqa: E402
from .compare import (  # noqa: E402
    AllcloseResult,
    assert_bitwise_equal,
    assert_stage,
    calc_diff,
    check_allclose,
    compare,
    compare_topk,
    tolerance_table,
)
from . import capture, layouts, testing  # noqa: E402
