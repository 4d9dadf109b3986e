/// \file fault_count.cuh
/// \brief Fault counting: the lanes of a warp sum their faults and add them with at most one atomic.
#pragma once

#include "backend.cuh"

namespace dsv4kv::cuda::detail {

// Every kernel counts its faults in an spec::Faults per thread and reports them through count_faults: a sum over the
// lanes of the warp that call it together, then at most one atomicAdd per warp (none when the sum is 0). No block
// barrier: warps that finish early leave without waiting for the rest of the CTA (a per-CTA reduction with a barrier
// made quantize and gather 1-8% slower).

/// Sum of `v` over the 32 lanes of the warp (all lanes must call).
__device__ __forceinline__ int32_t warp_sum(int32_t v) {
  return static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(v)));
}

/// Adds `n` of every lane that calls it to `*counter` (nothing when `counter` is null): the lanes of a warp active at
/// the call sum their `n` (__activemask: a lane that reaches the call apart from the others forms its own group, so
/// every lane is counted exactly once whatever the divergence) and the group's lowest lane adds a nonzero sum with one
/// atomic. Needs no other thread of the CTA: callable from diverged code and after other warps have exited.
__device__ __forceinline__ void count_faults(int32_t* counter, int32_t n) {
  if (counter == nullptr) return;
  const unsigned mask = __activemask();
  const int32_t total = static_cast<int32_t>(__reduce_add_sync(mask, static_cast<unsigned>(n)));
  if (total != 0 && static_cast<int>(threadIdx.x & 31) == __ffs(static_cast<int>(mask)) - 1) atomicAdd(counter, total);
}

}  // namespace dsv4kv::cuda::detail
