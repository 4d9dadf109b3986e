// Scalar reference of quantize_and_insert_k_cache (spec "quantize_and_insert_k_cache").
//
// Steps of the spec, per token t < slot_mapping.size(0):
//   1. slot -> (block, position), or skip (-1 silently, other out-of-range slots reported);
//   2. per tile of 64 NoPE values: amax over the non-NaN |x|, TileScale, scale byte;
//   3. per element: the FP8 code (non-finite elements are also reported);
//   4. the 64 RoPE values copied bit-exactly;
//   5. the scale pad byte written as 0.
// Steps 2-5 are the 584-byte record's; a V4.1 record (spec "Cache records", Quantize) encodes
// each group of its row with quantize_group instead. Nothing else in the cache is written.
#include <cstring>

#include "dsv4kv/reference.hpp"
#include "views.hpp"

namespace dsv4kv::reference {
namespace {

/// spec "Cache records", Quantize: every group of a V4.1 record's row, values then scale byte.
/// Returns the row's non-finite elements (stored, but reported as data errors).
int64_t encode_v41_token(spec::Record record, const uint16_t* row, uint8_t* block, int64_t B, int64_t pos) {
  const spec::RecordLayout rec = spec::record_layout(record);
  const int group_bytes = rec.value_bytes() / rec.num_scales();
  int nonfinite = 0;
  for (int g = 0; g < rec.num_scales(); ++g)
    block[rec.scale_offset(B, pos, g)] =
        spec::quantize_group(record, row + g * rec.group, block + rec.data_offset(pos) + g * group_bytes, nonfinite);
  return nonfinite;
}

}  // namespace

void quantize_and_insert_k_cache(const QuantizeInsertArgs& args) {
  const CacheGeometry cache = validate(args);
  const auto k = detail::mat_view<const uint16_t>(args.k);                // [T_k, 512] bf16 bits
  const auto slots = detail::vec_view<const int64_t>(args.slot_mapping);  // [T] int64
  const int64_t B = cache.block_size;
  const spec::Fp8Format fmt = args.format;
  int64_t errors = 0;

  for (Eigen::Index t = 0; t < slots.size(); ++t) {
    // spec: quantize_and_insert_k_cache, step 1. Only T = slot_mapping.size(0) rows of k are
    // read (data-parallel padding rows beyond it are not).
    const int64_t slot = slots(t);
    if (slot == -1) continue;  // padding slot: skipped, not an error
    // Compare block indices, not slots: num_blocks * block_size could overflow.
    if (slot < 0 || spec::slot_block(slot, B) >= cache.num_blocks) {
      ++errors;
      continue;
    }
    const int64_t pos = spec::slot_pos(slot, B);
    uint8_t* block = cache.base + spec::block_offset(spec::slot_block(slot, B), cache.block_stride);
    const uint16_t* row = k.row(t).data();  // unit inner stride (validate)
    if (args.record != spec::Record::kFp8DsMla) {
      errors += encode_v41_token(args.record, row, block, B, pos);
      continue;
    }

    for (int tile = 0; tile < spec::kNumTiles; ++tile) {
      const uint16_t* x = row + tile * spec::kTileSize;

      // spec: quantize_and_insert_k_cache, step 2. For non-NaN bf16 values the magnitude
      // order equals the order of the sign-cleared bit patterns (inf included), so the
      // exact fp32 amax is the bf16 value of the largest such pattern.
      uint16_t amax_bits = 0;
      bool any_number = false;
      for (int i = 0; i < spec::kTileSize; ++i) {
        if (spec::bf16_is_nan(x[i])) continue;
        any_number = true;
        const uint16_t a = spec::bf16_abs_bits(x[i]);
        if (a > amax_bits) amax_bits = a;
      }
      // An all-NaN tile has a NaN amax; tile_scale() floors it like the kernel does.
      const float amax = any_number ? spec::bf16_to_f32(amax_bits) : spec::f32_from_bits(0x7FC00000u);
      const spec::TileScale ts = spec::tile_scale(amax, fmt);
      block[spec::scale_offset(B, pos, tile)] = ts.byte;

      // spec: quantize_and_insert_k_cache, step 3.
      uint8_t* codes = block + spec::fp8_code_offset(pos, tile * spec::kTileSize);
      for (int i = 0; i < spec::kTileSize; ++i) {
        codes[i] = spec::quantize_element(x[i], ts, fmt);
        if (spec::bf16_is_nonfinite(x[i])) ++errors;  // stored, but reported as a data error
      }
    }

    // spec: quantize_and_insert_k_cache, step 4. memcpy: the destination is only 2-byte
    // aligned (block strides need only be even), and the bits must not pass through a float.
    std::memcpy(block + spec::rope_offset(pos), row + spec::kNopeDim, spec::kRopeBytes);

    // spec: quantize_and_insert_k_cache, step 5.
    block[spec::scale_offset(B, pos, spec::kScalePadIndex)] = 0;
  }
  detail::add_errors(args.error_count, errors);
}

}  // namespace dsv4kv::reference
