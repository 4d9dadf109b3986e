// What the operation fuzz targets (fuzz_ops, fuzz_validate) share: the operation table walked by
// index, a reference call for any argument struct, and the "no input changed" check driven by the
// roles of Args::fields (op_table.hpp). A new operation needs no change here.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "dsv4kv/reference.hpp"
#include "dsv4kv/spec.hpp"
#include "dsv4kv/spec/op_table.hpp"

namespace dsv4kv::fuzz {

/// Calls `f(std::type_identity<Args>{}, index)` for the operation at `index` of the table.
template <class F>
void visit_op_at(int64_t index, F&& f) {
  int i = 0;
  for_each_op([&](auto t) {
    if (i == index) f(t, i);
    ++i;
  });
}

/// Runs the reference function of the operation whose argument struct is `Args`.
template <class Args>
void run_reference(const Args& args) {
#define DSV4KV_FUZZ_CALL(name, A, stem) \
  if constexpr (std::is_same_v<Args, A>) dsv4kv::reference::name(args);
  DSV4KV_OPS(DSV4KV_FUZZ_CALL)
#undef DSV4KV_FUZZ_CALL
}

/// Copies of every input tensor (Role::kIn) of one call, to check afterwards that none changed.
class InputCopies {
 public:
  /// `bytes_of(view)` gives the allocation behind a view (empty when it has none).
  template <class Args, class BytesOf>
  void record(Args& args, BytesOf&& bytes_of) {
    Args::fields(args, [&](const char*, Role role, auto& member) {
      if constexpr (std::is_same_v<std::decay_t<decltype(member)>, TensorView>) {
        if (role != Role::kIn) return;
        const std::span<const uint8_t> b = bytes_of(member);
        if (!b.empty()) copies_.push_back({b, std::vector<uint8_t>(b.begin(), b.end())});
      }
    });
  }
  /// True when no recorded input changed.
  bool unchanged() const {
    for (const auto& [live, copy] : copies_)
      if (std::memcmp(live.data(), copy.data(), copy.size()) != 0) return false;
    return true;
  }

 private:
  std::vector<std::pair<std::span<const uint8_t>, std::vector<uint8_t>>> copies_;
};

}  // namespace dsv4kv::fuzz
