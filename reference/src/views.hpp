/// \file views.hpp
/// \brief Private helpers of the reference: strided Eigen views over the
/// caller's tensors, the per-token dequantization the gathers share, and the error counter update.
///
/// The reference never copies an argument: every tensor is read and written in
/// place through an `Eigen::Map` that carries the view's real strides, so a
/// padded, sliced or transposed caller tensor is addressed exactly as the spec
/// says ("element (i, j) is at i*stride(0) + j*stride(1)").
///
/// validate() guarantees that every view's element count and byte extent fit in
/// int64 (spec "Argument contracts", "Integer ranges and extents"), so an offset
/// i*stride(0) + j*stride(1) with i, j inside the shape cannot overflow. An
/// empty view's strides are unbounded: nothing here offsets a pointer by them.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dsv4kv/spec.hpp"

namespace dsv4kv::reference::detail {

/// Row-major dynamic matrix of `T` (the storage order of every 2-D argument).
template <class T>
using RowMajor = Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// Column vector of `T`.
template <class T>
using Column = Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, 1>;

/// A [rows, cols] view with the caller's row stride (unit inner stride, checked by validate()).
template <class T>
using MatView = Eigen::Map<std::conditional_t<std::is_const_v<T>, const RowMajor<T>, RowMajor<T>>, Eigen::Unaligned,
                           Eigen::OuterStride<>>;
/// A [n] view with the caller's element stride.
template <class T>
using VecView = Eigen::Map<std::conditional_t<std::is_const_v<T>, const Column<T>, Column<T>>, Eigen::Unaligned,
                           Eigen::InnerStride<>>;

/// View of a validated rank-2 tensor.
template <class T>
MatView<T> mat_view(const TensorView& t) {
  return MatView<T>(t.as<T>(), t.shape[0], t.shape[1], Eigen::OuterStride<>(t.stride[0]));
}

/// View of the matrix `t[i]` of a validated rank-3 tensor ([shape1, shape2], row stride stride1).
template <class T>
MatView<T> slice_view(const TensorView& t, int64_t i) {
  // An empty tensor may have a null data pointer, and validate() bounds strides only through the
  // extent of a non-empty view: offsetting an empty one would be undefined behaviour.
  T* const base = t.as<T>();
  return MatView<T>(base != nullptr && !t.empty() ? base + i * t.stride[0] : base, t.shape[1], t.shape[2],
                    Eigen::OuterStride<>(t.stride[1]));
}

/// View of a validated rank-1 tensor.
template <class T>
VecView<T> vec_view(const TensorView& t) {
  return VecView<T>(t.as<T>(), t.shape[0], Eigen::InnerStride<>(t.stride[0]));
}

/// An empty vector view, standing in for an absent optional tensor (never indexed).
template <class T>
VecView<T> absent_vec() {
  return VecView<T>(nullptr, 0, Eigen::InnerStride<>(1));
}

/// One row of a block table as lookup_slot() takes it. A request outside the
/// table's rows gets an empty row, so every lookup through it is dropped and
/// reported by lookup_slot() itself (spec "Failure model": never follow an
/// index only the device sees).
struct TableRow {
  const int32_t* data;
  int64_t cols;
};

inline TableRow table_row(const MatView<const int32_t>& table, int64_t req) {
  // An empty table may have a null data pointer: offsetting it would be undefined behaviour.
  if (req < 0 || req >= table.rows() || table.cols() == 0) return TableRow{table.data(), 0};
  return TableRow{table.data() + req * table.outerStride(), table.cols()};
}

/// Writes the head_dim bf16 values of the token at position `pos` of `block`, stored as `record`, to
/// `dst` (unit stride): the "Dequantize" and "Copy the RoPE values" steps of the gather operations
/// (spec/operations.md, spec/records.md), shared by every operation that reads tokens back from the
/// cache, so they all give the same bytes for the same cache slot. Returns the token's data-error
/// reports: 1 when one of its scale bytes is a NaN of the record's scale encoding, else 0.
inline int64_t dequantize_token(const uint8_t* block, int64_t block_size, int64_t pos, spec::Fp8Format fmt,
                                spec::Record record, uint16_t* dst) {
  if (record != spec::Record::kFp8DsMla) {
    // spec "Cache records", Gather: each group's values under its scale byte, in row order.
    const spec::RecordLayout rec = spec::record_layout(record);
    const int group_bytes = rec.value_bytes() / rec.num_scales();
    bool nan_scale = false;
    for (int g = 0; g < rec.num_scales(); ++g) {
      const uint8_t s = block[rec.scale_offset(block_size, pos, g)];
      nan_scale = nan_scale || spec::scale_is_nan(record, s);
      const uint8_t* values = block + rec.data_offset(pos) + g * group_bytes;
      for (int i = 0; i < rec.group; ++i) dst[g * rec.group + i] = spec::dequantize_group_value(record, values, s, i);
    }
    return nan_scale ? 1 : 0;  // a token with a NaN scale is written, and reported once
  }
  // 64 NoPE values per tile under the tile's scale byte.
  for (int tile = 0; tile < spec::kNumTiles; ++tile) {
    const uint8_t s = block[spec::scale_offset(block_size, pos, tile)];
    const uint8_t* codes = block + spec::fp8_code_offset(pos, tile * spec::kTileSize);
    uint16_t* y = dst + tile * spec::kTileSize;
    for (int e = 0; e < spec::kTileSize; ++e) y[e] = spec::dequantize_element(codes[e], s, fmt);
  }
  // The RoPE bits, copied. memcpy: the source is only 2-byte aligned.
  std::memcpy(dst + spec::kNopeDim, block + spec::rope_offset(pos), spec::kRopeBytes);
  return 0;
}

/// Adds `n` reports to the optional host counter. The sum wraps like the
/// device's atomicAdd on int32 rather than being undefined on overflow.
inline void add_errors(int32_t* counter, int64_t n) {
  if (counter == nullptr || n == 0) return;
  *counter = static_cast<int32_t>(static_cast<uint32_t>(*counter) + static_cast<uint32_t>(n));
}

}  // namespace dsv4kv::reference::detail
