// The tester of build_flashinfer_mixed_sparse_indices; see mixed_sparse.hpp.
#include "mixed_sparse.hpp"

#include <algorithm>
#include <climits>
#include <ostream>

namespace dsv4kv::conformance {

int64_t MixedSparseTester::prefill_tokens() const { return P_; }

MixedSparseTester& MixedSparseTester::layout(std::vector<int32_t> query_start_loc, std::vector<int32_t> seq_lens) {
  prefill_requests_ = static_cast<int64_t>(seq_lens.size()) - decode_requests_;
  layout_ = std::make_pair(std::move(query_start_loc), std::move(seq_lens));
  prepared_ = false;
  return *this;
}

void MixedSparseTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t D = decode_requests_, R = decode_requests_ + prefill_requests_;
  R_ = R;
  std::vector<int32_t> qsl(R + 1, 0), sl(R);
  int64_t max_seq = 0;
  for (int64_t b = 0; b < R; ++b) {
    const int64_t q = b < D ? 1 : r.range(1, max_query_);
    qsl[b + 1] = static_cast<int32_t>(qsl[b] + q);
    sl[b] = static_cast<int32_t>(q + r.range(0, max_context_));
    max_seq = std::max<int64_t>(max_seq, sl[b]);
  }
  if (layout_) {
    qsl = layout_->first, sl = layout_->second;
    max_seq = sl.empty() ? 0 : *std::max_element(sl.begin(), sl.end());
  }
  P_ = qsl[R] - D;
  const int64_t rows = D + P_;
  std::vector<int32_t> owner(rows + r.below(2), 0);
  for (int64_t b = 0; b < R; ++b)
    for (int64_t t = qsl[b]; t < qsl[b + 1]; ++t) owner[t] = static_cast<int32_t>(b);
  const std::vector<int64_t> bad_req = bad_index_values(R);
  for (int64_t t = 0; t < rows; ++t)
    if (r.chance(invalid_fraction_))
      owner[t] = static_cast<int32_t>(r.chance(0.3) && R > 1 ? (owner[t] + 1) % R : r.pick(bad_req));
  for (int64_t b = 0; b < R; ++b)  // seq_len shorter than the query (malformed request)
    if (r.chance(invalid_fraction_ / 2)) sl[b] = static_cast<int32_t>(qsl[b + 1] - qsl[b] - 1);
  qsl_ = i32_buffer(qsl);
  seq_lens_ = i32_buffer(sl);
  token_to_req_ = i32_buffer(owner);

  const std::vector<int64_t> bad_block = {INT32_MIN, -2, -1};
  auto make_table = [&](int64_t bs, int64_t need_positions, int64_t wanted, int64_t pad, int64_t* cols_out) {
    int64_t cols = (need_positions + bs - 1) / bs + r.below(2);
    if (r.chance(invalid_fraction_)) cols = std::max<int64_t>(cols - 1, 0);  // too short a row
    if (wanted > 0) cols = wanted;
    *cols_out = cols;
    std::vector<int32_t> t(static_cast<size_t>(R * (cols + pad)));
    for (auto& v : t) v = static_cast<int32_t>(r.chance(invalid_fraction_) ? r.pick(bad_block) : r.below(1000));
    return t;
  };
  swa_table_ = i32_buffer(make_table(swa_block_size_, max_seq, swa_cols_wanted_, swa_table_pad_, &swa_cols_));
  const int64_t max_comp = max_seq / compress_ratio_ + 1;
  if (separate_compressed_table_) comp_table_ = i32_buffer(make_table(compressed_block_size_, max_comp, comp_cols_wanted_, comp_table_pad_, &comp_cols_));
  else comp_table_ = GuardedBuffer(0), comp_cols_ = 0;

  const int64_t sw = swa_width() + swa_row_pad_;
  std::vector<int32_t> dswa(static_cast<size_t>(D * sw));
  const std::vector<int64_t> negatives = {-1, -1, -1, -2, INT32_MIN};
  for (auto& v : dswa) {
    int64_t x = r.below(100000);
    if (r.chance(0.2)) x = r.pick(negatives);
    else if (r.chance(invalid_fraction_)) x = INT32_MAX;  // overflows with a span above the block size
    v = static_cast<int32_t>(x);
  }
  decode_swa_ = i32_buffer(dswa);
  const int64_t dt = dct();
  std::vector<int32_t> dcomp(static_cast<size_t>(D * dt));
  for (int64_t t = 0; t < D; ++t)
    for (int64_t c = 0; c < dt; ++c) {
      const int64_t b = std::clamp<int64_t>(t, 0, R - 1);
      int64_t x = local_ ? r.below(sl[b] / compress_ratio_ + 1) : r.below(100000);
      if (r.chance(0.2)) x = r.pick(negatives);
      else if (r.chance(invalid_fraction_)) x = r.pick(std::vector<int64_t>{max_comp + 100, INT32_MAX});
      dcomp[t * dt + c] = static_cast<int32_t>(x);
    }
  decode_comp_ = i32_buffer(dcomp);
  std::vector<int32_t> dlens(D + r.below(2));
  // Invalid lengths include values whose row length swa_total + len passes INT32_MAX (clamped, counted).
  for (auto& v : dlens)
    v = static_cast<int32_t>(r.chance(invalid_fraction_) ? r.pick(std::vector<int64_t>{-3, INT32_MAX, INT32_MAX - 5})
                                                          : r.range(0, dt));
  decode_lens_buf_ = i32_buffer(dlens);
  decode_valid_ = GuardedBuffer(static_cast<size_t>(D + r.below(2)));
  for (size_t i = 0; i < decode_valid_.size(); ++i) decode_valid_.data()[i] = r.chance(0.2) ? 0 : (r.chance(0.8) ? 1 : 7);

  const int64_t pc = prefill_cols_;
  std::vector<int32_t> ptopk(static_cast<size_t>(P_ * pc));
  for (int64_t p = 0; p < P_; ++p) {
    const int64_t t = D + p;
    const int64_t b = owner[t] >= 0 && owner[t] < R ? owner[t] : 0;
    const int64_t pos = std::max<int64_t>(sl[b] - (qsl[b + 1] - qsl[b]) + (t - qsl[b]), 0);
    for (int64_t c = 0; c < pc; ++c) {
      int64_t x = r.below((pos + 1) / compress_ratio_ + 1);
      if (r.chance(0.2)) x = r.pick(negatives);
      else if (r.chance(invalid_fraction_)) x = r.pick(std::vector<int64_t>{max_comp + 1000, INT32_MAX});
      ptopk[p * pc + c] = static_cast<int32_t>(x);
    }
  }
  prefill_topk_ = i32_buffer(ptopk);

  std::vector<int32_t> lv(rows + r.below(2), 0), rv(lv.size(), 0);
  if (visibility_ && !zero_visibility_) fill_visibility(r, max_image_tokens_, invalid_fraction_, qsl, sl, rows, lv, rv);
  left_ = i32_buffer(lv);
  right_ = i32_buffer(rv);
  out_ = GuardedBuffer(static_cast<size_t>(rows * out_row_stride()) * 4);
  lens_ = GuardedBuffer(static_cast<size_t>(rows) * 4);
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

MixedSparseArgs MixedSparseTester::Args(int64_t w) {
  MixedSparseArgs a;
  const int64_t D = decode_tokens(), rows = D + P_;
  a.decode_swa_indices =
      TensorView::mat(decode_swa_.data(), DType::kI32, D, swa_width(), std::max<int64_t>(swa_width() + swa_row_pad_, 1));
  if (decode_topk_ >= 0) {
    a.decode_compressed_indices = TensorView::mat(decode_comp_.data(), DType::kI32, D, dct(), std::max<int64_t>(dct(), 1));
    if (decode_lens_) a.decode_compressed_topk_lens = i32vec(decode_lens_buf_, static_cast<int64_t>(decode_lens_buf_.size() / 4));
  }
  a.prefill_topk_indices = TensorView::mat(prefill_topk_.data(), DType::kI32, P_, prefill_cols_, std::max<int64_t>(prefill_cols_, 1));
  a.query_start_loc = i32vec(qsl_, R_ + 1);
  a.seq_lens = i32vec(seq_lens_, R_);
  a.token_to_req = i32vec(token_to_req_, static_cast<int64_t>(token_to_req_.size() / 4));
  a.swa_block_table =
      TensorView::mat(swa_table_.data(), DType::kI32, R_, swa_cols_, std::max<int64_t>(swa_cols_ + swa_table_pad_, 1));
  a.swa_block_size = swa_block_size_;
  if (separate_compressed_table_)
    a.compressed_block_table = TensorView::mat(comp_table_.data(), DType::kI32, R_, comp_cols_,
                                               std::max<int64_t>(comp_cols_ + comp_table_pad_, 1));
  a.compressed_block_size = compressed_block_size_;
  a.window_size = window_;
  a.compress_ratio = compress_ratio_;
  a.topk = topk_;
  a.decode_compressed_indices_are_local = local_;
  a.decode_is_valid_token = TensorView::vec(decode_valid_.data(), DType::kBool, static_cast<int64_t>(decode_valid_.size()));
  if (swa_span_ > 0) a.swa_block_span = swa_span_;
  if (compressed_span_ > 0) a.compressed_block_span = compressed_span_;
  if (visibility_) {
    a.prefill_left_visible = i32vec(left_, static_cast<int64_t>(left_.size() / 4));
    a.prefill_right_visible = i32vec(right_, static_cast<int64_t>(right_.size() / 4));
  }
  a.max_image_tokens = max_image_tokens_;
  a.sparse_indices = TensorView::mat(out_.data(), DType::kI32, rows, w, std::max<int64_t>(out_row_stride(), 1));
  a.sparse_topk_lens = i32vec(lens_, rows);
  a.error_count = counter(error_count_);
  return a;
}

void MixedSparseTester::Run(Backend& be) {
  Prepare();
  out_.fill(kFillByte);
  lens_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.build_flashinfer_mixed_sparse_indices(Args(width()));
}

void MixedSparseTester::RunWithWidth(Backend& be, int64_t w) {
  Prepare();
  run_with_width(be, Args(w), &MixedSparseArgs::sparse_indices, rows(), w);
}

std::vector<NamedBuffer> MixedSparseTester::buffers() const {
  return {{"decode_swa_indices", &decode_swa_}, {"decode_compressed_indices", &decode_comp_},
          {"decode_compressed_topk_lens", &decode_lens_buf_}, {"prefill_topk_indices", &prefill_topk_},
          {"query_start_loc", &qsl_}, {"seq_lens", &seq_lens_}, {"token_to_req", &token_to_req_},
          {"swa_block_table", &swa_table_}, {"compressed_block_table", &comp_table_},
          {"decode_is_valid_token", &decode_valid_}, {"prefill_left_visible", &left_},
          {"prefill_right_visible", &right_}, {"sparse_indices", &out_}, {"sparse_topk_lens", &lens_},
          {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const MixedSparseTester& t) {
  return os << "MixedSparseTester().decode_requests(" << t.decode_requests_ << ").prefill_requests("
            << t.prefill_requests_ << ").max_query(" << t.max_query_ << ").max_context(" << t.max_context_
            << ").window(" << t.window_ << ").swa_width_pad(" << t.swa_width_pad_ << ").compress_ratio("
            << t.compress_ratio_ << ").topk(" << t.topk_ << ").prefill_cols(" << t.prefill_cols_ << ").decode_topk("
            << t.decode_topk_ << ").decode_lens(" << t.decode_lens_ << ").local(" << t.local_ << ").block_sizes("
            << t.swa_block_size_ << ", " << t.compressed_block_size_ << ").spans(" << t.swa_span_ << ", "
            << t.compressed_span_ << ").separate_compressed_table(" << t.separate_compressed_table_
            << ").max_image_tokens(" << t.max_image_tokens_ << ").visibility(" << t.visibility_
            << ").zero_visibility(" << t.zero_visibility_ << ").swa_row_pad(" << t.swa_row_pad_ << ").tables("
            << t.swa_cols_wanted_ << ", " << t.swa_table_pad_ << ", " << t.comp_cols_wanted_ << ", " << t.comp_table_pad_
            << ").out_row_pad(" << t.out_row_pad_ << ").invalid_fraction(" << t.invalid_fraction_
            << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")" << (t.layout_ ? " [explicit layout]" : "");
}

}  // namespace dsv4kv::conformance
