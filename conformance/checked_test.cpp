// The overflow-checked integer toolkit (dsv4kv/spec/checked.hpp) against exact 128-bit arithmetic,
// the portable (device) formulation against the compiler builtins (host), and the extent of a
// strided view against a brute-force walk over its elements.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "dsv4kv/spec.hpp"

namespace dsv4kv::conformance {
namespace {

using spec::Checked;
using i128 = __int128;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

bool fits(i128 v) { return v >= kMin && v <= kMax; }

/// Values near every boundary the toolkit has: 0, ±1, the int32 and int64 limits, powers of two.
std::vector<int64_t> edges() {
  std::vector<int64_t> v = {0,
                            1,
                            -1,
                            2,
                            -2,
                            3,
                            4,
                            7,
                            128,
                            kMax,
                            kMax - 1,
                            kMax - 3,
                            kMin,
                            kMin + 1,
                            int64_t{1} << 31,
                            (int64_t{1} << 31) - 1,
                            -(int64_t{1} << 31),
                            int64_t{1} << 32,
                            int64_t{3037000499},
                            int64_t{3037000500},
                            -int64_t{3037000500}};
  for (int s = 40; s <= 62; s += 11) v.push_back(int64_t{1} << s), v.push_back(-(int64_t{1} << s));
  return v;
}

rc::Gen<int64_t> any_i64() {
  return rc::gen::oneOf(rc::gen::elementOf(edges()), rc::gen::arbitrary<int64_t>(),
                        rc::gen::inRange<int64_t>(-1000, 1000));
}

/// The expected Checked of an exact 128-bit result.
Checked exact(i128 v) { return fits(v) ? Checked(static_cast<int64_t>(v)) : Checked::overflow(); }

::testing::AssertionResult same(const Checked& got, const Checked& want) {
  if (got.ok != want.ok || (got.ok && got.value != want.value))
    return ::testing::AssertionFailure() << "got {" << got.value << ", " << got.ok << "}, want {" << want.value << ", "
                                         << want.ok << "}";
  if (!got.ok && got.value != 0) return ::testing::AssertionFailure() << "an overflowed result holds " << got.value;
  return ::testing::AssertionSuccess();
}

TEST(Checked, EdgeValuesAgainst128BitArithmetic) {
  for (int64_t a : edges()) {
    for (int64_t b : edges()) {
      EXPECT_TRUE(same(spec::checked_add(a, b), exact(i128{a} + b))) << a << " + " << b;
      EXPECT_TRUE(same(spec::checked_sub(a, b), exact(i128{a} - b))) << a << " - " << b;
      EXPECT_TRUE(same(spec::checked_mul(a, b), exact(i128{a} * b))) << a << " * " << b;
    }
  }
}

RC_GTEST_PROP(Checked, AddSubMulMatch128BitArithmeticOnBothPaths, ()) {
  const int64_t a = *any_i64(), b = *any_i64();
  RC_ASSERT(same(spec::checked_add(a, b), exact(i128{a} + b)));
  RC_ASSERT(same(spec::checked_sub(a, b), exact(i128{a} - b)));
  RC_ASSERT(same(spec::checked_mul(a, b), exact(i128{a} * b)));
  // The portable formulation (what device code runs) reports the same overflows and values.
  int64_t r = 0;
  RC_ASSERT(spec::detail::add_overflow_portable(a, b, &r) == !fits(i128{a} + b));
  if (fits(i128{a} + b)) RC_ASSERT(r == static_cast<int64_t>(i128{a} + b));
  RC_ASSERT(spec::detail::sub_overflow_portable(a, b, &r) == !fits(i128{a} - b));
  if (fits(i128{a} - b)) RC_ASSERT(r == static_cast<int64_t>(i128{a} - b));
  RC_ASSERT(spec::detail::mul_overflow_portable(a, b, &r) == !fits(i128{a} * b));
  if (fits(i128{a} * b)) RC_ASSERT(r == static_cast<int64_t>(i128{a} * b));
}

TEST(Checked, PortablePathAgreesOnEveryEdgePair) {
  for (int64_t a : edges()) {
    for (int64_t b : edges()) {
      int64_t r1 = 0, r2 = 0;
      EXPECT_EQ(spec::detail::mul_overflow_portable(a, b, &r1), spec::detail::mul_overflow(a, b, &r2))
          << a << " * " << b;
      if (!spec::detail::mul_overflow(a, b, &r2)) { EXPECT_EQ(r1, r2); }
      EXPECT_EQ(spec::detail::add_overflow_portable(a, b, &r1), spec::detail::add_overflow(a, b, &r2))
          << a << " + " << b;
      EXPECT_EQ(spec::detail::sub_overflow_portable(a, b, &r1), spec::detail::sub_overflow(a, b, &r2))
          << a << " - " << b;
    }
  }
}

TEST(Checked, OverflowIsSticky) {
  const Checked o = spec::checked_mul(kMax, 2);
  ASSERT_FALSE(o.ok);
  EXPECT_FALSE(spec::checked_sub(o, kMax).ok);  // would be back in range: still overflowed
  EXPECT_FALSE(spec::checked_mul(o, 0).ok);
  EXPECT_FALSE(spec::checked_max(o, 1).ok);
  EXPECT_FALSE(spec::checked_round_up(o, 4).ok);
  EXPECT_TRUE(spec::checked_add(kMax, -1).within(0, kMax));
  EXPECT_FALSE(Checked(5).within(6, 9));
}

RC_GTEST_PROP(Checked, RoundUpAndCeilDivMatch128BitArithmetic, ()) {
  const int64_t x = *rc::gen::oneOf(rc::gen::inRange<int64_t>(0, 100000), rc::gen::inRange<int64_t>(kMax - 300, kMax),
                                    rc::gen::inRange<int64_t>(0, kMax));
  const int64_t m = *rc::gen::oneOf(rc::gen::inRange<int64_t>(1, 300), rc::gen::inRange<int64_t>(1, kMax));
  const i128 up = (i128{x} + m - 1) / m * m;
  RC_ASSERT(same(spec::checked_round_up(x, m), exact(up)));
  RC_ASSERT(same(spec::ceil_div_checked(x, m), exact((i128{x} + m - 1) / m)));
}

TEST(Checked, RoundUpAndCeilDivDomains) {
  EXPECT_EQ(spec::checked_round_up(0, 4).value, 0);
  EXPECT_EQ(spec::checked_round_up(5, 4).value, 8);
  EXPECT_EQ(spec::checked_round_up(kMax - 3, 4).value, kMax - 3);  // 2^63 - 4 is a multiple of 4
  EXPECT_FALSE(spec::checked_round_up(kMax - 2, 4).ok);
  EXPECT_FALSE(spec::checked_round_up(-1, 4).ok);
  EXPECT_FALSE(spec::checked_round_up(3, 0).ok);
  EXPECT_EQ(spec::ceil_div_checked(kMax, 1).value, kMax);
  EXPECT_EQ(spec::ceil_div_checked(kMax, 2).value, int64_t{1} << 62);
  EXPECT_FALSE(spec::ceil_div_checked(-1, 2).ok);
  // The constexpr path compiles to the same answers.
  static_assert(spec::checked_round_up(1, 128).value == 128);
  static_assert(!spec::checked_add(kMax, 1).ok);
  static_assert(
      spec::checked_extent_bytes(std::array<int64_t, 2>{3, 4}.data(), std::array<int64_t, 2>{10, 1}.data(), 2, 4)
          .value == (2 * 10 + 3 + 1) * 4);
}

TEST(Checked, NumelZeroDimensionWinsOverOverflow) {
  const int64_t huge[3] = {int64_t{1} << 40, int64_t{1} << 40, 0};
  EXPECT_TRUE(same(spec::checked_numel(huge, 3), Checked(0)));
  EXPECT_FALSE(spec::checked_numel(huge, 2).ok);
  const int64_t neg[2] = {0, -1};
  EXPECT_FALSE(spec::checked_numel(neg, 2).ok);                // a negative size is never a count
  EXPECT_TRUE(same(spec::checked_numel(neg, 0), Checked(1)));  // rank 0: one element
}

/// Highest byte + 1 of a view, by walking every element (small views only).
int64_t brute_extent(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride, int64_t es) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n == 0) return 0;
  int64_t lo = 0, hi = 0;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * stride[d];
    lo = std::min(lo, off), hi = std::max(hi, off);
    for (size_t d = shape.size(); d-- > 0;)
      if (++idx[d] < shape[d])
        break;
      else
        idx[d] = 0;
  }
  return (hi - lo + 1) * es;
}

RC_GTEST_PROP(Checked, ExtentMatchesElementWalk, ()) {
  const int ndim = *rc::gen::inRange(0, 4);
  std::vector<int64_t> shape(ndim), stride(ndim);
  for (int d = 0; d < ndim; ++d) {
    shape[d] = *rc::gen::inRange<int64_t>(0, 5);
    stride[d] = *rc::gen::inRange<int64_t>(-7, 8);
  }
  const int64_t es = *rc::gen::elementOf(std::vector<int64_t>{1, 2, 4, 8});
  const int64_t want = brute_extent(shape, stride, es);
  // Exact for any signs: the lowest and highest offsets differ by the sum of (size - 1) * |stride|.
  RC_ASSERT(same(spec::checked_extent_bytes(shape.data(), stride.data(), ndim, es), Checked(want)));
}

TEST(Checked, ExtentOverflowsAndEdges) {
  const int64_t shape[3] = {3, 2336, 0}, stride[3] = {int64_t{1} << 62, 1, 0};
  EXPECT_FALSE(spec::checked_extent_bytes(shape, stride, 2, 1).ok);  // 2 * 2^62 + 2336
  const int64_t s2[2] = {(int64_t{1} << 62) - 2000, 1};
  EXPECT_TRUE(same(spec::checked_extent_bytes(shape, s2, 2, 1), Checked(2 * ((int64_t{1} << 62) - 2000) + 2336)));
  EXPECT_FALSE(spec::checked_extent_bytes(shape, s2, 2, 2).ok);  // the element size tips it over
  const int64_t zero_stride_shape[3] = {1, int64_t{1} << 60, 512}, zero_stride[3] = {0, 0, 1};
  EXPECT_TRUE(same(spec::checked_extent_bytes(zero_stride_shape, zero_stride, 3, 2), Checked(1024)));
  EXPECT_FALSE(spec::checked_numel(zero_stride_shape, 3).ok);  // 2^69 elements in 1 KiB
  const int64_t empty_shape[2] = {0, kMax}, wild[2] = {kMax, kMin};
  EXPECT_TRUE(same(spec::checked_extent_bytes(empty_shape, wild, 2, 4), Checked(0)));
  const int64_t one[1] = {2}, min_stride[1] = {kMin};
  EXPECT_FALSE(spec::checked_extent_bytes(one, min_stride, 1, 1).ok);
  EXPECT_FALSE(spec::checked_extent_bytes(one, one, 1, 0).ok);
}

TEST(Checked, TensorViewCountsWithoutWrapping) {
  TensorView v = TensorView::mat(nullptr, DType::kU8, int64_t{1} << 32, int64_t{1} << 32);
  EXPECT_FALSE(v.numel_checked().ok);
  EXPECT_EQ(v.numel(), kMax);  // saturated, not the wrapped 0 that skipped the null-pointer check
  EXPECT_FALSE(v.extent_bytes().ok);
  EXPECT_FALSE(v.empty());
  v.shape[1] = 0;
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(v.numel(), 0);
  EXPECT_TRUE(same(v.extent_bytes(), Checked(0)));
  const TensorView absent;
  EXPECT_EQ(absent.numel(), 0);
  EXPECT_TRUE(same(absent.extent_bytes(), Checked(0)));
  const TensorView c = TensorView::cube(nullptr, DType::kI32, 2, 3, 4, 20, 5);
  EXPECT_EQ(c.numel(), 24);
  EXPECT_TRUE(same(c.extent_bytes(), Checked((20 + 2 * 5 + 3 + 1) * 4)));
}

// ---------------------------------------------------------------------------
// The uint64 variant (file readers' byte counts) and the std::optional forms.
// ---------------------------------------------------------------------------
using u128 = unsigned __int128;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

std::vector<uint64_t> edges_u64() {
  std::vector<uint64_t> v = {0,
                             1,
                             2,
                             3,
                             10,
                             255,
                             uint64_t{1} << 32,
                             (uint64_t{1} << 32) - 1,
                             (uint64_t{1} << 32) + 1,
                             uint64_t{4294967296} * 3,
                             static_cast<uint64_t>(kMax),
                             static_cast<uint64_t>(kMax) + 1,
                             kU64Max,
                             kU64Max - 1,
                             kU64Max / 10,
                             kU64Max / 10 + 1};
  for (int s = 40; s <= 63; s += 7) v.push_back(uint64_t{1} << s);
  return v;
}

::testing::AssertionResult same_u64(const spec::CheckedU64& got, u128 want) {
  const bool fits = want <= kU64Max;
  if (got.ok != fits || (fits && got.value != static_cast<uint64_t>(want)))
    return ::testing::AssertionFailure() << "got {" << got.value << ", " << got.ok << "}, want "
                                         << (fits ? std::to_string(static_cast<uint64_t>(want)) : "overflow");
  if (!got.ok && got.value != 0) return ::testing::AssertionFailure() << "an overflowed result holds " << got.value;
  return ::testing::AssertionSuccess();
}

TEST(CheckedU64, EdgeValuesAgainst128BitArithmetic) {
  for (uint64_t a : edges_u64()) {
    for (uint64_t b : edges_u64()) {
      EXPECT_TRUE(same_u64(spec::checked_add_u64(a, b), u128{a} + b)) << a << " + " << b;
      EXPECT_TRUE(same_u64(spec::checked_mul_u64(a, b), u128{a} * b)) << a << " * " << b;
      // The std::optional form agrees with the struct form.
      const auto m = checked::mul<uint64_t>(a, b);
      EXPECT_EQ(m.has_value(), u128{a} * b <= kU64Max) << a << " * " << b;
      if (m) { EXPECT_EQ(*m, a * b); }
      const auto s = checked::add<uint64_t>(a, b);
      EXPECT_EQ(s.has_value(), u128{a} + b <= kU64Max) << a << " + " << b;
    }
  }
}

RC_GTEST_PROP(CheckedU64, AddMulMatch128BitArithmetic, ()) {
  const auto any = rc::gen::oneOf(rc::gen::elementOf(edges_u64()), rc::gen::arbitrary<uint64_t>(),
                                  rc::gen::inRange<uint64_t>(0, 100000));
  const uint64_t a = *any, b = *any;
  RC_ASSERT(same_u64(spec::checked_add_u64(a, b), u128{a} + b));
  RC_ASSERT(same_u64(spec::checked_mul_u64(a, b), u128{a} * b));
}

TEST(CheckedU64, OverflowIsStickyAndTheInt64FormMatchesChecked) {
  const spec::CheckedU64 o = spec::checked_mul_u64(kU64Max, 2);
  ASSERT_FALSE(o.ok);
  EXPECT_FALSE(spec::checked_mul_u64(o, 0).ok);  // 0 times an overflow stays an overflow
  EXPECT_FALSE(spec::checked_add_u64(o, 0).ok);
  static_assert(spec::checked_add_u64(kU64Max - 1, 1).value == kU64Max);
  static_assert(!spec::checked_add_u64(kU64Max, 1).ok);
  // A decimal-digit accumulation as the header parsers do it: 18446744073709551615 fits, one more digit does not.
  std::optional<uint64_t> v = 0;
  for (char c : std::string("18446744073709551615")) {
    const auto m = checked::mul<uint64_t>(*v, 10);
    v = m ? checked::add<uint64_t>(*m, static_cast<uint64_t>(c - '0')) : std::nullopt;
    ASSERT_TRUE(v.has_value());
  }
  EXPECT_EQ(*v, kU64Max);
  EXPECT_FALSE(checked::mul<uint64_t>(*v, 10).has_value());
  // int64_t goes through spec::checked_*: same answers on every edge pair.
  for (int64_t a : edges()) {
    for (int64_t b : edges()) {
      const Checked m = spec::checked_mul(a, b), s = spec::checked_add(a, b);
      const auto om = checked::mul<int64_t>(a, b), os = checked::add<int64_t>(a, b);
      EXPECT_EQ(om.has_value(), m.ok) << a << " * " << b;
      if (om) { EXPECT_EQ(*om, m.value); }
      EXPECT_EQ(os.has_value(), s.ok) << a << " + " << b;
      if (os) { EXPECT_EQ(*os, s.value); }
    }
  }
}

}  // namespace
}  // namespace dsv4kv::conformance
