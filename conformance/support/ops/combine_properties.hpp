/// \file combine_properties.hpp
/// \brief RapidCheck generator and properties of combine_topk_swa_indices, and its registration.
#pragma once

#include "property_common.hpp"
#include "combine.hpp"

namespace dsv4kv::conformance {

/// A random combine_topk_swa_indices case. `visibility`: nullopt = random.
inline rc::Gen<CombineTester> gen_combine(Validity v, std::optional<bool> visibility = std::nullopt) {
  return rc::gen::exec([=] {
    const int64_t img = *rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 6, 16, 200});
    CombineTester t;
    t.requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .max_query(*rc::gen::inRange<int64_t>(1, 41))
        .max_context(*rc::gen::inRange<int64_t>(0, 81))
        .extra_tokens(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 3}))
        .base(*rc::gen::elementOf(std::vector<int32_t>{0, 0, 7, -5}))
        .window(*rc::gen::elementOf(std::vector<int64_t>{1, 2, 7, 16, 64, 128}))
        .compress_ratio(*rc::gen::elementOf(std::vector<int64_t>{1, 4, 128}))
        .topk(*rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 128, 512}))
        .topk_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .max_image_tokens(img)
        .visibility(visibility ? *visibility : *rc::gen::arbitrary<bool>())
        .topk_range(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 4096}))
        .m_extra(*rc::gen::elementOf(std::vector<int64_t>{0, 5}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

namespace props {

/// Rows are exactly round_up(topk + window + max_image_tokens, 128) wide (other
/// widths are rejected), 0 <= len <= width, every column at or beyond len is -1;
/// for a token of a well-formed request the first topk_len columns hold
/// topk + M*b (negative inputs stay -1) and the SWA part is one ascending run
/// starting at or after M*b + N.
inline void combine_rows_well_formed(Backend& be, Validity v) {
  CombineTester c = *gen_combine(v);
  c.Run(be);
  const int64_t W = c.width();
  RC_ASSERT(W % 128 == 0);
  RC_ASSERT(W >= c.topk() + c.window() + c.max_image_tokens());
  RC_ASSERT(W < c.topk() + c.window() + c.max_image_tokens() + 128);
  for (int64_t t = 0; t < c.tokens(); ++t) {
    const int64_t len = c.len(t);
    RC_ASSERT(len >= 0 && len <= W);
    for (int64_t j = len; j < W; ++j)
      if (c.out(t, j) != -1) {
        std::ostringstream m;
        m << "combined_indices[" << t << ", " << j << "] = " << c.out(t, j) << " beyond length " << len;
        RC_FAIL(m.str());
      }
    int64_t b = 0, pos = 0;
    if (v != Validity::kValid || !c.token_position(t, &b, &pos)) continue;
    const int64_t topk_len = std::min((pos + 1) / c.compress_ratio(), c.topk());
    RC_ASSERT(len >= topk_len);
    for (int64_t j = 0; j < topk_len; ++j) {
      const int64_t in = c.topk_in(t, j);
      const int64_t want = in < 0 ? -1 : c.M() * b + in;
      RC_ASSERT(int64_t{c.out(t, j)} == want);
    }
    const int64_t n = len - topk_len;
    RC_ASSERT(n <= c.window() + c.max_image_tokens());
    if (!c.has_visibility()) RC_ASSERT(n <= c.window());
    for (int64_t j = 0; j < n; ++j) {
      RC_ASSERT(int64_t{c.out(t, topk_len + j)} >= c.M() * b + c.N());
      if (j > 0) RC_ASSERT(c.out(t, topk_len + j) == c.out(t, topk_len + j - 1) + 1);
    }
    // The window ends at the token itself when nobody widens it to the right.
    if (n > 0 && c.right(t) == 0) {
      const int64_t last = c.out(t, topk_len + n - 1) - c.M() * b - c.N();  // = pos - gather_start
      RC_ASSERT(last == pos - (c.seq_len(b) - c.gather_len(b)));
    }
  }
  if (v == Validity::kValid) RC_ASSERT(c.error_count() == 0);
  require_empty(check_all_guards(c.buffers()));
}

/// validate() rejects a combined_indices width other than round_up(topk + window + max_image_tokens, 128).
inline void combine_rejects_wrong_width(Backend& be) {
  CombineTester c = *gen_combine(Validity::kValid);
  const int64_t wrong = c.width() + *rc::gen::elementOf(std::vector<int64_t>{-1, 1, 128});
  bool threw = false;
  try {
    c.RunWithWidth(be, wrong);
  } catch (const dsv4kv::Error&) {
    threw = true;
  }
  RC_ASSERT(threw);
}

/// Visibility arrays of zeros give the same rows as no arrays (image widening with
/// left = right = 0 is the plain window); compared with max_image_tokens = 0, the
/// rows agree on every column the narrower row has and the rest are -1.
inline void combine_zero_visibility_is_plain_window(Backend& be) {
  CombineTester zero = *gen_combine(Validity::kValid, /*visibility=*/true);
  zero.zero_visibility(true);
  CombineTester none = zero;
  none.visibility(false);
  CombineTester narrow = none;
  narrow.max_image_tokens(0);
  zero.Run(be);
  none.Run(be);
  narrow.Run(be);
  require_empty(first_mismatch(none.out_buffer().bytes(), zero.out_buffer().bytes(), "combined_indices"));
  require_empty(first_mismatch(none.lens_buffer().bytes(), zero.lens_buffer().bytes(), "combined_lens"));
  RC_ASSERT(zero.error_count() == none.error_count());
  for (int64_t t = 0; t < zero.tokens(); ++t) {
    RC_ASSERT(zero.len(t) == narrow.len(t));
    for (int64_t j = 0; j < zero.width(); ++j)
      RC_ASSERT(zero.out(t, j) == (j < narrow.width() ? narrow.out(t, j) : -1));
  }
}

/// Visibility arrays passed with max_image_tokens == 0 are not read (vLLM's IMAGE_WIDTH == 0 gate):
/// the rows and the error count equal those of the same case without the arrays, although the
/// arrays hold arbitrary values, negatives included.
inline void combine_visibility_ignored_without_image_columns(Backend& be) {
  CombineTester with = *gen_combine(*rc::gen::element(Validity::kValid, Validity::kInvalid), /*visibility=*/true);
  with.max_image_tokens(0);
  CombineTester without = with;
  without.visibility(false);
  with.Run(be);
  without.Run(be);
  require_empty(first_mismatch(without.out_buffer().bytes(), with.out_buffer().bytes(), "combined_indices"));
  require_empty(first_mismatch(without.lens_buffer().bytes(), with.lens_buffer().bytes(), "combined_lens"));
  RC_ASSERT(with.error_count() == without.error_count());
}

/// Row of token 2 of the combine example of spec/operations.md. `visibility` passes the arrays
/// (all 0 except left_visible[2] = left); max_image_tokens is the model's image width.
inline std::vector<int32_t> combine_spec_row(bool visibility, int32_t left, int64_t max_image_tokens, int32_t* len,
                                 int32_t* errors) {
  namespace S = spec;
  const int64_t T = 5, width = S::combine_row_width(3, 4, max_image_tokens);
  std::vector<int32_t> topk(T * 3, 0), qsl = {10, 12, 15}, seq = {5, 9}, gl = {5, 6}, out(T * width), lens(T);
  std::vector<int32_t> lv(T, 0), rv(T, 0);
  topk[2 * 3 + 0] = 5;
  topk[2 * 3 + 1] = -1;
  topk[2 * 3 + 2] = 8;
  lv[2] = left;
  dsv4kv::CombineArgs a;
  a.topk_indices = TensorView::mat(topk.data(), DType::kI32, T, 3);
  a.query_start_loc = TensorView::vec(qsl.data(), DType::kI32, 3);
  a.seq_lens = TensorView::vec(seq.data(), DType::kI32, 2);
  a.gather_lens = TensorView::vec(gl.data(), DType::kI32, 2);
  a.window_size = 4;
  a.compress_ratio = 2;
  a.topk = 3;
  a.M = 100;
  a.N = 8;
  a.max_image_tokens = max_image_tokens;
  if (visibility) {
    a.left_visible = TensorView::vec(lv.data(), DType::kI32, T);
    a.right_visible = TensorView::vec(rv.data(), DType::kI32, T);
  }
  a.combined_indices = TensorView::mat(out.data(), DType::kI32, T, width);
  a.combined_lens = TensorView::vec(lens.data(), DType::kI32, T);
  a.error_count = errors;
  dsv4kv::reference::combine_topk_swa_indices(a);
  *len = lens[2];
  return std::vector<int32_t>(out.begin() + 2 * width, out.begin() + 3 * width);
}


}  // namespace props

/// The Combine suite: its differential case and its properties (registered once for every backend).
template <>
struct OpSuite<CombineArgs> {
  static constexpr const char* kPrefix = "Combine";
  static rc::Gen<CombineTester> differential_case(Validity v) { return gen_combine(v); }
  /// Deliberate bugs applied after the reference's call, each with the property that must catch it
  /// (PropertySelfTest: a property that cannot fail proves nothing).
  static std::vector<SeededBug<CombineArgs>> seeded_bugs() {
    return {
      // A column beyond a row's length holds 0 instead of -1.
      {"CombineRowsWellFormed",
       [](const CombineArgs& a) {
         const TensorView& o = a.combined_indices;
         const int64_t w = o.shape[1];
         for (int64_t t = 0; t < o.shape[0]; ++t)
           if (a.combined_lens.as<int32_t>()[t] < w) o.as<int32_t>()[t * o.stride[0] + w - 1] = 0;
       }},
    };
  }
  /// Large cases for the CUDA smoke test (CudaSmoke.LargeCombine).
  static std::vector<CombineTester> large_cases() {
    std::vector<CombineTester> v;
    // Top-k 2048: rows of 2,176 columns take combine's lean kernel (>= 2,048 columns).
    for (bool vis : {false, true})
      v.push_back(CombineTester()
          .requests(4)
          .max_query(200)
          .max_context(10000)
          .topk(2048)
          .window(128)
          .visibility(vis)
          .max_image_tokens(vis ? 40 : 0)
          .invalid_fraction(0.02)
          .count_errors(true)
          .seed(vis ? 4 : 3));
    for (bool vis : {false, true})
      v.push_back(CombineTester()
          .requests(4)
          .max_query(200)
          .max_context(2000)
          .topk(512)
          .window(128)
          .visibility(vis)
          .max_image_tokens(vis ? 40 : 0)
          .invalid_fraction(0.02)
          .count_errors(true)
          .seed(vis ? 2 : 1));
    return v;
  }
  /// The worked example of combine_topk_swa_indices (spec/operations.md, combine example), run through the reference
  /// (SpecExamples.<kPrefix>, spec_examples_test.cpp); GoogleTest assertions.
  static void spec_example() {
    namespace S = spec;
    // The 8 (>= N) is vLLM's 108, the -1 stays -1 (vLLM: 99); window [3, 7) -> rows 108..111; no report.
    const std::vector<int32_t> head = {105, -1, 108, 108, 109, 110, 111};
    for (const bool visibility : {false, true}) {
      int32_t len = 0, errors = 0;
      const auto row = props::combine_spec_row(visibility, 0, 6, &len, &errors);
      ASSERT_EQ(row.size(), 128u);
      EXPECT_EQ(std::vector<int32_t>(row.begin(), row.begin() + 7), head);
      for (size_t c = 7; c < row.size(); ++c) EXPECT_EQ(row[c], -1) << "column " << c;
      EXPECT_EQ(len, 7);
      EXPECT_EQ(errors, 0);
    }
    // left_visible 5 starts the window at 1, before gather_start 3: the clamp keeps the same row.
    int32_t len = 0, errors = 0;
    auto row = props::combine_spec_row(true, 5, 6, &len, &errors);
    EXPECT_EQ(std::vector<int32_t>(row.begin(), row.begin() + 7), head);
    EXPECT_EQ(row[7], -1);
    EXPECT_EQ(len, 7);
    EXPECT_EQ(errors, 0);
    // max_image_tokens 0: the visibility arrays are not read, so neither left 5 nor a negative value
    // (which would be a report if read) changes anything.
    for (const int32_t left : {5, -3}) {
      errors = 0;
      row = props::combine_spec_row(true, left, 0, &len, &errors);
      EXPECT_EQ(std::vector<int32_t>(row.begin(), row.begin() + 7), head) << "left " << left;
      EXPECT_EQ(len, 7);
      EXPECT_EQ(errors, 0) << "left " << left;
    }
  }
  static std::vector<Property> properties() {
    return {
      {"CombineRowsWellFormed", [](Backend& be) { props::combine_rows_well_formed(be, Validity::kValid); }},
      {"CombineInvalidRowsWellFormed", [](Backend& be) { props::combine_rows_well_formed(be, Validity::kInvalid); }},
      {"CombineRejectsWrongWidth", [](Backend& be) { props::combine_rejects_wrong_width(be); }, /*cuda_share=*/0.2},
      {"CombineZeroVisibilityIsPlainWindow", [](Backend& be) { props::combine_zero_visibility_is_plain_window(be); }},
      {"CombineVisibilityIgnoredWithoutImageColumns", [](Backend& be) { props::combine_visibility_ignored_without_image_columns(be); }},
    };
  }
};
}  // namespace dsv4kv::conformance
