/// \file global_topk.cu
/// \brief compute_global_topk_indices_and_lens on the GPU (spec "compute_global_topk_indices_and_lens").
///
/// Two paths with the same bytes and fault counts:
///  * the lean kernel (block size 64 or 128, 16-byte aligned rows, topk a
///    multiple of 4): 32-128 threads per row, int4 loads and stores, 32-bit
///    lookups (lookup_slot_pow2);
///  * the index_rows skeleton for everything else: each row's context is its
///    request's block-table row (found by every thread of the row's group);
///    columns are block-table lookups through spec::lookup_slot (shift/mask
///    for block sizes 64 and 128), int4 accesses when rows are aligned.

#include "index_rows.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

struct GlobalTopkParams {
  const int32_t* topk;          // [T, K], row stride topk_stride
  int64_t topk_stride;
  int64_t K;
  const int32_t* token_to_req;  // [>= T]
  const int32_t* block_table;   // [R, cols], row stride bt_stride
  int64_t bt_rows, bt_cols, bt_stride;
  int64_t block_size;
  const uint8_t* is_valid;      // [>= T] bool bytes
  int32_t* out;                 // [T, K], row stride out_stride
  int64_t out_stride;
  int32_t* lens;                // [T]
  int32_t* error_count;
};

template <int kBs>
struct GlobalTopkOp {
  using Params = GlobalTopkParams;
  struct Ctx {
    const int32_t* table_row;  // block-table row of the token's request
    int32_t ok;                // the request is inside the table
    int32_t count;
  };
  static constexpr bool kCounts = true;

  __device__ static int32_t extra_faults(const Params&) { return 0; }

  __device__ static void prologue(const Params& p, int64_t t, Ctx& cx, int32_t& faults) {
    const int64_t r = __ldg(p.token_to_req + t);
    cx.ok = r >= 0 && r < p.bt_rows;
    cx.table_row = cx.ok ? p.block_table + r * p.bt_stride : nullptr;
    if (!cx.ok) ++faults;  // a request outside the block table: the whole row is -1, reported once
  }

  template <bool kVec>
  __device__ static void load(const Params& p, int64_t t, int64_t c, int32_t (&x)[4]) {
    load_row_cell<kVec>(p.topk + t * p.topk_stride, p.K, c, x);
  }

  __device__ static int32_t value(const Params& p, const Ctx& cx, int64_t, int64_t, int32_t local, sp::Faults& f,
                                  int32_t& kept) {
    if (!cx.ok) return sp::kNoIndex;
    const int32_t v = lookup_slot_fast<kBs>(local, cx.table_row, p.bt_cols, p.block_size, f);
    kept += v >= 0 ? 1 : 0;
    return v;
  }

  __device__ static void finish(const Params& p, const Ctx& cx, int64_t t) {
    p.lens[t] = cx.ok && __ldg(p.is_valid + t) != 0 ? cx.count : 0;
  }

  __device__ static int32_t* out_row(const Params& p, int64_t t) { return p.out + t * p.out_stride; }
};


/// The hot path (block size 64 or 128, rows 16-byte aligned, topk a multiple of 4): one CTA of
/// kLeanThreads per row and 32-bit arithmetic (lookup_slot_pow2). ncu on the H200 (2026-11-30)
/// showed the generic skeleton issuing about twice the instructions of the Triton kernel per
/// element; here each element is a sign test, a shift, one bounds test, one table load and one
/// overflow test.
constexpr int kLeanThreads = 128;
constexpr int kLeanUnroll = 4;

template <int kShift>
__device__ __forceinline__ int32_t lean_lookup(int32_t local, const int32_t* row, uint32_t cols, int32_t& faults,
                                               int32_t& kept) {
  const int32_t v = lookup_slot_pow2<kShift>(local, row, cols, faults);
  kept += v >= 0 ? 1 : 0;
  return v;
}

/// Threads per row: 32, 64 or 128, so that each thread has at most 2 cells of its row, or up to
/// kLeanUnroll per round when even 128 threads need more; a CTA holds kLeanThreads / G rows.
/// Measured on the H200 (2026-11-30, 8,192 rows of 512 columns = 128 cells): 64 threads with 2
/// cells each and a 2-cell batch 13.5 us, 32 threads with 4 cells 14.8 us, 64 threads with the
/// 4-cell batch (more registers for the same work) 14.7 us; rows of 2,048 columns stay at 128
/// threads with 4 cells (37.5 us; 64 x 8 39.1 us, 32 x 16 50.2 us, two rows per 256-thread CTA
/// 38.5 us).
inline int lean_group_shift(int64_t cells) { return cells <= 32 * 2 ? 5 : (cells <= 64 * 2 ? 6 : 7); }

/// Cells loaded per thread per round: 2 where lean_group_shift gives a thread at most 2 cells.
template <int kGroupShift>
inline constexpr int kLeanBatch = kGroupShift < 7 ? 2 : kLeanUnroll;

template <int kShift, int kGroupShift>
__global__ void __launch_bounds__(kLeanThreads) global_topk_lean_kernel(const GlobalTopkParams p, const int64_t T,
                                                                         const int cells) {
  constexpr int G = 1 << kGroupShift;
  const int64_t t = int64_t{blockIdx.x} * (kLeanThreads / G) + (threadIdx.x >> kGroupShift);
  const int lane = static_cast<int>(threadIdx.x & (G - 1));
  const bool live = t < T;
  int32_t faults = 0, kept = 0;
  bool ok = false;
  // The row's is_valid byte is read now, with the row's other loads, not after the barrier below:
  // there it would add a dependent memory round trip to every CTA's lifetime.
  const bool valid = live && lane == 0 && __ldg(p.is_valid + t) != 0;
  if (live) {
    const int4* in = reinterpret_cast<const int4*>(p.topk + t * p.topk_stride);
    int4* out = reinterpret_cast<int4*>(p.out + t * p.out_stride);
    const int64_t r = __ldg(p.token_to_req + t);
    ok = r >= 0 && r < p.bt_rows;
    const int32_t* row = p.block_table + (ok ? r : 0) * p.bt_stride;
    const uint32_t cols = ok ? cols32(p.bt_cols) : 0u;
    constexpr int kBatch = kLeanBatch<kGroupShift>;
    for (int base = lane; base < cells; base += G * kBatch) {
      int4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (base + u * G < cells) v[u] = __ldg(in + base + u * G);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int cell = base + u * G;
        if (cell >= cells) break;
        int4 o;
        if (ok) {
          o.x = lean_lookup<kShift>(v[u].x, row, cols, faults, kept);
          o.y = lean_lookup<kShift>(v[u].y, row, cols, faults, kept);
          o.z = lean_lookup<kShift>(v[u].z, row, cols, faults, kept);
          o.w = lean_lookup<kShift>(v[u].w, row, cols, faults, kept);
        } else {
          o = make_int4(sp::kNoIndex, sp::kNoIndex, sp::kNoIndex, sp::kNoIndex);
        }
        out[cell] = o;
      }
    }
    if (!ok && lane == 0) faults = 1;  // a request outside the block table: reported once per row
  }
  __shared__ int32_t warp_kept[kLeanThreads / 32];
  const int32_t wsum = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(kept)));
  if ((threadIdx.x & 31) == 0) warp_kept[threadIdx.x >> 5] = wsum;
  count_faults(p.error_count, faults);
  __syncthreads();
  if (live && lane == 0) {
    int32_t sum = 0;
#pragma unroll
    for (int w = 0; w < (G >= 32 ? G / 32 : 1); ++w) sum += warp_kept[(threadIdx.x >> 5) + w];
    p.lens[t] = ok && valid ? sum : 0;
  }
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

  const bool pow2 = p.block_size == 64 || p.block_size == 128;
  if (vec && pow2 && p.K % 4 == 0 && p.K / 4 <= 0x7FFFFFFF) {
    const int cells = static_cast<int>(p.K / 4);
    // Few rows (e.g. decode batches): a whole CTA per row keeps enough CTAs in flight. The cut-off,
    // 4,096 rows on the H200 (about two of its 2,112 thread-limited slots for 128-thread CTAs),
    // scales with the device's slots.
    const int64_t few_rows = ceil_div(int64_t{4096} * cta_slots(kLeanThreads), 2112);
    const int gs = T < few_rows ? 7 : lean_group_shift(cells);
    const int64_t ctas = ceil_div(T, int64_t{kLeanThreads} >> gs);
    if (ctas > kMaxGridX) throw Error("compute_global_topk_indices_and_lens", "too many rows for one launch");
    auto go = [&](auto shift, auto group) {
      DSV4KV_CUDA_LAUNCH((global_topk_lean_kernel<decltype(shift)::value, decltype(group)::value>),
                         dim3(static_cast<unsigned>(ctas)), dim3(kLeanThreads), stream, p, T, cells);
    };
    auto with_group = [&](auto shift) {
      if (gs == 5) go(shift, Const<5>{});
      else if (gs == 6) go(shift, Const<6>{});
      else go(shift, Const<7>{});
    };
    if (p.block_size == 64) with_group(Const<6>{});
    else with_group(Const<7>{});
    return;
  }
  dispatch_block_size(p.block_size, [&](auto bs) {
    launch_index_rows<GlobalTopkOp<decltype(bs)::value>>("compute_global_topk_indices_and_lens", p, T, p.K, vec, 0,
                                                         stream);
  });
}

}  // namespace dsv4kv::cuda
