// Scalar reference of dequantize_and_gather_k_cache (spec "dequantize_and_gather_k_cache").
//
// Steps of the spec, per request b < R = seq_lens.size(0):
//   1. gather length g (gather_lens[b], or seq_lens[b] when absent); a malformed request
//      (seq_len < 0, g outside [0, seq_len]) is skipped and reported once;
//   2. rows i < g whose output row offset + i lies beyond out.shape[1] are skipped and reported;
//   3. row i reads cache position pos = seq_len - g + i through the block table (real row
//      stride); a column outside the table row or a block outside the cache is skipped and
//      reported;
//   4. out[b, offset + i, 64j + k] = dequantize_element(code, scale byte j);
//   5. out[b, offset + i, 448 + k] = the RoPE bits, copied.
// No other byte of `out` is written.
#include <algorithm>

#include "dsv4kv/reference.hpp"
#include "views.hpp"

namespace dsv4kv::reference {

void dequantize_and_gather_k_cache(const DequantizeGatherArgs& args) {
  const CacheGeometry cache = validate(args);
  const auto seq_lens = detail::vec_view<const int32_t>(args.seq_lens);  // [R] int32
  const bool has_gather_lens = args.gather_lens.present();
  const auto gather_lens = has_gather_lens ? detail::vec_view<const int32_t>(args.gather_lens)
                                           : detail::absent_vec<const int32_t>();  // [>= R] int32
  const auto block_table = detail::mat_view<const int32_t>(args.block_table);      // [>= R, max_blocks]
  const int64_t B = cache.block_size;
  const int64_t out_rows = args.out.shape[1];
  const spec::Fp8Format fmt = args.format;
  int64_t errors = 0;

  for (Eigen::Index b = 0; b < seq_lens.size(); ++b) {
    // spec: dequantize_and_gather_k_cache, step 1.
    const int64_t seq_len = seq_lens(b);
    const int64_t g = has_gather_lens ? int64_t{gather_lens(b)} : seq_len;
    if (seq_len < 0 || g < 0 || g > seq_len) {
      ++errors;
      continue;
    }

    // spec: dequantize_and_gather_k_cache, step 2 (counted in bulk, not row by row).
    const int64_t fit = std::min(g, out_rows - args.offset);
    errors += g - fit;

    auto out = detail::slice_view<uint16_t>(args.out, b);  // [out_rows, 512] bf16 bits of request b
    for (int64_t i = 0; i < fit; ++i) {
      // spec: dequantize_and_gather_k_cache, step 3.
      const int64_t pos = seq_len - g + i;
      const int64_t col = pos / B;
      if (col >= block_table.cols()) {
        ++errors;
        continue;
      }
      const int64_t blk = block_table(b, col);
      if (blk < 0 || blk >= cache.num_blocks) {
        ++errors;
        continue;
      }
      const int64_t p = pos % B;
      const uint8_t* block = cache.base + spec::block_offset(blk, cache.block_stride);
      // spec: dequantize_and_gather_k_cache, steps 4 and 5 (unit inner stride: validate).
      errors += detail::dequantize_token(block, B, p, fmt, args.record, out.row(args.offset + i).data());
    }
  }
  detail::add_errors(args.error_count, errors);
}

}  // namespace dsv4kv::reference
