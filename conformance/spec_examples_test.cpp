// The worked examples printed in spec/numerics.md and spec/operations.md, run through the
// reference: if a page's example and the implementation disagree, this fails and names the page.
#include <gtest/gtest.h>

#include <vector>

#include "dsv4kv/reference.hpp"

namespace {

namespace S = dsv4kv::spec;
using dsv4kv::DType;
using dsv4kv::TensorView;

TEST(SpecExamples, NumericsTileExample) {  // spec/numerics.md, "Worked example"
  const S::TileScale ts = S::tile_scale(3.0f, S::Fp8Format::kE4M3Fn);
  EXPECT_EQ(ts.exponent, -7);
  EXPECT_EQ(ts.byte, 0x78);
  const uint16_t x[] = {0x4040, 0xBF80, 0x3E9A, 0xBA83, 0x403A, 0x0000, 0x8000, 0x3A80};
  const uint8_t code[] = {0x7C, 0xF0, 0x62, 0xA0, 0x7C, 0x00, 0x80, 0x20};
  const uint16_t back[] = {0x4040, 0xBF80, 0x3EA0, 0xBA80, 0x4040, 0x0000, 0x8000, 0x3A80};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(S::quantize_element(x[i], ts, S::Fp8Format::kE4M3Fn), code[i]) << "element " << i;
    EXPECT_EQ(S::dequantize_element(code[i], ts.byte, S::Fp8Format::kE4M3Fn), back[i]) << "element " << i;
  }
  const S::TileScale tu = S::tile_scale(3.0f, S::Fp8Format::kE4M3Fnuz);
  EXPECT_EQ(tu.byte, 121);
  EXPECT_EQ(S::quantize_element(0x3E9A, tu, S::Fp8Format::kE4M3Fnuz), 0x62);
  EXPECT_EQ(S::quantize_element(0x8000, tu, S::Fp8Format::kE4M3Fnuz), 0x00);
  // Ties at scale 1.
  const S::TileScale one = S::tile_scale(448.0f, S::Fp8Format::kE4M3Fn);
  EXPECT_EQ(S::quantize_element(S::f32_to_bf16_rne(17.0f), one, S::Fp8Format::kE4M3Fn), 0x58);
  EXPECT_EQ(S::quantize_element(S::f32_to_bf16_rne(19.0f), one, S::Fp8Format::kE4M3Fn), 0x5A);
}

TEST(SpecExamples, NumericsScaleTable) {  // spec/numerics.md, "The scale of a tile"
  struct Row { uint16_t amax; int e_fn, byte_fn, e_fnuz, byte_fnuz; };
  const Row rows[] = {{0x0000, -22, 105, -21, 106}, {0x38E0, -22, 105, -21, 106}, {0x38E1, -21, 106, -20, 107},
                      {0x3F00, -9, 118, -8, 119},   {0x4040, -7, 120, -6, 121},   {0x40E0, -6, 121, -5, 122},
                      {0x43E0, 0, 127, 1, 128},     {0x7F7F, 120, 247, 121, 248}};
  for (const Row& r : rows) {
    const auto a = S::tile_scale(S::bf16_to_f32(r.amax), S::Fp8Format::kE4M3Fn);
    const auto b = S::tile_scale(S::bf16_to_f32(r.amax), S::Fp8Format::kE4M3Fnuz);
    EXPECT_EQ(a.exponent, r.e_fn) << std::hex << r.amax;
    EXPECT_EQ(a.byte, r.byte_fn) << std::hex << r.amax;
    EXPECT_EQ(b.exponent, r.e_fnuz) << std::hex << r.amax;
    EXPECT_EQ(b.byte, r.byte_fnuz) << std::hex << r.amax;
  }
}

TEST(SpecExamples, NumericsTopOfBf16) {  // spec/numerics.md, section numerics_top
  // With scale 2^120, |x| >= 248 * 2^120 rounds to 256 * 2^120 = 2^128, which dequantizes to +-inf.
  const auto F = S::Fp8Format::kE4M3Fn;
  const S::TileScale ts = S::tile_scale(S::bf16_to_f32(0x7F7F), F);
  ASSERT_EQ(ts.byte, 247);
  const struct { uint16_t x; uint8_t code; uint16_t back; } rows[] = {
      {0x7F77, 0x77, 0x7F70}, {0x7F78, 0x78, 0x7F80}, {0x7F7F, 0x78, 0x7F80}, {0xFF7F, 0xF8, 0xFF80}};
  for (const auto& r : rows) {
    EXPECT_EQ(S::quantize_element(r.x, ts, F), r.code) << std::hex << r.x;
    EXPECT_EQ(S::dequantize_element(r.code, ts.byte, F), r.back) << std::hex << r.x;
  }
}

TEST(SpecExamples, NumericsDequantizeTable) {  // spec/numerics.md, "Dequantizing one element"
  const auto F = S::Fp8Format::kE4M3Fn;
  EXPECT_EQ(S::dequantize_element(0x7C, 120, F), 0x4040);
  EXPECT_EQ(S::dequantize_element(0x7E, 0, F), 0x0000);
  EXPECT_EQ(S::dequantize_element(0x08, 1, F), 0x0002);
  EXPECT_EQ(S::dequantize_element(0x01, 1, F), 0x0000);
  EXPECT_EQ(S::dequantize_element(0x7E, 254, F), 0x7F80);
  EXPECT_EQ(S::dequantize_element(0x38, 255, F), 0x7F80);
  EXPECT_EQ(S::dequantize_element(0xB8, 255, F), 0xFF80);
  EXPECT_EQ(S::dequantize_element(0x00, 255, F), 0x7FFF);
  EXPECT_EQ(S::dequantize_element(0x7F, 127, F), 0x7FFF);
  EXPECT_EQ(S::dequantize_element(0x80, 127, S::Fp8Format::kE4M3Fnuz), 0x7FFF);
}

TEST(SpecExamples, QuantizeSlots) {  // spec/operations.md, quantize example
  const int64_t B = 64, blocks = 4, stride = S::vllm_block_stride(B);
  std::vector<uint16_t> k(5 * S::kHeadDim, 0x3F80);
  k[5] = 0x7FC0;  // one NaN among token 0's NoPE values
  std::vector<uint8_t> cache(blocks * stride, 0xA5);
  std::vector<int64_t> slots = {130, -1, 7, 300, -5};
  int32_t errors = 0;
  dsv4kv::QuantizeInsertArgs a;
  a.k = TensorView::mat(k.data(), DType::kBF16, 5, S::kHeadDim);
  a.k_cache = TensorView::mat(cache.data(), DType::kU8, blocks, stride);
  a.slot_mapping = TensorView::vec(slots.data(), DType::kI64, 5);
  a.error_count = &errors;
  dsv4kv::reference::quantize_and_insert_k_cache(a);
  EXPECT_EQ(errors, 3);  // slots 300 and -5, plus the NaN
  EXPECT_EQ(cache[2 * stride + S::scale_offset(B, 2, S::kScalePadIndex)], 0);
  EXPECT_EQ(cache[0 * stride + S::scale_offset(B, 7, S::kScalePadIndex)], 0);
}

TEST(SpecExamples, GatherRowsPastTheEnd) {  // spec/operations.md, dequantize example
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

TEST(SpecExamples, GlobalTopk) {  // spec/operations.md, compute_global_topk example
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

std::vector<int32_t> combine_row(int32_t left, int32_t* len, int32_t* errors) {
  const int64_t T = 5, width = 128;
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
  if (left > 0) {
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

TEST(SpecExamples, Combine) {  // spec/operations.md, combine example
  int32_t len = 0, errors = 0;
  const auto row = combine_row(0, &len, &errors);
  const std::vector<int32_t> head = {105, -1, -1, 108, 109, 110, 111};
  EXPECT_EQ(std::vector<int32_t>(row.begin(), row.begin() + 7), head);
  for (size_t c = 7; c < row.size(); ++c) EXPECT_EQ(row[c], -1) << "column " << c;
  EXPECT_EQ(len, 7);
  EXPECT_EQ(errors, 1);
  // With left_visible 5 the window would start at 1; the clamp keeps it at gather_start 3.
  errors = 0;
  const auto widened = combine_row(5, &len, &errors);
  EXPECT_EQ(std::vector<int32_t>(widened.begin(), widened.begin() + 7), head);
  EXPECT_EQ(len, 7);
}

TEST(SpecExamples, MixedSparse) {  // spec/operations.md, mixed example
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

}  // namespace
