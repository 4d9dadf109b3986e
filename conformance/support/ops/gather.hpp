/// \file gather.hpp
/// \brief The tester of dequantize_and_gather_k_cache (one call, its buffers and its spec expectations).
///
/// Shared pieces (GuardedBuffer, Rng, comparisons) are in tester_common.hpp; the RapidCheck
/// generator and the properties of this operation are in gather_properties.hpp.
#pragma once

#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// \brief One call of dequantize_and_gather_k_cache over a cache of random bytes.
///
/// Valid cases: 0 <= gather_len <= seq_len <= block-table coverage, offset +
/// gather_len <= out_rows, block-table entries in [0, num_blocks). Invalid cases
/// replace an `invalid_fraction` of lengths and table entries by out-of-range values.
class GatherTester : public TesterBase<GatherTester> {
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
  /// Every block as quantize writes it (scale bytes of typical keys, no NaN code), instead of half
  /// the blocks with arbitrary bytes: the bench's inputs, which a real cache resembles.
  GatherTester& realistic_cache(bool v) { realistic_cache_ = v; return *this; }
  /// Block-table columns, extra rows beyond the requests, and padding between rows.
  GatherTester& table(int64_t cols, int64_t extra_rows, int64_t row_pad) { bt_cols_ = cols; bt_extra_rows_ = extra_rows; bt_row_pad_ = row_pad; return *this; }
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
  bool fnuz_ = false, with_gather_lens_ = true, realistic_cache_ = false;
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

}  // namespace dsv4kv::conformance
