/// \file mixed_sparse.cu
/// \brief build_flashinfer_mixed_sparse_indices on the GPU
/// (spec "build_flashinfer_mixed_sparse_indices").
///
/// G threads per row (decode rows first, then prefill rows), each row
/// written completely in one pass: SWA columns, image columns, compressed
/// columns and their -1 padding. Rows start on a 16-byte boundary only when
/// swa_width + image_width is a multiple of 4; int4 stores are used then,
/// coalesced scalar stores otherwise.

#include "common.cuh"

namespace dsv4kv::cuda {
namespace {

using namespace detail;
namespace sp = dsv4kv::spec;

/// A block table as the kernel sees it.
struct Table {
  const int32_t* data;  // [rows, cols], row stride `stride`
  int64_t rows, cols, stride;
};

/// Row `req` of a table, or an empty row (every lookup through it is dropped and reported)
/// when the request is outside the table.
__device__ __forceinline__ Table table_row(const Table& t, int64_t req) {
  if (req < 0 || req >= t.rows) return Table{t.data, 1, 0, 0};
  return Table{t.data + req * t.stride, 1, t.cols, 0};
}

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
  int64_t window, compress_ratio, topk;
  const int32_t* left_visible;   // [>= D + P] or null
  const int32_t* right_visible;  // [>= D + P] or null
  int64_t swa_width, image_width, swa_total;
  int32_t* out;                  // [D + P, width]
  int64_t out_stride, width;
  int32_t* lens;                 // [D + P]
  int64_t D, P;
  bool vec;                      // out rows and decode_swa rows 16-byte aligned
  int32_t* error_count;
};

template <int G, int kBs>
__global__ void __launch_bounds__(kIndexCtaThreads) mixed_kernel(const MixedParams p) {
  constexpr int kRows = kIndexCtaThreads / G;
  __shared__ int32_t counts[kRows];
  if (G > 32 && threadIdx.x < kRows) counts[threadIdx.x] = 0;
  if constexpr (G > 32) __syncthreads();

  const int tid = threadIdx.x % G;
  const int64_t t = int64_t{blockIdx.x} * kRows + threadIdx.x / G;
  const int64_t sbs = block_size_of<kBs>(p.swa_bs);
  const int64_t cbs = block_size_of<kBs>(p.comp_bs);
  const int64_t ST = p.swa_total;
  int32_t faults = 0;
  int32_t count = 0;
  sp::Faults f;

  if (t < p.D) {
    // Decode row: copy precomputed indices through the span remap.
    int32_t* out = p.out + t * p.out_stride;
    const bool translate = p.are_local && p.dct > 0;
    const Table comp_row = translate ? table_row(p.comp_table, __ldg(p.token_to_req + t)) : Table{nullptr, 0, 0, 0};
    const int32_t* comp_in = p.decode_comp != nullptr ? p.decode_comp + t * p.decode_comp_stride : nullptr;
    write_row<G>(out, p.width, p.vec, p.decode_swa + t * p.decode_swa_stride, p.swa_width, tid,
                 [&](int64_t c, int32_t x) {
                   if (c < ST) return sp::remap_block_span(x, sbs, p.swa_span, f);  // x = -1 in image columns
                   const int64_t cc = c - ST;
                   int64_t v = cc < p.dct ? int64_t{__ldg(comp_in + cc)} : -1;
                   if (translate && v >= 0) v = sp::lookup_slot(v, comp_row.data, comp_row.cols, cbs, f);
                   const int32_t o = sp::remap_block_span(v, cbs, p.comp_span, f);
                   count += o >= 0 ? 1 : 0;
                   return o;
                 });
  } else if (t < p.D + p.P) {
    // Prefill row: derive the widened window and translate local top-k indices.
    int32_t* out = p.out + t * p.out_stride;
    const sp::PrefillToken tok = sp::prefill_token(p.qsl, p.seq_lens, p.num_reqs, __ldg(p.token_to_req + t), t);
    if (!tok.ok) {
      write_row<G>(out, p.width, p.vec, nullptr, 0, tid, [](int64_t, int32_t) { return sp::kNoIndex; });
      if (tid == 0) {
        p.lens[t] = 0;
        ++faults;
      }
    } else {
      sp::Faults vis;  // one report per negative visibility value, counted by the row's first thread
      const int64_t left = p.image_width > 0 ? sp::visibility(p.left_visible[t], vis) : 0;
      const int64_t right = p.image_width > 0 ? sp::visibility(p.right_visible[t], vis) : 0;
      if (tid == 0) faults += vis.n;
      const sp::Window w = sp::visible_window(tok.pos, p.window, left, right);
      const int64_t n = w.end - w.start;
      const Table swa_row = table_row(p.swa_table, tok.req);
      const Table comp_row = table_row(p.comp_table, tok.req);
      const int64_t topk_len = sp::topk_len_at(tok.pos, p.compress_ratio, p.topk);
      const int64_t readable = p.prefill_cols < topk_len ? p.prefill_cols : topk_len;
      const int32_t* topk_in = p.prefill_topk + (t - p.D) * p.prefill_stride;
      write_row<G>(out, p.width, p.vec, nullptr, 0, tid, [&](int64_t c, int32_t) {
        if (c < ST) {
          if (c >= n) return sp::kNoIndex;
          return sp::remap_block_span(sp::lookup_slot(w.start + c, swa_row.data, swa_row.cols, sbs, f), sbs,
                                      p.swa_span, f);
        }
        const int64_t cc = c - ST;
        const int64_t l = cc < readable ? int64_t{__ldg(topk_in + cc)} : -1;
        return sp::remap_block_span(sp::lookup_slot(l, comp_row.data, comp_row.cols, cbs, f), cbs, p.comp_span, f);
      });
      if (tid == 0) p.lens[t] = static_cast<int32_t>(ST + topk_len);
    }
  }
  faults += f.n;

  // Decode lengths need the row's count of kept compressed entries.
  count = group_sum<G>(count, counts);
  if (t < p.D && tid == 0) {
    int64_t comp_len;
    if (p.dct == 0) comp_len = 0;
    else if (p.are_local) comp_len = __ldg(p.decode_valid + t) != 0 ? count : 0;
    else if (p.decode_lens != nullptr) comp_len = __ldg(p.decode_lens + t);
    else comp_len = p.dct;
    p.lens[t] = static_cast<int32_t>(ST + comp_len);
  }
  count_faults(p.error_count, faults);
}

Table make_table(const TensorView& v) {
  return Table{v.as<const int32_t>(), v.size(0), v.size(1), v.size(0) > 1 ? v.stride[0] : 0};
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
  p.decode_comp_stride = has_comp && D > 1 ? args.decode_compressed_indices.stride[0] : 0;
  p.dct = has_comp ? args.decode_compressed_indices.size(1) : 0;
  p.decode_lens = args.decode_compressed_topk_lens.present() ? args.decode_compressed_topk_lens.as<const int32_t>()
                                                             : nullptr;
  p.decode_valid =
      args.decode_is_valid_token.present() ? args.decode_is_valid_token.as<const uint8_t>() : nullptr;
  p.are_local = args.decode_compressed_indices_are_local;
  p.prefill_topk = args.prefill_topk_indices.as<const int32_t>();
  p.prefill_stride = P > 1 ? args.prefill_topk_indices.stride[0] : 0;
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
  const bool has_image = args.prefill_left_visible.present();
  p.left_visible = has_image ? args.prefill_left_visible.as<const int32_t>() : nullptr;
  p.right_visible = has_image ? args.prefill_right_visible.as<const int32_t>() : nullptr;
  p.swa_width = args.decode_swa_indices.size(1);
  p.image_width = has_image ? args.max_image_tokens : 0;
  p.swa_total = p.swa_width + p.image_width;
  p.out = args.sparse_indices.as<int32_t>();
  p.out_stride = D + P > 1 ? args.sparse_indices.stride[0] : 0;
  p.width = args.sparse_indices.size(1);
  p.lens = args.sparse_topk_lens.as<int32_t>();
  p.D = D;
  p.P = P;
  p.vec = rows_vectorizable(p.out, p.out_stride) && rows_vectorizable(p.decode_swa, p.decode_swa_stride);
  p.error_count = args.error_count;

  // The block sizes get compile-time code when both caches use the same specialised size.
  const int64_t common_bs = p.swa_bs == p.comp_bs ? p.swa_bs : -1;
  dispatch_row_group(p.width, [&](auto g) {
    constexpr int G = decltype(g)::value;
    const int64_t ctas = ceil_div(D + P, kIndexCtaThreads / G);
    if (ctas > kMaxGridX) throw Error("build_flashinfer_mixed_sparse_indices", "too many rows for one launch");
    dispatch_block_size(common_bs, [&](auto bs) {
      mixed_kernel<G, decltype(bs)::value><<<static_cast<unsigned>(ctas), kIndexCtaThreads, 0, stream>>>(p);
      DSV4KV_CUDA_CHECK_LAUNCH("mixed_kernel");
    });
  });
}

}  // namespace dsv4kv::cuda
