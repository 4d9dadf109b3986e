/// \file mixed.cu
/// \brief build_flashinfer_mixed_sparse_indices on the GPU (spec "build_flashinfer_mixed_sparse_indices").
///
/// MixedOp on the row skeleton (rows.cuh): the lean launches (block sizes 64/128, identity spans, aligned rows) as
/// GroupRows with 32-bit lookups, every other case TileRows (decode rows first, then prefill rows). Each row is written
/// completely, -1 padding included, and its length once, by one thread, after its cells. int4 stores where rows start
/// 16-byte aligned (swa_width + image_width a multiple of 4), coalesced scalar stores otherwise. DSpark decode rows
/// (the vllm_v4 profile with swa_width > window) take MixedOp<L, true> on GroupRows launches only: each warp counts its
/// row's SWA entries together in the prologue, and every column reads the input column dspark_swa_source names.

#include "block_table.cuh"
#include "dispatch.cuh"
#include "host_arith.cuh"
#include "prefetch.cuh"
#include "rows.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

/// A block table as the kernel sees it.
struct Table {
  const int32_t* data;  // [rows, cols], row stride `stride`
  int64_t rows, cols, stride;
};

struct MixedParams {
  const int32_t* decode_swa;  // [D, swa_width]
  int64_t decode_swa_stride;
  const int32_t* decode_comp;  // [D, dct] or null
  int64_t decode_comp_stride;
  int64_t dct;
  const int32_t* decode_lens;   // [>= D] or null
  const uint8_t* decode_valid;  // [>= D] or null
  bool are_local;
  const int32_t* prefill_topk;  // [P, prefill_cols]
  int64_t prefill_stride, prefill_cols;
  const int32_t* qsl;       // [R + 1], global token indices
  const int32_t* seq_lens;  // [R]
  int64_t num_reqs;
  const int32_t* token_to_req;  // [>= D + P]
  Table swa_table, comp_table;
  int64_t swa_bs, comp_bs, swa_span, comp_span;
  bool swa_identity, comp_identity;  // span == block size: the remap is the identity
  bool in_vec;                       // input rows 16-byte aligned and regions 4-column aligned
  int64_t window, compress_ratio, topk;
  const int32_t* left_visible;   // [>= D + P] or null
  const int32_t* right_visible;  // [>= D + P] or null
  int64_t swa_width, image_width, swa_total;
  int32_t* out;  // [D + P, width]
  int64_t out_stride;
  int32_t* lens;  // [D + P]
  int64_t D, P;
  int32_t* error_count;
  // The profiles' members last: the seed's kernels keep their parameter offsets (and SASS).
  int64_t comp_cols;            // round_up(max(topk, dct), 4): the compressed region's width
  const int32_t* replay_start;  // [>= R] with bounded replay (vllm_v41), else null
};

/// A row's context is its kind, its block-table rows and, for prefill rows, its widened window and top-k length;
/// lookups through lookup policy L (BlockLookup for every case, Pow2Lookup for the lean launches). kDspark: decode rows
/// in DSpark's layout (spec::dspark_row); kBounded: vllm_v41's bounded replay and compress_ratio 0. Both false compile
/// the seed's code.
template <class L, bool kDspark = false, bool kBounded = false>
struct MixedOp {
  using Params = MixedParams;
  using Cols = typename L::Cols;
  enum Kind : int32_t { kInvalid = 0, kDecode = 1, kPrefill = 2 };
  struct Ctx {
    const int32_t* swa_row;   // prefill: SWA block-table row
    const int32_t* comp_row;  // compressed block-table row (decode: only when translating)
    Cols swa_cols, comp_cols;
    int64_t start, n;  // prefill: window start and length
    int64_t topk_len;  // prefill
    int64_t readable;  // prefill: top-k columns that hold entries
    // Input rows once the context is known: columns [0, a_cols) of the SWA region come from in_a (decode SWA indices),
    // columns [0, b_cols) of the compressed region from in_b (decode compressed or prefill top-k indices).
    const int32_t* in_a;
    const int32_t* in_b;
    int64_t a_cols, b_cols;
    int64_t dsp_causal, dsp_spill;  // decode rows with kDspark: spec::DsparkRow
    int32_t kind;
    int32_t translate;  // decode: local compressed indices go through comp_row
    int32_t count;      // decode: kept compressed entries
  };
  static constexpr bool kCounts = true;
  static constexpr bool kLaunchChecks = false;
  static constexpr bool kLean = std::is_same_v<Cols, uint32_t>;  // Pow2Lookup: cell() below

  /// Whether decode rows translate their compressed indices through the compressed block table (and so read their
  /// request).
  __device__ static bool translates(const Params& p) { return p.are_local && p.dct > 0; }

  __device__ static void prologue(const Params& p, int64_t t, Ctx& cx, sp::Faults& f) {
    cx.in_a = cx.in_b = p.decode_swa;  // read only below a_cols / b_cols
    cx.a_cols = cx.b_cols = 0;
    if (t < p.D) {
      cx.kind = kDecode;
      cx.translate = translates(p);
      cx.comp_row = p.comp_table.data;
      cx.comp_cols = L::cols(0);
      if (cx.translate)
        table_row<L>(p.comp_table.data, p.comp_table.rows, p.comp_table.cols, p.comp_table.stride,
                     __ldg(p.token_to_req + t), cx.comp_row, cx.comp_cols);
      cx.in_a = p.decode_swa + t * p.decode_swa_stride;
      cx.a_cols = p.swa_width;
      if (p.dct > 0) {
        cx.in_b = p.decode_comp + t * p.decode_comp_stride;
        cx.b_cols = p.dct;
      }
      if constexpr (kDspark) {
        // Every warp of the row's group counts the whole row, each lane a 32nd of it (GroupRows launches only: all 32
        // lanes of a warp hold the same row here).
        const int64_t req = __ldg(p.token_to_req + t);  // in flight with the row's loads below
        int32_t n = 0;
        for (int64_t c = threadIdx.x & 31; c < p.swa_width; c += 32) n += __ldg(cx.in_a + c) >= 0 ? 1 : 0;
        const int64_t entries = warp_sum(n);
        const int64_t future = sp::decode_future_tokens(p.qsl, p.num_reqs, req, t);
        const sp::DsparkRow dr = sp::dspark_row(entries, future, p.window, p.swa_width);
        cx.dsp_causal = dr.causal;
        cx.dsp_spill = dr.spill;
      }
      return;
    }
    // The visibility words depend on t alone (the arrays hold >= D + P entries): read beside the row's request, not
    // after it, where they would add a dependent memory round trip.
    const int32_t left_word = p.image_width > 0 ? __ldg(p.left_visible + t) : 0;
    const int32_t right_word = p.image_width > 0 ? __ldg(p.right_visible + t) : 0;
    const sp::PrefillToken tok = sp::prefill_token(p.qsl, p.seq_lens, p.num_reqs, __ldg(p.token_to_req + t), t);
    if (!tok.ok) {
      cx.kind = kInvalid;
      f.add();  // malformed prefill row: all -1, length 0, reported once
      return;
    }
    cx.kind = kPrefill;
    sp::Faults vis;  // visibility widens the window only when the row has image columns
    const int64_t left = p.image_width > 0 ? sp::visibility(left_word, vis) : 0;
    const int64_t right = p.image_width > 0 ? sp::visibility(right_word, vis) : 0;
    f.add(vis.n);
    if constexpr (kBounded) {  // bounded replay: the window starts no earlier than replay_start[req]
      sp::Window w = sp::visible_window(tok.pos, p.window, left, right);
      const int64_t rs = sp::replay_start_of(__ldg(p.replay_start + tok.req), f);
      if (rs > w.start) w.start = rs;
      cx.start = w.start;
      cx.n = w.end - w.start > 0 ? w.end - w.start : 0;
    } else {
      const sp::Window w = sp::visible_window(tok.pos, p.window, left, right);
      cx.start = w.start;
      cx.n = w.end - w.start;
    }
    table_row<L>(p.swa_table.data, p.swa_table.rows, p.swa_table.cols, p.swa_table.stride, tok.req, cx.swa_row,
                 cx.swa_cols);
    table_row<L>(p.comp_table.data, p.comp_table.rows, p.comp_table.cols, p.comp_table.stride, tok.req, cx.comp_row,
                 cx.comp_cols);
    cx.topk_len = sp::topk_len_of(tok.pos, p.compress_ratio, p.topk, /*ratio_may_be_zero=*/kBounded);
    cx.readable = p.prefill_cols < cx.topk_len ? p.prefill_cols : cx.topk_len;
    cx.in_b = p.prefill_topk + (t - p.D) * p.prefill_stride;
    cx.b_cols = cx.readable;
  }

  /// The row's inputs into L2 (rows.cuh's optional prefetch): a decode row's index rows, length, validity and
  /// (translating) request; a prefill row's top-k row, request and visibility words. Not what the request names
  /// (bounds, block-table rows): that is read only after the wait.
  __device__ static void prefetch(const Params& p, int64_t t) {
    if (t < p.D) {
      prefetch_l2_range(p.decode_swa + t * p.decode_swa_stride, p.swa_width * 4);
      if (p.dct > 0) prefetch_l2_range(p.decode_comp + t * p.decode_comp_stride, p.dct * 4);
      if (p.decode_valid != nullptr) prefetch_l2(p.decode_valid + t);
      if (p.decode_lens != nullptr) prefetch_l2(p.decode_lens + t);
      if (translates(p)) prefetch_l2(p.token_to_req + t);
      return;
    }
    prefetch_l2(p.token_to_req + t);
    if (p.image_width > 0) {
      prefetch_l2(p.left_visible + t);
      prefetch_l2(p.right_visible + t);
    }
    prefetch_l2_range(p.prefill_topk + (t - p.D) * p.prefill_stride, p.prefill_cols * 4);
  }

  /// Raw inputs: decode SWA and compressed indices, prefill top-k indices (-1 where none).
  template <Cells kC, bool kCtx>
  __device__ static void load(const Params& p, int64_t t, int64_t c, int32_t (&x)[4], const Ctx& cx) {
    constexpr int kW = kCellWidth<kC>;
    if (kW == 4 && !kLean && p.in_vec) {  // the lean launches have in_vec = false
      // A 4-column cell lies in one region (the region widths are multiples of 4): one int4 load when all four columns
      // hold inputs.
      const int32_t* src = nullptr;
      if (t < p.D) {
        if (c + 3 < p.swa_width)
          src = p.decode_swa + t * p.decode_swa_stride + c;
        else if (c >= p.swa_total && c - p.swa_total + 3 < p.dct)
          src = p.decode_comp + t * p.decode_comp_stride + (c - p.swa_total);
      } else if (c >= p.swa_total && c - p.swa_total + 3 < p.prefill_cols) {
        src = p.prefill_topk + (t - p.D) * p.prefill_stride + (c - p.swa_total);
      }
      if (src != nullptr) {
        const int4 v = __ldg(reinterpret_cast<const int4*>(src));
        x[0] = v.x;
        x[1] = v.y;
        x[2] = v.z;
        x[3] = v.w;
        return;
      }
    }
    if constexpr (kCtx && kLean && kW == 4) {
      // The lean launches have swa_total % 4 == 0: a cell lies in one region, so the region is found once per cell;
      // 32-bit columns (lean rows are narrower than 2^31 columns, and the bounds clamped to INT32_MAX leave every
      // comparison with such a column unchanged).
      constexpr int64_t kMax = 0x7FFFFFFF;
      const int32_t c32 = static_cast<int32_t>(c), ST = static_cast<int32_t>(p.swa_total);
      const bool in_swa = c32 < ST;
      const int32_t off = in_swa ? c32 : c32 - ST;
      const int64_t bound = in_swa ? cx.a_cols : cx.b_cols;
      const int32_t left = static_cast<int32_t>(bound < kMax ? bound : kMax) - off;  // columns with inputs
      const int32_t* src = in_swa ? cx.in_a : cx.in_b;
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = j < left ? __ldg(src + off + j) : -1;
    } else {
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        const int64_t col = c + j;
        int32_t v = -1;
        if constexpr (kCtx) {  // the row's input pointers and widths, found once by the prologue
          if (col < p.swa_total) {
            if (col < cx.a_cols) v = __ldg(cx.in_a + col);
          } else if (col - p.swa_total < cx.b_cols) {
            v = __ldg(cx.in_b + (col - p.swa_total));
          }
        } else if (t < p.D) {
          if (col < p.swa_width)
            v = __ldg(p.decode_swa + t * p.decode_swa_stride + col);
          else if (col >= p.swa_total && col - p.swa_total < p.dct)
            v = __ldg(p.decode_comp + t * p.decode_comp_stride + (col - p.swa_total));
        } else if (col >= p.swa_total && col - p.swa_total < p.prefill_cols) {
          v = __ldg(p.prefill_topk + (t - p.D) * p.prefill_stride + (col - p.swa_total));
        }
        x[j] = v;
      }
    }
  }

  __device__ static int32_t value(const Params& p, const Ctx& cx, int64_t c, int32_t x, sp::Faults& f, int32_t& kept) {
    const int64_t ST = p.swa_total;
    if constexpr (kDspark) {
      if (cx.kind == kDecode) {  // the inputs by dspark_swa_source's columns, not the seed layout's x
        const int64_t swa_cols = p.window + cx.dsp_spill;
        if (c < swa_cols) {
          const int64_t src = sp::dspark_swa_source(sp::DsparkRow{cx.dsp_causal, cx.dsp_spill}, p.window, c);
          return src < 0 ? sp::kNoIndex : L::remap(__ldg(cx.in_a + src), p.swa_bs, p.swa_span, p.swa_identity, f);
        }
        const int64_t k = c - swa_cols;
        if (k >= p.comp_cols) return sp::kNoIndex;
        int32_t v = k < cx.b_cols ? __ldg(cx.in_b + k) : sp::kNoIndex;
        if (cx.translate && v >= 0) v = L::slot(v, cx.comp_row, cx.comp_cols, p.comp_bs, f);
        const int32_t o = L::remap(v, p.comp_bs, p.comp_span, p.comp_identity, f);
        kept += o >= 0 ? 1 : 0;
        return o;
      }
    }
    if (cx.kind == kDecode) {
      if (c < ST) return L::remap(x, p.swa_bs, p.swa_span, p.swa_identity, f);  // x = -1: image cols
      int32_t v = x;                                                            // -1 past the decode_compressed width
      if (cx.translate && v >= 0) v = L::slot(v, cx.comp_row, cx.comp_cols, p.comp_bs, f);
      const int32_t o = L::remap(v, p.comp_bs, p.comp_span, p.comp_identity, f);
      kept += o >= 0 ? 1 : 0;
      return o;
    }
    if (cx.kind == kInvalid) return sp::kNoIndex;
    if (c < ST) {
      if (c >= cx.n) return sp::kNoIndex;
      return L::remap(L::slot(cx.start + c, cx.swa_row, cx.swa_cols, p.swa_bs, f), p.swa_bs, p.swa_span, p.swa_identity,
                      f);
    }
    const int32_t l = c - ST < cx.readable ? x : -1;
    return L::remap(L::slot(l, cx.comp_row, cx.comp_cols, p.comp_bs, f), p.comp_bs, p.comp_span, p.comp_identity, f);
  }

  /// The lean launches (Pow2Lookup, identity spans, rows narrower than 2^31 columns): value for the four columns of a
  /// cell, the row's kind branched on once per cell and the columns in 32-bit arithmetic (as the pre-skeleton lean
  /// kernel did). The bounds are clamped to INT32_MAX, which leaves every comparison with a column below 2^31 - 1
  /// unchanged; the identity remap after a lookup is dropped (a lookup gives -1 or an index >= 0). The four lookups of
  /// a cell go through Pow2Lookup::slot4 (their table loads in flight together); a prefill row's window cells hold four
  /// consecutive positions, so they take slot4_run (two table loads instead of four; see
  /// bench/RESULTS.md#table-loads-per-cell).
  __device__ static int4 cell(const Params& p, const Ctx& cx, int64_t c64, const int32_t (&x)[4], sp::Faults& f,
                              int32_t& kept) requires kLean {
    if constexpr (kDspark) {  // DSpark decode rows: column by column (their columns come from anywhere in the row)
      if (cx.kind == kDecode)
        return make_int4(value(p, cx, c64, x[0], f, kept), value(p, cx, c64 + 1, x[1], f, kept),
                         value(p, cx, c64 + 2, x[2], f, kept), value(p, cx, c64 + 3, x[3], f, kept));
    }
    constexpr int64_t kMax = 0x7FFFFFFF;
    const int32_t c = static_cast<int32_t>(c64);
    const int32_t ST = static_cast<int32_t>(p.swa_total);  // <= width < 2^31
    const bool in_swa = c < ST;                            // the whole cell: ST is a multiple of 4 on the lean launches
    int32_t o[4];
    int64_t local[4];
    if (cx.kind == kDecode) {
      if (in_swa || !cx.translate) {
#pragma unroll
        for (int j = 0; j < 4; ++j) o[j] = x[j] < 0 ? sp::kNoIndex : x[j];  // x = -1: image columns
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) local[j] = x[j];  // -1 past the decode_compressed width
        L::slot4(local, cx.comp_row, cx.comp_cols, f, o);
      }
      if (!in_swa) {
#pragma unroll
        for (int j = 0; j < 4; ++j) kept += o[j] >= 0 ? 1 : 0;
      }
    } else if (cx.kind == kPrefill) {
      if (in_swa) {
        // Positions start + c, ..., start + c + 3, the first n - c of them inside the window: consecutive, so at most
        // two table entries (Pow2Lookup::slot4_run).
        const int64_t left = cx.n - c;
        L::slot4_run(cx.start + c, static_cast<int32_t>(left < 0 ? 0 : (left > 4 ? 4 : left)), cx.swa_row, cx.swa_cols,
                     f, o);
      } else {
        const int32_t readable = static_cast<int32_t>(cx.readable < kMax ? cx.readable : kMax);
#pragma unroll
        for (int j = 0; j < 4; ++j) local[j] = c + j - ST < readable ? x[j] : -1;
        L::slot4(local, cx.comp_row, cx.comp_cols, f, o);
      }
    } else {
      return make_int4(sp::kNoIndex, sp::kNoIndex, sp::kNoIndex, sp::kNoIndex);
    }
    return make_int4(o[0], o[1], o[2], o[3]);
  }

  /// The row's length, once per row: the decode length (spec::mixed_decode_length) is the one that may pass INT32_MAX,
  /// clamped and reported here.
  __device__ static void finish(const Params& p, const Ctx& cx, int64_t t, sp::Faults& f) {
    if (cx.kind == kInvalid) {
      p.lens[t] = 0;
    } else if (cx.kind == kPrefill) {
      p.lens[t] = static_cast<int32_t>(p.swa_total + cx.topk_len);  // the whole SWA region counts
    } else {
      p.lens[t] = sp::mixed_decode_length(
          kDspark ? p.window + cx.dsp_spill : p.swa_total, p.dct, p.are_local, cx.count,
          [&] { return __ldg(p.decode_valid + t) != 0; }, p.decode_lens != nullptr,
          [&] { return int64_t{__ldg(p.decode_lens + t)}; }, f);
    }
  }

  __device__ static int32_t* out_row(const Params& p, int64_t t) { return p.out + t * p.out_stride; }
};

/// The lean launches: both block sizes 64 (or both 128), identity spans, output rows 16-byte aligned and swa_width +
/// image_width a multiple of 4. One row per 128-thread CTA, one 4-column cell per thread per round (int4 stores,
/// single-column input loads after the context), the context found by every thread from broadcast loads, 32-bit lookups
/// (Pow2Lookup), and MixedOp::cell: the row kind and the input region branched on once per cell, 32-bit columns (the
/// row loop 680 -> 439 instructions, SASS sm_90a).
///
/// Rows of up to 320 cells take one warp per row (4 rows per CTA), 5 cells per thread per round: 4x the rows in flight
/// per multiprocessor, and a row of 640 columns in one round (16.7 us against 23.2 at 128 threads per row, see
/// bench/RESULTS.md#mixed-warp-launch). Wider rows keep 128 threads per row. The warp launch is held to 64 registers, 8
/// resident CTAs per multiprocessor, no spills (see bench/RESULTS.md#register-caps).
using LeanRows = GroupRows<7, 1, false>;
using LeanWarpRows = GroupRows<5, 5, false, 8>;
inline constexpr int64_t kWarpRowsMaxCells = 2 * 32 * 5;
/// Few rows (few_group_rows, e.g. a decode batch) of up to 256 cells: one row per 128-thread CTA with 2 cells per
/// thread, so that the rows spread over all multiprocessors (as global_topk's few-row launches do) in one round, where
/// the warp launch put 256 rows on 64 CTAs (the decode chain with PDL 9.6 -> 9.0 us, see
/// bench/RESULTS.md#mixed-few-row-launch).
using LeanFewRows = GroupRows<7, 2, false>;
inline constexpr int64_t kFewRowsMaxCells = 128 * 2;

/// The profile-dependent rows of a launch: the seed's, DSpark decode rows (vllm_v4), bounded replay (vllm_v41).
inline constexpr int kSeedRows = 0, kDsparkRows = 1, kBoundedReplay = 2;

/// Which lean launch a shape takes.
enum class LeanLaunch { kCtaRows, kWarpRows, kFewRows };

Table make_table(const TensorView& v) {
  return Table{v.as<const int32_t>(), v.size(0), v.size(1), kernel_stride(v, 0)};  // [rows, 0] tables too
}

}  // namespace

void build_flashinfer_mixed_sparse_indices(const MixedSparseArgs& args, cudaStream_t stream) {
  validate(args);
  const int64_t D = args.decode_swa_indices.size(0);
  const int64_t P = args.prefill_topk_indices.size(0);
  if (D + P == 0) return;

  MixedParams p;
  p.decode_swa = args.decode_swa_indices.as<const int32_t>();
  p.decode_swa_stride = D > 1 ? args.decode_swa_indices.stride[0] : 0;
  const bool has_comp = args.decode_compressed_indices.present();
  p.decode_comp = has_comp ? args.decode_compressed_indices.as<const int32_t>() : nullptr;
  p.decode_comp_stride = has_comp ? kernel_stride(args.decode_compressed_indices, 0) : 0;
  p.dct = has_comp ? args.decode_compressed_indices.size(1) : 0;
  p.decode_lens =
      args.decode_compressed_topk_lens.present() ? args.decode_compressed_topk_lens.as<const int32_t>() : nullptr;
  p.decode_valid = args.decode_is_valid_token.present() ? args.decode_is_valid_token.as<const uint8_t>() : nullptr;
  p.are_local = args.decode_compressed_indices_are_local;
  p.prefill_topk = args.prefill_topk_indices.as<const int32_t>();
  p.prefill_stride = kernel_stride(args.prefill_topk_indices, 0);  // [P, 0] is valid
  p.prefill_cols = args.prefill_topk_indices.size(1);
  p.qsl = args.query_start_loc.as<const int32_t>();
  p.seq_lens = args.seq_lens.as<const int32_t>();
  p.num_reqs = args.seq_lens.size(0);
  p.token_to_req = args.token_to_req.as<const int32_t>();
  p.swa_table = make_table(args.swa_block_table);
  p.comp_table = args.compressed_block_table.present() ? make_table(args.compressed_block_table) : p.swa_table;
  p.swa_bs = args.swa_block_size;
  p.comp_bs = args.compressed_block_size;
  p.swa_span = args.swa_block_span.value_or(args.swa_block_size);
  p.comp_span = args.compressed_block_span.value_or(args.compressed_block_size);
  p.window = args.window_size;
  p.compress_ratio = args.compress_ratio;
  p.topk = args.topk;
  // Image columns (and visibility reads) only when the arrays are passed and max_image_tokens > 0.
  std::tie(p.left_visible, p.right_visible) =
      visibility_rows(args.prefill_left_visible, args.prefill_right_visible, args.max_image_tokens);
  p.swa_width = args.decode_swa_indices.size(1);
  p.image_width =
      sp::visibility_in_effect(args.prefill_left_visible.present(), args.max_image_tokens) ? args.max_image_tokens : 0;
  p.swa_total = p.swa_width + p.image_width;
  p.comp_cols = args.sparse_indices.size(1) - p.swa_total;
  p.replay_start = sp::bounded_replay(args.semantics) ? args.replay_start.as<const int32_t>() : nullptr;
  const bool dspark = sp::dspark_decode_rows(args.semantics) && p.swa_width > p.window && D > 0;
  const bool bounded = sp::bounded_replay(args.semantics);
  // The profile's rows as one compile-time choice (the two never meet: vllm_v4 and vllm_v41).
  const OneOf<kSeedRows, kDsparkRows, kBoundedReplay> profile_choice{dspark    ? kDsparkRows
                                                                     : bounded ? kBoundedReplay
                                                                               : kSeedRows};
  p.out = args.sparse_indices.as<int32_t>();
  p.out_stride = D + P > 1 ? args.sparse_indices.stride[0] : 0;
  p.lens = args.sparse_topk_lens.as<int32_t>();
  p.D = D;
  p.P = P;
  p.error_count = args.error_count;
  p.swa_identity = p.swa_span == p.swa_bs;
  p.comp_identity = p.comp_span == p.comp_bs;
  const bool vec = rows_vectorizable(p.out, p.out_stride);
  // int4 input loads need every input row 16-byte aligned and 4-column region boundaries.
  p.in_vec = p.swa_width % 4 == 0 && p.swa_total % 4 == 0 && rows_vectorizable(p.decode_swa, p.decode_swa_stride) &&
             (p.decode_comp == nullptr || rows_vectorizable(p.decode_comp, p.decode_comp_stride)) &&
             rows_vectorizable(p.prefill_topk, p.prefill_stride);

  constexpr const char* kOp = "build_flashinfer_mixed_sparse_indices";
  const int64_t width = args.sparse_indices.size(1);
  const bool pow2 = p.swa_bs == p.comp_bs && (p.swa_bs == 64 || p.swa_bs == 128);
  // (MixedOp::cell's 32-bit columns need rows narrower than 2^31 columns.)
  const bool lean =
      pow2 && p.swa_identity && p.comp_identity && vec && p.swa_total % 4 == 0 && width < (int64_t{1} << 31);
  if (dspark && !lean) {
    // DSpark rows need a GroupRows launch (the prologue's warp count): one warp per row, any lookup.
    dispatch(
        [&](auto bs) {
          launch_rows<MixedOp<BlockLookup<decltype(bs)::value>, true>, GroupRows<5, 2, false>>(
              kOp, p, D + P, width, cells_choice(vec), 0, stream);
        },
        block_size_choice(p.swa_bs == p.comp_bs ? p.swa_bs : -1));
    return;
  }
  if (lean) {
    p.in_vec = false;  // the lean launches read their inputs one column at a time
    const int64_t cells = width / 4;
    const LeanLaunch launch = few_group_rows(D + P) && cells <= kFewRowsMaxCells
                                  ? LeanLaunch::kFewRows
                                  : (cells <= kWarpRowsMaxCells ? LeanLaunch::kWarpRows : LeanLaunch::kCtaRows);
    dispatch(
        [&](auto shift, auto which, auto profile) {
          constexpr LeanLaunch kWhich = decltype(which)::value;
          constexpr int kProfile = decltype(profile)::value;
          using Rows = std::conditional_t<kWhich == LeanLaunch::kFewRows, LeanFewRows,
                                          std::conditional_t<kWhich == LeanLaunch::kWarpRows, LeanWarpRows, LeanRows>>;
          launch_rows<MixedOp<Pow2Lookup<decltype(shift)::value>, kProfile == kDsparkRows, kProfile == kBoundedReplay>,
                      Rows>(kOp, p, D + P, width, OneOf<Cells::kWhole>{Cells::kWhole}, 0, stream);
        },
        OneOf<6, 7>{p.swa_bs == 64 ? 6 : 7},
        OneOf<LeanLaunch::kCtaRows, LeanLaunch::kWarpRows, LeanLaunch::kFewRows>{launch}, profile_choice);
    return;
  }
  // The block sizes get compile-time code when both caches use the same specialised size.
  dispatch(
      [&](auto bs, auto bounded_rows) {
        launch_rows<MixedOp<BlockLookup<decltype(bs)::value>, false, decltype(bounded_rows)::value>, TileRows>(
            kOp, p, D + P, width, cells_choice(vec), 0, stream);
      },
      block_size_choice(p.swa_bs == p.comp_bs ? p.swa_bs : -1), flag_choice(bounded));
}

}  // namespace dsv4kv::cuda
