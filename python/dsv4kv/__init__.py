"""dsv4kv: the DeepSeek-V4 paged FP8 K-cache, on CPU and GPU.

Drop-in replacements for the five functions of vLLM's
``vllm/models/deepseek_v4/common/ops/cache_utils.py`` (same names, argument order, keywords
and defaults), running the C++ reference on host arrays and the CUDA backend on device
arrays::

    from dsv4kv import (quantize_and_insert_k_cache, dequantize_and_gather_k_cache,
                        compute_global_topk_indices_and_lens, combine_topk_swa_indices,
                        build_flashinfer_mixed_sparse_indices)

``dsv4kv.layout`` holds the cache layout constants (from the C++ spec headers) and
``dsv4kv.inspect`` decodes cache blocks into readable tables
(``python -m dsv4kv inspect FILE``).
"""

from . import _ext, inspect, layout
from .ops import (
    build_flashinfer_mixed_sparse_indices,
    combine_topk_swa_indices,
    compute_global_topk_indices_and_lens,
    dequantize_and_gather_k_cache,
    quantize_and_insert_k_cache,
)

__version__ = "0.1.0"

#: True when this build contains the CUDA backend (CUDA arrays need it).
HAS_CUDA: bool = bool(_ext.has_cuda)


def cuda_available() -> "tuple[bool, str]":
    """``(True, "")`` when the CUDA backend is built and a CUDA device is usable, else
    ``(False, reason)``."""
    ok, why = _ext.cuda_available()
    return bool(ok), str(why)


__all__ = [
    "quantize_and_insert_k_cache",
    "dequantize_and_gather_k_cache",
    "compute_global_topk_indices_and_lens",
    "combine_topk_swa_indices",
    "build_flashinfer_mixed_sparse_indices",
    "cuda_available",
    "HAS_CUDA",
    "layout",
    "inspect",
]
