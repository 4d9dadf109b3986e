/// \file checked_local.hpp
/// \brief Overflow-checked integer arithmetic for the file readers.
///
/// Sizes in a file come from whoever wrote the file; every product or sum of
/// them goes through these helpers so that a crafted value cannot wrap around
/// into a small, plausible size. (Local to the conformance support library;
/// meant to give way to the project-wide checked-integer header.)
#pragma once

#include <optional>
#include <type_traits>

namespace dsv4kv::conformance::checked {

/// a * b, or nullopt when the product does not fit in T.
template <class T>
std::optional<T> mul(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a + b, or nullopt when the sum does not fit in T.
template <class T>
std::optional<T> add(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace dsv4kv::conformance::checked
