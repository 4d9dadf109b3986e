/// \file device.cu
/// \brief dsv4kv::cuda::device_available and the per-device limits the launches are sized from.

#include <atomic>

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

namespace dsv4kv::cuda::detail {

DeviceLimits device_limits() {
  // Packed (sms << 32 | threads per SM) per device id, so a reader sees both values or neither.
  constexpr int kMaxDevices = 64;
  static std::atomic<uint64_t> cache[kMaxDevices] = {};
  int dev = 0;
  DSV4KV_CUDA_CHECK(cudaGetDevice(&dev));
  const bool cacheable = dev >= 0 && dev < kMaxDevices;
  if (cacheable) {
    const uint64_t hit = cache[dev].load(std::memory_order_relaxed);
    if (hit != 0) return DeviceLimits{static_cast<int>(hit >> 32), static_cast<int>(hit & 0xFFFFFFFFu)};
  }
  int sms = 0, threads = 0;
  DSV4KV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  DSV4KV_CUDA_CHECK(cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
  const DeviceLimits d{sms > 0 ? sms : 1, threads > 0 ? threads : 1};
  if (cacheable) cache[dev].store(uint64_t(uint32_t(d.sms)) << 32 | uint32_t(d.threads_per_sm), std::memory_order_relaxed);
  return d;
}

}  // namespace dsv4kv::cuda::detail
