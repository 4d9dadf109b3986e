/// \file global_topk.cu
/// \brief compute_global_topk_indices_and_lens on the GPU (spec "compute_global_topk_indices_and_lens").
///
/// The index_rows skeleton: each row's context is its request's block-table
/// row (found by every thread of the row's group); columns are block-table
/// lookups (the row is small and stays in L1; shift/mask for block sizes 64
/// and 128), with int4 loads and stores when rows are 16-byte aligned.

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
    const int32_t* in = p.topk + t * p.topk_stride;
    if (kVec && c + 3 < p.K) {
      const int4 v = __ldg(reinterpret_cast<const int4*>(in + c));
      x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
    } else {
#pragma unroll
      for (int j = 0; j < (kVec ? 4 : 1); ++j) x[j] = c + j < p.K ? __ldg(in + c + j) : -1;
    }
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

}  // namespace

void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args, cudaStream_t stream) {
  validate(args);
  const int64_t T = args.topk_indices.size(0);
  if (T == 0) return;

  GlobalTopkParams p;
  p.topk = args.topk_indices.as<const int32_t>();
  p.topk_stride = T > 1 ? args.topk_indices.stride[0] : 0;
  p.K = args.topk_indices.size(1);
  p.token_to_req = args.token_to_req.as<const int32_t>();
  p.block_table = args.block_table.as<const int32_t>();
  p.bt_rows = args.block_table.size(0);
  p.bt_cols = args.block_table.size(1);
  p.bt_stride = args.block_table.stride[0];
  p.block_size = args.block_size;
  p.is_valid = args.is_valid_token.as<const uint8_t>();
  p.out = args.global_topk_indices.as<int32_t>();
  p.out_stride = T > 1 ? args.global_topk_indices.stride[0] : 0;
  p.lens = args.topk_lens.as<int32_t>();
  p.error_count = args.error_count;
  const bool vec = rows_vectorizable(p.topk, p.topk_stride) && rows_vectorizable(p.out, p.out_stride);

  dispatch_block_size(p.block_size, [&](auto bs) {
    launch_index_rows<GlobalTopkOp<decltype(bs)::value>>("compute_global_topk_indices_and_lens", p, T, p.K, vec, 0,
                                                         stream);
  });
}

}  // namespace dsv4kv::cuda
