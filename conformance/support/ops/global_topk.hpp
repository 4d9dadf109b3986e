/// \file global_topk.hpp
/// \brief The tester of compute_global_topk_indices_and_lens (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in global_topk_properties.hpp.
#pragma once

#include <algorithm>
#include <climits>
#include <ostream>

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of compute_global_topk_indices_and_lens.
class GlobalTopkTester : public TesterBase<GlobalTopkTester> {
 public:
  GlobalTopkTester& tokens(int64_t v) {
    tokens_ = v;
    return *this;
  }
  GlobalTopkTester& topk(int64_t v) {
    topk_ = v;
    return *this;
  }
  /// Padding elements between rows of topk_indices and of the output.
  GlobalTopkTester& row_pads(int64_t in_pad, int64_t out_pad) {
    in_row_pad_ = in_pad;
    out_row_pad_ = out_pad;
    return *this;
  }
  GlobalTopkTester& requests(int64_t v) {
    requests_ = v;
    return *this;
  }
  GlobalTopkTester& block_size(int64_t v) {
    block_size_ = v;
    return *this;
  }
  GlobalTopkTester& table(int64_t cols, int64_t row_pad) {
    bt_cols_ = cols;
    bt_row_pad_ = row_pad;
    return *this;
  }
  /// Share of -1 sentinels (and other negatives) among the top-k entries.
  GlobalTopkTester& sentinel_fraction(double v) {
    sentinel_fraction_ = v;
    return *this;
  }
  /// The -1 sentinels of a row as a top-k kernel leaves a short row: its last entries, as many as
  /// a draw from [0, 2 * sentinel_fraction * topk] (instead of scattered entries of any negative value).
  GlobalTopkTester& trailing_sentinels(bool v) {
    trailing_sentinels_ = v;
    return *this;
  }

  /// The semantics profile of the call (packs_global_topk: entries packed to the left).
  GlobalTopkTester& semantics(Semantics s) {
    semantics_ = s;
    return *this;
  }

  int64_t tokens() const { return tokens_; }
  int64_t topk() const { return topk_; }
  Semantics semantics() const { return semantics_; }
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
  bool trailing_sentinels_ = false;
  Semantics semantics_ = Semantics::kSeed;
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
    return chk.footprint(
        {&t.topk_indices, &t.token_to_req, &t.block_table, &t.is_valid_token, &t.global_topk_indices, &t.topk_lens},
        chk.work({&t.topk_indices, &t.token_to_req, &t.global_topk_indices}));
  }
};

// The tester's definitions (header-only, so that an operation's tester is one file).
inline void GlobalTopkTester::Prepare() {
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
  for (int64_t t = 0; t < T; ++t) {
    const int64_t tail = trailing_sentinels_ ? r.below(static_cast<int64_t>(2 * sentinel_fraction_ * K) + 1) : 0;
    for (int64_t c = 0; c < irs; ++c) {
      int64_t v = span > 0 ? r.below(span) : -1;
      if (trailing_sentinels_ ? (c < K && c >= K - tail) : r.chance(sentinel_fraction_))
        v = trailing_sentinels_ ? -1 : r.pick(sentinels);
      else if (c >= K || r.chance(invalid_fraction_))
        v = r.pick(bad_local);
      topk[t * irs + c] = static_cast<int32_t>(v);
    }
  }
  topk_indices_ = i32_buffer(topk);
  out_ = GuardedBuffer(static_cast<size_t>(T * (K + out_row_pad_)) * 4);
  lens_ = GuardedBuffer(static_cast<size_t>(T) * 4);
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

inline GlobalTopkArgs GlobalTopkTester::Args() {
  GlobalTopkArgs a;
  const int64_t T = tokens_;
  a.topk_indices =
      TensorView::mat(topk_indices_.data(), DType::kI32, T, topk_, std::max<int64_t>(topk_ + in_row_pad_, 1));
  a.token_to_req = i32vec(token_to_req_, static_cast<int64_t>(token_to_req_.size() / 4));
  a.block_table = TensorView::mat(block_table_.data(), DType::kI32, requests_, bt_cols_,
                                  std::max<int64_t>(bt_cols_ + bt_row_pad_, 1));
  a.block_size = block_size_;
  a.is_valid_token = TensorView::vec(is_valid_.data(), DType::kBool, static_cast<int64_t>(is_valid_.size()));
  a.semantics = semantics_;
  a.global_topk_indices =
      TensorView::mat(out_.data(), DType::kI32, T, topk_, std::max<int64_t>(topk_ + out_row_pad_, 1));
  a.topk_lens = i32vec(lens_, T);
  a.error_count = counter(error_count_);
  return a;
}

inline void GlobalTopkTester::Run(Backend& be) {
  Prepare();
  run_case(be, Args(), error_count_, {&out_, &lens_});
}

inline int32_t GlobalTopkTester::expected_global(int64_t t, int64_t c, int64_t* faults) const {
  const int64_t r = request(t);
  if (r < 0 || r >= requests_) return -1;
  const int64_t l = local(t, c);
  if (l < 0) return -1;
  const int64_t col = l / block_size_;
  if (col >= bt_cols_) {
    ++*faults;
    return -1;
  }
  const int64_t blk = block_table_.load<int32_t>(r * (bt_cols_ + bt_row_pad_) + col);
  if (blk < 0) {
    ++*faults;
    return -1;
  }
  const int64_t v = blk * block_size_ + l % block_size_;
  if (v > INT32_MAX) {
    ++*faults;
    return -1;
  }
  return static_cast<int32_t>(v);
}

inline std::vector<NamedBuffer> GlobalTopkTester::buffers() const {
  return {{"topk_indices", &topk_indices_}, {"token_to_req", &token_to_req_}, {"block_table", &block_table_},
          {"is_valid_token", &is_valid_},   {"global_topk_indices", &out_},   {"topk_lens", &lens_},
          {"error_count", &error_count_}};
}

inline std::ostream& operator<<(std::ostream& os, const GlobalTopkTester& t) {
  return os << "GlobalTopkTester().tokens(" << t.tokens_ << ").topk(" << t.topk_ << ").row_pads(" << t.in_row_pad_
            << ", " << t.out_row_pad_ << ").requests(" << t.requests_ << ").block_size(" << t.block_size_ << ").table("
            << t.bt_cols_ << ", " << t.bt_row_pad_ << ").sentinel_fraction(" << t.sentinel_fraction_
            << ").trailing_sentinels(" << (t.trailing_sentinels_ ? "true" : "false") << ").invalid_fraction("
            << t.invalid_fraction_ << ").semantics(Semantics::" << semantics_enumerator(t.semantics_)
            << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")";
}

}  // namespace dsv4kv::conformance
