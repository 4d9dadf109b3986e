/// \file fp4.cuh
/// \brief FP4 (e2m1) codes on the GPU, as records.cu uses them: four nibbles to bf16 by byte lookups (the gathers of
/// the 288- and 68-byte records), and the 288-byte record's codes by comparisons instead of a division (its quantize).
///
/// Host and device code, each the spec's rule in other arithmetic: a host test (fp4_test) checks them against the
/// spec's functions on every input they can see, in every build (on the host `byte_perm` is written out); on the
/// device, CudaSmoke.RecordDequantizeEveryScaleAndCode and the record properties check the kernels that use them.
#pragma once

#include <cstdint>

#include "dsv4kv/spec/record_numerics.hpp"

namespace dsv4kv::cuda::detail {

/// CUDA's __byte_perm(x, y, s): byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x (x's bytes 0-3,
/// then y's). Callers pass selectors without bit 3 set in any nibble.
DSV4KV_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t bytes = (uint64_t{y} << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  return r;
#endif
}

/// Four e2m1 nibbles (bits 0..15 of `c`, value 0 lowest) to their bf16 bits (spec::e2m1_decode_bits' top halves:
/// every e2m1 value is a bf16 value), values 0 and 1 in `v01` (value 0 low), 2 and 3 in `v23`: byte lookups (prmt) of
/// the magnitudes' low and high bytes, then the sign of each nonzero magnitude (nibble 8 stays +0, as in the spec).
DSV4KV_HD void e2m1x4_to_bf16(uint32_t c, uint32_t& v01, uint32_t& v23) {
  // Magnitude codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6: bf16 0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080,
  // 0x40C0; their low bytes in kLo (codes 0-3, 4-7), their high bytes in kHi.
  constexpr uint32_t kLo0 = 0xC0800000u, kLo1 = 0xC0804000u, kHi0 = 0x3F3F3F00u, kHi1 = 0x40404040u;
  const uint32_t sel = c & 0x7777u;
  const uint32_t lo = byte_perm(kLo0, kLo1, sel);
  uint32_t hi = byte_perm(kHi0, kHi1, sel);
  const uint32_t neg = byte_perm(c << 4, c, 0x5140) & 0x80808080u;  // byte i: bit 7 = sign of nibble i
  hi |= neg & (hi + 0x7F7F7F7Fu);  // bit 7 of a nonzero high byte (0x3F, 0x40; no carry between bytes)
  v01 = byte_perm(lo, hi, 0x5140);
  v23 = byte_perm(lo, hi, 0x7362);
}

/// The 288-byte record's thresholds for one group: the e2m1 rounding midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5
/// times the group's divisor d (spec::GroupScale::divisor), each product exact (at most 3 + 4 significant bits).
struct Nvfp4Thresholds {
  float t[7];
};

DSV4KV_HD Nvfp4Thresholds nvfp4_thresholds(uint32_t divisor_bits) {
  const float d = spec::f32_from_bits(divisor_bits);
  return Nvfp4Thresholds{{0.25f * d, 0.75f * d, 1.25f * d, 1.75f * d, 2.5f * d, 3.5f * d, 5.0f * d}};
}

/// spec::quantize_group_code for the 288-byte record, e2m1(fl32(x / d)), without the division: a bf16 x (8
/// significant bits) and a threshold t * d (at most 7) are equal or differ by far more than the quotient's rounding
/// error, so fl32(x / d) compares with t as x compares with t * d. Midpoints between an odd and an even code round to
/// the even one (>= against 0.75, 1.75, 3.5; > against the others). A NaN x takes the spec's path (its code is 7).
DSV4KV_HD uint8_t nvfp4_code(uint16_t x, const Nvfp4Thresholds& th, const spec::GroupScale& gs) {
  if (spec::bf16_is_nan(x)) return spec::quantize_group_code(spec::Record::kNvfp4DsMla, x, gs);
  const float a = spec::bf16_to_f32(static_cast<uint16_t>(x & 0x7FFFu));
  const int code = (a > th.t[0] ? 1 : 0) + (a >= th.t[1] ? 1 : 0) + (a > th.t[2] ? 1 : 0) + (a >= th.t[3] ? 1 : 0) +
                   (a > th.t[4] ? 1 : 0) + (a >= th.t[5] ? 1 : 0) + (a > th.t[6] ? 1 : 0);
  return static_cast<uint8_t>(code | ((x >> 15) << 3));
}

}  // namespace dsv4kv::cuda::detail
