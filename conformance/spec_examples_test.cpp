// The worked examples printed in spec/numerics.md and spec/operations.md, run through the
// reference: if a page's example and the implementation disagree, this fails and names the page.
// The numerics examples are here; each operation's example is OpSuite<Args>::spec_example() in its
// module (support/ops/<op>_properties.hpp), registered below as SpecExamples.<Op>.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "property_suite.hpp"

namespace {

namespace S = dsv4kv::spec;
using dsv4kv::DType;
using dsv4kv::TensorView;

TEST(SpecExamples, NumericsTileExample) {  // spec/numerics.md, "Worked example"
  const S::TileScale ts = S::tile_scale(3.0f, S::Fp8Format::kE4M3Fn);
  EXPECT_EQ(ts.exponent, -7);
  EXPECT_EQ(ts.byte, 0x78);
  const uint16_t x[] = {0x4040, 0xBF80, 0x3E9A, 0xBA83, 0x403A, 0x0000, 0x8000, 0x3A80};
  const uint8_t code[] = {0x7C, 0xF0, 0x62, 0xA0, 0x7C, 0x00, 0x80, 0x20};
  const uint16_t back[] = {0x4040, 0xBF80, 0x3EA0, 0xBA80, 0x4040, 0x0000, 0x8000, 0x3A80};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(S::quantize_element(x[i], ts, S::Fp8Format::kE4M3Fn), code[i]) << "element " << i;
    EXPECT_EQ(S::dequantize_element(code[i], ts.byte, S::Fp8Format::kE4M3Fn), back[i]) << "element " << i;
  }
  const S::TileScale tu = S::tile_scale(3.0f, S::Fp8Format::kE4M3Fnuz);
  EXPECT_EQ(tu.byte, 121);
  EXPECT_EQ(S::quantize_element(0x3E9A, tu, S::Fp8Format::kE4M3Fnuz), 0x62);
  EXPECT_EQ(S::quantize_element(0x8000, tu, S::Fp8Format::kE4M3Fnuz), 0x00);
  // Ties at scale 1.
  const S::TileScale one = S::tile_scale(448.0f, S::Fp8Format::kE4M3Fn);
  EXPECT_EQ(S::quantize_element(S::f32_to_bf16_rne(17.0f), one, S::Fp8Format::kE4M3Fn), 0x58);
  EXPECT_EQ(S::quantize_element(S::f32_to_bf16_rne(19.0f), one, S::Fp8Format::kE4M3Fn), 0x5A);
}

TEST(SpecExamples, NumericsScaleTable) {  // spec/numerics.md, "The scale of a tile"
  struct Row {
    uint16_t amax;
    int e_fn, byte_fn, e_fnuz, byte_fnuz;
  };
  const Row rows[] = {{0x0000, -22, 105, -21, 106}, {0x38E0, -22, 105, -21, 106}, {0x38E1, -21, 106, -20, 107},
                      {0x3F00, -9, 118, -8, 119},   {0x4040, -7, 120, -6, 121},   {0x40E0, -6, 121, -5, 122},
                      {0x43E0, 0, 127, 1, 128},     {0x7F7F, 120, 247, 121, 248}};
  for (const Row& r : rows) {
    const auto a = S::tile_scale(S::bf16_to_f32(r.amax), S::Fp8Format::kE4M3Fn);
    const auto b = S::tile_scale(S::bf16_to_f32(r.amax), S::Fp8Format::kE4M3Fnuz);
    EXPECT_EQ(a.exponent, r.e_fn) << std::hex << r.amax;
    EXPECT_EQ(a.byte, r.byte_fn) << std::hex << r.amax;
    EXPECT_EQ(b.exponent, r.e_fnuz) << std::hex << r.amax;
    EXPECT_EQ(b.byte, r.byte_fnuz) << std::hex << r.amax;
  }
}

TEST(SpecExamples, NumericsTopOfBf16) {  // spec/numerics.md, section numerics_top
  // With scale 2^120, |x| >= 248 * 2^120 rounds to 256 * 2^120 = 2^128, which dequantizes to +-inf.
  const auto F = S::Fp8Format::kE4M3Fn;
  const S::TileScale ts = S::tile_scale(S::bf16_to_f32(0x7F7F), F);
  ASSERT_EQ(ts.byte, 247);
  const struct {
    uint16_t x;
    uint8_t code;
    uint16_t back;
  } rows[] = {{0x7F77, 0x77, 0x7F70}, {0x7F78, 0x78, 0x7F80}, {0x7F7F, 0x78, 0x7F80}, {0xFF7F, 0xF8, 0xFF80}};
  for (const auto& r : rows) {
    EXPECT_EQ(S::quantize_element(r.x, ts, F), r.code) << std::hex << r.x;
    EXPECT_EQ(S::dequantize_element(r.code, ts.byte, F), r.back) << std::hex << r.x;
  }
}

TEST(SpecExamples, NumericsDequantizeTable) {  // spec/numerics.md, "Dequantizing one element"
  const auto F = S::Fp8Format::kE4M3Fn;
  EXPECT_EQ(S::dequantize_element(0x7C, 120, F), 0x4040);
  EXPECT_EQ(S::dequantize_element(0x7E, 0, F), 0x0000);
  EXPECT_EQ(S::dequantize_element(0x08, 1, F), 0x0002);
  EXPECT_EQ(S::dequantize_element(0x01, 1, F), 0x0000);
  EXPECT_EQ(S::dequantize_element(0x7E, 254, F), 0x7F80);
  EXPECT_EQ(S::dequantize_element(0x38, 255, F), 0x7F80);
  EXPECT_EQ(S::dequantize_element(0xB8, 255, F), 0xFF80);
  EXPECT_EQ(S::dequantize_element(0x00, 255, F), 0x7FFF);
  EXPECT_EQ(S::dequantize_element(0x7F, 127, F), 0x7FFF);
  EXPECT_EQ(S::dequantize_element(0x80, 127, S::Fp8Format::kE4M3Fnuz), 0x7FFF);
}

// ceil(log2 q) of a positive finite float, exactly.
int ceil_log2(float q) {
  int e = 0;
  const float m = std::frexp(q, &e);  // q = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? e - 1 : e;
}

TEST(SpecExamples, NumericsFloorVariants) {  // spec/numerics.md, "Other implementations' floors"
  // Over every finite non-negative bf16 amax: SGLang's floor (1e-8 on amax) gives a different exponent
  // exactly for amax <= 448 * 2^-23, FlashMLA's (1e-4 on amax / 448) exactly for amax <= 448 * 2^-14.
  const auto F = S::Fp8Format::kE4M3Fn;
  const float fmax = S::fp8_traits(F).quant_max;
  const float sglang_limit = std::ldexp(fmax, -23), flashmla_limit = std::ldexp(fmax, -14);
  int sglang_min = 0, flashmla_min = 0;
  for (uint32_t h = 0; h < 0x7F80u; ++h) {
    const float a = S::bf16_to_f32(static_cast<uint16_t>(h));
    const int ours = S::tile_scale(a, F).exponent;
    const int sglang = ceil_log2(std::max(a, 1e-8f) / fmax);
    const int flashmla = ceil_log2(std::max(a / fmax, 1e-4f));
    EXPECT_EQ(sglang != ours, a <= sglang_limit) << "amax " << a;
    EXPECT_EQ(flashmla != ours, a <= flashmla_limit) << "amax " << a;
    sglang_min = std::min(sglang_min, sglang);
    flashmla_min = std::min(flashmla_min, flashmla);
  }
  EXPECT_EQ(sglang_min, -35);
  EXPECT_EQ(flashmla_min, -13);
  EXPECT_NEAR(sglang_limit, 5.34e-5f, 0.01e-5f);  // the figure the page prints
}

TEST(SpecExamples, NumericsFloorExponent) {  // spec/numerics.md, "The scale of a tile"
  for (const auto f : {S::Fp8Format::kE4M3Fn, S::Fp8Format::kE4M3Fnuz}) {
    const S::TileScale zero = S::tile_scale(0.0f, f);
    EXPECT_EQ(zero.exponent, S::floor_exponent(f));
    EXPECT_EQ(zero.byte, S::kScaleBias + S::floor_exponent(f));
    EXPECT_EQ(S::tile_scale(std::numeric_limits<float>::infinity(), f).byte, S::kInfScaleByte);
  }
  EXPECT_EQ(S::floor_exponent(S::Fp8Format::kE4M3Fn), -22);
  EXPECT_EQ(S::floor_exponent(S::Fp8Format::kE4M3Fnuz), -21);
}

TEST(SpecExamples, NumericsScaleByteEnds) {  // spec/numerics.md, "The multiplier of a byte"
  // 2^(s - 127) holds for bytes 1..254 only: byte 0 is +0 (not 2^-127), byte 255 is +inf (not NaN).
  EXPECT_EQ(S::f32_bits(S::scale_multiplier(0)), 0u);
  EXPECT_EQ(S::f32_bits(S::scale_multiplier(S::kInfScaleByte)), 0x7F800000u);
  for (int s = 1; s <= 254; ++s)
    EXPECT_EQ(S::scale_multiplier(static_cast<uint8_t>(s)), std::ldexp(1.0f, s - S::kScaleBias)) << "byte " << s;
  // Under byte 0 every non-NaN code gives a zero of its sign (negative codes: 0x8000); under byte 255
  // nonzero codes give +-inf and zero codes NaN; NaN codes give 0x7FFF under both.
  for (const auto f : {S::Fp8Format::kE4M3Fn, S::Fp8Format::kE4M3Fnuz}) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const bool nan = S::fp8_is_nan(code, f), neg = (code & 0x80u) != 0;
      const bool zero = !nan && S::fp8_decode(code, f) == 0.0f;
      EXPECT_EQ(S::dequantize_element(code, 0, f), nan ? 0x7FFF : (neg ? 0x8000 : 0x0000)) << "code " << c;
      EXPECT_EQ(S::dequantize_element(code, S::kInfScaleByte, f), nan || zero ? 0x7FFF : (neg ? 0xFF80 : 0x7F80))
          << "code " << c;
    }
  }
  EXPECT_EQ(S::dequantize_element(0xFE, 0, S::Fp8Format::kE4M3Fn), 0x8000);  // the page's table row
}

TEST(SpecExamples, NumericsNanCodes) {  // spec/numerics.md, "FP8 formats": e4m3fn NaNs are 0x7F and 0xFF
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    EXPECT_EQ(S::fp8_is_nan(code, S::Fp8Format::kE4M3Fn), (code & S::kFp8MagnitudeMask) == S::kE4M3FnNanMagnitude)
        << "code " << c;
    EXPECT_EQ(S::fp8_is_nan(code, S::Fp8Format::kE4M3Fnuz), c == 0x80) << "code " << c;
  }
}

/// SpecExamples.<Op> for every operation of the table: its worked example of spec/operations.md.
const bool kRegistered = [] {
  dsv4kv::for_each_op([](auto t) {
    using Args = typename decltype(t)::type;
    dsv4kv::conformance::detail::register_test("SpecExamples", dsv4kv::conformance::OpSuite<Args>::kPrefix,
                                               [] { dsv4kv::conformance::OpSuite<Args>::spec_example(); });
  });
  return true;
}();

}  // namespace
