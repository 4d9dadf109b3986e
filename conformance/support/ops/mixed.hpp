/// \file mixed.hpp
/// \brief The tester of build_flashinfer_mixed_sparse_indices (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in mixed_properties.hpp.
#pragma once

#include <algorithm>
#include <climits>
#include <ostream>

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of build_flashinfer_mixed_sparse_indices.
///
/// `decode_requests` requests of `decode_query` query tokens each (a draft block when more than one)
/// come first, then `prefill_requests` requests of up to `max_query` tokens; query_start_loc
/// counts global token indices from 0.
class MixedSparseTester : public TesterBase<MixedSparseTester> {
 public:
  MixedSparseTester& decode_requests(int64_t v) {
    decode_requests_ = v;
    return *this;
  }
  /// Query tokens per decode request (1: plain decode; more: a speculative draft block).
  MixedSparseTester& decode_query(int64_t v) {
    decode_query_ = v;
    return *this;
  }
  /// Decode SWA rows as DSpark's SWA builder lays them out: the request's trailing window of
  /// context and its whole draft block, contiguous from column 0, then -1.
  MixedSparseTester& dspark_rows(bool v) {
    dspark_rows_ = v;
    return *this;
  }
  /// The semantics profile of the call (vllm_v41 passes replay_start; the caller keeps images off).
  MixedSparseTester& semantics(Semantics s) {
    semantics_ = s;
    return *this;
  }
  /// replay_start values: 0 = all zero (no bound), 1 = drawn from [0, seq_len + 2].
  MixedSparseTester& replay(int v) {
    replay_ = v;
    return *this;
  }
  MixedSparseTester& prefill_requests(int64_t v) {
    prefill_requests_ = v;
    return *this;
  }
  MixedSparseTester& max_query(int64_t v) {
    max_query_ = v;
    return *this;
  }
  MixedSparseTester& max_context(int64_t v) {
    max_context_ = v;
    return *this;
  }
  MixedSparseTester& window(int64_t v) {
    window_ = v;
    return *this;
  }
  /// decode_swa_indices width = window + pad.
  MixedSparseTester& swa_width_pad(int64_t v) {
    swa_width_pad_ = v;
    return *this;
  }
  /// Padding elements between rows of decode_swa_indices.
  MixedSparseTester& swa_row_pad(int64_t v) {
    swa_row_pad_ = v;
    return *this;
  }
  /// Explicit requests (the decode requests first, one token each): query_start_loc from 0 and
  /// seq_lens (the random layout's draws are still made, then replaced).
  MixedSparseTester& layout(std::vector<int32_t> query_start_loc, std::vector<int32_t> seq_lens);
  /// Block-table columns (0 = drawn: enough for the longest sequence, maybe one more) and padding
  /// elements between rows, of the SWA and the compressed table.
  MixedSparseTester& tables(int64_t swa_cols, int64_t swa_row_pad, int64_t comp_cols, int64_t comp_row_pad) {
    swa_cols_wanted_ = swa_cols, swa_table_pad_ = swa_row_pad, comp_cols_wanted_ = comp_cols,
    comp_table_pad_ = comp_row_pad;
    return *this;
  }
  /// Padding elements between rows of sparse_indices.
  MixedSparseTester& out_row_pad(int64_t v) {
    out_row_pad_ = v;
    return *this;
  }
  MixedSparseTester& compress_ratio(int64_t v) {
    compress_ratio_ = v;
    return *this;
  }
  MixedSparseTester& topk(int64_t v) {
    topk_ = v;
    return *this;
  }
  /// prefill_topk_indices columns (may be below or above topk).
  MixedSparseTester& prefill_cols(int64_t v) {
    prefill_cols_ = v;
    return *this;
  }
  /// decode_compressed_indices columns; -1 = absent.
  MixedSparseTester& decode_topk(int64_t v) {
    decode_topk_ = v;
    return *this;
  }
  MixedSparseTester& decode_lens(bool v) {
    decode_lens_ = v;
    return *this;
  }
  MixedSparseTester& local(bool v) {
    local_ = v;
    return *this;
  }
  MixedSparseTester& block_sizes(int64_t swa, int64_t compressed) {
    swa_block_size_ = swa;
    compressed_block_size_ = compressed;
    return *this;
  }
  /// Block spans (0 = absent).
  MixedSparseTester& spans(int64_t swa, int64_t compressed) {
    swa_span_ = swa;
    compressed_span_ = compressed;
    return *this;
  }
  MixedSparseTester& separate_compressed_table(bool v) {
    separate_compressed_table_ = v;
    return *this;
  }
  MixedSparseTester& max_image_tokens(int64_t v) {
    max_image_tokens_ = v;
    return *this;
  }
  MixedSparseTester& visibility(bool v) {
    visibility_ = v;
    return *this;
  }
  MixedSparseTester& zero_visibility(bool v) {
    zero_visibility_ = v;
    return *this;
  }

  int64_t decode_tokens() const { return decode_requests_ * decode_query_; }
  Semantics semantics() const { return semantics_; }
  int64_t window() const { return window_; }
  int32_t seq_len(int64_t b) const { return seq_lens_.load<int32_t>(b); }
  int32_t qsl(int64_t i) const { return qsl_.load<int32_t>(i); }
  int32_t token_request(int64_t t) const { return token_to_req_.load<int32_t>(t); }
  int64_t requests() const { return R_; }
  int64_t compress_ratio_value() const { return compress_ratio_; }
  int32_t replay_start(int64_t b) const { return replay_start_.load<int32_t>(b); }
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

  int32_t decode_swa(int64_t t, int64_t c) const {
    return decode_swa_.load<int32_t>(t * (swa_width() + swa_row_pad_) + c);
  }
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
  int64_t decode_requests_ = 2, decode_query_ = 1, prefill_requests_ = 2, max_query_ = 12, max_context_ = 40;
  bool dspark_rows_ = false;
  Semantics semantics_ = Semantics::kSeed;
  int replay_ = 0;
  int64_t window_ = 8, swa_width_pad_ = 0, compress_ratio_ = 4, topk_ = 8, prefill_cols_ = 8, decode_topk_ = -1;
  bool decode_lens_ = false, local_ = false, separate_compressed_table_ = false;
  int64_t swa_block_size_ = 16, compressed_block_size_ = 16, swa_span_ = 0, compressed_span_ = 0;
  int64_t max_image_tokens_ = 0;
  bool visibility_ = false, zero_visibility_ = false;
  int64_t swa_row_pad_ = 0, out_row_pad_ = 0;
  int64_t swa_cols_wanted_ = 0, swa_table_pad_ = 0, comp_cols_wanted_ = 0, comp_table_pad_ = 0;
  std::optional<std::pair<std::vector<int32_t>, std::vector<int32_t>>> layout_;
  int64_t P_ = 0, R_ = 0, swa_cols_ = 0, comp_cols_ = 0;
  GuardedBuffer decode_swa_, decode_comp_, decode_lens_buf_, prefill_topk_, qsl_, seq_lens_, token_to_req_, swa_table_,
      comp_table_, decode_valid_, left_, right_, replay_start_, out_, lens_, error_count_;
};

/// The tester of MixedSparseArgs (see TesterOf in tester_common.hpp).
template <>
struct TesterOf<MixedSparseArgs> {
  using type = MixedSparseTester;

  // fuzz/fuzz_ops.cpp: how a caller may build the arguments (`In`: its fuzz input reader,
  // `Arena`: its owner of one buffer per view; fuzz/README.md).
  /// The scalar arguments both fuzz builders draw, in the same order (the inputs' bytes map to
  /// the same values in fuzz_args and hostile_args).
  template <class In>
  static void draw_scalars(In& g, MixedSparseArgs& x) {
    x.window_size = g.scalar(1, 6);
    x.compress_ratio = g.scalar(1, 4);
    x.topk = g.scalar(0, 8);
    x.max_image_tokens = g.scalar(0, 4);
    x.swa_block_size = g.scalar(1, 8);
    x.compressed_block_size = g.scalar(1, 8);
    if (g.coin(2)) x.swa_block_span = g.scalar(1, 16);
    if (g.coin(2)) x.compressed_block_span = g.scalar(1, 16);
  }

  template <class In, class Arena>
  static void fuzz_args(In& g, Arena& a, MixedSparseArgs& x) {
    const int64_t D = g.range(0, 3), P = g.range(0, 3), R = g.range(0, 3);
    draw_scalars(g, x);
    const int64_t swa_w = g.range(0, 8), dct = g.range(0, 6), pcols = g.range(0, 8);
    x.decode_swa_indices = a.tensor(DType::kI32, {D, swa_w}, false, a.indices(64));
    x.decode_compressed_indices = a.tensor(DType::kI32, {D, dct}, true, a.indices(16));
    x.decode_compressed_topk_lens = a.tensor(DType::kI32, {D}, true, a.indices(8));
    x.prefill_topk_indices = a.tensor(DType::kI32, {P, pcols}, false, a.indices(16));
    x.query_start_loc = a.tensor(DType::kI32, {R + 1}, false, a.indices(D + P + 1));
    x.seq_lens = a.tensor(DType::kI32, {R}, false, a.indices(24));
    x.token_to_req = a.tensor(DType::kI32, {D + P}, false, a.indices(R));
    x.swa_block_table = a.tensor(DType::kI32, {R, g.range(0, 5)}, false, a.indices(1 << 20));
    x.compressed_block_table = a.tensor(DType::kI32, {R, g.range(0, 5)}, true, a.indices(1 << 20));
    x.decode_compressed_indices_are_local = g.coin(2);
    x.decode_is_valid_token = a.tensor(DType::kBool, {D}, true, a.random_bytes());
    if (!g.coin(3)) {
      x.prefill_left_visible = a.tensor(DType::kI32, {D + P}, true, a.indices(6));
      x.prefill_right_visible = a.tensor(DType::kI32, {D + P}, true, a.indices(6));
    }
    const int64_t real_dct = x.decode_compressed_indices.present() && x.decode_compressed_indices.ndim == 2
                                 ? x.decode_compressed_indices.shape[1]
                                 : 0;
    const int64_t image = x.prefill_left_visible.present() ? x.max_image_tokens : 0;
    const bool small = x.topk >= 0 && x.topk < 4096 && image >= 0 && image < 4096;
    const int64_t w = small ? spec::mixed_row_width(swa_w, image, x.topk, real_dct) : -1;
    x.sparse_indices = a.tensor(DType::kI32, {D + P, a.capped(w)}, false, a.no_fill());
    x.sparse_topk_lens = a.tensor(DType::kI32, {D + P}, false, a.no_fill());
  }

  // fuzz/fuzz_validate.cpp: how a hostile caller builds the arguments, and which views validate()
  // checks and which elements the operation may touch once it accepts (`Check`: the harness's
  // independent model of the access pattern; fuzz/README.md).
  template <class In, class Arena>
  static void hostile_args(In& g, Arena& a, MixedSparseArgs& x) {
    const int64_t D = g.size(), P = g.size(), R = g.size();
    draw_scalars(g, x);
    const int64_t swa_w = g.coin(4) ? g.size() : g.plus(x.window_size, g.range(0, 2)), dct = g.size(), pcols = g.size();
    x.decode_swa_indices = a.tensor(DType::kI32, {D, swa_w}, false, 64);
    x.decode_compressed_indices = a.tensor(DType::kI32, {D, dct}, true, 16);
    x.decode_compressed_topk_lens = a.tensor(DType::kI32, {D}, true, 8);
    x.prefill_topk_indices = a.tensor(DType::kI32, {P, pcols}, false, 16);
    x.query_start_loc = a.tensor(DType::kI32, {g.coin(8) ? g.size() : g.plus(R, 1)}, false, 8);
    x.seq_lens = a.tensor(DType::kI32, {R}, false, 24);
    const spec::Checked dp = spec::checked_add(D, P);
    const int64_t tokens = dp.ok && !g.coin(16) ? dp.value : g.size();
    x.token_to_req = a.tensor(DType::kI32, {tokens}, false, R);
    x.swa_block_table = a.tensor(DType::kI32, {R, g.size()}, false, 1 << 20);
    x.compressed_block_table = a.tensor(DType::kI32, {R, g.size()}, true, 1 << 20);
    x.decode_compressed_indices_are_local = g.coin(2);
    x.decode_is_valid_token = a.tensor(DType::kBool, {D}, true, 2);
    if (g.coin(2)) {
      x.prefill_left_visible = a.tensor(DType::kI32, {tokens}, true, 6);
      x.prefill_right_visible = a.tensor(DType::kI32, {tokens}, true, 6);
    }
    const int64_t real_dct = x.decode_compressed_indices.present() && x.decode_compressed_indices.ndim == 2
                                 ? x.decode_compressed_indices.shape[1]
                                 : 0;
    const int64_t image = x.prefill_left_visible.present() ? x.max_image_tokens : 0;
    const spec::Checked w = spec::checked_add(spec::checked_add(swa_w, image),
                                              spec::checked_round_up(spec::checked_max(x.topk, real_dct), 4));
    x.sparse_indices = a.tensor(DType::kI32, {tokens, w.ok && !g.coin(16) ? w.value : g.size()}, false, 0);
    x.sparse_topk_lens = a.tensor(DType::kI32, {tokens}, false, 0);
  }

  template <class Check>
  static auto hostile_footprint(Check& chk, const MixedSparseArgs& x, const CacheGeometry&) {
    const int64_t d = x.decode_swa_indices.shape[0], sw = x.decode_swa_indices.shape[1];
    const int64_t p = x.prefill_topk_indices.shape[0], r = x.seq_lens.shape[0];
    const int64_t k = x.decode_compressed_indices.present() ? x.decode_compressed_indices.shape[1] : 0;
    const bool valid_read = x.decode_compressed_indices_are_local && k > 0;
    const spec::Checked rows = spec::checked_add(d, p);
    chk.inside(x.decode_swa_indices, "decode_swa_indices", {d, sw});
    if (x.decode_compressed_indices.present())
      chk.inside(x.decode_compressed_indices, "decode_compressed_indices", {d, k});
    if (x.decode_compressed_topk_lens.present())
      chk.inside(x.decode_compressed_topk_lens, "decode_compressed_topk_lens", {d});
    chk.inside(x.prefill_topk_indices, "prefill_topk_indices", {p, x.prefill_topk_indices.shape[1]});
    chk.inside(x.query_start_loc, "query_start_loc", {spec::checked_add(r, 1)});
    chk.inside(x.seq_lens, "seq_lens", {r});
    chk.inside(x.token_to_req, "token_to_req_indices", {rows});
    if (valid_read) chk.inside(x.decode_is_valid_token, "decode_is_valid_token", {d});
    if (x.prefill_left_visible.present()) {
      chk.inside(x.prefill_left_visible, "prefill_left_visible", {rows});
      chk.inside(x.prefill_right_visible, "prefill_right_visible", {rows});
    }
    // Every row: swa_width + image_width SWA columns, then max(topk, dct) (rounded up to 4) more;
    // the int32 lengths are exact only when the row is no wider than INT32_MAX.
    const int64_t img = x.prefill_left_visible.present() ? x.max_image_tokens : 0;
    const spec::Checked need = spec::checked_add(spec::checked_add(sw, img), spec::checked_max(x.topk, k));
    if (!need.ok || x.sparse_indices.shape[1] < need.value || x.sparse_indices.shape[1] > spec::kIndexMax)
      chk.violated("sparse_indices accepted narrower than its entries or wider than int32");
    chk.inside(x.sparse_indices, "sparse_indices", {rows, x.sparse_indices.shape[1]});
    chk.inside(x.sparse_topk_lens, "sparse_topk_lens", {rows});
    // decode_is_valid_token is checked (and read) only with local decode indices.
    auto f = chk.footprint(
        {&x.decode_swa_indices, &x.decode_compressed_indices, &x.decode_compressed_topk_lens, &x.prefill_topk_indices,
         &x.query_start_loc, &x.seq_lens, &x.token_to_req, &x.swa_block_table, &x.compressed_block_table,
         &x.prefill_left_visible, &x.prefill_right_visible, &x.sparse_indices, &x.sparse_topk_lens},
        chk.work({&x.decode_swa_indices, &x.prefill_topk_indices, &x.seq_lens, &x.sparse_indices}));
    if (valid_read) f.checked.push_back(&x.decode_is_valid_token);
    return f;
  }
};

// The tester's definitions (header-only, so that an operation's tester is one file).
inline int64_t MixedSparseTester::prefill_tokens() const { return P_; }

inline MixedSparseTester& MixedSparseTester::layout(std::vector<int32_t> query_start_loc,
                                                    std::vector<int32_t> seq_lens) {
  prefill_requests_ = static_cast<int64_t>(seq_lens.size()) - decode_requests_;
  layout_ = std::make_pair(std::move(query_start_loc), std::move(seq_lens));
  prepared_ = false;
  return *this;
}

inline void MixedSparseTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t D = decode_tokens(), R = decode_requests_ + prefill_requests_;
  R_ = R;
  std::vector<int32_t> qsl(R + 1, 0), sl(R);
  int64_t max_seq = 0;
  for (int64_t b = 0; b < R; ++b) {
    const int64_t q = b < decode_requests_ ? decode_query_ : r.range(1, max_query_);
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
  const int64_t ratio = std::max<int64_t>(compress_ratio_, 1);  // compress_ratio 0 (vllm_v41): no top-k entries
  const int64_t max_comp = max_seq / ratio + 1;
  if (separate_compressed_table_)
    comp_table_ =
        i32_buffer(make_table(compressed_block_size_, max_comp, comp_cols_wanted_, comp_table_pad_, &comp_cols_));
  else
    comp_table_ = GuardedBuffer(0), comp_cols_ = 0;

  const int64_t sw = swa_width() + swa_row_pad_;
  std::vector<int32_t> dswa(static_cast<size_t>(D * sw));
  const std::vector<int64_t> negatives = {-1, -1, -1, -2, INT32_MIN};
  for (auto& v : dswa) {
    int64_t x = r.below(100000);
    if (r.chance(0.2))
      x = r.pick(negatives);
    else if (r.chance(invalid_fraction_))
      x = INT32_MAX;  // overflows with a span above the block size
    v = static_cast<int32_t>(x);
  }
  if (dspark_rows_)  // [max(ctx - W, 0), ctx + q) of each decode request, slots in the request's own range
    for (int64_t t = 0; t < D && t < qsl[R]; ++t) {
      const int64_t b = std::min<int64_t>(t / std::max<int64_t>(decode_query_, 1), R - 1);
      const int64_t q = qsl[b + 1] - qsl[b], ctx = std::max<int64_t>(sl[b] - q, 0);
      const int64_t n = std::min<int64_t>(std::min(ctx, window_) + q, swa_width());
      for (int64_t c = 0; c < swa_width(); ++c)
        dswa[t * sw + c] = c < n ? static_cast<int32_t>(b * 4096 + ctx - std::min(ctx, window_) + c) : -1;
    }
  decode_swa_ = i32_buffer(dswa);
  std::vector<int32_t> replay(R + r.below(2), 0);
  for (int64_t b = 0; b < R && replay_ != 0; ++b) {
    replay[b] = static_cast<int32_t>(r.range(0, sl[b] + 2));
    if (r.chance(invalid_fraction_)) replay[b] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, INT32_MIN}));
  }
  replay_start_ = i32_buffer(replay);
  const int64_t dt = dct();
  std::vector<int32_t> dcomp(static_cast<size_t>(D * dt));
  for (int64_t t = 0; t < D; ++t)
    for (int64_t c = 0; c < dt; ++c) {
      const int64_t b = std::clamp<int64_t>(t, 0, R - 1);
      int64_t x = local_ ? r.below(sl[b] / ratio + 1) : r.below(100000);
      if (r.chance(0.2))
        x = r.pick(negatives);
      else if (r.chance(invalid_fraction_))
        x = r.pick(std::vector<int64_t>{max_comp + 100, INT32_MAX});
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
  for (size_t i = 0; i < decode_valid_.size(); ++i)
    decode_valid_.data()[i] = r.chance(0.2) ? 0 : (r.chance(0.8) ? 1 : 7);

  const int64_t pc = prefill_cols_;
  std::vector<int32_t> ptopk(static_cast<size_t>(P_ * pc));
  for (int64_t p = 0; p < P_; ++p) {
    const int64_t t = D + p;
    const int64_t b = owner[t] >= 0 && owner[t] < R ? owner[t] : 0;
    const int64_t pos = std::max<int64_t>(sl[b] - (qsl[b + 1] - qsl[b]) + (t - qsl[b]), 0);
    for (int64_t c = 0; c < pc; ++c) {
      int64_t x = r.below((pos + 1) / ratio + 1);
      if (r.chance(0.2))
        x = r.pick(negatives);
      else if (r.chance(invalid_fraction_))
        x = r.pick(std::vector<int64_t>{max_comp + 1000, INT32_MAX});
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

inline MixedSparseArgs MixedSparseTester::Args(int64_t w) {
  MixedSparseArgs a;
  const int64_t D = decode_tokens(), rows = D + P_;
  a.decode_swa_indices = TensorView::mat(decode_swa_.data(), DType::kI32, D, swa_width(),
                                         std::max<int64_t>(swa_width() + swa_row_pad_, 1));
  if (decode_topk_ >= 0) {
    a.decode_compressed_indices =
        TensorView::mat(decode_comp_.data(), DType::kI32, D, dct(), std::max<int64_t>(dct(), 1));
    if (decode_lens_)
      a.decode_compressed_topk_lens = i32vec(decode_lens_buf_, static_cast<int64_t>(decode_lens_buf_.size() / 4));
  }
  a.prefill_topk_indices =
      TensorView::mat(prefill_topk_.data(), DType::kI32, P_, prefill_cols_, std::max<int64_t>(prefill_cols_, 1));
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
  a.decode_is_valid_token =
      TensorView::vec(decode_valid_.data(), DType::kBool, static_cast<int64_t>(decode_valid_.size()));
  if (swa_span_ > 0) a.swa_block_span = swa_span_;
  if (compressed_span_ > 0) a.compressed_block_span = compressed_span_;
  if (visibility_) {
    a.prefill_left_visible = i32vec(left_, static_cast<int64_t>(left_.size() / 4));
    a.prefill_right_visible = i32vec(right_, static_cast<int64_t>(right_.size() / 4));
  }
  a.max_image_tokens = max_image_tokens_;
  a.semantics = semantics_;
  if (spec::bounded_replay(semantics_))
    a.replay_start = i32vec(replay_start_, static_cast<int64_t>(replay_start_.size() / 4));
  a.sparse_indices = TensorView::mat(out_.data(), DType::kI32, rows, w, std::max<int64_t>(out_row_stride(), 1));
  a.sparse_topk_lens = i32vec(lens_, rows);
  a.error_count = counter(error_count_);
  return a;
}

inline void MixedSparseTester::Run(Backend& be) {
  Prepare();
  run_case(be, Args(width()), error_count_, {&out_, &lens_});
}

inline void MixedSparseTester::RunWithWidth(Backend& be, int64_t w) {
  Prepare();
  run_with_width(be, Args(w), &MixedSparseArgs::sparse_indices, rows(), w);
}

inline std::vector<NamedBuffer> MixedSparseTester::buffers() const {
  return {{"decode_swa_indices", &decode_swa_},
          {"decode_compressed_indices", &decode_comp_},
          {"decode_compressed_topk_lens", &decode_lens_buf_},
          {"prefill_topk_indices", &prefill_topk_},
          {"query_start_loc", &qsl_},
          {"seq_lens", &seq_lens_},
          {"token_to_req", &token_to_req_},
          {"swa_block_table", &swa_table_},
          {"compressed_block_table", &comp_table_},
          {"decode_is_valid_token", &decode_valid_},
          {"prefill_left_visible", &left_},
          {"prefill_right_visible", &right_},
          {"replay_start", &replay_start_},
          {"sparse_indices", &out_},
          {"sparse_topk_lens", &lens_},
          {"error_count", &error_count_}};
}

inline std::ostream& operator<<(std::ostream& os, const MixedSparseTester& t) {
  return os << "MixedSparseTester().decode_requests(" << t.decode_requests_ << ").decode_query(" << t.decode_query_
            << ").dspark_rows(" << t.dspark_rows_ << ").semantics(Semantics::" << semantics_enumerator(t.semantics_)
            << ").replay(" << t.replay_ << ").prefill_requests(" << t.prefill_requests_ << ").max_query("
            << t.max_query_ << ").max_context(" << t.max_context_ << ").window(" << t.window_ << ").swa_width_pad("
            << t.swa_width_pad_ << ").compress_ratio(" << t.compress_ratio_ << ").topk(" << t.topk_ << ").prefill_cols("
            << t.prefill_cols_ << ").decode_topk(" << t.decode_topk_ << ").decode_lens(" << t.decode_lens_ << ").local("
            << t.local_ << ").block_sizes(" << t.swa_block_size_ << ", " << t.compressed_block_size_ << ").spans("
            << t.swa_span_ << ", " << t.compressed_span_ << ").separate_compressed_table("
            << t.separate_compressed_table_ << ").max_image_tokens(" << t.max_image_tokens_ << ").visibility("
            << t.visibility_ << ").zero_visibility(" << t.zero_visibility_ << ").swa_row_pad(" << t.swa_row_pad_
            << ").tables(" << t.swa_cols_wanted_ << ", " << t.swa_table_pad_ << ", " << t.comp_cols_wanted_ << ", "
            << t.comp_table_pad_ << ").out_row_pad(" << t.out_row_pad_ << ").invalid_fraction(" << t.invalid_fraction_
            << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")"
            << (t.layout_ ? " [explicit layout]" : "");
}

}  // namespace dsv4kv::conformance
