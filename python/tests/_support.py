"""Shared helpers of the Python tests: golden files, framework adapters and case runners.

The runners take an adapter (NumPy, torch on CPU, torch on CUDA) so one body drives every
framework and device, and return NumPy arrays for byte comparison.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional

import ml_dtypes
import numpy as np

import dsv4kv

REPO = Path(__file__).resolve().parents[2]
BF16 = ml_dtypes.bfloat16
L = dsv4kv.layout


def golden_dir() -> Path:
    """DSV4KV_GOLDEN_DIR (tests carried to another machine), else the repository's copy."""
    env = os.environ.get("DSV4KV_GOLDEN_DIR")
    return Path(env) if env else REPO / "conformance" / "golden"


def have_golden() -> bool:
    return (golden_dir() / "quantize.safetensors").is_file()


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------
_ST_DTYPES = {"BF16": BF16, "U8": np.uint8, "I32": np.int32, "I64": np.int64, "BOOL": np.bool_}


def _read_minimal(path: Path):
    """The safetensors format as conformance/golden/README.md describes it (fallback reader)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=_ST_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return tensors, meta


def read_safetensors(path: Path):
    """(tensors, metadata); uses the `safetensors` package when installed."""
    try:
        from safetensors import safe_open
    except ImportError:
        return _read_minimal(path)
    tensors = {}
    with safe_open(str(path), "np") as f:
        meta = f.metadata() or {}
        for name in f.keys():
            tensors[name] = f.get_tensor(name)
    return tensors, meta


class Case:
    def __init__(self, file: str, index: int, tensors: Dict[str, np.ndarray], meta: Dict[str, str]):
        self.file, self.index, self.t, self.meta = file, index, tensors, meta
        self.p = {k[len("param."):]: int(v.reshape(-1)[0]) for k, v in tensors.items() if k.startswith("param.")}

    def get(self, name: str) -> Optional[np.ndarray]:
        return self.t.get(name)

    def __repr__(self):
        return f"{self.file}:case{self.index:03d}"


def load_cases(file: str) -> List[Case]:
    tensors, meta = read_safetensors(golden_dir() / file)
    by_case: Dict[int, Dict[str, np.ndarray]] = {}
    for name, arr in tensors.items():
        case, rest = name.split(".", 1)
        by_case.setdefault(int(case[4:]), {})[rest] = arr
    return [Case(file, i, by_case[i], meta) for i in sorted(by_case)]


def init_pattern(nbytes: int, salt: int) -> np.ndarray:
    """Golden README: init_byte(i) = (i * 131 + 17 + init_salt) mod 251, 64-bit arithmetic."""
    i = np.arange(nbytes, dtype=np.uint64)
    return ((i * np.uint64(131) + np.uint64(17) + np.uint64(salt)) % np.uint64(251)).astype(np.uint8)


def bits(a: np.ndarray) -> np.ndarray:
    """Raw bits for byte comparison (bf16 as uint16)."""
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype == BF16 else a


# ---------------------------------------------------------------------------
# Framework adapters
# ---------------------------------------------------------------------------
class NumpyXP:
    name = "numpy"

    def from_np(self, a):
        return None if a is None else np.array(a, copy=True)

    def to_np(self, a):
        return np.asarray(a).copy()

    def strided(self, buf, shape, strides):
        item = buf.dtype.itemsize
        return np.lib.stride_tricks.as_strided(buf, shape, tuple(s * item for s in strides))

    def synchronize(self):
        pass


class TorchXP:
    def __init__(self, device: str = "cpu"):
        import torch

        self.torch = torch
        self.device = device
        self.name = f"torch-{device}"

    def from_np(self, a):
        if a is None:
            return None
        torch = self.torch
        a = np.ascontiguousarray(a)
        if a.dtype == BF16:
            t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(a.copy())
        return t.to(self.device)

    def to_np(self, t):
        torch = self.torch
        t = t.detach().to("cpu")
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(BF16).copy()
        return t.numpy().copy()

    def strided(self, buf, shape, strides):
        return self.torch.as_strided(buf, shape, strides)

    def synchronize(self):
        if self.device != "cpu":
            self.torch.cuda.synchronize()


def frameworks_available() -> List[str]:
    names = ["numpy"]
    try:
        import torch  # noqa: F401

        names.append("torch-cpu")
    except ImportError:
        pass
    return names


def cuda_skip_reason() -> Optional[str]:
    """None when torch CUDA tensors can run through dsv4kv's CUDA backend, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    if not dsv4kv.HAS_CUDA:
        return "dsv4kv was built without the CUDA backend (reinstall with DSV4KV_PY_CUDA=ON pip install .)"
    ok, why = dsv4kv.cuda_available()
    if not ok:
        return f"dsv4kv CUDA backend unavailable: {why}"
    return None


def require_cuda() -> bool:
    """DSV4KV_REQUIRE_CUDA=1 (where a GPU must be used) turns the GPU tests' skips into failures."""
    return os.environ.get("DSV4KV_REQUIRE_CUDA") == "1"


def skip_without_cuda() -> None:
    """Skips the calling test with cuda_skip_reason(), or fails it when require_cuda()."""
    import pytest

    reason = cuda_skip_reason()
    if reason is not None:
        if require_cuda():
            pytest.fail(f"DSV4KV_REQUIRE_CUDA=1 but: {reason}")
        pytest.skip(f"GPU run: {reason}")


def make_xp(name: str):
    if name == "numpy":
        return NumpyXP()
    return TorchXP(name.split("-", 1)[1])


# ---------------------------------------------------------------------------
# Case runners: golden inputs through dsv4kv with adapter `xp`; outputs as NumPy (one module per
# operation in op_cases/ holds its runner and golden files)
# ---------------------------------------------------------------------------
def expected_quantize_count(c: Case) -> int:
    """Skipped slots (other than -1) + non-finite NoPE elements of written tokens."""
    slots = c.get("slot_mapping")
    capacity = c.p["num_blocks"] * c.p["block_size"]
    k = c.get("k").view(np.uint16)[:, :dsv4kv.layout.kNopeDim]
    count = 0
    for t, s in enumerate(slots):
        if s == -1:
            continue
        if s < 0 or s >= capacity:
            count += 1
            continue
        count += int(((k[t] & 0x7F80) == 0x7F80).sum())
    return count


def _runners() -> Dict[str, Any]:
    from op_cases import OPS

    runners: Dict[str, Any] = {}
    for m in OPS:
        runners.update(m.GOLDEN)
    return runners


#: golden file -> runner; the runner's result keys (except error_count) are golden tensor names.
RUNNERS = _runners()


def all_cases() -> List[Case]:
    if not have_golden():
        return []
    cases = []
    for file in RUNNERS:
        cases.extend(load_cases(file))
    return cases


def check_against_golden(result: Dict[str, Any], c: Case) -> None:
    for name, got in result.items():
        if name == "error_count":
            continue
        want = c.get(name)
        assert want is not None, f"{c}: golden has no {name}"
        np.testing.assert_array_equal(bits(got).reshape(-1), bits(want).reshape(-1), err_msg=f"{c}: {name}")


# ---------------------------------------------------------------------------
# Random inputs: one generator, run on every framework and device
# ---------------------------------------------------------------------------
def random_problem(seed, block_size=64, nonfinite=True, bad_values=True):
    """NumPy inputs for all operations, including (when bad_values) out-of-range values that the
    operations must skip and count identically on both backends. Each operation's module in
    op_cases/ draws its own inputs, in the table's order, from one generator."""
    from op_cases import OPS

    rng = np.random.default_rng(seed)
    nb = 12
    shared = dict(nb=nb, stride=L.vllm_block_stride(block_size), T=150, R=3, nonfinite=nonfinite,
                  bad_values=bad_values)
    pr: Dict[str, Any] = dict(B=block_size)
    for m in OPS:
        m.problem(rng, pr, shared)
    return pr


def problem_arrays(pr) -> Dict[str, np.ndarray]:
    """The arrays of problem pr and the output buffers the operations write into, by name."""
    from op_cases import OPS

    arrays = {name: v for name, v in pr.items() if isinstance(v, np.ndarray)}
    for m in OPS:
        arrays.update(m.preallocated(pr))
    return arrays


def run_ops(t, pr, ec, **kw) -> Dict[str, Any]:
    """Every operation in table order on the converted arrays t (problem_arrays(pr)), operation i
    counting into ec[i]; returns the outputs (arrays of the adapter) by name."""
    from op_cases import OPS

    res: Dict[str, Any] = {}
    for i, m in enumerate(OPS):
        res.update(m.run(t, pr, ec[i:i + 1], **kw))
    return res


def run_all(xp, pr, **kw):
    """The operations in sequence on adapter xp; returns every output and the counters as NumPy."""
    from op_cases import OPS

    t = {name: xp.from_np(v) for name, v in problem_arrays(pr).items()}
    ec = xp.from_np(np.zeros(len(OPS), np.int32))
    res = run_ops(t, pr, ec, **kw)
    xp.synchronize()
    return {name: bits(xp.to_np(v)) for name, v in {**res, "ec": ec}.items()}


def assert_same(a, b, what=""):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{what} {name}")
