/// \file combine.cu
/// \brief combine_topk_swa_indices on the GPU (spec "combine_topk_swa_indices").
///
/// G threads per token row write the whole row, -1 padding included, in one
/// pass (int4 stores when rows are 16-byte aligned); top-k entries are read
/// only where the row uses them. The same launch also checks every request
/// once (thread i of the grid checks request i) so malformed requests are
/// reported exactly once, as the reference does.

#include "common.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

struct CombineParams {
  const int32_t* topk;         // [T, topk_width], row stride topk_stride
  int64_t topk_stride;
  int64_t num_tokens;
  const int32_t* qsl;          // [R + 1]
  const int32_t* seq_lens;     // [R]
  const int32_t* gather_lens;  // [>= R]
  int64_t num_reqs;
  int64_t window, compress_ratio, topk_n, M, N, max_image_tokens;
  const int32_t* left_visible;   // [>= T] or null
  const int32_t* right_visible;  // [>= T] or null
  int32_t* out;                // [T, width], row stride out_stride
  int64_t out_stride, width;
  int32_t* lens;               // [T]
  int64_t row_ctas;            // CTAs that own token rows
  bool vec;
  int32_t* error_count;
};

template <int G>
__global__ void __launch_bounds__(kIndexCtaThreads) combine_kernel(const CombineParams p) {
  constexpr int kRows = kIndexCtaThreads / G;
  const int tid = threadIdx.x % G;
  int32_t faults = 0;

  // Request checks, one thread per request.
  const int64_t gid = int64_t{blockIdx.x} * kIndexCtaThreads + threadIdx.x;
  if (gid < p.num_reqs && !sp::combine_request(p.qsl, p.seq_lens, p.gather_lens, gid).ok) ++faults;

  const int64_t t = int64_t{blockIdx.x} * kRows + threadIdx.x / G;
  if (blockIdx.x < p.row_ctas && t < p.num_tokens) {
    const int64_t base = p.qsl[0];
    const int64_t b = sp::find_request(p.qsl, p.num_reqs, base, t);
    sp::CombineRequest req{};
    if (b >= 0) req = sp::combine_request(p.qsl, p.seq_lens, p.gather_lens, b);
    int32_t* out = p.out + t * p.out_stride;
    if (b < 0 || !req.ok) {
      write_row<G>(out, p.width, p.vec, nullptr, 0, tid, [](int64_t, int32_t) { return sp::kNoIndex; });
      if (tid == 0) p.lens[t] = 0;
    } else {
      sp::Faults vis;  // visibility reports: one per token, counted by the row's first thread
      const int64_t left = p.left_visible != nullptr ? sp::visibility(p.left_visible[t], vis) : 0;
      const int64_t right = p.right_visible != nullptr ? sp::visibility(p.right_visible[t], vis) : 0;
      if (tid == 0) faults += vis.n;
      const sp::CombineRow row =
          sp::combine_row(req, t, p.window, p.compress_ratio, p.topk_n, p.max_image_tokens, left, right);
      sp::Faults f;
      write_row<G>(out, p.width, p.vec, p.topk + t * p.topk_stride, row.topk_len, tid, [&](int64_t c, int32_t x) {
        if (c < row.topk_len) return sp::combine_topk_entry(x, p.M, p.N, b, f);
        const int64_t j = c - row.topk_len;
        if (j < row.swa_len) return sp::combine_swa_entry(req, row, j, p.M, p.N, b, f);
        return sp::kNoIndex;
      });
      faults += f.n;
      if (tid == 0) p.lens[t] = static_cast<int32_t>(row.topk_len + row.swa_len);
    }
  }
  count_faults(p.error_count, faults);
}

}  // namespace

void combine_topk_swa_indices(const CombineArgs& args, cudaStream_t stream) {
  validate(args);
  const int64_t T = args.topk_indices.size(0);
  const int64_t R = args.seq_lens.size(0);

  CombineParams p;
  p.topk = args.topk_indices.as<const int32_t>();
  p.topk_stride = T > 1 ? args.topk_indices.stride[0] : 0;
  p.num_tokens = T;
  p.qsl = args.query_start_loc.as<const int32_t>();
  p.seq_lens = args.seq_lens.as<const int32_t>();
  p.gather_lens = args.gather_lens.as<const int32_t>();
  p.num_reqs = R;
  p.window = args.window_size;
  p.compress_ratio = args.compress_ratio;
  p.topk_n = args.topk;
  p.M = args.M;
  p.N = args.N;
  p.max_image_tokens = args.max_image_tokens;
  p.left_visible = args.left_visible.present() ? args.left_visible.as<const int32_t>() : nullptr;
  p.right_visible = args.right_visible.present() ? args.right_visible.as<const int32_t>() : nullptr;
  p.out = args.combined_indices.as<int32_t>();
  p.out_stride = T > 1 ? args.combined_indices.stride[0] : 0;
  p.width = args.combined_indices.size(1);
  p.lens = args.combined_lens.as<int32_t>();
  p.vec = rows_vectorizable(p.topk, p.topk_stride) && rows_vectorizable(p.out, p.out_stride);
  p.error_count = args.error_count;

  dispatch_row_group(p.width, [&](auto g) {
    constexpr int G = decltype(g)::value;
    p.row_ctas = ceil_div(T, kIndexCtaThreads / G);
    // Request checks only matter when someone counts them.
    const int64_t req_ctas = p.error_count != nullptr ? ceil_div(R, kIndexCtaThreads) : 0;
    const int64_t ctas = p.row_ctas > req_ctas ? p.row_ctas : req_ctas;
    if (ctas == 0) return;
    if (ctas > kMaxGridX) throw Error("combine_topk_swa_indices", "too many tokens for one launch");
    combine_kernel<G><<<static_cast<unsigned>(ctas), kIndexCtaThreads, 0, stream>>>(p);
    DSV4KV_CUDA_CHECK_LAUNCH("combine_kernel");
  });
}

}  // namespace dsv4kv::cuda
