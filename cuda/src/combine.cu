/// \file combine.cu
/// \brief combine_topk_swa_indices on the GPU (spec "combine_topk_swa_indices").
///
/// Wide aligned rows take combine_lean_kernel (one CTA per row); the rest the
/// index_rows_tiled skeleton: a row's context is its request and the shape of
/// its row (top-k length, clamped window); each row is written completely,
/// -1 padding included, in the same kernel. The launch also checks every
/// request once (grid thread i checks request i), so a malformed request is
/// reported exactly once, as the reference does.

#include "index_rows_tiled.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

struct CombineParams {
  const int32_t* topk;         // [T, topk_width], row stride topk_stride
  int64_t topk_stride, topk_width;
  const int32_t* qsl;          // [R + 1]
  const int32_t* seq_lens;     // [R]
  const int32_t* gather_lens;  // [>= R]
  int64_t num_reqs;
  int64_t window, compress_ratio, topk_n, M, N, max_image_tokens;
  const int32_t* left_visible;   // [>= T] or null
  const int32_t* right_visible;  // [>= T] or null
  int32_t* out;                // [T, width], row stride out_stride
  int64_t out_stride;
  int32_t* lens;               // [T]
  int32_t* error_count;
};

struct CombineOp {
  using Params = CombineParams;
  struct Ctx {
    int64_t b;             // request, or -1: row all -1, length 0
    int64_t gather_start;
    int64_t swa_start;
    int64_t topk_len;
    int64_t swa_len;
    // 32-bit fast path, valid when `fast`: every entry of the row is provably in [0, kIndexMax]
    // (checked in the prologue), so the spec's 64-bit sums equal these 32-bit ones.
    int32_t fast;
    int32_t topk_base;  // M * b
    int32_t swa_base;   // M * b + N + swa_start - gather_start
    int32_t count;
  };
  static constexpr bool kCounts = false;

  /// One request check per grid thread: each malformed request is reported once.
  __device__ static int32_t extra_faults(const Params& p) {
    const int64_t b = int64_t{blockIdx.x} * kTiledCtaThreads + threadIdx.x;
    if (p.error_count == nullptr || b >= p.num_reqs) return 0;
    return sp::combine_request(p.qsl, p.seq_lens, p.gather_lens, b).ok ? 0 : 1;
  }

  __device__ static void prologue(const Params& p, int64_t t, Ctx& cx, int32_t& faults) {
    cx.b = sp::find_request(p.qsl, p.num_reqs, p.qsl[0], t);
    if (cx.b < 0) return;
    const sp::CombineRequest req = sp::combine_request(p.qsl, p.seq_lens, p.gather_lens, cx.b);
    if (!req.ok) {
      cx.b = -1;  // reported by the request check, not per token
      return;
    }
    sp::Faults vis;
    const int64_t left = p.left_visible != nullptr ? sp::visibility(p.left_visible[t], vis) : 0;
    const int64_t right = p.right_visible != nullptr ? sp::visibility(p.right_visible[t], vis) : 0;
    faults += vis.n;
    const sp::CombineRow row =
        sp::combine_row(req, t, p.window, p.compress_ratio, p.topk_n, p.max_image_tokens, left, right);
    cx.gather_start = req.gather_start;
    cx.swa_start = row.swa_start;
    cx.topk_len = row.topk_len;
    cx.swa_len = row.swa_len;
    // Fast path: top-k entries v + M*b (v in [0, kIndexMax]) are summed in 32 unsigned bits, which
    // holds while M*b <= kIndexMax; SWA entries M*b + N + swa_start - gather_start + j for
    // j < swa_len stay in [base, base + swa_len - 1].
    // (M and N are checked first so that M * b cannot overflow: |M * b| < 2^62.)
    const bool mn_ok = p.M >= 0 && p.M <= sp::kIndexMax && p.N >= 0 && p.N <= sp::kIndexMax;
    const int64_t mb = mn_ok ? p.M * cx.b : -1;
    const int64_t swa_base = mn_ok ? mb + p.N + row.swa_start - req.gather_start : -1;
    cx.fast = mn_ok && mb <= sp::kIndexMax && swa_base >= 0 &&
              row.swa_len >= 0 && swa_base + row.swa_len <= sp::kIndexMax && row.topk_len <= sp::kIndexMax;
    cx.topk_base = static_cast<int32_t>(mb);
    cx.swa_base = static_cast<int32_t>(swa_base);
  }

  template <bool kVec>
  __device__ static void load(const Params& p, int64_t t, int64_t c, int32_t (&x)[4]) {
    // Read ahead of the context: every column of topk_indices may be a top-k entry.
    load_row_cell<kVec>(p.topk + t * p.topk_stride, p.topk_width, c, x);
  }

  __device__ static int32_t value(const Params& p, const Ctx& cx, int64_t, int64_t c, int32_t x, sp::Faults& f,
                                  int32_t&) {
    if (cx.b < 0) return sp::kNoIndex;
    if (cx.fast) {
      if (c < cx.topk_len) {
        if (x < 0) return sp::kNoIndex;
        // x, topk_base in [0, kIndexMax]: the sum fits in 32 unsigned bits (combine_topk_entry).
        const uint32_t sum = static_cast<uint32_t>(x) + static_cast<uint32_t>(cx.topk_base);
        if (sum > static_cast<uint32_t>(sp::kIndexMax)) {
          f.add();
          return sp::kNoIndex;
        }
        return static_cast<int32_t>(sum);
      }
      const int64_t j = c - cx.topk_len;
      return j < cx.swa_len ? cx.swa_base + static_cast<int32_t>(j) : sp::kNoIndex;
    }
    if (c < cx.topk_len) return sp::combine_topk_entry(x, p.M, cx.b, f);
    const int64_t j = c - cx.topk_len;
    if (j >= cx.swa_len) return sp::kNoIndex;
    sp::CombineRequest req{};
    req.ok = true;
    req.gather_start = cx.gather_start;
    const sp::CombineRow row{cx.topk_len, cx.swa_start, cx.swa_len};
    return sp::combine_swa_entry(req, row, j, p.M, p.N, cx.b, f);
  }

  __device__ static void finish(const Params& p, const Ctx& cx, int64_t t) {
    p.lens[t] = cx.b < 0 ? 0 : static_cast<int32_t>(cx.topk_len + cx.swa_len);
  }

  __device__ static int32_t* out_row(const Params& p, int64_t t) { return p.out + t * p.out_stride; }
};


/// The path for wide, 16-byte aligned rows: one CTA of kLeanThreads per row, every thread finding
/// the row's context itself (CombineOp::prologue: broadcast loads), int4 loads and stores, no
/// per-cell division. A thread's top-k loads (kLeanCells cells per round) are all issued before
/// the context is found: measured on the H200 (2026-11-30, 8,192 rows of 2,176 columns) 37.5 us
/// against 41.6 us with one load in flight per thread. The tiled skeleton, kept for narrower or
/// unaligned rows, maps flat cell indices to rows with a run-time division per cell. Same bytes
/// and faults (CombineOp::value).
constexpr int kLeanThreads = 128;
/// Cells per thread per round: a row of 2,048 top-k + 128 window columns (544 cells) in one round.
constexpr int kLeanCells = 5;

__global__ void __launch_bounds__(kLeanThreads) combine_lean_kernel(const CombineParams p, const int64_t T,
                                                                    const int cells) {
  // One request check per grid thread: each malformed request is reported once.
  const int64_t b = int64_t{blockIdx.x} * kLeanThreads + threadIdx.x;
  int32_t faults = p.error_count != nullptr && b < p.num_reqs &&
                           !sp::combine_request(p.qsl, p.seq_lens, p.gather_lens, b).ok
                       ? 1
                       : 0;
  const int64_t t = blockIdx.x;
  if (t < T) {
    const int first = static_cast<int>(threadIdx.x);
    const int4* in4 = reinterpret_cast<const int4*>(p.topk + t * p.topk_stride);
    // Cells wholly inside topk_indices take a bare int4 load; only the rest goes through
    // CombineOp::load. (Sending every cell through CombineOp::load, whose bounds tests and scalar
    // fallback then exist for each of the kLeanCells cells, takes this kernel from 56 to 92
    // registers.)
    const int full_cells = static_cast<int>(p.topk_width / 4 < cells ? p.topk_width / 4 : cells);
    int32_t x[kLeanCells][4];
    auto load_round = [&](int base) {
#pragma unroll
      for (int u = 0; u < kLeanCells; ++u) {
        const int cell = base + u * kLeanThreads;
        if (cell < full_cells) {
          const int4 q = __ldg(in4 + cell);
          x[u][0] = q.x; x[u][1] = q.y; x[u][2] = q.z; x[u][3] = q.w;
        } else if (cell < cells) {
          CombineOp::load<true>(p, t, int64_t{cell} * 4, x[u]);
        }
      }
    };
    load_round(first);
    CombineOp::Ctx cx;
    cx.count = 0;
    int32_t row_faults = 0;
    CombineOp::prologue(p, t, cx, row_faults);
    if (threadIdx.x == 0) faults += row_faults;
    int4* out = reinterpret_cast<int4*>(p.out + t * p.out_stride);
    sp::Faults f;
    int32_t kept = 0;
    for (int base = first; base < cells; base += kLeanThreads * kLeanCells) {
      if (base != first) load_round(base);
#pragma unroll
      for (int u = 0; u < kLeanCells; ++u) {
        const int cell = base + u * kLeanThreads;
        if (cell >= cells) break;
        const int64_t c = int64_t{cell} * 4;
        const int4 o = make_int4(CombineOp::value(p, cx, t, c, x[u][0], f, kept),
                                 CombineOp::value(p, cx, t, c + 1, x[u][1], f, kept),
                                 CombineOp::value(p, cx, t, c + 2, x[u][2], f, kept),
                                 CombineOp::value(p, cx, t, c + 3, x[u][3], f, kept));
        out[cell] = o;
      }
    }
    faults += f.n;
    if (threadIdx.x == 0) CombineOp::finish(p, cx, t);
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
  p.topk_stride = kernel_stride(args.topk_indices, 0);  // topk_indices may be [T, 0]
  p.topk_width = args.topk_indices.size(1);
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
  // Visibility is read only when the row reserves image columns (spec::visibility_in_effect).
  const bool vis = sp::visibility_in_effect(args.left_visible.present(), args.max_image_tokens);
  p.left_visible = vis ? args.left_visible.as<const int32_t>() : nullptr;
  p.right_visible = vis ? args.right_visible.as<const int32_t>() : nullptr;
  p.out = args.combined_indices.as<int32_t>();
  p.out_stride = T > 1 ? args.combined_indices.stride[0] : 0;
  p.lens = args.combined_lens.as<int32_t>();
  p.error_count = args.error_count;
  const bool vec = rows_vectorizable(p.topk, p.topk_stride) && rows_vectorizable(p.out, p.out_stride);
  const int64_t width = args.combined_indices.size(1);  // a multiple of 128
  // Measured on the H200 (2026-11-30, 8,192 rows): the lean kernel wins on wide rows (topk 2048,
  // 2,176 columns: 37.4 vs 43.8 us) and loses on narrow ones (640 columns: 24.5 vs 17.2 us, its
  // CTAs idle a quarter of their threads on the last cells), so it takes rows of >= 2,048 columns.
  if (vec && width >= 4 * 4 * kLeanThreads) {
    const int64_t req_ctas = p.error_count != nullptr ? ceil_div(R, kLeanThreads) : 0;
    const int64_t ctas = T > req_ctas ? T : req_ctas;
    if (ctas == 0) return;
    if (ctas > kMaxGridX || width / 4 > 0x7FFFFFFF)
      throw Error("combine_topk_swa_indices", "rows too wide or too many for one launch");
    DSV4KV_CUDA_LAUNCH(combine_lean_kernel, dim3(static_cast<unsigned>(ctas)), dim3(kLeanThreads), stream, p, T,
                       static_cast<int>(width / 4));
    return;
  }
  // Request checks only matter when someone counts them.
  const int64_t req_ctas = p.error_count != nullptr ? ceil_div(R, kTiledCtaThreads) : 0;
  launch_tiled_rows<CombineOp>("combine_topk_swa_indices", p, T, args.combined_indices.size(1), vec, req_ctas, stream);
}

}  // namespace dsv4kv::cuda
