/// \file fp8.cuh
/// \brief Hardware conversions for the OCP e4m3fn format, restricted to the
/// inputs where they equal the spec's bit-level rules.
///
/// The spec (numerics.hpp) defines every code with integer arithmetic; that
/// costs ~30 instructions per element, which would make quantize and gather
/// issue-bound instead of memory-bound. GPUs from sm_89 (Ada) on convert two
/// values per instruction (these instructions are why sm_89 is the oldest
/// target), and on the inputs below the results are the same bytes:
/// - `cvt.rn.satfinite.e4m3x2.f32` is IEEE round-to-nearest-even with
///   saturation to +-448 and keeps the sign of zero, exactly
///   spec::fp8_encode_satfinite for e4m3fn on every non-NaN input. Callers
///   use it only for finite tiles without NaN/inf elements; everything else
///   goes through spec::quantize_element.
/// - `cvt.rn.f16x2.e4m3x2` is exact (every e4m3fn value is an f16 value), and
///   `cvt.rn.bf16x2.f32` is IEEE RNE with overflow to inf and no flush. Only
///   NaN results could differ from spec::f32_to_bf16_rne (canonical 0x7FFF),
///   so callers route lanes that may produce a NaN (a NaN code, or scale byte
///   255 where 0 * inf appears) to spec::dequantize_element.
/// The conformance tests check both paths exhaustively against the reference.
#pragma once

#include <cstdint>

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

/// Two fp32 values to bf16 bits with RNE (`lo` in bits 0..15). Not for NaN inputs.
__device__ __forceinline__ uint32_t bf16x2_from_f32(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace dsv4kv::cuda::detail
