/// \file gather_properties.hpp
/// \brief RapidCheck generator and properties of dequantize_and_gather_k_cache, and its registration.
#pragma once

#include "property_common.hpp"
#include "gather.hpp"

namespace dsv4kv::conformance {

/// A random gather case over a cache of random bytes.
inline rc::Gen<GatherTester> gen_gather(Validity v) {
  return rc::gen::exec([=] {
    const int64_t bs = *gen_block_size();
    const int64_t cols = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 1, 2, 3, 4});
    const int64_t coverage = std::min<int64_t>(cols * bs, 300);
    const int64_t out_rows = *gen_count(spec::kTileSize, bs, coverage + 2);
    GatherTester t;
    t.requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .extra_out_batch(*rc::gen::inRange<int64_t>(0, 2))
        .out_rows(out_rows)
        .out_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 8}), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 64}))
        .offset(*rc::gen::oneOf(rc::gen::just<int64_t>(0), rc::gen::inRange<int64_t>(0, out_rows + 1)))
        .block_size(bs)
        .num_blocks(*rc::gen::inRange<int64_t>(1, 9))
        .stride(*gen_stride(bs))
        .fnuz(*rc::gen::arbitrary<bool>())
        .with_gather_lens(*rc::gen::arbitrary<bool>())
        .table(cols, *rc::gen::inRange<int64_t>(0, 2), *rc::gen::elementOf(std::vector<int64_t>{0, 0, 3}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

namespace props {

/// The output holds exactly the rows [offset, offset + gather_len) of each
/// well-formed request whose block-table lookup is in range, each equal to the
/// per-element spec (dequantize_element of its code and scale byte, RoPE bits
/// copied); every other byte of `out` (other rows, row and batch padding, extra
/// batch entries) keeps 0xA5, and error_count follows the failure model.
inline void gather_writes_exactly_requested_rows(Backend& be, Validity v) {
  GatherTester g = *gen_gather(v);
  g.Run(be);
  if (v == Validity::kValid) RC_ASSERT(g.expected_error_count() == 0);  // the generator's own promise
  GuardedBuffer expected(g.out_buffer().size());
  const int64_t B = g.block_size();
  for (int64_t b = 0; b < g.requests(); ++b)
    for (int64_t row = 0; row < g.out_rows(); ++row) {
      int64_t pos = 0;
      const int64_t blk = g.expected_block(b, row, &pos);
      if (blk < 0) continue;
      for (int c = 0; c < spec::kNopeDim; ++c) {
        const uint8_t code = g.cache_byte(blk, spec::fp8_code_offset(pos, c));
        const uint8_t scale = g.cache_byte(blk, spec::scale_offset(B, pos, c / spec::kTileSize));
        expected.store<uint16_t>(g.out_index(b, row, c), spec::dequantize_element(code, scale, g.format()));
      }
      for (int c = 0; c < spec::kRopeDim; ++c) {
        const int64_t off = spec::rope_offset(pos) + 2 * c;
        expected.store<uint16_t>(g.out_index(b, row, spec::kNopeDim + c),
                                 static_cast<uint16_t>(g.cache_byte(blk, off) | (g.cache_byte(blk, off + 1) << 8)));
      }
    }
  require_empty(first_mismatch(expected.bytes(), g.out_buffer().bytes(), "out"));
  require_empty(check_all_guards(g.buffers()));
  RC_ASSERT(int64_t{g.error_count()} == (g.count_errors_enabled() ? g.expected_error_count() : 0));
}

}  // namespace props

/// The Gather suite: its differential case and its properties (registered once for every backend).
template <>
struct OpSuite<DequantizeGatherArgs> {
  static constexpr const char* kPrefix = "Gather";
  static rc::Gen<GatherTester> differential_case(Validity v) { return gen_gather(v); }
  /// Deliberate bugs applied after the reference's call, each with the property that must catch it
  /// (PropertySelfTest: a property that cannot fail proves nothing).
  static std::vector<SeededBug<DequantizeGatherArgs>> seeded_bugs() {
    return {
      // One row past request 0's rows is written.
      {"GatherWritesExactlyRequestedRows",
       [](const DequantizeGatherArgs& a) {
         if (a.seq_lens.shape[0] == 0) return;
         const int32_t s = a.seq_lens.as<int32_t>()[0];
         const int64_t g = a.gather_lens.present() ? a.gather_lens.as<int32_t>()[0] : s;
         const int64_t row = a.offset + g;
         if (g >= 0 && g <= s && row < a.out.shape[1]) a.out.as<uint16_t>()[row * a.out.stride[1]] = 0;
       }},
    };
  }
  /// Large cases for the CUDA smoke test (CudaSmoke.LargeGather).
  /// Gathers whose grid reaches small_launch_ctas() (cuda/src/dequantize.cu) take the large-launch
  /// kernel (2 rows per warp, block-table entries read after seq_lens); the other cases here take
  /// the small-launch one (1 row per warp, entries read together with seq_lens without gather_lens).
  static std::vector<GatherTester> large_cases() {
    std::vector<GatherTester> v;
    for (int64_t bs : {64, 128, 7})
      for (int64_t stride_extra : {int64_t{0}, int64_t{2}})
        for (bool with_gather_lens : {false, true}) {
          const int64_t stride = stride_extra == 0 ? spec::vllm_block_stride(bs) : spec::block_data_bytes(bs) + 2;
          v.push_back(GatherTester()
              .requests(4)
              .out_rows(4000)  // 4 x 500 CTAs of 8 rows
              .offset(5)
              .block_size(bs)
              .stride(stride)
              .with_gather_lens(with_gather_lens)
              .invalid_fraction(0.02)
              .count_errors(true)
              .seed(static_cast<uint64_t>(bs * 4 + stride_extra + (with_gather_lens ? 1 : 0))));
        }
    for (int64_t bs : {64, 128, 7})
      for (int64_t stride_extra : {int64_t{0}, int64_t{2}}) {
        const int64_t stride = stride_extra == 0 ? spec::vllm_block_stride(bs) : spec::block_data_bytes(bs) + 2;
        v.push_back(GatherTester()
            .requests(6)
            .out_rows(700)
            .offset(3)
            .block_size(bs)
            .stride(stride)
            .with_gather_lens(true)
            .invalid_fraction(0.05)
            .count_errors(true)
            .seed(static_cast<uint64_t>(bs + stride_extra)));
        v.push_back(GatherTester().requests(3).out_rows(500).out_pad(4, 12).block_size(bs).stride(stride).fnuz(true).seed(5));
      }
    return v;
  }
  /// The worked example of dequantize_and_gather_k_cache (spec/operations.md, dequantize example), run through the reference
  /// (SpecExamples.<kPrefix>, spec_examples_test.cpp); GoogleTest assertions.
  static void spec_example() {
    namespace S = spec;
    const int64_t B = 64, stride = S::vllm_block_stride(B);
    std::vector<uint8_t> cache(2 * stride, 0);
    std::vector<uint16_t> out(30 * S::kHeadDim, 0xA5A5);
    std::vector<int32_t> seq = {100}, gl = {40}, bt = {1, 0};
    int32_t errors = 0;
    dsv4kv::DequantizeGatherArgs a;
    a.out = TensorView::cube(out.data(), DType::kBF16, 1, 30, S::kHeadDim);
    a.k_cache = TensorView::mat(cache.data(), DType::kU8, 2, stride);
    a.seq_lens = TensorView::vec(seq.data(), DType::kI32, 1);
    a.gather_lens = TensorView::vec(gl.data(), DType::kI32, 1);
    a.block_table = TensorView::mat(bt.data(), DType::kI32, 1, 2);
    a.offset = 2;
    a.error_count = &errors;
    dsv4kv::reference::dequantize_and_gather_k_cache(a);
    EXPECT_EQ(errors, 12);
    for (int row = 0; row < 30; ++row)
      EXPECT_EQ(out[row * S::kHeadDim] == 0xA5A5, row < 2) << "row " << row;
  }
  static std::vector<Property> properties() {
    return {
      {"GatherWritesExactlyRequestedRows", [](Backend& be) { props::gather_writes_exactly_requested_rows(be, Validity::kValid); }},
      {"GatherInvalidRowsSkippedAndCounted", [](Backend& be) { props::gather_writes_exactly_requested_rows(be, Validity::kInvalid); }},
    };
  }
};
}  // namespace dsv4kv::conformance
