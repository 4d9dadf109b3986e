/// \file cuda.hpp
/// \brief The CUDA backend: the same operations as dsv4kv::reference, byte for byte.
///
/// Every pointer in the argument structs (tensors and `error_count`) is device
/// memory. Each operation validates its arguments on the host (throwing
/// dsv4kv::Error), enqueues its work on `stream` and returns without
/// synchronizing; nothing allocates, so every operation can be captured in a
/// CUDA graph. CUDA failures throw dsv4kv::CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include "dsv4kv/spec.hpp"

namespace dsv4kv::cuda {

/// True when a CUDA device is present and usable; `why` (if given) receives the reason when not.
bool device_available(std::string* why = nullptr);

/// \name Programmatic dependent launch (PDL)
///
/// Opt-in: with PDL on, every kernel of this library is launched with
/// cudaLaunchAttributeProgrammaticStreamSerialization, so that on devices of compute capability
/// 9.0 or higher it may be scheduled while the kernel before it on the stream is still running
/// (its launch latency hides behind that kernel's tail). Correctness does not depend on it:
/// every kernel of the library starts with `griddepcontrol.wait`, which returns only once the
/// previous kernel has completed and its memory writes are visible, before it reads or writes
/// any tensor; launched without PDL that instruction returns at once. The results are the same
/// bytes either way. (The index operations' PDL launches of no more rows than the device runs
/// thread blocks at once first ask L2 to prefetch their inputs: a hint, which changes no value
/// any read returns.) A kernel of other code launched before ours needs nothing; one launched
/// after ours without the attribute waits for our kernel's completion as usual. One launched
/// after ours *with* the attribute may start as soon as our kernel has started (our kernels
/// signal their dependents at once): like any PDL kernel it must wait
/// (`cudaGridDependencySynchronize()`) before it reads what ours wrote.
///
/// PDL is used only where it is safe: the device has compute capability >= 9.0 and the loaded
/// kernel image carries the wait (it is compiled for sm_90 or newer, not JIT-compiled from the
/// compute_89 PTX the fat binary also carries). Elsewhere the launch is the plain one, whatever
/// the setting. Launches stay capturable: inside stream capture (CUDA 12.3 or newer) a PDL launch
/// becomes a programmatic dependency edge of the graph, which keeps the overlap at every replay.
///
/// The setting in effect for a launch is the calling thread's ScopedProgrammaticLaunch if one is
/// alive, else the process-wide one: set_programmatic_launch(), or before its first call, the
/// environment variable `DSV4KV_CUDA_PDL` (`1` turns it on; read once), off by default.
/// @{

/// Turns PDL on or off for every later launch of the process (threads inside a
/// ScopedProgrammaticLaunch keep theirs). Thread-safe.
void set_programmatic_launch(bool enabled);

/// The setting the calling thread's next launch uses (before the device check).
bool programmatic_launch();

/// True when the current device would get PDL launches (compute capability >= 9.0 and a kernel
/// image that carries the wait); checked once per device. Independent of the setting.
bool programmatic_launch_supported();

/// \brief Overrides the PDL setting for the calling thread while alive (nests; restores the
/// previous override on destruction). For tests, benchmarks, or a thread with its own policy.
class ScopedProgrammaticLaunch {
 public:
  explicit ScopedProgrammaticLaunch(bool enabled);
  ~ScopedProgrammaticLaunch();
  ScopedProgrammaticLaunch(const ScopedProgrammaticLaunch&) = delete;
  ScopedProgrammaticLaunch& operator=(const ScopedProgrammaticLaunch&) = delete;

 private:
  int previous_;  ///< the thread's override before this one (-1: none, 0: off, 1: on)
};
/// @}

/// One function per entry of DSV4KV_OPS (op_table.hpp), e.g.
/// `void quantize_and_insert_k_cache(const QuantizeInsertArgs& args, cudaStream_t stream);`,
/// with the reference's results byte for byte; the argument struct documents the arguments.
#define DSV4KV_CUDA_DECLARE(name, Args, stem) void name(const Args& args, cudaStream_t stream);
DSV4KV_OPS(DSV4KV_CUDA_DECLARE)
#undef DSV4KV_CUDA_DECLARE

}  // namespace dsv4kv::cuda
