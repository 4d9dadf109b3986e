/// \file rows.cuh
/// \brief The one row skeleton of the index operations (those that build sparse-attention index rows) and its policies.
///
/// The index operations are row transforms: read at most one row of int32 inputs, write one row of int32 (padding
/// included) and its length. The skeleton owns the row loop; an Op (the RowOp concept) says what a row is, a Policy
/// how threads map to rows: GroupRows (a group of 32, 64 or 128 threads per row, every thread finding the row's context
/// from broadcast loads) or TileRows (up to 64 rows per CTA, contexts in shared memory). Both end in the same epilogue:
/// kept-entry counts, Op::finish by one thread per row, faults summed per warp (count_faults). Cells are 4 columns
/// (int4 accesses) when rows are 16-byte aligned; Cells::kWhole says every row is a whole number of them.
#pragma once

#include <atomic>
#include <concepts>
#include <utility>

#include "device_limits.cuh"
#include "dispatch.cuh"
#include "fault_count.cuh"
#include "host_arith.cuh"
#include "launch.cuh"

namespace dsv4kv::cuda::detail {

// Cells

/// How the columns of a row are grouped.
enum class Cells {
  kScalar,  ///< one column per cell (rows not 16-byte aligned)
  kVector,  ///< 4 columns per cell (int4), a scalar tail when the width is not a multiple of 4
  kWhole,   ///< 4 columns per cell, every row a whole number of cells
};

template <Cells kC>
inline constexpr int kCellWidth = kC == Cells::kScalar ? 1 : 4;

/// The raw inputs of the cell at column c of an int32 row of `width` columns: columns c..c+3 for vector cells (one int4
/// load when all four exist; the row must be 16-byte aligned and c a multiple of 4), else column c alone; -1 for
/// columns past the row.
template <Cells kC>
__device__ __forceinline__ void load_row_cell(const int32_t* row, int64_t width, int64_t c, int32_t (&x)[4]) {
  if (kC == Cells::kWhole || (kC == Cells::kVector && c + 3 < width)) {
    const int4 v = __ldg(reinterpret_cast<const int4*>(row + c));
    x[0] = v.x;
    x[1] = v.y;
    x[2] = v.z;
    x[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < kCellWidth<kC>; ++j) x[j] = c + j < width ? __ldg(row + c + j) : -1;
  }
}

/// True when `p` is 16-byte aligned and rows `stride` int32 apart stay so.
inline bool rows_vectorizable(const void* p, int64_t stride) { return rows_aligned16(p, stride * 4); }

/// Writes the cell at column c of a row from its raw inputs x.
template <class Op, Cells kC>
__device__ __forceinline__ void write_cell(const typename Op::Params& p, const typename Op::Ctx& cx, int32_t* out,
                                           int64_t c, int64_t width, const int32_t (&x)[4], spec::Faults& f,
                                           int32_t& kept) {
  if constexpr (kC == Cells::kScalar) {
    if (c < width) out[c] = Op::value(p, cx, c, x[0], f, kept);
  } else {
    if constexpr (requires { Op::cell(p, cx, c, x, f, kept); }) {
      // The Op writes whole cells itself (its per-row branch once per cell, not per column).
      if (kC == Cells::kWhole || c + 3 < width) {
        *reinterpret_cast<int4*>(out + c) = Op::cell(p, cx, c, x, f, kept);
        return;
      }
    }
    if (kC == Cells::kWhole || c + 3 < width) {
      const int4 v = make_int4(Op::value(p, cx, c, x[0], f, kept), Op::value(p, cx, c + 1, x[1], f, kept),
                               Op::value(p, cx, c + 2, x[2], f, kept), Op::value(p, cx, c + 3, x[3], f, kept));
      *reinterpret_cast<int4*>(out + c) = v;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (c + j < width) out[c + j] = Op::value(p, cx, c + j, x[j], f, kept);
    }
  }
}

/// The launch's extra work item of this thread (Op::kLaunchChecks), reported into f.
template <class Op, int kThreads>
__device__ __forceinline__ void add_launch_faults(const typename Op::Params& p, spec::Faults& f) {
  if constexpr (Op::kLaunchChecks) f.add(Op::launch_faults(p, int64_t{blockIdx.x} * kThreads + threadIdx.x));
}

/// What a launch of the skeleton covers.
struct RowGrid {
  int64_t num_rows;
  int64_t width;      // int32 columns per row
  int cells_per_row;  // ceil(width / 4) with vector cells, else width
  int rows_per_cta;
};

/// The contract of an Op of the skeleton. Per row t: prologue(p, t, ctx, f) finds the row's context (row-level faults
/// into f); load<kC, kCtx>(p, t, c, x, ctx) reads the raw inputs of the cell at column c, -1 where there is none, and
/// may read ctx only when kCtx (loads issued ahead of the context have kCtx = false); value(p, ctx, c, x, f, kept) is
/// column c's output, counting kept entries into kept; finish(p, ctx, t, f) writes the row's length (ctx.count holds
/// the kept entries when kCounts); out_row(p, t) is the row's first element. With kLaunchChecks, launch_faults(p, i)
/// checks work item i of the launch (e.g. request i). Optional: cell() (the whole 4-column cell as an int4, the same
/// results as value() per column) and prefetch() (PrefetchingOp).
template <class Op>
concept RowOp = requires(const typename Op::Params& p, typename Op::Ctx& cx, const typename Op::Ctx& ccx, int64_t t,
                         int64_t c, int32_t x, int32_t (&xs)[4], spec::Faults& f, int32_t& kept) {
  { p.error_count } -> std::convertible_to<int32_t*>;
  { cx.count } -> std::same_as<int32_t&>;
  { Op::kCounts } -> std::convertible_to<bool>;
  { Op::kLaunchChecks } -> std::convertible_to<bool>;
  Op::prologue(p, t, cx, f);
  Op::template load<Cells::kScalar, true>(p, t, c, xs, ccx);
  Op::template load<Cells::kVector, false>(p, t, c, xs, ccx);
  { Op::value(p, ccx, c, x, f, kept) } -> std::same_as<int32_t>;
  Op::finish(p, ccx, t, f);
  { Op::out_row(p, t) } -> std::same_as<int32_t*>;
}
&&(!Op::kLaunchChecks || requires(const typename Op::Params& p, int64_t i) {
  { Op::launch_faults(p, i) } -> std::convertible_to<int32_t>;
});

/// Ops with the optional prefetch().
template <class Op>
concept PrefetchingOp = requires(const typename Op::Params& p) {
  Op::prefetch(p, int64_t{0});
};

// Policies

/// Threads of every GroupRows CTA.
inline constexpr int kGroupRowsThreads = 128;

/// Whether a launch of `num_rows` rows is "few rows" for the GroupRows launches: fewer than two rows per 128-thread CTA
/// slot of the device (cta_slots; 4,224 on an H200). The lean launches of global_topk and mixed give such rows a whole
/// CTA each, so that they spread over every multiprocessor (see bench/RESULTS.md#global-topk-lean-launch).
inline bool few_group_rows(int64_t num_rows) { return num_rows < 2 * cta_slots(kGroupRowsThreads); }

/// One row per group of 2^kGroupShift threads of a 128-thread CTA (7: one row per CTA; several rows per group were
/// 1.3-2.8x slower, see bench/RESULTS.md#global-topk-lean-launch). kBatch cells per thread per round, all loads of a
/// round before any store; with kPrefetch the first round's loads are issued before the context is found (Op::load
/// with kCtx = false). kMinCtas > 0: resident CTAs per multiprocessor the register count must allow.
template <int kGroupShift, int kBatch, bool kPrefetch, int kMinCtas = 0>
struct GroupRows {
  static constexpr int kThreads = kGroupRowsThreads;
  static constexpr int kMinCtasPerSm = kMinCtas;
  static constexpr int kGroup = 1 << kGroupShift;
  static constexpr int kRowsPerCta = kThreads / kGroup;
  static_assert(kGroupShift >= 5 && kGroupShift <= 7, "a group is 1 to 4 whole warps of the CTA");

  static int rows_per_cta(int64_t /*num_rows*/, int64_t /*cells*/, int64_t /*wave*/) { return kRowsPerCta; }

  /// The calling thread's row. With one row per CTA the row comes from blockIdx alone (threadIdx.x >> 7 is 0, but the
  /// compiler does not know it): the row, and so every value of its context, is then provably the same for all threads
  /// and lives in uniform registers (the mixed lean launch 46 -> 32 registers, ptxas sm_90a).
  __device__ __forceinline__ static int64_t thread_row() {
    return kRowsPerCta == 1 ? int64_t{blockIdx.x} : int64_t{blockIdx.x} * kRowsPerCta + (threadIdx.x >> kGroupShift);
  }
  /// The calling thread's place in its row's group.
  __device__ __forceinline__ static int thread_lane() {
    return kRowsPerCta == 1 ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x & (kGroup - 1));
  }

  /// Op::prefetch of the group's row, by its first thread.
  template <class Op>
  __device__ __forceinline__ static void prefetch(const typename Op::Params& p, const RowGrid& g) {
    const int64_t t = thread_row();
    if (thread_lane() == 0 && t < g.num_rows) Op::prefetch(p, t);
  }

  template <class Op, Cells kC>
  __device__ __forceinline__ static void run(const typename Op::Params& p, const RowGrid& g) {
    constexpr int kW = kCellWidth<kC>;
    const int64_t t = thread_row();
    const int lane = thread_lane();
    const bool live = t < g.num_rows;
    spec::Faults f;
    add_launch_faults<Op, kThreads>(p, f);
    typename Op::Ctx cx;
    cx.count = 0;
    int32_t kept = 0;
    if (live) {
      const int cells = g.cells_per_row;
      int32_t x[kBatch][4];
      auto load_batch = [&](int base, auto with_ctx) {
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int cell = base + u * kGroup;
          if (cell < cells) Op::template load<kC, decltype(with_ctx)::value>(p, t, int64_t{cell} * kW, x[u], cx);
        }
      };
      if constexpr (kPrefetch) load_batch(lane, Const<false>{});  // they do not depend on the context
      spec::Faults rf;
      Op::prologue(p, t, cx, rf);
      if (lane == 0) f.add(rf.n);  // one thread reports the row
      int32_t* out = Op::out_row(p, t);
      for (int base = lane; base < cells; base += kGroup * kBatch) {
        if (!kPrefetch || base != lane) load_batch(base, Const<true>{});
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int cell = base + u * kGroup;
          if (cell >= cells) break;
          write_cell<Op, kC>(p, cx, out, int64_t{cell} * kW, g.width, x[u], f, kept);
        }
      }
      // Without counts the row is done here (the context needs to outlive the loop no further).
      if constexpr (!Op::kCounts) {
        if (lane == 0) Op::finish(p, cx, t, f);
      }
    }
    // Epilogue: a barrier only for the kept counts (a warp never straddles two groups); the faults, the row leader's
    // finish faults included, go through count_faults.
    if constexpr (Op::kCounts) {
      __shared__ int32_t sums[kMaxWarps];
      const int32_t s = warp_sum(kept);
      if ((threadIdx.x & 31) == 0) sums[threadIdx.x >> 5] = s;
      __syncthreads();
      if (live && lane == 0) {
        int32_t sum = 0;
#pragma unroll
        for (int w = 0; w < (kGroup >= 32 ? kGroup / 32 : 1); ++w) sum += sums[(threadIdx.x >> 5) + w];
        cx.count = sum;
        Op::finish(p, cx, t, f);
      }
    }
    count_faults(p.error_count, f.n);
  }
};

/// Rows per CTA at most under TileRows (the shared-memory context array).
inline constexpr int kTileMaxRows = 64;
/// Cells each thread keeps in flight under TileRows.
inline constexpr int kTileUnroll = 4;

/// Up to kTileMaxRows rows per 256-thread CTA: thread r finds row r's context into shared memory (all rows' dependent
/// loads in parallel), one barrier, then the rows' cells as one flat array. For long context chains and every shape
/// the GroupRows launches do not take.
struct TileRows {
  static constexpr int kThreads = 256;
  static constexpr int kMinCtasPerSm = 0;

  /// Rows per CTA: enough that the grid is about one wave of resident CTAs (`wave`: every row context of a CTA is found
  /// with one round of dependent loads, so more rows per CTA amortize it), at least one cell per thread, and few enough
  /// that small batches still spread over many CTAs (8,192 rows of 640 columns: one wave of 528 CTAs 16.6 us, 2,048
  /// CTAs 18.8 us; see bench/RESULTS.md#combine-launch-shape).
  static int rows_per_cta(int64_t num_rows, int64_t cells, int64_t wave) {
    int64_t rows = ceil_div(num_rows, wave > 0 ? wave : 1);
    const int64_t fill = cells > 0 ? ceil_div(kThreads, cells) : 1;
    if (rows < fill) rows = fill;
    rows = rows < 1 ? 1 : (rows > kTileMaxRows ? kTileMaxRows : rows);
    while (rows > 1 && rows * cells > (int64_t{1} << 31)) rows /= 2;  // cell indices are 32-bit
    return static_cast<int>(rows);
  }

  /// The CTA's rows: [row0, row0 + return value).
  __device__ __forceinline__ static int cta_rows(const RowGrid& g, int64_t& row0) {
    row0 = int64_t{blockIdx.x} * g.rows_per_cta;
    const int64_t left = g.num_rows - row0;
    return left <= 0 ? 0 : (left < g.rows_per_cta ? static_cast<int>(left) : g.rows_per_cta);
  }

  /// Op::prefetch of row r of the CTA, by thread r (the thread that finds its context).
  template <class Op>
  __device__ __forceinline__ static void prefetch(const typename Op::Params& p, const RowGrid& g) {
    int64_t row0;
    if (static_cast<int>(threadIdx.x) < cta_rows(g, row0)) Op::prefetch(p, row0 + threadIdx.x);
  }

  template <class Op, Cells kC>
  __device__ __forceinline__ static void run(const typename Op::Params& p, const RowGrid& g) {
    __shared__ typename Op::Ctx ctx[kTileMaxRows];
    constexpr int kW = kCellWidth<kC>;
    spec::Faults f;
    add_launch_faults<Op, kThreads>(p, f);
    int64_t row0;
    const int rows = cta_rows(g, row0);
    const unsigned cpr = static_cast<unsigned>(g.cells_per_row);
    const unsigned cells = static_cast<unsigned>(rows) * cpr;

    int32_t x[kTileUnroll][4];
    auto load_batch = [&](unsigned base) {
#pragma unroll
      for (int u = 0; u < kTileUnroll; ++u) {
        const unsigned cell = base + u * kThreads;
        if (cell >= cells) break;
        const unsigned r = cell / cpr;
        Op::template load<kC, false>(p, row0 + r, int64_t{cell - r * cpr} * kW, x[u], ctx[0]);
      }
    };
    load_batch(threadIdx.x);
    if (static_cast<int>(threadIdx.x) < rows) {
      ctx[threadIdx.x].count = 0;
      Op::prologue(p, row0 + threadIdx.x, ctx[threadIdx.x], f);
    }
    __syncthreads();

    for (unsigned base = threadIdx.x; base < cells; base += kThreads * kTileUnroll) {
      if (base != threadIdx.x) load_batch(base);
#pragma unroll
      for (int u = 0; u < kTileUnroll; ++u) {
        const unsigned cell = base + u * kThreads;
        if (cell >= cells) break;
        const unsigned r = cell / cpr;
        const typename Op::Ctx& cx = ctx[r];
        int32_t kept = 0;
        write_cell<Op, kC>(p, cx, Op::out_row(p, row0 + r), int64_t{cell - r * cpr} * kW, g.width, x[u], f, kept);
        if constexpr (Op::kCounts) {
          // When rows are whole multiples of 32 cells, a warp's 32 consecutive cells of one step lie in one row (and
          // the warp leaves the loop together): one shared atomic per warp instead of one per cell, which would
          // serialize on the row's counter.
          if (cpr % 32 == 0) {
            const int32_t sum = warp_sum(kept);
            if ((threadIdx.x & 31) == 0 && sum != 0) atomicAdd_block(&ctx[r].count, sum);
          } else if (kept != 0) {
            atomicAdd_block(&ctx[r].count, kept);
          }
        }
      }
    }
    if constexpr (Op::kCounts) __syncthreads();
    if (static_cast<int>(threadIdx.x) < rows) Op::finish(p, ctx[threadIdx.x], row0 + threadIdx.x, f);
    count_faults(p.error_count, f.n);
  }
};

/// The skeleton's one kernel: Policy's row loop over Op's rows. With kPrefetch (a PDL launch of few rows: launch_rows),
/// each row's inputs are first hinted into L2 (Op::prefetch), so that the latency of the row's first DRAM reads
/// overlaps the previous kernel instead of following it (the decode chain with PDL 10.1 -> 9.7 us). Only for launches
/// of one wave and no more rows than resident CTAs: prefetching launches of several waves slowed the prefill chain. A
/// compile-time flag, because a run-time test changed the code after the wait and slowed plain launches (see
/// bench/RESULTS.md#l2-prefetch-before-wait).
template <RowOp Op, class Policy, Cells kC, bool kPrefetch = false>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kMinCtasPerSm)
    rows_kernel(const typename Op::Params p, const RowGrid g) {
  if constexpr (kPrefetch) Policy::template prefetch<Op>(p, g);
  grid_dependency_begin();
  Policy::template run<Op, kC>(p, g);
}

/// CTAs of rows_kernel<Op, Policy, kC> resident at once on the current device: multiprocessors x resident CTAs per
/// multiprocessor. Cached per kernel and device (host-side queries only, so launches stay capturable).
template <class Op, class Policy, Cells kC>
int64_t resident_ctas() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int64_t> cache[kMaxDevices] = {};
  int dev = 0;
  DSV4KV_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 0 && dev < kMaxDevices) {
    const int64_t hit = cache[dev].load(std::memory_order_relaxed);
    if (hit > 0) return hit;
  }
  int per_sm = 0;
  DSV4KV_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rows_kernel<Op, Policy, kC>, Policy::kThreads, 0));
  const int64_t n = int64_t{device_limits().sms} * (per_sm > 0 ? per_sm : 1);
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(n, std::memory_order_relaxed);
  return n;
}

/// Launches Op's rows under Policy: `num_rows` rows of `width` columns, cells as `cells` says, plus CTAs for
/// `launch_items` work items of Op::launch_faults (grid thread i checks item i).
template <RowOp Op, class Policy, Cells... kCs>
void launch_rows(const char* op, const typename Op::Params& p, int64_t num_rows, int64_t width, OneOf<kCs...> cells,
                 int64_t launch_items, cudaStream_t stream) {
  dispatch(
      [&](auto cell_kind) {
        constexpr Cells kC = decltype(cell_kind)::value;
        const int64_t cells_per_row = kC == Cells::kScalar ? width : ceil_div(width, 4);
        if (cells_per_row > (int64_t{1} << 30)) throw Error(op, "index rows wider than 2^30 columns are not supported");
        // The prefetch instance runs for a PDL launch of few rows only (rows_kernel says why).
        const bool may_prefetch = PrefetchingOp<Op> && use_pdl();
        // CTAs resident at once, asked once: TileRows sizes its rows by it, the prefetch gate below compares with it.
        const int64_t wave = std::is_same_v<Policy, TileRows> || may_prefetch ? resident_ctas<Op, Policy, kC>() : 0;
        RowGrid g;
        g.num_rows = num_rows;
        g.width = width;
        g.cells_per_row = static_cast<int>(cells_per_row);
        g.rows_per_cta = Policy::rows_per_cta(num_rows, cells_per_row, std::is_same_v<Policy, TileRows> ? wave : 0);
        const int64_t row_ctas = ceil_div(num_rows, g.rows_per_cta);
        const int64_t item_ctas = ceil_div(launch_items, Policy::kThreads);
        const int64_t ctas = row_ctas > item_ctas ? row_ctas : item_ctas;
        if (ctas == 0) return;
        if (ctas > kMaxGridX) throw Error(op, "too many rows for one launch");
        if constexpr (PrefetchingOp<Op>) {
          // Few rows: one wave, one row per resident CTA at most.
          if (may_prefetch && ctas <= wave && num_rows <= wave) {
            DSV4KV_CUDA_LAUNCH((rows_kernel<Op, Policy, kC, true>), dim3(static_cast<unsigned>(ctas)),
                               dim3(Policy::kThreads), stream, p, g);
            return;
          }
        }
        DSV4KV_CUDA_LAUNCH((rows_kernel<Op, Policy, kC>), dim3(static_cast<unsigned>(ctas)), dim3(Policy::kThreads),
                           stream, p, g);
      },
      cells);
}

/// Cells of a launch whose inputs and outputs are vectorizable (`vec`) or not.
inline OneOf<Cells::kScalar, Cells::kVector> cells_choice(bool vec) { return {vec ? Cells::kVector : Cells::kScalar}; }

}  // namespace dsv4kv::cuda::detail
