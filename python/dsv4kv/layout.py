"""The cache layout ("fp8_ds_mla"), re-exported from the C++ spec (spec/layout.hpp).

Nothing is restated here: every number comes from the compiled extension, so Python and C++
can never disagree. One block of ``B`` tokens, ``block_stride`` bytes apart::

    offset                  bytes   contents
    p*576                   448     FP8 codes of token p (7 tiles of 64)
    p*576 + 448             128     bf16 RoPE values of token p (64)
    B*576 + p*8             7       UE8M0 scale bytes of token p, tile 0..6 (2^(byte - 127))
    B*576 + p*8 + 7         1       pad byte, written as 0
"""

from ._ext import (  # noqa: F401  (re-exports)
    block_data_bytes,
    combine_row_width,
    dequantize_element,
    kBf16Bytes,
    kBlockStrideAlignment,
    kCombineRowAlignment,
    kHeadDim,
    kMixedTopkAlignment,
    kNopeDim,
    kNumTiles,
    kRopeBytes,
    kRopeDim,
    kScaleBias,
    kScaleBytesPerToken,
    kScalePadIndex,
    kTileSize,
    kTokenBytes,
    kTokenDataBytes,
    kVllmBlockRounding,
    mixed_row_width,
    rope_offset,
    scale_offset,
    token_data_offset,
    vllm_block_stride,
)

#: Python-style aliases of the spec constants.
HEAD_DIM = kHeadDim
NOPE_DIM = kNopeDim
ROPE_DIM = kRopeDim
TILE_SIZE = kTileSize
NUM_TILES = kNumTiles
TOKEN_DATA_BYTES = kTokenDataBytes
TOKEN_BYTES = kTokenBytes
SCALE_BIAS = kScaleBias
