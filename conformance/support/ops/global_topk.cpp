// The tester of compute_global_topk_indices_and_lens; see global_topk.hpp.
#include "global_topk.hpp"

#include <algorithm>
#include <climits>
#include <ostream>

namespace dsv4kv::conformance {

void GlobalTopkTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t T = tokens_, K = topk_, R = requests_, B = block_size_, cols = bt_cols_;
  const int64_t bts = bt_cols_ + bt_row_pad_;
  std::vector<int32_t> bt(static_cast<size_t>(std::max<int64_t>(R * bts, 0)));
  const std::vector<int64_t> bad_block = {INT32_MIN, -2, -1, INT32_MAX, INT32_MAX / B + 1};
  for (int64_t i = 0; i < R * bts; ++i) {
    int64_t v = r.below(5000);
    if (i % bts >= cols || r.chance(invalid_fraction_)) v = r.pick(bad_block);
    bt[i] = clamp32(v);
  }
  block_table_ = i32_buffer(bt);
  std::vector<int32_t> req(T + r.below(3));
  const std::vector<int64_t> bad_req = bad_index_values(R);
  for (auto& v : req) v = static_cast<int32_t>(R > 0 && !r.chance(invalid_fraction_) ? r.below(R) : r.pick(bad_req));
  token_to_req_ = i32_buffer(req);
  is_valid_ = GuardedBuffer(req.size());
  for (size_t i = 0; i < req.size(); ++i)
    is_valid_.data()[i] = r.chance(0.2) ? 0 : r.pick(std::vector<uint8_t>{1, 1, 1, 2, 0xFF});  // any nonzero is true
  const int64_t irs = K + in_row_pad_;
  std::vector<int32_t> topk(static_cast<size_t>(T * irs));
  const int64_t span = cols * B;
  const std::vector<int64_t> bad_local = {span, span + B, INT32_MAX};
  const std::vector<int64_t> sentinels = {-1, -1, -1, -2, INT32_MIN};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < irs; ++c) {
      int64_t v = span > 0 ? r.below(span) : -1;
      if (r.chance(sentinel_fraction_)) v = r.pick(sentinels);
      else if (c >= K || r.chance(invalid_fraction_)) v = r.pick(bad_local);
      topk[t * irs + c] = static_cast<int32_t>(v);
    }
  topk_indices_ = i32_buffer(topk);
  out_ = GuardedBuffer(static_cast<size_t>(T * (K + out_row_pad_)) * 4);
  lens_ = GuardedBuffer(static_cast<size_t>(T) * 4);
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

GlobalTopkArgs GlobalTopkTester::Args() {
  GlobalTopkArgs a;
  const int64_t T = tokens_;
  a.topk_indices = TensorView::mat(topk_indices_.data(), DType::kI32, T, topk_, std::max<int64_t>(topk_ + in_row_pad_, 1));
  a.token_to_req = i32vec(token_to_req_, static_cast<int64_t>(token_to_req_.size() / 4));
  a.block_table = TensorView::mat(block_table_.data(), DType::kI32, requests_, bt_cols_, std::max<int64_t>(bt_cols_ + bt_row_pad_, 1));
  a.block_size = block_size_;
  a.is_valid_token = TensorView::vec(is_valid_.data(), DType::kBool, static_cast<int64_t>(is_valid_.size()));
  a.global_topk_indices = TensorView::mat(out_.data(), DType::kI32, T, topk_, std::max<int64_t>(topk_ + out_row_pad_, 1));
  a.topk_lens = i32vec(lens_, T);
  a.error_count = counter(error_count_);
  return a;
}

void GlobalTopkTester::Run(Backend& be) {
  Prepare();
  out_.fill(kFillByte);
  lens_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.compute_global_topk_indices_and_lens(Args());
}

int32_t GlobalTopkTester::expected_global(int64_t t, int64_t c, int64_t* faults) const {
  const int64_t r = request(t);
  if (r < 0 || r >= requests_) return -1;
  const int64_t l = local(t, c);
  if (l < 0) return -1;
  const int64_t col = l / block_size_;
  if (col >= bt_cols_) { ++*faults; return -1; }
  const int64_t blk = block_table_.load<int32_t>(r * (bt_cols_ + bt_row_pad_) + col);
  if (blk < 0) { ++*faults; return -1; }
  const int64_t v = blk * block_size_ + l % block_size_;
  if (v > INT32_MAX) { ++*faults; return -1; }
  return static_cast<int32_t>(v);
}

std::vector<NamedBuffer> GlobalTopkTester::buffers() const {
  return {{"topk_indices", &topk_indices_}, {"token_to_req", &token_to_req_}, {"block_table", &block_table_},
          {"is_valid_token", &is_valid_}, {"global_topk_indices", &out_}, {"topk_lens", &lens_},
          {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const GlobalTopkTester& t) {
  return os << "GlobalTopkTester().tokens(" << t.tokens_ << ").topk(" << t.topk_ << ").row_pads(" << t.in_row_pad_
            << ", " << t.out_row_pad_ << ").requests(" << t.requests_ << ").block_size(" << t.block_size_
            << ").table(" << t.bt_cols_ << ", " << t.bt_row_pad_ << ").sentinel_fraction(" << t.sentinel_fraction_
            << ").invalid_fraction(" << t.invalid_fraction_ << ").count_errors(" << t.count_errors_ << ").seed("
            << t.seed_ << ")";
}

}  // namespace dsv4kv::conformance
