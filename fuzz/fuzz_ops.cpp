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
    static const int64_t kEdges[] = {0, -1, 1, -2, kI32Max, kI32Min, int64_t{1} << 31,
                                     std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
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

 private:
  Gen& g_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> bufs_;
};

/// Fills a view's extent byte by byte (dtype-agnostic: padding bytes get values too).
auto random_bytes(Gen& g) {
  return [&g](TensorView& v, size_t n) {
    auto* p = static_cast<uint8_t*>(v.data);
    for (size_t i = 0; i < n; ++i) p[i] = g.byte();
  };
}
/// Fills an int32/int64 view with index values for a table of `table` entries.
auto indices(Gen& g, int64_t table) {
  return [&g, table](TensorView& v, size_t n) {
    const int es = dsv4kv::dtype_size(v.dtype);
    auto* p = static_cast<uint8_t*>(v.data);
    for (size_t i = 0; i + es <= n; i += es) {
      const int64_t x = g.index(table);
      if (es == 8) std::memcpy(p + i, &x, 8);
      else if (es == 4) {
        const int32_t y = static_cast<int32_t>(x);
        std::memcpy(p + i, &y, 4);
      } else std::memset(p + i, static_cast<int>(x & 0xFF), es);
    }
  };
}
auto bf16_values(Gen& g) {
  return [&g](TensorView& v, size_t n) {
    auto* p = static_cast<uint8_t*>(v.data);
    for (size_t i = 0; i + 2 <= n; i += 2) {
      const uint16_t x = g.bf16();
      std::memcpy(p + i, &x, 2);
    }
  };
}
auto no_fill() {
  return [](TensorView&, size_t) {};
}

/// A cache view: rank 2 [blocks, bytes] or rank 3 [blocks, B, 584], with a fuzzed even/odd stride.
TensorView cache_view(Gen& g, Arena& a, int64_t block_size) {
  const int64_t blocks = g.range(0, 3);
  const int64_t need = dsv4kv::spec::block_data_bytes(block_size > 0 && block_size <= 16 ? block_size : 1);
  const int64_t per_block = need + (g.coin(8) ? g.range(-2, 8) : 0);
  // An output cache starts as random bytes too: what the operation does not select must stay as it was.
  return a.tensor(DType::kU8, {blocks, per_block > 0 ? per_block : 1}, false, random_bytes(g));
}

void build(Gen& g, Arena& a, dsv4kv::QuantizeInsertArgs& q) {
  q.block_size = g.scalar(1, 8);
  const int64_t rows = g.range(0, 6);
  q.k = a.tensor(DType::kBF16, {rows, dsv4kv::spec::kHeadDim}, false, bf16_values(g));
  const int64_t B = q.block_size > 0 && q.block_size <= 16 ? q.block_size : 1;
  q.k_cache = cache_view(g, a, q.block_size);
  q.slot_mapping = a.tensor(DType::kI64, {g.range(0, rows + 1)}, false, indices(g, 4 * B));
  q.is_ue8m0 = !g.coin(32);
  q.format = static_cast<dsv4kv::spec::Fp8Format>(g.range(0, 1));
}

void build(Gen& g, Arena& a, dsv4kv::DequantizeGatherArgs& d) {
  d.block_size = g.scalar(1, 8);
  const int64_t B = d.block_size > 0 && d.block_size <= 16 ? d.block_size : 1;
  const int64_t R = g.range(0, 3), rows = g.range(0, 8);
  d.seq_lens = a.tensor(DType::kI32, {R}, false, indices(g, 4 * B));
  d.gather_lens = a.tensor(DType::kI32, {R + g.range(0, 1)}, true, indices(g, 4 * B));
  d.out = a.tensor(DType::kBF16, {R + g.range(0, 1), rows, dsv4kv::spec::kHeadDim}, false, no_fill());
  d.block_table = a.tensor(DType::kI32, {R, g.range(0, 4)}, false, indices(g, 3));
  d.offset = g.scalar(0, rows);
  d.k_cache = cache_view(g, a, d.block_size);
  d.format = static_cast<dsv4kv::spec::Fp8Format>(g.range(0, 1));
}

void build(Gen& g, Arena& a, dsv4kv::SparseGatherArgs& s) {
  s.block_size = g.scalar(1, 8);
  const int64_t B = s.block_size > 0 && s.block_size <= 16 ? s.block_size : 1;
  const int64_t n = g.range(0, 8);
  s.slot_indices = a.tensor(g.coin(2) ? DType::kI64 : DType::kI32, {n}, false, indices(g, 4 * B));
  s.out = a.tensor(DType::kBF16, {n + g.range(0, 1), dsv4kv::spec::kHeadDim}, false, no_fill());
  s.k_cache = cache_view(g, a, s.block_size);
  s.format = static_cast<dsv4kv::spec::Fp8Format>(g.range(0, 1));
}

void build(Gen& g, Arena& a, dsv4kv::GlobalTopkArgs& t) {
  t.block_size = g.scalar(1, 8);
  const int64_t B = t.block_size > 0 && t.block_size <= 16 ? t.block_size : 1;
  const int64_t T = g.range(0, 5), K = g.range(0, 6), R = g.range(0, 3), cols = g.range(0, 4);
  t.topk_indices = a.tensor(DType::kI32, {T, K}, false, indices(g, cols * B));
  t.token_to_req = a.tensor(DType::kI32, {T + g.range(0, 1)}, false, indices(g, R));
  t.block_table = a.tensor(DType::kI32, {R, cols}, false, indices(g, 1 << 20));
  t.is_valid_token = a.tensor(DType::kBool, {T}, false, random_bytes(g));
  t.global_topk_indices = a.tensor(DType::kI32, {T, K}, false, no_fill());
  t.topk_lens = a.tensor(DType::kI32, {T}, false, no_fill());
}

/// A width derived from scalars, used for an output only when it is small enough to allocate.
int64_t capped(Gen& g, int64_t width) { return width >= 0 && width <= 1024 && !g.coin(16) ? width : g.range(0, 8); }

void build(Gen& g, Arena& a, dsv4kv::CombineArgs& c) {
  const int64_t T = g.range(0, 6), R = g.range(0, 3), width = g.range(0, 6);
  c.window_size = g.scalar(1, 8);
  c.compress_ratio = g.scalar(1, 4);
  c.topk = g.scalar(0, width);
  c.M = g.scalar(0, 1000);
  c.N = g.scalar(0, 64);
  c.max_image_tokens = g.scalar(0, 4);
  c.topk_indices = a.tensor(DType::kI32, {T, width}, false, indices(g, 64));
  c.query_start_loc = a.tensor(DType::kI32, {R + 1}, false, indices(g, T + 1));
  c.seq_lens = a.tensor(DType::kI32, {R}, false, indices(g, 16));
  c.gather_lens = a.tensor(DType::kI32, {R}, false, indices(g, 16));
  if (!g.coin(3)) {
    c.left_visible = a.tensor(DType::kI32, {T}, true, indices(g, 6));
    c.right_visible = a.tensor(DType::kI32, {T}, true, indices(g, 6));
  }
  const bool small = c.topk >= 0 && c.topk < 4096 && c.window_size >= 1 && c.window_size < 4096 &&
                     c.max_image_tokens >= 0 && c.max_image_tokens < 4096;
  const int64_t w = small ? dsv4kv::spec::combine_row_width(c.topk, c.window_size, c.max_image_tokens) : -1;
  c.combined_indices = a.tensor(DType::kI32, {T, capped(g, w)}, false, no_fill());
  c.combined_lens = a.tensor(DType::kI32, {T}, false, no_fill());
}

void build(Gen& g, Arena& a, dsv4kv::MixedSparseArgs& x) {
  const int64_t D = g.range(0, 3), P = g.range(0, 3), R = g.range(0, 3);
  x.window_size = g.scalar(1, 6);
  x.compress_ratio = g.scalar(1, 4);
  x.topk = g.scalar(0, 8);
  x.max_image_tokens = g.scalar(0, 4);
  x.swa_block_size = g.scalar(1, 8);
  x.compressed_block_size = g.scalar(1, 8);
  if (g.coin(2)) x.swa_block_span = g.scalar(1, 16);
  if (g.coin(2)) x.compressed_block_span = g.scalar(1, 16);
  const int64_t swa_w = g.range(0, 8), dct = g.range(0, 6), pcols = g.range(0, 8);
  x.decode_swa_indices = a.tensor(DType::kI32, {D, swa_w}, false, indices(g, 64));
  x.decode_compressed_indices = a.tensor(DType::kI32, {D, dct}, true, indices(g, 16));
  x.decode_compressed_topk_lens = a.tensor(DType::kI32, {D}, true, indices(g, 8));
  x.prefill_topk_indices = a.tensor(DType::kI32, {P, pcols}, false, indices(g, 16));
  x.query_start_loc = a.tensor(DType::kI32, {R + 1}, false, indices(g, D + P + 1));
  x.seq_lens = a.tensor(DType::kI32, {R}, false, indices(g, 24));
  x.token_to_req = a.tensor(DType::kI32, {D + P}, false, indices(g, R));
  x.swa_block_table = a.tensor(DType::kI32, {R, g.range(0, 5)}, false, indices(g, 1 << 20));
  x.compressed_block_table = a.tensor(DType::kI32, {R, g.range(0, 5)}, true, indices(g, 1 << 20));
  x.decode_compressed_indices_are_local = g.coin(2);
  x.decode_is_valid_token = a.tensor(DType::kBool, {D}, true, random_bytes(g));
  if (!g.coin(3)) {
    x.prefill_left_visible = a.tensor(DType::kI32, {D + P}, true, indices(g, 6));
    x.prefill_right_visible = a.tensor(DType::kI32, {D + P}, true, indices(g, 6));
  }
  const int64_t real_dct = x.decode_compressed_indices.present() && x.decode_compressed_indices.ndim == 2
                               ? x.decode_compressed_indices.shape[1]
                               : 0;
  const int64_t image = x.prefill_left_visible.present() ? x.max_image_tokens : 0;
  const bool small = x.topk >= 0 && x.topk < 4096 && image >= 0 && image < 4096;
  const int64_t w = small ? dsv4kv::spec::mixed_row_width(swa_w, image, x.topk, real_dct) : -1;
  x.sparse_indices = a.tensor(DType::kI32, {D + P, capped(g, w)}, false, no_fill());
  x.sparse_topk_lens = a.tensor(DType::kI32, {D + P}, false, no_fill());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Gen g(data, size);
  // The first value picks the operation (table order); build() overloads make its arguments.
  dsv4kv::fuzz::visit_op_at(g.range(0, dsv4kv::kNumOps - 1), [&](auto op, int) {
    Arena a(g);
    typename decltype(op)::type args;
    build(g, a, args);
    dsv4kv::fuzz::InputCopies inputs;
    inputs.record(args, [&](const TensorView& v) { return a.bytes_of(v); });
    int32_t count = 0;
    args.error_count = g.coin(8) ? nullptr : &count;
    try {
      dsv4kv::fuzz::run_reference(args);
    } catch (const dsv4kv::Error&) {
    }
    if (!inputs.unchanged()) __builtin_trap();
  });
  return 0;
}
