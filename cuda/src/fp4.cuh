/// \file fp4.cuh
/// \brief FP4 (e2m1) codes on the GPU, as records.cu uses them: four nibbles to bf16 by byte lookups (the gathers of
/// the 288- and 68-byte records), and both records' codes without a division, two values per 32-bit operation (their
/// quantizes): by one f16 sum a pair for finite groups, by comparisons where a group holds inf or NaN.
///
/// Host and device code, each the spec's rule in other arithmetic: a host test (fp4_test) checks them against the
/// spec's functions on every input they can see, in every build (on the host the f16 and byte operations are written
/// out); on the device, CudaSmoke.RecordDequantizeEveryScaleAndCode and the record properties check the kernels that
/// use them.
#pragma once

#include <cmath>
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

#if !defined(__CUDA_ARCH__)
/// The host form of a two-halves instruction: f on the low halves of a and b, then on the high halves, each result's
/// low 16 bits in its half.
template <typename F>
uint32_t per_half(uint32_t a, uint32_t b, F f) {
  return (f(a & 0xFFFFu, b & 0xFFFFu) & 0xFFFFu) | ((f(a >> 16, b >> 16) & 0xFFFFu) << 16);
}
#endif

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

/// Per half, the bf16 product a * b, which the caller guarantees exact (or an overflow to inf): fma.rn.bf16x2 with a -0
/// addend (which leaves every product, +0 included, as it is). On the host the halves multiply in fp32, where such a
/// product is exact too.
DSV4KV_HD uint32_t mul_exact_bf16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
  return r;
#else
  return per_half(a, b, [](uint32_t x, uint32_t y) {
    return spec::f32_bits(spec::f32_from_bits(x << 16) * spec::f32_from_bits(y << 16)) >> 16;
  });
#endif
}

/// Per half, the larger of two unsigned 16-bit values (CUDA's __vmaxu2).
DSV4KV_HD uint32_t max_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vmaxu2(a, b);
#else
  return per_half(a, b, [](uint32_t x, uint32_t y) { return x > y ? x : y; });
#endif
}

/// The thresholds of one FP4 group, as addends for comparing two bf16 magnitudes at once: the e2m1 rounding midpoints
/// t = 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 times the group's divisor d, the 288-byte record's e4m3 scale value
/// (spec::GroupScale::divisor) or the indexer key's 2^e. Each product t * d is exact in bf16 (3 significant bits times
/// 4, or a power of two; at least 2^-129, a bf16 subnormal) or, for the indexer key's largest exponents, overflows to
/// inf, whose pattern only inf reaches. |x| passes a threshold when its 15-bit pattern reaches the product's, plus one
/// for the midpoints between an even and an odd code (the even one below wins the tie; as spec::e2m1_encode_bits'
/// kPass). add[k] = (0x8000 - pass_k) in both halves: a + add[k] sets bit 15 of a half exactly when that half of a
/// reaches pass_k, without a carry into the other half (a, pass_k < 0x8000).
struct E2m1PairThresholds {
  uint32_t add[7];
};

/// The thresholds for the divisor whose fp32 bits are `divisor_bits`, two products per operation (d is a bf16 value:
/// at most 4 significant bits). kMayOverflow: d can be large enough for 2.5 d or 5 d to overflow (the indexer key),
/// where pass is held to inf's pattern so that inf passes all seven; the 288-byte record's d <= 448 never does.
template <bool kMayOverflow>
DSV4KV_HD E2m1PairThresholds e2m1_pair_thresholds(uint32_t divisor_bits) {
  // The midpoints as bf16 pairs, t_2j low: (0.25, 0.75), (1.25, 1.75), (2.5, 3.5), (5, 5).
  constexpr uint32_t kMidpointPairs[4] = {0x3F403E80u, 0x3FE03FA0u, 0x40604020u, 0x40A040A0u};
  const uint32_t divisor2 = byte_perm(divisor_bits, 0, 0x3232u);  // d as bf16 in both halves
  E2m1PairThresholds r{};
  for (int j = 0; j < 4; ++j) {
    const uint32_t products = mul_exact_bf16x2(kMidpointPairs[j], divisor2);
    for (int h = 0; h < 2 && 2 * j + h < 7; ++h) {
      const uint32_t both = byte_perm(products, 0, h != 0 ? 0x3232u : 0x1010u);  // t_k d in both halves
      if (h == 0) {
        // (0x8000 - (t_k d + 1)), the +1 of an even k; pass held to 0x7F80 (add >= 0x80) where t_k d may be inf.
        r.add[2 * j] = kMayOverflow ? max_u16x2(0x7FFF7FFFu - both, 0x00800080u) : 0x7FFF7FFFu - both;
      } else {
        r.add[2 * j + 1] = 0x80008000u - both;
      }
    }
  }
  return r;
}

/// spec::quantize_group_code for eight values of one FP4 group without a division or a product a value: the 288-byte
/// record's e2m1(fl32(x / d)), where a bf16 x (8 significant bits) and a threshold t * d (at most 7) are equal or
/// differ by far more than the quotient's rounding error, and the indexer key's e2m1(x * 2^-e) (d = 2^e), where the
/// product is exact unless it is below 2^-126, far below every threshold; so the value compares with t as x compares
/// with t * d. `x` holds the values two to a word (value 2j in the low half of x[j]); the result holds value i's
/// nibble at bits 4i..4i+3 (the record's byte order). Two values per 32-bit operation: a code is the number of
/// thresholds passed (a thermometer code), so its bits are the parity of all seven, of passes 2, 4, 6, and pass 4
/// alone. A NaN passes all seven and keeps no sign (code 7, as the spec's); inf passes all seven with its sign.
DSV4KV_HD uint32_t e2m1_codes8(const uint32_t x[4], const E2m1PairThresholds& th) {
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    // Values i and i + 4 side by side: one shift per code bit places both nibbles.
    const uint32_t v = byte_perm(x[i / 2], x[2 + i / 2], (i & 1) != 0 ? 0x7632u : 0x5410u);
    const uint32_t a = v & 0x7FFF7FFFu;
    uint32_t s[7];
    for (int k = 0; k < 7; ++k) s[k] = a + th.add[k];
    const uint32_t nan = a + 0x007F007Fu;  // bit 15 of a half: above 0x7F80
    const uint32_t c0 = s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6], c1 = s[1] ^ s[3] ^ s[5], c2 = s[3];
    const uint32_t sign = v & ~nan;
    // Bit 15 (31) of each to bit 4i + b (16 + 4i + b) of the result, b = 3 for the sign down to 0 for c0.
    out |= ((sign >> (12 - 4 * i)) & (0x00080008u << (4 * i))) | ((c2 >> (13 - 4 * i)) & (0x00040004u << (4 * i))) |
           ((c1 >> (14 - 4 * i)) & (0x00020002u << (4 * i))) | ((c0 >> (15 - 4 * i)) & (0x00010001u << (4 * i)));
  }
  return out;
}

#if !defined(__CUDA_ARCH__)
/// The f16 bits of v >= 0 rounded to nearest even, inf above the range (host model of cvt.rn.f16 and of an f16 sum;
/// v exact in double or, as a float product, inf).
inline uint32_t f16_bits_rn(double v) {
  if (v >= 65520.0) return 0x7C00u;  // rounds to inf
  int e = 0;
  (void)std::frexp(v, &e);                                                                       // v in [2^(e-1), 2^e)
  if (v == 0.0 || e - 1 < -14) return static_cast<uint32_t>(std::nearbyint(std::ldexp(v, 24)));  // subnormal step
  const auto n = static_cast<uint32_t>(std::nearbyint(std::ldexp(v, 11 - e)));                   // [1024, 2048]
  return (static_cast<uint32_t>(e - 1 + 15) << 10) + (n - 1024u);  // n = 2048 carries into the exponent
}

/// The value of f16 bits h (finite, sign clear).
inline double f16_value(uint32_t h) {
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  return e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(m + 1024u), int(e) - 25);
}
#endif

/// Two products |lo| * recip, |hi| * recip (fp32, rounded to nearest) as an f16 pair rounded to nearest (lo low; an
/// f16 overflow is inf, whose pattern orders above every finite one).
DSV4KV_HD uint32_t f16x2_from_scaled(float lo, float hi, float recip) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(__fmul_rn(fabsf(hi), recip)), "f"(__fmul_rn(fabsf(lo), recip)));
  return r;
#else
  return f16_bits_rn(std::fabs(lo) * recip) | (f16_bits_rn(std::fabs(hi) * recip) << 16);
#endif
}

/// Per half, the f16 sum a + b rounded to nearest (both finite, non-negative).
DSV4KV_HD uint32_t add_f16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else
  return per_half(a, b, [](uint32_t x, uint32_t y) { return f16_bits_rn(f16_value(x) + f16_value(y)); });
#endif
}

/// Per half, the smaller of two unsigned 16-bit values (CUDA's __vminu2).
DSV4KV_HD uint32_t min_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __vminu2(a, b);
#else
  return per_half(a, b, [](uint32_t x, uint32_t y) { return x < y ? x : y; });
#endif
}

/// Per half, max(a + b, 0) on signed 16-bit values (CUDA's __viaddmax_s16x2; no half overflows here).
DSV4KV_HD uint32_t add_max0_s16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __viaddmax_s16x2(a, b, 0u);
#else
  return per_half(a, b, [](uint32_t x, uint32_t y) {
    const int s = static_cast<int16_t>(x) + static_cast<int16_t>(y);
    return static_cast<uint32_t>(s < 0 ? 0 : s);
  });
#endif
}

/// spec::quantize_group_code for eight finite values of one FP4 group, `recip` being fl32(1 / divisor) for the 288-byte
/// record and 2^-e for the indexer key; the result as e2m1_codes8's. Cheaper than its seven compares: fp32 products,
/// f16 rounding, one f16 sum a pair of values. Why it is exact: a product is the quotient times (1 + d), |d| <= 2^-23
/// (exact for the indexer key); rounding it to f16 (11 bits) puts a quotient equal to a midpoint t (3 significant
/// bits) exactly on t, and one that is not stays on its side, since a bf16 x (8 bits) and t * divisor (7) that differ
/// do so by at least 2^-9 of t. Every q >= 6 (f16 inf included) gives code 7, so q is held to 6; then q + C, with C =
/// 2^9 max(2^E, 1) for q's exponent E, rounds q to the e2m1 grid's step in that binade (0.5, 1, 2), ties to the even
/// code: its low bits are round(q / step), to which 2 max(E, 0) adds the binade's first code. fp4_test checks every
/// finite bf16 value under every scale.
DSV4KV_HD uint32_t e2m1_codes8_scaled(const uint32_t x[4], float recip) {
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    // Values i and i + 4 side by side, as in e2m1_codes8.
    const uint32_t v = byte_perm(x[i / 2], x[2 + i / 2], (i & 1) != 0 ? 0x7632u : 0x5410u);
    const uint32_t q = min_u16x2(
        f16x2_from_scaled(spec::f32_from_bits(v << 16), spec::f32_from_bits(v & 0xFFFF0000u), recip), 0x46004600u);
    const uint32_t binade = add_max0_s16x2(q & 0x7C007C00u, 0xC400C400u);  // (max(E, 0)) << 10 a half
    const uint32_t c = binade + 0x60006000u;                               // 2^9 max(2^E, 1): 0x6000 is 512
    const uint32_t code = add_f16x2(q, c) - c + (binade >> 9);             // no half borrows: the sum >= c
    out |= (code | ((v >> 12) & 0x00080008u)) << (4 * i);                  // the sign, bit 15 (31) to bit 3 (19)
  }
  return out;
}

}  // namespace dsv4kv::cuda::detail
