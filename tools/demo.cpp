// dsv4kv demo: builds a synthetic batch, runs the six operations on one backend, draws one
// cache block and checks what it can check without trusting the backend under test:
// round-trip error bounds, RoPE bits, untouched bytes, pad bytes, -1 sentinels, row widths,
// lengths and error counts. When the CUDA backend is usable, the other backend runs the same
// batch and every output byte must agree.
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "commands.hpp"
#include "dsv4kv/spec.hpp"
#include "inspect.hpp"
#include "output.hpp"

namespace dsv4kv::tools {
namespace {

namespace S = dsv4kv::spec;
using conformance::Backend;

constexpr uint8_t kFill = 0xA5;        // pre-fill of every written buffer
constexpr uint16_t kFill16 = 0xA5A5;   // the same, seen as bf16 elements
constexpr int32_t kFill32 = static_cast<int32_t>(0xA5A5A5A5u);

// ---------------------------------------------------------------------------
// The synthetic batch: R requests that together hold `tokens` tokens, the cache they
// live in, and the inputs of the three index operations.
// ---------------------------------------------------------------------------
struct Batch {
  int64_t B = 64, T = 0, R = 0, num_blocks = 0, stride = 0, bt_cols = 0;
  std::vector<int64_t> lens;          // tokens per request
  std::vector<int64_t> req_of, pos_of;  // per token
  std::vector<int32_t> block_table;   // [R, bt_cols], unused columns -1
  std::vector<uint16_t> k;            // [T + 2, 512]; rows T, T+1 are padding never written
  std::vector<int64_t> slots;         // [T + 1]; the last entry is -1
  // gather
  std::vector<int32_t> seq_lens, gather_lens;
  int64_t out_rows = 0, offset = 1;
  // global top-k
  int64_t K = 16;
  std::vector<int32_t> topk_local, token_to_req;
  std::vector<uint8_t> is_valid;
  int64_t crafted_topk_faults = 0;
  // combine
  int64_t W = 8, CR = 4, TOPK = 16, IMG = 6, M = 0, N = 32, base = 7, topk_width = 24;
  std::vector<int32_t> qsl, c_topk, left, right;
  // mixed sparse: 2 decode tokens, then the tokens of request 0 as prefill
  int64_t D = 2, P = 0, SW = 8, dct = 18, cspan = 0;
  std::vector<int32_t> m_dswa, m_dcomp, m_dlens, m_ptopk, m_qsl, m_seq, m_t2r, m_swa_bt, m_left, m_right;
};

uint16_t bf16(float f) { return S::f32_to_bf16_rne(f); }

Batch make_batch(int64_t tokens, int64_t B, uint64_t seed) {
  Batch b;
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::normal_distribution<float> normal(0.0f, 1.0f);
  b.B = B;
  b.T = tokens;
  // Three requests of falling size (fewer when the batch is tiny).
  int64_t left_over = tokens;
  for (int r = 0; r < 3 && left_over > 0; ++r) {
    const int64_t n = r == 2 ? left_over : std::max<int64_t>(1, (left_over + 1) / 2);
    b.lens.push_back(n);
    left_over -= n;
  }
  b.R = static_cast<int64_t>(b.lens.size());
  int64_t needed = 0;
  for (int64_t n : b.lens) {
    needed += (n + B - 1) / B;
    b.bt_cols = std::max(b.bt_cols, (n + B - 1) / B);
  }
  b.bt_cols += 1;  // one column past every request's data, left -1
  b.num_blocks = needed + 2;  // two spare blocks that nobody uses
  b.stride = S::vllm_block_stride(B);
  std::vector<int32_t> ids(static_cast<size_t>(b.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.block_table.assign(static_cast<size_t>(b.R * b.bt_cols), -1);
  size_t next = 0;
  for (int64_t r = 0; r < b.R; ++r)
    for (int64_t c = 0; c < (b.lens[r] + B - 1) / B; ++c) b.block_table[r * b.bt_cols + c] = ids[next++];

  // Keys: N(0,1) * 2^[-6, 6] per tile, plus crafted tiles in token 0.
  b.k.assign(static_cast<size_t>((tokens + 2) * S::kHeadDim), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < S::kNumTiles + 1; ++j) {  // the 8th "tile" is the RoPE part
      const float mag = std::ldexp(1.0f, static_cast<int>(uniform(-6, 6)));
      for (int i = 0; i < S::kTileSize; ++i) b.k[t * S::kHeadDim + j * S::kTileSize + i] = bf16(normal(rng) * mag);
    }
  }
  uint16_t* k0 = b.k.data();
  for (int i = 0; i < S::kTileSize; ++i) {
    k0[1 * S::kTileSize + i] = 0;                                      // tile 1: all zero -> the floor's byte
    k0[2 * S::kTileSize + i] = bf16(static_cast<float>(i % 29) - 14.0f);  // tile 2: amax 14 = 448 * 2^-5 exactly
    k0[3 * S::kTileSize + i] = bf16(1e-6f * static_cast<float>(i - 32));  // tile 3: below the 1e-4 floor
  }
  // Padding rows: NaN, so writing them by mistake would show.
  for (int64_t t = tokens; t < tokens + 2; ++t)
    for (int d = 0; d < S::kHeadDim; ++d) b.k[t * S::kHeadDim + d] = 0x7FC0;

  // Token t of request r sits at position p; its slot is block_table[r, p / B] * B + p % B.
  for (int64_t r = 0; r < b.R; ++r)
    for (int64_t p = 0; p < b.lens[r]; ++p) {
      b.req_of.push_back(r);
      b.pos_of.push_back(p);
    }
  for (int64_t t = 0; t < tokens; ++t)
    b.slots.push_back(int64_t{b.block_table[b.req_of[t] * b.bt_cols + b.pos_of[t] / B]} * B + b.pos_of[t] % B);
  b.slots.push_back(-1);  // CUDA-graph style padding: skipped without a report

  // Gather: whole sequences, except request 1 gathers its last two thirds.
  for (int64_t r = 0; r < b.R; ++r) {
    b.seq_lens.push_back(static_cast<int32_t>(b.lens[r]));
    b.gather_lens.push_back(static_cast<int32_t>(r == 1 ? b.lens[r] - b.lens[r] / 3 : b.lens[r]));
    b.out_rows = std::max<int64_t>(b.out_rows, b.lens[r] + b.offset + 1);
  }

  // Global top-k: local indices in [0, pos], every fifth -1; token 0 of the last request also
  // names a position beyond its block-table row (-1 and one report); the last token is invalid.
  b.topk_local.resize(static_cast<size_t>(tokens * b.K));
  for (int64_t t = 0; t < tokens; ++t) {
    b.token_to_req.push_back(static_cast<int32_t>(b.req_of[t]));
    b.is_valid.push_back(t == tokens - 1 ? 0 : 1);
    for (int64_t c = 0; c < b.K; ++c)
      b.topk_local[t * b.K + c] = (c % 5 == 4) ? -1 : static_cast<int32_t>(uniform(0, b.pos_of[t]));
  }
  const int64_t t_fault = tokens - b.lens.back();
  b.topk_local[t_fault * b.K + 0] = static_cast<int32_t>(b.bt_cols * B + 3);
  b.crafted_topk_faults = 1;

  // Combine: one chunk per request (no cached prefix), query_start_loc based at 7,
  // images at positions [3, 12] of request 0.
  b.M = b.N + tokens;
  b.qsl.push_back(static_cast<int32_t>(b.base));
  for (int64_t r = 0; r < b.R; ++r) b.qsl.push_back(static_cast<int32_t>(b.qsl.back() + b.lens[r]));
  b.c_topk.resize(static_cast<size_t>(tokens * b.topk_width));
  for (auto& v : b.c_topk) v = uniform(0, 9) == 0 ? -1 : static_cast<int32_t>(uniform(0, b.N - 1));
  b.left.assign(static_cast<size_t>(tokens), 0);
  b.right.assign(static_cast<size_t>(tokens), 0);
  const int64_t span_s = 3, span_e = 12;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = b.pos_of[t];
    if (b.req_of[t] == 0 && p >= span_s && p <= span_e && p < b.lens[0]) {
      b.left[t] = static_cast<int32_t>(std::min(p - span_s, b.IMG - 1));
      b.right[t] = static_cast<int32_t>(std::min(std::min(span_e, b.lens[0] - 1) - p, b.IMG));
    }
  }

  // Mixed sparse: decode requests 0 and 1 (one token each, seq_lens 40 and 50), then request 0's
  // tokens as one prefill request. SWA span = block size; compressed span = 2 * block size.
  b.P = b.lens[0];
  b.cspan = 2 * B;
  b.m_dswa.resize(static_cast<size_t>(b.D * b.SW));
  for (auto& v : b.m_dswa) v = uniform(0, 6) == 0 ? -1 : static_cast<int32_t>(uniform(0, b.num_blocks * B - 1));
  b.m_dcomp.resize(static_cast<size_t>(b.D * b.dct));
  for (auto& v : b.m_dcomp) v = uniform(0, 4) == 0 ? -1 : static_cast<int32_t>(uniform(0, b.num_blocks * B - 1));
  b.m_dlens = {static_cast<int32_t>(b.dct), static_cast<int32_t>(b.dct - 3)};
  b.m_ptopk.resize(static_cast<size_t>(b.P * b.TOPK));
  for (int64_t p = 0; p < b.P; ++p)
    for (int64_t c = 0; c < b.TOPK; ++c) b.m_ptopk[p * b.TOPK + c] = static_cast<int32_t>(uniform(0, p));
  b.m_qsl = {0, 1, 2, static_cast<int32_t>(2 + b.P)};
  b.m_seq = {40, 50, static_cast<int32_t>(b.P)};
  b.m_t2r = {0, 1};
  for (int64_t p = 0; p < b.P; ++p) b.m_t2r.push_back(2);
  // Table rows: decode requests reuse request 0's row (their indices are global anyway).
  for (int r = 0; r < 3; ++r)
    for (int64_t c = 0; c < b.bt_cols; ++c) b.m_swa_bt.push_back(b.block_table[c]);
  b.m_left = {0, 0};
  b.m_right = {0, 0};
  for (int64_t p = 0; p < b.P; ++p) {
    b.m_left.push_back(b.left[p]);
    b.m_right.push_back(b.right[p]);
  }
  return b;
}

// Everything the six operations write, with their error counts.
struct Outputs {
  std::vector<uint8_t> cache;
  std::vector<uint16_t> gathered, picked;
  std::vector<int32_t> global, global_lens, combined, combined_lens, sparse, sparse_lens;
  int32_t err_quantize = 0, err_gather = 0, err_topk = 0, err_combine = 0, err_mixed = 0, err_picked = 0;
  int64_t combine_width = 0, mixed_width = 0, mixed_st = 0;
};

TensorView vec32(std::vector<int32_t>& v) { return TensorView::vec(v.data(), DType::kI32, static_cast<int64_t>(v.size())); }

Outputs run_all(Backend& be, Batch& b, S::Fp8Format fmt) {
  Outputs o;
  o.cache.assign(static_cast<size_t>(b.num_blocks * b.stride), kFill);
  QuantizeInsertArgs q;
  q.k = TensorView::mat(b.k.data(), DType::kBF16, b.T + 2, S::kHeadDim);
  q.k_cache = TensorView::mat(o.cache.data(), DType::kU8, b.num_blocks, b.stride);
  q.slot_mapping = TensorView::vec(b.slots.data(), DType::kI64, static_cast<int64_t>(b.slots.size()));
  q.block_size = b.B;
  q.format = fmt;
  q.error_count = &o.err_quantize;
  be.quantize_and_insert_k_cache(q);

  o.gathered.assign(static_cast<size_t>(b.R * b.out_rows * S::kHeadDim), kFill16);
  DequantizeGatherArgs g;
  g.out = TensorView::cube(o.gathered.data(), DType::kBF16, b.R, b.out_rows, S::kHeadDim);
  g.k_cache = q.k_cache;
  g.seq_lens = vec32(b.seq_lens);
  g.gather_lens = vec32(b.gather_lens);
  g.block_table = TensorView::mat(b.block_table.data(), DType::kI32, b.R, b.bt_cols);
  g.block_size = b.B;
  g.offset = b.offset;
  g.format = fmt;
  g.error_count = &o.err_gather;
  be.dequantize_and_gather_k_cache(g);

  o.global.assign(static_cast<size_t>(b.T * b.K), kFill32);
  o.global_lens.assign(static_cast<size_t>(b.T), kFill32);
  GlobalTopkArgs gt;
  gt.topk_indices = TensorView::mat(b.topk_local.data(), DType::kI32, b.T, b.K);
  gt.token_to_req = vec32(b.token_to_req);
  gt.block_table = g.block_table;
  gt.block_size = b.B;
  gt.is_valid_token = TensorView::vec(b.is_valid.data(), DType::kBool, b.T);
  gt.global_topk_indices = TensorView::mat(o.global.data(), DType::kI32, b.T, b.K);
  gt.topk_lens = vec32(o.global_lens);
  gt.error_count = &o.err_topk;
  be.compute_global_topk_indices_and_lens(gt);

  // The sparse gather of every token's global top-k slots, one row per slot (-1: left untouched).
  o.picked.assign(o.global.size() * S::kHeadDim, kFill16);
  SparseGatherArgs sg;
  sg.out = TensorView::mat(o.picked.data(), DType::kBF16, b.T * b.K, S::kHeadDim);
  sg.k_cache = q.k_cache;
  sg.slot_indices = TensorView::vec(o.global.data(), DType::kI32, b.T * b.K);
  sg.block_size = b.B;
  sg.format = fmt;
  sg.error_count = &o.err_picked;
  be.dequantize_and_gather_k_cache_sparse(sg);

  o.combine_width = S::combine_row_width(b.TOPK, b.W, b.IMG);
  o.combined.assign(static_cast<size_t>(b.T * o.combine_width), kFill32);
  o.combined_lens.assign(static_cast<size_t>(b.T), kFill32);
  CombineArgs c;
  c.topk_indices = TensorView::mat(b.c_topk.data(), DType::kI32, b.T, b.topk_width);
  c.query_start_loc = vec32(b.qsl);
  c.seq_lens = vec32(b.seq_lens);
  c.gather_lens = vec32(b.seq_lens);
  c.window_size = b.W;
  c.compress_ratio = b.CR;
  c.topk = b.TOPK;
  c.M = b.M;
  c.N = b.N;
  c.left_visible = vec32(b.left);
  c.right_visible = vec32(b.right);
  c.max_image_tokens = b.IMG;
  c.combined_indices = TensorView::mat(o.combined.data(), DType::kI32, b.T, o.combine_width);
  c.combined_lens = vec32(o.combined_lens);
  c.error_count = &o.err_combine;
  be.combine_topk_swa_indices(c);

  o.mixed_st = b.SW + b.IMG;
  o.mixed_width = S::mixed_row_width(b.SW, b.IMG, b.TOPK, b.dct);
  const int64_t rows = b.D + b.P;
  o.sparse.assign(static_cast<size_t>(rows * o.mixed_width), kFill32);
  o.sparse_lens.assign(static_cast<size_t>(rows), kFill32);
  MixedSparseArgs m;
  m.decode_swa_indices = TensorView::mat(b.m_dswa.data(), DType::kI32, b.D, b.SW);
  m.decode_compressed_indices = TensorView::mat(b.m_dcomp.data(), DType::kI32, b.D, b.dct);
  m.decode_compressed_topk_lens = vec32(b.m_dlens);
  m.prefill_topk_indices = TensorView::mat(b.m_ptopk.data(), DType::kI32, b.P, b.TOPK);
  m.query_start_loc = vec32(b.m_qsl);
  m.seq_lens = vec32(b.m_seq);
  m.token_to_req = vec32(b.m_t2r);
  m.swa_block_table = TensorView::mat(b.m_swa_bt.data(), DType::kI32, 3, b.bt_cols);
  m.swa_block_size = b.B;
  m.compressed_block_size = b.B;
  m.compressed_block_span = b.cspan;
  m.window_size = b.W;
  m.compress_ratio = b.CR;
  m.topk = b.TOPK;
  m.prefill_left_visible = vec32(b.m_left);
  m.prefill_right_visible = vec32(b.m_right);
  m.max_image_tokens = b.IMG;
  m.sparse_indices = TensorView::mat(o.sparse.data(), DType::kI32, rows, o.mixed_width);
  m.sparse_topk_lens = vec32(o.sparse_lens);
  m.error_count = &o.err_mixed;
  be.build_flashinfer_mixed_sparse_indices(m);
  return o;
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------
struct Report {
  int failed = 0;
  void check(bool ok, const std::string& what, const std::string& detail) {
    outf("  [{}] {}{}{}\n", ok ? "PASS" : "FAIL", what, detail.empty() ? "" : ": ", detail);
    if (!ok) ++failed;
  }
};

// Largest |dequant(quant(x)) - x| the spec allows: half the FP8 spacing around x / 2^e, times 2^e.
double round_trip_bound(float x, int e, S::Fp8Format fmt) {
  const int min_exp = 1 - S::fp8_traits(fmt).bias;  // exponent of the smallest normal FP8 value
  const double y = std::fabs(static_cast<double>(x)) * std::ldexp(1.0, -e);
  const int k = y > 0 ? std::max(static_cast<int>(std::floor(std::log2(y))), min_exp) : min_exp;
  return std::ldexp(1.0, k - 4 + e);
}

void check_all(const Batch& b, const Outputs& o, S::Fp8Format fmt, Report& rep) {
  const int64_t B = b.B;
  // Which cache bytes quantize may write: the records of the slots it was given.
  std::vector<uint8_t> written(o.cache.size(), 0);
  for (int64_t t = 0; t < b.T; ++t) {
    const int64_t base = S::block_offset(S::slot_block(b.slots[t], B), b.stride);
    const int64_t p = S::slot_pos(b.slots[t], B);
    std::fill_n(written.begin() + base + S::token_data_offset(p), S::kTokenDataBytes, 1);
    std::fill_n(written.begin() + base + S::scale_offset(B, p, 0), S::kScaleBytesPerToken, 1);
  }
  int64_t stray = 0, pads = 0, tail_bytes = 0;
  for (size_t i = 0; i < o.cache.size(); ++i)
    if (!written[i] && o.cache[i] != kFill) ++stray;
  for (int64_t t = 0; t < b.T; ++t) {
    const int64_t base = S::block_offset(S::slot_block(b.slots[t], B), b.stride);
    pads += o.cache[base + S::scale_offset(B, S::slot_pos(b.slots[t], B), S::kScalePadIndex)] != 0;
  }
  for (int64_t blk = 0; blk < b.num_blocks; ++blk)
    tail_bytes += b.stride - S::block_data_bytes(B);
  rep.check(stray == 0, "quantize writes only the records of its slots",
            fmt::format("{} stray bytes; {} tail bytes and every unwritten record still 0xA5", stray, tail_bytes));
  rep.check(pads == 0, "scale pad bytes are 0", fmt::format("{} of {} non-zero", pads, b.T));
  const int64_t base0 = S::block_offset(S::slot_block(b.slots[0], B), b.stride);
  const int64_t p0 = S::slot_pos(b.slots[0], B);
  const uint8_t s1 = o.cache[base0 + S::scale_offset(B, p0, 1)], s2 = o.cache[base0 + S::scale_offset(B, p0, 2)],
                s3 = o.cache[base0 + S::scale_offset(B, p0, 3)];
  // By hand: a zero tile gets the floor's exponent (-22; -21 for FNUZ, whose fp8_max is half of
  // 448); amax 14 = 448 * 2^-5 gives e = -5 exactly (224 * 2^-4: -4); amax 3.2e-5 is below the
  // floor, so the same byte as a zero tile.
  const int fnuz = fmt == S::Fp8Format::kE4M3Fnuz ? 1 : 0;
  const int want_floor = S::kScaleBias + S::floor_exponent(fmt);
  const int want_14 = S::kScaleBias - 5 + fnuz;
  const bool crafted = s1 == want_floor && s2 == want_14 && s3 == want_floor;
  rep.check(crafted, "crafted tiles of token 0 get the scale bytes the rule gives by hand",
            fmt::format("zero tile {} (want {}), amax 14 {} (want {}), tiny tile {} (want {})", s1, want_floor, s2,
                        want_14, s3, want_floor));
  rep.check(o.err_quantize == 0, "quantize error_count", fmt::format("{} (want 0: slot -1 is not an error)", o.err_quantize));

  // Gather: round trip, RoPE bits, untouched rows.
  int64_t bad_nope = 0, bad_rope = 0, bad_untouched = 0, rows = 0;
  double worst = 0;
  for (int64_t r = 0; r < b.R; ++r) {
    const int64_t g = b.gather_lens[r], sl = b.seq_lens[r];
    int64_t first_token = 0;
    for (int64_t q = 0; q < r; ++q) first_token += b.lens[q];
    for (int64_t row = 0; row < b.out_rows; ++row) {
      const uint16_t* out = &o.gathered[(r * b.out_rows + row) * S::kHeadDim];
      const int64_t i = row - b.offset;
      if (i < 0 || i >= g) {
        for (int d = 0; d < S::kHeadDim; ++d) bad_untouched += out[d] != kFill16;
        continue;
      }
      ++rows;
      const int64_t t = first_token + (sl - g + i);
      const uint16_t* x = &b.k[t * S::kHeadDim];
      const int64_t base = S::block_offset(S::slot_block(b.slots[t], B), b.stride);
      for (int d = 0; d < S::kNopeDim; ++d) {
        const int e = o.cache[base + S::scale_offset(B, S::slot_pos(b.slots[t], B), d / S::kTileSize)] - S::kScaleBias;
        const double err = std::fabs(static_cast<double>(S::bf16_to_f32(out[d])) - S::bf16_to_f32(x[d]));
        const double bound = round_trip_bound(S::bf16_to_f32(x[d]), e, fmt);
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
  rep.check(o.err_gather == 0, "gather error_count", fmt::format("{}", o.err_gather));

  // Global top-k.
  int64_t bad_global = 0, bad_lens = 0, sentinels = 0;
  for (int64_t t = 0; t < b.T; ++t) {
    int32_t count = 0;
    for (int64_t c = 0; c < b.K; ++c) {
      const int32_t l = b.topk_local[t * b.K + c], got = o.global[t * b.K + c];
      int32_t want = -1;
      if (l >= 0 && l / B < b.bt_cols && b.block_table[b.req_of[t] * b.bt_cols + l / B] >= 0)
        want = static_cast<int32_t>(b.block_table[b.req_of[t] * b.bt_cols + l / B] * B + l % B);
      if (l < 0) ++sentinels;
      bad_global += got != want;
      count += want >= 0;
    }
    bad_lens += o.global_lens[t] != (b.is_valid[t] ? count : 0);
  }
  rep.check(bad_global == 0, "global top-k = block_table[req, l / B] * B + l % B, -1 sentinels kept",
            fmt::format("{} wrong of {}, {} sentinels", bad_global, b.T * b.K, sentinels));
  rep.check(bad_lens == 0, "global top-k lengths (an invalid token has length 0)", fmt::format("{} wrong", bad_lens));
  rep.check(o.err_topk == b.crafted_topk_faults, "global top-k error_count",
            fmt::format("{} (want {}: one crafted index past its block-table row)", o.err_topk, b.crafted_topk_faults));

  // Sparse gather of the global top-k slots: each row is its slot's token per the spec.
  int64_t bad_picked = 0, picked = 0;
  for (size_t i = 0; i < o.global.size(); ++i) {
    const uint16_t* out = &o.picked[i * S::kHeadDim];
    const int32_t s = o.global[i];
    if (s < 0) {
      for (int d = 0; d < S::kHeadDim; ++d) bad_picked += out[d] != kFill16;
      continue;
    }
    ++picked;
    const int64_t p = S::slot_pos(s, B);
    const uint8_t* blk = o.cache.data() + S::block_offset(S::slot_block(s, B), b.stride);
    for (int d = 0; d < S::kNopeDim; ++d)
      bad_picked += out[d] != S::dequantize_element(blk[S::fp8_code_offset(p, d)],
                                                    blk[S::scale_offset(B, p, d / S::kTileSize)], fmt);
    for (int d = 0; d < S::kRopeDim; ++d)
      bad_picked += out[S::kNopeDim + d] != static_cast<uint16_t>(blk[S::rope_offset(p) + 2 * d] |
                                                                  (blk[S::rope_offset(p) + 2 * d + 1] << 8));
  }
  rep.check(bad_picked == 0, "sparse gather of the global top-k slots = their tokens' rows, -1 rows untouched",
            fmt::format("{} rows, {} wrong values", picked, bad_picked));
  rep.check(o.err_picked == 0, "sparse gather error_count", fmt::format("{}", o.err_picked));

  // Combine.
  int64_t bad_tail = 0, bad_range = 0, bad_clen = 0;
  for (int64_t t = 0; t < b.T; ++t) {
    const int64_t r = b.req_of[t], p = b.pos_of[t];
    const int32_t len = o.combined_lens[t];
    const int64_t topk_len = std::min((p + 1) / b.CR, b.TOPK);
    const int64_t lo = std::max<int64_t>(0, p - (b.W - 1) - std::max<int64_t>(b.left[t] - (b.W - 1), 0));
    const int64_t hi = std::min<int64_t>(p + b.right[t] + 1, b.lens[r]);
    bad_clen += len != topk_len + std::min(hi - lo, b.W + b.IMG);
    for (int64_t c = 0; c < o.combine_width; ++c) {
      const int32_t v = o.combined[t * o.combine_width + c];
      if (c >= len) bad_tail += v != -1;
      else if (c < topk_len) bad_range += !(v == -1 || (v >= b.M * r && v < b.M * r + b.N));
      else bad_range += !(v >= b.M * r + b.N && v < b.M * r + b.N + b.lens[r]);
    }
  }
  rep.check(o.combine_width % S::kCombineRowAlignment == 0 &&
                o.combine_width == S::round_up(b.TOPK + b.W + b.IMG, S::kCombineRowAlignment),
            "combine rows are round_up(topk + window + max_image_tokens, 128) wide",
            fmt::format("{} columns", o.combine_width));
  rep.check(bad_tail == 0, "combine rows are -1 beyond their length", fmt::format("{} wrong", bad_tail));
  rep.check(bad_range == 0, "combine entries stay in their request's region",
            fmt::format("{} out of range", bad_range));
  rep.check(bad_clen == 0, "combine lengths = topk_len + widened window", fmt::format("{} wrong", bad_clen));
  rep.check(o.err_combine == 0, "combine error_count", fmt::format("{}", o.err_combine));

  // Mixed sparse.
  const int64_t P4 = o.mixed_width - o.mixed_st;
  int64_t bad_img = 0, bad_pad = 0, bad_mlen = 0, bad_swa = 0;
  for (int64_t row = 0; row < b.D + b.P; ++row) {
    const int32_t* v = &o.sparse[row * o.mixed_width];
    if (row < b.D) {
      for (int64_t c = b.SW; c < o.mixed_st; ++c) bad_img += v[c] != -1;
      bad_mlen += o.sparse_lens[row] != o.mixed_st + b.m_dlens[row];
      for (int64_t c = b.dct; c < P4; ++c) bad_pad += v[o.mixed_st + c] != -1;
    } else {
      const int64_t p = row - b.D;
      const int64_t topk_len = std::min((p + 1) / b.CR, b.TOPK);
      bad_mlen += o.sparse_lens[row] != o.mixed_st + topk_len;
      for (int64_t c = topk_len; c < P4; ++c) bad_pad += v[o.mixed_st + c] != -1;
      // Without images, SWA column c of the token at p holds position max(p - W + 1, 0) + c.
      if (b.m_left[row] == 0 && b.m_right[row] == 0)
        for (int64_t c = 0; c < o.mixed_st; ++c) {
          const int64_t pos = std::max<int64_t>(p - b.W + 1, 0) + c;
          const int32_t want = pos <= p ? static_cast<int32_t>(b.block_table[pos / B] * B + pos % B) : -1;
          bad_swa += v[c] != want;
        }
    }
  }
  rep.check(P4 % S::kMixedTopkAlignment == 0 && o.mixed_width == S::mixed_row_width(b.SW, b.IMG, b.TOPK, b.dct),
            "mixed rows: swa_width + image_width + round_up(max(topk, decode_topk), 4)",
            fmt::format("{} + {} + {} = {} columns; rows 16-byte aligned: {} (swa + image = {})", b.SW, b.IMG, P4,
                        o.mixed_width, o.mixed_st % 4 == 0 ? "yes" : "no", o.mixed_st));
  rep.check(bad_img == 0, "mixed decode rows are -1 across the image columns", fmt::format("{} wrong", bad_img));
  rep.check(bad_pad == 0, "mixed compressed columns past each row's entries (4-column padding included) are -1",
            fmt::format("{} wrong", bad_pad));
  rep.check(bad_swa == 0, "mixed prefill SWA columns = the window through the block table",
            fmt::format("{} wrong", bad_swa));
  rep.check(bad_mlen == 0, "mixed lengths (decode: swa + image + lens; prefill: + topk_len)",
            fmt::format("{} wrong", bad_mlen));
  rep.check(o.err_mixed == 0, "mixed error_count", fmt::format("{}", o.err_mixed));
}

template <class T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

void compare_backends(const Outputs& a, const Outputs& b, const char* na, const char* nb, Report& rep) {
  auto one = [&](const char* what, int64_t at) {
    rep.check(at < 0, fmt::format("{} == {} byte for byte: {}", na, nb, what),
              at < 0 ? std::string() : fmt::format("first difference at element {}", at));
  };
  one("k_cache", first_difference(a.cache, b.cache));
  one("gathered rows", first_difference(a.gathered, b.gathered));
  one("sparse-gathered rows", first_difference(a.picked, b.picked));
  one("global top-k + lens", std::max(first_difference(a.global, b.global), first_difference(a.global_lens, b.global_lens)));
  one("combined + lens", std::max(first_difference(a.combined, b.combined), first_difference(a.combined_lens, b.combined_lens)));
  one("sparse + lens", std::max(first_difference(a.sparse, b.sparse), first_difference(a.sparse_lens, b.sparse_lens)));
  const bool counts = a.err_quantize == b.err_quantize && a.err_gather == b.err_gather && a.err_topk == b.err_topk &&
                      a.err_combine == b.err_combine && a.err_mixed == b.err_mixed &&
                      a.err_picked == b.err_picked;
  rep.check(counts, fmt::format("{} == {}: error counts", na, nb), "");
}

// ---------------------------------------------------------------------------
// The picture of one block.
// ---------------------------------------------------------------------------
void draw_block(const Batch& b, const Outputs& o, int64_t blk, S::Fp8Format fmt) {
  const int64_t B = b.B;
  const uint8_t* base = o.cache.data() + S::block_offset(blk, b.stride);
  auto record_written = [&](int64_t off, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      if (base[off + i] != kFill) return '#';
    return '.';
  };
  outf("\ncache block {} (block_size {}, block_stride {} bytes, at cache byte {}):\n", blk, B, b.stride,
             S::block_offset(blk, b.stride));
  outf("  one character per position p: '#' written, '.' untouched (still 0xA5); pad: '0' zero, '!' other\n");
  auto row_of = [&](const std::string& label, const std::string& range, auto state) {
    constexpr int64_t kPerLine = 64;
    for (int64_t p0 = 0; p0 < B; p0 += kPerLine) {
      std::string line;
      for (int64_t p = p0; p < std::min(B, p0 + kPerLine); ++p) line += state(p);
      outf("  {:<14} {:<13} p={:<4} {}\n", p0 == 0 ? label : "", p0 == 0 ? range : "", p0, line);
    }
  };
  row_of("token records", fmt::format("{}..{}", 0, S::scale_region_offset(B) - 1),
         [&](int64_t p) { return record_written(S::token_data_offset(p), S::kTokenDataBytes); });
  row_of("scale bytes", fmt::format("{}..{}", S::scale_region_offset(B), S::block_data_bytes(B) - 1),
         [&](int64_t p) { return record_written(S::scale_offset(B, p, 0), S::kNumTiles); });
  row_of("pad bytes", "(byte 7)", [&](int64_t p) {
    const uint8_t v = base[S::scale_offset(B, p, S::kScalePadIndex)];
    return v == 0 ? '0' : (v == kFill ? '.' : '!');
  });
  int64_t tail_fill = 0;
  for (int64_t i = S::block_data_bytes(B); i < b.stride; ++i) tail_fill += base[i] == kFill;
  outf("  {:<14} {:<13} {} bytes, {} still 0xA5 (never read or written)\n", "tail",
             fmt::format("{}..{}", S::block_data_bytes(B), b.stride - 1), b.stride - S::block_data_bytes(B),
             tail_fill);

  // Token 0 of request 0 in detail.
  const int64_t p0 = S::slot_pos(b.slots[0], B);
  const auto rep = conformance::inspect_token(
      std::span<const uint8_t>(base, static_cast<size_t>(b.stride)), B, p0, fmt);
  outf("\ntoken 0 (request 0, position {}): data at {}..{}, RoPE at {}..{}, scale record at {}..{}\n", p0,
             S::token_data_offset(p0), S::rope_offset(p0) - 1, S::rope_offset(p0),
             S::token_data_offset(p0) + S::kTokenDataBytes - 1, S::scale_offset(B, p0, 0),
             S::scale_offset(B, p0, S::kScalePadIndex));
  std::string bytes, exps;
  for (int j = 0; j < S::kNumTiles; ++j) {
    bytes += fmt::format(" {:3}", rep.scale_bytes[j]);
    exps += fmt::format(" {:3}", rep.exponent(j));
  }
  outf("  scale bytes      {}   pad {}\n", bytes, rep.pad_byte);
  outf("  exponents e      {}   (tile 1: all zero -> floor; tile 2: amax 14; tile 3: below 1e-4)\n", exps);
  outf("  tile 0, first values: input -> FP8 code -> decoded\n");
  const uint16_t* x = &b.k[0];
  for (int i = 0; i < 5; ++i) {
    const uint8_t code = base[S::fp8_code_offset(p0, i)];
    const uint16_t back = S::dequantize_element(code, rep.scale_bytes[0], fmt);
    outf("    [{}] {:>12.6g} (0x{:04x}) -> 0x{:02x} -> {:>12.6g} (0x{:04x})\n", i, S::bf16_to_f32(x[i]), x[i],
               code, S::bf16_to_f32(back), back);
  }
  outf("  decoded NoPE range [{:.6g}, {:.6g}];  RoPE[0..3] = {:.6g} {:.6g} {:.6g} {:.6g} (bit-exact copies)\n",
             rep.nope_min, rep.nope_max, S::bf16_to_f32(rep.rope[0]), S::bf16_to_f32(rep.rope[1]),
             S::bf16_to_f32(rep.rope[2]), S::bf16_to_f32(rep.rope[3]));
}

}  // namespace

int run_demo(const DemoOptions& opt) {
  std::unique_ptr<Backend> reference = conformance::make_reference_backend();
  std::string why;
  std::unique_ptr<Backend> cuda;
  if (opt.backend != "reference") cuda = conformance::make_cuda_backend(&why);
  Backend* primary = nullptr;
  if (opt.backend == "cuda") {
    if (!cuda) {
      error_line("dsv4kv demo: ", "--backend cuda, but the CUDA backend is unusable: " + why);
      return 2;
    }
    primary = cuda.get();
    outf("backend: cuda (requested)\n");
  } else if (opt.backend == "auto") {
    primary = cuda ? cuda.get() : reference.get();
    outf("backend: {} (auto: {})\n", primary->name(),
               cuda ? "a CUDA device is usable" : "no CUDA backend: " + why);
  } else {
    primary = reference.get();
    outf("backend: reference (requested)\n");
  }

  Batch batch = make_batch(opt.tokens, opt.block_size, opt.seed);
  outf("batch: {} tokens in {} requests ({}), block_size {}, {} blocks of {} bytes, seed {}\n", batch.T,
             batch.R, fmt::format("{}", fmt::join(batch.lens, "+")), batch.B, batch.num_blocks, batch.stride, opt.seed);
  outf("       slot_mapping has {} entries (last = -1 padding), k has {} rows (2 never read)\n",
             batch.slots.size(), batch.T + 2);

  int failed = 0;
  for (S::Fp8Format fmt_ : {S::Fp8Format::kE4M3Fn, S::Fp8Format::kE4M3Fnuz}) {
    const bool ocp = fmt_ == S::Fp8Format::kE4M3Fn;
    const Outputs out = run_all(*primary, batch, fmt_);
    if (ocp) draw_block(batch, out, batch.block_table[0], fmt_);
    outf("\nchecks ({}, {}):\n", primary->name(), ocp ? "e4m3fn" : "e4m3fnuz");
    Report rep;
    check_all(batch, out, fmt_, rep);
    if (cuda) {
      Backend* other = primary == cuda.get() ? reference.get() : cuda.get();
      const Outputs out2 = run_all(*other, batch, fmt_);
      compare_backends(out, out2, primary->name(), other->name(), rep);
    }
    failed += rep.failed;
  }
  if (!cuda) outf("\n(cuda == reference comparison not run: {})\n", why);
  outf("\n{}: {} check{} failed\n", failed == 0 ? "PASS" : "FAIL", failed, failed == 1 ? "" : "s");
  return failed == 0 ? 0 : 1;
}

}  // namespace dsv4kv::tools
