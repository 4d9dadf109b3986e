// RapidCheck properties of the five operations on the scalar reference.
//
// The property bodies live in support/property_suite.hpp (shared with the CUDA
// run, properties_cuda_test.cpp); the testers and generators in support/.
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
#include "tester_generators.hpp"
#include "testers.hpp"

namespace dsv4kv::conformance {
namespace {

Backend& ref() {
  static const std::unique_ptr<Backend> be = make_reference_backend();
  return *be;
}

// --- quantize_and_insert_k_cache -------------------------------------------------------------

RC_GTEST_PROP(ReferenceProperties, QuantizeRoundTripWithinHalfStep, ()) {
  props::quantize_round_trip(ref(), std::nullopt);
}
RC_GTEST_PROP(ReferenceProperties, FnuzRoundTripWithinHalfStep, ()) { props::quantize_round_trip(ref(), true); }
RC_GTEST_PROP(ReferenceProperties, QuantizeRopeBitExactAndPadByteZero, ()) {
  props::quantize_rope_bit_exact_and_pad_zero(ref());
}
RC_GTEST_PROP(ReferenceProperties, QuantizeMinusOneSlotsWriteNothing, ()) {
  props::quantize_minus_one_slots_write_nothing(ref());
}
RC_GTEST_PROP(ReferenceProperties, QuantizeTouchesOnlyWrittenTokens, ()) {
  props::quantize_touches_only_written_tokens(ref(), Validity::kValid);
}
RC_GTEST_PROP(ReferenceProperties, QuantizeInvalidSlotsSkippedAndCounted, ()) {
  props::quantize_touches_only_written_tokens(ref(), Validity::kInvalid);
}
RC_GTEST_PROP(ReferenceProperties, FnuzNeverWrites0x80, ()) { props::fnuz_never_writes_0x80(ref()); }
RC_GTEST_PROP(ReferenceProperties, QuantizeMonotonic, ()) { props::quantize_monotonic(ref(), std::nullopt); }
RC_GTEST_PROP(ReferenceProperties, FnuzMonotonic, ()) { props::quantize_monotonic(ref(), true); }

// Reference only: with duplicate slots the last token wins (the GPU leaves those bytes unspecified).
RC_GTEST_PROP(ReferenceProperties, QuantizeDuplicateSlotsLastTokenWins, ()) {
  QuantizeTester q = *gen_quantize(Validity::kValid, /*nonfinite=*/true);
  q.duplicates(true);
  q.Run(ref());
  std::vector<int64_t> last(static_cast<size_t>(q.tokens()));
  const std::vector<int64_t> writer = q.writer_of_slot();
  for (int64_t t = 0; t < q.tokens(); ++t) {
    const int64_t s = q.slot(t);
    last[t] = (s >= 0 && s < q.capacity() && writer[s] != t) ? -1 : s;
  }
  QuantizeTester unique = q;
  unique.slots(last);  // same seed: same keys, earlier duplicates replaced by -1
  unique.Run(ref());
  props::require_empty(first_mismatch(unique.cache().bytes(), q.cache().bytes(), "k_cache"));
}

// --- dequantize_and_gather_k_cache ------------------------------------------------------------

RC_GTEST_PROP(ReferenceProperties, GatherWritesExactlyRequestedRows, ()) {
  props::gather_writes_exactly_requested_rows(ref(), Validity::kValid);
}
RC_GTEST_PROP(ReferenceProperties, GatherInvalidRowsSkippedAndCounted, ()) {
  props::gather_writes_exactly_requested_rows(ref(), Validity::kInvalid);
}

// --- compute_global_topk_indices_and_lens -----------------------------------------------------

RC_GTEST_PROP(ReferenceProperties, GlobalTopkFollowsBlockTable, ()) {
  props::global_topk_follows_block_table(ref(), Validity::kValid);
}
RC_GTEST_PROP(ReferenceProperties, GlobalTopkInvalidIndicesGiveMinusOne, ()) {
  props::global_topk_follows_block_table(ref(), Validity::kInvalid);
}

// --- combine_topk_swa_indices -----------------------------------------------------------------

RC_GTEST_PROP(ReferenceProperties, CombineRowsWellFormed, ()) { props::combine_rows_well_formed(ref(), Validity::kValid); }
RC_GTEST_PROP(ReferenceProperties, CombineInvalidRowsWellFormed, ()) {
  props::combine_rows_well_formed(ref(), Validity::kInvalid);
}
RC_GTEST_PROP(ReferenceProperties, CombineRejectsWrongWidth, ()) { props::combine_rejects_wrong_width(ref()); }
RC_GTEST_PROP(ReferenceProperties, CombineZeroVisibilityIsPlainWindow, ()) {
  props::combine_zero_visibility_is_plain_window(ref());
}
RC_GTEST_PROP(ReferenceProperties, CombineVisibilityIgnoredWithoutImageColumns, ()) {
  props::combine_visibility_ignored_without_image_columns(ref());
}

// --- build_flashinfer_mixed_sparse_indices ----------------------------------------------------

RC_GTEST_PROP(ReferenceProperties, MixedRowsWellFormed, ()) { props::mixed_rows_well_formed(ref(), Validity::kValid); }
RC_GTEST_PROP(ReferenceProperties, MixedInvalidRowsWellFormed, ()) {
  props::mixed_rows_well_formed(ref(), Validity::kInvalid);
}
RC_GTEST_PROP(ReferenceProperties, MixedZeroVisibilityIsPlainWindow, ()) {
  props::mixed_zero_visibility_is_plain_window(ref());
}
RC_GTEST_PROP(ReferenceProperties, MixedVisibilityIgnoredWithoutImageColumns, ()) {
  props::mixed_visibility_ignored_without_image_columns(ref());
}

// --- determinism of the reference itself ------------------------------------------------------

RC_GTEST_PROP(ReferenceProperties, ReferenceIsDeterministic, ()) {
  switch (*rc::gen::inRange(0, 5)) {
    case 0: props::differential(ref(), ref(), *gen_quantize(props::draw_validity(), true)); break;
    case 1: props::differential(ref(), ref(), *gen_gather(props::draw_validity())); break;
    case 2: props::differential(ref(), ref(), *gen_global_topk(props::draw_validity())); break;
    case 3: props::differential(ref(), ref(), *gen_combine(props::draw_validity())); break;
    default: props::differential(ref(), ref(), *gen_mixed(props::draw_validity())); break;
  }
}

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
  EXPECT_TRUE(property_fails([&] { props::quantize_rope_bit_exact_and_pad_zero(pad); }));
  EXPECT_TRUE(property_fails([&] { props::quantize_touches_only_written_tokens(tail, Validity::kValid); }));
  EXPECT_TRUE(property_fails([&] { props::gather_writes_exactly_requested_rows(row, Validity::kValid); }));
  EXPECT_TRUE(property_fails([&] { props::global_topk_follows_block_table(off, Validity::kValid); }));
  EXPECT_TRUE(property_fails([&] { props::combine_rows_well_formed(beyond, Validity::kValid); }));
  EXPECT_TRUE(property_fails([&] { props::mixed_rows_well_formed(mixed, Validity::kValid); }));
  EXPECT_TRUE(property_fails([&] { props::differential(ref(), tail, *gen_quantize(Validity::kValid, false)); }));
  // And the unmutated reference passes the same checks.
  EXPECT_FALSE(property_fails([&] { props::mixed_rows_well_formed(ref(), Validity::kValid); }));
}

}  // namespace
}  // namespace dsv4kv::conformance
