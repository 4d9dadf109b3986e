/// \file index_rows_tiled.cuh
/// \brief The CTA-tile kernel skeleton of combine and mixed sparse (global_topk uses
/// index_rows.cuh): measured faster for their rows, whose contexts take long chains of
/// dependent loads (request search, window), which this skeleton finds once per row.
///
/// Each row of an index output needs a little context (its request, window,
/// block-table row) that takes a few dependent loads to find, then a long run
/// of independent columns. Computing the context per row in the threads that
/// write it would serialize those loads in every row; here a CTA owns
/// `rows_per_cta` rows:
///   1. every thread issues the input loads of its first cells (they do not
///      depend on the context),
///   2. thread r computes row r's context into shared memory (all rows'
///      dependent loads in parallel), one barrier,
///   3. the CTA's rows are a flat array of cells (4 columns with int4 stores
///      when rows are 16-byte aligned, else 1 column), kTiledUnroll cells per thread
///      per step with all loads issued before the stores,
///   4. after a second barrier thread r writes row r's length.
/// Each row is written completely, padding included, by one kernel.
///
/// An Op provides: `Params` (with `error_count`), `Ctx` (with `int32_t count`),
/// `kCounts` (whether lengths need the per-row count of kept entries) and
///   prologue(p, t, ctx, faults)     row context; row-level reports into faults
///   load<kVec>(p, t, c, x[4])       raw inputs of columns c..c+3 (or c), -1 where none
///   value(p, ctx, t, c, x, f, n)    column c of row t; kept entries counted in n
///   finish(p, ctx, t)               writes row t's length
///   out_row(p, t)                   the row's first element
#pragma once

#include <atomic>

#include "common.cuh"

namespace dsv4kv::cuda::detail {

/// Rows per CTA at most (the shared-memory context array).
inline constexpr int kTiledMaxRows = 64;
/// Threads per CTA of this skeleton.
inline constexpr int kTiledCtaThreads = 256;
/// Cells each thread keeps in flight.
inline constexpr int kTiledUnroll = 4;

/// How a launch splits the rows.
struct TiledRowTiling {
  int64_t num_rows;
  int64_t width;        // int32 columns per row
  int cells_per_row;    // ceil(width / 4) with vectors, else width
  int rows_per_cta;
};

/// Rows per CTA: enough that the grid is about one wave of resident CTAs (`wave_ctas`: every row
/// context of a CTA is found with one round of dependent loads, so more rows per CTA amortize
/// it), at least one cell per thread, and few enough that small batches still spread over many
/// CTAs. Measured on the H200 (2026-11-30, combine, 8,192 rows of 640 columns, int4 kernel with
/// 54 registers, 4 resident CTAs per multiprocessor): a wave of 528 CTAs (16 rows each) 16.6 us,
/// 1,024 (8 rows) 17.2 us, 2,048 (4 rows) 18.8 us.
inline TiledRowTiling make_tiled_tiling(int64_t num_rows, int64_t width, bool vec, int64_t wave_ctas) {
  TiledRowTiling t;
  t.num_rows = num_rows;
  t.width = width;
  const int64_t cells = vec ? ceil_div(width, 4) : width;
  if (cells > (int64_t{1} << 30)) throw Error("dsv4kv::cuda", "index rows wider than 2^30 columns are not supported");
  t.cells_per_row = static_cast<int>(cells);
  int64_t rows = ceil_div(num_rows, wave_ctas > 0 ? wave_ctas : 1);
  const int64_t fill = cells > 0 ? ceil_div(kTiledCtaThreads, cells) : 1;
  if (rows < fill) rows = fill;
  rows = rows < 1 ? 1 : (rows > kTiledMaxRows ? kTiledMaxRows : rows);
  while (rows > 1 && rows * cells > (int64_t{1} << 31)) rows /= 2;  // cell indices are 32-bit
  t.rows_per_cta = static_cast<int>(rows);
  return t;
}

template <class Op, bool kVec>
__global__ void __launch_bounds__(kTiledCtaThreads) tiled_rows_kernel(const typename Op::Params p, const TiledRowTiling tl,
                                                                      const int64_t row_ctas) {
  __shared__ typename Op::Ctx ctx[kTiledMaxRows];
  constexpr int kW = kVec ? 4 : 1;
  int32_t faults = Op::extra_faults(p);  // work of the launch that is not a row (e.g. request checks)
  if (blockIdx.x < row_ctas) {
    const int64_t row0 = int64_t{blockIdx.x} * tl.rows_per_cta;
    const int64_t left = tl.num_rows - row0;
    const int rows = left < tl.rows_per_cta ? static_cast<int>(left) : tl.rows_per_cta;
    const unsigned cells = static_cast<unsigned>(rows) * static_cast<unsigned>(tl.cells_per_row);
    const unsigned cpr = static_cast<unsigned>(tl.cells_per_row);

    int32_t x[kTiledUnroll][4];
    auto load_batch = [&](unsigned base) {
#pragma unroll
      for (int u = 0; u < kTiledUnroll; ++u) {
        const unsigned cell = base + u * kTiledCtaThreads;
        if (cell >= cells) break;
        const unsigned r = cell / cpr;
        Op::template load<kVec>(p, row0 + r, int64_t{cell - r * cpr} * kW, x[u]);
      }
    };
    load_batch(threadIdx.x);
    if (static_cast<int>(threadIdx.x) < rows) {
      ctx[threadIdx.x].count = 0;
      Op::prologue(p, row0 + threadIdx.x, ctx[threadIdx.x], faults);
    }
    __syncthreads();

    spec::Faults f;
    for (unsigned base = threadIdx.x; base < cells; base += kTiledCtaThreads * kTiledUnroll) {
      if (base != threadIdx.x) load_batch(base);
#pragma unroll
      for (int u = 0; u < kTiledUnroll; ++u) {
        const unsigned cell = base + u * kTiledCtaThreads;
        if (cell >= cells) break;
        const unsigned r = cell / cpr;
        const int64_t t = row0 + r;
        const int64_t c = int64_t{cell - r * cpr} * kW;
        const typename Op::Ctx& cx = ctx[r];
        int32_t kept = 0;
        int32_t* out = Op::out_row(p, t);
        if (kVec && c + 3 < tl.width) {
          const int4 v = make_int4(Op::value(p, cx, t, c, x[u][0], f, kept), Op::value(p, cx, t, c + 1, x[u][1], f, kept),
                                   Op::value(p, cx, t, c + 2, x[u][2], f, kept),
                                   Op::value(p, cx, t, c + 3, x[u][3], f, kept));
          *reinterpret_cast<int4*>(out + c) = v;
        } else {
#pragma unroll
          for (int j = 0; j < kW; ++j)
            if (c + j < tl.width) out[c + j] = Op::value(p, cx, t, c + j, x[u][j], f, kept);
        }
        if constexpr (Op::kCounts) {
          // When rows are whole multiples of 32 cells, a warp's 32 consecutive cells of one step
          // lie in one row (and the warp leaves the loop together): one shared atomic per warp
          // instead of one per cell, which would serialize on the row's counter.
          if (cpr % 32 == 0) {
            const int32_t sum = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(kept)));
            if ((threadIdx.x & 31) == 0 && sum != 0) atomicAdd_block(&ctx[r].count, sum);
          } else if (kept != 0) {
            atomicAdd_block(&ctx[r].count, kept);
          }
        }
      }
    }
    faults += f.n;
    if (Op::kCounts) __syncthreads();
    if (static_cast<int>(threadIdx.x) < rows) Op::finish(p, ctx[threadIdx.x], row0 + threadIdx.x);
  }
  count_faults(p.error_count, faults);
}

/// CTAs of tiled_rows_kernel<Op, kVec> resident at once on the current device: multiprocessors x
/// resident CTAs per multiprocessor. Cached per kernel and device (host-side queries only, so
/// launches stay capturable).
template <class Op, bool kVec>
int64_t resident_ctas() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int64_t> cache[kMaxDevices] = {};
  int dev = 0;
  DSV4KV_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 0 && dev < kMaxDevices) {
    const int64_t hit = cache[dev].load(std::memory_order_relaxed);
    if (hit > 0) return hit;
  }
  int sms = 0, per_sm = 0;
  DSV4KV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  DSV4KV_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tiled_rows_kernel<Op, kVec>, kTiledCtaThreads, 0));
  const int64_t n = int64_t{sms > 0 ? sms : 1} * (per_sm > 0 ? per_sm : 1);
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(n, std::memory_order_relaxed);
  return n;
}

/// Launches Op's kernel over `num_rows` rows of `width` columns (plus `extra_ctas` CTAs that
/// only do Op::extra_faults work).
template <class Op>
void launch_tiled_rows(const char* op, const typename Op::Params& p, int64_t num_rows, int64_t width, bool vec,
                       int64_t min_ctas, cudaStream_t stream) {
  const int64_t wave = vec ? resident_ctas<Op, true>() : resident_ctas<Op, false>();
  const TiledRowTiling tl = make_tiled_tiling(num_rows, width, vec, wave);
  const int64_t row_ctas = ceil_div(num_rows, tl.rows_per_cta);
  const int64_t ctas = row_ctas > min_ctas ? row_ctas : min_ctas;
  if (ctas == 0) return;
  if (ctas > kMaxGridX) throw Error(op, "too many rows for one launch");
  if (vec)
    DSV4KV_CUDA_LAUNCH((tiled_rows_kernel<Op, true>), dim3(static_cast<unsigned>(ctas)), dim3(kTiledCtaThreads), stream,
                       p, tl, row_ctas);
  else
    DSV4KV_CUDA_LAUNCH((tiled_rows_kernel<Op, false>), dim3(static_cast<unsigned>(ctas)), dim3(kTiledCtaThreads),
                       stream, p, tl, row_ctas);
}

}  // namespace dsv4kv::cuda::detail
