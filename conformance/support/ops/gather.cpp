// The tester of dequantize_and_gather_k_cache; see gather.hpp.
#include "gather.hpp"

#include <algorithm>
#include <climits>
#include <ostream>

namespace dsv4kv::conformance {

GatherTester& GatherTester::lengths(std::vector<int32_t> seq_lens, std::vector<int32_t> gather_lens) {
  requests_ = static_cast<int64_t>(seq_lens.size());
  with_gather_lens_ = !gather_lens.empty();
  explicit_lengths_ = std::make_pair(std::move(seq_lens), std::move(gather_lens));
  prepared_ = false;
  return *this;
}

int64_t GatherTester::stride() const { return stride_ > 0 ? stride_ : spec::vllm_block_stride(block_size_); }

void GatherTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t B = block_size_, S = stride();
  cache_ = GuardedBuffer(static_cast<size_t>(num_blocks_ * S));
  for (int64_t blk = 0; blk < num_blocks_; ++blk) {
    uint8_t* p = cache_.data() + blk * S;
    for (int64_t i = 0; i < S; ++i) p[i] = static_cast<uint8_t>(r.bits());
    if (realistic_cache_)  // no NaN code: what quantize writes for finite keys
      for (int64_t pos = 0; pos < B; ++pos)
        for (int i = 0; i < spec::kNopeDim; ++i) {
          uint8_t& c = p[spec::fp8_code_offset(pos, i)];
          if (spec::fp8_is_nan(c, format())) c ^= 1;
        }
    if (realistic_cache_ || r.chance(0.5))  // realistic scales; otherwise every byte 0..255 occurs
      for (int64_t pos = 0; pos < B; ++pos)
        for (int j = 0; j < spec::kNumTiles; ++j) p[spec::scale_offset(B, pos, j)] = static_cast<uint8_t>(r.range(100, 150));
  }
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
          case 0: s = r.pick(std::vector<int64_t>{INT32_MIN, -2, -1}); break;       // negative seq_len
          case 1:
            if (with_gather_lens_) g = r.pick(std::vector<int64_t>{INT32_MIN, -1, s + 1, INT32_MAX});  // g outside [0, s]
            break;
          case 2: g = room + r.range(1, 3); s = std::max(s, g); if (!with_gather_lens_) g = s; break;  // rows past out
          case 3: s = coverage + r.range(1, 2 * B); if (!with_gather_lens_) g = s; else g = std::min(s, room); break;
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

DequantizeGatherArgs GatherTester::Args() {
  DequantizeGatherArgs a;
  a.out = TensorView::cube(out_.data(), DType::kBF16, requests_ + extra_out_batch_, out_rows_, spec::kHeadDim,
                           std::max<int64_t>(out_batch_stride(), 1), out_row_stride());
  a.k_cache = TensorView::mat(cache_.data(), DType::kU8, num_blocks_, stride(), stride());
  a.seq_lens = i32vec(seq_lens_, requests_);
  if (with_gather_lens_) a.gather_lens = i32vec(gather_lens_, static_cast<int64_t>(gather_lens_.size() / 4));
  a.block_table = TensorView::mat(block_table_.data(), DType::kI32, requests_ + bt_extra_rows_, bt_cols_,
                                  std::max<int64_t>(bt_row_stride(), 1));
  a.block_size = block_size_;
  a.offset = offset_;
  a.format = format();
  a.error_count = counter(error_count_);
  return a;
}

void GatherTester::Run(Backend& be) {
  Prepare();
  out_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.dequantize_and_gather_k_cache(Args());
}

int64_t GatherTester::expected_block(int64_t b, int64_t row, int64_t* pos_in_block) const {
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

int64_t GatherTester::expected_error_count() const {
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
      if (col >= bt_cols_) { ++n; continue; }
      const int64_t blk = table_entry(b, col);
      if (blk < 0 || blk >= num_blocks_) ++n;
    }
  }
  return n;
}

std::vector<NamedBuffer> GatherTester::buffers() const {
  return {{"k_cache", &cache_}, {"seq_lens", &seq_lens_}, {"gather_lens", &gather_lens_},
          {"block_table", &block_table_}, {"out", &out_}, {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const GatherTester& t) {
  os << "GatherTester().requests(" << t.requests_ << ").extra_out_batch(" << t.extra_out_batch_ << ").out_rows("
     << t.out_rows_ << ").out_pad(" << t.out_row_pad_ << ", " << t.out_batch_pad_ << ").offset(" << t.offset_
     << ").block_size(" << t.block_size_ << ").num_blocks(" << t.num_blocks_ << ").stride(" << t.stride_
     << ").fnuz(" << t.fnuz_ << ").with_gather_lens(" << t.with_gather_lens_ << ").table(" << t.bt_cols_ << ", "
     << t.bt_extra_rows_ << ", " << t.bt_row_pad_ << ").invalid_fraction(" << t.invalid_fraction_
     << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")";
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
