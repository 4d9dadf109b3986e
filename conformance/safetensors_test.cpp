// The safetensors reader on well-formed and malformed images, and the golden
// runner on files that are not usable golden files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "golden.hpp"
#include "safetensors.hpp"

namespace dsv4kv::conformance {
namespace {

/// A file image: u64 little-endian header length, the header, the data.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data = {},
                           std::optional<uint64_t> len = std::nullopt) {
  const uint64_t n = len.value_or(header.size());
  std::vector<uint8_t> b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(n >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

/// The SafetensorsError message of parsing `bytes`, or "" when it parsed.
std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::from_bytes(bytes, "synthetic.safetensors");
  } catch (const SafetensorsError& e) { return e.what(); }
  return "";
}

#define EXPECT_REJECTED(bytes, fragment)                                                       \
  do {                                                                                         \
    const std::string msg_ = error_of(bytes);                                                  \
    EXPECT_NE(msg_.find("synthetic.safetensors: "), std::string::npos) << "message: " << msg_; \
    EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: " << msg_;                  \
  } while (0)

template <class T>
void put(std::vector<uint8_t>& d, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) d.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

/// A well-formed file with one tensor of every dtype and a metadata map.
std::vector<uint8_t> well_formed() {
  std::vector<uint8_t> d;
  for (uint16_t v : {0x3F80, 0xBF80, 0x7FC0, 0x0000, 0x8000, 0x7F80}) put(d, v);  // 12 bytes  BF16 [2,3]
  for (uint8_t v : {1, 2, 250}) put(d, v);                                        // 3 bytes   U8 [3]
  for (int32_t v : {-1, 7, 2147483647, -2147483647 - 1}) put(d, v);               // 16 bytes  I32 [2,2]
  put(d, int64_t{-4096});                                                         // 8 bytes   I64 [1]
  for (uint8_t v : {1, 0}) put(d, v);                                             // 2 bytes   BOOL [2]
  put(d, int64_t{1} << 40);                                                       // 8 bytes   I64 []
  const std::string h = R"({"case000.k":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                        R"("case000.u":{"dtype":"U8","shape":[3],"data_offsets":[12,15]},)"
                        R"("case001.i":{"dtype":"I32","shape":[2,2],"data_offsets":[15,31]},)"
                        R"("case001.param.block_size":{"dtype":"I64","shape":[1],"data_offsets":[31,39]},)"
                        R"("case002.flags":{"dtype":"BOOL","shape":[2],"data_offsets":[39,41]},)"
                        R"("scalar":{"dtype":"I64","shape":[],"data_offsets":[41,49]},)"
                        R"("empty":{"dtype":"I32","shape":[4,0],"data_offsets":[49,49]},)"
                        R"("__metadata__":{"op":"demo","num_cases":"3"}})";
  return image(h, d);
}

TEST(Safetensors, WellFormedRoundTrip) {
  const auto f = SafetensorsFile::from_bytes(well_formed(), "synthetic.safetensors");
  EXPECT_EQ(f.bf16("case000.k"), (std::vector<uint16_t>{0x3F80, 0xBF80, 0x7FC0, 0x0000, 0x8000, 0x7F80}));
  EXPECT_EQ(f.info("case000.k").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.info("case000.k").dtype, StDType::kBF16);
  EXPECT_EQ(f.u8("case000.u"), (std::vector<uint8_t>{1, 2, 250}));
  EXPECT_EQ(f.i32("case001.i"), (std::vector<int32_t>{-1, 7, 2147483647, -2147483647 - 1}));
  EXPECT_EQ(f.param("case001.param.block_size"), -4096);
  EXPECT_EQ(f.param("scalar"), int64_t{1} << 40);  // rank 0 = one element
  EXPECT_EQ(f.boolean("case002.flags"), (std::vector<uint8_t>{1, 0}));
  EXPECT_TRUE(f.i32("empty").empty());
  EXPECT_EQ(f.info("empty").numel(), 0);
  EXPECT_TRUE(f.has("case000.u"));
  EXPECT_FALSE(f.has("case000.nope"));
  EXPECT_EQ(f.raw("case000.u").size(), 3u);
  EXPECT_EQ(f.metadata().at("op"), "demo");
  EXPECT_EQ(f.meta("num_cases"), "3");
  EXPECT_EQ(f.meta("absent", "fallback"), "fallback");
  EXPECT_EQ(f.case_names(), (std::vector<std::string>{"case000", "case001", "case002"}));
  EXPECT_EQ(f.tensor_names().size(), 7u);

  // The same image through the file path entry point.
  const auto path = std::filesystem::temp_directory_path() / "dsv4kv_safetensors_roundtrip.safetensors";
  {
    const auto bytes = well_formed();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const auto g = SafetensorsFile::load(path.string());
  EXPECT_EQ(g.origin(), path.string());
  EXPECT_EQ(g.i32("case001.i"), f.i32("case001.i"));
  std::filesystem::remove(path);
}

TEST(Safetensors, AccessErrorsNameTheTensor) {
  const auto f = SafetensorsFile::from_bytes(well_formed(), "synthetic.safetensors");
  EXPECT_THROW(f.i32("missing"), SafetensorsError);
  try {
    f.i64("case000.k");
    ADD_FAILURE() << "wrong dtype accepted";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("'case000.k' has dtype BF16, expected I64"), std::string::npos) << e.what();
  }
  try {
    f.param("case000.u");
    ADD_FAILURE() << "U8 parameter accepted";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("expected I64"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, RejectsShortFile) {
  EXPECT_REJECTED(std::vector<uint8_t>{}, "shorter than the 8-byte header length");
  EXPECT_REJECTED((std::vector<uint8_t>{1, 0, 0}), "shorter than the 8-byte header length");
}

TEST(Safetensors, RejectsHeaderLengthBeyondFile) {
  EXPECT_REJECTED(image("{}", {}, 1000), "runs past the end of the file");
  EXPECT_REJECTED(image("{}", {}, 3), "runs past the end of the file");
}

TEST(Safetensors, RejectsAbsurdHeaderLength) {
  EXPECT_REJECTED(image("{}", {}, uint64_t{1} << 62), "is over the limit");
  EXPECT_REJECTED(image("{}", {}, ~uint64_t{0}), "is over the limit");  // 8 + N would wrap around
  EXPECT_REJECTED(image("{}", {}, kMaxHeaderBytes + 1), "not a safetensors file: header length 16777217");
}

TEST(Safetensors, RejectsInvalidJson) {
  EXPECT_REJECTED(image("{not json"), "invalid JSON header");
  EXPECT_REJECTED(image(R"({"a":{"dtype":"U8")"), "invalid JSON header");
  EXPECT_REJECTED(image("[1, 2, 3]"), "not a safetensors file: byte 8 is 0x5b");
  EXPECT_REJECTED(image(R"({"a": 5})"), "tensor 'a': entry is not an object");
}

TEST(Safetensors, RejectsMissingFields) {
  EXPECT_REJECTED(image(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", {0}), "tensor 't': missing dtype");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","data_offsets":[0,1]}})", {0}), "tensor 't': missing shape");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[1]}})", {0}), "tensor 't': missing data_offsets");
}

TEST(Safetensors, OtherDtypesAreListedButNotDecoded) {
  // F32 is a safetensors dtype this reader does not decode: its size is checked, the
  // file stays readable, and only reading that tensor as a supported type fails.
  const auto f = SafetensorsFile::from_bytes(
      image(
          R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"u":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}})",
          {0, 0, 0, 0, 9}),
      "synthetic.safetensors");
  EXPECT_EQ(f.info("t").dtype, StDType::kOther);
  EXPECT_EQ(f.info("t").dtype_name, "F32");
  EXPECT_EQ(f.u8("u"), std::vector<uint8_t>{9});
  try {
    f.i32("t");
    ADD_FAILURE() << "F32 read as I32";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("'t' has dtype F32, expected I32"), std::string::npos) << e.what();
  }
  // A known other dtype still has its byte size checked.
  EXPECT_REJECTED(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", {0, 0, 0, 0}),
                  "byte size 4 != prod(shape) * 4 = 8");
  EXPECT_REJECTED(image(R"({"t":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", {0}), "dtype is not a string");
}

TEST(Safetensors, RejectsBadOffsets) {
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[4,2]}})", {0, 0, 0, 0}),
                  "data_offsets reversed");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", {0, 0, 0, 0}),
                  "beyond the data section");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", {0}), "not a [begin, end] pair");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", {0}), "not non-negative integers");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}})", {0}),
                  "beyond the data section");
}

TEST(Safetensors, RejectsSizeMismatch) {
  EXPECT_REJECTED(image(R"({"t":{"dtype":"I32","shape":[3],"data_offsets":[0,8]}})", std::vector<uint8_t>(8)),
                  "byte size 8 != prod(shape) * 4 = 12");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[-2],"data_offsets":[0,0]}})"), "not a non-negative integer");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}})"), "not a non-negative integer");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":3,"data_offsets":[0,3]}})", {0, 0, 0}), "shape is not an array");
  // Products that overflow 64 bits must not wrap around to a small size.
  EXPECT_REJECTED(image(R"({"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
                  "too many elements");
  EXPECT_REJECTED(image(R"({"t":{"dtype":"I64","shape":[2305843009213693952],"data_offsets":[0,0]}})"),
                  "too many elements");
}

TEST(Safetensors, RejectsBadMetadata) {
  EXPECT_REJECTED(image(R"({"__metadata__":{"op":5}})"), "__metadata__ value of 'op' is not a string");
  EXPECT_REJECTED(image(R"({"__metadata__":[1]})"), "__metadata__ is not an object");
}

TEST(Safetensors, MessageNamesTheFileOnDisk) {
  const auto path = std::filesystem::temp_directory_path() / "dsv4kv_safetensors_bad.safetensors";
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  try {
    SafetensorsFile::load(path.string());
    ADD_FAILURE() << "3-byte file accepted";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ": ", 0), 0u) << e.what();
  }
  std::filesystem::remove(path);
  EXPECT_THROW(SafetensorsFile::load(path.string()), SafetensorsError);  // missing file
}

// Every truncation and many random corruptions of a valid image either parse
// or raise SafetensorsError: nothing else escapes (run under ASan/UBSan with
// -DDSV4KV_SANITIZE=ON to also prove no out-of-bounds read).
TEST(Safetensors, TruncationsAndCorruptionsNeverCrash) {
  const auto good = well_formed();
  for (size_t n = 0; n <= good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      SafetensorsFile::from_bytes(cut);
    } catch (const SafetensorsError&) {}
  }
  std::mt19937_64 rng(12345);
  for (int iter = 0; iter < 3000; ++iter) {
    auto bad = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
    try {
      const auto f = SafetensorsFile::from_bytes(bad);
      for (const auto& name : f.tensor_names()) (void)f.raw(name);  // every span in bounds
    } catch (const SafetensorsError&) {}
  }
}

// ---------------------------------------------------------------------------
// The golden runner on files that are not usable golden files.
// ---------------------------------------------------------------------------
std::string write_temp(const std::string& name, const std::vector<uint8_t>& bytes) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

/// The single file-level failure run_golden_file must give for `bytes`.
std::string file_failure_of(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = write_temp(name, bytes);
  NullBackend backend;
  const auto results = run_golden_file(path, backend);
  std::filesystem::remove(path);
  EXPECT_EQ(results.size(), 1u);
  if (results.empty()) return "";
  EXPECT_FALSE(results[0].passed);
  EXPECT_TRUE(results[0].case_name.empty());
  return results[0].message;
}

TEST(GoldenRunner, MalformedFileIsAClearError) {
  EXPECT_NE(file_failure_of("dsv4kv_golden_trunc.safetensors", {1, 2, 3}).find("shorter than the 8-byte"),
            std::string::npos);
  EXPECT_NE(file_failure_of("dsv4kv_golden_json.safetensors", image("{oops")).find("invalid JSON header"),
            std::string::npos);
  NullBackend backend;
  const auto missing = run_golden_file("/nonexistent/dir/x.safetensors", backend);
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_FALSE(missing[0].passed);
  EXPECT_NE(missing[0].message.find("cannot open"), std::string::npos) << missing[0].message;
}

TEST(GoldenRunner, UnknownOpOrMissingMetadataIsAClearError) {
  const std::string v1 = R"("format":"dsv4kv-golden-v1")";
  EXPECT_NE(file_failure_of("dsv4kv_golden_op.safetensors",
                            image(R"({"__metadata__":{"op":"frobnicate",)" + v1 + R"(,"num_cases":"1"}})"))
                .find("unknown op 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(file_failure_of("dsv4kv_golden_noop.safetensors", image(R"({"__metadata__":{"num_cases":"1"}})"))
                .find("has no 'op'"),
            std::string::npos);
  EXPECT_NE(file_failure_of("dsv4kv_golden_fmt.safetensors",
                            image(R"({"__metadata__":{"op":"compute_global_topk_indices_and_lens","format":"v0"}})"))
                .find("unsupported golden format"),
            std::string::npos);
  EXPECT_NE(file_failure_of("dsv4kv_golden_nc.safetensors",
                            image(R"({"__metadata__":{"op":"compute_global_topk_indices_and_lens",)" + v1 +
                                  R"(,"num_cases":"many"}})"))
                .find("num_cases 'many'"),
            std::string::npos);
}

TEST(GoldenRunner, CaseWithMissingTensorFailsThatCaseOnly) {
  // A global_topk file whose case000 has only one parameter: the case fails with
  // the missing tensor's name; nothing is run.
  std::vector<uint8_t> d;
  put(d, int64_t{4});
  const std::string h = R"({"case000.param.topk":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                        R"("__metadata__":{"op":"compute_global_topk_indices_and_lens",)"
                        R"("format":"dsv4kv-golden-v1","num_cases":"1"}})";
  const std::string path = write_temp("dsv4kv_golden_case.safetensors", image(h, d));
  NullBackend backend;
  const auto results = run_golden_file(path, backend);
  std::filesystem::remove(path);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].passed);
  EXPECT_EQ(results[0].case_name, "case000");
  EXPECT_EQ(results[0].op, "compute_global_topk_indices_and_lens");
  EXPECT_NE(results[0].message.find("no tensor named 'case000.topk_indices'"), std::string::npos) << results[0].message;
}

TEST(GoldenRunner, GoldenDirHonoursEnvironment) {
  // Restore whatever the environment said (the suite may run with it set on a GPU machine).
  const char* env = std::getenv("DSV4KV_GOLDEN_DIR");
  const std::optional<std::string> before = env ? std::optional<std::string>(env) : std::nullopt;
  ::setenv("DSV4KV_GOLDEN_DIR", "/tmp/dsv4kv-elsewhere", 1);
  EXPECT_EQ(golden_dir(), "/tmp/dsv4kv-elsewhere");
  ::unsetenv("DSV4KV_GOLDEN_DIR");
  EXPECT_EQ(golden_dir(), DSV4KV_GOLDEN_DIR);
  ::setenv("DSV4KV_GOLDEN_DIR", "/nonexistent/dsv4kv-golden", 1);
  EXPECT_THROW(golden_files(), std::runtime_error);
  ::unsetenv("DSV4KV_GOLDEN_DIR");
  if (before) ::setenv("DSV4KV_GOLDEN_DIR", before->c_str(), 1);
}

}  // namespace
}  // namespace dsv4kv::conformance
