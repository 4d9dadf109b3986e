/// \file backend.hpp
/// \brief One interface over both implementations, for tests and tools.
///
/// A Backend runs an operation on arguments whose pointers (tensors and
/// error_count) are HOST memory. The reference backend calls
/// dsv4kv::reference directly; the CUDA backend copies every tensor's extent
/// to device memory surrounded by guard bytes, runs dsv4kv::cuda on a stream,
/// synchronizes, copies everything back and checks the guard bytes (a changed
/// guard byte throws GuardViolation). Tests compare the two byte for byte.
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "dsv4kv/spec.hpp"

namespace dsv4kv::conformance {

/// Thrown by the CUDA backend when a byte outside a tensor's extent changed on the device.
class GuardViolation : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// \brief Runs every operation of the table (op_table.hpp) on host-memory arguments.
///
/// One pure virtual per DSV4KV_OPS entry, named like the operation, e.g.
/// `be.compute_global_topk_indices_and_lens(args)`; `be.run(args)` picks it from the argument type, for
/// code written once over all operations.
class Backend {
 public:
  virtual ~Backend() = default;
  /// "reference" or "cuda".
  virtual const char* name() const = 0;

#define DSV4KV_BACKEND_DECLARE(op, Args, stem) \
  /** Runs op on host-memory arguments. */     \
  virtual void op(const Args& args) = 0;
  DSV4KV_OPS(DSV4KV_BACKEND_DECLARE)
#undef DSV4KV_BACKEND_DECLARE

  /// Runs the operation whose argument struct is Args.
  template <class Args>
  void run(const Args& args) {
    static_assert(is_op_args<Args>, "Backend::run: not an argument struct of DSV4KV_OPS");
#define DSV4KV_BACKEND_DISPATCH(op, OpArgs, stem) \
  if constexpr (std::is_same_v<Args, OpArgs>)     \
    op(args);                                     \
  else
    DSV4KV_OPS(DSV4KV_BACKEND_DISPATCH) {}
#undef DSV4KV_BACKEND_DISPATCH
  }
};

/// \brief A backend that runs nothing: every operation of the table is a no-op that only counts
/// its calls (for tests of the code around a backend, e.g. the golden runner on broken files).
class NullBackend : public Backend {
 public:
  const char* name() const override { return "null"; }
#define DSV4KV_BACKEND_NULL(op, Args, stem) \
  /** Counts the call, runs nothing. */     \
  void op(const Args&) override { ++calls[#op]; }
  DSV4KV_OPS(DSV4KV_BACKEND_NULL)
#undef DSV4KV_BACKEND_NULL

  /// Calls per operation name.
  std::map<std::string, int> calls;
};

/// The scalar reference.
std::unique_ptr<Backend> make_reference_backend();

/// The CUDA backend, or nullptr when it is not built or no GPU is usable; `why` receives the reason.
std::unique_ptr<Backend> make_cuda_backend(std::string* why);

}  // namespace dsv4kv::conformance
