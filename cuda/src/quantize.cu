/// \file quantize.cu
/// \brief quantize_and_insert_k_cache on the GPU (spec "quantize_and_insert_k_cache").
///
/// One warp per token, kTokensPerWarp tokens in flight per warp. The key row
/// is handled as two halves of 256 values so that every warp-wide access is
/// contiguous: lane L holds values [8L, 8L + 8) of each half (two 16-byte
/// loads, each covering 512 contiguous bytes across the warp). Half A is NoPE
/// tiles 0..3, half B NoPE tiles 4..6 (lanes 0..23) and the RoPE values
/// (lanes 24..31). Eight lanes share a tile (amax by three shuffles); each
/// lane stores its 8 codes with one 8-byte store when the block allows, the
/// first lane of each tile its scale byte, lane 24 of half B the pad byte.
/// The key rows are loaded before the slot is known, so the two loads overlap.

#include "common.cuh"
#include "fp8.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

constexpr int kHalf = sp::kHeadDim / 2;   // values per half row
constexpr int kValsPerLane = kHalf / 32;  // 8
constexpr int kLanesPerTile = sp::kTileSize / kValsPerLane;
constexpr int kNopeLanesB = (sp::kNopeDim - kHalf) / kValsPerLane;  // lanes of half B holding NoPE values
constexpr int kTilesA = kHalf / sp::kTileSize;
static_assert(kHalf % sp::kTileSize == 0, "tiles do not straddle the halves");
static_assert(kLanesPerTile == 8, "the amax reduction uses three shuffles");
static_assert(kNopeLanesB * kValsPerLane + sp::kRopeDim == kHalf, "half B = NoPE tail + RoPE");
constexpr int kWarpsPerCta = 8;
constexpr int kTokensPerWarp = 2;
constexpr int kTokensPerCta = kWarpsPerCta * kTokensPerWarp;

/// Resolved arguments (device pointers, strides in elements, byte offsets 64-bit).
struct QuantizeParams {
  const uint16_t* k;        // [>= T, 512] bf16 bits
  int64_t k_row_stride;     // elements
  const int64_t* slots;     // [T] int64
  int64_t num_tokens;       // T
  uint8_t* cache;           // [num_blocks, block_stride] bytes
  int64_t num_blocks;
  int64_t block_stride;     // bytes, even
  int64_t block_size;
  int32_t* error_count;     // optional
};

/// Amax bits (non-NaN |x|) and non-finite count of 8 bf16 values.
__device__ __forceinline__ uint32_t amax8(const uint4& v, int32_t& nonfinite) {
  uint32_t amax = 0;
#pragma unroll
  for (int i = 0; i < kValsPerLane; ++i) {
    const uint16_t x = half_of(v, i);
    const uint32_t a = sp::bf16_abs_bits(x);
    if (!sp::bf16_is_nan(x) && a > amax) amax = a;
    nonfinite += sp::bf16_is_nonfinite(x) ? 1 : 0;
  }
  return amax;
}

/// Tile scale of the 8 lanes sharing a tile (all 32 lanes must call).
template <Fp8Format kFmt>
__device__ __forceinline__ sp::TileScale tile_scale8(uint32_t amax) {
  amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
  return sp::tile_scale(sp::bf16_to_f32(static_cast<uint16_t>(amax)), kFmt);
}

/// The 8 FP8 codes of 8 bf16 values under scale `ts`.
template <Fp8Format kFmt>
__device__ __forceinline__ uint2 codes8(const uint4& v, sp::TileScale ts, bool lane_finite) {
  uint32_t c[2];
  if (kFmt == Fp8Format::kE4M3Fn && !ts.infinite && lane_finite) {
    const float inv_scale = sp::exp2i(-ts.exponent);  // x / 2^e is exact as a product
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const uint32_t lo = e4m3x2_from_f32(__fmul_rn(sp::bf16_to_f32(half_of(v, 4 * w)), inv_scale),
                                          __fmul_rn(sp::bf16_to_f32(half_of(v, 4 * w + 1)), inv_scale));
      const uint32_t hi = e4m3x2_from_f32(__fmul_rn(sp::bf16_to_f32(half_of(v, 4 * w + 2)), inv_scale),
                                          __fmul_rn(sp::bf16_to_f32(half_of(v, 4 * w + 3)), inv_scale));
      c[w] = lo | (hi << 16);
    }
  } else {
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      c[w] = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) c[w] |= uint32_t{sp::quantize_element(half_of(v, 4 * w + j), ts, kFmt)} << (8 * j);
    }
  }
  return make_uint2(c[0], c[1]);
}

template <Fp8Format kFmt, int kBs>
__global__ void __launch_bounds__(kWarpsPerCta * 32) quantize_kernel(const QuantizeParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t first = int64_t{blockIdx.x} * kTokensPerCta + (threadIdx.x >> 5) * kTokensPerWarp;
  const int64_t bs = block_size_of<kBs>(p.block_size);

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

  int32_t faults = 0;
#pragma unroll
  for (int r = 0; r < kTokensPerWarp; ++r) {
    if (slot[r] == -1) continue;  // padding token (or past the end): skipped silently
    if (slot[r] < 0 || sp::slot_block(slot[r], bs) >= p.num_blocks) {
      if (lane == 0) ++faults;
      continue;
    }
    const int64_t pos = sp::slot_pos(slot[r], bs);
    uint8_t* block = p.cache + sp::block_offset(sp::slot_block(slot[r], bs), p.block_stride);
    const unsigned align = alignment_of(block);

    // Half A: NoPE tiles 0..3.
    int32_t nonfinite_a = 0;
    const sp::TileScale ts_a = tile_scale8<kFmt>(amax8(a[r], nonfinite_a));
    store8(block + sp::fp8_code_offset(pos, lane * kValsPerLane), align, codes8<kFmt>(a[r], ts_a, nonfinite_a == 0));
    if (lane % kLanesPerTile == 0) block[sp::scale_offset(bs, pos, lane / kLanesPerTile)] = ts_a.byte;

    // Half B: NoPE tiles 4..6, then RoPE copied bit for bit.
    int32_t nonfinite_b = 0;
    const uint32_t amax_b = amax8(b[r], nonfinite_b);
    const sp::TileScale ts_b = tile_scale8<kFmt>(amax_b);
    if (lane < kNopeLanesB) {
      store8(block + sp::fp8_code_offset(pos, kHalf + lane * kValsPerLane), align,
             codes8<kFmt>(b[r], ts_b, nonfinite_b == 0));
      if (lane % kLanesPerTile == 0) block[sp::scale_offset(bs, pos, kTilesA + lane / kLanesPerTile)] = ts_b.byte;
    } else {
      store16(block + sp::rope_offset(pos) + (lane - kNopeLanesB) * 16, align, b[r]);
      if (lane == kNopeLanesB) block[sp::scale_offset(bs, pos, sp::kScalePadIndex)] = 0;
      nonfinite_b = 0;  // RoPE values are copied, not quantized: never reported
    }
    faults += nonfinite_a + nonfinite_b;
  }
  count_faults(p.error_count, faults);
}

}  // namespace

void quantize_and_insert_k_cache(const QuantizeInsertArgs& args, cudaStream_t stream) {
  const CacheGeometry geo = validate(args);
  const int64_t num_tokens = args.slot_mapping.size(0);
  if (num_tokens == 0) return;

  QuantizeParams p;
  p.k = args.k.as<const uint16_t>();
  p.k_row_stride = args.k.stride[0];
  p.slots = args.slot_mapping.as<const int64_t>();
  p.num_tokens = num_tokens;
  p.cache = geo.base;
  p.num_blocks = geo.num_blocks;
  p.block_stride = geo.block_stride;
  p.block_size = geo.block_size;
  p.error_count = args.error_count;

  const int64_t ctas = ceil_div(num_tokens, kTokensPerCta);
  if (ctas > kMaxGridX) throw Error("quantize_and_insert_k_cache", "too many tokens for one launch");
  // Small batches get only the warps they need (latency: nothing else to wait for).
  const int64_t warps = ceil_div(num_tokens, kTokensPerWarp);
  const unsigned threads = static_cast<unsigned>(warps < kWarpsPerCta ? warps * 32 : kWarpsPerCta * 32);
  dispatch("quantize_and_insert_k_cache", args.format, geo.block_size, [&](auto fmt, auto bs) {
    DSV4KV_CUDA_LAUNCH((quantize_kernel<decltype(fmt)::value, decltype(bs)::value>), dim3(static_cast<unsigned>(ctas)),
                       dim3(threads), stream, p);
  });
}

}  // namespace dsv4kv::cuda
