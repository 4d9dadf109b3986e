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
import operator
import os
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _ext

__all__ = [
    "TokenRecord",
    "CacheFileError",
    "load_cache",
    "read_safetensors",
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
#
# Every file is opened once, checked to be a regular file on the open descriptor (so a FIFO or a
# device neither blocks nor streams forever), and read without copying the tensor bytes: .npy and
# .safetensors are memory-mapped, .npz and torch files hold one decoded copy of the chosen tensor.
# Any problem with the file is a CacheFileError naming the file and the broken rule, in one line.

#: Largest safetensors JSON header accepted (the safetensors package's own limit).
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
#: Deepest JSON nesting accepted in a safetensors header (a valid one nests 3 deep).
MAX_SAFETENSORS_DEPTH = 64


class CacheFileError(ValueError):
    """A file that cannot be read as a K cache: missing, not a regular file, malformed, or without
    the requested tensor. The message is one line and starts with the file's path."""


def _little(code: str) -> np.dtype:
    return np.dtype(code).newbyteorder("<")


def _safetensors_dtypes() -> Dict[str, np.dtype]:
    import ml_dtypes

    return {
        "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
        "U16": _little("u2"), "I16": _little("i2"), "U32": _little("u4"), "I32": _little("i4"),
        "U64": _little("u8"), "I64": _little("i8"), "F16": _little("f2"), "F32": _little("f4"),
        "F64": _little("f8"), "BF16": np.dtype(ml_dtypes.bfloat16), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
        "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    }


def _short(name: Any, limit: int = 80) -> str:
    text = repr(name)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _open_regular(path: str):
    """Opens `path` for reading if it is a regular file (checked on the open descriptor)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise CacheFileError(f"{path}: cannot open: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise CacheFileError(f"{path}: not a regular file ({kind})")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _json_depth(header: bytes) -> int:
    """Deepest {/[ nesting of a JSON text, strings skipped; no recursion on the input."""
    import re

    bare = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', header)
    codes = np.frombuffer(bare, dtype=np.uint8)
    steps = (np.isin(codes, (ord("{"), ord("["))).astype(np.int64)
             - np.isin(codes, (ord("}"), ord("]"))).astype(np.int64))
    return int(np.cumsum(steps).max()) if steps.size else 0


class _SafetensorsEntry:
    __slots__ = ("name", "dtype_name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype_name, dtype, shape, begin, end):
        self.name, self.dtype_name, self.dtype, self.shape = name, dtype_name, dtype, shape
        self.begin, self.end = begin, end


def _safetensors_index(f, path: str):
    """Parses and checks a safetensors header. Returns (data start, {name: entry}); entries of a
    dtype this reader does not know have dtype None (an error only when that tensor is asked for)."""
    size = os.fstat(f.fileno()).st_size
    if size < 8:
        raise CacheFileError(f"{path}: not a safetensors file: {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8:
        raise CacheFileError(f"{path}: not a safetensors file: its header length {n} exceeds the "
                             f"{size - 8} bytes that follow")
    if n > MAX_SAFETENSORS_HEADER:
        raise CacheFileError(f"{path}: safetensors header of {n} bytes is over the {MAX_SAFETENSORS_HEADER}-byte limit")
    header = f.read(n)
    if not header.startswith(b"{"):
        raise CacheFileError(f"{path}: not a safetensors file: the header does not start with '{{'")
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CacheFileError(f"{path}: malformed safetensors header: not UTF-8 at byte {e.start}") from None
    depth = _json_depth(header)
    if depth > MAX_SAFETENSORS_DEPTH:
        raise CacheFileError(f"{path}: malformed safetensors header: JSON nested {depth} deep "
                             f"(limit {MAX_SAFETENSORS_DEPTH})")
    try:
        table = json.loads(text)
    except ValueError as e:
        reason = getattr(e, "msg", str(e))
        where = f" (byte {e.pos})" if hasattr(e, "pos") else ""
        raise CacheFileError(f"{path}: malformed safetensors header: {reason}{where}") from None
    if not isinstance(table, dict):
        raise CacheFileError(f"{path}: malformed safetensors header: not a JSON object")
    data_start = 8 + n
    data_len = size - data_start
    known = _safetensors_dtypes()
    entries = {}
    for name, info in table.items():
        if name == "__metadata__":
            continue
        where = f"{path}: malformed safetensors header: tensor {_short(name)}"
        if not isinstance(info, dict):
            raise CacheFileError(f"{where} is not a JSON object")
        dtype_name, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype_name, str):
            raise CacheFileError(f"{where}: dtype must be a string, got {_short(dtype_name, 40)}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise CacheFileError(f"{where}: shape must be a list of non-negative integers, got {_short(shape, 60)}")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise CacheFileError(f"{where}: data_offsets must be two integers, got {_short(offsets, 60)}")
        begin, end = offsets
        if not 0 <= begin <= end <= data_len:
            raise CacheFileError(f"{where}: data_offsets [{begin}, {end}] are outside the {data_len} data bytes")
        dtype = known.get(dtype_name)
        if dtype is not None:
            count = 1
            for d in shape:
                count *= d  # Python integers: no overflow, however large the shape
            if count * dtype.itemsize != end - begin:
                raise CacheFileError(f"{where}: shape {shape} of {dtype_name} needs {count * dtype.itemsize} bytes, "
                                     f"data_offsets give {end - begin}")
        entries[name] = _SafetensorsEntry(name, dtype_name, dtype, tuple(shape), begin, end)
    return data_start, entries


def _safetensors_map(path: str):
    """(mapping of the whole file, data start, {name: entry}) of a checked safetensors file."""
    import mmap

    with _open_regular(path) as f:
        data_start, entries = _safetensors_index(f, path)
        mapped = mmap.mmap(f.fileno(), os.fstat(f.fileno()).st_size, access=mmap.ACCESS_READ)
    return mapped, data_start, entries


def _safetensors_array(path: str, mapped, data_start: int, entry) -> np.ndarray:
    if entry.dtype is None:
        raise CacheFileError(f"{path}: tensor {_short(entry.name)} has dtype {_short(entry.dtype_name, 40)}, "
                             "which dsv4kv cannot read")
    count = (entry.end - entry.begin) // entry.dtype.itemsize
    return np.frombuffer(mapped, dtype=entry.dtype, count=count, offset=data_start + entry.begin).reshape(entry.shape)


def read_safetensors(path: str, names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
    """Read a safetensors file into read-only NumPy arrays that map the file (no copy). bf16 comes
    back as ``ml_dtypes.bfloat16`` (F8_E4M3/F8_E5M2 as ml_dtypes' float8 types). Without `names`,
    tensors of dtypes this reader does not know are left out; a name in `names` that is missing
    or of such a dtype raises CacheFileError, as does any broken header rule (size, UTF-8 JSON
    object, nesting, dtype/shape/data_offsets of each entry, shape against byte count)."""
    mapped, data_start, entries = _safetensors_map(path)
    if names is None:
        return {k: _safetensors_array(path, mapped, data_start, e) for k, e in entries.items() if e.dtype is not None}
    out = {}
    for name in names:
        if name not in entries:
            raise CacheFileError(f"{path}: no tensor named {_short(name)}; it holds {_names(entries)}")
        out[name] = _safetensors_array(path, mapped, data_start, entries[name])
    return out


def _names(entries: Any) -> str:
    names = sorted(str(k) for k in entries)
    shown = ", ".join(_short(k, 40) for k in names[:8])
    return f"[{shown}{', ...' if len(names) > 8 else ''}]"


def _choose(meta: Dict[str, Tuple[str, tuple]], key: Optional[str], path: str) -> str:
    """The name of the cache among a container's tensors ({name: (dtype name, shape)}): `key`, or
    the only uint8 array of rank >= 2, or the only such one named like a cache."""
    if key is not None:
        if key not in meta:
            raise CacheFileError(f"{path}: no tensor named {_short(key)}; it holds {_names(meta)}")
        return key
    candidates = [k for k, (dt, shape) in meta.items() if dt in ("uint8", "torch.uint8") and len(shape) >= 2]
    if len(candidates) == 1:
        return candidates[0]
    named = [k for k in candidates if "k_cache" in str(k) or "kv_cache" in str(k)]
    if len(named) == 1:
        return named[0]
    raise CacheFileError(
        f"{path}: cannot tell which tensor is the cache ({len(candidates)} uint8 arrays of rank >= 2: "
        f"{_names(candidates)}); name one with key=/--key"
    )


def _pick(tensors: Any, key: Optional[str], path: str) -> Any:
    """One cache out of a container of arrays (a dict from torch.load), or the object itself."""
    if not isinstance(tensors, dict):
        return tensors
    meta = {k: (str(getattr(v, "dtype", "")), tuple(getattr(v, "shape", ()) or ())) for k, v in tensors.items()}
    return tensors[_choose(meta, key, path)]


#: Largest .npy header accepted (NumPy's own reader refuses more than 10,000 bytes by default).
MAX_NPY_HEADER = 65536


def _npy_header(stream, what: str):
    """Reads and checks the header of a .npy stream: (shape, fortran order, dtype, header bytes).
    The header length is bounded before any of it is read."""
    import io

    from numpy.lib import format as npy

    magic = stream.read(8)
    if len(magic) < 8 or not magic.startswith(b"\x93NUMPY"):
        raise CacheFileError(f"{what}: not a .npy file (no NumPy magic string)")
    version = (magic[6], magic[7])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise CacheFileError(f"{what}: unsupported .npy format version {version}")
    width = 2 if version == (1, 0) else 4
    size_bytes = stream.read(width)
    if len(size_bytes) < width:
        raise CacheFileError(f"{what}: the .npy header is truncated")
    n = int.from_bytes(size_bytes, "little")
    if n > MAX_NPY_HEADER:
        raise CacheFileError(f"{what}: .npy header length {n} is over the {MAX_NPY_HEADER}-byte limit")
    text = stream.read(n)
    if len(text) < n:
        raise CacheFileError(f"{what}: the .npy header is truncated ({len(text)} of {n} bytes)")
    read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    # NumPy < 1.24 has no max_header_size (the length is bounded above in any case).
    bound = {"max_header_size": MAX_NPY_HEADER} if "max_header_size" in _parameters(read) else {}
    try:
        shape, fortran, dtype = read(io.BytesIO(size_bytes + text), **bound)
    except Exception as e:  # NumPy's header parser (tokenize, literal_eval) on hostile text
        raise CacheFileError(f"{what}: bad .npy header: {_one_line(e)}") from None
    if dtype.hasobject:
        raise CacheFileError(f"{what}: the array holds Python objects (pickled data), not bytes")
    if any(int(d) < 0 for d in shape):
        raise CacheFileError(f"{what}: the .npy header has a negative dimension: {tuple(shape)}")
    count = 1
    for d in shape:
        count *= int(d)  # Python integers: no overflow, however large the shape
    return tuple(int(d) for d in shape), fortran, dtype, 8 + width + n, count * dtype.itemsize


def _parameters(fn) -> Sequence[str]:
    import inspect as pyinspect

    try:
        return list(pyinspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _read_npy(f, path: str) -> np.ndarray:
    shape, fortran, dtype, offset, nbytes = _npy_header(f, path)
    size = os.fstat(f.fileno()).st_size
    if nbytes > size - offset:
        raise CacheFileError(f"{path}: the .npy header promises shape {shape} of {dtype} "
                             f"({nbytes} bytes), the file holds {size - offset}")
    if nbytes == 0:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def _read_npz(f, path: str, key: Optional[str]) -> np.ndarray:
    import zipfile

    try:
        z = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, EOFError) as e:
        raise CacheFileError(f"{path}: not a .npz file: {e}") from None
    with z:
        meta, infos = {}, {}
        for info in z.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = info.filename[:-4]
            with z.open(info) as member:
                header = _npy_header(member, f"{path}: member {_short(name)}")
            meta[name] = (str(header[2]), header[0])
            infos[name] = (info, header)
        name = _choose(meta, key, path)
        info, (shape, fortran, dtype, offset, nbytes) = infos[name]
        if nbytes != info.file_size - offset:
            raise CacheFileError(f"{path}: member {_short(name)} promises shape {shape} of {dtype} "
                                 f"({nbytes} bytes), it holds {info.file_size - offset}")
        with z.open(info) as member:
            member.read(offset)
            data = member.read(nbytes)
        if len(data) != nbytes:
            raise CacheFileError(f"{path}: member {_short(name)} is truncated")
        return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _read_torch(f, path: str, key: Optional[str]) -> Any:
    try:
        import torch  # type: ignore
    except ImportError:
        raise CacheFileError(f"{path}: not .npy/.npz/.safetensors, and torch (for torch.save files) "
                             "is not installed") from None
    return _pick(torch.load(f, map_location="cpu", weights_only=True), key, path)


def load_cache(path: str, key: Optional[str] = None) -> np.ndarray:
    """Read a cache saved with ``numpy.save`` (.npy), ``numpy.savez`` (.npz), safetensors
    (.safetensors) or ``torch.save`` (anything else). A container holding several tensors needs
    `key` unless exactly one of them is a uint8 array of rank >= 2. Returns a uint8 NumPy array
    (read-only and mapping the file for .npy and .safetensors).

    Raises CacheFileError (a ValueError) with a one-line message for a missing file, one that is
    not a regular file, a malformed file or a missing tensor; TypeError/ValueError from
    :func:`as_cache_array` when the tensor is not a uint8 array of rank 2 or 3."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".safetensors":
        mapped, data_start, entries = _safetensors_map(path)
        meta = {k: (str(e.dtype) if e.dtype is not None else e.dtype_name, e.shape) for k, e in entries.items()}
        obj = _safetensors_array(path, mapped, data_start, entries[_choose(meta, key, path)])
    else:
        obj = _load_other(path, ext, key)
    try:
        return as_cache_array(obj)
    except (TypeError, ValueError) as e:
        raise CacheFileError(f"{path}: {e}") from None


def _load_other(path: str, ext: str, key: Optional[str]) -> Any:
    with _open_regular(path) as f:
        try:
            if ext == ".npy":
                obj = _read_npy(f, path)
            elif ext == ".npz":
                obj = _read_npz(f, path, key)
            else:
                obj = _read_torch(f, path, key)
        except CacheFileError:
            raise
        except (MemoryError, RecursionError) as e:
            raise CacheFileError(f"{path}: cannot read: {type(e).__name__}") from None
        except Exception as e:  # the format libraries' own errors for malformed bytes
            raise CacheFileError(f"{path}: malformed file: {_one_line(e)}") from None
    return obj


def _one_line(e: BaseException, limit: int = 400) -> str:
    """An exception as one short line: its message (its type when it has none), whitespace collapsed."""
    if isinstance(e, KeyError) and e.args:
        text = str(e.args[0])
    elif isinstance(e, OSError) and e.strerror:
        text = f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    else:
        text = str(e)
    text = " ".join(text.split()) or type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


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

def _block_size(cache: np.ndarray, block_size: Optional[int]) -> int:
    """The block size to decode with: `block_size`, checked against the cache's bytes per block,
    or the one inferred from the shape."""
    if block_size is None:
        return infer_block_size(cache)
    b = operator.index(block_size)
    per_block = 1
    for d in cache.shape[1:]:
        per_block *= int(d)
    # Every token takes at least one byte: a larger block size cannot fit (and is never handed to
    # the extension, whose sizes are int64).
    if b < 1:
        raise ValueError(f"block size must be >= 1, got {b}")
    need = _ext.block_data_bytes(b) if b <= per_block else None
    if need is None or need > per_block:
        raise ValueError(f"block size {b} needs {need or 'more'} bytes per block, the cache has {per_block}")
    return b


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
    b = _block_size(cache, block_size)
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
    """One line per block: scale-byte range over tokens and the number of flagged tokens (a token
    is flagged exactly when :func:`inspect_block` gives it flags). Vectorized per block: the bytes
    of one block at a time, so a large memory-mapped cache is never read into memory whole."""
    cache = as_cache_array(cache)
    b = _block_size(cache, block_size)
    _, nan_table = _tables(use_fnuz)
    # Byte offsets inside a block (the spec's layout, from the extension), the same for every block.
    scale_at = np.array([_ext.scale_offset(b, p, 0) for p in range(b)], dtype=np.int64)
    data_at = np.array([_ext.token_data_offset(p) for p in range(b)], dtype=np.int64)
    scale_idx = scale_at[:, None] + np.arange(_ext.kScaleBytesPerToken)
    code_idx = data_at[:, None] + np.arange(_ext.kNopeDim)
    lines = [f"{cache.shape[0]} blocks, block size {b}, block stride {int(np.prod(cache.shape[1:]))} bytes"]
    for blk in range(cache.shape[0]):
        raw = _block_bytes(cache, blk)
        scales = raw[scale_idx]  # [b, 8]: 7 tile scales and the pad byte
        tiles = scales[:, :_ext.kNumTiles]
        flagged = ((scales[:, _ext.kScalePadIndex] != 0) | (tiles == 255).any(axis=1)
                   | nan_table[raw[code_idx]].any(axis=1))
        lines.append(f"block {blk:>5}: scale bytes {int(tiles.min()):>3}..{int(tiles.max()):>3}, "
                     f"{int(flagged.sum())} of {b} tokens flagged")
    return "\n".join(lines)


class _UsageError(Exception):
    pass


def _parser():
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, not argparse's usage block
            raise _UsageError(message)

    parser = Parser(prog="python -m dsv4kv inspect", description="Decode blocks of a saved DeepSeek-V4 FP8 K cache.")
    parser.add_argument("file", help="cache saved with torch.save, numpy.save/savez or safetensors")
    parser.add_argument("--block", type=int, help="block to decode (default: a summary line per block)")
    parser.add_argument("--token", type=int, help="show every detail of this token of --block")
    parser.add_argument("--block-size", type=int, help="tokens per block (default: inferred from the shape)")
    parser.add_argument("--key", help="tensor name inside a .npz/.safetensors/torch file holding several")
    parser.add_argument("--fnuz", action="store_true", help="the cache holds e4m3fnuz codes")
    return parser


def _run(args) -> str:
    for name in ("block", "token"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise _UsageError(f"--{name} must be >= 0, got {value}")
    if args.block_size is not None and args.block_size < 1:
        raise _UsageError(f"--block-size must be >= 1, got {args.block_size}")
    if args.token is not None and args.block is None:
        raise _UsageError("--token needs --block")
    cache = load_cache(args.file, args.key)
    if args.block is None:
        return summarize_cache(cache, args.block_size, args.fnuz)
    if args.block >= cache.shape[0]:
        raise _UsageError(f"--block {args.block} is out of range: {args.file} holds {cache.shape[0]} blocks")
    b = _block_size(cache, args.block_size)
    if args.token is not None:
        if args.token >= b:
            raise _UsageError(f"--token {args.token} is out of range: blocks hold {b} tokens")
        return format_token(decode_token(cache, args.block, args.token, b, args.fnuz))
    records = inspect_block(cache, args.block, b, args.fnuz)
    return f"block {args.block} ({len(records)} tokens)\n" + format_block(records)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m dsv4kv inspect FILE [--block N] [--token T]``.

    Exit status 0 with the table on stdout; 2 with exactly one line ``dsv4kv inspect: <reason>``
    on stderr for every user error: bad options, a missing file, one that is not a regular file,
    a malformed file, an unknown tensor, --block/--token out of range. Set
    DSV4KV_INSPECT_TRACEBACK=1 to get the Python traceback instead (for debugging the inspector).
    """
    import sys

    parser = _parser()
    try:
        args = parser.parse_args(argv)
        text = _run(args)
    except BrokenPipeError:
        raise  # __main__ treats a closed stdout as the end of the output
    except (_UsageError, Exception) as e:
        if os.environ.get("DSV4KV_INSPECT_TRACEBACK") == "1":
            raise
        print(f"dsv4kv inspect: {_one_line(e)}", file=sys.stderr)
        return 2
    print(text)
    return 0
