/// \file record_numerics.hpp
/// \brief Exact bit-level rules of the DeepSeek-V4.1 records: MXFP8 (528 B), FP4 (288 B) and the
/// FP4 indexer key (68 B).
///
/// Spec section: docs "Cache records" (spec/records.md), "Numerics of the V4.1 records". As in
/// numerics.hpp, every host step is integer arithmetic on bit patterns (fp32 products and
/// quotients are rounded here, to nearest even, subnormals kept), so no result depends on the
/// floating-point environment; device code calls the same functions.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "dsv4kv/spec/config.hpp"
#include "dsv4kv/spec/numerics.hpp"
#include "dsv4kv/spec/records.hpp"

namespace dsv4kv::spec {

// ---------------------------------------------------------------------------
// Correctly rounded fp32 products and quotients from integers
// ---------------------------------------------------------------------------

/// fp32 bits of sig * 2^e2 (sig > 0, below 2^62) with `sign`, rounded to nearest even;
/// `sticky` says the exact value lies strictly above sig * 2^e2 (by less than 2^e2) and needs
/// sig >= 2^25 so that it only breaks ties. Subnormal results are kept; overflow gives inf.
DSV4KV_HD constexpr uint32_t f32_round(uint32_t sign, uint64_t sig, int e2, bool sticky) {
  int n = 0;  // position of the leading bit of sig
  while (n < 63 && (sig >> (n + 1)) != 0) ++n;
  const int top = n + e2;                             // the value lies in [2^top, 2^(top+1))
  const int lsb = top - 23 > -149 ? top - 23 : -149;  // weight of the result's last bit
  const int shift = lsb - e2;                         // low bits of sig that are rounded off
  uint64_t q = 0;
  if (shift <= 0) {
    q = sig << -shift;  // exact (sticky never set here: sig >= 2^25 makes shift > 0 for normals)
  } else if (shift < 63) {
    q = sig >> shift;
    const uint64_t rem = sig & ((uint64_t{1} << shift) - 1u);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (sticky || (q & 1u)))) ++q;
  }  // shift >= 63: below half the smallest subnormal, q stays 0
  const uint64_t bits = (static_cast<uint64_t>(lsb + 149) << 23) + q;  // a carry into the exponent is right
  return sign | (bits >= 0x7F800000u ? 0x7F800000u : static_cast<uint32_t>(bits));
}

/// Splits a finite non-zero fp32 magnitude into sig * 2^e with sig in [2^23, 2^24) (callers exclude zero).
DSV4KV_HD constexpr void f32_split(uint32_t mag, uint64_t& sig, int& e) {
  const int biased = static_cast<int>(mag >> 23);
  sig = biased == 0 ? (mag & 0x7FFFFFu) : ((mag & 0x7FFFFFu) | 0x800000u);
  e = (biased == 0 ? 1 : biased) - 150;
  while ((sig & 0x800000u) == 0) {
    sig <<= 1;
    --e;
  }
}

/// Bits of fl32(a * b), the IEEE product rounded to nearest even, subnormals kept (a NaN
/// result's payload is unspecified). Device code uses the correctly rounded __fmul_rn.
DSV4KV_HD constexpr uint32_t f32_mul_bits(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  if (!std::is_constant_evaluated()) return __float_as_uint(__fmul_rn(__uint_as_float(a), __uint_as_float(b)));
#endif
  const uint32_t sign = (a ^ b) & 0x80000000u;
  const uint32_t ma = a & 0x7FFFFFFFu, mb = b & 0x7FFFFFFFu;
  if (ma > 0x7F800000u || mb > 0x7F800000u) return 0x7FC00000u;  // NaN operand
  if (ma == 0x7F800000u || mb == 0x7F800000u) return (ma == 0 || mb == 0) ? 0x7FC00000u : (sign | 0x7F800000u);
  if (ma == 0 || mb == 0) return sign;
  uint64_t sa = 0, sb = 0;
  int ea = 0, eb = 0;
  f32_split(ma, sa, ea);
  f32_split(mb, sb, eb);
  return f32_round(sign, sa * sb, ea + eb, false);
}

/// Bits of fl32(a / b) for a finite non-zero `b`: the IEEE quotient rounded to nearest even
/// (PTX div.rn.f32), subnormals kept. A NaN `a` gives NaN (payload unspecified), an infinite `a`
/// gives inf. Device code uses the correctly rounded __fdiv_rn (a 64-bit integer division per
/// value would cost more than the whole memory traffic).
DSV4KV_HD constexpr uint32_t f32_div_bits(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  if (!std::is_constant_evaluated()) return __float_as_uint(__fdiv_rn(__uint_as_float(a), __uint_as_float(b)));
#endif
  const uint32_t sign = (a ^ b) & 0x80000000u;
  const uint32_t ma = a & 0x7FFFFFFFu, mb = b & 0x7FFFFFFFu;
  if (ma > 0x7F800000u) return 0x7FC00000u;
  if (ma == 0x7F800000u) return sign | 0x7F800000u;
  if (ma == 0) return sign;
  uint64_t sa = 0, sb = 0;
  int ea = 0, eb = 0;
  f32_split(ma, sa, ea);
  f32_split(mb, sb, eb);
  const uint64_t num = sa << 39;  // the quotient keeps >= 39 bits: far more than 24 + guard
  return f32_round(sign, num / sb, ea - eb - 39, num % sb != 0);
}

/// ceil(log2(v)) of a positive normal fp32 value given as bits: E - 127 for 1.f * 2^(E - 127),
/// plus the one that the sum carries into E when f != 0. The group rules' floors keep their
/// products normal (static_asserts below), so no subnormal case is needed.
DSV4KV_HD constexpr int f32_normal_ceil_log2(uint32_t v) { return static_cast<int>((v + 0x7FFFFFu) >> 23) - 127; }

static_assert(f32_mul_bits(0x40400000u, 0x40000000u) == 0x40C00000u);  // 3 * 2 = 6
static_assert(f32_div_bits(0x3F800000u, 0x40400000u) == 0x3EAAAAABu);  // 1 / 3, rounded up
static_assert(f32_div_bits(0x00000001u, 0x40000000u) == 0x00000000u);  // 2^-150: a tie, to even (0)
static_assert(f32_div_bits(0x00000003u, 0x40000000u) == 0x00000002u);  // 1.5 * 2^-149: a tie, to even (2)
static_assert(f32_normal_ceil_log2(0x3F800000u) == 0 && f32_normal_ceil_log2(0x3F800001u) == 1 &&
              f32_normal_ceil_log2(0x00800000u) == -126 && f32_normal_ceil_log2(0x7F7FFFFFu) == 128);

// ---------------------------------------------------------------------------
// FP4 e2m1
// ---------------------------------------------------------------------------

/// Largest e2m1 magnitude.
inline constexpr float kE2M1Max = 6.0f;
/// The sign bit of an e2m1 nibble.
inline constexpr uint8_t kE2M1Sign = 0x8;

/// The e2m1 nibble of fp32 bits: round to nearest, ties to the even code, saturating to +-6
/// (PTX cvt.rn.satfinite.e2m1x2.f32). The sign is kept, also when the magnitude rounds to 0
/// (-0 and small negatives give 0x8). NaN gives +6 (0x7): e2m1 has no NaN.
DSV4KV_HD constexpr uint8_t e2m1_encode_bits(uint32_t b) {
  const uint32_t m = b & 0x7FFFFFFFu;
  if (m > 0x7F800000u) return 0x7;
  // Codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; the midpoints (fp32 bits) between neighbours are
  // 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5. The code is the number of midpoints the magnitude
  // passes, a magnitude on midpoint k passing it when that gives the even code (k odd): so it
  // passes midpoint k when m reaches it, plus one ulp for even k. No data-dependent loop.
  constexpr uint32_t kPass[7] = {0x3E800001u, 0x3F400000u, 0x3FA00001u, 0x3FE00000u,
                                 0x40200001u, 0x40600000u, 0x40A00001u};
  uint8_t code = 0;
  for (int k = 0; k < 7; ++k) code += m >= kPass[k] ? 1 : 0;
  return static_cast<uint8_t>(code | ((b >> 31) != 0 ? kE2M1Sign : 0));
}

/// The fp32 bits a reader takes from an e2m1 nibble (its low 4 bits): the grid value, negative
/// with bit 3, except nibble 8 (-0), which reads as +0. vLLM's FP4 gather negates as 0 - magnitude
/// (Triton's unary minus), so its -0 is +0 and a zero times a negative scale is -0 (measured:
/// records_nvfp4_gather; spec/records.md, "Deviations"). Codes 2..7 are (1 + m/2) * 2^(e-1) for
/// the exponent bits e (1..3) and mantissa bit m; code 1 is 0.5.
DSV4KV_HD constexpr uint32_t e2m1_decode_bits(uint8_t nibble) {
  const uint32_t e = (nibble >> 1) & 3u, m = nibble & 1u;
  const uint32_t mag = e == 0 ? (m != 0 ? 0x3F000000u : 0u) : (((126u + e) << 23) | (m << 22));
  return mag != 0 && (nibble & kE2M1Sign) != 0 ? (mag | 0x80000000u) : mag;
}

/// e2m1_decode_bits() as an fp32 value.
DSV4KV_HD float e2m1_decode(uint8_t nibble) { return f32_from_bits(e2m1_decode_bits(nibble)); }

static_assert(e2m1_decode_bits(0x1) == 0x3F000000u && e2m1_decode_bits(0x2) == 0x3F800000u &&
              e2m1_decode_bits(0x3) == 0x3FC00000u && e2m1_decode_bits(0x4) == 0x40000000u &&
              e2m1_decode_bits(0x5) == 0x40400000u && e2m1_decode_bits(0x6) == 0x40800000u &&
              e2m1_decode_bits(0x7) == 0x40C00000u);  // 0.5, 1, 1.5, 2, 3, 4, 6
static_assert(e2m1_decode_bits(0x0) == 0 && e2m1_decode_bits(0x8) == 0 && e2m1_decode_bits(0xF) == 0xC0C00000u);
static_assert(e2m1_encode_bits(0x3E800000u) == 0 && e2m1_encode_bits(0x3F400000u) == 2);    // 0.25 -> 0, 0.75 -> 1
static_assert(e2m1_encode_bits(0x40A00000u) == 6 && e2m1_encode_bits(0x40A00001u) == 7);    // 5 -> 4, above -> 6
static_assert(e2m1_encode_bits(0x7F800000u) == 7 && e2m1_encode_bits(0xBE7FFFFFu) == 0x8);  // inf -> 6, -0.2499 -> -0

// ---------------------------------------------------------------------------
// Group scales
// ---------------------------------------------------------------------------

/// fl32(1/448), fl32(1/6): vLLM's V4.1 writers multiply by these reciprocals, not divide.
inline constexpr uint32_t kInv448Bits = std::bit_cast<uint32_t>(1.0f / 448.0f);
inline constexpr uint32_t kInv6Bits = std::bit_cast<uint32_t>(1.0f / 6.0f);
static_assert(kInv448Bits == 0x3B124925u && kInv6Bits == 0x3E2AAAABu);
/// The MXFP4 indexer key's floor on a group's absolute maximum: 6 * 2^-126.
inline constexpr uint32_t kMxfp4AmaxFloorBits = 0x01C00000u;
/// The FP4 record's scale range before rounding to e4m3: [2^-9, 448].
inline constexpr uint32_t kNvfp4ScaleMinBits = 0x3B000000u;
inline constexpr uint32_t kNvfp4ScaleMaxBits = 0x43E00000u;
static_assert(std::bit_cast<float>(kMxfp4AmaxFloorBits) == 6.0f * 0x1p-126f);
static_assert(std::bit_cast<float>(kNvfp4ScaleMinBits) == 0x1p-9f &&
              std::bit_cast<float>(kNvfp4ScaleMaxBits) == 448.0f);

/// The absolute maximum of `n` bf16 values as fp32 bits, NaN elements ignored (a NaN result
/// means every element was NaN). For non-NaN bf16 values the order of the sign-cleared bit
/// patterns is the order of the magnitudes, inf included.
DSV4KV_HD uint32_t bf16_amax_bits(const uint16_t* x, int n) {
  uint16_t amax = 0;
  bool any_number = false;
  for (int i = 0; i < n; ++i) {
    if (bf16_is_nan(x[i])) continue;
    any_number = true;
    const uint16_t a = bf16_abs_bits(x[i]);
    if (a > amax) amax = a;
  }
  return any_number ? uint32_t{amax} << 16 : 0x7FC00000u;
}

/// The UE8M0 scale of an MXFP8 group (528-byte record) from its absolute maximum (fp32 bits; NaN
/// for an all-NaN group): e = ceil(log2(fl32(max(amax, 1e-4) * fl32(1/448)))), byte e + 127;
/// a group holding +-inf is infinite (byte 255), exactly as the 584-byte record's tiles. The
/// product is normal, so e lies in [-22, 120] and the byte in [105, 247]: no clamp binds.
DSV4KV_HD TileScale mxfp8_group_scale(uint32_t amax) {
  const uint32_t a = amax & 0x7FFFFFFFu;
  const uint32_t m = (is_nan_bits(a) || a < kAmaxFloorBits) ? kAmaxFloorBits : a;
  if (m == 0x7F800000u) return TileScale{0, true, 255};
  const int e = f32_normal_ceil_log2(f32_mul_bits(m, kInv448Bits));
  return TileScale{e, false, static_cast<uint8_t>(e + kScaleBias)};
}
static_assert(f32_normal_ceil_log2(f32_mul_bits(kAmaxFloorBits, kInv448Bits)) == -22 &&
              f32_normal_ceil_log2(f32_mul_bits(0x7F7FFFFFu, kInv448Bits)) == 120);

/// The UE8M0 exponent of an MXFP4 indexer group: e = ceil(log2(fl32(max(amax, 6 * 2^-126) *
/// fl32(1/6)))), an infinite amax giving 127; the byte is e + 127. The floor's product is 2^-126,
/// the smallest normal value, so e lies in [-126, 126] and upstream's clamp of e to [-127, 127]
/// never binds.
DSV4KV_HD int mxfp4_group_exponent(uint32_t amax) {
  const uint32_t a = amax & 0x7FFFFFFFu;
  const uint32_t m = (is_nan_bits(a) || a < kMxfp4AmaxFloorBits) ? kMxfp4AmaxFloorBits : a;
  if (m == 0x7F800000u) return 127;
  return f32_normal_ceil_log2(f32_mul_bits(m, kInv6Bits));
}
static_assert(f32_mul_bits(kMxfp4AmaxFloorBits, kInv6Bits) == 0x00800000u &&
              f32_normal_ceil_log2(f32_mul_bits(0x7F7FFFFFu, kInv6Bits)) == 126);

/// The e4m3fn scale byte of an FP4 group (288-byte record): fl32(amax * fl32(1/6)) clamped to
/// [2^-9, 448] (a NaN amax gives 2^-9, an infinite one 448), rounded to nearest even e4m3.
DSV4KV_HD uint8_t nvfp4_scale_byte(uint32_t amax) {
  const uint32_t a = amax & 0x7FFFFFFFu;
  uint32_t s = is_nan_bits(a) ? kNvfp4ScaleMinBits : f32_mul_bits(a, kInv6Bits);
  if (s < kNvfp4ScaleMinBits) s = kNvfp4ScaleMinBits;
  if (s > kNvfp4ScaleMaxBits) s = kNvfp4ScaleMaxBits;
  return fp8_encode_satfinite_bits(s, Fp8Format::kE4M3Fn);
}

// ---------------------------------------------------------------------------
// One group of one token
// ---------------------------------------------------------------------------

/// The scale of one group of a V4.1 record (not the 584-byte one), from the group's absolute
/// maximum (bf16_amax_bits): the byte stored, and what quantize_group_code needs of it.
struct GroupScale {
  uint8_t byte;      ///< the scale byte stored
  TileScale tile;    ///< mxfp8_ds_mla: the UE8M0 scale, applied as the 584-byte record's tiles apply theirs
  uint32_t divisor;  ///< nvfp4_ds_mla: fp32 bits of the e4m3 scale's value (a normal number), x / divisor
  int exponent;      ///< mxfp4_indexer: x * 2^-exponent
};

/// The group scale of record `r` (see each record's rule above).
DSV4KV_HD GroupScale group_scale(Record r, uint32_t amax) {
  GroupScale gs{0, TileScale{0, false, 0}, 0, 0};
  if (r == Record::kMxfp8DsMla) {
    gs.tile = mxfp8_group_scale(amax);
    gs.byte = gs.tile.byte;
  } else if (r == Record::kNvfp4DsMla) {
    gs.byte = nvfp4_scale_byte(amax);
    gs.divisor = f32_bits(fp8_decode(gs.byte, Fp8Format::kE4M3Fn));
  } else {
    gs.exponent = mxfp4_group_exponent(amax);
    gs.byte = static_cast<uint8_t>(gs.exponent + kScaleBias);
  }
  return gs;
}

/// The code of one bf16 value `x` of a group under its scale: an e4m3 byte (mxfp8_ds_mla), or an
/// e2m1 nibble in the low 4 bits (nvfp4_ds_mla: e2m1(fl32(x / divisor)); mxfp4_indexer:
/// e2m1(x * 2^-e), exact unless it underflows, a non-finite x kept).
DSV4KV_HD uint8_t quantize_group_code(Record r, uint16_t x, const GroupScale& gs) {
  const uint32_t b = uint32_t{x} << 16;
  if (r == Record::kMxfp8DsMla) return quantize_element(x, gs.tile, Fp8Format::kE4M3Fn);
  if (r == Record::kNvfp4DsMla) return e2m1_encode_bits(f32_div_bits(b, gs.divisor));
  return e2m1_encode_bits(bf16_is_nonfinite(x) ? b : f32_mul_pow2_bits(b, -gs.exponent));  // inf, NaN stay
}

/// Quantizes one group of `rec.group` bf16 values `x` of a V4.1 record (not the 584-byte one,
/// whose tiles quantize_element handles): writes the group's value bytes to `values` (group
/// bytes of e4m3, or group / 2 bytes of e2m1 pairs, value 2j in the low nibble) and returns its
/// scale byte. Adds the group's non-finite elements to `nonfinite` (stored, but reported as data
/// errors).
DSV4KV_HD uint8_t quantize_group(Record r, const uint16_t* x, uint8_t* values, int& nonfinite) {
  const RecordLayout rec = record_layout(r);
  for (int i = 0; i < rec.group; ++i) nonfinite += bf16_is_nonfinite(x[i]) ? 1 : 0;
  const GroupScale gs = group_scale(r, bf16_amax_bits(x, rec.group));
  if (rec.values == ValueCode::kE4M3) {
    for (int i = 0; i < rec.group; ++i) values[i] = quantize_group_code(r, x[i], gs);
  } else {
    for (int i = 0; i < rec.group; i += 2)
      values[i / 2] =
          static_cast<uint8_t>(quantize_group_code(r, x[i], gs) | (quantize_group_code(r, x[i + 1], gs) << 4));
  }
  return gs.byte;
}

/// Whether scale byte `s` of record `r` breaks the record's rules on reading: an e4m3 NaN
/// (0x7F, 0xFF) in the FP4 record, the E8M0 NaN 255 in the indexer key (its writer never stores it). (The 528-byte
/// record writes 255 for a group holding inf, as the 584-byte one does.)
DSV4KV_HD constexpr bool scale_is_nan(Record r, uint8_t s) {
  if (r == Record::kNvfp4DsMla) return (s & 0x7Fu) == 0x7Fu;
  if (r == Record::kMxfp4Indexer) return s == 255;
  return false;
}

/// Dequantizes value `i` (0 <= i < rec.group) of one group of a V4.1 record to bf16 bits, from the
/// group's value bytes and scale byte: bf16_rne(fl32(value * scale)). The FP4 record's products
/// are exact (at most 2 + 4 significant bits); a NaN scale gives 0x7FFF.
DSV4KV_HD uint16_t dequantize_group_value(Record r, const uint8_t* values, uint8_t s, int i) {
  if (r == Record::kMxfp8DsMla) return dequantize_element(values[i], s, Fp8Format::kE4M3Fn);
  const uint8_t nibble = static_cast<uint8_t>((values[i / 2] >> ((i & 1) * 4)) & 0xFu);
  const float v = e2m1_decode(nibble);
  if (r == Record::kNvfp4DsMla) {
    if (scale_is_nan(r, s)) return 0x7FFF;
    return bf16_rne_from_f32_bits(f32_mul_bits(f32_bits(v), f32_bits(fp8_decode(s, Fp8Format::kE4M3Fn))));
  }
  // Record::kMxfp4Indexer: the multiplier 2^(s - 127), exact for every byte up to 254 (E8M0's 255 is NaN).
  if (s == 255) return 0x7FFF;
  return bf16_rne_from_f32_bits(f32_mul_pow2_bits(f32_bits(v), static_cast<int>(s) - kScaleBias));
}

}  // namespace dsv4kv::spec
