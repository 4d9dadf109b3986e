/// \file quantize.hpp
/// \brief The tester of quantize_and_insert_k_cache (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in quantize_properties.hpp.
#pragma once

#include <algorithm>
#include <climits>
#include <ostream>

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of quantize_and_insert_k_cache.
///
/// Slots are drawn from `seed`: unique valid slots (a random injection into the
/// cache), then a `pad_fraction` of -1 and an `invalid_fraction` of
/// out-of-range values; `duplicates(true)` draws slots with repetition.
class QuantizeTester : public TesterBase<QuantizeTester> {
 public:
  QuantizeTester& tokens(int64_t v) {
    tokens_ = v;
    return *this;
  }
  /// k rows beyond `tokens` (data-parallel padding; never read).
  QuantizeTester& extra_k_rows(int64_t v) {
    extra_k_rows_ = v;
    return *this;
  }
  /// Extra elements between k rows (row stride = 512 + pad).
  QuantizeTester& k_row_pad(int64_t v) {
    k_row_pad_ = v;
    return *this;
  }
  QuantizeTester& block_size(int64_t v) {
    block_size_ = v;
    return *this;
  }
  /// Number of cache blocks; 0 = enough for every token plus one.
  QuantizeTester& num_blocks(int64_t v) {
    num_blocks_ = v;
    return *this;
  }
  /// Block stride in bytes; 0 = vLLM's allocation (block_size*584 rounded up to 576).
  QuantizeTester& stride(int64_t v) {
    stride_ = v;
    return *this;
  }
  /// Bytes (even) between the cache buffer's 16-byte aligned start and the cache view: a view that
  /// starts off a 16-byte boundary (the bytes before it keep their fill, like the block tails).
  QuantizeTester& cache_lead(int64_t v) {
    cache_lead_ = v;
    return *this;
  }
  /// View each cache row as block_size*584 columns (true) or the whole stride (false).
  QuantizeTester& tight_cache_rows(bool v) {
    tight_cache_rows_ = v;
    return *this;
  }
  QuantizeTester& fnuz(bool v) {
    fnuz_ = v;
    return *this;
  }
  /// The record tokens are stored as (spec "Cache records"); its head_dim is k's width.
  QuantizeTester& record(Record v) {
    record_ = v;
    prepared_ = false;
    return *this;
  }
  /// Let NoPE values be NaN or +-inf.
  QuantizeTester& nonfinite(bool v) {
    nonfinite_ = v;
    return *this;
  }
  QuantizeTester& pad_fraction(double v) {
    pad_fraction_ = v;
    return *this;
  }
  QuantizeTester& duplicates(bool v) {
    duplicates_ = v;
    return *this;
  }
  /// Explicit slot mapping (its size becomes the token count).
  QuantizeTester& slots(std::vector<int64_t> v);

  int64_t tokens() const { return tokens_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const;
  int64_t stride() const;
  bool fnuz() const { return fnuz_; }
  Record record() const { return record_; }
  spec::RecordLayout layout() const { return spec::record_layout(record_); }
  int head_dim() const { return layout().head_dim; }
  bool duplicates() const { return duplicates_; }
  Fp8Format format() const { return fnuz_ ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn; }
  int64_t capacity() const { return num_blocks() * block_size_; }

  /// Draws the inputs from the seed (idempotent; Run() calls it).
  void Prepare();
  /// The argument struct of the call (views into this tester's buffers), after Prepare().
  QuantizeInsertArgs args() {
    Prepare();
    return Args();
  }
  /// Resets the cache to 0xA5 and the counter to 0, then runs the operation on `be`.
  void Run(Backend& be);

  /// bf16 bits of k[t, col].
  uint16_t k(int64_t t, int col) const;
  /// slot_mapping[t].
  int64_t slot(int64_t t) const;
  /// The cache after Run().
  const GuardedBuffer& cache() const { return cache_; }
  /// Byte `offset` of block `block`.
  uint8_t cache_byte(int64_t block, int64_t offset) const {
    return cache_.data()[cache_lead_ + block * stride() + offset];
  }
  /// Bytes of the cache buffer before the view.
  int64_t cache_lead() const { return cache_lead_; }
  /// The error counter after Run() (0 when count_errors is false).
  int32_t error_count() const { return error_count_.load<int32_t>(0); }

  /// For each slot of the cache, the token that (last) wrote it, or -1.
  std::vector<int64_t> writer_of_slot() const;
  /// The error count the spec requires: out-of-range slots other than -1, plus
  /// non-finite NoPE elements of every token with a valid slot.
  int32_t expected_error_count() const;
  /// Every buffer, inputs included, for differential comparison.
  std::vector<NamedBuffer> buffers() const;

  friend std::ostream& operator<<(std::ostream& os, const QuantizeTester& t);

 private:
  QuantizeInsertArgs Args();

  int64_t tokens_ = 17, extra_k_rows_ = 0, k_row_pad_ = 0, block_size_ = 64, num_blocks_ = 0, stride_ = 0;
  int64_t cache_lead_ = 0;
  bool tight_cache_rows_ = false, fnuz_ = false, nonfinite_ = false, duplicates_ = false;
  Record record_ = Record::kFp8DsMla;
  double pad_fraction_ = 0.1;
  std::optional<std::vector<int64_t>> explicit_slots_;
  GuardedBuffer k_, slots_, cache_, error_count_;
};

/// The tester of QuantizeInsertArgs (see TesterOf in tester_common.hpp).
template <>
struct TesterOf<QuantizeInsertArgs> {
  using type = QuantizeTester;

  // fuzz/fuzz_ops.cpp: how a caller may build the arguments (`In`: its fuzz input reader,
  // `Arena`: its owner of one buffer per view; fuzz/README.md).
  template <class In, class Arena>
  static void fuzz_args(In& g, Arena& a, QuantizeInsertArgs& q) {
    q.block_size = g.scalar(1, 8);
    const int64_t rows = g.range(0, 6);
    q.k = a.tensor(DType::kBF16, {rows, spec::kHeadDim}, false, a.bf16_values());
    const int64_t B = q.block_size > 0 && q.block_size <= 16 ? q.block_size : 1;
    q.k_cache = a.cache_view(q.block_size);
    q.slot_mapping = a.tensor(DType::kI64, {g.range(0, rows + 1)}, false, a.indices(4 * B));
    q.is_ue8m0 = !g.coin(32);
    q.format = static_cast<spec::Fp8Format>(g.range(0, 1));
    q.record = fuzz_record(g);
  }

  // fuzz/fuzz_validate.cpp: how a hostile caller builds the arguments, and which views validate()
  // checks and which elements the operation may touch once it accepts (`Check`: the harness's
  // independent model of the access pattern; fuzz/README.md).
  template <class In, class Arena>
  static void hostile_args(In& g, Arena& a, QuantizeInsertArgs& q) {
    q.block_size = g.scalar(1, 8);
    const int64_t rows = g.size(), T = g.coin(4) ? g.size() : (rows > 0 ? rows - g.range(0, 1) : 0);
    q.k = a.tensor(DType::kBF16, {rows, spec::kHeadDim}, false, 64);
    const int64_t blocks = g.size();
    const int64_t bs = q.block_size >= 1 && q.block_size <= 16 ? q.block_size : 1;
    const int64_t per_block = g.coin(8) ? g.size() : spec::block_data_bytes(bs) + 2 * g.range(0, 3);
    if (g.coin(3))
      q.k_cache = a.tensor(DType::kU8, {blocks, bs, per_block / bs}, false, 256);
    else
      q.k_cache = a.tensor(DType::kU8, {blocks, per_block}, false, 256);
    q.slot_mapping = a.tensor(DType::kI64, {T}, false, 4 * bs);
    q.is_ue8m0 = !g.coin(32);
    q.format = static_cast<spec::Fp8Format>(g.range(0, 1));
    q.record = fuzz_record(g);
  }

  template <class Check>
  static auto hostile_footprint(Check& chk, const QuantizeInsertArgs& q, const CacheGeometry& geo) {
    const int64_t t = q.slot_mapping.shape[0];
    chk.inside(q.k, "k", {t, spec::kHeadDim});
    chk.inside(q.slot_mapping, "slot_mapping", {t});
    chk.cache_inside(q.k_cache, geo);
    return chk.footprint({&q.k, &q.k_cache, &q.slot_mapping}, chk.work({&q.k, &q.slot_mapping}));
  }
};

// The tester's definitions (header-only, so that an operation's tester is one file).
namespace quantize_detail {

inline uint16_t bf16(bool neg, int exp, int mant) {
  return static_cast<uint16_t>((neg ? 0x8000 : 0) | ((exp & 0xFF) << 7) | (mant & 0x7F));
}

/// One 64-value tile of NoPE key values from one of several adversarial classes.
inline void fill_tile(Rng& r, uint16_t* x, bool nonfinite) {
  const int cls = static_cast<int>(r.below(nonfinite ? 10 : 7));
  const int e0 = static_cast<int>(r.range(100, 150));
  auto ordinary = [&](int top) {
    return bf16(r.chance(0.5), std::max<int>(1, top - static_cast<int>(r.below(13))), static_cast<int>(r.below(128)));
  };
  for (int i = 0; i < spec::kTileSize; ++i) {
    switch (cls) {
      case 0: x[i] = r.chance(0.05) ? bf16(r.chance(0.5), 0, 0) : ordinary(e0); break;  // spread of magnitudes
      case 1: x[i] = bf16(r.chance(0.5), 0, 0); break;                                  // all +-0
      case 2: x[i] = ordinary(e0); break;                                               // amax set below
      case 3:
        x[i] = bf16(r.chance(0.5), static_cast<int>(r.below(4)), static_cast<int>(r.below(128)));
        break;   // subnormal/tiny
      case 4: {  // any finite pattern
        uint16_t b = static_cast<uint16_t>(r.bits());
        if ((b & 0x7F80) == 0x7F80) b = static_cast<uint16_t>(b & ~0x0080);
        x[i] = b;
        break;
      }
      case 5:
        x[i] = bf16(r.chance(0.5), e0 - static_cast<int>(r.below(6)), static_cast<int>(r.below(16)) << 3);
        break;  // fp8 ties
      case 6:
        x[i] = bf16(r.chance(0.5), static_cast<int>(r.range(245, 254)), static_cast<int>(r.below(128)));
        break;  // near bf16 max
      case 7:   // NaNs sprinkled
        x[i] = r.chance(0.15) ? bf16(r.chance(0.5), 255, static_cast<int>(r.range(1, 127))) : ordinary(e0);
        break;
      case 8: x[i] = ordinary(e0); break;  // one inf set below
      default:
        x[i] = bf16(r.chance(0.5), 255, r.chance(0.5) ? 0 : static_cast<int>(r.range(1, 127)));
        break;  // all non-finite
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

}  // namespace quantize_detail

inline QuantizeTester& QuantizeTester::slots(std::vector<int64_t> v) {
  tokens_ = static_cast<int64_t>(v.size());
  explicit_slots_ = std::move(v);
  prepared_ = false;
  return *this;
}

inline int64_t QuantizeTester::num_blocks() const {
  return num_blocks_ > 0 ? num_blocks_ : (tokens_ + block_size_ - 1) / block_size_ + 1;
}

inline int64_t QuantizeTester::stride() const {
  return stride_ > 0 ? stride_ : layout().vllm_block_stride(block_size_);
}

inline void QuantizeTester::Prepare() {
  if (prepared_) return;
  Rng r(seed_);
  const int64_t rows = tokens_ + extra_k_rows_;
  const int64_t rs = head_dim() + k_row_pad_;
  const spec::RecordLayout rec = layout();
  k_ = GuardedBuffer(static_cast<size_t>(rows * rs) * 2);
  for (int64_t t = 0; t < rows; ++t) {
    // Quantized values in 64-value tiles of the adversarial classes (a V4.1 group is a part of a
    // tile), the bf16 part any pattern.
    uint16_t row[spec::kHeadDim];
    for (int j = 0; j * spec::kTileSize < rec.quant_dim; ++j)
      quantize_detail::fill_tile(r, row + j * spec::kTileSize, nonfinite_);
    for (int i = rec.quant_dim; i < rec.head_dim; ++i) row[i] = static_cast<uint16_t>(r.bits());
    for (int i = 0; i < head_dim(); ++i) k_.store<uint16_t>(t * rs + i, row[i]);
    for (int64_t i = head_dim(); i < rs; ++i) k_.store<uint16_t>(t * rs + i, static_cast<uint16_t>(r.bits()));
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
      if (pad)
        v = -1;
      else if (bad_slot)
        v = r.pick(bad);
      s.push_back(v);
    }
  }
  slots_ = GuardedBuffer(s.size() * 8);
  for (size_t i = 0; i < s.size(); ++i) slots_.store<int64_t>(i, s[i]);
  cache_ = GuardedBuffer(static_cast<size_t>(cache_lead_ + num_blocks() * stride()));
  error_count_ = GuardedBuffer(4, 0);
  prepared_ = true;
}

inline QuantizeInsertArgs QuantizeTester::Args() {
  QuantizeInsertArgs a;
  a.k = TensorView::mat(k_.data(), DType::kBF16, tokens_ + extra_k_rows_, head_dim(), head_dim() + k_row_pad_);
  const int64_t cols = tight_cache_rows_ ? layout().block_data_bytes(block_size_) : stride();
  a.k_cache = TensorView::mat(cache_.data() + cache_lead_, DType::kU8, num_blocks(), cols, stride());
  a.slot_mapping = TensorView::vec(slots_.data(), DType::kI64, tokens_);
  a.block_size = block_size_;
  a.format = format();
  a.record = record_;
  a.error_count = counter(error_count_);
  return a;
}

inline void QuantizeTester::Run(Backend& be) {
  Prepare();
  run_case(be, Args(), error_count_, {&cache_});
}

inline uint16_t QuantizeTester::k(int64_t t, int col) const {
  return k_.load<uint16_t>(t * (head_dim() + k_row_pad_) + col);
}
inline int64_t QuantizeTester::slot(int64_t t) const { return slots_.load<int64_t>(t); }

inline std::vector<int64_t> QuantizeTester::writer_of_slot() const {
  std::vector<int64_t> w(static_cast<size_t>(capacity()), -1);
  for (int64_t t = 0; t < tokens_; ++t) {
    const int64_t s = slot(t);
    if (s >= 0 && s < capacity()) w[s] = t;
  }
  return w;
}

inline int32_t QuantizeTester::expected_error_count() const {
  int32_t n = 0;
  for (int64_t t = 0; t < tokens_; ++t) {
    const int64_t s = slot(t);
    if (s == -1) continue;
    if (s < 0 || s >= capacity()) {
      ++n;
      continue;
    }
    for (int i = 0; i < layout().quant_dim; ++i) n += spec::bf16_is_nonfinite(k(t, i)) ? 1 : 0;
  }
  return n;
}

inline std::vector<NamedBuffer> QuantizeTester::buffers() const {
  return {{"k", &k_}, {"slot_mapping", &slots_}, {"k_cache", &cache_}, {"error_count", &error_count_}};
}

inline std::ostream& operator<<(std::ostream& os, const QuantizeTester& t) {
  return os << "QuantizeTester().tokens(" << t.tokens_ << ").extra_k_rows(" << t.extra_k_rows_ << ").k_row_pad("
            << t.k_row_pad_ << ").block_size(" << t.block_size_ << ").num_blocks(" << t.num_blocks_ << ").stride("
            << t.stride_ << ").cache_lead(" << t.cache_lead_ << ").tight_cache_rows(" << t.tight_cache_rows_
            << ").fnuz(" << t.fnuz_ << ").record(Record(" << static_cast<int>(t.record_) << ")).nonfinite("
            << t.nonfinite_ << ").pad_fraction(" << t.pad_fraction_ << ").invalid_fraction(" << t.invalid_fraction_
            << ").duplicates(" << t.duplicates_ << ").count_errors(" << t.count_errors_ << ").seed(" << t.seed_ << ")"
            << (t.explicit_slots_ ? " [explicit slots]" : "");
}

}  // namespace dsv4kv::conformance
