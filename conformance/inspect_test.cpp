// Tests of the cache inspection behind `dsv4kv inspect` and `python -m dsv4kv inspect`
// (harness/inspect.*): decoding of crafted records, both file formats, block size
// inference, ambiguous files, the shared command line, and clean errors on malformed files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
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
  for (size_t i = 0; i < shape.size(); ++i)
    dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
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
    w.k[d] = S::f32_to_bf16_rne(static_cast<float>(d % 64) - 20.0f);              // token 0: values -20 .. 43
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
  block0[S::scale_offset(4, 0, 2)] = 255;                   // scale byte 255
  block0[S::fp8_code_offset(0, 5)] = 0x7F;                  // NaN codes (e4m3fn)
  block0[S::fp8_code_offset(0, 6)] = 0xFF;
  const auto t =
      dsv4kv::conformance::inspect_token(std::span<const uint8_t>(block0, w.stride), 4, 0, S::Fp8Format::kE4M3Fn);
  EXPECT_TRUE(t.flagged());
  EXPECT_EQ(t.pad_byte, 0x5A);
  EXPECT_EQ(t.scale255_tiles(), 1);
  EXPECT_EQ(t.nan_codes, 2);
  const auto f = t.flags();
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0], "pad=0x5a");
  EXPECT_EQ(f[1], "scale255@2");  // names the tile
  EXPECT_EQ(f[2], "nan-codes=2");
  // Tile 2 now decodes through S(255) = inf: codes 0 give NaN, others +-inf.
  EXPECT_GT(t.inf_values + t.nan_values, 0);
  // In e4m3fnuz only 0x80 is NaN: 0x7F and 0xFF are +-240.
  const auto u =
      dsv4kv::conformance::inspect_token(std::span<const uint8_t>(block0, w.stride), 4, 0, S::Fp8Format::kE4M3Fnuz);
  EXPECT_EQ(u.nan_codes, 0);
  block0[S::scale_offset(4, 0, 5)] = 255;
  const auto two =
      dsv4kv::conformance::inspect_token(std::span<const uint8_t>(block0, w.stride), 4, 0, S::Fp8Format::kE4M3Fn);
  EXPECT_EQ(two.flags()[1], "scale255@2,5");
}

TEST(Inspect, DecodedNopeIsWhatInspectTokenSummarizes) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes + 6);
  const std::span<const uint8_t> block1(w.cache.data() + w.stride, static_cast<size_t>(w.stride));
  const auto v = dsv4kv::conformance::decode_nope(block1, 4, 1, S::Fp8Format::kE4M3Fn);
  const auto t = dsv4kv::conformance::inspect_token(block1, 4, 1, S::Fp8Format::kE4M3Fn);
  EXPECT_EQ(*std::min_element(v.begin(), v.end()), t.nope_min);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), t.nope_max);
  // Element 0 of token 0 was -20: exactly representable (scale 2^-3, code -160).
  EXPECT_EQ(v[0], -20.0f);
}

TEST(Inspect, ReadsNpyAndSafetensorsAlike) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes + 6);
  InspectOptions o;
  o.block_size = 4;
  o.block = 1;
  o.token = 1;
  const auto a =
      dsv4kv::conformance::inspect_image(dsv4kv::conformance::load_cache_image(npy({2, w.stride}, w.cache)), o);
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
  } catch (const InspectError& e) { GTEST_SKIP() << "golden file not readable: " << e.what(); }
  EXPECT_EQ(img.format, "safetensors");
  EXPECT_NE(img.tensor.find("k_cache_after"), std::string::npos) << img.tensor;
  EXPECT_GT(img.num_blocks, 0);
}

TEST(Inspect, MalformedInputIsAnInspectError) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes);
  const std::vector<std::vector<uint8_t>> bad = {
      {},                                                    // empty
      {0x93, 'N', 'U', 'M', 'P', 'Y', 1},                    // truncated npy
      npy({2, w.stride}, std::vector<uint8_t>(10)),          // data shorter than the shape
      npy({2, w.stride}, w.cache, "<f4"),                    // not uint8
      npy({2, w.stride}, w.cache, "|u1", "True"),            // Fortran order
      npy({2 * w.stride}, w.cache),                          // rank 1
      safetensors("kv", "I32", {2, w.stride / 4}, w.cache),  // no uint8 tensor
      safetensors("kv", "U8", {2, w.stride + 1}, w.cache),   // shape larger than the data
      {8, 0, 0, 0, 0, 0, 0, 0, '{', 'x'},                    // broken JSON
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

TEST(Inspect, BlockSizeIsInferredFromTheShape) {
  using dsv4kv::conformance::infer_block_size;
  for (const int64_t b : {1, 2, 16, 63, 64, 65, 128, 256, 1024}) {
    const std::vector<int64_t> vllm = {3, S::vllm_block_stride(b)}, exact = {3, S::block_data_bytes(b)};
    EXPECT_EQ(infer_block_size(vllm), b) << b;
    EXPECT_EQ(infer_block_size(exact), b) << b;
    const std::vector<int64_t> rank3 = {3, b, S::kTokenBytes};
    EXPECT_EQ(infer_block_size(rank3), b) << b;
  }
  const std::vector<int64_t> odd = {3, S::block_data_bytes(64) + 2}, empty = {3, 0}, rank1 = {S::vllm_block_stride(64)};
  EXPECT_EQ(infer_block_size(odd), std::nullopt);
  EXPECT_EQ(infer_block_size(empty), std::nullopt);
  EXPECT_EQ(infer_block_size(rank1), std::nullopt);
  // Without --block-size a stride that implies no block size is refused, not decoded as 64.
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes + 6);
  try {
    (void)dsv4kv::conformance::inspect_bytes(npy({2, w.stride}, w.cache), InspectOptions{}, "x.npy");
    ADD_FAILURE() << "no error";
  } catch (const InspectError& e) {
    EXPECT_NE(std::string(e.what()).find("x.npy: cannot infer the block size from a block stride of 2342 bytes"),
              std::string::npos)
        << e.what();
  }
  // An exact stride is inferred: the report says block_size 4.
  const Written x = write_cache(4, 2, 4 * S::kTokenBytes);
  EXPECT_NE(dsv4kv::conformance::inspect_bytes(npy({2, x.stride}, x.cache), InspectOptions{}).find("block_size 4,"),
            std::string::npos);
}

// Two tensors in one safetensors image.
std::vector<uint8_t> two_tensors(const std::string& a, const std::string& b, int64_t rows, int64_t cols,
                                 const std::vector<uint8_t>& data) {
  const std::string n = std::to_string(rows * cols);
  const std::string shape = "[" + std::to_string(rows) + "," + std::to_string(cols) + "]";
  const std::string header = "{\"" + a + "\":{\"dtype\":\"U8\",\"shape\":" + shape + ",\"data_offsets\":[0," + n +
                             "]},\"" + b + "\":{\"dtype\":\"U8\",\"shape\":" + shape + ",\"data_offsets\":[" + n + "," +
                             std::to_string(2 * rows * cols) + "]}}";
  std::vector<uint8_t> file(8);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
  file.insert(file.end(), header.begin(), header.end());
  file.insert(file.end(), data.begin(), data.end());
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

TEST(Inspect, AnAmbiguousFileIsRefusedListingTheCandidates) {
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes);
  const auto file = two_tensors("layer0.k_cache", "layer1.k_cache", 2, w.stride, w.cache);
  try {
    (void)dsv4kv::conformance::load_cache_image(file, "", "two.safetensors");
    ADD_FAILURE() << "no error";
  } catch (const InspectError& e) {
    EXPECT_EQ(std::string(e.what()),
              "two.safetensors: cannot tell which tensor is the cache: 2 uint8 tensors of rank 2 or 3 "
              "('layer0.k_cache', 'layer1.k_cache'); name one with --tensor");
  }
  EXPECT_EQ(dsv4kv::conformance::load_cache_image(file, "layer1.k_cache").tensor, "layer1.k_cache");
}

TEST(Inspect, CommandLineGrammar) {
  using dsv4kv::conformance::InspectUsageError;
  using dsv4kv::conformance::parse_inspect_args;
  const auto c = parse_inspect_args({"f.npy", "--block", "3", "--token=7", "--block-size", "16", "--key", "kv",
                                     "--fnuz", "--rope", "0", "--max-file-size", "100"});
  EXPECT_EQ(c.file, "f.npy");
  EXPECT_EQ(c.options.block, 3);
  EXPECT_EQ(c.options.token, 7);
  EXPECT_EQ(c.options.block_size, 16);
  EXPECT_EQ(c.options.tensor, "kv");
  EXPECT_EQ(c.options.format, S::Fp8Format::kE4M3Fnuz);
  EXPECT_EQ(c.options.rope_values, 0);
  EXPECT_EQ(c.max_file_bytes, 100u);
  EXPECT_EQ(parse_inspect_args({"--tensor", "t", "--", "-odd"}).file, "-odd");
  EXPECT_TRUE(parse_inspect_args({"--help"}).help);
  auto message = [&](std::vector<std::string> args) {
    try {
      (void)parse_inspect_args(args);
    } catch (const InspectUsageError& e) { return std::string(e.what()); }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message({"f", "--block", "-5"}), "--block must be >= 0, got -5");
  EXPECT_EQ(message({"f", "--block", "x"}), "--block must be an integer, got 'x'");
  EXPECT_EQ(message({"f", "--block", "1000000000000000000000000000000"}),
            "--block must be <= 9223372036854775807, got 1000000000000000000000000000000");
  EXPECT_EQ(message({"f", "--block-size", "0"}), "--block-size must be >= 1, got 0");
  EXPECT_EQ(message({"f", "--rope", "65"}), "--rope must be <= 64, got 65");
  EXPECT_EQ(message({"f", "--max-file-size", "-1"}), "--max-file-size must be >= 1, got -1");
  EXPECT_EQ(message({"f", "--token"}), "--token needs a value");
  EXPECT_EQ(message({"f", "--frobnicate"}), "unknown option '--frobnicate' (--help lists the options)");
  EXPECT_EQ(message({"f", "g"}), "one FILE only, got a second: 'g'");
  EXPECT_EQ(message({"--fnuz"}), "missing FILE (--help lists the options)");
}

// The one table of exit statuses (InspectStatus), case by case: what each cause returns and that
// it says so in exactly one stderr line (python/tests/test_inspect_parity.py runs the same table
// against both programs).
TEST(Inspect, CommandExitStatusTable) {
  using dsv4kv::conformance::kInspectFailed;
  using dsv4kv::conformance::kInspectOk;
  using dsv4kv::conformance::kInspectUsageError;
  // The numbers themselves are the contract with scripts and shells.
  EXPECT_EQ(static_cast<int>(kInspectOk), 0);
  EXPECT_EQ(static_cast<int>(kInspectFailed), 1);
  EXPECT_EQ(static_cast<int>(kInspectUsageError), 2);

  const Written w = write_cache(4, 2, 4 * S::kTokenBytes);  // unwritten tokens hold 0xA5: pad bytes flagged
  const auto dir = std::filesystem::temp_directory_path() / ("dsv4kv_inspect_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto save = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  };
  const std::vector<uint8_t> flagged_npy = npy({2, w.stride}, w.cache);
  const std::string good = save("good.npy", npy({2, w.stride}, std::vector<uint8_t>(w.cache.size(), 0)));
  const std::string flagged = save("flagged.npy", flagged_npy);
  const std::string cut = save("cut.npy", std::vector<uint8_t>(flagged_npy.begin(), flagged_npy.begin() + 300));
  const std::string text = save("text.safetensors", {'h', 'i', '\n'});
  const std::string fifo = (dir / "fifo.npy").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);

  struct Case {
    std::string what;
    std::vector<std::string> args;
    int status;
    std::string out_has;  // for status 0: a piece of stdout; otherwise: a piece of the stderr line
  };
  const std::vector<Case> cases = {
      {"a good file", {good}, kInspectOk, "summary: 8 tokens, 0 flagged"},
      {"a file breaking the layout's rules", {flagged}, kInspectOk, "summary: 8 tokens, 6 flagged"},
      {"one written token", {flagged, "--block", "1", "--token", "1"}, kInspectOk, "summary: 1 tokens, 0 flagged"},
      {"help", {"--help"}, kInspectOk, "usage: inspect FILE"},
      {"a missing file", {(dir / "missing.npy").string()}, kInspectFailed, "cannot open"},
      {"a directory", {dir.string()}, kInspectFailed, "not a regular file (a directory)"},
      {"a FIFO", {fifo}, kInspectFailed, "not a regular file (a FIFO)"},
      {"a truncated file", {cut}, kInspectFailed, "but the file holds 172"},
      {"not a cache", {text}, kInspectFailed, "not a safetensors file"},
      {"a path holding a NUL byte", {good + std::string(1, '\0') + "x"}, kInspectFailed, "holds a NUL byte"},
      {"a block past the end", {good, "--block", "2"}, kInspectFailed, "block 2 out of range: the cache has 2 blocks"},
      {"a file over the size cap", {good, "--max-file-size", "10"}, kInspectFailed, "over the limit of 10 bytes"},
      {"an unknown flag", {good, "--frobnicate"}, kInspectUsageError, "unknown option '--frobnicate'"},
      {"a negative value", {good, "--block", "-1"}, kInspectUsageError, "--block must be >= 0, got -1"},
      {"a flag without its value", {good, "--token"}, kInspectUsageError, "--token needs a value"},
      {"two files", {good, flagged}, kInspectUsageError, "one FILE only"},
      {"no arguments", {}, kInspectUsageError, "missing FILE"},
  };
  for (const Case& c : cases) {
    std::string out, err;
    const int status = dsv4kv::conformance::run_inspect_command(
        c.args,
        [&](std::string_view s) {
          out += s;
          return true;
        },
        [&](std::string_view s) { err += s; });
    EXPECT_EQ(status, c.status) << c.what << ": " << err;
    if (c.status == kInspectOk) {
      EXPECT_EQ(err, "") << c.what;
      EXPECT_NE(out.find(c.out_has), std::string::npos) << c.what << ": " << out;
    } else {
      EXPECT_EQ(out, "") << c.what;
      EXPECT_EQ(err.rfind("dsv4kv inspect: ", 0), 0u) << c.what << ": " << err;
      EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << c.what << ": " << err;
      EXPECT_NE(err.find(c.out_has), std::string::npos) << c.what << ": " << err;
    }
  }

  // A reader that goes away (out returns false) stops the report without changing the status.
  int pieces = 0;
  std::string err;
  EXPECT_EQ(dsv4kv::conformance::run_inspect_command(
                {flagged}, [&](std::string_view) { return ++pieces < 2; }, [&](std::string_view s) { err += s; }),
            kInspectOk);
  EXPECT_EQ(pieces, 2);
  EXPECT_EQ(err, "");
  // An exception of `out` is the caller's (Python's BrokenPipeError, say): it passes through.
  EXPECT_THROW(dsv4kv::conformance::run_inspect_command(
                   {good}, [](std::string_view) -> bool { throw std::runtime_error("sink"); },
                   [&](std::string_view s) { err += s; }),
               std::runtime_error);
  EXPECT_EQ(err, "");
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------
// The V4.1 records (spec/records.md): record from the shape or --format, decoding, flags.
// ---------------------------------------------------------------------------

constexpr S::Record kV41[] = {S::Record::kMxfp8DsMla, S::Record::kNvfp4DsMla, S::Record::kMxfp4Indexer};

// A [2, 4, W] cache of `record` (every byte 0) whose block 1 position 1 holds the key row of the
// worked example of spec/records.md: 1, -0.30078125 (bf16 0xBE9A), 5, then zeros.
std::vector<uint8_t> worked_example_cache(S::Record record) {
  const S::RecordLayout rec = S::record_layout(record);
  std::vector<uint16_t> k(static_cast<size_t>(rec.head_dim), 0);
  k[0] = S::f32_to_bf16_rne(1.0f);
  k[1] = 0xBE9A;
  k[2] = S::f32_to_bf16_rne(5.0f);
  std::vector<uint8_t> cache(static_cast<size_t>(2 * rec.block_data_bytes(4)), 0);
  std::vector<int64_t> slots = {4 + 1};
  dsv4kv::QuantizeInsertArgs a;
  a.k = dsv4kv::TensorView::mat(k.data(), dsv4kv::DType::kBF16, 1, rec.head_dim);
  a.k_cache = dsv4kv::TensorView::mat(cache.data(), dsv4kv::DType::kU8, 2, rec.block_data_bytes(4));
  a.slot_mapping = dsv4kv::TensorView::vec(slots.data(), dsv4kv::DType::kI64, 1);
  a.block_size = 4;
  a.record = record;
  dsv4kv::reference::quantize_and_insert_k_cache(a);
  return cache;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InspectError& e) { return e.what(); }
  return "(no error)";
}

TEST(Inspect, V41RecordsDecodeTheWorkedExample) {
  struct Want {
    S::Record record;
    uint8_t scale0;      // scale byte of group 0 (spec/records.md, "Worked example")
    float values[3];     // values 0..2 read back
    uint8_t zero_scale;  // the scale byte of an all-zero group
    int64_t flagged;     // of the 8 tokens: the 7 all-zero-byte ones break the FP4 records' rules (scale byte 0)
    const char* summary;
  };
  const Want wants[] = {
      {S::Record::kMxfp8DsMla,
       121,
       {1.0f, -0.3125f, 5.0f},
       105,
       0,
       "summary: 8 tokens, 0 flagged (scale byte 255: 0, NaN codes: 0)\n"},
      {S::Record::kNvfp4DsMla,
       0x35,
       {0.8125f, -0.40625f, 4.875f},
       0x01,
       7,
       "summary: 8 tokens, 7 flagged (NaN scale: 0, negative scale: 0, scale byte 0: 7)\n"},
      {S::Record::kMxfp4Indexer,
       127,
       {1.0f, -0.5f, 4.0f},
       1,
       7,
       "summary: 8 tokens, 7 flagged (NaN scale: 0, scale byte 0: 7)\n"},
  };
  for (const Want& w : wants) {
    const S::RecordLayout rec = S::record_layout(w.record);
    const std::string name = S::record_name(w.record);
    const std::vector<uint8_t> cache = worked_example_cache(w.record);
    // The record comes from the shape's width: no option names it.
    const CacheImage img = dsv4kv::conformance::load_cache_image(npy({2, 4, rec.token_bytes()}, cache));
    EXPECT_EQ(dsv4kv::conformance::record_of_shape(img.shape), w.record) << name;
    const auto r = dsv4kv::conformance::inspect_image(img, InspectOptions{});
    EXPECT_EQ(r.record, w.record) << name;
    EXPECT_EQ(r.block_size, 4) << name;
    ASSERT_EQ(r.tokens.size(), 8u) << name;
    EXPECT_EQ(r.flagged_tokens, w.flagged) << name;
    const auto& t = r.tokens[5];  // block 1, position 1
    EXPECT_EQ(t.record, w.record) << name;
    EXPECT_EQ(t.num_scales, rec.num_scales()) << name;
    EXPECT_EQ(t.scale_bytes[0], w.scale0) << name;
    for (int j = 1; j < rec.num_scales(); ++j) EXPECT_EQ(t.scale_bytes[j], w.zero_scale) << name << " group " << j;
    EXPECT_TRUE(t.flags().empty()) << name << ": " << (t.flags().empty() ? "" : t.flags()[0]);
    EXPECT_EQ(t.nope_min, w.values[1]) << name;
    EXPECT_EQ(t.nope_max, w.values[2]) << name;
    EXPECT_EQ(t.nan_values + t.inf_values, 0) << name;
    const std::span<const uint8_t> block1(cache.data() + rec.block_data_bytes(4),
                                          static_cast<size_t>(rec.block_data_bytes(4)));
    const auto v = dsv4kv::conformance::decode_quantized(block1, 4, 1, S::Fp8Format::kE4M3Fn, w.record);
    ASSERT_EQ(v.size(), static_cast<size_t>(rec.head_dim)) << name;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(v[i], w.values[i]) << name << " value " << i;
    EXPECT_EQ(std::count(v.begin() + 3, v.end(), 0.0f), rec.head_dim - 3) << name;
    for (int k = 0; k < 3; ++k) EXPECT_EQ(S::bf16_to_f32(t.rope[k]), w.values[k]) << name << ": first values";
    // The report: the record named in the layout line, its columns, the token line, the summary.
    const std::string text =
        dsv4kv::conformance::inspect_bytes(npy({2, 4, rec.token_bytes()}, cache), InspectOptions{}, "x.npy");
    EXPECT_NE(text.find("layout: record " + name + ", block_size 4, block_stride " +
                        std::to_string(rec.block_data_bytes(4)) + " bytes ("),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("columns: " +
                        std::string(rec.scales == S::ScaleCode::kE4M3 ? "e4m3fn scale bytes of groups 0.."
                                                                      : "scale exponents of groups 0..") +
                        std::to_string(rec.num_scales() - 1)),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("values[" + std::string(w.record == S::Record::kMxfp8DsMla   ? "1 -0.3125 5 0]"
                                                : w.record == S::Record::kNvfp4DsMla ? "0.8125 -0.4062 4.875 0]"
                                                                                     : "1 -0.5 4 0]")),
              std::string::npos)
        << text;
    EXPECT_EQ(text.substr(text.rfind("summary: ")), w.summary) << name;
  }
  // Group 0's cell: the exponent of UE8M0 bytes, the hex byte of e4m3 scales.
  const auto line = [](S::Record record) {
    const auto c = worked_example_cache(record);
    const int64_t bytes = S::record_layout(record).block_data_bytes(4);
    const auto t = dsv4kv::conformance::inspect_token(std::span<const uint8_t>(c.data() + bytes, bytes), 4, 1,
                                                      S::Fp8Format::kE4M3Fn, record);
    return dsv4kv::conformance::format_token_line(t, 0);
  };
  EXPECT_EQ(line(S::Record::kMxfp8DsMla).rfind("     1    -6  -22  -22", 0), 0u) << line(S::Record::kMxfp8DsMla);
  EXPECT_EQ(line(S::Record::kNvfp4DsMla).rfind("     1  35 01 01", 0), 0u) << line(S::Record::kNvfp4DsMla);
  EXPECT_EQ(line(S::Record::kMxfp4Indexer), "     1     0 -126 -126 -126         -0.5           4  values[]\n");
}

TEST(Inspect, ScaleFlagsStateEachRecordsRules) {
  using dsv4kv::conformance::scale_flag;
  using dsv4kv::conformance::ScaleFlag;
  // The bytes each record's reader flags, byte by byte (spec/records.md, "Inspecting a cache").
  for (int b = 0; b < 256; ++b) {
    const auto u = static_cast<uint8_t>(b);
    const ScaleFlag ue8m0 = b == 255 ? ScaleFlag::kInfinite : ScaleFlag::kOk;
    EXPECT_EQ(scale_flag(S::Record::kFp8DsMla, u), ue8m0) << b;
    EXPECT_EQ(scale_flag(S::Record::kMxfp8DsMla, u), ue8m0) << b;
    const ScaleFlag fp4 = (b == 0x7F || b == 0xFF) ? ScaleFlag::kNan
                          : b >= 0x80              ? ScaleFlag::kNegative
                          : b == 0                 ? ScaleFlag::kZero
                                                   : ScaleFlag::kOk;
    EXPECT_EQ(scale_flag(S::Record::kNvfp4DsMla, u), fp4) << b;
    const ScaleFlag idx = b == 255 ? ScaleFlag::kNan : b == 0 ? ScaleFlag::kZero : ScaleFlag::kOk;
    EXPECT_EQ(scale_flag(S::Record::kMxfp4Indexer, u), idx) << b;
  }
  // Every byte an FP4 writer stores is unflagged: the scales of all-zero, tiny and huge groups.
  EXPECT_EQ(scale_flag(S::Record::kNvfp4DsMla, S::nvfp4_scale_byte(0)), ScaleFlag::kOk);
  EXPECT_EQ(scale_flag(S::Record::kNvfp4DsMla, S::nvfp4_scale_byte(0x7F800000u)), ScaleFlag::kOk);
  EXPECT_EQ(scale_flag(S::Record::kMxfp4Indexer, static_cast<uint8_t>(S::mxfp4_group_exponent(0) + 127)),
            ScaleFlag::kOk);
  EXPECT_EQ(scale_flag(S::Record::kMxfp4Indexer, static_cast<uint8_t>(S::mxfp4_group_exponent(0x7F800000u) + 127)),
            ScaleFlag::kOk);
}

TEST(Inspect, V41FlagsBytesThatBreakTheRecord) {
  const auto token = [](S::Record record,
                        const std::function<void(std::vector<uint8_t>&, const S::RecordLayout&)>& edit) {
    std::vector<uint8_t> c = worked_example_cache(record);
    const S::RecordLayout rec = S::record_layout(record);
    edit(c, rec);  // block 0 position 2 (an unwritten token of block 0)
    return dsv4kv::conformance::inspect_token(std::span<const uint8_t>(c.data(), rec.block_data_bytes(4)), 4, 2,
                                              S::Fp8Format::kE4M3Fn, record);
  };
  // MXFP8: as the 584-byte record, scale byte 255 (decodes to inf/NaN) and NaN codes.
  const auto m = token(S::Record::kMxfp8DsMla, [](std::vector<uint8_t>& c, const S::RecordLayout& rec) {
    for (int g = 0; g < rec.num_scales(); ++g) c[rec.scale_offset(4, 2, g)] = 127;
    c[rec.scale_offset(4, 2, 3)] = 255;
    c[rec.scale_offset(4, 2, 9)] = 255;
    c[rec.data_offset(2) + 0] = 0x7F;
    c[rec.data_offset(2) + 40] = 0xFF;
    c[rec.data_offset(2) + 41] = 0x3F;      // 1.875, finite
    c[rec.data_offset(2) + 3 * 32] = 0x38;  // 1 under an infinite scale: inf
  });
  EXPECT_EQ(m.flags(), (std::vector<std::string>{"scale255@3,9", "nan-codes=2"}));
  EXPECT_EQ(m.nan_codes, 2);
  EXPECT_EQ(m.inf_values, 1);
  EXPECT_EQ(m.nan_values, 2 + 63);  // the NaN codes, and 0 * inf in groups 3 and 9
  EXPECT_TRUE(m.flagged());
  // FP4: a NaN scale (its 16 values decode to NaN), a negative one, a zero one.
  const auto n = token(S::Record::kNvfp4DsMla, [](std::vector<uint8_t>& c, const S::RecordLayout& rec) {
    for (int g = 0; g < rec.num_scales(); ++g) c[rec.scale_offset(4, 2, g)] = 0x38;  // 1.0
    c[rec.scale_offset(4, 2, 1)] = 0xFF;
    c[rec.scale_offset(4, 2, 4)] = 0x7F;
    c[rec.scale_offset(4, 2, 2)] = 0xB8;  // -1.0
    c[rec.scale_offset(4, 2, 31)] = 0x00;
    c[rec.data_offset(2) + 2 * 8] = 0x07;  // group 2, value 0: 6 * -1
  });
  EXPECT_EQ(n.flags(), (std::vector<std::string>{"scale-nan@1,4", "scale-neg@2", "scale0@31"}));
  EXPECT_EQ(n.nan_values, 32);
  EXPECT_EQ(n.nope_min, -6.0f);
  EXPECT_EQ(n.scale255_tiles(), 0);
  // The indexer key: bytes 0 and 255 (E8M0's NaN: its 32 values decode to NaN).
  const auto x = token(S::Record::kMxfp4Indexer, [](std::vector<uint8_t>& c, const S::RecordLayout& rec) {
    c[rec.scale_offset(4, 2, 0)] = 255;
    c[rec.scale_offset(4, 2, 1)] = 1;
    c[rec.scale_offset(4, 2, 2)] = 254;
    c[rec.data_offset(2) + 16 * 2] = 0x07;  // group 2, value 0: 6 * 2^127 overflows bf16: inf
  });
  EXPECT_EQ(x.flags(), (std::vector<std::string>{"scale-nan@0", "scale0@3"}));
  EXPECT_EQ(x.nan_values, 32);
  EXPECT_EQ(x.inf_values, 1);
  EXPECT_EQ(
      dsv4kv::conformance::format_token_line(x, 0),
      "     2   nan -126  127 -127            0         inf  values[]  scale-nan@0  scale0@3  (decoded: 32 NaN, 1 "
      "inf)\n");
}

TEST(Inspect, RecordFromTheShapeOrTheFormatOption) {
  using dsv4kv::conformance::infer_block_size;
  using dsv4kv::conformance::record_of_shape;
  for (const S::Record r : kV41) {
    const S::RecordLayout rec = S::record_layout(r);
    const std::vector<int64_t> rank3 = {3, 16, rec.token_bytes()}, exact = {3, 16 * rec.token_bytes()};
    EXPECT_EQ(record_of_shape(rank3), r);
    EXPECT_EQ(infer_block_size(rank3), 16);
    EXPECT_EQ(infer_block_size(rank3, r), 16);
    EXPECT_EQ(infer_block_size(rank3, S::Record::kFp8DsMla), std::nullopt);  // made for another record
    EXPECT_EQ(record_of_shape(exact), std::nullopt);                         // rank 2: fp8_ds_mla unless told
    EXPECT_EQ(infer_block_size(exact, r), 16);
  }
  // vLLM's 512-byte pages: one block size for the 528-byte record; several for the 288- and
  // 68-byte ones unless the stride is exact (then refused: pass --block-size).
  const std::vector<int64_t> mx8 = {1, S::record_layout(S::Record::kMxfp8DsMla).vllm_block_stride(63)};
  EXPECT_EQ(infer_block_size(mx8, S::Record::kMxfp8DsMla), 63);
  const std::vector<int64_t> idx_page = {1, 512}, idx_vllm64 = {1, 4608}, nv4_vllm64 = {1, 18432};
  EXPECT_EQ(infer_block_size(idx_page, S::Record::kMxfp4Indexer), std::nullopt);
  EXPECT_EQ(infer_block_size(idx_vllm64, S::Record::kMxfp4Indexer), std::nullopt);
  EXPECT_EQ(infer_block_size(nv4_vllm64, S::Record::kNvfp4DsMla), 64);  // 64 * 288 exactly
  // A W that is no record's width: read as fp8_ds_mla (or --format) from the block stride, as before.
  const std::vector<int64_t> odd = {2, 4, 1000}, fp8_rows = {2, 1, S::vllm_block_stride(64)};
  EXPECT_EQ(record_of_shape(odd), std::nullopt);
  EXPECT_EQ(infer_block_size(odd), std::nullopt);
  EXPECT_EQ(infer_block_size(odd, S::Record::kMxfp8DsMla), std::nullopt);
  EXPECT_EQ(infer_block_size(odd, S::Record::kMxfp4Indexer), std::nullopt);
  EXPECT_EQ(record_of_shape(fp8_rows), std::nullopt);
  EXPECT_EQ(infer_block_size(fp8_rows), 64);

  // --format on a rank-2 cache: its block size from the stride of that record.
  const std::vector<uint8_t> cache = worked_example_cache(S::Record::kNvfp4DsMla);
  const int64_t stride = S::record_layout(S::Record::kNvfp4DsMla).block_data_bytes(4);
  InspectOptions o;
  o.record = S::Record::kNvfp4DsMla;
  const auto r2 = dsv4kv::conformance::inspect_image(dsv4kv::conformance::load_cache_image(npy({2, stride}, cache)), o);
  EXPECT_EQ(r2.record, S::Record::kNvfp4DsMla);
  EXPECT_EQ(r2.block_size, 4);
  EXPECT_EQ(r2.tokens[5].scale_bytes[0], 0x35);
  // Without --format the same bytes are read as fp8_ds_mla: 1152 is vLLM's stride of one 584-byte token.
  EXPECT_NE(dsv4kv::conformance::inspect_bytes(npy({2, stride}, cache), InspectOptions{})
                .find("layout: block_size 1, block_stride 1152 bytes (584 used, tail 568), 2 blocks, e4m3fn\n"),
            std::string::npos);
  // A --format the shape's width contradicts; --fnuz with a V4.1 record.
  o.record = S::Record::kMxfp8DsMla;
  EXPECT_EQ(error_of([&] {
              (void)dsv4kv::conformance::inspect_bytes(npy({2, 4, 288}, cache), o, "w.npy");
            }),
            "w.npy: --format mxfp8_ds_mla does not fit the cache: its shape [2, 4, 288] has 288 bytes per token, the "
            "width of record nvfp4_ds_mla (mxfp8_ds_mla has 528)");
  o.record = S::Record::kFp8DsMla;
  EXPECT_NE(error_of([&] {
              (void)dsv4kv::conformance::inspect_bytes(npy({2, 4, 288}, cache), o, "w.npy");
            }).find("--format fp8_ds_mla does not fit the cache"),
            std::string::npos);
  InspectOptions fnuz;
  fnuz.format = S::Fp8Format::kE4M3Fnuz;
  EXPECT_EQ(error_of([&] {
              (void)dsv4kv::conformance::inspect_bytes(npy({2, 4, 288}, cache), fnuz, "w.npy");
            }),
            "w.npy: --fnuz applies to record fp8_ds_mla only, but the cache's record is nvfp4_ds_mla (shape [2, 4, "
            "288]; the V4.1 records are e4m3fn only)");
  // A block size too large for the record's stride is refused with the record's width.
  InspectOptions big;
  big.block_size = 5;
  EXPECT_NE(error_of([&] {
              (void)dsv4kv::conformance::inspect_bytes(npy({2, 4, 288}, cache), big);
            }).find("block_size 5 needs 1440 bytes per block, but the cache's blocks have 1152"),
            std::string::npos);
}

TEST(Inspect, FormatFp8DsMlaPrintsTheSameReport) {
  // The 584-byte record is the default: naming it changes no byte of the report.
  const Written w = write_cache(4, 2, 4 * S::kTokenBytes);
  InspectOptions named;
  named.record = S::Record::kFp8DsMla;
  for (const auto& shape : {std::vector<int64_t>{2, w.stride}, std::vector<int64_t>{2, 4, S::kTokenBytes}}) {
    const std::string plain = dsv4kv::conformance::inspect_bytes(npy(shape, w.cache), InspectOptions{});
    EXPECT_EQ(dsv4kv::conformance::inspect_bytes(npy(shape, w.cache), named), plain);
    EXPECT_EQ(plain.find("record"), std::string::npos) << plain;
    EXPECT_NE(plain.find("summary: 8 tokens, 6 flagged (non-zero pad byte: 6, scale byte 255: 0, NaN codes: 0)\n"),
              std::string::npos)
        << plain;
  }
}

TEST(Inspect, FormatFlagGrammar) {
  using dsv4kv::conformance::InspectUsageError;
  using dsv4kv::conformance::parse_inspect_args;
  EXPECT_EQ(parse_inspect_args({"f", "--format", "mxfp8_ds_mla"}).options.record, S::Record::kMxfp8DsMla);
  EXPECT_EQ(parse_inspect_args({"f", "--record=mxfp4_indexer"}).options.record, S::Record::kMxfp4Indexer);
  EXPECT_EQ(parse_inspect_args({"f", "--format", "fp8_ds_mla", "--fnuz"}).options.record, S::Record::kFp8DsMla);
  EXPECT_EQ(parse_inspect_args({"f"}).options.record, std::nullopt);
  auto message = [&](std::vector<std::string> args) {
    try {
      (void)parse_inspect_args(args);
    } catch (const InspectUsageError& e) { return std::string(e.what()); }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message({"f", "--format", "fp4"}),
            "--format must be one of fp8_ds_mla, mxfp8_ds_mla, nvfp4_ds_mla, mxfp4_indexer, got 'fp4'");
  EXPECT_EQ(message({"f", "--record="}),
            "--record must be one of fp8_ds_mla, mxfp8_ds_mla, nvfp4_ds_mla, mxfp4_indexer, got ''");
  EXPECT_EQ(message({"f", "--format"}), "--format needs a value");
  EXPECT_EQ(message({"f", "--fnuz", "--format", "nvfp4_ds_mla"}),
            "--fnuz applies to record fp8_ds_mla only, not to nvfp4_ds_mla (the V4.1 records are e4m3fn only)");
  EXPECT_NE(dsv4kv::conformance::inspect_usage().find("--format NAME"), std::string::npos);
}

TEST(Inspect, V41CommandStatuses) {
  using dsv4kv::conformance::kInspectFailed;
  using dsv4kv::conformance::kInspectOk;
  using dsv4kv::conformance::kInspectUsageError;
  const auto dir = std::filesystem::temp_directory_path() / ("dsv4kv_inspect_v41_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto save = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  };
  const auto mx8 = npy({2, 4, 528}, worked_example_cache(S::Record::kMxfp8DsMla));
  const std::string m = save("mx8.npy", mx8);
  const std::string x = save("idx.npy", npy({2, 4, 68}, worked_example_cache(S::Record::kMxfp4Indexer)));
  const std::string odd = save("odd.npy", npy({2, 4, 1000}, std::vector<uint8_t>(8000, 0)));
  const std::string cut = save("cut.npy", std::vector<uint8_t>(mx8.begin(), mx8.end() - 1));
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string has;
  };
  const std::vector<Case> cases = {
      {{m}, kInspectOk, "summary: 8 tokens, 0 flagged (scale byte 255: 0, NaN codes: 0)"},
      {{m, "--format", "mxfp8_ds_mla", "--block", "1", "--token", "1"}, kInspectOk, "summary: 1 tokens, 0 flagged"},
      {{x, "--record", "mxfp4_indexer", "--block", "1"}, kInspectOk, "summary: 4 tokens, 3 flagged"},
      {{m, "--format", "nvfp4_ds_mla"}, kInspectFailed, "--format nvfp4_ds_mla does not fit the cache"},
      {{m, "--fnuz"}, kInspectFailed, "--fnuz applies to record fp8_ds_mla only, but"},
      {{odd}, kInspectFailed, "cannot infer the block size from a block stride of 4000 bytes"},
      {{odd, "--format", "mxfp4_indexer"}, kInspectFailed, "cannot infer the block size of record mxfp4_indexer"},
      {{odd, "--format", "mxfp4_indexer", "--block-size", "4"}, kInspectOk, "summary: 8 tokens, 8 flagged"},
      {{cut}, kInspectFailed, "shape needs 4224 bytes but the file holds 4223"},
      {{m, "--format", "v4"}, kInspectUsageError, "--format must be one of"},
      {{m, "--fnuz", "--record", "mxfp8_ds_mla"}, kInspectUsageError, "--fnuz applies to record fp8_ds_mla only, not"},
  };
  for (const Case& c : cases) {
    std::string out, err;
    const int status = dsv4kv::conformance::run_inspect_command(
        c.args,
        [&](std::string_view s) {
          out += s;
          return true;
        },
        [&](std::string_view s) { err += s; });
    const std::string what = c.args.size() > 1 ? c.args[1] : c.args[0];
    EXPECT_EQ(status, c.status) << what << ": " << err;
    const std::string& text = c.status == kInspectOk ? out : err;
    EXPECT_NE(text.find(c.has), std::string::npos) << what << ": " << text;
    if (c.status != kInspectOk) { EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err; }
  }
  std::filesystem::remove_all(dir);
}

// Every truncation of a valid file is either parsed or rejected with InspectError, never a crash.
TEST(Inspect, EveryTruncationIsHandled) {
  const Written w = write_cache(1, 1, S::kTokenBytes);
  std::vector<std::vector<uint8_t>> files = {npy({1, w.stride}, w.cache),
                                             safetensors("kv", "U8", {1, w.stride}, w.cache)};
  for (const S::Record r : kV41) {  // rank-3 caches of the V4.1 records
    const int64_t tb = S::record_layout(r).token_bytes();
    files.push_back(npy({1, 1, tb}, std::vector<uint8_t>(static_cast<size_t>(tb), 0x7F)));
  }
  for (const auto& file : files) {
    for (size_t n = 0; n < file.size(); n += (n < 200 ? 1 : 37)) {
      const std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(n));
      try {
        InspectOptions o;
        o.block_size = 1;
        (void)dsv4kv::conformance::inspect_bytes(cut, o);
      } catch (const InspectError&) {}
    }
  }
}

}  // namespace
