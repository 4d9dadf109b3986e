// Case builders for the conformance properties; see testers.hpp.
#include "testers.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <ostream>
#include <random>
#include <sstream>

namespace dsv4kv::conformance {

namespace {

/// Deterministic PRNG with our own range reduction, so a seed means the same
/// case with every standard library (std distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed ^ 0x9E3779B97F4A7C15ull) {}
  uint64_t bits() { return g_(); }
  /// Uniform in [0, n) (0 when n <= 0).
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(g_() % static_cast<uint64_t>(n)); }
  /// Uniform in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) { return hi <= lo ? lo : lo + below(hi - lo + 1); }
  bool chance(double p) { return static_cast<double>(g_() >> 11) * 0x1.0p-53 < p; }
  template <class T>
  T pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(below(static_cast<int64_t>(v.size())))];
  }

 private:
  std::mt19937_64 g_;
};

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

std::vector<int64_t> bad_int32_values(int64_t capacity) { return bad_index_values(capacity); }

TensorView i32vec(GuardedBuffer& b, int64_t n) { return TensorView::vec(b.data(), DType::kI32, n); }

GuardedBuffer i32_buffer(const std::vector<int32_t>& v) {
  GuardedBuffer b(v.size() * sizeof(int32_t));
  for (size_t i = 0; i < v.size(); ++i) b.store<int32_t>(i, v[i]);
  return b;
}

int32_t clamp32(int64_t v) { return static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)); }

std::string hex(uint8_t v) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02X", v);
  return s;
}

/// Visibility (left, right) of every position of a request from random inclusive image spans.
/// Visibility arrays that must not be read (max_image_tokens == 0): arbitrary values, negatives included.
void fill_unread_visibility(Rng& r, std::vector<int32_t>& left, std::vector<int32_t>& right) {
  for (size_t t = 0; t < left.size(); ++t) {
    left[t] = static_cast<int32_t>(r.range(-3, 40));
    right[t] = static_cast<int32_t>(r.range(-3, 40));
  }
}

void image_visibility(Rng& r, int64_t seq_len, int64_t max_img, std::vector<int32_t>& left, std::vector<int32_t>& right) {
  left.assign(static_cast<size_t>(std::max<int64_t>(seq_len, 0)), 0);
  right.assign(left.size(), 0);
  if (max_img <= 0 || seq_len <= 0) return;
  int64_t p = r.below(4);
  while (p < seq_len) {
    const int64_t len = r.range(1, 2 * max_img + 2);
    const int64_t s = p, e = std::min(seq_len - 1, p + len - 1);
    for (int64_t q = s; q <= e; ++q) {
      left[q] = static_cast<int32_t>(std::min(q - s, max_img - 1));
      right[q] = static_cast<int32_t>(std::min(e - q, max_img));
    }
    p = e + 1 + r.range(0, 6);
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// GuardedBuffer and comparisons
// ---------------------------------------------------------------------------

GuardedBuffer::GuardedBuffer(size_t bytes, uint8_t fill) : storage_(bytes + 2 * kGuard, kGuardByte), size_(bytes) {
  std::memset(storage_.data() + kGuard, fill, bytes);
}

std::string GuardedBuffer::check_guards(const std::string& name) const {
  for (size_t i = 0; i < kGuard; ++i) {
    if (storage_[i] != kGuardByte)
      return name + ": guard byte " + std::to_string(kGuard - i) + " before the buffer changed to " + hex(storage_[i]);
    const size_t j = kGuard + size_ + i;
    if (storage_[j] != kGuardByte)
      return name + ": guard byte " + std::to_string(i) + " after the buffer changed to " + hex(storage_[j]);
  }
  return {};
}

std::string first_mismatch(std::span<const uint8_t> expected, std::span<const uint8_t> got, const std::string& what) {
  if (expected.size() != got.size())
    return what + ": size mismatch: expected " + std::to_string(expected.size()) + " bytes, got " +
           std::to_string(got.size());
  for (size_t i = 0; i < expected.size(); ++i)
    if (expected[i] != got[i])
      return what + ": first mismatch at byte " + std::to_string(i) + " of " + std::to_string(expected.size()) +
             ": expected " + hex(expected[i]) + ", got " + hex(got[i]);
  return {};
}

std::string compare_buffers(const std::vector<NamedBuffer>& expected, const std::vector<NamedBuffer>& got) {
  if (expected.size() != got.size()) return "different buffer lists";
  for (size_t i = 0; i < expected.size(); ++i) {
    // Payload first (indices relative to the tensor), then the whole storage (guards).
    std::string m = first_mismatch(expected[i].buffer->bytes(), got[i].buffer->bytes(), expected[i].name);
    if (m.empty())
      m = first_mismatch(expected[i].buffer->storage(), got[i].buffer->storage(), expected[i].name + " (with guards)");
    if (!m.empty()) return m;
  }
  return {};
}

std::string check_all_guards(const std::vector<NamedBuffer>& buffers) {
  for (const auto& b : buffers)
    if (std::string m = b.buffer->check_guards(b.name); !m.empty()) return m;
  return {};
}

std::vector<int64_t> bad_index_values(int64_t capacity) {
  return {INT32_MIN, -2, std::min<int64_t>(capacity, INT32_MAX), INT32_MAX};
}

// ---------------------------------------------------------------------------
// QuantizeTester
// ---------------------------------------------------------------------------

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
  a.error_count = count_errors_ ? reinterpret_cast<int32_t*>(error_count_.data()) : nullptr;
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

// ---------------------------------------------------------------------------
// GatherTester
// ---------------------------------------------------------------------------

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
    if (r.chance(0.5))  // realistic scales (what quantize writes); otherwise every byte 0..255 occurs
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
  const std::vector<int64_t> bad = bad_int32_values(num_blocks_);
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
  a.error_count = count_errors_ ? reinterpret_cast<int32_t*>(error_count_.data()) : nullptr;
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

// ---------------------------------------------------------------------------
// GlobalTopkTester
// ---------------------------------------------------------------------------

void GlobalTopkTester::Prepare() {
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
  const std::vector<int64_t> bad_req = bad_int32_values(R);
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
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < irs; ++c) {
      int64_t v = span > 0 ? r.below(span) : -1;
      if (r.chance(sentinel_fraction_)) v = r.pick(sentinels);
      else if (c >= K || r.chance(invalid_fraction_)) v = r.pick(bad_local);
      topk[t * irs + c] = static_cast<int32_t>(v);
    }
  topk_indices_ = i32_buffer(topk);
  out_ = GuardedBuffer(static_cast<size_t>(T * (K + out_row_pad_)) * 4);
  lens_ = GuardedBuffer(static_cast<size_t>(T) * 4);
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

GlobalTopkArgs GlobalTopkTester::Args() {
  GlobalTopkArgs a;
  const int64_t T = tokens_;
  a.topk_indices = TensorView::mat(topk_indices_.data(), DType::kI32, T, topk_, std::max<int64_t>(topk_ + in_row_pad_, 1));
  a.token_to_req = i32vec(token_to_req_, static_cast<int64_t>(token_to_req_.size() / 4));
  a.block_table = TensorView::mat(block_table_.data(), DType::kI32, requests_, bt_cols_, std::max<int64_t>(bt_cols_ + bt_row_pad_, 1));
  a.block_size = block_size_;
  a.is_valid_token = TensorView::vec(is_valid_.data(), DType::kBool, static_cast<int64_t>(is_valid_.size()));
  a.global_topk_indices = TensorView::mat(out_.data(), DType::kI32, T, topk_, std::max<int64_t>(topk_ + out_row_pad_, 1));
  a.topk_lens = i32vec(lens_, T);
  a.error_count = count_errors_ ? reinterpret_cast<int32_t*>(error_count_.data()) : nullptr;
  return a;
}

void GlobalTopkTester::Run(Backend& be) {
  Prepare();
  out_.fill(kFillByte);
  lens_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.compute_global_topk_indices_and_lens(Args());
}

int32_t GlobalTopkTester::expected_global(int64_t t, int64_t c, int64_t* faults) const {
  const int64_t r = request(t);
  if (r < 0 || r >= requests_) return -1;
  const int64_t l = local(t, c);
  if (l < 0) return -1;
  const int64_t col = l / block_size_;
  if (col >= bt_cols_) { ++*faults; return -1; }
  const int64_t blk = block_table_.load<int32_t>(r * (bt_cols_ + bt_row_pad_) + col);
  if (blk < 0) { ++*faults; return -1; }
  const int64_t v = blk * block_size_ + l % block_size_;
  if (v > INT32_MAX) { ++*faults; return -1; }
  return static_cast<int32_t>(v);
}

std::vector<NamedBuffer> GlobalTopkTester::buffers() const {
  return {{"topk_indices", &topk_indices_}, {"token_to_req", &token_to_req_}, {"block_table", &block_table_},
          {"is_valid_token", &is_valid_}, {"global_topk_indices", &out_}, {"topk_lens", &lens_},
          {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const GlobalTopkTester& t) {
  return os << "GlobalTopkTester().tokens(" << t.tokens_ << ").topk(" << t.topk_ << ").row_pads(" << t.in_row_pad_
            << ", " << t.out_row_pad_ << ").requests(" << t.requests_ << ").block_size(" << t.block_size_
            << ").table(" << t.bt_cols_ << ", " << t.bt_row_pad_ << ").sentinel_fraction(" << t.sentinel_fraction_
            << ").invalid_fraction(" << t.invalid_fraction_ << ").count_errors(" << t.count_errors_ << ").seed("
            << t.seed_ << ")";
}

// ---------------------------------------------------------------------------
// CombineTester
// ---------------------------------------------------------------------------

int64_t CombineTester::tokens() const { return T_; }

void CombineTester::Prepare() {
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
  T_ = (qsl[R] - qsl[0]) + extra_tokens_;
  N_ = max_seq / compress_ratio_ + r.below(4);
  M_ = N_ + max_seq + m_extra_;
  // Request-level corruption (invalid cases): the op must drop these requests' rows.
  for (int64_t b = 0; b < R; ++b) {
    if (!r.chance(invalid_fraction_)) continue;
    switch (r.below(4)) {
      case 0: sl[b] = static_cast<int32_t>((qsl[b + 1] - qsl[b]) - 1); break;  // seq_len shorter than the query
      case 1: gl[b] = sl[b] + 1; break;                                        // gather_len > seq_len
      case 2: gl[b] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, INT32_MIN})); break;
      default: qsl[b + 1] = qsl[b] - 1; break;                                 // reversed query range
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
    if (r.chance(0.2)) v = r.pick(sentinels);
    else if (r.chance(invalid_fraction_)) v = r.pick(bad);
    topk[i] = static_cast<int32_t>(v);
  }
  topk_indices_ = i32_buffer(topk);
  std::vector<int32_t> lv(T + r.below(2), 0), rv(lv.size(), 0);
  // Without image columns the arrays are not read: fill them with arbitrary values (negatives
  // included, which would be reported if read) so that reading them would show.
  if (visibility_ && !zero_visibility_ && max_image_tokens_ == 0) fill_unread_visibility(r, lv, rv);
  else if (visibility_ && !zero_visibility_) {
    for (int64_t b = 0; b < R; ++b) {
      std::vector<int32_t> pl, pr;
      image_visibility(r, sl[b], max_image_tokens_, pl, pr);
      const int64_t q0 = qsl[b] - base_, q1 = qsl[b + 1] - base_;
      for (int64_t t = std::max<int64_t>(q0, 0); t < std::min<int64_t>(q1, T); ++t) {
        const int64_t pos = sl[b] - (q1 - q0) + (t - q0);
        if (pos >= 0 && pos < static_cast<int64_t>(pl.size())) { lv[t] = pl[pos]; rv[t] = pr[pos]; }
      }
    }
    for (size_t t = 0; t < lv.size(); ++t) {
      if (r.chance(invalid_fraction_)) lv[t] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, -2, INT32_MIN}));
      if (r.chance(invalid_fraction_)) rv[t] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, -2, INT32_MIN}));
    }
  }
  left_ = i32_buffer(lv);
  right_ = i32_buffer(rv);
  out_ = GuardedBuffer(static_cast<size_t>(T * width()) * 4);
  lens_ = GuardedBuffer(static_cast<size_t>(T) * 4);
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

CombineArgs CombineTester::Args(int64_t w) {
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
  a.combined_indices = TensorView::mat(out_.data(), DType::kI32, T, w, std::max<int64_t>(width(), 1));
  a.combined_lens = i32vec(lens_, T);
  a.error_count = count_errors_ ? reinterpret_cast<int32_t*>(error_count_.data()) : nullptr;
  return a;
}

void CombineTester::Run(Backend& be) {
  Prepare();
  out_.fill(kFillByte);
  lens_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.combine_topk_swa_indices(Args(width()));
}

void CombineTester::RunWithWidth(Backend& be, int64_t w) {
  Prepare();
  // A scratch output of exactly [T, w]: a backend that stages extents before validating
  // (the CUDA one) must not read past the buffer.
  GuardedBuffer scratch(static_cast<size_t>(T_ * std::max<int64_t>(w, 1)) * 4);
  CombineArgs a = Args(w);
  a.combined_indices = TensorView::mat(scratch.data(), DType::kI32, T_, w, std::max<int64_t>(w, 1));
  be.combine_topk_swa_indices(a);
}

bool CombineTester::token_position(int64_t t, int64_t* b, int64_t* pos) const {
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

std::vector<NamedBuffer> CombineTester::buffers() const {
  return {{"topk_indices", &topk_indices_}, {"query_start_loc", &qsl_}, {"seq_lens", &seq_lens_},
          {"gather_lens", &gather_lens_}, {"left_visible", &left_}, {"right_visible", &right_},
          {"combined_indices", &out_}, {"combined_lens", &lens_}, {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const CombineTester& t) {
  return os << "CombineTester().requests(" << t.requests_ << ").max_query(" << t.max_query_ << ").max_context("
            << t.max_context_ << ").extra_tokens(" << t.extra_tokens_ << ").base(" << t.base_ << ").window("
            << t.window_ << ").compress_ratio(" << t.compress_ratio_ << ").topk(" << t.topk_ << ").topk_pad("
            << t.topk_pad_ << ").max_image_tokens(" << t.max_image_tokens_ << ").visibility(" << t.visibility_
            << ").zero_visibility(" << t.zero_visibility_ << ").topk_range(" << t.topk_range_ << ").m_extra(" << t.m_extra_ << ").invalid_fraction("
            << t.invalid_fraction_ << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")";
}

// ---------------------------------------------------------------------------
// MixedSparseTester
// ---------------------------------------------------------------------------

int64_t MixedSparseTester::prefill_tokens() const { return P_; }

void MixedSparseTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t D = decode_requests_, R = decode_requests_ + prefill_requests_;
  R_ = R;
  std::vector<int32_t> qsl(R + 1, 0), sl(R);
  int64_t max_seq = 0;
  for (int64_t b = 0; b < R; ++b) {
    const int64_t q = b < D ? 1 : r.range(1, max_query_);
    qsl[b + 1] = static_cast<int32_t>(qsl[b] + q);
    sl[b] = static_cast<int32_t>(q + r.range(0, max_context_));
    max_seq = std::max<int64_t>(max_seq, sl[b]);
  }
  P_ = qsl[R] - D;
  const int64_t rows = D + P_;
  std::vector<int32_t> owner(rows + r.below(2), 0);
  for (int64_t b = 0; b < R; ++b)
    for (int64_t t = qsl[b]; t < qsl[b + 1]; ++t) owner[t] = static_cast<int32_t>(b);
  const std::vector<int64_t> bad_req = bad_int32_values(R);
  for (int64_t t = 0; t < rows; ++t)
    if (r.chance(invalid_fraction_))
      owner[t] = static_cast<int32_t>(r.chance(0.3) && R > 1 ? (owner[t] + 1) % R : r.pick(bad_req));
  for (int64_t b = 0; b < R; ++b)  // seq_len shorter than the query (malformed request)
    if (r.chance(invalid_fraction_ / 2)) sl[b] = static_cast<int32_t>(qsl[b + 1] - qsl[b] - 1);
  qsl_ = i32_buffer(qsl);
  seq_lens_ = i32_buffer(sl);
  token_to_req_ = i32_buffer(owner);

  const std::vector<int64_t> bad_block = {INT32_MIN, -2, -1};
  auto make_table = [&](int64_t bs, int64_t need_positions, int64_t* cols_out) {
    int64_t cols = (need_positions + bs - 1) / bs + r.below(2);
    if (r.chance(invalid_fraction_)) cols = std::max<int64_t>(cols - 1, 0);  // too short a row
    *cols_out = cols;
    std::vector<int32_t> t(static_cast<size_t>(R * cols));
    for (auto& v : t) v = static_cast<int32_t>(r.chance(invalid_fraction_) ? r.pick(bad_block) : r.below(1000));
    return t;
  };
  swa_table_ = i32_buffer(make_table(swa_block_size_, max_seq, &swa_cols_));
  const int64_t max_comp = max_seq / compress_ratio_ + 1;
  if (separate_compressed_table_) comp_table_ = i32_buffer(make_table(compressed_block_size_, max_comp, &comp_cols_));
  else comp_table_ = GuardedBuffer(0), comp_cols_ = 0;

  const int64_t sw = swa_width();
  std::vector<int32_t> dswa(static_cast<size_t>(D * sw));
  const std::vector<int64_t> negatives = {-1, -1, -1, -2, INT32_MIN};
  for (auto& v : dswa) {
    int64_t x = r.below(100000);
    if (r.chance(0.2)) x = r.pick(negatives);
    else if (r.chance(invalid_fraction_)) x = INT32_MAX;  // overflows with a span above the block size
    v = static_cast<int32_t>(x);
  }
  decode_swa_ = i32_buffer(dswa);
  const int64_t dt = dct();
  std::vector<int32_t> dcomp(static_cast<size_t>(D * dt));
  for (int64_t t = 0; t < D; ++t)
    for (int64_t c = 0; c < dt; ++c) {
      const int64_t b = std::clamp<int64_t>(t, 0, R - 1);
      int64_t x = local_ ? r.below(sl[b] / compress_ratio_ + 1) : r.below(100000);
      if (r.chance(0.2)) x = r.pick(negatives);
      else if (r.chance(invalid_fraction_)) x = r.pick(std::vector<int64_t>{max_comp + 100, INT32_MAX});
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
  for (size_t i = 0; i < decode_valid_.size(); ++i) decode_valid_.data()[i] = r.chance(0.2) ? 0 : (r.chance(0.8) ? 1 : 7);

  const int64_t pc = prefill_cols_;
  std::vector<int32_t> ptopk(static_cast<size_t>(P_ * pc));
  for (int64_t p = 0; p < P_; ++p) {
    const int64_t t = D + p;
    const int64_t b = owner[t] >= 0 && owner[t] < R ? owner[t] : 0;
    const int64_t pos = std::max<int64_t>(sl[b] - (qsl[b + 1] - qsl[b]) + (t - qsl[b]), 0);
    for (int64_t c = 0; c < pc; ++c) {
      int64_t x = r.below((pos + 1) / compress_ratio_ + 1);
      if (r.chance(0.2)) x = r.pick(negatives);
      else if (r.chance(invalid_fraction_)) x = r.pick(std::vector<int64_t>{max_comp + 1000, INT32_MAX});
      ptopk[p * pc + c] = static_cast<int32_t>(x);
    }
  }
  prefill_topk_ = i32_buffer(ptopk);

  std::vector<int32_t> lv(rows + r.below(2), 0), rv(lv.size(), 0);
  if (visibility_ && !zero_visibility_ && max_image_tokens_ == 0) fill_unread_visibility(r, lv, rv);
  else if (visibility_ && !zero_visibility_) {
    for (int64_t b = 0; b < R; ++b) {
      std::vector<int32_t> pl, pr;
      image_visibility(r, sl[b], max_image_tokens_, pl, pr);
      const int64_t q = qsl[b + 1] - qsl[b];
      for (int64_t t = qsl[b]; t < qsl[b + 1]; ++t) {
        const int64_t pos = sl[b] - q + (t - qsl[b]);
        if (pos >= 0 && pos < static_cast<int64_t>(pl.size())) { lv[t] = pl[pos]; rv[t] = pr[pos]; }
      }
    }
    for (size_t t = 0; t < lv.size(); ++t) {
      if (r.chance(invalid_fraction_)) lv[t] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, -2, INT32_MIN}));
      if (r.chance(invalid_fraction_)) rv[t] = static_cast<int32_t>(r.pick(std::vector<int64_t>{-1, -2, INT32_MIN}));
    }
  }
  left_ = i32_buffer(lv);
  right_ = i32_buffer(rv);
  out_ = GuardedBuffer(static_cast<size_t>(rows * width()) * 4);
  lens_ = GuardedBuffer(static_cast<size_t>(rows) * 4);
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

MixedSparseArgs MixedSparseTester::Args(int64_t w) {
  MixedSparseArgs a;
  const int64_t D = decode_tokens(), rows = D + P_;
  a.decode_swa_indices = TensorView::mat(decode_swa_.data(), DType::kI32, D, swa_width());
  if (decode_topk_ >= 0) {
    a.decode_compressed_indices = TensorView::mat(decode_comp_.data(), DType::kI32, D, dct(), std::max<int64_t>(dct(), 1));
    if (decode_lens_) a.decode_compressed_topk_lens = i32vec(decode_lens_buf_, static_cast<int64_t>(decode_lens_buf_.size() / 4));
  }
  a.prefill_topk_indices = TensorView::mat(prefill_topk_.data(), DType::kI32, P_, prefill_cols_, std::max<int64_t>(prefill_cols_, 1));
  a.query_start_loc = i32vec(qsl_, R_ + 1);
  a.seq_lens = i32vec(seq_lens_, R_);
  a.token_to_req = i32vec(token_to_req_, static_cast<int64_t>(token_to_req_.size() / 4));
  a.swa_block_table = TensorView::mat(swa_table_.data(), DType::kI32, R_, swa_cols_, std::max<int64_t>(swa_cols_, 1));
  a.swa_block_size = swa_block_size_;
  if (separate_compressed_table_)
    a.compressed_block_table = TensorView::mat(comp_table_.data(), DType::kI32, R_, comp_cols_, std::max<int64_t>(comp_cols_, 1));
  a.compressed_block_size = compressed_block_size_;
  a.window_size = window_;
  a.compress_ratio = compress_ratio_;
  a.topk = topk_;
  a.decode_compressed_indices_are_local = local_;
  a.decode_is_valid_token = TensorView::vec(decode_valid_.data(), DType::kBool, static_cast<int64_t>(decode_valid_.size()));
  if (swa_span_ > 0) a.swa_block_span = swa_span_;
  if (compressed_span_ > 0) a.compressed_block_span = compressed_span_;
  if (visibility_) {
    a.prefill_left_visible = i32vec(left_, static_cast<int64_t>(left_.size() / 4));
    a.prefill_right_visible = i32vec(right_, static_cast<int64_t>(right_.size() / 4));
  }
  a.max_image_tokens = max_image_tokens_;
  a.sparse_indices = TensorView::mat(out_.data(), DType::kI32, rows, w, std::max<int64_t>(width(), 1));
  a.sparse_topk_lens = i32vec(lens_, rows);
  a.error_count = count_errors_ ? reinterpret_cast<int32_t*>(error_count_.data()) : nullptr;
  return a;
}

void MixedSparseTester::Run(Backend& be) {
  Prepare();
  out_.fill(kFillByte);
  lens_.fill(kFillByte);
  error_count_.store<int32_t>(0, 0);
  be.build_flashinfer_mixed_sparse_indices(Args(width()));
}

void MixedSparseTester::RunWithWidth(Backend& be, int64_t w) {
  Prepare();
  GuardedBuffer scratch(static_cast<size_t>(rows() * std::max<int64_t>(w, 1)) * 4);  // see CombineTester::RunWithWidth
  MixedSparseArgs a = Args(w);
  a.sparse_indices = TensorView::mat(scratch.data(), DType::kI32, rows(), w, std::max<int64_t>(w, 1));
  be.build_flashinfer_mixed_sparse_indices(a);
}

std::vector<NamedBuffer> MixedSparseTester::buffers() const {
  return {{"decode_swa_indices", &decode_swa_}, {"decode_compressed_indices", &decode_comp_},
          {"decode_compressed_topk_lens", &decode_lens_buf_}, {"prefill_topk_indices", &prefill_topk_},
          {"query_start_loc", &qsl_}, {"seq_lens", &seq_lens_}, {"token_to_req", &token_to_req_},
          {"swa_block_table", &swa_table_}, {"compressed_block_table", &comp_table_},
          {"decode_is_valid_token", &decode_valid_}, {"prefill_left_visible", &left_},
          {"prefill_right_visible", &right_}, {"sparse_indices", &out_}, {"sparse_topk_lens", &lens_},
          {"error_count", &error_count_}};
}

std::ostream& operator<<(std::ostream& os, const MixedSparseTester& t) {
  return os << "MixedSparseTester().decode_requests(" << t.decode_requests_ << ").prefill_requests("
            << t.prefill_requests_ << ").max_query(" << t.max_query_ << ").max_context(" << t.max_context_
            << ").window(" << t.window_ << ").swa_width_pad(" << t.swa_width_pad_ << ").compress_ratio("
            << t.compress_ratio_ << ").topk(" << t.topk_ << ").prefill_cols(" << t.prefill_cols_ << ").decode_topk("
            << t.decode_topk_ << ").decode_lens(" << t.decode_lens_ << ").local(" << t.local_ << ").block_sizes("
            << t.swa_block_size_ << ", " << t.compressed_block_size_ << ").spans(" << t.swa_span_ << ", "
            << t.compressed_span_ << ").separate_compressed_table(" << t.separate_compressed_table_
            << ").max_image_tokens(" << t.max_image_tokens_ << ").visibility(" << t.visibility_
            << ").zero_visibility(" << t.zero_visibility_ << ").invalid_fraction(" << t.invalid_fraction_
            << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")";
}

}  // namespace dsv4kv::conformance
