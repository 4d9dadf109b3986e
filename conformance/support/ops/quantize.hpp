/// \file quantize.hpp
/// \brief The tester of quantize_and_insert_k_cache (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in quantize_properties.hpp.
#pragma once

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of quantize_and_insert_k_cache.
///
/// Slots are drawn from `seed`: unique valid slots (a random injection into the
/// cache), then a `pad_fraction` of -1 and an `invalid_fraction` of
/// out-of-range values; `duplicates(true)` draws slots with repetition.
class QuantizeTester : public TesterBase<QuantizeTester> {
 public:
  QuantizeTester& tokens(int64_t v) { tokens_ = v; return *this; }
  /// k rows beyond `tokens` (data-parallel padding; never read).
  QuantizeTester& extra_k_rows(int64_t v) { extra_k_rows_ = v; return *this; }
  /// Extra elements between k rows (row stride = 512 + pad).
  QuantizeTester& k_row_pad(int64_t v) { k_row_pad_ = v; return *this; }
  QuantizeTester& block_size(int64_t v) { block_size_ = v; return *this; }
  /// Number of cache blocks; 0 = enough for every token plus one.
  QuantizeTester& num_blocks(int64_t v) { num_blocks_ = v; return *this; }
  /// Block stride in bytes; 0 = vLLM's allocation (block_size*584 rounded up to 576).
  QuantizeTester& stride(int64_t v) { stride_ = v; return *this; }
  /// View each cache row as block_size*584 columns (true) or the whole stride (false).
  QuantizeTester& tight_cache_rows(bool v) { tight_cache_rows_ = v; return *this; }
  QuantizeTester& fnuz(bool v) { fnuz_ = v; return *this; }
  /// Let NoPE values be NaN or +-inf.
  QuantizeTester& nonfinite(bool v) { nonfinite_ = v; return *this; }
  QuantizeTester& pad_fraction(double v) { pad_fraction_ = v; return *this; }
  QuantizeTester& duplicates(bool v) { duplicates_ = v; return *this; }
  /// Explicit slot mapping (its size becomes the token count).
  QuantizeTester& slots(std::vector<int64_t> v);

  int64_t tokens() const { return tokens_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const;
  int64_t stride() const;
  bool fnuz() const { return fnuz_; }
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
  uint8_t cache_byte(int64_t block, int64_t offset) const { return cache_.data()[block * stride() + offset]; }
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
  bool tight_cache_rows_ = false, fnuz_ = false, nonfinite_ = false, duplicates_ = false;
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

}  // namespace dsv4kv::conformance
