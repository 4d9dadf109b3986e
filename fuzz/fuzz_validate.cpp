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
#include "testers.hpp"  // every operation's tester module (conformance/support/ops)

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
                   static_cast<long long>(seen[i]), static_cast<long long>(accepted[i]),
                   static_cast<long long>(ran[i]));
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
    static const int64_t kExtremes[] = {kI32Max,
                                        int64_t{1} << 31,
                                        int64_t{1} << 32,
                                        (int64_t{1} << 32) + 1,
                                        int64_t{1} << 40,
                                        int64_t{1} << 60,
                                        int64_t{1} << 61,
                                        int64_t{1} << 62,
                                        3 * (int64_t{1} << 61),
                                        kI64Max,
                                        kI64Max - 1,
                                        kI64Max - 3,
                                        kI64Max - 7,
                                        kI64Max / 4,
                                        kI64Max / 4 + 1,
                                        3037000500};
    switch (range(0, 15)) {
      case 14: return pick(kExtremes);
      case 15: return p_.ConsumeIntegral<int64_t>() & kI64Max;
      default: return range(0, 4);
    }
  }

  /// A scalar argument: usually in [lo, hi], sometimes an edge value of int64.
  int64_t scalar(int64_t lo, int64_t hi) {
    static const int64_t kEdges[] = {0,
                                     -1,
                                     1,
                                     -2,
                                     kI32Max,
                                     kI32Max - 1,
                                     kI32Min,
                                     int64_t{1} << 31,
                                     int64_t{1} << 30,
                                     kI64Max,
                                     std::numeric_limits<int64_t>::min(),
                                     int64_t{1} << 40,
                                     64,
                                     128};
    if (!coin(12)) return range(lo, hi);  // (an exhausted input gives lo)
    return pick(kEdges);
  }

  /// A stride for dimension d of a view whose inner dimensions span `inner` elements.
  int64_t stride(bool innermost, const sp::Checked& inner) {
    static const int64_t kHuge[] = {int64_t{1} << 31, int64_t{1} << 32, int64_t{1} << 61,      int64_t{1} << 62,
                                    kI64Max / 2,      kI64Max,          3 * (int64_t{1} << 61)};
    if (innermost) {
      if (!coin(16)) return 1;
      return coin(2) ? range(0, 3) : pick(kHuge);
    }
    switch (range(0, 9)) {
      case 6: return 0;
      case 7: return pick(kHuge);
      case 8: return inner.ok && inner.value < kI64Max - 3 ? inner.value + range(1, 3) : 1;  // padded rows
      case 9: return p_.ConsumeIntegral<int64_t>();          // anything, negative included
      default: return inner.ok ? inner.value : pick(kHuge);  // contiguous
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

  /// a + b, saturated at INT64_MAX (the harness's own size arithmetic must not overflow either).
  static int64_t plus(int64_t a, int64_t b) {
    const sp::Checked r = sp::checked_add(a, b);
    return r.ok ? r.value : kI64Max;
  }

 private:
  FuzzedDataProvider p_;
};

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
      if (views_[i].data == v.data && slots_[i].allocated)
        return {static_cast<const uint8_t*>(v.data), slots_[i].bytes};
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
        const int64_t x =
            g_.coin(4) ? int64_t{g_.index(index_range)} : static_cast<int64_t>(g_.size()) - g_.range(0, 2);
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
  if (!end.ok || !extent.ok || end.value > extent.value)
    violated(op, "a block's records lie outside the k_cache extent");
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
// Per operation: how a hostile caller builds its arguments (TesterOf<Args>::hostile_args) and its
// access footprint (TesterOf<Args>::hostile_footprint), in the operation's tester module
// (conformance/support/ops/<op>.hpp); they report through this Check.
// ---------------------------------------------------------------------------

/// What hostile_footprint() found for an accepted call: the views validate() checked (each must be
/// bounded, and backed before the reference may run) and the elements of work.
struct Footprint {
  std::vector<const TensorView*> checked;
  int64_t work;
};

/// The invariant checks of one operation's footprint, named for the operation.
struct Check {
  const char* op;
  void inside(const TensorView& v, const char* name, std::initializer_list<sp::Checked> counts) const {
    expect_inside(op, v, name, counts);
  }
  void cache_inside(const TensorView& cache, const dsv4kv::CacheGeometry& g) const {
    expect_cache_inside(op, cache, g);
  }
  [[noreturn]] void violated(const std::string& what) const { ::violated(op, what); }
  static int64_t work(std::initializer_list<const TensorView*> views) { return ::work(views); }
  static Footprint footprint(std::vector<const TensorView*> checked, int64_t work) {
    return {std::move(checked), work};
  }
};

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
  using Module = dsv4kv::conformance::TesterOf<Args>;
  Module::hostile_args(g, a, args);
  dsv4kv::fuzz::InputCopies inputs;
  inputs.record(args, [&](const TensorView& v) { return a.bytes_of(v); });
  args.error_count = cnt.make(g);
  dsv4kv::CacheGeometry geo{};
  const bool accepted = accepts(op, [&] {
    if constexpr (std::is_same_v<decltype(dsv4kv::validate(args)), dsv4kv::CacheGeometry>)
      geo = dsv4kv::validate(args);
    else
      dsv4kv::validate(args);
  });
  if (!accepted) return;
  ++g_stats.accepted[index];
  expect_counter(op, args.error_count);
  Check check{op};
  const Footprint f = Module::hostile_footprint(check, args, geo);
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
