/// \file tensor.hpp
/// \brief A non-owning strided tensor view (DLPack-like), shared by every backend.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dsv4kv/spec/checked.hpp"

namespace dsv4kv {

/// Element types the operations accept.
enum class DType : uint8_t {
  kBF16,  ///< bfloat16, handled as raw uint16 bits
  kU8,    ///< uint8 (cache bytes)
  kI32,   ///< int32 (indices, lengths)
  kI64,   ///< int64 (slot ids)
  kBool,  ///< one byte, 0 = false, anything else = true
};

/// Bytes of one element of `t`.
constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::kBF16: return 2;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kBool: return 1;
  }
  return 0;
}

/// Name of `t` as error messages print it (PyTorch's spelling).
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bfloat16";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
  }
  return "?";
}

/// Largest rank any argument has.
inline constexpr int kMaxRank = 3;

/// \brief A non-owning view of a strided tensor in host or device memory.
///
/// Strides are in elements, like PyTorch's `stride()`. A default-constructed
/// view is *absent* (Python `None`): `present()` is false. An empty tensor is
/// present with a zero in its shape (its data pointer may be null).
struct TensorView {
  void* data = nullptr;                    ///< first element
  DType dtype = DType::kU8;                ///< element type
  int ndim = -1;                           ///< rank; -1 = absent
  std::array<int64_t, kMaxRank> shape{};   ///< sizes of the first ndim dimensions
  std::array<int64_t, kMaxRank> stride{};  ///< strides in elements

  /// True unless this is the absent (None) view.
  bool present() const { return ndim >= 0; }
  /// Size of dimension d (d < ndim).
  int64_t size(int d) const { return shape[d]; }
  /// True when the view is present and some dimension has size 0 (it holds no element).
  bool empty() const {
    for (int d = 0; d < ndim && d < kMaxRank; ++d)
      if (shape[d] == 0) return true;
    return false;
  }
  /// Number of elements (the product of the sizes; 0 for an absent view), with overflow checks:
  /// not ok when a size is negative, the rank exceeds kMaxRank, or the product leaves int64.
  spec::Checked numel_checked() const {
    if (!present()) return spec::Checked(0);
    if (ndim > kMaxRank) return spec::Checked::overflow();
    return spec::checked_numel(shape.data(), ndim);
  }
  /// Bytes from the first element's address to one past the last element's
  /// (spec::checked_extent_bytes; 0 for absent and empty views), with overflow checks.
  /// validate() requires it to be ok for every argument it checks, so every byte an
  /// operation touches through a validated view lies in [data, data + extent).
  spec::Checked extent_bytes() const {
    if (!present()) return spec::Checked(0);
    if (ndim > kMaxRank) return spec::Checked::overflow();
    return spec::checked_extent_bytes(shape.data(), stride.data(), ndim, dtype_size(dtype));
  }
  /// Number of elements. Exact for every view that validate() accepts; a view whose element
  /// count does not fit in int64 (which validate() rejects) gives INT64_MAX instead of a
  /// wrapped value, and a view with a negative size gives 0.
  int64_t numel() const {
    const spec::Checked n = numel_checked();
    if (n.ok) return n.value;
    for (int d = 0; d < ndim && d < kMaxRank; ++d)
      if (shape[d] <= 0) return 0;
    return INT64_MAX;
  }
  /// Typed pointer to the first element (the caller asserts the dtype).
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }

  /// A 1-D view of `n` elements with stride `s`.
  static TensorView vec(void* p, DType t, int64_t n, int64_t s = 1) {
    TensorView v;
    v.data = p;
    v.dtype = t;
    v.ndim = 1;
    v.shape = {n, 0, 0};
    v.stride = {s, 0, 0};
    return v;
  }
  /// A 2-D view [rows, cols] with row stride `rs` (0 = contiguous) and unit inner stride.
  static TensorView mat(void* p, DType t, int64_t rows, int64_t cols, int64_t rs = 0) {
    TensorView v;
    v.data = p;
    v.dtype = t;
    v.ndim = 2;
    v.shape = {rows, cols, 0};
    v.stride = {rs ? rs : cols, 1, 0};
    return v;
  }
  /// A 3-D view [d0, d1, d2] with strides (s0, s1, 1); zero strides mean contiguous.
  static TensorView cube(void* p, DType t, int64_t d0, int64_t d1, int64_t d2, int64_t s0 = 0, int64_t s1 = 0) {
    TensorView v;
    v.data = p;
    v.dtype = t;
    v.ndim = 3;
    v.shape = {d0, d1, d2};
    v.stride = {s0 ? s0 : d1 * d2, s1 ? s1 : d2, 1};
    return v;
  }
};

}  // namespace dsv4kv
