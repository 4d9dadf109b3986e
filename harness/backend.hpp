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

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsv4kv/spec.hpp"

namespace dsv4kv::conformance {

/// Thrown by the CUDA backend when a byte outside a tensor's extent changed on the device.
class GuardViolation : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Runs the five operations on host-memory arguments.
class Backend {
 public:
  virtual ~Backend() = default;
  /// "reference" or "cuda".
  virtual const char* name() const = 0;
  virtual void quantize_and_insert_k_cache(const QuantizeInsertArgs& args) = 0;
  virtual void dequantize_and_gather_k_cache(const DequantizeGatherArgs& args) = 0;
  virtual void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args) = 0;
  virtual void combine_topk_swa_indices(const CombineArgs& args) = 0;
  virtual void build_flashinfer_mixed_sparse_indices(const MixedSparseArgs& args) = 0;
};

/// The scalar reference.
std::unique_ptr<Backend> make_reference_backend();

/// The CUDA backend, or nullptr when it is not built or no GPU is usable; `why` receives the reason.
std::unique_ptr<Backend> make_cuda_backend(std::string* why);

}  // namespace dsv4kv::conformance
