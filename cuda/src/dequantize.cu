/// \file dequantize.cu
/// \brief dequantize_and_gather_k_cache on the GPU (spec "dequantize_and_gather_k_cache").
///
/// The grid is (row chunks) x (requests), flattened: a request's rows are
/// spread over many CTAs, so one long request fills the chip as well as many
/// short ones. The host does not know the gather lengths (they live on the
/// device), so the chunks cover the most rows a request can write,
/// out.shape[1] - offset; CTAs past a request's length exit at once.
/// One warp per output row, kRowsPerWarp rows in flight per warp: lane L
/// reads 16 FP8 codes (lanes 0..27, one 16-byte load plus its tile's scale
/// byte) or 32 RoPE bytes (lanes 28..31) and writes output elements
/// [16L, 16L + 16) with two 16-byte stores.

#include "common.cuh"
#include "fp8.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

constexpr int kValsPerLane = 16;
constexpr int kLanesPerTile = sp::kTileSize / kValsPerLane;
constexpr int kNopeLanes = sp::kNopeDim / kValsPerLane;
static_assert(kNopeLanes + sp::kRopeDim / kValsPerLane == 32, "one warp covers one row");
constexpr int kWarpsPerCta = 4;
constexpr int kRowsPerWarp = 2;
constexpr int kRowsPerCta = kWarpsPerCta * kRowsPerWarp;

struct GatherParams {
  uint16_t* out;             // [>= R, out_rows, 512] bf16 bits
  int64_t out_s0, out_s1;    // strides in elements
  int64_t row_limit;         // out_rows - offset: rows a request may write
  int64_t offset;
  const uint8_t* cache;      // [num_blocks, block_stride] bytes
  int64_t num_blocks;
  int64_t block_stride;
  int64_t block_size;
  const int32_t* seq_lens;     // [R]
  const int32_t* gather_lens;  // [>= R] or null
  const int32_t* block_table;  // [>= R, cols], row stride bt_stride
  int64_t bt_stride, bt_cols;
  int64_t chunks;              // CTAs per request
  int32_t* error_count;
};

/// Where one output row's source token lives, or nothing (row skipped).
struct Source {
  const uint8_t* block;  // null: row not written
  int64_t pos;
};

template <Fp8Format kFmt>
__device__ __forceinline__ uint32_t dequant_pair(uint32_t codes2, float mult, uint8_t scale_byte) {
  if constexpr (kFmt == Fp8Format::kE4M3Fn) {
    const float2 v = f32x2_from_e4m3x2(codes2);
    return bf16x2_from_f32(__fmul_rn(v.x, mult), __fmul_rn(v.y, mult));
  } else {
    return uint32_t{sp::dequantize_element(static_cast<uint8_t>(codes2), scale_byte, kFmt)} |
           (uint32_t{sp::dequantize_element(static_cast<uint8_t>(codes2 >> 8), scale_byte, kFmt)} << 16);
  }
}

template <Fp8Format kFmt, int kBs>
__global__ void __launch_bounds__(kWarpsPerCta * 32) gather_kernel(const GatherParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t b = blockIdx.x / p.chunks;
  const int64_t chunk = blockIdx.x - b * p.chunks;

  const int64_t seq_len = p.seq_lens[b];
  const int64_t g = p.gather_lens != nullptr ? int64_t{p.gather_lens[b]} : seq_len;
  if (seq_len < 0 || g < 0 || g > seq_len) {
    if (chunk == 0 && threadIdx.x == 0 && p.error_count != nullptr) atomicAdd(p.error_count, 1);
    return;
  }
  // Rows that would land past out.shape[1] are skipped, counted in bulk once.
  if (chunk == 0 && threadIdx.x == 0 && g > p.row_limit && p.error_count != nullptr)
    atomicAdd(p.error_count, static_cast<int32_t>(g - p.row_limit));
  const int64_t rows = g < p.row_limit ? g : p.row_limit;
  const int64_t first_row = chunk * kRowsPerCta + (threadIdx.x >> 5) * kRowsPerWarp;
  if (first_row >= rows) return;

  const int64_t bs = block_size_of<kBs>(p.block_size);
  const int32_t* bt_row = p.block_table + b * p.bt_stride;
  int32_t faults = 0;

  // Resolve every row's block first so that all loads below are independent.
  Source src[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    src[r].block = nullptr;
    src[r].pos = 0;
    const int64_t i = first_row + r;
    if (i >= rows) continue;
    const int64_t pos = seq_len - g + i;
    const int64_t col = pos / bs;
    if (col >= p.bt_cols) {
      ++faults;
      continue;
    }
    const int64_t blk = __ldg(bt_row + col);
    if (blk < 0 || blk >= p.num_blocks) {
      ++faults;
      continue;
    }
    src[r].block = p.cache + sp::block_offset(blk, p.block_stride);
    src[r].pos = pos - col * bs;
  }

  uint4 data[kRowsPerWarp][2];
  uint8_t scale[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (src[r].block == nullptr) continue;
    const unsigned align = alignment_of(src[r].block);
    if (lane < kNopeLanes) {
      data[r][0] = load16(src[r].block + sp::fp8_code_offset(src[r].pos, lane * kValsPerLane), align);
      scale[r] = __ldg(src[r].block + sp::scale_offset(bs, src[r].pos, lane / kLanesPerTile));
    } else {
      const uint8_t* rope =
          src[r].block + sp::rope_offset(src[r].pos) + (lane * kValsPerLane - sp::kNopeDim) * sp::kBf16Bytes;
      data[r][0] = load16(rope, align);
      data[r][1] = load16(rope + 16, align);
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (src[r].block == nullptr) continue;
    uint8_t* dst = reinterpret_cast<uint8_t*>(p.out + b * p.out_s0 + (p.offset + first_row + r) * p.out_s1 +
                                              lane * kValsPerLane);
    const unsigned out_align = alignment_of(dst);
    if (lane < kNopeLanes) {
      const uint4 c = data[r][0];
      const uint32_t* cw = reinterpret_cast<const uint32_t*>(&c);
      const float mult = sp::scale_multiplier(scale[r]);
      // A NaN product (NaN code, or 0 * inf under scale byte 255) must become 0x7FFF exactly.
      bool may_nan = scale[r] == 255;
#pragma unroll
      for (int w = 0; w < 4; ++w) may_nan |= __vcmpeq4(cw[w] & 0x7F7F7F7Fu, 0x7F7F7F7Fu) != 0;
      uint32_t o[8];
      if (kFmt == Fp8Format::kE4M3Fn && !may_nan) {
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          o[2 * w] = dequant_pair<kFmt>(cw[w], mult, scale[r]);
          o[2 * w + 1] = dequant_pair<kFmt>(cw[w] >> 16, mult, scale[r]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 16; e += 2)
          o[e / 2] = uint32_t{sp::dequantize_element(byte_of(c, e), scale[r], kFmt)} |
                     (uint32_t{sp::dequantize_element(byte_of(c, e + 1), scale[r], kFmt)} << 16);
      }
      store16(dst, out_align, make_uint4(o[0], o[1], o[2], o[3]));
      store16(dst + 16, out_align, make_uint4(o[4], o[5], o[6], o[7]));
    } else {
      store16(dst, out_align, data[r][0]);
      store16(dst + 16, out_align, data[r][1]);
    }
  }
  if (lane == 0 && faults != 0 && p.error_count != nullptr) atomicAdd(p.error_count, faults);
}

}  // namespace

void dequantize_and_gather_k_cache(const DequantizeGatherArgs& args, cudaStream_t stream) {
  const CacheGeometry geo = validate(args);
  const int64_t num_reqs = args.seq_lens.size(0);
  if (num_reqs == 0) return;

  GatherParams p;
  p.out = args.out.as<uint16_t>();
  p.out_s0 = args.out.stride[0];
  p.out_s1 = args.out.stride[1];
  p.row_limit = args.out.shape[1] - args.offset;
  p.offset = args.offset;
  p.cache = geo.base;
  p.num_blocks = geo.num_blocks;
  p.block_stride = geo.block_stride;
  p.block_size = geo.block_size;
  p.seq_lens = args.seq_lens.as<const int32_t>();
  p.gather_lens = args.gather_lens.present() ? args.gather_lens.as<const int32_t>() : nullptr;
  p.block_table = args.block_table.as<const int32_t>();
  p.bt_stride = args.block_table.shape[0] > 1 ? args.block_table.stride[0] : args.block_table.shape[1];
  p.bt_cols = args.block_table.shape[1];
  p.error_count = args.error_count;
  // At least one CTA per request: it reports malformed requests and bulk-skipped rows.
  p.chunks = p.row_limit > 0 ? ceil_div(p.row_limit, kRowsPerCta) : 1;

  const int64_t ctas = p.chunks * num_reqs;
  if (ctas > kMaxGridX) throw Error("dequantize_and_gather_k_cache", "too many output rows for one launch");
  dispatch("dequantize_and_gather_k_cache", args.format, geo.block_size, [&](auto fmt, auto bs) {
    gather_kernel<decltype(fmt)::value, decltype(bs)::value>
        <<<static_cast<unsigned>(ctas), kWarpsPerCta * 32, 0, stream>>>(p);
    DSV4KV_CUDA_CHECK_LAUNCH("gather_kernel");
  });
}

}  // namespace dsv4kv::cuda
