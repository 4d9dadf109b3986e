/// \file quantize.cu
/// \brief quantize_and_insert_k_cache on the GPU (spec "quantize_and_insert_k_cache").
///
/// Two kernels, one warp per token: quantize_insert_wide_kernel for 16-byte aligned key rows (the usual case; its
/// realigning instance for caches whose blocks are not all 16-byte aligned, e.g. a 37,378-byte block stride) and
/// quantize_insert_narrow_kernel for any other key row.

#include "device_limits.cuh"
#include "dispatch.cuh"
#include "fault_count.cuh"
#include "fp8.cuh"
#include "host_arith.cuh"
#include "launch.cuh"
#include "records.cuh"
#include "vector_memory.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;  // brings sp = dsv4kv::spec

/// Resolved arguments (device pointers, strides in elements, byte offsets 64-bit).
struct QuantizeParams {
  const uint16_t* k;     // [>= T, 512] bf16 bits
  int64_t k_row_stride;  // elements
  const int64_t* slots;  // [T] int64
  int64_t num_tokens;    // T
  CacheGeometry cache;   // [num_blocks, block_stride] bytes (validate()'s geometry)
  int32_t* error_count;  // optional
};

/// Amax bits (non-NaN |x|) and non-finite count of the 8 bf16 values of one 16-byte vector, per
/// element (the spec's rule, shared by both layouts).
__device__ __forceinline__ uint32_t amax8(const uint4& v, int32_t& nonfinite) {
  uint32_t amax = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint16_t x = half_of(v, i);
    const uint32_t a = sp::bf16_abs_bits(x);
    if (!sp::bf16_is_nan(x) && a > amax) amax = a;
    nonfinite += sp::bf16_is_nonfinite(x) ? 1 : 0;
  }
  return amax;
}

/// Tile scale of the kLanes lanes sharing a tile (all 32 lanes must call): the amax reduced over the tile's lanes by
/// xor-shuffles.
template <Fp8Format kFmt, int kLanes>
__device__ __forceinline__ sp::TileScale tile_scale_over(uint32_t amax) {
#pragma unroll
  for (int m = 1; m < kLanes; m <<= 1) amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  return sp::tile_scale(sp::bf16_to_f32(static_cast<uint16_t>(amax)), kFmt);
}

/// The 4 FP8 codes (one word, value i in the low byte) of bf16 values i..i+3 of `v` under scale `ts`: the hardware
/// conversion where it equals the spec (e4m3fn, a finite scale, a lane without non-finite values),
/// spec::quantize_element otherwise.
template <Fp8Format kFmt>
__device__ __forceinline__ uint32_t codes4(const uint4& v, int i, sp::TileScale ts, bool lane_finite) {
  if (kFmt == Fp8Format::kE4M3Fn && !ts.infinite && lane_finite) {
    const float inv_scale = sp::exp2i(-ts.exponent);  // x / 2^e is exact as a product
    const uint32_t lo = e4m3x2_from_f32(__fmul_rn(sp::bf16_to_f32(half_of(v, i)), inv_scale),
                                        __fmul_rn(sp::bf16_to_f32(half_of(v, i + 1)), inv_scale));
    const uint32_t hi = e4m3x2_from_f32(__fmul_rn(sp::bf16_to_f32(half_of(v, i + 2)), inv_scale),
                                        __fmul_rn(sp::bf16_to_f32(half_of(v, i + 3)), inv_scale));
    return lo | (hi << 16);
  }
  uint32_t c = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) c |= uint32_t{sp::quantize_element(half_of(v, i + j), ts, kFmt)} << (8 * j);
  return c;
}

/// The narrow layout, for key rows that are not 16-byte aligned: the key row as two halves of 256 values, lane L
/// holding values [8L, 8L + 8) of each half (8-byte code stores, single-byte scale stores, 2 tokens per warp).
/// Odd-stride caches with aligned key rows take the wide kernel's realigning instance, which is faster (see
/// bench/RESULTS.md#quantize-odd-stride).
namespace narrow {
constexpr int kHalf = sp::kHeadDim / 2;   // values per half row
constexpr int kValsPerLane = kHalf / 32;  // 8
constexpr int kLanesPerTile = sp::kTileSize / kValsPerLane;
constexpr int kNopeLanesB = (sp::kNopeDim - kHalf) / kValsPerLane;  // lanes of half B holding NoPE values
constexpr int kTilesA = kHalf / sp::kTileSize;
static_assert(kHalf % sp::kTileSize == 0, "tiles do not straddle the halves");
static_assert(kNopeLanesB * kValsPerLane + sp::kRopeDim == kHalf, "half B = NoPE tail + RoPE");
constexpr int kWarpsPerCta = 8;
constexpr int kTokensPerWarp = 2;
constexpr int kTokensPerCta = kWarpsPerCta * kTokensPerWarp;

template <Fp8Format kFmt, int kBs>
__global__ void __launch_bounds__(kWarpsPerCta * 32) quantize_insert_narrow_kernel(const QuantizeParams p) {
  grid_dependency_begin();
  const int lane = threadIdx.x & 31;
  const int64_t first = int64_t{blockIdx.x} * kTokensPerCta + (threadIdx.x >> 5) * kTokensPerWarp;
  const int64_t bs = block_size_of<kBs>(p.cache.block_size);

  // Issue every load first: key halves and slots of all the warp's tokens.
  uint4 a[kTokensPerWarp], b[kTokensPerWarp];
  int64_t slot[kTokensPerWarp];
#pragma unroll
  for (int r = 0; r < kTokensPerWarp; ++r) {
    slot[r] = -1;
    if (first + r >= p.num_tokens) continue;
    const uint8_t* krow = reinterpret_cast<const uint8_t*>(p.k + (first + r) * p.k_row_stride);
    const unsigned k_align = alignment_of(krow);
    a[r] = load16(krow + lane * 16, k_align);
    b[r] = load16(krow + kHalf * sp::kBf16Bytes + lane * 16, k_align);
    slot[r] = __ldg(p.slots + first + r);
  }

  sp::Faults f;
#pragma unroll
  for (int r = 0; r < kTokensPerWarp; ++r) {
    if (slot[r] == -1) continue;  // padding token (or past the end): skipped silently
    if (slot[r] < 0 || sp::slot_block(slot[r], bs) >= p.cache.num_blocks) {
      if (lane == 0) f.add();
      continue;
    }
    const int64_t pos = sp::slot_pos(slot[r], bs);
    uint8_t* block = p.cache.base + sp::block_offset(sp::slot_block(slot[r], bs), p.cache.block_stride);
    const unsigned align = alignment_of(block);

    // Half A: NoPE tiles 0..3.
    int32_t nonfinite_a = 0;
    const sp::TileScale ts_a = tile_scale_over<kFmt, kLanesPerTile>(amax8(a[r], nonfinite_a));
    const bool finite_a = nonfinite_a == 0;
    store8(block + sp::fp8_code_offset(pos, lane * kValsPerLane), align,
           make_uint2(codes4<kFmt>(a[r], 0, ts_a, finite_a), codes4<kFmt>(a[r], 4, ts_a, finite_a)));
    if (lane % kLanesPerTile == 0) block[sp::scale_offset(bs, pos, lane / kLanesPerTile)] = ts_a.byte;

    // Half B: NoPE tiles 4..6, then RoPE copied bit for bit.
    int32_t nonfinite_b = 0;
    const uint32_t amax_b = amax8(b[r], nonfinite_b);
    const sp::TileScale ts_b = tile_scale_over<kFmt, kLanesPerTile>(amax_b);
    if (lane < kNopeLanesB) {
      const bool finite_b = nonfinite_b == 0;
      store8(block + sp::fp8_code_offset(pos, kHalf + lane * kValsPerLane), align,
             make_uint2(codes4<kFmt>(b[r], 0, ts_b, finite_b), codes4<kFmt>(b[r], 4, ts_b, finite_b)));
      if (lane % kLanesPerTile == 0) block[sp::scale_offset(bs, pos, kTilesA + lane / kLanesPerTile)] = ts_b.byte;
    } else {
      store16(block + sp::rope_offset(pos) + (lane - kNopeLanesB) * 16, align, b[r]);
      if (lane == kNopeLanesB) block[sp::scale_offset(bs, pos, sp::kScalePadIndex)] = 0;
      nonfinite_b = 0;  // RoPE values are copied, not quantized: never reported
    }
    f.add(nonfinite_a + nonfinite_b);
  }
  count_faults(p.error_count, f.n);
}

}  // namespace narrow

/// Stores bytes [kLo, kHi) of `v` (kLo, kHi even) at the same offsets of the 16-byte aligned `chunk`: the largest
/// aligned 2-, 4- or 8-byte pieces, offsets known at compile time. Only those bytes are written.
template <int kLo, int kHi>
__device__ __forceinline__ void store_chunk_bytes(uint8_t* chunk, const uint4& v) {
  static_assert(kLo % 2 == 0 && kHi % 2 == 0 && kHi <= 16);
  if constexpr (kLo < kHi) {
    constexpr int kSize = (kLo % 8 == 0 && kLo + 8 <= kHi) ? 8 : (kLo % 4 == 0 && kLo + 4 <= kHi) ? 4 : 2;
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
    if constexpr (kSize == 8)
      *reinterpret_cast<uint2*>(chunk + kLo) = make_uint2(w[kLo / 4], w[kLo / 4 + 1]);
    else if constexpr (kSize == 4)
      *reinterpret_cast<uint32_t*>(chunk + kLo) = w[kLo / 4];
    else
      *reinterpret_cast<uint16_t*>(chunk + kLo) = half_of(v, kLo / 2);
    store_chunk_bytes<kLo + kSize, kHi>(chunk, v);
  }
}

/// Bytes [16 - kA, 32 - kA) of the 32 bytes `prev` then `cur` (kA even, 0..14): the aligned memory chunk of a record
/// that starts kA bytes past a 16-byte boundary, whose record chunks prev and cur are (the last kA bytes of prev, then
/// the first 16 - kA of cur). Words of prev below (16 - kA) / 4 are not read.
template <int kA>
__device__ __forceinline__ uint4 join_chunks(const uint4& prev, const uint4& cur) {
  const uint32_t s[8] = {prev.x, prev.y, prev.z, prev.w, cur.x, cur.y, cur.z, cur.w};
  constexpr int kWord = (16 - kA) / 4;
  constexpr unsigned kShift = (16 - kA) % 4 * 8;  // 0 or 16 bits
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    o[i] = kShift == 0 ? s[kWord + i] : __funnelshift_r(s[kWord + i], s[kWord + i + 1], kShift);
  return make_uint4(o[0], o[1], o[2], o[3]);
}

/// The words of the lane below's `v` that join_chunks<kA> reads as `prev` (words (16 - kA) / 4 and up; the others are
/// this lane's own, unused): one shuffle per word, none when kA is 0.
template <int kA>
__device__ __forceinline__ uint4 words_from_lane_below(const uint4& v) {
  constexpr int kWord = (16 - kA) / 4;
  uint4 r = v;
  if constexpr (kWord <= 0) r.x = __shfl_up_sync(0xffffffffu, v.x, 1);
  if constexpr (kWord <= 1) r.y = __shfl_up_sync(0xffffffffu, v.y, 1);
  if constexpr (kWord <= 2) r.z = __shfl_up_sync(0xffffffffu, v.z, 1);
  if constexpr (kWord <= 3) r.w = __shfl_up_sync(0xffffffffu, v.w, 1);
  return r;
}

/// The wide layout (aligned key rows): lane L holds values [16L, 16L + 16), lanes 0..27 the NoPE values (four lanes per
/// tile), lanes 28..31 the RoPE values; one 16-byte store per NoPE lane, the 8 scale bytes gathered by shuffles into
/// one 8-byte store. One token per warp: 65,536 tokens 28.7 us against 30.1 with 2 (see
/// bench/RESULTS.md#quantize-wide-layout).
namespace wide {
constexpr int kValsPerLane = sp::kHeadDim / 32;              // 16
constexpr int kLanesPerTile = sp::kTileSize / kValsPerLane;  // 4
constexpr int kNopeLanes = sp::kNopeDim / kValsPerLane;      // 28
constexpr int kRopeLanes = sp::kRopeDim / kValsPerLane;      // 4
constexpr int kScaleGroupLanes = 4 * kLanesPerTile;          // lanes whose tiles share one scale word
static_assert(sp::kHeadDim % 32 == 0 && sp::kTileSize % kValsPerLane == 0, "a lane's values lie in one tile");
static_assert(kNopeLanes + kRopeLanes == 32, "one warp covers a key row");
static_assert(sp::rope_offset(0) == kNopeLanes * 16, "the RoPE bytes start at the record's 16-byte chunk kNopeLanes");
static_assert(sp::kScaleBytesPerToken == 8 && sp::kScalePadIndex == sp::kNumTiles,
              "scale bytes: one word per 16 lanes, pad byte last (zero from the RoPE lanes)");
static_assert(kScaleGroupLanes * 2 == 32, "two scale words per token");
constexpr int kWarpsPerCta = 8;
constexpr int kTokensPerWarp = 1;

/// Amax bits and non-finite count of the 16 bf16 values in `v[0..1]`, as amax8 gives them. The
/// |x| bits of 2 values at a time go through a 16x2 unsigned max; when the largest is below the
/// inf pattern 0x7F80 every value is finite (no NaN to skip, nothing to count) and it is the amax. Otherwise amax8
/// decides, per element.
__device__ __forceinline__ uint32_t amax16(const uint4 (&v)[2], int32_t& nonfinite) {
  const uint32_t* a = reinterpret_cast<const uint32_t*>(&v[0]);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(&v[1]);
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m = __vmaxu2(m, a[i] & 0x7FFF7FFFu);
    m = __vmaxu2(m, b[i] & 0x7FFF7FFFu);
  }
  const uint32_t m16 = max(m & 0xFFFFu, m >> 16);
  if (m16 < 0x7F80u) return m16;
  const uint32_t lo = amax8(v[0], nonfinite);
  const uint32_t hi = amax8(v[1], nonfinite);
  return max(lo, hi);
}

/// The 16 FP8 codes of a NoPE lane's values `v` under its tile scale `ts` (value i in byte i).
template <Fp8Format kFmt>
__device__ __forceinline__ uint4 codes16(const uint4 (&v)[2], sp::TileScale ts, bool lane_finite) {
  return make_uint4(codes4<kFmt>(v[0], 0, ts, lane_finite), codes4<kFmt>(v[0], 4, ts, lane_finite),
                    codes4<kFmt>(v[1], 0, ts, lane_finite), codes4<kFmt>(v[1], 4, ts, lane_finite));
}

/// The token's 8 scale bytes as two words, from each lane's contribution `word` (a tile's first lane its scale byte at
/// its place in the word, other lanes 0). The first shuffles leave lanes 0, 4, 8, 12 with the tile leaders of lanes
/// 0..15 (scale bytes 0..3) and lanes 16, 20, 24, 28 with those of lanes 16..31 (bytes 4..7, the pad byte zero); the
/// last brings lane 16's word to every lane. Only lane 0's result is stored.
__device__ __forceinline__ uint2 scale_words(uint32_t word) {
  word |= __shfl_xor_sync(0xffffffffu, word, kLanesPerTile);
  word |= __shfl_xor_sync(0xffffffffu, word, 2 * kLanesPerTile);
  return make_uint2(word, __shfl_sync(0xffffffffu, word, kScaleGroupLanes));
}

/// Writes a token's 8 scale bytes and data record from the warp's registers, for a record at dst = at - 16c with kA =
/// dst % 16 (even, warp-uniform). `cur` is this lane's record chunk c (a NoPE lane's 16 codes, c = L; RoPE lane 28 + j:
/// c = 28 + 2j), `last` its last chunk. Memory chunk k joins the tail of record chunk k - 1 (from the lane below, by
/// shuffles) with the head of chunk k; lanes 0 and 31 write only this record's bytes of the chunks shared with its
/// neighbours. Every record byte is written once, nothing else. Registers, not a shared-memory stage: a third of the
/// stage's instructions (see bench/RESULTS.md#quantize-realigned-store).
template <int kA>
__device__ __forceinline__ void store_token_from_lanes(uint8_t* at, uint8_t* scales, uint2 scale_bytes,
                                                       const uint4& cur, const uint4& last, int lane) {
  if (lane == 0) store8(scales, kA % 8 == 0 ? 8u : kA % 4 == 0 ? 4u : 2u, scale_bytes);
  const uint4 m = join_chunks<kA>(words_from_lane_below<kA>(last), cur);  // memory chunk c
  if (kA != 0 && lane == 0)
    store_chunk_bytes<kA, 16>(at - kA, m);  // the head: bytes below kA belong to the record before
  else
    store16_global(at - kA, m);
  if (lane >= kNopeLanes) {
    store16_global(at + 16 - kA, join_chunks<kA>(cur, last));
    if (kA != 0 && lane == 31)  // the tail: bytes from kA on belong to the record after
      store_chunk_bytes<0, kA>(at + 32 - kA, join_chunks<kA>(last, last));
  }
}

/// store_token_from_lanes for the record at `dst`, a = dst % 16 (even) known only at run time: one uniform branch to
/// its compile-time instance. Each store's address is `at` or `scales` plus a compile-time offset, which the store
/// takes as an immediate (no address arithmetic per instance; see bench/RESULTS.md#quantize-realigned-store).
__device__ __forceinline__ void store_token_from_lanes(uint8_t* dst, int a, uint8_t* scales, uint2 scale_bytes,
                                                       const uint4& cur, const uint4& last, int lane) {
  static_assert(kNopeLanes + 2 * kRopeLanes == sp::kTokenDataBytes / 16, "36 record chunks over 32 lanes");
  const unsigned c = lane < kNopeLanes ? lane : 2 * lane - kNopeLanes;  // record chunk of `cur`
  uint8_t* const at = dst + 16 * c;
  switch (a) {
    case 0: store_token_from_lanes<0>(at, scales, scale_bytes, cur, last, lane); break;
    case 2: store_token_from_lanes<2>(at, scales, scale_bytes, cur, last, lane); break;
    case 4: store_token_from_lanes<4>(at, scales, scale_bytes, cur, last, lane); break;
    case 6: store_token_from_lanes<6>(at, scales, scale_bytes, cur, last, lane); break;
    case 8: store_token_from_lanes<8>(at, scales, scale_bytes, cur, last, lane); break;
    case 10: store_token_from_lanes<10>(at, scales, scale_bytes, cur, last, lane); break;
    case 12: store_token_from_lanes<12>(at, scales, scale_bytes, cur, last, lane); break;
    default:
      store_token_from_lanes<14>(at, scales, scale_bytes, cur, last, lane);
      break;  // even (validate's block stride rule)
  }
}

/// Quantizes token `t` with one warp (all lanes call); returns this lane's faults. kRealign: a launch whose cache
/// blocks are not all 16-byte aligned (an odd block stride); rows and scale bytes are written by
/// store_token_from_lanes.
template <Fp8Format kFmt, int kBs, bool kRealign>
__device__ __forceinline__ int32_t token(const QuantizeParams& p, int64_t t, int lane) {
  const int64_t bs = block_size_of<kBs>(p.cache.block_size);

  // Both loads first: the slot (one broadcast word) and this lane's 32 bytes of the key row.
  const int64_t slot = __ldg(p.slots + t);
  // The launch takes this kernel only for 16-byte aligned key rows (rows_aligned16): whole loads.
  const uint4* krow = reinterpret_cast<const uint4*>(p.k + t * p.k_row_stride) + lane * 2;
  uint4 v[2];
  v[0] = __ldg(krow);
  v[1] = __ldg(krow + 1);

  // The tile scale before the slot tests: its shuffles keep ptxas from sinking the key loads below those branches,
  // where they would wait for the slot (a dependent round trip more).
  int32_t nonfinite = 0;
  const sp::TileScale ts = tile_scale_over<kFmt, kLanesPerTile>(amax16(v, nonfinite));

  if (slot == -1) return 0;  // padding token: skipped silently
  if (slot < 0 || sp::slot_block(slot, bs) >= p.cache.num_blocks) return lane == 0 ? 1 : 0;
  const int64_t pos = sp::slot_pos(slot, bs);
  uint8_t* block = p.cache.base + sp::block_offset(sp::slot_block(slot, bs), p.cache.block_stride);
  // Scale word of this lane's group of four tiles: the first lane of each tile contributes its byte; the RoPE lanes
  // contribute the zero pad byte.
  uint32_t word = 0;
  if constexpr (kRealign) {
    // The scale bytes and the row from the lanes' registers (store_token_from_lanes). Rows and the scale area start at
    // multiples of 16 and 8 bytes past the block: both are aligned as the block, whose offset in its 16-byte chunk is
    // taken once.
    static_assert(sp::kTokenDataBytes % 16 == 0 && sp::kScaleBytesPerToken == 8, "rows 16-, scales 8-byte multiples");
    const int a = static_cast<int>(reinterpret_cast<uintptr_t>(block) & 15u);  // even
    uint4 cur, last;
    if (lane < kNopeLanes) {
      cur = last = codes16<kFmt>(v, ts, nonfinite == 0);
      if (lane % kLanesPerTile == 0) word = uint32_t{ts.byte} << (8 * ((lane / kLanesPerTile) % 4));
    } else {
      cur = v[0];
      last = v[1];
      nonfinite = 0;  // RoPE values are copied, not quantized: never reported
    }
    store_token_from_lanes(block + sp::token_data_offset(pos), a, block + sp::scale_offset(bs, pos, 0),
                           scale_words(word), cur, last, lane);
    return nonfinite;
  } else {
    // Every block is 16-byte aligned (the launch's rows_aligned16 of the cache).
    if (lane < kNopeLanes) {
      const uint4 codes = codes16<kFmt>(v, ts, nonfinite == 0);
      store16(block + sp::fp8_code_offset(pos, lane * kValsPerLane), 16u, codes);
      if (lane % kLanesPerTile == 0) word = uint32_t{ts.byte} << (8 * ((lane / kLanesPerTile) % 4));
    } else {
      uint8_t* dst = block + sp::rope_offset(pos) + (lane - kNopeLanes) * kValsPerLane * sp::kBf16Bytes;
      store16(dst, 16u, v[0]);
      store16(dst + 16, 16u, v[1]);
      nonfinite = 0;  // RoPE values are copied, not quantized: never reported
    }
    const uint2 scales = scale_words(word);
    if (lane == 0) store8(block + sp::scale_offset(bs, pos, 0), 8u, scales);
    return nonfinite;
  }
}

/// CTAs per multiprocessor the instances of a specialised block size are compiled for: as many CTAs of kWarpsPerCta
/// warps as fill a multiprocessor's threads (kThreadsPerSm): 32 registers on sm_90a, no spills. The generic block size
/// stays uncapped (its 64-bit divisions spill under the cap). The cap took 65,536 aligned tokens from 31.2 to 29.3 us
/// (bench/RESULTS.md#register-caps).
constexpr int kCtasPerSm = kThreadsPerSm / (kWarpsPerCta * 32);

template <Fp8Format kFmt, int kBs, bool kRealign>
__global__ void __launch_bounds__(kWarpsPerCta * 32, kBs == kGenericBlockSize ? 1 : kCtasPerSm)
    quantize_insert_wide_kernel(const QuantizeParams p) {
  grid_dependency_begin();
  const int64_t t = int64_t{blockIdx.x} * kWarpsPerCta + (threadIdx.x >> 5);
  sp::Faults f;
  if (t < p.num_tokens)  // whole warps only
    f.add(token<kFmt, kBs, kRealign>(p, t, threadIdx.x & 31));
  count_faults(p.error_count, f.n);
}

}  // namespace wide

}  // namespace

void quantize_and_insert_k_cache(const QuantizeInsertArgs& args, cudaStream_t stream) {
  QuantizeParams p;
  p.cache = validate(args);
  const int64_t num_tokens = args.slot_mapping.size(0);
  if (args.record != Record::kFp8DsMla) {
    const RecordQuantizeParams rp{args.k.as<const uint16_t>(),
                                  args.k.shape[0] > 1 ? args.k.stride[0] : 0,
                                  args.slot_mapping.as<const int64_t>(),
                                  num_tokens,
                                  p.cache,
                                  args.error_count};
    return launch_record_quantize(QuantizeInsertArgs::kName, args.record, rp, stream);
  }
  if (num_tokens == 0) return;
  p.k = args.k.as<const uint16_t>();
  // A single row's stride is never used (and validate() does not bound it): 0, so the alignment test below cannot
  // overflow. Otherwise the extent rule bounds stride * 2 bytes.
  p.k_row_stride = args.k.shape[0] > 1 ? args.k.stride[0] : 0;
  p.slots = args.slot_mapping.as<const int64_t>();
  p.num_tokens = num_tokens;
  p.error_count = args.error_count;

  // The wide kernel where its 16-byte key loads are whole (aligned key rows); its realigning instance where cache
  // blocks may start off 16-byte boundaries.
  const bool use_wide = rows_aligned16(p.k, p.k_row_stride * sp::kBf16Bytes);
  const bool realign = !rows_aligned16(p.cache.base, p.cache.block_stride);
  const int tokens_per_warp = use_wide ? wide::kTokensPerWarp : narrow::kTokensPerWarp;
  const int warps_per_cta = use_wide ? wide::kWarpsPerCta : narrow::kWarpsPerCta;
  const int64_t ctas = ceil_div(num_tokens, int64_t{tokens_per_warp} * warps_per_cta);
  if (ctas > kMaxGridX) throw Error("quantize_and_insert_k_cache", "too many tokens for one launch");
  // Small batches get only the warps they need (latency: nothing else to wait for).
  const int64_t warps = ceil_div(num_tokens, tokens_per_warp);
  const unsigned threads = static_cast<unsigned>(warps < warps_per_cta ? warps * 32 : warps_per_cta * 32);
  dispatch(
      [&](auto fmt, auto bs, auto wide_layout, auto realign_rows) {
        constexpr Fp8Format kFmt = decltype(fmt)::value;
        constexpr int kBs = decltype(bs)::value;
        if constexpr (decltype(wide_layout)::value)
          DSV4KV_CUDA_LAUNCH((wide::quantize_insert_wide_kernel<kFmt, kBs, decltype(realign_rows)::value>),
                             dim3(static_cast<unsigned>(ctas)), dim3(threads), stream, p);
        else if constexpr (!decltype(realign_rows)::value)  // the narrow kernel takes any alignment
          DSV4KV_CUDA_LAUNCH((narrow::quantize_insert_narrow_kernel<kFmt, kBs>), dim3(static_cast<unsigned>(ctas)),
                             dim3(threads), stream, p);
      },
      format_choice("quantize_and_insert_k_cache", args.format), block_size_choice(p.cache.block_size),
      flag_choice(use_wide), flag_choice(use_wide && realign));
}

}  // namespace dsv4kv::cuda
