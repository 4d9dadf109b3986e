/// \file property_suite.hpp
/// \brief The conformance properties, written once against the Backend interface.
///
/// Each function is the body of one RapidCheck property: it draws a case with
/// `*gen`, runs it on `be` and RC_ASSERTs/RC_FAILs. properties_reference_test.cpp
/// runs them on the reference, properties_cuda_test.cpp on the CUDA backend
/// (plus the differential properties at the end of this file).
///
/// Reproducing a failure: RapidCheck prints the failing case (a tester's
/// parameters, whose `seed` fixes every bulk value) and, at the end of the run,
/// a line `RC_PARAMS="reproduce=..."`. Run the same binary with that variable
/// set, optionally restricted to the failing test:
///
///     RC_PARAMS="reproduce=BhVZ..." ./properties_reference_test --gtest_filter=ReferenceProperties.QuantizeRoundTrip
///
/// `RC_PARAMS="seed=N"` replays a whole run; `max_success=1000` runs more cases.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "backend.hpp"
#include "tester_generators.hpp"
#include "testers.hpp"

namespace dsv4kv::conformance::props {

/// RC_FAIL with the message unless it is empty (messages come from first_mismatch and friends).
inline void require_empty(const std::string& message) {
  if (!message.empty()) RC_FAIL(message);
}

/// Half the FP8 step at |y| (y = x / 2^e) in the format of `f`: the worst
/// round-to-nearest error of a value in y's binade (the subnormal step below 2^(1-bias)).
inline double half_fp8_step(double y, Fp8Format f) {
  const int bias = spec::fp8_traits(f).bias;
  int binade = 1 - bias;
  if (y > 0) binade = std::max(binade, static_cast<int>(std::floor(std::log2(y))));
  return std::ldexp(0.5, binade - 3);
}

/// Half a bf16 step at |v| (the rounding of the dequantized output).
inline double half_bf16_step(double v) {
  int binade = -126;
  if (v > 0) binade = std::max(binade, static_cast<int>(std::floor(std::log2(v))));
  return std::ldexp(0.5, binade - 7);
}

/// Gathers every slot of a quantize case's cache, in slot order, through `be`'s
/// dequantize_and_gather_k_cache (one request whose block table lists every block).
/// Returns the output's bf16 bits, [capacity, 512].
inline std::vector<uint16_t> gather_all_slots(Backend& be, const QuantizeTester& q) {
  const int64_t cap = q.capacity();
  GuardedBuffer out(static_cast<size_t>(cap * spec::kHeadDim) * 2);
  std::vector<int32_t> table(static_cast<size_t>(q.num_blocks()));
  std::iota(table.begin(), table.end(), 0);
  int32_t seq_len = static_cast<int32_t>(cap);
  int32_t errors = 0;
  DequantizeGatherArgs a;
  a.out = TensorView::cube(out.data(), DType::kBF16, 1, cap, spec::kHeadDim);
  a.k_cache = TensorView::mat(const_cast<uint8_t*>(q.cache().data()), DType::kU8, q.num_blocks(), q.stride(), q.stride());
  a.seq_lens = TensorView::vec(&seq_len, DType::kI32, 1);
  a.block_table = TensorView::mat(table.data(), DType::kI32, 1, q.num_blocks());
  a.block_size = q.block_size();
  a.format = q.format();
  a.error_count = &errors;
  be.dequantize_and_gather_k_cache(a);
  RC_ASSERT(errors == 0);
  std::vector<uint16_t> v(static_cast<size_t>(cap * spec::kHeadDim));
  for (size_t i = 0; i < v.size(); ++i) v[i] = out.load<uint16_t>(i);
  return v;
}

// ---------------------------------------------------------------------------
// quantize_and_insert_k_cache
// ---------------------------------------------------------------------------

/// quantize -> dequantize (through the backend's gather) is within half an FP8
/// step of the tile scale for finite input, plus the bf16 rounding of the output:
/// |deq - x| <= 0.5 * ulp_fp8(|x| / 2^e) * 2^e + 0.5 * ulp_bf16(|deq|).
/// The stored scale byte is tile_scale(amax).byte, the sign is kept. One
/// exception the spec implies: for |x| within half a step of the bf16 maximum
/// the FP8 value may round up to 2^128 (e.g. x = 0x7F7E: e = 120, x/2^e = 254
/// rounds to 256), and the dequantized bf16 is then +-inf.
inline void quantize_round_trip(Backend& be, std::optional<bool> fnuz) {
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/false, fnuz);
  q.Run(be);
  const std::vector<uint16_t> deq = gather_all_slots(be, q);
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t s = 0; s < q.capacity(); ++s) {
    const int64_t t = writer[s];
    if (t < 0) continue;
    const int64_t blk = s / q.block_size(), pos = s % q.block_size();
    for (int j = 0; j < spec::kNumTiles; ++j) {
      float amax = 0.0f;
      for (int i = 0; i < spec::kTileSize; ++i)
        amax = std::max(amax, std::fabs(spec::bf16_to_f32(q.k(t, j * spec::kTileSize + i))));
      const uint8_t sbyte = q.cache_byte(blk, spec::scale_offset(q.block_size(), pos, j));
      const spec::TileScale ts = spec::tile_scale(amax, q.format());
      if (sbyte != ts.byte) {
        std::ostringstream m;
        m << "token " << t << " slot " << s << " tile " << j << ": scale byte " << int(sbyte) << ", expected "
          << int(ts.byte) << " for amax " << amax;
        RC_FAIL(m.str());
      }
      const int e = int(sbyte) - spec::kScaleBias;
      for (int i = 0; i < spec::kTileSize; ++i) {
        const int col = j * spec::kTileSize + i;
        const double x = spec::bf16_to_f32(q.k(t, col));
        const double d = spec::bf16_to_f32(deq[s * spec::kHeadDim + col]);
        const double fp8_bound = half_fp8_step(std::ldexp(std::fabs(x), -e), q.format()) * std::ldexp(1.0, e);
        // Near the bf16 maximum the FP8 rounding may carry into 2^128, which the
        // bf16 output cannot hold: then (and only then) the spec gives +-inf.
        const bool may_overflow = std::fabs(x) + fp8_bound > double(spec::bf16_to_f32(0x7F7F));
        const bool ok = std::isinf(d) ? may_overflow : std::fabs(d - x) <= fp8_bound + half_bf16_step(std::fabs(d));
        const double bound = fp8_bound + half_bf16_step(std::fabs(d));
        if (!ok || (d != 0 && std::signbit(d) != std::signbit(x))) {
          std::ostringstream m;
          m << "token " << t << " slot " << s << " column " << col << ": x = " << x << " (bf16 0x" << std::hex
            << q.k(t, col) << std::dec << "), dequantized " << d << ", |error| " << std::fabs(d - x)
            << " > bound " << bound << " (scale 2^" << e << ")";
          RC_FAIL(m.str());
        }
      }
    }
  }
}

/// The 64 RoPE values of every written token are copied bit for bit (every bf16
/// pattern, NaN payloads included), and the scale pad byte is 0.
inline void quantize_rope_bit_exact_and_pad_zero(Backend& be) {
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/true);
  q.Run(be);
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t s = 0; s < q.capacity(); ++s) {
    const int64_t t = writer[s];
    if (t < 0) continue;
    const int64_t blk = s / q.block_size(), pos = s % q.block_size();
    for (int i = 0; i < spec::kRopeDim; ++i) {
      const uint16_t want = q.k(t, spec::kNopeDim + i);
      const int64_t off = spec::rope_offset(pos) + 2 * i;
      const uint16_t got = static_cast<uint16_t>(q.cache_byte(blk, off) | (q.cache_byte(blk, off + 1) << 8));
      RC_ASSERT(got == want);
    }
    RC_ASSERT(q.cache_byte(blk, spec::scale_offset(q.block_size(), pos, spec::kScalePadIndex)) == 0);
  }
}

/// A mapping of only -1 slots writes nothing and counts nothing.
inline void quantize_minus_one_slots_write_nothing(Backend& be) {
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/true);
  q.pad_fraction(1.0).invalid_fraction(0.0).count_errors(true);
  q.Run(be);
  const GuardedBuffer untouched(q.cache().size());
  require_empty(first_mismatch(untouched.bytes(), q.cache().bytes(), "k_cache"));
  RC_ASSERT(q.error_count() == 0);
}

/// Only the data and scale records of tokens with a valid slot change: bytes of
/// other positions, the block tail (block_size*584 .. stride) and everything
/// outside the cache keep their 0xA5 fill; error_count counts every out-of-range
/// slot other than -1 and every non-finite NoPE element of a written token.
inline void quantize_touches_only_written_tokens(Backend& be, Validity v) {
  QuantizeTester q = *gen_quantize(v, /*nonfinite=*/true);
  q.Run(be);
  std::vector<uint8_t> written(q.cache().size(), 0);
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t s = 0; s < q.capacity(); ++s) {
    if (writer[s] < 0) continue;
    const int64_t base = (s / q.block_size()) * q.stride(), pos = s % q.block_size();
    std::fill_n(written.begin() + base + spec::token_data_offset(pos), spec::kTokenDataBytes, 1);
    std::fill_n(written.begin() + base + spec::scale_offset(q.block_size(), pos, 0), spec::kScaleBytesPerToken, 1);
  }
  for (size_t i = 0; i < written.size(); ++i)
    if (!written[i] && q.cache().data()[i] != kFillByte) {
      std::ostringstream m;
      m << "k_cache byte " << i << " (block " << i / q.stride() << ", offset " << i % q.stride()
        << ") is outside every written token but changed from 0xA5 to 0x" << std::hex << int(q.cache().data()[i]);
      RC_FAIL(m.str());
    }
  require_empty(check_all_guards(q.buffers()));
  RC_ASSERT(q.error_count() == (q.count_errors_enabled() ? q.expected_error_count() : 0));
}

/// FNUZ never stores 0x80 (its only NaN; FNUZ has no -0), whatever the input.
inline void fnuz_never_writes_0x80(Backend& be) {
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/true, /*fnuz=*/true);
  q.Run(be);
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t s = 0; s < q.capacity(); ++s) {
    if (writer[s] < 0) continue;
    const int64_t blk = s / q.block_size(), pos = s % q.block_size();
    for (int i = 0; i < spec::kNopeDim; ++i) RC_ASSERT(q.cache_byte(blk, spec::fp8_code_offset(pos, i)) != 0x80);
  }
}

/// Encoding is monotonic: inside a tile (one scale), a larger finite input never
/// gets a smaller decoded code.
inline void quantize_monotonic(Backend& be, std::optional<bool> fnuz) {
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/false, fnuz);
  q.Run(be);
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t s = 0; s < q.capacity(); ++s) {
    const int64_t t = writer[s];
    if (t < 0) continue;
    const int64_t blk = s / q.block_size(), pos = s % q.block_size();
    for (int j = 0; j < spec::kNumTiles; ++j) {
      std::vector<std::pair<float, float>> xc;  // (input, decoded code)
      for (int i = 0; i < spec::kTileSize; ++i) {
        const int col = j * spec::kTileSize + i;
        xc.emplace_back(spec::bf16_to_f32(q.k(t, col)),
                        spec::fp8_decode(q.cache_byte(blk, spec::fp8_code_offset(pos, col)), q.format()));
      }
      std::sort(xc.begin(), xc.end());
      for (size_t i = 1; i < xc.size(); ++i) RC_ASSERT(xc[i - 1].second <= xc[i].second);
    }
  }
}

// ---------------------------------------------------------------------------
// dequantize_and_gather_k_cache
// ---------------------------------------------------------------------------

/// The output holds exactly the rows [offset, offset + gather_len) of each
/// well-formed request whose block-table lookup is in range, each equal to the
/// per-element spec (dequantize_element of its code and scale byte, RoPE bits
/// copied); every other byte of `out` (other rows, row and batch padding, extra
/// batch entries) keeps 0xA5, and error_count follows the failure model.
inline void gather_writes_exactly_requested_rows(Backend& be, Validity v) {
  GatherTester g = *gen_gather(v);
  g.Run(be);
  if (v == Validity::kValid) RC_ASSERT(g.expected_error_count() == 0);  // the generator's own promise
  GuardedBuffer expected(g.out_buffer().size());
  const int64_t B = g.block_size();
  for (int64_t b = 0; b < g.requests(); ++b)
    for (int64_t row = 0; row < g.out_rows(); ++row) {
      int64_t pos = 0;
      const int64_t blk = g.expected_block(b, row, &pos);
      if (blk < 0) continue;
      for (int c = 0; c < spec::kNopeDim; ++c) {
        const uint8_t code = g.cache_byte(blk, spec::fp8_code_offset(pos, c));
        const uint8_t scale = g.cache_byte(blk, spec::scale_offset(B, pos, c / spec::kTileSize));
        expected.store<uint16_t>(g.out_index(b, row, c), spec::dequantize_element(code, scale, g.format()));
      }
      for (int c = 0; c < spec::kRopeDim; ++c) {
        const int64_t off = spec::rope_offset(pos) + 2 * c;
        expected.store<uint16_t>(g.out_index(b, row, spec::kNopeDim + c),
                                 static_cast<uint16_t>(g.cache_byte(blk, off) | (g.cache_byte(blk, off + 1) << 8)));
      }
    }
  require_empty(first_mismatch(expected.bytes(), g.out_buffer().bytes(), "out"));
  require_empty(check_all_guards(g.buffers()));
  RC_ASSERT(int64_t{g.error_count()} == (g.count_errors_enabled() ? g.expected_error_count() : 0));
}

// ---------------------------------------------------------------------------
// compute_global_topk_indices_and_lens
// ---------------------------------------------------------------------------

/// out[t, c] = block_table[req, l / B] * B + l % B for in-range l; every negative
/// local index (-1, -2, INT_MIN) stays -1 without a count; out-of-row columns and
/// negative entries give -1 and a count; a bad request gives an all -1 row, len 0,
/// one count; lens = is_valid ? #{c : out >= 0} : 0. Row padding stays 0xA5.
inline void global_topk_follows_block_table(Backend& be, Validity v) {
  GlobalTopkTester g = *gen_global_topk(v);
  g.Run(be);
  int64_t faults = 0;
  for (int64_t t = 0; t < g.tokens(); ++t) {
    const bool bad_req = g.request(t) < 0 || g.request(t) >= g.requests();
    faults += bad_req ? 1 : 0;
    int64_t count = 0;
    for (int64_t c = 0; c < g.topk(); ++c) {
      const int32_t want = g.expected_global(t, c, &faults);
      if (g.local(t, c) < 0) RC_ASSERT(g.global(t, c) == -1);  // sentinel survives
      if (g.global(t, c) != want) {
        std::ostringstream m;
        m << "global_topk_indices[" << t << ", " << c << "] = " << g.global(t, c) << ", expected " << want
          << " (local " << g.local(t, c) << ", request " << g.request(t) << ")";
        RC_FAIL(m.str());
      }
      count += want >= 0 ? 1 : 0;
    }
    RC_ASSERT(g.len(t) == (g.valid_token(t) && !bad_req ? count : 0));
  }
  RC_ASSERT(int64_t{g.error_count()} == (g.count_errors_enabled() ? faults : 0));
  if (v == Validity::kValid) RC_ASSERT(faults == 0);  // the generator's own promise
  // Row padding of the output is never written.
  for (int64_t t = 0; t < g.tokens(); ++t)
    for (int64_t c = g.topk(); c < g.out_row_stride(); ++c)
      RC_ASSERT(g.out_buffer().load<uint32_t>(t * g.out_row_stride() + c) == 0xA5A5A5A5u);
  require_empty(check_all_guards(g.buffers()));
}

// ---------------------------------------------------------------------------
// combine_topk_swa_indices
// ---------------------------------------------------------------------------

/// Rows are exactly round_up(topk + window + max_image_tokens, 128) wide (other
/// widths are rejected), 0 <= len <= width, every column at or beyond len is -1;
/// for a token of a well-formed request the first topk_len columns hold
/// topk + M*b (negative inputs stay -1) and the SWA part is one ascending run
/// starting at or after M*b + N.
inline void combine_rows_well_formed(Backend& be, Validity v) {
  CombineTester c = *gen_combine(v);
  c.Run(be);
  const int64_t W = c.width();
  RC_ASSERT(W % 128 == 0);
  RC_ASSERT(W >= c.topk() + c.window() + c.max_image_tokens());
  RC_ASSERT(W < c.topk() + c.window() + c.max_image_tokens() + 128);
  for (int64_t t = 0; t < c.tokens(); ++t) {
    const int64_t len = c.len(t);
    RC_ASSERT(len >= 0 && len <= W);
    for (int64_t j = len; j < W; ++j)
      if (c.out(t, j) != -1) {
        std::ostringstream m;
        m << "combined_indices[" << t << ", " << j << "] = " << c.out(t, j) << " beyond length " << len;
        RC_FAIL(m.str());
      }
    int64_t b = 0, pos = 0;
    if (v != Validity::kValid || !c.token_position(t, &b, &pos)) continue;
    const int64_t topk_len = std::min((pos + 1) / c.compress_ratio(), c.topk());
    RC_ASSERT(len >= topk_len);
    for (int64_t j = 0; j < topk_len; ++j) {
      const int64_t in = c.topk_in(t, j);
      const int64_t want = in < 0 ? -1 : c.M() * b + in;
      RC_ASSERT(int64_t{c.out(t, j)} == want);
    }
    const int64_t n = len - topk_len;
    RC_ASSERT(n <= c.window() + c.max_image_tokens());
    if (!c.has_visibility()) RC_ASSERT(n <= c.window());
    for (int64_t j = 0; j < n; ++j) {
      RC_ASSERT(int64_t{c.out(t, topk_len + j)} >= c.M() * b + c.N());
      if (j > 0) RC_ASSERT(c.out(t, topk_len + j) == c.out(t, topk_len + j - 1) + 1);
    }
    // The window ends at the token itself when nobody widens it to the right.
    if (n > 0 && c.right(t) == 0) {
      const int64_t last = c.out(t, topk_len + n - 1) - c.M() * b - c.N();  // = pos - gather_start
      RC_ASSERT(last == pos - (c.seq_len(b) - c.gather_len(b)));
    }
  }
  if (v == Validity::kValid) RC_ASSERT(c.error_count() == 0);
  require_empty(check_all_guards(c.buffers()));
}

/// validate() rejects a combined_indices width other than round_up(topk + window + max_image_tokens, 128).
inline void combine_rejects_wrong_width(Backend& be) {
  CombineTester c = *gen_combine(Validity::kValid);
  const int64_t wrong = c.width() + *rc::gen::elementOf(std::vector<int64_t>{-1, 1, 128});
  bool threw = false;
  try {
    c.RunWithWidth(be, wrong);
  } catch (const dsv4kv::Error&) {
    threw = true;
  }
  RC_ASSERT(threw);
}

/// Visibility arrays of zeros give the same rows as no arrays (image widening with
/// left = right = 0 is the plain window); compared with max_image_tokens = 0, the
/// rows agree on every column the narrower row has and the rest are -1.
inline void combine_zero_visibility_is_plain_window(Backend& be) {
  CombineTester zero = *gen_combine(Validity::kValid, /*visibility=*/true);
  zero.zero_visibility(true);
  CombineTester none = zero;
  none.visibility(false);
  CombineTester narrow = none;
  narrow.max_image_tokens(0);
  zero.Run(be);
  none.Run(be);
  narrow.Run(be);
  require_empty(first_mismatch(none.out_buffer().bytes(), zero.out_buffer().bytes(), "combined_indices"));
  require_empty(first_mismatch(none.lens_buffer().bytes(), zero.lens_buffer().bytes(), "combined_lens"));
  RC_ASSERT(zero.error_count() == none.error_count());
  for (int64_t t = 0; t < zero.tokens(); ++t) {
    RC_ASSERT(zero.len(t) == narrow.len(t));
    for (int64_t j = 0; j < zero.width(); ++j)
      RC_ASSERT(zero.out(t, j) == (j < narrow.width() ? narrow.out(t, j) : -1));
  }
}

/// Visibility arrays passed with max_image_tokens == 0 are not read (vLLM's IMAGE_WIDTH == 0 gate):
/// the rows and the error count equal those of the same case without the arrays, although the
/// arrays hold arbitrary values, negatives included.
inline void combine_visibility_ignored_without_image_columns(Backend& be) {
  CombineTester with = *gen_combine(*rc::gen::element(Validity::kValid, Validity::kInvalid), /*visibility=*/true);
  with.max_image_tokens(0);
  CombineTester without = with;
  without.visibility(false);
  with.Run(be);
  without.Run(be);
  require_empty(first_mismatch(without.out_buffer().bytes(), with.out_buffer().bytes(), "combined_indices"));
  require_empty(first_mismatch(without.lens_buffer().bytes(), with.lens_buffer().bytes(), "combined_lens"));
  RC_ASSERT(with.error_count() == without.error_count());
}

// ---------------------------------------------------------------------------
// build_flashinfer_mixed_sparse_indices
// ---------------------------------------------------------------------------

/// Row width = swa_width + image_width + round_up(max(topk, decode_topk), 4) (other
/// widths are rejected); the compressed region's padding columns are -1 in every
/// row, as are the image columns of decode rows; negative (sentinel) decode and
/// prefill indices stay -1; a row of length 0 is all -1.
inline void mixed_rows_well_formed(Backend& be, Validity v) {
  MixedSparseTester m = *gen_mixed(v);
  m.Run(be);
  const int64_t SW = m.swa_width(), ST = SW + m.image_width(), W = m.width();
  const int64_t kmax = std::max(m.topk(), m.dct());
  const int64_t P4 = W - ST;
  RC_ASSERT(P4 % 4 == 0 && P4 >= kmax && P4 < kmax + 4);
  for (int64_t t = 0; t < m.rows(); ++t) {
    for (int64_t c = ST + kmax; c < W; ++c) RC_ASSERT(m.out(t, c) == -1);  // alignment padding
    // A malformed row has length 0 and is all -1. A decode row's length can also be 0 because the
    // caller's decode_compressed_topk_lens say so; its entries are then still the caller's indices.
    const bool caller_len = t < m.decode_tokens() && m.has_decode_lens();
    if (m.len(t) == 0 && !caller_len)
      for (int64_t c = 0; c < W; ++c) RC_ASSERT(m.out(t, c) == -1);
    if (t < m.decode_tokens()) {
      for (int64_t c = SW; c < ST; ++c) RC_ASSERT(m.out(t, c) == -1);  // no image columns for decode
      for (int64_t c = 0; c < SW; ++c)
        if (m.decode_swa(t, c) < 0) RC_ASSERT(m.out(t, c) == -1);
      for (int64_t c = 0; c < m.dct(); ++c)
        if (m.decode_comp(t, c) < 0) RC_ASSERT(m.out(t, ST + c) == -1);
    } else {
      const int64_t p = t - m.decode_tokens();
      for (int64_t c = 0; c < std::min(m.prefill_cols(), kmax); ++c)
        if (m.prefill_topk_in(p, c) < 0) RC_ASSERT(m.out(t, ST + c) == -1);
      for (int64_t c = std::min(m.prefill_cols(), kmax); c < kmax; ++c) RC_ASSERT(m.out(t, ST + c) == -1);
      RC_ASSERT(m.len(t) == 0 || (m.len(t) >= ST && m.len(t) <= ST + m.topk()));
    }
  }
  const int64_t wrong = W + *rc::gen::elementOf(std::vector<int64_t>{-1, 1, 4});
  bool threw = false;
  try {
    MixedSparseTester copy = m;
    copy.RunWithWidth(be, wrong);
  } catch (const dsv4kv::Error&) {
    threw = true;
  }
  RC_ASSERT(threw);
  require_empty(check_all_guards(m.buffers()));
}

/// Prefill visibility arrays of zeros equal no arrays apart from the image
/// columns: removing columns [swa_width, swa_width + max_image_tokens) gives the
/// plain rows, those columns are -1, and every non-empty row is max_image_tokens longer.
inline void mixed_zero_visibility_is_plain_window(Backend& be) {
  MixedSparseTester zero = *gen_mixed(Validity::kValid, /*visibility=*/true);
  zero.zero_visibility(true);
  MixedSparseTester none = zero;
  none.visibility(false);
  zero.Run(be);
  none.Run(be);
  const int64_t SW = zero.swa_width(), IMG = zero.max_image_tokens();
  RC_ASSERT(zero.width() == none.width() + IMG);
  for (int64_t t = 0; t < zero.rows(); ++t) {
    for (int64_t c = 0; c < zero.width(); ++c) {
      const int32_t got = zero.out(t, c);
      const int32_t want = c < SW ? none.out(t, c) : (c < SW + IMG ? -1 : none.out(t, c - IMG));
      if (got != want) {
        std::ostringstream msg;
        msg << "row " << t << " column " << c << ": " << got << " with zero visibility, " << want << " without";
        RC_FAIL(msg.str());
      }
    }
    RC_ASSERT(zero.len(t) == (none.len(t) == 0 ? 0 : none.len(t) + IMG));
  }
  RC_ASSERT(zero.error_count() == none.error_count());
}

/// Prefill visibility arrays passed with max_image_tokens == 0 are not read: no image columns, and
/// rows and error count equal those of the same case without the arrays.
inline void mixed_visibility_ignored_without_image_columns(Backend& be) {
  MixedSparseTester with = *gen_mixed(*rc::gen::element(Validity::kValid, Validity::kInvalid), /*visibility=*/true);
  with.max_image_tokens(0);
  MixedSparseTester without = with;
  without.visibility(false);
  with.Run(be);
  without.Run(be);
  RC_ASSERT(with.width() == without.width());
  require_empty(first_mismatch(without.out_buffer().bytes(), with.out_buffer().bytes(), "sparse_indices"));
  require_empty(first_mismatch(without.lens_buffer().bytes(), with.lens_buffer().bytes(), "sparse_topk_lens"));
  RC_ASSERT(with.error_count() == without.error_count());
}

// ---------------------------------------------------------------------------
// Differential properties (reference vs another backend)
// ---------------------------------------------------------------------------

/// Runs one case on `ref` and twice on `be` (fresh fills each time) and requires
/// every buffer, inputs and guards included, and the error counts to be byte-identical.
template <class Tester>
void differential(Backend& ref, Backend& be, Tester t) {
  Tester a = t, b = t, c = t;
  a.Run(ref);
  b.Run(be);
  c.Run(be);
  require_empty(compare_buffers(a.buffers(), b.buffers()));
  require_empty(compare_buffers(b.buffers(), c.buffers()));  // run to run
  RC_ASSERT(a.error_count() == b.error_count());
}

inline Validity draw_validity() {
  return *rc::gen::arbitrary<bool>() ? Validity::kValid : Validity::kInvalid;
}

/// Duplicate slots are excluded (their bytes are unspecified on the GPU).
inline void differential_quantize(Backend& ref, Backend& be) {
  differential(ref, be, *gen_quantize(draw_validity(), /*nonfinite=*/true));
}
inline void differential_gather(Backend& ref, Backend& be) { differential(ref, be, *gen_gather(draw_validity())); }
inline void differential_global_topk(Backend& ref, Backend& be) {
  differential(ref, be, *gen_global_topk(draw_validity()));
}
inline void differential_combine(Backend& ref, Backend& be) { differential(ref, be, *gen_combine(draw_validity())); }
inline void differential_mixed(Backend& ref, Backend& be) { differential(ref, be, *gen_mixed(draw_validity())); }

}  // namespace dsv4kv::conformance::props
