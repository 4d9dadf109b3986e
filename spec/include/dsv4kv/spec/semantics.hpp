/// \file semantics.hpp
/// \brief Per-element rules of the index operations, shared by both backends.
///
/// Spec sections: docs "Operations" (spec/operations.md) and "Failure model"
/// (spec/failure_model.md). Each function decides one output element (or one
/// request's geometry) from values that only the device sees, and reports
/// whether it had to drop an out-of-range value: the backends add those
/// reports to the optional error counter. Nothing here dereferences a pointer
/// that was not first proved in range.
#pragma once

#include <cstdint>
#include <string_view>

#include "dsv4kv/spec/config.hpp"
#include "dsv4kv/spec/layout.hpp"

namespace dsv4kv::spec {

/// \brief Which vLLM revision an index operation reproduces (spec "Semantics profiles",
/// spec/operations.md#operations_profiles).
///
/// The default is the seed's behaviour; the two others are vLLM's current DeepSeek-V4 and
/// DeepSeek-V4.1 files, which changed these operations after the seed. A profile selects only
/// rules that upstream changed; the failure model (spec/failure_model.md) is the same in all three.
enum class Semantics : uint8_t {
  kSeed = 0,     ///< the seed: vLLM's DeepSeek-V4 cache_utils.py as this library was built against
  kVllmV4 = 1,   ///< current vLLM, vllm/models/deepseek_v4/common/ops/cache_utils.py
  kVllmV41 = 2,  ///< current vLLM, vllm/models/deepseek_v41/common/ops/cache_utils.py
};

/// The profiles' names, indexed by their values: the Python keyword's and the CLI flag's strings.
inline constexpr const char* kSemanticsNames[] = {"seed", "vllm_v4", "vllm_v41"};
inline constexpr int kNumSemantics = 3;
static_assert(sizeof(kSemanticsNames) / sizeof(kSemanticsNames[0]) == kNumSemantics);
static_assert(static_cast<int>(Semantics::kVllmV41) == kNumSemantics - 1, "one name per enumerator");

/// The name of a profile ("?" for a value outside the enum).
constexpr const char* semantics_name(Semantics s) {
  return static_cast<int>(s) < kNumSemantics ? kSemanticsNames[static_cast<int>(s)] : "?";
}

/// The profile named `name` (one of kSemanticsNames); false when there is none.
constexpr bool semantics_from_name(std::string_view name, Semantics& s) {
  for (int i = 0; i < kNumSemantics; ++i)
    if (name == kSemanticsNames[i]) {
      s = static_cast<Semantics>(i);
      return true;
    }
  return false;
}

/// Whether `s` is one of the three profiles (an enum value read from a caller or a file may not be).
DSV4KV_HD constexpr bool semantics_known(Semantics s) { return static_cast<int>(s) < kNumSemantics; }

/// Global top-k translation: whether a row's translated entries are packed to the left and the row of an
/// invalid token (is_valid_token false) is all -1 without lookups (vLLM PR #55692, in both current files), instead of
/// every entry keeping its column and invalid tokens' rows being translated (the seed).
DSV4KV_HD constexpr bool packs_global_topk(Semantics s) { return s != Semantics::kSeed; }

/// combine_topk_swa_indices: whether top-k values outside [0, N) become -1 (deepseek_v41's combine) instead of
/// being offset whatever their value (the seed and deepseek_v4).
DSV4KV_HD constexpr bool masks_combine_topk(Semantics s) { return s == Semantics::kVllmV41; }

/// build_flashinfer_mixed_sparse_indices: whether decode rows wider than the window (decode_swa_indices.shape[1] >
/// window_size) take DSpark's non-causal layout (vllm_v4; dspark_row) instead of being copied (the seed, vllm_v41).
DSV4KV_HD constexpr bool dspark_decode_rows(Semantics s) { return s == Semantics::kVllmV4; }

/// build_flashinfer_mixed_sparse_indices: whether a prefill window starts no earlier than its request's
/// replay_start (SWA bounded replay, vllm_v41, which requires the array).
DSV4KV_HD constexpr bool bounded_replay(Semantics s) { return s == Semantics::kVllmV41; }

/// Whether the profile's model has image windows (DeepSeek-V4.1 has none: its functions take no visibility).
DSV4KV_HD constexpr bool has_image_windows(Semantics s) { return s != Semantics::kVllmV41; }

/// Whether compress_ratio 0 (a layer without a compressed cache: no top-k entries) is accepted: DeepSeek-V4.1's
/// functions define it; the seed divides by it.
DSV4KV_HD constexpr bool allows_compress_ratio_zero(Semantics s) { return s == Semantics::kVllmV41; }

/// Largest value an int32 index output can hold.
inline constexpr int64_t kIndexMax = 2147483647;

/// Sentinel of every index output: "no entry".
inline constexpr int32_t kNoIndex = -1;

/// round_up(x, m) for m > 0.
DSV4KV_HD constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// Column alignment of combine_topk_swa_indices rows (FlashMLA's sparse prefill needs topk % 128 == 0).
inline constexpr int64_t kCombineRowAlignment = 128;
/// Column alignment of the compressed region of build_flashinfer_mixed_sparse_indices rows
/// (FlashInfer's TRTLLM-gen sparse MLA loads indices as 16-byte vectors, i.e. 4 int32).
inline constexpr int64_t kMixedTopkAlignment = 4;

/// Width of a combine_topk_swa_indices row.
DSV4KV_HD constexpr int64_t combine_row_width(int64_t topk, int64_t window, int64_t max_image_tokens) {
  return round_up(topk + window + max_image_tokens, kCombineRowAlignment);
}

/// Width of a build_flashinfer_mixed_sparse_indices row:
/// swa_width + image_width + round_up(max(topk, decode_topk), 4).
DSV4KV_HD constexpr int64_t mixed_row_width(int64_t swa_width, int64_t image_width, int64_t topk, int64_t decode_topk) {
  return swa_width + image_width + round_up(topk > decode_topk ? topk : decode_topk, kMixedTopkAlignment);
}

/// A spec constant by its C++ name, for bindings that export them all in one loop.
struct NamedConstant {
  const char* name;  ///< the C++ name, e.g. "kHeadDim"
  int64_t value;     ///< its value
};

/// Every layout constant (layout.hpp) and row alignment (above): what python/src/ext.cpp exports.
inline constexpr NamedConstant kNamedConstants[] = {
    {"kHeadDim", kHeadDim},
    {"kNopeDim", kNopeDim},
    {"kRopeDim", kRopeDim},
    {"kTileSize", kTileSize},
    {"kNumTiles", kNumTiles},
    {"kBf16Bytes", kBf16Bytes},
    {"kRopeBytes", kRopeBytes},
    {"kTokenDataBytes", kTokenDataBytes},
    {"kScaleBytesPerToken", kScaleBytesPerToken},
    {"kScalePadIndex", kScalePadIndex},
    {"kTokenBytes", kTokenBytes},
    {"kScaleBias", kScaleBias},
    {"kBlockStrideAlignment", kBlockStrideAlignment},
    {"kVllmBlockRounding", kVllmBlockRounding},
    {"kCombineRowAlignment", kCombineRowAlignment},
    {"kMixedTopkAlignment", kMixedTopkAlignment},
};

#if !defined(__CUDA_ARCH__)
/// A layout or row-width rule of int64 arguments, by name, for bindings that export them all
/// in one loop (python/src/ext.cpp).
struct NamedRule {
  const char* name;                   ///< the C++ (and Python) name
  const char* args;                   ///< argument names, comma separated
  const char* doc;                    ///< one line
  int arity;                          ///< number of arguments
  int64_t (*fn)(const int64_t* arg);  ///< the rule on arg[0 .. arity)
};

/// The rules python/src/ext.cpp exports (each with its arguments' names).
inline constexpr NamedRule kNamedRules[] = {
    {"token_data_offset", "pos", "Byte offset, inside its block, of token `pos`'s FP8 codes.", 1,
     [](const int64_t* a) { return token_data_offset(a[0]); }},
    {"rope_offset", "pos", "Byte offset, inside its block, of token `pos`'s 64 bf16 RoPE values.", 1,
     [](const int64_t* a) { return rope_offset(a[0]); }},
    {"scale_offset", "block_size,pos,tile",
     "Byte offset, inside its block, of token `pos`'s scale byte `tile` (7 = pad).", 3,
     [](const int64_t* a) { return scale_offset(a[0], a[1], static_cast<int>(a[2])); }},
    {"block_data_bytes", "block_size", "Bytes of a block that the layout uses (block_size * 584).", 1,
     [](const int64_t* a) { return block_data_bytes(a[0]); }},
    {"vllm_block_stride", "block_size",
     "The block stride vLLM allocates: block_data_bytes rounded up to a multiple of 576.", 1,
     [](const int64_t* a) { return vllm_block_stride(a[0]); }},
    {"combine_row_width", "topk,window,max_image_tokens", "Columns of a combine_topk_swa_indices row.", 3,
     [](const int64_t* a) { return combine_row_width(a[0], a[1], a[2]); }},
    {"mixed_row_width", "swa_width,image_width,topk,decode_topk",
     "Columns of a build_flashinfer_mixed_sparse_indices row.", 4,
     [](const int64_t* a) { return mixed_row_width(a[0], a[1], a[2], a[3]); }},
};
#endif

/// Accumulates the error reports of one output element or row.
struct Faults {
  int32_t n = 0;
  DSV4KV_HD void add(int32_t k = 1) { n += k; }
};

/// An int64 index result as int32: values above INT32_MAX are dropped (-1) and reported.
DSV4KV_HD int32_t to_index(int64_t v, Faults& f) {
  if (v < 0) return kNoIndex;
  if (v > kIndexMax) {
    f.add();
    return kNoIndex;
  }
  return static_cast<int32_t>(v);
}

/// Translates a request-local token index through a block-table row:
/// `row[local / bs] * bs + local % bs`. A negative local index is a sentinel
/// (-1, no fault); a column outside the row or a negative table entry gives -1
/// and a fault.
/// \param local  request-local token index (negative = no entry)
/// \param row    the request's block-table row (`cols` readable entries)
/// \param cols   entries of `row` that may be read
/// \param bs     tokens per cache block
/// \param f      receives one fault per dropped value
DSV4KV_HD int32_t lookup_slot(int64_t local, const int32_t* row, int64_t cols, int64_t bs, Faults& f) {
  if (local < 0) return kNoIndex;
  const int64_t col = local / bs;
  if (col >= cols) {
    f.add();
    return kNoIndex;
  }
  const int64_t block = row[col];
  if (block < 0) {
    f.add();
    return kNoIndex;
  }
  return to_index(block * bs + local % bs, f);
}

/// FlashInfer's block-span remap for packed pages:
/// `(v / bs) * span + v % bs` for v >= 0, -1 for v < 0. With span == bs it is the identity.
DSV4KV_HD int32_t remap_block_span(int64_t v, int64_t bs, int64_t span, Faults& f) {
  if (v < 0) return kNoIndex;
  return to_index((v / bs) * span + v % bs, f);
}

/// The request owning token `t` of a batch described by `query_start_loc`
/// (R + 1 entries, rebased by `base`): the largest b with `qsl[b] - base <= t`,
/// found by this exact binary search, owns t when `t < qsl[b+1] - base`.
/// Returns -1 when no request owns t. On a non-decreasing `qsl` this is the
/// unique request whose range holds t; on any other input it is still a
/// deterministic function of the input, the same on every backend.
DSV4KV_HD int64_t find_request(const int32_t* qsl, int64_t num_reqs, int64_t base, int64_t t) {
  int64_t lo = 0, hi = num_reqs;  // invariant: answer in [lo - 1, hi - 1]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (int64_t{qsl[mid]} - base <= t)
      lo = mid + 1;
    else
      hi = mid;
  }
  const int64_t b = lo - 1;
  if (b < 0) return -1;
  if (t >= int64_t{qsl[b + 1]} - base) return -1;
  return b;
}

/// Sliding window of one query token, widened for in-image bidirectional
/// visibility (DeepSeek's `get_window_topk_idxs_visible`):
/// `start = max(pos - (W-1) - max(left - (W-1), 0), 0)`, `end = pos + right + 1`
/// (half-open). `left = right = 0` gives the plain window of W tokens.
struct Window {
  int64_t start;
  int64_t end;
};

DSV4KV_HD Window visible_window(int64_t pos, int64_t window, int64_t left, int64_t right) {
  const int64_t left_extra = left - (window - 1) > 0 ? left - (window - 1) : 0;
  const int64_t s = pos - (window - 1) - left_extra;
  return Window{s > 0 ? s : 0, pos + right + 1};
}

/// Per-token visibility counts of one image, as the callers of the combine operations pass them.
struct Visibility {
  int64_t left;   ///< positions visible before the token inside the image
  int64_t right;  ///< positions visible after the token inside the image
};

/// DeepSeek's in-image visibility (its `get_window_topk_idxs_visible`) of the token at `pos` for
/// an image occupying the inclusive position span [span_start, span_end]:
/// `left = min(pos - span_start, max_image_tokens - 1)`, `right = min(span_end - pos, max_image_tokens)`;
/// a token outside the span gets left = right = 0. It reproduces every visibility array of the
/// golden files from their recorded spans (conformance/visibility_test.cpp).
DSV4KV_HD Visibility image_visibility(int64_t pos, int64_t span_start, int64_t span_end, int64_t max_image_tokens) {
  if (pos < span_start || pos > span_end) return Visibility{0, 0};
  const int64_t l = pos - span_start < max_image_tokens - 1 ? pos - span_start : max_image_tokens - 1;
  const int64_t r = span_end - pos < max_image_tokens ? span_end - pos : max_image_tokens;
  return Visibility{l > 0 ? l : 0, r};
}

/// A visibility value as used: negative values are malformed, read as 0 and reported.
DSV4KV_HD int64_t visibility(int32_t v, Faults& f) {
  if (v < 0) {
    f.add();
    return 0;
  }
  return v;
}

/// Number of compressed (top-k) entries a query token at `pos` may attend to:
/// `min((pos + 1) / compress_ratio, topk)` (compress_ratio >= 1; see topk_len_of for 0).
DSV4KV_HD int64_t topk_len_at(int64_t pos, int64_t compress_ratio, int64_t topk) {
  const int64_t n = (pos + 1) / compress_ratio;
  return n < topk ? n : topk;
}

/// topk_len_at, and 0 for compress_ratio 0 (a layer without compressed cache) when `ratio_may_be_zero`
/// (allows_compress_ratio_zero of the call's profile; validate() lets 0 through only then).
DSV4KV_HD int64_t topk_len_of(int64_t pos, int64_t compress_ratio, int64_t topk, bool ratio_may_be_zero) {
  if (ratio_may_be_zero && compress_ratio <= 0) return 0;
  return topk_len_at(pos, compress_ratio, topk);
}

/// Geometry of one request of combine_topk_swa_indices, or `ok = false` when
/// its values are malformed (query range reversed, seq_len shorter than the
/// query, gather_len outside [0, seq_len]): such a request's tokens get an
/// all -1 row and length 0, and the request is reported once.
struct CombineRequest {
  bool ok;
  int64_t query_start;  ///< first token (rebased)
  int64_t query_end;    ///< one past the last token (rebased)
  int64_t seq_len;
  int64_t gather_start;  ///< seq_len - gather_len: position of gathered row 0
};

DSV4KV_HD CombineRequest combine_request(const int32_t* qsl, const int32_t* seq_lens, const int32_t* gather_lens,
                                         int64_t b) {
  CombineRequest r;
  const int64_t base = qsl[0];
  r.query_start = int64_t{qsl[b]} - base;
  r.query_end = int64_t{qsl[b + 1]} - base;
  r.seq_len = seq_lens[b];
  const int64_t gather_len = gather_lens[b];
  r.gather_start = r.seq_len - gather_len;
  const int64_t q = r.query_end - r.query_start;
  r.ok = q >= 0 && r.seq_len >= q && gather_len >= 0 && gather_len <= r.seq_len;
  return r;
}

/// Row of one query token for combine_topk_swa_indices.
struct CombineRow {
  int64_t topk_len;   ///< columns [0, topk_len) are top-k entries
  int64_t swa_start;  ///< first SWA position after clamping to the gathered rows
  int64_t swa_len;    ///< columns [topk_len, topk_len + swa_len) are SWA entries
};

/// Decides the shape of token `t`'s combined row (request `req`, batch index `b`).
/// `ratio_may_be_zero`: as in topk_len_of.
DSV4KV_HD CombineRow combine_row(const CombineRequest& req, int64_t t, int64_t window, int64_t compress_ratio,
                                 int64_t topk, int64_t max_image_tokens, int64_t left, int64_t right,
                                 bool ratio_may_be_zero = false) {
  const int64_t q = req.query_end - req.query_start;
  const int64_t pos = req.seq_len - q + (t - req.query_start);
  CombineRow row;
  row.topk_len = topk_len_of(pos, compress_ratio, topk, ratio_may_be_zero);
  const Window w = visible_window(pos, window, left, right);
  // Clamp to the rows that were gathered: [gather_start, seq_len).
  const int64_t s = w.start > req.gather_start ? w.start : req.gather_start;
  const int64_t e = w.end < req.seq_len ? w.end : req.seq_len;
  int64_t n = e - s > 0 ? e - s : 0;
  const int64_t cap = window + max_image_tokens;  // the SWA columns the row reserves
  row.swa_len = n < cap ? n : cap;
  row.swa_start = s;
  return row;
}

/// Top-k column of a combined row: `v + M*b` for every v >= 0 (vLLM's bytes: combine follows no
/// index, so a v >= N is passed through, as vLLM's own test expects); a negative v is a sentinel and
/// stays -1 (vLLM would write `M*b - 1`). A sum above INT32_MAX is dropped (-1) and reported.
DSV4KV_HD int32_t combine_topk_entry(int32_t v, int64_t M, int64_t b, Faults& f) {
  if (v < 0) return kNoIndex;
  return to_index(int64_t{v} + M * b, f);
}

/// Top-k column of a combined row under profile `s`: combine_topk_entry(), except that with
/// masks_combine_topk(s) a v >= N (past the request's compressed rows) is -1 too, without a report (upstream's
/// rule, not a fault). Either way the column counts toward the row's length.
DSV4KV_HD int32_t combine_topk_entry(int32_t v, int64_t M, int64_t N, int64_t b, Semantics s, Faults& f) {
  if (masks_combine_topk(s) && v >= N) return kNoIndex;
  return combine_topk_entry(v, M, b, f);
}

/// Whether the visibility arrays of combine_topk_swa_indices and build_flashinfer_mixed_sparse_indices
/// take effect: only when they are passed and the row reserves image columns (`max_image_tokens > 0`),
/// as vLLM's `IMAGE_WIDTH = max_image_tokens if has_image else 0` gate. Otherwise they are not read.
DSV4KV_HD constexpr bool visibility_in_effect(bool passed, int64_t max_image_tokens) {
  return passed && max_image_tokens > 0;
}

/// SWA column j of a combined row: `M*b + N + swa_start + j - gather_start`.
DSV4KV_HD int32_t combine_swa_entry(const CombineRequest& req, const CombineRow& row, int64_t j, int64_t M, int64_t N,
                                    int64_t b, Faults& f) {
  return to_index(M * b + N + row.swa_start + j - req.gather_start, f);
}

/// Geometry of one prefill token of build_flashinfer_mixed_sparse_indices, or
/// `ok = false` when its request index or the request's values are malformed
/// (request out of range, query range reversed or not holding the token,
/// seq_len shorter than the query): such a row is all -1 with length 0 and is
/// reported once.
struct PrefillToken {
  bool ok;
  int64_t req;
  int64_t pos;
};

DSV4KV_HD PrefillToken prefill_token(const int32_t* qsl, const int32_t* seq_lens, int64_t num_reqs, int64_t req,
                                     int64_t t) {
  PrefillToken p{false, req, 0};
  if (req < 0 || req >= num_reqs) return p;
  const int64_t qs = qsl[req];
  const int64_t qe = qsl[req + 1];
  const int64_t seq_len = seq_lens[req];
  if (qe < qs || t < qs || t >= qe || seq_len < qe - qs) return p;
  p.pos = seq_len - (qe - qs) + (t - qs);
  p.ok = true;
  return p;
}

/// A row length as int32. Every length the operations form lies inside int32 (validate() keeps
/// row widths there) except the length of a mixed decode row with decode_compressed_topk_lens,
/// `swa_total + decode_compressed_topk_lens[t]`, which a value near INT32_MAX pushes past it:
/// such a length is clamped to INT32_MAX (INT32_MIN below) and reported, never wrapped.
DSV4KV_HD int32_t to_length(int64_t v, Faults& f) {
  if (v > kIndexMax) {
    f.add();
    return static_cast<int32_t>(kIndexMax);
  }
  if (v < -kIndexMax - 1) {
    f.add();
    return static_cast<int32_t>(-kIndexMax - 1);
  }
  return static_cast<int32_t>(v);
}

/// A replay_start value as used (bounded_replay): a negative one is malformed, read as 0 and reported.
DSV4KV_HD int64_t replay_start_of(int32_t v, Faults& f) {
  if (v < 0) {
    f.add();
    return 0;
  }
  return v;
}

/// Draft tokens after decode token `t` in its request (`query_start_loc` holds global token indices): the tokens of
/// the request's query range past t, or 0 when t lies in no request's range (a CUDA-graph pad token) or `req` is
/// outside [0, num_reqs). Not a report either way.
DSV4KV_HD int64_t decode_future_tokens(const int32_t* qsl, int64_t num_reqs, int64_t req, int64_t t) {
  if (req < 0 || req >= num_reqs) return 0;
  const int64_t qs = qsl[req], qe = qsl[req + 1];
  if (t < qs || t >= qe) return 0;
  return qe - 1 - t;
}

/// Geometry of a DSpark decode row (the vllm_v4 profile, dspark_decode_rows): of its `entries` non-negative SWA
/// indices, the last `future` belong to draft tokens after this one. `causal` = clamp(entries - future, 0, window)
/// of them fill columns [0, causal) (then -1 up to `window`); the next `spill`, at most swa_width - window, fill
/// columns [window, window + spill); the compressed entries follow at column window + spill, and the row's length
/// counts window + spill SWA columns.
struct DsparkRow {
  int64_t causal;
  int64_t spill;
};

DSV4KV_HD DsparkRow dspark_row(int64_t entries, int64_t future, int64_t window, int64_t swa_width) {
  int64_t causal = entries - future;
  causal = causal < 0 ? 0 : (causal > window ? window : causal);
  int64_t spill = entries - causal;
  const int64_t room = swa_width - window;
  spill = spill > room ? room : spill;
  return DsparkRow{causal, spill};
}

/// The decode_swa_indices column that DSpark row column `c < window + spill` shows, or -1 for the gap
/// [causal, window).
DSV4KV_HD int64_t dspark_swa_source(const DsparkRow& r, int64_t window, int64_t c) {
  if (c < r.causal) return c;
  if (c < window) return -1;
  return r.causal + (c - window);
}

/// Length of a build_flashinfer_mixed_sparse_indices decode row (spec step 3): `swa_total` plus its
/// compressed entries, which are none without compressed indices (`dct` = 0); with request-local
/// indices the `kept` (non -1) compressed entries of a valid token and none for an invalid one;
/// otherwise `decode_compressed_topk_lens[t]` when passed, else `dct`. Clamped by to_length (the
/// one length that may pass INT32_MAX). `is_valid()` and `decode_len()` read the token's flag and
/// passed length; each is called only when its value decides the result.
template <class IsValid, class DecodeLen>
DSV4KV_HD int32_t mixed_decode_length(int64_t swa_total, int64_t dct, bool are_local, int64_t kept, IsValid&& is_valid,
                                      bool has_decode_lens, DecodeLen&& decode_len, Faults& f) {
  int64_t comp_len = dct;
  if (dct == 0)
    comp_len = 0;
  else if (are_local)
    comp_len = is_valid() ? kept : 0;
  else if (has_decode_lens)
    comp_len = decode_len();
  return to_length(swa_total + comp_len, f);
}

}  // namespace dsv4kv::spec
