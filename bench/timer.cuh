/// \file timer.cuh
/// \brief The bench's timing method: device buffers, the clean L2 flush, graph and stream timing,
/// the copy ceiling and the two floors (a copy kernel over the same bytes, an empty kernel).
///
/// Method (the same as ../shared/oracle/bench.py's "cold GPU" column and bench/triton_bench.py):
///   * every timed run is preceded, outside the events, by an L2 flush that leaves the L2 clean:
///     a 256 MiB cudaMemsetAsync, then a read-only pass over another 256 MiB buffer (the memset
///     alone leaves dirty lines that the timed kernel would write back: a fixed bias, see
///     bench/RESULTS.md#clean-l2-flush);
///   * inputs and outputs are rotated among several device copies;
///   * "graph": the work captured once per copy in a CUDA graph, replay between two events (the
///     headline); "stream": direct launches between two events; median over many runs.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "report.hpp"  // Stats

namespace dsv4kv::bench {

/// Throws std::runtime_error naming the call, the place and the CUDA error.
void check_cuda(cudaError_t e, const char* call, const char* file, int line);
#define BENCH_CUDA(call) ::dsv4kv::bench::check_cuda((call), #call, __FILE__, __LINE__)

/// Owning device allocation (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

/// One launch of the timed work on device copy `c` of its buffers, on stream `s`.
using RunFn = std::function<void(int c, cudaStream_t s)>;

/// The timing harness of one stream; owns the flush buffers and the events.
class Timer {
 public:
  Timer(cudaStream_t s, size_t flush_bytes, int max_reps);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  /// The L2 flush before each timed run (outside the events): a memset of the flush buffer, then
  /// (clean = true) a read-only pass over a second buffer, which evicts the memset's dirty lines
  /// (written back here, untimed) and leaves the L2 full of clean lines.
  void flush(int r, bool clean = true);
  /// Median of `fn` launched between events after each flush (dirty or clean), for the bias probe.
  Stats time_plain(const std::function<void()>& fn, bool clean, int reps);
  /// Direct launches between events.
  Stats time_stream(const RunFn& run, int copies, int warmup, int reps);
  /// Each copy captured once into a CUDA graph (everything `run` launches: one op, or a chain of
  /// them); replays between events.
  Stats time_graph(const RunFn& run, int copies, int warmup, int reps);
  /// Device-to-device cudaMemcpyAsync of `bytes`: (read + write) / median time in GB/s.
  double copy_GBps(size_t bytes, int reps, double* median_us);
  /// A plain copy kernel over `bytes_min / 2` bytes (so `bytes_min` read plus written), timed like
  /// time_graph: what moving a case's minimal bytes costs with an ordinary SM kernel.
  Stats same_bytes_copy(double bytes_min, int sm_count, int warmup, int reps);
  /// A chain of same_bytes_copy kernels, one per entry of `step_bytes`, each on its own buffers,
  /// captured in one graph and timed like time_graph; with `pdl` launched with programmatic
  /// dependent launch (each copy waits for the previous grid first): what a chain of separate
  /// kernels moving only their steps' minimal bytes costs, launch boundaries included.
  Stats copy_chain(const std::vector<double>& step_bytes, bool pdl, int sm_count, int warmup, int reps);
  /// An empty kernel timed like time_graph: the floor of a graph replay with this method.
  Stats empty_graph(int warmup, int reps);
  /// Launches the empty kernel once on the timer's stream (the bias probe).
  void launch_empty();

 private:
  Stats collect(int reps);

  cudaStream_t s_;
  DeviceBuffer flush_;
  DeviceBuffer read_;                 // read by the clean flush, never written after construction
  DeviceBuffer sink_;                 // the read pass's one conditional word
  DeviceBuffer copy_src_, copy_dst_;  // grown to each case's bytes_min / 2
  unsigned flush_grid_ = 1;
  std::vector<cudaEvent_t> ev_;
};

}  // namespace dsv4kv::bench
