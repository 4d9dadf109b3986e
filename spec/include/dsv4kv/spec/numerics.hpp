/// \file numerics.hpp
/// \brief Exact bit-level rounding rules: bf16, OCP e4m3fn, e4m3fnuz, UE8M0.
///
/// Spec section: docs "Numerics" (spec/numerics.md). Every function here is a
/// pure function of bit patterns, usable on host and device, and does not rely
/// on compiler float8 types or on the floating-point environment: on the host
/// every step is integer arithmetic on the bits or an exact fp32 operation on
/// normal numbers, so neither flush-to-zero / denormals-are-zero (MXCSR FTZ/DAZ,
/// e.g. after `torch.set_flush_denormal(True)`) nor the rounding mode changes a
/// result. Device code multiplies with `__fmul_rn`, which is correctly rounded
/// and does not flush (the library is never built with `-ftz=true`); both give
/// the same bits.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "dsv4kv/spec/config.hpp"
#include "dsv4kv/spec/layout.hpp"

namespace dsv4kv::spec {

/// The two FP8 encodings a cache can hold (`use_fnuz` selects kE4M3Fnuz).
enum class Fp8Format : uint8_t {
  kE4M3Fn = 0,    ///< OCP e4m3fn: bias 7, max 448, NaN 0x7F/0xFF, -0 is 0x80.
  kE4M3Fnuz = 1,  ///< e4m3fnuz: bias 8, max 240, NaN 0x80 only, no -0.
};

/// Static facts of one FP8 format.
struct Fp8Traits {
  int bias;            ///< exponent bias
  float quant_max;     ///< fp8_max used to derive the scale (vLLM's choice)
  uint8_t max_code;    ///< largest finite magnitude code (satfinite target)
  uint8_t clamp_code;  ///< code of +quant_max: what NaN and inf elements are stored as
};

/// OCP e4m3fn: quantization uses the format maximum 448 (code 0x7E).
inline constexpr Fp8Traits kE4M3FnTraits{7, 448.0f, 0x7E, 0x7E};
/// e4m3fnuz: vLLM's get_fp8_min_max() scales to 224 (code 0x7E), not the
/// format maximum 240 (code 0x7F), to avoid an accuracy loss on ROCm.
inline constexpr Fp8Traits kE4M3FnuzTraits{8, 224.0f, 0x7F, 0x7E};

/// Traits of format `f` (spelled out so device code needs no global constant).
DSV4KV_HD constexpr Fp8Traits fp8_traits(Fp8Format f) {
  return f == Fp8Format::kE4M3Fn ? Fp8Traits{7, 448.0f, 0x7E, 0x7E} : Fp8Traits{8, 224.0f, 0x7F, 0x7E};
}
static_assert(fp8_traits(Fp8Format::kE4M3Fn).quant_max == kE4M3FnTraits.quant_max);
static_assert(fp8_traits(Fp8Format::kE4M3Fnuz).max_code == kE4M3FnuzTraits.max_code);

// ---------------------------------------------------------------------------
// fp32 / bf16 bit access
// ---------------------------------------------------------------------------

/// Reinterprets fp32 bits as a float.
DSV4KV_HD float f32_from_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}

/// Reinterprets a float as its fp32 bits.
DSV4KV_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
#endif
}

/// The fp32 value of a bf16 bit pattern (exact: bf16 is the top half of fp32).
DSV4KV_HD float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t{h} << 16); }

/// fp32 bits -> bf16 bits, round to nearest even; overflow gives +-inf; every NaN gives 0x7FFF.
DSV4KV_HD constexpr uint16_t bf16_rne_from_f32_bits(uint32_t b) {
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  const uint32_t rounding = 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>((b + rounding) >> 16);
}

/// fp32 -> bf16, round to nearest even; overflow gives +-inf; every NaN gives 0x7FFF.
DSV4KV_HD uint16_t f32_to_bf16_rne(float f) { return bf16_rne_from_f32_bits(f32_bits(f)); }

/// Bits of `x * 2^k` for a finite fp32 value `x` (given as bits), correctly rounded to nearest
/// even, with fp32 subnormal results kept (never flushed) and overflow giving +-inf. Integer
/// arithmetic only, so the result does not depend on the floating-point environment: it is what
/// an IEEE multiplication by 2^k gives with FTZ/DAZ off, whatever the thread's mode.
DSV4KV_HD constexpr uint32_t f32_mul_pow2_bits(uint32_t x, int k) {
  const uint32_t sign = x & 0x80000000u;
  const uint32_t mag = x & 0x7FFFFFFFu;
  if (mag == 0) return sign;
  // value = sig * 2^e2 with sig normalized to [2^23, 2^24).
  const int biased = static_cast<int>(mag >> 23);
  uint32_t sig = biased == 0 ? mag : ((mag & 0x7FFFFFu) | 0x800000u);
  int e2 = (biased == 0 ? 1 : biased) - 150 + k;
  while ((sig & 0x800000u) == 0) {  // an fp32 subnormal input: at most 23 steps
    sig <<= 1;
    --e2;
  }
  const int out_biased = e2 + 150;  // biased exponent of the exact result
  if (out_biased >= 255) return sign | 0x7F800000u;
  if (out_biased >= 1) return sign | (static_cast<uint32_t>(out_biased) << 23) | (sig & 0x7FFFFFu);
  // Subnormal result: sig * 2^e2 on the grid of 2^-149, rounded to nearest even.
  const int shift = 1 - out_biased;  // >= 1
  if (shift > 25) return sign;       // below half the smallest subnormal
  uint32_t q = sig >> shift;
  const uint32_t rem = sig & ((uint32_t{1} << shift) - 1u);
  const uint32_t half = uint32_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q == 2^23 is the smallest normal: same bits
  return sign | q;
}

/// 2^k as an fp32 value, for k in [-149, 127] (subnormal powers included).
DSV4KV_HD float exp2i(int k) {
  if (k >= -126) return f32_from_bits(static_cast<uint32_t>(k + 127) << 23);
  return f32_from_bits(uint32_t{1} << (k + 149));
}

/// True if the fp32 value is a NaN.
DSV4KV_HD bool is_nan_bits(uint32_t b) { return (b & 0x7FFFFFFFu) > 0x7F800000u; }
/// True if the bf16 value is a NaN.
DSV4KV_HD bool bf16_is_nan(uint16_t h) { return (h & 0x7FFFu) > 0x7F80u; }
/// True if the bf16 value is +-inf or NaN.
DSV4KV_HD bool bf16_is_nonfinite(uint16_t h) { return (h & 0x7F80u) == 0x7F80u; }
/// |x| of a bf16 value as bits (sign cleared).
DSV4KV_HD uint16_t bf16_abs_bits(uint16_t h) { return static_cast<uint16_t>(h & 0x7FFFu); }

// ---------------------------------------------------------------------------
// FP8 encode / decode
// ---------------------------------------------------------------------------

/// Magnitude code (7 bits) of a non-negative finite fp32 value `a` in a
/// 3-mantissa-bit format with exponent bias `bias`: round to nearest, ties to
/// even, saturating to `max_code`. Pure integer arithmetic on the fp32 bits.
DSV4KV_HD uint8_t fp8_magnitude_rne(uint32_t abs_bits, int bias, uint8_t max_code) {
  const int biased = static_cast<int>(abs_bits >> 23);
  if (biased == 0) return 0;            // zero or fp32 subnormal: far below half the smallest fp8 step
  if (biased == 0xFF) return max_code;  // inf saturates (satfinite)
  const int e = biased - 127;           // value = sig * 2^(e - 23)
  const uint32_t sig = (abs_bits & 0x7FFFFFu) | 0x800000u;
  const int min_normal_exp = 1 - bias;
  const int quantum_exp = (e >= min_normal_exp ? e : min_normal_exp) - 3;  // step of the target binade
  const int shift = quantum_exp - e + 23;                                  // >= 20
  if (shift >= 25) return 0;                                               // below half the smallest subnormal step
  uint32_t n = sig >> shift;  // value / 2^quantum_exp, truncated; n <= 15 before rounding
  const uint32_t rem = sig & ((uint32_t{1} << shift) - 1u);
  const uint32_t half = uint32_t{1} << (shift - 1);
  if (rem > half || (rem == half && (n & 1u))) ++n;  // n may become 16: carries into the next binade
  // Normal binades have n in [8, 16], the subnormal one [0, 8]; one formula covers both.
  const int code = ((quantum_exp + 3 + bias) << 3) + static_cast<int>(n) - 8;
  return code > max_code ? max_code : static_cast<uint8_t>(code);
}

/// Encodes fp32 bits as FP8 with round-to-nearest-even and saturation to
/// the largest finite value (inf saturates too). NaN is not handled here: the
/// quantizer decides what a NaN element becomes. Sign of zero: e4m3fn keeps it
/// (0x80), e4m3fnuz has no -0 and stores 0x00.
DSV4KV_HD uint8_t fp8_encode_satfinite_bits(uint32_t b, Fp8Format f) {
  const Fp8Traits t = fp8_traits(f);
  const uint8_t mag = fp8_magnitude_rne(b & 0x7FFFFFFFu, t.bias, t.max_code);
  const bool neg = (b >> 31) != 0;
  if (f == Fp8Format::kE4M3Fnuz && mag == 0) return 0x00;
  return neg ? static_cast<uint8_t>(mag | 0x80u) : mag;
}

/// fp8_encode_satfinite_bits() of an fp32 value.
DSV4KV_HD uint8_t fp8_encode_satfinite(float y, Fp8Format f) { return fp8_encode_satfinite_bits(f32_bits(y), f); }

/// Mask of the magnitude bits of an FP8 code (bit 7 is the sign).
inline constexpr uint8_t kFp8MagnitudeMask = 0x7F;
/// e4m3fn's NaN magnitude: the codes whose magnitude bits equal it (0x7F, 0xFF) are its NaNs.
inline constexpr uint8_t kE4M3FnNanMagnitude = 0x7F;

/// True if `code` is a NaN in format `f`.
DSV4KV_HD bool fp8_is_nan(uint8_t code, Fp8Format f) {
  return f == Fp8Format::kE4M3Fn ? (code & 0x7Fu) == 0x7Fu : code == 0x80u;
}

/// The exact fp32 value of an FP8 code (NaN codes give a quiet NaN).
DSV4KV_HD float fp8_decode(uint8_t code, Fp8Format f) {
  if (fp8_is_nan(code, f)) return f32_from_bits(0x7FC00000u);
  const int bias = fp8_traits(f).bias;
  const int e = (code >> 3) & 0xF;
  const int m = code & 0x7;
  // Subnormal: m/8 * 2^(1-bias); normal: (8+m)/8 * 2^(e-bias). Both exact in fp32.
  const float mag =
      e == 0 ? static_cast<float>(m) * exp2i(1 - bias - 3) : static_cast<float>(8 + m) * exp2i(e - bias - 3);
  return (code & 0x80u) ? -mag : mag;
}

// ---------------------------------------------------------------------------
// UE8M0 scales
// ---------------------------------------------------------------------------

/// vLLM's floor on a tile's absolute maximum, applied in fp32 before dividing:
/// 1e-4f (bits 0x38D1B717). FlashMLA floors after dividing and SGLang uses 1e-8.
inline constexpr uint32_t kAmaxFloorBits = 0x38D1B717u;

/// Scale byte of an infinite tile (one holding +-inf); dequantization multiplies by +inf under it.
inline constexpr uint8_t kInfScaleByte = 255;

/// The smallest exponent tile_scale gives, the one the floor decides (spec "The scale of a tile"):
/// ceil(log2(fl32(1e-4f / fp8_max))), -22 for e4m3fn and -21 for e4m3fnuz. Host-only constexpr,
/// for tools and tests; tile_scale computes the same exponent from the bits.
constexpr int floor_exponent(Fp8Format f) {
  const float q = std::bit_cast<float>(kAmaxFloorBits) / fp8_traits(f).quant_max;
  const uint32_t qb = std::bit_cast<uint32_t>(q);
  return static_cast<int>(qb >> 23) - 127 + ((qb & 0x7FFFFFu) != 0 ? 1 : 0);
}
static_assert(floor_exponent(Fp8Format::kE4M3Fn) == -22 && floor_exponent(Fp8Format::kE4M3Fnuz) == -21);

// The byte of an all-zero tile: 105 in e4m3fn, 106 in e4m3fnuz (spec table "The scale of a tile").
static_assert(floor_exponent(Fp8Format::kE4M3Fn) + kScaleBias == 105 &&
              floor_exponent(Fp8Format::kE4M3Fnuz) + kScaleBias == 106);

/// The scale of one tile: its exponent, or "infinite" when the tile holds +-inf.
struct TileScale {
  int exponent;   ///< e: values are stored as x / 2^e (meaningless when infinite)
  bool infinite;  ///< the tile contained +-inf: scale byte 255, finite values become +-0
  uint8_t byte;   ///< the stored UE8M0 byte: clamp(e + 127, 0, 255), 255 when infinite
};

/// UE8M0 exponent of a tile from its absolute maximum `amax` over the
/// non-NaN elements (a NaN `amax` means every element was NaN):
/// `e = ceil(log2(fl32(max(amax, 1e-4f) / fp8_max)))`, computed exactly.
///
/// No division is needed: with `m = max(amax, 1e-4f)` (a normal fp32 number) and
/// fp8_max = 1.75 * 2^p (448 = 1.75 * 2^8, 224 = 1.75 * 2^7), the correctly rounded quotient
/// fl32(m / fp8_max) is a power of two 2^k only when m == fp8_max * 2^k exactly (the fp32
/// neighbours of fp8_max * 2^k lie about 2^-23.8 away relatively, more than the half-ulp 2^-24
/// of 2^k), so `e` is the real ceil(log2(m / fp8_max)): the smallest k with
/// m <= fp8_max * 2^k, found by comparing exponents and then fraction bits. Integer arithmetic
/// only (no dependence on the rounding mode or FTZ/DAZ); conformance/ftz_test.cpp
/// checks it against the correctly rounded division for every finite bf16 amax.
DSV4KV_HD TileScale tile_scale(float amax, Fp8Format f) {
  const uint32_t ab = f32_bits(amax) & 0x7FFFFFFFu;
  // NaN amax (all-NaN tile) or amax below the floor: the floor. (Bits of non-negative fp32
  // values compare like the values.)
  const uint32_t mb = (is_nan_bits(ab) || ab < kAmaxFloorBits) ? kAmaxFloorBits : ab;
  if (mb == 0x7F800000u) return TileScale{0, true, 255};
  const uint32_t qb = f32_bits(fp8_traits(f).quant_max);
  const int e = static_cast<int>(mb >> 23) - static_cast<int>(qb >> 23) + ((mb & 0x7FFFFFu) > (qb & 0x7FFFFFu) ? 1 : 0);
  const int byte = e + kScaleBias;
  return TileScale{e, false, static_cast<uint8_t>(byte < 0 ? 0 : (byte > 255 ? 255 : byte))};
}

/// The fp32 multiplier a scale byte stands for when dequantizing:
/// S(0) = +0 (2^-127 is flushed, as the measured kernels do), S(s) = 2^(s-127)
/// for 1 <= s <= 254, S(255) = +inf.
DSV4KV_HD float scale_multiplier(uint8_t s) {
  if (s == 0) return 0.0f;
  if (s == 255) return f32_from_bits(0x7F800000u);
  return exp2i(static_cast<int>(s) - kScaleBias);
}

/// Quantizes one bf16 element of a tile with scale `ts` (spec "quantize_and_insert_k_cache", step 3).
/// NaN elements and, in an infinite tile, +-inf elements become the +quant_max code
/// (0x7E); finite elements of an infinite tile become +-0.
DSV4KV_HD uint8_t quantize_element(uint16_t x, TileScale ts, Fp8Format f) {
  const Fp8Traits t = fp8_traits(f);
  if (bf16_is_nonfinite(x)) return t.clamp_code;
  if (ts.infinite) return fp8_encode_satfinite_bits(uint32_t{x & 0x8000u} << 16, f);
  // x / 2^e is exact in fp32 unless the quotient is an fp32 subnormal, which lies far below half
  // the smallest fp8 step and rounds to +-0 whether kept or flushed.
  uint32_t y = f32_mul_pow2_bits(uint32_t{x} << 16, -ts.exponent);
  // Clamp to +-quant_max (never acts for finite input with vLLM's scale rule).
  const uint32_t qmax = f32_bits(t.quant_max);
  if ((y & 0x7FFFFFFFu) > qmax) y = (y & 0x80000000u) | qmax;
  return fp8_encode_satfinite_bits(y, f);
}

/// Dequantizes one FP8 code under scale byte `s` to bf16 bits:
/// bf16_rne(fp32(code) * S(s)) with the fp32 product correctly rounded and never flushed
/// (fp32 subnormal products survive into bf16 subnormals); every NaN (NaN code, 0 * inf) gives
/// 0x7FFF. The host computes the product with integer arithmetic (f32_mul_pow2_bits), so the
/// result does not depend on the thread's FTZ/DAZ mode.
DSV4KV_HD uint16_t dequantize_element(uint8_t code, uint8_t s, Fp8Format f) {
#if defined(__CUDA_ARCH__)
  return f32_to_bf16_rne(__fmul_rn(fp8_decode(code, f), scale_multiplier(s)));
#else
  if (fp8_is_nan(code, f)) return 0x7FFF;
  const uint32_t d = f32_bits(fp8_decode(code, f));               // exact: zero or a normal fp32 number
  if (s == 0) return static_cast<uint16_t>((d >> 16) & 0x8000u);  // x * +0 = +-0
  if (s == 255)                                                   // x * +inf: NaN for x = +-0, else +-inf
    return (d & 0x7FFFFFFFu) == 0 ? uint16_t{0x7FFF} : static_cast<uint16_t>(((d >> 16) & 0x8000u) | 0x7F80u);
  return bf16_rne_from_f32_bits(f32_mul_pow2_bits(d, static_cast<int>(s) - kScaleBias));
#endif
}

// Worked examples of the spec, checked at compile time where the host compiler allows.
static_assert(kE4M3FnTraits.quant_max == 448.0f && kE4M3FnuzTraits.quant_max == 224.0f);

}  // namespace dsv4kv::spec
