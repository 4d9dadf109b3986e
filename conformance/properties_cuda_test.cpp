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
#include "testers.hpp"

namespace dsv4kv::conformance {
namespace {

Backend& ref() { return reference_backend(); }

BackendSource cuda_source() {
  return [](std::string* why) { return cuda_backend(why); };
}

// Every property of every operation (support/ops/<op>_properties.hpp), as CudaProperties.<Name>,
// and the differential property of every operation, as CudaDifferential.<Op>MatchesReference
// (twice the configured number of cases).
const bool kRegistered = register_properties("CudaProperties", cuda_source(), /*reference=*/false) &&
                         register_differential(
                             "CudaDifferential", [](std::string*) { return &ref(); }, cuda_source(), 2.0);

// Fixed large-ish cases the random generators do not reach (shapes of the CUDA
// kernels' specializations: block size 64 and 128, a padded non-16-multiple stride).
TEST(CudaDifferential, FixedShapesMatchReference) {
  DSV4KV_CUDA_OR_SKIP(be);
  for (int64_t bs : {64, 128}) {
    for (int64_t stride : {int64_t{0}, spec::block_data_bytes(bs) + 2}) {
      QuantizeTester q;
      q.tokens(1000).block_size(bs).stride(stride).nonfinite(true).invalid_fraction(0.05).seed(bs + stride);
      EXPECT_EQ(differential_mismatch(ref(), *be, q), "") << q;
      GatherTester g;
      g.requests(3).out_rows(700).block_size(bs).num_blocks(16).stride(stride).table(12, 0, 0).seed(bs + stride);
      EXPECT_EQ(differential_mismatch(ref(), *be, g), "") << g;
    }
  }
}

}  // namespace
}  // namespace dsv4kv::conformance
