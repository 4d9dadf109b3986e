// CUDA against the reference on exhaustive numeric sweeps and a few large cases.
//
// The CUDA kernels convert OCP e4m3fn values with Hopper's conversion
// instructions and fall back to the spec's integer rules only for non-finite
// data (cuda/src/fp8.cuh says why). These tests sweep every input those fast
// paths can see and require the reference's bytes:
//   - quantize: every (bf16 value, tile exponent) pair a finite tile can
//     produce (~6.9 million), in both FP8 formats;
//   - dequantize: every (scale byte, code) pair, in both formats, with a
//     16-byte aligned and an unaligned (even, not a multiple of 16) block stride;
// plus large random cases of every operation (the property suite draws small
// ones) run twice on the device to check run-to-run identity.
// Without a usable GPU every test is SKIPPED with the reason.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend.hpp"
#include "property_suite.hpp"
#include "testers.hpp"

namespace dsv4kv::conformance {
namespace {

namespace sp = dsv4kv::spec;

// ---------------------------------------------------------------------------
// quantize: every (x, e) pair
// ---------------------------------------------------------------------------

/// bf16 bits of the tile amax that makes the UE8M0 exponent exactly e:
/// 448 * 2^e (1.75 * 2^(e + 8)), or the bf16 maximum for e = 120.
uint16_t amax_for_exponent(int e) {
  if (e >= 120) return 0x7F7F;
  return static_cast<uint16_t>(((135 + e) << 7) | 0x60);
}

/// k rows whose tiles each hold one exponent's amax and then 63 values at or
/// below it: together every finite bf16 value of both signs under every
/// exponent a finite tile can get ([-22, 120]).
std::vector<uint16_t> exhaustive_quantize_rows(int64_t* tokens) {
  std::vector<std::vector<uint16_t>> tiles;
  for (int e = -22; e <= 120; ++e) {
    const uint16_t amax = amax_for_exponent(e);
    std::vector<uint16_t> values;
    for (uint32_t m = 0; m <= amax; ++m) {
      values.push_back(static_cast<uint16_t>(m));
      values.push_back(static_cast<uint16_t>(m | 0x8000u));
    }
    for (size_t i = 0; i < values.size(); i += sp::kTileSize - 1) {
      std::vector<uint16_t> tile(sp::kTileSize, 0);
      tile[0] = amax;
      for (size_t j = 0; j + 1 < static_cast<size_t>(sp::kTileSize) && i + j < values.size(); ++j)
        tile[j + 1] = values[i + j];
      tiles.push_back(std::move(tile));
    }
  }
  *tokens = static_cast<int64_t>((tiles.size() + sp::kNumTiles - 1) / sp::kNumTiles);
  std::vector<uint16_t> k(static_cast<size_t>(*tokens) * sp::kHeadDim, 0);
  std::mt19937 rng(7);
  for (int64_t t = 0; t < *tokens; ++t) {
    for (int j = 0; j < sp::kNumTiles; ++j) {
      const size_t u = static_cast<size_t>(t) * sp::kNumTiles + j;
      if (u < tiles.size())
        std::memcpy(&k[t * sp::kHeadDim + j * sp::kTileSize], tiles[u].data(), sp::kTileSize * sizeof(uint16_t));
    }
    for (int i = sp::kNopeDim; i < sp::kHeadDim; ++i) k[t * sp::kHeadDim + i] = static_cast<uint16_t>(rng());
  }
  return k;
}

void run_quantize_sweep(Backend& be, Fp8Format fmt, int64_t stride, std::vector<uint16_t>& k, int64_t tokens,
                        std::vector<uint8_t>& cache, int32_t* errors) {
  const int64_t bs = 64;
  const int64_t blocks = (tokens + bs - 1) / bs;
  cache.assign(static_cast<size_t>(blocks * stride), 0x5A);
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) slots[t] = t;
  QuantizeInsertArgs a;
  a.k = TensorView::mat(k.data(), DType::kBF16, tokens, sp::kHeadDim);
  a.k_cache = TensorView::mat(cache.data(), DType::kU8, blocks, stride);
  a.slot_mapping = TensorView::vec(slots.data(), DType::kI64, tokens);
  a.block_size = bs;
  a.format = fmt;
  *errors = 0;
  a.error_count = errors;
  be.quantize_and_insert_k_cache(a);
}

TEST(CudaSmoke, QuantizeEveryValueUnderEveryExponent) {
  DSV4KV_CUDA_OR_SKIP(cuda);
  int64_t tokens = 0;
  std::vector<uint16_t> k = exhaustive_quantize_rows(&tokens);
  for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    for (int64_t stride : {sp::vllm_block_stride(64), sp::block_data_bytes(64) + 2}) {
      std::vector<uint8_t> expected, got;
      int32_t e_ref = 0, e_cuda = 0;
      run_quantize_sweep(reference_backend(), fmt, stride, k, tokens, expected, &e_ref);
      run_quantize_sweep(*cuda, fmt, stride, k, tokens, got, &e_cuda);
      const std::string what = std::string(fmt == Fp8Format::kE4M3Fn ? "e4m3fn" : "e4m3fnuz") + " stride " +
                               std::to_string(stride) + " cache";
      EXPECT_EQ(first_mismatch(expected, got, what), "");
      EXPECT_EQ(e_ref, e_cuda) << what;
    }
  }
}

// ---------------------------------------------------------------------------
// dequantize: every (scale byte, code) pair
// ---------------------------------------------------------------------------

TEST(CudaSmoke, DequantizeEveryScaleAndCode) {
  DSV4KV_CUDA_OR_SKIP(cuda);
  const int64_t bs = 64;
  // Tile u holds codes (u % 4) * 64 + i under scale byte (u / 4) % 256: 1024 tiles cover all pairs.
  const int64_t tiles = 256 * 4;
  const int64_t tokens = (tiles + sp::kNumTiles - 1) / sp::kNumTiles;
  const int64_t blocks = (tokens + bs - 1) / bs;
  for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    for (int64_t stride : {sp::vllm_block_stride(bs), sp::block_data_bytes(bs) + 6}) {
      std::vector<uint8_t> cache(static_cast<size_t>(blocks * stride));
      std::mt19937 rng(11);
      for (auto& b : cache) b = static_cast<uint8_t>(rng());
      for (int64_t t = 0; t < tokens; ++t) {
        uint8_t* block = cache.data() + sp::block_offset(t / bs, stride);
        for (int j = 0; j < sp::kNumTiles; ++j) {
          const int64_t u = (t * sp::kNumTiles + j) % tiles;
          block[sp::scale_offset(bs, t % bs, j)] = static_cast<uint8_t>((u / 4) % 256);
          for (int i = 0; i < sp::kTileSize; ++i)
            block[sp::fp8_code_offset(t % bs, j * sp::kTileSize + i)] = static_cast<uint8_t>((u % 4) * 64 + i);
        }
      }
      std::vector<int32_t> seq_lens{static_cast<int32_t>(tokens)};
      std::vector<int32_t> table(static_cast<size_t>(blocks));
      for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(b);
      auto run = [&](Backend& be, std::vector<uint8_t>& out) {
        out.assign(static_cast<size_t>(tokens * sp::kHeadDim * 2), 0xA5);
        DequantizeGatherArgs a;
        a.out = TensorView::cube(out.data(), DType::kBF16, 1, tokens, sp::kHeadDim);
        a.k_cache = TensorView::mat(cache.data(), DType::kU8, blocks, stride);
        a.seq_lens = TensorView::vec(seq_lens.data(), DType::kI32, 1);
        a.block_table = TensorView::mat(table.data(), DType::kI32, 1, blocks);
        a.block_size = bs;
        a.format = fmt;
        be.dequantize_and_gather_k_cache(a);
      };
      std::vector<uint8_t> expected, got;
      run(reference_backend(), expected);
      run(*cuda, got);
      const std::string what =
          std::string(fmt == Fp8Format::kE4M3Fn ? "e4m3fn" : "e4m3fnuz") + " stride " + std::to_string(stride) + " out";
      EXPECT_EQ(first_mismatch(expected, got, what), "");
    }
  }
}

/// TEST(CudaSmoke, RecordDequantizeEveryScaleAndCode): the V4.1 records' decode (byte lookups of FP4
/// magnitudes, fp32 products by each scale encoding) against the reference's per-value rule. Group u of
/// the cache holds value bytes (u % per_scale) * group_bytes + i under scale byte (u / per_scale) % 256,
/// so the groups cover every (scale byte, value byte) pair and hence every nibble in both halves of a
/// byte; random bytes elsewhere (the block's tail). Gathered by the dense gather (the sparse gather decodes
/// with the same per-lane code), with a 16-byte aligned and an unaligned block stride.
TEST(CudaSmoke, RecordDequantizeEveryScaleAndCode) {
  DSV4KV_CUDA_OR_SKIP(cuda);
  const int64_t bs = 64;
  for (sp::Record r : {sp::Record::kMxfp8DsMla, sp::Record::kNvfp4DsMla, sp::Record::kMxfp4Indexer}) {
    const sp::RecordLayout rec = sp::record_layout(r);
    const int group_bytes = rec.value_bytes() / rec.num_scales();
    const int64_t per_scale = 256 / group_bytes;  // groups that cover the 256 value bytes once
    const int64_t groups = 256 * per_scale;
    const int64_t tokens = (groups + rec.num_scales() - 1) / rec.num_scales();
    const int64_t blocks = (tokens + bs - 1) / bs;
    for (int64_t stride : {rec.vllm_block_stride(bs), rec.block_data_bytes(bs) + 2}) {
      std::vector<uint8_t> cache(static_cast<size_t>(blocks * stride));
      std::mt19937 rng(13);
      for (auto& b : cache) b = static_cast<uint8_t>(rng());
      for (int64_t t = 0; t < tokens; ++t) {
        uint8_t* block = cache.data() + sp::block_offset(t / bs, stride);
        for (int j = 0; j < rec.num_scales(); ++j) {
          const int64_t u = (t * rec.num_scales() + j) % groups;
          block[rec.scale_offset(bs, t % bs, j)] = static_cast<uint8_t>(u / per_scale);
          for (int i = 0; i < group_bytes; ++i)
            block[rec.data_offset(t % bs) + j * group_bytes + i] =
                static_cast<uint8_t>((u % per_scale) * group_bytes + i);
        }
      }
      std::vector<int32_t> seq_lens{static_cast<int32_t>(tokens)};
      std::vector<int32_t> table(static_cast<size_t>(blocks));
      for (int64_t b = 0; b < blocks; ++b) table[b] = static_cast<int32_t>(b);
      const size_t out_bytes = static_cast<size_t>(tokens * rec.head_dim * 2);
      auto dense = [&](Backend& be, std::vector<uint8_t>& out, int32_t* errors) {
        out.assign(out_bytes, 0xA5);
        *errors = 0;
        DequantizeGatherArgs a;
        a.out = TensorView::cube(out.data(), DType::kBF16, 1, tokens, rec.head_dim);
        a.k_cache = TensorView::mat(cache.data(), DType::kU8, blocks, stride);
        a.seq_lens = TensorView::vec(seq_lens.data(), DType::kI32, 1);
        a.block_table = TensorView::mat(table.data(), DType::kI32, 1, blocks);
        a.block_size = bs;
        a.record = r;
        a.error_count = errors;
        be.dequantize_and_gather_k_cache(a);
      };
      const std::string what = std::string(sp::record_name(r)) + " stride " + std::to_string(stride);
      std::vector<uint8_t> expected, got;
      int32_t e_ref = 0, e_cuda = 0;
      dense(reference_backend(), expected, &e_ref);
      dense(*cuda, got, &e_cuda);
      EXPECT_EQ(first_mismatch(expected, got, what + " gather out"), "");
      EXPECT_EQ(e_ref, e_cuda) << what << " gather";
    }
  }
}

// ---------------------------------------------------------------------------
// Large random cases, run twice on the device
// ---------------------------------------------------------------------------

/// CudaSmoke.Large<Op> for every operation of the table: its large cases (OpSuite::large_cases,
/// next to its properties) on CUDA and the reference, byte-identical, and run to run on CUDA.
const bool kRegistered = [] {
  for_each_op([](auto t) {
    using Args = typename decltype(t)::type;
    detail::register_test("CudaSmoke", std::string("Large") + OpSuite<Args>::kPrefix, [] {
      DSV4KV_CUDA_OR_SKIP(cuda);
      for (const auto& tester : OpSuite<Args>::large_cases())
        EXPECT_EQ(differential_mismatch(reference_backend(), *cuda, tester), "") << tester;
    });
  });
  return true;
}();

}  // namespace
}  // namespace dsv4kv::conformance
