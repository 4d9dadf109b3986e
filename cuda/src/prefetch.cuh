/// \file prefetch.cuh
/// \brief L2 prefetch hints, the only accesses a kernel may issue before its grid dependency wait.
#pragma once

#include "backend.cuh"

namespace dsv4kv::cuda::detail {

/// The most bytes prefetch_l2_range() asks for at once (a longer range is cut there): an index row of 4,096 int32.
inline constexpr int64_t kPrefetchMaxBytes = 16384;

/// Hints that the line holding `p` will be read soon (fetched into L2). Safe before grid_dependency_begin(), even on
/// bytes the previous kernel may still write: L2 is the point of coherence, so no value any load returns changes.
/// PDL launches use it (rows.cuh says when) to overlap their first DRAM reads with the previous kernel's tail.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

/// prefetch_l2() for `bytes` bytes from `p` (at most kPrefetchMaxBytes) by one cp.async.bulk.prefetch.L2, the range
/// widened to whole 16-byte granules (which lie in the lines of its first and last byte).
__device__ __forceinline__ void prefetch_l2_range(const void* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes <= 0) return;
  if (bytes > kPrefetchMaxBytes) bytes = kPrefetchMaxBytes;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{15};
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes) + 15) & ~uintptr_t{15};
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(first), "r"(static_cast<uint32_t>(end - first)));
#endif
}

}  // namespace dsv4kv::cuda::detail
