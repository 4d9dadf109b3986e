// libFuzzer target: random argument structs into every reference operation.
//
// The fuzz input is decoded into one operation's arguments: shapes (small), strides (sometimes padded,
// sometimes broken), dtypes (usually right), scalars (typical ranges or edge values such as 0, -1,
// INT32_MAX, INT64_MIN), and tensor contents (index values biased toward sentinels and boundaries:
// -1, -2, INT32_MIN, INT32_MAX, the table size, one past it). Every tensor gets its own heap buffer of
// exactly its extent, so AddressSanitizer reports any access outside a view; UndefinedBehaviorSanitizer
// reports overflow and misaligned access. A contract error (dsv4kv::Error) is a normal outcome. The
// operation must also never write to an input: inputs are compared with copies afterwards.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "dsv4kv/reference.hpp"
#include "dsv4kv/spec.hpp"
#include "fuzz_common.hpp"
#include "testers.hpp"  // every operation's tester module (conformance/support/ops)

namespace {

using dsv4kv::DType;
using dsv4kv::TensorView;

constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();

class Gen {
 public:
  Gen(const uint8_t* data, size_t size) : p_(data, size) {}

  bool coin(int one_in) { return p_.ConsumeIntegralInRange<int>(0, one_in - 1) == 0; }
  int64_t range(int64_t lo, int64_t hi) { return p_.ConsumeIntegralInRange<int64_t>(lo, hi); }

  /// A scalar argument: usually in [lo, hi], sometimes an edge value of int64.
  int64_t scalar(int64_t lo, int64_t hi) {
    if (!coin(8)) return range(lo, hi);
    static const int64_t kEdges[] = {0,
                                     -1,
                                     1,
                                     -2,
                                     kI32Max,
                                     kI32Min,
                                     int64_t{1} << 31,
                                     std::numeric_limits<int64_t>::max(),
                                     std::numeric_limits<int64_t>::min(),
                                     int64_t{1} << 40};
    return kEdges[range(0, std::size(kEdges) - 1)];
  }

  /// An index value for a table of `n` entries: biased toward sentinels and boundaries.
  int32_t index(int64_t n) {
    switch (range(0, 9)) {
      case 0: return -1;
      case 1: return static_cast<int32_t>(n);
      case 2: return static_cast<int32_t>(n + 1);
      case 3: {
        static const int32_t kEdges[] = {-2, kI32Min, kI32Max, kI32Max - 1, 1 << 29, -(1 << 30)};
        return kEdges[range(0, std::size(kEdges) - 1)];
      }
      default: return static_cast<int32_t>(range(0, n > 0 ? n - 1 : 0));
    }
  }

  uint8_t byte() { return p_.ConsumeIntegral<uint8_t>(); }
  uint16_t bf16() {
    if (coin(16)) {
      static const uint16_t kEdges[] = {0x7FC0, 0xFFC1, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x7F7F, 0x0001};
      return kEdges[range(0, std::size(kEdges) - 1)];
    }
    return p_.ConsumeIntegral<uint16_t>();
  }

  FuzzedDataProvider& provider() { return p_; }

 private:
  FuzzedDataProvider p_;
};

/// Owns every buffer of one run; each buffer is exactly its view's extent (plus 1 when misaligned).
class Arena {
 public:
  explicit Arena(Gen& g) : g_(g) {}

  /// A view of `dt` with the given shape; the generator may pad rows, break the inner stride,
  /// change the dtype, misalign the pointer or drop the tensor. Contents are filled by `fill`.
  template <class Fill>
  TensorView tensor(DType dt, std::initializer_list<int64_t> shape, bool optional, Fill fill) {
    if (optional && g_.coin(4)) return TensorView{};
    if (g_.coin(32)) return TensorView{};  // a missing required tensor
    TensorView v;
    v.dtype = g_.coin(32) ? static_cast<DType>(g_.range(0, 4)) : dt;
    v.ndim = static_cast<int>(shape.size());
    if (g_.coin(32)) v.ndim = static_cast<int>(g_.range(0, dsv4kv::kMaxRank));
    int i = 0;
    for (int64_t s : shape) v.shape[i++] = s;
    for (int d = i; d < dsv4kv::kMaxRank; ++d) v.shape[d] = 1;
    if (g_.coin(32)) v.shape[g_.range(0, dsv4kv::kMaxRank - 1)] = g_.range(-2, 3);
    int64_t stride = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
      const int64_t pad = (d < v.ndim - 1 && g_.coin(4)) ? g_.range(0, 3) : 0;
      v.stride[d] = stride + (d == v.ndim - 1 && g_.coin(32) ? g_.range(1, 2) : 0);
      stride = (v.shape[d] > 0 ? v.shape[d] : 1) * (v.stride[d] + pad);
    }
    const dsv4kv::spec::Checked extent = v.extent_bytes();  // 0 for a negative size: nothing to back
    const size_t n = extent.ok ? static_cast<size_t>(extent.value) : 0;
    const size_t mis = (dsv4kv::dtype_size(v.dtype) > 1 && g_.coin(32)) ? 1 : 0;
    auto buf = std::make_unique<std::vector<uint8_t>>(n + mis);
    v.data = n + mis ? buf->data() + mis : nullptr;
    if (n > 0 && v.data != nullptr) fill(v, n);
    bufs_.push_back(std::move(buf));
    return v;
  }

  /// The whole buffer behind `v` (empty when `v` points into none of this arena's buffers).
  std::span<const uint8_t> bytes_of(const TensorView& v) const {
    for (const auto& b : bufs_)
      if (!b->empty() && reinterpret_cast<uintptr_t>(v.data) - reinterpret_cast<uintptr_t>(b->data()) < b->size())
        return {b->data(), b->size()};
    return {};
  }

  /// Fills a view's extent byte by byte (dtype-agnostic: padding bytes get values too).
  auto random_bytes() {
    return [&g = g_](TensorView& v, size_t n) {
      auto* p = static_cast<uint8_t*>(v.data);
      for (size_t i = 0; i < n; ++i) p[i] = g.byte();
    };
  }
  /// Fills an int32/int64 view with index values for a table of `table` entries.
  auto indices(int64_t table) {
    return [&g = g_, table](TensorView& v, size_t n) {
      const int es = dsv4kv::dtype_size(v.dtype);
      auto* p = static_cast<uint8_t*>(v.data);
      for (size_t i = 0; i + es <= n; i += es) {
        const int64_t x = g.index(table);
        if (es == 8)
          std::memcpy(p + i, &x, 8);
        else if (es == 4) {
          const int32_t y = static_cast<int32_t>(x);
          std::memcpy(p + i, &y, 4);
        } else
          std::memset(p + i, static_cast<int>(x & 0xFF), es);
      }
    };
  }
  auto bf16_values() {
    return [&g = g_](TensorView& v, size_t n) {
      auto* p = static_cast<uint8_t*>(v.data);
      for (size_t i = 0; i + 2 <= n; i += 2) {
        const uint16_t x = g.bf16();
        std::memcpy(p + i, &x, 2);
      }
    };
  }
  static auto no_fill() {
    return [](TensorView&, size_t) {};
  }

  /// A cache view: rank 2 [blocks, bytes] or rank 3 [blocks, B, 584], with a fuzzed even/odd stride.
  TensorView cache_view(int64_t block_size) {
    const int64_t blocks = g_.range(0, 3);
    const int64_t need = dsv4kv::spec::block_data_bytes(block_size > 0 && block_size <= 16 ? block_size : 1);
    const int64_t per_block = need + (g_.coin(8) ? g_.range(-2, 8) : 0);
    // An output cache starts as random bytes too: what the operation does not select must stay as it was.
    return tensor(DType::kU8, {blocks, per_block > 0 ? per_block : 1}, false, random_bytes());
  }
  /// A width derived from scalars, used for an output only when it is small enough to allocate.
  int64_t capped(int64_t width) { return width >= 0 && width <= 1024 && !g_.coin(16) ? width : g_.range(0, 8); }

 private:
  Gen& g_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> bufs_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Gen g(data, size);
  // The first value picks the operation (table order); its tester module makes the arguments
  // (TesterOf<Args>::fuzz_args, conformance/support/ops/<op>.hpp).
  dsv4kv::fuzz::visit_op_at(g.range(0, dsv4kv::kNumOps - 1), [&](auto op, int) {
    Arena a(g);
    typename decltype(op)::type args;
    dsv4kv::conformance::TesterOf<typename decltype(op)::type>::fuzz_args(g, a, args);
    dsv4kv::fuzz::InputCopies inputs;
    inputs.record(args, [&](const TensorView& v) { return a.bytes_of(v); });
    int32_t count = 0;
    args.error_count = g.coin(8) ? nullptr : &count;
    try {
      dsv4kv::fuzz::run_reference(args);
    } catch (const dsv4kv::Error&) {}
    if (!inputs.unchanged()) __builtin_trap();
  });
  return 0;
}
