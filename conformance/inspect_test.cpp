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
      } catch (const InspectError&) {}
    }
  }
}

}  // namespace
