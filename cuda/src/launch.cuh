/// \file launch.cuh
/// \brief The one launch path of the backend (DSV4KV_CUDA_LAUNCH: checked, with programmatic dependent launch when on)
/// and what every kernel does first (grid_dependency_begin).
#pragma once

#include <string>
#include <utility>

#include "backend.cuh"

/// Launches `kernel<<<grid, block, 0, stream>>>(args...)`, with programmatic dependent launch when it is on and usable
/// (launch_checked), and checks that launch's own status (cudaLaunchKernelEx returns it, so an earlier unrelated error
/// is not blamed on this launch). The one launch path of the backend: every kernel goes through it, and every kernel
/// starts with grid_dependency_begin().
#define DSV4KV_CUDA_LAUNCH(kernel, grid, block, stream, ...) \
  ::dsv4kv::cuda::detail::launch_checked(#kernel, __FILE__, __LINE__, kernel, grid, block, stream, __VA_ARGS__)

namespace dsv4kv::cuda::detail {

/// True when the current device gets PDL launches: compute capability >= 9.0 and the library's kernel images there
/// carry griddepcontrol.wait (device.cu says how that is checked). Cached per device; host-side queries only, so
/// callable during stream capture.
bool pdl_usable();

/// Whether this launch uses PDL: the calling thread's setting (dsv4kv::cuda::programmatic_launch), then the device
/// check. Off costs one thread-local and one atomic read.
inline bool use_pdl() { return programmatic_launch() && pdl_usable(); }

template <class... KernelArgs, class... Args>
void launch_checked(const char* name, const char* file, int line, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                    cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  if (use_pdl()) {
    // The kernel may start before the previous kernel on the stream completes; its grid_dependency_begin() waits for
    // that completion before any memory access.
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
  }
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) {
    cudaGetLastError();  // reported through the exception; not left for the caller's next check
    check(e, (std::string("launch of ") + name).c_str(), file, line);
  }
}

/// What every kernel does first, before any global load or store (only L2 prefetch hints may come before it;
/// scripts/check_fatbin.sh --pdl checks the SASS). `griddepcontrol.wait` waits until the prerequisite grids have
/// completed and their memory is visible (at once without PDL); every thread waits, so neither a read-after-write nor a
/// write-after-read on the previous kernel's buffers can race, and the wait chains transitively.
/// `griddepcontrol.launch_dependents` only lets the next PDL kernel be scheduled, with no memory guarantee; issued
/// after the wait, at most one kernel ahead occupies CTA slots in its wait. sm_89 code has neither and never gets PDL
/// launches (pdl_usable() checks the loaded image).
__device__ __forceinline__ void grid_dependency_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace dsv4kv::cuda::detail
