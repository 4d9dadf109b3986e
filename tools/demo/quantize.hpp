// The demo's quantize_and_insert_k_cache step: every token of the batch (and one -1 padding slot)
// into the cache, which the later steps read.
#pragma once

#include "common.hpp"

namespace dsv4kv::tools::demo {

template <>
struct DemoStep<QuantizeInsertArgs> {
  static constexpr const char* kOutputs = "k_cache";
  int32_t errors = 0;

  DemoStep(const Batch&, std::mt19937_64&) {}

  void run(Backend& be, Batch& b, Context& ctx) {
    ctx.cache.assign(static_cast<size_t>(b.num_blocks * b.stride), kFill);
    QuantizeInsertArgs q;
    q.k = TensorView::mat(b.k.data(), DType::kBF16, b.T + 2, S::kHeadDim);
    q.k_cache = ctx.cache_view(b);
    q.slot_mapping = TensorView::vec(b.slots.data(), DType::kI64, static_cast<int64_t>(b.slots.size()));
    q.block_size = b.B;
    q.format = ctx.fmt;
    q.error_count = &errors;
    be.quantize_and_insert_k_cache(q);
  }

  void check(const Batch& b, const Context& ctx, Report& rep) const {
    const int64_t B = b.B;
    const std::vector<uint8_t>& cache = ctx.cache;
    // Which cache bytes quantize may write: the records of the slots it was given.
    std::vector<uint8_t> written(cache.size(), 0);
    for (int64_t t = 0; t < b.T; ++t) {
      const int64_t base = S::block_offset(S::slot_block(b.slots[t], B), b.stride);
      const int64_t p = S::slot_pos(b.slots[t], B);
      std::fill_n(written.begin() + base + S::token_data_offset(p), S::kTokenDataBytes, 1);
      std::fill_n(written.begin() + base + S::scale_offset(B, p, 0), S::kScaleBytesPerToken, 1);
    }
    int64_t stray = 0, pads = 0, tail_bytes = 0;
    for (size_t i = 0; i < cache.size(); ++i)
      if (!written[i] && cache[i] != kFill) ++stray;
    for (int64_t t = 0; t < b.T; ++t) {
      const int64_t base = S::block_offset(S::slot_block(b.slots[t], B), b.stride);
      pads += cache[base + S::scale_offset(B, S::slot_pos(b.slots[t], B), S::kScalePadIndex)] != 0;
    }
    for (int64_t blk = 0; blk < b.num_blocks; ++blk) tail_bytes += b.stride - S::block_data_bytes(B);
    rep.check(stray == 0, "quantize writes only the records of its slots",
              fmt::format("{} stray bytes; {} tail bytes and every unwritten record still 0xA5", stray, tail_bytes));
    rep.check(pads == 0, "scale pad bytes are 0", fmt::format("{} of {} non-zero", pads, b.T));
    const int64_t base0 = S::block_offset(S::slot_block(b.slots[0], B), b.stride);
    const int64_t p0 = S::slot_pos(b.slots[0], B);
    const uint8_t s1 = cache[base0 + S::scale_offset(B, p0, 1)], s2 = cache[base0 + S::scale_offset(B, p0, 2)],
                  s3 = cache[base0 + S::scale_offset(B, p0, 3)];
    // By hand: a zero tile gets the floor's exponent (-22; -21 for FNUZ, whose fp8_max is half of
    // 448); amax 14 = 448 * 2^-5 gives e = -5 exactly (224 * 2^-4: -4); amax 3.2e-5 is below the
    // floor, so the same byte as a zero tile.
    const int fnuz = ctx.fmt == S::Fp8Format::kE4M3Fnuz ? 1 : 0;
    const int want_floor = S::kScaleBias + S::floor_exponent(ctx.fmt);
    const int want_14 = S::kScaleBias - 5 + fnuz;
    const bool crafted = s1 == want_floor && s2 == want_14 && s3 == want_floor;
    rep.check(crafted, "crafted tiles of token 0 get the scale bytes the rule gives by hand",
              fmt::format("zero tile {} (want {}), amax 14 {} (want {}), tiny tile {} (want {})", s1, want_floor, s2,
                          want_14, s3, want_floor));
    rep.check(errors == 0, "quantize error_count", fmt::format("{} (want 0: slot -1 is not an error)", errors));
  }

  int64_t first_difference(const DemoStep&, const Context& mine, const Context& theirs) const {
    return demo::first_difference(mine.cache, theirs.cache);
  }
};

}  // namespace dsv4kv::tools::demo
