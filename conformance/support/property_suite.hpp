/// \file property_suite.hpp
/// \brief The conformance properties of every operation, registered once for every backend.
///
/// The property bodies live with their operation (support/ops/<op>_properties.hpp, each ending
/// in OpSuite<Args>); this header walks the operation table (op_table.hpp) and turns them into
/// GoogleTest tests: register_properties() gives <suite>.<property> for one backend (the reference
/// in properties_reference_test.cpp, CUDA in properties_cuda_test.cpp), register_differential()
/// gives <suite>.<Prefix>MatchesReference for every operation. A new operation adds its
/// <op>_properties.hpp and one include line here; no test file changes.
///
/// Reproducing a failure: see property_common.hpp (RC_PARAMS="reproduce=..." with the test's
/// --gtest_filter).
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "ops/combine_properties.hpp"
#include "ops/gather_properties.hpp"
#include "ops/global_topk_properties.hpp"
#include "ops/mixed_sparse_properties.hpp"
#include "ops/quantize_properties.hpp"
#include "property_common.hpp"

namespace dsv4kv::conformance {

/// Every property of every operation, in table order.
inline std::vector<Property> all_properties() {
  std::vector<Property> all;
  for_each_op([&](auto t) {
    for (Property& p : OpSuite<typename decltype(t)::type>::properties()) all.push_back(std::move(p));
  });
  return all;
}

/// The property named `name` (std::out_of_range when there is none).
inline Property find_property(std::string_view name) {
  for (Property& p : all_properties())
    if (p.name == name) return p;
  throw std::out_of_range("no property " + std::string(name));
}

namespace props {

/// Runs one case on `ref` and twice on `be` (fresh fills each time) and requires
/// every buffer, inputs and guards included, and the error counts to be byte-identical.
template <class Tester>
void differential(Backend& ref, Backend& be, const Tester& t) {
  require_empty(differential_mismatch(ref, be, t));
}

/// The differential property of one operation on a random valid or invalid case.
template <class Args>
void differential_op(Backend& ref, Backend& be) {
  differential(ref, be, *OpSuite<Args>::differential_case(draw_validity()));
}

/// The differential property of a random operation of the table.
inline void differential_any_op(Backend& ref, Backend& be) {
  const int pick = *rc::gen::inRange(0, kNumOps);
  int i = 0;
  for_each_op([&](auto t) {
    if (i++ == pick) differential_op<typename decltype(t)::type>(ref, be);
  });
}

}  // namespace props

/// Runs a RapidCheck property inside the current GoogleTest test, like RC_GTEST_PROP (same test
/// id, so RC_PARAMS="reproduce=..." works), with `share` of the configured number of cases.
template <class Fn>
void check_property(Fn&& fn, double share = 1.0) {
  using namespace rc::detail;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  TestParams params = configuration().testParams;
  params.maxSuccess = std::max(1, static_cast<int>(params.maxSuccess * share));
  const TestResult result = checkProperty(toProperty(std::forward<Fn>(fn)), metadata, params);
  if (!result.template is<SuccessResult>()) {
    std::ostringstream s;
    printResultMessage(result, s);
    FAIL() << s.str();
  }
}

/// In a test body: `Backend* var` is the CUDA backend, or the test is skipped with the reason.
#define DSV4KV_CUDA_OR_SKIP(var)                                         \
  std::string var##_why;                                                 \
  Backend* var = ::dsv4kv::conformance::cuda_backend(&var##_why);        \
  if (var == nullptr) GTEST_SKIP() << "no CUDA device: " << var##_why

/// Where a registered test gets its backend: nullptr with the reason when there is none.
using BackendSource = std::function<Backend*(std::string* why)>;

namespace detail {

/// A test whose body is a function (the factory's ::testing::Test* keeps the suite compatible with TEST()).
class FunctionTest final : public ::testing::Test {
 public:
  explicit FunctionTest(std::function<void()> body) : body_(std::move(body)) {}
  void TestBody() override { body_(); }

 private:
  std::function<void()> body_;
};

inline void register_test(const char* suite, const std::string& name, std::function<void()> body) {
  ::testing::RegisterTest(suite, name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                          [body]() -> ::testing::Test* { return new detail::FunctionTest(body); });
}

/// Runs `fn(backend)`, or skips with the visible reason when `source` has no backend.
template <class Fn>
void with_backend(const BackendSource& source, Fn&& fn) {
  std::string why;
  Backend* be = source(&why);
  if (be == nullptr) GTEST_SKIP() << "no CUDA device: " << why;
  fn(*be);
}

}  // namespace detail

/// Registers every property of every operation as `suite`.<name> on the backend of `source`;
/// `reference` selects the reference-only properties and the full case count.
inline bool register_properties(const char* suite, BackendSource source, bool reference) {
  for (Property& p : all_properties()) {
    if (p.reference_only && !reference) continue;
    const double share = reference ? 1.0 : p.cuda_share;
    detail::register_test(suite, p.name, [source, check = p.check, share] {
      detail::with_backend(source, [&](Backend& be) { check_property([&] { check(be); }, share); });
    });
  }
  return true;
}

/// Registers `suite`.<Prefix>MatchesReference for every operation: random valid and invalid cases
/// give byte-identical buffers and counts on `ref` and on `other`, and on `other` run to run.
inline bool register_differential(const char* suite, BackendSource ref, BackendSource other, double share) {
  for_each_op([&](auto t) {
    using Args = typename decltype(t)::type;
    detail::register_test(suite, std::string(OpSuite<Args>::kPrefix) + "MatchesReference", [=] {
      std::string unused;
      Backend* r = ref(&unused);
      detail::with_backend(other, [&](Backend& be) {
        check_property([&] { props::differential_op<Args>(*r, be); }, share);
      });
    });
  });
  return true;
}

}  // namespace dsv4kv::conformance
