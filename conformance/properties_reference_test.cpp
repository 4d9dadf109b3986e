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

/// The reference with one deliberate bug applied after the real operation.
enum class Mutation { kPadByte, kBlockTail, kExtraGatherRow, kGlobalOffByOne, kCombineBeyondLength, kMixedPadding };

class MutantBackend final : public Backend {
 public:
  explicit MutantBackend(Mutation m) : m_(m) {}
  const char* name() const override { return "mutant"; }
  void quantize_and_insert_k_cache(const QuantizeInsertArgs& a) override {
    ref().quantize_and_insert_k_cache(a);
    const int64_t stride = a.k_cache.shape[0] > 1 ? a.k_cache.stride[0] : a.k_cache.shape[1];
    const int64_t need = spec::block_data_bytes(a.block_size);
    uint8_t* cache = a.k_cache.as<uint8_t>();
    if (m_ == Mutation::kPadByte && a.slot_mapping.shape[0] > 0) {
      const int64_t s = a.slot_mapping.as<int64_t>()[0];  // first token's pad byte becomes 1
      if (s >= 0 && s < a.k_cache.shape[0] * a.block_size)
        cache[(s / a.block_size) * stride + spec::scale_offset(a.block_size, s % a.block_size, spec::kScalePadIndex)] = 1;
    }
    if (m_ == Mutation::kBlockTail && a.k_cache.shape[1] > need) cache[need] = 0;  // first byte past the layout
  }
  void dequantize_and_gather_k_cache(const DequantizeGatherArgs& a) override {
    ref().dequantize_and_gather_k_cache(a);
    if (m_ != Mutation::kExtraGatherRow || a.seq_lens.shape[0] == 0) return;
    const int32_t s = a.seq_lens.as<int32_t>()[0];
    const int64_t g = a.gather_lens.present() ? a.gather_lens.as<int32_t>()[0] : s;
    const int64_t row = a.offset + g;  // one row past request 0's rows
    if (g >= 0 && g <= s && row < a.out.shape[1]) a.out.as<uint16_t>()[row * a.out.stride[1]] = 0;
  }
  void compute_global_topk_indices_and_lens(const GlobalTopkArgs& a) override {
    ref().compute_global_topk_indices_and_lens(a);
    if (m_ != Mutation::kGlobalOffByOne) return;
    for (int64_t t = 0; t < a.global_topk_indices.shape[0]; ++t)
      for (int64_t c = 0; c < a.global_topk_indices.shape[1]; ++c) {
        int32_t& v = a.global_topk_indices.as<int32_t>()[t * a.global_topk_indices.stride[0] + c];
        if (v >= 0) ++v;
      }
  }
  void combine_topk_swa_indices(const CombineArgs& a) override {
    ref().combine_topk_swa_indices(a);
    if (m_ != Mutation::kCombineBeyondLength) return;
    const int64_t w = a.combined_indices.shape[1];
    for (int64_t t = 0; t < a.combined_indices.shape[0]; ++t)
      if (a.combined_lens.as<int32_t>()[t] < w) a.combined_indices.as<int32_t>()[t * w + w - 1] = 0;
  }
  void build_flashinfer_mixed_sparse_indices(const MixedSparseArgs& a) override {
    ref().build_flashinfer_mixed_sparse_indices(a);
    if (m_ != Mutation::kMixedPadding) return;
    const int64_t w = a.sparse_indices.shape[1];
    for (int64_t t = 0; t < a.sparse_indices.shape[0]; ++t) a.sparse_indices.as<int32_t>()[t * w + w - 1] = 0;
  }

 private:
  Mutation m_;
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
  MutantBackend pad(Mutation::kPadByte), tail(Mutation::kBlockTail), row(Mutation::kExtraGatherRow),
      off(Mutation::kGlobalOffByOne), beyond(Mutation::kCombineBeyondLength), mixed(Mutation::kMixedPadding);
  // Each registered property (looked up by its test name) on the backend carrying its bug.
  const std::pair<const char*, Backend*> caught[] = {
      {"QuantizeRopeBitExactAndPadByteZero", &pad},   {"QuantizeTouchesOnlyWrittenTokens", &tail},
      {"GatherWritesExactlyRequestedRows", &row},     {"GlobalTopkFollowsBlockTable", &off},
      {"CombineRowsWellFormed", &beyond},             {"MixedRowsWellFormed", &mixed},
  };
  for (const auto& [name, be] : caught) {
    const Property p = find_property(name);
    EXPECT_TRUE(property_fails([&] { p.check(*be); })) << name;
    // And the unmutated reference passes the same check.
    EXPECT_FALSE(property_fails([&] { p.check(ref()); })) << name;
  }
  // The table-driven differential property catches a backend that differs from the reference.
  EXPECT_TRUE(property_fails([&] { props::differential_op<QuantizeInsertArgs>(ref(), tail); }));
}

}  // namespace
}  // namespace dsv4kv::conformance
