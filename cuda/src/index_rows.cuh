/// \file index_rows.cuh
/// \brief The row-group kernel skeleton of global_topk (combine and mixed use
/// index_rows_tiled.cuh, measured faster for their longer row contexts).
///
/// The index operations are row transforms: read at most one row of int32,
/// write one row of int32 (padding included). They should stream like a copy,
/// so the skeleton is deliberately simple:
///   * a group of G threads (32, 64 or 128: the smallest that covers the row's
///     16-byte cells, capped at 128) owns one row (2 or 4 rows per group
///     measured slower); a CTA of kIndexCtaThreads threads holds
///     kIndexCtaThreads / G groups;
///   * every thread of the group computes its row's context itself (broadcast
///     loads from L1: no shared memory, no barrier before the row is
///     written), after it has issued the loads of its first cells, which do
///     not depend on the context;
///   * cells of 4 columns (int4 loads and stores) when the rows are 16-byte
///     aligned, single columns otherwise; 4 cells per thread per step,
///     all loads of a step issued before any store;
///   * kept-entry counts (for lengths) are reduced per warp, then across the
///     group's warps through shared memory (one barrier, only for ops that
///     need them); faults are summed per warp and added with one atomic.
///
/// An Op provides: `Params` (with `error_count`), `Ctx` (with `int32_t count`),
/// `kCounts` (whether lengths need the per-row count of kept entries) and
///   extra_faults(p)                 work of the launch that is not a row (e.g. request checks)
///   prologue(p, t, ctx, faults)     row context; row-level reports into faults
///   load<kVec>(p, t, c, x[4])       raw inputs of columns c..c+3 (or c), -1 where none
///   value(p, ctx, t, c, x, f, n)    column c of row t; kept entries counted in n
///   finish(p, ctx, t)               writes row t's length (ctx.count holds the row's kept count)
///   out_row(p, t)                   the row's first element
#pragma once

#include "common.cuh"

namespace dsv4kv::cuda::detail {


/// How a launch splits the rows: one row per group of 2^group_shift threads.
struct RowTiling {
  int64_t num_rows;
  int64_t width;       // int32 columns per row
  int cells_per_row;   // ceil(width / 4) with vectors, else width
  int group_shift;     // log2(threads per row): 5, 6 or 7
};

inline RowTiling make_tiling(int64_t num_rows, int64_t width, bool vec) {
  RowTiling t;
  t.num_rows = num_rows;
  t.width = width;
  const int64_t cells = vec ? ceil_div(width, 4) : width;
  if (cells > (int64_t{1} << 30)) throw Error("dsv4kv::cuda", "index rows wider than 2^30 columns are not supported");
  t.cells_per_row = static_cast<int>(cells);
  t.group_shift = cells > 64 ? 7 : (cells > 32 ? 6 : 5);
  static_assert(kIndexCtaThreads == 128, "groups of 32, 64 or 128 threads tile one CTA");
  return t;
}

/// One row per group. Measured on the H200 (2026-11-30): 2 or 4 consecutive rows per group (their
/// contexts found in one round of loads) were 1.3-2.8x slower for global_topk, combine and mixed,
/// from the register pressure of the per-row contexts.
template <class Op, bool kVec>
__global__ void __launch_bounds__(kIndexCtaThreads) index_rows_kernel(const typename Op::Params p, const RowTiling tl,
                                                                      const int64_t row_ctas) {
  constexpr int kW = kVec ? 4 : 1;
  constexpr int kU = 4;  // cells per thread per step
  int32_t faults = Op::extra_faults(p);
  if (blockIdx.x < row_ctas) {
    const int gs = tl.group_shift;
    const unsigned g = 1u << gs;
    const unsigned lane_g = threadIdx.x & (g - 1);
    const int64_t t = (int64_t{blockIdx.x} << (7 - gs)) + (threadIdx.x >> gs);
    const unsigned cells = t < tl.num_rows ? static_cast<unsigned>(tl.cells_per_row) : 0u;

    int32_t x[kU][4];
    auto load_batch = [&](unsigned base) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const unsigned cell = base + u * g;
        if (cell < cells) Op::template load<kVec>(p, t, int64_t{cell} * kW, x[u]);
      }
    };
    load_batch(lane_g);  // the first cells' inputs do not depend on the row's context

    // Every thread finds its row's context itself (broadcast loads).
    typename Op::Ctx cx;
    cx.count = 0;
    if (t < tl.num_rows) {
      int32_t row_faults = 0;
      Op::prologue(p, t, cx, row_faults);
      if (lane_g == 0) faults += row_faults;  // one thread reports the row
    }

    spec::Faults f;
    int32_t kept = 0;
    int32_t* out = t < tl.num_rows ? Op::out_row(p, t) : nullptr;
    for (unsigned base = lane_g; base < cells; base += g * kU) {
      if (base != lane_g) load_batch(base);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const unsigned cell = base + u * g;
        if (cell >= cells) break;
        const int64_t c = int64_t{cell} * kW;
        if (kVec && c + 3 < tl.width) {
          int4 v;
          v.x = Op::value(p, cx, t, c, x[u][0], f, kept);
          v.y = Op::value(p, cx, t, c + 1, x[u][1], f, kept);
          v.z = Op::value(p, cx, t, c + 2, x[u][2], f, kept);
          v.w = Op::value(p, cx, t, c + 3, x[u][3], f, kept);
          *reinterpret_cast<int4*>(out + c) = v;
        } else {
#pragma unroll
          for (int j = 0; j < kW; ++j)
            if (c + j < tl.width) out[c + j] = Op::value(p, cx, t, c + j, x[u][j], f, kept);
        }
      }
    }
    faults += f.n;

    if constexpr (Op::kCounts) {
      // A warp never straddles two groups (g >= 32): reduce per warp, then over the group's warps.
      __shared__ int32_t warp_sums[kIndexCtaThreads / 32];
      const int32_t wsum = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(kept)));
      if (gs == 5) cx.count = wsum;
      else if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = wsum;
      if (gs != 5) {
        __syncthreads();
        if (lane_g == 0) {
          int32_t sum = 0;
          for (unsigned w = 0; w < (g >> 5); ++w) sum += warp_sums[(threadIdx.x >> 5) + w];
          cx.count = sum;
        }
      }
    }
    if (lane_g == 0 && t < tl.num_rows) Op::finish(p, cx, t);
  }
  count_faults(p.error_count, faults);
}

/// Launches Op's kernel over `num_rows` rows of `width` columns (plus CTAs up to `min_ctas` that
/// only do Op::extra_faults work).
template <class Op>
void launch_index_rows(const char* op, const typename Op::Params& p, int64_t num_rows, int64_t width, bool vec,
                       int64_t min_ctas, cudaStream_t stream) {
  const RowTiling tl = make_tiling(num_rows, width, vec);
  const int64_t rows_per_cta = int64_t{kIndexCtaThreads} >> tl.group_shift;
  const int64_t row_ctas = ceil_div(num_rows, rows_per_cta);
  const int64_t ctas = row_ctas > min_ctas ? row_ctas : min_ctas;
  if (ctas == 0) return;
  if (ctas > kMaxGridX) throw Error(op, "too many rows for one launch");
  if (vec)
    DSV4KV_CUDA_LAUNCH((index_rows_kernel<Op, true>), dim3(static_cast<unsigned>(ctas)), dim3(kIndexCtaThreads), stream,
                       p, tl, row_ctas);
  else
    DSV4KV_CUDA_LAUNCH((index_rows_kernel<Op, false>), dim3(static_cast<unsigned>(ctas)), dim3(kIndexCtaThreads),
                       stream, p, tl, row_ctas);
}

}  // namespace dsv4kv::cuda::detail
