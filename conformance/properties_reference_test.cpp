// RapidCheck properties of every operation on the scalar reference.
//
// The property bodies live with their operation in support/ops/<op>_properties.hpp and are
// registered here and in properties_cuda_test.cpp from one list (support/property_suite.hpp).
//
// To reproduce a failure: RapidCheck prints the failing tester (its parameters
// and seed) and, at the end of the run, a line like
//   RC_PARAMS="reproduce=BhVZ..."
// Re-run this binary with exactly that environment variable to replay only the
// failing case (add --gtest_filter=ReferenceProperties.<Name> to skip the rest).
// RC_PARAMS="seed=N" replays a whole run, RC_PARAMS="max_success=1000" digs deeper.
#include <functional>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "backend.hpp"
#include "property_suite.hpp"
#include "testers.hpp"

namespace dsv4kv::conformance {
namespace {

Backend& ref() { return reference_backend(); }

// Every property of every operation (support/ops/<op>_properties.hpp), as ReferenceProperties.<Name>.
const bool kRegistered = register_properties(
    "ReferenceProperties", [](std::string*) { return &ref(); }, /*reference=*/true);

// --- determinism of the reference itself ------------------------------------------------------

RC_GTEST_PROP(ReferenceProperties, ReferenceIsDeterministic, ()) { props::differential_any_op(ref(), ref()); }

// --- the test helpers themselves: a comparison that cannot fail proves nothing -----------------

TEST(TesterHelpers, FirstMismatchReportsIndexAndHexBytes) {
  const std::vector<uint8_t> a = {1, 2, 3, 4}, b = {1, 2, 0xA5, 4};
  EXPECT_EQ(first_mismatch(a, a, "x"), "");
  EXPECT_EQ(first_mismatch(a, b, "out"), "out: first mismatch at byte 2 of 4: expected 0x03, got 0xA5");
  EXPECT_NE(first_mismatch(a, std::vector<uint8_t>{1, 2, 3}, "out").find("size mismatch"), std::string::npos);
}

TEST(TesterHelpers, GuardsDetectWritesJustOutsideTheBuffer) {
  GuardedBuffer g(10);
  EXPECT_EQ(g.check_guards("g"), "");
  g.data()[10] = 0;
  EXPECT_NE(g.check_guards("g").find("after the buffer"), std::string::npos);
  GuardedBuffer h(10);
  h.data()[-1] = 0;
  EXPECT_NE(h.check_guards("h").find("before the buffer"), std::string::npos);
}

TEST(TesterHelpers, FluentQuantizeTesterRunsAndCountsBadSlots) {
  QuantizeTester q;
  q.tokens(17).block_size(61).stride(37378 / 64 * 61 + 2).fnuz(true).invalid_fraction(0.5).pad_fraction(0.2).seed(7);
  q.Run(ref());
  EXPECT_EQ(q.error_count(), q.expected_error_count());
  EXPECT_GT(q.expected_error_count(), 0);
  EXPECT_EQ(check_all_guards(q.buffers()), "");
}

TEST(TesterHelpers, PaddedStrideOfVllmBlock64Works) {
  QuantizeTester q;
  q.tokens(130).block_size(64).num_blocks(3).stride(37378).seed(3);
  q.Run(ref());
  EXPECT_EQ(q.error_count(), 0);
  // Bytes of the padded tail of block 0 (37376 .. 37377) stay 0xA5.
  EXPECT_EQ(q.cache_byte(0, 37376), kFillByte);
  EXPECT_EQ(q.cache_byte(0, 37377), kFillByte);
}

// --- the properties themselves can fail: each one must catch a seeded bug ----------------------

/// The reference with one deliberate bug (an OpSuite's seeded bug) applied after one operation.
class MutantBackend final : public Backend {
 public:
  template <class Args>
  explicit MutantBackend(void (*mutate)(const Args&))
      : op_(op_index<Args>), mutate_([mutate](const void* a) { mutate(*static_cast<const Args*>(a)); }) {}
  const char* name() const override { return "mutant"; }
#define DSV4KV_MUTANT(op, Args, stem)       \
  void op(const Args& a) override {         \
    ref().op(a);                            \
    if (op_index<Args> == op_) mutate_(&a); \
  }
  DSV4KV_OPS(DSV4KV_MUTANT)
#undef DSV4KV_MUTANT

 private:
  int op_;
  std::function<void(const void*)> mutate_;
};

/// Swallows RapidCheck's reports, so a self-test's expected failure prints nothing
/// and leaves no "reproduce" line behind.
class SilentListener final : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

/// True when the property fails within 200 cases.
template <class Fn>
bool property_fails(Fn fn) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  params.maxSuccess = 200;
  params.disableShrinking = true;
  rc::detail::TestMetadata metadata;
  metadata.id = "self-test";
  SilentListener quiet;
  const auto result = rc::detail::checkProperty(rc::detail::toProperty(fn), metadata, params, quiet, {});
  return result.template is<rc::detail::FailureResult>();
}

TEST(PropertySelfTest, EachPropertyCatchesItsSeededBug) {
  int bugs = 0;
  for_each_op([&](auto t) {
    using Args = typename decltype(t)::type;
    for (const SeededBug<Args>& bug : OpSuite<Args>::seeded_bugs()) {
      ++bugs;
      MutantBackend mutant(bug.mutate);
      const Property p = find_property(bug.property);
      EXPECT_TRUE(property_fails([&] { p.check(mutant); })) << bug.property << " misses its seeded bug";
      // The unmutated reference passes the same check,
      EXPECT_FALSE(property_fails([&] { p.check(ref()); })) << bug.property;
      // and the table-driven differential property sees the mutant differ from the reference.
      EXPECT_TRUE(property_fails([&] { props::differential_op<Args>(ref(), mutant); })) << bug.property;
    }
  });
  EXPECT_GE(bugs, kNumOps);  // at least one seeded bug per operation
}

}  // namespace
}  // namespace dsv4kv::conformance
