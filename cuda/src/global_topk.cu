/// \file global_topk.cu
/// \brief compute_global_topk_indices_and_lens on the GPU (spec "compute_global_topk_indices_and_lens").
///
/// G threads per token row (G from the row width, see dispatch_row_group),
/// int4 loads and stores when the rows are 16-byte aligned. The block-table
/// row of the token's request is small and shared by the row's lookups, so
/// it stays in L1.

#include "common.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

struct GlobalTopkParams {
  const int32_t* topk;          // [T, K], row stride topk_stride
  int64_t topk_stride;
  int64_t num_tokens, K;
  const int32_t* token_to_req;  // [>= T]
  const int32_t* block_table;   // [R, cols], row stride bt_stride
  int64_t bt_rows, bt_cols, bt_stride;
  int64_t block_size;
  const uint8_t* is_valid;      // [>= T] bool bytes
  int32_t* out;                 // [T, K], row stride out_stride
  int64_t out_stride;
  int32_t* lens;                // [T]
  bool vec;                     // topk and out rows 16-byte aligned
  int32_t* error_count;
};

template <int G, int kBs>
__global__ void __launch_bounds__(kIndexCtaThreads) global_topk_kernel(const GlobalTopkParams p) {
  constexpr int kRows = kIndexCtaThreads / G;
  __shared__ int32_t counts[kRows];
  if (G > 32 && threadIdx.x < kRows) counts[threadIdx.x] = 0;
  if constexpr (G > 32) __syncthreads();

  const int tid = threadIdx.x % G;
  const int64_t t = int64_t{blockIdx.x} * kRows + threadIdx.x / G;
  const bool active = t < p.num_tokens;
  const int64_t bs = block_size_of<kBs>(p.block_size);
  int32_t faults = 0;
  int32_t count = 0;
  bool req_ok = false;

  if (active) {
    const int64_t r = __ldg(p.token_to_req + t);
    req_ok = r >= 0 && r < p.bt_rows;
    int32_t* out = p.out + t * p.out_stride;
    if (req_ok) {
      const int32_t* row = p.block_table + r * p.bt_stride;
      sp::Faults f;
      write_row<G>(out, p.K, p.vec, p.topk + t * p.topk_stride, p.K, tid, [&](int64_t, int32_t local) {
        const int32_t v = sp::lookup_slot(local, row, p.bt_cols, bs, f);
        count += v >= 0 ? 1 : 0;
        return v;
      });
      faults += f.n;
    } else {
      // A request outside the block table: the whole row is -1, reported once.
      write_row<G>(out, p.K, p.vec, nullptr, 0, tid, [](int64_t, int32_t) { return sp::kNoIndex; });
      if (tid == 0) ++faults;
    }
  }
  count = group_sum<G>(count, counts);
  if (active && tid == 0) p.lens[t] = req_ok && __ldg(p.is_valid + t) != 0 ? count : 0;
  count_faults(p.error_count, faults);
}

}  // namespace

void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args, cudaStream_t stream) {
  validate(args);
  const int64_t T = args.topk_indices.size(0);
  if (T == 0) return;

  GlobalTopkParams p;
  p.topk = args.topk_indices.as<const int32_t>();
  p.topk_stride = T > 1 ? args.topk_indices.stride[0] : 0;
  p.num_tokens = T;
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
  p.vec = rows_vectorizable(p.topk, p.topk_stride) && rows_vectorizable(p.out, p.out_stride);
  p.error_count = args.error_count;

  dispatch_row_group(p.K, [&](auto g) {
    constexpr int G = decltype(g)::value;
    const int64_t ctas = ceil_div(T, kIndexCtaThreads / G);
    if (ctas > kMaxGridX) throw Error("compute_global_topk_indices_and_lens", "too many tokens for one launch");
    dispatch_block_size(p.block_size, [&](auto bs) {
      global_topk_kernel<G, decltype(bs)::value><<<static_cast<unsigned>(ctas), kIndexCtaThreads, 0, stream>>>(p);
      DSV4KV_CUDA_CHECK_LAUNCH("global_topk_kernel");
    });
  });
}

}  // namespace dsv4kv::cuda
