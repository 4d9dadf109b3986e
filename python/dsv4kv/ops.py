"""The six DeepSeek-V4 K-cache operations, with vLLM's names, argument order and defaults.

Drop-in for ``vllm/models/deepseek_v4/common/ops/cache_utils.py``: a script written against
vLLM's functions runs unchanged after ``from dsv4kv import ...``. Every function also takes
two keyword-only extras:

* ``error_count``: None, or a one-element int32 array on the arrays' device. Each value that
  only the kernel sees and that is out of range (a slot, a block-table entry, a request index,
  a length) is skipped or turned into -1, and counted here once per skipped element.
* ``stream``: for CUDA arrays, the CUDA stream to run on (an int ``cudaStream_t``, a
  ``torch.cuda.Stream`` or a ``cupy.cuda.Stream``). Default: PyTorch's current stream for
  torch tensors, CuPy's current stream for CuPy arrays, else the default stream.

PyTorch tensors go through the registered ``torch.ops.dsv4kv.<name>`` operators (see
``dsv4kv/_torch.py``; traceable by ``torch.compile``) unless ``stream=`` is given. Other
arrays come in through DLPack: PyTorch tensors, NumPy arrays (bfloat16 through
``ml_dtypes.bfloat16``), CuPy arrays. Arrays in host memory run the C++ reference; arrays in
CUDA memory run the CUDA backend, asynchronously, with no allocation in the library (so calls
can be captured in CUDA graphs). All arrays of one call must be on one device.

The three cache operations also take a keyword-only ``record``: how a token is stored
(``"fp8_ds_mla"``, DeepSeek-V4's 584-byte record, the default; ``"mxfp8_ds_mla"``,
``"nvfp4_ds_mla"`` and ``"mxfp4_indexer"``, DeepSeek-V4.1's 528-, 288- and 68-byte records,
``dsv4kv.RECORDS``; the spec's page "Cache records"). vLLM's DeepSeek-V4.1 spellings are taken
too: quantize's ``bytes_per_token=`` names the record by its bytes per token, and the
dense gather accepts ``max_gather_len=``, which upstream uses only to shape its grid (it changes
no byte, so it is checked and not used).

The three index operations also take a keyword-only ``semantics``: ``"seed"`` (the default,
the vLLM revision this library was built against), ``"vllm_v4"`` or ``"vllm_v41"`` (vLLM's
current DeepSeek-V4 and DeepSeek-V4.1 files, which changed these operations since). The spec's
section "Semantics profiles" lists every difference.

Errors: a broken argument contract raises ``ValueError`` (``TypeError`` for a wrong dtype or a
non-array) with the C++ library's message, e.g.
``quantize_and_insert_k_cache: k must have 512 columns, got 448``; a CUDA failure raises
``RuntimeError``.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, TypeVar

import numpy as np

from . import _arrays, _ext, _opspec

__all__ = [
    "quantize_and_insert_k_cache",
    "dequantize_and_gather_k_cache",
    "dequantize_and_gather_k_cache_sparse",
    "compute_global_topk_indices_and_lens",
    "combine_topk_swa_indices",
    "build_flashinfer_mixed_sparse_indices",
]

Array = Any  # torch.Tensor | numpy.ndarray | cupy.ndarray | any DLPack producer
#: The framework of the argument that decides where outputs are allocated (torch in, torch out).
ArrayT = TypeVar("ArrayT")

#: Filled by dsv4kv._torch when the torch.library operators are registered: public function ->
#: its torch route, which runs one call through torch.ops.dsv4kv (or its compiled eager fast
#: path), or returns NotImplemented for arguments that are not all torch tensors.
_torch_routes: dict = {}


def _run(fn, values):
    """Runs operation `fn` (one of the public functions below) on the arguments `values`
    (its parameters by name; a dict literal, not locals(), which torch.compile cannot
    trace before torch 2.12): torch tensors through torch.ops.dsv4kv, everything else through the
    extension directly."""
    route = _torch_routes.get(fn)
    if route is not None and values.get("stream") is None:
        result = route(values)
        if result is not NotImplemented:
            return result
    return _direct(_opspec.spec(fn), values)


def _direct(spec, values):
    """Runs one call through the extension: outputs allocated next to their model argument,
    every array exported through DLPack, the stream chosen by _arrays.run_stream."""
    values = dict(values)
    outputs = spec.outputs(values)
    if outputs is not None:
        values.update(outputs)
    arrays = [values[name] for name in spec.array_fields]
    present = [a for a in arrays if a is not None]
    stream = values.get("stream")
    _arrays.stream_handle(stream)  # reject a malformed stream= even when the arrays are on the host
    s = _arrays.run_stream(stream, present) if any(_arrays.is_cuda_array(a) for a in present) else 0
    exported = iter([_arrays.export(a, s) for a in arrays])
    args = [next(exported) if kind in ("tensor", "counter") else spec.scalar(name, values[name])
            for name, _, kind in spec.fields]
    getattr(_ext, spec.name)(*args, s)
    if outputs is not None:
        return tuple(outputs[name] for name in spec.returned)
    return None


# ---------------------------------------------------------------------------
# Shapes of the outputs the index operations allocate (also the torch fake kernels' shapes).
# A malformed argument gives an empty shape: the extension then reports it with the contract.
# ---------------------------------------------------------------------------
@_opspec.output_shapes("compute_global_topk_indices_and_lens")
def _global_topk_shapes(v):
    shape = _opspec.dims(v["topk_indices"])
    return [shape, shape[:1]] if shape is not None and len(shape) == 2 else [(0, 0), (0,)]


@_opspec.output_shapes("combine_topk_swa_indices")
def _combine_shapes(v):
    shape = _opspec.dims(v["topk_indices"])
    t = shape[0] if shape is not None and len(shape) >= 1 else 0
    try:
        width = max(0, _ext.combine_row_width(int(v["topk"]), int(v["window_size"]), int(v["max_image_tokens"])))
    except (TypeError, ValueError, OverflowError):
        width = 0
    return [(t, width), (t,)]


@_opspec.output_shapes("build_flashinfer_mixed_sparse_indices")
def _mixed_shapes(v):
    swa, prefill = _opspec.dims(v["decode_swa_indices"]), _opspec.dims(v["prefill_topk_indices"])
    dc = v["decode_compressed_indices"]
    dc_shape = _opspec.dims(dc) if dc is not None else None
    if swa is None or len(swa) != 2 or prefill is None or len(prefill) != 2:
        return [(0, 0), (0,)]
    dct = dc_shape[1] if dc_shape is not None and len(dc_shape) == 2 else 0
    image = int(v["max_image_tokens"]) if v["prefill_left_visible"] is not None else 0
    try:
        width = max(0, _ext.mixed_row_width(int(swa[1]), image, int(v["topk"]), int(dct)))
    except (TypeError, ValueError, OverflowError):
        return [(0, 0), (0,)]
    return [(swa[0] + prefill[0], width), (swa[0] + prefill[0],)]


def _record_of_width(op: str, record: str, bytes_per_token: Optional[int]) -> str:
    """The record named by `bytes_per_token` (vLLM V4.1's keyword) or else by `record`; a
    `record` other than the default must agree with the width."""
    if bytes_per_token is None:
        return record
    width = _arrays.as_int(op, "bytes_per_token", bytes_per_token)
    # The spec's width -> record rule (record_from_token_bytes), for widths the binding can take.
    named = _ext.record_of_shape([0, 1, width]) if 0 < width < 2**31 else None
    if named is None:
        widths = ", ".join(str(_ext.inspect_record_layout(n)[4]) for n in _ext.record_names)
        raise ValueError(f"{op}: bytes_per_token must be the token bytes of a record ({widths}), got {width}")
    if record not in ("fp8_ds_mla", named):
        raise ValueError(f"{op}: bytes_per_token={width} is record {named}, but record={record!r}")
    return named


# ---------------------------------------------------------------------------
# The public functions: vLLM's signatures (the documented API); their bodies are generic.
# ---------------------------------------------------------------------------


def quantize_and_insert_k_cache(
    k: Array,
    k_cache: Array,
    slot_mapping: Array,
    block_size: int = 64,
    is_ue8m0: bool = True,
    use_fnuz: bool = False,
    *,
    record: str = "fp8_ds_mla",
    bytes_per_token: Optional[int] = None,
    error_count: Optional[Array] = None,
    stream: Any = None,
) -> None:
    """Quantize bf16 keys and write them into the paged FP8 cache.

    Args:
        k: ``[T_k, 512]`` bfloat16 (``[T_k, 128]`` for ``record="mxfp4_indexer"``), unit inner
            stride. Rows ``t >= T`` are never read.
        k_cache: ``[num_blocks, block_stride]`` (or ``[num_blocks, B, bytes/B]``) uint8,
            each block's bytes contiguous; ``block_stride`` even and ``>= block_size * 584``.
            Written in place.
        slot_mapping: ``[T]`` int64, ``T <= T_k``; slot = block * block_size + position.
            ``-1`` skips the token silently; other out-of-range slots are skipped and counted.
        block_size: tokens per cache block, ``>= 1``.
        is_ue8m0: must be True (power-of-two UE8M0 scales are the only format).
        use_fnuz: encode e4m3fnuz instead of OCP e4m3fn (``"fp8_ds_mla"`` only).
        record: the record tokens are stored as (module docs); the block stride must then be
            ``>= block_size *`` its token bytes (584, 528, 288 or 68).
        bytes_per_token: vLLM V4.1's way to name the record: its bytes per token (the spec's
            "Cache records"); ``record`` must then be left out or name the same record.
        error_count: optional ``[1]`` int32 counter (skipped slots, non-finite NoPE values).
        stream: CUDA stream for CUDA arrays (see module docs).

    Per token of the default record: 448 FP8 codes (7 tiles of 64, one UE8M0 scale byte each),
    64 bf16 RoPE values copied bit-exactly, scale pad byte 0. No other cache byte changes.
    """
    record = _record_of_width("quantize_and_insert_k_cache", record, bytes_per_token)
    _run(quantize_and_insert_k_cache, {
        "k": k, "k_cache": k_cache, "slot_mapping": slot_mapping, "block_size": block_size,
        "is_ue8m0": is_ue8m0, "use_fnuz": use_fnuz, "record": record, "error_count": error_count,
        "stream": stream,
    })


def dequantize_and_gather_k_cache(
    out: Array,
    k_cache: Array,
    seq_lens: Array,
    gather_lens: Optional[Array],
    block_table: Array,
    block_size: int,
    offset: int,
    use_fnuz: bool = False,
    *,
    record: str = "fp8_ds_mla",
    max_gather_len: Optional[int] = None,
    error_count: Optional[Array] = None,
    stream: Any = None,
) -> None:
    """Gather cache rows of each request and dequantize them to bf16.

    Args:
        out: ``[>= R, out_rows, 512]`` (``128`` columns for ``"mxfp4_indexer"``) bfloat16, unit inner stride, any outer strides. For
            request ``b`` with ``g = gather_lens[b]`` (or ``seq_lens[b]``), rows ``i < g`` take
            cache position ``seq_lens[b] - g + i`` and go to ``out[b, offset + i, :]``. No other
            element of ``out`` is written.
        k_cache: ``[num_blocks, block_stride]`` uint8 (as in quantize).
        seq_lens: ``[R]`` int32.
        gather_lens: None, or ``[>= R]`` int32.
        block_table: ``[>= R, max_blocks]`` int32, unit inner stride, any row stride.
        block_size: tokens per cache block.
        offset: first output row, in ``[0, out.shape[1]]``.
        use_fnuz: the cache holds e4m3fnuz codes.
        record: the record the cache's tokens are stored as (module docs).
        max_gather_len: vLLM's bound on the rows a request gathers, which shapes its grid and
            no byte: None or an integer ``>= 0``, and not used (each request gathers its ``g``
            rows whatever the value).
        error_count: optional ``[1]`` int32 counter (bad requests, rows past ``out``,
            block-table misses, tokens with a NaN scale byte of a V4.1 record).
        stream: CUDA stream for CUDA arrays.
    """
    if max_gather_len is not None and _arrays.as_int("dequantize_and_gather_k_cache", "max_gather_len",
                                                     max_gather_len) < 0:
        raise ValueError(f"dequantize_and_gather_k_cache: max_gather_len must be >= 0, got {max_gather_len}")
    _run(dequantize_and_gather_k_cache, {
        "out": out, "k_cache": k_cache, "seq_lens": seq_lens, "gather_lens": gather_lens,
        "block_table": block_table, "block_size": block_size, "offset": offset,
        "use_fnuz": use_fnuz, "record": record, "error_count": error_count, "stream": stream,
    })


def dequantize_and_gather_k_cache_sparse(
    out: Array,
    k_cache: Array,
    slot_indices: Array,
    block_size: int,
    *,
    use_fnuz: bool = False,
    record: str = "fp8_ds_mla",
    error_count: Optional[Array] = None,
    stream: Any = None,
) -> None:
    """Dequantize the cache rows of a list of slots to bf16 (vLLM PR #42504's signature).

    Args:
        out: ``[>= N, 512]`` (``128`` columns for ``"mxfp4_indexer"``) bfloat16, unit inner stride, any row stride. Row ``i`` gets slot
            ``slot_indices[i]``; rows of skipped slots and rows ``>= N`` are not written.
        k_cache: ``[num_blocks, block_stride]`` uint8 (as in quantize).
        slot_indices: ``[N]`` int32 or int64, contiguous; slot = block * block_size + position.
            ``-1`` is padding (no load, no store); any other slot outside the cache is skipped
            and counted.
        block_size: tokens per cache block.
        use_fnuz: the cache holds e4m3fnuz codes.
        record: the record the cache's tokens are stored as (module docs).
        error_count: optional ``[1]`` int32 counter (out-of-range slots other than -1, tokens
            with a NaN scale byte of a V4.1 record).
        stream: CUDA stream for CUDA arrays.

    Byte for byte the dense gather of single-token requests (slot ``s``: ``seq_len = s % B + 1``,
    ``gather_len = 1``, block-table row ``[s // B]``).
    """
    _run(dequantize_and_gather_k_cache_sparse, {
        "out": out, "k_cache": k_cache, "slot_indices": slot_indices, "block_size": block_size,
        "use_fnuz": use_fnuz, "record": record, "error_count": error_count, "stream": stream,
    })


def compute_global_topk_indices_and_lens(
    topk_indices: ArrayT,
    token_to_req_indices: Array,
    block_table: Array,
    block_size: int,
    is_valid_token: Array,
    *,
    semantics: str = "seed",
    out: Optional[Tuple[ArrayT, ArrayT]] = None,
    error_count: Optional[Array] = None,
    stream: Any = None,
) -> Tuple[ArrayT, ArrayT]:
    """Map request-local top-k indices to global cache slots and count them.

    Args:
        topk_indices: ``[T, topk]`` int32, unit inner stride (-1 = no entry).
        token_to_req_indices: ``[>= T]`` int32.
        block_table: ``[R, max_blocks]`` int32, unit inner stride, any row stride.
        block_size: tokens per cache block.
        is_valid_token: ``[>= T]`` bool.
        semantics: ``"seed"`` (default): every entry keeps its column; ``"vllm_v4"`` /
            ``"vllm_v41"`` (current vLLM): the translated entries are packed to the left, in
            column order, and the rest of the row is -1.
        out: optional ``(global_topk_indices [T, topk] int32, topk_lens [T] int32)``.

    Returns:
        ``(global_topk_indices, topk_lens)``: ``[T, topk]`` and ``[T]`` int32, on the input's
        device and from the input's framework (torch in, torch out; NumPy in, NumPy out).
        ``global = block_table[req, local // block_size] * block_size + local % block_size``
        for ``local >= 0``, else -1; ``lens[t] = #{entries >= 0}`` for valid tokens, else 0.
    """
    return _run(compute_global_topk_indices_and_lens, {
        "topk_indices": topk_indices, "token_to_req_indices": token_to_req_indices,
        "block_table": block_table, "block_size": block_size, "is_valid_token": is_valid_token,
        "semantics": semantics, "out": out, "error_count": error_count, "stream": stream,
    })


def combine_topk_swa_indices(
    topk_indices: ArrayT,
    query_start_loc: Array,
    seq_lens: Array,
    gather_lens: Array,
    window_size: int,
    compress_ratio: int,
    topk: int,
    M: int,
    N: int,
    out: Optional[Tuple[ArrayT, ArrayT]] = None,
    left_visible: Optional[Array] = None,
    right_visible: Optional[Array] = None,
    max_image_tokens: int = 0,
    *,
    semantics: str = "seed",
    error_count: Optional[Array] = None,
    stream: Any = None,
) -> Tuple[ArrayT, ArrayT]:
    """Build FlashMLA's sparse-prefill rows: top-k compressed indices, then the sliding window.

    Args:
        topk_indices: ``[T, >= topk]`` int32, unit inner stride.
        query_start_loc: ``[R + 1]`` int32 (rebased by its first element).
        seq_lens: ``[R]`` int32.
        gather_lens: ``[>= R]`` int32.
        window_size, compress_ratio, topk: as in vLLM.
        M: per-request stride of the combined KV buffer; N: compressed rows before the SWA rows.
        out: optional ``(combined_indices [T, W] int32, combined_lens [T] int32)`` with
            ``W = round_up(topk + window_size + max_image_tokens, 128)``.
        left_visible, right_visible: None, or ``[>= T]`` int32 each (given together): in-image
            bidirectional visibility per token.
        max_image_tokens: extra window columns for image spans (counted in W even without
            visibility arrays).
        semantics: ``"seed"`` (default) or ``"vllm_v4"``: every top-k value ``v >= 0`` becomes
            ``v + M * b``; ``"vllm_v41"`` (current vLLM's DeepSeek-V4.1): values outside
            ``[0, N)`` are -1 (still counted in the length), ``compress_ratio`` may be 0 (no
            top-k entries), and there are no image windows (``max_image_tokens`` must be 0).

    Returns:
        ``(combined_indices [T, W], combined_lens [T])`` int32; every column past a row's
        length is -1. Tokens outside every request get length 0.
    """
    return _run(combine_topk_swa_indices, {
        "topk_indices": topk_indices, "query_start_loc": query_start_loc, "seq_lens": seq_lens,
        "gather_lens": gather_lens, "window_size": window_size, "compress_ratio": compress_ratio,
        "topk": topk, "M": M, "N": N, "out": out, "left_visible": left_visible,
        "right_visible": right_visible, "max_image_tokens": max_image_tokens,
        "semantics": semantics, "error_count": error_count, "stream": stream,
    })


def build_flashinfer_mixed_sparse_indices(
    decode_swa_indices: ArrayT,
    decode_compressed_indices: Optional[Array],
    decode_compressed_topk_lens: Optional[Array],
    prefill_topk_indices: Array,
    query_start_loc: Array,
    seq_lens: Array,
    token_to_req_indices: Array,
    swa_block_table: Array,
    swa_block_size: int,
    compressed_block_table: Optional[Array],
    compressed_block_size: int,
    window_size: int,
    compress_ratio: int,
    topk: int,
    decode_compressed_indices_are_local: bool = False,
    decode_is_valid_token: Optional[Array] = None,
    swa_block_span: Optional[int] = None,
    compressed_block_span: Optional[int] = None,
    prefill_left_visible: Optional[Array] = None,
    prefill_right_visible: Optional[Array] = None,
    max_image_tokens: int = 0,
    *,
    replay_start: Optional[Array] = None,
    semantics: str = "seed",
    out: Optional[Tuple[ArrayT, ArrayT]] = None,
    error_count: Optional[Array] = None,
    stream: Any = None,
) -> Tuple[ArrayT, ArrayT]:
    """Build FlashInfer's DeepSeek-V4 sparse-index matrix for a decode-first batch.

    Args:
        decode_swa_indices: ``[D, swa_width >= window_size]`` int32 (precomputed SWA slots).
        decode_compressed_indices: None, or ``[D, dct]`` int32.
        decode_compressed_topk_lens: None, or ``[>= D]`` int32.
        prefill_topk_indices: ``[P, cols]`` int32 (request-local compressed indices).
        query_start_loc: ``[R + 1]`` int32 global token offsets (not rebased).
        seq_lens: ``[R]`` int32.
        token_to_req_indices: ``[>= D + P]`` int32.
        swa_block_table: ``[R, *]`` int32; swa_block_size its block size.
        compressed_block_table: None (use the SWA table), or ``[R, *]`` int32.
        compressed_block_size, window_size, compress_ratio, topk: as in vLLM.
        decode_compressed_indices_are_local: translate decode compressed indices through the
            compressed block table (then ``decode_is_valid_token`` ``[>= D]`` bool is required).
        swa_block_span, compressed_block_span: page stride in tokens for packed pages
            (None = the block size).
        prefill_left_visible, prefill_right_visible: None, or ``[>= D + P]`` int32 each.
        max_image_tokens: image columns, used when the visibility arrays are given.
        replay_start: ``[>= R]`` int32, required with ``semantics="vllm_v41"`` (and refused
            otherwise): each prefill window starts no earlier than its request's replay start.
        semantics: ``"seed"`` (default); ``"vllm_v4"`` (current vLLM's DeepSeek-V4): decode rows
            wider than the window take DSpark's non-causal layout; ``"vllm_v41"`` (DeepSeek-V4.1):
            bounded replay, ``compress_ratio`` may be 0, no image windows.
        out: optional ``(sparse_indices, sparse_topk_lens)``.

    Returns:
        ``(sparse_indices [D + P, W], sparse_topk_lens [D + P])`` int32 with
        ``W = swa_width + image_width + round_up(max(topk, dct), 4)``.
    """
    return _run(build_flashinfer_mixed_sparse_indices, {
        "decode_swa_indices": decode_swa_indices,
        "decode_compressed_indices": decode_compressed_indices,
        "decode_compressed_topk_lens": decode_compressed_topk_lens,
        "prefill_topk_indices": prefill_topk_indices, "query_start_loc": query_start_loc,
        "seq_lens": seq_lens, "token_to_req_indices": token_to_req_indices,
        "swa_block_table": swa_block_table, "swa_block_size": swa_block_size,
        "compressed_block_table": compressed_block_table,
        "compressed_block_size": compressed_block_size, "window_size": window_size,
        "compress_ratio": compress_ratio, "topk": topk,
        "decode_compressed_indices_are_local": decode_compressed_indices_are_local,
        "decode_is_valid_token": decode_is_valid_token, "swa_block_span": swa_block_span,
        "compressed_block_span": compressed_block_span,
        "prefill_left_visible": prefill_left_visible,
        "prefill_right_visible": prefill_right_visible, "max_image_tokens": max_image_tokens,
        "replay_start": replay_start, "semantics": semantics, "out": out, "error_count": error_count,
        "stream": stream,
    })


# ---------------------------------------------------------------------------
# Composed from the operations above
# ---------------------------------------------------------------------------


def convert_k_cache(
    src: Array,
    dst: Array,
    block_size: int,
    *,
    src_record: str,
    dst_record: str,
    use_fnuz: bool = False,
    chunk_tokens: int = 65536,
    error_count: Optional[Array] = None,
    stream: Any = None,
) -> None:
    """Re-encode every token of a paged cache from one record to another (spec "Cache records",
    "Converting a cache"): token ``s`` of ``src`` is decoded to bf16 (exactly, for the bytes a
    writer of ``src_record`` produces) and quantized as ``dst_record`` into slot ``s`` of ``dst``.
    The error is the destination record's quantization error of the decoded values.

    Args:
        src: ``[num_blocks, block_stride]`` (or ``[num_blocks, B, W]``) uint8 cache of ``src_record``.
        dst: uint8 cache of ``dst_record`` with at least as many blocks; only its token records
            are written (block tails keep their bytes).
        block_size: tokens per block of both caches.
        src_record, dst_record: record names (``dsv4kv.RECORDS``) with the same ``head_dim``
            (the indexer key converts to nothing else).
        use_fnuz: the 584-byte source or destination holds e4m3fnuz codes.
        chunk_tokens: tokens decoded per step (the bf16 work array is ``chunk_tokens x head_dim``).
        error_count: optional ``[1]`` int32 counter: the decode's and the quantize's reports
            (NaN scale bytes, non-finite decoded values).
        stream: CUDA stream for CUDA arrays.

    torch tensors (CPU or CUDA) and NumPy arrays; the work arrays come from the source's framework.
    """
    op = "convert_k_cache"
    dims = {name: dim for name, dim in zip(_ext.record_names, _ext.record_head_dims)}
    for name, rec in (("src_record", src_record), ("dst_record", dst_record)):
        if rec not in dims:
            raise ValueError(f"{op}: {name} must be one of {', '.join(dims)}, got {rec!r}")
    if dims[src_record] != dims[dst_record]:
        raise ValueError(f"{op}: records {src_record} ({dims[src_record]} values) and {dst_record} "
                         f"({dims[dst_record]} values) hold keys of different widths")
    block_size = _arrays.as_int(op, "block_size", block_size)
    chunk_tokens = _arrays.as_int(op, "chunk_tokens", chunk_tokens)
    if block_size < 1 or chunk_tokens < 1:
        raise ValueError(f"{op}: block_size and chunk_tokens must be >= 1")
    src_shape, dst_shape = _arrays.shape_of(src), _arrays.shape_of(dst)
    if not src_shape or not dst_shape:
        raise TypeError(f"{op}: src and dst must be arrays")
    if dst_shape[0] < src_shape[0]:
        raise ValueError(f"{op}: dst has {dst_shape[0]} blocks, fewer than src's {src_shape[0]}")
    total = src_shape[0] * block_size
    head_dim = dims[src_record]
    rows = _arrays.alloc_work(op, src, (min(chunk_tokens, max(total, 1)), head_dim), "bfloat16")
    for first in range(0, total, chunk_tokens):
        n = min(chunk_tokens, total - first)
        slots = _arrays.alloc_work(op, src, (n,), "int64")
        if _arrays.is_torch(slots):
            slots.copy_(_arrays._torch().arange(first, first + n, dtype=slots.dtype))
        else:
            slots[:] = np.arange(first, first + n, dtype=np.int64)
        dequantize_and_gather_k_cache_sparse(rows[:n], src, slots, block_size, use_fnuz=use_fnuz and
                                             src_record == "fp8_ds_mla", record=src_record,
                                             error_count=error_count, stream=stream)
        quantize_and_insert_k_cache(rows[:n], dst, slots, block_size, True, use_fnuz and dst_record == "fp8_ds_mla",
                                    record=dst_record, error_count=error_count, stream=stream)

