/// \file records.cu
/// \brief The V4.1 records (528-byte MXFP8, 288-byte FP4, 68-byte FP4 indexer key) on the GPU.
///
/// A token is spread over the lanes of a warp, 8 values ("a piece") at a time: lane l of the token's kLanes lanes holds
/// values [8 (p kLanes + l), +8) of piece p, so that each piece's 16-byte bf16 access and its 8 or 4 value bytes are
/// coalesced over the lanes (a 512-value row: 32 lanes; the 128-value indexer key: 8 lanes, 4 tokens per warp). The
/// lanes of one scale group combine their maxima by shuffles. The FP4 quantizes give lane l values [16 l, +16) instead:
/// a 288-byte scale group or half an indexer one, whose scale and reciprocal the lane derives once. Scales come from
/// the spec's group functions (spec/record_numerics.hpp), the reference's own arithmetic; values from them too, or from
/// faster arithmetic proven equal to them: the 584-byte record's hardware conversions for the MXFP8 record's finite
/// groups (fp8.cuh), FP4 decode tables, f16 roundings, threshold compares and bf16 products checked by fp4_test.
/// Row-level faults (a skipped slot, request or row; a NaN scale byte) are counted once per token, by its first lane,
/// as the reference counts them. How the spread and the FP4 arithmetic were chosen:
/// bench/RESULTS.md#records-warp-spread, #records-packed-pairs, #records-indexer-spread, #records-fp4-lane-group and
/// #records-fp4-scaled-codes.

#include <cstring>
#include <type_traits>

#include "device_limits.cuh"
#include "dispatch.cuh"
#include "fp4.cuh"
#include "fault_count.cuh"
#include "fp8.cuh"
#include "host_arith.cuh"
#include "launch.cuh"
#include "records.cuh"

namespace dsv4kv::cuda::detail {
namespace {

/// Warps per CTA.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
/// Resident CTAs the quantize kernel is built for, all the threads an SM holds: 32 registers where that is 2,048
/// (level with the uncapped build: bench/RESULTS.md#records-packed-pairs), 40 where it is 1,536.
constexpr int kQuantizeCtasPerSm = kThreadsPerSm / kThreads;
/// The FP4 quantizes' resident CTAs: the 288-byte record's three quarters of that, 40 registers on sm_90, where 32
/// spill 4-8 bytes (bench/RESULTS.md#records-fp4-lane-group); the indexer key's all of them, 32 registers on sm_90,
/// where its aligned instances spill 4 bytes on the path of lanes holding inf or NaN only (8 bytes, read once a token,
/// for run-time block sizes; bench/RESULTS.md#records-indexer-occupancy).
template <Record R>
constexpr int kFp4QuantizeCtasPerSm = R == Record::kMxfp4Indexer ? kQuantizeCtasPerSm : kQuantizeCtasPerSm * 3 / 4;
/// Grid cap of the grid-stride loops (enough CTAs to fill any current GPU many times over).
constexpr int64_t kMaxCtas = int64_t{1} << 20;

/// How record R's row is spread over lanes (see the file comment).
template <Record R>
struct Spread {
  static constexpr sp::RecordLayout rec = sp::record_layout(R);
  static constexpr int kPieceValues = 8;
  /// Two pieces a lane for every record: the indexer key's per-token work (slot, address, scale, fault count) is
  /// shared by 16 values, not 8 (bench/RESULTS.md#records-indexer-spread).
  static constexpr int kPieces = 2;
  static constexpr int kLanes = rec.head_dim / (kPieces * kPieceValues);  // lanes per token
  static constexpr int kSlots = 32 / kLanes;                              // tokens per warp
  static constexpr bool kFp4 = rec.values == sp::ValueCode::kE2M1;
  static constexpr int kPieceBytes = kFp4 ? kPieceValues / 2 : kPieceValues;  // value bytes of a piece
  static constexpr int kGroupLanes = rec.group / kPieceValues;                // lanes of one scale group
  /// Rows each lane group of a sparse gather decodes at once, their loads in flight together: 2 of 1 KB, or 8 of the
  /// indexer's 256 B.
  static constexpr int kRows = kSlots == 1 ? 2 : 8;
  /// The dense gather's: 4 of the indexer's, for twice the CTAs (bench/RESULTS.md#records-indexer-gather-rows).
  static constexpr int kGatherRows = kSlots == 1 ? 2 : 4;
  static_assert(kLanes * kSlots == 32 && kLanes * kPieces * kPieceValues == rec.head_dim);
  static_assert(rec.quant_dim == rec.head_dim && rec.group % kPieceValues == 0 && kLanes % kGroupLanes == 0);
  static_assert(rec.data_bytes() % 16 == 0, "a token's data stays 16-byte aligned in an aligned block");

  /// First value of piece p of the token's lane l.
  __device__ static constexpr int first_value(int p, int l) { return (p * kLanes + l) * kPieceValues; }
};

/// Loads kBytes (8 or 4) value bytes: one access when kAligned (the address is then aligned to it), bytes otherwise.
template <bool kAligned, int kBytes>
__device__ __forceinline__ uint2 load_codes(const uint8_t* src) {
  uint2 v{0, 0};
  if constexpr (kAligned && kBytes == 8) {
    v = __ldg(reinterpret_cast<const uint2*>(src));
  } else if constexpr (kAligned && kBytes == 4) {
    v.x = __ldg(reinterpret_cast<const uint32_t*>(src));
  } else {
    uint8_t b[8] = {};
#pragma unroll
    for (int i = 0; i < kBytes; ++i) b[i] = __ldg(src + i);
    memcpy(&v, b, 8);
  }
  return v;
}

/// Stores kBytes (8 or 4) value bytes, as load_codes reads them.
template <bool kAligned, int kBytes>
__device__ __forceinline__ void store_codes(uint8_t* dst, uint2 v) {
  if constexpr (kAligned && kBytes == 8) {
    *reinterpret_cast<uint2*>(dst) = v;
  } else if constexpr (kAligned && kBytes == 4) {
    *reinterpret_cast<uint32_t*>(dst) = v.x;
  } else {
    uint8_t b[8];
    memcpy(b, &v, 8);
#pragma unroll
    for (int i = 0; i < kBytes; ++i) dst[i] = b[i];
  }
}

/// 8 bf16 values (16 bytes) from global memory: one 16-byte access when kAligned, 2-byte accesses otherwise.
template <bool kAligned>
__device__ __forceinline__ uint4 load_bf16x8(const uint16_t* src) {
  uint4 v;
  if constexpr (kAligned) {
    v = __ldg(reinterpret_cast<const uint4*>(src));
  } else {
    uint16_t h[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) h[i] = __ldg(src + i);
    memcpy(&v, h, 16);
  }
  return v;
}

template <bool kAligned>
__device__ __forceinline__ void store_bf16x8(uint16_t* dst, uint4 v) {
  if constexpr (kAligned) {
    *reinterpret_cast<uint4*>(dst) = v;
  } else {
    uint16_t h[8];
    memcpy(h, &v, 16);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = h[i];
  }
}

/// Two bf16 values (a word) times `scale`, as bf16: spec::dequantize_group_value's bf16_rne(fl32(value * scale)), the
/// product correctly rounded and never flushed, the conversion IEEE RNE (fp8.cuh); a NaN scale gives 0x7FFF.
__device__ __forceinline__ uint32_t scale_bf16x2(uint32_t v, float scale) {
  return bf16x2_from_f32(__fmul_rn(__uint_as_float(v << 16), scale),
                         __fmul_rn(__uint_as_float(v & 0xFFFF0000u), scale));
}

/// One piece decoded: 8 values of one group from their value bytes and the group's scale byte `s`, the bits of
/// spec::dequantize_group_value. MXFP8: the 584-byte record's exact hardware path. FP4: the e2m1 values as bf16
/// (fp4.cuh) times the scale. The 288-byte record multiplies in bf16: an e2m1 value times a non-NaN e4m3 scale is
/// zero or a normal bf16 value (Fp4.Nvfp4ProductsAreExactBf16Values), so the bf16 product is the spec's rounded fp32
/// one. The indexer key's 2^(s-127) reaches fp32's subnormals and overflow, so it multiplies in fp32 and rounds
/// (CudaSmoke.RecordDequantizeEveryScaleAndCode checks every value byte under every scale byte against the reference).
template <Record R>
__device__ __forceinline__ uint4 decode_piece(uint2 codes, uint8_t s) {
  if constexpr (R == Record::kMxfp8DsMla) {
    return dequantize8<Fp8Format::kE4M3Fn>(codes, s);
  } else {
    uint32_t w[4];
    e2m1x4_to_bf16(codes.x & 0xFFFFu, w[0], w[1]);
    e2m1x4_to_bf16(codes.x >> 16, w[2], w[3]);
    float scale;
    if constexpr (R == Record::kNvfp4DsMla) {
      scale = f32x2_from_e4m3x2(s).x;  // exact, and exact again as bf16 (4 significant bits)
      const uint32_t scale2 = bf16x2_from_f32(scale, scale);
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = mul_exact_bf16x2(w[j], scale2);
    } else {
      scale = s == 255 ? __uint_as_float(0x7FC00000u) : sp::exp2i(static_cast<int>(s) - sp::kScaleBias);
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = scale_bf16x2(w[j], scale);
    }
    if (scale != scale) {
#pragma unroll
      for (int j = 0; j < 4; ++j) w[j] = canonical_nan_bf16x2(w[j]);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// A token's pieces as one lane holds them: the value bytes and the scale byte of each piece.
template <Record R>
struct LanePieces {
  uint2 codes[Spread<R>::kPieces];
  uint8_t scale[Spread<R>::kPieces];
};

/// Loads lane `l`'s pieces of the token at `pos` of `block`.
template <Record R, bool kAligned>
__device__ __forceinline__ LanePieces<R> load_pieces(const uint8_t* block, int64_t B, int64_t pos, int l) {
  using S = Spread<R>;
  constexpr sp::RecordLayout rec = S::rec;
  LanePieces<R> lp;
  const uint8_t* data = block + rec.data_offset(pos);
#pragma unroll
  for (int p = 0; p < S::kPieces; ++p) {
    const int v = S::first_value(p, l);
    lp.codes[p] = load_codes<kAligned, S::kPieceBytes>(data + (S::kFp4 ? v / 2 : v));
    lp.scale[p] = __ldg(block + rec.scale_offset(B, pos, v / rec.group));
  }
  return lp;
}

/// Decodes and stores lane `l`'s pieces to the bf16 row `row`.
template <Record R, bool kAligned>
__device__ __forceinline__ void store_pieces(const LanePieces<R>& lp, uint16_t* row, int l) {
  using S = Spread<R>;
#pragma unroll
  for (int p = 0; p < S::kPieces; ++p)
    store_bf16x8<kAligned>(row + S::first_value(p, l), decode_piece<R>(lp.codes[p], lp.scale[p]));
}

/// Whether a scale byte of the lane's token breaks the record's reading rule (spec::scale_is_nan): every scale is
/// some lane's, so the token's lanes vote. `present`: the token was loaded (the same in all its lanes). Every lane of
/// the warp must call.
template <Record R>
__device__ __forceinline__ bool token_has_nan_scale(const LanePieces<R>& lp, bool present) {
  using S = Spread<R>;
  if constexpr (R == Record::kMxfp8DsMla) {
    return false;  // every UE8M0 byte reads (255 is the infinite scale a group holding inf gets)
  } else {
    bool nan = false;
#pragma unroll
    for (int p = 0; p < S::kPieces; ++p) nan |= present && sp::scale_is_nan(R, lp.scale[p]);
    const unsigned vote = __ballot_sync(0xffffffffu, nan);
    constexpr unsigned kTokenLanes = S::kLanes == 32 ? 0xffffffffu : (1u << S::kLanes) - 1u;
    return ((vote >> ((threadIdx.x & 31) / S::kLanes * S::kLanes)) & kTokenLanes) != 0;
  }
}

/// Per half, the larger of two bf16 values, a NaN yielding to the other operand (two NaNs give the canonical 0x7FFF):
/// on magnitudes, the NaN-ignoring maximum of spec::bf16_amax_bits.
__device__ __forceinline__ uint32_t max_bf16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

/// spec::group_scale for record R. The 288-byte record's scale byte by the hardware conversion, which equals
/// spec::fp8_encode_satfinite_bits on finite values (fp8.cuh): the clamped quotient always is one.
template <Record R>
__device__ __forceinline__ sp::GroupScale group_scale(uint32_t amax) {
  if constexpr (R == Record::kNvfp4DsMla) {
    // A NaN quotient gives the floor, as the spec's NaN amax does: fmaxf returns its other operand.
    const float q = __fmul_rn(__uint_as_float(amax & 0x7FFFFFFFu), __uint_as_float(sp::kInv6Bits));
    const float clamped =
        fminf(fmaxf(q, __uint_as_float(sp::kNvfp4ScaleMinBits)), __uint_as_float(sp::kNvfp4ScaleMaxBits));
    sp::GroupScale gs{0, sp::TileScale{0, false, 0}, 0, 0};
    gs.byte = static_cast<uint8_t>(e4m3x2_from_f32(clamped, clamped));
    gs.divisor = __float_as_uint(f32x2_from_e4m3x2(gs.byte).x);
    return gs;
  } else {
    return sp::group_scale(R, amax);
  }
}

/// spec::bf16_amax_bits from a group's largest magnitude pattern: a NaN (the canonical one max gives when every value
/// is NaN) for a group without numbers.
__device__ __forceinline__ uint32_t amax_bits(uint32_t m) {
  return (m & 0x7FFFu) > 0x7F80u ? 0x7FC00000u : (m & 0xFFFFu) << 16;
}

/// The MXFP8 record's quantize, a token over a warp in pieces of 8 values (see the file comment).
template <int kBs, bool kAligned>
__global__ void __launch_bounds__(kThreads, kQuantizeCtasPerSm)
    record_quantize_kernel(const uint16_t* k, int64_t k_stride, const int64_t* slots, int64_t num_tokens,
                           CacheGeometry cache, int32_t* error_count) {
  grid_dependency_begin();
  constexpr Record R = Record::kMxfp8DsMla;
  using S = Spread<R>;
  constexpr sp::RecordLayout rec = S::rec;
  constexpr int kTokensPerCta = kWarps * S::kSlots;
  const int l = static_cast<int>(threadIdx.x & 31);  // one token a warp
  const int q = static_cast<int>(threadIdx.x) / 32;
  const int64_t B = block_size_of<kBs>(cache.block_size);
  // Warp-uniform loop (the shuffles need every lane): a slot past the end does nothing but shuffle.
  for (int64_t t0 = int64_t{blockIdx.x} * kTokensPerCta; t0 < num_tokens; t0 += int64_t{gridDim.x} * kTokensPerCta) {
    const int64_t t = t0 + q;
    const bool token = t < num_tokens;
    const int64_t slot = token ? __ldg(slots + t) : -1;
    uint4 x[S::kPieces];  // loaded beside the slot (not after it): a skipped token's key is read, never used
#pragma unroll
    for (int p = 0; p < S::kPieces; ++p)
      x[p] = token ? load_bf16x8<kAligned>(k + t * k_stride + S::first_value(p, l)) : make_uint4(0, 0, 0, 0);
    int32_t faults = 0;
    const bool in_range = slot >= 0 && sp::slot_block(slot, B) < cache.num_blocks;
    if (slot != -1 && !in_range && l == 0) faults = 1;  // out of range: not followed, reported once per token
    uint8_t* block = in_range ? cache.base + sp::block_offset(sp::slot_block(slot, B), cache.block_stride) : nullptr;
    const int64_t pos = in_range ? sp::slot_pos(slot, B) : 0;
#pragma unroll
    for (int p = 0; p < S::kPieces; ++p) {
      uint32_t w[4], a[4];
      memcpy(w, &x[p], 16);
#pragma unroll
      for (int j = 0; j < 4; ++j) a[j] = w[j] & 0x7FFF7FFFu;
      // The piece's largest magnitude pattern, two per operation: as integers a NaN's is above inf's and every other
      // one orders as its value. When no lane of the warp holds inf or NaN (warp-uniform: the shuffles need every
      // lane), it is the amax and nothing is counted (bench/RESULTS.md#records-quantize-specializations).
      uint32_t m = __vmaxu2(__vmaxu2(a[0], a[1]), __vmaxu2(a[2], a[3]));
      m = __vmaxu2(m, m >> 16);
      int nonfinite = 0;
      if (!__all_sync(0xffffffffu, (m & 0xFFFFu) < 0x7F80u)) {
        // The maximum with NaN ignored (bf16x2 max yields to the non-NaN operand), and the non-finite values counted.
#pragma unroll
        for (int j = 0; j < 4; ++j) nonfinite += __popc((a[j] + 0x00800080u) & 0x80008000u);  // a half >= 0x7F80
        m = max_bf16x2(max_bf16x2(a[0], a[1]), max_bf16x2(a[2], a[3]));
        m = max_bf16x2(m, m >> 16);
      }
#pragma unroll
      for (int d = 1; d < S::kGroupLanes; d <<= 1)  // bf16 max: on finite values the integer one
        m = max_bf16x2(m, __shfl_xor_sync(0xffffffffu, m, d));
      if (!in_range) continue;
      faults += nonfinite;
      const sp::GroupScale gs = group_scale<R>(amax_bits(m));
      uint2 codes{0, 0};
      if (nonfinite == 0 && !gs.tile.infinite) {
        // x * 2^-e is exact and cvt.rn.satfinite equals the spec on finite values (fp8.cuh).
        const float inv_scale = sp::exp2i(-gs.tile.exponent);
        uint32_t c[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
          c[i] = e4m3x2_from_f32(__fmul_rn(__uint_as_float(w[i] << 16), inv_scale),
                                 __fmul_rn(__uint_as_float(w[i] & 0xFFFF0000u), inv_scale));
        codes = make_uint2(c[0] | (c[1] << 16), c[2] | (c[3] << 16));
      } else {
        uint16_t h[8];
        memcpy(h, w, 16);
        uint8_t c[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) c[i] = sp::quantize_group_code(R, h[i], gs);
        memcpy(&codes, c, 8);
      }
      const int v = S::first_value(p, l);
      store_codes<kAligned, S::kPieceBytes>(block + rec.data_offset(pos) + v, codes);
      if (l % S::kGroupLanes == 0) block[rec.scale_offset(B, pos, v / rec.group)] = gs.byte;
    }
    count_faults(error_count, faults);
  }
}

/// How an FP4 record's quantize spreads a token: lane l of its kLanes holds values [16 l, +16), whose codes are one
/// 8-byte store; a 288-byte group is one lane's, an indexer group two lanes' (bench/RESULTS.md#records-fp4-lane-group).
template <Record R>
struct Fp4Lanes {
  static constexpr sp::RecordLayout rec = sp::record_layout(R);
  static constexpr int kValues = 16;                       // values a lane
  static constexpr int kLanes = rec.head_dim / kValues;    // lanes a token: 32, or the indexer key's 8
  static constexpr int kSlots = 32 / kLanes;               // tokens a warp
  static constexpr int kGroupLanes = rec.group / kValues;  // lanes a scale group: 1, or the indexer key's 2
  static_assert(rec.values == sp::ValueCode::kE2M1 && rec.quant_dim == rec.head_dim);
  static_assert(kLanes * kSlots == 32 && rec.group % kValues == 0 && (kGroupLanes == 1 || kGroupLanes == 2));
};

/// The FP4 records' quantize (288-byte record and indexer key): one scale and one reciprocal a lane.
template <Record R, int kBs, bool kAligned>
__global__ void __launch_bounds__(kThreads, kFp4QuantizeCtasPerSm<R>)
    record_quantize_fp4_kernel(const uint16_t* k, int64_t k_stride, const int64_t* slots, int64_t num_tokens,
                               CacheGeometry cache, int32_t* error_count) {
  grid_dependency_begin();
  using L = Fp4Lanes<R>;
  constexpr sp::RecordLayout rec = L::rec;
  constexpr int kTokensPerCta = kWarps * L::kSlots;
  const int l = static_cast<int>(threadIdx.x) % L::kLanes;  // the lane's place in its token
  const int q = static_cast<int>(threadIdx.x) / L::kLanes;  // the token slot in the CTA
  const int64_t B = block_size_of<kBs>(cache.block_size);
  // Warp-uniform loop (the indexer key's shuffle needs every lane).
  for (int64_t t0 = int64_t{blockIdx.x} * kTokensPerCta; t0 < num_tokens; t0 += int64_t{gridDim.x} * kTokensPerCta) {
    const int64_t t = t0 + q;
    const bool token = t < num_tokens;
    const int64_t slot = token ? __ldg(slots + t) : -1;
    uint32_t w[8];  // values 16 l .. 16 l + 15, two a word
    {
      const uint16_t* src = k + t * k_stride + L::kValues * l;
      const uint4 lo = token ? load_bf16x8<kAligned>(src) : make_uint4(0, 0, 0, 0);
      const uint4 hi = token ? load_bf16x8<kAligned>(src + 8) : make_uint4(0, 0, 0, 0);
      memcpy(w, &lo, 16);
      memcpy(w + 4, &hi, 16);
    }
    int32_t faults = 0;
    const bool in_range = slot >= 0 && sp::slot_block(slot, B) < cache.num_blocks;
    if (slot != -1 && !in_range && l == 0) faults = 1;  // out of range: not followed, reported once per token
    // The lane's largest magnitude pattern, two per operation: as integers a NaN's is above inf's and every other one
    // orders as its value, so without inf or NaN it is the amax, and nothing is counted.
    uint32_t a[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] = w[j] & 0x7FFF7FFFu;
    uint32_t m = __vmaxu2(__vmaxu2(__vmaxu2(a[0], a[1]), __vmaxu2(a[2], a[3])),
                          __vmaxu2(__vmaxu2(a[4], a[5]), __vmaxu2(a[6], a[7])));
    m = __vmaxu2(m, m >> 16);
    const bool nonfinite_lane = (m & 0xFFFFu) >= 0x7F80u;
    int nonfinite = 0;
    if (nonfinite_lane) {
      // The NaN-ignoring maximum (bf16x2 max yields to the non-NaN operand; all NaN gives the canonical one) and the
      // non-finite values counted.
#pragma unroll
      for (int j = 0; j < 8; ++j) nonfinite += __popc((a[j] + 0x00800080u) & 0x80008000u);  // a half >= 0x7F80
      m = max_bf16x2(max_bf16x2(max_bf16x2(a[0], a[1]), max_bf16x2(a[2], a[3])),
                     max_bf16x2(max_bf16x2(a[4], a[5]), max_bf16x2(a[6], a[7])));
      m = max_bf16x2(m, m >> 16);
    }
    if constexpr (L::kGroupLanes == 2) m = max_bf16x2(m, __shfl_xor_sync(0xffffffffu, m, 1));  // finite: integer max
    if (in_range) {
      faults += nonfinite;
      const sp::GroupScale gs = group_scale<R>(amax_bits(m));
      uint2 codes;
      if (!nonfinite_lane) {
        // The quotient's reciprocal: the 288-byte record's fl32(1 / divisor), the indexer key's exact 2^-e.
        const float recip = R == Record::kNvfp4DsMla ? __frcp_rn(__uint_as_float(gs.divisor)) : sp::exp2i(-gs.exponent);
        // Products rounded to f16, one f16 sum a pair (fp4.cuh; bench/RESULTS.md#records-fp4-scaled-codes).
        codes = make_uint2(e2m1_codes8_scaled(w, recip), e2m1_codes8_scaled(w + 4, recip));
      } else {
        // Compares, no division or product a value (fp4.cuh); the indexer key's divisor is 2^e.
        const uint32_t d = R == Record::kNvfp4DsMla ? gs.divisor : __float_as_uint(sp::exp2i(gs.exponent));
        const E2m1PairThresholds th = e2m1_pair_thresholds<R == Record::kMxfp4Indexer>(d);
        codes = make_uint2(e2m1_codes8(w, th), e2m1_codes8(w + 4, th));
      }
      uint8_t* block = cache.base + sp::block_offset(sp::slot_block(slot, B), cache.block_stride);
      const int64_t pos = sp::slot_pos(slot, B);
      store_codes<kAligned, 8>(block + rec.data_offset(pos) + L::kValues / 2 * l, codes);
      if (l % L::kGroupLanes == 0) block[rec.scale_offset(B, pos, L::kValues * l / rec.group)] = gs.byte;
    }
    count_faults(error_count, faults);
  }
}

/// Dense gather: CTA (request b, chunk c) writes rows [c * kRowsPerCta, +kRowsPerCta) of request b; lane group q of
/// the CTA rows q * S::kGatherRows + r.
template <Record R, int kBs, bool kAligned>
__global__ void __launch_bounds__(kThreads) record_gather_kernel(RecordGatherParams p, int64_t chunks) {
  grid_dependency_begin();
  using S = Spread<R>;
  constexpr int kRowsPerCta = kWarps * S::kSlots * S::kGatherRows;
  const int l = static_cast<int>(threadIdx.x) % S::kLanes;
  const int q = static_cast<int>(threadIdx.x) / S::kLanes;
  // 32-bit division (chunks <= the grid size < 2^31): it is on every row's critical path.
  const int64_t b = blockIdx.x / static_cast<uint32_t>(chunks);
  const int64_t chunk = blockIdx.x - b * chunks;
  const int64_t seq_len = p.seq_lens[b];
  const int64_t gl = p.gather_lens != nullptr ? int64_t{p.gather_lens[b]} : seq_len;
  int32_t faults = 0;
  const bool lead = chunk == 0 && threadIdx.x == 0;  // reports the request's faults
  if (seq_len < 0 || gl < 0 || gl > seq_len) {
    if (lead) faults = 1;
    count_faults(p.error_count, faults);
    return;
  }
  const int64_t fit = gl < p.row_limit ? gl : p.row_limit;
  if (lead) faults = static_cast<int32_t>(gl - fit);  // rows past out: skipped, reported in bulk
  const int64_t B = block_size_of<kBs>(p.cache.block_size);
  const int64_t first = chunk * kRowsPerCta + int64_t{q} * S::kGatherRows;
  const int32_t* bt_row = p.block_table + b * p.bt_stride;
  int64_t blk[S::kGatherRows], pos[S::kGatherRows];
#pragma unroll
  for (int r = 0; r < S::kGatherRows; ++r) {
    blk[r] = -1;
    pos[r] = 0;
    const int64_t i = first + r;
    if (i >= fit) continue;
    const int64_t position = seq_len - gl + i;
    const int64_t col = position / B;
    pos[r] = position - col * B;
    blk[r] = col < p.bt_cols ? int64_t{__ldg(bt_row + col)} : -1;
    if (blk[r] < 0 || blk[r] >= p.cache.num_blocks) {
      if (l == 0) ++faults;  // the column or the block it names is outside: one report per row
      blk[r] = -1;
    }
  }
  LanePieces<R> lp[S::kGatherRows];
#pragma unroll
  for (int r = 0; r < S::kGatherRows; ++r)
    if (blk[r] >= 0)
      lp[r] = load_pieces<R, kAligned>(p.cache.base + sp::block_offset(blk[r], p.cache.block_stride), B, pos[r], l);
#pragma unroll
  for (int r = 0; r < S::kGatherRows; ++r) {
    if (token_has_nan_scale<R>(lp[r], blk[r] >= 0) && l == 0) ++faults;
    if (blk[r] >= 0) store_pieces<R, kAligned>(lp[r], p.out + b * p.out_s0 + (p.offset + first + r) * p.out_s1, l);
  }
  count_faults(p.error_count, faults);
}

/// Sparse gather: lane group q of CTA c decodes entries c * kEntriesPerCta + q * S::kRows + r, r < S::kRows (then
/// the grid's stride).
template <Record R, class Slot, bool kAligned>
__global__ void __launch_bounds__(kThreads)
    record_sparse_gather_kernel(uint16_t* out, int64_t out_stride, const Slot* slots, int64_t n, CacheGeometry cache,
                                int32_t* error_count) {
  grid_dependency_begin();
  using S = Spread<R>;
  constexpr int kEntriesPerCta = kWarps * S::kSlots * S::kRows;
  const int l = static_cast<int>(threadIdx.x) % S::kLanes;
  const int q = static_cast<int>(threadIdx.x) / S::kLanes;
  const int64_t B = cache.block_size;
  for (int64_t e0 = int64_t{blockIdx.x} * kEntriesPerCta; e0 < n; e0 += int64_t{gridDim.x} * kEntriesPerCta) {
    const int64_t first = e0 + int64_t{q} * S::kRows;
    int32_t faults = 0;
    int64_t slot[S::kRows];
#pragma unroll
    for (int r = 0; r < S::kRows; ++r) {
      slot[r] = first + r < n ? int64_t{__ldg(slots + first + r)} : -1;
      if (slot[r] != -1 && (slot[r] < 0 || sp::slot_block(slot[r], B) >= cache.num_blocks)) {
        if (l == 0) ++faults;  // not followed, reported once
        slot[r] = -1;
      }
    }
    LanePieces<R> lp[S::kRows];
#pragma unroll
    for (int r = 0; r < S::kRows; ++r)
      if (slot[r] >= 0)
        lp[r] = load_pieces<R, kAligned>(cache.base + sp::block_offset(sp::slot_block(slot[r], B), cache.block_stride),
                                         B, sp::slot_pos(slot[r], B), l);
#pragma unroll
    for (int r = 0; r < S::kRows; ++r) {
      if (token_has_nan_scale<R>(lp[r], slot[r] >= 0) && l == 0) ++faults;
      if (slot[r] >= 0) store_pieces<R, kAligned>(lp[r], out + (first + r) * out_stride, l);
    }
    count_faults(error_count, faults);
  }
}

/// The record as a choice (validate() has refused unknown records and the 584-byte one never comes here).
inline OneOf<Record::kMxfp8DsMla, Record::kNvfp4DsMla, Record::kMxfp4Indexer> record_choice(Record r) { return {r}; }

/// CTAs for `units` items at `per_cta` a CTA, capped: the kernels loop over the rest.
inline unsigned ctas_for(int64_t units, int64_t per_cta) {
  const int64_t ctas = ceil_div(units, per_cta);
  return static_cast<unsigned>(ctas < kMaxCtas ? ctas : kMaxCtas);
}

}  // namespace

void launch_record_quantize(const char*, Record record, const RecordQuantizeParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  // Whole 16-byte key loads and value stores where every row and block allows them.
  const bool aligned =
      rows_aligned16(p.k, p.k_stride * sp::kBf16Bytes) && rows_aligned16(p.cache.base, p.cache.block_stride);
  dispatch(
      [&](auto r, auto bs, auto al) {
        constexpr Record kR = decltype(r)::value;
        constexpr int kBs = decltype(bs)::value;
        constexpr bool kAl = decltype(al)::value;
        if constexpr (kR == Record::kMxfp8DsMla) {
          DSV4KV_CUDA_LAUNCH((record_quantize_kernel<kBs, kAl>), dim3(ctas_for(p.n, kWarps)), dim3(kThreads), stream,
                             p.k, p.k_stride, p.slots, p.n, p.cache, p.error_count);
        } else {
          DSV4KV_CUDA_LAUNCH((record_quantize_fp4_kernel<kR, kBs, kAl>),
                             dim3(ctas_for(p.n, kWarps * Fp4Lanes<kR>::kSlots)), dim3(kThreads), stream, p.k,
                             p.k_stride, p.slots, p.n, p.cache, p.error_count);
        }
      },
      record_choice(record), block_size_choice(p.cache.block_size), flag_choice(aligned));
}

void launch_record_gather(const char* op, Record record, const RecordGatherParams& p, cudaStream_t stream) {
  if (p.num_requests == 0) return;
  const bool aligned = rows_aligned16(p.cache.base, p.cache.block_stride) &&
                       rows_aligned16(p.out, p.out_s1 * sp::kBf16Bytes) && (p.out_s0 * sp::kBf16Bytes) % 16 == 0;
  dispatch(
      [&](auto r, auto bs, auto al) {
        constexpr Record kR = decltype(r)::value;
        // At least one CTA per request: it reports a malformed request and the rows that do not fit.
        const int64_t chunks =
            ceil_div(p.rows_per_request, int64_t{kWarps * Spread<kR>::kSlots * Spread<kR>::kGatherRows});
        if (p.num_requests > kMaxGridX / chunks) throw Error(op, "too many output rows for one launch");
        DSV4KV_CUDA_LAUNCH((record_gather_kernel<kR, decltype(bs)::value, decltype(al)::value>),
                           dim3(static_cast<unsigned>(chunks * p.num_requests)), dim3(kThreads), stream, p, chunks);
      },
      record_choice(record), block_size_choice(p.cache.block_size), flag_choice(aligned));
}

void launch_record_sparse_gather(const char*, Record record, const RecordSparseParams& p, cudaStream_t stream) {
  if (p.n == 0) return;
  const bool aligned =
      rows_aligned16(p.cache.base, p.cache.block_stride) && rows_aligned16(p.out, p.out_stride * sp::kBf16Bytes);
  dispatch(
      [&](auto r, auto wide, auto al) {
        constexpr Record kR = decltype(r)::value;
        using Slot = std::conditional_t<decltype(wide)::value, int64_t, int32_t>;
        const unsigned ctas = ctas_for(p.n, kWarps * Spread<kR>::kSlots * Spread<kR>::kRows);
        DSV4KV_CUDA_LAUNCH((record_sparse_gather_kernel<kR, Slot, decltype(al)::value>), dim3(ctas), dim3(kThreads),
                           stream, p.out, p.out_stride, static_cast<const Slot*>(p.slots), p.n, p.cache, p.error_count);
      },
      record_choice(record), flag_choice(p.slots_i64), flag_choice(aligned));
}

}  // namespace dsv4kv::cuda::detail
