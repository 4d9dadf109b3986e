/// \file bad_inputs.hpp
/// \brief The bad-input catalogue's machinery (spec "Failure model"); every operation's rows are
/// in its own module, support/ops/<op>_properties.hpp, as `bad_inputs::OpRows<Args>`.
///
/// Each row builds a small valid case, applies one mutation, and runs it through a backend. The
/// expected outcome is either
///   * a contract error: dsv4kv::Error whose message names the operation, the argument and the rule,
///     and NO byte of any buffer changed (validation happens before any write); or
///   * skip-and-count: the operation runs, error_count equals the row's value, and the outputs are
///     what the spec says (skipped rows untouched, -1 for index outputs).
/// Every buffer lives inside a canary region (0xA5 margins around the tensor's extent); afterwards no
/// byte outside the documented output region may have changed: margins, padding between rows,
/// the cache's block tail, every input, and (for the operations whose OpRows<Args>::written names
/// them) every record or row the input values did not select. An operation whose OpRows<Args> has
/// model_count() also has its outputs recomputed from the spec and its count compared with the
/// row's. The CUDA suite runs the same rows on the GPU and requires byte-identical buffers and counts.
///
/// An operation's OpRows<Args> holds: kPrefix (its rows' test-name prefix), base_case(Case&),
/// rows(std::vector<Row>&), and optionally written(Case&, Allowed&) (the bytes it may write, when
/// that is less than its whole outputs) and model_count(Case&) (its outputs checked against the
/// spec; returns the spec's error count). conformance/bad_inputs_test.cpp walks the table.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "backend.hpp"
#include "dsv4kv/spec.hpp"
#include "tester_common.hpp"

namespace dsv4kv::conformance::bad_inputs {

using spec::kHeadDim;
using spec::kNopeDim;
using spec::kNumTiles;
using spec::kRopeDim;
using spec::kTileSize;

inline constexpr uint8_t kCanary = kFillByte;  // 0xA5, as in the testers
inline constexpr size_t kMargin = 64;          // canary bytes before and after every tensor's extent
inline constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();
inline constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
inline constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
inline constexpr int64_t k2p32 = int64_t{1} << 32, k2p62 = int64_t{1} << 62;

/// An operation: its position in the table (op_table.hpp).
using Op = int;

/// The operation's full name (the first word of every contract error).
std::string op_name(Op op);

/// Bytes a view's elements span from its data pointer (TensorView::extent_bytes); 0 for absent,
/// empty and overflowing views (never allocated).
inline size_t view_bytes(const TensorView& v) {
  const spec::Checked e = v.extent_bytes();
  return e.ok ? static_cast<size_t>(e.value) : 0;
}

/// Mutated views whose extent exceeds this are not backed by memory: they are the hostile
/// sizes validate() must reject before any access (a row expecting a count never uses them).
inline constexpr size_t kMaxGrowBytes = size_t{64} << 20;

/// Calls f(byte offset from data) for every byte of every element of `v`.
template <class F>
void for_each_element_byte(const TensorView& v, F f) {
  if (!v.present() || view_bytes(v) == 0) return;
  const int es = dtype_size(v.dtype);
  int64_t idx[kMaxRank] = {0, 0, 0};
  const int nd = v.ndim;
  if (nd == 0) {
    for (int b = 0; b < es; ++b) f(int64_t{b});
    return;
  }
  while (true) {
    int64_t off = 0;
    for (int d = 0; d < nd; ++d) off += idx[d] * v.stride[d];
    for (int b = 0; b < es; ++b) f(off * es + b);
    int d = nd - 1;
    while (d >= 0 && ++idx[d] == v.shape[d]) idx[d--] = 0;
    if (d < 0) break;
  }
}

/// One tensor's allocation: kMargin canary bytes, the extent, kMargin canary bytes.
struct Buffer {
  std::vector<uint8_t> bytes;
  size_t body() const { return bytes.size() - 2 * kMargin; }
  uint8_t* data() { return bytes.data() + kMargin; }
  const uint8_t* data() const { return bytes.data() + kMargin; }
  void allocate(size_t n, uint8_t fill) {
    bytes.assign(n + 2 * kMargin, kCanary);
    std::fill(bytes.begin() + kMargin, bytes.end() - kMargin, fill);
  }
};

template <class T>
T& at(const TensorView& v, int64_t i) {
  return static_cast<T*>(v.data)[i * v.stride[0]];
}
template <class T>
T& at(const TensorView& v, int64_t i, int64_t j) {
  return static_cast<T*>(v.data)[i * v.stride[0] + j * v.stride[1]];
}
template <class T>
T& at(const TensorView& v, int64_t i, int64_t j, int64_t k) {
  return static_cast<T*>(v.data)[i * v.stride[0] + j * v.stride[1] + k * v.stride[2]];
}

/// A case: the argument structs of one operation, and the buffers their views point into.
#define DSV4KV_ARGS_TYPE(name, Args, stem) , Args
/// One argument struct per operation of the table (std::monostate first: the list starts with a comma).
using AllArgs = std::tuple<std::monostate DSV4KV_OPS(DSV4KV_ARGS_TYPE)>;
#undef DSV4KV_ARGS_TYPE

struct Case {
  Op op;
  AllArgs all;               ///< the case uses std::get<Args>(all) of its operation
  bool count_errors = true;  ///< false: pass error_count = nullptr
  size_t count_offset = 0;   ///< bytes the counter pointer is moved by (a misaligned counter)

  /// The argument struct of operation `Args` (the case's own when Args is its operation).
  template <class Args>
  Args& get() {
    return std::get<Args>(all);
  }
  template <class Args>
  const Args& get() const {
    return std::get<Args>(all);
  }

  struct Slot {
    std::string name;
    TensorView* view;
    bool output;
    std::unique_ptr<Buffer> buf;
  };
  std::vector<Slot> slots;
  Buffer count;  ///< the int32 error counter, with canaries

  explicit Case(Op o) : op(o) { count.allocate(sizeof(int32_t), 0); }
  Case(const Case&) = delete;

  /// Allocates a canary-guarded buffer for `proto`'s extent (0xA5 for outputs, else 0) and points *field at it.
  TensorView& add(const char* name, TensorView* field, TensorView proto, bool output) {
    auto buf = std::make_unique<Buffer>();
    buf->allocate(view_bytes(proto), output ? kCanary : 0);
    proto.data = buf->data();
    *field = proto;
    slots.push_back(Slot{name, field, output, std::move(buf)});
    return *field;
  }

  /// Takes `args` (from a tester: views into the tester's buffers, scalars) as this case's
  /// arguments: every tensor gets a canary-guarded copy of its extent, named after its field.
  template <class Args>
  void adopt(const Args& args) {
    Args& mine = std::get<Args>(all);
    mine = args;
    mine.error_count = nullptr;
    Args::fields(mine, [&](const char* name, Role role, auto& member) {
      if constexpr (std::is_same_v<std::decay_t<decltype(member)>, TensorView>) {
        if (!member.present()) return;
        const void* from = member.data;
        const bool output = role == Role::kOut || role == Role::kInOut;
        add(name, &member, member, output);
        std::memcpy(member.data, from, view_bytes(member));  // the tester's outputs hold its fill, 0xA5
      }
    });
  }

  /// After a mutation: grows any buffer a mutated view no longer fits in (keeping the view's offset
  /// into it), so no backend ever reads host memory outside an allocation, whatever the mutation.
  void fit() {
    for (auto& s : slots) {
      TensorView& v = *s.view;
      if (!v.present() || v.data == nullptr) continue;
      // Addresses compared as integers: a mutated pointer may lie anywhere.
      const uintptr_t p = reinterpret_cast<uintptr_t>(v.data), b = reinterpret_cast<uintptr_t>(s.buf->data());
      if (p < b || p - b > s.buf->body()) continue;  // points elsewhere on purpose
      const size_t off = p - b, extent = view_bytes(v);
      if (extent > kMaxGrowBytes) continue;
      const size_t need = off + extent;
      if (need <= s.buf->body()) continue;
      Buffer grown;
      grown.allocate(need, kCanary);
      std::memcpy(grown.data(), s.buf->data(), s.buf->body());
      *s.buf = std::move(grown);
      v.data = s.buf->data() + off;
    }
  }

  int32_t counted() const {
    int32_t n;
    std::memcpy(&n, count.data(), sizeof n);
    return n;
  }
  /// Index in `slots` of the slot holding view `v` (slots.size() when none does).
  size_t slot_index(const TensorView* v) const {
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].view == v) return i;
    return slots.size();
  }
  Slot* slot(const std::string& name) {
    for (auto& s : slots)
      if (s.name == name) return &s;
    return nullptr;
  }
};

using CasePtr = std::unique_ptr<Case>;

/// Per slot (and the counter, last), which body bytes the operation may write.
using Allowed = std::vector<std::vector<bool>>;

/// Marks every element byte of `v` (a view into one of the case's slots) as writable.
void allow_view(Case& c, Allowed& a, const TensorView& v);

/// The tensor outputs (Role::kOut) of the case's operation, in field order.
std::vector<const TensorView*> outputs(const Case& c);

/// Row `got(e)` (e = 0 .. 511) holds the token at position `p` of `block` per the spec (NoPE values
/// dequantized, RoPE bits copied); otherwise one failure naming `where` + "e]" and false.
template <class Got>
bool token_row_matches(const uint8_t* block, int64_t block_size, int64_t p, Fp8Format format, Got got,
                       const std::string& where) {
  for (int e = 0; e < kHeadDim; ++e) {
    uint16_t want;
    if (e < kNopeDim)
      want = spec::dequantize_element(block[spec::fp8_code_offset(p, e)],
                                      block[spec::scale_offset(block_size, p, e / kTileSize)], format);
    else
      std::memcpy(&want, block + spec::rope_offset(p) + (e - kNopeDim) * 2, 2);
    if (got(e) != want) {
      ADD_FAILURE() << where << e << "]: want 0x" << std::hex << want << " got 0x" << got(e);
      return false;
    }
  }
  return true;
}

// Row checks for the index operations

/// An index operation's outputs: its index matrix, then its lengths.
inline const TensorView& index_out(const Case& c) { return *outputs(c).at(0); }
inline const TensorView& lens_out(const Case& c) { return *outputs(c).at(1); }

/// Row t of the index output is all -1 and its length 0.
inline void expect_dead_row(const Case& c, int64_t t) {
  const TensorView& o = index_out(c);
  for (int64_t j = 0; j < o.shape[1]; ++j) EXPECT_EQ(at<int32_t>(o, t, j), -1) << "row " << t << " column " << j;
  EXPECT_EQ(at<int32_t>(lens_out(c), t), 0) << "length of row " << t;
}

/// Row t equals the unmutated run's row t (indices and length).
inline void expect_base_row(const Case& c, const Case& base, int64_t t) {
  const TensorView &o = index_out(c), &ob = index_out(base);
  for (int64_t j = 0; j < o.shape[1]; ++j)
    EXPECT_EQ(at<int32_t>(o, t, j), at<int32_t>(ob, t, j)) << "row " << t << " column " << j << " (vs. unmutated)";
  EXPECT_EQ(at<int32_t>(lens_out(c), t), at<int32_t>(lens_out(base), t)) << "length of row " << t << " (vs. unmutated)";
}

/// Every row equals the unmutated run except cells listed as {t, j, value}.
struct Cell {
  int64_t t, j;
  int32_t value;
};
inline void expect_base_except(const Case& c, const Case& base, std::vector<Cell> cells,
                               std::vector<std::pair<int64_t, int32_t>> lens = {}) {
  const TensorView &o = index_out(c), &ob = index_out(base);
  for (int64_t t = 0; t < o.shape[0]; ++t) {
    for (int64_t j = 0; j < o.shape[1]; ++j) {
      int32_t want = at<int32_t>(ob, t, j);
      for (auto& cell : cells)
        if (cell.t == t && cell.j == j) want = cell.value;
      EXPECT_EQ(at<int32_t>(o, t, j), want) << "row " << t << " column " << j;
    }
    int32_t want = at<int32_t>(lens_out(base), t);
    for (auto& l : lens)
      if (l.first == t) want = l.second;
    EXPECT_EQ(at<int32_t>(lens_out(c), t), want) << "length of row " << t;
  }
}

using CaseFn = std::function<void(Case&)>;
using CheckFn = std::function<void(const Case& after, const Case& unmutated_after)>;

struct Row {
  std::string name;
  Op op;
  CaseFn mutate;
  std::vector<std::string> error;  ///< non-empty: contract error whose message holds each fragment
  int32_t count = 0;               ///< skip-and-count: expected error_count
  CaseFn sanitize;                 ///< optional: an equivalent valid input that must give the same bytes, count 0
  CheckFn check;                   ///< optional: row-specific expectations on the outputs
};

inline Row contract(Op op, std::string name, CaseFn m, std::vector<std::string> fragments) {
  return Row{std::move(name), op, std::move(m), std::move(fragments), 0, nullptr, nullptr};
}
inline Row skip(Op op, std::string name, CaseFn m, int32_t count, CaseFn sanitize = nullptr, CheckFn check = nullptr) {
  return Row{std::move(name), op, std::move(m), {}, count, std::move(sanitize), std::move(check)};
}

inline void misalign(TensorView& v, int bytes) { v.data = static_cast<uint8_t*>(v.data) + bytes; }
inline void rank(TensorView& v, int n) {
  if (n > v.ndim) {
    for (int d = v.ndim; d < n; ++d) v.shape[d] = 1, v.stride[d] = 1;
  }
  v.ndim = n;
}
/// Points `v` at `data` as a rows x cols matrix with strides s0, s1.
inline void mat(TensorView& v, void* data, int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  v.data = data, v.ndim = 2, v.shape = {rows, cols, 0}, v.stride = {s0, s1, 0};
}

/// The rows of one operation; each operation's module specializes it (see the file comment).
template <class Args>
struct OpRows;

/// Every row of every operation, in table order (each operation's rows, then its
/// error_count_misaligned row).
const std::vector<Row>& rows();

/// The test name of a row: its operation's prefix, '_', its name (non-alphanumerics as '_').
std::string row_name(const Row& r);

/// The valid base case of `op`.
CasePtr build(Op op);

/// Runs the case's operation on `be` (error_count per the case's counter settings).
void run(Backend& be, Case& c);

/// The bytes the case's operation may write (OpRows<Args>::written, else its whole outputs).
Allowed allowed_region(Case& c);

/// Bytes of every buffer (slots, then the counter).
std::vector<std::vector<uint8_t>> snapshot(const Case& c);

/// Every byte outside `allowed` (all bytes when `allowed` is null) equals `before`.
::testing::AssertionResult untouched_outside(const Case& c, const std::vector<std::vector<uint8_t>>& before,
                                             const Allowed* allowed);

/// Builds, mutates and runs row `r` on `be`; checks everything the row states. Returns the case.
CasePtr run_row(const Row& r, Backend& be);

}  // namespace dsv4kv::conformance::bad_inputs
