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
    """DSV4KV_REQUIRE_CUDA=1 (the GPU machine) turns the GPU tests' skips into failures."""
    return os.environ.get("DSV4KV_REQUIRE_CUDA") == "1"


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
    return {"expected_combined_indices": xp.to_np(idx), "expected_combined_lens": xp.to_np(lens),
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


# ---------------------------------------------------------------------------
# Random inputs: one generator, run on every framework and device
# ---------------------------------------------------------------------------
def random_problem(seed, block_size=64, nonfinite=True, bad_values=True):
    """NumPy inputs for all five operations, including (when bad_values) out-of-range values that
    the operations must skip and count identically on both backends."""
    rng = np.random.default_rng(seed)
    B = block_size
    nb = 12
    stride = L.vllm_block_stride(B)
    T = 150
    scales = 10.0 ** rng.integers(-6, 6, size=(T, 1))
    k = (rng.standard_normal((T + 7, L.kHeadDim)) * np.vstack([scales, np.ones((7, 1))])).astype(BF16)
    if nonfinite:
        kb = k.view(np.uint16)
        kb[3, 17] = 0x7F80  # +inf
        kb[4, 100] = 0xFFC1  # NaN with payload
        kb[5, :64] = 0x7FC0  # all-NaN tile
    slots = rng.permutation(nb * B)[:T].astype(np.int64)
    slots[::17] = -1
    if bad_values:
        slots[5] = nb * B  # out of range: skipped and counted
        slots[6] = -7
    cache = rng.integers(0, 256, size=(nb, stride), dtype=np.uint8)

    R = 3
    seq_lens = np.array([130, 64, 200], np.int32)
    gather_lens = np.array([100, 64, 7], np.int32)
    if bad_values:
        gather_lens[2] = 250  # > seq_len: request skipped and counted
    max_blocks = 5
    block_table = rng.integers(0, nb, size=(R, max_blocks + 2), dtype=np.int32)
    if bad_values:
        block_table[0, 1] = nb + 3  # out of range entry
    out_rows = 110

    topk = 37
    topk_idx = rng.integers(-1, 300, size=(T, topk + 5), dtype=np.int32)
    t2r = rng.integers(0, R, size=T, dtype=np.int32)
    if bad_values:
        t2r[9] = R + 1
    valid = rng.random(T) < 0.9

    qsl = np.array([5, 5 + 40, 5 + 70, 5 + 150], np.int32)
    c_seq = np.array([300, 30, 90], np.int32)
    c_gather = np.array([200, 30, 90], np.int32)
    lv = rng.integers(0, 12, size=T, dtype=np.int32)
    rv = rng.integers(0, 6, size=T, dtype=np.int32)

    D, P = 6, 40
    m_qsl = np.concatenate([np.arange(D + 1), D + np.array([15, 40])]).astype(np.int32)
    m_seq = np.concatenate([rng.integers(10, 300, size=D), [100, 70]]).astype(np.int32)
    m_t2r = np.concatenate([np.arange(D), np.full(15, D), np.full(25, D + 1)]).astype(np.int32)
    m_bt = rng.integers(0, 50, size=(D + 2, 8), dtype=np.int32)
    dswa = rng.integers(-1, 3000, size=(D, 130), dtype=np.int32)
    dcomp = rng.integers(-1, 200, size=(D, 20), dtype=np.int32)
    dlens = rng.integers(0, 21, size=D, dtype=np.int32)
    dvalid = rng.random(D) < 0.8
    ptopk = rng.integers(-1, 25, size=(P, 24), dtype=np.int32)
    plv = rng.integers(0, 10, size=D + P, dtype=np.int32)
    prv = rng.integers(0, 5, size=D + P, dtype=np.int32)
    return dict(B=B, k=k, slots=slots, cache=cache, seq_lens=seq_lens, gather_lens=gather_lens,
                block_table=block_table, out_rows=out_rows, topk_idx=topk_idx, topk=topk, t2r=t2r, valid=valid,
                qsl=qsl, c_seq=c_seq, c_gather=c_gather, lv=lv, rv=rv, m_qsl=m_qsl, m_seq=m_seq, m_t2r=m_t2r,
                m_bt=m_bt, dswa=dswa, dcomp=dcomp, dlens=dlens, dvalid=dvalid, ptopk=ptopk, plv=plv, prv=prv)


def run_all(xp, pr, **kw):
    """The five operations in sequence on adapter xp; returns every output as NumPy."""
    res = {}
    ec = xp.from_np(np.zeros(5, np.int32))
    cache = xp.from_np(pr["cache"])
    dsv4kv.quantize_and_insert_k_cache(xp.from_np(pr["k"]), cache, xp.from_np(pr["slots"]), pr["B"],
                                       error_count=ec[0:1], **kw)
    out = xp.from_np(np.full((4, pr["out_rows"], L.kHeadDim), 7, BF16))
    dsv4kv.dequantize_and_gather_k_cache(out, cache, xp.from_np(pr["seq_lens"]), xp.from_np(pr["gather_lens"]),
                                         xp.from_np(pr["block_table"])[:, :5], pr["B"], 3,
                                         error_count=ec[1:2], **kw)
    g, gl = dsv4kv.compute_global_topk_indices_and_lens(
        xp.from_np(pr["topk_idx"])[:, :pr["topk"]], xp.from_np(pr["t2r"]), xp.from_np(pr["block_table"]),
        pr["B"], xp.from_np(pr["valid"]), error_count=ec[2:3], **kw)
    ci, cl = dsv4kv.combine_topk_swa_indices(
        xp.from_np(pr["topk_idx"]), xp.from_np(pr["qsl"]), xp.from_np(pr["c_seq"]), xp.from_np(pr["c_gather"]),
        16, 4, 32, 4096, 1000, left_visible=xp.from_np(pr["lv"]), right_visible=xp.from_np(pr["rv"]),
        max_image_tokens=10, error_count=ec[3:4], **kw)
    si, sl = dsv4kv.build_flashinfer_mixed_sparse_indices(
        xp.from_np(pr["dswa"]), xp.from_np(pr["dcomp"]), xp.from_np(pr["dlens"]), xp.from_np(pr["ptopk"]),
        xp.from_np(pr["m_qsl"]), xp.from_np(pr["m_seq"]), xp.from_np(pr["m_t2r"]), xp.from_np(pr["m_bt"]), 16,
        None, 8, 128, 4, 22, decode_compressed_indices_are_local=True, decode_is_valid_token=xp.from_np(pr["dvalid"]),
        swa_block_span=24, compressed_block_span=None, prefill_left_visible=xp.from_np(pr["plv"]),
        prefill_right_visible=xp.from_np(pr["prv"]), max_image_tokens=9, error_count=ec[4:5], **kw)
    xp.synchronize()
    for name, v in dict(cache=cache, out=out, g=g, gl=gl, ci=ci, cl=cl, si=si, sl=sl, ec=ec).items():
        res[name] = bits(xp.to_np(v))
    return res


def assert_same(a, b, what=""):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{what} {name}")
