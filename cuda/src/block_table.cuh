/// \file block_table.cuh
/// \brief Block-table lookups of the index operations: a request-local index to a global cache slot (spec::lookup_slot)
/// and the block-span remap, with the block size known at compile time (BlockLookup, Pow2Lookup) and the four lookups
/// of a cell in flight together.
#pragma once

#include "backend.cuh"
#include "dispatch.cuh"
#include "vector_memory.cuh"

namespace dsv4kv::cuda::detail {

/// spec::lookup_slot and spec::remap_block_span with the block size known at compile time when kBs > 0 (the division
/// and remainder of a non-negative index become a shift and a mask; table entries are read through the read-only path),
/// the run-time one for kGenericBlockSize. Same results and faults as the spec for every input.
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

  /// spec::remap_block_span, short-cut when span == bs: (v / bs) * bs + v % bs == v for v >= 0, so the result is
  /// to_index(v) (and -1 for v < 0, which to_index also gives, without a fault).
  __device__ __forceinline__ static int32_t remap(int64_t v, int64_t bs, int64_t span, bool identity, spec::Faults& f) {
    if (identity) return spec::to_index(v, f);
    return spec::remap_block_span(v, block_size_of<kBs>(bs), span, f);
  }
};

/// Block size 2^kShift with span == block size, in 32-bit arithmetic: `local >> kShift` is local / bs, and block * bs +
/// local % bs <= INT32_MAX exactly when block < 2^(31 - kShift), so the results and faults are spec::lookup_slot's for
/// every input; the remap is the identity. Cols = 0 stands for an empty row (every lookup through it is a fault).
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

  /// slot() of four columns, the same results and faults, with the four table loads issued before any of them is used.
  /// Why: under slot()'s per-column branches the compiler waits for each table load before it issues the next one
  /// (SASS, sm_90a), so a cell cost four dependent memory round trips. The one test that needs all four loads (every
  /// entry's block in range: the OR of the blocks, sentinels counted as block 0) keeps ptxas from interleaving them.
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
      // A sentinel reads nothing (block 0: it passes the test below); a column outside the row gives block -1 (it fails
      // it).
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

  /// slot4() of the run first, first + 1, ..., first + 3 whose first `n` columns hold positions (the others -1): the
  /// same results and faults from at most two table loads, since four consecutive positions span at most two blocks
  /// (block size 2^kShift >= 4).
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
    const int32_t b0 = ldg_if(n > 0 && c0<cols, row + c0, n> 0 ? -1 : 0);
    const int32_t b1 = ldg_if(n > 0 && c1 != c0 && c1<cols, row + c1, n> 0 && c1 != c0 ? -1 : b0);
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

/// Row `req` of a block table as (pointer, columns); a request outside the table gets an empty row, so every lookup
/// through it is dropped and reported. Returns whether `req` is inside it.
template <class L>
__device__ __forceinline__ bool table_row(const int32_t* data, int64_t rows, int64_t cols, int64_t stride, int64_t req,
                                          const int32_t*& row, typename L::Cols& row_cols) {
  const bool ok = req >= 0 && req < rows;
  row = computed_once(ok ? data + req * stride : data);
  row_cols = L::cols(ok ? cols : 0);
  return ok;
}

}  // namespace dsv4kv::cuda::detail
