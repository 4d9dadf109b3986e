/// \file mixed_sparse.hpp
/// \brief The tester of build_flashinfer_mixed_sparse_indices (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in mixed_sparse_properties.hpp.
#pragma once

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of build_flashinfer_mixed_sparse_indices.
///
/// `decode_requests` requests of one query token each come first, then
/// `prefill_requests` requests of up to `max_query` tokens; query_start_loc
/// counts global token indices from 0.
class MixedSparseTester : public TesterBase<MixedSparseTester> {
 public:
  MixedSparseTester& decode_requests(int64_t v) { decode_requests_ = v; return *this; }
  MixedSparseTester& prefill_requests(int64_t v) { prefill_requests_ = v; return *this; }
  MixedSparseTester& max_query(int64_t v) { max_query_ = v; return *this; }
  MixedSparseTester& max_context(int64_t v) { max_context_ = v; return *this; }
  MixedSparseTester& window(int64_t v) { window_ = v; return *this; }
  /// decode_swa_indices width = window + pad.
  MixedSparseTester& swa_width_pad(int64_t v) { swa_width_pad_ = v; return *this; }
  /// Padding elements between rows of decode_swa_indices.
  MixedSparseTester& swa_row_pad(int64_t v) { swa_row_pad_ = v; return *this; }
  /// Explicit requests (the decode requests first, one token each): query_start_loc from 0 and
  /// seq_lens (the random layout's draws are still made, then replaced).
  MixedSparseTester& layout(std::vector<int32_t> query_start_loc, std::vector<int32_t> seq_lens);
  /// Block-table columns (0 = drawn: enough for the longest sequence, maybe one more) and padding
  /// elements between rows, of the SWA and the compressed table.
  MixedSparseTester& tables(int64_t swa_cols, int64_t swa_row_pad, int64_t comp_cols, int64_t comp_row_pad) {
    swa_cols_wanted_ = swa_cols, swa_table_pad_ = swa_row_pad, comp_cols_wanted_ = comp_cols, comp_table_pad_ = comp_row_pad;
    return *this;
  }
  /// Padding elements between rows of sparse_indices.
  MixedSparseTester& out_row_pad(int64_t v) { out_row_pad_ = v; return *this; }
  MixedSparseTester& compress_ratio(int64_t v) { compress_ratio_ = v; return *this; }
  MixedSparseTester& topk(int64_t v) { topk_ = v; return *this; }
  /// prefill_topk_indices columns (may be below or above topk).
  MixedSparseTester& prefill_cols(int64_t v) { prefill_cols_ = v; return *this; }
  /// decode_compressed_indices columns; -1 = absent.
  MixedSparseTester& decode_topk(int64_t v) { decode_topk_ = v; return *this; }
  MixedSparseTester& decode_lens(bool v) { decode_lens_ = v; return *this; }
  MixedSparseTester& local(bool v) { local_ = v; return *this; }
  MixedSparseTester& block_sizes(int64_t swa, int64_t compressed) { swa_block_size_ = swa; compressed_block_size_ = compressed; return *this; }
  /// Block spans (0 = absent).
  MixedSparseTester& spans(int64_t swa, int64_t compressed) { swa_span_ = swa; compressed_span_ = compressed; return *this; }
  MixedSparseTester& separate_compressed_table(bool v) { separate_compressed_table_ = v; return *this; }
  MixedSparseTester& max_image_tokens(int64_t v) { max_image_tokens_ = v; return *this; }
  MixedSparseTester& visibility(bool v) { visibility_ = v; return *this; }
  MixedSparseTester& zero_visibility(bool v) { zero_visibility_ = v; return *this; }

  int64_t decode_tokens() const { return decode_requests_; }
  int64_t prefill_tokens() const;
  int64_t rows() const { return decode_tokens() + prefill_tokens(); }
  int64_t swa_width() const { return window_ + swa_width_pad_; }
  int64_t image_width() const { return visibility_ ? max_image_tokens_ : 0; }
  int64_t dct() const { return decode_topk_ < 0 ? 0 : decode_topk_; }
  int64_t width() const { return spec::mixed_row_width(swa_width(), image_width(), topk_, dct()); }
  int64_t topk() const { return topk_; }
  int64_t max_image_tokens() const { return max_image_tokens_; }
  bool has_visibility() const { return visibility_; }
  /// Decode lengths come from the caller's decode_compressed_topk_lens (any value, even one making a length 0).
  bool has_decode_lens() const { return decode_lens_ && dct() > 0 && !local_; }
  int64_t prefill_cols() const { return prefill_cols_; }

  void Prepare();
  /// The argument struct of the call (views into this tester's buffers), after Prepare().
  MixedSparseArgs args() {
    Prepare();
    return Args(width());
  }
  void Run(Backend& be);
  void RunWithWidth(Backend& be, int64_t width);

  int32_t decode_swa(int64_t t, int64_t c) const { return decode_swa_.load<int32_t>(t * (swa_width() + swa_row_pad_) + c); }
  int32_t decode_comp(int64_t t, int64_t c) const { return decode_comp_.load<int32_t>(t * dct() + c); }
  int32_t prefill_topk_in(int64_t p, int64_t c) const { return prefill_topk_.load<int32_t>(p * prefill_cols_ + c); }
  int32_t out(int64_t t, int64_t c) const { return out_.load<int32_t>(t * out_row_stride() + c); }
  /// Elements from one output row to the next (width + padding).
  int64_t out_row_stride() const { return width() + out_row_pad_; }
  int32_t len(int64_t t) const { return lens_.load<int32_t>(t); }
  int32_t error_count() const { return error_count_.load<int32_t>(0); }
  const GuardedBuffer& out_buffer() const { return out_; }
  const GuardedBuffer& lens_buffer() const { return lens_; }
  std::vector<NamedBuffer> buffers() const;

  friend std::ostream& operator<<(std::ostream& os, const MixedSparseTester& t);

 private:
  MixedSparseArgs Args(int64_t width);
  int64_t decode_requests_ = 2, prefill_requests_ = 2, max_query_ = 12, max_context_ = 40;
  int64_t window_ = 8, swa_width_pad_ = 0, compress_ratio_ = 4, topk_ = 8, prefill_cols_ = 8, decode_topk_ = -1;
  bool decode_lens_ = false, local_ = false, separate_compressed_table_ = false;
  int64_t swa_block_size_ = 16, compressed_block_size_ = 16, swa_span_ = 0, compressed_span_ = 0;
  int64_t max_image_tokens_ = 0;
  bool visibility_ = false, zero_visibility_ = false;
  int64_t swa_row_pad_ = 0, out_row_pad_ = 0;
  int64_t swa_cols_wanted_ = 0, swa_table_pad_ = 0, comp_cols_wanted_ = 0, comp_table_pad_ = 0;
  std::optional<std::pair<std::vector<int32_t>, std::vector<int32_t>>> layout_;
  int64_t P_ = 0, R_ = 0, swa_cols_ = 0, comp_cols_ = 0;
  GuardedBuffer decode_swa_, decode_comp_, decode_lens_buf_, prefill_topk_, qsl_, seq_lens_, token_to_req_,
      swa_table_, comp_table_, decode_valid_, left_, right_, out_, lens_, error_count_;
};

/// The tester of MixedSparseArgs (see TesterOf in tester_common.hpp).
template <>
struct TesterOf<MixedSparseArgs> {
  using type = MixedSparseTester;
};

}  // namespace dsv4kv::conformance
