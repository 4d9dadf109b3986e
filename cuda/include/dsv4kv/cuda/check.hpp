/// \file check.hpp
/// \brief Host-side check of a CUDA runtime status, shared by the CUDA backend and the code that
/// drives it from host memory (the harness), which cannot include the backend's .cuh internals.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "dsv4kv/spec/error.hpp"

namespace dsv4kv::cuda {

/// \brief Throws dsv4kv::CudaError naming the call, the file and the line when `e` is an error.
///
/// The runtime's last-error slot is cleared first: the error is reported once, through the
/// exception, and not blamed again on the caller's next launch check.
inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw CudaError(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") at " +
                  file + ":" + std::to_string(line));
}

}  // namespace dsv4kv::cuda

/// Checks one CUDA runtime call (dsv4kv::cuda::check with the call's text, file and line).
#define DSV4KV_CUDA_CHECK(call) ::dsv4kv::cuda::check((call), #call, __FILE__, __LINE__)
