"""Decode paged K-cache blocks into readable tables.

A cache is the uint8 array vLLM allocates (``[num_blocks, block_stride]``, or
``[num_blocks, block_size, bytes_per_token]``), its tokens stored as one of the records of the
spec's page "Cache records" (``dsv4kv.RECORDS``): DeepSeek-V4's 584-byte ``fp8_ds_mla`` unless
``record=`` (``--format``) names another or a ``[num_blocks, B, W]`` shape's W is another
record's width (528, 288, 68). Everything here runs the project's one C++
inspector through the extension (``harness/inspect.*``, the same code as the
``dsv4kv inspect`` program): :func:`load_cache` reads a ``.safetensors`` or ``.npy`` file with
its bounded reader, :func:`inspect_block` decodes the tokens of a block with the spec's own
rules, :func:`format_block` renders them as the report's lines, and ``python -m dsv4kv inspect``
is the C++ command itself, so it prints the same lines and exits with the same status.

Per token the report shows the seven scale exponents (``byte - 127``; ``inf`` for byte 255,
``-`` for byte 0, whose multiplier is flushed to zero), min/max of the 448 decoded NoPE values,
the first RoPE values, and flags for bytes that break the spec:

* ``pad=0xNN``: the scale pad byte is not 0,
* ``scale255@j[,k...]``: tiles j, k have scale byte 255 (an infinite scale: the key held inf),
* ``nan-codes=K``: K FP8 codes are NaN codes (quantize never writes them).

For a V4.1 record: its scales (exponents of UE8M0 scales, hex bytes of ``nvfp4_ds_mla``'s e4m3
scales), min/max of every decoded value, the first decoded values, and the flags of
:func:`scale_flag` (``scale255@``, ``scale-nan@``, ``scale-neg@``, ``scale0@``) and
``nan-codes=K`` (``mxfp8_ds_mla``).

Command line: ``python -m dsv4kv inspect FILE [--block N] [--token T] [--block-size B]
[--tensor NAME] [--format NAME] [--fnuz] [--rope K] [--max-file-size BYTES]`` (``--help`` for
details). Its exit status is an :class:`InspectStatus`, the C++ command's one table
(``harness/inspect.hpp``, shown in spec/failure_model.md#failure_model_inspect_status); an error is one line
``dsv4kv inspect: <reason>`` on stderr.

Files saved with ``torch.save`` or ``numpy.savez`` are not read here: load them with torch or
NumPy and pass the array to :func:`inspect_block` / :func:`summarize_cache`.
"""

from __future__ import annotations

import dataclasses
import errno
import operator
import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from . import _ext

__all__ = [
    "TokenRecord",
    "CacheFileError",
    "InspectStatus",
    "load_cache",
    "read_safetensors",
    "as_cache_array",
    "infer_block_size",
    "record_of_shape",
    "scale_flag",
    "inspect_block",
    "decode_token",
    "format_block",
    "format_token",
    "summarize_cache",
    "main",
]

#: A file or array that cannot be read as a K cache (missing, not a regular file, malformed,
#: ambiguous, without the requested tensor) or options it cannot satisfy; a ValueError whose
#: message is one line (raised by the C++ inspector).
CacheFileError = _ext.CacheFileError

#: The exit statuses of ``python -m dsv4kv inspect`` and ``dsv4kv inspect`` (an IntEnum bound from
#: the C++ ``InspectStatus``: kInspectOk, kInspectFailed, kInspectUsageError); the spec's table
#: is spec/failure_model.md#failure_model_inspect_status.
InspectStatus = _ext.InspectStatus


@dataclasses.dataclass
class TokenRecord:
    """One decoded token of a cache block."""

    block: int
    pos: int
    scale_bytes: List[int]  # the 7 UE8M0 bytes (a V4.1 record: its 16, 32 or 4 scale bytes)
    pad: int  # the pad byte (spec: 0; 0 for a V4.1 record, which has none)
    nope: np.ndarray  # [448] float32, decoded like dequantize_and_gather_k_cache (V4.1: every value)
    rope: np.ndarray  # [64] float32, the bf16 RoPE values (V4.1: empty)
    nan_codes: int  # FP8 codes that are NaN codes
    flags: List[str]
    record: str = "fp8_ds_mla"  # how the token is stored (dsv4kv.RECORDS)
    #: the C++ inspector's record of the token (renders the report line)
    report: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def exponents(self) -> List[Optional[int]]:
        """``byte - 127`` per tile or group; None for byte 255 (infinite or NaN scale). UE8M0
        scales only: ``nvfp4_ds_mla``'s e4m3 scales raise ValueError."""
        if _ext.inspect_record_layout(self.record)[5] != "ue8m0":
            raise ValueError(f"record {self.record} has e4m3 scales, not exponents")
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
        """The whole decoded key row, ``[512]`` float32 (NoPE then RoPE; ``[128]`` for
        ``mxfp4_indexer``): what the record's gather writes."""
        return np.concatenate([self.nope, self.rope])


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ---------------------------------------------------------------------------
# Loading (the C++ reader: regular files only, size cap, strict headers, mapped not copied)
# ---------------------------------------------------------------------------

#: Files above this size are refused unless a larger ``max_file_size`` is given.
DEFAULT_MAX_FILE_SIZE = 4 << 30


def load_cache(path: Any, key: Optional[str] = None, max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> np.ndarray:
    """Read a cache saved as ``.safetensors`` or ``.npy`` (told apart by their bytes). A
    safetensors file holding several uint8 tensors of rank 2 or 3 needs `key` (the message lists
    them). Returns a read-only uint8 NumPy array that maps the file.

    Raises CacheFileError (a ValueError) with a one-line message for a missing file, one that is
    not a regular file or is larger than `max_file_size`, a malformed file, a missing tensor or
    one that is not a uint8 array of rank 2 or 3."""
    array, _ = _ext.load_cache_file(os.fspath(path), "" if key is None else str(key), operator.index(max_file_size))
    return array


def _safetensors_dtypes() -> Dict[str, np.dtype]:
    import ml_dtypes

    def little(code: str) -> np.dtype:
        return np.dtype(code).newbyteorder("<")

    return {
        "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
        "U16": little("u2"), "I16": little("i2"), "U32": little("u4"), "I32": little("i4"),
        "U64": little("u8"), "I64": little("i8"), "F16": little("f2"), "F32": little("f4"),
        "F64": little("f8"), "BF16": np.dtype(ml_dtypes.bfloat16), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
        "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    }


def _short(name: Any, limit: int = 80) -> str:
    text = repr(name)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def read_safetensors(path: Any, names: Optional[Sequence[str]] = None,
                     max_file_size: int = DEFAULT_MAX_FILE_SIZE) -> Dict[str, np.ndarray]:
    """Read a safetensors file (with the C++ reader) into read-only NumPy arrays that map the
    file (no copy). bf16 comes back as ``ml_dtypes.bfloat16`` (F8_E4M3/F8_E5M2 as ml_dtypes'
    float8 types). Without `names`, tensors of dtypes NumPy cannot hold are left out; a name in
    `names` that is missing or of such a dtype raises CacheFileError, as does a malformed file."""
    path = os.fspath(path)
    entries = {name: (dtype, shape, raw) for name, dtype, shape, raw
               in _ext.safetensors_entries(path, operator.index(max_file_size))}
    known = _safetensors_dtypes()

    def array(name: str) -> np.ndarray:
        dtype_name, shape, raw = entries[name]
        dtype = known.get(dtype_name)
        if dtype is None:
            raise CacheFileError(f"{path}: tensor {_short(name)} has dtype {_short(dtype_name, 40)}, "
                                 "which dsv4kv cannot read")
        return raw.view(dtype).reshape(shape)

    if names is None:
        return {k: array(k) for k, (dt, _, _) in entries.items() if dt in known}
    out = {}
    for name in names:
        if name not in entries:
            shown = ", ".join(_short(k, 40) for k in sorted(entries)[:8])
            raise CacheFileError(f"{path}: no tensor named {_short(name)}; it holds "
                                 f"[{shown}{', ...' if len(entries) > 8 else ''}]")
        out[name] = array(name)
    return out


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


def _host(cache: Any) -> np.ndarray:
    # C order for the C++ view; an array that already is (a mapped file) is not copied.
    return np.ascontiguousarray(as_cache_array(cache))


def record_of_shape(cache: Any) -> Optional[str]:
    """The record a ``[n, B, W]`` cache's W is the width of (584, 528, 288 or 68 bytes), or None
    (a rank-2 cache, another W): such a cache is read as ``fp8_ds_mla`` unless told otherwise."""
    return _ext.record_of_shape([int(d) for d in as_cache_array(cache).shape])


def scale_flag(record: str, byte: int) -> Optional[str]:
    """The report's flag of one scale byte of `record` (the C++ rule, ``scale_flag`` of
    harness/inspect.hpp): ``"scale255"`` (UE8M0 255 of ``fp8_ds_mla``/``mxfp8_ds_mla``, an
    infinite scale), ``"scale-nan"`` (e4m3 0x7F/0xFF of ``nvfp4_ds_mla``, UE8M0 255 of
    ``mxfp4_indexer``), ``"scale-neg"`` (sign bit set, ``nvfp4_ds_mla``), ``"scale0"`` (byte 0 of
    ``nvfp4_ds_mla`` or ``mxfp4_indexer``); None for a byte the record's writer may store."""
    return _ext.inspect_scale_flag(str(record), operator.index(byte)) or None


def infer_block_size(cache: Any, record: Optional[str] = None) -> int:
    """Tokens per block, as the inspector infers it: ``shape[1]`` of a ``[n, B, W]`` cache whose W
    is the record's width; otherwise the block size whose exact layout size (or, unambiguously,
    vLLM allocation) is the block stride. `record`: the tokens' record (None: the shape's, else
    ``fp8_ds_mla``). Raises ValueError when the shape implies none."""
    shape = [int(d) for d in as_cache_array(cache).shape]
    b = _ext.infer_block_size(shape, record)
    if b is None:
        stride = int(np.prod(shape[1:]))
        width = _ext.inspect_record_layout(record or _ext.record_of_shape(shape) or "fp8_ds_mla")[4]
        raise ValueError(f"cannot infer the block size from a block stride of {stride} bytes (not a vLLM "
                         f"allocation nor block_size * {width}); pass block_size=/--block-size")
    return b


# ---------------------------------------------------------------------------
# Decoding (the C++ inspector)
# ---------------------------------------------------------------------------

def _index_or_zero(block_size: Optional[int]) -> int:
    if block_size is None:
        return 0  # inferred
    b = operator.index(block_size)
    if b < 1:
        raise ValueError(f"block size must be >= 1, got {b}")
    return b


def _record_name(record: Optional[str]) -> Optional[str]:
    return None if record is None else str(record)


def inspect_block(
    cache: Any,
    block: int,
    block_size: Optional[int] = None,
    use_fnuz: bool = False,
    tokens: Optional[Sequence[int]] = None,
    record: Optional[str] = None,
) -> List[TokenRecord]:
    """Decode the tokens of one block (all of them, or the positions in `tokens`), stored as
    `record` (None: the record of a ``[n, B, W]`` shape's W, else ``fp8_ds_mla``). A block or
    token out of range, a block size or a record that does not fit the cache, raises
    CacheFileError; a name that is no record, ValueError."""
    positions = None if tokens is None else [operator.index(p) for p in tokens]
    _, decoded = _ext.inspect_tokens(_host(cache), operator.index(block), _index_or_zero(block_size),
                                     bool(use_fnuz), positions, _record_name(record))
    records = []
    for report, values in decoded:
        records.append(TokenRecord(
            block=int(report.block), pos=int(report.pos), scale_bytes=list(report.scale_bytes), pad=int(report.pad_byte),
            nope=np.frombuffer(values, dtype=np.float32).copy(),
            rope=_bf16_to_f32(np.array(report.rope_bits, dtype=np.uint16)),
            nan_codes=int(report.nan_codes), flags=list(report.flags), record=str(report.record), report=report,
        ))
    return records


def decode_token(cache: Any, block: int, pos: int, block_size: Optional[int] = None,
                 use_fnuz: bool = False, record: Optional[str] = None) -> TokenRecord:
    """Decode one token of one block."""
    return inspect_block(cache, block, block_size, use_fnuz, tokens=[pos], record=record)[0]


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------

def _exp(byte: int, record: str = "fp8_ds_mla") -> str:
    flag = scale_flag(record, byte)
    if flag in ("scale255", "scale-nan"):
        return "inf" if flag == "scale255" else "nan"
    if byte == 0 and _ext.inspect_record_layout(record)[6] == "e4m3fn":
        return "-"  # multiplier 2^-127 is flushed to +0 by the spec (dequantize_element)
    return str(byte - _ext.kScaleBias)


def _num(v: float) -> str:
    return f"{v:.4g}"


def format_block(records: Sequence[TokenRecord], rope_values: int = 4) -> str:
    """The report's lines for these tokens (as ``dsv4kv inspect`` prints them), under its
    ``columns:`` line: position, seven exponents, NoPE min/max, the first RoPE values, flags (a
    V4.1 record's: its scales, min/max and first decoded values, flags)."""
    kinds = {r.record for r in records}
    if len(kinds) > 1:
        raise ValueError(f"format_block needs tokens of one record, got {sorted(kinds)}")
    lines = [_ext.inspect_columns_line(kinds.pop() if kinds else "fp8_ds_mla")]
    for r in records:
        if r.report is None:
            raise TypeError("format_block needs records from inspect_block/decode_token")
        lines.append(r.report.line(operator.index(rope_values)))
    return "".join(lines).rstrip("\n")


def format_token(r: TokenRecord) -> str:
    """Every detail of one token: per tile (a V4.1 record: per group) scale byte, exponent (or,
    for e4m3 scales, the scale's flag), min/max; all 64 RoPE values (a V4.1 record has none)."""
    lines = [f"block {r.block}, token {r.pos}: flags: {' '.join(r.flags) or 'ok'}; pad byte 0x{r.pad:02x}"]
    if r.record != "fp8_ds_mla":
        lines[0] = f"block {r.block}, token {r.pos} ({r.record}): flags: {' '.join(r.flags) or 'ok'}"
    _, _, group, _, _, scales, _ = _ext.inspect_record_layout(r.record)
    lines.append(f"{'tile':>4} {'byte':>5} {'exp':>5} {'min':>11} {'max':>11}")
    for j, b in enumerate(r.scale_bytes):
        tile = r.nope[j * group:(j + 1) * group]
        finite = tile[~np.isnan(tile)]
        lo = _num(float(finite.min())) if finite.size else "nan"
        hi = _num(float(finite.max())) if finite.size else "nan"
        exp = _exp(b, r.record) if scales == "ue8m0" else (scale_flag(r.record, b) or "")
        lines.append(f"{j:>4} {b:>5} {exp:>5} {lo:>11} {hi:>11}")
    if len(r.rope):
        lines.append("rope:")
        for i in range(0, len(r.rope), 8):
            lines.append("  " + " ".join(f"{_num(v):>10}" for v in r.rope[i:i + 8]))
    return "\n".join(lines)


def summarize_cache(cache: Any, block_size: Optional[int] = None, use_fnuz: bool = False,
                    record: Optional[str] = None) -> str:
    """One line per block: scale-byte range over tokens and the number of flagged tokens (a token
    is flagged exactly when :func:`inspect_block` gives it flags; the C++ inspector decides both).
    Reads one block at a time, so a large memory-mapped cache is never read into memory whole."""
    b, stride, blocks = _ext.summarize_blocks(_host(cache), _index_or_zero(block_size), bool(use_fnuz),
                                              _record_name(record))
    lines = [f"{len(blocks)} blocks, block size {b}, block stride {stride} bytes"]
    for blk, (lo, hi, flagged) in enumerate(blocks):
        lines.append(f"block {blk:>5}: scale bytes {lo:>3}..{hi:>3}, {flagged} of {b} tokens flagged")
    return "\n".join(lines)


def _arg_bytes(arg: Any) -> bytes:
    # The bytes the C++ program would get in argv: sys.argv's str holds undecodable bytes as
    # surrogates, which os.fsencode turns back into those bytes.
    return os.fsencode(arg if isinstance(arg, (str, bytes, os.PathLike)) else str(arg))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m dsv4kv inspect FILE [options]``: the C++ ``dsv4kv inspect`` command, writing
    to ``sys.stdout``/``sys.stderr``. Returns its exit status, an :class:`InspectStatus` value
    (spec/failure_model.md#failure_model_inspect_status). As in the C++ program, a stdout that
    cannot be written stops the report: quietly when its reader went away (a closed pipe),
    otherwise with the line ``dsv4kv: cannot write to stdout: <reason>`` and kInspectFailed."""
    import sys

    args = [_arg_bytes(a) for a in (sys.argv[1:] if argv is None else argv)]
    write_errno: List[int] = []  # errno of the first failed write to stdout

    def out(text: str) -> bool:
        if write_errno:
            return False
        try:
            sys.stdout.write(text)
        except OSError as e:
            write_errno.append(e.errno or errno.EIO)
            return False
        return True

    status = int(_ext.inspect_main(args, out, sys.stderr.write))
    if not write_errno:
        try:
            sys.stdout.flush()
        except OSError as e:
            write_errno.append(e.errno or errno.EIO)
    if write_errno and write_errno[0] != errno.EPIPE:
        sys.stderr.write(f"dsv4kv: cannot write to stdout: {os.strerror(write_errno[0])}\n")
        return status or int(InspectStatus.kInspectFailed)
    return status
