/// \file combine_properties.hpp
/// \brief RapidCheck generator and properties of combine_topk_swa_indices, and its registration.
#pragma once

#include "bad_inputs.hpp"
#include "property_common.hpp"
#include "combine.hpp"

namespace dsv4kv::conformance {

/// A random combine_topk_swa_indices case. `visibility`: nullopt = random.
/// A case with visibility arrays never draws vllm_v41 (that model has no image windows).
inline rc::Gen<CombineTester> gen_combine(Validity v, std::optional<bool> visibility = std::nullopt) {
  return rc::gen::exec([=] {
    Semantics sem = *gen_semantics();
    if (visibility == true && !spec::has_image_windows(sem)) sem = Semantics::kSeed;
    const bool images = spec::has_image_windows(sem);
    const int64_t img = images ? *rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 6, 16, 200}) : 0;
    const std::vector<int64_t> ratios =
        spec::allows_compress_ratio_zero(sem) ? std::vector<int64_t>{0, 1, 4, 128} : std::vector<int64_t>{1, 4, 128};
    CombineTester t;
    t.requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .max_query(*rc::gen::inRange<int64_t>(1, 41))
        .max_context(*rc::gen::inRange<int64_t>(0, 81))
        .extra_tokens(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 3}))
        .base(*rc::gen::elementOf(std::vector<int32_t>{0, 0, 7, -5}))
        .window(*rc::gen::elementOf(std::vector<int64_t>{1, 2, 7, 16, 64, 128}))
        .compress_ratio(*rc::gen::elementOf(ratios))
        .topk(*rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 128, 512}))
        .topk_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .max_image_tokens(img)
        .visibility(images && (visibility ? *visibility : *rc::gen::arbitrary<bool>()))
        .topk_range(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 4096}))
        .m_extra(*rc::gen::elementOf(std::vector<int64_t>{0, 5}))
        .invalid_fraction(draw_invalid_fraction(v))
        .semantics(sem)
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

namespace props {

/// Rows are exactly round_up(topk + window + max_image_tokens, 128) wide (other
/// widths are rejected), 0 <= len <= width, every column at or beyond len is -1;
/// for a token of a well-formed request the first topk_len columns hold
/// topk + M*b (negative inputs stay -1; under vllm_v41 inputs >= N too) and the SWA part is one ascending run
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
    const int64_t topk_len = c.compress_ratio() > 0 ? std::min((pos + 1) / c.compress_ratio(), c.topk()) : 0;
    RC_ASSERT(len >= topk_len);
    const bool mask = spec::masks_combine_topk(c.semantics());
    for (int64_t j = 0; j < topk_len; ++j) {
      const int64_t in = c.topk_in(t, j);
      const int64_t want = in < 0 || (mask && in >= c.N()) ? -1 : c.M() * b + in;
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
  } catch (const dsv4kv::Error&) { threw = true; }
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
    // Top-k 2048: rows of 2,176 columns take combine's one-row-per-CTA launch (rows of >= 2,048 columns).
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
    // V4.1's combine: top-k values drawn up to 4,096, past N = max seq_len / 4 (dropped to -1).
    v.push_back(CombineTester()
                    .requests(4)
                    .max_query(200)
                    .max_context(10000)
                    .topk(2048)
                    .window(128)
                    .topk_range(4096)
                    .semantics(Semantics::kVllmV41)
                    .seed(41));
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
        {"CombineVisibilityIgnoredWithoutImageColumns",
         [](Backend& be) { props::combine_visibility_ignored_without_image_columns(be); }},
    };
  }
};
// ---------------------------------------------------------------------------
// Bad inputs (conformance/bad_inputs_test.cpp runs them; bad_inputs.hpp has the machinery)
// ---------------------------------------------------------------------------

namespace bad_inputs {

/// The bad-input rows of `CombineArgs`: its valid base case, every way an argument can be wrong,
/// and what must happen (bad_inputs.hpp).
template <>
struct OpRows<CombineArgs> {
  /// The prefix of the rows' test names.
  static constexpr const char* kPrefix = "combine";

  static CombineArgs& args(Case& c) { return c.get<CombineArgs>(); }
  static const CombineArgs& args(const Case& c) { return c.get<CombineArgs>(); }

  /// The valid base case (small, with strided views, row padding and a block-stride tail).
  static void base_case(Case& c) {
    // Two requests: tokens 0-1 (seq_len 6, gather_len 5) and tokens 2-4 (seq_len 9, gather_len 9);
    // query_start_loc starts at 10 (the op rebases by it); output rows padded by 2.
    CombineTester tester;  // owns the buffers adopt() copies
    CombineArgs a = tester.layout({10, 12, 15}, {6, 9}, {5, 9})
                        .window(4)
                        .compress_ratio(2)
                        .topk(3)
                        .topk_pad(1)
                        .max_image_tokens(2)
                        .visibility(true)
                        .out_row_pad(2)
                        .seed(44)
                        .args();
    a.M = 100;
    a.N = 20;
    a.left_visible.shape[0] = a.right_visible.shape[0] = 5;  // one per token (the tester may add one more)
    c.adopt(a);
    const int32_t topk[5][4] = {{5, 12, 9, 1}, {-1, 0, 17, 2}, {3, 0, 15, 7}, {-1, 19, 4, 2}, {8, 11, -1, 6}};
    for (int t = 0; t < 5; ++t)
      for (int j = 0; j < 4; ++j) at<int32_t>(args(c).topk_indices, t, j) = topk[t][j];
    const int32_t left[5] = {0, 1, 0, 2, 1}, right[5] = {1, 0, 0, 0, 1};
    for (int t = 0; t < 5; ++t)
      at<int32_t>(args(c).left_visible, t) = left[t], at<int32_t>(args(c).right_visible, t) = right[t];
  }

  static void rows(std::vector<Row>& t) {
    const Op C = op_index<CombineArgs>;
    t.push_back(contract(C, "window_0", [](Case& c) { args(c).window_size = 0; }, {"window_size must be >= 1, got 0"}));
    t.push_back(contract(C, "window_negative", [](Case& c) { args(c).window_size = -128; },
                         {"window_size must be >= 1, got -128"}));
    t.push_back(contract(C, "window_int64_max", [](Case& c) { args(c).window_size = kI64Max; },
                         {"window_size must fit in int32"}));
    t.push_back(
        contract(C, "topk_beyond_int32", [](Case& c) { args(c).topk = int64_t{1} << 32; }, {"topk must fit in int32"}));
    t.push_back(contract(C, "compress_ratio_0", [](Case& c) { args(c).compress_ratio = 0; },
                         {"compress_ratio must be >= 1, got 0"}));
    t.push_back(contract(C, "compress_ratio_negative_v41",
                         [](Case& c) {
                           args(c).semantics = Semantics::kVllmV41;
                           args(c).left_visible = args(c).right_visible = TensorView{};
                           args(c).max_image_tokens = 0;
                           args(c).compress_ratio = -1;
                         },
                         {"compress_ratio must be >= 0, got -1"}));
    t.push_back(
        contract(C, "image_tokens_v41",
                 [](Case& c) {
                   args(c).semantics = Semantics::kVllmV41;
                   args(c).left_visible = args(c).right_visible = TensorView{};
                 },
                 {"max_image_tokens must be 0 with semantics vllm_v41 (that model has no image windows), got"}));
    t.push_back(contract(C, "visibility_v41",
                         [](Case& c) {
                           args(c).semantics = Semantics::kVllmV41;
                           args(c).max_image_tokens = 0;
                         },
                         {"left_visible and right_visible must be None with semantics vllm_v41"}));
    t.push_back(contract(C, "semantics_unknown", [](Case& c) { args(c).semantics = static_cast<Semantics>(7); },
                         {"semantics must be seed, vllm_v4 or vllm_v41, got the value 7"}));
    t.push_back(contract(C, "topk_negative", [](Case& c) { args(c).topk = -1; }, {"topk must be >= 0, got -1"}));
    t.push_back(contract(C, "topk_wider_than_topk_indices", [](Case& c) { args(c).topk = 5; },
                         {"topk (5) must not exceed the width of topk_indices (4)"}));
    t.push_back(contract(C, "M_negative", [](Case& c) { args(c).M = -1; }, {"M must be >= 0, got -1"}));
    t.push_back(contract(C, "N_beyond_int32", [](Case& c) { args(c).N = int64_t{1} << 31; },
                         {"N must fit in int32, got 2147483648"}));
    t.push_back(contract(C, "M_beyond_int32", [](Case& c) { args(c).M = int64_t{1} << 40; }, {"M must fit in int32"}));
    t.push_back(contract(C, "max_image_tokens_negative", [](Case& c) { args(c).max_image_tokens = -1; },
                         {"max_image_tokens must be >= 0, got -1"}));
    t.push_back(contract(C, "query_start_loc_short", [](Case& c) { args(c).query_start_loc.shape[0] = 2; },
                         {"query_start_loc must have 3 entries (num_reqs + 1), got 2"}));
    t.push_back(contract(C, "query_start_loc_int64", [](Case& c) { args(c).query_start_loc.dtype = DType::kI64; },
                         {"query_start_loc must be int32, got int64"}));
    t.push_back(
        contract(C, "seq_lens_missing", [](Case& c) { args(c).seq_lens = TensorView{}; }, {"seq_lens is required"}));
    t.push_back(contract(C, "gather_lens_missing", [](Case& c) { args(c).gather_lens = TensorView{}; },
                         {"gather_lens is required"}));
    t.push_back(contract(C, "gather_lens_short", [](Case& c) { args(c).gather_lens.shape[0] = 1; },
                         {"gather_lens must have at least 2 entries (one per request), got 1"}));
    t.push_back(contract(C, "only_left_visible", [](Case& c) { args(c).right_visible = TensorView{}; },
                         {"left_visible and right_visible must be given together"}));
    t.push_back(contract(C, "only_right_visible", [](Case& c) { args(c).left_visible = TensorView{}; },
                         {"left_visible and right_visible must be given together"}));
    t.push_back(contract(C, "left_visible_short", [](Case& c) { args(c).left_visible.shape[0] = 4; },
                         {"left_visible must have at least 5 entries (one per token), got 4"}));
    t.push_back(contract(C, "right_visible_int64", [](Case& c) { args(c).right_visible.dtype = DType::kI64; },
                         {"right_visible must be int32, got int64"}));
    t.push_back(contract(
        C, "output_width_127", [](Case& c) { args(c).combined_indices.shape[1] = 127; },
        {"combined_indices must have round_up(topk + window_size + max_image_tokens, 128) = 128 columns, got 127"}));
    t.push_back(contract(
        C, "output_width_counts_image_tokens", [](Case& c) { args(c).max_image_tokens = 200; },
        {"combined_indices must have round_up(topk + window_size + max_image_tokens, 128) = 256 columns, got 128"}));
    t.push_back(contract(C, "output_rows", [](Case& c) { args(c).combined_indices.shape[0] = 4; },
                         {"combined_indices must have 5 rows, got 4"}));
    t.push_back(contract(C, "lens_short", [](Case& c) { args(c).combined_lens.shape[0] = 4; },
                         {"combined_lens must have 5 entries, got 4"}));
    t.push_back(contract(C, "topk_indices_inner_stride", [](Case& c) { args(c).topk_indices.stride[1] = 3; },
                         {"topk_indices must have unit stride in its last dimension, got 3"}));
    t.push_back(contract(C, "output_misaligned", [](Case& c) { misalign(args(c).combined_indices, 2); },
                         {"combined_indices must be aligned to 4 bytes"}));
    t.push_back(contract(C, "topk_indices_missing", [](Case& c) { args(c).topk_indices = TensorView{}; },
                         {"topk_indices is required"}));

    auto topk = [](int tok, int j, int32_t v) {
      return [=](Case& c) { at<int32_t>(args(c).topk_indices, tok, j) = v; };
    };
    auto i32 = [](TensorView CombineArgs::*f, int i, int32_t v) {
      return [=](Case& c) { at<int32_t>(args(c).*f, i) = v; };
    };
    auto dead = [](std::vector<int64_t> rows) {
      return [=](const Case& a, const Case&) {
        for (int64_t r : rows) expect_dead_row(a, r);
      };
    };
    // Entries >= N pass through as v + M*b (vLLM's bytes; combine follows no index): not counted.
    t.push_back(skip(C, "topk_entry_at_N_passes_through", topk(0, 0, 20), 0, nullptr, [](const Case& a, const Case& b) {
      expect_base_except(a, b, {{0, 0, 20}});
    }));
    t.push_back(
        skip(C, "topk_entry_beyond_N_passes_through", topk(3, 1, 4095), 0, nullptr, [](const Case& a, const Case& b) {
          expect_base_except(a, b, {{3, 1, 4195}});
        }));
    t.push_back(skip(C, "topk_entry_int32_max", topk(4, 1, kI32Max), 1, nullptr, [](const Case& a, const Case& b) {
      expect_base_except(a, b, {{4, 1, -1}});
    }));
    t.push_back(skip(
        C, "topk_negative_sentinels_not_counted",
        [](Case& c) {
          at<int32_t>(args(c).topk_indices, 2, 1) = -2, at<int32_t>(args(c).topk_indices, 3, 2) = kI32Min;
        },
        0, nullptr,
        [](const Case& a, const Case& b) {
          expect_base_except(a, b, {{2, 1, -1}, {3, 2, -1}});
        }));
    t.push_back(skip(C, "topk_beyond_topk_len_not_read", topk(0, 2, kI32Min), 0, nullptr,
                     [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
    t.push_back(skip(C, "topk_column_beyond_topk_not_read", topk(3, 3, kI32Max), 0, nullptr,
                     [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
    t.push_back(skip(C, "left_visible_negative", i32(&CombineArgs::left_visible, 3, -5), 1,
                     i32(&CombineArgs::left_visible, 3, 0)));
    t.push_back(skip(C, "right_visible_int32_min", i32(&CombineArgs::right_visible, 0, kI32Min), 1,
                     i32(&CombineArgs::right_visible, 0, 0)));
    t.push_back(skip(
        C, "both_visibilities_negative",
        [](Case& c) { at<int32_t>(args(c).left_visible, 4) = -1, at<int32_t>(args(c).right_visible, 4) = -1; }, 2,
        [](Case& c) { at<int32_t>(args(c).left_visible, 4) = 0, at<int32_t>(args(c).right_visible, 4) = 0; }));
    // With max_image_tokens == 0 the visibility arrays are not read (vLLM's IMAGE_WIDTH gate): a negative
    // value is neither counted nor used, and the rows equal those of the same call without the arrays.
    t.push_back(skip(
        C, "visibility_not_read_without_image_columns",
        [](Case& c) {
          args(c).max_image_tokens = 0;
          at<int32_t>(args(c).left_visible, 3) = -5, at<int32_t>(args(c).right_visible, 1) = kI32Min;
        },
        0, [](Case& c) { args(c).left_visible = TensorView{}, args(c).right_visible = TensorView{}; }));
    t.push_back(skip(C, "seq_len_shorter_than_query", i32(&CombineArgs::seq_lens, 1, 2), 1, nullptr, dead({2, 3, 4})));
    t.push_back(skip(C, "seq_len_negative", i32(&CombineArgs::seq_lens, 0, -1), 1, nullptr, dead({0, 1})));
    t.push_back(skip(C, "gather_len_above_seq_len", i32(&CombineArgs::gather_lens, 0, 7), 1, nullptr, dead({0, 1})));
    t.push_back(skip(C, "gather_len_negative", i32(&CombineArgs::gather_lens, 1, -1), 1, nullptr, dead({2, 3, 4})));
    // query_start_loc {10, 13, 12}: request 1's range is reversed (malformed, counted once); tokens 0-2
    // belong to request 0, tokens 3 and 4 to no request.
    t.push_back(skip(
        C, "query_start_loc_not_monotonic",
        [](Case& c) { at<int32_t>(args(c).query_start_loc, 1) = 13, at<int32_t>(args(c).query_start_loc, 2) = 12; }, 1,
        nullptr, dead({3, 4})));
    t.push_back(skip(C, "query_start_loc_first_above_second", i32(&CombineArgs::query_start_loc, 1, 9), 1));
    t.push_back(
        skip(C, "tokens_outside_every_request", i32(&CombineArgs::query_start_loc, 2, 13), 0, nullptr, dead({3, 4})));
    t.push_back(skip(
        C, "query_start_loc_int32_min_base",
        [](Case& c) {
          at<int32_t>(args(c).query_start_loc, 0) = kI32Min;
          at<int32_t>(args(c).query_start_loc, 1) = kI32Min + 2;
          at<int32_t>(args(c).query_start_loc, 2) = kI32Min + 5;
        },
        0, nullptr, [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
    // Request 1's entries M*1 + v overflow int32 for v >= 1 (v = 0 gives exactly INT32_MAX):
    // top-k columns 3, 15 | 19, 4 | 8, 11 and all 12 SWA columns.
    t.push_back(skip(
        C, "M_times_request_overflows", [](Case& c) { args(c).M = kI32Max; }, 18, nullptr,
        [](const Case& a, const Case& b) {
          for (int64_t tok = 2; tok < 5; ++tok)
            for (int64_t j = 0; j < args(a).combined_indices.shape[1]; ++j) {
              const int32_t base = at<int32_t>(args(b).combined_indices, tok, j);
              const int32_t want = base < 0 ? -1 : base == 100 ? kI32Max : -1;
              EXPECT_EQ(at<int32_t>(args(a).combined_indices, tok, j), want) << "row " << tok << " column " << j;
            }
        }));
    t.push_back(skip(
        C, "no_requests", [](Case& c) { args(c).seq_lens.shape[0] = 0, args(c).query_start_loc.shape[0] = 1; }, 0,
        nullptr, dead({0, 1, 2, 3, 4})));
    t.push_back(skip(
        C, "no_counter_malformed_request",
        [](Case& c) { c.count_errors = false, at<int32_t>(args(c).gather_lens, 1) = 10; }, 0, nullptr,
        dead({2, 3, 4})));

    // R + 1 overflows int64: the extent rule refuses the view (not "must have -9223372036854775808 entries").
    t.push_back(contract(C, "seq_lens_int64_max_entries", [](Case& c) { args(c).seq_lens.shape[0] = kI64Max; },
                         {"seq_lens spans more bytes than int64 can count"}));
    // Row lengths are int32: a row wider than INT32_MAX could not report its length.
    t.push_back(contract(C, "row_width_beyond_int32",
                         [](Case& c) {
                           args(c).topk = kI32Max;
                           args(c).topk_indices.shape[1] = kI32Max;
                         },
                         {"combined_indices row width round_up(topk + window_size + max_image_tokens, 128) = "
                          "2147483776 must fit in int32 (row lengths are int32)"}));
  }
};

}  // namespace bad_inputs

}  // namespace dsv4kv::conformance
