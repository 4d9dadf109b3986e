// The demo's compute_global_topk_indices_and_lens step: every token's local top-k positions
// through its request's block-table row; the last token is invalid (length 0). Under a packing
// profile (vllm_v4, vllm_v41) the translated entries come first, in column order, and the invalid
// token's row is all -1.
#pragma once

#include "common.hpp"

namespace dsv4kv::tools::demo {

template <>
struct DemoStep<GlobalTopkArgs> {
  static constexpr const char* kOutputs = "global top-k + lens";
  int32_t errors = 0;
  std::vector<int32_t> token_to_req;
  std::vector<uint8_t> is_valid;
  std::vector<int32_t> global, global_lens;

  DemoStep(const Batch& b, std::mt19937_64&) {
    for (int64_t t = 0; t < b.T; ++t) {
      token_to_req.push_back(static_cast<int32_t>(b.req_of[t]));
      is_valid.push_back(t == b.T - 1 ? 0 : 1);
    }
  }

  void run(Backend& be, Batch& b, Context&) {
    global.assign(static_cast<size_t>(b.T * b.K), kFill32);
    global_lens.assign(static_cast<size_t>(b.T), kFill32);
    GlobalTopkArgs gt;
    gt.topk_indices = TensorView::mat(b.topk_local.data(), DType::kI32, b.T, b.K);
    gt.token_to_req = vec32(token_to_req);
    gt.block_table = TensorView::mat(b.block_table.data(), DType::kI32, b.R, b.bt_cols);
    gt.block_size = b.B;
    gt.is_valid_token = TensorView::vec(is_valid.data(), DType::kBool, b.T);
    gt.semantics = b.semantics;
    gt.global_topk_indices = TensorView::mat(global.data(), DType::kI32, b.T, b.K);
    gt.topk_lens = vec32(global_lens);
    gt.error_count = &errors;
    be.compute_global_topk_indices_and_lens(gt);
  }

  void check(const Batch& b, const Context&, Report& rep) const {
    const bool pack = S::packs_global_topk(b.semantics);
    int64_t bad_global = 0, bad_lens = 0, sentinels = 0;
    for (int64_t t = 0; t < b.T; ++t) {
      int32_t count = 0;
      std::vector<int32_t> want(static_cast<size_t>(b.K), -1);
      for (int64_t c = 0; c < b.K; ++c) {
        const int32_t l = b.topk_local[t * b.K + c];
        const int32_t slot = global_slot(b, t, l);
        if (l < 0) ++sentinels;
        if (pack && !is_valid[t]) continue;  // an invalid token's row is all -1 under packing
        if (!pack || slot >= 0) want[pack ? count : c] = slot;
        count += slot >= 0;
      }
      for (int64_t c = 0; c < b.K; ++c) bad_global += global[t * b.K + c] != want[c];
      bad_lens += global_lens[t] != (is_valid[t] ? count : 0);
    }
    rep.check(bad_global == 0,
              pack ? "global top-k = block_table[req, l / B] * B + l % B, packed to the left, then -1"
                   : "global top-k = block_table[req, l / B] * B + l % B, -1 sentinels kept",
              fmt::format("{} wrong of {}, {} sentinels", bad_global, b.T * b.K, sentinels));
    rep.check(bad_lens == 0, "global top-k lengths (an invalid token has length 0)", fmt::format("{} wrong", bad_lens));
    rep.check(errors == b.crafted_topk_faults, "global top-k error_count",
              fmt::format("{} (want {}: one crafted index past its block-table row)", errors, b.crafted_topk_faults));
  }

  int64_t first_difference(const DemoStep& o, const Context&, const Context&) const {
    return std::max(demo::first_difference(global, o.global), demo::first_difference(global_lens, o.global_lens));
  }
};

}  // namespace dsv4kv::tools::demo
