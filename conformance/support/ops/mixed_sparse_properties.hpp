/// \file mixed_sparse_properties.hpp
/// \brief RapidCheck generator and properties of build_flashinfer_mixed_sparse_indices, and its registration.
#pragma once

#include "property_common.hpp"
#include "mixed_sparse.hpp"

namespace dsv4kv::conformance {

/// A random build_flashinfer_mixed_sparse_indices case. `visibility`: nullopt = random.
inline rc::Gen<MixedSparseTester> gen_mixed(Validity v, std::optional<bool> visibility = std::nullopt) {
  return rc::gen::exec([=] {
    const int64_t topk = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 130, 512});
    const int64_t sbs = *gen_block_size(), cbs = *gen_block_size();
    const auto span = [](int64_t bs) {
      return *rc::gen::elementOf(std::vector<int64_t>{0, 0, bs, 2 * bs, bs + 3});
    };
    MixedSparseTester t;
    t.decode_requests(*rc::gen::inRange<int64_t>(0, 5))
        .prefill_requests(*rc::gen::inRange<int64_t>(0, 4))
        .max_query(*rc::gen::inRange<int64_t>(1, 21))
        .max_context(*rc::gen::inRange<int64_t>(0, 61))
        .window(*rc::gen::elementOf(std::vector<int64_t>{1, 2, 7, 16, 64, 128}))
        .swa_width_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .compress_ratio(*rc::gen::elementOf(std::vector<int64_t>{1, 4, 128}))
        .topk(topk)
        .prefill_cols(*rc::gen::elementOf(std::vector<int64_t>{topk, topk, topk + 5, std::max<int64_t>(topk - 3, 0), 0}))
        .decode_topk(*rc::gen::elementOf(std::vector<int64_t>{-1, -1, 0, 1, 5, topk, topk + 3}))
        .decode_lens(*rc::gen::arbitrary<bool>())
        .local(*rc::gen::arbitrary<bool>())
        .block_sizes(sbs, cbs)
        .spans(span(sbs), span(cbs))
        .separate_compressed_table(*rc::gen::arbitrary<bool>())
        .max_image_tokens(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 6, 16, 200}))
        .visibility(visibility ? *visibility : *rc::gen::arbitrary<bool>())
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

namespace props {

/// Row width = swa_width + image_width + round_up(max(topk, decode_topk), 4) (other
/// widths are rejected); the compressed region's padding columns are -1 in every
/// row, as are the image columns of decode rows; negative (sentinel) decode and
/// prefill indices stay -1; a row of length 0 is all -1.
inline void mixed_rows_well_formed(Backend& be, Validity v) {
  MixedSparseTester m = *gen_mixed(v);
  m.Run(be);
  const int64_t SW = m.swa_width(), ST = SW + m.image_width(), W = m.width();
  const int64_t kmax = std::max(m.topk(), m.dct());
  const int64_t P4 = W - ST;
  RC_ASSERT(P4 % 4 == 0 && P4 >= kmax && P4 < kmax + 4);
  for (int64_t t = 0; t < m.rows(); ++t) {
    for (int64_t c = ST + kmax; c < W; ++c) RC_ASSERT(m.out(t, c) == -1);  // alignment padding
    // A malformed row has length 0 and is all -1. A decode row's length can also be 0 because the
    // caller's decode_compressed_topk_lens say so; its entries are then still the caller's indices.
    const bool caller_len = t < m.decode_tokens() && m.has_decode_lens();
    if (m.len(t) == 0 && !caller_len)
      for (int64_t c = 0; c < W; ++c) RC_ASSERT(m.out(t, c) == -1);
    if (t < m.decode_tokens()) {
      for (int64_t c = SW; c < ST; ++c) RC_ASSERT(m.out(t, c) == -1);  // no image columns for decode
      for (int64_t c = 0; c < SW; ++c)
        if (m.decode_swa(t, c) < 0) RC_ASSERT(m.out(t, c) == -1);
      for (int64_t c = 0; c < m.dct(); ++c)
        if (m.decode_comp(t, c) < 0) RC_ASSERT(m.out(t, ST + c) == -1);
    } else {
      const int64_t p = t - m.decode_tokens();
      for (int64_t c = 0; c < std::min(m.prefill_cols(), kmax); ++c)
        if (m.prefill_topk_in(p, c) < 0) RC_ASSERT(m.out(t, ST + c) == -1);
      for (int64_t c = std::min(m.prefill_cols(), kmax); c < kmax; ++c) RC_ASSERT(m.out(t, ST + c) == -1);
      RC_ASSERT(m.len(t) == 0 || (m.len(t) >= ST && m.len(t) <= ST + m.topk()));
    }
  }
  const int64_t wrong = W + *rc::gen::elementOf(std::vector<int64_t>{-1, 1, 4});
  bool threw = false;
  try {
    MixedSparseTester copy = m;
    copy.RunWithWidth(be, wrong);
  } catch (const dsv4kv::Error&) {
    threw = true;
  }
  RC_ASSERT(threw);
  require_empty(check_all_guards(m.buffers()));
}

/// Prefill visibility arrays of zeros equal no arrays apart from the image
/// columns: removing columns [swa_width, swa_width + max_image_tokens) gives the
/// plain rows, those columns are -1, and every non-empty row is max_image_tokens longer.
inline void mixed_zero_visibility_is_plain_window(Backend& be) {
  MixedSparseTester zero = *gen_mixed(Validity::kValid, /*visibility=*/true);
  zero.zero_visibility(true);
  MixedSparseTester none = zero;
  none.visibility(false);
  zero.Run(be);
  none.Run(be);
  const int64_t SW = zero.swa_width(), IMG = zero.max_image_tokens();
  RC_ASSERT(zero.width() == none.width() + IMG);
  for (int64_t t = 0; t < zero.rows(); ++t) {
    for (int64_t c = 0; c < zero.width(); ++c) {
      const int32_t got = zero.out(t, c);
      const int32_t want = c < SW ? none.out(t, c) : (c < SW + IMG ? -1 : none.out(t, c - IMG));
      if (got != want) {
        std::ostringstream msg;
        msg << "row " << t << " column " << c << ": " << got << " with zero visibility, " << want << " without";
        RC_FAIL(msg.str());
      }
    }
    RC_ASSERT(zero.len(t) == (none.len(t) == 0 ? 0 : none.len(t) + IMG));
  }
  RC_ASSERT(zero.error_count() == none.error_count());
}

/// Prefill visibility arrays passed with max_image_tokens == 0 are not read: no image columns, and
/// rows and error count equal those of the same case without the arrays.
inline void mixed_visibility_ignored_without_image_columns(Backend& be) {
  MixedSparseTester with = *gen_mixed(*rc::gen::element(Validity::kValid, Validity::kInvalid), /*visibility=*/true);
  with.max_image_tokens(0);
  MixedSparseTester without = with;
  without.visibility(false);
  with.Run(be);
  without.Run(be);
  RC_ASSERT(with.width() == without.width());
  require_empty(first_mismatch(without.out_buffer().bytes(), with.out_buffer().bytes(), "sparse_indices"));
  require_empty(first_mismatch(without.lens_buffer().bytes(), with.lens_buffer().bytes(), "sparse_topk_lens"));
  RC_ASSERT(with.error_count() == without.error_count());
}

}  // namespace props

/// The MixedSparse suite: its differential case and its properties (registered once for every backend).
template <>
struct OpSuite<MixedSparseArgs> {
  static constexpr const char* kPrefix = "MixedSparse";
  static rc::Gen<MixedSparseTester> differential_case(Validity v) { return gen_mixed(v); }
  /// Deliberate bugs applied after the reference's call, each with the property that must catch it
  /// (PropertySelfTest: a property that cannot fail proves nothing).
  static std::vector<SeededBug<MixedSparseArgs>> seeded_bugs() {
    return {
      // The last (alignment padding) column holds 0 instead of -1.
      {"MixedRowsWellFormed",
       [](const MixedSparseArgs& a) {
         const TensorView& o = a.sparse_indices;
         for (int64_t t = 0; t < o.shape[0]; ++t) o.as<int32_t>()[t * o.stride[0] + o.shape[1] - 1] = 0;
       }},
    };
  }
  /// Large cases for the CUDA smoke test (CudaSmoke.LargeMixedSparse).
  static std::vector<MixedSparseTester> large_cases() {
    std::vector<MixedSparseTester> v;
    for (int64_t pad : {0, 2})
      v.push_back(MixedSparseTester()
          .decode_requests(40)
          .prefill_requests(4)
          .max_query(200)
          .max_context(2000)
          .window(128)
          .swa_width_pad(pad)
          .topk(512)
          .seed(static_cast<uint64_t>(pad + 1)));
    return v;
  }
  /// The worked example of build_flashinfer_mixed_sparse_indices (spec/operations.md, mixed example), run through the reference
  /// (SpecExamples.<kPrefix>, spec_examples_test.cpp); GoogleTest assertions.
  static void spec_example() {
    namespace S = spec;
    std::vector<int32_t> dswa = {40, 41, -1, 43}, ptopk = {1, 4}, qsl = {0, 1, 2}, seq = {1, 6}, t2r = {0, 1};
    std::vector<int32_t> bt = {0, 0, 3, 8}, out(2 * 8), lens(2);
    int32_t errors = 0;
    dsv4kv::MixedSparseArgs a;
    a.decode_swa_indices = TensorView::mat(dswa.data(), DType::kI32, 1, 4);
    a.prefill_topk_indices = TensorView::mat(ptopk.data(), DType::kI32, 1, 2);
    a.query_start_loc = TensorView::vec(qsl.data(), DType::kI32, 3);
    a.seq_lens = TensorView::vec(seq.data(), DType::kI32, 2);
    a.token_to_req = TensorView::vec(t2r.data(), DType::kI32, 2);
    a.swa_block_table = TensorView::mat(bt.data(), DType::kI32, 2, 2);
    a.swa_block_size = 4;
    a.compressed_block_size = 4;
    a.swa_block_span = 6;
    a.compressed_block_span = 6;
    a.window_size = 4;
    a.compress_ratio = 1;
    a.topk = 2;
    a.sparse_indices = TensorView::mat(out.data(), DType::kI32, 2, 8);
    a.sparse_topk_lens = TensorView::vec(lens.data(), DType::kI32, 2);
    a.error_count = &errors;
    dsv4kv::reference::build_flashinfer_mixed_sparse_indices(a);
    EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 8), (std::vector<int32_t>{60, 61, -1, 63, -1, -1, -1, -1}));
    EXPECT_EQ(std::vector<int32_t>(out.begin() + 8, out.end()), (std::vector<int32_t>{20, 21, 48, 49, 19, 48, -1, -1}));
    EXPECT_EQ(lens, (std::vector<int32_t>{4, 6}));
    EXPECT_EQ(errors, 0);
    S::Faults f;
    EXPECT_EQ(S::remap_block_span(41, 4, 6, f), 61);
  }
  static std::vector<Property> properties() {
    return {
      {"MixedRowsWellFormed", [](Backend& be) { props::mixed_rows_well_formed(be, Validity::kValid); }},
      {"MixedInvalidRowsWellFormed", [](Backend& be) { props::mixed_rows_well_formed(be, Validity::kInvalid); }},
      {"MixedZeroVisibilityIsPlainWindow", [](Backend& be) { props::mixed_zero_visibility_is_plain_window(be); }},
      {"MixedVisibilityIgnoredWithoutImageColumns", [](Backend& be) { props::mixed_visibility_ignored_without_image_columns(be); }},
    };
  }
};
}  // namespace dsv4kv::conformance
