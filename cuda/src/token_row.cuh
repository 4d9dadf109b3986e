/// \file token_row.cuh
/// \brief One token's row of the paged cache moved by one warp: the loads of its FP8 codes, scale bytes and RoPE bytes,
/// and the dequantized bf16 stores (both gathers).
///
/// A row is two halves of 256 output values; lane L produces values [8L, 8L + 8) of each half, so every warp-wide store
/// covers 512 contiguous bytes (16 bytes per lane). Half A is NoPE tiles 0..3 (8 codes per lane, one 8-byte load), half
/// B NoPE tiles 4..6 (lanes 0..23) and the RoPE bytes (lanes 24..31, one 16-byte load); the token's 8 scale bytes come
/// in one 8-byte load.
#pragma once

#include "fp8.cuh"
#include "vector_memory.cuh"

namespace dsv4kv::cuda::detail {

/// Chunks of the shared-memory stage of a token's data record (the dense gather's realigned read): the aligned 16-byte
/// chunks a record starting at any even offset may span (for an aligned record, its chunks and the next one, which
/// staged_word_at may read one word of).
constexpr int kRowChunks = sp::kTokenDataBytes / 16 + 1;

/// Output values per lane in each half of a row.
constexpr int kLaneVals = sp::kHeadDim / 2 / 32;  // 8
/// First output value of half B.
constexpr int kHalfB = sp::kHeadDim / 2;
/// Lanes of half B that dequantize NoPE codes; the rest copy RoPE bytes.
constexpr int kCodeLanesB = (sp::kNopeDim - kHalfB) / kLaneVals;  // 24
static_assert(kHalfB % sp::kTileSize == 0 && sp::kTileSize % kLaneVals == 0, "a lane's values share one tile");
static_assert((32 - kCodeLanesB) * kLaneVals == sp::kRopeDim, "the RoPE lanes cover the RoPE values");

/// The bytes one lane needs for its 16 output values of one token.
struct TokenRow {
  uint2 codes_a;  ///< FP8 codes [8L, 8L + 8)
  uint2 scales;   ///< the token's 8 scale bytes (7 tiles + pad)
  uint4 b;        ///< lanes < 24: codes [256 + 8L, +8) in .x/.y; lanes >= 24: 16 RoPE bytes
};

/// Loads lane `lane`'s bytes of the token at position `pos` of `block` (any even address; kAligned: 16-byte aligned,
/// which makes every record of the token 8- or 16-byte aligned).
template <bool kAligned>
__device__ __forceinline__ TokenRow load_token_row(const uint8_t* block, int64_t pos, int64_t bs, int lane) {
  const unsigned align = kAligned ? 16u : alignment_of(block);
  TokenRow r;
  r.codes_a = load8(block + sp::fp8_code_offset(pos, lane * kLaneVals), align);
  r.scales = load8(block + sp::scale_offset(bs, pos, 0), align);
  if (lane < kCodeLanesB) {
    const uint2 c = load8(block + sp::fp8_code_offset(pos, kHalfB + lane * kLaneVals), align);
    r.b = make_uint4(c.x, c.y, 0u, 0u);
  } else {
    r.b = load16(block + sp::rope_offset(pos) + (lane - kCodeLanesB) * kLaneVals * sp::kBf16Bytes, align);
  }
  return r;
}

/// load_token_row_chunks then unstage_token_row: load_token_row for a row that need not be 16-byte aligned (an odd
/// block stride). Lane L loads aligned chunk L and lanes 0..4 chunks 32..36 into the warp's `stage`; each lane reads
/// its bytes back by funnel-shifted 4-byte reads. The chunks stay inside the block (its scale bytes follow the rows, so
/// block size >= 2 is required) or, for a view starting off a 16-byte boundary, inside its 256-byte aligned allocation
/// (spec/layout.md, "The untouched tail"). All 32 lanes must call. A stage, because 2-byte loads make 2.7x the
/// requests and shuffles were slower (see bench/RESULTS.md#gather-odd-stride-stage).
struct StagedRow {
  uint4 c1, c2;  ///< chunks lane and 32 + lane (lanes 0..4) of the row
  uint2 scales;  ///< the scale bytes where 8-byte aligned; else .x = the lane's 2-byte part (lane % 4)
  int a;         ///< the row's offset in its first chunk (even, uniform over the warp)
  bool split;    ///< scales holds 2-byte parts, joined by shuffles in unstage_token_row
};

__device__ __forceinline__ StagedRow load_token_row_chunks(const uint8_t* block, int64_t pos, int64_t bs, int lane) {
  static_assert(sp::kTokenDataBytes % 16 == 0, "a row is whole chunks when aligned");
  const uint8_t* row = block + sp::token_data_offset(pos);
  StagedRow s;
  s.a = static_cast<int>(reinterpret_cast<uintptr_t>(row) & 15u);
  const uint4* chunk = reinterpret_cast<const uint4*>(row - s.a);
  s.c1 = __ldg(chunk + lane);
  s.c2 = lane < kRowChunks - 32 ? __ldg(chunk + 32 + lane) : make_uint4(0u, 0u, 0u, 0u);
  // The 8 scale bytes: one 8-byte load where they are 8-byte aligned, else 2-byte part lane % 4 on each lane (one
  // request for the warp instead of load8's two or four), joined after the stage (see
  // bench/RESULTS.md#gather-odd-stride-stage).
  const uint8_t* scales = block + sp::scale_offset(bs, pos, 0);
  s.split = alignment_of(block) < 8;  // scale bytes start at 8 * (bs * 72 + pos) past the block
  if (s.split)
    s.scales = make_uint2(__ldg(reinterpret_cast<const uint16_t*>(scales) + (lane & 3)), 0u);
  else
    s.scales = __ldg(reinterpret_cast<const uint2*>(scales));
  return s;
}

/// The lane's TokenRow from its StagedRow, through `stage` (this warp's kRowChunks chunks).
__device__ __forceinline__ TokenRow unstage_token_row(const StagedRow& s, uint4* stage, int lane) {
  stage[lane] = s.c1;
  if (lane < kRowChunks - 32) stage[32 + lane] = s.c2;
  __syncwarp();
  const uint32_t* w = reinterpret_cast<const uint32_t*>(stage);
  const unsigned sh = static_cast<unsigned>(s.a & 2) * 8;  // 0 or 16 bits
  // Bytes [s.a + off, +4n) of the chunks as n words (off a multiple of 4: one shift for all).
  const auto words = [&](int off, uint32_t* out, int n) {
    const int i = (s.a + off) >> 2;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < n) out[k] = staged_word_at(w, i + k, sh);
  };
  TokenRow r;
  r.scales = s.scales;
  if (s.split) {  // the same for the whole warp
    const uint32_t pair = s.scales.x | (__shfl_down_sync(0xffffffffu, s.scales.x, 1) << 16);
    r.scales = make_uint2(__shfl_sync(0xffffffffu, pair, 0), __shfl_sync(0xffffffffu, pair, 2));
  }
  uint32_t x[4];
  words(lane * kLaneVals, x, 2);
  r.codes_a = make_uint2(x[0], x[1]);
  if (lane < kCodeLanesB) {
    words(kHalfB + lane * kLaneVals, x, 2);
    r.b = make_uint4(x[0], x[1], 0u, 0u);
  } else {
    words(sp::kNopeDim + (lane - kCodeLanesB) * kLaneVals * sp::kBf16Bytes, x, 4);
    r.b = make_uint4(x[0], x[1], x[2], x[3]);
  }
  __syncwarp();  // the stage is free for the warp's next row
  return r;
}

/// Scale byte `tile` (0..7) of a token's 8 scale bytes.
__device__ __forceinline__ uint8_t scale_byte(uint2 scales, int tile) {
  return static_cast<uint8_t>((tile < 4 ? scales.x : scales.y) >> (8 * (tile & 3)));
}

/// Stores lane `lane`'s 16 output values of row `r` at `dst` (the row's first bf16, any even address; kAligned: 16-byte
/// aligned).
template <Fp8Format kFmt, bool kAligned>
__device__ __forceinline__ void store_token_row(const TokenRow& r, uint8_t* dst, int lane) {
  const unsigned align = kAligned ? 16u : alignment_of(dst);
  const int tile_a = lane * kLaneVals / sp::kTileSize;
  store16(dst + lane * kLaneVals * sp::kBf16Bytes, align, dequantize8<kFmt>(r.codes_a, scale_byte(r.scales, tile_a)));
  uint4 b = r.b;  // RoPE lanes store their bytes unchanged
  if (lane < kCodeLanesB) {
    const int tile_b = (kHalfB + lane * kLaneVals) / sp::kTileSize;
    b = dequantize8<kFmt>(make_uint2(r.b.x, r.b.y), scale_byte(r.scales, tile_b));
  }
  store16(dst + (kHalfB + lane * kLaneVals) * sp::kBf16Bytes, align, b);
}

}  // namespace dsv4kv::cuda::detail
