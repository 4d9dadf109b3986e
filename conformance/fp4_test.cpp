// The GPU's FP4 arithmetic (cuda/src/fp4.cuh, the host build of the same functions) against the spec's
// rules on every input it can see: the decode tables on all 65,536 groups of four nibbles, the 288-byte
// record's division-free codes on every bf16 value under every scale byte a group can get, and the
// exactness of its gather's bf16 products. Runs without a GPU; the kernels that use them are checked on
// the device (CudaSmoke.RecordDequantizeEveryScaleAndCode, the record properties).
#include <cstdint>

#include <gtest/gtest.h>

#include "../cuda/src/fp4.cuh"
#include "dsv4kv/spec/record_numerics.hpp"

namespace dsv4kv::conformance {
namespace {

namespace sp = dsv4kv::spec;

TEST(Fp4, EveryFourNibblesDecodeAsTheSpec) {
  int mismatches = 0;
  for (uint32_t c = 0; c < 0x10000u; ++c) {
    uint32_t v01 = 0, v23 = 0;
    cuda::detail::e2m1x4_to_bf16(c | 0xABCD0000u, v01, v23);  // bits above 15 are not read
    const uint32_t got[4] = {v01 & 0xFFFFu, v01 >> 16, v23 & 0xFFFFu, v23 >> 16};
    for (int i = 0; i < 4; ++i) {
      const uint32_t want = sp::e2m1_decode_bits(static_cast<uint8_t>((c >> (4 * i)) & 0xFu)) >> 16;
      if (got[i] != want && ++mismatches <= 8)
        ADD_FAILURE() << "c = 0x" << std::hex << c << ", nibble " << i << ": got 0x" << got[i] << ", want 0x" << want;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Fp4, BytePermSelectsBytesOfBothWords) {
  // The selector cases the decode uses, plus every single-byte selection.
  for (uint32_t k = 0; k < 8; ++k)
    EXPECT_EQ(cuda::detail::byte_perm(0x33221100u, 0x77665544u, k * 0x1111u), k * 0x11111111u) << k;
  EXPECT_EQ(cuda::detail::byte_perm(0x33221100u, 0x77665544u, 0x5140u), 0x55114400u);
  EXPECT_EQ(cuda::detail::byte_perm(0x33221100u, 0x77665544u, 0x7362u), 0x77336622u);
}

TEST(Fp4, Nvfp4CodesWithoutDivisionAreTheSpecs) {
  // Every scale byte nvfp4_scale_byte can store: e4m3fn values in [2^-9, 448], bytes 0x01 to 0x7E.
  int64_t mismatches = 0, checked = 0;
  for (uint32_t byte = 0x01; byte <= 0x7E; ++byte) {
    sp::GroupScale gs{static_cast<uint8_t>(byte), sp::TileScale{0, false, 0},
                      sp::f32_bits(sp::fp8_decode(static_cast<uint8_t>(byte), sp::Fp8Format::kE4M3Fn)), 0};
    const cuda::detail::Nvfp4Thresholds th = cuda::detail::nvfp4_thresholds(gs.divisor);
    for (uint32_t x = 0; x < 0x10000u; ++x, ++checked) {
      const uint8_t want = sp::quantize_group_code(sp::Record::kNvfp4DsMla, static_cast<uint16_t>(x), gs);
      const uint8_t got = cuda::detail::nvfp4_code(static_cast<uint16_t>(x), th, gs);
      if (got != want && ++mismatches <= 8)
        ADD_FAILURE() << "scale byte 0x" << std::hex << byte << ", x = 0x" << x << ": got 0x" << int{got} << ", want 0x"
                      << int{want};
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(checked, int64_t{126} * 65536);
}

TEST(Fp4, Nvfp4ProductsAreExactBf16Values) {
  // The 288-byte record's gather multiplies in bf16 (records.cu, decode_piece): exact only because every e2m1 value
  // times every non-NaN e4m3 scale is zero or a normal fp32 value with no bits below bf16's, which bf16 rounding keeps.
  int checked = 0;
  for (uint32_t byte = 0; byte < 256; ++byte) {
    const auto s = static_cast<uint8_t>(byte);
    if (sp::scale_is_nan(sp::Record::kNvfp4DsMla, s)) continue;
    for (uint8_t nibble = 0; nibble < 16; ++nibble, ++checked) {
      const uint32_t p = sp::f32_mul_bits(sp::f32_bits(sp::e2m1_decode(nibble)),
                                          sp::f32_bits(sp::fp8_decode(s, sp::Fp8Format::kE4M3Fn)));
      const uint32_t exponent = (p >> 23) & 0xFFu;
      EXPECT_EQ(p & 0xFFFFu, 0u) << "scale byte " << byte << ", nibble " << int{nibble};
      EXPECT_TRUE(exponent != 0xFFu && (exponent != 0 || (p & 0x7FFFFFFFu) == 0))
          << "scale byte " << byte << ", nibble " << int{nibble};
      EXPECT_EQ(p >> 16, sp::dequantize_group_value(sp::Record::kNvfp4DsMla, &nibble, s, 0))
          << "scale byte " << byte << ", nibble " << int{nibble};
    }
  }
  EXPECT_EQ(checked, 254 * 16);
}

}  // namespace
}  // namespace dsv4kv::conformance
