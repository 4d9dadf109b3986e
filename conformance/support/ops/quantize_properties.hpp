/// \file quantize_properties.hpp
/// \brief RapidCheck generator and properties of quantize_and_insert_k_cache, and its registration.
#pragma once

#include "bad_inputs.hpp"
#include "property_common.hpp"
#include "quantize.hpp"
#include "record_model.hpp"

namespace dsv4kv::conformance {

/// A random quantize case. Valid cases have unique slots (plus -1 padding).
/// \param nonfinite may the NoPE values hold NaN/inf  \param fnuz force the format (nullopt = random)
/// \param record the record (nullopt = the 584-byte one half of the time, else a V4.1 record with e4m3fn)
inline rc::Gen<QuantizeTester> gen_quantize(Validity v, bool nonfinite, std::optional<bool> fnuz = std::nullopt,
                                            std::optional<Record> record = Record::kFp8DsMla) {
  return rc::gen::exec([=] {
    const Record rec = record ? *record : *gen_any_record();
    if (rec != Record::kFp8DsMla) {
      const int64_t bs = *rc::gen::elementOf(std::vector<int64_t>{1, 2, 7, 16, 32, 64, 128});
      const int64_t tokens = *gen_count(32, bs, 200);
      const int64_t min_blocks = (tokens + bs - 1) / bs;
      QuantizeTester t;
      t.record(rec)
          .tokens(tokens)
          .block_size(bs)
          .extra_k_rows(*rc::gen::inRange<int64_t>(0, 3))
          .k_row_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 8, 3}))
          .num_blocks(*rc::gen::inRange<int64_t>(std::max<int64_t>(min_blocks, 1), min_blocks + 3))
          .stride(*gen_record_stride(rec, bs))
          .cache_lead(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 0, 1, 6}))
          .tight_cache_rows(*rc::gen::arbitrary<bool>())
          .nonfinite(nonfinite && *rc::gen::arbitrary<bool>())
          .pad_fraction(*rc::gen::elementOf(std::vector<double>{0.0, 0.1, 0.5}))
          .invalid_fraction(draw_invalid_fraction(v))
          .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
          .seed(*gen_seed());
      return t;
    }
    const int64_t bs = *gen_block_size();
    const int64_t tokens = *gen_count(spec::kTileSize, bs, 200);
    const int64_t min_blocks = (tokens + bs - 1) / bs;
    QuantizeTester t;
    t.tokens(tokens)
        .block_size(bs)
        .extra_k_rows(*rc::gen::inRange<int64_t>(0, 3))
        .k_row_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 8, 64}))
        .num_blocks(*rc::gen::inRange<int64_t>(std::max<int64_t>(min_blocks, 1), min_blocks + 3))
        .stride(*gen_stride(bs))
        .cache_lead(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 0, 2, 6}))
        .tight_cache_rows(*rc::gen::arbitrary<bool>())
        .fnuz(fnuz ? *fnuz : *rc::gen::arbitrary<bool>())
        .nonfinite(nonfinite && *rc::gen::arbitrary<bool>())
        .pad_fraction(*rc::gen::elementOf(std::vector<double>{0.0, 0.1, 0.5}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

namespace props {

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
  a.k_cache = TensorView::mat(const_cast<uint8_t*>(q.cache().data()) + q.cache_lead(), DType::kU8, q.num_blocks(),
                              q.stride(), q.stride());
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

/// Calls `f(t, s, block, pos)` for every slot `s` of the cache that a token wrote, with `t` the
/// token that (last) wrote it.
template <class F>
void for_each_written_slot(const QuantizeTester& q, F&& f) {
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t s = 0; s < q.capacity(); ++s)
    if (writer[s] >= 0) f(writer[s], s, s / q.block_size(), s % q.block_size());
}

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
  for_each_written_slot(q, [&](int64_t t, int64_t s, int64_t blk, int64_t pos) {
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
            << q.k(t, col) << std::dec << "), dequantized " << d << ", |error| " << std::fabs(d - x) << " > bound "
            << bound << " (scale 2^" << e << ")";
          RC_FAIL(m.str());
        }
      }
    }
  });
}

/// The 64 RoPE values of every written token are copied bit for bit (every bf16
/// pattern, NaN payloads included), and the scale pad byte is 0.
inline void quantize_rope_bit_exact_and_pad_zero(Backend& be) {
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/true);
  q.Run(be);
  for_each_written_slot(q, [&](int64_t t, int64_t /*s*/, int64_t blk, int64_t pos) {
    for (int i = 0; i < spec::kRopeDim; ++i) {
      const uint16_t want = q.k(t, spec::kNopeDim + i);
      const int64_t off = spec::rope_offset(pos) + 2 * i;
      const uint16_t got = static_cast<uint16_t>(q.cache_byte(blk, off) | (q.cache_byte(blk, off + 1) << 8));
      RC_ASSERT(got == want);
    }
    RC_ASSERT(q.cache_byte(blk, spec::scale_offset(q.block_size(), pos, spec::kScalePadIndex)) == 0);
  });
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
    const int64_t base = q.cache_lead() + (s / q.block_size()) * q.stride(), pos = s % q.block_size();
    std::fill_n(written.begin() + base + spec::token_data_offset(pos), spec::kTokenDataBytes, 1);
    std::fill_n(written.begin() + base + spec::scale_offset(q.block_size(), pos, 0), spec::kScaleBytesPerToken, 1);
  }
  for (size_t i = 0; i < written.size(); ++i)
    if (!written[i] && q.cache().data()[i] != kFillByte) {
      std::ostringstream m;
      const int64_t at = static_cast<int64_t>(i) - q.cache_lead();  // negative: before the view
      m << "k_cache byte " << at << " (block " << at / q.stride() << ", offset " << at % q.stride()
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
  for_each_written_slot(q, [&](int64_t t, int64_t /*s*/, int64_t blk, int64_t pos) {
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
  });
}

/// With duplicate slots the last token wins (reference only: the GPU leaves those bytes unspecified).
inline void quantize_duplicate_slots_last_token_wins(Backend& be) {
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/true);
  q.duplicates(true);
  q.Run(be);
  std::vector<int64_t> last(static_cast<size_t>(q.tokens()));
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t t = 0; t < q.tokens(); ++t) {
    const int64_t s = q.slot(t);
    last[t] = (s >= 0 && s < q.capacity() && writer[s] != t) ? -1 : s;
  }
  QuantizeTester unique = q;
  unique.slots(last);  // same seed: same keys, earlier duplicates replaced by -1
  unique.Run(be);
  require_empty(first_mismatch(unique.cache().bytes(), q.cache().bytes(), "k_cache"));
}

/// V4.1 records (spec/records.md): every written token decodes within its format's bound of its
/// key (finite keys): MXFP8 half an e4m3 step of x / 2^e times 2^e plus half a bf16 step; the FP4
/// records half an e2m1 step of x / scale times the scale, plus what saturation at 6 cuts off
/// (their products are exact in bf16). A key within a rounding step of the bf16 maximum may decode
/// to +-inf (its product reaches 2^128). Scale bytes follow the group rule computed with double
/// (and fp32 for the FP4 scale) arithmetic; the counter holds the out-of-range slots.
inline void quantize_records_round_trip(Backend& be) {
  const Record r = *gen_v41_record();
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/false, false, r);
  q.Run(be);
  RC_ASSERT(q.error_count() == (q.count_errors_enabled() ? q.expected_error_count() : 0));
  const spec::RecordLayout L = q.layout();
  for_each_written_slot(q, [&](int64_t t, int64_t s, int64_t blk, int64_t pos) {
    std::vector<uint8_t> block(static_cast<size_t>(q.stride()));
    for (int64_t o = 0; o < q.stride(); ++o) block[o] = q.cache_byte(blk, o);
    for (int g = 0; g < L.num_scales(); ++g) {
      double amax = 0;
      for (int i = 0; i < L.group; ++i)
        amax = std::max(amax, std::fabs(double{spec::bf16_to_f32(q.k(t, g * L.group + i))}));
      const uint8_t sbyte = block[L.scale_offset(q.block_size(), pos, g)];
      double scale = 0;
      int want = 0;
      if (r == Record::kMxfp8DsMla) {  // amax >= 1e-4f; ceil(log2(amax / 448))
        want = 127 + static_cast<int>(std::ceil(std::log2(std::max(amax, double{1e-4f}) / 448.0)));
        scale = std::ldexp(1.0, sbyte - 127);
      } else if (r == Record::kNvfp4DsMla) {  // amax / 6 in fp32, clamped, to e4m3fn
        want = spec::fp8_encode_satfinite(std::min(std::max(static_cast<float>(amax) / 6.0f, 0x1p-9f), 448.0f),
                                          Fp8Format::kE4M3Fn);
        scale = spec::fp8_decode(sbyte, Fp8Format::kE4M3Fn);
      } else {  // amax >= 6 * 2^-126; ceil(log2(amax / 6))
        want = 127 + static_cast<int>(std::ceil(std::log2(std::max(amax, std::ldexp(6.0, -126)) / 6.0)));
        scale = std::ldexp(1.0, sbyte - 127);
      }
      if (sbyte != want) {
        std::ostringstream m;
        m << spec::record_name(r) << " slot " << s << " group " << g << ": scale byte " << int(sbyte) << ", expected "
          << want << " for amax " << amax;
        RC_FAIL(m.str());
      }
      for (int i = 0; i < L.group; ++i) {
        const int col = g * L.group + i;
        const double x = spec::bf16_to_f32(q.k(t, col));
        const double d = spec::bf16_to_f32(model_decode(r, block.data(), q.block_size(), pos, col));
        double bound = 0;
        if (r == Record::kMxfp8DsMla)
          bound = half_fp8_step(std::fabs(x) / scale, Fp8Format::kE4M3Fn) * scale + half_bf16_step(std::fabs(d));
        else
          bound = (std::fabs(x) / scale < 2 ? 0.25 : (std::fabs(x) / scale < 4 ? 0.5 : 1.0)) * scale +
                  std::max(0.0, std::fabs(x) - 6 * scale);
        const bool ok = std::isinf(d) ? std::fabs(x) >= 0x1p127 : std::fabs(d - x) <= bound;
        if (!ok || (d != 0 && std::signbit(d) != std::signbit(x))) {
          std::ostringstream m;
          m << spec::record_name(r) << " slot " << s << " column " << col << ": x = " << x << ", decoded " << d
            << ", |error| " << std::fabs(d - x) << " > bound " << bound;
          RC_FAIL(m.str());
        }
      }
    }
  });
}

/// V4.1 records: only the data and scale records of tokens with a valid slot change; every other
/// byte of the cache buffer (other positions, block tails, bytes before the view) keeps its fill;
/// the counter holds the out-of-range slots and the non-finite values of written tokens.
inline void quantize_records_touch_only_written_tokens(Backend& be, Validity v) {
  QuantizeTester q = *gen_quantize(v, /*nonfinite=*/true, false, *gen_v41_record());
  q.Run(be);
  const spec::RecordLayout L = q.layout();
  std::vector<uint8_t> written(q.cache().size(), 0);
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t s = 0; s < q.capacity(); ++s) {
    if (writer[s] < 0) continue;
    const int64_t base = q.cache_lead() + (s / q.block_size()) * q.stride(), pos = s % q.block_size();
    std::fill_n(written.begin() + base + L.data_offset(pos), L.data_bytes(), 1);
    std::fill_n(written.begin() + base + L.scale_offset(q.block_size(), pos, 0), L.scale_bytes, 1);
  }
  for (size_t i = 0; i < written.size(); ++i)
    if (!written[i] && q.cache().data()[i] != kFillByte) {
      std::ostringstream m;
      m << spec::record_name(q.record()) << ": k_cache byte " << static_cast<int64_t>(i) - q.cache_lead()
        << " is outside every written token but changed from 0xA5 to 0x" << std::hex << int(q.cache().data()[i]);
      RC_FAIL(m.str());
    }
  require_empty(check_all_guards(q.buffers()));
  RC_ASSERT(q.error_count() == (q.count_errors_enabled() ? q.expected_error_count() : 0));
}

}  // namespace props

/// The Quantize suite: its differential case and its properties (registered once for every backend).
template <>
struct OpSuite<QuantizeInsertArgs> {
  static constexpr const char* kPrefix = "Quantize";
  /// Duplicate slots are excluded from the differential case (their bytes are unspecified on the GPU).
  static rc::Gen<QuantizeTester> differential_case(Validity v) {
    return gen_quantize(v, /*nonfinite=*/true, std::nullopt, /*record=*/std::nullopt);
  }
  /// Deliberate bugs applied after the reference's call, each with the property that must catch it
  /// (PropertySelfTest: a property that cannot fail proves nothing).
  static std::vector<SeededBug<QuantizeInsertArgs>> seeded_bugs() {
    return {
        // The first token's first pad byte becomes 1 (records with a pad byte; offsets from the case's record,
        // since the differential case draws every record).
        {"QuantizeRopeBitExactAndPadByteZero",
         [](const QuantizeInsertArgs& a) {
           const spec::RecordLayout L = spec::record_layout(a.record);
           if (a.slot_mapping.shape[0] == 0 || L.pad_bytes() == 0) return;
           const int64_t stride = a.k_cache.shape[0] > 1 ? a.k_cache.stride[0] : a.k_cache.shape[1];
           const int64_t s = a.slot_mapping.as<int64_t>()[0];
           if (s >= 0 && s < a.k_cache.shape[0] * a.block_size)
             a.k_cache.as<uint8_t>()[(s / a.block_size) * stride +
                                     L.scale_offset(a.block_size, s % a.block_size, L.num_scales())] = 1;
         }},
        // The first byte past the layout of block 0 (in the block stride's tail) becomes 0.
        {"QuantizeTouchesOnlyWrittenTokens",
         [](const QuantizeInsertArgs& a) {
           const int64_t end = spec::record_layout(a.record).block_data_bytes(a.block_size);
           if (a.k_cache.shape[1] > end) a.k_cache.as<uint8_t>()[end] = 0;
         }},
    };
  }
  /// Large cases for the CUDA smoke test (CudaSmoke.LargeQuantize, twice on the device against the
  /// reference): block sizes 64, 128 and 61 with vLLM's and a +2 stride. Their key rows are 16-byte
  /// aligned, so they take quantize's "wide" kernel: its plain instance at vLLM's strides, its
  /// realigning instance at the +2 strides (cuda/src/quantize.cu). Then large ones: thousands of
  /// CTAs, both block sizes, e4m3fn with non-finite tiles and e4m3fnuz.
  static std::vector<QuantizeTester> large_cases() {
    std::vector<QuantizeTester> v;
    for (int64_t bs : {64, 128, 61})
      for (int64_t stride_extra : {int64_t{0}, int64_t{2}}) {
        const int64_t stride = stride_extra == 0 ? spec::vllm_block_stride(bs) : spec::block_data_bytes(bs) + 2;
        v.push_back(QuantizeTester()
                        .tokens(3000)
                        .k_row_pad(8)
                        .block_size(bs)
                        .stride(stride)
                        .nonfinite(true)
                        .pad_fraction(0.05)
                        .invalid_fraction(0.02)
                        .count_errors(true)
                        .seed(static_cast<uint64_t>(bs * 10 + stride_extra)));
        v.push_back(QuantizeTester().tokens(1000).block_size(bs).stride(stride).fnuz(true).count_errors(true).seed(3));
      }
    for (int64_t bs : {64, 128}) {
      v.push_back(QuantizeTester()
                      .tokens(40000)
                      .k_row_pad(8)
                      .block_size(bs)
                      .stride(spec::vllm_block_stride(bs))
                      .nonfinite(true)
                      .pad_fraction(0.05)
                      .invalid_fraction(0.02)
                      .count_errors(true)
                      .seed(static_cast<uint64_t>(bs + 7)));
      v.push_back(QuantizeTester()
                      .tokens(40000)
                      .block_size(bs)
                      .stride(spec::vllm_block_stride(bs))
                      .fnuz(true)
                      .count_errors(true)
                      .seed(9));
    }
    // Cache views that start off a 16-byte boundary (aligned and odd strides): the bytes before
    // the view and the block tails keep their fill.
    for (int64_t bs : {64, 61})
      for (int64_t lead : {int64_t{2}, int64_t{14}})
        v.push_back(QuantizeTester()
                        .tokens(3000)
                        .k_row_pad(8)
                        .block_size(bs)
                        .stride(lead == 2 ? spec::vllm_block_stride(bs) : spec::block_data_bytes(bs) + 6)
                        .cache_lead(lead)
                        .nonfinite(true)
                        .pad_fraction(0.05)
                        .invalid_fraction(0.02)
                        .count_errors(true)
                        .seed(static_cast<uint64_t>(200 + bs + lead)));
    return v;
  }
  /// The worked example of quantize_and_insert_k_cache (spec/operations.md, quantize example), run through the
  /// reference (SpecExamples.<kPrefix>, spec_examples_test.cpp); GoogleTest assertions.
  static void spec_example() {
    namespace S = spec;
    const int64_t B = 64, blocks = 4, stride = S::vllm_block_stride(B);
    std::vector<uint16_t> k(5 * S::kHeadDim, 0x3F80);
    k[5] = 0x7FC0;  // one NaN among token 0's NoPE values
    std::vector<uint8_t> cache(blocks * stride, 0xA5);
    std::vector<int64_t> slots = {130, -1, 7, 300, -5};
    int32_t errors = 0;
    dsv4kv::QuantizeInsertArgs a;
    a.k = TensorView::mat(k.data(), DType::kBF16, 5, S::kHeadDim);
    a.k_cache = TensorView::mat(cache.data(), DType::kU8, blocks, stride);
    a.slot_mapping = TensorView::vec(slots.data(), DType::kI64, 5);
    a.error_count = &errors;
    dsv4kv::reference::quantize_and_insert_k_cache(a);
    EXPECT_EQ(errors, 3);  // slots 300 and -5, plus the NaN
    EXPECT_EQ(cache[2 * stride + S::scale_offset(B, 2, S::kScalePadIndex)], 0);
    EXPECT_EQ(cache[0 * stride + S::scale_offset(B, 7, S::kScalePadIndex)], 0);
  }
  static std::vector<Property> properties() {
    return {
        {"QuantizeRoundTripWithinHalfStep", [](Backend& be) { props::quantize_round_trip(be, std::nullopt); }},
        {"FnuzRoundTripWithinHalfStep", [](Backend& be) { props::quantize_round_trip(be, true); }},
        {"QuantizeRopeBitExactAndPadByteZero", [](Backend& be) { props::quantize_rope_bit_exact_and_pad_zero(be); }},
        {"QuantizeMinusOneSlotsWriteNothing", [](Backend& be) { props::quantize_minus_one_slots_write_nothing(be); }},
        {"QuantizeTouchesOnlyWrittenTokens",
         [](Backend& be) { props::quantize_touches_only_written_tokens(be, Validity::kValid); }},
        {"QuantizeInvalidSlotsSkippedAndCounted",
         [](Backend& be) { props::quantize_touches_only_written_tokens(be, Validity::kInvalid); }},
        {"FnuzNeverWrites0x80", [](Backend& be) { props::fnuz_never_writes_0x80(be); }},
        {"QuantizeMonotonic", [](Backend& be) { props::quantize_monotonic(be, std::nullopt); }},
        {"RecordsQuantizeRoundTripWithinBound", [](Backend& be) { props::quantize_records_round_trip(be); }},
        {"RecordsQuantizeTouchesOnlyWrittenTokens",
         [](Backend& be) { props::quantize_records_touch_only_written_tokens(be, props::draw_validity()); }},
        {"FnuzMonotonic", [](Backend& be) { props::quantize_monotonic(be, true); }},
        {"QuantizeDuplicateSlotsLastTokenWins",
         [](Backend& be) { props::quantize_duplicate_slots_last_token_wins(be); }, 1.0, /*reference_only=*/true},
    };
  }
};
// ---------------------------------------------------------------------------
// Bad inputs (conformance/bad_inputs_test.cpp runs them; bad_inputs.hpp has the machinery)
// ---------------------------------------------------------------------------

namespace bad_inputs {

/// The bad-input rows of `QuantizeInsertArgs`: its valid base case, every way an argument can be wrong,
/// and what must happen (bad_inputs.hpp).
template <>
struct OpRows<QuantizeInsertArgs> {
  /// The prefix of the rows' test names.
  static constexpr const char* kPrefix = "quantize";
  static constexpr int64_t kBlockSize = 4;
  static constexpr int64_t kBlocks = 3;
  static constexpr int64_t kBlockStride = kBlockSize * spec::kTokenBytes + 6;  // even, not a multiple of 16

  static QuantizeInsertArgs& args(Case& c) { return c.get<QuantizeInsertArgs>(); }
  static const QuantizeInsertArgs& args(const Case& c) { return c.get<QuantizeInsertArgs>(); }

  /// The valid base case (small, with strided views, row padding and a block-stride tail).
  static void base_case(Case& c) {
    // Five tokens (slot -1 is padding) into 3 blocks of block size 4 with a padded block stride; k has
    // padded rows and a sixth row past T = slot_mapping.size(0).
    c.adopt(QuantizeTester()
                .slots({9, 2, -1, 4, 11})
                .extra_k_rows(1)
                .k_row_pad(8)
                .block_size(kBlockSize)
                .num_blocks(kBlocks)
                .stride(kBlockStride)
                .tight_cache_rows(true)
                .seed(11)
                .args());
    // Row 5 lies past T: NaN there would be counted if it were read.
    for (int i = 0; i < kHeadDim; ++i) at<uint16_t>(args(c).k, 5, i) = 0x7FC0;
  }

  /// The bytes it may write: the records (data and scale bytes) of the slots inside the cache.
  static void written(Case& c, Allowed& a) {
    const QuantizeInsertArgs& q = args(c);
    const size_t ci = c.slot_index(&q.k_cache);
    const CacheGeometry g = validate(q);
    const int64_t T = q.slot_mapping.shape[0];
    const ptrdiff_t base = g.base - c.slots[ci].buf->data();
    for (int64_t t = 0; t < T; ++t) {
      const int64_t s = at<int64_t>(q.slot_mapping, t);
      if (s < 0 || s / g.block_size >= g.num_blocks) continue;
      const int64_t blk = s / g.block_size, pos = s % g.block_size;
      const int64_t b0 = base + spec::block_offset(blk, g.block_stride);
      for (int64_t i = 0; i < spec::kTokenDataBytes; ++i) a[ci][b0 + spec::token_data_offset(pos) + i] = true;
      for (int j = 0; j < spec::kScaleBytesPerToken; ++j) a[ci][b0 + spec::scale_offset(g.block_size, pos, j)] = true;
    }
  }

  /// Quantize: every selected record holds the spec's bytes; returns the spec's error count.
  static int64_t model_count(Case& c) {
    const QuantizeInsertArgs& q = args(c);
    const CacheGeometry g = validate(q);
    const int64_t T = q.slot_mapping.shape[0];
    int64_t errors = 0;
    std::vector<int64_t> last(static_cast<size_t>(g.num_blocks * g.block_size), -1);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t s = at<int64_t>(q.slot_mapping, t);
      if (s == -1) continue;
      if (s < 0 || s / g.block_size >= g.num_blocks) {
        ++errors;
        continue;
      }
      last[static_cast<size_t>(s)] = t;
      for (int i = 0; i < kNopeDim; ++i) errors += spec::bf16_is_nonfinite(at<uint16_t>(q.k, t, i));
    }
    for (size_t s = 0; s < last.size(); ++s) {
      const int64_t t = last[s];
      if (t < 0) continue;
      const int64_t blk = static_cast<int64_t>(s) / g.block_size, pos = static_cast<int64_t>(s) % g.block_size;
      const uint8_t* block = g.base + spec::block_offset(blk, g.block_stride);
      for (int j = 0; j < kNumTiles; ++j) {
        float amax = 0.0f;
        for (int i = 0; i < kTileSize; ++i) {
          const uint16_t x = at<uint16_t>(q.k, t, j * kTileSize + i);
          if (!spec::bf16_is_nan(x)) amax = std::max(amax, spec::bf16_to_f32(spec::bf16_abs_bits(x)));
        }
        const spec::TileScale ts = spec::tile_scale(amax, q.format);
        EXPECT_EQ(int{block[spec::scale_offset(g.block_size, pos, j)]}, int{ts.byte}) << "slot " << s << " tile " << j;
        for (int i = 0; i < kTileSize; ++i) {
          const int e = j * kTileSize + i;
          const uint8_t want = spec::quantize_element(at<uint16_t>(q.k, t, e), ts, q.format);
          const uint8_t got = block[spec::fp8_code_offset(pos, e)];
          if (got != want) {
            ADD_FAILURE() << "slot " << s << " code " << e << ": want 0x" << std::hex << int{want} << " got 0x"
                          << int{got};
            return errors;
          }
        }
      }
      EXPECT_EQ(int{block[spec::scale_offset(g.block_size, pos, spec::kScalePadIndex)]}, 0) << "pad byte, slot " << s;
      EXPECT_EQ(std::memcmp(block + spec::rope_offset(pos), &at<uint16_t>(q.k, t, kNopeDim), spec::kRopeBytes), 0)
          << "RoPE bytes of slot " << s;
    }
    return errors;
  }

  static void rows(std::vector<Row>& t) {
    const Op Q = op_index<QuantizeInsertArgs>;
    auto k_row_nan = [](Case& c, int64_t row, std::initializer_list<std::pair<int, uint16_t>> v) {
      for (auto& [i, bits] : v) at<uint16_t>(args(c).k, row, i) = bits;
    };
    // Contract errors.
    t.push_back(
        contract(Q, "k_dtype", [](Case& c) { args(c).k.dtype = DType::kI32; }, {"k must be bfloat16, got int32"}));
    t.push_back(contract(Q, "k_rank3", [](Case& c) { rank(args(c).k, 3); }, {"k must have rank 2, got 3"}));
    t.push_back(contract(Q, "k_448_columns", [](Case& c) { args(c).k.shape[1] = kNopeDim; },
                         {"k must have 512 columns, got 448"}));
    t.push_back(contract(Q, "k_inner_stride", [](Case& c) { args(c).k.stride[1] = 2; },
                         {"k must have unit stride in its last dimension, got 2"}));
    t.push_back(contract(Q, "k_misaligned", [](Case& c) { misalign(args(c).k, 1); }, {"k must be aligned to 2 bytes"}));
    t.push_back(contract(Q, "k_negative_rows", [](Case& c) { args(c).k.shape[0] = -1; },
                         {"k has a negative size in dimension 0"}));
    t.push_back(contract(Q, "k_negative_stride", [](Case& c) { args(c).k.stride[0] = -520; },
                         {"k has a negative stride in dimension 0"}));
    t.push_back(contract(Q, "k_missing", [](Case& c) { args(c).k = TensorView{}; }, {"k is required"}));
    t.push_back(contract(Q, "k_null_data", [](Case& c) { args(c).k.data = nullptr; },
                         {"k is non-empty but has a null data pointer"}));
    t.push_back(contract(Q, "slot_mapping_int32", [](Case& c) { args(c).slot_mapping.dtype = DType::kI32; },
                         {"slot_mapping must be int64, got int32"}));
    t.push_back(contract(Q, "slot_mapping_rank2", [](Case& c) { rank(args(c).slot_mapping, 2); },
                         {"slot_mapping must have rank 1, got 2"}));
    t.push_back(contract(Q, "slot_mapping_longer_than_k", [](Case& c) { args(c).k.shape[0] = 4; },
                         {"slot_mapping must not have more entries (5) than k has rows (4)"}));
    t.push_back(contract(Q, "slot_mapping_misaligned", [](Case& c) { misalign(args(c).slot_mapping, 4); },
                         {"slot_mapping must be aligned to 8 bytes"}));
    t.push_back(contract(Q, "slot_mapping_stride2", [](Case& c) { args(c).slot_mapping.stride[0] = 2; },
                         {"slot_mapping must have unit stride in its last dimension, got 2"}));
    t.push_back(contract(Q, "slot_mapping_missing", [](Case& c) { args(c).slot_mapping = TensorView{}; },
                         {"slot_mapping is required"}));
    t.push_back(
        contract(Q, "k_cache_missing", [](Case& c) { args(c).k_cache = TensorView{}; }, {"k_cache is required"}));
    t.push_back(contract(Q, "k_cache_int32", [](Case& c) { args(c).k_cache.dtype = DType::kI32; },
                         {"k_cache must be uint8, got int32"}));
    t.push_back(contract(Q, "k_cache_rank1", [](Case& c) { rank(args(c).k_cache, 1); },
                         {"k_cache must have rank 2 or 3, got 1"}));
    t.push_back(contract(Q, "k_cache_block_too_small", [](Case& c) { args(c).k_cache.shape[1] -= 2; },
                         {"k_cache must hold at least block_size*584 = 2336 bytes per block, got 2334"}));
    t.push_back(contract(Q, "block_stride_below_block_data", [](Case& c) { args(c).k_cache.stride[0] = 2334; },
                         {"k_cache block stride must be >= block_size*584 = 2336 bytes, got 2334"}));
    t.push_back(contract(Q, "block_stride_odd", [](Case& c) { args(c).k_cache.stride[0] = kBlockStride + 1; },
                         {"k_cache block stride must be even"}));
    // An odd base with an even stride (a view starting at an odd byte): on the GPU a misaligned
    // 2-byte access, which would end the CUDA context.
    t.push_back(contract(Q, "k_cache_misaligned", [](Case& c) { misalign(args(c).k_cache, 1); },
                         {"k_cache must be aligned to 2 bytes (bf16 RoPE values are 2-byte aligned), got address 0x"}));
    t.push_back(contract(Q, "k_cache_rank3_not_contiguous",
                         [](Case& c) {
                           TensorView& v = args(c).k_cache;
                           v.ndim = 3;
                           v.shape = {kBlocks, kBlockSize, spec::kTokenBytes};
                           v.stride = {kBlockStride, spec::kTokenBytes + 16, 1};
                         },
                         {"k_cache must be contiguous within a block (stride of dimension 1 must be 584, got 600)"}));
    t.push_back(contract(Q, "k_cache_negative_blocks", [](Case& c) { args(c).k_cache.shape[0] = -3; },
                         {"k_cache has a negative size in dimension 0"}));
    // The record (spec "Cache records").
    t.push_back(contract(Q, "record_unknown", [](Case& c) { args(c).record = static_cast<Record>(9); },
                         {"record must be fp8_ds_mla, mxfp8_ds_mla, nvfp4_ds_mla or mxfp4_indexer, got the value 9"}));
    t.push_back(contract(Q, "record_with_fnuz",
                         [](Case& c) {
                           args(c).record = Record::kMxfp8DsMla;
                           args(c).format = Fp8Format::kE4M3Fnuz;
                         },
                         {"use_fnuz must be False with record mxfp8_ds_mla"}));
    t.push_back(contract(Q, "record_k_width", [](Case& c) { args(c).record = Record::kMxfp4Indexer; },
                         {"k must have 128 columns, got 512"}));
    t.push_back(contract(Q, "record_block_too_small",
                         [](Case& c) {
                           args(c).record = Record::kMxfp8DsMla;
                           args(c).k_cache.shape[1] = kBlockSize * 528 - 1;
                         },
                         {"k_cache must hold at least block_size*528 = 2112 bytes per block, got 2111"}));
    t.push_back(contract(Q, "record_view_width",
                         [](Case& c) {
                           TensorView& v = args(c).k_cache;
                           v.ndim = 3;
                           v.shape = {kBlocks, kBlockSize, spec::kTokenBytes};
                           v.stride = {kBlockStride, spec::kTokenBytes, 1};
                           args(c).record = Record::kMxfp8DsMla;
                         },
                         {"k_cache.shape[2] = 584 is the width of record fp8_ds_mla, not of record mxfp8_ds_mla "
                          "(528 bytes per token)"}));
    t.push_back(
        contract(Q, "block_size_0", [](Case& c) { args(c).block_size = 0; }, {"block_size must be >= 1, got 0"}));
    t.push_back(contract(Q, "block_size_negative", [](Case& c) { args(c).block_size = -4; },
                         {"block_size must be >= 1, got -4"}));
    t.push_back(contract(Q, "block_size_larger_than_cache_blocks", [](Case& c) { args(c).block_size = 5; },
                         {"k_cache must hold at least block_size*584 = 2920 bytes per block, got 2336"}));
    t.push_back(contract(Q, "block_size_beyond_int32", [](Case& c) { args(c).block_size = int64_t{1} << 62; },
                         {"block_size must fit in int32"}));
    t.push_back(contract(Q, "is_ue8m0_false", [](Case& c) { args(c).is_ue8m0 = false; }, {"is_ue8m0 must be true"}));

    // Skip and count: slot values only the device sees.
    auto slot = [](int i, int64_t v) { return [i, v](Case& c) { at<int64_t>(args(c).slot_mapping, i) = v; }; };
    t.push_back(skip(Q, "slot_int64_min", slot(1, kI64Min), 1, slot(1, -1)));
    t.push_back(skip(Q, "slot_minus2", slot(1, -2), 1, slot(1, -1)));
    t.push_back(skip(Q, "slot_at_capacity", slot(3, kBlocks * kBlockSize), 1, slot(3, -1)));
    t.push_back(skip(Q, "slot_int64_max", slot(0, kI64Max), 1, slot(0, -1)));
    t.push_back(skip(Q, "slot_far_block", slot(4, kBlockSize * 1000 + 3), 1, slot(4, -1)));
    t.push_back(
        skip(Q, "slot_block_index_overflows_int32", slot(4, (int64_t{1} << 33) * kBlockSize + 1), 1, slot(4, -1)));
    t.push_back(skip(
        Q, "slots_all_padding",
        [](Case& c) {
          for (int i = 0; i < 5; ++i) at<int64_t>(args(c).slot_mapping, i) = -1;
        },
        0));
    t.push_back(skip(
        Q, "two_bad_slots_one_padding",
        [](Case& c) { at<int64_t>(args(c).slot_mapping, 0) = -3, at<int64_t>(args(c).slot_mapping, 1) = 12; }, 2,
        [](Case& c) { at<int64_t>(args(c).slot_mapping, 0) = -1, at<int64_t>(args(c).slot_mapping, 1) = -1; }));
    t.push_back(skip(
        Q, "boundary_slots_valid",
        [](Case& c) {
          // First and last slot of the cache, kept unique (duplicate slots are unspecified on the GPU).
          at<int64_t>(args(c).slot_mapping, 0) = 0, at<int64_t>(args(c).slot_mapping, 1) = 11;
          at<int64_t>(args(c).slot_mapping, 4) = 2;
        },
        0));
    t.push_back(skip(
        Q, "nan_and_inf_in_nope",
        [=](Case& c) {
          k_row_nan(c, 0, {{3, 0x7FC0}, {100, 0x7F80}, {101, 0xFF80}, {447, 0xFFC1}});
        },
        4));
    t.push_back(skip(
        Q, "all_nan_tile",
        [=](Case& c) {
          for (int i = 64; i < 128; ++i) at<uint16_t>(args(c).k, 1, i) = 0x7FC0;
        },
        64));
    t.push_back(skip(
        Q, "nan_in_rope_not_counted",
        [=](Case& c) {
          k_row_nan(c, 0, {{448, 0x7FC0}, {511, 0xFF80}});
        },
        0));
    t.push_back(skip(
        Q, "nan_in_padding_token_not_counted",
        [=](Case& c) {
          k_row_nan(c, 2, {{0, 0x7FC0}, {5, 0x7F80}});
        },
        0));
    t.push_back(skip(
        Q, "nan_in_bad_slot_token_counts_slot_only",
        [=](Case& c) {
          k_row_nan(c, 1, {{0, 0x7FC0}, {5, 0x7F80}});
          at<int64_t>(args(c).slot_mapping, 1) = -2;
        },
        1));
    t.push_back(skip(
        Q, "rows_past_T_not_read",
        [=](Case& c) {
          for (int i = 0; i < kHeadDim; ++i) at<uint16_t>(args(c).k, 5, i) = 0x7F80;
        },
        0));
    t.push_back(skip(
        Q, "no_tokens", [](Case& c) { args(c).slot_mapping.shape[0] = 0; }, 0));
    t.push_back(skip(
        Q, "no_blocks_every_slot_counted", [](Case& c) { args(c).k_cache.shape[0] = 0; }, 4));
    t.push_back(skip(
        Q, "fnuz_bad_slot",
        [](Case& c) { args(c).format = Fp8Format::kE4M3Fnuz, at<int64_t>(args(c).slot_mapping, 3) = -7; }, 1,
        [](Case& c) { at<int64_t>(args(c).slot_mapping, 3) = -1; }));
    t.push_back(skip(
        Q, "rank3_cache_valid",
        [](Case& c) {
          TensorView& v = args(c).k_cache;
          v.ndim = 3;
          v.shape = {kBlocks, kBlockSize, spec::kTokenBytes};
          v.stride = {kBlockStride, spec::kTokenBytes, 1};
        },
        0));
    t.push_back(skip(
        Q, "no_counter_bad_slot",
        [](Case& c) { c.count_errors = false, at<int64_t>(args(c).slot_mapping, 1) = kI64Min; }, 0,
        [](Case& c) { c.count_errors = true, at<int64_t>(args(c).slot_mapping, 1) = -1; }));

    // An element count of 2^64 must not wrap to 0: that would skip the null-pointer check and let
    // quantize write through NULL.
    t.push_back(contract(
        Q, "k_cache_numel_overflows_null_data", [=](Case& c) { mat(args(c).k_cache, nullptr, k2p32, k2p32, k2p32, 1); },
        {"k_cache has more elements than int64 can count (the product of its sizes overflows int64)"}));
    t.push_back(contract(Q, "k_cache_rank3_numel_overflows",
                         [](Case& c) {
                           TensorView& v = args(c).k_cache;
                           v.ndim = 3, v.shape = {int64_t{1} << 21, int64_t{1} << 21, int64_t{1} << 22};
                           v.stride = {int64_t{1} << 43, int64_t{1} << 22, 1};
                         },
                         {"k_cache has more elements than int64 can count"}));
    // Block 2 at 2 * 2^62 bytes: the offset itself overflows.
    t.push_back(contract(Q, "k_cache_extent_overflows", [](Case& c) { args(c).k_cache.stride[0] = int64_t{1} << 62; },
                         {"k_cache spans more bytes than int64 can count (its byte extent (1 + sum of (size - 1) * "
                          "stride) * 1 overflows int64)"}));
    // The extent (one stride plus one block) fits, but num_blocks * block_stride does not.
    t.push_back(contract(Q, "k_cache_num_blocks_times_stride_overflows",
                         [](Case& c) {
                           args(c).k_cache.shape[0] = 2;
                           args(c).k_cache.stride[0] = 3 * (int64_t{1} << 61);
                         },
                         {"k_cache num_blocks * block_stride (2 * 6917529027641081856) overflows int64"}));
    // No block, so the view is empty; its per-block byte count (2^64) is refused, not wrapped to 0.
    t.push_back(
        contract(Q, "k_cache_bytes_per_block_overflow",
                 [](Case& c) {
                   TensorView& v = args(c).k_cache;
                   v.ndim = 3, v.shape = {0, int64_t{1} << 32, int64_t{1} << 32}, v.stride = {0, int64_t{1} << 32, 1};
                 },
                 {"k_cache bytes per block (the product of its sizes after the first) overflows int64"}));
    t.push_back(contract(Q, "k_extends_past_address_space",
                         [](Case& c) { args(c).k.data = reinterpret_cast<void*>(~uintptr_t{0} - 1023); },
                         {"k extends past the end of the address space"}));
  }
};

}  // namespace bad_inputs

}  // namespace dsv4kv::conformance
