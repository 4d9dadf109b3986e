// The demo's dequantize_and_gather_k_cache step: every request back out of the cache (request 1
// only its last two thirds), into rows [offset, offset + gather_len) of a padded output.
#pragma once

#include "common.hpp"

namespace dsv4kv::tools::demo {

template <>
struct DemoStep<DequantizeGatherArgs> {
  static constexpr const char* kOutputs = "gathered rows";
  int32_t errors = 0;
  std::vector<int32_t> seq_lens, gather_lens;
  int64_t out_rows = 0, offset = 1;
  std::vector<uint16_t> gathered;

  DemoStep(const Batch& b, std::mt19937_64&) {
    // Whole sequences, except request 1 gathers its last two thirds.
    for (int64_t r = 0; r < b.R; ++r) {
      seq_lens.push_back(static_cast<int32_t>(b.lens[r]));
      gather_lens.push_back(static_cast<int32_t>(r == 1 ? b.lens[r] - b.lens[r] / 3 : b.lens[r]));
      out_rows = std::max<int64_t>(out_rows, b.lens[r] + offset + 1);
    }
  }

  void run(Backend& be, Batch& b, Context& ctx) {
    gathered.assign(static_cast<size_t>(b.R * out_rows * S::kHeadDim), kFill16);
    DequantizeGatherArgs g;
    g.out = TensorView::cube(gathered.data(), DType::kBF16, b.R, out_rows, S::kHeadDim);
    g.k_cache = ctx.cache_view(b);
    g.seq_lens = vec32(seq_lens);
    g.gather_lens = vec32(gather_lens);
    g.block_table = TensorView::mat(b.block_table.data(), DType::kI32, b.R, b.bt_cols);
    g.block_size = b.B;
    g.offset = offset;
    g.format = ctx.fmt;
    g.error_count = &errors;
    be.dequantize_and_gather_k_cache(g);
  }

  // Largest |dequant(quant(x)) - x| the spec allows: half the FP8 spacing around x / 2^e, times 2^e.
  static double round_trip_bound(float x, int e, S::Fp8Format fmt) {
    const int min_exp = 1 - S::fp8_traits(fmt).bias;  // exponent of the smallest normal FP8 value
    const double y = std::fabs(static_cast<double>(x)) * std::ldexp(1.0, -e);
    const int k = y > 0 ? std::max(static_cast<int>(std::floor(std::log2(y))), min_exp) : min_exp;
    return std::ldexp(1.0, k - 4 + e);
  }

  void check(const Batch& b, const Context& ctx, Report& rep) const {
    const int64_t B = b.B;
    // Round trip, RoPE bits, untouched rows.
    int64_t bad_nope = 0, bad_rope = 0, bad_untouched = 0, rows = 0;
    double worst = 0;
    for (int64_t r = 0; r < b.R; ++r) {
      const int64_t g = gather_lens[r], sl = seq_lens[r];
      int64_t first_token = 0;
      for (int64_t q = 0; q < r; ++q) first_token += b.lens[q];
      for (int64_t row = 0; row < out_rows; ++row) {
        const uint16_t* out = &gathered[(r * out_rows + row) * S::kHeadDim];
        const int64_t i = row - offset;
        if (i < 0 || i >= g) {
          for (int d = 0; d < S::kHeadDim; ++d) bad_untouched += out[d] != kFill16;
          continue;
        }
        ++rows;
        const int64_t t = first_token + (sl - g + i);
        const uint16_t* x = &b.k[t * S::kHeadDim];
        const int64_t base = S::block_offset(S::slot_block(b.slots[t], B), b.stride);
        for (int d = 0; d < S::kNopeDim; ++d) {
          const int e =
              ctx.cache[base + S::scale_offset(B, S::slot_pos(b.slots[t], B), d / S::kTileSize)] - S::kScaleBias;
          const double err = std::fabs(static_cast<double>(S::bf16_to_f32(out[d])) - S::bf16_to_f32(x[d]));
          const double bound = round_trip_bound(S::bf16_to_f32(x[d]), e, ctx.fmt);
          if (!(err <= bound)) ++bad_nope;
          if (bound > 0) worst = std::max(worst, err / bound);
        }
        for (int d = S::kNopeDim; d < S::kHeadDim; ++d) bad_rope += out[d] != x[d];
      }
    }
    rep.check(bad_nope == 0, "round trip within half an FP8 step of the tile scale",
              fmt::format("{} rows, {} values out of bound, worst error = {:.3f} x bound", rows, bad_nope, worst));
    rep.check(bad_rope == 0, "RoPE values bit-exact after the round trip", fmt::format("{} mismatches", bad_rope));
    rep.check(bad_untouched == 0, "gather leaves rows outside [offset, offset + gather_len) untouched",
              fmt::format("{} changed values", bad_untouched));
    rep.check(errors == 0, "gather error_count", fmt::format("{}", errors));
  }

  int64_t first_difference(const DemoStep& o, const Context&, const Context&) const {
    return demo::first_difference(gathered, o.gathered);
  }
};

}  // namespace dsv4kv::tools::demo
