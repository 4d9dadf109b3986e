/// \file gather.cu
/// \brief dequantize_and_gather_k_cache on the GPU (spec "dequantize_and_gather_k_cache").
///
/// The grid is (row chunks) x (requests), flattened, so one long request fills the chip as well as many short ones.
/// The gather lengths live on the device: the chunks cover the most rows a request can write (out.shape[1] - offset)
/// and CTAs past a request's length exit at once. One warp per output row, moved by token_row.cuh (shared with the
/// sparse gather), 2 rows in flight per warp (1 for launches too small to fill the chip).

#include "device_limits.cuh"
#include "dispatch.cuh"
#include "fault_count.cuh"
#include "host_arith.cuh"
#include "launch.cuh"
#include "records.cuh"
#include "token_row.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;  // brings sp = dsv4kv::spec

/// Warps per CTA of large launches.
constexpr int kWarpsLarge = 4;
/// Warps per CTA of the small launches (one row per warp): half the CTAs for the same rows ((1, 8,192): 8.4 -> 8.2 us,
/// see bench/RESULTS.md#gather-small-launches).
constexpr int kWarpsSmall = 8;
/// Rows per warp of large launches (the loads of 2 rows in flight per warp; (16, 8,192) 57.2 us against 57.8 with 4
/// rows, see bench/RESULTS.md#gather-small-launches).
constexpr int kRowsPerWarpLarge = 2;
/// Rows per warp when a launch with kRowsPerWarpLarge would not fill the chip (e.g. one request of 8,192 rows: 1,024
/// CTAs): 2x the warps and a 2x shorter issue chain per warp.
constexpr int kRowsPerWarpSmall = 1;
/// Below this many CTAs of the large launch a launch is small: half the 128-thread CTA slots (1,056 on an H200, so one
/// request of 8,192 rows is small; see bench/RESULTS.md#gather-small-launches).
int64_t small_launch_ctas() { return cta_slots(kWarpsLarge * 32) / 2; }

struct GatherParams {
  uint16_t* out;           // [>= R, out_rows, 512] bf16 bits
  int64_t out_s0, out_s1;  // strides in elements
  int64_t row_limit;       // out_rows - offset: rows a request may write
  int64_t offset;
  CacheGeometry cache;         // [num_blocks, block_stride] bytes (validate()'s geometry)
  const int32_t* seq_lens;     // [R]
  const int32_t* gather_lens;  // [>= R] or null
  const int32_t* block_table;  // [>= R, cols], row stride bt_stride
  int64_t bt_stride, bt_cols;
  int64_t chunks;  // CTAs per request
  int32_t* error_count;
};

/// kEarlyTable: read the block-table entries before seq_lens when gather_lens is absent (the rows' positions are then
/// their indices): small launches only, where it saves a dependent round trip; large launches were slower with it (see
/// bench/RESULTS.md#gather-early-table-entry). kRealign: the cache's blocks are not all 16-byte aligned (an odd block
/// stride) and the block size is >= 2: every row is read by aligned 16-byte chunks (load_token_row_chunks) and
/// rearranged through the warp's shared-memory stage (unstage_token_row). kAligned: the cache's blocks, `out` and its
/// row strides are all 16-byte aligned (the usual case: vLLM's block stride is 37,440), so no load or store needs the
/// address tests of load8 / load16 / store16, as in the sparse gather (see bench/RESULTS.md#gather-aligned-instance).
template <Fp8Format kFmt, int kBs, int kWarps, int kRowsPerWarp, bool kEarlyTable, bool kRealign, bool kAligned>
__device__ __forceinline__ void gather_rows(const GatherParams& p, sp::Faults& f) {
  constexpr int kRowsPerCta = kWarps * kRowsPerWarp;
  const int lane = threadIdx.x & 31;
  // 32-bit division (chunks <= the grid size < 2^31): it is on every row's critical path.
  const int64_t b = blockIdx.x / static_cast<uint32_t>(p.chunks);
  const int64_t chunk = blockIdx.x - b * p.chunks;
  const int32_t* bt_row = p.block_table + b * p.bt_stride;

  // Early table reads: row i's entry is bt_row[i / bs] whatever seq_len is (i < row_limit, column < bt_cols), then
  // its data, before seq_lens arrives. Only entries naming a block of the cache are followed; a row past the request's
  // length is loaded but never stored or reported.
  static_assert(!(kEarlyTable && kRealign), "the early-table (small) launches read aligned rows");
  static_assert(!(kRealign && kAligned), "a realigned launch's blocks are not all aligned");
  const bool early = kEarlyTable && p.gather_lens == nullptr;
  int32_t early_blk[kRowsPerWarp];
  TokenRow row[kRowsPerWarp];  // the token rows (token_row.cuh), loaded here or below
  if (early) {
    const int64_t bs = block_size_of<kBs>(p.cache.block_size);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = chunk * kRowsPerCta + (threadIdx.x >> 5) * kRowsPerWarp + r;
      const int64_t col = i / bs;
      early_blk[r] = i < p.row_limit && col < p.bt_cols ? __ldg(bt_row + col) : -1;
      if (early_blk[r] >= 0 && early_blk[r] < p.cache.num_blocks)
        row[r] = load_token_row<kAligned>(p.cache.base + sp::block_offset(early_blk[r], p.cache.block_stride),
                                          i - col * bs, bs, lane);
    }
  }

  const int64_t seq_len = p.seq_lens[b];
  const int64_t g = p.gather_lens != nullptr ? int64_t{p.gather_lens[b]} : seq_len;
  if (seq_len < 0 || g < 0 || g > seq_len) {
    if (chunk == 0 && threadIdx.x == 0) f.add();  // a malformed request: reported once
    return;
  }
  // Rows that would land past out.shape[1] are skipped, counted in bulk once.
  if (chunk == 0 && threadIdx.x == 0 && g > p.row_limit) f.add(static_cast<int32_t>(g - p.row_limit));
  const int64_t rows = g < p.row_limit ? g : p.row_limit;
  const int64_t first_row = chunk * kRowsPerCta + (threadIdx.x >> 5) * kRowsPerWarp;
  if (first_row >= rows) return;

  const int64_t bs = block_size_of<kBs>(p.cache.block_size);

  // Block-table entries of every row first, so that the data loads below are all in flight together.
  int64_t blk[kRowsPerWarp], pos[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    blk[r] = -1;
    pos[r] = 0;
    const int64_t i = first_row + r;
    if (i >= rows) continue;
    const int64_t position = seq_len - g + i;
    const int64_t col = position / bs;
    pos[r] = position - col * bs;
    if (col >= p.bt_cols) {
      if (lane == 0) f.add();
      continue;
    }
    blk[r] = early ? early_blk[r] : __ldg(bt_row + col);  // early: position == i, the same entry
    if (blk[r] < 0 || blk[r] >= p.cache.num_blocks) {
      if (lane == 0) f.add();
      blk[r] = -1;
    }
  }

  // The token rows' loads (unless the early loop issued them), then all stores.
  if constexpr (kRealign) {
    // Every row by aligned chunks (a row that is itself aligned takes the same path: it is one chunk more, and no
    // branch); then each row through the warp's stage.
    __shared__ uint4 stage[kWarps][kRowChunks];
    StagedRow staged[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (blk[r] >= 0)  // the same for the whole warp
        staged[r] =
            load_token_row_chunks(p.cache.base + sp::block_offset(blk[r], p.cache.block_stride), pos[r], bs, lane);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (blk[r] >= 0) row[r] = unstage_token_row(staged[r], stage[threadIdx.x >> 5], lane);
  } else if (!early) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (blk[r] >= 0)
        row[r] =
            load_token_row<kAligned>(p.cache.base + sp::block_offset(blk[r], p.cache.block_stride), pos[r], bs, lane);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
    if (blk[r] >= 0)
      store_token_row<kFmt, kAligned>(
          row[r], reinterpret_cast<uint8_t*>(p.out + b * p.out_s0 + (p.offset + first_row + r) * p.out_s1), lane);
}

/// No L2 prefetch before the wait under PDL, unlike rows.cuh's launches of few rows: with thousands of CTAs it made the
/// prefill chain 1.7-2.2 us slower (see bench/RESULTS.md#l2-prefetch-before-wait).
template <Fp8Format kFmt, int kBs, int kWarps, int kRowsPerWarp, bool kEarlyTable, bool kRealign, bool kAligned>
__global__ void __launch_bounds__(kWarps * 32) gather_kernel(const GatherParams p) {
  grid_dependency_begin();
  sp::Faults f;
  gather_rows<kFmt, kBs, kWarps, kRowsPerWarp, kEarlyTable, kRealign, kAligned>(p, f);
  count_faults(p.error_count, f.n);
}

}  // namespace

void dequantize_and_gather_k_cache(const DequantizeGatherArgs& args, cudaStream_t stream) {
  GatherParams p;
  p.cache = validate(args);
  p.out = args.out.as<uint16_t>();
  p.out_s0 = kernel_stride(args.out, 0);  // out may be empty (out_rows = 0)
  p.out_s1 = kernel_stride(args.out, 1);
  p.row_limit = args.out.shape[1] - args.offset;
  p.offset = args.offset;
  p.seq_lens = args.seq_lens.as<const int32_t>();
  p.gather_lens = args.gather_lens.present() ? args.gather_lens.as<const int32_t>() : nullptr;
  p.block_table = args.block_table.as<const int32_t>();
  p.bt_stride = args.block_table.shape[0] > 1 && !args.block_table.empty() ? args.block_table.stride[0]
                                                                           : args.block_table.shape[1];
  p.bt_cols = args.block_table.shape[1];
  p.error_count = args.error_count;
  const int64_t num_reqs = args.seq_lens.size(0);
  if (num_reqs == 0) return;
  if (args.record != Record::kFp8DsMla) {
    // At least one item per request: it reports a malformed request and the rows that do not fit.
    const RecordGatherParams rp{
        p.out,      p.out_s0,      p.out_s1,      p.offset,    p.row_limit, p.row_limit > 0 ? p.row_limit : 1,
        p.seq_lens, p.gather_lens, p.block_table, p.bt_stride, p.bt_cols,   num_reqs,
        p.cache,    p.error_count};
    return launch_record_gather(DequantizeGatherArgs::kName, args.record, rp, stream);
  }
  // At least one CTA per request: it reports malformed requests and bulk-skipped rows.
  auto chunks_for = [&](int rows_per_cta) {
    return p.row_limit > 0 ? ceil_div(p.row_limit, int64_t{rows_per_cta}) : int64_t{1};
  };
  const bool small = chunks_for(kWarpsLarge * kRowsPerWarpLarge) * num_reqs < small_launch_ctas();
  p.chunks = chunks_for(small ? kWarpsSmall * kRowsPerWarpSmall : kWarpsLarge * kRowsPerWarpLarge);

  const int64_t ctas = p.chunks * num_reqs;
  if (ctas > kMaxGridX) throw Error("dequantize_and_gather_k_cache", "too many output rows for one launch");
  // Large launches of caches with unaligned blocks read rows by aligned chunks (load_token_row_chunks: block size >=
  // 2).
  const bool cache_aligned = rows_aligned16(p.cache.base, p.cache.block_stride);
  const bool realign = !small && p.cache.block_size >= 2 && !cache_aligned;
  // Every row of `out` starts 16-byte aligned: its base and both row strides (in bytes).
  const bool aligned =
      cache_aligned && rows_aligned16(p.out, p.out_s1 * sp::kBf16Bytes) && (p.out_s0 * sp::kBf16Bytes) % 16 == 0;
  dispatch(
      [&](auto fmt, auto bs, auto is_small, auto realign_rows, auto aligned_rows) {
        constexpr bool kSmall = decltype(is_small)::value;
        constexpr int kWarps = kSmall ? kWarpsSmall : kWarpsLarge;
        constexpr bool kRealign = !kSmall && decltype(realign_rows)::value;  // no small realigned kernel
        constexpr bool kAligned = !kRealign && decltype(aligned_rows)::value;
        DSV4KV_CUDA_LAUNCH((gather_kernel < decltype(fmt)::value, decltype(bs)::value, kWarps,
                            kSmall ? kRowsPerWarpSmall : kRowsPerWarpLarge, kSmall, kRealign, kAligned >),
                           dim3(static_cast<unsigned>(ctas)), dim3(kWarps * 32), stream, p);
      },
      format_choice("dequantize_and_gather_k_cache", args.format), block_size_choice(p.cache.block_size),
      flag_choice(small), flag_choice(realign), flag_choice(aligned));
}

}  // namespace dsv4kv::cuda
