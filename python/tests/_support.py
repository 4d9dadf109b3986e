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


def make_xp(name: str):
    if name == "numpy":
        return NumpyXP()
    return TorchXP(name.split("-", 1)[1])


# ---------------------------------------------------------------------------
# Case runners: golden inputs through dsv4kv with adapter `xp`; outputs as NumPy
# ---------------------------------------------------------------------------
def run_quantize(xp, c: Case) -> Dict[str, Any]:
    nb, stride = c.p["num_blocks"], c.p["block_stride"]
    cache = xp.from_np(init_pattern(nb * stride, c.p["init_salt"]).reshape(nb, stride))
    ec = xp.from_np(np.zeros(1, np.int32))
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(c.get("k")), cache, xp.from_np(c.get("slot_mapping")),
                                       c.p["block_size"], error_count=ec)
    xp.synchronize()
    return {"k_cache_after": xp.to_np(cache), "error_count": int(xp.to_np(ec)[0])}


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


def run_dequantize(xp, c: Case) -> Dict[str, Any]:
    p = c.p
    buf = xp.from_np(init_pattern(2 * p["out_numel"], p["init_salt"]).view(BF16))
    out = xp.strided(buf, (p["num_reqs"], p["out_dim1"], dsv4kv.layout.kHeadDim),
                     (p["out_stride0"], p["out_stride1"], 1))
    gather = c.get("gather_lens") if p["has_gather_lens"] else None
    ec = xp.from_np(np.zeros(1, np.int32))
    dsv4kv.dequantize_and_gather_k_cache(out, xp.from_np(c.get("k_cache")), xp.from_np(c.get("seq_lens")),
                                         xp.from_np(gather), xp.from_np(c.get("block_table")), p["block_size"],
                                         p["offset"], error_count=ec)
    xp.synchronize()
    return {"out_after": xp.to_np(buf), "error_count": int(xp.to_np(ec)[0])}


def run_global_topk(xp, c: Case) -> Dict[str, Any]:
    topk = c.p["topk"]
    full = xp.from_np(c.get("topk_indices"))
    ec = xp.from_np(np.zeros(1, np.int32))
    g, lens = dsv4kv.compute_global_topk_indices_and_lens(
        full[:, :topk], xp.from_np(c.get("token_to_req")), xp.from_np(c.get("block_table")), c.p["block_size"],
        xp.from_np(c.get("is_valid_token")), error_count=ec)
    xp.synchronize()
    return {"global_topk_indices": xp.to_np(g), "topk_lens": xp.to_np(lens), "error_count": int(xp.to_np(ec)[0])}


def run_combine(xp, c: Case) -> Dict[str, Any]:
    p = c.p
    full = xp.from_np(c.get("topk_indices"))
    img = bool(p["has_image"])
    ec = xp.from_np(np.zeros(1, np.int32))
    idx, lens = dsv4kv.combine_topk_swa_indices(
        full[:, :p["topk_width"]], xp.from_np(c.get("query_start_loc")), xp.from_np(c.get("seq_lens")),
        xp.from_np(c.get("gather_lens")), p["window_size"], p["compress_ratio"], p["topk"], p["M"], p["N"],
        left_visible=xp.from_np(c.get("left_visible")) if img else None,
        right_visible=xp.from_np(c.get("right_visible")) if img else None,
        max_image_tokens=p["max_image_tokens"], error_count=ec)
    xp.synchronize()
    return {"fork_combined_indices": xp.to_np(idx), "fork_combined_lens": xp.to_np(lens),
            "error_count": int(xp.to_np(ec)[0])}


def run_flashinfer(xp, c: Case) -> Dict[str, Any]:
    p = c.p
    opt = lambda flag, name: xp.from_np(c.get(name)) if p[flag] else None  # noqa: E731
    prefill = xp.from_np(c.get("prefill_topk_indices"))
    ec = xp.from_np(np.zeros(1, np.int32))
    idx, lens = dsv4kv.build_flashinfer_mixed_sparse_indices(
        xp.from_np(c.get("decode_swa_indices")),
        opt("has_decode_compressed", "decode_compressed_indices"),
        opt("has_decode_compressed_lens", "decode_compressed_topk_lens"),
        prefill[:, :p["prefill_topk_cols"]],
        xp.from_np(c.get("query_start_loc")),
        xp.from_np(c.get("seq_lens")),
        xp.from_np(c.get("token_to_req")),
        xp.from_np(c.get("swa_block_table")),
        p["swa_block_size"],
        opt("has_compressed_block_table", "compressed_block_table"),
        p["compressed_block_size"],
        p["window_size"],
        p["compress_ratio"],
        p["topk"],
        decode_compressed_indices_are_local=bool(p["decode_compressed_indices_are_local"]),
        decode_is_valid_token=opt("decode_compressed_indices_are_local", "decode_is_valid_token"),
        swa_block_span=p["swa_block_span"] if p["has_swa_block_span"] else None,
        compressed_block_span=p["compressed_block_span"] if p["has_compressed_block_span"] else None,
        prefill_left_visible=opt("has_image", "prefill_left_visible"),
        prefill_right_visible=opt("has_image", "prefill_right_visible"),
        max_image_tokens=p["max_image_tokens"],
        error_count=ec,
    )
    xp.synchronize()
    return {"sparse_indices": xp.to_np(idx), "sparse_topk_lens": xp.to_np(lens), "error_count": int(xp.to_np(ec)[0])}


#: golden file -> runner; the runner's result keys (except error_count) are golden tensor names.
RUNNERS = {
    "quantize.safetensors": run_quantize,
    "quantize_special.safetensors": run_quantize,
    "quantize_nonfinite.safetensors": run_quantize,
    "dequantize.safetensors": run_dequantize,
    "global_topk.safetensors": run_global_topk,
    "combine.safetensors": run_combine,
    "combine_crafted.safetensors": run_combine,
    "combine_edge.safetensors": run_combine,
    "flashinfer.safetensors": run_flashinfer,
    "flashinfer_crafted.safetensors": run_flashinfer,
}


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
