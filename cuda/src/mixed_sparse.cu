/// \file mixed_sparse.cu
/// \brief build_flashinfer_mixed_sparse_indices on the GPU
/// (spec "build_flashinfer_mixed_sparse_indices").
///
/// Block sizes 64/128 with identity spans and aligned rows take the lean kernel
/// (mixed_lean_kernel below); every other case the index_rows_tiled skeleton
/// (decode rows first, then prefill rows): a row's
/// context is its kind, its block-table rows and, for prefill rows, its
/// widened window and top-k length; each row is written completely (SWA,
/// image and compressed columns and their -1 padding) in one kernel. Rows
/// start on a 16-byte boundary only when swa_width + image_width is a
/// multiple of 4; int4 stores are used then, coalesced scalar stores otherwise.
/// Inputs come as int4 loads when their rows are 16-byte aligned too; block
/// lookups use shift/mask for block sizes 64/128, and the span remap is skipped
/// when span == block size (it is the identity then).

#include "index_rows_tiled.cuh"

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
  const int32_t* decode_swa;   // [D, swa_width]
  int64_t decode_swa_stride;
  const int32_t* decode_comp;  // [D, dct] or null
  int64_t decode_comp_stride;
  int64_t dct;
  const int32_t* decode_lens;  // [>= D] or null
  const uint8_t* decode_valid;  // [>= D] or null
  bool are_local;
  const int32_t* prefill_topk;  // [P, prefill_cols]
  int64_t prefill_stride, prefill_cols;
  const int32_t* qsl;           // [R + 1], global token indices
  const int32_t* seq_lens;      // [R]
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
  int32_t* out;                  // [D + P, width]
  int64_t out_stride;
  int32_t* lens;                 // [D + P]
  int64_t D, P;
  int32_t* error_count;
};

/// Row `req` of a table as (pointer, columns); a request outside the table gets an empty row,
/// so every lookup through it is dropped and reported by lookup_slot.
__device__ __forceinline__ void table_row(const Table& t, int64_t req, const int32_t*& row, int64_t& cols) {
  const bool ok = req >= 0 && req < t.rows;
  row = ok ? t.data + req * t.stride : t.data;
  cols = ok ? t.cols : 0;
}

template <int kBs>
struct MixedOp {
  using Params = MixedParams;
  enum Kind : int32_t { kInvalid = 0, kDecode = 1, kPrefill = 2 };
  struct Ctx {
    const int32_t* swa_row;   // prefill: SWA block-table row
    const int32_t* comp_row;  // compressed block-table row (decode: only when translating)
    int64_t swa_cols, comp_cols;
    int64_t start, n;         // prefill: window start and length
    int64_t topk_len;         // prefill
    int64_t readable;         // prefill: top-k columns that hold entries
    int32_t kind;
    int32_t translate;        // decode: local compressed indices go through comp_row
    int32_t count;            // decode: kept compressed entries
  };
  static constexpr bool kCounts = true;

  __device__ static int64_t sbs(const Params& p) { return block_size_of<kBs>(p.swa_bs); }
  __device__ static int64_t cbs(const Params& p) { return block_size_of<kBs>(p.comp_bs); }

  __device__ static int32_t extra_faults(const Params&) { return 0; }

  __device__ static void prologue(const Params& p, int64_t t, Ctx& cx, int32_t& faults) {
    if (t < p.D) {
      cx.kind = kDecode;
      cx.comp_row = nullptr;
      cx.comp_cols = 0;
      cx.translate = p.are_local && p.dct > 0;
      if (cx.translate) table_row(p.comp_table, __ldg(p.token_to_req + t), cx.comp_row, cx.comp_cols);
      if (p.dct > 0 && !p.are_local && p.decode_lens != nullptr) {  // finish() clamps; reported here
        sp::Faults lf;
        sp::to_length(p.swa_total + __ldg(p.decode_lens + t), lf);
        faults += lf.n;
      }
      return;
    }
    const sp::PrefillToken tok = sp::prefill_token(p.qsl, p.seq_lens, p.num_reqs, __ldg(p.token_to_req + t), t);
    if (!tok.ok) {
      cx.kind = kInvalid;
      ++faults;  // malformed prefill row: all -1, length 0, reported once
      return;
    }
    cx.kind = kPrefill;
    sp::Faults vis;  // visibility widens the window only when the row has image columns
    const int64_t left = p.image_width > 0 ? sp::visibility(p.left_visible[t], vis) : 0;
    const int64_t right = p.image_width > 0 ? sp::visibility(p.right_visible[t], vis) : 0;
    faults += vis.n;
    const sp::Window w = sp::visible_window(tok.pos, p.window, left, right);
    cx.start = w.start;
    cx.n = w.end - w.start;
    table_row(p.swa_table, tok.req, cx.swa_row, cx.swa_cols);
    table_row(p.comp_table, tok.req, cx.comp_row, cx.comp_cols);
    cx.topk_len = sp::topk_len_at(tok.pos, p.compress_ratio, p.topk);
    cx.readable = p.prefill_cols < cx.topk_len ? p.prefill_cols : cx.topk_len;
  }

  /// Raw inputs: decode SWA and compressed indices, prefill top-k indices (-1 where none).
  template <bool kVec>
  __device__ static void load(const Params& p, int64_t t, int64_t c, int32_t (&x)[4]) {
    if (kVec && p.in_vec) {
      // A 4-column cell lies in one region (the region widths are multiples of 4): one int4
      // load when all four columns hold inputs.
      const int32_t* src = nullptr;
      if (t < p.D) {
        if (c + 3 < p.swa_width) src = p.decode_swa + t * p.decode_swa_stride + c;
        else if (c >= p.swa_total && c - p.swa_total + 3 < p.dct)
          src = p.decode_comp + t * p.decode_comp_stride + (c - p.swa_total);
      } else if (c >= p.swa_total && c - p.swa_total + 3 < p.prefill_cols) {
        src = p.prefill_topk + (t - p.D) * p.prefill_stride + (c - p.swa_total);
      }
      if (src != nullptr) {
        const int4 v = __ldg(reinterpret_cast<const int4*>(src));
        x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < (kVec ? 4 : 1); ++j) {
      const int64_t col = c + j;
      int32_t v = -1;
      if (t < p.D) {
        if (col < p.swa_width) v = __ldg(p.decode_swa + t * p.decode_swa_stride + col);
        else if (col >= p.swa_total && col - p.swa_total < p.dct)
          v = __ldg(p.decode_comp + t * p.decode_comp_stride + (col - p.swa_total));
      } else if (col >= p.swa_total && col - p.swa_total < p.prefill_cols) {
        v = __ldg(p.prefill_topk + (t - p.D) * p.prefill_stride + (col - p.swa_total));
      }
      x[j] = v;
    }
  }

  __device__ static int32_t value(const Params& p, const Ctx& cx, int64_t, int64_t c, int32_t x, sp::Faults& f,
                                  int32_t& kept) {
    const int64_t ST = p.swa_total;
    if (cx.kind == kDecode) {
      if (c < ST) return remap_block_span_fast(x, sbs(p), p.swa_span, p.swa_identity, f);  // x = -1: image cols
      int64_t v = x;  // -1 past the decode_compressed width
      if (cx.translate && v >= 0) v = lookup_slot_fast<kBs>(v, cx.comp_row, cx.comp_cols, p.comp_bs, f);
      const int32_t o = remap_block_span_fast(v, cbs(p), p.comp_span, p.comp_identity, f);
      kept += o >= 0 ? 1 : 0;
      return o;
    }
    if (cx.kind == kInvalid) return sp::kNoIndex;
    if (c < ST) {
      if (c >= cx.n) return sp::kNoIndex;
      return remap_block_span_fast(lookup_slot_fast<kBs>(cx.start + c, cx.swa_row, cx.swa_cols, p.swa_bs, f),
                                   sbs(p), p.swa_span, p.swa_identity, f);
    }
    const int64_t l = c - ST < cx.readable ? int64_t{x} : -1;
    return remap_block_span_fast(lookup_slot_fast<kBs>(l, cx.comp_row, cx.comp_cols, p.comp_bs, f), cbs(p),
                                 p.comp_span, p.comp_identity, f);
  }

  __device__ static void finish(const Params& p, const Ctx& cx, int64_t t) {
    const int64_t ST = p.swa_total;
    if (cx.kind == kInvalid) {
      p.lens[t] = 0;
    } else if (cx.kind == kPrefill) {
      p.lens[t] = static_cast<int32_t>(ST + cx.topk_len);  // the whole SWA region counts
    } else {
      int64_t comp_len;
      if (p.dct == 0) comp_len = 0;
      else if (p.are_local) comp_len = __ldg(p.decode_valid + t) != 0 ? cx.count : 0;
      else if (p.decode_lens != nullptr) comp_len = __ldg(p.decode_lens + t);
      else comp_len = p.dct;
      sp::Faults reported;  // counted by prologue()
      p.lens[t] = sp::to_length(ST + comp_len, reported);
    }
  }

  __device__ static int32_t* out_row(const Params& p, int64_t t) { return p.out + t * p.out_stride; }
};

/// The hot path: both block sizes 64 (or both 128), identity spans (span == block size, the
/// remap is then the identity), output rows 16-byte aligned and swa_width + image_width a
/// multiple of 4. One CTA of kLeanThreads per row, each thread one 4-column cell at a time
/// (int4 stores), the row context computed once per thread from broadcast loads, and 32-bit
/// lookups (lookup_slot_pow2). ncu on the H200 (2026-11-30): the tiled skeleton ran ~940 CTAs
/// at 52% occupancy and issued far more instructions per element than the Triton kernel.
/// Results and faults are the tiled kernel's (MixedOp) for every input.
constexpr int kLeanThreads = 128;

template <int kShift>
__global__ void __launch_bounds__(kLeanThreads) mixed_lean_kernel(const MixedParams p, const int cells) {
  const int64_t t = blockIdx.x;
  int4* out = reinterpret_cast<int4*>(p.out + t * p.out_stride);
  const int64_t ST = p.swa_total;
  int32_t faults = 0;      // element faults of this thread
  int32_t row_faults = 0;  // row-level reports, added by thread 0 only
  int32_t kept = 0;
  int64_t len = 0;
  if (t < p.D) {
    // Decode row: SWA indices copied (identity remap), image columns -1, compressed indices
    // translated through the compressed table when they are request-local.
    const bool translate = p.are_local && p.dct > 0;
    const int32_t* crow = p.comp_table.data;
    uint32_t ccols = 0;
    if (translate) {
      const int64_t req = __ldg(p.token_to_req + t);
      if (req >= 0 && req < p.comp_table.rows) {
        crow = p.comp_table.data + req * p.comp_table.stride;
        ccols = cols32(p.comp_table.cols);
      }
    }
    if (p.dct > 0 && !p.are_local && p.decode_lens != nullptr) {  // clamped below; reported by thread 0
      sp::Faults lf;
      sp::to_length(ST + __ldg(p.decode_lens + t), lf);
      row_faults = lf.n;
    }
    const int32_t* dswa = p.decode_swa + t * p.decode_swa_stride;
    const int32_t* dcomp = p.dct > 0 ? p.decode_comp + t * p.decode_comp_stride : nullptr;  // read only when dct > 0
    for (int cell = threadIdx.x; cell < cells; cell += kLeanThreads) {
      int32_t o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t c = int64_t{cell} * 4 + j;
        if (c < ST) {
          const int32_t v = c < p.swa_width ? __ldg(dswa + c) : -1;
          o[j] = v < 0 ? sp::kNoIndex : v;
        } else {
          const int64_t k = c - ST;
          int32_t v = k < p.dct ? __ldg(dcomp + k) : -1;
          if (translate && v >= 0) v = lookup_slot_pow2<kShift>(v, crow, ccols, faults);
          o[j] = v < 0 ? sp::kNoIndex : v;
          kept += o[j] >= 0 ? 1 : 0;
        }
      }
      out[cell] = make_int4(o[0], o[1], o[2], o[3]);
    }
  } else {
    const sp::PrefillToken tok = sp::prefill_token(p.qsl, p.seq_lens, p.num_reqs, __ldg(p.token_to_req + t), t);
    if (!tok.ok) {
      row_faults = 1;  // malformed prefill row: all -1, length 0, reported once
      for (int cell = threadIdx.x; cell < cells; cell += kLeanThreads)
        out[cell] = make_int4(sp::kNoIndex, sp::kNoIndex, sp::kNoIndex, sp::kNoIndex);
    } else {
      sp::Faults vis;  // visibility widens the window only when the row has image columns
      const int64_t left = p.image_width > 0 ? sp::visibility(p.left_visible[t], vis) : 0;
      const int64_t right = p.image_width > 0 ? sp::visibility(p.right_visible[t], vis) : 0;
      row_faults = vis.n;
      const sp::Window w = sp::visible_window(tok.pos, p.window, left, right);
      const int64_t n = w.end - w.start;
      const bool sok = tok.req < p.swa_table.rows, cok = tok.req < p.comp_table.rows;  // req >= 0 (tok.ok)
      const int32_t* srow = sok ? p.swa_table.data + tok.req * p.swa_table.stride : p.swa_table.data;
      const uint32_t scols = sok ? cols32(p.swa_table.cols) : 0u;
      const int32_t* crow = cok ? p.comp_table.data + tok.req * p.comp_table.stride : p.comp_table.data;
      const uint32_t ccols = cok ? cols32(p.comp_table.cols) : 0u;
      const int64_t topk_len = sp::topk_len_at(tok.pos, p.compress_ratio, p.topk);
      const int64_t readable = p.prefill_cols < topk_len ? p.prefill_cols : topk_len;
      const int32_t* ptopk = p.prefill_topk + (t - p.D) * p.prefill_stride;
      for (int cell = threadIdx.x; cell < cells; cell += kLeanThreads) {
        int32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t c = int64_t{cell} * 4 + j;
          if (c < ST) {
            if (c >= n) {
              o[j] = sp::kNoIndex;
            } else {
              const int64_t pos = w.start + c;
              if (pos <= sp::kIndexMax) {
                o[j] = lookup_slot_pow2<kShift>(static_cast<int32_t>(pos), srow, scols, faults);
              } else {
                sp::Faults f;
                o[j] = sp::lookup_slot(pos, srow, scols, int64_t{1} << kShift, f);
                faults += f.n;
              }
            }
          } else {
            const int64_t k = c - ST;
            const int32_t l = k < readable ? __ldg(ptopk + k) : -1;
            o[j] = lookup_slot_pow2<kShift>(l, crow, ccols, faults);
          }
        }
        out[cell] = make_int4(o[0], o[1], o[2], o[3]);
      }
      len = ST + topk_len;  // the whole SWA region counts
    }
  }
  __shared__ int32_t warp_kept[kLeanThreads / 32];
  const int32_t wsum = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(kept)));
  if ((threadIdx.x & 31) == 0) warp_kept[threadIdx.x >> 5] = wsum;
  count_faults(p.error_count, faults + (threadIdx.x == 0 ? row_faults : 0));
  __syncthreads();
  if (threadIdx.x == 0) {
    if (t < p.D) {
      int32_t count = 0;
#pragma unroll
      for (int w = 0; w < kLeanThreads / 32; ++w) count += warp_kept[w];
      int64_t comp_len;
      if (p.dct == 0) comp_len = 0;
      else if (p.are_local) comp_len = __ldg(p.decode_valid + t) != 0 ? count : 0;
      else if (p.decode_lens != nullptr) comp_len = __ldg(p.decode_lens + t);
      else comp_len = p.dct;
      len = ST + comp_len;
    }
    sp::Faults reported;  // a decode length past INT32_MAX was counted in row_faults
    p.lens[t] = sp::to_length(len, reported);
  }
}

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
  p.decode_lens = args.decode_compressed_topk_lens.present() ? args.decode_compressed_topk_lens.as<const int32_t>()
                                                             : nullptr;
  p.decode_valid =
      args.decode_is_valid_token.present() ? args.decode_is_valid_token.as<const uint8_t>() : nullptr;
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
  const bool has_image = sp::visibility_in_effect(args.prefill_left_visible.present(), args.max_image_tokens);
  p.left_visible = has_image ? args.prefill_left_visible.as<const int32_t>() : nullptr;
  p.right_visible = has_image ? args.prefill_right_visible.as<const int32_t>() : nullptr;
  p.swa_width = args.decode_swa_indices.size(1);
  p.image_width = has_image ? args.max_image_tokens : 0;
  p.swa_total = p.swa_width + p.image_width;
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

  const bool pow2 = p.swa_bs == p.comp_bs && (p.swa_bs == 64 || p.swa_bs == 128);
  if (pow2 && p.swa_identity && p.comp_identity && vec && p.swa_total % 4 == 0) {
    const int64_t cells = args.sparse_indices.size(1) / 4;
    if (cells > 0x7FFFFFFF || D + P > kMaxGridX)
      throw Error("build_flashinfer_mixed_sparse_indices", "rows too wide or too many for one launch");
    if (p.swa_bs == 64)
      DSV4KV_CUDA_LAUNCH(mixed_lean_kernel<6>, dim3(static_cast<unsigned>(D + P)), dim3(kLeanThreads), stream, p,
                         static_cast<int>(cells));
    else
      DSV4KV_CUDA_LAUNCH(mixed_lean_kernel<7>, dim3(static_cast<unsigned>(D + P)), dim3(kLeanThreads), stream, p,
                         static_cast<int>(cells));
    return;
  }
  // The block sizes get compile-time code when both caches use the same specialised size.
  const int64_t common_bs = p.swa_bs == p.comp_bs ? p.swa_bs : -1;
  dispatch_block_size(common_bs, [&](auto bs) {
    launch_tiled_rows<MixedOp<decltype(bs)::value>>("build_flashinfer_mixed_sparse_indices", p, D + P,
                                                    args.sparse_indices.size(1), vec, 0, stream);
  });
}

}  // namespace dsv4kv::cuda
