/// \file mixed_properties.hpp
/// \brief RapidCheck generator and properties of build_flashinfer_mixed_sparse_indices, and its registration.
#pragma once

#include "bad_inputs.hpp"
#include "property_common.hpp"
#include "mixed.hpp"

namespace dsv4kv::conformance {

/// A random build_flashinfer_mixed_sparse_indices case. `visibility`: nullopt = random (a case with visibility arrays
/// never draws vllm_v41, whose model has no image windows). `semantics`: nullopt = drawn.
inline rc::Gen<MixedSparseTester> gen_mixed(Validity v, std::optional<bool> visibility = std::nullopt,
                                            std::optional<Semantics> semantics = std::nullopt) {
  return rc::gen::exec([=] {
    Semantics sem = semantics ? *semantics : *gen_semantics();
    if (visibility == true && !spec::has_image_windows(sem)) sem = Semantics::kSeed;
    const bool images = spec::has_image_windows(sem);
    const std::vector<int64_t> ratios =
        spec::allows_compress_ratio_zero(sem) ? std::vector<int64_t>{0, 1, 4, 128} : std::vector<int64_t>{1, 4, 128};
    const int64_t topk = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 130, 512});
    const int64_t sbs = *gen_block_size(), cbs = *gen_block_size();
    const auto span = [](int64_t bs) { return *rc::gen::elementOf(std::vector<int64_t>{0, 0, bs, 2 * bs, bs + 3}); };
    MixedSparseTester t;
    t.decode_requests(*rc::gen::inRange<int64_t>(0, 5))
        .decode_query(*rc::gen::elementOf(std::vector<int64_t>{1, 1, 2, 5}))
        .dspark_rows(*rc::gen::arbitrary<bool>())
        .prefill_requests(*rc::gen::inRange<int64_t>(0, 4))
        .max_query(*rc::gen::inRange<int64_t>(1, 21))
        .max_context(*rc::gen::inRange<int64_t>(0, 61))
        .window(*rc::gen::elementOf(std::vector<int64_t>{1, 2, 7, 16, 64, 128}))
        .swa_width_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 3, 8}))
        .compress_ratio(*rc::gen::elementOf(ratios))
        .topk(topk)
        .prefill_cols(
            *rc::gen::elementOf(std::vector<int64_t>{topk, topk, topk + 5, std::max<int64_t>(topk - 3, 0), 0}))
        .decode_topk(*rc::gen::elementOf(std::vector<int64_t>{-1, -1, 0, 1, 5, topk, topk + 3}))
        .decode_lens(*rc::gen::arbitrary<bool>())
        .local(*rc::gen::arbitrary<bool>())
        .block_sizes(sbs, cbs)
        .spans(span(sbs), span(cbs))
        .separate_compressed_table(*rc::gen::arbitrary<bool>())
        .max_image_tokens(images ? *rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 6, 16, 200}) : 0)
        .visibility(images && (visibility ? *visibility : *rc::gen::arbitrary<bool>()))
        .semantics(sem)
        .replay(*rc::gen::elementOf(std::vector<int>{0, 1, 1}))
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
  // DSpark decode rows move their compressed region (mixed_profiles_derive_from_the_seed checks them).
  const bool dspark = spec::dspark_decode_rows(m.semantics()) && SW > m.window();
  for (int64_t t = 0; t < m.rows(); ++t) {
    for (int64_t c = ST + kmax; c < W; ++c) RC_ASSERT(m.out(t, c) == -1);  // alignment padding
    if (dspark && t < m.decode_tokens()) continue;
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
  } catch (const dsv4kv::Error&) { threw = true; }
  RC_ASSERT(threw);
  require_empty(check_all_guards(m.buffers()));
}

/// The upstream profiles against the seed on the same valid case (no images):
/// - vllm_v4, DSpark decode rows (swa_width > window): spec::dspark_row of the row's non-negative SWA entries and the
///   draft tokens after it; column j < window + spill shows the seed row's column dspark_swa_source(j) (-1 in the
///   gap), the seed's compressed columns follow at window + spill, -1 after them; the length is the seed's with
///   window + spill SWA columns instead of swa_width. Prefill rows are the seed's.
/// - vllm_v41: decode rows are the seed's; a prefill row's window starts at max(its start, replay_start[req]): its
///   SWA columns are the seed's shifted left by the difference, -1 after the shortened window; compressed columns
///   and lengths are the seed's.
/// Fewer lookups can only mean fewer reports: the profile's count is at most the seed's.
inline void mixed_profiles_derive_from_the_seed(Backend& be) {
  const Semantics sem = *rc::gen::element(Semantics::kVllmV4, Semantics::kVllmV41);
  MixedSparseTester up = *gen_mixed(Validity::kValid, /*visibility=*/false, sem);
  if (up.compress_ratio_value() == 0) up.compress_ratio(4);  // the seed has no compress_ratio 0
  MixedSparseTester seed = up;
  seed.semantics(Semantics::kSeed);
  up.Run(be);
  seed.Run(be);
  const int64_t SW = up.swa_width(), ST = SW + up.image_width(), Wd = up.width(), W = up.window();
  const int64_t P4 = Wd - ST;
  const bool dspark = sem == Semantics::kVllmV4 && SW > W;
  for (int64_t t = 0; t < up.rows(); ++t) {
    std::vector<int32_t> want(static_cast<size_t>(Wd));
    for (int64_t c = 0; c < Wd; ++c) want[c] = seed.out(t, c);
    int64_t want_len = seed.len(t);
    if (dspark && t < up.decode_tokens()) {
      int64_t entries = 0;
      for (int64_t c = 0; c < SW; ++c) entries += up.decode_swa(t, c) >= 0 ? 1 : 0;
      int64_t future = 0;
      const int64_t b = up.token_request(t);
      if (b >= 0 && b < up.requests() && t >= up.qsl(b) && t < up.qsl(b + 1)) future = up.qsl(b + 1) - 1 - t;
      const spec::DsparkRow dr = spec::dspark_row(entries, future, W, SW);
      std::fill(want.begin(), want.end(), -1);
      for (int64_t c = 0; c < W + dr.spill; ++c) {
        const int64_t src = c < dr.causal ? c : (c < W ? -1 : dr.causal + c - W);
        want[c] = src < 0 ? -1 : seed.out(t, src);
      }
      for (int64_t k = 0; k < P4; ++k) want[W + dr.spill + k] = seed.out(t, ST + k);
      want_len = seed.len(t) - SW + W + dr.spill;
    } else if (sem == Semantics::kVllmV41 && t >= up.decode_tokens() && seed.len(t) > 0) {
      const int64_t b = up.token_request(t);
      const int64_t q = up.qsl(b + 1) - up.qsl(b), pos = up.seq_len(b) - q + (t - up.qsl(b));
      const int64_t start = std::max<int64_t>(pos - (W - 1), 0), n = pos - start + 1;
      const int64_t shift = std::max<int64_t>(up.replay_start(b) - start, 0);
      for (int64_t c = 0; c < SW; ++c) want[c] = c < n - shift ? seed.out(t, c + shift) : -1;
    }
    for (int64_t c = 0; c < Wd; ++c)
      if (up.out(t, c) != want[c]) {
        std::ostringstream msg;
        msg << spec::semantics_name(sem) << " row " << t << " column " << c << ": " << up.out(t, c) << ", expected "
            << want[c] << " (seed row: " << seed.out(t, c) << ")";
        RC_FAIL(msg.str());
      }
    RC_ASSERT(int64_t{up.len(t)} == want_len);
  }
  RC_ASSERT(up.error_count() <= seed.error_count());
  require_empty(check_all_guards(up.buffers()));
}

/// Prefill visibility arrays of zeros equal no arrays apart from the image
/// columns: removing columns [swa_width, swa_width + max_image_tokens) gives the
/// plain rows, those columns are -1, and every non-empty row is max_image_tokens longer.
inline void mixed_zero_visibility_is_plain_window(Backend& be) {
  // The seed's profile: vllm_v41 has no images, and vllm_v4's DSpark decode rows do not widen by them.
  MixedSparseTester zero = *gen_mixed(Validity::kValid, /*visibility=*/true, Semantics::kSeed);
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
    // The lean launches (both block sizes 64, identity spans, aligned rows) with more rows than
    // the few-row cut-off (about 4,224 on an H200): the warp-per-row launch, local decode indices.
    v.push_back(MixedSparseTester()
                    .decode_requests(256)
                    .prefill_requests(8)
                    .max_query(2048)
                    .max_context(4000)
                    .window(128)
                    .topk(512)
                    .prefill_cols(512)
                    .local(true)
                    .block_sizes(64, 64)
                    .separate_compressed_table(true)
                    .seed(7));
    // The warp launch again, with what the case above lacks: prefill top-k rows of 509 columns
    // (rows not 16-byte aligned, the last cell one column short) or of 300 (fewer columns than
    // topk), image columns (16: swa_width + image_width stays a multiple of 4), local decode
    // indices and malformed rows.
    for (int64_t cols : {509, 300}) {
      const int64_t bs = cols == 509 ? 64 : 128;
      v.push_back(MixedSparseTester()
                      .decode_requests(128)
                      .prefill_requests(12)
                      .max_query(2048)
                      .max_context(4000)
                      .window(128)
                      .topk(512)
                      .prefill_cols(cols)
                      .decode_topk(512)
                      .local(true)
                      .block_sizes(bs, bs)
                      .max_image_tokens(16)
                      .visibility(true)
                      .invalid_fraction(0.02)
                      .count_errors(true)
                      .seed(static_cast<uint64_t>(cols)));
    }
    // The lean launch of rows wider than the warp launch takes (topk 2,048: 544 cells), one row
    // per 128-thread CTA, at block size 128 (the random draws stay below 320 cells).
    v.push_back(MixedSparseTester()
                    .decode_requests(16)
                    .prefill_requests(2)
                    .max_query(300)
                    .max_context(9000)
                    .window(128)
                    .topk(2048)
                    .prefill_cols(2048)
                    .local(true)
                    .block_sizes(128, 128)
                    .seed(8));
    // The profiles: V4.1's bounded replay, and DSpark decode rows (draft blocks of 4, rows 64 wider than the window).
    v.push_back(MixedSparseTester()
                    .decode_requests(32)
                    .prefill_requests(4)
                    .max_query(300)
                    .max_context(4000)
                    .window(128)
                    .topk(512)
                    .semantics(Semantics::kVllmV41)
                    .replay(1)
                    .seed(9));
    v.push_back(MixedSparseTester()
                    .decode_requests(64)
                    .decode_query(4)
                    .dspark_rows(true)
                    .prefill_requests(2)
                    .max_query(300)
                    .max_context(4000)
                    .window(128)
                    .swa_width_pad(64)
                    .topk(512)
                    .decode_topk(512)
                    .semantics(Semantics::kVllmV4)
                    .seed(10));
    return v;
  }
  /// The worked example of build_flashinfer_mixed_sparse_indices (spec/operations.md, mixed example), run through the
  /// reference (SpecExamples.<kPrefix>, spec_examples_test.cpp); GoogleTest assertions.
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
    EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 8),
              (std::vector<int32_t>{60, 61, -1, 63, -1, -1, -1, -1}));
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
        {"MixedProfilesDeriveFromTheSeed", [](Backend& be) { props::mixed_profiles_derive_from_the_seed(be); }},
        {"MixedVisibilityIgnoredWithoutImageColumns",
         [](Backend& be) { props::mixed_visibility_ignored_without_image_columns(be); }},
    };
  }
};
// ---------------------------------------------------------------------------
// Bad inputs (conformance/bad_inputs_test.cpp runs them; bad_inputs.hpp has the machinery)
// ---------------------------------------------------------------------------

namespace bad_inputs {

/// The bad-input rows of `MixedSparseArgs`: its valid base case, every way an argument can be wrong,
/// and what must happen (bad_inputs.hpp).
template <>
struct OpRows<MixedSparseArgs> {
  /// The prefix of the rows' test names.
  static constexpr const char* kPrefix = "mixed";
  static constexpr int64_t kWidth = 5 + 2 + 8;  // swa_width + image_width + round_up(max(topk 5, dct 3), 4)

  static MixedSparseArgs& args(Case& c) { return c.get<MixedSparseArgs>(); }
  static const MixedSparseArgs& args(const Case& c) { return c.get<MixedSparseArgs>(); }

  /// The valid base case (small, with strided views, row padding and a block-stride tail).
  static void base_case(Case& c) {
    // Decode tokens 0 (request 0) and 1 (request 1); prefill tokens 2-4 (request 2, positions 7-9).
    // decode_swa_indices, both block tables and the output have padded rows.
    MixedSparseTester tester;  // owns the buffers adopt() copies
    MixedSparseArgs a = tester.decode_requests(2)
                            .layout({0, 1, 2, 5}, {9, 7, 10})
                            .window(4)
                            .swa_width_pad(1)
                            .swa_row_pad(1)
                            .compress_ratio(2)
                            .topk(5)
                            .prefill_cols(6)
                            .decode_topk(3)
                            .decode_lens(true)
                            .local(true)
                            .block_sizes(4, 2)
                            .spans(6, 0)
                            .separate_compressed_table(true)
                            .tables(4, 1, 3, 1)
                            .max_image_tokens(2)
                            .visibility(true)
                            .out_row_pad(1)
                            .seed(55)
                            .args();
    // One entry per decode token / per token (the tester may add one more).
    a.decode_compressed_topk_lens.shape[0] = a.decode_is_valid_token.shape[0] = 2;
    a.token_to_req.shape[0] = a.prefill_left_visible.shape[0] = a.prefill_right_visible.shape[0] = 5;
    c.adopt(a);
    MixedSparseArgs& x = args(c);
    const int32_t sw[2][5] = {{0, 5, -1, 13, 22}, {7, -1, 30, 2, 9}};
    const int32_t cm[2][3] = {{1, -1, 4}, {0, 5, 3}};
    for (int t = 0; t < 2; ++t) {
      for (int j = 0; j < 5; ++j) at<int32_t>(x.decode_swa_indices, t, j) = sw[t][j];
      for (int j = 0; j < 3; ++j) at<int32_t>(x.decode_compressed_indices, t, j) = cm[t][j];
      at<uint8_t>(x.decode_is_valid_token, t) = 1;
    }
    at<int32_t>(x.decode_compressed_topk_lens, 0) = 2, at<int32_t>(x.decode_compressed_topk_lens, 1) = 3;
    const int32_t ptk[3][6] = {{0, 3, -1, 5, 2, 1}, {4, 1, 2, -1, 0, 3}, {5, 0, 1, 2, 3, 4}};
    for (int t = 0; t < 3; ++t)
      for (int j = 0; j < 6; ++j) at<int32_t>(x.prefill_topk_indices, t, j) = ptk[t][j];
    const int32_t req[5] = {0, 1, 2, 2, 2}, left[5] = {0, 0, 1, 5, 0}, right[5] = {0, 0, 0, 1, 0};
    for (int t = 0; t < 5; ++t) {
      at<int32_t>(x.token_to_req, t) = req[t];
      at<int32_t>(x.prefill_left_visible, t) = left[t], at<int32_t>(x.prefill_right_visible, t) = right[t];
    }
    // Block tables, their padding columns included (never read).
    const int32_t st[3][5] = {{3, 8, 1, 6, 0}, {2, 5, 0, 7, 0}, {4, 9, 2, 11, 0}};
    const int32_t ct[3][4] = {{5, 1, 3, 0}, {0, 2, 4, 0}, {6, 7, 8, 0}};
    for (int b = 0; b < 3; ++b) {
      for (int j = 0; j < 5; ++j) static_cast<int32_t*>(x.swa_block_table.data)[b * 5 + j] = st[b][j];
      for (int j = 0; j < 4; ++j) static_cast<int32_t*>(x.compressed_block_table.data)[b * 4 + j] = ct[b][j];
    }
  }

  static void rows(std::vector<Row>& t) {
    const Op X = op_index<MixedSparseArgs>;
    t.push_back(contract(X, "window_0", [](Case& c) { args(c).window_size = 0; }, {"window_size must be >= 1, got 0"}));
    t.push_back(contract(X, "compress_ratio_0", [](Case& c) { args(c).compress_ratio = 0; },
                         {"compress_ratio must be >= 1, got 0"}));
    // The semantics profiles: vllm_v41 has no image windows and requires replay_start; the others refuse it.
    const auto v41_without_images = [](Case& c) {
      args(c).semantics = Semantics::kVllmV41;
      args(c).max_image_tokens = 0;
      args(c).prefill_left_visible = args(c).prefill_right_visible = TensorView{};
    };
    t.push_back(contract(X, "semantics_unknown", [](Case& c) { args(c).semantics = static_cast<Semantics>(9); },
                         {"semantics must be seed, vllm_v4 or vllm_v41, got the value 9"}));
    t.push_back(contract(X, "replay_start_with_seed", [](Case& c) { args(c).replay_start = args(c).seq_lens; },
                         {"replay_start is taken only with semantics vllm_v41, got semantics seed"}));
    t.push_back(contract(X, "replay_start_missing_v41", v41_without_images,
                         {"replay_start is required with semantics vllm_v41"}));
    t.push_back(contract(X, "replay_start_short_v41",
                         [=](Case& c) {
                           v41_without_images(c);
                           args(c).replay_start = args(c).seq_lens;
                           args(c).replay_start.shape[0] = 2;
                         },
                         {"replay_start must have at least 3 entries (one per request), got 2"}));
    t.push_back(
        contract(X, "image_tokens_v41", [](Case& c) { args(c).semantics = Semantics::kVllmV41; },
                 {"max_image_tokens must be 0 with semantics vllm_v41 (that model has no image windows), got 2"}));
    t.push_back(contract(X, "visibility_v41",
                         [](Case& c) {
                           args(c).semantics = Semantics::kVllmV41;
                           args(c).max_image_tokens = 0;
                         },
                         {"prefill_left_visible and prefill_right_visible must be None with semantics vllm_v41"}));
    t.push_back(contract(X, "topk_negative", [](Case& c) { args(c).topk = -1; }, {"topk must be >= 0, got -1"}));
    t.push_back(contract(X, "max_image_tokens_negative", [](Case& c) { args(c).max_image_tokens = -2; },
                         {"max_image_tokens must be >= 0, got -2"}));
    t.push_back(contract(X, "swa_block_size_0", [](Case& c) { args(c).swa_block_size = 0; },
                         {"swa_block_size must be >= 1, got 0"}));
    t.push_back(contract(X, "compressed_block_size_negative", [](Case& c) { args(c).compressed_block_size = -1; },
                         {"compressed_block_size must be >= 1, got -1"}));
    t.push_back(contract(X, "swa_block_span_0", [](Case& c) { args(c).swa_block_span = 0; },
                         {"swa_block_span must be >= 1, got 0"}));
    t.push_back(contract(X, "compressed_block_span_negative", [](Case& c) { args(c).compressed_block_span = -1; },
                         {"compressed_block_span must be >= 1, got -1"}));
    t.push_back(contract(X, "swa_block_span_beyond_int32", [](Case& c) { args(c).swa_block_span = int64_t{1} << 40; },
                         {"swa_block_span must fit in int32"}));
    t.push_back(contract(X, "max_image_tokens_int64_max", [](Case& c) { args(c).max_image_tokens = kI64Max; },
                         {"max_image_tokens must fit in int32"}));
    t.push_back(contract(X, "decode_swa_narrower_than_window", [](Case& c) { args(c).window_size = 6; },
                         {"decode_swa_indices must have at least window_size = 6 columns, got 5"}));
    t.push_back(contract(X, "decode_compressed_rows", [](Case& c) { args(c).decode_compressed_indices.shape[0] = 1; },
                         {"decode_compressed_indices must have 2 rows (one per decode token), got 1"}));
    t.push_back(contract(X, "decode_lens_short", [](Case& c) { args(c).decode_compressed_topk_lens.shape[0] = 1; },
                         {"decode_compressed_topk_lens must have at least 2 entries (one per decode token), got 1"}));
    t.push_back(contract(X, "query_start_loc_short", [](Case& c) { args(c).query_start_loc.shape[0] = 3; },
                         {"query_start_loc must have 4 entries (num_reqs + 1), got 3"}));
    t.push_back(contract(X, "token_to_req_short", [](Case& c) { args(c).token_to_req.shape[0] = 4; },
                         {"token_to_req_indices must have at least 5 entries (decode + prefill tokens), got 4"}));
    t.push_back(contract(X, "decode_is_valid_token_missing",
                         [](Case& c) { args(c).decode_is_valid_token = TensorView{}; },
                         {"decode_is_valid_token is required when decode_compressed_indices_are_local is true"}));
    t.push_back(contract(X, "decode_is_valid_token_int32",
                         [](Case& c) { args(c).decode_is_valid_token.dtype = DType::kI32; },
                         {"decode_is_valid_token must be bool, got int32"}));
    t.push_back(contract(X, "only_prefill_left_visible", [](Case& c) { args(c).prefill_right_visible = TensorView{}; },
                         {"prefill_left_visible and prefill_right_visible must be given together"}));
    t.push_back(contract(X, "prefill_right_visible_short", [](Case& c) { args(c).prefill_right_visible.shape[0] = 4; },
                         {"prefill_right_visible must have at least 5 entries (decode + prefill tokens), got 4"}));
    t.push_back(contract(X, "output_width", [](Case& c) { args(c).sparse_indices.shape[1] = kWidth + 1; },
                         {"sparse_indices must have swa_width + image_width + round_up(max(topk, decode_topk), 4) = 15 "
                          "columns, got 16"}));
    t.push_back(contract(
        X, "output_width_without_visibility",
        [](Case& c) { args(c).prefill_left_visible = TensorView{}, args(c).prefill_right_visible = TensorView{}; },
        {"= 13 columns, got 15"}));
    t.push_back(contract(X, "output_rows", [](Case& c) { args(c).sparse_indices.shape[0] = 4; },
                         {"sparse_indices must have 5 rows (decode + prefill tokens), got 4"}));
    t.push_back(contract(X, "lens_long", [](Case& c) { args(c).sparse_topk_lens.shape[0] = 6; },
                         {"sparse_topk_lens must have 5 entries, got 6"}));
    t.push_back(contract(X, "swa_block_table_int64", [](Case& c) { args(c).swa_block_table.dtype = DType::kI64; },
                         {"swa_block_table must be int32, got int64"}));
    t.push_back(contract(X, "compressed_block_table_rank1", [](Case& c) { rank(args(c).compressed_block_table, 1); },
                         {"compressed_block_table must have rank 2, got 1"}));
    t.push_back(contract(X, "prefill_topk_inner_stride", [](Case& c) { args(c).prefill_topk_indices.stride[1] = 2; },
                         {"prefill_topk_indices must have unit stride in its last dimension, got 2"}));
    t.push_back(contract(X, "prefill_topk_missing", [](Case& c) { args(c).prefill_topk_indices = TensorView{}; },
                         {"prefill_topk_indices is required"}));
    t.push_back(contract(X, "output_misaligned", [](Case& c) { misalign(args(c).sparse_indices, 1); },
                         {"sparse_indices must be aligned to 4 bytes"}));

    auto i32 = [](TensorView MixedSparseArgs::*f, int i, int32_t v) {
      return [=](Case& c) { at<int32_t>(args(c).*f, i) = v; };
    };
    auto i32_2 = [](TensorView MixedSparseArgs::*f, int i, int j, int32_t v) {
      return [=](Case& c) { at<int32_t>(args(c).*f, i, j) = v; };
    };
    auto dead = [](std::vector<int64_t> rows) {
      return [=](const Case& a, const Case&) {
        for (int64_t r : rows) expect_dead_row(a, r);
      };
    };
    auto others_base = [](std::vector<int64_t> rows) {
      return [=](const Case& a, const Case& b) {
        for (int64_t r = 0; r < 5; ++r)
          if (std::find(rows.begin(), rows.end(), r) == rows.end()) expect_base_row(a, b, r);
      };
    };
    // Decode row 0's compressed columns start at swa_width + image_width = 7.
    t.push_back(skip(X, "decode_token_to_req_num_reqs", i32(&MixedSparseArgs::token_to_req, 0, 7), 2, nullptr,
                     [](const Case& a, const Case& b) {
                       expect_base_except(a, b, {{0, 7, -1}, {0, 9, -1}}, {{0, 7}});
                     }));
    t.push_back(skip(X, "decode_token_to_req_minus1", i32(&MixedSparseArgs::token_to_req, 0, -1), 2, nullptr,
                     [](const Case& a, const Case& b) {
                       expect_base_except(a, b, {{0, 7, -1}, {0, 9, -1}}, {{0, 7}});
                     }));
    t.push_back(skip(X, "decode_local_index_beyond_table", i32_2(&MixedSparseArgs::decode_compressed_indices, 1, 0, 6),
                     1, nullptr, [](const Case& a, const Case& b) {
                       expect_base_except(a, b, {{1, 7, -1}}, {{1, at<int32_t>(args(b).sparse_topk_lens, 1) - 1}});
                     }));
    t.push_back(skip(X, "decode_table_entry_negative", i32_2(&MixedSparseArgs::compressed_block_table, 0, 0, -1), 1,
                     nullptr, [](const Case& a, const Case& b) {
                       expect_base_except(a, b, {{0, 7, -1}}, {{0, at<int32_t>(args(b).sparse_topk_lens, 0) - 1}});
                     }));
    t.push_back(skip(
        X, "decode_swa_negative_sentinels_not_counted",
        [](Case& c) {
          at<int32_t>(args(c).decode_swa_indices, 0, 0) = -2, at<int32_t>(args(c).decode_swa_indices, 1, 4) = kI32Min;
        },
        0, nullptr,
        [](const Case& a, const Case& b) {
          expect_base_except(a, b, {{0, 0, -1}, {1, 4, -1}});
        }));
    t.push_back(skip(
        X, "decode_invalid_token", [](Case& c) { at<uint8_t>(args(c).decode_is_valid_token, 0) = 0; }, 0, nullptr,
        [](const Case& a, const Case& b) {
          expect_base_except(a, b, {}, {{0, 7}});
        }));
    t.push_back(skip(
        X, "decode_visibility_not_read",
        [](Case& c) {
          at<int32_t>(args(c).prefill_left_visible, 0) = -1, at<int32_t>(args(c).prefill_right_visible, 1) = kI32Min;
        },
        0, nullptr, [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
    t.push_back(
        skip(X, "prefill_token_to_req_num_reqs", i32(&MixedSparseArgs::token_to_req, 3, 3), 1, nullptr, dead({3})));
    t.push_back(skip(X, "prefill_token_to_req_wrong_request", i32(&MixedSparseArgs::token_to_req, 3, 0), 1, nullptr,
                     [](const Case& a, const Case& b) {
                       expect_dead_row(a, 3);
                       for (int64_t r : {0, 1, 2, 4}) expect_base_row(a, b, r);
                     }));
    t.push_back(skip(X, "prefill_token_to_req_int32_min", i32(&MixedSparseArgs::token_to_req, 4, kI32Min), 1, nullptr,
                     dead({4})));
    t.push_back(skip(X, "prefill_seq_len_shorter_than_query", i32(&MixedSparseArgs::seq_lens, 2, 2), 3, nullptr,
                     dead({2, 3, 4})));
    t.push_back(
        skip(X, "prefill_seq_len_negative", i32(&MixedSparseArgs::seq_lens, 2, -1), 3, nullptr, dead({2, 3, 4})));
    t.push_back(skip(X, "prefill_token_outside_query_range", i32(&MixedSparseArgs::query_start_loc, 3, 4), 1, nullptr,
                     dead({4})));
    t.push_back(skip(X, "query_start_loc_not_monotonic", i32(&MixedSparseArgs::query_start_loc, 2, 6), 3, nullptr,
                     [](const Case& a, const Case& b) {
                       for (int64_t r : {2, 3, 4}) expect_dead_row(a, r);
                       for (int64_t r : {0, 1}) expect_base_row(a, b, r);
                     }));
    t.push_back(skip(X, "prefill_left_visible_negative", i32(&MixedSparseArgs::prefill_left_visible, 2, -1), 1,
                     i32(&MixedSparseArgs::prefill_left_visible, 2, 0)));
    t.push_back(skip(X, "prefill_right_visible_int32_min", i32(&MixedSparseArgs::prefill_right_visible, 4, kI32Min), 1,
                     i32(&MixedSparseArgs::prefill_right_visible, 4, 0)));
    t.push_back(skip(X, "prefill_local_index_beyond_table", i32_2(&MixedSparseArgs::prefill_topk_indices, 0, 0, 6), 1,
                     nullptr, others_base({2})));
    t.push_back(skip(X, "prefill_topk_beyond_topk_len_not_read",
                     i32_2(&MixedSparseArgs::prefill_topk_indices, 0, 5, kI32Max), 0, nullptr,
                     [](const Case& a, const Case& b) { expect_base_except(a, b, {}); }));
    // Positions 4..7 of request 2 lie in its SWA block-table column 1: 4 + 4 + 2 window lookups.
    t.push_back(skip(X, "prefill_swa_table_entry_negative", i32_2(&MixedSparseArgs::swa_block_table, 2, 1, -1), 10,
                     nullptr, others_base({2, 3, 4})));
    // Span 2^30: a remapped index (v / 4) * 2^30 + v % 4 overflows int32 once v / 4 >= 2: decode SWA
    // values 13, 22, 30, 9 and every prefill SWA entry (request 2's SWA blocks are all >= 2).
    t.push_back(skip(
        X, "swa_block_span_overflows_int32", [](Case& c) { args(c).swa_block_span = int64_t{1} << 30; }, 19));
    t.push_back(skip(
        X, "no_counter_bad_prefill_request",
        [](Case& c) { c.count_errors = false, at<int32_t>(args(c).token_to_req, 2) = 9; }, 0, nullptr, dead({2})));

    // Empty decode tensors of width ~2^63 whose row width wraps to 13 mod 2^64: a 13-column output
    // must be refused, or the prefill rows would write 2^63 columns past it.
    t.push_back(contract(X, "row_width_wraps_int64",
                         [](Case& c) {
                           MixedSparseArgs& x = args(c);
                           x.decode_swa_indices.shape = {0, kI64Max, 0};
                           x.decode_compressed_indices.shape = {0, kI64Max - 3, 0};
                           x.max_image_tokens = 18;  // kI64Max + 18 + (kI64Max - 3) = 13 mod 2^64
                           x.sparse_indices.shape = {3, 13, 0};
                           x.sparse_topk_lens.shape[0] = 3;
                         },
                         {"sparse_indices row width swa_width + image_width + round_up(max(topk, decode_topk), 4) "
                          "(swa_width = 9223372036854775807, decode_topk = 9223372036854775804) overflows int64"}));
    t.push_back(contract(X, "row_width_beyond_int32",
                         [](Case& c) {
                           args(c).decode_swa_indices.shape = {0, int64_t{1} << 31, 0};
                           args(c).decode_compressed_indices.shape[0] = 0;
                         },
                         {"sparse_indices row width swa_width + image_width + round_up(max(topk, decode_topk), 4) = "
                          "2147483658 must fit in int32 (row lengths are int32)"}));
    // D + P = 2^63: a zero-stride decode tensor of 2^62 rows and an empty prefill tensor of 2^62.
    t.push_back(contract(X, "token_count_overflows",
                         [=](Case& c) {
                           MixedSparseArgs& x = args(c);
                           x.window_size = 1;
                           mat(x.decode_swa_indices, x.decode_swa_indices.data, k2p62, 1, 0, 1);
                           x.decode_compressed_indices = TensorView{};
                           x.decode_compressed_topk_lens = TensorView{};
                           mat(x.prefill_topk_indices, x.prefill_topk_indices.data, k2p62, 0, 0, 1);
                         },
                         {"decode + prefill tokens (rows of decode_swa_indices + rows of prefill_topk_indices) "
                          "overflows int64"}));

    // Empty views bound none of their strides (their extent is 0): a backend must never offset a
    // pointer by them, not even in a per-request slice of an empty view (fuzz_validate's finding).
    t.push_back(skip(
        X, "prefill_topk_zero_width_huge_stride",
        [](Case& c) { args(c).prefill_topk_indices.shape[1] = 0, args(c).prefill_topk_indices.stride[0] = kI64Max; }, 0,
        nullptr,
        [](const Case& a, const Case& b) {
          for (int64_t r = 0; r < 2; ++r) expect_base_row(a, b, r);
          for (int64_t r = 2; r < 5; ++r)
            for (int64_t j = 7; j < kWidth; ++j) EXPECT_EQ(at<int32_t>(args(a).sparse_indices, r, j), -1);
        }));

    // decode_compressed_topk_lens near INT32_MAX: swa_total (7) + len passes INT32_MAX, so the
    // length is clamped to INT32_MAX (never wrapped negative) and counted; rows 1..4 are unaffected.
    auto caller_lens = [](int32_t len0, int32_t len1) {
      return [=](Case& c) {
        args(c).decode_compressed_indices_are_local = false;
        at<int32_t>(args(c).decode_compressed_topk_lens, 0) = len0;
        at<int32_t>(args(c).decode_compressed_topk_lens, 1) = len1;
      };
    };
    auto lens_are = [](int32_t len0, int32_t len1) {
      return [=](const Case& a, const Case& b) {
        EXPECT_EQ(at<int32_t>(args(a).sparse_topk_lens, 0), len0);
        EXPECT_EQ(at<int32_t>(args(a).sparse_topk_lens, 1), len1);
        for (int64_t r = 2; r < 5; ++r) expect_base_row(a, b, r);
      };
    };
    t.push_back(skip(X, "decode_lens_int32_max_clamped", caller_lens(kI32Max, 3), 1, nullptr, lens_are(kI32Max, 10)));
    t.push_back(skip(X, "decode_lens_just_past_int32_clamped", caller_lens(kI32Max - 6, kI32Max - 6), 2, nullptr,
                     lens_are(kI32Max, kI32Max)));
    t.push_back(
        skip(X, "decode_lens_reaching_int32_max_exact", caller_lens(kI32Max - 7, 0), 0, nullptr, lens_are(kI32Max, 7)));
    t.push_back(
        skip(X, "decode_lens_int32_min_no_wrap", caller_lens(2, kI32Min), 0, nullptr, lens_are(9, kI32Min + 7)));
  }
};

}  // namespace bad_inputs

}  // namespace dsv4kv::conformance
