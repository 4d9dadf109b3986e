/// \file op_table.hpp
/// \brief The one list of operations. Every layer with one entry per operation expands it.
///
/// `DSV4KV_OPS(X)` calls `X(name, Args, stem)` once per operation, in the order of the spec:
/// `name` is the C++ function (in dsv4kv::reference and dsv4kv::cuda) and the Python function,
/// `Args` its argument struct (ops.hpp), `stem` the one short name of its files in every layer
/// (`reference/src/<stem>.cpp`, `cuda/src/<stem>.cu`, `conformance/support/ops/<stem>.hpp` and
/// `<stem>_properties.hpp`, `tools/demo/<stem>.hpp`, `python/tests/op_cases/<stem>.py`; checked by
/// scripts/op_footprint.py). Each struct names its members once, with their roles,
/// in `Args::fields(args, f)`; the CUDA staging of the test backend, the Python bindings, the
/// fuzz targets, the golden replay and the bench's op list are written against these two lists,
/// so adding an operation means: its spec section, its line here and its struct in ops.hpp, one
/// reference function, one CUDA function, and its tester with its properties (ARCHITECTURE.md).
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "dsv4kv/spec/ops.hpp"

// clang-format off
#define DSV4KV_OPS(X)                                                           \
  X(quantize_and_insert_k_cache,           QuantizeInsertArgs,   quantize)      \
  X(dequantize_and_gather_k_cache,         DequantizeGatherArgs, gather)        \
  X(dequantize_and_gather_k_cache_sparse,  SparseGatherArgs,     sparse_gather) \
  X(compute_global_topk_indices_and_lens,  GlobalTopkArgs,       global_topk)   \
  X(combine_topk_swa_indices,              CombineArgs,          combine)       \
  X(build_flashinfer_mixed_sparse_indices, MixedSparseArgs,      mixed)
// clang-format on

namespace dsv4kv {

/// Calls `f(std::type_identity<Args>{})` for every operation, in table order.
template <class F>
constexpr void for_each_op(F&& f) {
#define DSV4KV_OP_VISIT(name, Args, stem) f(std::type_identity<Args>{});
  DSV4KV_OPS(DSV4KV_OP_VISIT)
#undef DSV4KV_OP_VISIT
}

/// The file stem of the operation whose argument struct is `Args`.
template <class Args>
inline constexpr std::string_view op_stem = "";
#define DSV4KV_OP_STEM(name, Args, stem) \
  template <>                            \
  inline constexpr std::string_view op_stem<Args> = #stem;
DSV4KV_OPS(DSV4KV_OP_STEM)
#undef DSV4KV_OP_STEM

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
