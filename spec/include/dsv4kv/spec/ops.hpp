/// \file ops.hpp
/// \brief Argument structs of the operations and their one `validate()`.
///
/// Every backend calls the same `validate()` before touching memory, so a
/// contract violation reads the same everywhere:
/// `quantize_and_insert_k_cache: k must have 512 columns, got 448`.
/// Spec section: docs "Argument contracts" (spec/contracts.md).
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "dsv4kv/spec/checked.hpp"
#include "dsv4kv/spec/error.hpp"
#include "dsv4kv/spec/layout.hpp"
#include "dsv4kv/spec/numerics.hpp"
#include "dsv4kv/spec/records.hpp"
#include "dsv4kv/spec/semantics.hpp"
#include "dsv4kv/spec/tensor.hpp"

namespace dsv4kv {

using spec::Fp8Format;
using spec::Record;
using spec::Semantics;

/// What an operation does with one member of its argument struct (op_table.hpp).
enum class Role : uint8_t {
  kIn,       ///< a tensor the operation only reads (possibly absent)
  kOut,      ///< a tensor the operation only writes (Python can allocate it)
  kInOut,    ///< a tensor the operation reads and writes (the cache of quantize)
  kScalar,   ///< a scalar: integer, bool, Fp8Format, Record, Semantics or optional integer
  kCounter,  ///< the optional int32 error counter
};

/// \brief Arguments of quantize_and_insert_k_cache.
///
/// Quantizes `k[t]` for every `t < slot_mapping.size(0)` into cache slot
/// `slot_mapping[t]` (slot = block * block_size + position) as a `record`. Slot -1 is
/// skipped silently; other out-of-range slots are skipped and counted.
struct QuantizeInsertArgs {
  TensorView k;                           ///< [T_k, head_dim] bf16 (512; 128 for the indexer key); rows >= T unread
  TensorView k_cache;                     ///< [num_blocks, ...] uint8, rank 2 or 3, each block's bytes contiguous
  TensorView slot_mapping;                ///< [T] int64, T <= T_k
  int64_t block_size = 64;                ///< tokens per cache block, >= 1
  bool is_ue8m0 = true;                   ///< must be true: the cache stores power-of-two scales only
  Fp8Format format = Fp8Format::kE4M3Fn;  ///< use_fnuz selects kE4M3Fnuz (584-byte record only)
  Record record = Record::kFp8DsMla;      ///< how a token is encoded (spec "Cache records")
  int32_t* error_count = nullptr;  ///< optional counter of skipped slots and non-finite inputs (device memory on CUDA)

  /// The operation's name: the C++ and Python function, and the prefix of its errors.
  static constexpr const char* kName = "quantize_and_insert_k_cache";
  /// Calls `f(name, role, member)` for every member, in the Python signature's order, then
  /// the outputs Python allocates, then error_count (see op_table.hpp).
  template <class Self, class F>
  static void fields(Self& a, F&& f) {
    f("k", Role::kIn, a.k);
    f("k_cache", Role::kInOut, a.k_cache);
    f("slot_mapping", Role::kIn, a.slot_mapping);
    f("block_size", Role::kScalar, a.block_size);
    f("is_ue8m0", Role::kScalar, a.is_ue8m0);
    f("use_fnuz", Role::kScalar, a.format);
    f("record", Role::kScalar, a.record);
    f("error_count", Role::kCounter, a.error_count);
  }
};

/// \brief Arguments of dequantize_and_gather_k_cache.
///
/// For request b with gather_len g (= gather_lens[b], or seq_lens[b] when
/// absent), rows i < g take cache position seq_lens[b] - g + i and are written
/// to out[b, offset + i, :]. No other byte of `out` is written.
struct DequantizeGatherArgs {
  TensorView out;          ///< [>= R, out_rows, head_dim] bf16, unit inner stride, any outer strides
  TensorView k_cache;      ///< [num_blocks, ...] uint8, as in QuantizeInsertArgs
  TensorView seq_lens;     ///< [R] int32
  TensorView gather_lens;  ///< absent, or [>= R] int32
  TensorView block_table;  ///< [>= R, max_blocks] int32, unit inner stride, any row stride
  int64_t block_size = 64;
  int64_t offset = 0;  ///< first output row, in [0, out_rows]
  Fp8Format format = Fp8Format::kE4M3Fn;
  Record record = Record::kFp8DsMla;  ///< how the cache's tokens are encoded
  int32_t* error_count = nullptr;     ///< optional counter of skipped requests and rows

  /// The operation's name: the C++ and Python function, and the prefix of its errors.
  static constexpr const char* kName = "dequantize_and_gather_k_cache";
  /// Calls `f(name, role, member)` for every member, in the Python signature's order, then
  /// the outputs Python allocates, then error_count (see op_table.hpp).
  template <class Self, class F>
  static void fields(Self& a, F&& f) {
    f("out", Role::kOut, a.out);
    f("k_cache", Role::kIn, a.k_cache);
    f("seq_lens", Role::kIn, a.seq_lens);
    f("gather_lens", Role::kIn, a.gather_lens);
    f("block_table", Role::kIn, a.block_table);
    f("block_size", Role::kScalar, a.block_size);
    f("offset", Role::kScalar, a.offset);
    f("use_fnuz", Role::kScalar, a.format);
    f("record", Role::kScalar, a.record);
    f("error_count", Role::kCounter, a.error_count);
  }
};

/// \brief Arguments of dequantize_and_gather_k_cache_sparse.
///
/// For every `i < slot_indices.size(0)`, row `out[i]` receives the dequantized token in
/// cache slot `s = slot_indices[i]` (slot = block * block_size + position), with the
/// numerics of dequantize_and_gather_k_cache. Slot -1 is padding (no load, no store, no
/// report); any other slot outside `[0, num_blocks * block_size)` is skipped and counted.
/// The row of a skipped slot, and rows `>= N` of `out`, keep their contents.
struct SparseGatherArgs {
  TensorView out;                         ///< [>= N, head_dim] bf16, unit inner stride, any row stride
  TensorView k_cache;                     ///< [num_blocks, ...] uint8, as in QuantizeInsertArgs
  TensorView slot_indices;                ///< [N] int32 or int64, contiguous (-1 = padding)
  int64_t block_size = 64;                ///< tokens per cache block, >= 1
  Fp8Format format = Fp8Format::kE4M3Fn;  ///< use_fnuz selects kE4M3Fnuz
  Record record = Record::kFp8DsMla;      ///< how the cache's tokens are encoded
  int32_t* error_count = nullptr;         ///< optional counter of skipped out-of-range slots

  /// The operation's name: the C++ and Python function, and the prefix of its errors.
  static constexpr const char* kName = "dequantize_and_gather_k_cache_sparse";
  /// Calls `f(name, role, member)` for every member, in the Python signature's order, then
  /// the outputs Python allocates, then error_count (see op_table.hpp).
  template <class Self, class F>
  static void fields(Self& a, F&& f) {
    f("out", Role::kOut, a.out);
    f("k_cache", Role::kIn, a.k_cache);
    f("slot_indices", Role::kIn, a.slot_indices);
    f("block_size", Role::kScalar, a.block_size);
    f("use_fnuz", Role::kScalar, a.format);
    f("record", Role::kScalar, a.record);
    f("error_count", Role::kCounter, a.error_count);
  }
};

/// \brief Arguments of compute_global_topk_indices_and_lens.
struct GlobalTopkArgs {
  TensorView topk_indices;  ///< [T, topk] int32, unit inner stride (request-local indices, -1 = none)
  TensorView token_to_req;  ///< [>= T] int32
  TensorView block_table;   ///< [R, max_blocks] int32, unit inner stride
  int64_t block_size = 64;
  TensorView is_valid_token;               ///< [>= T] bool
  Semantics semantics = Semantics::kSeed;  ///< which vLLM revision's rules (packing: packs_global_topk)
  TensorView global_topk_indices;          ///< output [T, topk] int32, unit inner stride
  TensorView topk_lens;                    ///< output [T] int32
  int32_t* error_count = nullptr;

  /// The operation's name: the C++ and Python function, and the prefix of its errors.
  static constexpr const char* kName = "compute_global_topk_indices_and_lens";
  /// Calls `f(name, role, member)` for every member, in the Python signature's order, then
  /// the outputs Python allocates, then error_count (see op_table.hpp).
  template <class Self, class F>
  static void fields(Self& a, F&& f) {
    f("topk_indices", Role::kIn, a.topk_indices);
    f("token_to_req_indices", Role::kIn, a.token_to_req);
    f("block_table", Role::kIn, a.block_table);
    f("block_size", Role::kScalar, a.block_size);
    f("is_valid_token", Role::kIn, a.is_valid_token);
    f("semantics", Role::kScalar, a.semantics);
    f("global_topk_indices", Role::kOut, a.global_topk_indices);
    f("topk_lens", Role::kOut, a.topk_lens);
    f("error_count", Role::kCounter, a.error_count);
  }
};

/// \brief Arguments of combine_topk_swa_indices.
struct CombineArgs {
  TensorView topk_indices;     ///< [T, topk_width >= topk] int32, unit inner stride
  TensorView query_start_loc;  ///< [R + 1] int32 (rebased by its first element)
  TensorView seq_lens;         ///< [R] int32
  TensorView gather_lens;      ///< [>= R] int32
  int64_t window_size = 128;
  int64_t compress_ratio = 4;
  int64_t topk = 512;
  int64_t M = 0;             ///< per-request stride of the combined KV buffer
  int64_t N = 0;             ///< rows of compressed KV before the SWA rows
  TensorView left_visible;   ///< absent, or [>= T] int32 (with right_visible)
  TensorView right_visible;  ///< absent, or [>= T] int32 (with left_visible)
  int64_t max_image_tokens = 0;
  Semantics semantics = Semantics::kSeed;  ///< which vLLM revision's rules (spec "Semantics profiles")
  TensorView combined_indices;             ///< output [T, round_up(topk + window + max_image_tokens, 128)] int32
  TensorView combined_lens;                ///< output [T] int32
  int32_t* error_count = nullptr;

  /// The operation's name: the C++ and Python function, and the prefix of its errors.
  static constexpr const char* kName = "combine_topk_swa_indices";
  /// Calls `f(name, role, member)` for every member, in the Python signature's order, then
  /// the outputs Python allocates, then error_count (see op_table.hpp).
  template <class Self, class F>
  static void fields(Self& a, F&& f) {
    f("topk_indices", Role::kIn, a.topk_indices);
    f("query_start_loc", Role::kIn, a.query_start_loc);
    f("seq_lens", Role::kIn, a.seq_lens);
    f("gather_lens", Role::kIn, a.gather_lens);
    f("window_size", Role::kScalar, a.window_size);
    f("compress_ratio", Role::kScalar, a.compress_ratio);
    f("topk", Role::kScalar, a.topk);
    f("M", Role::kScalar, a.M);
    f("N", Role::kScalar, a.N);
    f("left_visible", Role::kIn, a.left_visible);
    f("right_visible", Role::kIn, a.right_visible);
    f("max_image_tokens", Role::kScalar, a.max_image_tokens);
    f("semantics", Role::kScalar, a.semantics);
    f("combined_indices", Role::kOut, a.combined_indices);
    f("combined_lens", Role::kOut, a.combined_lens);
    f("error_count", Role::kCounter, a.error_count);
  }
};

/// \brief Arguments of build_flashinfer_mixed_sparse_indices (decode rows first, then prefill rows).
struct MixedSparseArgs {
  TensorView decode_swa_indices;           ///< [D, swa_width >= window] int32
  TensorView decode_compressed_indices;    ///< absent, or [D, dct] int32
  TensorView decode_compressed_topk_lens;  ///< absent, or [>= D] int32
  TensorView prefill_topk_indices;         ///< [P, cols] int32
  TensorView query_start_loc;              ///< [R + 1] int32 (global token indices, not rebased)
  TensorView seq_lens;                     ///< [R] int32
  TensorView token_to_req;                 ///< [>= D + P] int32
  TensorView swa_block_table;              ///< [rows, *] int32; a request past its rows has an empty row
  int64_t swa_block_size = 64;
  TensorView compressed_block_table;  ///< absent (= swa_block_table), or [rows, *] int32 (rows need not be R)
  int64_t compressed_block_size = 64;
  int64_t window_size = 128;
  int64_t compress_ratio = 4;
  int64_t topk = 512;
  bool decode_compressed_indices_are_local = false;
  TensorView decode_is_valid_token;              ///< [>= D] bool; required when indices are local and dct > 0
  std::optional<int64_t> swa_block_span;         ///< page stride in tokens (None = block size)
  std::optional<int64_t> compressed_block_span;  ///< page stride in tokens (None = block size)
  TensorView prefill_left_visible;               ///< absent, or [>= D + P] int32
  TensorView prefill_right_visible;              ///< absent, or [>= D + P] int32
  int64_t max_image_tokens = 0;
  TensorView replay_start;                 ///< [>= R] int32 with semantics vllm_v41 (required), else absent
  Semantics semantics = Semantics::kSeed;  ///< which vLLM revision's rules (spec "Semantics profiles")
  TensorView sparse_indices;               ///< output [D + P, swa_width + image_width + round_up(max(topk, dct), 4)]
  TensorView sparse_topk_lens;             ///< output [D + P] int32
  int32_t* error_count = nullptr;

  /// The operation's name: the C++ and Python function, and the prefix of its errors.
  static constexpr const char* kName = "build_flashinfer_mixed_sparse_indices";
  /// Calls `f(name, role, member)` for every member, in the Python signature's order, then
  /// the outputs Python allocates, then error_count (see op_table.hpp).
  template <class Self, class F>
  static void fields(Self& a, F&& f) {
    f("decode_swa_indices", Role::kIn, a.decode_swa_indices);
    f("decode_compressed_indices", Role::kIn, a.decode_compressed_indices);
    f("decode_compressed_topk_lens", Role::kIn, a.decode_compressed_topk_lens);
    f("prefill_topk_indices", Role::kIn, a.prefill_topk_indices);
    f("query_start_loc", Role::kIn, a.query_start_loc);
    f("seq_lens", Role::kIn, a.seq_lens);
    f("token_to_req_indices", Role::kIn, a.token_to_req);
    f("swa_block_table", Role::kIn, a.swa_block_table);
    f("swa_block_size", Role::kScalar, a.swa_block_size);
    f("compressed_block_table", Role::kIn, a.compressed_block_table);
    f("compressed_block_size", Role::kScalar, a.compressed_block_size);
    f("window_size", Role::kScalar, a.window_size);
    f("compress_ratio", Role::kScalar, a.compress_ratio);
    f("topk", Role::kScalar, a.topk);
    f("decode_compressed_indices_are_local", Role::kScalar, a.decode_compressed_indices_are_local);
    f("decode_is_valid_token", Role::kIn, a.decode_is_valid_token);
    f("swa_block_span", Role::kScalar, a.swa_block_span);
    f("compressed_block_span", Role::kScalar, a.compressed_block_span);
    f("prefill_left_visible", Role::kIn, a.prefill_left_visible);
    f("prefill_right_visible", Role::kIn, a.prefill_right_visible);
    f("max_image_tokens", Role::kScalar, a.max_image_tokens);
    f("replay_start", Role::kIn, a.replay_start);
    f("semantics", Role::kScalar, a.semantics);
    f("sparse_indices", Role::kOut, a.sparse_indices);
    f("sparse_topk_lens", Role::kOut, a.sparse_topk_lens);
    f("error_count", Role::kCounter, a.error_count);
  }
};

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------
namespace detail {

/// combine_row_width (semantics.hpp) of a call, overflow-checked: round_up(topk + window_size +
/// max_image_tokens, 128).
inline spec::Checked combine_width(const CombineArgs& a) {
  return spec::checked_round_up(spec::checked_add(spec::checked_add(a.topk, a.window_size), a.max_image_tokens),
                                spec::kCombineRowAlignment);
}

/// mixed_row_width (semantics.hpp), overflow-checked: swa_width + image_width +
/// round_up(max(topk, decode_topk), 4).
inline spec::Checked mixed_width(int64_t swa_width, int64_t image_width, int64_t topk, int64_t decode_topk) {
  return spec::checked_add(spec::checked_add(swa_width, image_width),
                           spec::checked_round_up(spec::checked_max(topk, decode_topk), spec::kMixedTopkAlignment));
}

/// "a, b or c": the names of an enumeration (spec::kRecordNames, spec::kSemanticsNames) for messages.
template <size_t N>
std::string one_of(const char* const (&names)[N]) {
  std::string s;
  for (size_t i = 0; i < N; ++i) s += std::string(i == 0 ? "" : (i + 1 == N ? " or " : ", ")) + names[i];
  return s;
}

/// Builds contract errors for one operation.
class Check {
 public:
  explicit Check(const char* op) : op_(op) {}

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    std::ostringstream s;
    (s << ... << parts);
    throw Error(op_, s.str());
  }
  template <class... Parts>
  void require(bool cond, const Parts&... parts) const {
    if (!cond) fail(parts...);
  }

  /// `t` is present, has dtype `dt` and rank `rank`, non-negative sizes, a unit
  /// innermost stride, a data pointer aligned to its element size, an element count and
  /// a byte extent that fit in int64, and a non-null data pointer (unless it is empty) whose
  /// extent does not wrap around the address space.
  void tensor(const TensorView& t, const char* name, DType dt, int rank) const {
    require(t.present(), name, " is required");
    require(t.dtype == dt, name, " must be ", dtype_name(dt), ", got ", dtype_name(t.dtype));
    require(t.ndim == rank, name, " must have rank ", rank, ", got ", t.ndim);
    for (int d = 0; d < rank; ++d) {
      require(t.shape[d] >= 0, name, " has a negative size in dimension ", d, ": ", t.shape[d]);
      require(t.stride[d] >= 0, name, " has a negative stride in dimension ", d, ": ", t.stride[d]);
    }
    if (rank >= 1 && t.shape[rank - 1] > 1)
      require(t.stride[rank - 1] == 1, name, " must have unit stride in its last dimension, got ", t.stride[rank - 1]);
    aligned(t.data, dtype_size(dt), name, "its element size");
    // Extent rule (spec "Argument contracts"): after these two checks no product of a size
    // and a stride of this view, and no offset of one of its elements, can overflow int64.
    require(t.numel_checked().ok, name, " has more elements than int64 can count (the product of its sizes ",
            "overflows int64)");
    const spec::Checked extent = t.extent_bytes();
    require(extent.ok, name, " spans more bytes than int64 can count (its byte extent (1 + sum of (size - 1) * ",
            "stride) * ", dtype_size(dt), " overflows int64)");
    if (t.empty()) return;
    require(t.data != nullptr, name, " is non-empty but has a null data pointer");
    const auto addr = reinterpret_cast<uintptr_t>(t.data);
    require(addr <= UINTPTR_MAX - static_cast<uintptr_t>(extent.value - 1), name,
            " extends past the end of the address space (address 0x", std::hex, addr, std::dec, " + ", extent.value,
            " bytes)");
  }
  /// Optional tensor: absent, or as `tensor()`.
  void optional(const TensorView& t, const char* name, DType dt, int rank) const {
    if (t.present()) tensor(t, name, dt, rank);
  }
  void at_least(const TensorView& t, int d, const char* name, int64_t n, const char* what) const {
    require(t.shape[d] >= n, name, " must have at least ", n, " ", what, ", got ", t.shape[d]);
  }
  void exactly(const TensorView& t, int d, const char* name, int64_t n, const char* what) const {
    require(t.shape[d] == n, name, " must have ", n, " ", what, ", got ", t.shape[d]);
  }
  void positive(int64_t v, const char* name) const { require(v >= 1, name, " must be >= 1, got ", v); }
  void non_negative(int64_t v, const char* name) const { require(v >= 0, name, " must be >= 0, got ", v); }
  void fits_int32(int64_t v, const char* name) const {
    require(v <= spec::kIndexMax, name, " must fit in int32, got ", v);
  }
  /// The value of a checked computation, or a contract error "<what...> overflows int64"
  /// (the wrapped value is never shown).
  template <class... Parts>
  int64_t value(const spec::Checked& v, const Parts&... what) const {
    require(v.ok, what..., " overflows int64");
    return v.value;
  }
  /// The optional error counter is 4-byte aligned: atomicAdd on a misaligned int32 is
  /// undefined on the device, and a misaligned host access is undefined behaviour.
  void counter(const int32_t* p) const { aligned(p, sizeof(int32_t), "error_count", "int32"); }
  /// The profile-dependent scalar rules of combine and mixed: compress_ratio >= 1 (>= 0 where the profile allows a
  /// layer without compressed cache), and no image windows (max_image_tokens 0, no visibility arrays) for a model
  /// without them.
  void profile_rules(Semantics s, int64_t compress_ratio, int64_t max_image_tokens, const TensorView& left,
                     const TensorView& right, const char* left_name, const char* right_name) const {
    if (spec::allows_compress_ratio_zero(s))
      non_negative(compress_ratio, "compress_ratio");
    else
      positive(compress_ratio, "compress_ratio");
    if (spec::has_image_windows(s)) return;
    require(max_image_tokens == 0, "max_image_tokens must be 0 with semantics ", spec::semantics_name(s),
            " (that model has no image windows), got ", max_image_tokens);
    require(!left.present() && !right.present(), left_name, " and ", right_name, " must be None with semantics ",
            spec::semantics_name(s), " (that model has no image windows)");
  }
  /// A Record value from a caller (an enum holds any byte): one of the records, and use_fnuz only
  /// with the 584-byte record (the V4.1 records are defined for OCP e4m3fn alone).
  void record(Record r, Fp8Format f) const {
    if (!spec::record_known(r))
      fail("record must be ", one_of(spec::kRecordNames), ", got the value ", static_cast<int>(r));
    require(r == Record::kFp8DsMla || f == Fp8Format::kE4M3Fn, "use_fnuz must be False with record ",
            spec::record_name(r), " (the V4.1 records are defined for e4m3fn only)");
  }
  /// A Semantics value from a caller (an enum holds any byte): one of the three profiles.
  void semantics(Semantics s) const {
    if (!spec::semantics_known(s))
      fail("semantics must be ", one_of(spec::kSemanticsNames), ", got the value ", static_cast<int>(s));
  }
  /// `p` is a multiple of `bytes`: "<name> must be aligned to <bytes> bytes (<why>), got address 0x<p>".
  void aligned(const void* p, size_t bytes, const char* name, const char* why) const {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    require(addr % bytes == 0, name, " must be aligned to ", bytes, " bytes (", why, "), got address 0x", std::hex,
            addr);
  }

 private:
  const char* op_;
};

/// Checks the cache tensor for record `r` and returns its block stride in bytes.
inline int64_t check_cache(const Check& c, const TensorView& cache, int64_t block_size, Record r) {
  const spec::RecordLayout rec = spec::record_layout(r);
  c.require(cache.present(), "k_cache is required");
  c.require(cache.dtype == DType::kU8, "k_cache must be uint8, got ", dtype_name(cache.dtype));
  c.require(cache.ndim == 2 || cache.ndim == 3, "k_cache must have rank 2 or 3, got ", cache.ndim);
  c.tensor(cache, "k_cache", DType::kU8, cache.ndim);
  // The bytes of one block must be contiguous: [num_blocks, bytes] or [num_blocks, B, bytes/B].
  // Checked: with num_blocks = 0 the view is empty and its extent says nothing about a block.
  int64_t per_block = 1;
  for (int d = cache.ndim - 1; d >= 1; --d) {
    if (cache.shape[d] > 1)
      c.require(cache.stride[d] == per_block, "k_cache must be contiguous within a block (stride of dimension ", d,
                " must be ", per_block, ", got ", cache.stride[d], ")");
    per_block = c.value(spec::checked_mul(per_block, cache.shape[d]),
                        "k_cache bytes per block (the product of its sizes after the first)");
  }
  // A [num_blocks, block_size, W] view whose W is another record's width was made for that record.
  Record other{};
  if (cache.ndim == 3 && cache.shape[1] == block_size && spec::record_from_token_bytes(cache.shape[2], other))
    c.require(other == r, "k_cache.shape[2] = ", cache.shape[2], " is the width of record ", spec::record_name(other),
              ", not of record ", spec::record_name(r), " (", rec.token_bytes(), " bytes per token)");
  const int64_t need = rec.block_data_bytes(block_size);  // block_size fits int32: no overflow
  c.require(per_block >= need, "k_cache must hold at least block_size*", rec.token_bytes(), " = ", need,
            " bytes per block, got ", per_block);
  const int64_t stride = cache.shape[0] > 1 ? cache.stride[0] : per_block;
  c.require(stride >= need, "k_cache block stride must be >= block_size*", rec.token_bytes(), " = ", need,
            " bytes, got ", stride);
  if (rec.stride_alignment > 1) {
    c.require(stride % rec.stride_alignment == 0,
              "k_cache block stride must be even (bf16 RoPE values are 2-byte aligned), got ", stride);
    // An odd base puts every block's RoPE values (at even offsets inside a block) off 2-byte
    // boundaries: the GPU faults on a misaligned 2-byte access, which ends the CUDA context.
    c.aligned(cache.data, spec::kBf16Bytes, "k_cache", "bf16 RoPE values are 2-byte aligned");
  }
  // Extent rule: every block offset block * block_stride (block < num_blocks) fits in int64.
  c.value(spec::checked_mul(cache.shape[0], stride), "k_cache num_blocks * block_stride (", cache.shape[0], " * ",
          stride, ")");
  return stride;
}

}  // namespace detail

/// Where the cache lives, resolved from a validated `k_cache` view.
struct CacheGeometry {
  uint8_t* base;         ///< byte 0 of block 0
  int64_t num_blocks;    ///< blocks in the cache
  int64_t block_stride;  ///< bytes from one block to the next
  int64_t block_size;    ///< tokens per block
};

/// Checks quantize_and_insert_k_cache's contract; throws dsv4kv::Error. Returns the cache geometry.
inline CacheGeometry validate(const QuantizeInsertArgs& a) {
  const detail::Check c(QuantizeInsertArgs::kName);
  c.counter(a.error_count);
  c.require(a.is_ue8m0, "is_ue8m0 must be true: only UE8M0 (power-of-two) scales are supported");
  c.record(a.record, a.format);
  c.positive(a.block_size, "block_size");
  c.fits_int32(a.block_size, "block_size");  // bounds block_size*584 and every slot product
  c.tensor(a.k, "k", DType::kBF16, 2);
  c.exactly(a.k, 1, "k", spec::record_layout(a.record).head_dim, "columns");
  c.tensor(a.slot_mapping, "slot_mapping", DType::kI64, 1);
  c.require(a.slot_mapping.shape[0] <= a.k.shape[0], "slot_mapping must not have more entries (",
            a.slot_mapping.shape[0], ") than k has rows (", a.k.shape[0], ")");
  const int64_t stride = detail::check_cache(c, a.k_cache, a.block_size, a.record);
  return CacheGeometry{a.k_cache.as<uint8_t>(), a.k_cache.shape[0], stride, a.block_size};
}

/// Checks dequantize_and_gather_k_cache's contract; throws dsv4kv::Error. Returns the cache geometry.
inline CacheGeometry validate(const DequantizeGatherArgs& a) {
  const detail::Check c(DequantizeGatherArgs::kName);
  c.counter(a.error_count);
  c.record(a.record, a.format);
  c.positive(a.block_size, "block_size");
  c.fits_int32(a.block_size, "block_size");
  c.tensor(a.seq_lens, "seq_lens", DType::kI32, 1);
  const int64_t R = a.seq_lens.shape[0];
  c.optional(a.gather_lens, "gather_lens", DType::kI32, 1);
  if (a.gather_lens.present()) c.at_least(a.gather_lens, 0, "gather_lens", R, "entries (one per request)");
  c.tensor(a.out, "out", DType::kBF16, 3);
  c.exactly(a.out, 2, "out", spec::record_layout(a.record).head_dim, "columns");
  c.at_least(a.out, 0, "out", R, "rows in dimension 0 (one per request)");
  c.tensor(a.block_table, "block_table", DType::kI32, 2);
  c.at_least(a.block_table, 0, "block_table", R, "rows (one per request)");
  c.require(a.offset >= 0 && a.offset <= a.out.shape[1], "offset must be in [0, out.shape[1] = ", a.out.shape[1],
            "], got ", a.offset);
  const int64_t stride = detail::check_cache(c, a.k_cache, a.block_size, a.record);
  return CacheGeometry{a.k_cache.as<uint8_t>(), a.k_cache.shape[0], stride, a.block_size};
}

/// Checks dequantize_and_gather_k_cache_sparse's contract; throws dsv4kv::Error. Returns the cache geometry.
inline CacheGeometry validate(const SparseGatherArgs& a) {
  const detail::Check c(SparseGatherArgs::kName);
  c.counter(a.error_count);
  c.record(a.record, a.format);
  c.positive(a.block_size, "block_size");
  c.fits_int32(a.block_size, "block_size");  // bounds block_size*584 and every slot product
  const TensorView& slots = a.slot_indices;
  c.require(slots.present(), "slot_indices is required");
  c.require(slots.dtype == DType::kI32 || slots.dtype == DType::kI64, "slot_indices must be int32 or int64, got ",
            dtype_name(slots.dtype));
  c.tensor(slots, "slot_indices", slots.dtype, 1);
  const int64_t N = slots.shape[0];
  c.tensor(a.out, "out", DType::kBF16, 2);
  c.exactly(a.out, 1, "out", spec::record_layout(a.record).head_dim, "columns");
  c.at_least(a.out, 0, "out", N, "rows (one per slot)");
  const int64_t stride = detail::check_cache(c, a.k_cache, a.block_size, a.record);
  return CacheGeometry{a.k_cache.as<uint8_t>(), a.k_cache.shape[0], stride, a.block_size};
}

/// Checks compute_global_topk_indices_and_lens's contract; throws dsv4kv::Error.
inline void validate(const GlobalTopkArgs& a) {
  const detail::Check c(GlobalTopkArgs::kName);
  c.counter(a.error_count);
  c.semantics(a.semantics);
  c.positive(a.block_size, "block_size");
  c.fits_int32(a.block_size, "block_size");  // block * block_size stays far inside int64
  c.tensor(a.topk_indices, "topk_indices", DType::kI32, 2);
  const int64_t T = a.topk_indices.shape[0];
  const int64_t K = a.topk_indices.shape[1];
  c.tensor(a.token_to_req, "token_to_req_indices", DType::kI32, 1);
  c.at_least(a.token_to_req, 0, "token_to_req_indices", T, "entries (one per token)");
  c.tensor(a.block_table, "block_table", DType::kI32, 2);
  c.tensor(a.is_valid_token, "is_valid_token", DType::kBool, 1);
  c.at_least(a.is_valid_token, 0, "is_valid_token", T, "entries (one per token)");
  c.tensor(a.global_topk_indices, "global_topk_indices", DType::kI32, 2);
  c.exactly(a.global_topk_indices, 0, "global_topk_indices", T, "rows");
  c.exactly(a.global_topk_indices, 1, "global_topk_indices", K, "columns (topk)");
  c.tensor(a.topk_lens, "topk_lens", DType::kI32, 1);
  c.exactly(a.topk_lens, 0, "topk_lens", T, "entries");
}

/// Checks combine_topk_swa_indices's contract; throws dsv4kv::Error.
inline void validate(const CombineArgs& a) {
  const detail::Check c(CombineArgs::kName);
  c.counter(a.error_count);
  c.semantics(a.semantics);
  c.positive(a.window_size, "window_size");
  c.profile_rules(a.semantics, a.compress_ratio, a.max_image_tokens, a.left_visible, a.right_visible, "left_visible",
                  "right_visible");
  c.non_negative(a.topk, "topk");
  c.non_negative(a.max_image_tokens, "max_image_tokens");
  c.non_negative(a.M, "M");
  c.non_negative(a.N, "N");
  c.fits_int32(a.M, "M");
  c.fits_int32(a.N, "N");
  // The row width and window arithmetic add these: bounding them keeps every sum inside int64.
  c.fits_int32(a.window_size, "window_size");
  c.fits_int32(a.topk, "topk");
  c.fits_int32(a.max_image_tokens, "max_image_tokens");
  c.tensor(a.topk_indices, "topk_indices", DType::kI32, 2);
  const int64_t T = a.topk_indices.shape[0];
  c.require(a.topk <= a.topk_indices.shape[1], "topk (", a.topk, ") must not exceed the width of topk_indices (",
            a.topk_indices.shape[1], ")");
  c.tensor(a.seq_lens, "seq_lens", DType::kI32, 1);
  const int64_t R = a.seq_lens.shape[0];
  c.tensor(a.query_start_loc, "query_start_loc", DType::kI32, 1);
  c.exactly(a.query_start_loc, 0, "query_start_loc",
            c.value(spec::checked_add(R, 1), "num_reqs + 1 (seq_lens entries + 1)"), "entries (num_reqs + 1)");
  c.tensor(a.gather_lens, "gather_lens", DType::kI32, 1);
  c.at_least(a.gather_lens, 0, "gather_lens", R, "entries (one per request)");
  c.require(a.left_visible.present() == a.right_visible.present(),
            "left_visible and right_visible must be given together");
  c.optional(a.left_visible, "left_visible", DType::kI32, 1);
  c.optional(a.right_visible, "right_visible", DType::kI32, 1);
  if (a.left_visible.present()) {
    c.at_least(a.left_visible, 0, "left_visible", T, "entries (one per token)");
    c.at_least(a.right_visible, 0, "right_visible", T, "entries (one per token)");
  }
  // Row lengths are int32 and never exceed the row width: a width that fits in int32 keeps
  // every length exact (the scalars fit in int32, so the sum cannot leave int64).
  const int64_t width = c.value(detail::combine_width(a),
                                "combined_indices row width round_up(topk + window_size + max_image_tokens, 128)");
  c.require(width <= spec::kIndexMax,
            "combined_indices row width round_up(topk + window_size + max_image_tokens, 128) = ", width,
            " must fit in int32 (row lengths are int32)");
  c.tensor(a.combined_indices, "combined_indices", DType::kI32, 2);
  c.exactly(a.combined_indices, 0, "combined_indices", T, "rows");
  c.require(a.combined_indices.shape[1] == width,
            "combined_indices must have round_up(topk + window_size + max_image_tokens, 128) = ", width,
            " columns, got ", a.combined_indices.shape[1]);
  c.tensor(a.combined_lens, "combined_lens", DType::kI32, 1);
  c.exactly(a.combined_lens, 0, "combined_lens", T, "entries");
}

/// Checks build_flashinfer_mixed_sparse_indices's contract; throws dsv4kv::Error.
inline void validate(const MixedSparseArgs& a) {
  const detail::Check c(MixedSparseArgs::kName);
  c.counter(a.error_count);
  c.semantics(a.semantics);
  c.positive(a.window_size, "window_size");
  c.profile_rules(a.semantics, a.compress_ratio, a.max_image_tokens, a.prefill_left_visible, a.prefill_right_visible,
                  "prefill_left_visible", "prefill_right_visible");
  c.non_negative(a.topk, "topk");
  c.non_negative(a.max_image_tokens, "max_image_tokens");
  c.positive(a.swa_block_size, "swa_block_size");
  c.positive(a.compressed_block_size, "compressed_block_size");
  if (a.swa_block_span) c.positive(*a.swa_block_span, "swa_block_span");
  if (a.compressed_block_span) c.positive(*a.compressed_block_span, "compressed_block_span");
  // Products (v / block_size) * span and sums into the row width stay inside int64 when every
  // scalar fits in int32.
  c.fits_int32(a.window_size, "window_size");
  c.fits_int32(a.topk, "topk");
  c.fits_int32(a.max_image_tokens, "max_image_tokens");
  c.fits_int32(a.swa_block_size, "swa_block_size");
  c.fits_int32(a.compressed_block_size, "compressed_block_size");
  if (a.swa_block_span) c.fits_int32(*a.swa_block_span, "swa_block_span");
  if (a.compressed_block_span) c.fits_int32(*a.compressed_block_span, "compressed_block_span");
  c.tensor(a.decode_swa_indices, "decode_swa_indices", DType::kI32, 2);
  const int64_t D = a.decode_swa_indices.shape[0];
  const int64_t swa_w = a.decode_swa_indices.shape[1];
  c.require(swa_w >= a.window_size, "decode_swa_indices must have at least window_size = ", a.window_size,
            " columns, got ", swa_w);
  c.optional(a.decode_compressed_indices, "decode_compressed_indices", DType::kI32, 2);
  int64_t dct = 0;
  if (a.decode_compressed_indices.present()) {
    c.exactly(a.decode_compressed_indices, 0, "decode_compressed_indices", D, "rows (one per decode token)");
    dct = a.decode_compressed_indices.shape[1];
  }
  c.optional(a.decode_compressed_topk_lens, "decode_compressed_topk_lens", DType::kI32, 1);
  if (a.decode_compressed_topk_lens.present())
    c.at_least(a.decode_compressed_topk_lens, 0, "decode_compressed_topk_lens", D, "entries (one per decode token)");
  c.tensor(a.prefill_topk_indices, "prefill_topk_indices", DType::kI32, 2);
  const int64_t P = a.prefill_topk_indices.shape[0];
  c.tensor(a.seq_lens, "seq_lens", DType::kI32, 1);
  const int64_t R = a.seq_lens.shape[0];
  c.tensor(a.query_start_loc, "query_start_loc", DType::kI32, 1);
  c.exactly(a.query_start_loc, 0, "query_start_loc",
            c.value(spec::checked_add(R, 1), "num_reqs + 1 (seq_lens entries + 1)"), "entries (num_reqs + 1)");
  if (spec::bounded_replay(a.semantics)) {
    c.require(a.replay_start.present(), "replay_start is required with semantics ", spec::semantics_name(a.semantics));
    c.tensor(a.replay_start, "replay_start", DType::kI32, 1);
    c.at_least(a.replay_start, 0, "replay_start", R, "entries (one per request)");
  } else {
    c.require(!a.replay_start.present(), "replay_start is taken only with semantics vllm_v41, got semantics ",
              spec::semantics_name(a.semantics));
  }
  // Empty views may have any sizes: D + P is checked, not assumed.
  const int64_t DP = c.value(spec::checked_add(D, P),
                             "decode + prefill tokens (rows of decode_swa_indices + rows of prefill_topk_indices)");
  c.tensor(a.token_to_req, "token_to_req_indices", DType::kI32, 1);
  c.at_least(a.token_to_req, 0, "token_to_req_indices", DP, "entries (decode + prefill tokens)");
  c.tensor(a.swa_block_table, "swa_block_table", DType::kI32, 2);
  c.optional(a.compressed_block_table, "compressed_block_table", DType::kI32, 2);
  if (dct > 0 && a.decode_compressed_indices_are_local) {
    c.require(a.decode_is_valid_token.present(),
              "decode_is_valid_token is required when decode_compressed_indices_are_local is true");
    c.tensor(a.decode_is_valid_token, "decode_is_valid_token", DType::kBool, 1);
    c.at_least(a.decode_is_valid_token, 0, "decode_is_valid_token", D, "entries (one per decode token)");
  }
  c.require(a.prefill_left_visible.present() == a.prefill_right_visible.present(),
            "prefill_left_visible and prefill_right_visible must be given together");
  c.optional(a.prefill_left_visible, "prefill_left_visible", DType::kI32, 1);
  c.optional(a.prefill_right_visible, "prefill_right_visible", DType::kI32, 1);
  if (a.prefill_left_visible.present()) {
    c.at_least(a.prefill_left_visible, 0, "prefill_left_visible", DP, "entries (decode + prefill tokens)");
    c.at_least(a.prefill_right_visible, 0, "prefill_right_visible", DP, "entries (decode + prefill tokens)");
  }
  const int64_t image_w = a.prefill_left_visible.present() ? a.max_image_tokens : 0;
  // The widths come from tensor sizes, which an empty tensor leaves unbounded: checked. Row
  // lengths are int32 and only a decode_compressed_topk_lens entry can exceed the row width
  // (clamped and counted, spec::to_length), so a width that fits in int32 keeps them exact.
  const int64_t width = c.value(
      detail::mixed_width(swa_w, image_w, a.topk, dct),
      "sparse_indices row width swa_width + image_width + round_up(max(topk, decode_topk), 4) (swa_width = ", swa_w,
      ", decode_topk = ", dct, ")");
  c.require(width <= spec::kIndexMax,
            "sparse_indices row width swa_width + image_width + round_up(max(topk, decode_topk), 4) = ", width,
            " must fit in int32 (row lengths are int32)");
  c.tensor(a.sparse_indices, "sparse_indices", DType::kI32, 2);
  c.exactly(a.sparse_indices, 0, "sparse_indices", DP, "rows (decode + prefill tokens)");
  c.require(a.sparse_indices.shape[1] == width,
            "sparse_indices must have swa_width + image_width + round_up(max(topk, decode_topk), 4) = ", width,
            " columns, got ", a.sparse_indices.shape[1]);
  c.tensor(a.sparse_topk_lens, "sparse_topk_lens", DType::kI32, 1);
  c.exactly(a.sparse_topk_lens, 0, "sparse_topk_lens", DP, "entries");
}

// ---------------------------------------------------------------------------
// Shapes of the allocated outputs
// ---------------------------------------------------------------------------

/// \brief The shape of the outputs an index operation allocates when the caller passes none
/// (Python's `out=None`): an int32 matrix [rows, width] and int32 lengths [rows].
struct AllocatedShape {
  int64_t rows = 0;
  int64_t width = 0;
};

/// The outputs of compute_global_topk_indices_and_lens: [T, topk] and [T], as topk_indices.
/// Nothing when topk_indices is not a matrix (validate() then says what is wrong).
inline std::optional<AllocatedShape> allocated_shape(const GlobalTopkArgs& a) {
  if (a.topk_indices.ndim != 2) return std::nullopt;
  return AllocatedShape{a.topk_indices.shape[0], a.topk_indices.shape[1]};
}

/// The outputs of combine_topk_swa_indices: [T, combine_row_width] and [T]. Nothing when the
/// inputs give no such shape (not a matrix, a negative or overflowing width).
inline std::optional<AllocatedShape> allocated_shape(const CombineArgs& a) {
  const spec::Checked w = detail::combine_width(a);
  if (a.topk_indices.ndim != 2 || !w.ok) return std::nullopt;
  return AllocatedShape{a.topk_indices.shape[0], w.value};
}

/// The outputs of build_flashinfer_mixed_sparse_indices: [D + P, mixed_row_width] and [D + P]
/// (image_width = max_image_tokens when prefill_left_visible is given, decode_topk = the columns
/// of decode_compressed_indices when given). Nothing when the inputs give no such shape.
inline std::optional<AllocatedShape> allocated_shape(const MixedSparseArgs& a) {
  const TensorView& swa = a.decode_swa_indices;
  const TensorView& dc = a.decode_compressed_indices;
  if (swa.ndim != 2 || a.prefill_topk_indices.ndim != 2 || (dc.present() && dc.ndim != 2)) return std::nullopt;
  const int64_t image_w = a.prefill_left_visible.present() ? a.max_image_tokens : 0;
  const spec::Checked w = detail::mixed_width(swa.shape[1], image_w, a.topk, dc.present() ? dc.shape[1] : 0);
  const spec::Checked rows = spec::checked_add(swa.shape[0], a.prefill_topk_indices.shape[0]);
  if (!w.ok || w.value < 0 || !rows.ok || rows.value < 0) return std::nullopt;
  return AllocatedShape{rows.value, w.value};
}

}  // namespace dsv4kv
