/// \file bench.cu
/// \brief dsv4kv_bench: times the five dsv4kv::cuda operations at the shapes of the
/// CUDA issue and reports GB/s against a device-to-device copy measured in the same run.
///
/// Method (same as ../shared/oracle/bench.py's "cold GPU" column, so the two tables compare):
///   * every timed run is preceded, outside the events, by an L2 flush that leaves the L2 clean:
///     a 256 MiB cudaMemsetAsync, then a read-only pass over another 256 MiB buffer (the memset
///     alone leaves dirty lines that the timed kernel would write back: a fixed bias);
///   * inputs and outputs are rotated among several copies (enough that their sum is a few
///     times the L2), each copy drawn with its own seed;
///   * two timings per case: "stream" (direct launch between two events) and "graph" (the op
///     captured once per copy in a CUDA graph, replay between two events). The graph median is
///     the headline number because it is how the Triton table was timed;
///   * median over many runs after a warm-up.
/// Bytes are counted exactly as ../shared/oracle/triton_h200.md "Bytes counted" says.
/// After timing, each case is run once more on poisoned outputs and compared byte for byte
/// with dsv4kv::reference (disable with --no-verify).

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsv4kv/cuda.hpp"
#include "dsv4kv/reference.hpp"

/// The commit the binary was built from (bench_commit.cpp, generated at build time by commit.cmake).
const char* dsv4kv_bench_commit();

namespace {

using dsv4kv::DType;
using dsv4kv::TensorView;
namespace sp = dsv4kv::spec;

// ---------------------------------------------------------------------------
// CUDA plumbing
// ---------------------------------------------------------------------------
void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) {
    std::ostringstream s;
    s << call << " failed at " << file << ":" << line << ": " << cudaGetErrorName(e) << " ("
      << cudaGetErrorString(e) << ")";
    throw std::runtime_error(s.str());
  }
}
#define BENCH_CUDA(call) check_cuda((call), #call, __FILE__, __LINE__)

/// Owning device allocation (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) BENCH_CUDA(cudaMalloc(&p_, bytes));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
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

/// The benchmark's one stream (non-blocking). Every copy and memset goes through it, so setup,
/// timed work and verification are ordered; the legacy stream would not order with it.
cudaStream_t g_stream = nullptr;

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  if (!v.empty()) {
    BENCH_CUDA(cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, g_stream));
    BENCH_CUDA(cudaStreamSynchronize(g_stream));
  }
  return b;
}

template <class T>
std::vector<T> download(const void* p, size_t count) {
  std::vector<T> v(count);
  if (count) {
    BENCH_CUDA(cudaMemcpyAsync(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost, g_stream));
    BENCH_CUDA(cudaStreamSynchronize(g_stream));
  }
  return v;
}

/// Fills device bytes on the benchmark stream (poisoning outputs, zeroing counters).
void memset_dev(void* p, int value, size_t bytes) { BENCH_CUDA(cudaMemsetAsync(p, value, bytes, g_stream)); }

// ---------------------------------------------------------------------------
// Random inputs. Never zeros: they hide unwritten outputs and can run faster than real data.
// ---------------------------------------------------------------------------
__host__ __device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Standard-normal bf16 values (Box-Muller on a counter hash; round to nearest even).
__global__ void fill_normal_bf16(uint16_t* out, int64_t n, uint64_t seed) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(i)));
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    const float u2 = static_cast<float>((h >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    uint32_t bits;
    memcpy(&bits, &z, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    out[i] = static_cast<uint16_t>(bits >> 16);
  }
}

/// Random bytes (for the copy ceiling's source).
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

/// A plain streaming copy of n 16-byte words (4 loads in flight per thread, then 4 stores): what
/// moving a case's minimal bytes costs with an ordinary SM kernel, timed like the op.
__global__ void __launch_bounds__(256) copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
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

__global__ void fill_bytes(uint64_t* out, int64_t n_words, uint64_t seed) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n_words; i += stride)
    out[i] = splitmix64(seed + static_cast<uint64_t>(i));
}

void random_bf16(void* p, int64_t n, uint64_t seed, cudaStream_t s) {
  if (n == 0) return;
  fill_normal_bf16<<<1024, 256, 0, s>>>(static_cast<uint16_t*>(p), n, seed);
  BENCH_CUDA(cudaGetLastError());
}

/// Small host generator (splitmix64), deterministic per seed.
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() { return splitmix64(state++); }
  /// Uniform in [0, n), n < 2^32.
  int64_t below(int64_t n) { return static_cast<int64_t>(((next() >> 32) * static_cast<uint64_t>(n)) >> 32); }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

std::vector<int32_t> randperm(int64_t n, Rng& rng) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[rng.below(i + 1)]);
  return p;
}

// ---------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------
struct Stats {
  double median_us = NAN, p10_us = NAN, p90_us = NAN, min_us = NAN;
  int n = 0;
  std::string error;  ///< why this timing is missing
  bool ok() const { return error.empty() && n > 0; }
};

Stats summarize(std::vector<float> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return 1e3 * ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1) + 0.5)]; };
  const size_t n = ms.size();
  s.median_us = n % 2 ? 1e3 * ms[n / 2] : 1e3 * 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  s.p10_us = at(0.1);
  s.p90_us = at(0.9);
  s.min_us = 1e3 * ms.front();
  s.n = static_cast<int>(n);
  return s;
}

/// One operation launch on copy `c` of a case's inputs.
using RunFn = std::function<void(int c, cudaStream_t s)>;

class Timer {
 public:
  Timer(cudaStream_t s, size_t flush_bytes, int max_reps)
      : s_(s), flush_(flush_bytes), read_(flush_bytes), sink_(16) {
    BENCH_CUDA(cudaMemsetAsync(read_.get(), 0, read_.bytes(), s_));
    int dev = 0, sms = 0;
    BENCH_CUDA(cudaGetDevice(&dev));
    BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    flush_grid_ = static_cast<unsigned>(std::max(sms, 1) * 4);
    ev_.resize(2 * static_cast<size_t>(max_reps));
    for (auto& e : ev_) BENCH_CUDA(cudaEventCreate(&e));
  }
  ~Timer() {
    for (auto& e : ev_) cudaEventDestroy(e);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  /// The L2 flush before each timed run (outside the events): a 256 MiB memset, then a read-only
  /// pass over a second 256 MiB buffer. The memset alone leaves up to an L2's worth of dirty lines
  /// that the timed kernel would have to write back (a fixed bias of several microseconds); the
  /// read pass evicts them (written back here, untimed) and leaves the L2 full of clean lines.
  /// `clean = false` keeps the old memset-only flush (for the bias probe).
  void flush(int r, bool clean = true) {
    BENCH_CUDA(cudaMemsetAsync(flush_.get(), r & 0xFF, flush_.bytes(), s_));
    if (!clean) return;
    read_only_pass<<<flush_grid_, 512, 0, s_>>>(read_.as<uint4>(), static_cast<int64_t>(read_.bytes() / 16),
                                                sink_.as<uint32_t>());
    BENCH_CUDA(cudaGetLastError());
  }

  /// Median time of `fn` launched between events after each flush (dirty or clean), for the probe.
  Stats time_plain(const std::function<void()>& fn, bool clean, int reps) {
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

  /// Direct launches between events.
  Stats time_stream(const RunFn& run, int copies, int warmup, int reps) {
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

  /// Each copy captured once into a CUDA graph; replays between events (the Triton table's "cold GPU").
  Stats time_graph(const RunFn& run, int copies, int warmup, int reps) {
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

  /// Device-to-device cudaMemcpyAsync of `bytes`: (read + write) / time, median.
  double copy_GBps(size_t bytes, int reps, double* median_us) {
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

 private:
  Stats collect(int reps) {
    BENCH_CUDA(cudaStreamSynchronize(s_));
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; ++r) BENCH_CUDA(cudaEventElapsedTime(&ms[r], ev_[2 * r], ev_[2 * r + 1]));
    return summarize(std::move(ms));
  }

  cudaStream_t s_;
  DeviceBuffer flush_;
  DeviceBuffer read_;  // read by the clean flush, never written after construction
  DeviceBuffer sink_;  // the read pass's one conditional word
  unsigned flush_grid_ = 1;
  std::vector<cudaEvent_t> ev_;
};

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------
/// Returns "" when the CUDA output equals the reference byte for byte, else the first mismatch.
using VerifyFn = std::function<std::string(cudaStream_t s)>;

struct Case {
  std::string op;     ///< short op name (quantize, gather, global_topk, combine, mixed)
  std::string key;    ///< join key shared with triton_bench.py
  std::string shape;  ///< human-readable shape
  int64_t block_stride = 0;  ///< cache block stride in bytes (cache ops only)
  double bytes_min = 0;      ///< bytes every input read once + every output written once
  std::string bytes_note;
  int copies = 1;
  bool small = false;  ///< a launch-latency-bound shape (figure compares graph replays)
  RunFn run;
  VerifyFn verify;
};

struct Row {
  Case c;
  Stats stream, graph;
  /// copy_kernel over bytes_min / 2 bytes (so bytes_min read + written), timed like the op (graph
  /// replay after the same flush): what moving this case's bytes costs with a plain copy kernel.
  Stats copy;
  std::string verify = "not run";
  std::string error;
  double headline_us() const { return graph.ok() ? graph.median_us : stream.median_us; }
};

struct Config {
  bool quick = false;
  bool verify = true;
  int reps = 0;  // 0 = default
  std::vector<std::string> only;
  std::string filter;
  std::string json_path, csv_path;
};

constexpr int64_t kBlockSize = 64;
constexpr int64_t kNumBlocks = 16384;
/// vLLM's block stride for block size 64 (a multiple of 16 bytes).
constexpr int64_t kAlignedStride = sp::vllm_block_stride(kBlockSize);
/// The smallest even stride >= block_data_bytes that is not a multiple of 16: exercises the unaligned path.
constexpr int64_t kUnalignedStride = sp::block_data_bytes(kBlockSize) + sp::kBlockStrideAlignment;
static_assert(kUnalignedStride % 16 != 0);

/// The spec constants and bench shapes the Python side needs to build the same cases and join keys
/// (bench/triton_bench.py asks for them with --layout-json, bench/compare.py reads them from the
/// JSON's info), so that no Python file restates a number of spec/include.
std::string layout_json() {
  std::ostringstream s;
  s << "{\"block_size\": " << kBlockSize << ", \"num_blocks\": " << kNumBlocks
    << ", \"aligned_stride\": " << kAlignedStride << ", \"unaligned_stride\": " << kUnalignedStride
    << ", \"head_dim\": " << sp::kHeadDim << ", \"nope_dim\": " << sp::kNopeDim
    << ", \"num_tiles\": " << sp::kNumTiles << ", \"bf16_bytes\": " << sp::kBf16Bytes
    << ", \"rope_bytes\": " << sp::kRopeBytes << ", \"token_bytes\": " << sp::kTokenBytes
    << ", \"combine_row_alignment\": " << sp::kCombineRowAlignment
    << ", \"mixed_topk_alignment\": " << sp::kMixedTopkAlignment << "}";
  return s.str();
}

std::string hexbyte(uint8_t b) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02x", b);
  return s;
}

/// First differing byte of two buffers, as text; "" when equal.
std::string first_mismatch(const void* expected, const void* got, size_t bytes, const char* what) {
  if (std::memcmp(expected, got, bytes) == 0) return "";
  const auto* e = static_cast<const uint8_t*>(expected);
  const auto* g = static_cast<const uint8_t*>(got);
  size_t i = 0;
  while (e[i] == g[i]) ++i;
  size_t count = 0;
  for (size_t j = i; j < bytes; ++j) count += e[j] != g[j];
  std::ostringstream s;
  s << what << ": " << count << " bytes differ, first at byte " << i << " (expected " << hexbyte(e[i]) << ", got "
    << hexbyte(g[i]) << ")";
  return s.str();
}

std::string compare_counts(int32_t expected, int32_t got) {
  if (expected == got) return "";
  return "error_count: expected " + std::to_string(expected) + ", got " + std::to_string(got);
}

int rotation_copies(double working_set_bytes, int64_t l2_bytes) {
  // Enough copies that the rotated working set is 4x the L2; at least 2, at most 8.
  const double want = std::ceil(4.0 * static_cast<double>(l2_bytes) / std::max(working_set_bytes, 1.0));
  return static_cast<int>(std::clamp(want, 2.0, 8.0));
}

/// A paged K-cache of kNumBlocks blocks with the given stride, filled with quantized random keys.
struct Cache {
  int64_t stride;
  DeviceBuffer dev;          // [kNumBlocks, stride] uint8
  bool filled = false;       // every slot holds a quantized random key
  std::vector<uint8_t> host; // snapshot after filling (for verifying gathers)

  explicit Cache(int64_t s) : stride(s), dev(static_cast<size_t>(kNumBlocks * s)) {}
  TensorView view() const { return TensorView::mat(dev.get(), DType::kU8, kNumBlocks, stride); }

  /// Quantizes random keys into every slot (so gathers read realistic codes and scales), chunk by chunk.
  void fill(cudaStream_t s) {
    if (filled) return;
    constexpr int64_t chunk = 65536;
    const int64_t slots_total = kNumBlocks * kBlockSize;
    DeviceBuffer k(static_cast<size_t>(chunk * sp::kHeadDim * 2));
    DeviceBuffer slots(static_cast<size_t>(chunk * 8));
    std::vector<int64_t> hs(chunk);
    for (int64_t first = 0; first < slots_total; first += chunk) {
      const int64_t n = std::min(chunk, slots_total - first);
      for (int64_t i = 0; i < n; ++i) hs[i] = first + i;
      BENCH_CUDA(cudaStreamSynchronize(s));  // the last chunk's quantize has read `slots`
      BENCH_CUDA(cudaMemcpyAsync(slots.get(), hs.data(), n * 8, cudaMemcpyHostToDevice, s));
      random_bf16(k.get(), n * sp::kHeadDim, 0xF111ull + static_cast<uint64_t>(first), s);
      dsv4kv::QuantizeInsertArgs a;
      a.k = TensorView::mat(k.get(), DType::kBF16, n, sp::kHeadDim);
      a.k_cache = view();
      a.slot_mapping = TensorView::vec(slots.get(), DType::kI64, n);
      a.block_size = kBlockSize;
      dsv4kv::cuda::quantize_and_insert_k_cache(a, s);
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
    filled = true;
    host.clear();
  }
  const std::vector<uint8_t>& snapshot() {
    if (host.empty()) host = download<uint8_t>(dev.get(), dev.bytes());
    return host;
  }
};

struct Bench {
  Config cfg;
  cudaStream_t stream = nullptr;
  int64_t l2_bytes = 0;
  std::unique_ptr<Cache> aligned, unaligned;

  Cache& cache(int64_t stride) {
    auto& slot = stride == kAlignedStride ? aligned : unaligned;
    if (!slot) slot = std::make_unique<Cache>(stride);
    return *slot;
  }

  // ----- quantize_and_insert_k_cache -----
  Case quantize(int64_t n, int64_t stride) {
    Cache& cache_ref = cache(stride);
    Case c;
    c.op = "quantize";
    c.key = "quantize tokens=" + std::to_string(n) + " stride=" + std::to_string(stride);
    c.shape = "tokens=" + std::to_string(n) + " bs=64 blocks=16384";
    c.block_stride = stride;
    c.bytes_min = static_cast<double>(n) * (2 * sp::kHeadDim + 8 + sp::kTokenBytes);
    c.bytes_note = "read k row + slot id, write 448 fp8 + 128 bf16 + 8 scale bytes per token";
    c.small = n <= 64;
    c.copies = rotation_copies(c.bytes_min, l2_bytes);
    struct State {
      std::vector<DeviceBuffer> k, slots;
      std::vector<int64_t> slots0;
    };
    auto st = std::make_shared<State>();
    for (int i = 0; i < c.copies; ++i) {
      Rng rng(1000 + 17 * static_cast<uint64_t>(n) + static_cast<uint64_t>(i));
      const auto perm = randperm(kNumBlocks, rng);
      std::vector<int64_t> slots(n);
      for (int64_t t = 0; t < n; ++t) slots[t] = int64_t{perm[t / kBlockSize]} * kBlockSize + t % kBlockSize;
      st->k.emplace_back(static_cast<size_t>(n * sp::kHeadDim * 2));
      random_bf16(st->k.back().get(), n * sp::kHeadDim, 77 + 1000003ull * static_cast<uint64_t>(i), stream);
      st->slots.push_back(upload(slots));
      if (i == 0) st->slots0 = std::move(slots);
    }
    Cache* cp = &cache_ref;
    auto args = [st, cp, n](int i, int32_t* err) {
      dsv4kv::QuantizeInsertArgs a;
      a.k = TensorView::mat(st->k[i].get(), DType::kBF16, n, sp::kHeadDim);
      a.k_cache = cp->view();
      a.slot_mapping = TensorView::vec(st->slots[i].get(), DType::kI64, n);
      a.block_size = kBlockSize;
      a.error_count = err;
      return a;
    };
    c.run = [args](int i, cudaStream_t s) { dsv4kv::cuda::quantize_and_insert_k_cache(args(i, nullptr), s); };
    c.verify = [st, cp, n, args](cudaStream_t s) -> std::string {
      BENCH_CUDA(cudaStreamSynchronize(s));
      auto expected = download<uint8_t>(cp->dev.get(), cp->dev.bytes());
      DeviceBuffer err(4);
      memset_dev(err.get(), 0, 4);
      dsv4kv::cuda::quantize_and_insert_k_cache(args(0, err.as<int32_t>()), s);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const auto got = download<uint8_t>(cp->dev.get(), cp->dev.bytes());
      const auto k0 = download<uint16_t>(st->k[0].get(), static_cast<size_t>(n * sp::kHeadDim));
      int32_t ref_err = 0;
      dsv4kv::QuantizeInsertArgs h;
      h.k = TensorView::mat(const_cast<uint16_t*>(k0.data()), DType::kBF16, n, sp::kHeadDim);
      h.k_cache = TensorView::mat(expected.data(), DType::kU8, kNumBlocks, cp->stride);
      h.slot_mapping = TensorView::vec(st->slots0.data(), DType::kI64, n);
      h.block_size = kBlockSize;
      h.error_count = &ref_err;
      dsv4kv::reference::quantize_and_insert_k_cache(h);
      cp->host.clear();  // the cache changed: a gather snapshot must be taken again
      const std::string m = first_mismatch(expected.data(), got.data(), expected.size(), "k_cache");
      if (!m.empty()) return m;
      return compare_counts(ref_err, download<int32_t>(err.get(), 1)[0]);
    };
    return c;
  }

  // ----- dequantize_and_gather_k_cache -----
  Case gather(int64_t R, int64_t T, int64_t stride) {
    Cache& cache_ref = cache(stride);
    cache_ref.fill(stream);
    Case c;
    c.op = "gather";
    c.key = "gather reqs=" + std::to_string(R) + " tokens=" + std::to_string(T) + " stride=" + std::to_string(stride);
    c.shape = "reqs=" + std::to_string(R) + " tokens/req=" + std::to_string(T) + " bs=64";
    c.block_stride = stride;
    const int64_t nb_per = (T + kBlockSize - 1) / kBlockSize;
    constexpr int64_t kScaleBytesRead = sp::kNumTiles;  // the pad byte is not needed
    c.bytes_min = static_cast<double>(R * T) * (sp::kTokenDataBytes + kScaleBytesRead + 2 * sp::kHeadDim) +
                  static_cast<double>(R * nb_per) * 4;
    c.bytes_note = "read 583 B/token, write 1024 B/token, plus the block table";
    c.small = R * T <= 128;
    c.copies = rotation_copies(c.bytes_min, l2_bytes);
    struct State {
      std::vector<DeviceBuffer> bt, out;
      DeviceBuffer seq;
      std::vector<int32_t> bt0, seq_h;
    };
    auto st = std::make_shared<State>();
    st->seq_h.assign(R, static_cast<int32_t>(T));
    st->seq = upload(st->seq_h);
    for (int i = 0; i < c.copies; ++i) {
      Rng rng(2000 + 31 * static_cast<uint64_t>(R * T) + static_cast<uint64_t>(i));
      auto perm = randperm(kNumBlocks, rng);
      perm.resize(R * nb_per);
      st->bt.push_back(upload(perm));
      st->out.emplace_back(static_cast<size_t>(R * T * sp::kHeadDim * 2));
      if (i == 0) st->bt0 = std::move(perm);
    }
    Cache* cp = &cache_ref;
    auto args = [st, cp, R, T, nb_per](int i, int32_t* err) {
      dsv4kv::DequantizeGatherArgs a;
      a.out = TensorView::cube(st->out[i].get(), DType::kBF16, R, T, sp::kHeadDim);
      a.k_cache = cp->view();
      a.seq_lens = TensorView::vec(st->seq.get(), DType::kI32, R);
      a.block_table = TensorView::mat(st->bt[i].get(), DType::kI32, R, nb_per);
      a.block_size = kBlockSize;
      a.error_count = err;
      return a;
    };
    c.run = [args](int i, cudaStream_t s) { dsv4kv::cuda::dequantize_and_gather_k_cache(args(i, nullptr), s); };
    c.verify = [st, cp, R, T, nb_per, args](cudaStream_t s) -> std::string {
      BENCH_CUDA(cudaStreamSynchronize(s));
      const size_t out_bytes = st->out[0].bytes();
      memset_dev(st->out[0].get(), 0xA5, out_bytes);  // poison: unwritten rows show
      DeviceBuffer err(4);
      memset_dev(err.get(), 0, 4);
      dsv4kv::cuda::dequantize_and_gather_k_cache(args(0, err.as<int32_t>()), s);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const auto got = download<uint8_t>(st->out[0].get(), out_bytes);
      const auto& cache_h = cp->snapshot();
      std::vector<uint8_t> expected(out_bytes, 0xA5);
      int32_t ref_err = 0;
      dsv4kv::DequantizeGatherArgs h;
      h.out = TensorView::cube(expected.data(), DType::kBF16, R, T, sp::kHeadDim);
      h.k_cache = TensorView::mat(const_cast<uint8_t*>(cache_h.data()), DType::kU8, kNumBlocks, cp->stride);
      h.seq_lens = TensorView::vec(st->seq_h.data(), DType::kI32, R);
      h.block_table = TensorView::mat(st->bt0.data(), DType::kI32, R, nb_per);
      h.block_size = kBlockSize;
      h.error_count = &ref_err;
      dsv4kv::reference::dequantize_and_gather_k_cache(h);
      const std::string m = first_mismatch(expected.data(), got.data(), out_bytes, "out");
      if (!m.empty()) return m;
      return compare_counts(ref_err, download<int32_t>(err.get(), 1)[0]);
    };
    return c;
  }

  // ----- compute_global_topk_indices_and_lens -----
  Case global_topk(int64_t T, int64_t topk) {
    constexpr int64_t nreq = 4, ctx = 32768;
    const int64_t cols = ctx / kBlockSize;
    Case c;
    c.op = "global_topk";
    c.key = "global_topk tokens=" + std::to_string(T) + " topk=" + std::to_string(topk);
    c.shape = "tokens=" + std::to_string(T) + " topk=" + std::to_string(topk) + " bs=64";
    c.bytes_min = static_cast<double>(T * topk * 8 + T * 9 + nreq * cols * 4);
    c.bytes_note = "read + write topk int32, token_to_req/is_valid/lens, the block table once";
    c.small = T <= 64;
    c.copies = rotation_copies(c.bytes_min, l2_bytes);
    struct Copy {
      DeviceBuffer ti, t2r, valid, out, lens;
      std::vector<int32_t> ti_h, t2r_h;
      std::vector<uint8_t> valid_h;
    };
    struct State {
      DeviceBuffer bt;
      std::vector<int32_t> bt_h;
      std::vector<Copy> copy;
    };
    auto st = std::make_shared<State>();
    Rng brng(3000);
    st->bt_h = randperm(nreq * cols, brng);
    st->bt = upload(st->bt_h);
    for (int i = 0; i < c.copies; ++i) {
      Rng rng(3001 + 7 * static_cast<uint64_t>(T * topk) + static_cast<uint64_t>(i));
      Copy cp;
      cp.ti_h.resize(T * topk);
      for (auto& v : cp.ti_h) v = rng.uniform() < 0.05 ? -1 : static_cast<int32_t>(rng.below(ctx));
      cp.t2r_h.resize(T);
      for (auto& v : cp.t2r_h) v = static_cast<int32_t>(rng.below(nreq));
      cp.valid_h.resize(T);
      for (auto& v : cp.valid_h) v = rng.uniform() > 0.1 ? 1 : 0;
      cp.ti = upload(cp.ti_h);
      cp.t2r = upload(cp.t2r_h);
      cp.valid = upload(cp.valid_h);
      cp.out = DeviceBuffer(static_cast<size_t>(T * topk * 4));
      cp.lens = DeviceBuffer(static_cast<size_t>(T * 4));
      if (i > 0) {  // host mirrors only for the verified copy
        cp.ti_h.clear();
        cp.t2r_h.clear();
        cp.valid_h.clear();
      }
      st->copy.push_back(std::move(cp));
    }
    auto make = [T, topk, cols](void* ti, void* t2r, void* bt, void* valid, void* out, void* lens, int32_t* err) {
      dsv4kv::GlobalTopkArgs a;
      a.topk_indices = TensorView::mat(ti, DType::kI32, T, topk);
      a.token_to_req = TensorView::vec(t2r, DType::kI32, T);
      a.block_table = TensorView::mat(bt, DType::kI32, nreq, cols);
      a.block_size = kBlockSize;
      a.is_valid_token = TensorView::vec(valid, DType::kBool, T);
      a.global_topk_indices = TensorView::mat(out, DType::kI32, T, topk);
      a.topk_lens = TensorView::vec(lens, DType::kI32, T);
      a.error_count = err;
      return a;
    };
    auto dev_args = [st, make](int i, int32_t* err) {
      const Copy& cp = st->copy[i];
      return make(cp.ti.get(), cp.t2r.get(), st->bt.get(), cp.valid.get(), cp.out.get(), cp.lens.get(), err);
    };
    c.run = [dev_args](int i, cudaStream_t s) {
      dsv4kv::cuda::compute_global_topk_indices_and_lens(dev_args(i, nullptr), s);
    };
    c.verify = [st, make, dev_args, T, topk](cudaStream_t s) -> std::string {
      Copy& cp = st->copy[0];
      BENCH_CUDA(cudaStreamSynchronize(s));
      memset_dev(cp.out.get(), 0xA5, cp.out.bytes());
      memset_dev(cp.lens.get(), 0xA5, cp.lens.bytes());
      DeviceBuffer err(4);
      memset_dev(err.get(), 0, 4);
      dsv4kv::cuda::compute_global_topk_indices_and_lens(dev_args(0, err.as<int32_t>()), s);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const auto out = download<int32_t>(cp.out.get(), T * topk);
      const auto lens = download<int32_t>(cp.lens.get(), T);
      std::vector<int32_t> eout(T * topk, 0), elens(T, 0);
      std::memset(eout.data(), 0xA5, eout.size() * 4);
      std::memset(elens.data(), 0xA5, elens.size() * 4);
      int32_t ref_err = 0;
      dsv4kv::reference::compute_global_topk_indices_and_lens(
          make(cp.ti_h.data(), cp.t2r_h.data(), st->bt_h.data(), cp.valid_h.data(), eout.data(), elens.data(),
               &ref_err));
      std::string m = first_mismatch(eout.data(), out.data(), eout.size() * 4, "global_topk_indices");
      if (m.empty()) m = first_mismatch(elens.data(), lens.data(), elens.size() * 4, "topk_lens");
      if (m.empty()) m = compare_counts(ref_err, download<int32_t>(err.get(), 1)[0]);
      return m;
    };
    return c;
  }

  // ----- combine_topk_swa_indices -----
  Case combine(int64_t topk, int64_t max_image_tokens) {
    constexpr int64_t nreq = 4, q = 2048, p = 8192, win = 128, cr = 4;
    const int64_t T = nreq * q;
    const bool image = max_image_tokens > 0;
    Case c;
    c.op = "combine";
    c.key = "combine tokens=" + std::to_string(T) + " topk=" + std::to_string(topk) + " window=128 image=" +
            std::to_string(max_image_tokens);
    c.shape = "tokens=" + std::to_string(T) + " topk=" + std::to_string(topk) + " window=128" +
              (image ? " images (max_image_tokens=" + std::to_string(max_image_tokens) + ")" : "");
    const int64_t width = sp::combine_row_width(topk, win, max_image_tokens);
    const int64_t N = (p + q + cr - 1) / cr;
    const int64_t gl = q + std::min(p, win - 1);
    const int64_t M = N + gl + 8;
    int64_t topk_used = 0;
    for (int64_t t = 0; t < T; ++t) topk_used += sp::topk_len_at(p + t % q, cr, topk);
    c.bytes_min = static_cast<double>(T * width * 4 + topk_used * 4 + T * 4 + (image ? T * 8 : 0));
    c.bytes_note = image ? "write the whole row (with -1 padding) + lens once, read the used topk entries and "
                           "left/right visibility"
                         : "write the whole row (with -1 padding) + lens once, read the used topk entries";
    c.copies = rotation_copies(c.bytes_min, l2_bytes);
    struct Copy {
      DeviceBuffer ti, out, lens;
      std::vector<int32_t> ti_h;
    };
    struct State {
      DeviceBuffer qsl, seq, gl, lv, rv;
      std::vector<int32_t> qsl_h, seq_h, gl_h, lv_h, rv_h;
      std::vector<Copy> copy;
    };
    auto st = std::make_shared<State>();
    for (int64_t b = 0; b <= nreq; ++b) st->qsl_h.push_back(static_cast<int32_t>(b * q));
    st->seq_h.assign(nreq, static_cast<int32_t>(p + q));
    st->gl_h.assign(nreq, static_cast<int32_t>(gl));
    st->qsl = upload(st->qsl_h);
    st->seq = upload(st->seq_h);
    st->gl = upload(st->gl_h);
    if (image) {
      // Image spans, deterministic so triton_bench.py builds the same ones: request r, span i covers
      // positions [s, e] (inclusive) with s = p + 100 + 500 i + 37 r, length 64 - 8 ((i + r) % 4).
      // DeepSeek's visibility rule inside a span: left = min(pos - s, max_img - 1), right = min(e - pos, max_img).
      st->lv_h.assign(T, 0);
      st->rv_h.assign(T, 0);
      for (int64_t r = 0; r < nreq; ++r)
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t s = p + 100 + 500 * i + 37 * r;
          const int64_t e = s + (64 - 8 * ((i + r) % 4)) - 1;
          for (int64_t pos = s; pos <= e; ++pos) {
            const int64_t t = r * q + (pos - p);
            st->lv_h[t] = static_cast<int32_t>(std::min(pos - s, max_image_tokens - 1));
            st->rv_h[t] = static_cast<int32_t>(std::min(e - pos, max_image_tokens));
          }
        }
      st->lv = upload(st->lv_h);
      st->rv = upload(st->rv_h);
    }
    for (int i = 0; i < c.copies; ++i) {
      Rng rng(4000 + 13 * static_cast<uint64_t>(topk) + static_cast<uint64_t>(i));
      Copy cp;
      cp.ti_h.resize(T * topk);
      for (auto& v : cp.ti_h) v = static_cast<int32_t>(rng.below(N));
      cp.ti = upload(cp.ti_h);
      cp.out = DeviceBuffer(static_cast<size_t>(T * width * 4));
      cp.lens = DeviceBuffer(static_cast<size_t>(T * 4));
      if (i > 0) cp.ti_h.clear();
      st->copy.push_back(std::move(cp));
    }
    auto make = [=](void* ti, void* qsl, void* seq, void* glp, void* lv, void* rv, void* out, void* lens,
                    int32_t* err) {
      dsv4kv::CombineArgs a;
      a.topk_indices = TensorView::mat(ti, DType::kI32, T, topk);
      a.query_start_loc = TensorView::vec(qsl, DType::kI32, nreq + 1);
      a.seq_lens = TensorView::vec(seq, DType::kI32, nreq);
      a.gather_lens = TensorView::vec(glp, DType::kI32, nreq);
      a.window_size = win;
      a.compress_ratio = cr;
      a.topk = topk;
      a.M = M;
      a.N = N;
      if (image) {
        a.left_visible = TensorView::vec(lv, DType::kI32, T);
        a.right_visible = TensorView::vec(rv, DType::kI32, T);
      }
      a.max_image_tokens = max_image_tokens;
      a.combined_indices = TensorView::mat(out, DType::kI32, T, width);
      a.combined_lens = TensorView::vec(lens, DType::kI32, T);
      a.error_count = err;
      return a;
    };
    auto dev_args = [st, make](int i, int32_t* err) {
      const Copy& cp = st->copy[i];
      return make(cp.ti.get(), st->qsl.get(), st->seq.get(), st->gl.get(), st->lv.get(), st->rv.get(),
                  cp.out.get(), cp.lens.get(), err);
    };
    c.run = [dev_args](int i, cudaStream_t s) { dsv4kv::cuda::combine_topk_swa_indices(dev_args(i, nullptr), s); };
    c.verify = [st, make, dev_args, T, width](cudaStream_t s) -> std::string {
      Copy& cp = st->copy[0];
      BENCH_CUDA(cudaStreamSynchronize(s));
      memset_dev(cp.out.get(), 0xA5, cp.out.bytes());
      memset_dev(cp.lens.get(), 0xA5, cp.lens.bytes());
      DeviceBuffer err(4);
      memset_dev(err.get(), 0, 4);
      dsv4kv::cuda::combine_topk_swa_indices(dev_args(0, err.as<int32_t>()), s);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const auto out = download<int32_t>(cp.out.get(), T * width);
      const auto lens = download<int32_t>(cp.lens.get(), T);
      std::vector<int32_t> eout(T * width), elens(T);
      std::memset(eout.data(), 0xA5, eout.size() * 4);
      std::memset(elens.data(), 0xA5, elens.size() * 4);
      int32_t ref_err = 0;
      dsv4kv::reference::combine_topk_swa_indices(make(cp.ti_h.data(), st->qsl_h.data(), st->seq_h.data(),
                                                       st->gl_h.data(), st->lv_h.data(), st->rv_h.data(),
                                                       eout.data(), elens.data(), &ref_err));
      std::string m = first_mismatch(eout.data(), out.data(), eout.size() * 4, "combined_indices");
      if (m.empty()) m = first_mismatch(elens.data(), lens.data(), elens.size() * 4, "combined_lens");
      if (m.empty()) m = compare_counts(ref_err, download<int32_t>(err.get(), 1)[0]);
      return m;
    };
    return c;
  }

  // ----- build_flashinfer_mixed_sparse_indices -----
  Case mixed() {
    constexpr int64_t D = 256, nprefill = 4, q = 2048, p = 8192, topk = 512, cr = 4, win = 128;
    constexpr int64_t P = nprefill * q, T = D + P, R = D + nprefill;
    constexpr int64_t swa_cols = (p + q) / 64 + 1, comp_cols = (p + q) / cr / 64 + 1;
    const int64_t width = sp::mixed_row_width(win, 0, topk, topk);
    Case c;
    c.op = "mixed";
    c.key = "mixed decode=256 prefill=8192 topk=512 window=128";
    c.shape = "decode=256 prefill=8192 topk=512 window=128";
    c.bytes_min = static_cast<double>(T * (win + topk) * 4 + T * 4 + D * (win + topk) * 4 + P * topk * 4);
    c.bytes_note = "write [T, 640] once + lens; read decode rows + prefill topk";
    c.copies = rotation_copies(c.bytes_min, l2_bytes);
    struct Copy {
      DeviceBuffer dswa, dcomp, pti, out, lens;
      std::vector<int32_t> dswa_h, dcomp_h, pti_h;
    };
    struct State {
      DeviceBuffer qsl, seq, t2r, swa_bt, comp_bt, dlens;
      std::vector<int32_t> qsl_h, seq_h, t2r_h, swa_bt_h, comp_bt_h, dlens_h;
      std::vector<Copy> copy;
    };
    auto st = std::make_shared<State>();
    Rng rng(5000);
    st->qsl_h.push_back(0);
    for (int64_t r = 0; r < R; ++r) st->qsl_h.push_back(st->qsl_h.back() + static_cast<int32_t>(r < D ? 1 : q));
    for (int64_t r = 0; r < R; ++r) st->seq_h.push_back(static_cast<int32_t>(r < D ? p + 1 : p + q));
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < (r < D ? 1 : q); ++j) st->t2r_h.push_back(static_cast<int32_t>(r));
    st->swa_bt_h.resize(R * swa_cols);
    for (auto& v : st->swa_bt_h) v = static_cast<int32_t>(rng.below(100000));
    st->comp_bt_h.resize(R * comp_cols);
    for (auto& v : st->comp_bt_h) v = static_cast<int32_t>(rng.below(100000));
    st->dlens_h.assign(D, static_cast<int32_t>(topk));
    st->qsl = upload(st->qsl_h);
    st->seq = upload(st->seq_h);
    st->t2r = upload(st->t2r_h);
    st->swa_bt = upload(st->swa_bt_h);
    st->comp_bt = upload(st->comp_bt_h);
    st->dlens = upload(st->dlens_h);
    for (int i = 0; i < c.copies; ++i) {
      Rng r2(5001 + static_cast<uint64_t>(i));
      Copy cp;
      cp.dswa_h.resize(D * win);
      for (auto& v : cp.dswa_h) v = static_cast<int32_t>(r2.below(10000000));
      cp.dcomp_h.resize(D * topk);
      for (auto& v : cp.dcomp_h) v = static_cast<int32_t>(r2.below(10000000));
      cp.pti_h.resize(P * topk);
      for (auto& v : cp.pti_h) v = static_cast<int32_t>(r2.below((p + q) / cr));
      cp.dswa = upload(cp.dswa_h);
      cp.dcomp = upload(cp.dcomp_h);
      cp.pti = upload(cp.pti_h);
      cp.out = DeviceBuffer(static_cast<size_t>(T * width * 4));
      cp.lens = DeviceBuffer(static_cast<size_t>(T * 4));
      if (i > 0) {
        cp.dswa_h.clear();
        cp.dcomp_h.clear();
        cp.pti_h.clear();
      }
      st->copy.push_back(std::move(cp));
    }
    auto make = [=](void* dswa, void* dcomp, void* dlens, void* pti, void* qsl, void* seq, void* t2r, void* swa_bt,
                    void* comp_bt, void* out, void* lens, int32_t* err) {
      dsv4kv::MixedSparseArgs a;
      a.decode_swa_indices = TensorView::mat(dswa, DType::kI32, D, win);
      a.decode_compressed_indices = TensorView::mat(dcomp, DType::kI32, D, topk);
      a.decode_compressed_topk_lens = TensorView::vec(dlens, DType::kI32, D);
      a.prefill_topk_indices = TensorView::mat(pti, DType::kI32, P, topk);
      a.query_start_loc = TensorView::vec(qsl, DType::kI32, R + 1);
      a.seq_lens = TensorView::vec(seq, DType::kI32, R);
      a.token_to_req = TensorView::vec(t2r, DType::kI32, T);
      a.swa_block_table = TensorView::mat(swa_bt, DType::kI32, R, swa_cols);
      a.swa_block_size = 64;
      a.compressed_block_table = TensorView::mat(comp_bt, DType::kI32, R, comp_cols);
      a.compressed_block_size = 64;
      a.window_size = win;
      a.compress_ratio = cr;
      a.topk = topk;
      a.sparse_indices = TensorView::mat(out, DType::kI32, T, width);
      a.sparse_topk_lens = TensorView::vec(lens, DType::kI32, T);
      a.error_count = err;
      return a;
    };
    auto dev_args = [st, make](int i, int32_t* err) {
      const Copy& cp = st->copy[i];
      return make(cp.dswa.get(), cp.dcomp.get(), st->dlens.get(), cp.pti.get(), st->qsl.get(), st->seq.get(),
                  st->t2r.get(), st->swa_bt.get(), st->comp_bt.get(), cp.out.get(), cp.lens.get(), err);
    };
    c.run = [dev_args](int i, cudaStream_t s) {
      dsv4kv::cuda::build_flashinfer_mixed_sparse_indices(dev_args(i, nullptr), s);
    };
    c.verify = [st, make, dev_args, width](cudaStream_t s) -> std::string {
      Copy& cp = st->copy[0];
      BENCH_CUDA(cudaStreamSynchronize(s));
      memset_dev(cp.out.get(), 0xA5, cp.out.bytes());
      memset_dev(cp.lens.get(), 0xA5, cp.lens.bytes());
      DeviceBuffer err(4);
      memset_dev(err.get(), 0, 4);
      dsv4kv::cuda::build_flashinfer_mixed_sparse_indices(dev_args(0, err.as<int32_t>()), s);
      BENCH_CUDA(cudaStreamSynchronize(s));
      const auto out = download<int32_t>(cp.out.get(), T * width);
      const auto lens = download<int32_t>(cp.lens.get(), T);
      std::vector<int32_t> eout(T * width), elens(T);
      std::memset(eout.data(), 0xA5, eout.size() * 4);
      std::memset(elens.data(), 0xA5, elens.size() * 4);
      int32_t ref_err = 0;
      dsv4kv::reference::build_flashinfer_mixed_sparse_indices(
          make(cp.dswa_h.data(), cp.dcomp_h.data(), st->dlens_h.data(), cp.pti_h.data(), st->qsl_h.data(),
               st->seq_h.data(), st->t2r_h.data(), st->swa_bt_h.data(), st->comp_bt_h.data(), eout.data(),
               elens.data(), &ref_err));
      std::string m = first_mismatch(eout.data(), out.data(), eout.size() * 4, "sparse_indices");
      if (m.empty()) m = first_mismatch(elens.data(), lens.data(), elens.size() * 4, "sparse_topk_lens");
      if (m.empty()) m = compare_counts(ref_err, download<int32_t>(err.get(), 1)[0]);
      return m;
    };
    return c;
  }
};

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------
std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

std::string fmt(double v, int prec) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

struct CopyResult {
  size_t bytes;
  double us, GBps;
};

struct Info {
  std::string gpu;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int driver = 0, runtime = 0;
  std::vector<CopyResult> copies;
  double ceiling = NAN;
  /// Flush-bias probe: medians (µs) after the memset-only flush and after the clean flush.
  struct Probe {
    std::string what;
    double dirty_us = NAN, clean_us = NAN;
  };
  std::vector<Probe> probes;
  /// An empty kernel captured in a graph and replayed like every case: the method's floor.
  Stats empty_graph;
};

void write_json(const std::string& path, const Info& info, const Config& cfg, const std::vector<Row>& rows) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << "{\n \"tool\": \"dsv4kv_bench\",\n \"info\": {\n";
  f << "  \"gpu\": " << json_str(info.gpu) << ",\n  \"sm_count\": " << info.sm_count
    << ",\n  \"l2_bytes\": " << info.l2_bytes << ",\n  \"cuda_driver\": " << info.driver
    << ",\n  \"cuda_runtime\": " << info.runtime << ",\n  \"build_commit\": " << json_str(dsv4kv_bench_commit())
    << ",\n  \"quick\": " << (cfg.quick ? "true" : "false") << ",\n  \"layout\": " << layout_json()
    << ",\n  \"copy\": [";
  for (size_t i = 0; i < info.copies.size(); ++i)
    f << (i ? ", " : "") << "{\"bytes\": " << info.copies[i].bytes << ", \"us\": " << json_num(info.copies[i].us)
      << ", \"GBps_read_plus_write\": " << json_num(info.copies[i].GBps) << "}";
  f << "],\n  \"empty_kernel_graph_us\": " << json_num(info.empty_graph.median_us);
  f << ",\n  \"flush_probe\": [";
  for (size_t i = 0; i < info.probes.size(); ++i)
    f << (i ? ", " : "") << "{\"what\": " << json_str(info.probes[i].what)
      << ", \"memset_only_flush_us\": " << json_num(info.probes[i].dirty_us)
      << ", \"clean_flush_us\": " << json_num(info.probes[i].clean_us) << "}";
  f << "],\n  \"copy_ceiling_GBps\": " << json_num(info.ceiling) << ",\n  \"method\": "
    << json_str("L2 flushed before every timed run, outside the events: 256 MiB cudaMemsetAsync, then a read-only "
                "pass over another 256 MiB buffer (leaves the L2 clean: no dirty lines for the timed kernel to write "
                "back); inputs rotated "
                "among `copies` sets; median of `n` runs after warm-up. graph_* = op captured in a CUDA graph "
                "(one per copy), replay between events (Triton table's cold GPU method); stream_* = direct launch "
                "between events. GBps and frac_of_copy use graph_median_us (stream_median_us when the graph "
                "timing failed). Copy ceiling = max over cudaMemcpyAsync D2D sizes of (read+write)/time.")
    << "\n },\n \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double us = r.headline_us();
    const double gbps = r.c.bytes_min / (us * 1e-6) / 1e9;
    f << "  {\"key\": " << json_str(r.c.key) << ", \"op\": " << json_str(r.c.op) << ", \"shape\": "
      << json_str(r.c.shape) << ", \"block_stride\": " << r.c.block_stride << ", \"copies\": " << r.c.copies
      << ", \"small\": " << (r.c.small ? "true" : "false") << ", \"bytes_min\": " << json_num(r.c.bytes_min)
      << ", \"bytes_note\": " << json_str(r.c.bytes_note) << ",\n   \"graph_median_us\": "
      << json_num(r.graph.median_us) << ", \"graph_p10_us\": " << json_num(r.graph.p10_us)
      << ", \"graph_p90_us\": " << json_num(r.graph.p90_us) << ", \"graph_min_us\": " << json_num(r.graph.min_us)
      << ", \"graph_n\": " << r.graph.n << ", \"graph_error\": " << json_str(r.graph.error)
      << ",\n   \"stream_median_us\": " << json_num(r.stream.median_us) << ", \"stream_p10_us\": "
      << json_num(r.stream.p10_us) << ", \"stream_p90_us\": " << json_num(r.stream.p90_us)
      << ", \"stream_min_us\": " << json_num(r.stream.min_us) << ", \"stream_n\": " << r.stream.n
      << ", \"stream_error\": " << json_str(r.stream.error) << ",\n   \"us\": " << json_num(us)
      << ", \"GBps\": " << json_num(gbps) << ", \"frac_of_copy\": " << json_num(gbps / info.ceiling)
      << ", \"same_bytes_copy_us\": " << json_num(r.copy.median_us)
      << ", \"verify\": " << json_str(r.verify) << ", \"error\": " << json_str(r.error) << "}"
      << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << " ]\n}\n";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return o + "\"";
}

void write_csv(const std::string& path, const Info& info, const std::vector<Row>& rows) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << "key,op,shape,block_stride,copies,bytes_min,graph_median_us,graph_p10_us,graph_p90_us,stream_median_us,"
       "stream_p10_us,stream_p90_us,us,GBps,frac_of_copy,copy_ceiling_GBps,same_bytes_copy_us,verify,error\n";
  for (const Row& r : rows) {
    const double us = r.headline_us();
    const double gbps = r.c.bytes_min / (us * 1e-6) / 1e9;
    f << csv_field(r.c.key) << "," << r.c.op << "," << csv_field(r.c.shape) << "," << r.c.block_stride << ","
      << r.c.copies << "," << json_num(r.c.bytes_min) << "," << json_num(r.graph.median_us) << ","
      << json_num(r.graph.p10_us) << "," << json_num(r.graph.p90_us) << "," << json_num(r.stream.median_us) << ","
      << json_num(r.stream.p10_us) << "," << json_num(r.stream.p90_us) << "," << json_num(us) << ","
      << json_num(gbps) << "," << json_num(gbps / info.ceiling) << "," << json_num(info.ceiling) << ","
      << json_num(r.copy.median_us) << "," << csv_field(r.verify) << "," << csv_field(r.error) << "\n";
  }
}

void print_markdown(const Info& info, const std::vector<Row>& rows) {
  std::cout << "\n## dsv4kv_bench: " << info.gpu << " (" << info.sm_count << " SMs, L2 " << (info.l2_bytes >> 20)
            << " MiB), build " << dsv4kv_bench_commit() << "\n\n";
  std::cout << "| op | shape | stride | copies | graph µs (p10–p90) | stream µs | min MB | GB/s | % of copy | "
               "copy of min bytes µs | verify |\n"
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const Row& r : rows) {
    const double us = r.headline_us();
    const double gbps = r.c.bytes_min / (us * 1e-6) / 1e9;
    std::cout << "| " << r.c.op << " | " << r.c.shape << " | " << (r.c.block_stride ? std::to_string(r.c.block_stride) : "")
              << " | " << r.c.copies << " | ";
    if (!r.error.empty()) {
      std::cout << "error: " << r.error << " | | | | | | |\n";
      continue;
    }
    std::cout << fmt(r.graph.median_us, 1) << " (" << fmt(r.graph.p10_us, 1) << "–" << fmt(r.graph.p90_us, 1)
              << ") | " << fmt(r.stream.median_us, 1) << " | " << fmt(r.c.bytes_min / 1e6, 2) << " | "
              << fmt(gbps, 0) << " | " << fmt(100.0 * gbps / info.ceiling, 1) << " | "
              << (r.copy.ok() ? fmt(r.copy.median_us, 1) : std::string("-")) << " | " << r.verify << " |\n";
  }
  std::cout << "\nCopy ceiling (cudaMemcpyAsync D2D, (read+write)/time, median): ";
  for (size_t i = 0; i < info.copies.size(); ++i)
    std::cout << (i ? ", " : "") << (info.copies[i].bytes >> 20) << " MiB " << fmt(info.copies[i].GBps, 0) << " GB/s";
  std::cout << "; ceiling used " << fmt(info.ceiling, 0) << " GB/s.\n"
            << "graph µs = op captured in a CUDA graph, replay timed after the clean L2 flush (256 MiB memset, "
               "then a read-only pass over 256 MiB; headline, the same method as bench/triton_bench.py); stream µs = "
               "direct launch, same flush; copy of min bytes µs = a plain copy kernel over min MB / 2 (so min MB "
               "read + written), timed like graph µs. An empty kernel timed like graph µs: "
            << fmt(info.empty_graph.median_us, 2) << " µs.\n";
  if (!info.probes.empty()) {
    std::cout << "\nFlush-bias probe (median µs after a memset-only flush → after the clean flush): ";
    for (size_t i = 0; i < info.probes.size(); ++i)
      std::cout << (i ? "; " : "") << info.probes[i].what << " " << fmt(info.probes[i].dirty_us, 2) << " → "
                << fmt(info.probes[i].clean_us, 2);
    std::cout << ".\n";
  }
}

void usage(std::ostream& o) {
  o << "usage: dsv4kv_bench [--quick] [--only OP[,OP...]] [--filter SUBSTR] [--reps N] [--no-verify]\n"
       "                    [--json PATH] [--csv PATH]\n"
       "       dsv4kv_bench --layout-json\n"
       "  OP: quantize, gather, global_topk, combine, mixed (or the full operation names)\n"
       "  Times every operation/shape of the CUDA issue; prints a Markdown table and writes JSON/CSV\n"
       "  for bench/compare.py. Needs a CUDA device. --layout-json prints the spec constants and bench\n"
       "  shapes bench/triton_bench.py uses (no device needed).\n";
}

std::string short_op(const std::string& s) {
  if (s == "quantize_and_insert_k_cache") return "quantize";
  if (s == "dequantize_and_gather_k_cache" || s == "dequantize") return "gather";
  if (s == "compute_global_topk_indices_and_lens" || s == "topk") return "global_topk";
  if (s == "combine_topk_swa_indices") return "combine";
  if (s == "build_flashinfer_mixed_sparse_indices" || s == "flashinfer") return "mixed";
  return s;
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(name) + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") c.quick = true;
    else if (a == "--no-verify") c.verify = false;
    else if (a == "--reps") c.reps = std::stoi(value("--reps"));
    else if (a == "--json") c.json_path = value("--json");
    else if (a == "--csv") c.csv_path = value("--csv");
    else if (a == "--filter") c.filter = value("--filter");
    else if (a == "--only") {
      std::stringstream ss(value("--only"));
      std::string op;
      while (std::getline(ss, op, ',')) {
        op = short_op(op);
        if (op != "quantize" && op != "gather" && op != "global_topk" && op != "combine" && op != "mixed")
          throw std::invalid_argument("unknown op for --only: " + op);
        c.only.push_back(op);
      }
    } else if (a == "--layout-json") {
      std::cout << layout_json() << "\n";
      std::exit(0);
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument: " + a);
    }
  }
  return c;
}

int run(const Config& cfg) {
  std::string why;
  if (!dsv4kv::cuda::device_available(&why)) {
    std::cerr << "dsv4kv_bench: no usable CUDA device (" << why
              << "); this benchmark only runs on a GPU machine (see bench/README.md).\n";
    return 2;
  }
  Info info;
  {
    int dev = 0;
    BENCH_CUDA(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
    info.gpu = prop.name;
    int v = 0;
    BENCH_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    info.sm_count = v;
    BENCH_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev));
    info.l2_bytes = v;
    BENCH_CUDA(cudaDriverGetVersion(&info.driver));
    BENCH_CUDA(cudaRuntimeGetVersion(&info.runtime));
  }
  const int warmup = cfg.quick ? 3 : 10;
  const int reps = cfg.reps > 0 ? cfg.reps : (cfg.quick ? 20 : 100);

  Bench b;
  b.cfg = cfg;
  b.l2_bytes = info.l2_bytes;
  BENCH_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  g_stream = b.stream;
  Timer timer(b.stream, size_t{256} << 20, std::max(reps, 20));

  // The ceiling, in the same process: D2D copies of 1 GiB and 4 GiB; the larger rate is used.
  for (size_t bytes : {size_t{1} << 30, size_t{4} << 30}) {
    try {
      CopyResult r{bytes, 0, 0};
      r.GBps = timer.copy_GBps(bytes, cfg.quick ? 10 : 20, &r.us);
      info.copies.push_back(r);
      std::cerr << "copy " << (bytes >> 20) << " MiB: " << fmt(r.us, 1) << " us, " << fmt(r.GBps, 0)
                << " GB/s (read+write)\n";
    } catch (const std::exception& e) {
      std::cerr << "copy " << (bytes >> 20) << " MiB skipped: " << e.what() << "\n";
      cudaGetLastError();
    }
  }
  for (const auto& r : info.copies) info.ceiling = std::isfinite(info.ceiling) ? std::max(info.ceiling, r.GBps) : r.GBps;
  if (!std::isfinite(info.ceiling)) throw std::runtime_error("could not measure the copy ceiling");

  // Flush-bias probe: an empty kernel and small D2D copies after each kind of flush. With the
  // memset-only flush every timed op pays for write-backs of the memset's dirty lines.
  {
    const int preps = std::max(reps, 20);
    auto probe = [&](const std::string& what, const std::function<void()>& fn) {
      Info::Probe pr;
      pr.what = what;
      pr.dirty_us = timer.time_plain(fn, false, preps).median_us;
      pr.clean_us = timer.time_plain(fn, true, preps).median_us;
      std::cerr << "flush probe " << what << ": memset-only " << fmt(pr.dirty_us, 2) << " us, clean "
                << fmt(pr.clean_us, 2) << " us\n";
      info.probes.push_back(pr);
    };
    probe("empty kernel", [&] { empty_kernel<<<1, 32, 0, b.stream>>>(); });
    info.empty_graph = timer.time_graph(
        [](int, cudaStream_t s) {
          empty_kernel<<<1, 32, 0, s>>>();
          BENCH_CUDA(cudaGetLastError());
        },
        1, warmup, preps);
    std::cerr << "empty kernel, graph replay: " << fmt(info.empty_graph.median_us, 2) << " us\n";
    for (size_t mib : {size_t{1}, size_t{32}}) {
      DeviceBuffer src(mib << 20), dst(mib << 20);
      memset_dev(src.get(), 1, src.bytes());
      probe("D2D copy " + std::to_string(mib) + " MiB", [&] {
        BENCH_CUDA(cudaMemcpyAsync(dst.get(), src.get(), src.bytes(), cudaMemcpyDeviceToDevice, b.stream));
      });
    }
  }

  auto wanted = [&](const std::string& op) {
    return cfg.only.empty() || std::find(cfg.only.begin(), cfg.only.end(), op) != cfg.only.end();
  };
  // Case builders in table order; each is built, timed, verified and freed before the next.
  struct Planned {
    std::string op, key;
    std::function<Case()> build;
  };
  std::vector<Planned> plan;
  auto add = [&](const std::string& op, const std::string& key, std::function<Case()> f) {
    if (!wanted(op)) return;
    if (!cfg.filter.empty() && key.find(cfg.filter) == std::string::npos) return;
    plan.push_back({op, key, std::move(f)});
  };
  for (int64_t n : {1, 64, 4096, 16384, 65536})
    add("quantize", "quantize tokens=" + std::to_string(n) + " stride=" + std::to_string(kAlignedStride),
        [&b, n] { return b.quantize(n, kAlignedStride); });
  add("quantize", "quantize tokens=65536 stride=" + std::to_string(kUnalignedStride),
      [&b] { return b.quantize(65536, kUnalignedStride); });
  const std::pair<int64_t, int64_t> gathers[] = {{1, 128},    {1, 8192},  {1, 32000}, {4, 8192},
                                                  {16, 8192}, {64, 2048}, {256, 128}};
  for (auto [R, T] : gathers)
    add("gather",
        "gather reqs=" + std::to_string(R) + " tokens=" + std::to_string(T) + " stride=" + std::to_string(kAlignedStride),
        [&b, R = R, T = T] { return b.gather(R, T, kAlignedStride); });
  add("gather", "gather reqs=16 tokens=8192 stride=" + std::to_string(kUnalignedStride),
      [&b] { return b.gather(16, 8192, kUnalignedStride); });
  for (int64_t T : {64, 8192})
    for (int64_t k : {512, 2048})
      add("global_topk", "global_topk tokens=" + std::to_string(T) + " topk=" + std::to_string(k),
          [&b, T, k] { return b.global_topk(T, k); });
  for (int64_t k : {512, 2048})
    for (int64_t img : {0, 64})
      add("combine",
          "combine tokens=8192 topk=" + std::to_string(k) + " window=128 image=" + std::to_string(img),
          [&b, k, img] { return b.combine(k, img); });
  add("mixed", "mixed decode=256 prefill=8192 topk=512 window=128", [&b] { return b.mixed(); });
  if (plan.empty()) throw std::invalid_argument("no case matches --only/--filter");

  std::vector<Row> rows;
  DeviceBuffer copy_src(16), copy_dst(16);  // grown to each case's bytes_min / 2 for its copy timing
  bool failed = false, mismatch = false;
  for (auto& [op, key, build] : plan) {
    Row row;
    row.c.op = op;
    row.c.key = key;
    row.c.shape = key;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      row.c = build();
      BENCH_CUDA(cudaStreamSynchronize(b.stream));
      row.stream = timer.time_stream(row.c.run, row.c.copies, warmup, reps);
      try {
        row.graph = timer.time_graph(row.c.run, row.c.copies, warmup, reps);
      } catch (const std::exception& e) {
        row.graph.error = e.what();
        cudaGetLastError();
        std::cerr << "  graph timing failed for " << key << ": " << e.what() << "\n";
      }
      const size_t half = static_cast<size_t>(row.c.bytes_min / 2) & ~size_t{15};
      if (half > 0) {
        if (copy_src.bytes() < half) {
          copy_src = DeviceBuffer(half);
          copy_dst = DeviceBuffer(half);
        }
        uint4* dst = copy_dst.as<uint4>();
        const uint4* src = copy_src.as<uint4>();
        const int64_t words = static_cast<int64_t>(half / 16);
        const unsigned grid = static_cast<unsigned>(
            std::max<int64_t>(1, std::min<int64_t>(int64_t{info.sm_count} * 8, (words + 1023) / 1024)));
        row.copy = timer.time_graph(
            [dst, src, words, grid](int, cudaStream_t s) {
              copy_kernel<<<grid, 256, 0, s>>>(src, dst, words);
              BENCH_CUDA(cudaGetLastError());
            },
            1, warmup, reps);
      }
      if (cfg.verify && row.c.verify) {
        const std::string m = row.c.verify(b.stream);
        row.verify = m.empty() ? "ok" : "MISMATCH: " + m;
        if (!m.empty()) mismatch = true;
      } else {
        row.verify = "not run";
      }
    } catch (const std::exception& e) {
      row.error = e.what();
      failed = true;
      cudaGetLastError();
      BENCH_CUDA(cudaStreamSynchronize(b.stream));
    }
    row.c.run = nullptr;  // free the case's buffers now
    row.c.verify = nullptr;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double us = row.headline_us();
    std::cerr << key << ": " << (row.error.empty() ? "graph " + fmt(row.graph.median_us, 1) + " us, stream " +
                                                         fmt(row.stream.median_us, 1) + " us, " +
                                                         fmt(row.c.bytes_min / (us * 1e-6) / 1e9, 0) + " GB/s, verify " +
                                                         row.verify
                                                   : "ERROR " + row.error)
              << " [" << fmt(secs, 1) << " s]\n";
    rows.push_back(std::move(row));
  }
  b.aligned.reset();
  b.unaligned.reset();

  print_markdown(info, rows);
  if (!cfg.json_path.empty()) write_json(cfg.json_path, info, cfg, rows);
  if (!cfg.csv_path.empty()) write_csv(cfg.csv_path, info, rows);
  BENCH_CUDA(cudaStreamDestroy(b.stream));
  if (mismatch) {
    std::cerr << "dsv4kv_bench: some outputs differ from dsv4kv::reference (see the verify column)\n";
    return 3;
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  try {
    cfg = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "dsv4kv_bench: " << e.what() << "\n";
    usage(std::cerr);
    return 64;
  }
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::cerr << "dsv4kv_bench: " << e.what() << "\n";
    return 1;
  }
}
