// The bench's timing method; see timer.cuh.
#include "timer.cuh"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace dsv4kv::bench {

void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) {
    std::ostringstream s;
    s << call << " failed at " << file << ":" << line << ": " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e)
      << ")";
    throw std::runtime_error(s.str());
  }
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) BENCH_CUDA(cudaMalloc(&p_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

namespace {

/// Reads `n` 16-byte words and writes nothing unless their XOR has an (unreachable for the
/// zero-filled buffer) value: a read-only pass that leaves the L2 holding clean lines only.
__global__ void read_only_pass(const uint4* __restrict__ p, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (; i + 3 * step < n; i += 4 * step) {
    const uint4 a = p[i], b = p[i + step], c = p[i + 2 * step], d = p[i + 3 * step];
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += step) {
    const uint4 a = p[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

/// Does nothing: the bias probe's empty kernel, and the floor of a graph-replayed launch.
__global__ void empty_kernel() {}

/// A plain streaming copy of n 16-byte words by the whole grid (4 loads in flight per thread,
/// then 4 stores).
__device__ __forceinline__ void copy_words(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; base < n; base += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (base + u * stride < n) v[u] = src[base + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (base + u * stride < n) dst[base + u * stride] = v[u];
  }
}

__global__ void __launch_bounds__(256) copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
  copy_words(src, dst, n);
}

/// copy_kernel for a chain launched with programmatic dependent launch: every thread waits for
/// the previous grid before its first access and lets the next grid launch once it runs (as the
/// library's kernels do); a plain copy_kernel where griddepcontrol does not exist.
__global__ void __launch_bounds__(256)
    copy_kernel_pdl(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  copy_words(src, dst, n);
}

/// Non-zero bytes for the copy ceiling's source (a counter hash).
__global__ void fill_bytes(uint64_t* out, int64_t n_words, uint64_t seed) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n_words; i += stride) {
    uint64_t x = seed + static_cast<uint64_t>(i) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    out[i] = x ^ (x >> 31);
  }
}

}  // namespace

Timer::Timer(cudaStream_t s, size_t flush_bytes, int max_reps)
    : s_(s), flush_(flush_bytes), read_(flush_bytes), sink_(16), copy_src_(16), copy_dst_(16) {
  BENCH_CUDA(cudaMemsetAsync(read_.get(), 0, read_.bytes(), s_));
  int dev = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  flush_grid_ = static_cast<unsigned>(std::max(sms, 1) * 4);
  ev_.resize(2 * static_cast<size_t>(max_reps));
  for (auto& e : ev_) BENCH_CUDA(cudaEventCreate(&e));
}

Timer::~Timer() {
  for (auto& e : ev_) cudaEventDestroy(e);
}

void Timer::flush(int r, bool clean) {
  BENCH_CUDA(cudaMemsetAsync(flush_.get(), r & 0xFF, flush_.bytes(), s_));
  if (!clean) return;
  read_only_pass<<<flush_grid_, 512, 0, s_>>>(read_.as<uint4>(), static_cast<int64_t>(read_.bytes() / 16),
                                              sink_.as<uint32_t>());
  BENCH_CUDA(cudaGetLastError());
}

Stats Timer::time_plain(const std::function<void()>& fn, bool clean, int reps) {
  for (int w = 0; w < 3; ++w) {
    flush(w, clean);
    fn();
  }
  for (int r = 0; r < reps; ++r) {
    flush(r, clean);
    BENCH_CUDA(cudaEventRecord(ev_[2 * r], s_));
    fn();
    BENCH_CUDA(cudaEventRecord(ev_[2 * r + 1], s_));
  }
  return collect(reps);
}

Stats Timer::time_stream(const RunFn& run, int copies, int warmup, int reps) {
  for (int w = 0; w < warmup; ++w) {
    flush(w);
    run(w % copies, s_);
  }
  BENCH_CUDA(cudaStreamSynchronize(s_));
  for (int r = 0; r < reps; ++r) {
    flush(r);
    BENCH_CUDA(cudaEventRecord(ev_[2 * r], s_));
    run(r % copies, s_);
    BENCH_CUDA(cudaEventRecord(ev_[2 * r + 1], s_));
  }
  return collect(reps);
}

Stats Timer::time_graph(const RunFn& run, int copies, int warmup, int reps) {
  std::vector<cudaGraphExec_t> execs;
  auto destroy = [&] {
    for (auto e : execs) cudaGraphExecDestroy(e);
  };
  try {
    for (int c = 0; c < copies; ++c) {
      cudaGraph_t g = nullptr;
      BENCH_CUDA(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
      try {
        run(c, s_);
      } catch (...) {
        cudaStreamEndCapture(s_, &g);
        if (g) cudaGraphDestroy(g);
        cudaGetLastError();
        throw;
      }
      BENCH_CUDA(cudaStreamEndCapture(s_, &g));
      cudaGraphExec_t e = nullptr;
      const cudaError_t ie = cudaGraphInstantiate(&e, g, 0);
      cudaGraphDestroy(g);
      BENCH_CUDA(ie);
      execs.push_back(e);
      BENCH_CUDA(cudaGraphUpload(e, s_));
    }
    for (int w = 0; w < warmup; ++w) {
      flush(w);
      BENCH_CUDA(cudaGraphLaunch(execs[w % copies], s_));
    }
    BENCH_CUDA(cudaStreamSynchronize(s_));
    for (int r = 0; r < reps; ++r) {
      flush(r);
      BENCH_CUDA(cudaEventRecord(ev_[2 * r], s_));
      BENCH_CUDA(cudaGraphLaunch(execs[r % copies], s_));
      BENCH_CUDA(cudaEventRecord(ev_[2 * r + 1], s_));
    }
    Stats st = collect(reps);
    destroy();
    return st;
  } catch (...) {
    destroy();
    throw;
  }
}

double Timer::copy_GBps(size_t bytes, int reps, double* median_us) {
  DeviceBuffer src(bytes), dst(bytes);
  fill_bytes<<<2048, 256, 0, s_>>>(src.as<uint64_t>(), static_cast<int64_t>(bytes / 8), 0xC0FFEE);
  BENCH_CUDA(cudaGetLastError());
  for (int w = 0; w < 3; ++w) BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s_));
  for (int r = 0; r < reps; ++r) {
    BENCH_CUDA(cudaEventRecord(ev_[2 * r], s_));
    BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s_));
    BENCH_CUDA(cudaEventRecord(ev_[2 * r + 1], s_));
  }
  const Stats st = collect(reps);
  *median_us = st.median_us;
  return 2.0 * static_cast<double>(bytes) / (st.median_us * 1e-6) / 1e9;
}

namespace {

/// The copy kernel's work for `bytes_min` minimal bytes: bytes_min / 2 read and as many written
/// (whole 16-byte words), on at most 8 CTAs per multiprocessor.
struct CopyShape {
  size_t half;
  int64_t words;
  unsigned grid;
};
CopyShape copy_shape(double bytes_min, int sm_count) {
  const size_t half = static_cast<size_t>(bytes_min / 2) & ~size_t{15};
  const int64_t words = static_cast<int64_t>(half / 16);
  const unsigned grid =
      static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(int64_t{sm_count} * 8, (words + 1023) / 1024)));
  return CopyShape{half, words, grid};
}

}  // namespace

Stats Timer::same_bytes_copy(double bytes_min, int sm_count, int warmup, int reps) {
  const CopyShape cs = copy_shape(bytes_min, sm_count);
  if (cs.half == 0) return Stats{};
  if (copy_src_.bytes() < cs.half) {
    copy_src_ = DeviceBuffer(cs.half);
    copy_dst_ = DeviceBuffer(cs.half);
  }
  uint4* dst = copy_dst_.as<uint4>();
  const uint4* src = copy_src_.as<uint4>();
  return time_graph(
      [dst, src, cs](int, cudaStream_t s) {
        copy_kernel<<<cs.grid, 256, 0, s>>>(src, dst, cs.words);
        BENCH_CUDA(cudaGetLastError());
      },
      1, warmup, reps);
}

Stats Timer::copy_chain(const std::vector<double>& step_bytes, bool pdl, int sm_count, int warmup, int reps) {
  struct Step {
    DeviceBuffer src, dst;
    CopyShape shape;
  };
  std::vector<Step> steps;
  for (const double b : step_bytes) {
    const CopyShape cs = copy_shape(b, sm_count);
    if (cs.half > 0) steps.push_back(Step{DeviceBuffer(cs.half), DeviceBuffer(cs.half), cs});
  }
  if (steps.empty()) return Stats{};
  return time_graph(
      [&steps, pdl](int, cudaStream_t s) {
        for (const Step& st : steps) {
          cudaLaunchConfig_t config{};
          config.gridDim = dim3(st.shape.grid);
          config.blockDim = dim3(256);
          config.stream = s;
          cudaLaunchAttribute attr[1] = {};
          if (pdl) {
            attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[0].val.programmaticStreamSerializationAllowed = 1;
            config.attrs = attr;
            config.numAttrs = 1;
          }
          BENCH_CUDA(cudaLaunchKernelEx(&config, pdl ? copy_kernel_pdl : copy_kernel, st.src.as<const uint4>(),
                                        st.dst.as<uint4>(), st.shape.words));
        }
      },
      1, warmup, reps);
}

Stats Timer::empty_graph(int warmup, int reps) {
  return time_graph(
      [](int, cudaStream_t s) {
        empty_kernel<<<1, 32, 0, s>>>();
        BENCH_CUDA(cudaGetLastError());
      },
      1, warmup, reps);
}

void Timer::launch_empty() {
  empty_kernel<<<1, 32, 0, s_>>>();
  BENCH_CUDA(cudaGetLastError());
}

Stats Timer::collect(int reps) {
  BENCH_CUDA(cudaStreamSynchronize(s_));
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) BENCH_CUDA(cudaEventElapsedTime(&ms[r], ev_[2 * r], ev_[2 * r + 1]));
  return summarize(std::move(ms));
}

}  // namespace dsv4kv::bench
