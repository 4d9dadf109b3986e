/// \file sparse_gather.cu
/// \brief dequantize_and_gather_k_cache_sparse on the GPU (spec "dequantize_and_gather_k_cache_sparse").
///
/// One warp per output row, kRowsPerWarp rows in flight per warp, one CTA per kWarpsPerCta * kRowsPerWarp slots (a
/// grid-stride loop only past the grid size limit). Every lane reads the row's slot (one broadcast load), so the skip
/// decision is uniform across the warp. The row itself is moved by the token-row routine of token_row.cuh (shared with
/// dequantize_and_gather_k_cache).

#include "dispatch.cuh"
#include "fault_count.cuh"
#include "host_arith.cuh"
#include "launch.cuh"
#include "records.cuh"
#include "token_row.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

constexpr int kWarpLanes = 32;

/// Warps per CTA: 4 warps of 2 rows are as fast as the other shapes tried and 1.4x one warp per CTA; one CTA per 8
/// slots beats a grid-stride loop (see bench/RESULTS.md#sparse-gather-launch).
constexpr int kWarpsPerCta = 4;
/// Rows whose loads a warp keeps in flight together (as the dense gather's large launches).
constexpr int kRowsPerWarp = 2;

struct SparseParams {
  uint16_t* out;         // [>= N, 512] bf16 bits
  int64_t out_stride;    // row stride in elements
  const uint8_t* cache;  // [num_blocks, block_stride] bytes
  int64_t num_blocks;
  int64_t block_stride;
  int64_t block_size;
  const void* slots;  // [N] int32 or int64, contiguous
  int64_t n;          // N
  int32_t* error_count;
};

/// Block of a slot, or -1 for padding (-1) and for out-of-range slots (which add one to `faults`). `kBs` > 0 makes the
/// division a shift; `U` is the unsigned type of the slot dtype.
template <int kBs, class U>
__device__ __forceinline__ int64_t slot_to_block(int64_t slot, int64_t bs, int64_t num_blocks, int64_t& pos,
                                                 int32_t& faults) {
  if (slot == -1) return -1;
  if (slot < 0) {
    ++faults;
    return -1;
  }
  const U u = static_cast<U>(slot);
  const U ubs = static_cast<U>(block_size_of<kBs>(bs));  // bs fits in int32 (validate)
  const U blk = u / ubs;
  if (static_cast<int64_t>(blk) >= num_blocks) {
    ++faults;
    return -1;
  }
  pos = static_cast<int64_t>(u - blk * ubs);
  return static_cast<int64_t>(blk);
}

/// kAligned: the cache base, the block stride, `out` and its row stride are all 16-byte aligned (the usual case: vLLM's
/// stride is 37,440), so no access needs the address tests.
template <Fp8Format kFmt, int kBs, class Slot, bool kAligned>
__global__ void __launch_bounds__(kWarpsPerCta* kWarpLanes) sparse_gather_kernel(const SparseParams p) {
  grid_dependency_begin();
  using U = std::conditional_t<sizeof(Slot) == 8, uint64_t, uint32_t>;
  const int lane = threadIdx.x & (kWarpLanes - 1);
  const int64_t warp = int64_t{blockIdx.x} * kWarpsPerCta + (threadIdx.x / kWarpLanes);
  const int64_t num_warps = int64_t{gridDim.x} * kWarpsPerCta;
  const Slot* slots = static_cast<const Slot*>(p.slots);
  int32_t faults = 0;

  for (int64_t first = warp * kRowsPerWarp; first < p.n; first += num_warps * kRowsPerWarp) {
    // All slots first, then all token loads, then all stores: kRowsPerWarp rows in flight.
    int64_t slot[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) slot[r] = first + r < p.n ? int64_t{__ldg(slots + first + r)} : -1;

    int64_t blk[kRowsPerWarp], pos[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      pos[r] = 0;
      blk[r] = slot_to_block<kBs, U>(slot[r], p.block_size, p.num_blocks, pos[r], faults);
    }

    TokenRow row[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (blk[r] >= 0)
        row[r] = load_token_row<kAligned>(p.cache + sp::block_offset(blk[r], p.block_stride), pos[r],
                                          block_size_of<kBs>(p.block_size), lane);

#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (blk[r] >= 0)
        store_token_row<kFmt, kAligned>(row[r], reinterpret_cast<uint8_t*>(p.out + (first + r) * p.out_stride), lane);
  }
  // Every lane saw the same slots: lane 0 reports the warp's faults.
  count_faults(p.error_count, lane == 0 ? faults : 0);
}

}  // namespace

void dequantize_and_gather_k_cache_sparse(const SparseGatherArgs& args, cudaStream_t stream) {
  const CacheGeometry geo = validate(args);
  const int64_t n = args.slot_indices.size(0);
  if (n == 0) return;
  if (args.record != Record::kFp8DsMla) {
    const RecordSparseParams rp{args.out.as<uint16_t>(),
                                kernel_stride(args.out, 0),
                                args.slot_indices.data,
                                args.slot_indices.dtype == DType::kI64,
                                n,
                                geo,
                                args.error_count};
    return launch_record_sparse_gather(SparseGatherArgs::kName, args.record, rp, stream);
  }

  const SparseParams p{.out = args.out.as<uint16_t>(),
                       .out_stride = kernel_stride(args.out, 0),
                       .cache = geo.base,
                       .num_blocks = geo.num_blocks,
                       .block_stride = geo.block_stride,
                       .block_size = geo.block_size,
                       .slots = args.slot_indices.data,
                       .n = n,
                       .error_count = args.error_count};

  const int threads = kWarpsPerCta * kWarpLanes;
  const int64_t needed = ceil_div(n, int64_t{kWarpsPerCta} * kRowsPerWarp);
  const int64_t ctas = needed < kMaxGridX ? needed : kMaxGridX;  // the grid-stride loop covers the rest
  const bool i64 = args.slot_indices.dtype == DType::kI64;
  const bool aligned =
      rows_aligned16(geo.base, geo.block_stride) && rows_aligned16(p.out, p.out_stride * sp::kBf16Bytes);
  dispatch(
      [&](auto fmt, auto bs, auto wide, auto al) {
        using Slot = std::conditional_t<decltype(wide)::value, int64_t, int32_t>;
        DSV4KV_CUDA_LAUNCH((sparse_gather_kernel<decltype(fmt)::value, decltype(bs)::value, Slot, decltype(al)::value>),
                           dim3(static_cast<unsigned>(ctas)), dim3(threads), stream, p);
      },
      format_choice(SparseGatherArgs::kName, args.format), block_size_choice(geo.block_size), flag_choice(i64),
      flag_choice(aligned));
}

}  // namespace dsv4kv::cuda
