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
/// Checks the launch that precedes it (configuration errors surface through cudaGetLastError).
#define DSV4KV_CUDA_CHECK_LAUNCH(kernel_name) \
  ::dsv4kv::cuda::detail::check(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)

namespace dsv4kv::cuda::detail {

/// Largest grid dimension x a launch may use.
inline constexpr int64_t kMaxGridX = 2147483647;

/// ceil(a / b) for a >= 0, b > 0.
inline constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

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

/// Threads per CTA of the index operations.
inline constexpr int kIndexCtaThreads = 256;

/// Calls `fn(Const<G>{})` with the number of threads G (32, 64, 128 or 256)
/// that share one output row of `width` int32 columns: about one 4-column
/// vector per thread, at least a warp, at most a CTA.
template <class Fn>
void dispatch_row_group(int64_t width, Fn&& fn) {
  const int64_t vecs = ceil_div(width, 4);
  if (vecs <= 32) fn(Const<32>{});
  else if (vecs <= 64) fn(Const<64>{});
  else if (vecs <= 128) fn(Const<128>{});
  else fn(Const<256>{});
}

/// The block size a kernel uses: its compile-time value, or the run-time one for the generic code.
template <int kBs>
__device__ __forceinline__ int64_t block_size_of(int64_t runtime) {
  if constexpr (kBs == kGenericBlockSize) return runtime;
  else return kBs;
}

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

// ---------------------------------------------------------------------------
// Index rows: G threads write one row of int32 columns
// ---------------------------------------------------------------------------

/// Writes columns [0, width) of one output row, `value(c, x)` giving column c,
/// where x = in[c] for c < readable (the row's input entry, loaded here) and -1
/// otherwise. With `vec` (output and input rows 16-byte aligned) thread `tid`
/// of the G handles 4 adjacent columns per step with int4 loads and stores;
/// otherwise the G threads take consecutive columns (coalesced scalar access).
template <int G, class F>
__device__ __forceinline__ void write_row(int32_t* out, int64_t width, bool vec, const int32_t* in,
                                          int64_t readable, int tid, F&& value) {
  if (vec) {
    const int64_t width4 = width & ~int64_t{3};
    for (int64_t c = 4 * int64_t{tid}; c < width4; c += 4 * G) {
      int32_t x[4] = {-1, -1, -1, -1};
      if (c + 3 < readable) {
        const int4 v = __ldg(reinterpret_cast<const int4*>(in + c));
        x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (c + j < readable) x[j] = __ldg(in + c + j);
      }
      *reinterpret_cast<int4*>(out + c) =
          make_int4(value(c, x[0]), value(c + 1, x[1]), value(c + 2, x[2]), value(c + 3, x[3]));
    }
    for (int64_t c = width4 + tid; c < width; c += G) out[c] = value(c, c < readable ? __ldg(in + c) : -1);
  } else {
    for (int64_t c = tid; c < width; c += G) out[c] = value(c, c < readable ? __ldg(in + c) : -1);
  }
}

/// Sum of `v` over the G threads of each row group. Every thread of the CTA
/// must call it (it may synchronize the CTA); `scratch` holds one int per group
/// and must be zero and visible to the CTA before the call.
template <int G>
__device__ __forceinline__ int32_t group_sum(int32_t v, int32_t* scratch) {
  const int32_t warp_sum = static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(v)));
  if constexpr (G == 32) {
    return warp_sum;
  } else {
    if ((threadIdx.x & 31) == 0) atomicAdd_block(&scratch[threadIdx.x / G], warp_sum);
    __syncthreads();
    return scratch[threadIdx.x / G];
  }
}

/// True when `p` is 16-byte aligned and rows `stride` int32 apart stay so.
inline bool rows_vectorizable(const void* p, int64_t stride) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride % 4 == 0;
}

}  // namespace dsv4kv::cuda::detail
