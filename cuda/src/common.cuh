/// \file common.cuh
/// \brief Internals shared by the CUDA kernels: error checks, the compile-time
/// dispatch helper, alignment-aware vector memory access and fault counting.
///
/// Not installed: only cuda/src includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "dsv4kv/cuda.hpp"
#include "dsv4kv/spec.hpp"

namespace dsv4kv::cuda::detail {

// ---------------------------------------------------------------------------
// Host-side error handling
// ---------------------------------------------------------------------------

/// Throws dsv4kv::CudaError naming the call, the file and the line when `e` is an error.
inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  throw CudaError(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                  ") at " + file + ":" + std::to_string(line));
}

}  // namespace dsv4kv::cuda::detail

/// Checks one CUDA runtime call.
#define DSV4KV_CUDA_CHECK(call) ::dsv4kv::cuda::detail::check((call), #call, __FILE__, __LINE__)
/// Launches `kernel<<<grid, block, 0, stream>>>(args...)` and checks that launch's own status
/// (cudaLaunchKernelEx returns it, so an earlier unrelated error is not blamed on this launch).
#define DSV4KV_CUDA_LAUNCH(kernel, grid, block, stream, ...)                                            \
  ::dsv4kv::cuda::detail::launch_checked(#kernel, __FILE__, __LINE__, kernel, grid, block, stream, \
                                         __VA_ARGS__)

namespace dsv4kv::cuda::detail {

template <class... KernelArgs, class... Args>
void launch_checked(const char* name, const char* file, int line, void (*kernel)(KernelArgs...), dim3 grid,
                    dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) {
    cudaGetLastError();  // reported through the exception; not left for the caller's next check
    check(e, (std::string("launch of ") + name).c_str(), file, line);
  }
}

// Host launch arithmetic (row and cell counts, grid sizes, strides) uses sizes that validate()
// has bounded: every view's element count and byte extent fit in int64, and the index outputs'
// row widths fit in int32 (spec "Argument contracts", "Integer ranges and extents").

/// Stride of dimension `d` of a validated view as a kernel may multiply it: 0 when the view holds
/// no element or dimension d has a single index. The stride is never needed then, and validate()
/// bounds strides only through the byte extent of a non-empty view, so it may be anything.
inline int64_t kernel_stride(const TensorView& v, int d) { return v.empty() || v.shape[d] <= 1 ? 0 : v.stride[d]; }

/// Largest grid dimension x a launch may use.
inline constexpr int64_t kMaxGridX = 2147483647;

/// What the launch configurations need to know about the current device (an H200: 132
/// multiprocessors of 2,048 threads; Ada and consumer Blackwell parts hold 1,536 per
/// multiprocessor). Read once per device with attribute queries, which are host-side only and so
/// allowed while a stream is being captured (device.cu).
struct DeviceLimits {
  int sms;             ///< multiprocessors
  int threads_per_sm;  ///< resident threads per multiprocessor
};
DeviceLimits device_limits();

/// CTAs of `threads` threads the current device holds at once by its thread limit alone
/// (132 x 16 = 2,112 CTAs of 128 threads on an H200).
inline int64_t cta_slots(int threads) {
  const DeviceLimits d = device_limits();
  const int64_t per_sm = d.threads_per_sm / threads;
  return int64_t{d.sms} * (per_sm > 0 ? per_sm : 1);
}

/// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1 (no overflow for any such a).
inline constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// ---------------------------------------------------------------------------
// Compile-time dispatch
// ---------------------------------------------------------------------------

/// A runtime value turned into a type, for `if constexpr` in kernels.
template <auto V>
using Const = std::integral_constant<decltype(V), V>;

/// Block size 0 in a kernel's template parameter means "any block size, read at run time".
inline constexpr int kGenericBlockSize = 0;

/// Calls `fn(Const<block size>{})` with the block size as a compile-time
/// value: 64 and 128 (the sizes vLLM uses) get their own code, every other
/// size runs the generic code (kGenericBlockSize).
template <class Fn>
void dispatch_block_size(int64_t block_size, Fn&& fn) {
  switch (block_size) {
    case 64: fn(Const<64>{}); return;
    case 128: fn(Const<128>{}); return;
    default: fn(Const<kGenericBlockSize>{}); return;
  }
}

/// Calls `fn(Const<format>{}, Const<block size>{})`: the FP8 format and the
/// block size (as dispatch_block_size) as compile-time values. An unknown
/// format throws dsv4kv::Error naming the operation.
template <class Fn>
void dispatch(const char* op, Fp8Format format, int64_t block_size, Fn&& fn) {
  auto with_size = [&](auto fmt) { dispatch_block_size(block_size, [&](auto bs) { fn(fmt, bs); }); };
  switch (format) {
    case Fp8Format::kE4M3Fn: with_size(Const<Fp8Format::kE4M3Fn>{}); return;
    case Fp8Format::kE4M3Fnuz: with_size(Const<Fp8Format::kE4M3Fnuz>{}); return;
  }
  throw Error(op, "unsupported FP8 format code " + std::to_string(static_cast<int>(format)) +
                      " (supported: e4m3fn, e4m3fnuz)");
}

/// The block size a kernel uses: its compile-time value, or the run-time one for the generic code.
template <int kBs>
__device__ __forceinline__ int64_t block_size_of(int64_t runtime) {
  if constexpr (kBs == kGenericBlockSize) return runtime;
  else return kBs;
}

/// spec::lookup_slot with the block size known at compile time (kBs > 0): the division and the
/// remainder of a non-negative index become a shift and a mask; the table entry is read through the
/// read-only path. Same result and same faults as spec::lookup_slot for every input (the generic
/// block size calls it).
template <int kBs>
__device__ __forceinline__ int32_t lookup_slot_fast(int64_t local, const int32_t* row, int64_t cols, int64_t bs,
                                                    spec::Faults& f) {
  if constexpr (kBs == kGenericBlockSize) {
    return spec::lookup_slot(local, row, cols, bs, f);
  } else {
    if (local < 0) return spec::kNoIndex;
    const uint64_t u = static_cast<uint64_t>(local);
    const uint64_t col = u / static_cast<uint64_t>(kBs);
    if (col >= static_cast<uint64_t>(cols)) {  // cols >= 0
      f.add();
      return spec::kNoIndex;
    }
    const int32_t block = __ldg(row + col);
    if (block < 0) {
      f.add();
      return spec::kNoIndex;
    }
    return spec::to_index(int64_t{block} * kBs + static_cast<int64_t>(u % static_cast<uint64_t>(kBs)), f);
  }
}

/// spec::lookup_slot for a block size of 2^kShift in 32-bit arithmetic, for the lean row kernels:
/// `local >> kShift` is local / bs, and block * bs + local % bs <= INT32_MAX exactly when
/// block < 2^(31 - kShift), so the results and the faults are spec::lookup_slot's for every input.
/// `cols` = 0 stands for an empty row (every lookup through it is a fault).
template <int kShift>
__device__ __forceinline__ int32_t lookup_slot_pow2(int32_t local, const int32_t* row, uint32_t cols, int32_t& faults) {
  if (local < 0) return spec::kNoIndex;
  const uint32_t col = static_cast<uint32_t>(local) >> kShift;
  if (col >= cols) {
    ++faults;
    return spec::kNoIndex;
  }
  const int32_t block = __ldg(row + col);
  if (block < 0 || block >= (int32_t{1} << (31 - kShift))) {
    ++faults;
    return spec::kNoIndex;
  }
  return (block << kShift) | (local & ((1 << kShift) - 1));
}

/// Column count of a table row as the lean kernels take it (rows are far narrower than 2^32).
__host__ __device__ __forceinline__ uint32_t cols32(int64_t cols) {
  return cols < 0 ? 0u : (cols > 0xFFFFFFFFll ? 0xFFFFFFFFu : static_cast<uint32_t>(cols));
}

/// spec::remap_block_span, short-cut when span == bs: (v / bs) * bs + v % bs == v for v >= 0,
/// so the result is to_index(v) (and -1 for v < 0, which to_index also gives, without a fault).
__device__ __forceinline__ int32_t remap_block_span_fast(int64_t v, int64_t bs, int64_t span, bool identity,
                                                         spec::Faults& f) {
  if (identity) return spec::to_index(v, f);
  return spec::remap_block_span(v, bs, span, f);
}

/// Threads per CTA of the index operations.
inline constexpr int kIndexCtaThreads = 128;

// ---------------------------------------------------------------------------
// Fault counting
// ---------------------------------------------------------------------------

/// Adds each active lane's `n` to `*counter` with one atomic per warp (nothing when the sum is 0).
/// Call at a point the lanes that matter reach together.
__device__ __forceinline__ void count_faults(int32_t* counter, int32_t n) {
  if (counter == nullptr) return;
  const unsigned mask = __activemask();
  const int32_t total = static_cast<int32_t>(__reduce_add_sync(mask, static_cast<unsigned>(n)));
  const int leader = __ffs(mask) - 1;
  if (total != 0 && static_cast<int>(threadIdx.x & 31) == leader) atomicAdd(counter, total);
}

// ---------------------------------------------------------------------------
// Alignment-aware vector access
// ---------------------------------------------------------------------------
//
// Cache blocks are only 2-byte aligned when the block stride is not a multiple
// of 16 (e.g. 37,378), and tensors may start anywhere their element size
// allows. Each helper moves 16 or 8 bytes with the widest accesses the address
// allows; the branch depends on the address only, so it is uniform across the
// lanes of a warp that work on one row.

/// Largest power of two (capped at 16) dividing the address.
__device__ __forceinline__ unsigned alignment_of(const void* p) {
  const unsigned low = static_cast<unsigned>(reinterpret_cast<uintptr_t>(p)) & 15u;
  return low == 0 ? 16u : (low & (0u - low));
}

/// 16 bytes from `p` (aligned to `align` >= 2), read through the read-only path.
__device__ __forceinline__ uint4 load16(const uint8_t* p, unsigned align) {
  if (align >= 16) return __ldg(reinterpret_cast<const uint4*>(p));
  uint4 v;
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
  if (align >= 8) {
    const uint2 a = __ldg(reinterpret_cast<const uint2*>(p));
    const uint2 b = __ldg(reinterpret_cast<const uint2*>(p + 8));
    w[0] = a.x; w[1] = a.y; w[2] = b.x; w[3] = b.y;
  } else if (align >= 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = __ldg(reinterpret_cast<const uint32_t*>(p) + i);
  } else {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = uint32_t{__ldg(h + 2 * i)} | (uint32_t{__ldg(h + 2 * i + 1)} << 16);
  }
  return v;
}

/// 8 bytes from `p` (aligned to `align` >= 2), read through the read-only path.
__device__ __forceinline__ uint2 load8(const uint8_t* p, unsigned align) {
  if (align >= 8) return __ldg(reinterpret_cast<const uint2*>(p));
  if (align >= 4) return make_uint2(__ldg(reinterpret_cast<const uint32_t*>(p)), __ldg(reinterpret_cast<const uint32_t*>(p) + 1));
  const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
  return make_uint2(uint32_t{__ldg(h)} | (uint32_t{__ldg(h + 1)} << 16),
                    uint32_t{__ldg(h + 2)} | (uint32_t{__ldg(h + 3)} << 16));
}

/// Stores 8 bytes at `p` (aligned to `align` >= 2).
__device__ __forceinline__ void store8(uint8_t* p, unsigned align, uint2 v) {
  if (align >= 8) {
    *reinterpret_cast<uint2*>(p) = v;
  } else if (align >= 4) {
    reinterpret_cast<uint32_t*>(p)[0] = v.x;
    reinterpret_cast<uint32_t*>(p)[1] = v.y;
  } else {
    unsigned short* h = reinterpret_cast<unsigned short*>(p);
    h[0] = static_cast<unsigned short>(v.x);
    h[1] = static_cast<unsigned short>(v.x >> 16);
    h[2] = static_cast<unsigned short>(v.y);
    h[3] = static_cast<unsigned short>(v.y >> 16);
  }
}

/// Stores 16 bytes at `p` (aligned to `align` >= 2).
__device__ __forceinline__ void store16(uint8_t* p, unsigned align, uint4 v) {
  if (align >= 16) {
    *reinterpret_cast<uint4*>(p) = v;
    return;
  }
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  if (align >= 8) {
    reinterpret_cast<uint2*>(p)[0] = make_uint2(w[0], w[1]);
    reinterpret_cast<uint2*>(p)[1] = make_uint2(w[2], w[3]);
  } else if (align >= 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) reinterpret_cast<uint32_t*>(p)[i] = w[i];
  } else {
    unsigned short* h = reinterpret_cast<unsigned short*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      h[2 * i] = static_cast<unsigned short>(w[i]);
      h[2 * i + 1] = static_cast<unsigned short>(w[i] >> 16);
    }
  }
}

/// The i-th bf16 (or 16-bit) half of a 16-byte vector.
__device__ __forceinline__ uint16_t half_of(const uint4& v, int i) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  return static_cast<uint16_t>(w[i >> 1] >> ((i & 1) * 16));
}

/// The i-th byte of a 16-byte vector.
__device__ __forceinline__ uint8_t byte_of(const uint4& v, int i) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  return static_cast<uint8_t>(w[i >> 2] >> ((i & 3) * 8));
}

/// The raw inputs of one cell of an int32 row of `width` columns: columns c..c+3 with kVec (one
/// int4 load when all four exist; the row must be 16-byte aligned and c a multiple of 4), else
/// column c alone; -1 for columns past the row.
template <bool kVec>
__device__ __forceinline__ void load_row_cell(const int32_t* row, int64_t width, int64_t c, int32_t (&x)[4]) {
  if (kVec && c + 3 < width) {
    const int4 v = __ldg(reinterpret_cast<const int4*>(row + c));
    x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < (kVec ? 4 : 1); ++j) x[j] = c + j < width ? __ldg(row + c + j) : -1;
  }
}

/// True when `p` is 16-byte aligned and rows `stride` int32 apart stay so.
inline bool rows_vectorizable(const void* p, int64_t stride) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride % 4 == 0;
}

}  // namespace dsv4kv::cuda::detail
