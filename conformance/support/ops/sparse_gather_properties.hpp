/// \file sparse_gather_properties.hpp
/// \brief RapidCheck generator and properties of dequantize_and_gather_k_cache_sparse, and its registration.
#pragma once

#include "property_common.hpp"
#include "sparse_gather.hpp"

namespace dsv4kv::conformance {

/// A random sparse-gather case over a cache of random bytes.
inline rc::Gen<SparseGatherTester> gen_sparse_gather(Validity v) {
  return rc::gen::exec([=] {
    const int64_t bs = *gen_block_size();
    SparseGatherTester t;
    t.slots(*rc::gen::elementOf(std::vector<int64_t>{0, 1, 2, 7, 33, *rc::gen::inRange<int64_t>(0, 300)}))
        .extra_rows(*rc::gen::inRange<int64_t>(0, 3))
        .out_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 8, 512}))
        .out_shift(*rc::gen::arbitrary<bool>())
        .block_size(bs)
        .num_blocks(*rc::gen::inRange<int64_t>(1, 9))
        .stride(*gen_stride(bs))
        .fnuz(*rc::gen::arbitrary<bool>())
        .int64_slots(*rc::gen::arbitrary<bool>())
        .padding_fraction(*rc::gen::elementOf(std::vector<double>{0.0, 0.05, 0.5}))
        .invalid_fraction(draw_invalid_fraction(v))
        .count_errors(v == Validity::kValid || *rc::gen::arbitrary<bool>())
        .seed(*gen_seed());
    return t;
  });
}

namespace props {

/// The defining property: a slot list is a dense gather of single-token requests. The whole
/// output buffer (rows of -1 and skipped slots, rows >= N, padding between rows: canaries) is
/// byte-identical to the dense gather's on the same backend, and so is the error count, which is
/// the number of slots other than -1 outside the cache.
inline void sparse_gather_equals_dense_gather(Backend& be, Validity v) {
  SparseGatherTester t = *gen_sparse_gather(v);
  t.Run(be);
  if (v == Validity::kValid) RC_ASSERT(t.expected_error_count() == 0);  // the generator's own promise
  int32_t dense_count = 0;
  const GuardedBuffer dense = t.RunDenseEquivalent(be, &dense_count);
  require_empty(first_mismatch(dense.bytes(), t.out_buffer().bytes(), "out (dense gather vs sparse)"));
  require_empty(check_all_guards(t.buffers()));
  RC_ASSERT(t.error_count() == dense_count);
  RC_ASSERT(int64_t{t.error_count()} == (t.count_errors_enabled() ? t.expected_error_count() : 0));
}

/// Independently of the dense gather: row i of a read slot holds dequantize_element of the
/// slot's codes and scale bytes and its RoPE bits; every other byte of `out` keeps 0xA5.
inline void sparse_gather_rows_follow_the_spec(Backend& be) {
  SparseGatherTester t = *gen_sparse_gather(props::draw_validity());
  t.Run(be);
  GuardedBuffer expected(t.out_buffer().size());
  const int64_t B = t.block_size();
  for (int64_t i = 0; i < t.slots(); ++i) {
    if (!t.slot_valid(i)) continue;
    const int64_t blk = spec::slot_block(t.slot(i), B), pos = spec::slot_pos(t.slot(i), B);
    for (int c = 0; c < spec::kNopeDim; ++c) {
      const uint8_t code = t.cache_byte(blk, spec::fp8_code_offset(pos, c));
      const uint8_t scale = t.cache_byte(blk, spec::scale_offset(B, pos, c / spec::kTileSize));
      expected.store<uint16_t>(t.out_index(i, c), spec::dequantize_element(code, scale, t.format()));
    }
    for (int c = 0; c < spec::kRopeDim; ++c) {
      const int64_t off = spec::rope_offset(pos) + 2 * c;
      expected.store<uint16_t>(t.out_index(i, spec::kNopeDim + c),
                               static_cast<uint16_t>(t.cache_byte(blk, off) | (t.cache_byte(blk, off + 1) << 8)));
    }
  }
  require_empty(first_mismatch(expected.bytes(), t.out_buffer().bytes(), "out"));
}

}  // namespace props

/// The SparseGather suite: its differential case and its properties (registered once for every backend).
template <>
struct OpSuite<SparseGatherArgs> {
  static constexpr const char* kPrefix = "SparseGather";
  static rc::Gen<SparseGatherTester> differential_case(Validity v) { return gen_sparse_gather(v); }
  /// Deliberate bugs applied after the reference's call, each with the property that must catch it.
  static std::vector<SeededBug<SparseGatherArgs>> seeded_bugs() {
    return {
      // The row after the last slot (a row >= N, or padding between rows) is written.
      {"SparseGatherEqualsDenseGather",
       [](const SparseGatherArgs& a) {
         const int64_t n = a.slot_indices.shape[0];
         if (n > 0 && a.out.shape[0] > n) a.out.as<uint16_t>()[n * a.out.stride[0]] ^= 1;
         else if (n > 0 && a.error_count != nullptr) ++*a.error_count;
       }},
      // The sign bit of the first value of row 0 is flipped when slot 0 is read.
      {"SparseGatherRowsFollowTheSpec",
       [](const SparseGatherArgs& a) {
         if (a.slot_indices.shape[0] == 0) return;
         const int64_t s = a.slot_indices.dtype == DType::kI64 ? a.slot_indices.as<int64_t>()[0]
                                                                 : int64_t{a.slot_indices.as<int32_t>()[0]};
         if (s >= 0 && s < a.k_cache.shape[0] * a.block_size) a.out.as<uint16_t>()[0] ^= 0x8000;
       }},
    };
  }
  /// Large cases for the CUDA smoke test (CudaSmoke.LargeSparseGather): lists longer than the
  /// launch's CTA cap times its rows per CTA on any current GPU (an H200: 16,896 CTAs x 8 rows),
  /// so warps take the grid-stride loop, both slot dtypes and both block strides.
  static std::vector<SparseGatherTester> large_cases() {
    std::vector<SparseGatherTester> v;
    for (bool i64 : {false, true})
      for (int64_t bs : {64, 7}) {
        const int64_t stride = i64 ? spec::block_data_bytes(bs) + 2 : spec::vllm_block_stride(bs);
        v.push_back(SparseGatherTester().slots(i64 ? 20000 : 200000).block_size(bs).num_blocks(512).stride(stride)
                        .int64_slots(i64).invalid_fraction(0.02).padding_fraction(0.05).seed(static_cast<uint64_t>(bs + i64)));
      }
    v.push_back(SparseGatherTester().slots(5000).out_pad(8).out_shift(true).num_blocks(64).fnuz(true).seed(3));
    return v;
  }
  static std::vector<Property> properties() {
    return {
      {"SparseGatherEqualsDenseGather", [](Backend& be) { props::sparse_gather_equals_dense_gather(be, Validity::kValid); }},
      {"SparseGatherInvalidSlotsSkippedAndCounted", [](Backend& be) { props::sparse_gather_equals_dense_gather(be, Validity::kInvalid); }},
      {"SparseGatherRowsFollowTheSpec", [](Backend& be) { props::sparse_gather_rows_follow_the_spec(be); }},
    };
  }
};
}  // namespace dsv4kv::conformance
