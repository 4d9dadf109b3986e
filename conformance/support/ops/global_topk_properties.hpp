/// \file global_topk_properties.hpp
/// \brief RapidCheck generator and properties of compute_global_topk_indices_and_lens, and its registration.
#pragma once

#include "property_common.hpp"
#include "global_topk.hpp"

namespace dsv4kv::conformance {

/// A random compute_global_topk_indices_and_lens case.
inline rc::Gen<GlobalTopkTester> gen_global_topk(Validity v) {
  return rc::gen::exec([=] {
    const int64_t bs = *gen_block_size();
    const int64_t topk = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 128, 130, 512});
    int64_t tokens = *gen_count(spec::kTileSize, bs, 130);
    if (tokens * topk > 20000) tokens = 20000 / topk;
    GlobalTopkTester t;
    t.tokens(tokens)
        .topk(topk)
        .row_pads(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 5}), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .block_size(bs)
        .table(*rc::gen::inRange<int64_t>(0, 6), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 2}))
        .sentinel_fraction(*rc::gen::elementOf(std::vector<double>{0.0, 0.2, 0.9}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

namespace props {

/// out[t, c] = block_table[req, l / B] * B + l % B for in-range l; every negative
/// local index (-1, -2, INT_MIN) stays -1 without a count; out-of-row columns and
/// negative entries give -1 and a count; a bad request gives an all -1 row, len 0,
/// one count; lens = is_valid ? #{c : out >= 0} : 0. Row padding stays 0xA5.
inline void global_topk_follows_block_table(Backend& be, Validity v) {
  GlobalTopkTester g = *gen_global_topk(v);
  g.Run(be);
  int64_t faults = 0;
  for (int64_t t = 0; t < g.tokens(); ++t) {
    const bool bad_req = g.request(t) < 0 || g.request(t) >= g.requests();
    faults += bad_req ? 1 : 0;
    int64_t count = 0;
    for (int64_t c = 0; c < g.topk(); ++c) {
      const int32_t want = g.expected_global(t, c, &faults);
      if (g.local(t, c) < 0) RC_ASSERT(g.global(t, c) == -1);  // sentinel survives
      if (g.global(t, c) != want) {
        std::ostringstream m;
        m << "global_topk_indices[" << t << ", " << c << "] = " << g.global(t, c) << ", expected " << want
          << " (local " << g.local(t, c) << ", request " << g.request(t) << ")";
        RC_FAIL(m.str());
      }
      count += want >= 0 ? 1 : 0;
    }
    RC_ASSERT(g.len(t) == (g.valid_token(t) && !bad_req ? count : 0));
  }
  RC_ASSERT(int64_t{g.error_count()} == (g.count_errors_enabled() ? faults : 0));
  if (v == Validity::kValid) RC_ASSERT(faults == 0);  // the generator's own promise
  // Row padding of the output is never written.
  for (int64_t t = 0; t < g.tokens(); ++t)
    for (int64_t c = g.topk(); c < g.out_row_stride(); ++c)
      RC_ASSERT(g.out_buffer().load<uint32_t>(t * g.out_row_stride() + c) == 0xA5A5A5A5u);
  require_empty(check_all_guards(g.buffers()));
}

}  // namespace props

/// The GlobalTopk suite: its differential case and its properties (registered once for every backend).
template <>
struct OpSuite<GlobalTopkArgs> {
  static constexpr const char* kPrefix = "GlobalTopk";
  static rc::Gen<GlobalTopkTester> differential_case(Validity v) { return gen_global_topk(v); }
  /// Deliberate bugs applied after the reference's call, each with the property that must catch it
  /// (PropertySelfTest: a property that cannot fail proves nothing).
  static std::vector<SeededBug<GlobalTopkArgs>> seeded_bugs() {
    return {
      // Every global index is one too large.
      {"GlobalTopkFollowsBlockTable",
       [](const GlobalTopkArgs& a) {
         const TensorView& o = a.global_topk_indices;
         for (int64_t t = 0; t < o.shape[0]; ++t)
           for (int64_t c = 0; c < o.shape[1]; ++c)
             if (int32_t& v = o.as<int32_t>()[t * o.stride[0] + c]; v >= 0) ++v;
       }},
    };
  }
  /// Large cases for the CUDA smoke test (CudaSmoke.LargeGlobalTopk).
  static std::vector<GlobalTopkTester> large_cases() {
    std::vector<GlobalTopkTester> v;
    for (int64_t topk : {512, 509, 2048})
      v.push_back(GlobalTopkTester()
          .tokens(300)
          .topk(topk)
          .row_pads(topk == 509 ? 3 : 0, 0)
          .requests(4)
          .sentinel_fraction(0.05)
          .invalid_fraction(0.02)
          .count_errors(true)
          .seed(static_cast<uint64_t>(topk)));
    // 5,000 rows: the lean global_topk kernel groups 32 (topk 200), 64 (512) or 128 (2048) threads
    // per row from 4,096 rows on.
    for (int64_t topk : {200, 512, 2048})
      v.push_back(GlobalTopkTester()
          .tokens(5000)
          .topk(topk)
          .requests(4)
          .sentinel_fraction(0.05)
          .invalid_fraction(0.02)
          .count_errors(true)
          .seed(static_cast<uint64_t>(topk + 1)));
    return v;
  }
  /// The worked example of compute_global_topk_indices_and_lens (spec/operations.md, compute_global_topk example), run through the reference
  /// (SpecExamples.<kPrefix>, spec_examples_test.cpp); GoogleTest assertions.
  static void spec_example() {
    namespace S = spec;
    std::vector<int32_t> topk = {5, -1, 0, 13}, t2r = {0}, bt = {7, 2, 9}, out(4), lens(1);
    std::vector<uint8_t> valid = {1};
    int32_t errors = 0;
    dsv4kv::GlobalTopkArgs a;
    a.topk_indices = TensorView::mat(topk.data(), DType::kI32, 1, 4);
    a.token_to_req = TensorView::vec(t2r.data(), DType::kI32, 1);
    a.block_table = TensorView::mat(bt.data(), DType::kI32, 1, 3);
    a.block_size = 4;
    a.is_valid_token = TensorView::vec(valid.data(), DType::kBool, 1);
    a.global_topk_indices = TensorView::mat(out.data(), DType::kI32, 1, 4);
    a.topk_lens = TensorView::vec(lens.data(), DType::kI32, 1);
    a.error_count = &errors;
    dsv4kv::reference::compute_global_topk_indices_and_lens(a);
    EXPECT_EQ(out, (std::vector<int32_t>{9, -1, 28, -1}));
    EXPECT_EQ(lens[0], 2);
    EXPECT_EQ(errors, 1);
  }
  static std::vector<Property> properties() {
    return {
      {"GlobalTopkFollowsBlockTable", [](Backend& be) { props::global_topk_follows_block_table(be, Validity::kValid); }},
      {"GlobalTopkInvalidIndicesGiveMinusOne", [](Backend& be) { props::global_topk_follows_block_table(be, Validity::kInvalid); }},
    };
  }
};
}  // namespace dsv4kv::conformance
