/// \file global_topk_properties.hpp
/// \brief RapidCheck generator and properties of compute_global_topk_indices_and_lens, and its registration.
#pragma once

#include "bad_inputs.hpp"
#include "property_common.hpp"
#include "global_topk.hpp"

namespace dsv4kv::conformance {

/// A random compute_global_topk_indices_and_lens case.
inline rc::Gen<GlobalTopkTester> gen_global_topk(Validity v) {
  return rc::gen::exec([=] {
    const int64_t bs = *gen_block_size();
    // 1,030 and 4,100 columns: the CUDA packed launch's rounds of 2 and 4 cells a thread, and rows of several rounds.
    const int64_t topk = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 7, 64, 128, 130, 512, 1030, 4100});
    int64_t tokens = *gen_count(spec::kTileSize, bs, 130);
    if (tokens * topk > 20000) tokens = 20000 / topk;
    GlobalTopkTester t;
    t.tokens(tokens)
        .topk(topk)
        .row_pads(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 5}),
                  *rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .block_size(bs)
        .table(*rc::gen::inRange<int64_t>(0, 6), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 2}))
        .sentinel_fraction(*rc::gen::elementOf(std::vector<double>{0.0, 0.2, 0.9}))
        .trailing_sentinels(*rc::gen::arbitrary<bool>())
        .invalid_fraction(draw_invalid_fraction(v))
        .semantics(*gen_semantics())
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

namespace props {

/// out[t, c] = block_table[req, l / B] * B + l % B for in-range l; every negative
/// local index (-1, -2, INT_MIN) stays -1 without a count; out-of-row columns and
/// negative entries give -1 and a count; a bad request gives an all -1 row, len 0,
/// one count; lens = is_valid ? #{c : out >= 0} : 0. Row padding stays 0xA5. Under a packing profile
/// (vllm_v4, vllm_v41) the row holds the same translated entries in column order from column 0, then -1, and an
/// invalid token's row is all -1 with no count.
inline void global_topk_follows_block_table(Backend& be, Validity v) {
  GlobalTopkTester g = *gen_global_topk(v);
  g.Run(be);
  const bool pack = spec::packs_global_topk(g.semantics());
  int64_t faults = 0;
  for (int64_t t = 0; t < g.tokens(); ++t) {
    const bool bad_req = g.request(t) < 0 || g.request(t) >= g.requests();
    faults += bad_req ? 1 : 0;
    std::vector<int32_t> want(static_cast<size_t>(g.topk()), -1);
    int64_t count = 0;
    const bool looked_up = !pack || g.valid_token(t);
    for (int64_t c = 0; c < g.topk() && looked_up; ++c) {
      const int32_t e = g.expected_global(t, c, &faults);
      if (!pack) {
        want[c] = e;
        if (g.local(t, c) < 0) RC_ASSERT(g.global(t, c) == -1);  // sentinel survives in its column
      } else if (e >= 0) {
        want[count] = e;
      }
      count += e >= 0 ? 1 : 0;
    }
    for (int64_t c = 0; c < g.topk(); ++c)
      if (g.global(t, c) != want[c]) {
        std::ostringstream m;
        m << "global_topk_indices[" << t << ", " << c << "] = " << g.global(t, c) << ", expected " << want[c]
          << " (local " << g.local(t, c) << ", request " << g.request(t) << ", " << spec::semantics_name(g.semantics())
          << ")";
        RC_FAIL(m.str());
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
    // The packing profile's CTA-per-row kernel: one, two and four cells per thread (topk 300 and 509, 1,000, 3,000;
    // 3,000 in two rounds, 509 with scalar loads), block sizes 64 and 16.
    for (int64_t topk : {300, 509, 1000, 3000})
      v.push_back(GlobalTopkTester()
                      .tokens(700)
                      .topk(topk)
                      .requests(4)
                      .block_size(topk == 1000 ? 16 : 64)
                      .sentinel_fraction(0.05)
                      .invalid_fraction(0.02)
                      .semantics(Semantics::kVllmV4)
                      .count_errors(true)
                      .seed(static_cast<uint64_t>(topk + 2)));
    // 5,000 rows: the lean global_topk launch groups 32 (topk 200), 64 (512) or 128 (2048) threads
    // per row above the few-row cut-off (4,224 rows on an H200).
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
  /// The worked example of compute_global_topk_indices_and_lens (spec/operations.md, compute_global_topk example), run
  /// through the reference (SpecExamples.<kPrefix>, spec_examples_test.cpp); GoogleTest assertions.
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
        {"GlobalTopkFollowsBlockTable",
         [](Backend& be) { props::global_topk_follows_block_table(be, Validity::kValid); }},
        {"GlobalTopkInvalidIndicesGiveMinusOne",
         [](Backend& be) { props::global_topk_follows_block_table(be, Validity::kInvalid); }},
    };
  }
};
// ---------------------------------------------------------------------------
// Bad inputs (conformance/bad_inputs_test.cpp runs them; bad_inputs.hpp has the machinery)
// ---------------------------------------------------------------------------

namespace bad_inputs {

/// The bad-input rows of `GlobalTopkArgs`: its valid base case, every way an argument can be wrong,
/// and what must happen (bad_inputs.hpp).
template <>
struct OpRows<GlobalTopkArgs> {
  /// The prefix of the rows' test names.
  static constexpr const char* kPrefix = "global_topk";
  static constexpr int64_t kBlockSize = 4;

  static GlobalTopkArgs& args(Case& c) { return c.get<GlobalTopkArgs>(); }
  static const GlobalTopkArgs& args(const Case& c) { return c.get<GlobalTopkArgs>(); }

  /// The valid base case (small, with strided views, row padding and a block-stride tail).
  static void base_case(Case& c) {
    // Four tokens of two requests, padded rows in topk_indices (8 > 6), the block table (5 > 3) and
    // the output (7 > 6).
    GlobalTopkTester tester;  // owns the buffers adopt() copies
    GlobalTopkArgs a =
        tester.tokens(4).topk(6).row_pads(2, 1).requests(2).block_size(kBlockSize).table(3, 2).seed(33).args();
    a.token_to_req.shape[0] = a.is_valid_token.shape[0] = 4;  // one per token (the tester may add more)
    c.adopt(a);
    const int32_t topk[4][6] = {
        {0, 5, -1, 11, 3, 7}, {2, -1, 8, 4, 10, -1}, {1, 6, 9, -1, -1, 0}, {-1, 4, 11, 2, -1, -1}};
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < 6; ++j) at<int32_t>(args(c).topk_indices, t, j) = topk[t][j];
    const int32_t req[4] = {0, 1, 1, 0};
    const uint8_t valid[4] = {1, 1, 0, 1};
    for (int t = 0; t < 4; ++t)
      at<int32_t>(args(c).token_to_req, t) = req[t], at<uint8_t>(args(c).is_valid_token, t) = valid[t];
    const int32_t tab[2][5] = {{7, 2, 9, 3, 4}, {1, 0, 5, 3, 4}};  // columns 3, 4: row padding, never read
    for (int b = 0; b < 2; ++b)
      for (int j = 0; j < 5; ++j) static_cast<int32_t*>(args(c).block_table.data)[b * 5 + j] = tab[b][j];
  }

  /// Global top-k: the whole output from its one-line rule; returns the spec's error count.
  static int64_t model_count(Case& c) {
    const GlobalTopkArgs& g = args(c);
    const int64_t T = g.topk_indices.shape[0], K = g.topk_indices.shape[1];
    const int64_t R = g.block_table.shape[0], cols = g.block_table.shape[1], B = g.block_size;
    int64_t errors = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t r = at<int32_t>(g.token_to_req, t);
      const bool bad_req = r < 0 || r >= R;
      errors += bad_req;
      int32_t n = 0;
      for (int64_t j = 0; j < K; ++j) {
        int64_t want = -1;
        const int64_t local = at<int32_t>(g.topk_indices, t, j);
        if (!bad_req && local >= 0) {
          const int64_t col = local / B;
          const int64_t blk = col < cols ? at<int32_t>(g.block_table, r, col) : -1;
          want = blk >= 0 ? blk * B + local % B : -1;
          if (want > kI32Max) want = -1;
          errors += want < 0;
        }
        n += want >= 0;
        EXPECT_EQ(at<int32_t>(g.global_topk_indices, t, j), want) << "global_topk_indices[" << t << ", " << j << "]";
      }
      EXPECT_EQ(at<int32_t>(g.topk_lens, t), bad_req || !at<uint8_t>(g.is_valid_token, t) ? 0 : n)
          << "topk_lens[" << t << "]";
    }
    return errors;
  }

  static void rows(std::vector<Row>& t) {
    const Op G = op_index<GlobalTopkArgs>;
    t.push_back(contract(G, "semantics_unknown", [](Case& c) { args(c).semantics = static_cast<Semantics>(3); },
                         {"semantics must be seed, vllm_v4 or vllm_v41, got the value 3"}));
    t.push_back(contract(G, "topk_indices_int64", [](Case& c) { args(c).topk_indices.dtype = DType::kI64; },
                         {"topk_indices must be int32, got int64"}));
    t.push_back(contract(G, "topk_indices_rank1", [](Case& c) { rank(args(c).topk_indices, 1); },
                         {"topk_indices must have rank 2, got 1"}));
    t.push_back(contract(G, "topk_indices_inner_stride", [](Case& c) { args(c).topk_indices.stride[1] = 2; },
                         {"topk_indices must have unit stride in its last dimension, got 2"}));
    t.push_back(contract(G, "topk_indices_misaligned", [](Case& c) { misalign(args(c).topk_indices, 1); },
                         {"topk_indices must be aligned to 4 bytes"}));
    t.push_back(contract(G, "token_to_req_short", [](Case& c) { args(c).token_to_req.shape[0] = 3; },
                         {"token_to_req_indices must have at least 4 entries (one per token), got 3"}));
    t.push_back(contract(G, "token_to_req_missing", [](Case& c) { args(c).token_to_req = TensorView{}; },
                         {"token_to_req_indices is required"}));
    t.push_back(contract(G, "block_table_uint8", [](Case& c) { args(c).block_table.dtype = DType::kU8; },
                         {"block_table must be int32, got uint8"}));
    t.push_back(contract(G, "block_table_rank1", [](Case& c) { rank(args(c).block_table, 1); },
                         {"block_table must have rank 2, got 1"}));
    t.push_back(contract(G, "block_table_inner_stride", [](Case& c) { args(c).block_table.stride[1] = 2; },
                         {"block_table must have unit stride in its last dimension, got 2"}));
    t.push_back(contract(G, "is_valid_token_int32", [](Case& c) { args(c).is_valid_token.dtype = DType::kI32; },
                         {"is_valid_token must be bool, got int32"}));
    t.push_back(contract(G, "is_valid_token_short", [](Case& c) { args(c).is_valid_token.shape[0] = 2; },
                         {"is_valid_token must have at least 4 entries (one per token), got 2"}));
    t.push_back(contract(G, "output_too_wide", [](Case& c) { args(c).global_topk_indices.shape[1] = 7; },
                         {"global_topk_indices must have 6 columns (topk), got 7"}));
    t.push_back(contract(G, "output_too_few_rows", [](Case& c) { args(c).global_topk_indices.shape[0] = 3; },
                         {"global_topk_indices must have 4 rows, got 3"}));
    t.push_back(contract(G, "output_missing", [](Case& c) { args(c).global_topk_indices = TensorView{}; },
                         {"global_topk_indices is required"}));
    t.push_back(contract(G, "lens_too_long", [](Case& c) { args(c).topk_lens.shape[0] = 5; },
                         {"topk_lens must have 4 entries, got 5"}));
    t.push_back(contract(G, "lens_misaligned", [](Case& c) { misalign(args(c).topk_lens, 2); },
                         {"topk_lens must be aligned to 4 bytes"}));
    t.push_back(contract(G, "lens_int64", [](Case& c) { args(c).topk_lens.dtype = DType::kI64; },
                         {"topk_lens must be int32, got int64"}));
    t.push_back(
        contract(G, "block_size_0", [](Case& c) { args(c).block_size = 0; }, {"block_size must be >= 1, got 0"}));
    t.push_back(contract(G, "block_size_beyond_int32", [](Case& c) { args(c).block_size = int64_t{1} << 33; },
                         {"block_size must fit in int32, got 8589934592"}));

    auto req = [](int tok, int32_t v) { return [=](Case& c) { at<int32_t>(args(c).token_to_req, tok) = v; }; };
    auto dead = [](int64_t tok) { return [=](const Case& a, const Case&) { expect_dead_row(a, tok); }; };
    t.push_back(skip(G, "token_to_req_minus1", req(1, -1), 1, nullptr, dead(1)));
    t.push_back(skip(G, "token_to_req_num_reqs", req(1, 2), 1, nullptr, dead(1)));
    t.push_back(skip(G, "token_to_req_int32_min", req(3, kI32Min), 1, nullptr, dead(3)));
    t.push_back(skip(G, "token_to_req_int32_max", req(0, kI32Max), 1, nullptr, dead(0)));
    t.push_back(skip(
        G, "no_requests_every_token_counted", [](Case& c) { args(c).block_table.shape[0] = 0; }, 4));
    auto topk = [](int tok, int j, int32_t v) {
      return [=](Case& c) { at<int32_t>(args(c).topk_indices, tok, j) = v; };
    };
    t.push_back(skip(G, "local_index_beyond_table_row", topk(0, 0, 12), 1, nullptr, [](const Case& a, const Case& b) {
      expect_base_except(a, b, {{0, 0, -1}}, {{0, 4}});
    }));
    t.push_back(skip(G, "local_index_int32_max", topk(1, 2, kI32Max), 1));
    t.push_back(skip(
        G, "negative_sentinels_not_counted",
        [](Case& c) {
          at<int32_t>(args(c).topk_indices, 0, 1) = -2, at<int32_t>(args(c).topk_indices, 1, 0) = kI32Min;
        },
        0,
        [](Case& c) { at<int32_t>(args(c).topk_indices, 0, 1) = -1, at<int32_t>(args(c).topk_indices, 1, 0) = -1; }));
    auto table = [](int b, int col, int32_t v) {
      return [=](Case& c) { at<int32_t>(args(c).block_table, b, col) = v; };
    };
    t.push_back(skip(G, "block_entry_minus1", table(0, 1, -1), 3));
    t.push_back(skip(G, "block_entry_int32_min", table(1, 2, kI32Min), 3));
    t.push_back(skip(G, "global_index_overflows_int32", table(0, 2, 1 << 29), 2));
    t.push_back(skip(G, "global_index_int32_max_fits", table(0, 2, kI32Max / kBlockSize), 0));
    t.push_back(skip(
        G, "all_tokens_invalid",
        [](Case& c) {
          for (int i = 0; i < 4; ++i) at<uint8_t>(args(c).is_valid_token, i) = 0;
        },
        0));
    t.push_back(skip(
        G, "bool_value_2_is_true", [](Case& c) { at<uint8_t>(args(c).is_valid_token, 0) = 2; }, 0,
        [](Case& c) { at<uint8_t>(args(c).is_valid_token, 0) = 1; }));
    t.push_back(skip(
        G, "no_tokens",
        [](Case& c) {
          args(c).topk_indices.shape[0] = 0, args(c).global_topk_indices.shape[0] = 0, args(c).topk_lens.shape[0] = 0;
        },
        0));
    t.push_back(skip(
        G, "no_counter_bad_request", [](Case& c) { c.count_errors = false, at<int32_t>(args(c).token_to_req, 2) = -9; },
        0, nullptr, dead(2)));

    t.push_back(contract(
        G, "block_table_numel_overflows",
        [=](Case& c) { mat(args(c).block_table, args(c).block_table.data, int64_t{1} << 33, int64_t{1} << 31, 0, 1); },
        {"block_table has more elements than int64 can count"}));

    // Empty views bound none of their strides (their extent is 0): a backend must never offset a
    // pointer by them, not even in a per-request slice of an empty view (fuzz_validate's finding).
    t.push_back(skip(
        G, "zero_width_huge_strides",
        [](Case& c) {
          args(c).topk_indices.shape[1] = 0, args(c).topk_indices.stride[0] = kI64Max;
          args(c).global_topk_indices.shape[1] = 0, args(c).global_topk_indices.stride[0] = kI64Max - 7;
        },
        0, nullptr,
        [](const Case& a, const Case&) {
          for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(at<int32_t>(args(a).topk_lens, r), 0) << "row " << r;
        }));
  }
};

}  // namespace bad_inputs

}  // namespace dsv4kv::conformance
