/// \file testers.hpp
/// \brief Fluent case builders for the conformance properties (XNNPACK-style testers).
///
/// Each tester describes one call of one operation by a handful of parameters
/// with sensible defaults, e.g.
///
///     QuantizeTester().tokens(17).block_size(61).stride(37378).fnuz(true).Run(backend);
///
/// and owns every buffer the call touches. Bulk contents (key values, cache
/// bytes, index values) are drawn from a 64-bit `seed` with a fixed PRNG, so the
/// parameters printed by `operator<<` reproduce a case exactly. Every buffer is
/// surrounded by guard bytes (kGuardByte) that no backend may touch, and every
/// buffer an operation writes is pre-filled with kFillByte (0xA5) before each
/// run, so "untouched" bytes can be checked after the call.
///
/// Testers are copyable: the differential properties copy one case, run it on
/// two backends and compare all buffers byte for byte (`buffers()`).
///
/// The RapidCheck generators of random valid and invalid cases live in
/// tester_generators.hpp (so this library does not depend on RapidCheck).
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend.hpp"

namespace dsv4kv::conformance {

/// Pre-fill of every buffer an operation writes: bytes still holding it were not written.
inline constexpr uint8_t kFillByte = 0xA5;
/// Guard bytes around every buffer: outside every tensor's extent, never written.
inline constexpr uint8_t kGuardByte = 0x3C;
/// Block sizes every generator covers (1, 2 and 7 stress the index arithmetic, 61 is
/// odd and not a divisor of anything, 64 and 128 are the sizes CUDA may specialize).
inline constexpr int64_t kTestBlockSizes[] = {1, 2, 7, 16, 61, 64, 128};

/// \brief A byte buffer with guard margins on both sides.
///
/// `data()` is 64-byte aligned relative to the allocation (which itself is at
/// least 16-byte aligned), so every element type is naturally aligned.
class GuardedBuffer {
 public:
  /// Guard bytes before and after the payload.
  static constexpr size_t kGuard = 64;

  GuardedBuffer() : GuardedBuffer(0) {}
  /// \param bytes payload size  \param fill initial payload byte
  explicit GuardedBuffer(size_t bytes, uint8_t fill = kFillByte);

  uint8_t* data() { return storage_.data() + kGuard; }
  const uint8_t* data() const { return storage_.data() + kGuard; }
  size_t size() const { return size_; }
  /// Payload bytes.
  std::span<const uint8_t> bytes() const { return {data(), size_}; }
  /// Payload plus guards.
  std::span<const uint8_t> storage() const { return {storage_.data(), storage_.size()}; }
  /// Sets every payload byte to `v` (guards untouched).
  void fill(uint8_t v) { std::memset(data(), v, size_); }

  /// Element `i` of the payload read as T (memcpy: no aliasing assumptions).
  template <class T>
  T load(size_t i) const {
    T v;
    std::memcpy(&v, data() + i * sizeof(T), sizeof(T));
    return v;
  }
  /// Writes element `i` of the payload as T.
  template <class T>
  void store(size_t i, T v) {
    std::memcpy(data() + i * sizeof(T), &v, sizeof(T));
  }

  /// Empty string when both guards are intact, else a description of the first changed guard byte.
  std::string check_guards(const std::string& name) const;

 private:
  std::vector<uint8_t> storage_;
  size_t size_ = 0;
};

/// A buffer with the name a mismatch report uses.
struct NamedBuffer {
  std::string name;
  const GuardedBuffer* buffer;
};

/// Empty string when `expected` and `got` are identical, else
/// "<what>: first mismatch at byte I of N: expected 0xEE, got 0xGG" (or a size mismatch).
std::string first_mismatch(std::span<const uint8_t> expected, std::span<const uint8_t> got,
                           const std::string& what);

/// Compares two cases' buffers pairwise (payload and guards) by name; empty string when identical.
std::string compare_buffers(const std::vector<NamedBuffer>& expected, const std::vector<NamedBuffer>& got);

/// Checks every buffer's guards; empty string when all are intact.
std::string check_all_guards(const std::vector<NamedBuffer>& buffers);

/// Out-of-range values every invalid-input generator injects (FlashMLA's tests/lib.py list):
/// INT_MIN, -2, `capacity` (one past the last valid value) and INT_MAX.
std::vector<int64_t> bad_index_values(int64_t capacity);

// ---------------------------------------------------------------------------
// quantize_and_insert_k_cache
// ---------------------------------------------------------------------------

/// \brief One call of quantize_and_insert_k_cache.
///
/// Slots are drawn from `seed`: unique valid slots (a random injection into the
/// cache), then a `pad_fraction` of -1 and an `invalid_fraction` of
/// out-of-range values; `duplicates(true)` draws slots with repetition.
class QuantizeTester {
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
  QuantizeTester& invalid_fraction(double v) { invalid_fraction_ = v; return *this; }
  QuantizeTester& duplicates(bool v) { duplicates_ = v; return *this; }
  QuantizeTester& count_errors(bool v) { count_errors_ = v; return *this; }
  QuantizeTester& seed(uint64_t v) { seed_ = v; prepared_ = false; return *this; }
  /// Explicit slot mapping (its size becomes the token count).
  QuantizeTester& slots(std::vector<int64_t> v);

  int64_t tokens() const { return tokens_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const;
  int64_t stride() const;
  bool fnuz() const { return fnuz_; }
  bool duplicates() const { return duplicates_; }
  bool count_errors_enabled() const { return count_errors_; }
  Fp8Format format() const { return fnuz_ ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn; }
  int64_t capacity() const { return num_blocks() * block_size_; }

  /// Draws the inputs from the seed (idempotent; Run() calls it).
  void Prepare();
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
  bool tight_cache_rows_ = false, fnuz_ = false, nonfinite_ = false, duplicates_ = false, count_errors_ = true;
  double pad_fraction_ = 0.1, invalid_fraction_ = 0.0;
  uint64_t seed_ = 1;
  std::optional<std::vector<int64_t>> explicit_slots_;
  bool prepared_ = false;
  GuardedBuffer k_, slots_, cache_, error_count_;
};

// ---------------------------------------------------------------------------
// dequantize_and_gather_k_cache
// ---------------------------------------------------------------------------

/// \brief One call of dequantize_and_gather_k_cache over a cache of random bytes.
///
/// Valid cases: 0 <= gather_len <= seq_len <= block-table coverage, offset +
/// gather_len <= out_rows, block-table entries in [0, num_blocks). Invalid cases
/// replace an `invalid_fraction` of lengths and table entries by out-of-range values.
class GatherTester {
 public:
  GatherTester& requests(int64_t v) { requests_ = v; return *this; }
  /// Extra leading-dimension entries of `out` beyond the requests (never written).
  GatherTester& extra_out_batch(int64_t v) { extra_out_batch_ = v; return *this; }
  GatherTester& out_rows(int64_t v) { out_rows_ = v; return *this; }
  /// Padding elements between out rows, and between out batches.
  GatherTester& out_pad(int64_t row_pad, int64_t batch_pad) { out_row_pad_ = row_pad; out_batch_pad_ = batch_pad; return *this; }
  GatherTester& offset(int64_t v) { offset_ = v; return *this; }
  GatherTester& block_size(int64_t v) { block_size_ = v; return *this; }
  GatherTester& num_blocks(int64_t v) { num_blocks_ = v; return *this; }
  /// 0 = vLLM's block stride.
  GatherTester& stride(int64_t v) { stride_ = v; return *this; }
  GatherTester& fnuz(bool v) { fnuz_ = v; return *this; }
  GatherTester& with_gather_lens(bool v) { with_gather_lens_ = v; return *this; }
  /// Block-table columns, extra rows beyond the requests, and padding between rows.
  GatherTester& table(int64_t cols, int64_t extra_rows, int64_t row_pad) { bt_cols_ = cols; bt_extra_rows_ = extra_rows; bt_row_pad_ = row_pad; return *this; }
  GatherTester& invalid_fraction(double v) { invalid_fraction_ = v; return *this; }
  GatherTester& count_errors(bool v) { count_errors_ = v; return *this; }
  GatherTester& seed(uint64_t v) { seed_ = v; prepared_ = false; return *this; }
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
  bool count_errors_enabled() const { return count_errors_; }
  Fp8Format format() const { return fnuz_ ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn; }

  void Prepare();
  /// Resets `out` to 0xA5 and the counter to 0, then runs the operation.
  void Run(Backend& be);

  int32_t seq_len(int64_t b) const { return seq_lens_.load<int32_t>(b); }
  int32_t gather_len(int64_t b) const { return gather_lens_.load<int32_t>(b); }
  int32_t table_entry(int64_t b, int64_t col) const { return block_table_.load<int32_t>(b * bt_row_stride() + col); }
  uint8_t cache_byte(int64_t block, int64_t offset) const { return cache_.data()[block * stride() + offset]; }
  /// Element index of out[b, row, col] in the output buffer.
  int64_t out_index(int64_t b, int64_t row, int64_t col) const { return b * out_batch_stride() + row * out_row_stride() + col; }
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
  int64_t out_row_stride() const { return spec::kHeadDim + out_row_pad_; }
  int64_t out_batch_stride() const { return out_rows_ * out_row_stride() + out_batch_pad_; }
  int64_t bt_row_stride() const { return bt_cols_ + bt_row_pad_; }

  int64_t requests_ = 3, extra_out_batch_ = 0, out_rows_ = 80, out_row_pad_ = 0, out_batch_pad_ = 0, offset_ = 0;
  int64_t block_size_ = 64, num_blocks_ = 4, stride_ = 0, bt_cols_ = 2, bt_extra_rows_ = 0, bt_row_pad_ = 0;
  bool fnuz_ = false, with_gather_lens_ = true, count_errors_ = true;
  double invalid_fraction_ = 0.0;
  uint64_t seed_ = 1;
  std::optional<std::pair<std::vector<int32_t>, std::vector<int32_t>>> explicit_lengths_;
  bool prepared_ = false;
  GuardedBuffer cache_, seq_lens_, gather_lens_, block_table_, out_, error_count_;
};

// ---------------------------------------------------------------------------
// compute_global_topk_indices_and_lens
// ---------------------------------------------------------------------------

/// \brief One call of compute_global_topk_indices_and_lens.
class GlobalTopkTester {
 public:
  GlobalTopkTester& tokens(int64_t v) { tokens_ = v; return *this; }
  GlobalTopkTester& topk(int64_t v) { topk_ = v; return *this; }
  /// Padding elements between rows of topk_indices and of the output.
  GlobalTopkTester& row_pads(int64_t in_pad, int64_t out_pad) { in_row_pad_ = in_pad; out_row_pad_ = out_pad; return *this; }
  GlobalTopkTester& requests(int64_t v) { requests_ = v; return *this; }
  GlobalTopkTester& block_size(int64_t v) { block_size_ = v; return *this; }
  GlobalTopkTester& table(int64_t cols, int64_t row_pad) { bt_cols_ = cols; bt_row_pad_ = row_pad; return *this; }
  /// Share of -1 sentinels (and other negatives) among the top-k entries.
  GlobalTopkTester& sentinel_fraction(double v) { sentinel_fraction_ = v; return *this; }
  GlobalTopkTester& invalid_fraction(double v) { invalid_fraction_ = v; return *this; }
  GlobalTopkTester& count_errors(bool v) { count_errors_ = v; return *this; }
  GlobalTopkTester& seed(uint64_t v) { seed_ = v; prepared_ = false; return *this; }

  int64_t tokens() const { return tokens_; }
  int64_t topk() const { return topk_; }
  int64_t block_size() const { return block_size_; }
  int64_t requests() const { return requests_; }
  bool count_errors_enabled() const { return count_errors_; }
  /// Elements from one output row to the next (topk + padding).
  int64_t out_row_stride() const { return topk_ + out_row_pad_; }

  void Prepare();
  void Run(Backend& be);

  int32_t local(int64_t t, int64_t c) const { return topk_indices_.load<int32_t>(t * (topk_ + in_row_pad_) + c); }
  int32_t request(int64_t t) const { return token_to_req_.load<int32_t>(t); }
  bool valid_token(int64_t t) const { return is_valid_.data()[t] != 0; }
  int32_t global(int64_t t, int64_t c) const { return out_.load<int32_t>(t * (topk_ + out_row_pad_) + c); }
  int32_t len(int64_t t) const { return lens_.load<int32_t>(t); }
  int32_t error_count() const { return error_count_.load<int32_t>(0); }

  /// The spec's value of out[t, c] by direct arithmetic (adds faults to `*faults`).
  int32_t expected_global(int64_t t, int64_t c, int64_t* faults) const;
  std::vector<NamedBuffer> buffers() const;
  const GuardedBuffer& out_buffer() const { return out_; }
  const GuardedBuffer& lens_buffer() const { return lens_; }

  friend std::ostream& operator<<(std::ostream& os, const GlobalTopkTester& t);

 private:
  GlobalTopkArgs Args();
  int64_t tokens_ = 9, topk_ = 64, in_row_pad_ = 0, out_row_pad_ = 0, requests_ = 3, block_size_ = 64;
  int64_t bt_cols_ = 4, bt_row_pad_ = 0;
  double sentinel_fraction_ = 0.2, invalid_fraction_ = 0.0;
  bool count_errors_ = true;
  uint64_t seed_ = 1;
  bool prepared_ = false;
  GuardedBuffer topk_indices_, token_to_req_, block_table_, is_valid_, out_, lens_, error_count_;
};

// ---------------------------------------------------------------------------
// combine_topk_swa_indices
// ---------------------------------------------------------------------------

/// \brief One call of combine_topk_swa_indices.
///
/// Requests get random query lengths (at most `max_query`), contexts (at most
/// `max_context`) and gather lengths; `extra_tokens` tokens lie beyond every
/// request. Visibility arrays, when present, come from random image spans
/// (DeepSeek's rule), or are all zero with `zero_visibility(true)`.
class CombineTester {
 public:
  CombineTester& requests(int64_t v) { requests_ = v; return *this; }
  CombineTester& max_query(int64_t v) { max_query_ = v; return *this; }
  CombineTester& max_context(int64_t v) { max_context_ = v; return *this; }
  CombineTester& extra_tokens(int64_t v) { extra_tokens_ = v; return *this; }
  /// query_start_loc[0] (the op rebases by it).
  CombineTester& base(int32_t v) { base_ = v; return *this; }
  CombineTester& window(int64_t v) { window_ = v; return *this; }
  CombineTester& compress_ratio(int64_t v) { compress_ratio_ = v; return *this; }
  CombineTester& topk(int64_t v) { topk_ = v; return *this; }
  /// Extra columns of topk_indices beyond topk.
  CombineTester& topk_pad(int64_t v) { topk_pad_ = v; return *this; }
  CombineTester& max_image_tokens(int64_t v) { max_image_tokens_ = v; return *this; }
  CombineTester& visibility(bool v) { visibility_ = v; return *this; }
  CombineTester& zero_visibility(bool v) { zero_visibility_ = v; return *this; }
  /// Valid top-k values drawn from [0, v) regardless of N (vLLM's own test draws [0, 4096) with a
  /// small N); 0 = below N.
  CombineTester& topk_range(int64_t v) { topk_range_ = v; return *this; }
  /// Extra columns of M beyond what the requests need (M = N + max seq_len + extra).
  CombineTester& m_extra(int64_t v) { m_extra_ = v; return *this; }
  CombineTester& invalid_fraction(double v) { invalid_fraction_ = v; return *this; }
  CombineTester& count_errors(bool v) { count_errors_ = v; return *this; }
  CombineTester& seed(uint64_t v) { seed_ = v; prepared_ = false; return *this; }

  int64_t tokens() const;
  int64_t requests() const { return requests_; }
  int64_t window() const { return window_; }
  int64_t compress_ratio() const { return compress_ratio_; }
  int64_t topk() const { return topk_; }
  int64_t max_image_tokens() const { return max_image_tokens_; }
  bool has_visibility() const { return visibility_; }
  int64_t width() const { return spec::combine_row_width(topk_, window_, max_image_tokens_); }
  int64_t M() const { return M_; }
  int64_t N() const { return N_; }

  void Prepare();
  void Run(Backend& be);
  /// Runs with the row width overridden (to check that validate rejects it); throws what the backend throws.
  void RunWithWidth(Backend& be, int64_t width);

  int32_t qsl(int64_t i) const { return qsl_.load<int32_t>(i); }
  int32_t seq_len(int64_t b) const { return seq_lens_.load<int32_t>(b); }
  int32_t gather_len(int64_t b) const { return gather_lens_.load<int32_t>(b); }
  int32_t topk_in(int64_t t, int64_t c) const { return topk_indices_.load<int32_t>(t * (topk_ + topk_pad_) + c); }
  int32_t left(int64_t t) const { return left_.load<int32_t>(t); }
  int32_t right(int64_t t) const { return right_.load<int32_t>(t); }
  int32_t out(int64_t t, int64_t c) const { return out_.load<int32_t>(t * width() + c); }
  int32_t len(int64_t t) const { return lens_.load<int32_t>(t); }
  int32_t error_count() const { return error_count_.load<int32_t>(0); }
  const GuardedBuffer& out_buffer() const { return out_; }
  const GuardedBuffer& lens_buffer() const { return lens_; }

  /// For a well-formed request layout: the request owning token t and t's position, or false.
  bool token_position(int64_t t, int64_t* b, int64_t* pos) const;
  std::vector<NamedBuffer> buffers() const;

  friend std::ostream& operator<<(std::ostream& os, const CombineTester& t);

 private:
  CombineArgs Args(int64_t width);
  int64_t requests_ = 2, max_query_ = 20, max_context_ = 40, extra_tokens_ = 0;
  int32_t base_ = 0;
  int64_t window_ = 16, compress_ratio_ = 4, topk_ = 16, topk_pad_ = 0, max_image_tokens_ = 0, m_extra_ = 0;
  int64_t topk_range_ = 0;
  bool visibility_ = false, zero_visibility_ = false, count_errors_ = true;
  double invalid_fraction_ = 0.0;
  uint64_t seed_ = 1;
  bool prepared_ = false;
  int64_t M_ = 0, N_ = 0, T_ = 0;
  GuardedBuffer topk_indices_, qsl_, seq_lens_, gather_lens_, left_, right_, out_, lens_, error_count_;
};

// ---------------------------------------------------------------------------
// build_flashinfer_mixed_sparse_indices
// ---------------------------------------------------------------------------

/// \brief One call of build_flashinfer_mixed_sparse_indices.
///
/// `decode_requests` requests of one query token each come first, then
/// `prefill_requests` requests of up to `max_query` tokens; query_start_loc
/// counts global token indices from 0.
class MixedSparseTester {
 public:
  MixedSparseTester& decode_requests(int64_t v) { decode_requests_ = v; return *this; }
  MixedSparseTester& prefill_requests(int64_t v) { prefill_requests_ = v; return *this; }
  MixedSparseTester& max_query(int64_t v) { max_query_ = v; return *this; }
  MixedSparseTester& max_context(int64_t v) { max_context_ = v; return *this; }
  MixedSparseTester& window(int64_t v) { window_ = v; return *this; }
  /// decode_swa_indices width = window + pad.
  MixedSparseTester& swa_width_pad(int64_t v) { swa_width_pad_ = v; return *this; }
  MixedSparseTester& compress_ratio(int64_t v) { compress_ratio_ = v; return *this; }
  MixedSparseTester& topk(int64_t v) { topk_ = v; return *this; }
  /// prefill_topk_indices columns (may be below or above topk).
  MixedSparseTester& prefill_cols(int64_t v) { prefill_cols_ = v; return *this; }
  /// decode_compressed_indices columns; -1 = absent.
  MixedSparseTester& decode_topk(int64_t v) { decode_topk_ = v; return *this; }
  MixedSparseTester& decode_lens(bool v) { decode_lens_ = v; return *this; }
  MixedSparseTester& local(bool v) { local_ = v; return *this; }
  MixedSparseTester& block_sizes(int64_t swa, int64_t compressed) { swa_block_size_ = swa; compressed_block_size_ = compressed; return *this; }
  /// Block spans (0 = absent).
  MixedSparseTester& spans(int64_t swa, int64_t compressed) { swa_span_ = swa; compressed_span_ = compressed; return *this; }
  MixedSparseTester& separate_compressed_table(bool v) { separate_compressed_table_ = v; return *this; }
  MixedSparseTester& max_image_tokens(int64_t v) { max_image_tokens_ = v; return *this; }
  MixedSparseTester& visibility(bool v) { visibility_ = v; return *this; }
  MixedSparseTester& zero_visibility(bool v) { zero_visibility_ = v; return *this; }
  MixedSparseTester& invalid_fraction(double v) { invalid_fraction_ = v; return *this; }
  MixedSparseTester& count_errors(bool v) { count_errors_ = v; return *this; }
  MixedSparseTester& seed(uint64_t v) { seed_ = v; prepared_ = false; return *this; }

  int64_t decode_tokens() const { return decode_requests_; }
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
  void Run(Backend& be);
  void RunWithWidth(Backend& be, int64_t width);

  int32_t decode_swa(int64_t t, int64_t c) const { return decode_swa_.load<int32_t>(t * swa_width() + c); }
  int32_t decode_comp(int64_t t, int64_t c) const { return decode_comp_.load<int32_t>(t * dct() + c); }
  int32_t prefill_topk_in(int64_t p, int64_t c) const { return prefill_topk_.load<int32_t>(p * prefill_cols_ + c); }
  int32_t out(int64_t t, int64_t c) const { return out_.load<int32_t>(t * width() + c); }
  int32_t len(int64_t t) const { return lens_.load<int32_t>(t); }
  int32_t error_count() const { return error_count_.load<int32_t>(0); }
  const GuardedBuffer& out_buffer() const { return out_; }
  const GuardedBuffer& lens_buffer() const { return lens_; }
  std::vector<NamedBuffer> buffers() const;

  friend std::ostream& operator<<(std::ostream& os, const MixedSparseTester& t);

 private:
  MixedSparseArgs Args(int64_t width);
  int64_t decode_requests_ = 2, prefill_requests_ = 2, max_query_ = 12, max_context_ = 40;
  int64_t window_ = 8, swa_width_pad_ = 0, compress_ratio_ = 4, topk_ = 8, prefill_cols_ = 8, decode_topk_ = -1;
  bool decode_lens_ = false, local_ = false, separate_compressed_table_ = false;
  int64_t swa_block_size_ = 16, compressed_block_size_ = 16, swa_span_ = 0, compressed_span_ = 0;
  int64_t max_image_tokens_ = 0;
  bool visibility_ = false, zero_visibility_ = false, count_errors_ = true;
  double invalid_fraction_ = 0.0;
  uint64_t seed_ = 1;
  bool prepared_ = false;
  int64_t P_ = 0, R_ = 0, swa_cols_ = 0, comp_cols_ = 0;
  GuardedBuffer decode_swa_, decode_comp_, decode_lens_buf_, prefill_topk_, qsl_, seq_lens_, token_to_req_,
      swa_table_, comp_table_, decode_valid_, left_, right_, out_, lens_, error_count_;
};

}  // namespace dsv4kv::conformance
