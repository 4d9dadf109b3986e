/// \file global_topk.cu
/// \brief compute_global_topk_indices_and_lens on the GPU (spec "compute_global_topk_indices_and_lens").
///
/// The seed's rule (every entry keeps its column) is one op (GlobalTopkOp) on the row skeleton (rows.cuh), two launches
/// with the same bytes and fault counts:
///  * lean (block size 64 or 128, 16-byte aligned rows, topk a multiple of 4): GroupRows with 32-128 threads per row,
///    int4 loads and stores, 32-bit lookups (Pow2Lookup);
///  * everything else: TileRows, lookups through spec::lookup_slot (shift/mask for block sizes 64 and 128:
///    BlockLookup), int4 accesses when rows are aligned.
/// The packing rule of the vllm_v4 and vllm_v41 profiles (spec::packs_global_topk) needs each entry's rank among the
/// row's translated entries: global_topk_packed_kernel, a CTA per row with a block scan.

#include "block_table.cuh"
#include "dispatch.cuh"
#include "fault_count.cuh"
#include "host_arith.cuh"
#include "launch.cuh"
#include "prefetch.cuh"
#include "rows.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;  // brings sp = dsv4kv::spec

struct GlobalTopkParams {
  const int32_t* topk;  // [T, K], row stride topk_stride
  int64_t topk_stride;
  int64_t K;
  const int32_t* token_to_req;  // [>= T]
  const int32_t* block_table;   // [R, cols], row stride bt_stride
  int64_t bt_rows, bt_cols, bt_stride;
  int64_t block_size;
  const uint8_t* is_valid;  // [>= T] bool bytes
  int32_t* out;             // [T, K], row stride out_stride
  int64_t out_stride;
  int32_t* lens;  // [T]
  int32_t* error_count;
};

/// A row's context is its request's block-table row; columns are lookups through it (lookup policy L: BlockLookup for
/// every block size, Pow2Lookup for the lean launches, which write whole cells through cell() below).
template <class L>
struct GlobalTopkOp {
  using Params = GlobalTopkParams;
  struct Ctx {
    const int32_t* table_row;  // block-table row of the token's request
    typename L::Cols cols;
    int32_t ok;     // the request is inside the table (else the row is all -1)
    int32_t valid;  // is_valid_token[t]
    int32_t count;
  };
  static constexpr bool kCounts = true;
  static constexpr bool kLaunchChecks = false;

  __device__ static void prologue(const Params& p, int64_t t, Ctx& cx, sp::Faults& f) {
    const int64_t r = __ldg(p.token_to_req + t);
    cx.ok = table_row<L>(p.block_table, p.bt_rows, p.bt_cols, p.bt_stride, r, cx.table_row, cx.cols);
    // Read with the row's other loads, not after the epilogue's barrier: there it would add a dependent memory round
    // trip to every CTA's lifetime.
    cx.valid = __ldg(p.is_valid + t) != 0;
    if (!cx.ok) f.add();  // a request outside the block table: the whole row is -1, reported once
  }

  template <Cells kC, bool kCtx>
  __device__ static void load(const Params& p, int64_t t, int64_t c, int32_t (&x)[4], const Ctx&) {
    load_row_cell<kC>(p.topk + t * p.topk_stride, p.K, c, x);
  }

  __device__ static int32_t value(const Params& p, const Ctx& cx, int64_t, int32_t local, sp::Faults& f,
                                  int32_t& kept) {
    if (!cx.ok) return sp::kNoIndex;
    const int32_t v = L::slot(local, cx.table_row, cx.cols, p.block_size, f);
    kept += v >= 0 ? 1 : 0;
    return v;
  }

  /// The whole 4-column cell (rows.cuh's optional cell(); the same values and counts as value()): the row's request
  /// test once per cell, and the four table loads in flight together (Pow2Lookup::slot4; 64 x 2,048: 6.9 -> 6.1 us, see
  /// bench/RESULTS.md#table-loads-per-cell).
  __device__ static int4 cell(const Params&, const Ctx& cx, int64_t, const int32_t (&x)[4], sp::Faults& f,
                              int32_t& kept) requires std::is_same_v<typename L::Cols, uint32_t>  // Pow2Lookup
  {
    if (!cx.ok) return make_int4(sp::kNoIndex, sp::kNoIndex, sp::kNoIndex, sp::kNoIndex);
    const int64_t local[4] = {x[0], x[1], x[2], x[3]};
    int32_t o[4];
    L::slot4(local, cx.table_row, cx.cols, f, o);
#pragma unroll
    for (int j = 0; j < 4; ++j) kept += o[j] >= 0 ? 1 : 0;
    return make_int4(o[0], o[1], o[2], o[3]);
  }

  /// The row's inputs into L2 (rows.cuh's optional prefetch): its top-k row, request and validity byte (not the
  /// block-table row: which one depends on a value read only after the wait).
  __device__ static void prefetch(const Params& p, int64_t t) {
    prefetch_l2_range(p.topk + t * p.topk_stride, p.K * 4);
    prefetch_l2(p.token_to_req + t);
    prefetch_l2(p.is_valid + t);
  }

  __device__ static void finish(const Params& p, const Ctx& cx, int64_t t, sp::Faults&) {
    p.lens[t] = cx.ok && cx.valid ? cx.count : 0;  // count <= K: inside int32
  }

  __device__ static int32_t* out_row(const Params& p, int64_t t) { return p.out + t * p.out_stride; }
};

/// The lean launches (block size 64 or 128, rows 16-byte aligned, topk a multiple of 4) run GroupRows with 32-bit
/// lookups (Pow2Lookup): per element a sign test, a shift, one bounds test, one table load and one overflow test, about
/// half the generic code's instructions. Threads per row: 32, 64 or 128, so that each thread has at most 2 cells of its
/// row, or up to 4 per round when even 128 threads need more (8,192 x 512: 13.5 us at 64 x 2 against 14.8 at 32 x 4,
/// see bench/RESULTS.md#global-topk-lean-launch).
inline int lean_group_shift(int64_t cells) { return cells <= 32 * 2 ? 5 : (cells <= 64 * 2 ? 6 : 7); }

template <int kGroupShift>
using LeanRows = GroupRows < kGroupShift,
      kGroupShift<7 ? 2 : 4, true>;

/// Threads of global_topk_packed_kernel: one CTA per row.
inline constexpr int kPackedThreads = 128;

/// The translated entries of one 4-column cell (lookups through L: Pow2Lookup's slot4 keeps the four table loads in
/// flight together, see bench/RESULTS.md#table-loads-per-cell; any other policy column by column).
template <class L>
__device__ __forceinline__ void packed_cell(const GlobalTopkParams& p, const int32_t* row, typename L::Cols cols,
                                            int32_t (&v)[4], sp::Faults& f) {
  if constexpr (std::is_same_v<typename L::Cols, uint32_t>) {
    const int64_t local[4] = {v[0], v[1], v[2], v[3]};
    L::slot4(local, row, cols, f, v);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = L::slot(v[j], row, cols, p.block_size, f);
  }
}

/// The packing profiles (spec::packs_global_topk): CTA t builds row t. Per round each thread translates kCells
/// consecutive 4-column cells (int4 loads when kVec: rows 16-byte aligned, K a multiple of 4), all loads issued before
/// any lookup; a thread's translated entries go to the exclusive prefix of the threads before it (warp scans, then the
/// warps' totals through shared memory), staged in shared memory and copied to the row after the entries of the rounds
/// before, so they land in column order; then columns [count, K) are -1. An invalid token's row is all -1. Same values
/// and faults as the reference.
template <class L, bool kVec, int kCells>
__global__ void __launch_bounds__(kPackedThreads) global_topk_packed_kernel(GlobalTopkParams p) {
  grid_dependency_begin();
  constexpr int kWarps = kPackedThreads / 32;
  constexpr int kRoundCols = kPackedThreads * kCells * 4;
  __shared__ int32_t warp_total[kWarps];
  // The round's translated entries, packed, before one coalesced copy to the row (stored straight from the threads, a
  // warp's 4-byte stores scatter over many sectors). A word of padding after every 32 entries puts the runs of
  // consecutive lanes in different banks: full runs store without bank conflicts (see
  // bench/RESULTS.md#global-topk-packed-rows).
  __shared__ int32_t stage[kRoundCols + kRoundCols / 32];
  const auto staged = [&](auto k) -> int32_t& {
    const auto u = static_cast<uint32_t>(k);  // in [0, kRoundCols)
    return stage[u + u / 32];
  };
  const int64_t t = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x / 32);
  sp::Faults f;
  const int64_t r = __ldg(p.token_to_req + t);
  const int32_t* table_row_ptr;
  typename L::Cols cols;
  const bool ok = table_row<L>(p.block_table, p.bt_rows, p.bt_cols, p.bt_stride, r, table_row_ptr, cols);
  const bool valid = __ldg(p.is_valid + t) != 0;
  if (!ok && threadIdx.x == 0) f.add();  // a request outside the block table: reported once, the row is all -1
  const int32_t* in = p.topk + t * p.topk_stride;
  int32_t* out = p.out + t * p.out_stride;
  int64_t count = 0;   // entries written by the rounds before; the same in every thread
  int64_t filled = 0;  // columns [0, filled) written (count, or K once the -1 tail went out with the last round)
  if (ok && valid) {   // an invalid token's row is all -1, without lookups (spec::packs_global_topk); CTA-uniform
    for (int64_t base = 0; base < p.K; base += kRoundCols) {
      const int64_t c0 = base + int64_t{threadIdx.x} * kCells * 4;
      int32_t v[kCells][4];
#pragma unroll
      for (int i = 0; i < kCells; ++i) {
        const int64_t c = c0 + 4 * i;
        if (kVec && c < p.K) {
          const int4 x = __ldg(reinterpret_cast<const int4*>(in + c));
          v[i][0] = x.x;
          v[i][1] = x.y;
          v[i][2] = x.z;
          v[i][3] = x.w;
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) v[i][j] = c + j < p.K ? __ldg(in + c + j) : sp::kNoIndex;
        }
      }
      int32_t n = 0;
#pragma unroll
      for (int i = 0; i < kCells; ++i) {
        packed_cell<L>(p, table_row_ptr, cols, v[i], f);
#pragma unroll
        for (int j = 0; j < 4; ++j) n += v[i][j] >= 0 ? 1 : 0;
      }
      int32_t incl = n;  // inclusive prefix of n over the warp's lanes
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int32_t y = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += y;
      }
      if (lane == 31) warp_total[warp] = incl;
      __syncthreads();
      int32_t before = 0, total = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const int32_t x = warp_total[w];
        before += w < warp ? x : 0;
        total += x;
      }
      int32_t at = before + incl - n;  // this thread's first entry in the round's packed run
#pragma unroll
      for (int i = 0; i < kCells; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (v[i][j] >= 0) staged(at++) = v[i][j];
      __syncthreads();
      if (kVec && base + kRoundCols >= p.K && count % 4 == 0) {
        // The last round, at a 16-byte aligned column: its entries and the row's -1 tail in one pass of 16-byte
        // stores, as the seed's rows store (see bench/RESULTS.md#global-topk-packed-rows). Only columns below total
        // (<= kRoundCols) are read from the stage; the rest of the vector is -1.
        for (int64_t k = int64_t{threadIdx.x} * 4; count + k < p.K; k += kPackedThreads * 4) {
          int4 o = make_int4(sp::kNoIndex, sp::kNoIndex, sp::kNoIndex, sp::kNoIndex);
          if (k + 4 <= total) {
            o = make_int4(staged(k), staged(k + 1), staged(k + 2), staged(k + 3));
          } else if (k < total) {
            o.x = staged(k);
            o.y = k + 1 < total ? staged(k + 1) : sp::kNoIndex;
            o.z = k + 2 < total ? staged(k + 2) : sp::kNoIndex;
          }
          *reinterpret_cast<int4*>(out + count + k) = o;
        }
        count += total;
        filled = p.K;
      } else {
        for (int k = static_cast<int>(threadIdx.x); k < total; k += kPackedThreads) out[count + k] = staged(k);
        count += total;
        filled = count;
      }
      __syncthreads();  // warp_total and stage are rewritten by the next round
    }
  }
  if (kVec && filled % 4 == 0) {  // an invalid row, or a tail at an aligned column: 16-byte stores of -1
    const int4 none = make_int4(sp::kNoIndex, sp::kNoIndex, sp::kNoIndex, sp::kNoIndex);
    for (int64_t c = filled + int64_t{threadIdx.x} * 4; c < p.K; c += kPackedThreads * 4)
      *reinterpret_cast<int4*>(out + c) = none;
  } else {
    for (int64_t c = filled + threadIdx.x; c < p.K; c += kPackedThreads) out[c] = sp::kNoIndex;
  }
  if (threadIdx.x == 0) p.lens[t] = static_cast<int32_t>(count);  // count <= K: inside int32
  count_faults(p.error_count, f.n);
}

}  // namespace

void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args, cudaStream_t stream) {
  validate(args);
  const int64_t T = args.topk_indices.size(0);
  if (T == 0) return;

  GlobalTopkParams p;
  p.topk = args.topk_indices.as<const int32_t>();
  p.topk_stride = kernel_stride(args.topk_indices, 0);  // every view here may be [*, 0]
  p.K = args.topk_indices.size(1);
  p.token_to_req = args.token_to_req.as<const int32_t>();
  p.block_table = args.block_table.as<const int32_t>();
  p.bt_rows = args.block_table.size(0);
  p.bt_cols = args.block_table.size(1);
  p.bt_stride = kernel_stride(args.block_table, 0);
  p.block_size = args.block_size;
  p.is_valid = args.is_valid_token.as<const uint8_t>();
  p.out = args.global_topk_indices.as<int32_t>();
  p.out_stride = kernel_stride(args.global_topk_indices, 0);
  p.lens = args.topk_lens.as<int32_t>();
  p.error_count = args.error_count;
  const bool vec = rows_vectorizable(p.topk, p.topk_stride) && rows_vectorizable(p.out, p.out_stride);

  constexpr const char* kOp = "compute_global_topk_indices_and_lens";
  if (sp::packs_global_topk(args.semantics)) {
    // One row per CTA, 128 threads and up to 4 cells each (2,048 columns in one round). Two rows of up to 512 columns
    // per CTA (64 threads each, as the seed's lean launch) measured slower (see
    // bench/RESULTS.md#global-topk-packed-rows).
    const int cells = p.K <= 512 ? 1 : (p.K <= 1024 ? 2 : 4);
    if (T > kMaxGridX) throw Error(kOp, "too many rows for one launch");
    const bool pow2 = p.block_size == 64 || p.block_size == 128;
    dispatch(
        [&](auto shift, auto v, auto n) {
          constexpr int kShift = decltype(shift)::value;
          using L = std::conditional_t<kShift == 0, BlockLookup<kGenericBlockSize>, Pow2Lookup<kShift>>;
          DSV4KV_CUDA_LAUNCH((global_topk_packed_kernel<L, decltype(v)::value, decltype(n)::value>),
                             dim3(static_cast<unsigned>(T)), dim3(kPackedThreads), stream, p);
        },
        OneOf<0, 6, 7>{pow2 ? (p.block_size == 64 ? 6 : 7) : 0}, flag_choice(vec && p.K % 4 == 0),
        OneOf<1, 2, 4>{cells});
    return;
  }
  if (vec && (p.block_size == 64 || p.block_size == 128) && p.K % 4 == 0) {
    // Few rows (e.g. decode batches): a whole CTA per row keeps enough CTAs in flight.
    const int gs = few_group_rows(T) ? 7 : lean_group_shift(p.K / 4);
    dispatch(
        [&](auto shift, auto group_shift) {
          launch_rows<GlobalTopkOp<Pow2Lookup<decltype(shift)::value>>, LeanRows<decltype(group_shift)::value>>(
              kOp, p, T, p.K, OneOf<Cells::kWhole>{Cells::kWhole}, 0, stream);
        },
        OneOf<6, 7>{p.block_size == 64 ? 6 : 7}, OneOf<5, 6, 7>{gs});
    return;
  }
  // Every other case: TileRows (each row's context found once, by one thread).
  dispatch(
      [&](auto bs) {
        launch_rows<GlobalTopkOp<BlockLookup<decltype(bs)::value>>, TileRows>(kOp, p, T, p.K, cells_choice(vec), 0,
                                                                              stream);
      },
      block_size_choice(p.block_size));
}

}  // namespace dsv4kv::cuda
