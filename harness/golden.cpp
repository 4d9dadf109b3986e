// Golden-vector runner: rebuilds each case's inputs exactly as the oracle saw them,
// runs the op through a Backend and compares every output byte with the golden bytes.
#include "golden.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "dsv4kv/spec.hpp"
#include "safetensors.hpp"

namespace dsv4kv::conformance {

namespace {

namespace sp = dsv4kv::spec;

/// Index outputs start as this value, which no operation ever writes (it is
/// neither -1 nor a plausible index), so a column the backend forgot to write
/// shows up as a mismatch instead of matching a -1 by luck.
constexpr int32_t kSentinel = 0x5A5A5A5A;

/// A golden case whose inputs do not fit together (a harness-level error).
class CaseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------
// Views. Strides are set explicitly: TensorView::mat/cube read a zero stride
// as "contiguous", which would silently change a golden view of width 0.
// ---------------------------------------------------------------------------
TensorView view1(void* p, DType t, int64_t n) { return TensorView::vec(p, t, n, 1); }

TensorView view2(void* p, DType t, int64_t rows, int64_t cols, int64_t row_stride) {
  TensorView v = TensorView::mat(p, t, rows, cols, 1);
  v.stride = {row_stride, 1, 0};
  return v;
}

TensorView view3(void* p, DType t, int64_t d0, int64_t d1, int64_t d2, int64_t s0, int64_t s1) {
  TensorView v = TensorView::cube(p, t, d0, d1, d2, 1, 1);
  v.stride = {s0, s1, 1};
  return v;
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string hex(uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

std::string show(uint8_t v) { return hex(v, 2); }
std::string show(uint16_t v) { return hex(v, 4); }
std::string show(int32_t v) {
  if (v == kSentinel) return "0x5a5a5a5a (never written)";
  return std::to_string(v);
}
std::string show(int64_t v) { return std::to_string(v); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// ---------------------------------------------------------------------------
// One case of a file: typed access to `caseNNN.<name>` with shape checks.
// ---------------------------------------------------------------------------
class Case {
 public:
  Case(const SafetensorsFile& f, std::string name) : f_(f), name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  std::string full(const std::string& n) const { return name_ + "." + n; }
  bool has(const std::string& n) const { return f_.has(full(n)); }
  int64_t p(const std::string& n) const { return f_.param(full("param." + n)); }
  /// The case's `__metadata__` entry `caseNNN.<n>` ("" when absent).
  std::string meta(const std::string& n) const { return f_.meta(full(n)); }
  /// A boolean `has_*` style parameter (0 or 1).
  bool flag(const std::string& n) const {
    const int64_t v = p(n);
    if (v != 0 && v != 1) fail("param." + n + " must be 0 or 1, got " + std::to_string(v));
    return v == 1;
  }
  const TensorInfo& info(const std::string& n) const { return f_.info(full(n)); }
  const std::vector<int64_t>& shape(const std::string& n) const { return info(n).shape; }
  std::span<const uint8_t> raw(const std::string& n) const { return f_.raw(full(n)); }
  /// Shape of `n`, which must have rank `rank`.
  std::vector<int64_t> dims(const std::string& n, size_t rank) const {
    const auto& s = shape(n);
    if (s.size() != rank) fail(n + " must have rank " + std::to_string(rank) + ", has shape " + shape_str(s));
    return s;
  }
  void expect_shape(const std::string& n, const std::vector<int64_t>& want) const {
    if (shape(n) != want) fail(n + " has shape " + shape_str(shape(n)) + ", expected " + shape_str(want));
  }
  /// An optional input whose presence a `has_*` parameter states; they must agree.
  bool optional(const std::string& n, bool declared) const {
    if (has(n) != declared)
      fail(n + (declared ? " is absent although its has_* parameter is 1"
                         : " is present although its has_* parameter is 0"));
    return declared;
  }
  std::vector<uint16_t> bf16(const std::string& n) const { return f_.bf16(full(n)); }
  std::vector<uint8_t> u8(const std::string& n) const { return f_.u8(full(n)); }
  std::vector<uint8_t> boolean(const std::string& n) const { return f_.boolean(full(n)); }
  std::vector<int32_t> i32(const std::string& n) const { return f_.i32(full(n)); }
  std::vector<int64_t> i64(const std::string& n) const { return f_.i64(full(n)); }
  [[noreturn]] void fail(const std::string& what) const { throw CaseError(name_ + " " + what); }

 private:
  const SafetensorsFile& f_;
  std::string name_;
};

/// Collects the outputs of one case and the first mismatch.
struct CaseRun {
  std::string mismatch;  ///< first mismatch, empty while everything matched
  GoldenCaseOutputs out;

  /// Compares `got` with `want` element by element; records the first difference.
  template <class T>
  void compare(const Case& c, const std::string& tensor, const std::vector<T>& want, const std::vector<T>& got) {
    out.tensors.emplace_back(tensor, as_bytes(got));
    if (!mismatch.empty()) return;
    if (want.size() != got.size()) {
      mismatch = c.name() + " " + tensor + ": expected " + std::to_string(want.size()) + " elements, got " +
                 std::to_string(got.size());
      return;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i] != got[i]) {
        mismatch = c.name() + " " + tensor + "[" + std::to_string(i) + "]: expected " + show(want[i]) + ", got " +
                   show(got[i]);
        return;
      }
    }
  }
  void count(const Case& c, int64_t want, int32_t got) {
    out.error_count = got;
    if (mismatch.empty() && want != got)
      mismatch = c.name() + " error_count: expected " + std::to_string(want) + ", got " + std::to_string(got);
  }
};

/// Visibility values for the derived "passed but ignored" runs: arbitrary, some negative (which
/// would be reported if they were read). With max_image_tokens == 0 vLLM never reads them
/// (IMAGE_WIDTH == 0), so the golden bytes of the case stay the expected output.
std::vector<int32_t> ignored_visibility(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>((i * 37u) % 23u) - 5;
  return v;
}

std::vector<uint8_t> init_pattern(size_t n, uint64_t salt) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = golden_init_byte(i, salt);
  return b;
}

Fp8Format fp8_format(const Case& c) { return c.flag("use_fnuz") ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn; }

// ---------------------------------------------------------------------------
// One path for every operation (op_table.hpp): fill the index outputs with the sentinel, run,
// compare each output field with its golden tensor. Only the building of the arguments from a
// case and the expected error count are written per operation.
// ---------------------------------------------------------------------------

/// The golden tensor holding an output field's expected bytes: the field's own name, except
/// where the golden files name it otherwise; nullopt where the runner compares it itself.
template <class Args>
std::optional<std::string> golden_output(std::string_view field) {
  if constexpr (std::is_same_v<Args, QuantizeInsertArgs>) {
    if (field == "k_cache") return "k_cache_after";
  } else if constexpr (std::is_same_v<Args, DequantizeGatherArgs>) {
    if (field == "out") return std::nullopt;  // compared over its whole backing storage (out_after)
  } else if constexpr (std::is_same_v<Args, CombineArgs>) {
    return "expected_" + std::string(field);  // the library's semantics: spec/operations.md, combine's deviation table
  }
  return std::string(field);
}

/// The elements of a view, from its first to its last byte (the outputs here are contiguous).
template <class V>
std::vector<V> view_values(const TensorView& v) {
  const sp::Checked e = v.extent_bytes();
  std::vector<V> out(v.data != nullptr && e.ok ? static_cast<size_t>(e.value) / sizeof(V) : 0);
  if (!out.empty()) std::memcpy(out.data(), v.data, out.size() * sizeof(V));
  return out;
}

/// Calls `f(name, role, view)` for every tensor field of `a`.
template <class Args, class F>
void for_each_tensor(Args& a, F&& f) {
  Args::fields(a, [&](const char* name, Role role, auto& member) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(member)>, TensorView>) f(name, role, member);
  });
}

/// Runs `a` through the backend and compares every output field with its golden tensor
/// (`label` is appended to the tensor names in the report); returns the error count. Int32
/// outputs start as kSentinel, so an unwritten column is a mismatch.
template <class Args>
int32_t run_and_compare(const Case& c, Backend& be, CaseRun& r, Args& a, const std::string& label = "") {
  for_each_tensor(a, [&](const char*, Role role, TensorView& v) {
    const sp::Checked bytes = v.extent_bytes();
    if (role == Role::kOut && v.dtype == DType::kI32 && v.data != nullptr && bytes.ok)
      std::fill_n(static_cast<int32_t*>(v.data), bytes.value / static_cast<int64_t>(sizeof(int32_t)), kSentinel);
  });
  int32_t errors = 0;
  a.error_count = &errors;
  be.run(a);
  a.error_count = nullptr;  // it pointed into this frame
  for_each_tensor(a, [&](const char* name, Role role, TensorView& v) {
    if (role != Role::kOut && role != Role::kInOut) return;
    const std::optional<std::string> golden = golden_output<Args>(name);
    if (!golden) return;
    switch (v.dtype) {
      case DType::kI32: r.compare(c, *golden + label, c.i32(*golden), view_values<int32_t>(v)); break;
      case DType::kU8: r.compare(c, *golden + label, c.u8(*golden), view_values<uint8_t>(v)); break;
      case DType::kBF16: r.compare(c, *golden + label, c.bf16(*golden), view_values<uint16_t>(v)); break;
      default: c.fail(std::string("output ") + name + " has a dtype the golden replay does not compare");
    }
  });
  return errors;
}

/// The derived run of the index operations: the same inputs with every visibility field
/// (`*_visible`) passed while max_image_tokens == 0 must give the same bytes and count, since
/// the arrays are not read then (vLLM's IMAGE_WIDTH == 0). `rows`: the length of those arrays.
template <class Args>
void rerun_with_ignored_visibility(const Case& c, Backend& be, CaseRun& r, Args a, int64_t rows, int64_t want) {
  std::deque<std::vector<int32_t>> arrays;  // stable addresses
  for_each_tensor(a, [&](const char* name, Role role, TensorView& v) {
    if (role == Role::kIn && std::string_view(name).ends_with("_visible")) {
      arrays.push_back(ignored_visibility(rows));
      v = view1(arrays.back().data(), DType::kI32, rows);
    }
  });
  r.count(c, want, run_and_compare(c, be, r, a, " (visibility passed, max_image_tokens 0)"));
}

// ---------------------------------------------------------------------------
// quantize_and_insert_k_cache
// ---------------------------------------------------------------------------
void run_quantize(const Case& c, Backend& be, CaseRun& r) {
  const auto kd = c.dims("k", 2);
  std::vector<uint16_t> k = c.bf16("k");
  std::vector<int64_t> slots = c.i64("slot_mapping");
  const int64_t T = c.dims("slot_mapping", 1)[0];
  const int64_t nb = c.p("num_blocks"), stride = c.p("block_stride"), bs = c.p("block_size");
  c.expect_shape("k_cache_after", {nb, stride});
  const std::vector<uint8_t> after = c.u8("k_cache_after");
  std::vector<uint8_t> cache = init_pattern(after.size(), static_cast<uint64_t>(c.p("init_salt")));

  QuantizeInsertArgs a;
  a.k = view2(k.data(), DType::kBF16, kd[0], kd[1], kd[1]);
  a.k_cache = view2(cache.data(), DType::kU8, nb, stride, stride);
  a.slot_mapping = view1(slots.data(), DType::kI64, T);
  a.block_size = bs;
  a.format = fp8_format(c);
  const int32_t errors = run_and_compare(c, be, r, a);

  // Expected count: out-of-range slots other than -1, plus one per non-finite
  // NoPE element of every token that is written (bf16 exponent all ones).
  int64_t want = 0;
  const int64_t rows = std::min(T, kd[0]);
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t s = slots[static_cast<size_t>(t)];
    if (s == -1) continue;
    if (s < 0 || bs <= 0 || s / bs >= nb) {
      ++want;
      continue;
    }
    for (int64_t i = 0; i < std::min<int64_t>(sp::kNopeDim, kd[1]); ++i)
      if ((k[static_cast<size_t>(t * kd[1] + i)] & 0x7F80u) == 0x7F80u) ++want;
  }
  r.count(c, want, errors);
}

// ---------------------------------------------------------------------------
// dequantize_and_gather_k_cache
// ---------------------------------------------------------------------------
void run_dequantize(const Case& c, Backend& be, CaseRun& r) {
  const auto cd = c.dims("k_cache", 2);
  std::vector<uint8_t> cache = c.u8("k_cache");
  if (cd[0] != c.p("num_blocks") || cd[1] != c.p("block_stride"))
    c.fail("k_cache shape " + shape_str(cd) + " disagrees with param.num_blocks/param.block_stride");
  std::vector<int32_t> seq_lens = c.i32("seq_lens");
  const int64_t R = c.dims("seq_lens", 1)[0];
  std::vector<int32_t> gather_lens;
  const bool has_gather = c.optional("gather_lens", c.flag("has_gather_lens"));
  if (has_gather) gather_lens = c.i32("gather_lens");
  const auto btd = c.dims("block_table", 2);
  std::vector<int32_t> bt = c.i32("block_table");

  const int64_t numel = c.p("out_numel"), s0 = c.p("out_stride0"), s1 = c.p("out_stride1");
  const int64_t dim1 = c.p("out_dim1");
  c.expect_shape("out_after", {numel});
  const std::vector<uint16_t> after = c.bf16("out_after");
  // The view [R, out_dim1, 512] must lie inside the backing storage, or the
  // backend would be handed a view that overruns the buffer. The strides come
  // from the file: the offset of the last element is computed overflow-checked
  // (a wrapped sum would pass the comparison and let the backend write past the
  // buffer).
  if (s0 < 0 || s1 < 0 || dim1 < 0) c.fail("out view has a negative stride or size");
  {
    // The view's extent in elements, overflow-checked: file parameters near 2^63 must not wrap
    // the bound (a wrapped bound let a view overrun the buffer).
    const int64_t shape[3] = {R, dim1, sp::kHeadDim}, strides[3] = {s0, s1, 1};
    const sp::Checked extent = sp::checked_extent_bytes(shape, strides, 3, 1);
    const std::string view = "out view [" + std::to_string(R) + ", " + std::to_string(dim1) + ", 512] with strides (" +
                             std::to_string(s0) + ", " + std::to_string(s1) + ")";
    if (!extent.ok || extent.value > numel)
      c.fail(view + " overruns out_numel " + std::to_string(numel) +
             (extent.ok ? "" : " (its extent does not fit in int64)"));
    // Rows that do not overlap fit in the storage: R * out_dim1 rows of 512. Without this, zero
    // strides could stack billions of rows on a small buffer and make the gather loop that long.
    const sp::Checked elems = sp::checked_mul(sp::checked_mul(R, dim1), sp::kHeadDim);
    if (!elems.ok || elems.value > numel)
      c.fail(view + " has more rows than out_numel " + std::to_string(numel) + " holds (its rows would overlap)");
  }
  const std::vector<uint8_t> init =
      init_pattern(static_cast<size_t>(numel) * 2, static_cast<uint64_t>(c.p("init_salt")));
  std::vector<uint16_t> out(static_cast<size_t>(numel));
  if (!out.empty()) std::memcpy(out.data(), init.data(), init.size());

  DequantizeGatherArgs a;
  a.out = view3(out.data(), DType::kBF16, R, dim1, sp::kHeadDim, s0, s1);
  a.k_cache = view2(cache.data(), DType::kU8, cd[0], cd[1], cd[1]);
  a.seq_lens = view1(seq_lens.data(), DType::kI32, R);
  if (has_gather) a.gather_lens = view1(gather_lens.data(), DType::kI32, static_cast<int64_t>(gather_lens.size()));
  a.block_table = view2(bt.data(), DType::kI32, btd[0], btd[1], btd[1]);
  a.block_size = c.p("block_size");
  a.offset = c.p("offset");
  a.format = fp8_format(c);
  const int32_t errors = run_and_compare(c, be, r, a);
  r.compare(c, "out_after", after, out);  // the whole storage: bytes outside the view must be unchanged
  r.count(c, 0, errors);                  // golden inputs respect every precondition
}

// ---------------------------------------------------------------------------
// dequantize_table: every (scale byte, code) pair through the gather.
// ---------------------------------------------------------------------------
void run_dequantize_table(const Case& c, Backend& be, CaseRun& r) {
  constexpr int kCodes = 256, kScales = 256;
  c.expect_shape("table", {kScales, kCodes});
  const std::vector<uint16_t> table = c.bf16("table");

  // Pair p = s*256 + code lives in tile g = p / 64 (one tile = one scale byte
  // and 64 consecutive codes, since 64 divides 256); tile g is tile g % 7 of
  // token g / 7. Tiles past the last pair wrap around and repeat pairs.
  constexpr int64_t kPairs = int64_t{kCodes} * kScales;
  constexpr int64_t kTiles = kPairs / sp::kTileSize;
  constexpr int64_t kTokens = (kTiles + sp::kNumTiles - 1) / sp::kNumTiles;
  constexpr int64_t kBlockSize = 64;
  constexpr int64_t kBlocks = (kTokens + kBlockSize - 1) / kBlockSize;
  const int64_t stride = sp::block_data_bytes(kBlockSize);
  std::vector<uint8_t> cache = init_pattern(static_cast<size_t>(kBlocks * stride), 1);
  auto rope_bits = [](int64_t tok, int k) {
    return static_cast<uint16_t>((static_cast<uint64_t>(tok * sp::kRopeDim + k) * 2654435761u) >> 13);
  };
  auto pair_of = [&](int64_t tok, int j, int k) {
    const int64_t g = (tok * sp::kNumTiles + j) % kTiles;
    return g * sp::kTileSize + k;  // p: scale byte p / 256, code p % 256
  };
  for (int64_t tok = 0; tok < kTokens; ++tok) {
    uint8_t* blk = cache.data() + (tok / kBlockSize) * stride;
    const int64_t pos = tok % kBlockSize;
    for (int j = 0; j < sp::kNumTiles; ++j) {
      const int64_t p0 = pair_of(tok, j, 0);
      blk[sp::scale_offset(kBlockSize, pos, j)] = static_cast<uint8_t>(p0 / kCodes);
      for (int k = 0; k < sp::kTileSize; ++k)
        blk[sp::fp8_code_offset(pos, j * sp::kTileSize + k)] = static_cast<uint8_t>(pair_of(tok, j, k) % kCodes);
    }
    blk[sp::scale_offset(kBlockSize, pos, sp::kScalePadIndex)] = 0;
    for (int k = 0; k < sp::kRopeDim; ++k) {
      const uint16_t v = rope_bits(tok, k);
      blk[sp::rope_offset(pos) + 2 * k] = static_cast<uint8_t>(v & 0xFF);
      blk[sp::rope_offset(pos) + 2 * k + 1] = static_cast<uint8_t>(v >> 8);
    }
  }

  std::vector<int32_t> seq_lens{static_cast<int32_t>(kTokens)};
  std::vector<int32_t> bt(kBlocks);
  for (int64_t b = 0; b < kBlocks; ++b) bt[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  const std::vector<uint8_t> init = init_pattern(static_cast<size_t>(kTokens * sp::kHeadDim * 2), 0);
  std::vector<uint16_t> out(static_cast<size_t>(kTokens * sp::kHeadDim));
  std::memcpy(out.data(), init.data(), init.size());

  DequantizeGatherArgs a;
  a.out = view3(out.data(), DType::kBF16, 1, kTokens, sp::kHeadDim, kTokens * sp::kHeadDim, sp::kHeadDim);
  a.k_cache = view2(cache.data(), DType::kU8, kBlocks, stride, stride);
  a.seq_lens = view1(seq_lens.data(), DType::kI32, 1);
  a.block_table = view2(bt.data(), DType::kI32, 1, kBlocks, kBlocks);
  a.block_size = kBlockSize;
  a.offset = 0;
  a.format = Fp8Format::kE4M3Fn;
  const int32_t errors = run_and_compare(c, be, r, a);

  r.out.tensors.emplace_back("table", as_bytes(out));
  for (int64_t tok = 0; tok < kTokens && r.mismatch.empty(); ++tok) {
    for (int j = 0; j < sp::kNumTiles && r.mismatch.empty(); ++j) {
      for (int k = 0; k < sp::kTileSize; ++k) {
        const int64_t p = pair_of(tok, j, k);
        const uint16_t got = out[static_cast<size_t>(tok * sp::kHeadDim + j * sp::kTileSize + k)];
        if (got != table[static_cast<size_t>(p)]) {
          r.mismatch = c.name() + " table[" + std::to_string(p) + "] (scale byte " + std::to_string(p / kCodes) +
                       ", code " + show(static_cast<uint8_t>(p % kCodes)) + "): expected " +
                       show(table[static_cast<size_t>(p)]) + ", got " + show(got);
          break;
        }
      }
    }
    for (int k = 0; k < sp::kRopeDim && r.mismatch.empty(); ++k) {
      const size_t i = static_cast<size_t>(tok * sp::kHeadDim + sp::kNopeDim + k);
      if (out[i] != rope_bits(tok, k))
        r.mismatch = c.name() + " out[" + std::to_string(i) + "] (RoPE copy of token " + std::to_string(tok) +
                     "): expected " + show(rope_bits(tok, k)) + ", got " + show(out[i]);
    }
  }
  r.count(c, 0, errors);
}

// ---------------------------------------------------------------------------
// compute_global_topk_indices_and_lens
// ---------------------------------------------------------------------------
void run_global_topk(const Case& c, Backend& be, CaseRun& r) {
  const auto td = c.dims("topk_indices", 2);
  std::vector<int32_t> topk = c.i32("topk_indices");
  const int64_t T = td[0], rs = td[1], K = c.p("topk");
  if (K < 0 || K > rs) c.fail("param.topk " + std::to_string(K) + " exceeds the row stride " + std::to_string(rs));
  std::vector<int32_t> t2r = c.i32("token_to_req");
  const int64_t nt2r = c.dims("token_to_req", 1)[0];
  const auto btd = c.dims("block_table", 2);
  std::vector<int32_t> bt = c.i32("block_table");
  std::vector<uint8_t> valid = c.boolean("is_valid_token");
  const int64_t nvalid = c.dims("is_valid_token", 1)[0];
  c.expect_shape("global_topk_indices", {T, K});
  c.expect_shape("topk_lens", {T});

  std::vector<int32_t> out(static_cast<size_t>(T * K)), lens(static_cast<size_t>(T));
  GlobalTopkArgs a;
  a.topk_indices = view2(topk.data(), DType::kI32, T, K, rs);
  a.token_to_req = view1(t2r.data(), DType::kI32, nt2r);
  a.block_table = view2(bt.data(), DType::kI32, btd[0], btd[1], btd[1]);
  a.block_size = c.p("block_size");
  a.is_valid_token = view1(valid.data(), DType::kBool, nvalid);
  a.global_topk_indices = view2(out.data(), DType::kI32, T, K, K);
  a.topk_lens = view1(lens.data(), DType::kI32, T);
  const int32_t errors = run_and_compare(c, be, r, a);

  // Expected count, from the rule itself: a token with no request counts once;
  // a non-negative local index whose block-table column is missing or negative
  // counts once (the golden data is meant to have none of either).
  int64_t want = 0;
  const int64_t bs = a.block_size;
  for (int64_t t = 0; t < std::min(T, nt2r) && bs > 0; ++t) {
    const int64_t req = t2r[static_cast<size_t>(t)];
    if (req < 0 || req >= btd[0]) {
      ++want;
      continue;
    }
    for (int64_t j = 0; j < K; ++j) {
      const int64_t local = topk[static_cast<size_t>(t * rs + j)];
      if (local < 0) continue;
      const int64_t col = local / bs;
      if (col >= btd[1] || bt[static_cast<size_t>(req * btd[1] + col)] < 0) ++want;
    }
  }
  r.count(c, want, errors);
}

// ---------------------------------------------------------------------------
// combine_topk_swa_indices (expected output: expected_combined_*, the library's semantics as the
// deviation table of spec/operations.md's combine section states them)
// ---------------------------------------------------------------------------
void run_combine(const Case& c, Backend& be, CaseRun& r) {
  const auto td = c.dims("topk_indices", 2);
  std::vector<int32_t> topk = c.i32("topk_indices");
  const int64_t T = td[0], rs = td[1], width_in = c.p("topk_width");
  if (width_in < 0 || width_in > rs)
    c.fail("param.topk_width " + std::to_string(width_in) + " exceeds the row stride " + std::to_string(rs));
  std::vector<int32_t> qsl = c.i32("query_start_loc");
  std::vector<int32_t> seq_lens = c.i32("seq_lens");
  std::vector<int32_t> gather_lens = c.i32("gather_lens");
  const int64_t R = c.dims("seq_lens", 1)[0];
  const int64_t nqsl = c.dims("query_start_loc", 1)[0], ngl = c.dims("gather_lens", 1)[0];
  const bool image = c.optional("left_visible", c.flag("has_image"));
  c.optional("right_visible", image);
  std::vector<int32_t> lv, rv;
  if (image) {
    lv = c.i32("left_visible");
    rv = c.i32("right_visible");
  }
  const auto od = c.dims("expected_combined_indices", 2);
  if (od[0] != T)
    c.fail("expected_combined_indices has " + std::to_string(od[0]) + " rows, expected " + std::to_string(T));
  c.expect_shape("expected_combined_lens", {T});

  std::vector<int32_t> out(static_cast<size_t>(T * od[1])), lens(static_cast<size_t>(T));
  CombineArgs a;
  a.topk_indices = view2(topk.data(), DType::kI32, T, width_in, rs);
  a.query_start_loc = view1(qsl.data(), DType::kI32, nqsl);
  a.seq_lens = view1(seq_lens.data(), DType::kI32, R);
  a.gather_lens = view1(gather_lens.data(), DType::kI32, ngl);
  a.window_size = c.p("window_size");
  a.compress_ratio = c.p("compress_ratio");
  a.topk = c.p("topk");
  a.M = c.p("M");
  a.N = c.p("N");
  if (image) {
    a.left_visible = view1(lv.data(), DType::kI32, static_cast<int64_t>(lv.size()));
    a.right_visible = view1(rv.data(), DType::kI32, static_cast<int64_t>(rv.size()));
  }
  a.max_image_tokens = c.p("max_image_tokens");
  a.combined_indices = view2(out.data(), DType::kI32, T, od[1], od[1]);
  a.combined_lens = view1(lens.data(), DType::kI32, T);
  const int32_t errors = run_and_compare(c, be, r, a);

  // The expected count follows the spec's per-element rules (malformed requests and visibility,
  // sums above INT32_MAX); the golden bytes judge the outputs.
  if (nqsl != R + 1 || ngl < R ||
      (image && (static_cast<int64_t>(lv.size()) < T || static_cast<int64_t>(rv.size()) < T)))
    c.fail("inconsistent request/token counts");
  int64_t want = 0;
  std::vector<sp::CombineRequest> reqs;
  for (int64_t b = 0; b < R; ++b) {
    reqs.push_back(sp::combine_request(qsl.data(), seq_lens.data(), gather_lens.data(), b));
    if (!reqs.back().ok) ++want;
  }
  for (int64_t t = 0; t < T && a.compress_ratio > 0 && a.window_size > 0; ++t) {
    const int64_t b = sp::find_request(qsl.data(), R, qsl.empty() ? 0 : qsl[0], t);
    if (b < 0 || !reqs[static_cast<size_t>(b)].ok) continue;
    sp::Faults f;
    const bool vis = sp::visibility_in_effect(image, a.max_image_tokens);
    const int64_t left = vis ? sp::visibility(lv[static_cast<size_t>(t)], f) : 0;
    const int64_t right = vis ? sp::visibility(rv[static_cast<size_t>(t)], f) : 0;
    const auto& req = reqs[static_cast<size_t>(b)];
    const sp::CombineRow row =
        sp::combine_row(req, t, a.window_size, a.compress_ratio, a.topk, a.max_image_tokens, left, right);
    for (int64_t j = 0; j < row.topk_len && j < width_in; ++j)
      sp::combine_topk_entry(topk[static_cast<size_t>(t * rs + j)], a.M, b, f);
    for (int64_t j = 0; j < row.swa_len; ++j) sp::combine_swa_entry(req, row, j, a.M, a.N, b, f);
    want += f.n;
  }
  r.count(c, want, errors);

  if (!image && a.max_image_tokens == 0) rerun_with_ignored_visibility(c, be, r, a, T, want);
}

// ---------------------------------------------------------------------------
// build_flashinfer_mixed_sparse_indices
// ---------------------------------------------------------------------------
void run_flashinfer(const Case& c, Backend& be, CaseRun& r) {
  const auto dsd = c.dims("decode_swa_indices", 2);
  std::vector<int32_t> dswa = c.i32("decode_swa_indices");
  const int64_t D = dsd[0];
  if (D != c.p("num_decode_tokens")) c.fail("decode_swa_indices rows disagree with param.num_decode_tokens");

  std::vector<int32_t> dcomp, dlens, ptopk, qsl, seq_lens, t2r, swa_bt, comp_bt, plv, prv;
  std::vector<uint8_t> dvalid;
  MixedSparseArgs a;
  a.decode_swa_indices = view2(dswa.data(), DType::kI32, D, dsd[1], dsd[1]);
  if (c.optional("decode_compressed_indices", c.flag("has_decode_compressed"))) {
    const auto d = c.dims("decode_compressed_indices", 2);
    dcomp = c.i32("decode_compressed_indices");
    a.decode_compressed_indices = view2(dcomp.data(), DType::kI32, d[0], d[1], d[1]);
  }
  if (c.optional("decode_compressed_topk_lens", c.flag("has_decode_compressed_lens"))) {
    dlens = c.i32("decode_compressed_topk_lens");
    a.decode_compressed_topk_lens = view1(dlens.data(), DType::kI32, c.dims("decode_compressed_topk_lens", 1)[0]);
  }
  a.decode_compressed_indices_are_local = c.flag("decode_compressed_indices_are_local");
  if (c.optional("decode_is_valid_token", a.decode_compressed_indices_are_local)) {
    dvalid = c.boolean("decode_is_valid_token");
    a.decode_is_valid_token = view1(dvalid.data(), DType::kBool, c.dims("decode_is_valid_token", 1)[0]);
  }
  const auto pd = c.dims("prefill_topk_indices", 2);
  ptopk = c.i32("prefill_topk_indices");
  const int64_t P = pd[0], pcols = c.p("prefill_topk_cols");
  if (P != c.p("num_prefill_tokens")) c.fail("prefill_topk_indices rows disagree with param.num_prefill_tokens");
  if (pcols < 0 || pcols > pd[1])
    c.fail("param.prefill_topk_cols " + std::to_string(pcols) + " exceeds the row stride " + std::to_string(pd[1]));
  a.prefill_topk_indices = view2(ptopk.data(), DType::kI32, P, pcols, pd[1]);
  qsl = c.i32("query_start_loc");
  a.query_start_loc = view1(qsl.data(), DType::kI32, c.dims("query_start_loc", 1)[0]);
  seq_lens = c.i32("seq_lens");
  a.seq_lens = view1(seq_lens.data(), DType::kI32, c.dims("seq_lens", 1)[0]);
  t2r = c.i32("token_to_req");
  a.token_to_req = view1(t2r.data(), DType::kI32, c.dims("token_to_req", 1)[0]);
  const auto sbd = c.dims("swa_block_table", 2);
  swa_bt = c.i32("swa_block_table");
  a.swa_block_table = view2(swa_bt.data(), DType::kI32, sbd[0], sbd[1], sbd[1]);
  a.swa_block_size = c.p("swa_block_size");
  if (c.optional("compressed_block_table", c.flag("has_compressed_block_table"))) {
    const auto d = c.dims("compressed_block_table", 2);
    comp_bt = c.i32("compressed_block_table");
    a.compressed_block_table = view2(comp_bt.data(), DType::kI32, d[0], d[1], d[1]);
  }
  a.compressed_block_size = c.p("compressed_block_size");
  a.window_size = c.p("window_size");
  a.compress_ratio = c.p("compress_ratio");
  a.topk = c.p("topk");
  if (c.flag("has_swa_block_span")) a.swa_block_span = c.p("swa_block_span");
  if (c.flag("has_compressed_block_span")) a.compressed_block_span = c.p("compressed_block_span");
  const bool image = c.optional("prefill_left_visible", c.flag("has_image"));
  c.optional("prefill_right_visible", image);
  if (image) {
    plv = c.i32("prefill_left_visible");
    prv = c.i32("prefill_right_visible");
    a.prefill_left_visible = view1(plv.data(), DType::kI32, static_cast<int64_t>(plv.size()));
    a.prefill_right_visible = view1(prv.data(), DType::kI32, static_cast<int64_t>(prv.size()));
  }
  a.max_image_tokens = c.p("max_image_tokens");

  const auto od = c.dims("sparse_indices", 2);
  // D and P are dimensions of tensors that may hold no elements, so either may be near 2^63.
  const auto rows = checked::add<int64_t>(D, P);
  if (!rows || od[0] != *rows)
    c.fail("sparse_indices has " + std::to_string(od[0]) +
           " rows, expected D + P = " + (rows ? std::to_string(*rows) : std::string("(overflows int64)")));
  c.expect_shape("sparse_topk_lens", {D + P});
  std::vector<int32_t> out(static_cast<size_t>(od[0] * od[1])), lens(static_cast<size_t>(D + P));
  a.sparse_indices = view2(out.data(), DType::kI32, od[0], od[1], od[1]);
  a.sparse_topk_lens = view1(lens.data(), DType::kI32, D + P);
  r.count(c, 0,
          run_and_compare(c, be, r, a));  // golden inputs respect every precondition (every looked-up column exists)

  if (!image && a.max_image_tokens == 0) rerun_with_ignored_visibility(c, be, r, a, D + P, 0);
}

// ---------------------------------------------------------------------------
// The field layout (conformance/golden/README.md, "The field layout"): one replay for every
// operation of the table, written against Args::fields alone. Files with `__metadata__`
// `layout` = `fields` use it; an operation without a layout of its own above has only such files.
// Every name is a field's name (the Python keyword) under the case prefix:
//   input tensor f (Role::kIn)      tensor `f`, passed whole and contiguous; absent = not passed
//   output tensor f (kOut, kInOut)  `f_after`: its whole backing storage after the call. Before
//                                   the call the storage holds tensor `f` (kInOut, when present)
//                                   or the init pattern of param.init_salt; the argument is the
//                                   view param.f_offset (elements, default 0), param.f_dim<i> and
//                                   param.f_stride<i> for i < rank (the dims given); no `f_after`
//                                   = not passed
//   scalar f                        param.f (bool and use_fnuz: 0 or 1); an optional integer
//                                   without param.f is not passed
//   error_count                     param.error_count: the count the call must report
// Every output's whole storage is compared, so a byte written outside the view is caught too.
// ---------------------------------------------------------------------------
template <class>
[[maybe_unused]] inline constexpr bool kNoFieldLayout = false;  // only in a discarded branch's static_assert

DType field_dtype(const Case& c, const std::string& n) {
  const TensorInfo& info = c.info(n);
  switch (info.dtype) {
    case StDType::kBF16: return DType::kBF16;
    case StDType::kU8: return DType::kU8;
    case StDType::kI32: return DType::kI32;
    case StDType::kI64: return DType::kI64;
    case StDType::kBool: return DType::kBool;
    case StDType::kOther: break;
  }
  c.fail(n + " has dtype " + info.dtype_name + ", which no argument takes");
}

/// Input tensor `n`: its bytes copied into `buf`, viewed whole and contiguous.
TensorView field_input(const Case& c, const std::string& n, std::vector<uint8_t>& buf) {
  const std::vector<int64_t>& shape = c.shape(n);
  if (shape.empty() || shape.size() > static_cast<size_t>(dsv4kv::kMaxRank))
    c.fail(n + " has shape " + shape_str(shape) + ": an argument has rank 1 to " + std::to_string(dsv4kv::kMaxRank));
  const std::span<const uint8_t> raw = c.raw(n);
  buf.assign(raw.begin(), raw.end());
  TensorView v;
  v.data = buf.empty() ? nullptr : buf.data();
  v.dtype = field_dtype(c, n);
  v.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.shape[static_cast<size_t>(d)] = shape[static_cast<size_t>(d)];
    v.stride[static_cast<size_t>(d)] = stride;
    // An empty tensor's other sizes are unbounded: its strides may leave int64.
    const auto next = checked::mul<int64_t>(stride, std::max<int64_t>(shape[static_cast<size_t>(d)], 1));
    if (!next) c.fail(n + " has shape " + shape_str(shape) + ", whose strides exceed int64");
    stride = *next;
  }
  return v;
}

/// One compared output: the golden tensor of its expected storage and the storage itself.
struct FieldOutput {
  std::string golden;
  DType dtype;
  const std::vector<uint8_t>* storage;
};

/// Output tensor `n`: its storage in `buf` (the bytes before the call), the view described by
/// its parameters; absent (not passed) when the case has no `n_after`.
TensorView field_output(const Case& c, const std::string& n, Role role, std::vector<uint8_t>& buf,
                        std::vector<FieldOutput>& outputs) {
  const std::string after = n + "_after";
  if (!c.has(after)) {
    if (c.has(n)) c.fail(n + " is present without " + after + " (an output's expected storage)");
    return TensorView{};
  }
  const DType dtype = field_dtype(c, after);
  const std::span<const uint8_t> expected = c.raw(after);
  if (role == Role::kInOut && c.has(n)) {
    if (field_dtype(c, n) != dtype || c.raw(n).size() != expected.size())
      c.fail(n + " and " + after + " differ in dtype or size");
    const std::span<const uint8_t> before = c.raw(n);
    buf.assign(before.begin(), before.end());
  } else {
    buf = init_pattern(expected.size(), static_cast<uint64_t>(c.p("init_salt")));
  }
  outputs.push_back(FieldOutput{after, dtype, &buf});

  TensorView v;
  v.dtype = dtype;
  v.ndim = 0;
  while (v.ndim < dsv4kv::kMaxRank && c.has("param." + n + "_dim" + std::to_string(v.ndim))) {
    const std::string d = std::to_string(v.ndim);
    v.shape[static_cast<size_t>(v.ndim)] = c.p(n + "_dim" + d);
    v.stride[static_cast<size_t>(v.ndim)] = c.p(n + "_stride" + d);
    if (v.shape[static_cast<size_t>(v.ndim)] < 0 || v.stride[static_cast<size_t>(v.ndim)] < 0)
      c.fail("param." + n + "_dim" + d + " and _stride" + d + " must be non-negative");
    ++v.ndim;
  }
  if (v.ndim == 0) c.fail("param." + n + "_dim0 is missing (the view of " + n + ")");
  const int64_t offset = c.has("param." + n + "_offset") ? c.p(n + "_offset") : 0;
  const int64_t elem = dtype_size(dtype);
  const sp::Checked extent = v.extent_bytes();
  const int64_t size = static_cast<int64_t>(buf.size());
  if (offset < 0 || !extent.ok || offset > size / elem || extent.value > size - offset * elem)
    c.fail("the view of " + n + " (offset " + std::to_string(offset) + ") does not fit the " + std::to_string(size) +
           " bytes of " + after);
  v.data = buf.empty() ? nullptr : buf.data() + offset * elem;
  return v;
}

template <class T>
std::vector<T> typed(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

/// One case of the field layout through `be`: its outputs' whole storages and the count compared.
template <class Args>
void run_fields(const Case& c, Backend& be, CaseRun& r) {
  Args a;
  std::deque<std::vector<uint8_t>> buffers;  // stable addresses
  std::vector<FieldOutput> outputs;
  Args::fields(a, [&](const char* name, Role role, auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    const std::string n = name;
    if constexpr (std::is_same_v<M, TensorView>) {
      if (role == Role::kIn) {
        if (c.has(n)) m = field_input(c, n, buffers.emplace_back());
      } else {
        m = field_output(c, n, role, buffers.emplace_back(), outputs);
      }
    } else if constexpr (std::is_same_v<M, int32_t*>) {
      // the counter: set below
    } else if constexpr (std::is_same_v<M, int64_t>) {
      m = c.p(n);
    } else if constexpr (std::is_same_v<M, bool>) {
      m = c.flag(n);
    } else if constexpr (std::is_same_v<M, Fp8Format>) {
      m = c.flag(n) ? Fp8Format::kE4M3Fnuz : Fp8Format::kE4M3Fn;
    } else if constexpr (std::is_same_v<M, std::optional<int64_t>>) {
      if (c.has("param." + n)) m = c.p(n);
    } else if constexpr (std::is_same_v<M, Semantics>) {
      // A profile is a name, so it lives in the metadata (caseNNN.<name>); absent means the seed.
      const std::string v = c.meta(n);
      if (!v.empty() && !spec::semantics_from_name(v, m))
        c.fail("__metadata__ " + c.full(n) + " must be " + detail::one_of(spec::kSemanticsNames) + ", got '" +
               v.substr(0, 64) + "'");
    } else if constexpr (std::is_same_v<M, spec::Record>) {
      // A record is a name too (caseNNN.record); absent means the 584-byte record.
      const std::string v = c.meta(n);
      if (!v.empty() && !spec::record_from_name(v, m))
        c.fail("__metadata__ " + c.full(n) + " must be " + detail::one_of(spec::kRecordNames) + ", got '" +
               v.substr(0, 64) + "'");
    } else {
      static_assert(kNoFieldLayout<M>, "a member type the field layout does not describe");
    }
  });
  int32_t errors = 0;
  a.error_count = &errors;
  be.run(a);
  a.error_count = nullptr;  // it pointed into this frame
  for (const FieldOutput& o : outputs) {
    const std::vector<uint8_t>& got = *o.storage;
    switch (o.dtype) {
      case DType::kBF16: r.compare(c, o.golden, c.bf16(o.golden), typed<uint16_t>(got)); break;
      case DType::kU8: r.compare(c, o.golden, c.u8(o.golden), got); break;
      case DType::kBool: r.compare(c, o.golden, c.boolean(o.golden), got); break;
      case DType::kI32: r.compare(c, o.golden, c.i32(o.golden), typed<int32_t>(got)); break;
      case DType::kI64: r.compare(c, o.golden, c.i64(o.golden), typed<int64_t>(got)); break;
    }
  }
  r.count(c, c.p("error_count"), errors);
}

using Runner = std::function<void(const Case&, Backend&, CaseRun&)>;

// The replay of each operation of the table, chosen by the file's `op` through visit_op: the
// operations of the first golden set have a layout of their own; every operation has the field
// layout (run_fields), which files of `__metadata__` `layout` = `fields` use.
Runner runner_for(std::type_identity<QuantizeInsertArgs>) { return run_quantize; }
Runner runner_for(std::type_identity<DequantizeGatherArgs>) { return run_dequantize; }
Runner runner_for(std::type_identity<GlobalTopkArgs>) { return run_global_topk; }
Runner runner_for(std::type_identity<CombineArgs>) { return run_combine; }
Runner runner_for(std::type_identity<MixedSparseArgs>) { return run_flashinfer; }
template <class Args>
Runner runner_for(std::type_identity<Args>) {
  return nullptr;  // no layout of its own: field-layout files only
}

GoldenCaseResult file_failure(const std::string& path, const std::string& op, const std::string& what) {
  return GoldenCaseResult{path, op, "", false, what};
}

}  // namespace

std::vector<GoldenCaseResult> run_golden_file_capture(const std::string& path, Backend& backend,
                                                      std::vector<GoldenCaseOutputs>* outputs) {
  std::optional<SafetensorsFile> file;
  try {
    file.emplace(SafetensorsFile::load(path, kMaxGoldenFileBytes));
  } catch (const std::exception& e) { return {file_failure(path, "", e.what())}; }
  const SafetensorsFile& f = *file;
  const std::string op = f.meta("op");
  if (op.empty()) return {file_failure(path, op, path + ": __metadata__ has no 'op'")};
  const std::string format = f.meta("format");
  if (format != "dsv4kv-golden-v1")
    return {file_failure(path, op, path + ": unsupported golden format '" + format + "' (expected dsv4kv-golden-v1)")};

  const std::string stem = std::filesystem::path(path).stem().string();
  const std::string layout = f.meta("layout");
  if (!layout.empty() && layout != "fields")
    return {file_failure(path, op, path + ": unknown golden layout '" + layout + "' (expected fields or none)")};
  Runner runner;
  if (!visit_op(op, [&](auto t) {
        using Args = typename decltype(t)::type;
        runner = layout == "fields" ? Runner(run_fields<Args>) : runner_for(t);
      }))
    return {file_failure(path, op, path + ": unknown op '" + op + "'")};
  if (!runner)
    return {file_failure(path, op,
                         path + ": no golden replay for op '" + op +
                             "' without __metadata__ layout = fields (it has no layout of its own)")};
  // The dequantize table files (every scale byte x every code) have a layout of their own.
  if (layout.empty() && op == DequantizeGatherArgs::kName && (stem == "dequantize_table" || f.has("case000.table")))
    runner = run_dequantize_table;

  const std::string nc = f.meta("num_cases");
  int64_t num_cases = -1;
  try {
    size_t used = 0;
    num_cases = std::stoll(nc, &used);
    if (used != nc.size()) num_cases = -1;
  } catch (const std::exception&) { num_cases = -1; }
  if (num_cases <= 0 || num_cases > 100000)
    return {file_failure(path, op, path + ": __metadata__ num_cases '" + nc + "' is not a positive case count")};

  std::vector<GoldenCaseResult> results;
  std::set<std::string> expected_names;
  for (int64_t i = 0; i < num_cases; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "case%03lld", static_cast<long long>(i));
    const std::string name = buf;
    expected_names.insert(name);
    GoldenCaseResult res{path, op, name, false, ""};
    try {
      CaseRun run;
      run.out.case_name = name;
      runner(Case(f, name), backend, run);
      res.passed = run.mismatch.empty();
      res.message = run.mismatch;
      if (outputs) outputs->push_back(std::move(run.out));
    } catch (const CaseError& e) { res.message = e.what(); } catch (const std::exception& e) {
      res.message = name + ": " + e.what();
    }
    results.push_back(std::move(res));
  }
  for (const std::string& name : f.case_names())
    if (!expected_names.count(name))
      results.push_back(file_failure(path, op, path + ": tensors of " + name + " lie beyond num_cases = " + nc));
  return results;
}

std::vector<GoldenCaseResult> run_golden_file(const std::string& path, Backend& backend) {
  return run_golden_file_capture(path, backend, nullptr);
}

std::string golden_dir() {
  if (const char* env = std::getenv("DSV4KV_GOLDEN_DIR"); env && *env) return env;
#ifdef DSV4KV_GOLDEN_DIR
  return DSV4KV_GOLDEN_DIR;
#else
  return "";
#endif
}

std::vector<std::string> golden_files() {
  namespace fs = std::filesystem;
  const std::string dir = golden_dir();
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec))
    throw std::runtime_error("golden directory '" + dir +
                             "' does not exist (set DSV4KV_GOLDEN_DIR to the folder of the golden .safetensors files)");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) files.push_back(e.path().string());
  }
  if (ec) throw std::runtime_error("cannot list golden directory '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace dsv4kv::conformance
