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

  // fuzz/fuzz_ops.cpp: how a caller may build the arguments (`In`: its fuzz input reader,
  // `Arena`: its owner of one buffer per view; fuzz/README.md).
  template <class In, class Arena>
  static void fuzz_args(In& g, Arena& a, GlobalTopkArgs& t) {
    t.block_size = g.scalar(1, 8);
    const int64_t B = t.block_size > 0 && t.block_size <= 16 ? t.block_size : 1;
    const int64_t T = g.range(0, 5), K = g.range(0, 6), R = g.range(0, 3), cols = g.range(0, 4);
    t.topk_indices = a.tensor(DType::kI32, {T, K}, false, a.indices(cols * B));
    t.token_to_req = a.tensor(DType::kI32, {T + g.range(0, 1)}, false, a.indices(R));
    t.block_table = a.tensor(DType::kI32, {R, cols}, false, a.indices(1 << 20));
    t.is_valid_token = a.tensor(DType::kBool, {T}, false, a.random_bytes());
    t.global_topk_indices = a.tensor(DType::kI32, {T, K}, false, a.no_fill());
    t.topk_lens = a.tensor(DType::kI32, {T}, false, a.no_fill());
  }

  // fuzz/fuzz_validate.cpp: how a hostile caller builds the arguments, and which views validate()
  // checks and which elements the operation may touch once it accepts (`Check`: the harness's
  // independent model of the access pattern; fuzz/README.md).
  template <class In, class Arena>
  static void hostile_args(In& g, Arena& a, GlobalTopkArgs& t) {
    t.block_size = g.scalar(1, 8);
    const int64_t T = g.size(), K = g.size(), R = g.size(), cols = g.size();
    t.topk_indices = a.tensor(DType::kI32, {T, K}, false, 32);
    t.token_to_req = a.tensor(DType::kI32, {g.plus(T, g.range(0, 1))}, false, R);
    t.block_table = a.tensor(DType::kI32, {R, cols}, false, 1 << 20);
    t.is_valid_token = a.tensor(DType::kBool, {T}, false, 2);
    t.global_topk_indices = a.tensor(DType::kI32, {T, K}, false, 0);
    t.topk_lens = a.tensor(DType::kI32, {T}, false, 0);
  }

  template <class Check>
  static auto hostile_footprint(Check& chk, const GlobalTopkArgs& t, const CacheGeometry&) {
    const int64_t rows = t.topk_indices.shape[0], k = t.topk_indices.shape[1];
    chk.inside(t.topk_indices, "topk_indices", {rows, k});
    chk.inside(t.token_to_req, "token_to_req_indices", {rows});
    chk.inside(t.is_valid_token, "is_valid_token", {rows});
    chk.inside(t.global_topk_indices, "global_topk_indices", {rows, k});
    chk.inside(t.topk_lens, "topk_lens", {rows});
    return chk.footprint({&t.topk_indices, &t.token_to_req, &t.block_table, &t.is_valid_token, &t.global_topk_indices, &t.topk_lens},
            chk.work({&t.topk_indices, &t.token_to_req, &t.global_topk_indices}));
  }
};

}  // namespace dsv4kv::conformance
