// The GPU's FP4 arithmetic (cuda/src/fp4.cuh, the host build of the same functions) against the spec's rules on every
// input it can see: the decode tables on all 65,536 groups of four nibbles, both FP4 records' codes by compares (every
// bf16 value) and by f16 rounding (every finite one) under every scale a group can get, and the exactness of the
// 288-byte record's bf16 gather products. Runs without a GPU; the kernels that use them are checked on the device
// (CudaSmoke.RecordDequantizeEveryScaleAndCode, the record properties).
#include <cstdint>
#include <vector>

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

/// The bf16 values with `keep(x)`, in order.
template <typename Keep>
std::vector<uint16_t> bf16_values(Keep keep) {
  std::vector<uint16_t> v;
  for (uint32_t x = 0; x < 0x10000u; ++x)
    if (keep(static_cast<uint16_t>(x))) v.push_back(static_cast<uint16_t>(x));
  return v;
}

/// Compares `codes8` (eight values two to a word -> eight nibbles, as e2m1_codes8) with spec::quantize_group_code under
/// `gs` on `values` (a multiple of eight), each in two places of a group of eight: in order, then reversed. Returns the
/// values checked.
template <typename Codes8>
int64_t check_codes(sp::Record r, const sp::GroupScale& gs, const std::vector<uint16_t>& values, Codes8 codes8,
                    int64_t& mismatches) {
  int64_t checked = 0;
  for (int reversed = 0; reversed < 2; ++reversed) {
    for (size_t x0 = 0; x0 + 8 <= values.size(); x0 += 8) {
      uint16_t v[8];
      for (int i = 0; i < 8; ++i) v[reversed != 0 ? 7 - i : i] = values[x0 + i];
      uint32_t words[4];
      for (int j = 0; j < 4; ++j) words[j] = v[2 * j] | (uint32_t{v[2 * j + 1]} << 16);
      const uint32_t got = codes8(words);
      for (int i = 0; i < 8; ++i, ++checked) {
        const uint32_t want = sp::quantize_group_code(r, v[i], gs);
        const uint32_t nibble = (got >> (4 * i)) & 0xFu;
        if (nibble != want && ++mismatches <= 8)
          ADD_FAILURE() << "scale byte 0x" << std::hex << int{gs.byte} << ", x = 0x" << v[i] << " in place " << i
                        << ": got 0x" << nibble << ", want 0x" << want;
      }
    }
  }
  return checked;
}

const std::vector<uint16_t> kEveryBf16 = bf16_values([](uint16_t) { return true; });
const std::vector<uint16_t> kFiniteBf16 = bf16_values([](uint16_t x) { return !sp::bf16_is_nonfinite(x); });

/// e2m1_codes8 under the divisor `divisor_bits` on every bf16 value.
int64_t check_codes8(sp::Record r, const sp::GroupScale& gs, uint32_t divisor_bits, int64_t& mismatches) {
  const cuda::detail::E2m1PairThresholds th = r == sp::Record::kMxfp4Indexer
                                                  ? cuda::detail::e2m1_pair_thresholds<true>(divisor_bits)
                                                  : cuda::detail::e2m1_pair_thresholds<false>(divisor_bits);
  return check_codes(
      r, gs, kEveryBf16, [&](const uint32_t* w) { return cuda::detail::e2m1_codes8(w, th); }, mismatches);
}

/// e2m1_codes8_scaled under `recip` on every finite bf16 value (65,280, a multiple of eight).
int64_t check_codes8_scaled(sp::Record r, const sp::GroupScale& gs, float recip, int64_t& mismatches) {
  return check_codes(
      r, gs, kFiniteBf16, [&](const uint32_t* w) { return cuda::detail::e2m1_codes8_scaled(w, recip); }, mismatches);
}

TEST(Fp4, Nvfp4CodesWithoutDivisionAreTheSpecs) {
  // Every scale byte nvfp4_scale_byte can store: e4m3fn values in [2^-9, 448], bytes 0x01 to 0x7E.
  int64_t mismatches = 0, checked = 0;
  for (uint32_t byte = 0x01; byte <= 0x7E; ++byte) {
    sp::GroupScale gs{static_cast<uint8_t>(byte), sp::TileScale{0, false, 0},
                      sp::f32_bits(sp::fp8_decode(static_cast<uint8_t>(byte), sp::Fp8Format::kE4M3Fn)), 0};
    checked += check_codes8(sp::Record::kNvfp4DsMla, gs, gs.divisor, mismatches);
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(checked, int64_t{126} * 65536 * 2);
}

TEST(Fp4, IndexerCodesWithoutProductAreTheSpecs) {
  // Every exponent of a UE8M0 byte below 255, [-127, 127] (mxfp4_group_exponent gives [-126, 127]), the divisor
  // 2^e: its thresholds reach fp32's subnormals (e = -127) and overflow (e >= 126, where only inf passes the largest).
  int64_t mismatches = 0, checked = 0;
  for (int e = -127; e <= 127; ++e) {
    const sp::GroupScale gs{static_cast<uint8_t>(e + sp::kScaleBias), sp::TileScale{0, false, 0}, 0, e};
    checked += check_codes8(sp::Record::kMxfp4Indexer, gs, sp::f32_bits(sp::exp2i(e)), mismatches);
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(checked, int64_t{255} * 65536 * 2);
}

TEST(Fp4, Nvfp4ScaledCodesAreTheSpecs) {
  int64_t mismatches = 0, checked = 0;
  for (uint32_t byte = 0x01; byte <= 0x7E; ++byte) {
    const sp::GroupScale gs{static_cast<uint8_t>(byte), sp::TileScale{0, false, 0},
                            sp::f32_bits(sp::fp8_decode(static_cast<uint8_t>(byte), sp::Fp8Format::kE4M3Fn)), 0};
    checked += check_codes8_scaled(sp::Record::kNvfp4DsMla, gs, 1.0f / sp::f32_from_bits(gs.divisor), mismatches);
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(checked, int64_t{126} * 65280 * 2);  // 65,280 finite bf16 values
}

TEST(Fp4, IndexerScaledCodesAreTheSpecs) {
  int64_t mismatches = 0, checked = 0;
  for (int e = -127; e <= 127; ++e) {
    const sp::GroupScale gs{static_cast<uint8_t>(e + sp::kScaleBias), sp::TileScale{0, false, 0}, 0, e};
    checked += check_codes8_scaled(sp::Record::kMxfp4Indexer, gs, sp::exp2i(-e), mismatches);
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(checked, int64_t{255} * 65280 * 2);
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
