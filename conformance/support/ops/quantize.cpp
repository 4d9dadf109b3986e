// The tester of quantize_and_insert_k_cache; see quantize.hpp.
#include "quantize.hpp"

#include <algorithm>
#include <climits>
#include <ostream>

namespace dsv4kv::conformance {

namespace {

uint16_t bf16(bool neg, int exp, int mant) {
  return static_cast<uint16_t>((neg ? 0x8000 : 0) | ((exp & 0xFF) << 7) | (mant & 0x7F));
}

/// One 64-value tile of NoPE key values from one of several adversarial classes.
void fill_tile(Rng& r, uint16_t* x, bool nonfinite) {
  const int cls = static_cast<int>(r.below(nonfinite ? 10 : 7));
  const int e0 = static_cast<int>(r.range(100, 150));
  auto ordinary = [&](int top) {
    return bf16(r.chance(0.5), std::max<int>(1, top - static_cast<int>(r.below(13))), static_cast<int>(r.below(128)));
  };
  for (int i = 0; i < spec::kTileSize; ++i) {
    switch (cls) {
      case 0: x[i] = r.chance(0.05) ? bf16(r.chance(0.5), 0, 0) : ordinary(e0); break;  // spread of magnitudes
      case 1: x[i] = bf16(r.chance(0.5), 0, 0); break;                                 // all +-0
      case 2: x[i] = ordinary(e0); break;                                              // amax set below
      case 3: x[i] = bf16(r.chance(0.5), static_cast<int>(r.below(4)), static_cast<int>(r.below(128))); break;  // subnormal/tiny
      case 4: {                                                                        // any finite pattern
        uint16_t b = static_cast<uint16_t>(r.bits());
        if ((b & 0x7F80) == 0x7F80) b = static_cast<uint16_t>(b & ~0x0080);
        x[i] = b;
        break;
      }
      case 5: x[i] = bf16(r.chance(0.5), e0 - static_cast<int>(r.below(6)), static_cast<int>(r.below(16)) << 3); break;  // fp8 ties
      case 6: x[i] = bf16(r.chance(0.5), static_cast<int>(r.range(245, 254)), static_cast<int>(r.below(128))); break;  // near bf16 max
      case 7:                                                                          // NaNs sprinkled
        x[i] = r.chance(0.15) ? bf16(r.chance(0.5), 255, static_cast<int>(r.range(1, 127))) : ordinary(e0);
        break;
      case 8: x[i] = ordinary(e0); break;                                              // one inf set below
      default: x[i] = bf16(r.chance(0.5), 255, r.chance(0.5) ? 0 : static_cast<int>(r.range(1, 127))); break;  // all non-finite
    }
  }
  if (cls == 2) {  // amax exactly 448*2^k or a bf16 neighbour: the scale-rounding boundary
    const int k = static_cast<int>(r.range(-30, 30));
    const int exp = 135 + k;  // 448 = 1.75 * 2^8
    const int mant = 0x60 + static_cast<int>(r.range(-1, 1));
    for (int i = 0; i < spec::kTileSize; ++i)
      if (((x[i] >> 7) & 0xFF) >= exp) x[i] = bf16(x[i] & 0x8000, exp - 1, x[i] & 0x7F);
    x[r.below(spec::kTileSize)] = bf16(r.chance(0.5), exp, mant);
  }
  if (cls == 8) x[r.below(spec::kTileSize)] = bf16(r.chance(0.5), 255, 0);
}

}  // namespace

QuantizeTester& QuantizeTester::slots(std::vector<int64_t> v) {
  tokens_ = static_cast<int64_t>(v.size());
  explicit_slots_ = std::move(v);
  prepared_ = false;
  return *this;
}

int64_t QuantizeTester::num_blocks() const {
  return num_blocks_ > 0 ? num_blocks_ : (tokens_ + block_size_ - 1) / block_size_ + 1;
}

int64_t QuantizeTester::stride() const { return stride_ > 0 ? stride_ : spec::vllm_block_stride(block_size_); }

void QuantizeTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t rows = tokens_ + extra_k_rows_;
  const int64_t rs = spec::kHeadDim + k_row_pad_;
  k_ = GuardedBuffer(static_cast<size_t>(rows * rs) * 2);
  for (int64_t t = 0; t < rows; ++t) {
    uint16_t row[spec::kHeadDim];
    for (int j = 0; j < spec::kNumTiles; ++j) fill_tile(r, row + j * spec::kTileSize, nonfinite_);
    for (int i = spec::kNopeDim; i < spec::kHeadDim; ++i) row[i] = static_cast<uint16_t>(r.bits());  // any pattern
    for (int i = 0; i < spec::kHeadDim; ++i) k_.store<uint16_t>(t * rs + i, row[i]);
    for (int64_t i = spec::kHeadDim; i < rs; ++i) k_.store<uint16_t>(t * rs + i, static_cast<uint16_t>(r.bits()));
  }
  const int64_t cap = capacity();
  std::vector<int64_t> s;
  if (explicit_slots_) {
    s = *explicit_slots_;
  } else {
    std::vector<int64_t> perm(static_cast<size_t>(cap));
    for (int64_t i = 0; i < cap; ++i) perm[i] = i;
    for (int64_t i = 0; i < std::min(cap, tokens_); ++i) std::swap(perm[i], perm[i + r.below(cap - i)]);
    const std::vector<int64_t> bad = {INT64_MIN, INT32_MIN, -2, cap, cap + 1, INT32_MAX, INT64_MAX};
    for (int64_t t = 0; t < tokens_; ++t) {
      int64_t v = duplicates_ ? r.below(cap) : (t < cap ? perm[t] : -1);
      if (cap == 0) v = -1;
      const bool pad = r.chance(pad_fraction_);
      const bool bad_slot = r.chance(invalid_fraction_);
      if (pad) v = -1;
      else if (bad_slot) v = r.pick(bad);
      s.push_back(v);
    }
  }
  slots_ = GuardedBuffer(s.size() * 8);
  for (size_t i = 0; i < s.size(); ++i) slots_.store<int64_t>(i, s[i]);
  cache_ = GuardedBuffer(static_cast<size_t>(num_blocks() * stride()));
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

QuantizeInsertArgs QuantizeTester::Args() {
  QuantizeInsertArgs a;
  a.k = TensorView::mat(k_.data(), DType::kBF16, tokens_ + extra_k_rows_, spec::kHeadDim, spec::kHeadDim + k_row_pad_);
  const int64_t cols = tight_cache_rows_ ? spec::block_data_bytes(block_size_) : stride();
  a.k_cache = TensorView::mat(cache_.data(), DType::kU8, num_blocks(), cols, stride());
  a.slot_mapping = TensorView::vec(slots_.data(), DType::kI64, tokens_);
  a.block_size = block_size_;
  a.format = format();
  a.error_count = counter(error_count_);
  return a;
}

void QuantizeTester::Run(Backend& be) {
  Prepare();
  cache_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.quantize_and_insert_k_cache(Args());
}

uint16_t QuantizeTester::k(int64_t t, int col) const { return k_.load<uint16_t>(t * (spec::kHeadDim + k_row_pad_) + col); }
int64_t QuantizeTester::slot(int64_t t) const { return slots_.load<int64_t>(t); }

std::vector<int64_t> QuantizeTester::writer_of_slot() const {
  std::vector<int64_t> w(static_cast<size_t>(capacity()), -1);
  for (int64_t t = 0; t < tokens_; ++t) {
    const int64_t s = slot(t);
    if (s >= 0 && s < capacity()) w[s] = t;
  }
  return w;
}

int32_t QuantizeTester::expected_error_count() const {
  int32_t n = 0;
  for (int64_t t = 0; t < tokens_; ++t) {
    const int64_t s = slot(t);
    if (s == -1) continue;
    if (s < 0 || s >= capacity()) {
      ++n;
      continue;
    }
    for (int i = 0; i < spec::kNopeDim; ++i) n += spec::bf16_is_nonfinite(k(t, i)) ? 1 : 0;
  }
  return n;
}

std::vector<NamedBuffer> QuantizeTester::buffers() const {
  return {{"k", &k_}, {"slot_mapping", &slots_}, {"k_cache", &cache_}, {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const QuantizeTester& t) {
  return os << "QuantizeTester().tokens(" << t.tokens_ << ").extra_k_rows(" << t.extra_k_rows_ << ").k_row_pad("
            << t.k_row_pad_ << ").block_size(" << t.block_size_ << ").num_blocks(" << t.num_blocks_ << ").stride("
            << t.stride_ << ").tight_cache_rows(" << t.tight_cache_rows_ << ").fnuz(" << t.fnuz_ << ").nonfinite("
            << t.nonfinite_ << ").pad_fraction(" << t.pad_fraction_ << ").invalid_fraction(" << t.invalid_fraction_
            << ").duplicates(" << t.duplicates_ << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_
            << ")" << (t.explicit_slots_ ? " [explicit slots]" : "");
}

}  // namespace dsv4kv::conformance
