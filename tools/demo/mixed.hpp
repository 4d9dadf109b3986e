// The demo's build_flashinfer_mixed_sparse_indices step: decode requests 0 and 1 (one token each,
// seq_lens 40 and 50), then the tokens of request 0 as one prefill request. SWA span = block
// size; compressed span = 2 * block size. Under vllm_v41, replay_start 0 (the windows unbounded)
// and no visibility; the decode rows are as wide as the window, so vllm_v4 lays them out as the seed.
#pragma once

#include "common.hpp"

namespace dsv4kv::tools::demo {

template <>
struct DemoStep<MixedSparseArgs> {
  static constexpr const char* kOutputs = "sparse + lens";
  int32_t errors = 0;
  int64_t D = 2, P = 0, SW = 8, dct = 18, cspan = 0, width = 0, st = 0;
  std::vector<int32_t> dswa, dcomp, dlens, ptopk, qsl, seq, t2r, swa_bt, left, right;
  std::vector<int32_t> replay = {0, 0, 0};  // vllm_v41's replay_start: no bound, the plain windows
  std::vector<int32_t> sparse, sparse_lens;

  DemoStep(const Batch& b, std::mt19937_64& rng) {
    auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
    const int64_t B = b.B;
    P = b.lens[0];
    cspan = 2 * B;
    dswa.resize(static_cast<size_t>(D * SW));
    for (auto& v : dswa) v = uniform(0, 6) == 0 ? -1 : static_cast<int32_t>(uniform(0, b.num_blocks * B - 1));
    dcomp.resize(static_cast<size_t>(D * dct));
    for (auto& v : dcomp) v = uniform(0, 4) == 0 ? -1 : static_cast<int32_t>(uniform(0, b.num_blocks * B - 1));
    dlens = {static_cast<int32_t>(dct), static_cast<int32_t>(dct - 3)};
    ptopk.resize(static_cast<size_t>(P * b.TOPK));
    for (int64_t p = 0; p < P; ++p)
      for (int64_t c = 0; c < b.TOPK; ++c) ptopk[p * b.TOPK + c] = static_cast<int32_t>(uniform(0, p));
    qsl = {0, 1, 2, static_cast<int32_t>(2 + P)};
    seq = {40, 50, static_cast<int32_t>(P)};
    t2r = {0, 1};
    for (int64_t p = 0; p < P; ++p) t2r.push_back(2);
    // Table rows: decode requests reuse request 0's row (their indices are global anyway).
    for (int r = 0; r < 3; ++r)
      for (int64_t c = 0; c < b.bt_cols; ++c) swa_bt.push_back(b.block_table[c]);
    left = {0, 0};
    right = {0, 0};
    for (int64_t p = 0; p < P; ++p) {
      left.push_back(b.left[p]);
      right.push_back(b.right[p]);
    }
  }

  void run(Backend& be, Batch& b, Context&) {
    st = SW + b.IMG;
    width = S::mixed_row_width(SW, b.IMG, b.TOPK, dct);
    const int64_t rows = D + P;
    sparse.assign(static_cast<size_t>(rows * width), kFill32);
    sparse_lens.assign(static_cast<size_t>(rows), kFill32);
    MixedSparseArgs m;
    m.decode_swa_indices = TensorView::mat(dswa.data(), DType::kI32, D, SW);
    m.decode_compressed_indices = TensorView::mat(dcomp.data(), DType::kI32, D, dct);
    m.decode_compressed_topk_lens = vec32(dlens);
    m.prefill_topk_indices = TensorView::mat(ptopk.data(), DType::kI32, P, b.TOPK);
    m.query_start_loc = vec32(qsl);
    m.seq_lens = vec32(seq);
    m.token_to_req = vec32(t2r);
    m.swa_block_table = TensorView::mat(swa_bt.data(), DType::kI32, 3, b.bt_cols);
    m.swa_block_size = b.B;
    m.compressed_block_size = b.B;
    m.compressed_block_span = cspan;
    m.window_size = b.W;
    m.compress_ratio = b.CR;
    m.topk = b.TOPK;
    if (S::has_image_windows(b.semantics)) {
      m.prefill_left_visible = vec32(left);
      m.prefill_right_visible = vec32(right);
    }
    m.max_image_tokens = b.IMG;
    m.semantics = b.semantics;
    if (S::bounded_replay(b.semantics)) m.replay_start = vec32(replay);
    m.sparse_indices = TensorView::mat(sparse.data(), DType::kI32, rows, width);
    m.sparse_topk_lens = vec32(sparse_lens);
    m.error_count = &errors;
    be.build_flashinfer_mixed_sparse_indices(m);
  }

  void check(const Batch& b, const Context&, Report& rep) const {
    const int64_t B = b.B;
    const int64_t P4 = width - st;
    int64_t bad_img = 0, bad_pad = 0, bad_mlen = 0, bad_swa = 0;
    for (int64_t row = 0; row < D + P; ++row) {
      const int32_t* v = &sparse[row * width];
      if (row < D) {
        for (int64_t c = SW; c < st; ++c) bad_img += v[c] != -1;
        bad_mlen += sparse_lens[row] != st + dlens[row];
        for (int64_t c = dct; c < P4; ++c) bad_pad += v[st + c] != -1;
      } else {
        const int64_t p = row - D;
        const int64_t topk_len = std::min((p + 1) / b.CR, b.TOPK);
        bad_mlen += sparse_lens[row] != st + topk_len;
        for (int64_t c = topk_len; c < P4; ++c) bad_pad += v[st + c] != -1;
        // Without images, SWA column c of the token at p holds position max(p - W + 1, 0) + c.
        if (left[row] == 0 && right[row] == 0)
          for (int64_t c = 0; c < st; ++c) {
            const int64_t pos = std::max<int64_t>(p - b.W + 1, 0) + c;
            const int32_t want = pos <= p ? static_cast<int32_t>(b.block_table[pos / B] * B + pos % B) : -1;
            bad_swa += v[c] != want;
          }
      }
    }
    rep.check(P4 % S::kMixedTopkAlignment == 0 && width == S::mixed_row_width(SW, b.IMG, b.TOPK, dct),
              "mixed rows: swa_width + image_width + round_up(max(topk, decode_topk), 4)",
              fmt::format("{} + {} + {} = {} columns; rows 16-byte aligned: {} (swa + image = {})", SW, b.IMG, P4,
                          width, st % 4 == 0 ? "yes" : "no", st));
    rep.check(bad_img == 0, "mixed decode rows are -1 across the image columns", fmt::format("{} wrong", bad_img));
    rep.check(bad_pad == 0, "mixed compressed columns past each row's entries (4-column padding included) are -1",
              fmt::format("{} wrong", bad_pad));
    rep.check(bad_swa == 0, "mixed prefill SWA columns = the window through the block table",
              fmt::format("{} wrong", bad_swa));
    rep.check(bad_mlen == 0, "mixed lengths (decode: swa + image + lens; prefill: + topk_len)",
              fmt::format("{} wrong", bad_mlen));
    rep.check(errors == 0, "mixed error_count", fmt::format("{}", errors));
  }

  int64_t first_difference(const DemoStep& o, const Context&, const Context&) const {
    return std::max(demo::first_difference(sparse, o.sparse), demo::first_difference(sparse_lens, o.sparse_lens));
  }
};

}  // namespace dsv4kv::tools::demo
