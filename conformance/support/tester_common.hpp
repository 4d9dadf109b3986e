/// \file tester_common.hpp
/// \brief What every operation's tester shares: guarded buffers, byte comparisons, the PRNG.
///
/// Each operation's tester lives in its own module, support/ops/<op>.hpp (testers.hpp includes them
/// all). A tester describes one call of one operation by a handful of parameters with sensible
/// defaults, e.g.
///
///     QuantizeTester().tokens(17).block_size(61).stride(37378).fnuz(true).Run(backend);
///
/// and owns every buffer the call touches. Bulk contents (key values, cache bytes, index values)
/// are drawn from a 64-bit `seed` with Rng, so the parameters printed by `operator<<` reproduce a
/// case exactly. Every buffer is surrounded by guard bytes (kGuardByte) that no backend may touch,
/// and every buffer an operation writes is pre-filled with kFillByte (0xA5) before each run, so
/// "untouched" bytes can be checked after the call. Testers are copyable: the differential
/// properties copy one case, run it on two backends and compare all buffers byte for byte
/// (`buffers()`).
///
/// Nothing here depends on RapidCheck (the tools link this library); generators and properties
/// are in support/ops/<op>_properties.hpp.
#pragma once

#include <climits>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iosfwd>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backend.hpp"
#include "dsv4kv/spec/op_table.hpp"

namespace dsv4kv::conformance {

/// Pre-fill of every buffer an operation writes: bytes still holding it were not written.
inline constexpr uint8_t kFillByte = 0xA5;
/// Guard bytes around every buffer: outside every tensor's extent, never written.
inline constexpr uint8_t kGuardByte = 0x3C;
/// Block sizes every generator covers (1, 2 and 7 stress the index arithmetic, 61 is
/// odd and not a divisor of anything, 64 and 128 are the sizes CUDA may specialize).
inline constexpr int64_t kTestBlockSizes[] = {1, 2, 7, 16, 61, 64, 128};

/// \brief A byte buffer with guard margins on both sides.
///
/// `data()` is 64-byte aligned relative to the allocation (which itself is at
/// least 16-byte aligned), so every element type is naturally aligned.
class GuardedBuffer {
 public:
  /// Guard bytes before and after the payload.
  static constexpr size_t kGuard = 64;

  GuardedBuffer() : GuardedBuffer(0) {}
  /// \param bytes payload size  \param fill initial payload byte
  explicit GuardedBuffer(size_t bytes, uint8_t fill = kFillByte);

  uint8_t* data() { return storage_.data() + kGuard; }
  const uint8_t* data() const { return storage_.data() + kGuard; }
  size_t size() const { return size_; }
  /// Payload bytes.
  std::span<const uint8_t> bytes() const { return {data(), size_}; }
  /// Payload plus guards.
  std::span<const uint8_t> storage() const { return {storage_.data(), storage_.size()}; }
  /// Sets every payload byte to `v` (guards untouched).
  void fill(uint8_t v) { std::memset(data(), v, size_); }

  /// Element `i` of the payload read as T (memcpy: no aliasing assumptions).
  template <class T>
  T load(size_t i) const {
    T v;
    std::memcpy(&v, data() + i * sizeof(T), sizeof(T));
    return v;
  }
  /// Writes element `i` of the payload as T.
  template <class T>
  void store(size_t i, T v) {
    std::memcpy(data() + i * sizeof(T), &v, sizeof(T));
  }

  /// Empty string when both guards are intact, else a description of the first changed guard byte.
  std::string check_guards(const std::string& name) const;

 private:
  std::vector<uint8_t> storage_;
  size_t size_ = 0;
};

/// \brief What every tester has: the share of invalid values, the error counter switch and the
/// seed of every bulk value (a fluent base: the setters return the tester itself).
template <class Tester>
class TesterBase {
 public:
  /// Share of out-of-range device-side values (0: a valid case).
  Tester& invalid_fraction(double v) {
    invalid_fraction_ = v;
    return self();
  }
  /// Pass an error counter (true) or nullptr (false).
  Tester& count_errors(bool v) {
    count_errors_ = v;
    return self();
  }
  /// The seed every bulk value is drawn from.
  Tester& seed(uint64_t v) {
    seed_ = v;
    prepared_ = false;
    return self();
  }
  bool count_errors_enabled() const { return count_errors_; }

 protected:
  Tester& self() { return static_cast<Tester&>(*this); }
  /// The error_count argument: `counter`'s payload, or nullptr without count_errors.
  int32_t* counter(GuardedBuffer& counter) const {
    return count_errors_ ? reinterpret_cast<int32_t*>(counter.data()) : nullptr;
  }

  double invalid_fraction_ = 0.0;
  bool count_errors_ = true;
  uint64_t seed_ = 1;
  bool prepared_ = false;  ///< Prepare() has drawn the buffers of this seed
};

/// A buffer with the name a mismatch report uses.
struct NamedBuffer {
  std::string name;
  const GuardedBuffer* buffer;
};

/// Empty string when `expected` and `got` are identical, else
/// "<what>: first mismatch at byte I of N: expected 0xEE, got 0xGG" (or a size mismatch).
std::string first_mismatch(std::span<const uint8_t> expected, std::span<const uint8_t> got, const std::string& what);

/// Compares two cases' buffers pairwise (payload and guards) by name; empty string when identical.
std::string compare_buffers(const std::vector<NamedBuffer>& expected, const std::vector<NamedBuffer>& got);

/// Checks every buffer's guards; empty string when all are intact.
std::string check_all_guards(const std::vector<NamedBuffer>& buffers);

/// Out-of-range values every invalid-input generator injects (FlashMLA's tests/lib.py list):
/// INT_MIN, -2, `capacity` (one past the last valid value) and INT_MAX.
std::vector<int64_t> bad_index_values(int64_t capacity);

/// \brief Deterministic PRNG with its own range reduction, so a seed means the same case with
/// every standard library (std distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed ^ 0x9E3779B97F4A7C15ull) {}
  uint64_t bits() { return g_(); }
  /// Uniform in [0, n) (0 when n <= 0).
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(g_() % static_cast<uint64_t>(n)); }
  /// Uniform in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) { return hi <= lo ? lo : lo + below(hi - lo + 1); }
  /// Uniform real in [0, 1).
  double unit() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  /// Uniform real in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  bool chance(double p) { return unit() < p; }
  template <class T>
  T pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(below(static_cast<int64_t>(v.size())))];
  }

 private:
  std::mt19937_64 g_;
};

/// Fills one cache block (`stride` bytes at `p`, `block_size` tokens of `record`) with random bytes
/// from `r`. `realistic`: as quantize writes them for finite keys (no NaN code under `format` among
/// e4m3 values, scale bytes 100..150, or e4m3 scales of 2^-9..2^7); otherwise the scale bytes are
/// such values in about half of the blocks and any byte 0..255 in the rest (r decides). The draws
/// of a 584-byte block do not depend on the record parameter.
inline void fill_random_block(uint8_t* p, int64_t block_size, int64_t stride, spec::Fp8Format format, bool realistic,
                              Rng& r, spec::Record record = spec::Record::kFp8DsMla) {
  const spec::RecordLayout L = spec::record_layout(record);
  for (int64_t i = 0; i < stride; ++i) p[i] = static_cast<uint8_t>(r.bits());
  if (realistic && L.values == spec::ValueCode::kE4M3)
    for (int64_t pos = 0; pos < block_size; ++pos)
      for (int i = 0; i < L.quant_dim; ++i) {
        uint8_t& c = p[L.data_offset(pos) + i];
        if (spec::fp8_is_nan(c, format)) c ^= 1;
      }
  if (realistic || r.chance(0.5))
    for (int64_t pos = 0; pos < block_size; ++pos)
      for (int j = 0; j < L.num_scales(); ++j)
        p[L.scale_offset(block_size, pos, j)] =
            static_cast<uint8_t>(L.scales == spec::ScaleCode::kUe8m0 ? r.range(100, 150) : r.range(0x01, 0x68));
}

/// `v` clamped into int32.
/// The enumerator of a profile, for a tester's C++ reproduction line ("kSeed", "kVllmV4", "kVllmV41").
inline const char* semantics_enumerator(Semantics s) {
  switch (s) {
    case Semantics::kSeed: return "kSeed";
    case Semantics::kVllmV4: return "kVllmV4";
    case Semantics::kVllmV41: return "kVllmV41";
  }
  return "?";
}

/// A record drawn by a fuzz builder: any of the known ones, or kNumRecords, which validate() must refuse.
template <class In>
spec::Record fuzz_record(In& g) {
  return static_cast<spec::Record>(g.range(0, spec::kNumRecords));
}

inline int32_t clamp32(int64_t v) {
  return static_cast<int32_t>(v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v);
}

/// "0xHH".
std::string hex_byte(uint8_t v);

/// A guarded buffer holding `v`.
GuardedBuffer i32_buffer(const std::vector<int32_t>& v);

/// An int32 vector view of the first `n` elements of `b`.
inline TensorView i32vec(GuardedBuffer& b, int64_t n) { return TensorView::vec(b.data(), DType::kI32, n); }

/// Fills the visibility arrays `left` and `right` (sized by the caller, zeros) of requests laid out
/// by `qsl` (request b owns tokens [qsl[b] - qsl[0], qsl[b+1] - qsl[0]) below `tokens`, the last of
/// its `seq_lens[b]` positions) from random image spans (DeepSeek's rule) with at most `max_img`
/// tokens, then corrupts an `invalid_fraction` of entries. With `max_img` == 0 the arrays are not
/// read by the operation: they get arbitrary values, negatives included, so reading them would show.
void fill_visibility(Rng& r, int64_t max_img, double invalid_fraction, const std::vector<int32_t>& qsl,
                     const std::vector<int32_t>& seq_lens, int64_t tokens, std::vector<int32_t>& left,
                     std::vector<int32_t>& right);

/// Runs `args` on `be` with the index output `out` replaced by a scratch [rows, width] int32 matrix
/// of exactly that extent (a backend that stages extents before validating must not read past it);
/// throws what the backend throws.
template <class Args>
void run_with_width(Backend& be, Args args, TensorView Args::*out, int64_t rows, int64_t width);

/// Position of `Args` in the operation table (op_table.hpp); -1 for a struct that is not there.
template <class Args>
inline constexpr int op_index = [] {
  int i = 0, found = -1;
  for_each_op([&](auto t) {
    if (std::is_same_v<typename decltype(t)::type, Args>) found = i;
    ++i;
  });
  return found;
}();

/// Runs the operation of `args` on `be` (the Backend method named by the table).
template <class Args>
void run_op(Backend& be, const Args& args) {
#define DSV4KV_RUN_OP(name, A, stem) \
  if constexpr (std::is_same_v<Args, A>) be.name(args);
  DSV4KV_OPS(DSV4KV_RUN_OP)
#undef DSV4KV_RUN_OP
}

/// One run of a tester's case: every output buffer filled with kFillByte (so bytes the operation
/// must leave alone are recognizable), the error counter at 0, then the operation of `args` on `be`.
template <class Args>
void run_case(Backend& be, const Args& args, GuardedBuffer& error_count,
              std::initializer_list<GuardedBuffer*> outputs) {
  for (GuardedBuffer* o : outputs) o->fill(kFillByte);
  error_count.store<int32_t>(0, 0);
  run_op(be, args);
}

/// Calls `f(std::type_identity<Args>{})` for the operation at `index` of the table.
template <class F>
void visit_op_at(int index, F&& f) {
  int i = 0;
  for_each_op([&](auto t) {
    if (i++ == index) f(t);
  });
}

/// The reference backend, created once.
Backend& reference_backend();

/// The CUDA backend, created once; nullptr (with the reason in `why`) when there is none.
Backend* cuda_backend(std::string* why);

/// Runs one case on `ref` and twice on `be` (fresh fills each time): empty when every buffer,
/// inputs and guards included, and the error counts are byte-identical (and identical run to run
/// on `be`), else the first difference.
template <class Tester>
std::string differential_mismatch(Backend& ref, Backend& be, const Tester& t) {
  Tester a = t, b = t, c = t;
  a.Run(ref);
  b.Run(be);
  c.Run(be);
  if (std::string m = compare_buffers(a.buffers(), b.buffers()); !m.empty()) return m;
  if (std::string m = compare_buffers(b.buffers(), c.buffers()); !m.empty()) return "run to run: " + m;
  if (a.error_count() != b.error_count())
    return "error_count: " + std::to_string(a.error_count()) + " vs " + std::to_string(b.error_count());
  return {};
}

template <class Args>
void run_with_width(Backend& be, Args args, TensorView Args::*out, int64_t rows, int64_t width) {
  GuardedBuffer scratch(static_cast<size_t>(rows * (width > 1 ? width : 1)) * 4);
  args.*out = TensorView::mat(scratch.data(), DType::kI32, rows, width, width > 1 ? width : 1);
  run_op(be, args);
}

/// The tester class of an operation's argument struct: each module support/ops/<op>.hpp
/// specializes it, so code written against the operation table (op_table.hpp) finds the tester.
template <class Args>
struct TesterOf;

}  // namespace dsv4kv::conformance
