/// \file error.hpp
/// \brief The library's exception types (spec section "Failure model").
#pragma once

#include <stdexcept>
#include <string>

namespace dsv4kv {

/// \brief A contract violation visible on the host: wrong dtype, rank, shape,
/// stride, alignment or scalar range.
///
/// The message always names the operation, the argument and the broken rule,
/// e.g. `quantize_and_insert_k_cache: k must have 512 columns, got 448`.
class Error : public std::invalid_argument {
 public:
  Error(const std::string& op, const std::string& what) : std::invalid_argument(op + ": " + what), op_(op) {}
  /// The operation whose contract was broken.
  const std::string& op() const noexcept { return op_; }

 private:
  std::string op_;
};

/// \brief A failure reported by the CUDA runtime (launch, copy, attribute query),
/// with the call, file and line.
class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace dsv4kv
