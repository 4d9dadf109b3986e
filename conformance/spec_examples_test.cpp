// The worked examples printed in spec/numerics.md and spec/operations.md, run through the
// reference: if a page's example and the implementation disagree, this fails and names the page.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

// ceil(log2 q) of a positive finite float, exactly.
int ceil_log2(float q) {
  int e = 0;
  const float m = std::frexp(q, &e);  // q = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? e - 1 : e;
}

TEST(SpecExamples, NumericsFloorVariants) {  // spec/numerics.md, "Other implementations' floors"
  // Over every finite non-negative bf16 amax: SGLang's floor (1e-8 on amax) gives a different exponent
  // exactly for amax <= 448 * 2^-23, FlashMLA's (1e-4 on amax / 448) exactly for amax <= 448 * 2^-14.
  const auto F = S::Fp8Format::kE4M3Fn;
  const float fmax = S::fp8_traits(F).quant_max;
  const float sglang_limit = std::ldexp(fmax, -23), flashmla_limit = std::ldexp(fmax, -14);
  int sglang_min = 0, flashmla_min = 0;
  for (uint32_t h = 0; h < 0x7F80u; ++h) {
    const float a = S::bf16_to_f32(static_cast<uint16_t>(h));
    const int ours = S::tile_scale(a, F).exponent;
    const int sglang = ceil_log2(std::max(a, 1e-8f) / fmax);
    const int flashmla = ceil_log2(std::max(a / fmax, 1e-4f));
    EXPECT_EQ(sglang != ours, a <= sglang_limit) << "amax " << a;
    EXPECT_EQ(flashmla != ours, a <= flashmla_limit) << "amax " << a;
    sglang_min = std::min(sglang_min, sglang);
    flashmla_min = std::min(flashmla_min, flashmla);
  }
  EXPECT_EQ(sglang_min, -35);
  EXPECT_EQ(flashmla_min, -13);
  EXPECT_NEAR(sglang_limit, 5.34e-5f, 0.01e-5f);  // the figure the page prints
}

TEST(SpecExamples, NumericsFloorExponent) {  // spec/numerics.md, "The scale of a tile"
  for (const auto f : {S::Fp8Format::kE4M3Fn, S::Fp8Format::kE4M3Fnuz}) {
    const S::TileScale zero = S::tile_scale(0.0f, f);
    EXPECT_EQ(zero.exponent, S::floor_exponent(f));
    EXPECT_EQ(zero.byte, S::kScaleBias + S::floor_exponent(f));
    EXPECT_EQ(S::tile_scale(std::numeric_limits<float>::infinity(), f).byte, S::kInfScaleByte);
  }
  EXPECT_EQ(S::floor_exponent(S::Fp8Format::kE4M3Fn), -22);
  EXPECT_EQ(S::floor_exponent(S::Fp8Format::kE4M3Fnuz), -21);
}

TEST(SpecExamples, NumericsScaleByteEnds) {  // spec/numerics.md, "The multiplier of a byte"
  // 2^(s - 127) holds for bytes 1..254 only: byte 0 is +0 (not 2^-127), byte 255 is +inf (not NaN).
  EXPECT_EQ(S::f32_bits(S::scale_multiplier(0)), 0u);
  EXPECT_EQ(S::f32_bits(S::scale_multiplier(S::kInfScaleByte)), 0x7F800000u);
  for (int s = 1; s <= 254; ++s)
    EXPECT_EQ(S::scale_multiplier(static_cast<uint8_t>(s)), std::ldexp(1.0f, s - S::kScaleBias)) << "byte " << s;
  // Under byte 0 every non-NaN code gives a zero of its sign (negative codes: 0x8000); under byte 255
  // nonzero codes give +-inf and zero codes NaN; NaN codes give 0x7FFF under both.
  for (const auto f : {S::Fp8Format::kE4M3Fn, S::Fp8Format::kE4M3Fnuz}) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const bool nan = S::fp8_is_nan(code, f), neg = (code & 0x80u) != 0;
      const bool zero = !nan && S::fp8_decode(code, f) == 0.0f;
      EXPECT_EQ(S::dequantize_element(code, 0, f), nan ? 0x7FFF : (neg ? 0x8000 : 0x0000)) << "code " << c;
      EXPECT_EQ(S::dequantize_element(code, S::kInfScaleByte, f),
                nan || zero ? 0x7FFF : (neg ? 0xFF80 : 0x7F80))
          << "code " << c;
    }
  }
  EXPECT_EQ(S::dequantize_element(0xFE, 0, S::Fp8Format::kE4M3Fn), 0x8000);  // the page's table row
}

TEST(SpecExamples, NumericsNanCodes) {  // spec/numerics.md, "FP8 formats": e4m3fn NaNs are 0x7F and 0xFF
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    EXPECT_EQ(S::fp8_is_nan(code, S::Fp8Format::kE4M3Fn), (code & S::kFp8MagnitudeMask) == S::kE4M3FnNanMagnitude)
        << "code " << c;
    EXPECT_EQ(S::fp8_is_nan(code, S::Fp8Format::kE4M3Fnuz), c == 0x80) << "code " << c;
  }
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

/// Row of token 2 of the combine example of spec/operations.md. `visibility` passes the arrays
/// (all 0 except left_visible[2] = left); max_image_tokens is the model's image width.
std::vector<int32_t> combine_row(bool visibility, int32_t left, int64_t max_image_tokens, int32_t* len,
                                 int32_t* errors) {
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

TEST(SpecExamples, Combine) {  // spec/operations.md, combine example
  // The 8 (>= N) is vLLM's 108, the -1 stays -1 (vLLM: 99); window [3, 7) -> rows 108..111; no report.
  const std::vector<int32_t> head = {105, -1, 108, 108, 109, 110, 111};
  for (const bool visibility : {false, true}) {
    int32_t len = 0, errors = 0;
    const auto row = combine_row(visibility, 0, 6, &len, &errors);
    ASSERT_EQ(row.size(), 128u);
    EXPECT_EQ(std::vector<int32_t>(row.begin(), row.begin() + 7), head);
    for (size_t c = 7; c < row.size(); ++c) EXPECT_EQ(row[c], -1) << "column " << c;
    EXPECT_EQ(len, 7);
    EXPECT_EQ(errors, 0);
  }
  // left_visible 5 starts the window at 1, before gather_start 3: the clamp keeps the same row.
  int32_t len = 0, errors = 0;
  auto row = combine_row(true, 5, 6, &len, &errors);
  EXPECT_EQ(std::vector<int32_t>(row.begin(), row.begin() + 7), head);
  EXPECT_EQ(row[7], -1);
  EXPECT_EQ(len, 7);
  EXPECT_EQ(errors, 0);
  // max_image_tokens 0: the visibility arrays are not read, so neither left 5 nor a negative value
  // (which would be a report if read) changes anything.
  for (const int32_t left : {5, -3}) {
    errors = 0;
    row = combine_row(true, left, 0, &len, &errors);
    EXPECT_EQ(std::vector<int32_t>(row.begin(), row.begin() + 7), head) << "left " << left;
    EXPECT_EQ(len, 7);
    EXPECT_EQ(errors, 0) << "left " << left;
  }
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
