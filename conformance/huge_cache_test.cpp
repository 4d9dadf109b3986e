// A cache larger than 2^31 bytes (spec "Cache layout": byte offsets are 64-bit).
//
// vLLM's Triton kernels computed block offsets in int32 and corrupted caches above ~57,000 blocks.
// Here: 60,000 blocks of 37,440 bytes (block size 64, vLLM's stride) = 2,246,400,000 bytes. Tokens are
// quantized into the highest blocks, into the block whose first record straddles byte 2^31, and into
// block 0; their bytes must land exactly at the 64-bit offsets spec/layout.hpp computes, every other
// byte of the blocks touched must stay zero, and gathering them back must give the spec's values.
//
// The cache comes from calloc, whose pages the kernel zeroes lazily: only the few blocks the test
// touches are ever committed (on CUDA the backend copies the whole extent; an H200 has room).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "dsv4kv/spec.hpp"

namespace dsv4kv::conformance {
namespace {

constexpr int64_t kBlockSize = 64;
constexpr int64_t kNumBlocks = 60000;
constexpr int64_t kStride = spec::vllm_block_stride(kBlockSize);  // 37,440
constexpr int64_t kCacheBytes = kNumBlocks * kStride;
static_assert(kCacheBytes > (int64_t{1} << 31), "the point of the test");

/// Slots the test writes: (block, position). Block 57358 starts 128 bytes below 2^31, so its
/// position 0 record straddles the 2^31 boundary; 59999 is the last block.
struct Where {
  int64_t block, pos;
};
const std::vector<Where>& targets() {
  static const std::vector<Where> w = {{59999, 63}, {59999, 0}, {57358, 0}, {57400, 5}, {kNumBlocks / 2, 31}, {0, 0}};
  return w;
}
static_assert(spec::block_offset(57358, kStride) < (int64_t{1} << 31) &&
              spec::block_offset(57358, kStride) + spec::kTokenDataBytes > (int64_t{1} << 31));

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

/// The spec's bytes for one token (spec "quantize_and_insert_k_cache"): codes, then scale bytes.
void expected_record(const uint16_t* k, spec::Fp8Format fmt, uint8_t* codes /*576*/, uint8_t* scales /*8*/) {
  for (int j = 0; j < spec::kNumTiles; ++j) {
    float amax = 0.0f;
    for (int i = 0; i < spec::kTileSize; ++i) {
      const uint16_t x = k[j * spec::kTileSize + i];
      if (!spec::bf16_is_nan(x)) amax = std::max(amax, spec::bf16_to_f32(spec::bf16_abs_bits(x)));
    }
    const spec::TileScale ts = spec::tile_scale(amax, fmt);
    scales[j] = ts.byte;
    for (int i = 0; i < spec::kTileSize; ++i)
      codes[j * spec::kTileSize + i] = spec::quantize_element(k[j * spec::kTileSize + i], ts, fmt);
  }
  scales[spec::kScalePadIndex] = 0;
  std::memcpy(codes + spec::kNopeDim, k + spec::kNopeDim, spec::kRopeBytes);
}

void run_huge_cache(Backend& be) {
  std::unique_ptr<uint8_t, FreeDeleter> cache(static_cast<uint8_t*>(std::calloc(static_cast<size_t>(kCacheBytes), 1)));
  if (!cache) GTEST_SKIP() << "could not allocate " << kCacheBytes << " bytes for the cache";
  const TensorView cache_view = TensorView::mat(cache.get(), DType::kU8, kNumBlocks, kStride);

  const int64_t T = static_cast<int64_t>(targets().size());
  std::vector<uint16_t> k(static_cast<size_t>(T * spec::kHeadDim));
  uint64_t s = 0x243F6A8885A308D3ull;
  for (auto& v : k) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    // Finite bf16 values with exponents spread over +-2^8.
    v = static_cast<uint16_t>(((s >> 33) & 0x8000u) | (0x3780u + ((s >> 40) & 0x0FFFu)));
  }
  std::vector<int64_t> slots;
  for (const Where& w : targets()) slots.push_back(w.block * kBlockSize + w.pos);

  // 1. Quantize into the highest blocks.
  int32_t errors = 0;
  QuantizeInsertArgs q;
  q.k = TensorView::mat(k.data(), DType::kBF16, T, spec::kHeadDim);
  q.k_cache = cache_view;
  q.slot_mapping = TensorView::vec(slots.data(), DType::kI64, T);
  q.block_size = kBlockSize;
  q.error_count = &errors;
  be.quantize_and_insert_k_cache(q);
  EXPECT_EQ(errors, 0);

  // 2. The bytes sit at the 64-bit offsets of spec/layout.hpp, and nothing else in those blocks changed.
  for (int64_t t = 0; t < T; ++t) {
    const Where w = targets()[static_cast<size_t>(t)];
    uint8_t codes[spec::kTokenDataBytes], scales[spec::kScaleBytesPerToken];
    expected_record(&k[static_cast<size_t>(t * spec::kHeadDim)], spec::Fp8Format::kE4M3Fn, codes, scales);
    const int64_t data_at = spec::block_offset(w.block, kStride) + spec::token_data_offset(w.pos);
    const int64_t scale_at = spec::block_offset(w.block, kStride) + spec::scale_offset(kBlockSize, w.pos, 0);
    EXPECT_EQ(std::memcmp(cache.get() + data_at, codes, sizeof codes), 0)
        << "token data of block " << w.block << " pos " << w.pos << " (byte offset " << data_at << ")";
    EXPECT_EQ(std::memcmp(cache.get() + scale_at, scales, sizeof scales), 0)
        << "scale bytes of block " << w.block << " pos " << w.pos << " (byte offset " << scale_at << ")";
  }
  std::vector<int64_t> blocks;
  for (const Where& w : targets()) blocks.push_back(w.block);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  for (int64_t b : blocks) {
    std::vector<bool> record(static_cast<size_t>(kStride), false);
    for (const Where& w : targets()) {
      if (w.block != b) continue;
      for (int i = 0; i < spec::kTokenDataBytes; ++i)
        record[static_cast<size_t>(spec::token_data_offset(w.pos) + i)] = true;
      for (int i = 0; i < spec::kScaleBytesPerToken; ++i)
        record[static_cast<size_t>(spec::scale_offset(kBlockSize, w.pos, i))] = true;
    }
    const uint8_t* blk = cache.get() + spec::block_offset(b, kStride);
    for (int64_t i = 0; i < kStride; ++i)
      if (!record[static_cast<size_t>(i)] && blk[i] != 0) {
        ADD_FAILURE() << "block " << b << " byte " << i << " changed to 0x" << std::hex << int{blk[i]};
        break;
      }
  }

  // 3. Gather them back: request t reads position pos of a one-column block-table row [block].
  std::vector<int32_t> table(static_cast<size_t>(T)), seq_lens(static_cast<size_t>(T)),
      gather(static_cast<size_t>(T), 1);
  for (int64_t t = 0; t < T; ++t) {
    table[static_cast<size_t>(t)] = static_cast<int32_t>(targets()[static_cast<size_t>(t)].block);
    seq_lens[static_cast<size_t>(t)] = static_cast<int32_t>(targets()[static_cast<size_t>(t)].pos + 1);
  }
  std::vector<uint16_t> out(static_cast<size_t>(T * spec::kHeadDim), 0xA5A5);
  DequantizeGatherArgs d;
  d.out = TensorView::cube(out.data(), DType::kBF16, T, 1, spec::kHeadDim);
  d.k_cache = cache_view;
  d.seq_lens = TensorView::vec(seq_lens.data(), DType::kI32, T);
  d.gather_lens = TensorView::vec(gather.data(), DType::kI32, T);
  d.block_table = TensorView::mat(table.data(), DType::kI32, T, 1);
  d.block_size = kBlockSize;
  d.error_count = &errors;
  be.dequantize_and_gather_k_cache(d);
  EXPECT_EQ(errors, 0);

  for (int64_t t = 0; t < T; ++t) {
    const uint16_t* x = &k[static_cast<size_t>(t * spec::kHeadDim)];
    const uint16_t* y = &out[static_cast<size_t>(t * spec::kHeadDim)];
    uint8_t codes[spec::kTokenDataBytes], scales[spec::kScaleBytesPerToken];
    expected_record(x, spec::Fp8Format::kE4M3Fn, codes, scales);
    for (int e = 0; e < spec::kNopeDim; ++e) {
      const uint16_t want = spec::dequantize_element(codes[e], scales[e / spec::kTileSize], spec::Fp8Format::kE4M3Fn);
      ASSERT_EQ(y[e], want) << "token " << t << " element " << e;
      // Round trip: within half an e4m3 step (2^-4 relative) or the tile's underflow floor.
      const float xf = spec::bf16_to_f32(x[e]), yf = spec::bf16_to_f32(y[e]);
      const float floor = std::ldexp(1.0f, scales[e / spec::kTileSize] - spec::kScaleBias - 9);
      ASSERT_LE(std::fabs(yf - xf), std::max(std::fabs(xf) / 16.0f + std::fabs(xf) / 256.0f, floor))
          << "token " << t << " element " << e << ": " << xf << " came back as " << yf;
    }
    EXPECT_EQ(std::memcmp(y + spec::kNopeDim, x + spec::kNopeDim, spec::kRopeBytes), 0) << "RoPE of token " << t;
  }
}

TEST(HugeCache, ReferenceWritesAndReadsAbove2GiB) {
  auto be = make_reference_backend();
  run_huge_cache(*be);
}

TEST(HugeCache, CudaWritesAndReadsAbove2GiB) {
  std::string why;
  auto be = make_cuda_backend(&why);
  if (!be) GTEST_SKIP() << "no CUDA device: " << why;
  run_huge_cache(*be);
}

}  // namespace
}  // namespace dsv4kv::conformance
