/// \file records.cu
/// \brief The V4.1 records (528-byte MXFP8, 288-byte FP4, 68-byte FP4 indexer key) on the GPU.
///
/// One thread per (token, scale group): it reads the group's bf16 values or value bytes (16-byte accesses where rows
/// and blocks are aligned) and calls the spec's group functions (spec/record_numerics.hpp), the reference's own
/// arithmetic, so both backends give the same bytes by construction. Row-level faults (a skipped slot, request or row;
/// a NaN scale byte) are counted by the token's group-0 thread, once, as the reference counts them.

#include <cstring>
#include <type_traits>

#include "device_limits.cuh"
#include "dispatch.cuh"
#include "fault_count.cuh"
#include "fp8.cuh"
#include "host_arith.cuh"
#include "launch.cuh"
#include "records.cuh"

namespace dsv4kv::cuda::detail {
namespace {

constexpr int kThreads = 256;
/// Grid cap of the grid-stride loops (enough CTAs to fill any current GPU many times over).
constexpr int64_t kMaxCtas = int64_t{1} << 20;

/// This thread's first work item and the grid's stride, 64-bit.
__device__ __forceinline__ int64_t first_item() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t item_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

/// Copies `n` bytes (a multiple of 8) from `src` to `dst`: 16- or 8-byte accesses when kAligned (both addresses then
/// aligned to the access), byte by byte otherwise.
template <bool kAligned, int kBytes>
__device__ __forceinline__ void copy_bytes(uint8_t* dst, const uint8_t* src) {
  if constexpr (kAligned && kBytes % 16 == 0) {
#pragma unroll
    for (int v = 0; v < kBytes / 16; ++v)
      reinterpret_cast<uint4*>(dst)[v] = *reinterpret_cast<const uint4*>(src + 16 * v);
  } else if constexpr (kAligned && kBytes % 8 == 0) {
#pragma unroll
    for (int v = 0; v < kBytes / 8; ++v)
      reinterpret_cast<uint2*>(dst)[v] = *reinterpret_cast<const uint2*>(src + 8 * v);
  } else {
#pragma unroll
    for (int i = 0; i < kBytes; ++i) dst[i] = src[i];
  }
}

/// Decodes scale group `g` of the token at `pos` of `block` to `dst` (the group's bf16 values). Returns 1 when `g` is 0
/// and one of the token's scale bytes is a NaN of the record's encoding (the token's one report). kAligned: the
/// block and `dst` allow 16-byte (8-byte for the FP4 record's 8 value bytes) accesses.
template <Record R, bool kAligned>
__device__ __forceinline__ int32_t decode_group(const uint8_t* block, int64_t B, int64_t pos, int g, uint16_t* dst) {
  constexpr sp::RecordLayout rec = sp::record_layout(R);
  constexpr int kGroupBytes = rec.value_bytes() / rec.num_scales();
  const uint8_t s = block[rec.scale_offset(B, pos, g)];
  alignas(16) uint8_t values[kGroupBytes];
  copy_bytes<kAligned, kGroupBytes>(values, block + rec.data_offset(pos) + g * kGroupBytes);
  alignas(16) uint16_t y[rec.group];
  if constexpr (R == Record::kMxfp8DsMla) {
    // The 584-byte record's hardware decoding (fp8.cuh: the spec's bits for every code and scale byte).
#pragma unroll
    for (int v = 0; v < rec.group / 8; ++v) {
      uint2 codes;
      memcpy(&codes, values + 8 * v, 8);
      const uint4 out = dequantize8<Fp8Format::kE4M3Fn>(codes, s);
      memcpy(y + 8 * v, &out, 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < rec.group; ++i) y[i] = sp::dequantize_group_value(R, values, s, i);
  }
  copy_bytes<kAligned, 2 * rec.group>(reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(y));
  int32_t nan_scale = 0;
  if (g == 0)
    for (int j = 0; j < rec.num_scales(); ++j) nan_scale |= sp::scale_is_nan(R, block[rec.scale_offset(B, pos, j)]);
  return nan_scale;
}

/// spec::quantize_group, with the MXFP8 record's finite groups converted by the hardware as the 584-byte record's
/// finite tiles are (x * 2^-e is exact, and cvt.rn.satfinite equals the spec on finite values: fp8.cuh).
template <Record R>
__device__ __forceinline__ uint8_t quantize_group_fast(const uint16_t* x, uint8_t* values, int& nonfinite) {
  if constexpr (R == Record::kMxfp8DsMla) {
    constexpr int kGroup = sp::record_layout(R).group;
    int bad = 0;
#pragma unroll
    for (int i = 0; i < kGroup; ++i) bad += sp::bf16_is_nonfinite(x[i]) ? 1 : 0;
    if (bad == 0) {
      const sp::TileScale ts = sp::mxfp8_group_scale(sp::bf16_amax_bits(x, kGroup));
      const float inv_scale = sp::exp2i(-ts.exponent);
#pragma unroll
      for (int i = 0; i < kGroup; i += 2) {
        const uint32_t c = e4m3x2_from_f32(__fmul_rn(sp::bf16_to_f32(x[i]), inv_scale),
                                           __fmul_rn(sp::bf16_to_f32(x[i + 1]), inv_scale));
        values[i] = static_cast<uint8_t>(c);
        values[i + 1] = static_cast<uint8_t>(c >> 8);
      }
      return ts.byte;
    }
  }
  return sp::quantize_group(R, x, values, nonfinite);
}

template <Record R, bool kAligned>
__global__ void __launch_bounds__(kThreads)
    record_quantize_kernel(const uint16_t* k, int64_t k_stride, const int64_t* slots, int64_t num_tokens,
                           CacheGeometry cache, int32_t* error_count) {
  grid_dependency_begin();
  constexpr sp::RecordLayout rec = sp::record_layout(R);
  constexpr int kGroups = rec.num_scales();
  constexpr int kGroupBytes = rec.value_bytes() / kGroups;
  const int64_t B = cache.block_size;
  for (int64_t it = first_item(); it < num_tokens * kGroups; it += item_stride()) {
    const int64_t t = it / kGroups;
    const int g = static_cast<int>(it % kGroups);
    const int64_t slot = slots[t];
    int32_t faults = 0;
    if (slot != -1) {  // -1: padding, skipped silently
      if (slot < 0 || sp::slot_block(slot, B) >= cache.num_blocks) {
        faults = g == 0 ? 1 : 0;  // out of range: not followed, reported once per token
      } else {
        const int64_t pos = sp::slot_pos(slot, B);
        uint8_t* block = cache.base + sp::block_offset(sp::slot_block(slot, B), cache.block_stride);
        alignas(16) uint16_t x[rec.group];
        copy_bytes<kAligned, 2 * rec.group>(reinterpret_cast<uint8_t*>(x),
                                            reinterpret_cast<const uint8_t*>(k + t * k_stride + g * rec.group));
        alignas(16) uint8_t values[kGroupBytes];
        int nonfinite = 0;
        block[rec.scale_offset(B, pos, g)] = quantize_group_fast<R>(x, values, nonfinite);
        copy_bytes<kAligned, kGroupBytes>(block + rec.data_offset(pos) + g * kGroupBytes, values);
        faults = nonfinite;
      }
    }
    count_faults(error_count, faults);
  }
}

template <Record R, bool kAligned>
__global__ void __launch_bounds__(kThreads) record_gather_kernel(RecordGatherParams p) {
  grid_dependency_begin();
  constexpr sp::RecordLayout rec = sp::record_layout(R);
  constexpr int kGroups = rec.num_scales();
  const int64_t B = p.cache.block_size;
  const int64_t per_request = p.rows_per_request * kGroups;
  for (int64_t it = first_item(); it < p.num_requests * per_request; it += item_stride()) {
    const int64_t b = it / per_request;
    const int64_t i = (it % per_request) / kGroups;
    const int g = static_cast<int>(it % kGroups);
    const int64_t seq_len = p.seq_lens[b];
    const int64_t gl = p.gather_lens != nullptr ? int64_t{p.gather_lens[b]} : seq_len;
    int32_t faults = 0;
    const bool lead = i == 0 && g == 0;  // reports the request's faults
    if (seq_len < 0 || gl < 0 || gl > seq_len) {
      faults = lead ? 1 : 0;
    } else {
      const int64_t fit = gl < p.row_limit ? gl : p.row_limit;
      if (lead) faults = static_cast<int32_t>(gl - fit);  // rows past out: skipped, reported in bulk
      if (i < fit) {
        const int64_t pos = seq_len - gl + i;
        const int64_t col = pos / B;
        const int64_t blk = col < p.bt_cols ? int64_t{p.block_table[b * p.bt_stride + col]} : -1;
        if (col >= p.bt_cols || blk < 0 || blk >= p.cache.num_blocks) {
          faults += g == 0 ? 1 : 0;
        } else {
          const uint8_t* block = p.cache.base + sp::block_offset(blk, p.cache.block_stride);
          uint16_t* dst = p.out + b * p.out_s0 + (p.offset + i) * p.out_s1 + g * rec.group;
          faults += decode_group<R, kAligned>(block, B, pos % B, g, dst);
        }
      }
    }
    count_faults(p.error_count, faults);
  }
}

template <Record R, class Slot, bool kAligned>
__global__ void __launch_bounds__(kThreads)
    record_sparse_gather_kernel(uint16_t* out, int64_t out_stride, const Slot* slots, int64_t n, CacheGeometry cache,
                                int32_t* error_count) {
  grid_dependency_begin();
  constexpr sp::RecordLayout rec = sp::record_layout(R);
  constexpr int kGroups = rec.num_scales();
  const int64_t B = cache.block_size;
  for (int64_t it = first_item(); it < n * kGroups; it += item_stride()) {
    const int64_t e = it / kGroups;
    const int g = static_cast<int>(it % kGroups);
    const int64_t slot = slots[e];
    int32_t faults = 0;
    if (slot != -1) {
      if (slot < 0 || sp::slot_block(slot, B) >= cache.num_blocks) {
        faults = g == 0 ? 1 : 0;
      } else {
        const uint8_t* block = cache.base + sp::block_offset(sp::slot_block(slot, B), cache.block_stride);
        faults = decode_group<R, kAligned>(block, B, sp::slot_pos(slot, B), g, out + e * out_stride + g * rec.group);
      }
    }
    count_faults(error_count, faults);
  }
}

/// The record as a choice (validate() has refused unknown records and the 584-byte one never comes here).
inline OneOf<Record::kMxfp8DsMla, Record::kNvfp4DsMla, Record::kMxfp4Indexer> record_choice(Record r) { return {r}; }

/// CTAs for `items` work items (>= 1 item), capped: the kernels loop over the rest. Throws when items * groups
/// cannot be counted in int64.
inline unsigned ctas_for(const char* op, int64_t units, int64_t groups) {
  if (units > INT64_MAX / groups) throw Error(op, "too many work items for one launch");
  const int64_t ctas = ceil_div(units * groups, kThreads);
  return static_cast<unsigned>(ctas < kMaxCtas ? ctas : kMaxCtas);
}

}  // namespace

void launch_record_quantize(const char* op, Record record, const RecordQuantizeParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  const unsigned ctas = ctas_for(op, p.n, sp::record_layout(record).num_scales());
  // Whole 16-byte key loads and value stores where every row and block allows them.
  const bool aligned =
      rows_aligned16(p.k, p.k_stride * sp::kBf16Bytes) && rows_aligned16(p.cache.base, p.cache.block_stride);
  dispatch(
      [&](auto r, auto al) {
        DSV4KV_CUDA_LAUNCH((record_quantize_kernel<decltype(r)::value, decltype(al)::value>), dim3(ctas),
                           dim3(kThreads), stream, p.k, p.k_stride, p.slots, p.n, p.cache, p.error_count);
      },
      record_choice(record), flag_choice(aligned));
}

void launch_record_gather(const char* op, Record record, const RecordGatherParams& p, cudaStream_t stream) {
  if (p.num_requests == 0) return;
  if (p.num_requests > INT64_MAX / p.rows_per_request) throw Error(op, "too many output rows for one launch");
  const unsigned ctas = ctas_for(op, p.num_requests * p.rows_per_request, sp::record_layout(record).num_scales());
  const bool aligned = rows_aligned16(p.cache.base, p.cache.block_stride) &&
                       rows_aligned16(p.out, p.out_s1 * sp::kBf16Bytes) && (p.out_s0 * sp::kBf16Bytes) % 16 == 0;
  dispatch(
      [&](auto r, auto al) {
        DSV4KV_CUDA_LAUNCH((record_gather_kernel<decltype(r)::value, decltype(al)::value>), dim3(ctas), dim3(kThreads),
                           stream, p);
      },
      record_choice(record), flag_choice(aligned));
}

void launch_record_sparse_gather(const char* op, Record record, const RecordSparseParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  const unsigned ctas = ctas_for(op, p.n, sp::record_layout(record).num_scales());
  const bool aligned =
      rows_aligned16(p.cache.base, p.cache.block_stride) && rows_aligned16(p.out, p.out_stride * sp::kBf16Bytes);
  dispatch(
      [&](auto r, auto wide, auto al) {
        using Slot = std::conditional_t<decltype(wide)::value, int64_t, int32_t>;
        DSV4KV_CUDA_LAUNCH((record_sparse_gather_kernel<decltype(r)::value, Slot, decltype(al)::value>), dim3(ctas),
                           dim3(kThreads), stream, p.out, p.out_stride, static_cast<const Slot*>(p.slots), p.n, p.cache,
                           p.error_count);
      },
      record_choice(record), flag_choice(p.slots_i64), flag_choice(aligned));
}

}  // namespace dsv4kv::cuda::detail
