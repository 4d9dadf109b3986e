// The conformance properties against the CUDA backend, plus differential
// properties: random valid and invalid inputs must give byte-identical buffers
// (outputs, untouched bytes, inputs and guard bytes) and identical error counts
// on the reference and on CUDA, and identical bytes from run to run on CUDA.
//
// Without a usable GPU every test is reported as SKIPPED with the reason.
//
// To reproduce a failure: RapidCheck prints the failing tester (parameters and
// seed) and a line RC_PARAMS="reproduce=..."; re-run this binary with that
// environment variable (and --gtest_filter=CudaProperties.<Name>).
#include <algorithm>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <rapidcheck.h>
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

/// The CUDA backend, created once; nullptr (with `why`) when there is none.
Backend* cuda(std::string* why) {
  static std::string reason;
  static const std::unique_ptr<Backend> be = make_cuda_backend(&reason);
  *why = reason;
  return be.get();
}

/// Runs a RapidCheck property inside the current GoogleTest test, like
/// RC_GTEST_PROP (same test id, so RC_PARAMS="reproduce=..." works), but with
/// `fraction` of the configured number of cases for heavy properties.
template <class Fn>
void check_property(Fn&& fn, double fraction = 1.0) {
  using namespace rc::detail;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  TestParams params = configuration().testParams;
  params.maxSuccess = std::max(1, static_cast<int>(params.maxSuccess * fraction));
  const TestResult result = checkProperty(toProperty(std::forward<Fn>(fn)), metadata, params);
  if (!result.template is<SuccessResult>()) {
    std::ostringstream s;
    printResultMessage(result, s);
    FAIL() << s.str();
  }
}

#define DSV4KV_CUDA_OR_SKIP(be)                              \
  std::string why_;                                          \
  Backend* be = cuda(&why_);                                 \
  if (be == nullptr) GTEST_SKIP() << "no CUDA device: " << why_

// --- the reference properties, on CUDA ---------------------------------------------------------

TEST(CudaProperties, QuantizeRoundTripWithinHalfStep) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::quantize_round_trip(*be, std::nullopt); });
}
TEST(CudaProperties, FnuzRoundTripWithinHalfStep) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::quantize_round_trip(*be, true); });
}
TEST(CudaProperties, QuantizeRopeBitExactAndPadByteZero) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::quantize_rope_bit_exact_and_pad_zero(*be); });
}
TEST(CudaProperties, QuantizeMinusOneSlotsWriteNothing) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::quantize_minus_one_slots_write_nothing(*be); });
}
TEST(CudaProperties, QuantizeTouchesOnlyWrittenTokens) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::quantize_touches_only_written_tokens(*be, Validity::kValid); });
}
TEST(CudaProperties, QuantizeInvalidSlotsSkippedAndCounted) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::quantize_touches_only_written_tokens(*be, Validity::kInvalid); });
}
TEST(CudaProperties, FnuzNeverWrites0x80) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::fnuz_never_writes_0x80(*be); });
}
TEST(CudaProperties, QuantizeMonotonic) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::quantize_monotonic(*be, std::nullopt); });
}
TEST(CudaProperties, FnuzMonotonic) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::quantize_monotonic(*be, true); });
}
TEST(CudaProperties, GatherWritesExactlyRequestedRows) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::gather_writes_exactly_requested_rows(*be, Validity::kValid); });
}
TEST(CudaProperties, GatherInvalidRowsSkippedAndCounted) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::gather_writes_exactly_requested_rows(*be, Validity::kInvalid); });
}
TEST(CudaProperties, GlobalTopkFollowsBlockTable) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::global_topk_follows_block_table(*be, Validity::kValid); });
}
TEST(CudaProperties, GlobalTopkInvalidIndicesGiveMinusOne) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::global_topk_follows_block_table(*be, Validity::kInvalid); });
}
TEST(CudaProperties, CombineRowsWellFormed) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::combine_rows_well_formed(*be, Validity::kValid); });
}
TEST(CudaProperties, CombineInvalidRowsWellFormed) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::combine_rows_well_formed(*be, Validity::kInvalid); });
}
TEST(CudaProperties, CombineRejectsWrongWidth) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::combine_rejects_wrong_width(*be); }, 0.2);
}
TEST(CudaProperties, CombineZeroVisibilityIsPlainWindow) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::combine_zero_visibility_is_plain_window(*be); });
}
TEST(CudaProperties, CombineVisibilityIgnoredWithoutImageColumns) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::combine_visibility_ignored_without_image_columns(*be); });
}
TEST(CudaProperties, MixedRowsWellFormed) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::mixed_rows_well_formed(*be, Validity::kValid); });
}
TEST(CudaProperties, MixedInvalidRowsWellFormed) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::mixed_rows_well_formed(*be, Validity::kInvalid); });
}
TEST(CudaProperties, MixedZeroVisibilityIsPlainWindow) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::mixed_zero_visibility_is_plain_window(*be); });
}
TEST(CudaProperties, MixedVisibilityIgnoredWithoutImageColumns) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::mixed_visibility_ignored_without_image_columns(*be); });
}

// --- differential: reference vs CUDA, valid and invalid inputs, and CUDA run to run ------------

TEST(CudaDifferential, QuantizeMatchesReference) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::differential_quantize(ref(), *be); }, 2.0);
}
TEST(CudaDifferential, GatherMatchesReference) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::differential_gather(ref(), *be); }, 2.0);
}
TEST(CudaDifferential, GlobalTopkMatchesReference) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::differential_global_topk(ref(), *be); }, 2.0);
}
TEST(CudaDifferential, CombineMatchesReference) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::differential_combine(ref(), *be); }, 2.0);
}
TEST(CudaDifferential, MixedSparseMatchesReference) {
  DSV4KV_CUDA_OR_SKIP(be);
  check_property([&] { props::differential_mixed(ref(), *be); }, 2.0);
}

// Fixed large-ish cases the random generators do not reach (shapes of the CUDA
// kernels' specializations: block size 64 and 128, a padded non-16-multiple stride).
TEST(CudaDifferential, FixedShapesMatchReference) {
  DSV4KV_CUDA_OR_SKIP(be);
  for (int64_t bs : {64, 128}) {
    for (int64_t stride : {int64_t{0}, spec::block_data_bytes(bs) + 2}) {
      QuantizeTester q;
      q.tokens(1000).block_size(bs).stride(stride).nonfinite(true).invalid_fraction(0.05).seed(bs + stride);
      QuantizeTester a = q, b = q;
      a.Run(ref());
      b.Run(*be);
      EXPECT_EQ(compare_buffers(a.buffers(), b.buffers()), "") << q;
      GatherTester g;
      g.requests(3).out_rows(700).block_size(bs).num_blocks(16).stride(stride).table(12, 0, 0).seed(bs + stride);
      GatherTester ga = g, gb = g;
      ga.Run(ref());
      gb.Run(*be);
      EXPECT_EQ(compare_buffers(ga.buffers(), gb.buffers()), "") << g;
    }
  }
}

}  // namespace
}  // namespace dsv4kv::conformance
