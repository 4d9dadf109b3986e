/// \file common.cuh
/// \brief Internals shared by the CUDA kernels: error checks, the compile-time
/// dispatch helper, alignment-aware vector memory access and fault counting.
///
/// Not installed: only cuda/src includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dsv4kv/cuda.hpp"
#include "dsv4kv/cuda/check.hpp"  // check() and DSV4KV_CUDA_CHECK, shared with the harness
#include "dsv4kv/spec.hpp"

namespace dsv4kv::cuda::detail {

/// The spec, as every kernel file names it.
namespace sp = ::dsv4kv::spec;

}  // namespace dsv4kv::cuda::detail

/// Launches `kernel<<<grid, block, 0, stream>>>(args...)`, with programmatic dependent launch when
/// it is on and usable (launch_checked), and checks that launch's own status (cudaLaunchKernelEx
/// returns it, so an earlier unrelated error is not blamed on this launch). The one launch path of
/// the backend: every kernel goes through it, and every kernel starts with grid_dependency_begin().
#define DSV4KV_CUDA_LAUNCH(kernel, grid, block, stream, ...)                                            \
  ::dsv4kv::cuda::detail::launch_checked(#kernel, __FILE__, __LINE__, kernel, grid, block, stream, \
                                         __VA_ARGS__)

namespace dsv4kv::cuda::detail {

/// True when the current device gets PDL launches: compute capability >= 9.0 and the library's
/// kernel images there carry griddepcontrol.wait (device.cu says how that is checked). Cached per
/// device; host-side queries only, so callable during stream capture.
bool pdl_usable();

/// Whether this launch uses PDL: the calling thread's setting (dsv4kv::cuda::programmatic_launch),
/// then the device check. Off costs one thread-local and one atomic read.
inline bool use_pdl() { return programmatic_launch() && pdl_usable(); }

template <class... KernelArgs, class... Args>
void launch_checked(const char* name, const char* file, int line, void (*kernel)(KernelArgs...), dim3 grid,
                    dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  if (use_pdl()) {
    // The kernel may start before the previous kernel on the stream completes; its
    // grid_dependency_begin() waits for that completion before any memory access.
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

/// What every kernel of the backend does first, before it reads or writes any global memory (only
/// hints may come before it: rows_kernel's PDL launches of few rows first ask L2 to prefetch their
/// inputs, see prefetch_l2 below; scripts/check_fatbin.sh --pdl checks the SASS): the two halves of
/// programmatic dependent launch (PTX ISA, "griddepcontrol").
///
///  * `griddepcontrol.wait` "causes the executing thread to wait until all prerequisite grids in
///    flight have completed and all the memory operations from the prerequisite grids are
///    performed and made visible to the current grid". Launched without PDL there is no
///    prerequisite grid in flight (stream order already waited) and it returns at once. Every
///    thread waits, before any load (inputs written by the previous kernel) and any store (a
///    buffer the previous kernel may still read: write-after-read); and because this grid cannot
///    complete before its own wait returns, a kernel launched after it that waits for it also
///    waits, transitively, for everything before it.
///  * `griddepcontrol.launch_dependents` lets the next PDL-launched kernel be scheduled once every
///    CTA of this grid has issued it or exited. It "only enables scheduling of the secondary
///    kernel" (CUDA runtime API, cudaTriggerProgrammaticLaunchCompletion) and gives no memory
///    guarantee, so issuing it at the start is safe: the dependent's own wait still waits for this
///    grid's completion and memory flush. It comes after the wait so that at most one kernel
///    ahead sits in its wait (occupying CTA slots) while the chain's earlier work still runs.
///
/// Both exist from sm_90; the code for older targets of the fat build (sm_89) has neither and is
/// never launched with PDL (pdl_usable() checks the loaded image).
__device__ __forceinline__ void grid_dependency_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// The most bytes prefetch_l2_range() asks for at once (a longer range is cut there): an index
/// row of 4,096 int32.
inline constexpr int64_t kPrefetchMaxBytes = 16384;

/// Hints that the bytes at `p` will be read soon: the cache line holding them is fetched into L2.
///
/// Safe before grid_dependency_begin(), on bytes the previous kernel may still write: L2 is the
/// device's point of coherence for global memory, so a line fetched into it early is updated by
/// that kernel's later stores, and a load after the wait reads the stored value. A prefetch
/// changes no value that any load returns. Used by PDL launches only (rows.cuh says when): the
/// latency of the first DRAM reads then overlaps the previous kernel's tail.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

/// prefetch_l2() for `bytes` bytes from `p` (at most kPrefetchMaxBytes), by one bulk request
/// (cp.async.bulk.prefetch.L2, which takes whole 16-byte granules: the range is widened to the
/// granules holding its first and last byte, which lie in the lines of those bytes).
__device__ __forceinline__ void prefetch_l2_range(const void* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes <= 0) return;
  if (bytes > kPrefetchMaxBytes) bytes = kPrefetchMaxBytes;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{15};
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes) + 15) & ~uintptr_t{15};
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(first), "r"(static_cast<uint32_t>(end - first)));
#endif
}

// Host launch arithmetic (row and cell counts, grid sizes, strides) uses sizes that validate()
// has bounded: every view's element count and byte extent fit in int64, and the index outputs'
// row widths fit in int32 (spec "Argument contracts", "Integer ranges and extents").

/// True when `base` is 16-byte aligned and so is every row `row_bytes` after it: the test every
/// launch makes before it picks code with 16-byte accesses and no address tests. `row_bytes` is a
/// validated view's stride in bytes (the extent rule keeps it inside int64) or a cache block stride.
inline bool rows_aligned16(const void* base, int64_t row_bytes) {
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_bytes % 16 == 0;
}

/// Stride of dimension `d` of a validated view as a kernel may multiply it: 0 when the view holds
/// no element or dimension d has a single index. The stride is never needed then, and validate()
/// bounds strides only through the byte extent of a non-empty view, so it may be anything.
inline int64_t kernel_stride(const TensorView& v, int d) { return v.empty() || v.shape[d] <= 1 ? 0 : v.stride[d]; }

/// The visibility arrays (left, right) as the index kernels read them: null unless they take
/// effect (spec::visibility_in_effect: passed, and the rows reserve image columns).
inline std::pair<const int32_t*, const int32_t*> visibility_rows(const TensorView& left, const TensorView& right,
                                                                 int64_t max_image_tokens) {
  if (!sp::visibility_in_effect(left.present(), max_image_tokens)) return {nullptr, nullptr};
  return {left.as<const int32_t>(), right.as<const int32_t>()};
}

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

/// One compile-time choice of a launch: `value` is one of `Vs` (the caller maps it there).
template <auto... Vs>
struct OneOf {
  std::common_type_t<decltype(Vs)...> value;
};

/// The one dispatch idiom of the backend: calls `fn(Const<v1>{}, Const<v2>{}, ...)` with the
/// run-time value of every choice as a compile-time value, so that each combination gets its own
/// kernel instantiation. Each choice's value must be one of its alternatives (nothing is called
/// otherwise; the choice helpers below guarantee it).
template <class Fn>
void dispatch(Fn&& fn) {
  fn();
}
template <class Fn, auto... Vs, class... Rest>
void dispatch(Fn&& fn, OneOf<Vs...> first, Rest... rest);
/// dispatch with the first choice fixed to V.
template <auto V, class Fn, class... Rest>
void dispatch_with(Fn& fn, Rest... rest) {
  dispatch([&](auto... more) { fn(Const<V>{}, more...); }, rest...);
}
template <class Fn, auto... Vs, class... Rest>
void dispatch(Fn&& fn, OneOf<Vs...> first, Rest... rest) {
  ((first.value == Vs ? (dispatch_with<Vs>(fn, rest...), true) : false) || ...);
}

/// Block size 0 in a kernel's template parameter means "any block size, read at run time".
inline constexpr int kGenericBlockSize = 0;

/// The block size as a choice: 64 and 128 (the sizes vLLM uses) get their own code, every other
/// size runs the generic code (kGenericBlockSize).
inline OneOf<64, 128, kGenericBlockSize> block_size_choice(int64_t block_size) {
  return {block_size == 64 || block_size == 128 ? static_cast<int>(block_size) : kGenericBlockSize};
}

/// The FP8 format as a choice; an unknown format throws dsv4kv::Error naming the operation.
inline OneOf<Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz> format_choice(const char* op, Fp8Format format) {
  if (format != Fp8Format::kE4M3Fn && format != Fp8Format::kE4M3Fnuz)
    throw Error(op, "unsupported FP8 format code " + std::to_string(static_cast<int>(format)) +
                        " (supported: e4m3fn, e4m3fnuz)");
  return {format};
}

/// A flag as a choice.
inline OneOf<false, true> flag_choice(bool b) { return {b}; }

/// The block size a kernel uses: its compile-time value, or the run-time one for the generic code.
template <int kBs>
__device__ __forceinline__ int64_t block_size_of(int64_t runtime) {
  if constexpr (kBs == kGenericBlockSize) return runtime;
  else return kBs;
}

// ---------------------------------------------------------------------------
// Fault counting
// ---------------------------------------------------------------------------

// Every kernel counts its faults in an spec::Faults per thread and reports them through
// count_faults: a sum over the lanes of the warp that call it together, then at most one
// atomicAdd per warp (none when the sum is 0). No block barrier: warps that finish early leave
// without waiting for the rest of the CTA (measured on the H200, 2026-12-01: a per-CTA reduction
// with a barrier made quantize and gather 1-8 % slower).

/// Most warps a CTA of this backend has (1,024 threads).
inline constexpr int kMaxWarps = 32;

/// Threads one multiprocessor holds on the target being compiled: 1,536 on sm_89 and sm_120,
/// 2,048 on sm_90 and sm_100 (and in host code). For `__launch_bounds__` occupancy hints, which
/// ptxas ignores, with a warning, when they ask for more.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
inline constexpr int kThreadsPerSm = 1536;
#else
inline constexpr int kThreadsPerSm = 2048;
#endif

/// Sum of `v` over the 32 lanes of the warp (all lanes must call).
__device__ __forceinline__ int32_t warp_sum(int32_t v) {
  return static_cast<int32_t>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(v)));
}

/// Adds `n` of every lane that calls it to `*counter` (nothing when `counter` is null): the lanes
/// of a warp active at the call sum their `n` (__activemask: a lane that reaches the call apart
/// from the others forms its own group, so every lane is counted exactly once whatever the
/// divergence) and the group's lowest lane adds a nonzero sum with one atomic. Needs no other
/// thread of the CTA: callable from diverged code and after other warps have exited.
__device__ __forceinline__ void count_faults(int32_t* counter, int32_t n) {
  if (counter == nullptr) return;
  const unsigned mask = __activemask();
  const int32_t total = static_cast<int32_t>(__reduce_add_sync(mask, static_cast<unsigned>(n)));
  if (total != 0 && static_cast<int>(threadIdx.x & 31) == __ffs(static_cast<int>(mask)) - 1) atomicAdd(counter, total);
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

/// `ok ? *p : otherwise` through the read-only path, as one predicated load: nothing is read when
/// `ok` is false, so `p` may then lie outside its array (Pow2Lookup passes `row + col` for a column
/// that may be past the row: computed, never read).
///
/// Why not `ok ? __ldg(p) : otherwise`: nvcc compiles that to a branch around the load with its
/// own reconvergence (BSSY/BSYNC), about five more instructions per lookup (SASS, sm_90a, of
/// Pow2Lookup::slot4: mixed's warp launch 3,928 -> 3,656 instructions, global_topk's 64-thread
/// launch 416 -> 392). Measured on the H200 (2026-12-03, bench/RESULTS.md twenty-second session
/// call 2, four alternating rounds): global_topk 64 x 2,048 6.0-6.2 -> 5.6-5.9 us, 8,192 x 2,048
/// 35.0-35.3 -> 34.7-34.9, 8,192 x 512 12.6-12.7 -> 12.5-12.6; the decode chain with PDL 8.9-9.1 ->
/// 8.6-8.8; mixed unchanged. Passing the row and the column instead, the address formed in integer
/// arithmetic, compiled to the same instruction counts scheduled differently and made the decode
/// chain 0.3-0.5 us slower (call 5).
__device__ __forceinline__ int32_t ldg_if(bool ok, const int32_t* p, int32_t otherwise) {
  int32_t v = otherwise;
  asm volatile(
      "{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\t@q ld.global.nc.b32 %0, [%1];\n\t}"
      : "+r"(v)
      : "l"(p), "r"(static_cast<uint32_t>(ok)));
  return v;
}

/// `p`, computed here once: an empty asm statement hides how it was computed, so the compiler
/// cannot re-derive it at every use. Why: for a block-table row `base + r * stride` read under
/// per-column branches, the compiler recomputed the 64-bit product and sum in every column's
/// block (7 instructions per lookup; SASS of global_topk's lean launch, 2026-12-01).
template <class T>
__device__ __forceinline__ T* computed_once(T* p) {
  asm volatile("" : "+l"(p));
  return p;
}

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

/// Stores 8 bytes at `p` (aligned to `align` >= 2; when `align` is 2, `p` is not 4-byte aligned,
/// as alignment_of gives it): one 8-byte store, two 4-byte ones, or a 2-, a 4- and a 2-byte store
/// (p + 2 is then 4-byte aligned). Only the 8 bytes are written.
__device__ __forceinline__ void store8(uint8_t* p, unsigned align, uint2 v) {
  if (align >= 8) {
    *reinterpret_cast<uint2*>(p) = v;
  } else if (align >= 4) {
    reinterpret_cast<uint32_t*>(p)[0] = v.x;
    reinterpret_cast<uint32_t*>(p)[1] = v.y;
  } else {
    *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(v.x);
    *reinterpret_cast<uint32_t*>(p + 2) = __funnelshift_r(v.x, v.y, 16);
    *reinterpret_cast<unsigned short*>(p + 6) = static_cast<unsigned short>(v.y >> 16);
  }
}

/// One 16-byte store at a 16-byte aligned global `p`, in inline PTX: the compiler may not split it.
/// As plain C++ it was split twice: ptxas merged the quantize head lane's partial stores of the
/// same chunk with the other lanes' 16-byte store into narrower stores on every lane
/// (bench/RESULTS.md, 2026-12-02, sixteenth session, call 5), and the aligned dense gather's
/// first half row came out of nvcc as four 4-byte stores (store_token_row, token_row.cuh).
__device__ __forceinline__ void store16_global(uint8_t* p, const uint4& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/// Stores 16 bytes at global `p` (aligned to `align` >= 2); aligned, one store16_global.
__device__ __forceinline__ void store16(uint8_t* p, unsigned align, uint4 v) {
  if (align >= 16) {
    store16_global(p, v);
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

/// Shared-memory stage of a token's data record (the dense gather's realigned read): the aligned
/// 16-byte chunks a record of kTokenDataBytes may span
/// when it starts at any even offset of its first chunk (for an aligned record, its chunks and the
/// next one, which staged_word_at may read one word of).
constexpr int kRowChunks = sp::kTokenDataBytes / 16 + 1;

/// The 4 bytes at byte 4i + sh / 8 of the 32-bit words `w` of a stage (sh = 0 or 16): two aligned
/// 4-byte reads joined by a funnel shift. A caller reading several words at one misalignment
/// computes i and sh once (the gather's unstage: its offsets are multiples of 4 past the row's).
__device__ __forceinline__ uint32_t staged_word_at(const uint32_t* w, int i, unsigned sh) {
  return __funnelshift_r(w[i], w[i + 1], sh);
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

}  // namespace dsv4kv::cuda::detail
