// The tester of dequantize_and_gather_k_cache_sparse; see sparse_gather.hpp.
#include "sparse_gather.hpp"

#include <algorithm>
#include <limits>
#include <ostream>

namespace dsv4kv::conformance {

int64_t SparseGatherTester::stride() const { return stride_ > 0 ? stride_ : spec::vllm_block_stride(block_size_); }

void SparseGatherTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t B = block_size_, S = stride(), cap = num_blocks_ * B;
  cache_ = GuardedBuffer(static_cast<size_t>(num_blocks_ * S));
  const bool random = fill_ == CacheFill::kRandom || fill_ == CacheFill::kRealistic;
  const bool realistic = fill_ == CacheFill::kRealistic;
  if (!random) cache_.fill(0);
  for (int64_t blk = 0; blk < num_blocks_ && random; ++blk) {
    uint8_t* p = cache_.data() + blk * S;
    for (int64_t i = 0; i < S; ++i) p[i] = static_cast<uint8_t>(r.bits());
    if (realistic)  // no NaN code: what quantize writes for finite keys
      for (int64_t pos = 0; pos < B; ++pos)
        for (int i = 0; i < spec::kNopeDim; ++i) {
          uint8_t& c = p[spec::fp8_code_offset(pos, i)];
          if (spec::fp8_is_nan(c, format())) c ^= 1;
        }
    if (realistic || r.chance(0.5))  // realistic scales (what quantize writes); otherwise every byte 0..255 occurs
      for (int64_t pos = 0; pos < B; ++pos)
        for (int j = 0; j < spec::kNumTiles; ++j) p[spec::scale_offset(B, pos, j)] = static_cast<uint8_t>(r.range(100, 150));
  }
  for (int64_t t = 0; t < cap && fill_ == CacheFill::kEveryCodeUnderEveryScale; ++t) {
    uint8_t* p = cache_.data() + (t / B) * S;
    const int64_t pos = t % B;
    for (int c = 0; c < spec::kNopeDim; ++c) p[spec::fp8_code_offset(pos, c)] = static_cast<uint8_t>(c + 64 * (t / 256));
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
    if (i64_) slots_.store<int64_t>(i, v[i]);
    else slots_.store<int32_t>(i, clamp32(v[i]));
  }
  out_ = GuardedBuffer(out_bytes());
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

SparseGatherArgs SparseGatherTester::Args() {
  SparseGatherArgs a;
  a.out = TensorView::mat(reinterpret_cast<uint16_t*>(out_.data()) + (out_shift_ ? 1 : 0), DType::kBF16, out_rows(),
                          spec::kHeadDim, out_row_stride());
  a.k_cache = TensorView::mat(cache_.data(), DType::kU8, num_blocks_, stride(), stride());
  a.slot_indices = TensorView::vec(slots_.data(), i64_ ? DType::kI64 : DType::kI32, n_);
  a.block_size = block_size_;
  a.format = format();
  a.error_count = counter(error_count_);
  return a;
}

void SparseGatherTester::Run(Backend& be) {
  Prepare();
  out_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.dequantize_and_gather_k_cache_sparse(Args());
}

GuardedBuffer SparseGatherTester::RunDenseEquivalent(Backend& be, int32_t* count) const {
  SparseGatherTester t = *this;
  t.Prepare();
  const int64_t n = n_, B = block_size_;
  std::vector<int32_t> seq(static_cast<size_t>(n)), gat(static_cast<size_t>(n)), table(static_cast<size_t>(std::max<int64_t>(n, 1)), 0);
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
                           spec::kHeadDim, std::max<int64_t>(out_row_stride(), 1), spec::kHeadDim);
  d.k_cache = TensorView::mat(t.cache_.data(), DType::kU8, num_blocks_, stride(), stride());
  d.seq_lens = i32vec(seq_b, n);
  d.gather_lens = i32vec(gat_b, n);
  d.block_table = TensorView::mat(table_b.data(), DType::kI32, n, 1, 1);
  d.block_size = B;
  d.offset = 0;
  d.format = format();
  d.error_count = count_errors_ ? reinterpret_cast<int32_t*>(cnt.data()) : nullptr;
  be.dequantize_and_gather_k_cache(d);
  *count = cnt.load<int32_t>(0);
  return t.out_;
}

int64_t SparseGatherTester::expected_error_count() const {
  int64_t n = 0;
  for (int64_t i = 0; i < n_; ++i) n += slot(i) != -1 && !slot_valid(i);
  return n;
}

std::vector<NamedBuffer> SparseGatherTester::buffers() const {
  return {{"k_cache", &cache_}, {"slot_indices", &slots_}, {"out", &out_}, {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const SparseGatherTester& t) {
  os << "SparseGatherTester().slots(" << t.n_ << ").extra_rows(" << t.extra_rows_ << ").out_pad(" << t.out_pad_
     << ").out_shift(" << t.out_shift_ << ").block_size(" << t.block_size_ << ").num_blocks(" << t.num_blocks_
     << ").stride(" << t.stride_ << ").fnuz(" << t.fnuz_ << ").int64_slots(" << t.i64_ << ").padding_fraction("
     << t.padding_fraction_ << ").cache_fill(" << static_cast<int>(t.fill_) << ").invalid_fraction(" << t.invalid_fraction_ << ").count_errors(" << t.count_errors_
     << ").seed(" << t.seed_ << ")";
  if (t.prepared_) {
    os << "  slots=[";
    for (int64_t i = 0; i < std::min<int64_t>(t.n_, 64); ++i) os << (i ? "," : "") << t.slot(i);
    os << (t.n_ > 64 ? ",...]" : "]");
  }
  return os;
}

}  // namespace dsv4kv::conformance
