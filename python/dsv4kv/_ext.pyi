"""Type stubs of the compiled module dsv4kv._ext (python/src/ext.cpp).

The operation bindings are low level: every argument is explicit and arrays must already be
DLPack-importable (dsv4kv.ops prepares them). Use the wrappers in dsv4kv instead. Every array
argument accepts None; a required one then raises ValueError("<op>: <name> is required"), the
contract's message. Errors are raised as Python exceptions by the bindings themselves.
"""

from typing import Any, Optional, Tuple

# Layout constants (spec/layout.hpp) and row alignments (spec/semantics.hpp).
kHeadDim: int
kNopeDim: int
kRopeDim: int
kTileSize: int
kNumTiles: int
kBf16Bytes: int
kRopeBytes: int
kTokenDataBytes: int
kScaleBytesPerToken: int
kScalePadIndex: int
kTokenBytes: int
kScaleBias: int
kBlockStrideAlignment: int
kVllmBlockRounding: int
kCombineRowAlignment: int
kMixedTopkAlignment: int
#: True when the CUDA backend is compiled in.
has_cuda: bool

def token_data_offset(pos: int) -> int: ...
def rope_offset(pos: int) -> int: ...
def scale_offset(block_size: int, pos: int, tile: int) -> int: ...
def block_data_bytes(block_size: int) -> int: ...
def vllm_block_stride(block_size: int) -> int: ...
def combine_row_width(topk: int, window: int, max_image_tokens: int) -> int: ...
def mixed_row_width(swa_width: int, image_width: int, topk: int, decode_topk: int) -> int: ...
def dequantize_element(code: int, scale_byte: int, use_fnuz: bool = False) -> int:
    """bf16 bits of FP8 `code` under UE8M0 `scale_byte`."""
def dequantize_table(use_fnuz: bool = False) -> bytes:
    """65,536 little-endian uint16 bf16 patterns, indexed [scale_byte * 256 + code]."""
def fp8_nan_table(use_fnuz: bool = False) -> bytes:
    """256 bytes: 1 where the FP8 code is a NaN code."""
def cuda_available() -> Tuple[bool, str]: ...

def quantize_and_insert_k_cache(
    k: Any, k_cache: Any, slot_mapping: Any, block_size: int, is_ue8m0: bool, use_fnuz: bool,
    error_count: Optional[Any], stream: int,
) -> None: ...
def dequantize_and_gather_k_cache(
    out: Any, k_cache: Any, seq_lens: Any, gather_lens: Optional[Any], block_table: Any, block_size: int,
    offset: int, use_fnuz: bool, error_count: Optional[Any], stream: int,
) -> None: ...
def compute_global_topk_indices_and_lens(
    topk_indices: Any, token_to_req_indices: Any, block_table: Any, block_size: int, is_valid_token: Any,
    global_topk_indices: Any, topk_lens: Any, error_count: Optional[Any], stream: int,
) -> None: ...
def combine_topk_swa_indices(
    topk_indices: Any, query_start_loc: Any, seq_lens: Any, gather_lens: Any, window_size: int,
    compress_ratio: int, topk: int, M: int, N: int, left_visible: Optional[Any], right_visible: Optional[Any],
    max_image_tokens: int, combined_indices: Any, combined_lens: Any, error_count: Optional[Any], stream: int,
) -> None: ...
def build_flashinfer_mixed_sparse_indices(
    decode_swa_indices: Any, decode_compressed_indices: Optional[Any], decode_compressed_topk_lens: Optional[Any],
    prefill_topk_indices: Any, query_start_loc: Any, seq_lens: Any, token_to_req_indices: Any,
    swa_block_table: Any, swa_block_size: int, compressed_block_table: Optional[Any], compressed_block_size: int,
    window_size: int, compress_ratio: int, topk: int, decode_compressed_indices_are_local: bool,
    decode_is_valid_token: Optional[Any], swa_block_span: Optional[int], compressed_block_span: Optional[int],
    prefill_left_visible: Optional[Any], prefill_right_visible: Optional[Any], max_image_tokens: int,
    sparse_indices: Any, sparse_topk_lens: Any, error_count: Optional[Any], stream: int,
) -> None: ...

# The cache inspector (python/src/inspect_binding.cpp: the C++ inspector of harness/inspect.*).
class CacheFileError(ValueError): ...
class TokenReport:
    block: int
    pos: int
    scale_bytes: list[int]
    pad_byte: int
    nope_min: float
    nope_max: float
    nan_codes: int
    nan_values: int
    inf_values: int
    rope_bits: list[int]
    flags: list[str]
    def line(self, rope_values: int = 4) -> str: ...
def inspect_main(args: list[str], out: Any, err: Any) -> int: ...
def inspect_usage() -> str: ...
def inspect_columns_line() -> str: ...
def load_cache_file(path: str, tensor: str = "", max_bytes: int = ...) -> Tuple[Any, str]: ...
def safetensors_entries(path: str, max_bytes: int = ...) -> list[Tuple[str, str, list[int], Any]]: ...
def infer_block_size(shape: list[int]) -> Optional[int]: ...
def inspect_tokens(
    cache: Any, block: int, block_size: int = 0, use_fnuz: bool = False, positions: Optional[list[int]] = None,
) -> Tuple[int, list[Tuple[TokenReport, bytes]]]: ...
def summarize_blocks(cache: Any, block_size: int = 0, use_fnuz: bool = False) -> Tuple[int, int, list[Tuple[int, int, int]]]: ...
