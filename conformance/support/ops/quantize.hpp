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
};

}  // namespace dsv4kv::conformance
