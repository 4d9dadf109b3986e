/// \file quantize.cu
/// \brief quantize_and_insert_k_cache on the GPU (spec "quantize_and_insert_k_cache").
///
/// One warp per token. Lane L holds values [16L, 16L + 16) of the key row
/// (32 bytes, two 16-byte loads): lanes 0..27 are the NoPE part, four lanes
/// per 64-value tile (amax by two shuffles), lanes 28..31 the RoPE part,
/// copied as bytes. Each NoPE lane stores its 16 codes with one 16-byte store
/// when the cache block is 16-byte aligned; the first lane of each tile
/// stores the tile's scale byte and lane 28 the pad byte, so the 8 scale
/// bytes go out in one coalesced store instruction.

#include "common.cuh"
#include "fp8.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

/// Values of the key row each lane handles.
constexpr int kValsPerLane = 16;
constexpr int kLanesPerTile = sp::kTileSize / kValsPerLane;
constexpr int kNopeLanes = sp::kNopeDim / kValsPerLane;
constexpr int kRopeLanes = sp::kRopeDim / kValsPerLane;
static_assert(kNopeLanes + kRopeLanes == 32, "one warp covers one key row");
static_assert(kLanesPerTile == 4, "the amax reduction uses two shuffles");
constexpr int kWarpsPerCta = 8;

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

template <Fp8Format kFmt, int kBs>
__global__ void __launch_bounds__(kWarpsPerCta * 32) quantize_kernel(const QuantizeParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t t = int64_t{blockIdx.x} * kWarpsPerCta + (threadIdx.x >> 5);
  if (t >= p.num_tokens) return;

  const int64_t slot = p.slots[t];
  if (slot == -1) return;  // padding token: skipped silently
  const int64_t bs = block_size_of<kBs>(p.block_size);
  if (slot < 0 || slot >= p.num_blocks * bs) {
    if (lane == 0 && p.error_count != nullptr) atomicAdd(p.error_count, 1);
    return;
  }
  const int64_t pos = sp::slot_pos(slot, bs);
  uint8_t* block = p.cache + sp::block_offset(sp::slot_block(slot, bs), p.block_stride);
  const unsigned block_align = alignment_of(block);

  // 32 bytes of the key row per lane.
  const uint8_t* krow = reinterpret_cast<const uint8_t*>(p.k + t * p.k_row_stride);
  const unsigned k_align = alignment_of(krow);
  const uint4 lo = load16(krow + lane * 2 * 16, k_align);
  const uint4 hi = load16(krow + lane * 2 * 16 + 16, k_align);
  uint16_t x[kValsPerLane];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    x[i] = half_of(lo, i);
    x[i + 8] = half_of(hi, i);
  }

  if (lane >= kNopeLanes) {
    // RoPE: copied bit for bit. Lane 28 also writes the pad byte of the scale record.
    const int first = lane * kValsPerLane - sp::kNopeDim;  // first RoPE value of this lane
    uint8_t* dst = block + sp::rope_offset(pos) + first * sp::kBf16Bytes;
    store16(dst, block_align, lo);
    store16(dst + 16, block_align, hi);
  }

  // Tile amax over non-NaN |x| (bf16 magnitudes order like their bit patterns);
  // non-finite elements are counted once each.
  uint32_t amax_bits = 0;
  int32_t nonfinite = 0;
#pragma unroll
  for (int i = 0; i < kValsPerLane; ++i) {
    const uint32_t a = sp::bf16_abs_bits(x[i]);
    if (!sp::bf16_is_nan(x[i]) && a > amax_bits) amax_bits = a;
    nonfinite += sp::bf16_is_nonfinite(x[i]) ? 1 : 0;
  }
  amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, 1));
  amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, 2));
  const sp::TileScale ts = sp::tile_scale(sp::bf16_to_f32(static_cast<uint16_t>(amax_bits)), kFmt);

  if (lane % kLanesPerTile == 0) {
    const int tile = lane / kLanesPerTile;  // 0..7; 7 (the RoPE lanes' group) is the pad byte
    block[sp::scale_offset(bs, pos, tile)] = tile < sp::kNumTiles ? ts.byte : uint8_t{0};
  }
  if (lane >= kNopeLanes) return;

  uint32_t codes[4];
  if (kFmt == Fp8Format::kE4M3Fn && !ts.infinite && nonfinite == 0) {
    const float inv_scale = sp::exp2i(-ts.exponent);  // x / 2^e is exact as a product
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t c01 = e4m3x2_from_f32(__fmul_rn(sp::bf16_to_f32(x[4 * w]), inv_scale),
                                           __fmul_rn(sp::bf16_to_f32(x[4 * w + 1]), inv_scale));
      const uint32_t c23 = e4m3x2_from_f32(__fmul_rn(sp::bf16_to_f32(x[4 * w + 2]), inv_scale),
                                           __fmul_rn(sp::bf16_to_f32(x[4 * w + 3]), inv_scale));
      codes[w] = c01 | (c23 << 16);
    }
  } else {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      codes[w] = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) codes[w] |= uint32_t{sp::quantize_element(x[4 * w + j], ts, kFmt)} << (8 * j);
    }
  }
  store16(block + sp::fp8_code_offset(pos, lane * kValsPerLane), block_align,
          make_uint4(codes[0], codes[1], codes[2], codes[3]));
  count_faults(p.error_count, nonfinite);
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

  const int64_t ctas = ceil_div(num_tokens, kWarpsPerCta);
  if (ctas > kMaxGridX) throw Error("quantize_and_insert_k_cache", "too many tokens for one launch");
  const int threads = num_tokens < kWarpsPerCta ? static_cast<int>(num_tokens) * 32 : kWarpsPerCta * 32;
  dispatch("quantize_and_insert_k_cache", args.format, geo.block_size, [&](auto fmt, auto bs) {
    quantize_kernel<decltype(fmt)::value, decltype(bs)::value>
        <<<static_cast<unsigned>(ctas), threads, 0, stream>>>(p);
    DSV4KV_CUDA_CHECK_LAUNCH("quantize_kernel");
  });
}

}  // namespace dsv4kv::cuda
