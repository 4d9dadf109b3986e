"""Decode paged K-cache blocks into readable tables.

A cache is the uint8 array vLLM allocates (``[num_blocks, block_stride]``, or
``[num_blocks, block_size, bytes_per_token]``). :func:`load_cache` reads one saved with
``torch.save``, ``numpy.save``/``numpy.savez`` or safetensors; :func:`inspect_block` decodes the
tokens of a block; :func:`format_block` / :func:`format_token` render them. Decoding uses the C++
spec's own rules (``dequantize_element`` tabulated by the extension) and its layout offsets, so
what is shown is exactly what ``dequantize_and_gather_k_cache`` would produce.

Per token the table shows the seven scale exponents (``byte - 127``; ``inf`` for byte 255,
``-`` for byte 0, whose multiplier is flushed to zero), min/max of the 448 decoded NoPE values,
the RoPE values, and flags for bytes that break the spec:

* ``pad=0xNN``: the scale pad byte is not 0,
* ``scale255@j``: tile j has scale byte 255 (an infinite scale: the key held inf),
* ``nan=K``: K FP8 codes are NaN codes (quantize never writes them).

Command line: ``python -m dsv4kv inspect FILE [--block N] [--token T]``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from . import _ext

__all__ = [
    "TokenRecord",
    "load_cache",
    "as_cache_array",
    "infer_block_size",
    "inspect_block",
    "decode_token",
    "format_block",
    "format_token",
    "summarize_cache",
]


@dataclasses.dataclass
class TokenRecord:
    """One decoded token of a cache block."""

    block: int
    pos: int
    scale_bytes: List[int]  # the 7 UE8M0 bytes
    pad: int  # the pad byte (spec: 0)
    nope: np.ndarray  # [448] float32, decoded like dequantize_and_gather_k_cache
    rope: np.ndarray  # [64] float32, the bf16 RoPE values
    nan_codes: int  # FP8 codes that are NaN codes
    flags: List[str]

    @property
    def exponents(self) -> List[Optional[int]]:
        """``byte - 127`` per tile; None for byte 255 (infinite scale)."""
        return [None if b == 255 else b - _ext.kScaleBias for b in self.scale_bytes]

    @property
    def nope_min(self) -> float:
        finite = self.nope[~np.isnan(self.nope)]
        return float(finite.min()) if finite.size else float("nan")

    @property
    def nope_max(self) -> float:
        finite = self.nope[~np.isnan(self.nope)]
        return float(finite.max()) if finite.size else float("nan")

    @property
    def values(self) -> np.ndarray:
        """The whole decoded key row, ``[512]`` float32 (NoPE then RoPE)."""
        return np.concatenate([self.nope, self.rope])


_TABLES: Dict[bool, np.ndarray] = {}
_NAN_TABLES: Dict[bool, np.ndarray] = {}


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _tables(use_fnuz: bool):
    if use_fnuz not in _TABLES:
        table = np.frombuffer(_ext.dequantize_table(use_fnuz), dtype=np.uint16).reshape(256, 256)
        _TABLES[use_fnuz] = _bf16_to_f32(table)
        _NAN_TABLES[use_fnuz] = np.frombuffer(_ext.fp8_nan_table(use_fnuz), dtype=np.uint8).astype(bool)
    return _TABLES[use_fnuz], _NAN_TABLES[use_fnuz]


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

def _read_safetensors(path: str, key: Optional[str]) -> Any:
    try:
        from safetensors.numpy import load_file  # type: ignore

        tensors = load_file(path)
    except ImportError:
        tensors = _read_safetensors_minimal(path)
    return _pick(tensors, key, path)


def _read_safetensors_minimal(path: str) -> Dict[str, np.ndarray]:
    """A small safetensors reader (uint8 and the integer types) for when the package is absent."""
    dtypes = {"U8": np.uint8, "I8": np.int8, "I32": np.int32, "I64": np.int64, "BOOL": np.bool_,
              "BF16": np.uint16, "F32": np.float32, "U16": np.uint16, "F16": np.float16}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] not in dtypes:
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def _pick(tensors: Any, key: Optional[str], path: str) -> Any:
    """One cache out of a container: the named one, or the only uint8 array of rank >= 2."""
    if not isinstance(tensors, dict):
        return tensors
    if key is not None:
        if key not in tensors:
            raise KeyError(f"{path}: no tensor named {key!r}; it holds {sorted(tensors)}")
        return tensors[key]
    candidates = [k for k, v in tensors.items() if _is_byte_matrix(v)]
    if len(candidates) == 1:
        return tensors[candidates[0]]
    named = [k for k in candidates if "k_cache" in k or "kv_cache" in k]
    if len(named) == 1:
        return tensors[named[0]]
    raise ValueError(
        f"{path}: cannot tell which tensor is the cache ({len(candidates)} uint8 arrays of rank >= 2: "
        f"{sorted(candidates)[:8]}); name one with key=/--key"
    )


def _is_byte_matrix(v: Any) -> bool:
    dtype = getattr(v, "dtype", None)
    shape = getattr(v, "shape", None)
    return dtype is not None and shape is not None and len(shape) >= 2 and str(dtype) in ("uint8", "torch.uint8")


def load_cache(path: str, key: Optional[str] = None) -> np.ndarray:
    """Read a cache saved with ``numpy.save`` (.npy), ``numpy.savez`` (.npz), safetensors
    (.safetensors) or ``torch.save`` (anything else). A container holding several tensors needs
    `key` unless exactly one of them is a uint8 array of rank >= 2. Returns a uint8 NumPy array."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npy":
        obj = np.load(path, allow_pickle=False)
    elif ext == ".npz":
        with np.load(path, allow_pickle=False) as z:
            obj = _pick({k: z[k] for k in z.files}, key, path)
    elif ext == ".safetensors":
        obj = _read_safetensors(path, key)
    else:
        try:
            import torch  # type: ignore
        except ImportError as e:
            raise ValueError(f"{path}: not .npy/.npz/.safetensors, and torch (for torch.save files) "
                             "is not installed") from e
        obj = _pick(torch.load(path, map_location="cpu", weights_only=True), key, path)
    return as_cache_array(obj)


def as_cache_array(cache: Any) -> np.ndarray:
    """A host uint8 NumPy array from a NumPy array, a torch tensor (any device) or a DLPack array."""
    if hasattr(cache, "detach") and hasattr(cache, "cpu"):  # torch.Tensor, without importing torch
        cache = cache.detach().cpu().numpy()
    elif hasattr(cache, "get") and type(cache).__module__.startswith("cupy"):
        cache = cache.get()
    arr = np.asarray(cache)
    if arr.dtype != np.uint8:
        raise TypeError(f"a K cache must be uint8, got {arr.dtype}")
    if arr.ndim not in (2, 3):
        raise ValueError(f"a K cache must have rank 2 or 3 ([num_blocks, block_stride]), got shape {arr.shape}")
    return arr


def infer_block_size(cache: np.ndarray) -> int:
    """Tokens per block: ``shape[1]`` of a rank-3 cache; for ``[num_blocks, block_stride]`` the
    block size whose vLLM allocation (or exact layout size) is ``block_stride``."""
    if cache.ndim == 3:
        return int(cache.shape[1])
    stride = int(cache.shape[1])
    for b in range(1, stride // _ext.kTokenBytes + 1):
        if _ext.vllm_block_stride(b) == stride or _ext.block_data_bytes(b) == stride:
            return b
    raise ValueError(
        f"cannot infer the block size from a block stride of {stride} bytes (not a vLLM allocation "
        f"nor block_size * {_ext.kTokenBytes}); pass block_size=/--block-size"
    )


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------

def _block_bytes(cache: np.ndarray, block: int) -> np.ndarray:
    if not 0 <= block < cache.shape[0]:
        raise IndexError(f"block {block} is out of range: the cache has {cache.shape[0]} blocks")
    return np.ascontiguousarray(cache[block]).reshape(-1)


def inspect_block(
    cache: Any,
    block: int,
    block_size: Optional[int] = None,
    use_fnuz: bool = False,
    tokens: Optional[Sequence[int]] = None,
) -> List[TokenRecord]:
    """Decode the tokens of one block (all of them, or the positions in `tokens`)."""
    cache = as_cache_array(cache)
    b = infer_block_size(cache) if block_size is None else int(block_size)
    if _ext.block_data_bytes(b) > int(np.prod(cache.shape[1:])):
        raise ValueError(f"block size {b} needs {_ext.block_data_bytes(b)} bytes per block, "
                         f"the cache has {int(np.prod(cache.shape[1:]))}")
    raw = _block_bytes(cache, block)
    table, nan_table = _tables(use_fnuz)
    positions = range(b) if tokens is None else tokens
    records = []
    for p in positions:
        if not 0 <= p < b:
            raise IndexError(f"token {p} is out of range: blocks hold {b} tokens")
        start = _ext.token_data_offset(p)
        codes = raw[start:start + _ext.kNopeDim]
        rope_at = _ext.rope_offset(p)
        rope_bits = raw[rope_at:rope_at + _ext.kRopeBytes].view("<u2")
        scale_at = _ext.scale_offset(b, p, 0)
        scales = raw[scale_at:scale_at + _ext.kScaleBytesPerToken]
        tile_scales = np.repeat(scales[:_ext.kNumTiles], _ext.kTileSize)
        nope = table[tile_scales, codes]
        nan_codes = int(nan_table[codes].sum())
        pad = int(scales[_ext.kScalePadIndex])
        flags = []
        if pad != 0:
            flags.append(f"pad=0x{pad:02x}")
        inf_tiles = [j for j in range(_ext.kNumTiles) if scales[j] == 255]
        if inf_tiles:
            flags.append("scale255@" + ",".join(str(j) for j in inf_tiles))
        if nan_codes:
            flags.append(f"nan={nan_codes}")
        records.append(TokenRecord(
            block=int(block), pos=int(p), scale_bytes=[int(x) for x in scales[:_ext.kNumTiles]], pad=pad,
            nope=nope.astype(np.float32), rope=_bf16_to_f32(rope_bits.copy()), nan_codes=nan_codes, flags=flags,
        ))
    return records


def decode_token(cache: Any, block: int, pos: int, block_size: Optional[int] = None,
                 use_fnuz: bool = False) -> TokenRecord:
    """Decode one token of one block."""
    return inspect_block(cache, block, block_size, use_fnuz, tokens=[pos])[0]


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------

def _exp(byte: int) -> str:
    if byte == 255:
        return "inf"
    if byte == 0:
        return "-"  # multiplier 2^-127 is flushed to +0 by the spec
    return str(byte - _ext.kScaleBias)


def _num(v: float) -> str:
    return f"{v:.4g}"


def format_block(records: Sequence[TokenRecord], rope_values: int = 4) -> str:
    """A table of one block: position, seven exponents, NoPE min/max, RoPE (first values), flags."""
    header = (f"{'pos':>4} | " + " ".join(f"{'e' + str(j):>4}" for j in range(_ext.kNumTiles))
              + f" | {'nope min':>10} {'nope max':>10} | rope[:{rope_values}]" + " " * 26 + "| flags")
    lines = [header, "-" * len(header)]
    for r in records:
        exps = " ".join(f"{_exp(b):>4}" for b in r.scale_bytes)
        rope = " ".join(f"{_num(v):>9}" for v in r.rope[:rope_values])
        lines.append(f"{r.pos:>4} | {exps} | {_num(r.nope_min):>10} {_num(r.nope_max):>10} | "
                     f"{rope:<{10 * rope_values + 2}}| {' '.join(r.flags) or 'ok'}")
    return "\n".join(lines)


def format_token(r: TokenRecord) -> str:
    """Every detail of one token: per tile scale byte, exponent, min/max; all 64 RoPE values."""
    lines = [f"block {r.block}, token {r.pos}: flags: {' '.join(r.flags) or 'ok'}; pad byte 0x{r.pad:02x}"]
    lines.append(f"{'tile':>4} {'byte':>5} {'exp':>5} {'min':>11} {'max':>11}")
    for j, b in enumerate(r.scale_bytes):
        tile = r.nope[j * _ext.kTileSize:(j + 1) * _ext.kTileSize]
        finite = tile[~np.isnan(tile)]
        lo = _num(float(finite.min())) if finite.size else "nan"
        hi = _num(float(finite.max())) if finite.size else "nan"
        lines.append(f"{j:>4} {b:>5} {_exp(b):>5} {lo:>11} {hi:>11}")
    lines.append("rope:")
    for i in range(0, len(r.rope), 8):
        lines.append("  " + " ".join(f"{_num(v):>10}" for v in r.rope[i:i + 8]))
    return "\n".join(lines)


def summarize_cache(cache: Any, block_size: Optional[int] = None, use_fnuz: bool = False) -> str:
    """One line per block: scale-byte range over tokens and the number of flagged tokens."""
    cache = as_cache_array(cache)
    b = infer_block_size(cache) if block_size is None else int(block_size)
    lines = [f"{cache.shape[0]} blocks, block size {b}, block stride {int(np.prod(cache.shape[1:]))} bytes"]
    for blk in range(cache.shape[0]):
        recs = inspect_block(cache, blk, b, use_fnuz)
        flagged = sum(1 for r in recs if r.flags)
        all_scales = np.array([r.scale_bytes for r in recs])
        lines.append(f"block {blk:>5}: scale bytes {int(all_scales.min()):>3}..{int(all_scales.max()):>3}, "
                     f"{flagged} of {len(recs)} tokens flagged")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m dsv4kv inspect FILE [--block N] [--token T]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m dsv4kv inspect",
                                     description="Decode blocks of a saved DeepSeek-V4 FP8 K cache.")
    parser.add_argument("file", help="cache saved with torch.save, numpy.save/savez or safetensors")
    parser.add_argument("--block", type=int, help="block to decode (default: a summary line per block)")
    parser.add_argument("--token", type=int, help="show every detail of this token of --block")
    parser.add_argument("--block-size", type=int, help="tokens per block (default: inferred from the shape)")
    parser.add_argument("--key", help="tensor name inside a .npz/.safetensors/torch file holding several")
    parser.add_argument("--fnuz", action="store_true", help="the cache holds e4m3fnuz codes")
    args = parser.parse_args(argv)

    cache = load_cache(args.file, args.key)
    if args.block is None:
        if args.token is not None:
            parser.error("--token needs --block")
        print(summarize_cache(cache, args.block_size, args.fnuz))
        return 0
    if args.token is not None:
        print(format_token(decode_token(cache, args.block, args.token, args.block_size, args.fnuz)))
        return 0
    records = inspect_block(cache, args.block, args.block_size, args.fnuz)
    print(f"block {args.block} ({len(records)} tokens)")
    print(format_block(records))
    return 0
