/// \file layout.hpp
/// \brief The paged K-cache block layout ("fp8_ds_mla") as constexpr algebra.
///
/// This header is the single definition of every byte count in the cache.
/// Spec section: docs "Cache layout" (spec/layout.md). Both backends and every
/// tool include it; nothing else may restate these numbers.
///
/// One cache block of `B` tokens, `block_stride` bytes apart:
///
///     offset                      bytes        contents
///     p*576                       448          FP8 codes of token p (7 tiles of 64)
///     p*576 + 448                 128          bf16 RoPE values of token p (64)
///     B*576 + p*8                 7            UE8M0 scale bytes of token p, tile 0..6
///     B*576 + p*8 + 7             1            pad byte, written as 0
///     B*584 .. block_stride-1     -            never read or written
#pragma once

#include <cstdint>

#include "dsv4kv/spec/config.hpp"

namespace dsv4kv::spec {

/// Width of one key row: the attention head dimension of DeepSeek-V4's MLA.
inline constexpr int kHeadDim = 512;
/// Leading values of the row that are quantized to FP8 ("NoPE" part).
inline constexpr int kNopeDim = 448;
/// Trailing values kept in bf16 because RoPE is sensitive to precision.
inline constexpr int kRopeDim = kHeadDim - kNopeDim;
/// Values sharing one UE8M0 scale (the quantization tile).
inline constexpr int kTileSize = 64;
/// Tiles per token: the NoPE part split into tiles.
inline constexpr int kNumTiles = kNopeDim / kTileSize;
/// Bytes of one bf16 value.
inline constexpr int kBf16Bytes = 2;
/// Bytes of the RoPE part of one token.
inline constexpr int kRopeBytes = kRopeDim * kBf16Bytes;
/// Bytes of one token's data record (FP8 codes, then RoPE bf16).
inline constexpr int kTokenDataBytes = kNopeDim + kRopeBytes;
/// Scale bytes per token: one per tile plus one pad byte so records stay 8-byte sized.
inline constexpr int kScaleBytesPerToken = 8;
/// Index of the pad byte inside a token's scale record; always written as 0.
inline constexpr int kScalePadIndex = kNumTiles;
/// Bytes a token occupies in a block (data + scales).
inline constexpr int kTokenBytes = kTokenDataBytes + kScaleBytesPerToken;
/// UE8M0 exponent bias: scale byte s encodes 2^(s - 127).
inline constexpr int kScaleBias = 127;
/// Cache byte alignment the bf16 RoPE stores need: block strides must be even.
inline constexpr int kBlockStrideAlignment = kBf16Bytes;
/// vLLM rounds a block's allocation up to a whole number of token records.
inline constexpr int kVllmBlockRounding = kTokenDataBytes;

static_assert(kHeadDim == 512 && kNopeDim == 448 && kRopeDim == 64);
static_assert(kNumTiles == 7 && kNumTiles * kTileSize == kNopeDim);
static_assert(kTokenDataBytes == 576 && kTokenBytes == 584);
static_assert(kScaleBytesPerToken == kNumTiles + 1);

/// Byte offset, inside its block, of token `pos`'s FP8 codes.
DSV4KV_HD constexpr int64_t token_data_offset(int64_t pos) { return pos * kTokenDataBytes; }

/// Byte offset, inside its block, of FP8 code `i` (0..447) of token `pos`.
DSV4KV_HD constexpr int64_t fp8_code_offset(int64_t pos, int i) { return token_data_offset(pos) + i; }

/// Byte offset, inside its block, of token `pos`'s 64 bf16 RoPE values.
DSV4KV_HD constexpr int64_t rope_offset(int64_t pos) { return token_data_offset(pos) + kNopeDim; }

/// Byte offset, inside its block, of the scale region (after all token data).
DSV4KV_HD constexpr int64_t scale_region_offset(int64_t block_size) { return block_size * kTokenDataBytes; }

/// Byte offset, inside its block, of token `pos`'s scale byte for `tile` (0..7; 7 is the pad).
DSV4KV_HD constexpr int64_t scale_offset(int64_t block_size, int64_t pos, int tile) {
  return scale_region_offset(block_size) + pos * kScaleBytesPerToken + tile;
}

/// Bytes of a block that the layout uses; the rest of `block_stride` is untouched tail.
DSV4KV_HD constexpr int64_t block_data_bytes(int64_t block_size) { return block_size * kTokenBytes; }

/// The block stride vLLM allocates: block_data_bytes rounded up to a multiple of 576.
DSV4KV_HD constexpr int64_t vllm_block_stride(int64_t block_size) {
  return (block_data_bytes(block_size) + kVllmBlockRounding - 1) / kVllmBlockRounding * kVllmBlockRounding;
}

/// Byte offset of block `block` in the cache. 64-bit: caches above 2^31 bytes are normal.
DSV4KV_HD constexpr int64_t block_offset(int64_t block, int64_t block_stride) { return block * block_stride; }

/// Cache block holding slot `slot` (slot = block * block_size + pos).
DSV4KV_HD constexpr int64_t slot_block(int64_t slot, int64_t block_size) { return slot / block_size; }
/// Position of slot `slot` inside its block.
DSV4KV_HD constexpr int64_t slot_pos(int64_t slot, int64_t block_size) { return slot % block_size; }

// The worked example of the spec: block size 64, as vLLM allocates it.
static_assert(scale_region_offset(64) == 36864);
static_assert(scale_offset(64, 63, 7) == 37375);
static_assert(block_data_bytes(64) == 37376);
static_assert(vllm_block_stride(64) == 37440);
static_assert(vllm_block_stride(128) == 74880);
// Spec "64-bit offsets": at vLLM's stride, 57,358 blocks is the largest cache whose every byte
// offset is below 2^31; block 57,358 starts below 2^31 and ends past it.
static_assert(block_offset(57358, vllm_block_stride(64)) <= (int64_t{1} << 31));
static_assert(block_offset(57359, vllm_block_stride(64)) > (int64_t{1} << 31));

}  // namespace dsv4kv::spec
