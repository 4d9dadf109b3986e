// The demo's combine_topk_swa_indices step: one chunk per request (no cached prefix),
// query_start_loc based at 7, the batch's images at positions [3, 12] of request 0.
#pragma once

#include "common.hpp"

namespace dsv4kv::tools::demo {

template <>
struct DemoStep<CombineArgs> {
  static constexpr const char* kOutputs = "combined + lens";
  int32_t errors = 0;
  int64_t M = 0, N = 32, base = 7, topk_width = 24, width = 0;
  std::vector<int32_t> qsl, seq_lens, topk;
  std::vector<int32_t> combined, combined_lens;

  DemoStep(const Batch& b, std::mt19937_64& rng) {
    auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    M = N + b.T;
    qsl.push_back(static_cast<int32_t>(base));
    for (int64_t r = 0; r < b.R; ++r) {
      qsl.push_back(static_cast<int32_t>(qsl.back() + b.lens[r]));
      seq_lens.push_back(static_cast<int32_t>(b.lens[r]));
    }
    topk.resize(static_cast<size_t>(b.T * topk_width));
    for (auto& v : topk) v = uniform(0, 9) == 0 ? -1 : static_cast<int32_t>(uniform(0, N - 1));
  }

  void run(Backend& be, Batch& b, Context&) {
    width = S::combine_row_width(b.TOPK, b.W, b.IMG);
    combined.assign(static_cast<size_t>(b.T * width), kFill32);
    combined_lens.assign(static_cast<size_t>(b.T), kFill32);
    CombineArgs c;
    c.topk_indices = TensorView::mat(topk.data(), DType::kI32, b.T, topk_width);
    c.query_start_loc = vec32(qsl);
    c.seq_lens = vec32(seq_lens);
    c.gather_lens = vec32(seq_lens);
    c.window_size = b.W;
    c.compress_ratio = b.CR;
    c.topk = b.TOPK;
    c.M = M;
    c.N = N;
    if (S::has_image_windows(b.semantics)) {
      c.left_visible = vec32(b.left);
      c.right_visible = vec32(b.right);
    }
    c.max_image_tokens = b.IMG;
    c.semantics = b.semantics;
    c.combined_indices = TensorView::mat(combined.data(), DType::kI32, b.T, width);
    c.combined_lens = vec32(combined_lens);
    c.error_count = &errors;
    be.combine_topk_swa_indices(c);
  }

  void check(const Batch& b, const Context&, Report& rep) const {
    int64_t bad_tail = 0, bad_range = 0, bad_clen = 0;
    for (int64_t t = 0; t < b.T; ++t) {
      const int64_t r = b.req_of[t], p = b.pos_of[t];
      const int32_t len = combined_lens[t];
      const int64_t topk_len = std::min((p + 1) / b.CR, b.TOPK);
      const int64_t lo = std::max<int64_t>(0, p - (b.W - 1) - std::max<int64_t>(b.left[t] - (b.W - 1), 0));
      const int64_t hi = std::min<int64_t>(p + b.right[t] + 1, b.lens[r]);
      bad_clen += len != topk_len + std::min(hi - lo, b.W + b.IMG);
      for (int64_t c = 0; c < width; ++c) {
        const int32_t v = combined[t * width + c];
        if (c >= len)
          bad_tail += v != -1;
        else if (c < topk_len)
          bad_range += !(v == -1 || (v >= M * r && v < M * r + N));
        else
          bad_range += !(v >= M * r + N && v < M * r + N + b.lens[r]);
      }
    }
    rep.check(
        width % S::kCombineRowAlignment == 0 && width == S::round_up(b.TOPK + b.W + b.IMG, S::kCombineRowAlignment),
        "combine rows are round_up(topk + window + max_image_tokens, 128) wide", fmt::format("{} columns", width));
    rep.check(bad_tail == 0, "combine rows are -1 beyond their length", fmt::format("{} wrong", bad_tail));
    rep.check(bad_range == 0, "combine entries stay in their request's region",
              fmt::format("{} out of range", bad_range));
    rep.check(bad_clen == 0, "combine lengths = topk_len + widened window", fmt::format("{} wrong", bad_clen));
    rep.check(errors == 0, "combine error_count", fmt::format("{}", errors));
  }

  int64_t first_difference(const DemoStep& o, const Context&, const Context&) const {
    return std::max(demo::first_difference(combined, o.combined),
                    demo::first_difference(combined_lens, o.combined_lens));
  }
};

}  // namespace dsv4kv::tools::demo
