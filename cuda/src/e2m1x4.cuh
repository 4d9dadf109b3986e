/// \file e2m1x4.cuh
/// \brief Four FP4 (e2m1) nibbles to their bf16 bits by byte lookups: the decode of the 288- and 68-byte records'
/// gather kernels (records.cu).
///
/// Host and device code: on the host `byte_perm` is written out, so that a host test (e2m1x4_test) checks the lookup
/// tables on all 65,536 inputs in every build; the GPU sweep (CudaSmoke.RecordDequantizeEveryScaleAndCode) checks the
/// kernels that use it.
#pragma once

#include <cstdint>

#include "dsv4kv/spec/config.hpp"

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

}  // namespace dsv4kv::cuda::detail
