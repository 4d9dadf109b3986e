"""dsv4kv: the DeepSeek-V4 paged FP8 K-cache, on CPU and GPU.

Drop-in replacements for the functions of vLLM's
``vllm/models/deepseek_v4/common/ops/cache_utils.py`` (same names, argument order, keywords
and defaults, plus vLLM's sparse gather of a slot list; one per operation of the C++ operation
table, listed in ``dsv4kv.ops.__all__``),
running the C++ reference on host arrays and the CUDA backend on device arrays::

    from dsv4kv import quantize_and_insert_k_cache, dequantize_and_gather_k_cache  # ...

``dsv4kv.layout`` holds the cache layout constants (from the C++ spec headers) and
``dsv4kv.inspect`` decodes cache blocks into readable tables
(``python -m dsv4kv inspect FILE``).
"""

import importlib.util as _importlib_util
import os as _os

from . import _ext, inspect, layout
from . import ops as _ops
from .ops import *  # noqa: F401,F403  (the operations: dsv4kv.ops.__all__)
from .ops import convert_k_cache  # noqa: F401  (composed from them)

__version__ = "0.1.0"

#: True when this build contains the CUDA backend (CUDA arrays need it).
HAS_CUDA: bool = bool(_ext.has_cuda)

#: The names the index operations' ``semantics=`` keyword takes (spec "Semantics profiles"):
#: "seed" (the default), "vllm_v4", "vllm_v41".
SEMANTICS: "tuple[str, ...]" = tuple(_ext.semantics_names)

#: The names the cache operations' ``record=`` keyword takes (spec "Cache records"):
#: "fp8_ds_mla" (DeepSeek-V4's 584-byte record, the default), "mxfp8_ds_mla", "nvfp4_ds_mla",
#: "mxfp4_indexer" (DeepSeek-V4.1's 528-, 288- and 68-byte records).
RECORDS: "tuple[str, ...]" = tuple(_ext.record_names)

#: The backends compiled into this build: ("reference",) or ("reference", "cuda"). The
#: reference runs host arrays, the CUDA backend device arrays (it also needs a driver and a
#: device at run time: see cuda_available()).
backends: "tuple[str, ...]" = ("reference", "cuda") if HAS_CUDA else ("reference",)


def cuda_available() -> "tuple[bool, str]":
    """``(True, "")`` when the CUDA backend is built and a CUDA device is usable, else
    ``(False, reason)``."""
    ok, why = _ext.cuda_available()
    return bool(ok), str(why)


# torch.ops.dsv4kv.*: registered at import whenever PyTorch is installed, so that
# torch.compile finds the operators before it traces a call (registering during tracing would
# break the graph). DSV4KV_NO_TORCH=1 skips it (and keeps `import dsv4kv` from importing torch).
HAS_TORCH_OPS: bool = False
if _os.environ.get("DSV4KV_NO_TORCH", "") in ("", "0") and _importlib_util.find_spec("torch") is not None:
    try:
        from . import _torch  # noqa: F401  (registers the operators, routes torch tensors through them)

        HAS_TORCH_OPS = True
    except ImportError as _e:  # torch too old: torch tensors keep the DLPack path
        import warnings as _warnings

        _warnings.warn(f"dsv4kv: torch.ops.dsv4kv not registered ({_e}); torch tensors use the DLPack path",
                       stacklevel=2)

# Functions only: `from dsv4kv import *` must not shadow modules such as the standard
# `inspect` (dsv4kv.inspect and dsv4kv.layout stay reachable as attributes).
__all__ = [*_ops.__all__, "convert_k_cache", "cuda_available"]
