/// \file gather.hpp
/// \brief The tester of dequantize_and_gather_k_cache (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in gather_properties.hpp.
#pragma once

#include <algorithm>
#include <climits>
#include <ostream>

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of dequantize_and_gather_k_cache over a cache of random bytes.
///
/// Valid cases: 0 <= gather_len <= seq_len <= block-table coverage, offset +
/// gather_len <= out_rows, block-table entries in [0, num_blocks). Invalid cases
/// replace an `invalid_fraction` of lengths and table entries by out-of-range values.
class GatherTester : public TesterBase<GatherTester> {
 public:
  GatherTester& requests(int64_t v) {
    requests_ = v;
    return *this;
  }
  /// Extra leading-dimension entries of `out` beyond the requests (never written).
  GatherTester& extra_out_batch(int64_t v) {
    extra_out_batch_ = v;
    return *this;
  }
  GatherTester& out_rows(int64_t v) {
    out_rows_ = v;
    return *this;
  }
  /// Padding elements between out rows, and between out batches.
  GatherTester& out_pad(int64_t row_pad, int64_t batch_pad) {
    out_row_pad_ = row_pad;
    out_batch_pad_ = batch_pad;
    return *this;
  }
  GatherTester& offset(int64_t v) {
    offset_ = v;
    return *this;
  }
  GatherTester& block_size(int64_t v) {
    block_size_ = v;
    return *this;
  }
  GatherTester& num_blocks(int64_t v) {
    num_blocks_ = v;
    return *this;
  }
  /// 0 = vLLM's block stride.
  GatherTester& stride(int64_t v) {
    stride_ = v;
    return *this;
  }
  /// Bytes (even) between the cache buffer's 16-byte aligned start and the cache view: a view that
  /// starts off a 16-byte boundary (the bytes before it hold random values and are never written).
  GatherTester& cache_lead(int64_t v) {
    cache_lead_ = v;
    return *this;
  }
  GatherTester& fnuz(bool v) {
    fnuz_ = v;
    return *this;
  }
  /// The record the cache's tokens are stored as (spec "Cache records"); its head_dim is out's width.
  GatherTester& record(Record v) {
    record_ = v;
    prepared_ = false;
    return *this;
  }
  Record record() const { return record_; }
  int head_dim() const { return spec::record_layout(record_).head_dim; }
  GatherTester& with_gather_lens(bool v) {
    with_gather_lens_ = v;
    return *this;
  }
  /// Every block as quantize writes it (scale bytes of typical keys, no NaN code), instead of half
  /// the blocks with arbitrary bytes: the bench's inputs, which a real cache resembles.
  GatherTester& realistic_cache(bool v) {
    realistic_cache_ = v;
    return *this;
  }
  /// Block-table columns, extra rows beyond the requests, and padding between rows.
  GatherTester& table(int64_t cols, int64_t extra_rows, int64_t row_pad) {
    bt_cols_ = cols;
    bt_extra_rows_ = extra_rows;
    bt_row_pad_ = row_pad;
    return *this;
  }
  /// Explicit lengths (gather_lens empty = absent).
  GatherTester& lengths(std::vector<int32_t> seq_lens, std::vector<int32_t> gather_lens);

  int64_t requests() const { return requests_; }
  int64_t out_rows() const { return out_rows_; }
  int64_t offset() const { return offset_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t stride() const;
  int64_t table_cols() const { return bt_cols_; }
  bool has_gather_lens() const { return with_gather_lens_; }
  Fp8Format format() const { return fnuz_ ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn; }

  void Prepare();
  /// The argument struct of the call (views into this tester's buffers), after Prepare().
  DequantizeGatherArgs args() {
    Prepare();
    return Args();
  }
  /// Resets `out` to 0xA5 and the counter to 0, then runs the operation.
  void Run(Backend& be);

  int32_t seq_len(int64_t b) const { return seq_lens_.load<int32_t>(b); }
  int32_t gather_len(int64_t b) const { return gather_lens_.load<int32_t>(b); }
  int32_t table_entry(int64_t b, int64_t col) const { return block_table_.load<int32_t>(b * bt_row_stride() + col); }
  uint8_t cache_byte(int64_t block, int64_t offset) const {
    return cache_.data()[cache_lead_ + block * stride() + offset];
  }
  /// Element index of out[b, row, col] in the output buffer.
  int64_t out_index(int64_t b, int64_t row, int64_t col) const {
    return b * out_batch_stride() + row * out_row_stride() + col;
  }
  uint16_t out(int64_t b, int64_t row, int64_t col) const { return out_.load<uint16_t>(out_index(b, row, col)); }
  const GuardedBuffer& out_buffer() const { return out_; }
  int32_t error_count() const { return error_count_.load<int32_t>(0); }

  /// Cache block feeding out[b, row] per the spec, or -1 when that row must stay untouched.
  int64_t expected_block(int64_t b, int64_t row, int64_t* pos_in_block) const;
  /// The error count the spec requires.
  int64_t expected_error_count() const;
  std::vector<NamedBuffer> buffers() const;

  friend std::ostream& operator<<(std::ostream& os, const GatherTester& t);

 private:
  DequantizeGatherArgs Args();
  int64_t out_row_stride() const { return head_dim() + out_row_pad_; }
  int64_t out_batch_stride() const { return out_rows_ * out_row_stride() + out_batch_pad_; }
  int64_t bt_row_stride() const { return bt_cols_ + bt_row_pad_; }

  int64_t requests_ = 3, extra_out_batch_ = 0, out_rows_ = 80, out_row_pad_ = 0, out_batch_pad_ = 0, offset_ = 0;
  int64_t block_size_ = 64, num_blocks_ = 4, stride_ = 0, bt_cols_ = 2, bt_extra_rows_ = 0, bt_row_pad_ = 0;
  int64_t cache_lead_ = 0;
  bool fnuz_ = false, with_gather_lens_ = true, realistic_cache_ = false;
  Record record_ = Record::kFp8DsMla;
  std::optional<std::pair<std::vector<int32_t>, std::vector<int32_t>>> explicit_lengths_;
  GuardedBuffer cache_, seq_lens_, gather_lens_, block_table_, out_, error_count_;
};

/// The tester of DequantizeGatherArgs (see TesterOf in tester_common.hpp).
template <>
struct TesterOf<DequantizeGatherArgs> {
  using type = GatherTester;

  // fuzz/fuzz_ops.cpp: how a caller may build the arguments (`In`: its fuzz input reader,
  // `Arena`: its owner of one buffer per view; fuzz/README.md).
  template <class In, class Arena>
  static void fuzz_args(In& g, Arena& a, DequantizeGatherArgs& d) {
    d.block_size = g.scalar(1, 8);
    const int64_t B = d.block_size > 0 && d.block_size <= 16 ? d.block_size : 1;
    const int64_t R = g.range(0, 3), rows = g.range(0, 8);
    d.seq_lens = a.tensor(DType::kI32, {R}, false, a.indices(4 * B));
    d.gather_lens = a.tensor(DType::kI32, {R + g.range(0, 1)}, true, a.indices(4 * B));
    d.out = a.tensor(DType::kBF16, {R + g.range(0, 1), rows, spec::kHeadDim}, false, a.no_fill());
    d.block_table = a.tensor(DType::kI32, {R, g.range(0, 4)}, false, a.indices(3));
    d.offset = g.scalar(0, rows);
    d.k_cache = a.cache_view(d.block_size);
    d.format = static_cast<spec::Fp8Format>(g.range(0, 1));
    d.record = fuzz_record(g);
  }

  // fuzz/fuzz_validate.cpp: how a hostile caller builds the arguments, and which views validate()
  // checks and which elements the operation may touch once it accepts (`Check`: the harness's
  // independent model of the access pattern; fuzz/README.md).
  template <class In, class Arena>
  static void hostile_args(In& g, Arena& a, DequantizeGatherArgs& d) {
    d.block_size = g.scalar(1, 8);
    const int64_t bs = d.block_size >= 1 && d.block_size <= 16 ? d.block_size : 1;
    const int64_t R = g.size(), out_rows = g.size(), cols = g.size();
    d.seq_lens = a.tensor(DType::kI32, {R}, false, 4 * bs);
    d.gather_lens = a.tensor(DType::kI32, {g.plus(R, g.range(0, 1))}, true, 4 * bs);
    d.out = a.tensor(DType::kBF16, {g.plus(R, g.range(0, 1)), out_rows, spec::kHeadDim}, false, 0);
    d.block_table = a.tensor(DType::kI32, {R, cols}, false, 3);
    d.offset = g.scalar(0, out_rows < 8 ? out_rows : 8);
    d.k_cache = a.tensor(DType::kU8, {g.size(), spec::block_data_bytes(bs) + 2 * g.range(0, 2)}, false, 256);
    d.format = static_cast<spec::Fp8Format>(g.range(0, 1));
    d.record = fuzz_record(g);
  }

  template <class Check>
  static auto hostile_footprint(Check& chk, const DequantizeGatherArgs& d, const CacheGeometry& geo) {
    const int64_t r = d.seq_lens.shape[0];
    if (d.offset < 0 || d.offset > d.out.shape[1]) chk.violated("offset outside [0, out.shape[1]]");
    chk.inside(d.seq_lens, "seq_lens", {r});
    if (d.gather_lens.present()) chk.inside(d.gather_lens, "gather_lens", {r});
    chk.inside(d.out, "out", {r, d.out.shape[1], spec::kHeadDim});
    chk.inside(d.block_table, "block_table", {r, d.block_table.shape[1]});
    chk.cache_inside(d.k_cache, geo);
    return chk.footprint({&d.out, &d.k_cache, &d.seq_lens, &d.gather_lens, &d.block_table},
                         chk.work({&d.out, &d.seq_lens, &d.block_table}));
  }
};

// The tester's definitions (header-only, so that an operation's tester is one file).
inline GatherTester& GatherTester::lengths(std::vector<int32_t> seq_lens, std::vector<int32_t> gather_lens) {
  requests_ = static_cast<int64_t>(seq_lens.size());
  with_gather_lens_ = !gather_lens.empty();
  explicit_lengths_ = std::make_pair(std::move(seq_lens), std::move(gather_lens));
  prepared_ = false;
  return *this;
}

inline int64_t GatherTester::stride() const {
  return stride_ > 0 ? stride_ : spec::record_layout(record_).vllm_block_stride(block_size_);
}

inline void GatherTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t B = block_size_, S = stride();
  cache_ = GuardedBuffer(static_cast<size_t>(cache_lead_ + num_blocks_ * S));
  for (int64_t i = 0; i < cache_lead_; ++i) cache_.data()[i] = static_cast<uint8_t>(r.below(256));
  for (int64_t blk = 0; blk < num_blocks_; ++blk)
    fill_random_block(cache_.data() + cache_lead_ + blk * S, B, S, format(), realistic_cache_, r, record_);
  const int64_t R = requests_, cols = bt_cols_, room = out_rows_ - offset_, coverage = cols * B;
  std::vector<int32_t> sl(R), gl(R + r.below(2));
  for (auto& v : gl) v = static_cast<int32_t>(r.range(-3, 3));  // entries beyond R are never read
  if (explicit_lengths_) {
    for (int64_t b = 0; b < R; ++b) {
      sl[b] = explicit_lengths_->first[b];
      gl[b] = with_gather_lens_ ? explicit_lengths_->second[b] : sl[b];
    }
  } else {
    bool huge_used = false;
    for (int64_t b = 0; b < R; ++b) {
      int64_t s = r.pick(std::vector<int64_t>{0, 1, B - 1, B, B + 1, coverage, r.range(0, coverage)});
      s = std::clamp<int64_t>(s, 0, coverage);
      if (!with_gather_lens_) s = std::min(s, room);
      int64_t g = with_gather_lens_ ? (r.chance(0.4) ? std::min(s, room) : r.range(0, std::min(s, room))) : s;
      if (r.chance(invalid_fraction_)) {
        switch (r.below(5)) {
          case 0: s = r.pick(std::vector<int64_t>{INT32_MIN, -2, -1}); break;  // negative seq_len
          case 1:
            if (with_gather_lens_)
              g = r.pick(std::vector<int64_t>{INT32_MIN, -1, s + 1, INT32_MAX});  // g outside [0, s]
            break;
          case 2:
            g = room + r.range(1, 3);
            s = std::max(s, g);
            if (!with_gather_lens_) g = s;
            break;  // rows past out
          case 3:
            s = coverage + r.range(1, 2 * B);
            if (!with_gather_lens_)
              g = s;
            else
              g = std::min(s, room);
            break;
          default:
            if (!huge_used) {  // one huge length per case, so the counter cannot overflow int32
              huge_used = true;
              // Without gather_lens every row past `out` is counted: keep the total below INT32_MAX.
              s = with_gather_lens_ ? INT32_MAX : INT32_MAX - 100000;
              g = with_gather_lens_ ? std::min<int64_t>(room, 3) : s;
            }
        }
      }
      sl[b] = clamp32(s);
      gl[b] = clamp32(with_gather_lens_ ? g : s);
    }
  }
  seq_lens_ = i32_buffer(sl);
  gather_lens_ = i32_buffer(gl);
  const int64_t rows = R + bt_extra_rows_;
  std::vector<int32_t> bt(static_cast<size_t>(rows * bt_row_stride()));
  const std::vector<int64_t> bad = bad_index_values(num_blocks_);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < bt_row_stride(); ++c) {
      int64_t v = c < cols ? (num_blocks_ > 0 ? r.below(num_blocks_) : -1) : r.pick(bad);  // padding: never read
      if (c < cols && r.chance(invalid_fraction_)) v = r.pick(bad);
      bt[i * bt_row_stride() + c] = static_cast<int32_t>(v);
    }
  block_table_ = i32_buffer(bt);
  out_ = GuardedBuffer(static_cast<size_t>((R + extra_out_batch_) * out_batch_stride()) * 2);
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

inline DequantizeGatherArgs GatherTester::Args() {
  DequantizeGatherArgs a;
  a.out = TensorView::cube(out_.data(), DType::kBF16, requests_ + extra_out_batch_, out_rows_, head_dim(),
                           std::max<int64_t>(out_batch_stride(), 1), out_row_stride());
  a.k_cache = TensorView::mat(cache_.data() + cache_lead_, DType::kU8, num_blocks_, stride(), stride());
  a.seq_lens = i32vec(seq_lens_, requests_);
  if (with_gather_lens_) a.gather_lens = i32vec(gather_lens_, static_cast<int64_t>(gather_lens_.size() / 4));
  a.block_table = TensorView::mat(block_table_.data(), DType::kI32, requests_ + bt_extra_rows_, bt_cols_,
                                  std::max<int64_t>(bt_row_stride(), 1));
  a.block_size = block_size_;
  a.offset = offset_;
  a.format = format();
  a.record = record_;
  a.error_count = counter(error_count_);
  return a;
}

inline void GatherTester::Run(Backend& be) {
  Prepare();
  run_case(be, Args(), error_count_, {&out_});
}

inline int64_t GatherTester::expected_block(int64_t b, int64_t row, int64_t* pos_in_block) const {
  if (b >= requests_) return -1;
  const int64_t s = seq_len(b), g = with_gather_lens_ ? gather_len(b) : s;
  if (s < 0 || g < 0 || g > s) return -1;
  const int64_t i = row - offset_;
  if (i < 0 || i >= g) return -1;
  const int64_t pos = s - g + i, col = pos / block_size_;
  if (col >= bt_cols_) return -1;
  const int64_t blk = table_entry(b, col);
  if (blk < 0 || blk >= num_blocks_) return -1;
  *pos_in_block = pos % block_size_;
  return blk;
}

inline int64_t GatherTester::expected_error_count() const {
  int64_t n = 0;
  for (int64_t b = 0; b < requests_; ++b) {
    const int64_t s = seq_len(b), g = with_gather_lens_ ? gather_len(b) : s;
    if (s < 0 || g < 0 || g > s) {
      ++n;
      continue;
    }
    const int64_t inside = std::min(g, out_rows_ - offset_);
    n += g - inside;
    for (int64_t i = 0; i < inside; ++i) {
      const int64_t col = (s - g + i) / block_size_;
      if (col >= bt_cols_) {
        ++n;
        continue;
      }
      const int64_t blk = table_entry(b, col);
      if (blk < 0 || blk >= num_blocks_) ++n;
    }
  }
  return n;
}

inline std::vector<NamedBuffer> GatherTester::buffers() const {
  return {{"k_cache", &cache_},           {"seq_lens", &seq_lens_}, {"gather_lens", &gather_lens_},
          {"block_table", &block_table_}, {"out", &out_},           {"error_count", &error_count_}};
}

inline std::ostream& operator<<(std::ostream& os, const GatherTester& t) {
  os << "GatherTester().requests(" << t.requests_ << ").extra_out_batch(" << t.extra_out_batch_ << ").out_rows("
     << t.out_rows_ << ").out_pad(" << t.out_row_pad_ << ", " << t.out_batch_pad_ << ").offset(" << t.offset_
     << ").block_size(" << t.block_size_ << ").num_blocks(" << t.num_blocks_ << ").stride(" << t.stride_
     << ").cache_lead(" << t.cache_lead_ << ").fnuz(" << t.fnuz_ << ").with_gather_lens(" << t.with_gather_lens_
     << ").table(" << t.bt_cols_ << ", " << t.bt_extra_rows_ << ", " << t.bt_row_pad_ << ").invalid_fraction("
     << t.invalid_fraction_ << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")";
  if (t.prepared_) {
    os << "  seq_lens=[";
    for (int64_t b = 0; b < t.requests_; ++b) os << (b ? "," : "") << t.seq_len(b);
    os << "] gather_lens=[";
    for (int64_t b = 0; b < t.requests_; ++b) os << (b ? "," : "") << t.gather_len(b);
    os << "]";
  }
  return os;
}

}  // namespace dsv4kv::conformance
