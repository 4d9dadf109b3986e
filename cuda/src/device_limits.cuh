/// \file device_limits.cuh
/// \brief What launch configurations know about the device and the target being compiled.
#pragma once

#include "backend.cuh"

namespace dsv4kv::cuda::detail {

/// The current device's multiprocessors and resident threads per multiprocessor (an H200: 132 of 2,048), read once per
/// device by host-side attribute queries, so allowed during stream capture (device.cu).
struct DeviceLimits {
  int sms;             ///< multiprocessors
  int threads_per_sm;  ///< resident threads per multiprocessor
};
DeviceLimits device_limits();

/// CTAs of `threads` threads the current device holds at once by its thread limit alone (132 x 16 = 2,112 CTAs of 128
/// threads on an H200).
inline int64_t cta_slots(int threads) {
  const DeviceLimits d = device_limits();
  const int64_t per_sm = d.threads_per_sm / threads;
  return int64_t{d.sms} * (per_sm > 0 ? per_sm : 1);
}

/// Most warps a CTA of this backend has (1,024 threads).
inline constexpr int kMaxWarps = 32;

/// Threads one multiprocessor holds on the target being compiled (1,536 on sm_89 and sm_120, else 2,048), for
/// `__launch_bounds__` hints, which ptxas ignores with a warning when they ask for more.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
inline constexpr int kThreadsPerSm = 1536;
#else
inline constexpr int kThreadsPerSm = 2048;
#endif

}  // namespace dsv4kv::cuda::detail
