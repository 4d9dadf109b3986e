/// \file testers.hpp
/// \brief Every operation's tester (XNNPACK-style fluent case builders), one module per operation.
///
/// The shared pieces (GuardedBuffer, Rng, first_mismatch, compare_buffers, bad_index_values) are in
/// tester_common.hpp; each operation's tester is in support/ops/<op>.hpp and specializes
/// TesterOf<Args>, so `typename TesterOf<Args>::type` names the tester of every entry of
/// DSV4KV_OPS (op_table.hpp). A new operation adds its module and one include line here.
#pragma once

#include "ops/combine.hpp"
#include "ops/gather.hpp"
#include "ops/global_topk.hpp"
#include "ops/mixed_sparse.hpp"
#include "ops/quantize.hpp"
#include "tester_common.hpp"

namespace dsv4kv::conformance {

/// Every operation of the table has a tester (a missing module fails here, not at a distant use).
inline constexpr bool kEveryOpHasATester = [] {
  bool all = true;
  for_each_op([&](auto t) { all = all && sizeof(typename TesterOf<typename decltype(t)::type>::type) > 0; });
  return all;
}();
static_assert(kEveryOpHasATester);

}  // namespace dsv4kv::conformance
