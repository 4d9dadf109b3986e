/// \file device.cu
/// \brief device_available, the per-device launch limits, and the PDL setting with its per-device check.

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "device_limits.cuh"
#include "launch.cuh"

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

namespace {

/// The process-wide PDL setting: -1 until first read (then the environment decides), 0 off, 1 on.
std::atomic<int> g_programmatic{-1};
/// The calling thread's ScopedProgrammaticLaunch override: -1 none, 0 off, 1 on.
thread_local int t_programmatic = -1;

bool env_programmatic() {
  const char* v = std::getenv("DSV4KV_CUDA_PDL");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace

void set_programmatic_launch(bool enabled) { g_programmatic.store(enabled ? 1 : 0, std::memory_order_relaxed); }

bool programmatic_launch() {
  if (t_programmatic >= 0) return t_programmatic == 1;
  int g = g_programmatic.load(std::memory_order_relaxed);
  if (g < 0) {
    // First read: the environment, unless set_programmatic_launch() won the race.
    int expected = -1;
    g = env_programmatic() ? 1 : 0;
    if (!g_programmatic.compare_exchange_strong(expected, g, std::memory_order_relaxed)) g = expected;
  }
  return g == 1;
}

ScopedProgrammaticLaunch::ScopedProgrammaticLaunch(bool enabled) : previous_(t_programmatic) {
  t_programmatic = enabled ? 1 : 0;
}
ScopedProgrammaticLaunch::~ScopedProgrammaticLaunch() { t_programmatic = previous_; }

bool programmatic_launch_supported() { return detail::pdl_usable(); }

}  // namespace dsv4kv::cuda

namespace dsv4kv::cuda::detail {

namespace {

/// A per-device value computed once: `compute(dev)` for the current device, cached in a nonzero uint64 per device id (0
/// = not yet computed; devices past kMaxDevices are computed every time). One atomic per device, so a reader sees a
/// whole value or none.
template <class F>
uint64_t per_device(std::atomic<uint64_t> (&cache)[64], F compute) {
  int dev = 0;
  DSV4KV_CUDA_CHECK(cudaGetDevice(&dev));
  const bool cacheable = dev >= 0 && dev < 64;
  if (cacheable) {
    const uint64_t hit = cache[dev].load(std::memory_order_relaxed);
    if (hit != 0) return hit;
  }
  const uint64_t v = compute(dev);
  if (cacheable) cache[dev].store(v, std::memory_order_relaxed);
  return v;
}

/// Compiled like every kernel of the library (the same DSV4KV_CUDA_GENCODE), so the image the driver loads for it on a
/// device is of the same kind as theirs: its PTX version says whether the kernels running there carry
/// griddepcontrol.wait. Never launched.
__global__ void pdl_probe_kernel() { grid_dependency_begin(); }

}  // namespace

DeviceLimits device_limits() {
  // Packed sms << 32 | threads per SM (both >= 1, so never 0).
  static std::atomic<uint64_t> cache[64] = {};
  const uint64_t v = per_device(cache, [](int dev) {
    int sms = 0, threads = 0;
    DSV4KV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    DSV4KV_CUDA_CHECK(cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
    return uint64_t(uint32_t(sms > 0 ? sms : 1)) << 32 | uint32_t(threads > 0 ? threads : 1);
  });
  return DeviceLimits{static_cast<int>(v >> 32), static_cast<int>(v & 0xFFFFFFFFu)};
}

bool pdl_usable() {
  // 1 no, 2 yes.
  static std::atomic<uint64_t> cache[64] = {};
  return per_device(cache, [](int dev) -> uint64_t {
           int major = 0;
           DSV4KV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
           if (major < 9) return 1;
           // A device of compute capability >= 9.0 may still run code JIT-compiled from the compute_89 PTX of the fat
           // binary (no SASS for it, or CUDA_FORCE_PTX_JIT=1): that code has no wait, and a PDL launch of it could read
           // its inputs before the previous kernel wrote them. ptxVersion is the virtual architecture the loaded image
           // was compiled from (host-side query: allowed during stream capture).
           cudaFuncAttributes attr{};
           DSV4KV_CUDA_CHECK(cudaFuncGetAttributes(&attr, pdl_probe_kernel));
           return attr.ptxVersion >= 90 ? 2 : 1;
         }) == 2;
}

}  // namespace dsv4kv::cuda::detail
