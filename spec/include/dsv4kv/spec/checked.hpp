/// \file checked.hpp
/// \brief Overflow-checked int64 (and uint64) arithmetic for sizes, widths, extents and offsets.
///
/// Every size, width, extent and offset that `validate()`, the host code of the
/// backends, the golden runner and the file parsers compute from caller-supplied
/// numbers goes through these functions, so an argument near 2^63 becomes a
/// contract error naming that argument instead of a wrapped value (spec
/// "Argument contracts", section "Integer ranges and extents").
///
/// A dsv4kv::spec::Checked carries a value and an `ok` flag; arithmetic on a
/// value that already overflowed stays overflowed, so a chain such as
/// `checked_add(checked_mul(a, b), c)` is tested once, at the end. Host code
/// uses the compiler's `__builtin_*_overflow`; device code (where those builtins
/// are not guaranteed) uses a portable formulation with identical results
/// (`conformance/checked_test.cpp` compares the two against 128-bit arithmetic).
///
/// File readers also count bytes in uint64 (a file's sizes are unsigned and may exceed
/// INT64_MAX before they are refused): dsv4kv::spec::CheckedU64 is the same toolkit for
/// them, and dsv4kv::checked::add / dsv4kv::checked::mul give both widths as std::optional
/// for host code that chains through `if (auto r = ...)`.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>

#include "dsv4kv/spec/config.hpp"

namespace dsv4kv::spec {

/// \brief A result of type T (int64_t or uint64_t) and whether every step that produced it
/// stayed inside T.
///
/// Read `value` only when `ok`; after an overflow it holds 0, never a wrapped value.
template <class T>
struct BasicChecked {
  T value = 0;     ///< the exact result (0 when !ok)
  bool ok = true;  ///< false once any step overflowed or got an operand outside its domain

  constexpr BasicChecked() = default;  // defaulted: usable on host and device (nvcc ignores an annotation here)
  /// An exact value (implicit, so plain integer operands mix with checked ones).
  DSV4KV_HD constexpr BasicChecked(T v) : value(v), ok(true) {}  // NOLINT(google-explicit-constructor)
  /// The overflowed (or undefined) result.
  DSV4KV_HD static constexpr BasicChecked overflow() {
    BasicChecked c;
    c.ok = false;
    return c;
  }
  /// True when the result exists and lies in [lo, hi].
  DSV4KV_HD constexpr bool within(T lo, T hi) const { return ok && value >= lo && value <= hi; }
};

/// An int64 result: sizes, widths, extents and offsets of the operations.
using Checked = BasicChecked<int64_t>;

/// \brief A uint64 result: byte counts of files (which may exceed INT64_MAX before they are refused).
///
/// Its functions carry a `_u64` suffix: Checked and CheckedU64 both convert implicitly from
/// integers, so shared names would make mixed calls ambiguous.
using CheckedU64 = BasicChecked<uint64_t>;

namespace detail {

inline constexpr int64_t kI64Max = 9223372036854775807;
inline constexpr int64_t kI64Min = -kI64Max - 1;

/// a + b into *r; true on overflow (then *r is unspecified). Formulation without builtins.
DSV4KV_HD constexpr bool add_overflow_portable(int64_t a, int64_t b, int64_t* r) {
  if ((b > 0 && a > kI64Max - b) || (b < 0 && a < kI64Min - b)) return true;
  *r = a + b;
  return false;
}

/// a - b into *r; true on overflow. Formulation without builtins.
DSV4KV_HD constexpr bool sub_overflow_portable(int64_t a, int64_t b, int64_t* r) {
  if ((b < 0 && a > kI64Max + b) || (b > 0 && a < kI64Min + b)) return true;
  *r = a - b;
  return false;
}

/// a * b into *r; true on overflow. Formulation without builtins: the product of the
/// magnitudes is compared with the largest magnitude the result's sign allows.
DSV4KV_HD constexpr bool mul_overflow_portable(int64_t a, int64_t b, int64_t* r) {
  if (a == 0 || b == 0) {
    *r = 0;
    return false;
  }
  const bool negative = (a < 0) != (b < 0);
  const uint64_t ua = a < 0 ? uint64_t{0} - static_cast<uint64_t>(a) : static_cast<uint64_t>(a);
  const uint64_t ub = b < 0 ? uint64_t{0} - static_cast<uint64_t>(b) : static_cast<uint64_t>(b);
  const uint64_t limit = negative ? uint64_t{1} << 63 : static_cast<uint64_t>(kI64Max);
  if (ua > limit / ub) return true;
  const uint64_t p = ua * ub;
  if (p > limit) return true;
  // Two's complement conversion (well defined since C++20); p == 2^63 gives INT64_MIN.
  *r = negative ? static_cast<int64_t>(uint64_t{0} - p) : static_cast<int64_t>(p);
  return false;
}

DSV4KV_HD constexpr bool add_overflow(int64_t a, int64_t b, int64_t* r) {
#if defined(__CUDA_ARCH__)
  return add_overflow_portable(a, b, r);
#else
  return __builtin_add_overflow(a, b, r);
#endif
}

DSV4KV_HD constexpr bool sub_overflow(int64_t a, int64_t b, int64_t* r) {
#if defined(__CUDA_ARCH__)
  return sub_overflow_portable(a, b, r);
#else
  return __builtin_sub_overflow(a, b, r);
#endif
}

DSV4KV_HD constexpr bool mul_overflow(int64_t a, int64_t b, int64_t* r) {
#if defined(__CUDA_ARCH__)
  return mul_overflow_portable(a, b, r);
#else
  return __builtin_mul_overflow(a, b, r);
#endif
}

}  // namespace detail

/// a + b, or an overflowed result when the sum leaves int64 (or an operand already overflowed).
DSV4KV_HD constexpr Checked checked_add(Checked a, Checked b) {
  int64_t r = 0;
  if (!a.ok || !b.ok || detail::add_overflow(a.value, b.value, &r)) return Checked::overflow();
  return Checked(r);
}

/// a - b, or an overflowed result when the difference leaves int64.
DSV4KV_HD constexpr Checked checked_sub(Checked a, Checked b) {
  int64_t r = 0;
  if (!a.ok || !b.ok || detail::sub_overflow(a.value, b.value, &r)) return Checked::overflow();
  return Checked(r);
}

/// a * b, or an overflowed result when the product leaves int64.
DSV4KV_HD constexpr Checked checked_mul(Checked a, Checked b) {
  int64_t r = 0;
  if (!a.ok || !b.ok || detail::mul_overflow(a.value, b.value, &r)) return Checked::overflow();
  return Checked(r);
}

/// The larger of a and b (overflowed when either is).
DSV4KV_HD constexpr Checked checked_max(Checked a, Checked b) {
  if (!a.ok || !b.ok) return Checked::overflow();
  return a.value > b.value ? a : b;
}

/// round_up(x, m): the smallest multiple of m that is >= x, for x >= 0 and m >= 1.
/// Overflowed when that multiple exceeds INT64_MAX or an operand is outside its domain.
DSV4KV_HD constexpr Checked checked_round_up(Checked x, int64_t m) {
  if (!x.ok || x.value < 0 || m < 1) return Checked::overflow();
  const int64_t rem = x.value % m;
  return rem == 0 ? x : checked_add(x, m - rem);
}

/// ceil(a / b) for a >= 0 and b >= 1, computed without forming a + b - 1 (so it cannot
/// overflow); overflowed for operands outside that domain.
DSV4KV_HD constexpr Checked ceil_div_checked(Checked a, int64_t b) {
  if (!a.ok || a.value < 0 || b < 1) return Checked::overflow();
  return Checked(a.value / b + (a.value % b != 0 ? 1 : 0));
}

/// Number of elements of a view with `ndim` sizes: their product, 0 when any size is 0
/// (whatever the others are). Overflowed when a size is negative or the product leaves int64.
DSV4KV_HD constexpr Checked checked_numel(const int64_t* sizes, int ndim) {
  for (int d = 0; d < ndim; ++d)
    if (sizes[d] < 0) return Checked::overflow();
  for (int d = 0; d < ndim; ++d)
    if (sizes[d] == 0) return Checked(0);
  Checked n(1);
  for (int d = 0; d < ndim; ++d) n = checked_mul(n, sizes[d]);
  return n;
}

/// \brief Byte extent of a strided view: the bytes from its lowest to its highest element
/// address, inclusive of the last element.
///
/// `(1 + sum over d of (sizes[d] - 1) * |strides[d]|) * elem_bytes`, and 0 when any size is 0
/// (an empty view touches no byte, whatever its strides). Overflowed when a size is negative,
/// `elem_bytes < 1`, a stride is INT64_MIN (no magnitude), or any step leaves int64. Every byte
/// an operation may touch through a view lies in [data, data + extent).
DSV4KV_HD constexpr Checked checked_extent_bytes(const int64_t* sizes, const int64_t* strides, int ndim,
                                                 int64_t elem_bytes) {
  if (elem_bytes < 1) return Checked::overflow();
  for (int d = 0; d < ndim; ++d)
    if (sizes[d] < 0) return Checked::overflow();
  for (int d = 0; d < ndim; ++d)
    if (sizes[d] == 0) return Checked(0);
  // The element count is not needed (and may exceed int64 with zero strides).
  Checked last(0);  // offset of the last element, in elements
  for (int d = 0; d < ndim; ++d) {
    if (strides[d] == detail::kI64Min) return Checked::overflow();
    const int64_t s = strides[d] < 0 ? -strides[d] : strides[d];
    last = checked_add(last, checked_mul(sizes[d] - 1, s));
  }
  return checked_mul(checked_add(last, 1), elem_bytes);
}

/// a + b, or an overflowed result when the sum exceeds UINT64_MAX. (Unsigned overflow is
/// defined, so one formulation serves host and device.)
DSV4KV_HD constexpr CheckedU64 checked_add_u64(CheckedU64 a, CheckedU64 b) {
  if (!a.ok || !b.ok) return CheckedU64::overflow();
  const uint64_t r = a.value + b.value;
  if (r < a.value) return CheckedU64::overflow();
  return CheckedU64(r);
}

/// a * b, or an overflowed result when the product exceeds UINT64_MAX.
DSV4KV_HD constexpr CheckedU64 checked_mul_u64(CheckedU64 a, CheckedU64 b) {
  if (!a.ok || !b.ok) return CheckedU64::overflow();
  if (a.value != 0 && b.value > ~uint64_t{0} / a.value) return CheckedU64::overflow();
  return CheckedU64(a.value * b.value);
}

}  // namespace dsv4kv::spec

/// \brief The checked toolkit as std::optional, for host code (file readers) that chains
/// `if (auto n = checked::mul<uint64_t>(a, b))`. T is int64_t or uint64_t; each forwards to
/// the dsv4kv::spec function of that width, so there is one implementation per width.
namespace dsv4kv::checked {

namespace detail {
/// The value of a checked result, or nullopt when it overflowed.
template <class T, class R>
constexpr std::optional<T> value_of(const R& r) {
  return r.ok ? std::optional<T>(r.value) : std::nullopt;
}
template <class T>
inline constexpr bool kSupported = std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>;
}  // namespace detail

/// a + b in T, or nullopt when the sum does not fit in T.
template <class T>
constexpr std::optional<T> add(T a, T b) {
  static_assert(detail::kSupported<T>, "checked::add: int64_t or uint64_t");
  if constexpr (std::is_same_v<T, int64_t>)
    return detail::value_of<T>(spec::checked_add(a, b));
  else
    return detail::value_of<T>(spec::checked_add_u64(a, b));
}

/// a * b in T, or nullopt when the product does not fit in T.
template <class T>
constexpr std::optional<T> mul(T a, T b) {
  static_assert(detail::kSupported<T>, "checked::mul: int64_t or uint64_t");
  if constexpr (std::is_same_v<T, int64_t>)
    return detail::value_of<T>(spec::checked_mul(a, b));
  else
    return detail::value_of<T>(spec::checked_mul_u64(a, b));
}

}  // namespace dsv4kv::checked
