/// \file combine.cu
/// \brief combine_topk_swa_indices on the GPU (spec "combine_topk_swa_indices").
///
/// CombineOp on the row skeleton (rows.cuh): wide aligned rows one per CTA, narrower aligned rows one per warp, the
/// rest TileRows. Each row is written completely, -1 padding included; grid thread i also checks request i, so a
/// malformed request is reported exactly once, as the reference does.

#include "dispatch.cuh"
#include "host_arith.cuh"
#include "prefetch.cuh"
#include "rows.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;  // brings sp = dsv4kv::spec

struct CombineParams {
  const int32_t* topk;  // [T, topk_width], row stride topk_stride
  int64_t topk_stride, topk_width;
  const int32_t* qsl;          // [R + 1]
  const int32_t* seq_lens;     // [R]
  const int32_t* gather_lens;  // [>= R]
  int64_t num_reqs;
  int64_t window, compress_ratio, topk_n, M, N, max_image_tokens;
  const int32_t* left_visible;   // [>= T] or null
  const int32_t* right_visible;  // [>= T] or null
  int32_t* out;                  // [T, width], row stride out_stride
  int64_t out_stride;
  int32_t* lens;  // [T]
  int32_t* error_count;
};

/// kMaskTopk: top-k values >= N are -1 too (spec::masks_combine_topk, the vllm_v41 profile); false compiles to the
/// seed's code.
template <bool kMaskTopk>
struct CombineOp {
  using Params = CombineParams;
  struct Ctx {
    int64_t b;  // request, or -1: row all -1, length 0
    int64_t gather_start;
    int64_t swa_start;
    int64_t topk_len;
    int64_t swa_len;
    // 32-bit path, taken when `narrow`: every entry of the row is provably in [0, kIndexMax] (checked in the prologue),
    // so the spec's 64-bit sums equal these 32-bit ones.
    int32_t narrow;
    int32_t topk_base;  // M * b
    int32_t swa_base;   // M * b + N + swa_start - gather_start
    int32_t count;
  };
  static constexpr bool kCounts = false;
  static constexpr bool kLaunchChecks = true;

  /// Request check b (grid thread b of the launch): each malformed request is reported once.
  __device__ static int32_t launch_faults(const Params& p, int64_t b) {
    if (p.error_count == nullptr || b >= p.num_reqs) return 0;
    return sp::combine_request(p.qsl, p.seq_lens, p.gather_lens, b).ok ? 0 : 1;
  }

  __device__ static void prologue(const Params& p, int64_t t, Ctx& cx, sp::Faults& f) {
    // The row's visibility words are read beside the request search, not after it: they depend on t alone (t < T, and
    // the arrays hold >= T entries), and saves a dependent round trip per row with images (see
    // bench/RESULTS.md#combine-early-visibility).
    const int32_t left_word = p.left_visible != nullptr ? __ldg(p.left_visible + t) : 0;
    const int32_t right_word = p.right_visible != nullptr ? __ldg(p.right_visible + t) : 0;
    cx.b = sp::find_request(p.qsl, p.num_reqs, p.qsl[0], t);
    if (cx.b < 0) return;
    const sp::CombineRequest req = sp::combine_request(p.qsl, p.seq_lens, p.gather_lens, cx.b);
    if (!req.ok) {
      cx.b = -1;  // reported by the request check, not per token
      return;
    }
    sp::Faults vis;
    const int64_t left = p.left_visible != nullptr ? sp::visibility(left_word, vis) : 0;
    const int64_t right = p.right_visible != nullptr ? sp::visibility(right_word, vis) : 0;
    f.add(vis.n);
    const sp::CombineRow row =
        sp::combine_row(req, t, p.window, p.compress_ratio, p.topk_n, p.max_image_tokens, left, right,
                        /*ratio_may_be_zero=*/kMaskTopk);  // kMaskTopk: vllm_v41, which allows compress_ratio 0
    cx.gather_start = req.gather_start;
    cx.swa_start = row.swa_start;
    cx.topk_len = row.topk_len;
    cx.swa_len = row.swa_len;
    // 32-bit path: top-k entries v + M*b (v in [0, kIndexMax]) are summed in 32 unsigned bits, which holds while M*b <=
    // kIndexMax; SWA entries M*b + N + swa_start - gather_start + j for j < swa_len stay in [base, base + swa_len - 1].
    // (M and N are checked first so that M * b cannot overflow: |M * b| < 2^62.)
    const bool mn_ok = p.M >= 0 && p.M <= sp::kIndexMax && p.N >= 0 && p.N <= sp::kIndexMax;
    const int64_t mb = mn_ok ? p.M * cx.b : -1;
    const int64_t swa_base = mn_ok ? mb + p.N + row.swa_start - req.gather_start : -1;
    cx.narrow = mn_ok && mb <= sp::kIndexMax && swa_base >= 0 && row.swa_len >= 0 &&
                swa_base + row.swa_len <= sp::kIndexMax && row.topk_len <= sp::kIndexMax;
    cx.topk_base = static_cast<int32_t>(mb);
    cx.swa_base = static_cast<int32_t>(swa_base);
  }

  /// The row's inputs into L2 (rows.cuh's optional prefetch): its top-k row and visibility words; row 0 also
  /// query_start_loc, which every row's request search reads.
  __device__ static void prefetch(const Params& p, int64_t t) {
    prefetch_l2_range(p.topk + t * p.topk_stride, p.topk_width * 4);
    if (p.left_visible != nullptr) prefetch_l2(p.left_visible + t);
    if (p.right_visible != nullptr) prefetch_l2(p.right_visible + t);
    if (t == 0) prefetch_l2_range(p.qsl, (p.num_reqs + 1) * 4);
  }

  template <Cells kC, bool kCtx>
  __device__ static void load(const Params& p, int64_t t, int64_t c, int32_t (&x)[4], const Ctx&) {
    // Read ahead of the context: every column of topk_indices may be a top-k entry. The input rows are narrower than
    // the output rows: whole output cells may end in a tail here.
    const int32_t* row = p.topk + t * p.topk_stride;
    // Cells wholly inside topk_indices take a bare int4 load (c is a multiple of 4, so this is load_row_cell's c + 3 <
    // width case); only the rest takes its bounds tests and scalar tail (56 registers in the wide launch instead of 90,
    // ptxas sm_90a).
    if constexpr (kC == Cells::kWhole) {
      if (c < (p.topk_width & ~int64_t{3})) {
        const int4 v = __ldg(reinterpret_cast<const int4*>(row) + (c >> 2));
        x[0] = v.x;
        x[1] = v.y;
        x[2] = v.z;
        x[3] = v.w;
        return;
      }
    }
    load_row_cell<kC == Cells::kWhole ? Cells::kVector : kC>(row, p.topk_width, c, x);
  }

  __device__ static int32_t value(const Params& p, const Ctx& cx, int64_t c, int32_t x, sp::Faults& f, int32_t&) {
    if (cx.b < 0) return sp::kNoIndex;
    if (cx.narrow) {
      if (c < cx.topk_len) {
        // vllm_v41: one unsigned compare drops x < 0 and x >= N alike (N fits in int32: validate).
        if (kMaskTopk ? static_cast<uint32_t>(x) >= static_cast<uint32_t>(p.N) : x < 0) return sp::kNoIndex;
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
    if (c < cx.topk_len) {
      if (kMaskTopk && x >= p.N) return sp::kNoIndex;  // spec::combine_topk_entry under vllm_v41
      return sp::combine_topk_entry(x, p.M, cx.b, f);
    }
    const int64_t j = c - cx.topk_len;
    if (j >= cx.swa_len) return sp::kNoIndex;
    sp::CombineRequest req{};
    req.ok = true;
    req.gather_start = cx.gather_start;
    const sp::CombineRow row{cx.topk_len, cx.swa_start, cx.swa_len};
    return sp::combine_swa_entry(req, row, j, p.M, p.N, cx.b, f);
  }

  /// The whole 4-column cell at column c (rows.cuh's optional cell(); same values as value()): on the 32-bit path the
  /// row's regions (top-k, window, padding) are branched on once per cell, not per column; a cell across two regions
  /// and the 64-bit path go column by column. Why: the per-column code was issue-bound (see
  /// bench/RESULTS.md#combine-whole-cell).
  __device__ static int4 cell(const Params& p, const Ctx& cx, int64_t c64, const int32_t (&x)[4], sp::Faults& f,
                              int32_t& kept) {
    if (cx.b < 0) return make_int4(sp::kNoIndex, sp::kNoIndex, sp::kNoIndex, sp::kNoIndex);
    if (cx.narrow) {
      // c + 3 < width <= kIndexMax (whole cells only), and on this path topk_len, swa_len and swa_base + swa_len are in
      // [0, kIndexMax]: every sum below stays inside int32.
      const int32_t c = static_cast<int32_t>(c64);
      const int32_t topk_len = static_cast<int32_t>(cx.topk_len);
      if (c + 3 < topk_len) {
        int32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t sum = static_cast<uint32_t>(x[j]) + static_cast<uint32_t>(cx.topk_base);
          if constexpr (kMaskTopk) {
            const bool masked = static_cast<uint32_t>(x[j]) >= static_cast<uint32_t>(p.N);  // as in value()
            const bool over = !masked && sum > static_cast<uint32_t>(sp::kIndexMax);
            if (over) f.add();
            o[j] = masked || over ? sp::kNoIndex : static_cast<int32_t>(sum);
          } else {
            const bool over = x[j] >= 0 && sum > static_cast<uint32_t>(sp::kIndexMax);
            if (over) f.add();
            o[j] = x[j] < 0 || over ? sp::kNoIndex : static_cast<int32_t>(sum);
          }
        }
        return make_int4(o[0], o[1], o[2], o[3]);
      }
      if (c >= topk_len) {
        const int32_t j0 = c - topk_len;
        const int32_t n = static_cast<int32_t>(cx.swa_len);
        int32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) o[j] = j0 + j < n ? cx.swa_base + j0 + j : sp::kNoIndex;
        return make_int4(o[0], o[1], o[2], o[3]);
      }
    }
    return make_int4(value(p, cx, c64, x[0], f, kept), value(p, cx, c64 + 1, x[1], f, kept),
                     value(p, cx, c64 + 2, x[2], f, kept), value(p, cx, c64 + 3, x[3], f, kept));
  }

  __device__ static void finish(const Params& p, const Ctx& cx, int64_t t, sp::Faults&) {
    p.lens[t] = cx.b < 0 ? 0 : static_cast<int32_t>(cx.topk_len + cx.swa_len);
  }

  __device__ static int32_t* out_row(const Params& p, int64_t t) { return p.out + t * p.out_stride; }
};

/// The launch for wide, 16-byte aligned rows: one row per 128-thread CTA (GroupRows<7>), every thread finding the row's
/// context itself (broadcast loads), no per-cell division. A thread's top-k loads (5 cells per round: a row of 2,048
/// top-k + 128 window columns, 544 cells, in one round) are all issued before the context is found (37.5 us against
/// 41.6 with one load in flight per thread, see bench/RESULTS.md#combine-launch-shape).
using WideRows = GroupRows<7, 5, true>;
/// The launch for narrower 16-byte aligned rows: one warp per row (4 rows per CTA), 6 cells per thread per round (a row
/// of 512 top-k + 128 window columns, 160 cells, or 704 with 64 image columns, 176 cells, in one round), the top-k
/// loads issued before the context (15.2 us against TileRows' 16.4 for 8,192 rows of 640 columns, see
/// bench/RESULTS.md#combine-launch-shape).
using NarrowRows = GroupRows<5, 6, true>;

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
  std::tie(p.left_visible, p.right_visible) =
      visibility_rows(args.left_visible, args.right_visible, args.max_image_tokens);
  p.out = args.combined_indices.as<int32_t>();
  p.out_stride = T > 1 ? args.combined_indices.stride[0] : 0;
  p.lens = args.combined_lens.as<int32_t>();
  p.error_count = args.error_count;
  const bool vec = rows_vectorizable(p.topk, p.topk_stride) && rows_vectorizable(p.out, p.out_stride);
  const int64_t width = args.combined_indices.size(1);  // a multiple of 128
  constexpr const char* kOp = "combine_topk_swa_indices";
  // Request checks only matter when someone counts them.
  const int64_t req_items = p.error_count != nullptr ? R : 0;
  // One row per CTA for rows of >= 2,048 columns, one warp per row for narrower aligned rows: on narrow rows a CTA
  // idles a quarter of its threads on the last cells (see bench/RESULTS.md#combine-launch-shape).
  dispatch(
      [&](auto mask) {
        using Op = CombineOp<decltype(mask)::value>;
        if (vec && width >= 4 * 4 * WideRows::kThreads) {
          launch_rows<Op, WideRows>(kOp, p, T, width, OneOf<Cells::kWhole>{Cells::kWhole}, req_items, stream);
          return;
        }
        if (vec && width % 4 == 0) {
          launch_rows<Op, NarrowRows>(kOp, p, T, width, OneOf<Cells::kWhole>{Cells::kWhole}, req_items, stream);
          return;
        }
        launch_rows<Op, TileRows>(kOp, p, T, width, cells_choice(vec), req_items, stream);
      },
      flag_choice(sp::masks_combine_topk(args.semantics)));
}

}  // namespace dsv4kv::cuda
