/// \file combine.hpp
/// \brief The tester of combine_topk_swa_indices (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in combine_properties.hpp.
#pragma once

#include <algorithm>
#include <climits>
#include <ostream>

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of combine_topk_swa_indices.
///
/// Requests get random query lengths (at most `max_query`), contexts (at most
/// `max_context`) and gather lengths; `extra_tokens` tokens lie beyond every
/// request. Visibility arrays, when present, come from random image spans
/// (DeepSeek's rule), or are all zero with `zero_visibility(true)`.
class CombineTester : public TesterBase<CombineTester> {
 public:
  CombineTester& requests(int64_t v) {
    requests_ = v;
    return *this;
  }
  CombineTester& max_query(int64_t v) {
    max_query_ = v;
    return *this;
  }
  CombineTester& max_context(int64_t v) {
    max_context_ = v;
    return *this;
  }
  CombineTester& extra_tokens(int64_t v) {
    extra_tokens_ = v;
    return *this;
  }
  /// query_start_loc[0] (the op rebases by it).
  CombineTester& base(int32_t v) {
    base_ = v;
    return *this;
  }
  /// Explicit requests: query_start_loc (its first entry is the base), seq_lens and gather_lens,
  /// one entry each per request (the random layout's draws are still made, then replaced).
  CombineTester& layout(std::vector<int32_t> query_start_loc, std::vector<int32_t> seq_lens,
                        std::vector<int32_t> gather_lens);
  /// Padding elements between rows of combined_indices.
  CombineTester& out_row_pad(int64_t v) {
    out_row_pad_ = v;
    return *this;
  }
  CombineTester& window(int64_t v) {
    window_ = v;
    return *this;
  }
  CombineTester& compress_ratio(int64_t v) {
    compress_ratio_ = v;
    return *this;
  }
  CombineTester& topk(int64_t v) {
    topk_ = v;
    return *this;
  }
  /// Extra columns of topk_indices beyond topk.
  CombineTester& topk_pad(int64_t v) {
    topk_pad_ = v;
    return *this;
  }
  CombineTester& max_image_tokens(int64_t v) {
    max_image_tokens_ = v;
    return *this;
  }
  CombineTester& visibility(bool v) {
    visibility_ = v;
    return *this;
  }
  CombineTester& zero_visibility(bool v) {
    zero_visibility_ = v;
    return *this;
  }
  /// Valid top-k values drawn from [0, v) regardless of N (vLLM's own test draws [0, 4096) with a
  /// small N); 0 = below N.
  CombineTester& topk_range(int64_t v) {
    topk_range_ = v;
    return *this;
  }
  /// Extra columns of M beyond what the requests need (M = N + max seq_len + extra).
  CombineTester& m_extra(int64_t v) {
    m_extra_ = v;
    return *this;
  }

  /// The semantics profile of the call (vllm_v41: top-k values outside [0, N) are -1, compress_ratio may be 0,
  /// no visibility arrays or image columns).
  CombineTester& semantics(Semantics s) {
    semantics_ = s;
    return *this;
  }

  int64_t tokens() const;
  Semantics semantics() const { return semantics_; }
  int64_t requests() const { return requests_; }
  int64_t window() const { return window_; }
  int64_t compress_ratio() const { return compress_ratio_; }
  int64_t topk() const { return topk_; }
  int64_t max_image_tokens() const { return max_image_tokens_; }
  bool has_visibility() const { return visibility_; }
  int64_t width() const { return spec::combine_row_width(topk_, window_, max_image_tokens_); }
  int64_t M() const { return M_; }
  int64_t N() const { return N_; }

  void Prepare();
  /// The argument struct of the call (views into this tester's buffers), after Prepare().
  CombineArgs args() {
    Prepare();
    return Args(width());
  }
  void Run(Backend& be);
  /// Runs with the row width overridden (to check that validate rejects it); throws what the backend throws.
  void RunWithWidth(Backend& be, int64_t width);

  int32_t qsl(int64_t i) const { return qsl_.load<int32_t>(i); }
  int32_t seq_len(int64_t b) const { return seq_lens_.load<int32_t>(b); }
  int32_t gather_len(int64_t b) const { return gather_lens_.load<int32_t>(b); }
  int32_t topk_in(int64_t t, int64_t c) const { return topk_indices_.load<int32_t>(t * (topk_ + topk_pad_) + c); }
  int32_t left(int64_t t) const { return left_.load<int32_t>(t); }
  int32_t right(int64_t t) const { return right_.load<int32_t>(t); }
  int32_t out(int64_t t, int64_t c) const { return out_.load<int32_t>(t * out_row_stride() + c); }
  /// Elements from one output row to the next (width + padding).
  int64_t out_row_stride() const { return width() + out_row_pad_; }
  int32_t len(int64_t t) const { return lens_.load<int32_t>(t); }
  int32_t error_count() const { return error_count_.load<int32_t>(0); }
  const GuardedBuffer& out_buffer() const { return out_; }
  const GuardedBuffer& lens_buffer() const { return lens_; }

  /// For a well-formed request layout: the request owning token t and t's position, or false.
  bool token_position(int64_t t, int64_t* b, int64_t* pos) const;
  std::vector<NamedBuffer> buffers() const;

  friend std::ostream& operator<<(std::ostream& os, const CombineTester& t);

 private:
  CombineArgs Args(int64_t width);
  int64_t requests_ = 2, max_query_ = 20, max_context_ = 40, extra_tokens_ = 0;
  int32_t base_ = 0;
  int64_t out_row_pad_ = 0;
  struct Layout {
    std::vector<int32_t> qsl, seq_lens, gather_lens;
  };
  std::optional<Layout> layout_;
  int64_t window_ = 16, compress_ratio_ = 4, topk_ = 16, topk_pad_ = 0, max_image_tokens_ = 0, m_extra_ = 0;
  int64_t topk_range_ = 0;
  bool visibility_ = false, zero_visibility_ = false;
  Semantics semantics_ = Semantics::kSeed;
  int64_t M_ = 0, N_ = 0, T_ = 0;
  GuardedBuffer topk_indices_, qsl_, seq_lens_, gather_lens_, left_, right_, out_, lens_, error_count_;
};

/// The tester of CombineArgs (see TesterOf in tester_common.hpp).
template <>
struct TesterOf<CombineArgs> {
  using type = CombineTester;

  // fuzz/fuzz_ops.cpp: how a caller may build the arguments (`In`: its fuzz input reader,
  // `Arena`: its owner of one buffer per view; fuzz/README.md).
  template <class In, class Arena>
  static void fuzz_args(In& g, Arena& a, CombineArgs& c) {
    const int64_t T = g.range(0, 6), R = g.range(0, 3), width = g.range(0, 6);
    c.window_size = g.scalar(1, 8);
    c.compress_ratio = g.scalar(1, 4);
    c.topk = g.scalar(0, width);
    c.M = g.scalar(0, 1000);
    c.N = g.scalar(0, 64);
    c.max_image_tokens = g.scalar(0, 4);
    c.topk_indices = a.tensor(DType::kI32, {T, width}, false, a.indices(64));
    c.query_start_loc = a.tensor(DType::kI32, {R + 1}, false, a.indices(T + 1));
    c.seq_lens = a.tensor(DType::kI32, {R}, false, a.indices(16));
    c.gather_lens = a.tensor(DType::kI32, {R}, false, a.indices(16));
    if (!g.coin(3)) {
      c.left_visible = a.tensor(DType::kI32, {T}, true, a.indices(6));
      c.right_visible = a.tensor(DType::kI32, {T}, true, a.indices(6));
    }
    const bool small = c.topk >= 0 && c.topk < 4096 && c.window_size >= 1 && c.window_size < 4096 &&
                       c.max_image_tokens >= 0 && c.max_image_tokens < 4096;
    const int64_t w = small ? spec::combine_row_width(c.topk, c.window_size, c.max_image_tokens) : -1;
    c.combined_indices = a.tensor(DType::kI32, {T, a.capped(w)}, false, a.no_fill());
    c.combined_lens = a.tensor(DType::kI32, {T}, false, a.no_fill());
  }

  // fuzz/fuzz_validate.cpp: how a hostile caller builds the arguments, and which views validate()
  // checks and which elements the operation may touch once it accepts (`Check`: the harness's
  // independent model of the access pattern; fuzz/README.md).
  template <class In, class Arena>
  static void hostile_args(In& g, Arena& a, CombineArgs& c) {
    const int64_t T = g.size(), R = g.size(), width = g.size();
    c.window_size = g.scalar(1, 8);
    c.compress_ratio = g.scalar(1, 4);
    c.topk = g.scalar(0, width < 8 ? width : 8);
    c.M = g.scalar(0, 1000);
    c.N = g.scalar(0, 64);
    c.max_image_tokens = g.scalar(0, 4);
    c.topk_indices = a.tensor(DType::kI32, {T, width}, false, 64);
    c.query_start_loc = a.tensor(DType::kI32, {g.coin(8) ? g.size() : g.plus(R, 1)}, false, g.plus(T, 1));
    c.seq_lens = a.tensor(DType::kI32, {R}, false, 16);
    c.gather_lens = a.tensor(DType::kI32, {R}, false, 16);
    if (g.coin(2)) {
      c.left_visible = a.tensor(DType::kI32, {T}, true, 6);
      c.right_visible = a.tensor(DType::kI32, {T}, true, 6);
    }
    const spec::Checked w = spec::checked_round_up(
        spec::checked_add(spec::checked_add(c.topk, c.window_size), c.max_image_tokens), spec::kCombineRowAlignment);
    c.combined_indices = a.tensor(DType::kI32, {T, w.ok && !g.coin(16) ? w.value : g.size()}, false, 0);
    c.combined_lens = a.tensor(DType::kI32, {T}, false, 0);
  }

  template <class Check>
  static auto hostile_footprint(Check& chk, const CombineArgs& c, const CacheGeometry&) {
    const int64_t t = c.topk_indices.shape[0], r = c.seq_lens.shape[0];
    chk.inside(c.topk_indices, "topk_indices", {t, c.topk});
    chk.inside(c.query_start_loc, "query_start_loc", {spec::checked_add(r, 1)});
    chk.inside(c.seq_lens, "seq_lens", {r});
    chk.inside(c.gather_lens, "gather_lens", {r});
    if (c.left_visible.present()) {
      chk.inside(c.left_visible, "left_visible", {t});
      chk.inside(c.right_visible, "right_visible", {t});
    }
    // A row holds topk_len + swa_len <= topk + window + max_image_tokens entries, and its int32
    // length must be exact: the row is that wide, and no wider than INT32_MAX.
    const spec::Checked need = spec::checked_add(spec::checked_add(c.topk, c.window_size), c.max_image_tokens);
    if (!need.ok || c.combined_indices.shape[1] < need.value || c.combined_indices.shape[1] > spec::kIndexMax)
      chk.violated("combined_indices accepted narrower than its entries or wider than int32");
    chk.inside(c.combined_indices, "combined_indices", {t, c.combined_indices.shape[1]});
    chk.inside(c.combined_lens, "combined_lens", {t});
    return chk.footprint({&c.topk_indices, &c.query_start_loc, &c.seq_lens, &c.gather_lens, &c.left_visible,
                          &c.right_visible, &c.combined_indices, &c.combined_lens},
                         chk.work({&c.topk_indices, &c.seq_lens, &c.combined_indices}));
  }
};

// The tester's definitions (header-only, so that an operation's tester is one file).
inline int64_t CombineTester::tokens() const { return T_; }

inline CombineTester& CombineTester::layout(std::vector<int32_t> query_start_loc, std::vector<int32_t> seq_lens,
                                            std::vector<int32_t> gather_lens) {
  requests_ = static_cast<int64_t>(seq_lens.size());
  base_ = query_start_loc.empty() ? 0 : query_start_loc[0];
  layout_ = Layout{std::move(query_start_loc), std::move(seq_lens), std::move(gather_lens)};
  prepared_ = false;
  return *this;
}

inline void CombineTester::Prepare() {
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
  N_ = (compress_ratio_ > 0 ? max_seq / compress_ratio_ : 0) + r.below(4);
  M_ = N_ + max_seq + m_extra_;
  // Request-level corruption (invalid cases): the op must drop these requests' rows.
  for (int64_t b = 0; b < R; ++b) {
    if (!r.chance(invalid_fraction_)) continue;
    switch (r.below(4)) {
      case 0: sl[b] = static_cast<int32_t>((qsl[b + 1] - qsl[b]) - 1); break;  // seq_len shorter than the query
      case 1: gl[b] = sl[b] + 1; break;                                        // gather_len > seq_len
      case 2: gl[b] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, INT32_MIN})); break;
      default: qsl[b + 1] = qsl[b] - 1; break;  // reversed query range
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
    if (r.chance(0.2))
      v = r.pick(sentinels);
    else if (r.chance(invalid_fraction_))
      v = r.pick(bad);
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

inline CombineArgs CombineTester::Args(int64_t w) {
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
  a.semantics = semantics_;
  a.combined_indices = TensorView::mat(out_.data(), DType::kI32, T, w, std::max<int64_t>(out_row_stride(), 1));
  a.combined_lens = i32vec(lens_, T);
  a.error_count = counter(error_count_);
  return a;
}

inline void CombineTester::Run(Backend& be) {
  Prepare();
  run_case(be, Args(width()), error_count_, {&out_, &lens_});
}

inline void CombineTester::RunWithWidth(Backend& be, int64_t w) {
  Prepare();
  run_with_width(be, Args(w), &CombineArgs::combined_indices, T_, w);
}

inline bool CombineTester::token_position(int64_t t, int64_t* b, int64_t* pos) const {
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

inline std::vector<NamedBuffer> CombineTester::buffers() const {
  return {{"topk_indices", &topk_indices_}, {"query_start_loc", &qsl_}, {"seq_lens", &seq_lens_},
          {"gather_lens", &gather_lens_},   {"left_visible", &left_},   {"right_visible", &right_},
          {"combined_indices", &out_},      {"combined_lens", &lens_},  {"error_count", &error_count_}};
}

inline std::ostream& operator<<(std::ostream& os, const CombineTester& t) {
  return os << "CombineTester().requests(" << t.requests_ << ").max_query(" << t.max_query_ << ").max_context("
            << t.max_context_ << ").extra_tokens(" << t.extra_tokens_ << ").base(" << t.base_ << ").window("
            << t.window_ << ").compress_ratio(" << t.compress_ratio_ << ").topk(" << t.topk_ << ").topk_pad("
            << t.topk_pad_ << ").max_image_tokens(" << t.max_image_tokens_ << ").visibility(" << t.visibility_
            << ").zero_visibility(" << t.zero_visibility_ << ").topk_range(" << t.topk_range_ << ").m_extra("
            << t.m_extra_ << ").out_row_pad(" << t.out_row_pad_ << ").invalid_fraction(" << t.invalid_fraction_
            << ").semantics(Semantics::" << semantics_enumerator(t.semantics_) << ").count_errors(" << t.count_errors_
            << ").seed(" << t.seed_ << ")" << (t.layout_ ? " [explicit layout]" : "");
}

}  // namespace dsv4kv::conformance
