// Re-encoding a cache from one record to another: sparse gather, then quantize, a chunk of whole
// blocks at a time (spec/records.md, "Converting a cache").
#include "convert.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace dsv4kv::conformance {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error(kConvertName, what); }

/// Blocks [first, first + count) of a cache view: the same view, moved by `first` block strides.
TensorView blocks_of(const TensorView& cache, int64_t first, int64_t count) {
  TensorView v = cache;
  v.data = static_cast<uint8_t*>(cache.data) + first * cache.stride[0];
  v.shape[0] = count;
  return v;
}

void check_cache(const char* name, const TensorView& t) {
  if (!t.present() || t.dtype != DType::kU8 || (t.ndim != 2 && t.ndim != 3))
    fail(std::string(name) + " must be a uint8 tensor of rank 2 or 3");
  if (!t.extent_bytes().ok) fail(std::string(name) + ": its extent overflows int64");
}

}  // namespace

ConvertReport convert_k_cache(Backend& be, const TensorView& src, const TensorView& dst, const ConvertOptions& o) {
  if (!spec::record_known(o.from) || !spec::record_known(o.to)) fail("from and to must be known records");
  const spec::RecordLayout from = spec::record_layout(o.from), to = spec::record_layout(o.to);
  if (from.head_dim != to.head_dim)
    fail(std::string("records ") + spec::record_name(o.from) + " (" + std::to_string(from.head_dim) + " values) and " +
         spec::record_name(o.to) + " (" + std::to_string(to.head_dim) + " values) hold keys of different widths");
  if (o.block_size < 1) fail("block_size must be >= 1, got " + std::to_string(o.block_size));
  if (o.chunk_tokens < 1) fail("chunk_tokens must be >= 1, got " + std::to_string(o.chunk_tokens));
  check_cache("src", src);
  check_cache("dst", dst);
  const int64_t num_blocks = src.shape[0];
  if (dst.shape[0] < num_blocks)
    fail("dst has " + std::to_string(dst.shape[0]) + " blocks, fewer than src's " + std::to_string(num_blocks));
  const spec::Checked total = spec::checked_mul(num_blocks, o.block_size);
  if (!total.ok) fail("num_blocks * block_size overflows int64");

  // Whole blocks per step, so that each operation sees a cache view of its own blocks (slots
  // relative to the chunk) and the CUDA backend stages only those.
  const int64_t chunk_blocks = std::max<int64_t>(1, o.chunk_tokens / o.block_size);
  const spec::Checked row_values = spec::checked_mul(
      spec::checked_mul(std::min(chunk_blocks, std::max<int64_t>(num_blocks, 1)), o.block_size), from.head_dim);
  if (!row_values.within(0, int64_t{1} << 34))
    fail("chunk_tokens * head_dim is too large for the bf16 work array (at most 2^34 values)");

  // The FP8 format applies to the 584-byte record only; the V4.1 records are e4m3fn by definition.
  const auto format_of = [&](spec::Record r) {
    return r == spec::Record::kFp8DsMla ? o.format : spec::Fp8Format::kE4M3Fn;
  };
  std::vector<uint16_t> rows(static_cast<size_t>(row_values.value));
  std::vector<int64_t> slots;
  ConvertReport report;
  int64_t nb = 0;  // blocks of this step; b0 + nb <= num_blocks, so the step never overflows
  for (int64_t b0 = 0; b0 < num_blocks; b0 += nb) {
    nb = std::min(chunk_blocks, num_blocks - b0);
    const int64_t n = nb * o.block_size;  // <= row_values / head_dim: no overflow
    slots.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = i;
    const TensorView out = TensorView::mat(rows.data(), DType::kBF16, n, from.head_dim);
    const TensorView slot_view = TensorView::vec(slots.data(), DType::kI64, n);
    int32_t count = 0;

    SparseGatherArgs g;
    g.out = out;
    g.k_cache = blocks_of(src, b0, nb);
    g.slot_indices = slot_view;
    g.block_size = o.block_size;
    g.format = format_of(o.from);
    g.record = o.from;
    g.error_count = &count;
    be.run(g);

    QuantizeInsertArgs q;
    q.k = out;
    q.k_cache = blocks_of(dst, b0, nb);
    q.slot_mapping = slot_view;
    q.block_size = o.block_size;
    q.format = format_of(o.to);
    q.record = o.to;
    q.error_count = &count;
    be.run(q);

    report.tokens += n;
    report.reports += count;
  }
  return report;
}

}  // namespace dsv4kv::conformance
