/// \file op_table.hpp
/// \brief The one list of operations. Every layer with one entry per operation expands it.
///
/// `DSV4KV_OPS(X)` calls `X(name, Args)` once per operation, in the order of the spec:
/// `name` is the C++ function (in dsv4kv::reference and dsv4kv::cuda) and the Python function,
/// `Args` its argument struct (ops.hpp). Each struct names its members once, with their roles,
/// in `Args::fields(args, f)`; the CUDA staging of the test backend, the Python bindings, the
/// fuzz targets, the golden replay and the bench's op list are written against these two lists,
/// so adding an operation means: its spec section, its struct here and in ops.hpp, one reference
/// function, one CUDA function, and its tester with its properties (ARCHITECTURE.md).
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "dsv4kv/spec/ops.hpp"

// clang-format off
#define DSV4KV_OPS(X)                                          \
  X(quantize_and_insert_k_cache, QuantizeInsertArgs)          \
  X(dequantize_and_gather_k_cache, DequantizeGatherArgs)      \
  X(dequantize_and_gather_k_cache_sparse, SparseGatherArgs)   \
  X(compute_global_topk_indices_and_lens, GlobalTopkArgs)     \
  X(combine_topk_swa_indices, CombineArgs)                    \
  X(build_flashinfer_mixed_sparse_indices, MixedSparseArgs)
// clang-format on

namespace dsv4kv {

/// Calls `f(std::type_identity<Args>{})` for every operation, in table order.
template <class F>
constexpr void for_each_op(F&& f) {
#define DSV4KV_OP_VISIT(name, Args) f(std::type_identity<Args>{});
  DSV4KV_OPS(DSV4KV_OP_VISIT)
#undef DSV4KV_OP_VISIT
}

/// Number of operations in the table.
inline constexpr int kNumOps = [] {
  int n = 0;
  for_each_op([&](auto) { ++n; });
  return n;
}();

/// True for the argument structs of the table.
template <class Args>
inline constexpr bool is_op_args = [] {
  bool found = false;
  for_each_op([&](auto t) { found = found || std::is_same_v<typename decltype(t)::type, Args>; });
  return found;
}();

/// Calls `f(std::type_identity<Args>{})` for the operation named `name`; false when there is none.
template <class F>
bool visit_op(std::string_view name, F&& f) {
  bool found = false;
  for_each_op([&](auto t) {
    if (!found && name == decltype(t)::type::kName) {
      found = true;
      f(t);
    }
  });
  return found;
}

}  // namespace dsv4kv
