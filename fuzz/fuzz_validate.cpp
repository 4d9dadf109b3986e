// libFuzzer target: hostile argument structs into validate() of every operation, and the
// invariant validate() promises (spec "Argument contracts", "Integer ranges and extents").
//
// fuzz_ops perturbs small well-formed cases; this target builds argument structs the way a hostile
// caller can: logical sizes from a vocabulary of extremes (0, 1, 2^31 - 1, 2^32, 2^62, 2^63 - 1,
// ...), strides that are contiguous, padded, zero, huge or negative, data pointers that are exact
// allocations, null, misaligned, fake, or near the top of the address space, extreme scalars, and
// error counters that are null, aligned or misaligned. For each input:
//   1. validate() accepts, or throws dsv4kv::Error whose message starts with the operation;
//   2. when it accepts: every view it checked has an element count and a byte extent inside int64
//      (recomputed here with the toolkit), the counter is 4-byte aligned, and every element the
//      operation may touch (the spec's access pattern, modelled here from the shapes and scalars
//      independently of validate()) lies inside its view's extent;
//   3. when it accepts, every checked view is an exact allocation and the work is small: the
//      reference runs (under ASan + UBSan, like every translation unit of this build), and no
//      input changes. Views validate() does not check keep their fake pointers: touching one is a
//      crash, i.e. a finding.
// A violated invariant prints what broke and aborts.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "dsv4kv/reference.hpp"
#include "dsv4kv/spec.hpp"
#include "fuzz_common.hpp"

namespace {

using dsv4kv::DType;
using dsv4kv::TensorView;
namespace sp = dsv4kv::spec;

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();
/// Views up to this many bytes get a real allocation of exactly their extent.
constexpr int64_t kMaxAllocBytes = int64_t{1} << 18;
/// The reference runs only when the views hold at most this many elements in all.
constexpr int64_t kMaxRunElements = int64_t{1} << 16;

/// Per operation: inputs, accepted by validate(), run on the reference. Printed at exit when
/// DSV4KV_FUZZ_STATS is set (how far the generator gets past validation).
struct Stats {
  int64_t seen[dsv4kv::kNumOps] = {}, accepted[dsv4kv::kNumOps] = {}, ran[dsv4kv::kNumOps] = {};
  ~Stats() {
    if (std::getenv("DSV4KV_FUZZ_STATS") == nullptr) return;
    for (int i = 0; i < dsv4kv::kNumOps; ++i)
      std::fprintf(stderr, "fuzz_validate stats: op %d: %lld inputs, %lld accepted, %lld run\n", i,
                   static_cast<long long>(seen[i]), static_cast<long long>(accepted[i]), static_cast<long long>(ran[i]));
  }
} g_stats;

[[noreturn]] void violated(const char* op, const std::string& what) {
  std::fprintf(stderr, "fuzz_validate: %s: invariant violated: %s\n", op, what.c_str());
  std::abort();
}

class Gen {
 public:
  Gen(const uint8_t* data, size_t size) : p_(data, size) {}

  /// True one time in `one_in`; false once the input is used up (exhausted data reads as 0), so
  /// the tail of every input builds well-formed arguments.
  bool coin(int one_in) { return p_.ConsumeIntegralInRange<int>(0, one_in - 1) == one_in - 1; }
  int64_t range(int64_t lo, int64_t hi) { return p_.ConsumeIntegralInRange<int64_t>(lo, hi); }
  template <size_t N>
  int64_t pick(const int64_t (&v)[N]) {
    return v[range(0, N - 1)];
  }

  /// A logical size (rows, widths, request counts): usually small, sometimes extreme.
  int64_t size() {
    static const int64_t kExtremes[] = {kI32Max, int64_t{1} << 31, int64_t{1} << 32, (int64_t{1} << 32) + 1,
                                        int64_t{1} << 40, int64_t{1} << 60, int64_t{1} << 61, int64_t{1} << 62,
                                        3 * (int64_t{1} << 61), kI64Max, kI64Max - 1, kI64Max - 3, kI64Max - 7,
                                        kI64Max / 4, kI64Max / 4 + 1, 3037000500};
    switch (range(0, 15)) {
      case 14: return pick(kExtremes);
      case 15: return p_.ConsumeIntegral<int64_t>() & kI64Max;
      default: return range(0, 4);
    }
  }

  /// A scalar argument: usually in [lo, hi], sometimes an edge value of int64.
  int64_t scalar(int64_t lo, int64_t hi) {
    static const int64_t kEdges[] = {0, -1, 1, -2, kI32Max, kI32Max - 1, kI32Min, int64_t{1} << 31, int64_t{1} << 30,
                                     kI64Max, std::numeric_limits<int64_t>::min(), int64_t{1} << 40, 64, 128};
    if (!coin(12)) return range(lo, hi);  // (an exhausted input gives lo)
    return pick(kEdges);
  }

  /// A stride for dimension d of a view whose inner dimensions span `inner` elements.
  int64_t stride(bool innermost, const sp::Checked& inner) {
    static const int64_t kHuge[] = {int64_t{1} << 31, int64_t{1} << 32, int64_t{1} << 61, int64_t{1} << 62,
                                    kI64Max / 2, kI64Max, 3 * (int64_t{1} << 61)};
    if (innermost) {
      if (!coin(16)) return 1;
      return coin(2) ? range(0, 3) : pick(kHuge);
    }
    switch (range(0, 9)) {
      case 6: return 0;
      case 7: return pick(kHuge);
      case 8: return inner.ok && inner.value < kI64Max - 3 ? inner.value + range(1, 3) : 1;  // padded rows
      case 9: return p_.ConsumeIntegral<int64_t>();              // anything, negative included
      default: return inner.ok ? inner.value : pick(kHuge);      // contiguous
    }
  }

  /// An index value for a table of `n` entries: biased toward sentinels and boundaries.
  int32_t index(int64_t n) {
    switch (range(0, 9)) {
      case 7: return -1;
      case 8: return static_cast<int32_t>(n < kI32Max ? n : kI32Max);
      case 9: {
        static const int32_t kEdges[] = {-2, kI32Min, kI32Max, kI32Max - 1, kI32Max - 5, 1 << 29};
        return kEdges[range(0, std::size(kEdges) - 1)];
      }
      default: return static_cast<int32_t>(range(0, n > 0 && n < kI32Max ? n - 1 : 64));
    }
  }

  uint8_t byte() { return p_.ConsumeIntegral<uint8_t>(); }

 private:
  FuzzedDataProvider p_;
};

/// a + b, saturated at INT64_MAX (the harness's own size arithmetic must not overflow either).
int64_t plus(int64_t a, int64_t b) {
  const sp::Checked r = sp::checked_add(a, b);
  return r.ok ? r.value : kI64Max;
}

/// The views of one run: which are exact allocations, and copies of the inputs.
class Arena {
 public:
  explicit Arena(Gen& g) : g_(g) {}

  /// A view of `dt` and the given logical shape, as a hostile caller might pass it.
  TensorView tensor(DType dt, std::initializer_list<int64_t> shape, bool optional, int64_t index_range) {
    TensorView v;
    if (optional ? g_.coin(4) : g_.coin(48)) return v;  // absent
    v.dtype = g_.coin(48) ? static_cast<DType>(g_.range(0, 4)) : dt;
    v.ndim = static_cast<int>(shape.size());
    int d = 0;
    for (int64_t s : shape) v.shape[d++] = s;
    if (g_.coin(12)) v.shape[g_.range(0, v.ndim - 1)] = g_.coin(8) ? -1 : g_.size();
    if (g_.coin(48)) v.ndim = static_cast<int>(g_.range(0, dsv4kv::kMaxRank));
    sp::Checked inner(1);
    for (int k = v.ndim - 1; k >= 0; --k) {
      v.stride[k] = g_.stride(k == v.ndim - 1, inner);
      inner = sp::checked_mul(inner, v.shape[k] > 0 ? v.shape[k] : 1);
    }
    const int es = dsv4kv::dtype_size(v.dtype);
    const sp::Checked extent = v.extent_bytes();
    Slot s;
    s.view_index = static_cast<int>(views_.size());
    if (extent.ok && extent.value <= kMaxAllocBytes && !g_.coin(32)) {
      // An exact allocation (one byte more when misaligned on purpose): ASan sees any access outside.
      const size_t mis = es > 1 && g_.coin(32) ? 1 : 0;
      s.bytes = static_cast<size_t>(extent.value);
      s.buf.reset(new uint8_t[s.bytes + mis]);
      v.data = s.buf.get() + mis;
      fill(static_cast<uint8_t*>(v.data), s.bytes, es, index_range);
      s.allocated = true;
    } else {
      // Not backed by memory: validate() must reject it, or the operation must never touch it.
      static const uintptr_t kFake[] = {0, 0x10000, 0x10001, ~uintptr_t{0} - 4095, ~uintptr_t{0} - 15};
      v.data = reinterpret_cast<void*>(kFake[g_.range(0, std::size(kFake) - 1)]);
    }
    if (g_.coin(64)) {  // a null data pointer, whatever the shape
      v.data = nullptr;
      s.allocated = false;
    }
    views_.push_back(v);
    slots_.push_back(std::move(s));
    return v;
  }

  /// True when `v` (a view this arena made) is backed by an exact allocation, or holds no element.
  bool backed(const TensorView& v) const {
    if (!v.present() || v.empty()) return true;
    for (size_t i = 0; i < views_.size(); ++i)
      if (views_[i].data == v.data && slots_[i].allocated) return true;
    return false;
  }
  /// The exact allocation behind `v` (empty when it has none).
  std::span<const uint8_t> bytes_of(const TensorView& v) const {
    for (size_t i = 0; i < views_.size(); ++i)
      if (views_[i].data == v.data && slots_[i].allocated) return {static_cast<const uint8_t*>(v.data), slots_[i].bytes};
    return {};
  }

 private:
  struct Slot {
    int view_index = 0;
    std::unique_ptr<uint8_t[]> buf;
    size_t bytes = 0;
    bool allocated = false;
  };

  void fill(uint8_t* p, size_t n, int es, int64_t index_range) {
    for (size_t i = 0; i + es <= n; i += es) {
      if (es == 4) {
        const int32_t x = g_.index(index_range);
        std::memcpy(p + i, &x, 4);
      } else if (es == 8) {
        const int64_t x = g_.coin(4) ? int64_t{g_.index(index_range)} : static_cast<int64_t>(g_.size()) - g_.range(0, 2);
        std::memcpy(p + i, &x, 8);
      } else {
        for (int b = 0; b < es; ++b) p[i + b] = g_.byte();
      }
    }
    for (size_t i = n - n % es; i < n; ++i) p[i] = g_.byte();
  }

  Gen& g_;
  std::vector<TensorView> views_;
  std::vector<Slot> slots_;
};

/// The optional error counter: null, aligned, or misaligned.
struct Counter {
  alignas(8) uint8_t bytes[16] = {};
  int32_t* make(Gen& g) {
    switch (g.range(0, 15)) {
      case 14: return nullptr;
      case 15: return reinterpret_cast<int32_t*>(bytes + g.range(1, 3));  // misaligned
      default: return reinterpret_cast<int32_t*>(bytes + 4);
    }
  }
};

// ---------------------------------------------------------------------------
// Invariant 2: the access footprint of an accepted call lies inside the views' extents.
// ---------------------------------------------------------------------------

/// Checks that validate() left `v` with an int64 element count and byte extent.
void expect_bounded(const char* op, const TensorView& v, const char* name) {
  if (!v.present()) return;
  if (!v.numel_checked().ok) violated(op, std::string(name) + ": accepted with an element count beyond int64");
  if (!v.extent_bytes().ok) violated(op, std::string(name) + ": accepted with a byte extent beyond int64");
}

/// The operation may touch elements [0, count[d]) along each dimension d of `v`: each count must
/// be within the view's size, and the last such element's bytes inside its extent.
void expect_inside(const char* op, const TensorView& v, const char* name, std::initializer_list<sp::Checked> counts) {
  std::string what = std::string(name) + ": ";
  if (!v.present()) violated(op, what + "touched but absent");
  if (static_cast<int>(counts.size()) != v.ndim) violated(op, what + "accepted with the wrong rank");
  sp::Checked last(0);
  int d = 0;
  for (const sp::Checked& n : counts) {
    if (!n.ok) violated(op, what + "the touched range of dimension " + std::to_string(d) + " overflows int64");
    if (n.value == 0) return;  // nothing touched
    if (n.value > v.shape[d])
      violated(op, what + "touches " + std::to_string(n.value) + " entries of dimension " + std::to_string(d) +
                       ", which has " + std::to_string(v.shape[d]));
    last = sp::checked_add(last, sp::checked_mul(n.value - 1, v.stride[d]));
    ++d;
  }
  const sp::Checked end = sp::checked_mul(sp::checked_add(last, 1), dsv4kv::dtype_size(v.dtype));
  const sp::Checked extent = v.extent_bytes();
  if (!end.ok || !extent.ok || end.value > extent.value) violated(op, what + "last touched byte outside the extent");
}

/// The cache blocks [0, num_blocks) are touched in their first block_data_bytes(block_size) bytes.
void expect_cache_inside(const char* op, const TensorView& cache, const dsv4kv::CacheGeometry& g) {
  if (g.base != cache.data || g.num_blocks != cache.shape[0] || g.block_size < 1)
    violated(op, "cache geometry disagrees with the k_cache view");
  if (!sp::checked_mul(g.num_blocks, g.block_stride).ok) violated(op, "num_blocks * block_stride overflows int64");
  if (g.num_blocks == 0) return;
  const sp::Checked end =
      sp::checked_add(sp::checked_mul(g.num_blocks - 1, g.block_stride), sp::block_data_bytes(g.block_size));
  const sp::Checked extent = cache.extent_bytes();
  if (!end.ok || !extent.ok || end.value > extent.value) violated(op, "a block's records lie outside the k_cache extent");
}

void expect_counter(const char* op, const int32_t* p) {
  if (reinterpret_cast<uintptr_t>(p) % 4 != 0) violated(op, "accepted a misaligned error_count");
}

/// Elements in all the given views (saturating), to bound the reference's work.
int64_t work(std::initializer_list<const TensorView*> views) {
  sp::Checked n(0);
  for (const TensorView* v : views) n = sp::checked_add(n, v->numel_checked());
  return n.ok ? n.value : kI64Max;
}

/// Runs `validate` (a call of dsv4kv::validate()); false when it threw a contract error, whose
/// message and Error::op() must name the operation.
template <class Fn>
bool accepts(const char* op, Fn&& validate) {
  try {
    validate();
    return true;
  } catch (const dsv4kv::Error& e) {
    if (std::getenv("DSV4KV_FUZZ_VERBOSE") != nullptr) std::fprintf(stderr, "rejected: %s\n", e.what());
    if (std::string(e.what()).rfind(std::string(op) + ": ", 0) != 0)
      violated(op, std::string("message does not start with the operation: ") + e.what());
    if (e.op() != op) violated(op, "Error::op() names another operation");
  }
  return false;
}

// ---------------------------------------------------------------------------
// Per operation: how a hostile caller builds its arguments, and its access footprint
// ---------------------------------------------------------------------------

/// What footprint() found for an accepted call: the views validate() checked (each must be
/// bounded, and backed before the reference may run) and the elements of work.
struct Footprint {
  std::vector<const TensorView*> checked;
  int64_t work;
};

void build(Gen& g, Arena& a, dsv4kv::QuantizeInsertArgs& q) {
  q.block_size = g.scalar(1, 8);
  const int64_t rows = g.size(), T = g.coin(4) ? g.size() : (rows > 0 ? rows - g.range(0, 1) : 0);
  q.k = a.tensor(DType::kBF16, {rows, sp::kHeadDim}, false, 64);
  const int64_t blocks = g.size();
  const int64_t bs = q.block_size >= 1 && q.block_size <= 16 ? q.block_size : 1;
  const int64_t per_block = g.coin(8) ? g.size() : sp::block_data_bytes(bs) + 2 * g.range(0, 3);
  if (g.coin(3))
    q.k_cache = a.tensor(DType::kU8, {blocks, bs, per_block / bs}, false, 256);
  else
    q.k_cache = a.tensor(DType::kU8, {blocks, per_block}, false, 256);
  q.slot_mapping = a.tensor(DType::kI64, {T}, false, 4 * bs);
  q.is_ue8m0 = !g.coin(32);
  q.format = static_cast<sp::Fp8Format>(g.range(0, 1));
}

Footprint footprint(const char* op, const dsv4kv::QuantizeInsertArgs& q, const dsv4kv::CacheGeometry& geo) {
  const int64_t t = q.slot_mapping.shape[0];
  expect_inside(op, q.k, "k", {t, sp::kHeadDim});
  expect_inside(op, q.slot_mapping, "slot_mapping", {t});
  expect_cache_inside(op, q.k_cache, geo);
  return {{&q.k, &q.k_cache, &q.slot_mapping}, work({&q.k, &q.slot_mapping})};
}

void build(Gen& g, Arena& a, dsv4kv::DequantizeGatherArgs& d) {
  d.block_size = g.scalar(1, 8);
  const int64_t bs = d.block_size >= 1 && d.block_size <= 16 ? d.block_size : 1;
  const int64_t R = g.size(), out_rows = g.size(), cols = g.size();
  d.seq_lens = a.tensor(DType::kI32, {R}, false, 4 * bs);
  d.gather_lens = a.tensor(DType::kI32, {plus(R, g.range(0, 1))}, true, 4 * bs);
  d.out = a.tensor(DType::kBF16, {plus(R, g.range(0, 1)), out_rows, sp::kHeadDim}, false, 0);
  d.block_table = a.tensor(DType::kI32, {R, cols}, false, 3);
  d.offset = g.scalar(0, out_rows < 8 ? out_rows : 8);
  d.k_cache = a.tensor(DType::kU8, {g.size(), sp::block_data_bytes(bs) + 2 * g.range(0, 2)}, false, 256);
  d.format = static_cast<sp::Fp8Format>(g.range(0, 1));
}

Footprint footprint(const char* op, const dsv4kv::DequantizeGatherArgs& d, const dsv4kv::CacheGeometry& geo) {
  const int64_t r = d.seq_lens.shape[0];
  if (d.offset < 0 || d.offset > d.out.shape[1]) violated(op, "offset outside [0, out.shape[1]]");
  expect_inside(op, d.seq_lens, "seq_lens", {r});
  if (d.gather_lens.present()) expect_inside(op, d.gather_lens, "gather_lens", {r});
  expect_inside(op, d.out, "out", {r, d.out.shape[1], sp::kHeadDim});
  expect_inside(op, d.block_table, "block_table", {r, d.block_table.shape[1]});
  expect_cache_inside(op, d.k_cache, geo);
  return {{&d.out, &d.k_cache, &d.seq_lens, &d.gather_lens, &d.block_table},
          work({&d.out, &d.seq_lens, &d.block_table})};
}

void build(Gen& g, Arena& a, dsv4kv::SparseGatherArgs& s) {
  s.block_size = g.scalar(1, 8);
  const int64_t bs = s.block_size >= 1 && s.block_size <= 16 ? s.block_size : 1;
  const int64_t n = g.size();
  s.slot_indices = a.tensor(g.coin(2) ? DType::kI64 : DType::kI32, {n}, false, 4 * bs);
  s.out = a.tensor(DType::kBF16, {plus(n, g.range(0, 1)), sp::kHeadDim}, false, 0);
  s.k_cache = a.tensor(DType::kU8, {g.size(), sp::block_data_bytes(bs) + 2 * g.range(0, 2)}, false, 256);
  s.format = static_cast<sp::Fp8Format>(g.range(0, 1));
}

Footprint footprint(const char* op, const dsv4kv::SparseGatherArgs& s, const dsv4kv::CacheGeometry& geo) {
  const int64_t n = s.slot_indices.shape[0];
  expect_inside(op, s.slot_indices, "slot_indices", {n});
  expect_inside(op, s.out, "out", {n, sp::kHeadDim});
  expect_cache_inside(op, s.k_cache, geo);
  return {{&s.out, &s.k_cache, &s.slot_indices}, work({&s.out, &s.slot_indices})};
}

void build(Gen& g, Arena& a, dsv4kv::GlobalTopkArgs& t) {
  t.block_size = g.scalar(1, 8);
  const int64_t T = g.size(), K = g.size(), R = g.size(), cols = g.size();
  t.topk_indices = a.tensor(DType::kI32, {T, K}, false, 32);
  t.token_to_req = a.tensor(DType::kI32, {plus(T, g.range(0, 1))}, false, R);
  t.block_table = a.tensor(DType::kI32, {R, cols}, false, 1 << 20);
  t.is_valid_token = a.tensor(DType::kBool, {T}, false, 2);
  t.global_topk_indices = a.tensor(DType::kI32, {T, K}, false, 0);
  t.topk_lens = a.tensor(DType::kI32, {T}, false, 0);
}

Footprint footprint(const char* op, const dsv4kv::GlobalTopkArgs& t, const dsv4kv::CacheGeometry&) {
  const int64_t rows = t.topk_indices.shape[0], k = t.topk_indices.shape[1];
  expect_inside(op, t.topk_indices, "topk_indices", {rows, k});
  expect_inside(op, t.token_to_req, "token_to_req_indices", {rows});
  expect_inside(op, t.is_valid_token, "is_valid_token", {rows});
  expect_inside(op, t.global_topk_indices, "global_topk_indices", {rows, k});
  expect_inside(op, t.topk_lens, "topk_lens", {rows});
  return {{&t.topk_indices, &t.token_to_req, &t.block_table, &t.is_valid_token, &t.global_topk_indices, &t.topk_lens},
          work({&t.topk_indices, &t.token_to_req, &t.global_topk_indices})};
}

void build(Gen& g, Arena& a, dsv4kv::CombineArgs& c) {
  const int64_t T = g.size(), R = g.size(), width = g.size();
  c.window_size = g.scalar(1, 8);
  c.compress_ratio = g.scalar(1, 4);
  c.topk = g.scalar(0, width < 8 ? width : 8);
  c.M = g.scalar(0, 1000);
  c.N = g.scalar(0, 64);
  c.max_image_tokens = g.scalar(0, 4);
  c.topk_indices = a.tensor(DType::kI32, {T, width}, false, 64);
  c.query_start_loc = a.tensor(DType::kI32, {g.coin(8) ? g.size() : plus(R, 1)}, false, plus(T, 1));
  c.seq_lens = a.tensor(DType::kI32, {R}, false, 16);
  c.gather_lens = a.tensor(DType::kI32, {R}, false, 16);
  if (g.coin(2)) {
    c.left_visible = a.tensor(DType::kI32, {T}, true, 6);
    c.right_visible = a.tensor(DType::kI32, {T}, true, 6);
  }
  const sp::Checked w = sp::checked_round_up(
      sp::checked_add(sp::checked_add(c.topk, c.window_size), c.max_image_tokens), sp::kCombineRowAlignment);
  c.combined_indices = a.tensor(DType::kI32, {T, w.ok && !g.coin(16) ? w.value : g.size()}, false, 0);
  c.combined_lens = a.tensor(DType::kI32, {T}, false, 0);
}

Footprint footprint(const char* op, const dsv4kv::CombineArgs& c, const dsv4kv::CacheGeometry&) {
  const int64_t t = c.topk_indices.shape[0], r = c.seq_lens.shape[0];
  expect_inside(op, c.topk_indices, "topk_indices", {t, c.topk});
  expect_inside(op, c.query_start_loc, "query_start_loc", {sp::checked_add(r, 1)});
  expect_inside(op, c.seq_lens, "seq_lens", {r});
  expect_inside(op, c.gather_lens, "gather_lens", {r});
  if (c.left_visible.present()) {
    expect_inside(op, c.left_visible, "left_visible", {t});
    expect_inside(op, c.right_visible, "right_visible", {t});
  }
  // A row holds topk_len + swa_len <= topk + window + max_image_tokens entries, and its int32
  // length must be exact: the row is that wide, and no wider than INT32_MAX.
  const sp::Checked need = sp::checked_add(sp::checked_add(c.topk, c.window_size), c.max_image_tokens);
  if (!need.ok || c.combined_indices.shape[1] < need.value || c.combined_indices.shape[1] > sp::kIndexMax)
    violated(op, "combined_indices accepted narrower than its entries or wider than int32");
  expect_inside(op, c.combined_indices, "combined_indices", {t, c.combined_indices.shape[1]});
  expect_inside(op, c.combined_lens, "combined_lens", {t});
  return {{&c.topk_indices, &c.query_start_loc, &c.seq_lens, &c.gather_lens, &c.left_visible, &c.right_visible,
           &c.combined_indices, &c.combined_lens},
          work({&c.topk_indices, &c.seq_lens, &c.combined_indices})};
}

void build(Gen& g, Arena& a, dsv4kv::MixedSparseArgs& x) {
  const int64_t D = g.size(), P = g.size(), R = g.size();
  x.window_size = g.scalar(1, 6);
  x.compress_ratio = g.scalar(1, 4);
  x.topk = g.scalar(0, 8);
  x.max_image_tokens = g.scalar(0, 4);
  x.swa_block_size = g.scalar(1, 8);
  x.compressed_block_size = g.scalar(1, 8);
  if (g.coin(2)) x.swa_block_span = g.scalar(1, 16);
  if (g.coin(2)) x.compressed_block_span = g.scalar(1, 16);
  const int64_t swa_w = g.coin(4) ? g.size() : plus(x.window_size, g.range(0, 2)), dct = g.size(), pcols = g.size();
  x.decode_swa_indices = a.tensor(DType::kI32, {D, swa_w}, false, 64);
  x.decode_compressed_indices = a.tensor(DType::kI32, {D, dct}, true, 16);
  x.decode_compressed_topk_lens = a.tensor(DType::kI32, {D}, true, 8);
  x.prefill_topk_indices = a.tensor(DType::kI32, {P, pcols}, false, 16);
  x.query_start_loc = a.tensor(DType::kI32, {g.coin(8) ? g.size() : plus(R, 1)}, false, 8);
  x.seq_lens = a.tensor(DType::kI32, {R}, false, 24);
  const sp::Checked dp = sp::checked_add(D, P);
  const int64_t tokens = dp.ok && !g.coin(16) ? dp.value : g.size();
  x.token_to_req = a.tensor(DType::kI32, {tokens}, false, R);
  x.swa_block_table = a.tensor(DType::kI32, {R, g.size()}, false, 1 << 20);
  x.compressed_block_table = a.tensor(DType::kI32, {R, g.size()}, true, 1 << 20);
  x.decode_compressed_indices_are_local = g.coin(2);
  x.decode_is_valid_token = a.tensor(DType::kBool, {D}, true, 2);
  if (g.coin(2)) {
    x.prefill_left_visible = a.tensor(DType::kI32, {tokens}, true, 6);
    x.prefill_right_visible = a.tensor(DType::kI32, {tokens}, true, 6);
  }
  const int64_t real_dct = x.decode_compressed_indices.present() && x.decode_compressed_indices.ndim == 2
                               ? x.decode_compressed_indices.shape[1]
                               : 0;
  const int64_t image = x.prefill_left_visible.present() ? x.max_image_tokens : 0;
  const sp::Checked w = sp::checked_add(sp::checked_add(swa_w, image),
                                        sp::checked_round_up(sp::checked_max(x.topk, real_dct), 4));
  x.sparse_indices = a.tensor(DType::kI32, {tokens, w.ok && !g.coin(16) ? w.value : g.size()}, false, 0);
  x.sparse_topk_lens = a.tensor(DType::kI32, {tokens}, false, 0);
}

Footprint footprint(const char* op, const dsv4kv::MixedSparseArgs& x, const dsv4kv::CacheGeometry&) {
  const int64_t d = x.decode_swa_indices.shape[0], sw = x.decode_swa_indices.shape[1];
  const int64_t p = x.prefill_topk_indices.shape[0], r = x.seq_lens.shape[0];
  const int64_t k = x.decode_compressed_indices.present() ? x.decode_compressed_indices.shape[1] : 0;
  const bool valid_read = x.decode_compressed_indices_are_local && k > 0;
  const sp::Checked rows = sp::checked_add(d, p);
  expect_inside(op, x.decode_swa_indices, "decode_swa_indices", {d, sw});
  if (x.decode_compressed_indices.present()) expect_inside(op, x.decode_compressed_indices, "decode_compressed_indices", {d, k});
  if (x.decode_compressed_topk_lens.present()) expect_inside(op, x.decode_compressed_topk_lens, "decode_compressed_topk_lens", {d});
  expect_inside(op, x.prefill_topk_indices, "prefill_topk_indices", {p, x.prefill_topk_indices.shape[1]});
  expect_inside(op, x.query_start_loc, "query_start_loc", {sp::checked_add(r, 1)});
  expect_inside(op, x.seq_lens, "seq_lens", {r});
  expect_inside(op, x.token_to_req, "token_to_req_indices", {rows});
  if (valid_read) expect_inside(op, x.decode_is_valid_token, "decode_is_valid_token", {d});
  if (x.prefill_left_visible.present()) {
    expect_inside(op, x.prefill_left_visible, "prefill_left_visible", {rows});
    expect_inside(op, x.prefill_right_visible, "prefill_right_visible", {rows});
  }
  // Every row: swa_width + image_width SWA columns, then max(topk, dct) (rounded up to 4) more;
  // the int32 lengths are exact only when the row is no wider than INT32_MAX.
  const int64_t img = x.prefill_left_visible.present() ? x.max_image_tokens : 0;
  const sp::Checked need = sp::checked_add(sp::checked_add(sw, img), sp::checked_max(x.topk, k));
  if (!need.ok || x.sparse_indices.shape[1] < need.value || x.sparse_indices.shape[1] > sp::kIndexMax)
    violated(op, "sparse_indices accepted narrower than its entries or wider than int32");
  expect_inside(op, x.sparse_indices, "sparse_indices", {rows, x.sparse_indices.shape[1]});
  expect_inside(op, x.sparse_topk_lens, "sparse_topk_lens", {rows});
  // decode_is_valid_token is checked (and read) only with local decode indices.
  Footprint f{{&x.decode_swa_indices, &x.decode_compressed_indices, &x.decode_compressed_topk_lens,
               &x.prefill_topk_indices, &x.query_start_loc, &x.seq_lens, &x.token_to_req, &x.swa_block_table,
               &x.compressed_block_table, &x.prefill_left_visible, &x.prefill_right_visible, &x.sparse_indices,
               &x.sparse_topk_lens},
              work({&x.decode_swa_indices, &x.prefill_topk_indices, &x.seq_lens, &x.sparse_indices})};
  if (valid_read) f.checked.push_back(&x.decode_is_valid_token);
  return f;
}

// ---------------------------------------------------------------------------
// One run, the same for every operation of the table
// ---------------------------------------------------------------------------

template <class Args>
void fuzz_op(Gen& g, int index) {
  const char* op = Args::kName;
  ++g_stats.seen[index];
  Arena a(g);
  Counter cnt;
  Args args;
  build(g, a, args);
  dsv4kv::fuzz::InputCopies inputs;
  inputs.record(args, [&](const TensorView& v) { return a.bytes_of(v); });
  args.error_count = cnt.make(g);
  dsv4kv::CacheGeometry geo{};
  const bool accepted = accepts(op, [&] {
    if constexpr (std::is_same_v<decltype(dsv4kv::validate(args)), dsv4kv::CacheGeometry>) geo = dsv4kv::validate(args);
    else dsv4kv::validate(args);
  });
  if (!accepted) return;
  ++g_stats.accepted[index];
  expect_counter(op, args.error_count);
  const Footprint f = footprint(op, args, geo);
  // Invariant 2, first half: every checked view has an int64 element count and byte extent.
  Args::fields(args, [&](const char* name, dsv4kv::Role, auto& member) {
    if constexpr (std::is_same_v<std::decay_t<decltype(member)>, TensorView>)
      if (std::find(f.checked.begin(), f.checked.end(), &member) != f.checked.end()) expect_bounded(op, member, name);
  });
  for (const TensorView* v : f.checked)
    if (!a.backed(*v)) return;
  if (f.work > kMaxRunElements) return;
  ++g_stats.ran[index];
  dsv4kv::fuzz::run_reference(args);
  if (!inputs.unchanged()) violated(op, "an input changed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Gen g(data, size);
  dsv4kv::fuzz::visit_op_at(g.range(0, dsv4kv::kNumOps - 1),
                            [&](auto op, int index) { fuzz_op<typename decltype(op)::type>(g, index); });
  return 0;
}
