// The demo's shared pieces: the synthetic batch every step works on, the check report, and the
// step interface. Each operation's step is tools/demo/<op>.hpp (DemoStep<Args>); demo.cpp walks
// the operation table and names none of them.
#pragma once

#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "dsv4kv/spec.hpp"
#include "output.hpp"

namespace dsv4kv::tools::demo {

namespace S = dsv4kv::spec;
using conformance::Backend;

inline constexpr uint8_t kFill = 0xA5;       // pre-fill of every written buffer
inline constexpr uint16_t kFill16 = 0xA5A5;  // the same, seen as bf16 elements
inline constexpr int32_t kFill32 = static_cast<int32_t>(0xA5A5A5A5u);

/// The synthetic batch: R requests that together hold T tokens, the cache they live in (its
/// geometry and block table), their keys and slots, and the attention shape the index steps use.
struct Batch {
  int64_t B = 64, T = 0, R = 0, num_blocks = 0, stride = 0, bt_cols = 0;
  std::vector<int64_t> lens;            // tokens per request
  std::vector<int64_t> req_of, pos_of;  // per token
  std::vector<int32_t> block_table;     // [R, bt_cols], unused columns -1
  std::vector<uint16_t> k;              // [T + 2, 512]; rows T, T+1 are padding never written
  std::vector<int64_t> slots;           // [T + 1]; the last entry is -1
  // The attention shape: window, compression ratio, top-k, image tokens; images at positions
  // [3, 12] of request 0 (left/right visibility per token).
  int64_t W = 8, CR = 4, TOPK = 16, IMG = 6;
  std::vector<int32_t> left, right;
  // The index operations' semantics profile; one without image windows leaves IMG = 0 and no images.
  Semantics semantics = Semantics::kSeed;
  // Each token's sparse-attention selection: K positions of its own request (local indices),
  // every fifth -1; `crafted_topk_faults` of them name a position past the block-table row.
  int64_t K = 16;
  std::vector<int32_t> topk_local;  // [T, K]
  int64_t crafted_topk_faults = 0;
};

inline uint16_t bf16(float f) { return S::f32_to_bf16_rne(f); }

inline TensorView vec32(std::vector<int32_t>& v) {
  return TensorView::vec(v.data(), DType::kI32, static_cast<int64_t>(v.size()));
}

/// The batch shared by every step (the random draws of the steps follow, in table order).
inline Batch make_batch(int64_t tokens, int64_t B, Semantics semantics, std::mt19937_64& rng) {
  Batch b;
  b.semantics = semantics;
  if (!S::has_image_windows(semantics)) b.IMG = 0;
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
  b.bt_cols += 1;             // one column past every request's data, left -1
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
    k0[1 * S::kTileSize + i] = 0;                                         // tile 1: all zero -> the floor's byte
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

  // Top-k: local indices in [0, pos], every fifth -1; token 0 of the last request also names a
  // position beyond its block-table row (-1 and one report).
  b.topk_local.resize(static_cast<size_t>(tokens * b.K));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < b.K; ++c)
      b.topk_local[t * b.K + c] = (c % 5 == 4) ? -1 : static_cast<int32_t>(uniform(0, b.pos_of[t]));
  const int64_t t_fault = tokens - b.lens.back();
  b.topk_local[t_fault * b.K + 0] = static_cast<int32_t>(b.bt_cols * B + 3);
  b.crafted_topk_faults = 1;

  // Images at positions [3, 12] of request 0: how far each token sees to its left and right.
  b.left.assign(static_cast<size_t>(tokens), 0);
  b.right.assign(static_cast<size_t>(tokens), 0);
  const int64_t span_s = 3, span_e = 12;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t p = b.pos_of[t];
    if (b.IMG > 0 && b.req_of[t] == 0 && p >= span_s && p <= span_e && p < b.lens[0]) {
      b.left[t] = static_cast<int32_t>(std::min(p - span_s, b.IMG - 1));
      b.right[t] = static_cast<int32_t>(std::min(std::min(span_e, b.lens[0] - 1) - p, b.IMG));
    }
  }
  return b;
}

/// The global slot of token t's local top-k index l: block_table[req, l / B] * B + l % B, or -1
/// (l = -1, or a column past the block-table row, or an unused column).
inline int32_t global_slot(const Batch& b, int64_t t, int32_t l) {
  if (l < 0 || l / b.B >= b.bt_cols) return -1;
  const int32_t blk = b.block_table[b.req_of[t] * b.bt_cols + l / b.B];
  return blk >= 0 ? static_cast<int32_t>(blk * b.B + l % b.B) : -1;
}

/// What the steps share while they run: the cache (the first step writes it, later ones read it).
struct Context {
  std::vector<uint8_t> cache;
  S::Fp8Format fmt = S::Fp8Format::kE4M3Fn;
  TensorView cache_view(const Batch& b) { return TensorView::mat(cache.data(), DType::kU8, b.num_blocks, b.stride); }
};

struct Report {
  int failed = 0;
  void check(bool ok, const std::string& what, const std::string& detail) {
    outf("  [{}] {}{}{}\n", ok ? "PASS" : "FAIL", what, detail.empty() ? "" : ": ", detail);
    if (!ok) ++failed;
  }
};

/// Index of the first element where `a` and `b` differ; -1 when they are equal.
template <class T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

/// An operation's demo step: `template <> struct DemoStep<Args>` in tools/demo/<op>.hpp, with
///   DemoStep(const Batch&, std::mt19937_64&)   its inputs (random draws in table order)
///   void run(Backend&, Batch&, Context&)        runs the operation, keeping outputs and error count
///   void check(const Batch&, const Context&, Report&) const   what the demo can check by hand
///   int64_t first_difference(const DemoStep& other, const Context& mine, const Context& theirs) const
///   static constexpr const char* kOutputs       what first_difference compares ("k_cache", ...)
///   int32_t errors                              its error count
template <class Args>
struct DemoStep;

}  // namespace dsv4kv::tools::demo
