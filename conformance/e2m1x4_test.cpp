// The GPU's FP4 decode tables (cuda/src/e2m1x4.cuh, host build of the same function) against the spec's
// per-nibble rule, on all 65,536 groups of four nibbles. Runs without a GPU; the kernels that use it are
// checked on the device by CudaSmoke.RecordDequantizeEveryScaleAndCode.
#include <cstdint>

#include <gtest/gtest.h>

#include "../cuda/src/e2m1x4.cuh"
#include "dsv4kv/spec/record_numerics.hpp"

namespace dsv4kv::conformance {
namespace {

namespace sp = dsv4kv::spec;

TEST(E2m1x4, EveryFourNibblesDecodeAsTheSpec) {
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

TEST(E2m1x4, BytePermSelectsBytesOfBothWords) {
  // The selector cases the decode uses, plus every single-byte selection.
  for (uint32_t k = 0; k < 8; ++k)
    EXPECT_EQ(cuda::detail::byte_perm(0x33221100u, 0x77665544u, k * 0x1111u), k * 0x11111111u) << k;
  EXPECT_EQ(cuda::detail::byte_perm(0x33221100u, 0x77665544u, 0x5140u), 0x55114400u);
  EXPECT_EQ(cuda::detail::byte_perm(0x33221100u, 0x77665544u, 0x7362u), 0x77336622u);
}

}  // namespace
}  // namespace dsv4kv::conformance
