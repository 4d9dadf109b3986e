/// \file token_row.cuh
/// \brief One token's row of the paged cache moved by one warp: the loads of its FP8 codes,
/// scale bytes and RoPE bytes, and the dequantized bf16 stores (both gathers).
///
/// A row is two halves of 256 output values; lane L produces values [8L, 8L + 8) of each half, so
/// every warp-wide store covers 512 contiguous bytes (16 bytes per lane). Half A is NoPE tiles
/// 0..3 (8 codes per lane, one 8-byte load), half B NoPE tiles 4..6 (lanes 0..23) and the RoPE
/// bytes (lanes 24..31, one 16-byte load); the token's 8 scale bytes come in one 8-byte load.
#pragma once

#include "common.cuh"
#include "fp8.cuh"

namespace dsv4kv::cuda::detail {

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

/// Loads lane `lane`'s bytes of the token at position `pos` of `block` (any even address;
/// kAligned: 16-byte aligned, which makes every record of the token 8- or 16-byte aligned).
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

/// load_token_row for a token whose row is not 16-byte aligned (an odd block stride), with one
/// 16-byte load per aligned chunk of the row instead of 2-byte loads: lane L loads aligned chunk
/// L and lanes 0..4 chunks 32..36 (the chunks from the one holding the row's first byte to the one
/// holding its last), and shuffles move the bytes to the lanes load_token_row gives them to.
/// Every chunk read holds bytes of the row; the last one lies inside the block (the block's scale
/// bytes follow its rows: 8 x block size >= 16 bytes, so block size >= 2 is required), the first
/// one starts before the cache view only when the view itself starts off a 16-byte boundary, and
/// then inside the allocation holding it (allocations start 256-byte aligned). All 32 lanes must
/// call. Why: 2-byte loads made the odd block stride 2.7x the load requests of the aligned one
/// (bench/RESULTS.md, seventh session calls 8-10).
__device__ __forceinline__ TokenRow load_token_row_realigned(const uint8_t* block, int64_t pos, int64_t bs,
                                                             int lane) {
  static_assert(sp::kTokenDataBytes == 36 * 16 && kHalfB == 16 * 16 && sp::kNopeDim == 28 * 16,
                "pieces: 16 of half A codes, 12 of half B codes, 8 of RoPE bytes");
  const uint8_t* row = block + sp::token_data_offset(pos);
  const int a = static_cast<int>(reinterpret_cast<uintptr_t>(row) & 15u);  // 2..14, even
  const uint4* chunk = reinterpret_cast<const uint4*>(row - a);
  const uint4 c1 = __ldg(chunk + lane);
  const uint4 c2 = lane <= 4 ? __ldg(chunk + 32 + lane) : make_uint4(0u, 0u, 0u, 0u);
  TokenRow r;
  r.scales = load8(block + sp::scale_offset(bs, pos, 0), alignment_of(block));
  // Piece k of the row (bytes [16k, 16k + 16)) is bytes [a, a + 16) of chunks k and k + 1:
  // pieces 0..31 on lanes 0..31 (p1), pieces 32..35 on lanes 0..3 (p2).
  const int next = (lane + 1) & 31;
  const uint4 n1 = shfl4(select4(lane == 0, c2, c1), next);  // lane 31 gets chunk 32
  const uint4 n2 = shfl4(c2, next);
  const uint4 p1 = window16(c1, n1, a);
  const uint4 p2 = window16(c2, n2, a);
  // Codes of half A: bytes [8L, 8L + 8), half L % 2 of piece L / 2.
  const uint4 qa = shfl4(p1, lane >> 1);
  r.codes_a = (lane & 1) ? make_uint2(qa.z, qa.w) : make_uint2(qa.x, qa.y);
  // Half B: codes [256 + 8L, +8) (piece 16 + L / 2) on the code lanes, the RoPE bytes (piece
  // L + 4, 28..35) on the others.
  const int piece_b = lane < kCodeLanesB ? 16 + (lane >> 1) : lane + 4;
  const uint4 qb = shfl4(select4(lane < 4, p2, p1), piece_b & 31);
  if (lane < kCodeLanesB) {
    r.b = (lane & 1) ? make_uint4(qb.z, qb.w, 0u, 0u) : make_uint4(qb.x, qb.y, 0u, 0u);
  } else {
    r.b = qb;
  }
  return r;
}

/// Scale byte `tile` (0..7) of a token's 8 scale bytes.
__device__ __forceinline__ uint8_t scale_byte(uint2 scales, int tile) {
  return static_cast<uint8_t>((tile < 4 ? scales.x : scales.y) >> (8 * (tile & 3)));
}

/// Stores lane `lane`'s 16 output values of row `r` at `dst` (the row's first bf16, any even
/// address; kAligned: 16-byte aligned).
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
