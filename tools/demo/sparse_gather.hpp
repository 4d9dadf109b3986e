// The demo's dequantize_and_gather_k_cache_sparse step: the rows of every token's global top-k
// slots (the batch's top-k selection through the block table), one output row per slot.
#pragma once

#include "common.hpp"

namespace dsv4kv::tools::demo {

template <>
struct DemoStep<SparseGatherArgs> {
  static constexpr const char* kOutputs = "sparse-gathered rows";
  int32_t errors = 0;
  std::vector<int32_t> slots;  // [T * K], -1 where the selection names no slot
  std::vector<uint16_t> picked;

  DemoStep(const Batch& b, std::mt19937_64&) {
    for (int64_t t = 0; t < b.T; ++t)
      for (int64_t c = 0; c < b.K; ++c) slots.push_back(global_slot(b, t, b.topk_local[t * b.K + c]));
  }

  void run(Backend& be, Batch& b, Context& ctx) {
    // One row per slot (-1: left untouched).
    picked.assign(slots.size() * S::kHeadDim, kFill16);
    SparseGatherArgs sg;
    sg.out = TensorView::mat(picked.data(), DType::kBF16, b.T * b.K, S::kHeadDim);
    sg.k_cache = ctx.cache_view(b);
    sg.slot_indices = TensorView::vec(slots.data(), DType::kI32, b.T * b.K);
    sg.block_size = b.B;
    sg.format = ctx.fmt;
    sg.error_count = &errors;
    be.dequantize_and_gather_k_cache_sparse(sg);
  }

  void check(const Batch& b, const Context& ctx, Report& rep) const {
    const int64_t B = b.B;
    // Each row is its slot's token per the spec.
    int64_t bad_picked = 0, n = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      const uint16_t* out = &picked[i * S::kHeadDim];
      const int32_t s = slots[i];
      if (s < 0) {
        for (int d = 0; d < S::kHeadDim; ++d) bad_picked += out[d] != kFill16;
        continue;
      }
      ++n;
      const int64_t p = S::slot_pos(s, B);
      const uint8_t* blk = ctx.cache.data() + S::block_offset(S::slot_block(s, B), b.stride);
      for (int d = 0; d < S::kNopeDim; ++d)
        bad_picked += out[d] != S::dequantize_element(blk[S::fp8_code_offset(p, d)],
                                                      blk[S::scale_offset(B, p, d / S::kTileSize)], ctx.fmt);
      for (int d = 0; d < S::kRopeDim; ++d)
        bad_picked += out[S::kNopeDim + d] !=
                      static_cast<uint16_t>(blk[S::rope_offset(p) + 2 * d] | (blk[S::rope_offset(p) + 2 * d + 1] << 8));
    }
    rep.check(bad_picked == 0, "sparse gather of the global top-k slots = their tokens' rows, -1 rows untouched",
              fmt::format("{} rows, {} wrong values", n, bad_picked));
    rep.check(errors == 0, "sparse gather error_count", fmt::format("{}", errors));
  }

  int64_t first_difference(const DemoStep& o, const Context&, const Context&) const {
    return demo::first_difference(picked, o.picked);
  }
};

}  // namespace dsv4kv::tools::demo
