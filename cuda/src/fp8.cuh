/// \file fp8.cuh
/// \brief Hardware conversions for the OCP e4m3fn format, restricted to the inputs where they equal the spec's
/// bit-level rules.
///
/// The spec's integer definition costs ~30 instructions per element (issue-bound kernels); from sm_89 on, two values
/// convert per instruction, with the spec's bytes on these inputs:
/// - `cvt.rn.satfinite.e4m3x2.f32` is spec::fp8_encode_satfinite for e4m3fn on every non-NaN input; callers use it only
///   for tiles without NaN/inf elements.
/// - `cvt.rn.f16x2.e4m3x2` is exact and `cvt.rn.bf16x2.f32` is IEEE RNE without flush; only NaN results differ from
///   spec::f32_to_bf16_rne, and dequantize8 pins them to 0x7FFF.
/// The conformance tests check every code under every scale byte against the reference.
#pragma once

#include <cstdint>

#include "dsv4kv/spec/numerics.hpp"

namespace dsv4kv::cuda::detail {

/// Two fp32 values to two e4m3fn codes (RNE, satfinite): `lo` in bits 0..7, `hi` in bits 8..15.
__device__ __forceinline__ uint32_t e4m3x2_from_f32(float lo, float hi) {
  unsigned short r;
  // PTX puts the first source operand in the upper byte.
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

/// Two e4m3fn codes (bits 0..7 and 8..15) to their exact fp32 values.
__device__ __forceinline__ float2 f32x2_from_e4m3x2(uint32_t codes) {
  uint32_t h2;
  const unsigned short c = static_cast<unsigned short>(codes);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(c));
  float lo, hi;
  asm("{\n\t.reg .f16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
      : "=f"(lo), "=f"(hi)
      : "r"(h2));
  return make_float2(lo, hi);
}

/// Two fp32 values to bf16 bits with RNE (`lo` in bits 0..15). A NaN input gives a NaN of unspecified bits
/// (canonical_nan_bf16x2 pins them).
__device__ __forceinline__ uint32_t bf16x2_from_f32(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/// `w` (two bf16 values) with each NaN half replaced by the spec's NaN, 0x7FFF.
__device__ __forceinline__ uint32_t canonical_nan_bf16x2(uint32_t w) {
  const uint32_t nan = __vcmpgtu2(w & 0x7FFF7FFFu, 0x7F807F80u);  // 0xFFFF in each NaN half
  return (w & ~nan) | (0x7FFF7FFFu & nan);
}

/// Eight FP8 codes (`codes`, code 0 in the low byte of .x) under scale byte `s` to eight bf16 values,
/// spec::dequantize_element's bits: bf16_rne(fp32(code) * S(s)).
///
/// e4m3fn: the hardware conversions; a lane that may hold a NaN (a NaN code, or scale byte 255 where 0 * inf appears)
/// then pins its NaN halves to 0x7FFF, so corrupt caches stay fast. e4m3fnuz has no hardware conversion: the spec
/// function per element.
template <dsv4kv::spec::Fp8Format kFmt>
__device__ __forceinline__ uint4 dequantize8(uint2 codes, uint8_t s) {
  namespace sp = dsv4kv::spec;
  const uint32_t w[2] = {codes.x, codes.y};
  uint32_t o[4];
  if constexpr (kFmt == sp::Fp8Format::kE4M3Fn) {
    const float m = sp::scale_multiplier(s);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 v = f32x2_from_e4m3x2(w[j >> 1] >> (16 * (j & 1)));
      o[j] = bf16x2_from_f32(__fmul_rn(v.x, m), __fmul_rn(v.y, m));
    }
    constexpr uint32_t kMagMask4 = 0x01010101u * sp::kFp8MagnitudeMask;
    constexpr uint32_t kNan4 = 0x01010101u * sp::kE4M3FnNanMagnitude;
    if (s == sp::kInfScaleByte || (__vcmpeq4(w[0] & kMagMask4, kNan4) | __vcmpeq4(w[1] & kMagMask4, kNan4)) != 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = canonical_nan_bf16x2(o[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t pair = w[j >> 1] >> (16 * (j & 1));
      const uint16_t lo = sp::dequantize_element(static_cast<uint8_t>(pair), s, kFmt);
      const uint16_t hi = sp::dequantize_element(static_cast<uint8_t>(pair >> 8), s, kFmt);
      o[j] = uint32_t{lo} | (uint32_t{hi} << 16);
    }
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

}  // namespace dsv4kv::cuda::detail
