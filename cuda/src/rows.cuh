/// \file rows.cuh
/// \brief The one row skeleton of the index operations (those that build sparse-attention index
/// rows) and its policies.
///
/// The index operations are row transforms: read at most one row of int32 inputs, write one row
/// of int32 (padding included) and its length. The skeleton owns the row loop; an Op says what a
/// row is, and a Policy how threads map to rows:
///   * GroupRows<kGroupShift, kBatch, kPrefetch>: a group of 2^kGroupShift threads (32, 64 or
///     128 = the whole CTA) owns one row; every thread finds its row's context itself (broadcast
///     loads: no shared memory, no barrier before the row is written); kBatch cells per thread
///     per round, all loads of a round before any store; with kPrefetch the first round's loads
///     are issued before the context is found, without it each round's loads come after the
///     context and may use it (Op::load with kCtx).
///   * TileRows: a CTA of 256 threads owns up to 64 rows: thread r finds row r's context into
///     shared memory (all rows' dependent loads in parallel), one barrier, then the CTA's rows
///     are one flat array of cells, kTileUnroll per thread per step. For rows whose contexts are
///     long chains of dependent loads and for every shape the GroupRows launches do not take.
/// Both end in the same epilogue: kept-entry counts per row (Op::kCounts), Op::finish by one
/// thread per row, and the faults summed per warp and added with one atomic (count_faults).
///
/// Cells are 4 columns (int4 loads and stores) when rows are 16-byte aligned; Cells::kWhole
/// says every row is a whole number of them (no tail code).
///
/// An Op provides:
///   Params (with `error_count`), Ctx (with `int32_t count`)
///   kCounts        whether finish needs the row's count of kept entries (in ctx.count)
///   kLaunchChecks  whether launch_faults(p, i) checks work item i of the launch (e.g. request i)
///   prologue(p, t, ctx, f)               row context; row-level reports into f
///   load<kC, kCtx>(p, t, c, x[4], ctx)  raw inputs of the cell at column c, -1 where none;
///                                        ctx may be read only with kCtx (loads issued ahead of
///                                        the context have kCtx = false)
///   value(p, ctx, c, x, f, kept)         column c; kept entries counted in kept
///   cell(p, ctx, c, x, f, kept)          optional: the whole 4-column cell at c as an int4 (same
///                                        results as value for each column)
///   finish(p, ctx, t, f)                 writes row t's length; row-level reports into f
///   out_row(p, t)                        the row's first element
///   prefetch(p, t)                       optional: hints row t's inputs into L2 (prefetch_l2*),
///                                        run before the grid dependency wait (rows_kernel says when)
#pragma once

#include <atomic>
#include <utility>

#include "common.cuh"

namespace dsv4kv::cuda::detail {

// ---------------------------------------------------------------------------
// Block-table lookups (a policy of the ops that translate indices)
// ---------------------------------------------------------------------------

/// spec::lookup_slot and spec::remap_block_span with the block size known at compile time when
/// kBs > 0 (the division and remainder of a non-negative index become a shift and a mask; table
/// entries are read through the read-only path), the run-time one for kGenericBlockSize. Same
/// results and faults as the spec for every input.
template <int kBs>
struct BlockLookup {
  using Cols = int64_t;
  __host__ __device__ static Cols cols(int64_t c) { return c; }

  __device__ __forceinline__ static int32_t slot(int64_t local, const int32_t* row, Cols cols, int64_t bs,
                                                 spec::Faults& f) {
    if constexpr (kBs == kGenericBlockSize) {
      return spec::lookup_slot(local, row, cols, bs, f);
    } else {
      if (local < 0) return spec::kNoIndex;
      const uint64_t u = static_cast<uint64_t>(local);
      const uint64_t col = u / static_cast<uint64_t>(kBs);
      if (col >= static_cast<uint64_t>(cols)) {  // cols >= 0
        f.add();
        return spec::kNoIndex;
      }
      const int32_t block = __ldg(row + col);
      if (block < 0) {
        f.add();
        return spec::kNoIndex;
      }
      return spec::to_index(int64_t{block} * kBs + static_cast<int64_t>(u % static_cast<uint64_t>(kBs)), f);
    }
  }

  /// spec::remap_block_span, short-cut when span == bs: (v / bs) * bs + v % bs == v for v >= 0,
  /// so the result is to_index(v) (and -1 for v < 0, which to_index also gives, without a fault).
  __device__ __forceinline__ static int32_t remap(int64_t v, int64_t bs, int64_t span, bool identity,
                                                  spec::Faults& f) {
    if (identity) return spec::to_index(v, f);
    return spec::remap_block_span(v, block_size_of<kBs>(bs), span, f);
  }
};

/// Block size 2^kShift with span == block size, in 32-bit arithmetic: `local >> kShift` is
/// local / bs, and block * bs + local % bs <= INT32_MAX exactly when block < 2^(31 - kShift), so
/// the results and faults are spec::lookup_slot's for every input; the remap is the identity.
/// Cols = 0 stands for an empty row (every lookup through it is a fault).
template <int kShift>
struct Pow2Lookup {
  using Cols = uint32_t;
  /// Column count of a table row (rows are far narrower than 2^32).
  __host__ __device__ static Cols cols(int64_t c) {
    return c < 0 ? 0u : (c > 0xFFFFFFFFll ? 0xFFFFFFFFu : static_cast<uint32_t>(c));
  }

  __device__ __forceinline__ static int32_t slot(int64_t local, const int32_t* row, Cols cols, int64_t,
                                                 spec::Faults& f) {
    if (local > spec::kIndexMax) return spec::lookup_slot(local, row, cols, int64_t{1} << kShift, f);
    if (local < 0) return spec::kNoIndex;
    const uint32_t col = static_cast<uint32_t>(local) >> kShift;
    if (col >= cols) {
      f.add();
      return spec::kNoIndex;
    }
    const int32_t block = __ldg(row + col);
    if (block < 0 || block >= (int32_t{1} << (31 - kShift))) {
      f.add();
      return spec::kNoIndex;
    }
    return (block << kShift) | (static_cast<int32_t>(local) & ((1 << kShift) - 1));
  }

  /// slot() of four columns, the same results and faults, with the four table loads issued
  /// before any of them is used. Why: under slot()'s per-column branches the compiler waits for
  /// each table load before it issues the next one (SASS, sm_90a), so a cell cost four dependent
  /// memory round trips. The one test that needs all four loads (every entry's block in range:
  /// the OR of the blocks, sentinels counted as block 0) keeps ptxas from interleaving them.
  __device__ __forceinline__ static void slot4(const int64_t (&local)[4], const int32_t* row, Cols cols,
                                               spec::Faults& f, int32_t (&out)[4]) {
    if (local[0] > spec::kIndexMax || local[1] > spec::kIndexMax || local[2] > spec::kIndexMax ||
        local[3] > spec::kIndexMax) {
#pragma unroll
      for (int j = 0; j < 4; ++j) out[j] = slot(local[j], row, cols, 0, f);
      return;
    }
    constexpr uint32_t kBlocks = 1u << (31 - kShift);  // blocks whose slots fit in int32
    int32_t block[4];
    uint32_t any = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t col = static_cast<uint32_t>(local[j]) >> kShift;
      // A sentinel reads nothing (block 0: it passes the test below); a column outside the row
      // gives block -1 (it fails it).
      block[j] = ldg_if(local[j] >= 0 && col < cols, row + col, local[j] < 0 ? 0 : -1);
      any |= static_cast<uint32_t>(block[j]);
    }
    if (any < kBlocks) {  // every entry has a block in [0, kBlocks): no fault
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int32_t l = static_cast<int32_t>(local[j]);
        out[j] = l < 0 ? spec::kNoIndex : (block[j] << kShift) | (l & ((1 << kShift) - 1));
      }
      return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int32_t l = static_cast<int32_t>(local[j]);
      const bool hit = static_cast<uint32_t>(block[j]) < kBlocks;
      f.add(l >= 0 && !hit ? 1 : 0);  // an entry outside the row, or a negative or too large block
      out[j] = l >= 0 && hit ? (block[j] << kShift) | (l & ((1 << kShift) - 1)) : spec::kNoIndex;
    }
  }

  /// slot4() of the run first, first + 1, ..., first + 3 whose first `n` columns hold positions
  /// (the others -1): the same results and faults from at most two table loads, since four
  /// consecutive positions span at most two blocks (block size 2^kShift >= 4).
  __device__ __forceinline__ static void slot4_run(int64_t first, int32_t n, const int32_t* row, Cols cols,
                                                   spec::Faults& f, int32_t (&out)[4]) {
    if (first < 0 || first > spec::kIndexMax - 3) {  // outside the 32-bit run: column by column
      const int64_t local[4] = {n > 0 ? first : -1, n > 1 ? first + 1 : -1, n > 2 ? first + 2 : -1,
                                n > 3 ? first + 3 : -1};
      slot4(local, row, cols, f, out);
      return;
    }
    constexpr uint32_t kBlocks = 1u << (31 - kShift);  // blocks whose slots fit in int32
    const uint32_t l0 = static_cast<uint32_t>(first);
    const uint32_t c0 = l0 >> kShift, c1 = (l0 + 3) >> kShift;
    // A column outside the row reads nothing and gives block -1 (a fault where a position uses it).
    const int32_t b0 = ldg_if(n > 0 && c0 < cols, row + c0, n > 0 ? -1 : 0);
    const int32_t b1 = ldg_if(n > 0 && c1 != c0 && c1 < cols, row + c1, n > 0 && c1 != c0 ? -1 : b0);
    int32_t faults = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t l = l0 + j;
      const int32_t block = (l >> kShift) == c0 ? b0 : b1;
      const bool hit = static_cast<uint32_t>(block) < kBlocks;
      faults += j < n && !hit ? 1 : 0;  // outside the row, or a negative or too large block
      out[j] = j < n && hit ? (block << kShift) | static_cast<int32_t>(l & ((1u << kShift) - 1)) : spec::kNoIndex;
    }
    f.add(faults);
  }

  __device__ __forceinline__ static int32_t remap(int32_t v, int64_t, int64_t, bool, spec::Faults&) {
    return v < 0 ? spec::kNoIndex : v;
  }
};

/// Row `req` of a block table as (pointer, columns); a request outside the table gets an empty
/// row, so every lookup through it is dropped and reported. Returns whether `req` is inside it.
template <class L>
__device__ __forceinline__ bool table_row(const int32_t* data, int64_t rows, int64_t cols, int64_t stride,
                                          int64_t req, const int32_t*& row, typename L::Cols& row_cols) {
  const bool ok = req >= 0 && req < rows;
  row = computed_once(ok ? data + req * stride : data);
  row_cols = L::cols(ok ? cols : 0);
  return ok;
}

// ---------------------------------------------------------------------------
// Cells
// ---------------------------------------------------------------------------

/// How the columns of a row are grouped.
enum class Cells {
  kScalar,  ///< one column per cell (rows not 16-byte aligned)
  kVector,  ///< 4 columns per cell (int4), a scalar tail when the width is not a multiple of 4
  kWhole,   ///< 4 columns per cell, every row a whole number of cells
};

template <Cells kC>
inline constexpr int kCellWidth = kC == Cells::kScalar ? 1 : 4;

/// The raw inputs of the cell at column c of an int32 row of `width` columns: columns c..c+3 for
/// vector cells (one int4 load when all four exist; the row must be 16-byte aligned and c a
/// multiple of 4), else column c alone; -1 for columns past the row.
template <Cells kC>
__device__ __forceinline__ void load_row_cell(const int32_t* row, int64_t width, int64_t c, int32_t (&x)[4]) {
  if (kC == Cells::kWhole || (kC == Cells::kVector && c + 3 < width)) {
    const int4 v = __ldg(reinterpret_cast<const int4*>(row + c));
    x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < kCellWidth<kC>; ++j) x[j] = c + j < width ? __ldg(row + c + j) : -1;
  }
}

/// True when `p` is 16-byte aligned and rows `stride` int32 apart stay so.
inline bool rows_vectorizable(const void* p, int64_t stride) { return rows_aligned16(p, stride * 4); }

/// Writes the cell at column c of a row from its raw inputs x.
template <class Op, Cells kC>
__device__ __forceinline__ void write_cell(const typename Op::Params& p, const typename Op::Ctx& cx,
                                           int32_t* out, int64_t c, int64_t width, const int32_t (&x)[4],
                                           spec::Faults& f, int32_t& kept) {
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
                               Op::value(p, cx, c + 2, x[2], f, kept),
                               Op::value(p, cx, c + 3, x[3], f, kept));
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

/// Ops with the optional prefetch().
template <class Op>
concept PrefetchingOp = requires(const typename Op::Params& p) { Op::prefetch(p, int64_t{0}); };

// ---------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------

/// Threads of every GroupRows CTA.
inline constexpr int kGroupRowsThreads = 128;

/// Whether a launch of `num_rows` rows is "few rows" for the GroupRows launches: fewer than two
/// rows per 128-thread CTA slot of the device (cta_slots; 4,224 on an H200). The lean launches of
/// global_topk and mixed give such rows a whole CTA each, so that they spread over every
/// multiprocessor (global_topk measured the cut-off at 4,096 rows; mixed takes it unmeasured).
inline bool few_group_rows(int64_t num_rows) { return num_rows < 2 * cta_slots(kGroupRowsThreads); }

/// One row per group of 2^kGroupShift threads of a 128-thread CTA (kGroupShift = 7: one row per
/// CTA). Measured on the H200 (2026-11-30): 2 or 4 rows per group (contexts found in one round)
/// were 1.3-2.8x slower from the register pressure of the per-row contexts. kMinCtas > 0: the
/// resident CTAs per multiprocessor that the kernel's register count must allow
/// (__launch_bounds__' second argument; 0 leaves the compiler's choice, the same code as without).
template <int kGroupShift, int kBatch, bool kPrefetch, int kMinCtas = 0>
struct GroupRows {
  static constexpr int kThreads = kGroupRowsThreads;
  static constexpr int kMinCtasPerSm = kMinCtas;
  static constexpr int kGroup = 1 << kGroupShift;
  static constexpr int kRowsPerCta = kThreads / kGroup;
  static_assert(kGroupShift >= 5 && kGroupShift <= 7, "a group is 1 to 4 whole warps of the CTA");

  static int rows_per_cta(int64_t /*num_rows*/, int64_t /*cells*/, int64_t /*wave*/) { return kRowsPerCta; }

  /// The calling thread's row. With one row per CTA the row comes from blockIdx alone
  /// (threadIdx.x >> 7 is 0, but the compiler does not know it): the row, and so every value of
  /// its context, is then provably the same for all threads and lives in uniform registers.
  /// Measured with ptxas (sm_90a): the mixed lean launch 46 -> 32 registers, global_topk's
  /// GroupRows<7, 4> 48 -> 40, the wide combine launch 78 -> 56 (with CombineOp::load's bare int4
  /// path; 90 without it).
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
          if (cell < cells)
            Op::template load<kC, decltype(with_ctx)::value>(p, t, int64_t{cell} * kW, x[u], cx);
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
    // Epilogue: a barrier only for the kept counts (a warp never straddles two groups); the
    // faults, the row leader's finish faults included, go through count_faults.
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

/// Up to kTileMaxRows rows per 256-thread CTA, contexts in shared memory.
struct TileRows {
  static constexpr int kThreads = 256;
  static constexpr int kMinCtasPerSm = 0;

  /// Rows per CTA: enough that the grid is about one wave of resident CTAs (`wave`: every row
  /// context of a CTA is found with one round of dependent loads, so more rows per CTA amortize
  /// it), at least one cell per thread, and few enough that small batches still spread over many
  /// CTAs. Measured on the H200 (2026-11-30, the top-k + SWA index op, 8,192 rows of 640 columns, int4 kernel with
  /// 54 registers, 4 resident CTAs per multiprocessor): a wave of 528 CTAs (16 rows each) 16.6 us,
  /// 1,024 (8 rows) 17.2 us, 2,048 (4 rows) 18.8 us.
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
        write_cell<Op, kC>(p, cx, Op::out_row(p, row0 + r), int64_t{cell - r * cpr} * kW,
                           g.width, x[u], f, kept);
        if constexpr (Op::kCounts) {
          // When rows are whole multiples of 32 cells, a warp's 32 consecutive cells of one step
          // lie in one row (and the warp leaves the loop together): one shared atomic per warp
          // instead of one per cell, which would serialize on the row's counter.
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

/// The skeleton's one kernel: Policy's row loop over Op's rows. With kPrefetch (a PDL launch of few
/// rows: launch_rows), each row's inputs are first hinted into L2 (Op::prefetch), so that the
/// latency of the row's first DRAM reads overlaps the previous kernel instead of following it.
/// Measured on the H200 (bench/RESULTS.md, 2026-12-02, fourteenth session, call 1), the decode
/// chain with PDL (global_topk 256 x 512, mixed 256 decode rows: one wave each): 10.1-10.2 ->
/// 9.7-9.8 us (9.5-9.6 with the block-table rows too, found by reading token_to_req before the
/// wait: a memory access before the wait, which scripts/check_fatbin.sh --pdl rejects); the prefill
/// chain's launches of several waves, whose first wave prefetched: 94.7-94.8 -> 95.5-95.6 us (every
/// CTA: 96.9-97.1), hence launches of one wave only, and of no more rows than CTAs the device holds
/// at once: a TileRows launch is one wave of up to 64 rows per CTA, whose prefetch would be the
/// whole input as in the every-CTA case. (Issuing griddepcontrol.launch_dependents before the wait
/// changed neither chain; nor, by more than 0.1 us, did prefetching block-table row t for row t, the
/// legal stand-in for the read of token_to_req: fifteenth session, call 2.) A compile-time flag,
/// not a run-time one: with the prefetch code behind a run-time test in the one instance, the code
/// after the wait compiled differently (ptxas: some global_topk instances 44 -> 40 registers) and
/// plain launches of global_topk ran slower (64 x 512 5.1-5.3 -> 5.4-5.6 us in five of six rounds,
/// 8,192 x 512 12.5-12.7 -> 12.8-12.9; fourteenth session, calls 4-5).
template <class Op, class Policy, Cells kC, bool kPrefetch = false>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kMinCtasPerSm)
    rows_kernel(const typename Op::Params p, const RowGrid g) {
  if constexpr (kPrefetch) Policy::template prefetch<Op>(p, g);
  grid_dependency_begin();
  Policy::template run<Op, kC>(p, g);
}

/// CTAs of rows_kernel<Op, Policy, kC> resident at once on the current device: multiprocessors x
/// resident CTAs per multiprocessor. Cached per kernel and device (host-side queries only, so
/// launches stay capturable).
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

/// Launches Op's rows under Policy: `num_rows` rows of `width` columns, cells as `cells` says,
/// plus CTAs for `launch_items` work items of Op::launch_faults (grid thread i checks item i).
template <class Op, class Policy, Cells... kCs>
void launch_rows(const char* op, const typename Op::Params& p, int64_t num_rows, int64_t width,
                 OneOf<kCs...> cells, int64_t launch_items, cudaStream_t stream) {
  dispatch(
      [&](auto cell_kind) {
        constexpr Cells kC = decltype(cell_kind)::value;
        const int64_t cells_per_row = kC == Cells::kScalar ? width : ceil_div(width, 4);
        if (cells_per_row > (int64_t{1} << 30)) throw Error(op, "index rows wider than 2^30 columns are not supported");
        // The prefetch instance runs for a PDL launch of few rows only (rows_kernel says why).
        const bool may_prefetch = PrefetchingOp<Op> && use_pdl();
        // CTAs resident at once, asked once: TileRows sizes its rows by it, the prefetch gate below
        // compares with it.
        const int64_t wave =
            std::is_same_v<Policy, TileRows> || may_prefetch ? resident_ctas<Op, Policy, kC>() : 0;
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
inline OneOf<Cells::kScalar, Cells::kVector> cells_choice(bool vec) {
  return {vec ? Cells::kVector : Cells::kScalar};
}

}  // namespace dsv4kv::cuda::detail
