/// \file sparse_gather_properties.hpp
/// \brief RapidCheck generator and properties of dequantize_and_gather_k_cache_sparse, and its registration.
#pragma once

#include "bad_inputs.hpp"
#include "property_common.hpp"
#include "record_model.hpp"
#include "sparse_gather.hpp"

namespace dsv4kv::conformance {

/// A random sparse-gather case over a cache of random bytes, of `record` (nullopt: the 584-byte
/// record half of the time, else a V4.1 record).
inline rc::Gen<SparseGatherTester> gen_sparse_gather(Validity v, std::optional<Record> record = Record::kFp8DsMla) {
  return rc::gen::exec([=] {
    const Record rec = record ? *record : *gen_any_record();
    const int64_t bs = *gen_block_size();
    SparseGatherTester t;
    t.slots(*rc::gen::elementOf(std::vector<int64_t>{0, 1, 2, 7, 33, *rc::gen::inRange<int64_t>(0, 300)}))
        .extra_rows(*rc::gen::inRange<int64_t>(0, 3))
        .out_pad(*rc::gen::elementOf(std::vector<int64_t>{0, 0, 1, 8, 512}))
        .out_shift(*rc::gen::arbitrary<bool>())
        .block_size(bs)
        .num_blocks(*rc::gen::inRange<int64_t>(1, 9))
        .record(rec)
        .stride(*gen_record_stride(rec, bs))
        .fnuz(rec == Record::kFp8DsMla && *rc::gen::arbitrary<bool>())
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

/// The spec page's worked example (spec/operations.md, dequantize_and_gather_k_cache_sparse):
/// B = 64, 4 blocks at vLLM's stride; slot 130 = block 2, position 2 holds in tile 0 the codes
/// 7C F0 62 A0 7F under scale byte 0x78 (2^-7), every other byte 0, first RoPE value 0x3F80;
/// slots {130, -1, 7, 300, -5} give that row, a zero row for slot 7, two reports, and leave
/// rows 1, 3 and 4 untouched.
inline void sparse_gather_spec_example(Backend& be) {
  for (bool fnuz : {false, true}) {
    SparseGatherTester t;
    t.slot_list({130, -1, 7, 300, -5}).num_blocks(4).cache_fill(SparseGatherTester::CacheFill::kZero).fnuz(fnuz);
    t.Prepare();
    const int64_t S = t.stride();
    RC_ASSERT(2 * S + spec::fp8_code_offset(2, 0) == 76032);
    RC_ASSERT(2 * S + spec::scale_offset(64, 2, 0) == 111760);
    RC_ASSERT(2 * S + spec::rope_offset(2) == 76480);
    uint8_t* cache = t.cache_data();
    const uint8_t codes[] = {0x7C, 0xF0, 0x62, 0xA0, 0x7F};
    std::memcpy(cache + 76032, codes, sizeof codes);
    cache[111760] = 0x78;
    cache[76480] = 0x80;
    cache[76481] = 0x3F;
    t.Run(be);
    RC_ASSERT(t.error_count() == 2);  // 300 >= 4 * 64 and -5
    const std::vector<uint16_t> want = fnuz ? std::vector<uint16_t>{0x3FC0, 0xBF00, 0x3E20, 0xBA00, 0x3FF0, 0x0000}
                                            : std::vector<uint16_t>{0x4040, 0xBF80, 0x3EA0, 0xBA80, 0x7FFF, 0x0000};
    for (int v = 0; v < 6; ++v) RC_ASSERT(t.out(0, v) == want[static_cast<size_t>(v)]);
    RC_ASSERT(t.out(0, 64) == 0x0000);  // tile 1: code 0 under scale byte 0
    RC_ASSERT(t.out(0, spec::kNopeDim) == 0x3F80);
    for (int v = 0; v < spec::kHeadDim; ++v) RC_ASSERT(t.out(2, v) == 0x0000);  // slot 7: all zero bytes
    const uint16_t fill = static_cast<uint16_t>(kFillByte | (kFillByte << 8));
    for (int row : {1, 3, 4})
      for (int v = 0; v < spec::kHeadDim; ++v) RC_ASSERT(t.out(row, v) == fill);
  }
}

/// V4.1 records: row i of a read slot holds the independent double-arithmetic decoding of the
/// slot's token (record_model.hpp); every other byte of `out` keeps 0xA5; the counter holds the
/// out-of-range slots plus one report per read token with a NaN scale byte.
inline void sparse_gather_records_decode_like_the_model(Backend& be) {
  const Record r = *gen_v41_record();
  SparseGatherTester t = *gen_sparse_gather(props::draw_validity(), r);
  t.Run(be);
  const spec::RecordLayout L = spec::record_layout(r);
  GuardedBuffer expected(t.out_buffer().size());
  const int64_t B = t.block_size();
  int64_t nan_scales = 0;
  for (int64_t i = 0; i < t.slots(); ++i) {
    if (!t.slot_valid(i)) continue;
    const int64_t blk = spec::slot_block(t.slot(i), B), pos = spec::slot_pos(t.slot(i), B);
    std::vector<uint8_t> block(static_cast<size_t>(t.stride()));
    for (int64_t o = 0; o < t.stride(); ++o) block[o] = t.cache_byte(blk, o);
    nan_scales += model_nan_scale(r, block.data(), B, pos) ? 1 : 0;
    for (int c = 0; c < L.head_dim; ++c)
      expected.store<uint16_t>(t.out_index(i, c), model_decode(r, block.data(), B, pos, c));
  }
  require_empty(first_mismatch(expected.bytes(), t.out_buffer().bytes(), "out"));
  require_empty(check_all_guards(t.buffers()));
  RC_ASSERT(int64_t{t.error_count()} == (t.count_errors_enabled() ? t.expected_error_count() + nan_scales : 0));
}

}  // namespace props

/// The SparseGather suite: its differential case and its properties (registered once for every backend).
template <>
struct OpSuite<SparseGatherArgs> {
  static constexpr const char* kPrefix = "SparseGather";
  static rc::Gen<SparseGatherTester> differential_case(Validity v) {
    return gen_sparse_gather(v, /*record=*/std::nullopt);
  }
  /// Deliberate bugs applied after the reference's call, each with the property that must catch it.
  static std::vector<SeededBug<SparseGatherArgs>> seeded_bugs() {
    return {
        // The row after the last slot (a row >= N, or padding between rows) is written.
        {"SparseGatherEqualsDenseGather",
         [](const SparseGatherArgs& a) {
           const int64_t n = a.slot_indices.shape[0];
           if (n > 0 && a.out.shape[0] > n)
             a.out.as<uint16_t>()[n * a.out.stride[0]] ^= 1;
           else if (n > 0 && a.error_count != nullptr)
             ++*a.error_count;
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
  /// Large cases for the CUDA smoke test (CudaSmoke.LargeSparseGather): 200,000 and 20,000 slots
  /// (25,000 and 2,500 CTAs of 8 rows), both slot dtypes, and both launches: vLLM's block stride
  /// takes the 16-byte aligned one, a stride with a 2-byte tail (and the shifted `out`) the one
  /// that tests addresses. (The grid-stride loop only runs past 2^31 - 1 CTAs: not drawn here.)
  static std::vector<SparseGatherTester> large_cases() {
    std::vector<SparseGatherTester> v;
    for (bool i64 : {false, true})
      for (int64_t bs : {64, 7}) {
        const int64_t stride = i64 ? spec::block_data_bytes(bs) + 2 : spec::vllm_block_stride(bs);
        v.push_back(SparseGatherTester()
                        .slots(i64 ? 20000 : 200000)
                        .block_size(bs)
                        .num_blocks(512)
                        .stride(stride)
                        .int64_slots(i64)
                        .invalid_fraction(0.02)
                        .padding_fraction(0.05)
                        .seed(static_cast<uint64_t>(bs + i64)));
      }
    v.push_back(SparseGatherTester().slots(5000).out_pad(8).out_shift(true).num_blocks(64).fnuz(true).seed(3));
    // Every (scale byte, code) pair in every lane position, read in reverse order (no two
    // neighbouring rows read neighbouring slots), at both strides and in both formats.
    std::vector<int64_t> reversed(1024);
    for (int64_t t = 0; t < 1024; ++t) reversed[static_cast<size_t>(t)] = 1023 - t;
    for (bool fnuz : {false, true})
      for (int64_t stride : {spec::vllm_block_stride(64), spec::block_data_bytes(64) + 2})
        v.push_back(SparseGatherTester().slot_list(reversed).num_blocks(16).stride(stride).fnuz(fnuz).cache_fill(
            SparseGatherTester::CacheFill::kEveryCodeUnderEveryScale));
    return v;
  }
  /// The worked example of dequantize_and_gather_k_cache_sparse (spec/operations.md, its example),
  /// run through the reference (SpecExamples.SparseGather); the same check is also a property on
  /// every backend (SparseGatherSpecExample).
  static void spec_example() { props::sparse_gather_spec_example(reference_backend()); }
  static std::vector<Property> properties() {
    return {
        {"SparseGatherEqualsDenseGather",
         [](Backend& be) { props::sparse_gather_equals_dense_gather(be, Validity::kValid); }},
        {"SparseGatherInvalidSlotsSkippedAndCounted",
         [](Backend& be) { props::sparse_gather_equals_dense_gather(be, Validity::kInvalid); }},
        {"SparseGatherRowsFollowTheSpec", [](Backend& be) { props::sparse_gather_rows_follow_the_spec(be); }},
        {"RecordsSparseGatherDecodesLikeTheModel",
         [](Backend& be) { props::sparse_gather_records_decode_like_the_model(be); }},
        {"SparseGatherSpecExample", [](Backend& be) { props::sparse_gather_spec_example(be); }, 0.05},
    };
  }
};
// ---------------------------------------------------------------------------
// Bad inputs (conformance/bad_inputs_test.cpp runs them; bad_inputs.hpp has the machinery)
// ---------------------------------------------------------------------------

namespace bad_inputs {

/// The bad-input rows of `SparseGatherArgs`: its valid base case, every way an argument can be wrong,
/// and what must happen (bad_inputs.hpp).
template <>
struct OpRows<SparseGatherArgs> {
  /// The prefix of the rows' test names.
  static constexpr const char* kPrefix = "dequantize_and_gather_k_cache_sparse";
  static constexpr int64_t kBlockSize = 4;
  static constexpr int64_t kBlocks = 5;
  static constexpr int64_t kBlockStride = kBlockSize * spec::kTokenBytes + 2;

  static SparseGatherArgs& args(Case& c) { return c.get<SparseGatherArgs>(); }
  static const SparseGatherArgs& args(const Case& c) { return c.get<SparseGatherArgs>(); }

  /// The valid base case (small, with strided views, row padding and a block-stride tail).
  static void base_case(Case& c) {
    // Six int32 slots (one -1) over 5 blocks of block size 4 whose stride has a 2-byte tail; out has
    // one row past N and padded rows.
    SparseGatherTester tester;  // owns the buffers adopt() copies
    SparseGatherArgs a = tester.slot_list({5, -1, 13, 0, 19, 7})
                             .extra_rows(1)
                             .out_pad(8)
                             .block_size(kBlockSize)
                             .num_blocks(kBlocks)
                             .stride(kBlockStride)
                             .seed(66)
                             .args();
    a.k_cache.shape[1] = kBlockSize * spec::kTokenBytes;  // rows of the block data; the tail is stride only
    c.adopt(a);
  }

  /// The bytes it may write: the rows of `out` whose slots lie inside the cache.
  static void written(Case& c, Allowed& a) {
    const SparseGatherArgs& sg = args(c);
    const size_t oi = c.slot_index(&sg.out);
    const CacheGeometry g = validate(sg);
    const ptrdiff_t base = static_cast<uint8_t*>(sg.out.data) - c.slots[oi].buf->data();
    for (int64_t i = 0; i < sg.slot_indices.shape[0]; ++i) {
      const int64_t s = sg.slot_indices.dtype == DType::kI64 ? at<int64_t>(sg.slot_indices, i)
                                                             : int64_t{at<int32_t>(sg.slot_indices, i)};
      if (s < 0 || s / g.block_size >= g.num_blocks) continue;
      for (int64_t k = 0; k < kHeadDim * 2; ++k) a[oi][base + i * sg.out.stride[0] * 2 + k] = true;
    }
  }

  /// Sparse gather: every row of a slot inside the cache holds its token; returns the spec's error count.
  static int64_t model_count(Case& c) {
    const SparseGatherArgs& d = args(c);
    const CacheGeometry g = validate(d);
    int64_t errors = 0;
    for (int64_t i = 0; i < d.slot_indices.shape[0]; ++i) {
      const int64_t s = d.slot_indices.dtype == DType::kI64 ? at<int64_t>(d.slot_indices, i)
                                                            : int64_t{at<int32_t>(d.slot_indices, i)};
      if (s == -1) continue;
      if (s < 0 || s / g.block_size >= g.num_blocks) {
        ++errors;
        continue;
      }
      const uint8_t* block = g.base + spec::block_offset(s / g.block_size, g.block_stride);
      if (!token_row_matches(
              block, g.block_size, s % g.block_size, d.format, [&](int e) { return at<uint16_t>(d.out, i, e); },
              "out[" + std::to_string(i) + ", "))
        return errors;
    }
    return errors;
  }

  static void rows(std::vector<Row>& t) {
    const Op S = op_index<SparseGatherArgs>;
    t.push_back(contract(S, "slot_indices_missing", [](Case& c) { args(c).slot_indices = TensorView{}; },
                         {"slot_indices is required"}));
    t.push_back(contract(S, "slot_indices_uint8", [](Case& c) { args(c).slot_indices.dtype = DType::kU8; },
                         {"slot_indices must be int32 or int64, got uint8"}));
    t.push_back(contract(S, "slot_indices_bf16", [](Case& c) { args(c).slot_indices.dtype = DType::kBF16; },
                         {"slot_indices must be int32 or int64, got bfloat16"}));
    t.push_back(contract(S, "slot_indices_rank2", [](Case& c) { rank(args(c).slot_indices, 2); },
                         {"slot_indices must have rank 1, got 2"}));
    t.push_back(contract(S, "slot_indices_stride2", [](Case& c) { args(c).slot_indices.stride[0] = 2; },
                         {"slot_indices must have unit stride in its last dimension, got 2"}));
    t.push_back(contract(S, "slot_indices_misaligned", [](Case& c) { misalign(args(c).slot_indices, 2); },
                         {"slot_indices must be aligned to 4 bytes (its element size), got address 0x"}));
    t.push_back(contract(S, "out_missing", [](Case& c) { args(c).out = TensorView{}; }, {"out is required"}));
    t.push_back(
        contract(S, "out_dtype", [](Case& c) { args(c).out.dtype = DType::kU8; }, {"out must be bfloat16, got uint8"}));
    t.push_back(contract(S, "record_out_width", [](Case& c) { args(c).record = Record::kMxfp4Indexer; },
                         {"out must have 128 columns, got 512"}));
    t.push_back(
        contract(S, "record_unknown", [](Case& c) { args(c).record = static_cast<Record>(200); },
                 {"record must be fp8_ds_mla, mxfp8_ds_mla, nvfp4_ds_mla or mxfp4_indexer, got the value 200"}));
    t.push_back(contract(S, "out_448_columns", [](Case& c) { args(c).out.shape[1] = kNopeDim; },
                         {"out must have 512 columns, got 448"}));
    t.push_back(contract(S, "out_fewer_rows_than_slots", [](Case& c) { args(c).out.shape[0] = 5; },
                         {"out must have at least 6 rows (one per slot), got 5"}));
    t.push_back(contract(S, "out_inner_stride", [](Case& c) { args(c).out.stride[1] = 2; },
                         {"out must have unit stride in its last dimension, got 2"}));
    t.push_back(
        contract(S, "out_misaligned", [](Case& c) { misalign(args(c).out, 1); }, {"out must be aligned to 2 bytes"}));
    t.push_back(
        contract(S, "block_size_0", [](Case& c) { args(c).block_size = 0; }, {"block_size must be >= 1, got 0"}));
    t.push_back(contract(S, "block_size_past_int32", [](Case& c) { args(c).block_size = int64_t{1} << 31; },
                         {"block_size must fit in int32, got 2147483648"}));
    t.push_back(contract(S, "block_stride_odd", [](Case& c) { args(c).k_cache.stride[0] = kBlockStride + 1; },
                         {"k_cache block stride must be even"}));
    // An odd base with an even stride (a view starting at an odd byte): on the GPU a misaligned
    // 2-byte access, which would end the CUDA context.
    t.push_back(contract(S, "k_cache_misaligned", [](Case& c) { misalign(args(c).k_cache, 1); },
                         {"k_cache must be aligned to 2 bytes (bf16 RoPE values are 2-byte aligned), got address 0x"}));
    t.push_back(
        contract(S, "k_cache_missing", [](Case& c) { args(c).k_cache = TensorView{}; }, {"k_cache is required"}));

    auto slot = [](int64_t i, int64_t v) {
      return [=](Case& c) {
        if (args(c).slot_indices.dtype == DType::kI64)
          at<int64_t>(args(c).slot_indices, i) = v;
        else
          at<int32_t>(args(c).slot_indices, i) = static_cast<int32_t>(v);
      };
    };
    // Slots 0..4 hold 5, -1, 13, 0, 19, 7 (cache capacity 5 x 4 = 20); a skipped slot's row is the
    // row of a -1 (the sanitized input).
    t.push_back(skip(S, "slot_num_tokens", slot(0, kBlocks * kBlockSize), 1, slot(0, -1)));
    t.push_back(skip(S, "slot_minus2", slot(3, -2), 1, slot(3, -1)));
    t.push_back(skip(S, "slot_int32_min", slot(2, kI32Min), 1, slot(2, -1)));
    t.push_back(skip(S, "slot_int32_max", slot(4, kI32Max), 1, slot(4, -1)));
    t.push_back(skip(
        S, "all_padding",
        [](Case& c) {
          for (int64_t i = 0; i < 6; ++i) at<int32_t>(args(c).slot_indices, i) = -1;
        },
        0));
    t.push_back(skip(
        S, "no_slots", [](Case& c) { args(c).slot_indices.shape[0] = 0; }, 0));
    t.push_back(skip(
        S, "empty_cache_every_slot_counted", [](Case& c) { args(c).k_cache.shape[0] = 0; }, 5));
    t.push_back(skip(
        S, "fnuz_bad_slot",
        [](Case& c) { args(c).format = Fp8Format::kE4M3Fnuz, at<int32_t>(args(c).slot_indices, 5) = -7; }, 1));
    const int32_t base_slots[6] = {5, -1, 13, 0, 19, 7};
    auto widen = [=](int64_t i, int64_t v) {
      return [=](Case& c) {  // the same slots as int64, slot i replaced by v
        args(c).slot_indices.dtype = DType::kI64;
        c.fit();
        for (int64_t j = 0; j < 6; ++j) at<int64_t>(args(c).slot_indices, j) = j == i ? v : base_slots[j];
      };
    };
    t.push_back(skip(S, "int64_slot_past_int32", widen(2, (int64_t{1} << 40) + 3), 1, widen(2, -1)));
    t.push_back(skip(S, "int64_slot_int64_min", widen(0, kI64Min), 1, widen(0, -1)));
    t.push_back(skip(
        S, "no_counter_bad_slot", [](Case& c) { c.count_errors = false, at<int32_t>(args(c).slot_indices, 0) = 99; }, 0,
        [](Case& c) { c.count_errors = true, at<int32_t>(args(c).slot_indices, 0) = -1; }));
  }
};

}  // namespace bad_inputs

}  // namespace dsv4kv::conformance
