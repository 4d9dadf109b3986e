/// \file vector_memory.cuh
/// \brief Global memory access by vectors: alignment-aware 8- and 16-byte loads and stores, predicated read-only loads,
/// byte and half extraction.
#pragma once

#include "backend.cuh"

namespace dsv4kv::cuda::detail {

// Cache blocks are only 2-byte aligned when the block stride is not a multiple of 16 (e.g. 37,378), and tensors may
// start anywhere their element size allows. Each helper moves 16 or 8 bytes with the widest accesses the address
// allows; the branch depends on the address only, so it is uniform across the lanes of a warp that work on one row.

/// `ok ? *p : otherwise` through the read-only path, as one predicated load: nothing is read when `ok` is false, so `p`
/// may then lie outside its array (Pow2Lookup passes `row + col` for a column that may be past the row: computed, never
/// read). Why not `ok ? __ldg(p) : otherwise`: nvcc compiles that to a branch around the load with its own
/// reconvergence (BSSY/BSYNC), about five more instructions per lookup (global_topk 64 x 2,048 6.1 -> 5.7 us, see
/// bench/RESULTS.md#predicated-table-loads).
__device__ __forceinline__ int32_t ldg_if(bool ok, const int32_t* p, int32_t otherwise) {
  int32_t v = otherwise;
  asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\t@q ld.global.nc.b32 %0, [%1];\n\t}"
               : "+r"(v)
               : "l"(p), "r"(static_cast<uint32_t>(ok)));
  return v;
}

/// `p`, computed here once: an empty asm statement hides how it was computed, so the compiler cannot re-derive it at
/// every use. Why: for a block-table row `base + r * stride` read under per-column branches, the compiler recomputed
/// the 64-bit product and sum in every column's block (7 instructions per lookup, SASS sm_90a).
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
    w[0] = a.x;
    w[1] = a.y;
    w[2] = b.x;
    w[3] = b.y;
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
  if (align >= 4)
    return make_uint2(__ldg(reinterpret_cast<const uint32_t*>(p)), __ldg(reinterpret_cast<const uint32_t*>(p) + 1));
  const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
  return make_uint2(uint32_t{__ldg(h)} | (uint32_t{__ldg(h + 1)} << 16),
                    uint32_t{__ldg(h + 2)} | (uint32_t{__ldg(h + 3)} << 16));
}

/// Stores 8 bytes at `p` (aligned to `align` >= 2; when `align` is 2, `p` is not 4-byte aligned, as alignment_of gives
/// it): one 8-byte store, two 4-byte ones, or a 2-, a 4- and a 2-byte store (p + 2 is then 4-byte aligned). Only the 8
/// bytes are written.
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

/// One 16-byte store at a 16-byte aligned global `p`, in inline PTX: the compiler may not split it, as it split plain
/// C++ stores into narrower ones (see bench/RESULTS.md#ptx-16-byte-stores).
__device__ __forceinline__ void store16_global(uint8_t* p, const uint4& v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
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

/// The 4 bytes at byte 4i + sh / 8 of the 32-bit words `w` of a stage (sh = 0 or 16): two aligned 4-byte reads joined
/// by a funnel shift. A caller reading several words at one misalignment computes i and sh once (the gather's unstage:
/// its offsets are multiples of 4 past the row's).
__device__ __forceinline__ uint32_t staged_word_at(const uint32_t* w, int i, unsigned sh) {
  return __funnelshift_r(w[i], w[i + 1], sh);
}

/// The i-th bf16 (or 16-bit) half of a 16-byte vector.
__device__ __forceinline__ uint16_t half_of(const uint4& v, int i) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
  return static_cast<uint16_t>(w[i >> 1] >> ((i & 1) * 16));
}

}  // namespace dsv4kv::cuda::detail
