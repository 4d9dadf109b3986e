"""Array plumbing shared by the operation wrappers: framework detection, stream choice,
DLPack export and output allocation.

Nothing here imports PyTorch or CuPy: a framework is used only when the caller's arrays
already come from it (it is then in ``sys.modules``).
"""

from __future__ import annotations

import operator
import sys
from typing import Any, Optional, Sequence

import numpy as np

# DLPack device types (dlpack.h): host-accessible and CUDA-accessible memory.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13


def _torch():
    return sys.modules.get("torch")


def _cupy():
    return sys.modules.get("cupy")


#: torch.Tensor once dsv4kv._torch has imported torch: a plain tensor is recognized by one type
#: check (0.05 us against 0.24 for the module lookup and isinstance; output shapes are computed
#: on every eager call).
_tensor_type: Any = None


def is_torch(x: Any) -> bool:
    if type(x) is _tensor_type:
        return True
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def is_cupy(x: Any) -> bool:
    cupy = _cupy()
    return cupy is not None and isinstance(x, cupy.ndarray)


def is_cuda_array(x: Any) -> bool:
    """True if `x` lives in CUDA device (or managed) memory."""
    if x is None:
        return False
    if is_torch(x):
        return x.device.type == "cuda"
    if is_cupy(x):
        return True
    if isinstance(x, np.ndarray):
        return False
    device = getattr(x, "__dlpack_device__", None)
    if callable(device):
        try:
            return int(device()[0]) in (_DL_CUDA, _DL_CUDA_MANAGED)
        except Exception:  # not a usable DLPack producer: the extension reports it
            return False
    return False


def stream_handle(stream: Any) -> Optional[int]:
    """The cudaStream_t (as an int) of an explicit `stream=` argument, or None when not given.

    Accepts an int handle, an object with the CUDA stream protocol (``__cuda_stream__``),
    a ``torch.cuda.Stream`` (``.cuda_stream``) or a ``cupy.cuda.Stream`` (``.ptr``).
    """
    if stream is None:
        return None
    if isinstance(stream, bool):
        raise TypeError("stream must be a CUDA stream handle (int), torch.cuda.Stream or cupy.cuda.Stream, got bool")
    if isinstance(stream, (int, np.integer)):
        value = int(stream)
        if value < 0:
            raise ValueError(f"stream must be a CUDA stream handle >= 0, got {value}")
        return value
    protocol = getattr(stream, "__cuda_stream__", None)
    if callable(protocol):
        return int(protocol()[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise TypeError(
        "stream must be a CUDA stream handle (int), torch.cuda.Stream or cupy.cuda.Stream, "
        f"got {type(stream).__name__}"
    )


def run_stream(stream: Any, arrays: Sequence[Any]) -> int:
    """The stream a CUDA call runs on: the explicit `stream=`, else PyTorch's current stream
    for torch inputs, else CuPy's current stream for CuPy inputs, else the default stream 0."""
    explicit = stream_handle(stream)
    if explicit is not None:
        return explicit
    for a in arrays:
        if is_torch(a) and a.device.type == "cuda":
            return int(_torch().cuda.current_stream(a.device).cuda_stream)
    for a in arrays:
        if is_cupy(a):
            return int(_cupy().cuda.get_current_stream().ptr)
    return 0


def export(x: Any, stream: int) -> Any:
    """What the extension receives for array `x`: something nanobind imports through DLPack.

    * torch CUDA tensors are exported here, tagged with the stream the call runs on: PyTorch
      then adds no cross-stream synchronization when that is its current stream (which keeps
      CUDA-graph capture legal), and makes `stream` wait for its current stream otherwise.
    * NumPy arrays of ml_dtypes.bfloat16 (which NumPy cannot export through DLPack) travel as
      a (uint16 view, True) pair that the extension reads as bfloat16.
    * everything else is passed unchanged and imported by nanobind.
    """
    if x is None:
        return None
    if is_torch(x):
        x = x.detach()
        if x.device.type == "cuda":
            torch = _torch()
            with torch.cuda.device(x.device):
                current = int(torch.cuda.current_stream(x.device).cuda_stream)
                # DLPack: -1 = no synchronization; 1 = the legacy default stream (0 is not allowed).
                tag = -1 if stream == current else (stream if stream != 0 else 1)
                return x.__dlpack__(stream=tag)
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.name == "bfloat16":
            return (x.view(np.uint16), True)
        return x
    if is_cupy(x):
        # CuPy makes `stream` wait for its current stream when they differ (1 = legacy default).
        return x.__dlpack__(stream=stream if stream != 0 else 1)
    return x


def shape_of(x: Any) -> Optional[tuple]:
    """The shape of an array-like, or None when it has none."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(s) for s in shape)
    except Exception:
        return None


def alloc_int32(op: str, like: Any, shape: tuple) -> Any:
    """An uninitialized int32 array of `shape` on `like`'s device, from `like`'s framework
    (torch -> torch.empty, CuPy -> cupy.empty, NumPy or other host arrays -> numpy.empty)."""
    if is_torch(like):
        torch = _torch()
        return torch.empty(shape, dtype=torch.int32, device=like.device)
    if is_cupy(like):
        cupy = _cupy()
        with like.device:
            return cupy.empty(shape, dtype=cupy.int32)
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype=np.int32)
    device = getattr(like, "__dlpack_device__", None)
    if callable(device) and int(device()[0]) in (_DL_CPU, _DL_CUDA_HOST):
        return np.empty(shape, dtype=np.int32)
    raise TypeError(
        f"{op}: cannot allocate outputs next to a {type(like).__name__} argument; pass out=(indices, lens)"
    )


def alloc_work(op: str, like: Any, shape: tuple, dtype: str) -> Any:
    """An uninitialized work array ("bfloat16" or "int64") of `shape` on `like`'s device: torch
    tensors and NumPy arrays only (CuPy has no bfloat16)."""
    if is_torch(like):
        torch = _torch()
        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if isinstance(like, np.ndarray):
        import ml_dtypes

        return np.empty(shape, dtype=ml_dtypes.bfloat16 if dtype == "bfloat16" else np.int64)
    raise TypeError(f"{op}: works on torch tensors and NumPy arrays, got {type(like).__name__}")


def as_int(op: str, name: str, value: Any) -> int:
    """An integer scalar argument (Python int, NumPy integer, 0-d integer tensor)."""
    if isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be an integer, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an integer, got {type(value).__name__}") from None


def as_str(op: str, name: str, value: Any) -> str:
    """A str scalar argument (a semantics profile's or a record's name; the extension checks the name)."""
    if not isinstance(value, str):
        raise TypeError(f"{op}: {name} must be a str, got {type(value).__name__}")
    return value
