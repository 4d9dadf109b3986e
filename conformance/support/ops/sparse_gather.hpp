/// \file sparse_gather.hpp
/// \brief The tester of dequantize_and_gather_k_cache_sparse (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in sparse_gather_properties.hpp.
#pragma once

#include <algorithm>
#include <limits>
#include <ostream>

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of dequantize_and_gather_k_cache_sparse over a cache of random bytes.
///
/// Valid cases draw slots in [0, num_blocks * block_size) and a `padding_fraction` of -1;
/// invalid cases replace an `invalid_fraction` of slots by out-of-range values (negative other
/// than -1, past the cache, the extremes of the slot dtype).
class SparseGatherTester : public TesterBase<SparseGatherTester> {
 public:
  SparseGatherTester& slots(int64_t n) {
    n_ = n;
    explicit_slots_.reset();
    prepared_ = false;
    return *this;
  }
  /// Explicit slot values (stored as the slot dtype).
  SparseGatherTester& slot_list(std::vector<int64_t> v) {
    n_ = static_cast<int64_t>(v.size());
    explicit_slots_ = std::move(v);
    prepared_ = false;
    return *this;
  }
  /// Rows of `out` beyond the N slots (never written).
  SparseGatherTester& extra_rows(int64_t v) {
    extra_rows_ = v;
    return *this;
  }
  /// Padding elements between out rows.
  SparseGatherTester& out_pad(int64_t v) {
    out_pad_ = v;
    return *this;
  }
  /// true: out starts one element (2 bytes) into its buffer, so rows are only 2-byte aligned.
  SparseGatherTester& out_shift(bool v) {
    out_shift_ = v;
    return *this;
  }
  SparseGatherTester& block_size(int64_t v) {
    block_size_ = v;
    return *this;
  }
  SparseGatherTester& num_blocks(int64_t v) {
    num_blocks_ = v;
    return *this;
  }
  /// 0 = vLLM's block stride.
  SparseGatherTester& stride(int64_t v) {
    stride_ = v;
    return *this;
  }
  SparseGatherTester& fnuz(bool v) {
    fnuz_ = v;
    return *this;
  }
  /// The record the cache's tokens are stored as (spec "Cache records"); its head_dim is out's width.
  SparseGatherTester& record(Record v) {
    record_ = v;
    prepared_ = false;
    return *this;
  }
  Record record() const { return record_; }
  int head_dim() const { return spec::record_layout(record_).head_dim; }
  /// int64 slot ids (false: int32).
  SparseGatherTester& int64_slots(bool v) {
    i64_ = v;
    prepared_ = false;
    return *this;
  }
  /// What the cache holds: random bytes (the default), random bytes as quantize writes them for
  /// finite keys (no NaN code, scale bytes 100..150: the bench's cache), all zeros (a caller then
  /// writes bytes with cache_data()), or every (code, scale byte) pair: token t has its 7 scale
  /// bytes = t % 256 and codes c + 64 * (t / 256) for c in 0..447, so 1,024 tokens put every pair
  /// in every lane position of a row.
  enum class CacheFill { kRandom, kRealistic, kZero, kEveryCodeUnderEveryScale };
  SparseGatherTester& cache_fill(CacheFill v) {
    fill_ = v;
    prepared_ = false;
    return *this;
  }
  /// Share of -1 (padding) slots among the drawn ones.
  SparseGatherTester& padding_fraction(double v) {
    padding_fraction_ = v;
    return *this;
  }

  int64_t slots() const { return n_; }
  int64_t out_rows() const { return n_ + extra_rows_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t stride() const;
  Fp8Format format() const { return fnuz_ ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn; }

  void Prepare();
  /// The argument struct of the call (views into this tester's buffers), after Prepare().
  SparseGatherArgs args() {
    Prepare();
    return Args();
  }
  /// Resets `out` to 0xA5 and the counter to 0, then runs the operation.
  void Run(Backend& be);
  /// Runs, on the same cache and a fresh 0xA5 output, the dense gather of the single-token
  /// requests equivalent to the slots (slot s: seq_len s % B + 1, gather_len 1, block-table row
  /// [s / B]; -1: a request of length 0; other negatives: a malformed request, one report), and
  /// returns its output buffer; `*count` receives its error count.
  GuardedBuffer RunDenseEquivalent(Backend& be, int32_t* count) const;

  int64_t slot(int64_t i) const { return i64_ ? slots_.load<int64_t>(i) : slots_.load<int32_t>(i); }
  /// The cache bytes (after Prepare()), for cases that write their own.
  uint8_t* cache_data() { return cache_.data(); }
  uint8_t cache_byte(int64_t block, int64_t offset) const { return cache_.data()[block * stride() + offset]; }
  /// out[i, col] (bf16 bits).
  uint16_t out(int64_t i, int64_t col) const { return out_.load<uint16_t>(out_index(i, col)); }
  /// Element index of out[i, col] in the output buffer.
  int64_t out_index(int64_t i, int64_t col) const { return (out_shift_ ? 1 : 0) + i * out_row_stride() + col; }
  const GuardedBuffer& out_buffer() const { return out_; }
  int32_t error_count() const { return error_count_.load<int32_t>(0); }
  /// Whether slot i is read (in range) per the spec.
  bool slot_valid(int64_t i) const {
    const int64_t s = slot(i);
    return s >= 0 && s < num_blocks_ * block_size_;
  }
  /// The error count the spec requires.
  int64_t expected_error_count() const;
  std::vector<NamedBuffer> buffers() const;

  friend std::ostream& operator<<(std::ostream& os, const SparseGatherTester& t);

 private:
  SparseGatherArgs Args();
  int64_t out_row_stride() const { return head_dim() + out_pad_; }
  size_t out_bytes() const { return static_cast<size_t>((out_shift_ ? 1 : 0) + out_rows() * out_row_stride()) * 2; }

  int64_t n_ = 16, extra_rows_ = 0, out_pad_ = 0, block_size_ = 64, num_blocks_ = 4, stride_ = 0;
  bool out_shift_ = false, fnuz_ = false, i64_ = false;
  Record record_ = Record::kFp8DsMla;
  double padding_fraction_ = 0.1;
  CacheFill fill_ = CacheFill::kRandom;
  std::optional<std::vector<int64_t>> explicit_slots_;
  GuardedBuffer cache_, slots_, out_, error_count_;
};

/// The tester of SparseGatherArgs (see TesterOf in tester_common.hpp).
template <>
struct TesterOf<SparseGatherArgs> {
  using type = SparseGatherTester;

  // fuzz/fuzz_ops.cpp: how a caller may build the arguments (`In`: its fuzz input reader,
  // `Arena`: its owner of one buffer per view; fuzz/README.md).
  template <class In, class Arena>
  static void fuzz_args(In& g, Arena& a, SparseGatherArgs& s) {
    s.block_size = g.scalar(1, 8);
    const int64_t B = s.block_size > 0 && s.block_size <= 16 ? s.block_size : 1;
    const int64_t n = g.range(0, 8);
    s.slot_indices = a.tensor(g.coin(2) ? DType::kI64 : DType::kI32, {n}, false, a.indices(4 * B));
    s.out = a.tensor(DType::kBF16, {n + g.range(0, 1), spec::kHeadDim}, false, a.no_fill());
    s.k_cache = a.cache_view(s.block_size);
    s.format = static_cast<spec::Fp8Format>(g.range(0, 1));
    s.record = fuzz_record(g);
  }

  // fuzz/fuzz_validate.cpp: how a hostile caller builds the arguments, and which views validate()
  // checks and which elements the operation may touch once it accepts (`Check`: the harness's
  // independent model of the access pattern; fuzz/README.md).
  template <class In, class Arena>
  static void hostile_args(In& g, Arena& a, SparseGatherArgs& s) {
    s.block_size = g.scalar(1, 8);
    const int64_t bs = s.block_size >= 1 && s.block_size <= 16 ? s.block_size : 1;
    const int64_t n = g.size();
    s.slot_indices = a.tensor(g.coin(2) ? DType::kI64 : DType::kI32, {n}, false, 4 * bs);
    s.out = a.tensor(DType::kBF16, {g.plus(n, g.range(0, 1)), spec::kHeadDim}, false, 0);
    s.k_cache = a.tensor(DType::kU8, {g.size(), spec::block_data_bytes(bs) + 2 * g.range(0, 2)}, false, 256);
    s.format = static_cast<spec::Fp8Format>(g.range(0, 1));
    s.record = fuzz_record(g);
  }

  template <class Check>
  static auto hostile_footprint(Check& chk, const SparseGatherArgs& s, const CacheGeometry& geo) {
    const int64_t n = s.slot_indices.shape[0];
    chk.inside(s.slot_indices, "slot_indices", {n});
    chk.inside(s.out, "out", {n, spec::kHeadDim});
    chk.cache_inside(s.k_cache, geo);
    return chk.footprint({&s.out, &s.k_cache, &s.slot_indices}, chk.work({&s.out, &s.slot_indices}));
  }
};

// The tester's definitions (header-only, so that an operation's tester is one file).
inline int64_t SparseGatherTester::stride() const {
  return stride_ > 0 ? stride_ : spec::record_layout(record_).vllm_block_stride(block_size_);
}

inline void SparseGatherTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t B = block_size_, S = stride(), cap = num_blocks_ * B;
  cache_ = GuardedBuffer(static_cast<size_t>(num_blocks_ * S));
  const bool random = fill_ == CacheFill::kRandom || fill_ == CacheFill::kRealistic;
  if (!random) cache_.fill(0);
  for (int64_t blk = 0; blk < num_blocks_ && random; ++blk)
    fill_random_block(cache_.data() + blk * S, B, S, format(), fill_ == CacheFill::kRealistic, r, record_);
  for (int64_t t = 0; t < cap && fill_ == CacheFill::kEveryCodeUnderEveryScale; ++t) {
    uint8_t* p = cache_.data() + (t / B) * S;
    const int64_t pos = t % B;
    for (int c = 0; c < spec::kNopeDim; ++c)
      p[spec::fp8_code_offset(pos, c)] = static_cast<uint8_t>(c + 64 * (t / 256));
    for (int j = 0; j < spec::kNumTiles; ++j) p[spec::scale_offset(B, pos, j)] = static_cast<uint8_t>(t % 256);
    for (int k = 0; k < spec::kRopeBytes; ++k) p[spec::rope_offset(pos) + k] = static_cast<uint8_t>(t * 31 + k);
  }
  std::vector<int64_t> v;
  if (explicit_slots_) {
    v = *explicit_slots_;
  } else {
    const int64_t lo = i64_ ? std::numeric_limits<int64_t>::min() : INT32_MIN;
    const int64_t hi = i64_ ? std::numeric_limits<int64_t>::max() : INT32_MAX;
    std::vector<int64_t> bad = bad_index_values(cap);
    for (int64_t x : {lo, hi, cap + B, int64_t{-3}, i64_ ? (int64_t{1} << 40) + 3 : (int64_t{1} << 30) + 3})
      bad.push_back(x);
    v.resize(static_cast<size_t>(n_));
    for (int64_t& s : v) {
      s = cap > 0 ? r.below(cap) : -1;
      if (r.chance(padding_fraction_)) s = -1;
      if (r.chance(invalid_fraction_)) s = r.pick(bad);
      if (!i64_) s = clamp32(s);
    }
  }
  slots_ = GuardedBuffer(static_cast<size_t>(n_) * (i64_ ? 8 : 4));
  for (int64_t i = 0; i < n_; ++i) {
    if (i64_)
      slots_.store<int64_t>(i, v[i]);
    else
      slots_.store<int32_t>(i, clamp32(v[i]));
  }
  out_ = GuardedBuffer(out_bytes());
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

inline SparseGatherArgs SparseGatherTester::Args() {
  SparseGatherArgs a;
  a.out = TensorView::mat(reinterpret_cast<uint16_t*>(out_.data()) + (out_shift_ ? 1 : 0), DType::kBF16, out_rows(),
                          head_dim(), out_row_stride());
  a.k_cache = TensorView::mat(cache_.data(), DType::kU8, num_blocks_, stride(), stride());
  a.slot_indices = TensorView::vec(slots_.data(), i64_ ? DType::kI64 : DType::kI32, n_);
  a.block_size = block_size_;
  a.format = format();
  a.record = record_;
  a.error_count = counter(error_count_);
  return a;
}

inline void SparseGatherTester::Run(Backend& be) {
  Prepare();
  run_case(be, Args(), error_count_, {&out_});
}

inline GuardedBuffer SparseGatherTester::RunDenseEquivalent(Backend& be, int32_t* count) const {
  SparseGatherTester t = *this;
  t.Prepare();
  const int64_t n = n_, B = block_size_;
  std::vector<int32_t> seq(static_cast<size_t>(n)), gat(static_cast<size_t>(n)),
      table(static_cast<size_t>(std::max<int64_t>(n, 1)), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = t.slot(i);
    if (s == -1) {  // a request of length 0: nothing gathered, nothing reported
      seq[i] = 0;
      gat[i] = 0;
    } else if (s < 0 || s / B > INT32_MAX) {  // malformed request: one report
      seq[i] = -1;
      gat[i] = 0;
    } else {  // position s % B of block s / B (a block past the cache: one report)
      seq[i] = static_cast<int32_t>(s % B + 1);
      gat[i] = 1;
      table[i] = static_cast<int32_t>(s / B);
    }
  }
  GuardedBuffer seq_b = i32_buffer(seq), gat_b = i32_buffer(gat), table_b = i32_buffer(table), cnt(4, 0);
  t.out_.fill(kFillByte);
  DequantizeGatherArgs d;
  d.out = TensorView::cube(reinterpret_cast<uint16_t*>(t.out_.data()) + (out_shift_ ? 1 : 0), DType::kBF16, n, 1,
                           head_dim(), std::max<int64_t>(out_row_stride(), 1), head_dim());
  d.k_cache = TensorView::mat(t.cache_.data(), DType::kU8, num_blocks_, stride(), stride());
  d.seq_lens = i32vec(seq_b, n);
  d.gather_lens = i32vec(gat_b, n);
  d.block_table = TensorView::mat(table_b.data(), DType::kI32, n, 1, 1);
  d.block_size = B;
  d.offset = 0;
  d.format = format();
  d.record = record_;
  d.error_count = count_errors_ ? reinterpret_cast<int32_t*>(cnt.data()) : nullptr;
  be.dequantize_and_gather_k_cache(d);
  *count = cnt.load<int32_t>(0);
  return t.out_;
}

inline int64_t SparseGatherTester::expected_error_count() const {
  int64_t n = 0;
  for (int64_t i = 0; i < n_; ++i) n += slot(i) != -1 && !slot_valid(i);
  return n;
}

inline std::vector<NamedBuffer> SparseGatherTester::buffers() const {
  return {{"k_cache", &cache_}, {"slot_indices", &slots_}, {"out", &out_}, {"error_count", &error_count_}};
}

inline std::ostream& operator<<(std::ostream& os, const SparseGatherTester& t) {
  os << "SparseGatherTester().slots(" << t.n_ << ").extra_rows(" << t.extra_rows_ << ").out_pad(" << t.out_pad_
     << ").out_shift(" << t.out_shift_ << ").block_size(" << t.block_size_ << ").num_blocks(" << t.num_blocks_
     << ").stride(" << t.stride_ << ").fnuz(" << t.fnuz_ << ").int64_slots(" << t.i64_ << ").padding_fraction("
     << t.padding_fraction_ << ").cache_fill(" << static_cast<int>(t.fill_) << ").invalid_fraction("
     << t.invalid_fraction_ << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")";
  if (t.prepared_) {
    os << "  slots=[";
    for (int64_t i = 0; i < std::min<int64_t>(t.n_, 64); ++i) os << (i ? "," : "") << t.slot(i);
    os << (t.n_ > 64 ? ",...]" : "]");
  }
  return os;
}

}  // namespace dsv4kv::conformance
