/// \file global_topk.hpp
/// \brief The tester of compute_global_topk_indices_and_lens (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in global_topk_properties.hpp.
#pragma once

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of compute_global_topk_indices_and_lens.
class GlobalTopkTester : public TesterBase<GlobalTopkTester> {
 public:
  GlobalTopkTester& tokens(int64_t v) { tokens_ = v; return *this; }
  GlobalTopkTester& topk(int64_t v) { topk_ = v; return *this; }
  /// Padding elements between rows of topk_indices and of the output.
  GlobalTopkTester& row_pads(int64_t in_pad, int64_t out_pad) { in_row_pad_ = in_pad; out_row_pad_ = out_pad; return *this; }
  GlobalTopkTester& requests(int64_t v) { requests_ = v; return *this; }
  GlobalTopkTester& block_size(int64_t v) { block_size_ = v; return *this; }
  GlobalTopkTester& table(int64_t cols, int64_t row_pad) { bt_cols_ = cols; bt_row_pad_ = row_pad; return *this; }
  /// Share of -1 sentinels (and other negatives) among the top-k entries.
  GlobalTopkTester& sentinel_fraction(double v) { sentinel_fraction_ = v; return *this; }

  int64_t tokens() const { return tokens_; }
  int64_t topk() const { return topk_; }
  int64_t block_size() const { return block_size_; }
  int64_t requests() const { return requests_; }
  /// Elements from one output row to the next (topk + padding).
  int64_t out_row_stride() const { return topk_ + out_row_pad_; }

  void Prepare();
  /// The argument struct of the call (views into this tester's buffers), after Prepare().
  GlobalTopkArgs args() {
    Prepare();
    return Args();
  }
  void Run(Backend& be);

  int32_t local(int64_t t, int64_t c) const { return topk_indices_.load<int32_t>(t * (topk_ + in_row_pad_) + c); }
  int32_t request(int64_t t) const { return token_to_req_.load<int32_t>(t); }
  bool valid_token(int64_t t) const { return is_valid_.data()[t] != 0; }
  int32_t global(int64_t t, int64_t c) const { return out_.load<int32_t>(t * (topk_ + out_row_pad_) + c); }
  int32_t len(int64_t t) const { return lens_.load<int32_t>(t); }
  int32_t error_count() const { return error_count_.load<int32_t>(0); }

  /// The spec's value of out[t, c] by direct arithmetic (adds faults to `*faults`).
  int32_t expected_global(int64_t t, int64_t c, int64_t* faults) const;
  std::vector<NamedBuffer> buffers() const;
  const GuardedBuffer& out_buffer() const { return out_; }
  const GuardedBuffer& lens_buffer() const { return lens_; }

  friend std::ostream& operator<<(std::ostream& os, const GlobalTopkTester& t);

 private:
  GlobalTopkArgs Args();
  int64_t tokens_ = 9, topk_ = 64, in_row_pad_ = 0, out_row_pad_ = 0, requests_ = 3, block_size_ = 64;
  int64_t bt_cols_ = 4, bt_row_pad_ = 0;
  double sentinel_fraction_ = 0.2;
  GuardedBuffer topk_indices_, token_to_req_, block_table_, is_valid_, out_, lens_, error_count_;
};

/// The tester of GlobalTopkArgs (see TesterOf in tester_common.hpp).
template <>
struct TesterOf<GlobalTopkArgs> {
  using type = GlobalTopkTester;
};

}  // namespace dsv4kv::conformance
