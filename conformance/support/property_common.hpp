/// \file property_common.hpp
/// \brief What every operation's properties share: generator building blocks, the property
/// record the test files register, and the per-operation suite trait.
///
/// Each operation's RapidCheck generator and properties live next to its tester, in
/// support/ops/<op>_properties.hpp, and end with a specialization of OpSuite<Args>; the test
/// files register every property once for each backend by walking the operation table
/// (property_suite.hpp). Structural parameters (block size, token counts, strides, widths) are
/// drawn by RapidCheck, so failing cases shrink towards small shapes; bulk contents come from the
/// tester's `seed`, also drawn here. Generators cover block sizes 1, 2, 7, 16, 61, 64, 128, token
/// counts below, at and above tile and block multiples, padded rows, padded strides (e.g. 37,378
/// bytes) and, for invalid cases, INT_MIN, -2, capacity and INT_MAX in every device-side index.
/// Sizes are capped so one property runs in about a second on the reference.
///
/// Reproducing a failure: RapidCheck prints the failing case (a tester's parameters, whose `seed`
/// fixes every bulk value) and a line `RC_PARAMS="reproduce=..."`. Run the same binary with that
/// variable set, optionally restricted to the failing test:
///
///     RC_PARAMS="reproduce=BhVZ..." ./properties_reference_test --gtest_filter=ReferenceProperties.QuantizeMonotonic
///
/// `RC_PARAMS="seed=N"` replays a whole run; `max_success=1000` runs more cases.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <numeric>
#include <sstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "dsv4kv/reference.hpp"

#include "testers.hpp"

namespace dsv4kv::conformance {

/// Whether a generated case may hold out-of-range device-side values.
enum class Validity { kValid, kInvalid };

/// One of the block sizes every generator covers.
inline rc::Gen<int64_t> gen_block_size() {
  return rc::gen::elementOf(std::vector<int64_t>(std::begin(kTestBlockSizes), std::end(kTestBlockSizes)));
}

/// A count in [0, limit]: small values, values next to multiples of `a` and `b`
/// (e.g. the 64-value tile and the block size), or any value.
inline rc::Gen<int64_t> gen_count(int64_t a, int64_t b, int64_t limit) {
  std::vector<int64_t> v = {0, 1, 2, 3};
  for (int64_t m : {a, b})
    for (int64_t k : {1, 2})
      for (int64_t d : {-1, 0, 1})
        if (k * m + d >= 0 && k * m + d <= limit) v.push_back(k * m + d);
  return rc::gen::oneOf(rc::gen::elementOf(v), rc::gen::inRange<int64_t>(0, limit + 1));
}

/// A block stride for block size `bs`: vLLM's, the minimum, or padded by an even
/// number of bytes that is not a multiple of 16 (37,378 for block size 64).
inline rc::Gen<int64_t> gen_stride(int64_t bs) {
  const int64_t need = spec::block_data_bytes(bs);
  return rc::gen::elementOf(std::vector<int64_t>{0, need, need + 2, need + 34, need + 576});
}

inline rc::Gen<uint64_t> gen_seed() { return rc::gen::arbitrary<uint64_t>(); }

/// One of the semantics profiles, the default half of the time.
inline rc::Gen<Semantics> gen_semantics() {
  return rc::gen::elementOf(std::vector<Semantics>{Semantics::kSeed, Semantics::kSeed, Semantics::kSeed,
                                                   Semantics::kVllmV4, Semantics::kVllmV41, Semantics::kVllmV41});
}

/// Share of corrupted values in an invalid case.
inline double draw_invalid_fraction(Validity v) {
  return v == Validity::kValid ? 0.0 : *rc::gen::elementOf(std::vector<double>{0.05, 0.2, 0.5});
}

/// \brief One property of one operation, written once against the Backend interface.
///
/// `check` is the body of one RapidCheck case: it draws a case, runs it on the backend and
/// RC_ASSERTs. The test files register it as <Suite>.<name> for the reference and for CUDA.
struct Property {
  std::string name;                     ///< GoogleTest name, e.g. "QuantizeMonotonic"
  std::function<void(Backend&)> check;  ///< one random case
  double cuda_share = 1.0;              ///< share of the configured case count on CUDA (heavy ones: less)
  bool reference_only = false;          ///< the spec leaves the GPU's bytes open here
};

/// A deliberate bug: `mutate` corrupts the outputs of a correct call; `property` must then fail.
template <class Args>
struct SeededBug {
  const char* property;
  void (*mutate)(const Args&);
};

/// \brief The conformance suite of one operation; each support/ops/<op>_properties.hpp specializes it:
///
///     template <> struct OpSuite<Args> {
///       static constexpr const char* kPrefix;             // "Quantize": CudaDifferential.QuantizeMatchesReference
///       static rc::Gen<Tester> differential_case(Validity);  // valid or invalid random case
///       static std::vector<Property> properties();
///       static std::vector<SeededBug<Args>> seeded_bugs();  // each caught by the property it names
///     };
template <class Args>
struct OpSuite;

namespace props {

/// RC_FAIL with the message unless it is empty (messages come from first_mismatch and friends).
inline void require_empty(const std::string& message) {
  if (!message.empty()) RC_FAIL(message);
}

inline Validity draw_validity() { return *rc::gen::arbitrary<bool>() ? Validity::kValid : Validity::kInvalid; }

}  // namespace props
}  // namespace dsv4kv::conformance
