// The file readers on hostile input: non-files, size caps, the strict safetensors header
// (NUL bytes, nesting, duplicates, UTF-8, tiling of the data section), zero-size tensors with
// huge dimensions, other dtypes, the strict .npy grammar, streaming inspection, and the golden
// runner's bound on a view whose strides come from the file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend.hpp"
#include "file_input.hpp"
#include "golden.hpp"
#include "inspect.hpp"
#include "safetensors.hpp"

namespace dsv4kv::conformance {
namespace {

namespace S = dsv4kv::spec;
namespace fs = std::filesystem;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

/// A safetensors image: u64 little-endian header length, the header text, the data.
std::vector<uint8_t> st_image(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

/// The SafetensorsError message for `bytes`, or "" when they parse.
std::string st_error(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::from_bytes(bytes, "h.safetensors");
  } catch (const SafetensorsError& e) { return e.what(); }
  return "";
}

#define EXPECT_MESSAGE(msg_expr, fragment)                                            \
  do {                                                                                \
    const std::string m_ = (msg_expr);                                                \
    EXPECT_NE(m_.find(fragment), std::string::npos) << "message: " << m_;             \
    EXPECT_EQ(m_.find('\n'), std::string::npos) << "message is not one line: " << m_; \
  } while (0)

/// A one-tensor U8 entry `name` covering data bytes [b, e).
std::string u8_entry(const std::string& name, int64_t n, int64_t b) {
  return "\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(n) + "],\"data_offsets\":[" +
         std::to_string(b) + "," + std::to_string(b + n) + "]}";
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("dsv4kv_hostile_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const auto p = path_ / name;
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// ---------------------------------------------------------------------------
// Files that are not regular files, and the size cap
// ---------------------------------------------------------------------------
std::string open_error(const std::string& path, uint64_t cap = 1 << 20) {
  try {
    FileBytes::open(path, cap);
  } catch (const FileError& e) { return e.what(); }
  return "";
}

TEST(HostileFiles, OnlyRegularFilesAreRead) {
  TempDir dir;
  // /dev/zero would be read forever; it is refused before a byte is read.
  EXPECT_MESSAGE(open_error("/dev/zero"), "/dev/zero: not a regular file (a character device)");
  EXPECT_MESSAGE(open_error(dir.path("")), "not a regular file (a directory)");
  // A FIFO without a writer: opening it must not block, and it is refused.
  const std::string fifo = dir.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_MESSAGE(open_error(fifo), "not a regular file (a FIFO)");
  EXPECT_MESSAGE(open_error(dir.path("missing")), "cannot open: No such file or directory");
  // The readers report the same, each with its own error type.
  try {
    SafetensorsFile::load(fifo);
    ADD_FAILURE() << "FIFO accepted";
  } catch (const SafetensorsError& e) { EXPECT_MESSAGE(std::string(e.what()), "not a regular file (a FIFO)"); }
  try {
    load_cache_file("/dev/zero");
    ADD_FAILURE() << "/dev/zero accepted";
  } catch (const InspectError& e) { EXPECT_MESSAGE(std::string(e.what()), "not a regular file (a character device)"); }
}

TEST(HostileFiles, SizeCapIsEnforcedAndEmptyFilesAreEmpty) {
  TempDir dir;
  const std::string p = dir.file("ten", std::vector<uint8_t>(10, 7));
  EXPECT_MESSAGE(open_error(p, 9), "file is 10 bytes, over the limit of 9 bytes");
  const auto f = FileBytes::open(p, 10);
  ASSERT_EQ(f->size(), 10u);
  EXPECT_EQ(f->bytes()[9], 7);
  f->release(0, 10);  // only a hint: the bytes read the same afterwards
  EXPECT_EQ(f->bytes()[0], 7);
  EXPECT_EQ(FileBytes::open(dir.file("empty", {}), 10)->size(), 0u);
  try {
    SafetensorsFile::load(dir.file("empty2", {}));
    ADD_FAILURE() << "empty file accepted";
  } catch (const SafetensorsError& e) { EXPECT_MESSAGE(std::string(e.what()), "not a safetensors file: 0 bytes"); }
}

TEST(HostileFiles, MessagesAreOneLineWhateverTheNames) {
  EXPECT_EQ(printable("a\nb\x01\xff", 80), "a\\x0ab\\x01\\xff");
  EXPECT_EQ(printable(std::string(100, 'x'), 10), std::string(10, 'x') + "...");
  // A tensor name with a newline and a NUL, reported in an error.
  const std::string h = "{\"a\\nb\\u0000c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,1]}}";
  EXPECT_MESSAGE(st_error(st_image(h, {0})), "tensor 'a\\x0ab\\x00c': byte size 1");
}

// ---------------------------------------------------------------------------
// Not a safetensors file at all
// ---------------------------------------------------------------------------
TEST(HostileFiles, NonSafetensorsFilesSaySo) {
  EXPECT_MESSAGE(st_error(bytes_of("#!/bin/sh\necho hello world\n")), "not a safetensors file: byte 8 is 0x68");
  std::vector<uint8_t> elf = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_MESSAGE(st_error(elf), "not a safetensors file: byte 8 is 0x00");
  EXPECT_MESSAGE(st_error(bytes_of("\x93NUMPY\x01\x00\x10\x00")), "not a safetensors file: it is a .npy file");
  EXPECT_MESSAGE(st_error(bytes_of("12345678")),
                 "not a safetensors file: the file ends after the 8-byte header length");
  // '{' at byte 8 but a length made of text: over the header limit.
  EXPECT_MESSAGE(st_error(bytes_of("abcdefgh{}")), "not a safetensors file: header length");
  // Space before the '{' is not the format (the header must start at byte 8).
  EXPECT_MESSAGE(st_error(st_image(" {}")), "not a safetensors file: byte 8 is 0x20");
}

// ---------------------------------------------------------------------------
// The header parser: strict JSON, bounded nesting, no duplicates
// ---------------------------------------------------------------------------
TEST(HostileFiles, NulAndControlBytesAreRejected) {
  const std::string ok = "{" + u8_entry("t", 1, 0) + "}";
  ASSERT_EQ(st_error(st_image(ok, {5})), "");
  // A NUL after the object must not end the header silently.
  EXPECT_MESSAGE(st_error(st_image(ok + std::string(1, '\0') + "garbage", {5})),
                 "invalid JSON header at file byte " + std::to_string(8 + ok.size()) +
                     ": unexpected byte 0x00 after the header object");
  // Trailing spaces are the format's padding and are fine.
  EXPECT_EQ(st_error(st_image(ok + "      ", {5})), "");
  std::string nul_in_name = ok;
  nul_in_name[2] = '\0';  // {"\0":...
  EXPECT_MESSAGE(st_error(st_image(nul_in_name, {5})), "control byte 0x00 inside a string");
  EXPECT_MESSAGE(st_error(st_image("{\"t\x01\":1}")), "control byte 0x01 inside a string");
}

TEST(HostileFiles, InvalidUtf8AndEscapesAreRejected) {
  EXPECT_MESSAGE(st_error(st_image("{\"\xff\":1}")), "invalid UTF-8 in a string");
  EXPECT_MESSAGE(st_error(st_image("{\"\xc0\xaf\":1}")), "invalid UTF-8 in a string");      // overlong '/'
  EXPECT_MESSAGE(st_error(st_image("{\"\xed\xa0\x80\":1}")), "invalid UTF-8 in a string");  // UTF-8 surrogate
  EXPECT_MESSAGE(st_error(st_image(R"({"\ud800":1})")), "unpaired surrogate");
  EXPECT_MESSAGE(st_error(st_image(R"({"\q":1})")), "invalid escape");
  // Valid escapes decode: \u00e9 is U+00E9, a surrogate pair is one code point.
  const auto f = SafetensorsFile::from_bytes(
      st_image(R"({"caf\u00e9\ud83d\ude00":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {1}));
  EXPECT_TRUE(f.has("caf\xc3\xa9\xf0\x9f\x98\x80"));
}

TEST(HostileFiles, DeepNestingNeverRecurses) {
  // 10,000 levels where a shape entry should be: refused at the first '['.
  const std::string deep = std::string(10000, '[') + std::string(10000, ']');
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"dtype":"U8","shape":[)" + deep + R"(],"data_offsets":[0,0]}})")),
                 "tensor 't': shape entry '[' is not a non-negative integer");
  // In a field the reader skips: nesting is walked with a bounded stack.
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"extra":)" + deep + R"(,"dtype":"U8","shape":[0],"data_offsets":[0,0]}})")),
                 "nesting deeper than 64 levels");
  // In metadata, values must be strings.
  EXPECT_MESSAGE(st_error(st_image(R"({"__metadata__":{"k":)" + deep + "}}")),
                 "__metadata__ value of 'k' is not a string");
  // Moderate nesting in an unknown field is skipped (fields the format may add later).
  const auto f = SafetensorsFile::from_bytes(st_image(
      R"({"t":{"extra":{"a":[1,-2.5e3,{"b":[true,false,null,"s"]}],"c":{}},"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
      {3}));
  EXPECT_EQ(f.u8("t"), std::vector<uint8_t>{3});
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"extra":[1,,2],"dtype":"U8","shape":[0],"data_offsets":[0,0]}})")),
                 "invalid JSON header");
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"extra":tru,"dtype":"U8","shape":[0],"data_offsets":[0,0]}})")),
                 "invalid JSON header");
}

TEST(HostileFiles, DuplicatesAreRejected) {
  EXPECT_MESSAGE(st_error(st_image("{" + u8_entry("t", 1, 0) + "," + u8_entry("t", 1, 1) + "}", {1, 2})),
                 "duplicate tensor name 't'");
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {1})),
                 "tensor 't': duplicate field 'dtype'");
  EXPECT_MESSAGE(st_error(st_image(R"({"__metadata__":{"op":"a","op":"b"}})")), "duplicate __metadata__ key 'op'");
  EXPECT_MESSAGE(st_error(st_image(R"({"__metadata__":{},"__metadata__":{}})")), "duplicate key '__metadata__'");
}

TEST(HostileFiles, NumbersAreStrict) {
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}})", {1})),
                 "invalid JSON header");
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}})", {1})),
                 "shape entry 1e0 is not a non-negative integer");
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})")),
                 "is not a non-negative integer below 2^63");
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", {1})),
                 "data_offsets is not a [begin, end] pair");
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}})", {1})),
                 "data_offsets entries are not non-negative integers");
  std::string rank65 = R"({"t":{"dtype":"U8","shape":[)";
  for (int i = 0; i < 65; ++i) rank65 += i ? ",1" : "1";
  EXPECT_MESSAGE(st_error(st_image(rank65 + R"(],"data_offsets":[0,1]}})", {1})), "rank above the limit of 64");
}

// ---------------------------------------------------------------------------
// The data section: tensors tile it exactly
// ---------------------------------------------------------------------------
TEST(HostileFiles, TensorsMustTileTheDataSection) {
  // Overlap.
  EXPECT_MESSAGE(st_error(st_image("{" + u8_entry("a", 2, 0) + "," + u8_entry("b", 2, 1) + "}", {1, 2, 3})),
                 "tensor 'b': data_offsets [1, 3] overlap tensor 'a' [0, 2]");
  // A gap.
  EXPECT_MESSAGE(st_error(st_image("{" + u8_entry("a", 1, 0) + "," + u8_entry("b", 1, 2) + "}", {1, 2, 3})),
                 "data section bytes [1, 2) belong to no tensor");
  // Bytes after the last tensor.
  EXPECT_MESSAGE(st_error(st_image("{" + u8_entry("a", 1, 0) + "}", {1, 2})),
                 "data section is 2 bytes but the tensors end at byte 1");
  // Zero-size tensors between others, in any header order, are fine.
  const auto f = SafetensorsFile::from_bytes(
      st_image("{" + u8_entry("b", 1, 1) + "," + u8_entry("z", 0, 1) + "," + u8_entry("a", 1, 0) + "}", {4, 5}));
  EXPECT_EQ(f.u8("a"), std::vector<uint8_t>{4});
  EXPECT_EQ(f.u8("b"), std::vector<uint8_t>{5});
  EXPECT_TRUE(f.u8("z").empty());
}

// ---------------------------------------------------------------------------
// Zero-size tensors with huge dimensions; other dtypes
// ---------------------------------------------------------------------------
TEST(HostileFiles, ZeroSizeTensorsWithHugeDimsHaveZeroElements) {
  for (const std::string shape : {"[4611686018427387904,4611686018427387904,0]",
                                  "[0,4611686018427387904,4611686018427387904]", "[9223372036854775807,0]"}) {
    const auto f = SafetensorsFile::from_bytes(
        st_image(R"({"t":{"dtype":"I64","shape":)" + shape + R"(,"data_offsets":[0,0]}})"), "z.safetensors");
    EXPECT_EQ(f.info("t").numel(), 0) << shape;
    EXPECT_TRUE(f.i64("t").empty());
    EXPECT_THROW(f.param("t"), SafetensorsError);
  }
  // A product that does not fit is refused at parse time, and numel() never overflows.
  EXPECT_MESSAGE(st_error(st_image(R"({"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})")),
                 "has too many elements");
  TensorInfo made_up;
  made_up.name = "x";
  made_up.shape = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_THROW((void)made_up.numel(), SafetensorsError);
}

TEST(HostileFiles, UndefinedDtypeIsListedAndNeverRead) {
  // A dtype name the format does not define: offsets are checked, the size cannot be.
  const auto f = SafetensorsFile::from_bytes(st_image(
      R"({"q":{"dtype":"Q7_WEIRD","shape":[3],"data_offsets":[0,5]},"u":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}})",
      {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f.info("q").dtype, StDType::kOther);
  EXPECT_EQ(f.raw("q").size(), 5u);
  EXPECT_THROW(f.u8("q"), SafetensorsError);
  EXPECT_EQ(f.u8("u"), std::vector<uint8_t>{6});
  // Sub-byte dtypes: F4 [3] is 12 bits, not whole bytes.
  EXPECT_MESSAGE(st_error(st_image(R"({"q":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", {0, 0})),
                 "does not fill a whole number of bytes");
  EXPECT_EQ(st_error(st_image(R"({"q":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", {0, 0})), "");
}

TEST(HostileFiles, InspectIgnoresTensorsOfOtherDtypes) {
  std::vector<uint8_t> data(4, 0);     // F32 [1]
  data.resize(4 + S::kTokenBytes, 0);  // U8 [1, 584]
  const std::string h = R"({"a_f32":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b_weird":{"dtype":"ZZ","shape":[],"data_offsets":[4,4]},)"
                        R"("kv":{"dtype":"U8","shape":[1,)" +
                        std::to_string(S::kTokenBytes) + R"(],"data_offsets":[4,)" +
                        std::to_string(4 + S::kTokenBytes) + "]}}";
  InspectOptions o;
  o.block_size = 1;
  const auto r = inspect_image(load_cache_image(st_image(h, data)), o);
  EXPECT_EQ(r.image.tensor, "kv");
  EXPECT_EQ(r.tokens.size(), 1u);
  InspectOptions named = o;
  named.tensor = "a_f32";
  try {
    load_cache_image(st_image(h, data), named.tensor);
    ADD_FAILURE() << "F32 tensor accepted as a cache";
  } catch (const InspectError& e) { EXPECT_MESSAGE(std::string(e.what()), "tensor 'a_f32' is F32, a cache is U8"); }
}

// ---------------------------------------------------------------------------
// .npy: the strict header grammar
// ---------------------------------------------------------------------------
std::vector<uint8_t> npy_raw(const std::string& dict, size_t data_bytes, int major = 1, int minor = 0) {
  std::string header = dict;
  header += '\n';
  std::string f = "\x93NUMPY";
  f += static_cast<char>(major);
  f += static_cast<char>(minor);
  const size_t n = header.size();
  f += static_cast<char>(n & 0xFF);
  f += static_cast<char>((n >> 8) & 0xFF);
  if (major >= 2) {
    f += static_cast<char>((n >> 16) & 0xFF);
    f += static_cast<char>((n >> 24) & 0xFF);
  }
  f += header;
  f.append(data_bytes, '\0');
  return bytes_of(f);
}

std::string npy_error(const std::vector<uint8_t>& f) {
  try {
    load_cache_image(f, "", "h.npy");
  } catch (const InspectError& e) { return e.what(); }
  return "";
}

TEST(HostileFiles, NpyHeaderGrammarIsStrict) {
  const size_t n = 2 * S::kTokenBytes;
  const std::string shape = "(2, " + std::to_string(S::kTokenBytes) + ")";
  // What NumPy writes, and harmless variants of it.
  EXPECT_EQ(npy_error(npy_raw("{'descr': '|u1', 'fortran_order': False, 'shape': " + shape + ", }", n)), "");
  EXPECT_EQ(npy_error(npy_raw("{\"shape\":" + shape + ",\"descr\":\"<u1\",\"fortran_order\":False}", n)), "");
  EXPECT_EQ(
      npy_error(npy_raw(
          "{'descr': '|u1', 'fortran_order': False, 'shape': (2, " + std::to_string(S::kTokenBytes) + ",), }", n, 2)),
      "");
  EXPECT_EQ(npy_error(npy_raw("{'descr': '|u1', 'fortran_order': False, 'shape': " + shape + "}", n, 3)), "");

  const std::string fo = "'fortran_order': False";
  const std::string ds = "'descr': '|u1'";
  const std::string sh = "'shape': " + shape;
  struct Bad {
    std::string dict, fragment;
  };
  const Bad bad[] = {
      {"{'descr': '<u1'x, " + fo + ", " + sh + "}", "expects ',' or '}'"},  // a key never matches by prefix
      {"{" + ds + ", 'fortran_order': Falsey, " + sh + "}", "fortran_order must be True or False, got 'Falsey'"},
      {"{" + ds + ", " + fo + ", 'shape': (1,, 584)}", "expects a dimension"},
      {"{" + ds + ", " + fo + ", 'shape': (1 2, 584)}", "expects ',' or ')' in the shape"},
      {"{" + ds + ", " + fo + ", 'shape': (1168)}", "is not a tuple"},
      {"{" + ds + ", " + fo + ", 'shape': (02, 584)}", "leading zero"},
      {"{" + ds + ", " + fo + ", 'shape': (2L, 584)}", "not a plain decimal integer"},
      {"{" + ds + ", " + fo + ", 'shape': (2, 5_84)}", "not a plain decimal integer"},
      {"{" + ds + ", " + fo + ", 'shape': (99999999999999999999, 1)}", "above 2^63 - 1"},
      {"{" + ds + ", " + fo + ", " + sh + ", " + ds + "}", "repeats the key 'descr'"},
      {"{" + ds + ", " + sh + "}", "lacks the key 'fortran_order'"},
      {"{" + ds + ", " + fo + ", " + sh + ", 'extra': 1}", "unknown key 'extra'"},
      {"{'descr ': '|u1', " + fo + ", " + sh + "}", "unknown key 'descr '"},
      {"{'descr': '<f4', " + fo + ", " + sh + "}", "must be uint8 (descr '|u1'), got '<f4'"},
      {"{'descr': '|u1\\x00', " + fo + ", " + sh + "}", "escape or a non-ASCII byte"},
      {"{" + ds + ", 'fortran_order': True, " + sh + "}", "must be in C order"},
      {"{" + ds + ", " + fo + ", " + sh + "} x", "after the closing '}'"},
      {"{" + ds + ", " + fo + ", " + sh, "expects ',' or '}'"},
  };
  for (const Bad& b : bad) EXPECT_MESSAGE(npy_error(npy_raw(b.dict, n)), b.fragment);

  // A NUL inside the header.
  std::string with_nul = "{" + ds + ", " + fo + ", " + sh + "}";
  with_nul[1] = '\0';
  EXPECT_MESSAGE(npy_error(npy_raw(with_nul, n)), "expects a quoted key");
  // Data must be exactly as long as the shape says.
  EXPECT_MESSAGE(npy_error(npy_raw("{" + ds + ", " + fo + ", " + sh + "}", n + 1)),
                 "shape needs 1168 bytes but the file holds 1169");
  EXPECT_MESSAGE(npy_error(npy_raw("{" + ds + ", " + fo + ", " + sh + "}", n - 1)), "but the file holds 1167");
  // Versions and header lengths.
  EXPECT_MESSAGE(npy_error(npy_raw("{" + ds + ", " + fo + ", " + sh + "}", n, 1, 1)),
                 ".npy version 1.1 is not supported");
  EXPECT_MESSAGE(npy_error(npy_raw("{" + ds + ", " + fo + ", " + sh + "}", n, 4)), ".npy version 4.0 is not supported");
  std::vector<uint8_t> huge_len = npy_raw("{}", 0, 2);
  huge_len[11] = 0x7F;
  EXPECT_MESSAGE(npy_error(huge_len), "is over the limit of 65536 bytes");
  std::vector<uint8_t> past_end = npy_raw("{}", 0, 1);
  past_end[9] = 0x10;
  EXPECT_MESSAGE(npy_error(past_end), "runs past the end of the file");
}

// ---------------------------------------------------------------------------
// Streaming inspection
// ---------------------------------------------------------------------------
TEST(HostileFiles, StreamedInspectionMatchesTheReportAndStopsOnRequest) {
  const int64_t B = 2, blocks = 3, stride = B * S::kTokenBytes;
  std::vector<uint8_t> cache(static_cast<size_t>(blocks * stride));
  for (size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<uint8_t>(i * 37 + 11);
  std::string dims = "(" + std::to_string(blocks) + ", " + std::to_string(stride) + ")";
  std::vector<uint8_t> f = npy_raw("{'descr': '|u1', 'fortran_order': False, 'shape': " + dims + "}", 0);
  f.insert(f.end(), cache.begin(), cache.end());
  InspectOptions o;
  o.block_size = B;
  const CacheImage img = load_cache_image(f, "", "s.npy");
  const std::string whole = format_inspection(inspect_image(img, o), o);
  std::string streamed;
  const InspectSummary all = write_inspection(img, o, [&](std::string_view s) {
    streamed += s;
    return true;
  });
  EXPECT_EQ(streamed, whole);
  EXPECT_TRUE(all.complete);
  EXPECT_EQ(all.tokens, blocks * B);
  EXPECT_EQ(inspect_bytes(f, o, "s.npy"), whole);
  // A writer that refuses after the first piece (a closed pipe): no more decoding.
  int calls = 0;
  const InspectSummary cut = write_inspection(img, o, [&](std::string_view) { return ++calls < 2; });
  EXPECT_FALSE(cut.complete);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cut.tokens, B);  // one block decoded, then stopped
}

TEST(HostileFiles, LoadedCacheIsAViewOfTheMappedFile) {
  TempDir dir;
  const int64_t stride = S::kTokenBytes;
  std::vector<uint8_t> f =
      npy_raw("{'descr': '|u1', 'fortran_order': False, 'shape': (2, " + std::to_string(stride) + ")}", 0);
  const size_t header = f.size();
  f.resize(header + static_cast<size_t>(2 * stride), 0x42);
  const std::string path = dir.file("c.npy", f);
  const CacheImage img = load_cache_file(path);
  ASSERT_TRUE(img.storage);
  EXPECT_EQ(img.storage->size(), f.size());
  // No copy: the cache bytes are the file's bytes, after the header.
  EXPECT_EQ(img.bytes.data(), img.storage->bytes().data() + header);
  EXPECT_EQ(img.bytes.size(), static_cast<size_t>(2 * stride));
  std::string capped;
  try {
    load_cache_file(path, "", 100);
  } catch (const InspectError& e) { capped = e.what(); }
  EXPECT_MESSAGE(capped, "over the limit of 100 bytes");
}

// ---------------------------------------------------------------------------
// The golden runner: a view whose strides come from the file
// ---------------------------------------------------------------------------
/// A safetensors image built from (name, dtype, shape, little-endian data) entries, laid out in order.
struct Builder {
  std::string header = "{";
  std::vector<uint8_t> data;
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const std::vector<uint8_t>& bytes) {
    std::string dims;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i) dims += ',';
      dims += std::to_string(shape[i]);
    }
    if (header.size() > 1) header += ',';
    header += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + dims + "],\"data_offsets\":[";
    header += std::to_string(data.size()) + "," + std::to_string(data.size() + bytes.size()) + "]}";
    data.insert(data.end(), bytes.begin(), bytes.end());
  }
  void i64(const std::string& name, int64_t v) {
    std::vector<uint8_t> b(8);
    for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
    add(name, "I64", {1}, b);
  }
  std::vector<uint8_t> image(const std::string& metadata) const {
    return st_image(header + "," + metadata + "}", data);
  }
};

/// The single result of running a one-case dequantize golden file whose out view is [2, dim1, 512]
/// with strides (s0, s1) over 1024 elements; `gathers` counts backend calls.
GoldenCaseResult dequantize_with_out_view(int64_t dim1, int64_t s0, int64_t s1, int* gathers) {
  const int64_t stride = S::kTokenBytes, numel = 1024;
  Builder b;
  b.add("case000.k_cache", "U8", {1, stride}, std::vector<uint8_t>(static_cast<size_t>(stride)));
  b.add("case000.seq_lens", "I32", {2}, std::vector<uint8_t>(8));
  b.add("case000.block_table", "I32", {2, 1}, std::vector<uint8_t>(8));
  b.add("case000.out_after", "BF16", {numel}, std::vector<uint8_t>(2 * numel));
  b.i64("case000.param.num_blocks", 1);
  b.i64("case000.param.block_stride", stride);
  b.i64("case000.param.block_size", 1);
  b.i64("case000.param.has_gather_lens", 0);
  b.i64("case000.param.out_numel", numel);
  b.i64("case000.param.out_stride0", s0);
  b.i64("case000.param.out_stride1", s1);
  b.i64("case000.param.out_dim1", dim1);
  b.i64("case000.param.init_salt", 0);
  b.i64("case000.param.offset", 0);
  b.i64("case000.param.use_fnuz", 0);
  TempDir dir;
  const std::string path = dir.file(
      "deq.safetensors",
      b.image(R"("__metadata__":{"op":"dequantize_and_gather_k_cache","format":"dsv4kv-golden-v1","num_cases":"1"})"));
  NullBackend backend;
  const auto results = run_golden_file(path, backend);
  *gathers = backend.calls[DequantizeGatherArgs::kName];
  EXPECT_EQ(results.size(), 1u);
  return results.empty() ? GoldenCaseResult{} : results[0];
}

TEST(HostileFiles, GoldenOutViewBoundCannotOverflow) {
  // Strides that make (R-1)*s0 + (dim1-1)*s1 + 511 wrap past 2^63: an unchecked sum would give a
  // negative "last element" and hand the backend a view past its buffer.
  int gathers = -1;
  auto r = dequantize_with_out_view(3, int64_t{1} << 62, int64_t{1} << 62, &gathers);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("overruns out_numel 1024"), std::string::npos) << r.message;
  EXPECT_EQ(gathers, 0);  // never called with the bad view
  // Zero strides: every row at element 0, inside the buffer, but 2^31 rows would make the gather
  // loop that long; more rows than the storage holds is refused.
  r = dequantize_with_out_view(int64_t{1} << 31, 0, 0, &gathers);
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("has more rows than out_numel 1024 holds"), std::string::npos) << r.message;
  EXPECT_EQ(gathers, 0);
  // An interleaved view that fits exactly (as in the golden dequantize case 2) reaches the backend.
  r = dequantize_with_out_view(1, S::kHeadDim, 2 * S::kHeadDim, &gathers);
  EXPECT_EQ(gathers, 1) << r.message;
}

TEST(HostileFiles, GoldenRunnerRefusesOversizedAndNonRegularFiles) {
  NullBackend backend;
  const auto r = run_golden_file("/dev/zero", backend);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].message.find("not a regular file"), std::string::npos) << r[0].message;
  EXPECT_GT(kMaxGoldenFileBytes, uint64_t{2} << 20);  // the public files fit with room to spare
}

}  // namespace
}  // namespace dsv4kv::conformance
