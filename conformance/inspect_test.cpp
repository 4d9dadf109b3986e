// Tests of the cache inspection behind `dsv4kv inspect` (harness/inspect.*):
// decoding of crafted records, both file formats, and clean errors on malformed files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dsv4kv/reference.hpp"
#include "golden.hpp"
#include "inspect.hpp"

namespace {

namespace S = dsv4kv::spec;
using dsv4kv::conformance::CacheImage;
using dsv4kv::conformance::InspectError;
using dsv4kv::conformance::InspectOptions;

// A .npy v1 image of a uint8 array with the given shape and bytes.
std::vector<uint8_t> npy(const std::vector<int64_t>& shape, const std::vector<uint8_t>& data,
                         const std::string& descr = "|u1", const std::string& order = "False") {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = "\x93NUMPY";
  file += '\x01';
  file += '\x00';
  file += static_cast<char>(header.size() & 0xFF);
  file += static_cast<char>(header.size() >> 8);
  file += header;
  file.append(data.begin(), data.end());
  return std::vector<uint8_t>(file.begin(), file.end());
}

// A one-tensor safetensors image.
std::vector<uint8_t> safetensors(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                                 const std::vector<uint8_t>& data) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? "," : "") + std::to_string(shape[i]);
  const std::string header = "{\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + dims +
                             "],\"data_offsets\":[0," + std::to_string(data.size()) + "]}}";
  std::string file;
  for (int i = 0; i < 8; ++i) file += static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF);  // little-endian
  file += header;
  file.append(data.begin(), data.end());
  return std::vector<uint8_t>(file.begin(), file.end());
}

// A cache of `blocks` blocks of size B written by the reference from known keys.
struct Written {
  int64_t B, blocks, stride;
  std::vector<uint16_t> k;
  std::vector<uint8_t> cache;
};

Written write_cache(int64_t B, int64_t blocks, int64_t stride) {
  Written w{B, blocks, stride, std::vector<uint16_t>(2 * S::kHeadDim), std::vector<uint8_t>(blocks * stride, 0xA5)};
  for (int d = 0; d < S::kHeadDim; ++d) {
    w.k[d] = S::f32_to_bf16_rne(static_cast<float>(d % 64) - 20.0f);        // token 0: values -20 .. 43
    w.k[S::kHeadDim + d] = S::f32_to_bf16_rne(0.5f * static_cast<float>(d % 7));  // token 1: 0 .. 3
  }
  std::vector<int64_t> slots = {B + 1, 0};  // token 0 -> block 1 position 1; token 1 -> block 0 position 0
  dsv4kv::QuantizeInsertArgs a;
  a.k = dsv4kv::TensorView::mat(w.k.data(), dsv4kv::DType::kBF16, 2, S::kHeadDim);
  a.k_cache = dsv4kv::TensorView::mat(w.cache.data(), dsv4kv::DType::kU8, blocks, stride);
  a.slot_mapping = dsv4kv::TensorView::vec(slots.data(), dsv4kv::DType::kI64, 2);
  a.block_size = B;
  dsv4kv::reference::quantize_and_insert_k_cache(a);
  return w;
}

TEST(Inspect, DecodesAWrittenToken) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes + 6);
  const std::span<const uint8_t> block1(w.cache.data() + w.stride, static_cast<size_t>(w.stride));
  const auto t = dsv4kv::conformance::inspect_token(block1, w.B, 1, S::Fp8Format::kE4M3Fn);
  // amax 43 in every tile: 43/448 lies in (2^-4, 2^-3] -> e = -3, byte 124.
  for (int j = 0; j < S::kNumTiles; ++j) {
    EXPECT_EQ(t.scale_bytes[j], 124) << "tile " << j;
    EXPECT_EQ(t.exponent(j), -3);
  }
  EXPECT_EQ(t.pad_byte, 0);
  EXPECT_FALSE(t.flagged());
  EXPECT_TRUE(t.flags().empty());
  EXPECT_EQ(t.nope_min, -20.0f);
  // 43 * 8 = 344 lies between the e4m3 values 320 and 352 (spacing 32 in [256, 448]): 352 = 44 * 8.
  EXPECT_EQ(t.nope_max, 44.0f);
  for (int k = 0; k < S::kRopeDim; ++k) EXPECT_EQ(t.rope[k], w.k[S::kNopeDim + k]) << "rope " << k;
}

TEST(Inspect, FlagsBytesThatBreakTheSpec) {
  Written w = write_cache(4, 2, 4 * S::kTokenBytes);
  uint8_t* block0 = w.cache.data();
  block0[S::scale_offset(4, 0, S::kScalePadIndex)] = 0x5A;  // pad byte
  block0[S::scale_offset(4, 0, 2)] = 255;                    // scale byte 255
  block0[S::fp8_code_offset(0, 5)] = 0x7F;                   // NaN codes (e4m3fn)
  block0[S::fp8_code_offset(0, 6)] = 0xFF;
  const auto t = dsv4kv::conformance::inspect_token(std::span<const uint8_t>(block0, w.stride), 4, 0,
                                                    S::Fp8Format::kE4M3Fn);
  EXPECT_TRUE(t.flagged());
  EXPECT_EQ(t.pad_byte, 0x5A);
  EXPECT_EQ(t.scale255_tiles(), 1);
  EXPECT_EQ(t.nan_codes, 2);
  const auto f = t.flags();
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0], "pad=0x5a");
  EXPECT_EQ(f[1], "scale255x1");
  EXPECT_EQ(f[2], "nan-codes=2");
  // Tile 2 now decodes through S(255) = inf: codes 0 give NaN, others +-inf.
  EXPECT_GT(t.inf_values + t.nan_values, 0);
  // In e4m3fnuz only 0x80 is NaN: 0x7F and 0xFF are +-240.
  const auto u = dsv4kv::conformance::inspect_token(std::span<const uint8_t>(block0, w.stride), 4, 0,
                                                    S::Fp8Format::kE4M3Fnuz);
  EXPECT_EQ(u.nan_codes, 0);
}

TEST(Inspect, ReadsNpyAndSafetensorsAlike) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes + 6);
  InspectOptions o;
  o.block_size = 4;
  o.block = 1;
  o.token = 1;
  const auto a = dsv4kv::conformance::inspect_image(
      dsv4kv::conformance::load_cache_image(npy({2, w.stride}, w.cache)), o);
  const auto b = dsv4kv::conformance::inspect_image(
      dsv4kv::conformance::load_cache_image(safetensors("kv", "U8", {2, w.stride}, w.cache)), o);
  ASSERT_EQ(a.tokens.size(), 1u);
  ASSERT_EQ(b.tokens.size(), 1u);
  EXPECT_EQ(a.image.format, "npy");
  EXPECT_EQ(b.image.format, "safetensors");
  EXPECT_EQ(b.image.tensor, "kv");
  EXPECT_EQ(a.tokens[0].scale_bytes, b.tokens[0].scale_bytes);
  EXPECT_EQ(a.tokens[0].rope, b.tokens[0].rope);
  EXPECT_EQ(a.tokens[0].scale_bytes[0], 124);
  EXPECT_EQ(a.flagged_tokens, 0);
}

TEST(Inspect, Rank3ShapeImpliesTheBlockSize) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes);
  const CacheImage img = dsv4kv::conformance::load_cache_image(npy({2, 4, S::kTokenBytes}, w.cache));
  EXPECT_EQ(img.implied_block_size, 4);
  EXPECT_EQ(img.block_stride, 4 * S::kTokenBytes);
  const auto r = dsv4kv::conformance::inspect_image(img, InspectOptions{});
  EXPECT_EQ(r.block_size, 4);
  EXPECT_EQ(r.tokens.size(), 8u);  // every position of both blocks
  // Unwritten positions still hold 0xA5: pad byte 0xA5 is flagged.
  EXPECT_EQ(r.flagged_tokens, 6);
}

TEST(Inspect, RendersOneLinePerToken) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes + 6);
  InspectOptions o;
  o.block_size = 4;
  const std::string text = dsv4kv::conformance::inspect_bytes(npy({2, w.stride}, w.cache), o, "x.npy");
  EXPECT_NE(text.find("block_size 4, block_stride 2342 bytes (2336 used, tail 6)"), std::string::npos) << text;
  EXPECT_NE(text.find("summary: 8 tokens, 6 flagged"), std::string::npos) << text;
  EXPECT_NE(text.find("   -3   -3   -3   -3   -3   -3   -3"), std::string::npos) << text;
}

TEST(Inspect, GoldenQuantizeCacheDecodesWithoutFlagsWhereWritten) {
  const std::string path = dsv4kv::conformance::golden_dir() + "/quantize_special.safetensors";
  CacheImage img;
  try {
    img = dsv4kv::conformance::load_cache_file(path);
  } catch (const InspectError& e) {
    GTEST_SKIP() << "golden file not readable: " << e.what();
  }
  EXPECT_EQ(img.format, "safetensors");
  EXPECT_NE(img.tensor.find("k_cache_after"), std::string::npos) << img.tensor;
  EXPECT_GT(img.num_blocks, 0);
}

TEST(Inspect, MalformedInputIsAnInspectError) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes);
  const std::vector<std::vector<uint8_t>> bad = {
      {},                                                     // empty
      {0x93, 'N', 'U', 'M', 'P', 'Y', 1},                     // truncated npy
      npy({2, w.stride}, std::vector<uint8_t>(10)),           // data shorter than the shape
      npy({2, w.stride}, w.cache, "<f4"),                     // not uint8
      npy({2, w.stride}, w.cache, "|u1", "True"),             // Fortran order
      npy({2 * w.stride}, w.cache),                           // rank 1
      safetensors("kv", "I32", {2, w.stride / 4}, w.cache),   // no uint8 tensor
      safetensors("kv", "U8", {2, w.stride + 1}, w.cache),    // shape larger than the data
      {8, 0, 0, 0, 0, 0, 0, 0, '{', 'x'},                     // broken JSON
  };
  for (size_t i = 0; i < bad.size(); ++i)
    EXPECT_THROW(dsv4kv::conformance::inspect_bytes(bad[i], InspectOptions{}), InspectError) << "input " << i;

  InspectOptions o;
  o.block_size = 5;  // 5 * 584 > the 4 * 584 bytes of a block
  EXPECT_THROW(dsv4kv::conformance::inspect_bytes(npy({2, w.stride}, w.cache), o), InspectError);
  o.block_size = 4;
  o.block = 2;  // only blocks 0 and 1
  EXPECT_THROW(dsv4kv::conformance::inspect_bytes(npy({2, w.stride}, w.cache), o), InspectError);
  o.block.reset();
  o.token = 4;
  EXPECT_THROW(dsv4kv::conformance::inspect_bytes(npy({2, w.stride}, w.cache), o), InspectError);
}

// Every truncation of a valid file is either parsed or rejected with InspectError, never a crash.
TEST(Inspect, EveryTruncationIsHandled) {
  const Written w = write_cache(1, 1, S::kTokenBytes);
  for (const auto& file : {npy({1, w.stride}, w.cache), safetensors("kv", "U8", {1, w.stride}, w.cache)}) {
    for (size_t n = 0; n < file.size(); n += (n < 200 ? 1 : 37)) {
      const std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(n));
      try {
        InspectOptions o;
        o.block_size = 1;
        (void)dsv4kv::conformance::inspect_bytes(cut, o);
      } catch (const InspectError&) {
      }
    }
  }
}

}  // namespace
