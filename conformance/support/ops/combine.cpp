// The tester of combine_topk_swa_indices; see combine.hpp.
#include "combine.hpp"

#include <algorithm>
#include <climits>
#include <ostream>

namespace dsv4kv::conformance {

int64_t CombineTester::tokens() const { return T_; }

CombineTester& CombineTester::layout(std::vector<int32_t> query_start_loc, std::vector<int32_t> seq_lens,
                                     std::vector<int32_t> gather_lens) {
  requests_ = static_cast<int64_t>(seq_lens.size());
  base_ = query_start_loc.empty() ? 0 : query_start_loc[0];
  layout_ = Layout{std::move(query_start_loc), std::move(seq_lens), std::move(gather_lens)};
  prepared_ = false;
  return *this;
}

void CombineTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t R = requests_;
  std::vector<int32_t> qsl(R + 1), sl(R), gl(R + r.below(2));
  for (auto& v : gl) v = static_cast<int32_t>(r.range(-2, 2));
  qsl[0] = base_;
  int64_t max_seq = 0;
  for (int64_t b = 0; b < R; ++b) {
    const int64_t q = r.chance(0.1) ? 0 : r.range(1, max_query_);
    const int64_t seq = q + r.range(0, max_context_);
    int64_t g = r.pick(std::vector<int64_t>{seq, seq, q, r.range(0, seq)});
    qsl[b + 1] = static_cast<int32_t>(qsl[b] + q);
    sl[b] = static_cast<int32_t>(seq);
    gl[b] = static_cast<int32_t>(g);
    max_seq = std::max(max_seq, seq);
  }
  if (layout_) {
    qsl = layout_->qsl, sl = layout_->seq_lens, gl = layout_->gather_lens;
    max_seq = sl.empty() ? 0 : *std::max_element(sl.begin(), sl.end());
  }
  T_ = (qsl[R] - qsl[0]) + extra_tokens_;
  N_ = max_seq / compress_ratio_ + r.below(4);
  M_ = N_ + max_seq + m_extra_;
  // Request-level corruption (invalid cases): the op must drop these requests' rows.
  for (int64_t b = 0; b < R; ++b) {
    if (!r.chance(invalid_fraction_)) continue;
    switch (r.below(4)) {
      case 0: sl[b] = static_cast<int32_t>((qsl[b + 1] - qsl[b]) - 1); break;  // seq_len shorter than the query
      case 1: gl[b] = sl[b] + 1; break;                                        // gather_len > seq_len
      case 2: gl[b] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, INT32_MIN})); break;
      default: qsl[b + 1] = qsl[b] - 1; break;                                 // reversed query range
    }
  }
  if (r.chance(invalid_fraction_)) M_ = INT32_MAX / 2;  // M*b + ... overflows int32 for b >= 2
  qsl_ = i32_buffer(qsl);
  seq_lens_ = i32_buffer(sl);
  gather_lens_ = i32_buffer(gl);
  const int64_t T = T_, irs = topk_ + topk_pad_;
  std::vector<int32_t> topk(static_cast<size_t>(T * irs));
  const std::vector<int64_t> bad = {N_, N_ + 5, INT32_MAX};
  const std::vector<int64_t> sentinels = {-1, -1, -1, -2, INT32_MIN};
  for (int64_t i = 0; i < T * irs; ++i) {
    int64_t v = topk_range_ > 0 ? r.below(topk_range_) : (N_ > 0 ? r.below(N_) : -1);
    if (r.chance(0.2)) v = r.pick(sentinels);
    else if (r.chance(invalid_fraction_)) v = r.pick(bad);
    topk[i] = static_cast<int32_t>(v);
  }
  topk_indices_ = i32_buffer(topk);
  std::vector<int32_t> lv(T + r.below(2), 0), rv(lv.size(), 0);
  // Without image columns the arrays are not read: fill them with arbitrary values (negatives
  // included, which would be reported if read) so that reading them would show.
  if (visibility_ && !zero_visibility_) fill_visibility(r, max_image_tokens_, invalid_fraction_, qsl, sl, T, lv, rv);
  left_ = i32_buffer(lv);
  right_ = i32_buffer(rv);
  out_ = GuardedBuffer(static_cast<size_t>(T * out_row_stride()) * 4);
  lens_ = GuardedBuffer(static_cast<size_t>(T) * 4);
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

CombineArgs CombineTester::Args(int64_t w) {
  CombineArgs a;
  const int64_t T = T_;
  a.topk_indices = TensorView::mat(topk_indices_.data(), DType::kI32, T, topk_ + topk_pad_);
  a.query_start_loc = i32vec(qsl_, requests_ + 1);
  a.seq_lens = i32vec(seq_lens_, requests_);
  a.gather_lens = i32vec(gather_lens_, static_cast<int64_t>(gather_lens_.size() / 4));
  a.window_size = window_;
  a.compress_ratio = compress_ratio_;
  a.topk = topk_;
  a.M = M_;
  a.N = N_;
  if (visibility_) {
    a.left_visible = i32vec(left_, static_cast<int64_t>(left_.size() / 4));
    a.right_visible = i32vec(right_, static_cast<int64_t>(right_.size() / 4));
  }
  a.max_image_tokens = max_image_tokens_;
  a.combined_indices = TensorView::mat(out_.data(), DType::kI32, T, w, std::max<int64_t>(out_row_stride(), 1));
  a.combined_lens = i32vec(lens_, T);
  a.error_count = counter(error_count_);
  return a;
}

void CombineTester::Run(Backend& be) {
  Prepare();
  out_.fill(kFillByte);
  lens_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.combine_topk_swa_indices(Args(width()));
}

void CombineTester::RunWithWidth(Backend& be, int64_t w) {
  Prepare();
  run_with_width(be, Args(w), &CombineArgs::combined_indices, T_, w);
}

bool CombineTester::token_position(int64_t t, int64_t* b, int64_t* pos) const {
  for (int64_t i = 0; i < requests_; ++i) {
    const int64_t q0 = int64_t{qsl(i)} - qsl(0), q1 = int64_t{qsl(i + 1)} - qsl(0);
    if (t < q0 || t >= q1) continue;
    const int64_t s = seq_len(i), g = gather_len(i);
    if (s < q1 - q0 || g < 0 || g > s) return false;
    *b = i;
    *pos = s - (q1 - q0) + (t - q0);
    return true;
  }
  return false;
}

std::vector<NamedBuffer> CombineTester::buffers() const {
  return {{"topk_indices", &topk_indices_}, {"query_start_loc", &qsl_}, {"seq_lens", &seq_lens_},
          {"gather_lens", &gather_lens_}, {"left_visible", &left_}, {"right_visible", &right_},
          {"combined_indices", &out_}, {"combined_lens", &lens_}, {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const CombineTester& t) {
  return os << "CombineTester().requests(" << t.requests_ << ").max_query(" << t.max_query_ << ").max_context("
            << t.max_context_ << ").extra_tokens(" << t.extra_tokens_ << ").base(" << t.base_ << ").window("
            << t.window_ << ").compress_ratio(" << t.compress_ratio_ << ").topk(" << t.topk_ << ").topk_pad("
            << t.topk_pad_ << ").max_image_tokens(" << t.max_image_tokens_ << ").visibility(" << t.visibility_
            << ").zero_visibility(" << t.zero_visibility_ << ").topk_range(" << t.topk_range_ << ").m_extra(" << t.m_extra_ << ").out_row_pad(" << t.out_row_pad_ << ").invalid_fraction("
            << t.invalid_fraction_ << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")" << (t.layout_ ? " [explicit layout]" : "");
}

}  // namespace dsv4kv::conformance
