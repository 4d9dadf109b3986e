/// \file binding_common.hpp
/// \brief What the two Python modules (_ext: DLPack arrays, _torch_ext: torch tensors) share
/// around the operation table: the field count of an argument struct, the CUDA entry of each
/// operation with the stream as an integer, and the guard that makes the arrays' device current
/// for a launch.
#pragma once

#include <cstdint>
#include <string>

#include "dsv4kv/spec.hpp"
#include "dsv4kv/spec/op_table.hpp"

#if defined(DSV4KV_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "dsv4kv/cuda.hpp"
#endif

namespace dsv4kv::python {

/// Number of members of `Args` (= the positional fields of its bindings).
template <class Args>
int field_count() {
  Args a{};
  int n = 0;
  Args::fields(a, [&](const char*, Role, auto&) { ++n; });
  return n;
}

// One CUDA entry per operation with the stream as an integer (a no-op in a build without the
// CUDA backend, where the bindings refuse CUDA arrays before calling it).
#if defined(DSV4KV_HAVE_CUDA)
#define DSV4KV_DEVICE_FN(name, Args, stem) \
  inline void device_##name(const Args& a, uintptr_t s) { ::dsv4kv::cuda::name(a, reinterpret_cast<cudaStream_t>(s)); }
#else
#define DSV4KV_DEVICE_FN(name, Args, stem) \
  inline void device_##name(const Args&, uintptr_t) {}
#endif
DSV4KV_OPS(DSV4KV_DEVICE_FN)
#undef DSV4KV_DEVICE_FN

#if defined(DSV4KV_HAVE_CUDA)
/// Makes the arrays' device current for the launch and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      const cudaError_t e = cudaSetDevice(device);
      if (e != cudaSuccess)
        throw CudaError(std::string("cudaSetDevice(") + std::to_string(device) + "): " + cudaGetErrorString(e));
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_ && previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};
#endif

}  // namespace dsv4kv::python
