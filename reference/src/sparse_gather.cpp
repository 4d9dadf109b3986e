// Scalar reference of dequantize_and_gather_k_cache_sparse (spec "dequantize_and_gather_k_cache_sparse").
//
// Steps of the spec, per entry i < N = slot_indices.size(0):
//   1. s = slot_indices[i] (int32 or int64); s = -1 is padding: skipped,
//      not reported;
//   2. any other s < 0, or s >= num_blocks * B, is out of range: skipped and reported once;
//   3. out[i, :] = the token at position s % B of block s / B, dequantized exactly as
//      dequantize_and_gather_k_cache steps 4 and 5 do (one shared function).
// No other byte of `out` is written: the rows of skipped entries and rows >= N keep their contents.
#include "dsv4kv/reference.hpp"
#include "views.hpp"

namespace dsv4kv::reference {
namespace {

/// slot_indices[i] as int64, whichever of the two dtypes validate() accepted.
int64_t slot_at(const TensorView& slots, int64_t i) {
  if (slots.dtype == DType::kI32) return detail::vec_view<const int32_t>(slots)(i);
  return detail::vec_view<const int64_t>(slots)(i);
}

}  // namespace

void dequantize_and_gather_k_cache_sparse(const SparseGatherArgs& args) {
  const CacheGeometry cache = validate(args);
  const int64_t N = args.slot_indices.shape[0];
  auto out = detail::mat_view<uint16_t>(args.out);  // [>= N, 512] bf16 bits, any row stride
  const int64_t B = cache.block_size;
  int64_t errors = 0;

  for (int64_t i = 0; i < N; ++i) {
    // spec: dequantize_and_gather_k_cache_sparse, step 1.
    const int64_t slot = slot_at(args.slot_indices, i);
    if (slot == -1) continue;
    // spec: dequantize_and_gather_k_cache_sparse, step 2. Compare blocks, not slots: no product.
    if (slot < 0 || spec::slot_block(slot, B) >= cache.num_blocks) {
      ++errors;
      continue;
    }
    // spec: dequantize_and_gather_k_cache_sparse, step 3 (unit inner stride: validate).
    const uint8_t* block = cache.base + spec::block_offset(spec::slot_block(slot, B), cache.block_stride);
    errors += detail::dequantize_token(block, B, spec::slot_pos(slot, B), args.format, args.record, out.row(i).data());
  }
  detail::add_errors(args.error_count, errors);
}

}  // namespace dsv4kv::reference
