/// \file device.cu
/// \brief dsv4kv::cuda::device_available.

#include "common.cuh"

namespace dsv4kv::cuda {

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why != nullptr)
      *why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    cudaGetLastError();  // the failure is reported here, not left sticky for the next call
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "cudaGetDeviceCount reports no CUDA device";
    return false;
  }
  return true;
}

}  // namespace dsv4kv::cuda
