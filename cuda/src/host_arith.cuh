/// \file host_arith.cuh
/// \brief Host-side launch arithmetic on validated views (whose element counts and byte extents fit in int64, and
/// index rows in int32: spec "Integer ranges and extents"): alignment tests, strides, grid limits.
#pragma once

#include <tuple>  // std::tie of visibility_rows
#include <utility>

#include "backend.cuh"

namespace dsv4kv::cuda::detail {

/// True when `base` is 16-byte aligned and so is every row `row_bytes` after it: the test before code with 16-byte
/// accesses and no address tests.
inline bool rows_aligned16(const void* base, int64_t row_bytes) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_bytes % 16 == 0;
}

/// Stride of dimension `d` of a validated view as a kernel may multiply it: 0 when the view is empty or dimension d has
/// one index, where validate() does not bound the stride and no kernel needs it.
inline int64_t kernel_stride(const TensorView& v, int d) { return v.empty() || v.shape[d] <= 1 ? 0 : v.stride[d]; }

/// The visibility arrays (left, right) as the index kernels read them: null unless they take effect
/// (spec::visibility_in_effect: passed, and the rows reserve image columns).
inline std::pair<const int32_t*, const int32_t*> visibility_rows(const TensorView& left, const TensorView& right,
                                                                 int64_t max_image_tokens) {
  if (!sp::visibility_in_effect(left.present(), max_image_tokens)) return {nullptr, nullptr};
  return {left.as<const int32_t>(), right.as<const int32_t>()};
}

/// Largest grid dimension x a launch may use.
inline constexpr int64_t kMaxGridX = 2147483647;

/// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1 (no overflow for any such a).
inline constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace dsv4kv::cuda::detail
