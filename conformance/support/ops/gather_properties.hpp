/// \file gather_properties.hpp
/// \brief RapidCheck generator and properties of dequantize_and_gather_k_cache, and its registration.
#pragma once

#include "bad_inputs.hpp"
#include "property_common.hpp"
#include "gather.hpp"
#include "record_model.hpp"

namespace dsv4kv::conformance {

/// A random gather case over a cache of random bytes, of `record` (nullopt: the 584-byte record half
/// of the time, else a V4.1 record).
inline rc::Gen<GatherTester> gen_gather(Validity v, std::optional<Record> record = Record::kFp8DsMla) {
  return rc::gen::exec([=] {
    const Record rec = record ? *record : *gen_any_record();
    const int64_t bs = *gen_block_size();
    const int64_t cols = *rc::gen::elementOf(std::vector<int64_t>{0, 1, 1, 2, 3, 4});
    const int64_t coverage = std::min<int64_t>(cols * bs, 300);
    const int64_t out_rows = *gen_count(spec::kTileSize, bs, coverage + 2);
    GatherTester t;
    t.requests(*rc::gen::inRange<int64_t>(v == Validity::kValid ? 1 : 0, 5))
        .extra_out_batch(*rc::gen::inRange<int64_t>(0, 2))
        .out_rows(out_rows)
        // Padding of 8 / 64 elements keeps every row 16-byte aligned (the dense gather's aligned
        // instance); 4 / 4 puts every other row, or every other request's rows, 8 bytes off.
        .out_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 8, 4}),
                 *rc::gen::elementOf(std::vector<int64_t>{0, 0, 64, 4}))
        .offset(*rc::gen::oneOf(rc::gen::just<int64_t>(0), rc::gen::inRange<int64_t>(0, out_rows + 1)))
        .block_size(bs)
        .num_blocks(*rc::gen::inRange<int64_t>(1, 9))
        .record(rec)
        .stride(*gen_record_stride(rec, bs))
        .cache_lead(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 0, 2, 6}))
        .fnuz(rec == Record::kFp8DsMla && *rc::gen::arbitrary<bool>())
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

/// V4.1 records: the output holds exactly the rows of gather_writes_exactly_requested_rows, each
/// value as the independent double-arithmetic decoder gives it (record_model.hpp); every other byte
/// keeps 0xA5; the counter adds one report per read token with a NaN scale byte.
inline void gather_records_write_exactly_requested_rows(Backend& be) {
  const Record r = *gen_v41_record();
  GatherTester g = *gen_gather(props::draw_validity(), r);
  g.Run(be);
  const spec::RecordLayout L = spec::record_layout(r);
  GuardedBuffer expected(g.out_buffer().size());
  int64_t nan_scales = 0;
  for (int64_t b = 0; b < g.requests(); ++b)
    for (int64_t row = 0; row < g.out_rows(); ++row) {
      int64_t pos = 0;
      const int64_t blk = g.expected_block(b, row, &pos);
      if (blk < 0) continue;
      std::vector<uint8_t> block(static_cast<size_t>(g.stride()));
      for (int64_t o = 0; o < g.stride(); ++o) block[o] = g.cache_byte(blk, o);
      nan_scales += model_nan_scale(r, block.data(), g.block_size(), pos) ? 1 : 0;
      for (int c = 0; c < L.head_dim; ++c)
        expected.store<uint16_t>(g.out_index(b, row, c), model_decode(r, block.data(), g.block_size(), pos, c));
    }
  require_empty(first_mismatch(expected.bytes(), g.out_buffer().bytes(), "out"));
  require_empty(check_all_guards(g.buffers()));
  RC_ASSERT(int64_t{g.error_count()} == (g.count_errors_enabled() ? g.expected_error_count() + nan_scales : 0));
}

}  // namespace props

/// The Gather suite: its differential case and its properties (registered once for every backend).
template <>
struct OpSuite<DequantizeGatherArgs> {
  static constexpr const char* kPrefix = "Gather";
  static rc::Gen<GatherTester> differential_case(Validity v) { return gen_gather(v, /*record=*/std::nullopt); }
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
  /// Gathers whose grid reaches small_launch_ctas() (cuda/src/gather.cu) take the large-launch
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
        v.push_back(
            GatherTester().requests(3).out_rows(500).out_pad(4, 12).block_size(bs).stride(stride).fnuz(true).seed(5));
        // Rows 16 bytes apart, requests not (every other request's rows 8 bytes off): the dense
        // gather's unaligned instance although the first request's rows are aligned.
        v.push_back(GatherTester().requests(3).out_rows(500).out_pad(0, 4).block_size(bs).stride(stride).seed(6));
      }
    // Cache views that start off a 16-byte boundary: the large launch reads their rows by aligned
    // chunks, the first of block 0's first row starting before the view (spec/layout.md, the
    // untouched tail).
    for (int64_t bs : {64, 7})
      for (int64_t lead : {int64_t{2}, int64_t{14}})
        v.push_back(GatherTester()
                        .requests(4)
                        .out_rows(4000)
                        .block_size(bs)
                        .stride(lead == 2 ? spec::vllm_block_stride(bs) : spec::block_data_bytes(bs) + 6)
                        .cache_lead(lead)
                        .invalid_fraction(0.02)
                        .count_errors(true)
                        .seed(static_cast<uint64_t>(100 + bs + lead)));
    return v;
  }
  /// The worked example of dequantize_and_gather_k_cache (spec/operations.md, dequantize example), run through the
  /// reference (SpecExamples.<kPrefix>, spec_examples_test.cpp); GoogleTest assertions.
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
    for (int row = 0; row < 30; ++row) EXPECT_EQ(out[row * S::kHeadDim] == 0xA5A5, row < 2) << "row " << row;
  }
  static std::vector<Property> properties() {
    return {
        {"GatherWritesExactlyRequestedRows",
         [](Backend& be) { props::gather_writes_exactly_requested_rows(be, Validity::kValid); }},
        {"GatherInvalidRowsSkippedAndCounted",
         [](Backend& be) { props::gather_writes_exactly_requested_rows(be, Validity::kInvalid); }},
        {"RecordsGatherWritesExactlyRequestedRows",
         [](Backend& be) { props::gather_records_write_exactly_requested_rows(be); }},
    };
  }
};
// ---------------------------------------------------------------------------
// Bad inputs (conformance/bad_inputs_test.cpp runs them; bad_inputs.hpp has the machinery)
// ---------------------------------------------------------------------------

namespace bad_inputs {

/// The bad-input rows of `DequantizeGatherArgs`: its valid base case, every way an argument can be wrong,
/// and what must happen (bad_inputs.hpp).
template <>
struct OpRows<DequantizeGatherArgs> {
  /// The prefix of the rows' test names.
  static constexpr const char* kPrefix = "dequantize";
  static constexpr int64_t kBlockSize = 4;
  static constexpr int64_t kBlocks = 5;
  static constexpr int64_t kBlockStride = kBlockSize * spec::kTokenBytes + 2;
  static constexpr int64_t kOutRows = 14;

  static DequantizeGatherArgs& args(Case& c) { return c.get<DequantizeGatherArgs>(); }
  static const DequantizeGatherArgs& args(const Case& c) { return c.get<DequantizeGatherArgs>(); }

  /// The valid base case (small, with strided views, row padding and a block-stride tail).
  static void base_case(Case& c) {
    // Three requests over 5 blocks of block size 4 whose stride has a 2-byte tail; every cache byte is
    // random, the tail included (every (code, scale byte) pair has a defined result). out has a fourth,
    // unused batch entry and padded rows and batches; the block table has a padding column.
    GatherTester tester;  // owns the buffers adopt() copies
    DequantizeGatherArgs a = tester.lengths({7, 12, 3}, {5, 12, 3})
                                 .extra_out_batch(1)
                                 .out_rows(kOutRows)
                                 .out_pad(8, 8)
                                 .offset(1)
                                 .block_size(kBlockSize)
                                 .num_blocks(kBlocks)
                                 .stride(kBlockStride)
                                 .table(3, 0, 1)
                                 .seed(22)
                                 .args();
    a.k_cache.shape[1] = kBlockSize * spec::kTokenBytes;  // rows of the block data; the tail is stride only
    a.gather_lens.shape[0] = 3;                           // one per request (the tester may add one more)
    c.adopt(a);
    // Row stride 4 > width 3: the padding column holds a valid-looking block id (0) that must never be read.
    const int32_t tab[3][4] = {{4, 1, 2, 0}, {0, 3, 2, 0}, {2, 0, 4, 0}};
    for (int b = 0; b < 3; ++b)
      for (int j = 0; j < 4; ++j) static_cast<int32_t*>(args(c).block_table.data)[b * 4 + j] = tab[b][j];
  }

  /// The bytes it may write: the rows of `out` its requests select from blocks inside the cache.
  static void written(Case& c, Allowed& a) {
    const DequantizeGatherArgs& d = args(c);
    const size_t oi = c.slot_index(&d.out);
    const CacheGeometry g = validate(d);
    const ptrdiff_t base = static_cast<uint8_t*>(d.out.data) - c.slots[oi].buf->data();
    const int64_t R = d.seq_lens.shape[0];
    for (int64_t b = 0; b < R; ++b) {
      const int64_t sl = at<int32_t>(d.seq_lens, b);
      const int64_t gl = d.gather_lens.present() ? at<int32_t>(d.gather_lens, b) : sl;
      if (sl < 0 || gl < 0 || gl > sl) continue;
      const int64_t rows = std::min(gl, d.out.shape[1] - d.offset);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t pos = sl - gl + i, col = pos / g.block_size;
        if (col >= d.block_table.shape[1]) continue;
        const int64_t blk = at<int32_t>(d.block_table, b, col);
        if (blk < 0 || blk >= g.num_blocks) continue;
        const int64_t row = (b * d.out.stride[0] + (d.offset + i) * d.out.stride[1]) * 2;
        for (int64_t k = 0; k < kHeadDim * 2; ++k) a[oi][base + row + k] = true;
      }
    }
  }

  /// Dequantize: every selected row holds the spec's values; returns the spec's error count.
  static int64_t model_count(Case& c) {
    const DequantizeGatherArgs& d = args(c);
    const CacheGeometry g = validate(d);
    const int64_t R = d.seq_lens.shape[0];
    int64_t errors = 0;
    for (int64_t b = 0; b < R; ++b) {
      const int64_t sl = at<int32_t>(d.seq_lens, b);
      const int64_t gl = d.gather_lens.present() ? at<int32_t>(d.gather_lens, b) : sl;
      if (sl < 0 || gl < 0 || gl > sl) {
        ++errors;
        continue;
      }
      const int64_t rows = std::max<int64_t>(0, std::min(gl, d.out.shape[1] - d.offset));
      errors += gl - rows;  // rows past the end of out
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t pos = sl - gl + i, col = pos / g.block_size;
        if (col >= d.block_table.shape[1]) {
          ++errors;
          continue;
        }
        const int64_t blk = at<int32_t>(d.block_table, b, col);
        if (blk < 0 || blk >= g.num_blocks) {
          ++errors;
          continue;
        }
        const uint8_t* block = g.base + spec::block_offset(blk, g.block_stride);
        if (!token_row_matches(
                block, g.block_size, pos % g.block_size, d.format,
                [&](int e) { return at<uint16_t>(d.out, b, d.offset + i, e); },
                "out[" + std::to_string(b) + ", " + std::to_string(d.offset + i) + ", "))
          return errors;
      }
    }
    return errors;
  }

  static void rows(std::vector<Row>& t) {
    const Op D = op_index<DequantizeGatherArgs>;
    t.push_back(contract(D, "out_dtype", [](Case& c) { args(c).out.dtype = DType::kI32; },
                         {"out must be bfloat16, got int32"}));
    t.push_back(contract(D, "out_rank2", [](Case& c) { rank(args(c).out, 2); }, {"out must have rank 3, got 2"}));
    t.push_back(contract(D, "out_448_columns", [](Case& c) { args(c).out.shape[2] = kNopeDim; },
                         {"out must have 512 columns, got 448"}));
    t.push_back(contract(D, "record_out_width", [](Case& c) { args(c).record = Record::kMxfp4Indexer; },
                         {"out must have 128 columns, got 512"}));
    t.push_back(contract(D, "record_unknown", [](Case& c) { args(c).record = static_cast<Record>(4); },
                         {"record must be fp8_ds_mla, mxfp8_ds_mla, nvfp4_ds_mla or mxfp4_indexer, got the value 4"}));
    t.push_back(contract(D, "record_with_fnuz",
                         [](Case& c) {
                           args(c).record = Record::kNvfp4DsMla;
                           args(c).format = Fp8Format::kE4M3Fnuz;
                         },
                         {"use_fnuz must be False with record nvfp4_ds_mla"}));
    t.push_back(contract(D, "out_inner_stride", [](Case& c) { args(c).out.stride[2] = 2; },
                         {"out must have unit stride in its last dimension, got 2"}));
    t.push_back(
        contract(D, "out_misaligned", [](Case& c) { misalign(args(c).out, 1); }, {"out must be aligned to 2 bytes"}));
    t.push_back(contract(D, "out_fewer_than_R", [](Case& c) { args(c).out.shape[0] = 2; },
                         {"out must have at least 3 rows in dimension 0 (one per request), got 2"}));
    t.push_back(contract(D, "out_negative_rows", [](Case& c) { args(c).out.shape[1] = -1; },
                         {"out has a negative size in dimension 1: -1"}));
    t.push_back(contract(D, "out_missing", [](Case& c) { args(c).out = TensorView{}; }, {"out is required"}));
    t.push_back(contract(D, "seq_lens_int64", [](Case& c) { args(c).seq_lens.dtype = DType::kI64; },
                         {"seq_lens must be int32, got int64"}));
    t.push_back(
        contract(D, "seq_lens_missing", [](Case& c) { args(c).seq_lens = TensorView{}; }, {"seq_lens is required"}));
    t.push_back(contract(D, "seq_lens_rank2", [](Case& c) { rank(args(c).seq_lens, 2); },
                         {"seq_lens must have rank 1, got 2"}));
    t.push_back(contract(D, "seq_lens_misaligned", [](Case& c) { misalign(args(c).seq_lens, 2); },
                         {"seq_lens must be aligned to 4 bytes"}));
    t.push_back(contract(D, "seq_lens_stride2", [](Case& c) { args(c).seq_lens.stride[0] = 2; },
                         {"seq_lens must have unit stride in its last dimension, got 2"}));
    t.push_back(contract(D, "gather_lens_short", [](Case& c) { args(c).gather_lens.shape[0] = 2; },
                         {"gather_lens must have at least 3 entries (one per request), got 2"}));
    t.push_back(contract(D, "gather_lens_bool", [](Case& c) { args(c).gather_lens.dtype = DType::kBool; },
                         {"gather_lens must be int32, got bool"}));
    t.push_back(contract(D, "block_table_short", [](Case& c) { args(c).block_table.shape[0] = 2; },
                         {"block_table must have at least 3 rows (one per request), got 2"}));
    t.push_back(contract(D, "block_table_inner_stride", [](Case& c) { args(c).block_table.stride[1] = 2; },
                         {"block_table must have unit stride in its last dimension, got 2"}));
    t.push_back(contract(D, "block_table_misaligned", [](Case& c) { misalign(args(c).block_table, 2); },
                         {"block_table must be aligned to 4 bytes"}));
    t.push_back(contract(D, "block_table_int64", [](Case& c) { args(c).block_table.dtype = DType::kI64; },
                         {"block_table must be int32, got int64"}));
    t.push_back(contract(D, "block_table_missing", [](Case& c) { args(c).block_table = TensorView{}; },
                         {"block_table is required"}));
    t.push_back(contract(D, "offset_negative", [](Case& c) { args(c).offset = -1; },
                         {"offset must be in [0, out.shape[1] = 14], got -1"}));
    t.push_back(contract(D, "offset_past_out", [](Case& c) { args(c).offset = kOutRows + 1; },
                         {"offset must be in [0, out.shape[1] = 14], got 15"}));
    t.push_back(
        contract(D, "block_size_0", [](Case& c) { args(c).block_size = 0; }, {"block_size must be >= 1, got 0"}));
    t.push_back(contract(D, "block_size_int64_max", [](Case& c) { args(c).block_size = kI64Max; },
                         {"block_size must fit in int32"}));
    t.push_back(contract(D, "block_stride_odd", [](Case& c) { args(c).k_cache.stride[0] = kBlockStride + 1; },
                         {"k_cache block stride must be even"}));
    // An odd base with an even stride (a view starting at an odd byte): on the GPU a misaligned
    // 2-byte access, which would end the CUDA context.
    t.push_back(contract(D, "k_cache_misaligned", [](Case& c) { misalign(args(c).k_cache, 1); },
                         {"k_cache must be aligned to 2 bytes (bf16 RoPE values are 2-byte aligned), got address 0x"}));
    t.push_back(contract(D, "block_stride_below_block_data", [](Case& c) { args(c).k_cache.stride[0] = 1000; },
                         {"k_cache block stride must be >= block_size*584 = 2336 bytes, got 1000"}));
    t.push_back(
        contract(D, "k_cache_missing", [](Case& c) { args(c).k_cache = TensorView{}; }, {"k_cache is required"}));

    auto set = [](const char* which, int b, int32_t v) {
      return [=](Case& c) { at<int32_t>(std::string(which) == "seq" ? args(c).seq_lens : args(c).gather_lens, b) = v; };
    };
    auto empty_request = [](int b) {
      return [b](Case& c) { at<int32_t>(args(c).seq_lens, b) = 0, at<int32_t>(args(c).gather_lens, b) = 0; };
    };
    auto table = [](int b, int col, int32_t v) {
      return [=](Case& c) { at<int32_t>(args(c).block_table, b, col) = v; };
    };
    t.push_back(skip(D, "seq_len_negative", set("seq", 0, -1), 1, empty_request(0)));
    t.push_back(skip(D, "seq_len_int32_min", set("seq", 1, kI32Min), 1, empty_request(1)));
    t.push_back(skip(D, "gather_len_above_seq_len", set("gather", 0, 8), 1, empty_request(0)));
    t.push_back(skip(D, "gather_len_negative", set("gather", 2, -1), 1, empty_request(2)));
    t.push_back(skip(D, "gather_len_int32_min", set("gather", 1, kI32Min), 1, empty_request(1)));
    t.push_back(skip(
        D, "gather_past_out_rows", [](Case& c) { args(c).offset = 10; }, 9));
    t.push_back(skip(
        D, "offset_at_end_all_rows_counted", [](Case& c) { args(c).offset = kOutRows; }, 20));
    t.push_back(skip(
        D, "out_zero_rows_all_rows_counted", [](Case& c) { args(c).out.shape[1] = 0, args(c).offset = 0; }, 20));
    t.push_back(skip(
        D, "gather_len_int32_max_counted_in_bulk",
        [](Case& c) { at<int32_t>(args(c).seq_lens, 2) = kI32Max, at<int32_t>(args(c).gather_lens, 2) = kI32Max; },
        kI32Max - 12));
    t.push_back(skip(D, "seq_len_beyond_block_table", set("seq", 0, 14), 2));
    t.push_back(skip(D, "block_entry_minus1", table(1, 1, -1), 4));
    t.push_back(skip(D, "block_entry_int32_min", table(0, 0, kI32Min), 2));
    t.push_back(skip(D, "block_entry_num_blocks", table(2, 0, kBlocks), 3));
    t.push_back(skip(D, "block_entry_int32_max", table(1, 2, kI32Max), 4));
    t.push_back(skip(
        D, "gather_lens_absent", [](Case& c) { args(c).gather_lens = TensorView{}; }, 0));
    t.push_back(skip(
        D, "gather_lens_extra_entries_not_read",
        [](Case& c) {
          args(c).gather_lens.shape[0] = 4;
          c.fit();
          at<int32_t>(args(c).gather_lens, 3) = kI32Min;
        },
        0));
    t.push_back(skip(
        D, "no_requests", [](Case& c) { args(c).seq_lens.shape[0] = 0; }, 0));
    t.push_back(skip(
        D, "empty_cache_every_row_counted", [](Case& c) { args(c).k_cache.shape[0] = 0; }, 20));
    t.push_back(skip(
        D, "fnuz_bad_entry",
        [](Case& c) { args(c).format = Fp8Format::kE4M3Fnuz, at<int32_t>(args(c).block_table, 0, 1) = -2; }, 3));
    t.push_back(skip(
        D, "no_counter_bad_request", [](Case& c) { c.count_errors = false, at<int32_t>(args(c).seq_lens, 1) = -5; }, 0,
        [](Case& c) {
          c.count_errors = true, at<int32_t>(args(c).seq_lens, 1) = 0, at<int32_t>(args(c).gather_lens, 1) = 0;
        }));

    // A zero-stride (aliased) output of 2^71 elements: its element count overflows int64.
    t.push_back(contract(D, "out_zero_stride_numel_overflows",
                         [](Case& c) {
                           TensorView& v = args(c).out;
                           v.shape = {4, int64_t{1} << 60, kHeadDim}, v.stride = {0, 0, 1};
                         },
                         {"out has more elements than int64 can count"}));
    t.push_back(contract(D, "block_table_extent_overflows", [=](Case& c) { args(c).block_table.stride[0] = k2p62; },
                         {"block_table spans more bytes than int64 can count"}));

    // Empty views bound none of their strides (their extent is 0): a backend must never offset a
    // pointer by them, not even in a per-request slice of an empty view (fuzz_validate's finding).
    t.push_back(skip(
        D, "out_no_rows_huge_stride",
        [](Case& c) {
          args(c).out.shape[1] = 0, args(c).out.stride[0] = kI64Max - 1, args(c).out.stride[1] = kI64Max / 2;
          args(c).offset = 0;
        },
        5 + 12 + 3));  // every gathered row lies past out.shape[1] = 0
  }
};

}  // namespace bad_inputs

}  // namespace dsv4kv::conformance
