// Decoding of saved caches for `dsv4kv inspect` (see inspect.hpp).
#include "inspect.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "dsv4kv/spec/checked.hpp"
#include "safetensors.hpp"

namespace dsv4kv::conformance {
namespace {

namespace S = dsv4kv::spec;

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw InspectError(printable(origin, 4096) + ": " + what);
}

// a * b for non-negative sizes, or nullopt when it would overflow int64.
std::optional<int64_t> mul_checked(int64_t a, int64_t b) { return checked::mul<int64_t>(a, b); }

// Fills shape-derived fields and checks rank and size; `data` = the bytes the file holds for it.
void set_shape(CacheImage& img, std::vector<int64_t> shape, std::span<const uint8_t> data) {
  if (shape.size() != 2 && shape.size() != 3)
    fail(img.origin, "cache tensor must have rank 2 or 3 ([num_blocks, bytes] or [num_blocks, x, y]), got rank " +
                         std::to_string(shape.size()));
  int64_t per_block = 1;
  for (size_t d = 1; d < shape.size(); ++d) {
    if (shape[d] < 0) fail(img.origin, "negative dimension in shape");
    const auto p = mul_checked(per_block, shape[d]);
    if (!p) fail(img.origin, "shape too large");
    per_block = *p;
  }
  if (shape[0] < 0) fail(img.origin, "negative dimension in shape");
  const auto total = mul_checked(shape[0], per_block);
  if (!total) fail(img.origin, "shape too large");
  if (static_cast<uint64_t>(*total) != data.size())
    fail(img.origin,
         "shape needs " + std::to_string(*total) + " bytes but the file holds " + std::to_string(data.size()));
  img.shape = std::move(shape);
  img.num_blocks = img.shape[0];
  img.block_stride = per_block;
  img.implied_block_size = infer_block_size(img.shape).value_or(0);
  img.bytes = data;
}

// ---------------------------------------------------------------------------
// .npy: magic, version, little-endian header length, a Python dict literal,
// then the data. Only what a uint8 C-order array needs is accepted, with a
// strict grammar (the subset of Python literals NumPy writes for it).
// ---------------------------------------------------------------------------
constexpr unsigned char kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

bool is_npy(std::span<const uint8_t> f) {
  return f.size() >= sizeof kNpyMagic && std::memcmp(f.data(), kNpyMagic, sizeof kNpyMagic) == 0;
}

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

/// Reads `{'descr': '|u1', 'fortran_order': False, 'shape': (2, 37440), }` and
/// nothing looser: exactly the three keys, each once, in any order; keys and
/// descr quoted with ' or " and no escapes; True/False as whole words; the
/// shape a tuple of decimal integers without leading zeros ("()", "(n,)",
/// "(a, b)" or "(a, b,)"); only spaces, tabs and newlines between tokens.
class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& origin, std::string_view text) : origin_(origin), s_(text) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    ws();
    while (!at('}')) {
      const std::string key = quoted_string("key");
      auto once = [&](bool& seen) {
        if (seen) bad("repeats the key '" + key + "'");
        seen = true;
      };
      expect(':');
      ws();
      if (key == "descr") {
        once(seen_descr);
        h.descr = quoted_string("descr");
      } else if (key == "fortran_order") {
        once(seen_order);
        const std::string word = identifier();
        if (word == "True")
          h.fortran_order = true;
        else if (word == "False")
          h.fortran_order = false;
        else
          bad("fortran_order must be True or False, got '" + printable(word) + "'");
      } else if (key == "shape") {
        once(seen_shape);
        h.shape = tuple();
      } else {
        bad("has the unknown key '" + printable(key) + "' (only descr, fortran_order and shape)");
      }
      ws();
      if (at(',')) {
        ++i_;
        ws();
        continue;
      }
      if (!at('}')) bad("expects ',' or '}' at " + here());
    }
    ++i_;
    ws();
    if (i_ != s_.size()) bad("has " + here() + " after the closing '}'");
    if (!seen_descr) bad("lacks the key 'descr'");
    if (!seen_order) bad("lacks the key 'fortran_order'");
    if (!seen_shape) bad("lacks the key 'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const { fail(origin_, ".npy header " + what); }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  std::string here() const {
    if (i_ >= s_.size()) return "the end of the header";
    return "'" + printable(s_.substr(i_, 1)) + "' (header byte " + std::to_string(i_) + ")";
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    ws();
    if (!at(c)) bad(std::string("expects '") + c + "' at " + here());
    ++i_;
  }
  std::string quoted_string(const char* what) {
    if (!at('\'') && !at('"')) bad(std::string("expects a quoted ") + what + " at " + here());
    const char q = s_[i_++];
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '\\' || c < 0x20 || c >= 0x7F) bad(std::string("has an escape or a non-ASCII byte in a ") + what);
      ++i_;
    }
    if (i_ >= s_.size()) bad(std::string("has an unterminated ") + what);
    return std::string(s_.substr(start, i_++ - start));
  }
  std::string identifier() {
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
    if (i_ == start) bad("expects True or False at " + here());
    return std::string(s_.substr(start, i_ - start));
  }
  int64_t integer() {
    const size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const auto m = checked::mul<int64_t>(v, 10);
      const auto a = m ? checked::add<int64_t>(*m, s_[i_] - '0') : std::nullopt;
      if (!a) bad("has a shape dimension above 2^63 - 1");
      v = *a;
      ++i_;
    }
    if (i_ == start) bad("expects a dimension at " + here());
    if (i_ - start > 1 && s_[start] == '0') bad("has a dimension with a leading zero");
    if (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' || s_[i_] == '.'))
      bad("has a dimension that is not a plain decimal integer at " + here());
    return v;
  }
  std::vector<int64_t> tuple() {
    if (!at('(')) bad("expects the shape tuple '(' at " + here());
    ++i_;
    std::vector<int64_t> dims;
    ws();
    if (at(')')) {
      ++i_;
      return dims;  // ()
    }
    for (;;) {
      if (dims.size() == 64) bad("has a shape of more than 64 dimensions");
      dims.push_back(integer());
      ws();
      if (at(')')) {
        if (dims.size() == 1) bad("has a shape '(n)' that is not a tuple (a 1-tuple is written '(n,)')");
        ++i_;
        return dims;
      }
      if (!at(',')) bad("expects ',' or ')' in the shape at " + here());
      ++i_;
      ws();
      if (at(')')) {
        ++i_;
        return dims;  // trailing comma
      }
    }
  }

  const std::string& origin_;
  std::string_view s_;
  size_t i_ = 0;
};

bool is_u8_descr(const std::string& d) {
  // The byte-order mark of a one-byte type is meaningless; NumPy writes '|u1'.
  return d == "|u1" || d == "<u1" || d == ">u1" || d == "=u1" || d == "u1";
}

CacheImage parse_npy(std::shared_ptr<const FileBytes> storage, const std::string& origin) {
  const std::span<const uint8_t> f = storage->bytes();
  CacheImage img;
  img.origin = origin;
  img.format = "npy";
  img.storage = std::move(storage);
  if (f.size() < 10) fail(origin, "truncated .npy header (" + std::to_string(f.size()) + " bytes)");
  const int major = f[6], minor = f[7];
  size_t header_len = 0, header_start = 0;
  if (minor == 0 && major == 1) {
    header_len = size_t{f[8]} | (size_t{f[9]} << 8);
    header_start = 10;
  } else if (minor == 0 && (major == 2 || major == 3)) {
    if (f.size() < 12) fail(origin, "truncated .npy header (" + std::to_string(f.size()) + " bytes)");
    header_len = size_t{f[8]} | (size_t{f[9]} << 8) | (size_t{f[10]} << 16) | (size_t{f[11]} << 24);
    header_start = 12;
  } else {
    fail(origin, ".npy version " + std::to_string(major) + "." + std::to_string(minor) +
                     " is not supported (1.0, 2.0 and 3.0 are)");
  }
  if (header_len > kMaxNpyHeaderBytes)
    fail(origin, ".npy header length " + std::to_string(header_len) + " is over the limit of " +
                     std::to_string(kMaxNpyHeaderBytes) + " bytes");
  if (header_len > f.size() - header_start)
    fail(origin, ".npy header length " + std::to_string(header_len) + " runs past the end of the file");
  const std::string_view text(reinterpret_cast<const char*>(f.data() + header_start), header_len);
  const NpyHeader h = NpyHeaderParser(origin, text).parse();
  if (!is_u8_descr(h.descr)) fail(origin, ".npy array must be uint8 (descr '|u1'), got '" + printable(h.descr) + "'");
  if (h.fortran_order) fail(origin, ".npy array must be in C order (fortran_order False)");
  set_shape(img, h.shape, f.subspan(header_start + header_len));
  return img;
}

CacheImage parse_safetensors(std::shared_ptr<const FileBytes> storage, const std::string& wanted,
                             const std::string& origin) {
  CacheImage img;
  img.origin = origin;
  img.format = "safetensors";
  try {
    const auto file = SafetensorsFile::from_storage(std::move(storage), origin);
    std::string name = wanted;
    if (name.empty()) {
      // Taking one of several silently would show the wrong cache without a word: refuse instead.
      std::vector<std::string> candidates;
      for (const auto& n : file.tensor_names()) {
        const auto& info = file.info(n);
        if (info.dtype == StDType::kU8 && (info.shape.size() == 2 || info.shape.size() == 3)) candidates.push_back(n);
      }
      if (candidates.empty()) fail(origin, "no uint8 tensor of rank 2 or 3 in the file (name one with --tensor)");
      if (candidates.size() > 1) {
        std::string listed;
        constexpr size_t kShown = 8;
        for (size_t i = 0; i < candidates.size() && i < kShown; ++i)
          listed.append(i ? ", '" : "'").append(printable(candidates[i], 60)).append("'");
        if (candidates.size() > kShown) listed += ", ...";
        fail(origin, "cannot tell which tensor is the cache: " + std::to_string(candidates.size()) +
                         " uint8 tensors of rank 2 or 3 (" + listed + "); name one with --tensor");
      }
      name = candidates.front();
    }
    if (!file.has(name)) fail(origin, "no tensor named '" + printable(name) + "'");
    const auto& info = file.info(name);
    if (info.dtype != StDType::kU8)
      fail(origin, "tensor '" + printable(name) + "' is " + printable(info.dtype_name) + ", a cache is U8");
    img.tensor = name;
    img.storage = file.storage();
    set_shape(img, info.shape, file.raw(name));
  } catch (const SafetensorsError& e) { throw InspectError(e.what()); }
  return img;
}

std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", static_cast<double>(v));
  return buf;
}

// What the options select, checked against the image.
struct Selection {
  int64_t block_size = 0, b0 = 0, b1 = 0, p0 = 0, p1 = 0;
  S::Record record = S::Record::kFp8DsMla;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s.append(d ? ", " : "").append(std::to_string(shape[d]));
  return s + "]";
}

// The record of the tokens: --format, else the shape's (record_of_shape), else fp8_ds_mla. A
// --format that a rank-3 shape's width contradicts, and --fnuz with a V4.1 record, do not fit.
S::Record select_record(const CacheImage& image, const InspectOptions& o) {
  const std::string& origin = image.origin;
  const std::optional<S::Record> implied = record_of_shape(image.shape);
  if (o.record && !S::record_known(*o.record))
    fail(origin, "record value " + std::to_string(static_cast<int>(*o.record)) + " is not a record");
  if (o.record && implied && *o.record != *implied)
    fail(origin, std::string("--format ") + S::record_name(*o.record) + " does not fit the cache: its shape " +
                     shape_text(image.shape) + " has " + std::to_string(image.shape[2]) +
                     " bytes per token, the width of record " + S::record_name(*implied) + " (" +
                     S::record_name(*o.record) + " has " + std::to_string(S::record_layout(*o.record).token_bytes()) +
                     ")");
  const S::Record r = o.record ? *o.record : implied.value_or(S::Record::kFp8DsMla);
  if (r != S::Record::kFp8DsMla && o.format != S::Fp8Format::kE4M3Fn)
    fail(origin, std::string("--fnuz applies to record fp8_ds_mla only, but the cache's record is ") +
                     S::record_name(r) + " (shape " + shape_text(image.shape) + "; the V4.1 records are e4m3fn only)");
  return r;
}

Selection select_tokens(const CacheImage& image, const InspectOptions& o) {
  Selection s;
  const std::string& origin = image.origin;
  s.record = select_record(image, o);
  const S::RecordLayout rec = S::record_layout(s.record);
  if (o.block_size < 0) fail(origin, "block size must be >= 1, got " + std::to_string(o.block_size));
  s.block_size = o.block_size > 0 ? o.block_size : infer_block_size(image.shape, s.record).value_or(0);
  if (s.block_size == 0) {
    if (s.record == S::Record::kFp8DsMla)
      fail(origin, "cannot infer the block size from a block stride of " + std::to_string(image.block_stride) +
                       " bytes (neither block_size * " + std::to_string(S::kTokenBytes) +
                       " nor vLLM's allocation for any block size); pass --block-size");
    fail(origin, "cannot infer the block size of record " + std::string(S::record_name(s.record)) +
                     " from a block stride of " + std::to_string(image.block_stride) + " bytes (neither block_size * " +
                     std::to_string(rec.token_bytes()) +
                     " nor vLLM's allocation for exactly one block size); pass --block-size");
  }
  const auto need = mul_checked(s.block_size, rec.token_bytes());
  if (!need || *need > image.block_stride)
    fail(origin, "block_size " + std::to_string(s.block_size) + " needs " +
                     (need ? std::to_string(*need) : std::string("too many")) +
                     " bytes per block, but the cache's blocks have " + std::to_string(image.block_stride) +
                     " (pass the right --block-size)");
  s.b0 = 0;
  s.b1 = image.num_blocks;
  if (o.block) {
    if (*o.block < 0 || *o.block >= image.num_blocks)
      fail(origin, "block " + std::to_string(*o.block) + " out of range: the cache has " +
                       std::to_string(image.num_blocks) + " blocks");
    s.b0 = *o.block;
    s.b1 = s.b0 + 1;
  }
  s.p0 = 0;
  s.p1 = s.block_size;
  if (o.token) {
    if (*o.token < 0 || *o.token >= s.block_size)
      fail(origin,
           "token " + std::to_string(*o.token) + " out of range: block_size is " + std::to_string(s.block_size));
    s.p0 = *o.token;
    s.p1 = s.p0 + 1;
  }
  return s;
}

std::span<const uint8_t> block_bytes(const CacheImage& image, int64_t b) {
  return image.bytes.subspan(static_cast<size_t>(b * image.block_stride), static_cast<size_t>(image.block_stride));
}

// The report's parts, shared by format_inspection and write_inspection.
std::string preamble(const CacheImage& img, int64_t block_size, spec::Fp8Format format, S::Record record) {
  std::ostringstream s;
  s << "cache: " << printable(img.origin, 4096);
  if (!img.tensor.empty()) s << "  tensor " << printable(img.tensor);
  s << "  uint8 [";
  for (size_t d = 0; d < img.shape.size(); ++d) s << (d ? ", " : "") << img.shape[d];
  s << "]\n";
  const S::RecordLayout rec = S::record_layout(record);
  const int64_t used = rec.block_data_bytes(block_size);
  // A V4.1 record's line names the record and its encodings; the default 584-byte record's
  // names neither, only its FP8 format.
  s << "layout: ";
  if (record != S::Record::kFp8DsMla) s << "record " << S::record_name(record) << ", ";
  s << "block_size " << block_size << ", block_stride " << img.block_stride << " bytes (" << used << " used, tail "
    << img.block_stride - used << "), " << img.num_blocks << " blocks, ";
  if (record == S::Record::kFp8DsMla)
    s << (format == spec::Fp8Format::kE4M3Fn ? "e4m3fn" : "e4m3fnuz");
  else
    s << (rec.values == S::ValueCode::kE4M3 ? "e4m3fn" : "e2m1") << " values, "
      << (rec.scales == S::ScaleCode::kUe8m0 ? "UE8M0" : "e4m3fn") << " scales of " << rec.group;
  s << "\n" << columns_line(record);
  return s.str();
}

std::string block_line(const CacheImage& img, int64_t b) {
  return "block " + std::to_string(b) + " (cache bytes " + std::to_string(b * img.block_stride) + ".." +
         std::to_string((b + 1) * img.block_stride - 1) + ")\n";
}

}  // namespace

std::string columns_line(S::Record record) {
  if (record != S::Record::kFp8DsMla) {
    const S::RecordLayout rec = S::record_layout(record);
    std::string s = "columns: ";
    const std::string groups = "groups 0.." + std::to_string(rec.num_scales() - 1);
    if (rec.scales == S::ScaleCode::kE4M3) {
      s += "e4m3fn scale bytes of " + groups + " (hex)";
    } else {
      s += "scale exponents of " + groups + " (byte - " + std::to_string(S::kScaleBias) + "; ";
      if (rec.values == S::ValueCode::kE4M3) s += "'-' = byte 0 i.e. scale 0, ";
      s += scale_flag(record, 255) == ScaleFlag::kInfinite ? "'inf' = byte 255)" : "'nan' = byte 255)";
    }
    return s + ", min/max of the " + std::to_string(rec.head_dim) + " decoded values, first decoded values, flags\n";
  }
  return "columns: scale exponents of tiles 0.." + std::to_string(S::kNumTiles - 1) + " (byte - " +
         std::to_string(S::kScaleBias) +
         "; '-' = byte 0 i.e. scale 0, 'inf' = byte 255), min/max of the decoded NoPE values, first RoPE "
         "values, flags\n";
}

std::string format_token_line(const TokenReport& t, int rope_values) {
  std::string s;
  char buf[64];
  std::snprintf(buf, sizeof buf, "  %4lld ", static_cast<long long>(t.pos));
  s += buf;
  const bool fp8 = t.record == S::Record::kFp8DsMla;
  const S::RecordLayout rec = S::record_layout(t.record);
  const int scales = std::clamp(t.num_scales, 0, kMaxScaleBytes);
  for (int j = 0; j < scales; ++j) {
    const uint8_t b = t.scale_bytes[j];
    if (rec.scales == S::ScaleCode::kE4M3)
      std::snprintf(buf, sizeof buf, " %02x", b);
    else if (b == 0 && rec.values == S::ValueCode::kE4M3)  // dequantize_element: byte 0 is scale +0
      std::snprintf(buf, sizeof buf, "%5s", "-");
    else if (b == 255)
      std::snprintf(buf, sizeof buf, "%5s", scale_flag(t.record, b) == ScaleFlag::kNan ? "nan" : "inf");
    else
      std::snprintf(buf, sizeof buf, "%5d", t.exponent(j));
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "  %11s %11s  ", fmt_float(t.nope_min).c_str(), fmt_float(t.nope_max).c_str());
  s += buf;
  s += fp8 ? "rope[" : "values[";
  const int nr = std::clamp(rope_values, 0, S::kRopeDim);
  for (int k = 0; k < nr; ++k) s.append(k ? " " : "").append(fmt_float(S::bf16_to_f32(t.rope[k])));
  s += "]";
  for (const auto& f : t.flags()) s += "  " + f;
  if (t.nan_values > 0 || t.inf_values > 0)
    s += "  (decoded: " + std::to_string(t.nan_values) + " NaN, " + std::to_string(t.inf_values) + " inf)";
  s += "\n";
  return s;
}

namespace {

// The scale flags, in the order the report lists them, with the summary's name of each.
constexpr ScaleFlag kScaleFlags[] = {ScaleFlag::kInfinite, ScaleFlag::kNan, ScaleFlag::kNegative, ScaleFlag::kZero};
constexpr const char* kScaleFlagCounts[] = {"scale byte 255", "NaN scale", "negative scale", "scale byte 0"};
constexpr int kNumScaleFlags = 4;

// Whether some scale byte of record r gets flag f (what the summary counts for the record).
bool record_can_flag(S::Record r, ScaleFlag f) {
  for (int b = 0; b < 256; ++b)
    if (scale_flag(r, static_cast<uint8_t>(b)) == f) return true;
  return false;
}

// Counts of flagged tokens, by cause; the summary names the causes the record can have (for the
// 584-byte record: pad byte, scale byte 255, NaN codes).
struct Tally {
  explicit Tally(S::Record r) : record(r) {}
  S::Record record;
  int64_t tokens = 0, flagged = 0, pad = 0, nan = 0;
  std::array<int64_t, kNumScaleFlags> scales{};
  void add(const TokenReport& t) {
    ++tokens;
    flagged += t.flagged();
    pad += t.pad_byte != 0;
    for (int k = 0; k < kNumScaleFlags; ++k) scales[k] += t.scales_flagged(kScaleFlags[k]) > 0;
    nan += t.nan_codes > 0;
  }
  std::string line() const {
    const S::RecordLayout rec = S::record_layout(record);
    std::string causes;
    const auto cause = [&](const char* name, int64_t n) {
      causes.append(causes.empty() ? "" : ", ").append(name).append(": ").append(std::to_string(n));
    };
    if (rec.pad_bytes() > 0) cause("non-zero pad byte", pad);
    for (int k = 0; k < kNumScaleFlags; ++k)
      if (record_can_flag(record, kScaleFlags[k])) cause(kScaleFlagCounts[k], scales[k]);
    if (rec.values == S::ValueCode::kE4M3) cause("NaN codes", nan);
    return "summary: " + std::to_string(tokens) + " tokens, " + std::to_string(flagged) + " flagged (" + causes + ")\n";
  }
};

/// Blocks are decoded in order; every this many bytes, the pages behind are dropped.
constexpr size_t kReleaseBytes = size_t{32} << 20;

}  // namespace

CacheImage load_cache_storage(std::shared_ptr<const FileBytes> file, const std::string& tensor,
                              const std::string& origin) {
  if (is_npy(file->bytes())) {
    if (!tensor.empty()) fail(origin, "--tensor names a safetensors tensor, but this is a .npy file");
    return parse_npy(std::move(file), origin);
  }
  return parse_safetensors(std::move(file), tensor, origin);
}

CacheImage load_cache_image(std::span<const uint8_t> file, const std::string& tensor, const std::string& origin) {
  return load_cache_storage(FileBytes::adopt(std::vector<uint8_t>(file.begin(), file.end())), tensor, origin);
}

CacheImage load_cache_file(const std::string& path, const std::string& tensor, uint64_t max_bytes) {
  // The system reads a path up to its first NUL: "a.npy\0b" would open a.npy.
  if (path.find('\0') != std::string::npos) fail(path, "cannot open: the path holds a NUL byte");
  std::shared_ptr<const FileBytes> bytes;
  try {
    bytes = FileBytes::open(path, max_bytes);
  } catch (const FileError& e) { throw InspectError(e.what()); }
  return load_cache_storage(std::move(bytes), tensor, path);
}

ScaleFlag scale_flag(S::Record r, uint8_t byte) {
  switch (r) {
    case S::Record::kFp8DsMla:
    case S::Record::kMxfp8DsMla: return byte == 255 ? ScaleFlag::kInfinite : ScaleFlag::kOk;
    case S::Record::kNvfp4DsMla:
      if (S::scale_is_nan(r, byte)) return ScaleFlag::kNan;
      if (byte & 0x80u) return ScaleFlag::kNegative;
      return byte == 0 ? ScaleFlag::kZero : ScaleFlag::kOk;
    case S::Record::kMxfp4Indexer:
      if (S::scale_is_nan(r, byte)) return ScaleFlag::kNan;
      return byte == 0 ? ScaleFlag::kZero : ScaleFlag::kOk;
  }
  return ScaleFlag::kOk;
}

const char* scale_flag_name(ScaleFlag f) {
  switch (f) {
    case ScaleFlag::kInfinite: return "scale255";
    case ScaleFlag::kNan: return "scale-nan";
    case ScaleFlag::kNegative: return "scale-neg";
    case ScaleFlag::kZero: return "scale0";
    case ScaleFlag::kOk: break;
  }
  return "";
}

bool value_code_is_nan(S::Record r, uint8_t code, S::Fp8Format format) {
  if (r == S::Record::kFp8DsMla) return S::fp8_is_nan(code, format);
  if (r == S::Record::kMxfp8DsMla) return S::fp8_is_nan(code, S::Fp8Format::kE4M3Fn);
  return false;  // e2m1 has no NaN
}

int TokenReport::scales_flagged(ScaleFlag f) const {
  int n = 0;
  for (int j = 0; j < std::clamp(num_scales, 0, kMaxScaleBytes); ++j) n += scale_flag(record, scale_bytes[j]) == f;
  return n;
}

bool TokenReport::flagged() const {
  if (pad_byte != 0 || nan_codes > 0) return true;
  for (const ScaleFlag f : kScaleFlags)
    if (scales_flagged(f) > 0) return true;
  return false;
}

std::vector<std::string> TokenReport::flags() const {
  std::vector<std::string> out;
  char buf[32];
  if (pad_byte != 0) {
    std::snprintf(buf, sizeof buf, "pad=0x%02x", pad_byte);
    out.emplace_back(buf);
  }
  for (const ScaleFlag kind : kScaleFlags) {
    if (scales_flagged(kind) == 0) continue;
    std::string f = std::string(scale_flag_name(kind)) + "@";
    for (int j = 0, n = 0; j < std::clamp(num_scales, 0, kMaxScaleBytes); ++j)
      if (scale_flag(record, scale_bytes[j]) == kind) f.append(n++ ? "," : "").append(std::to_string(j));
    out.push_back(std::move(f));
  }
  if (nan_codes > 0) out.push_back("nan-codes=" + std::to_string(nan_codes));
  return out;
}

namespace {
void check_token(std::span<const uint8_t> block, int64_t block_size, int64_t pos, S::Record record) {
  if (!S::record_known(record))
    throw InspectError("record value " + std::to_string(static_cast<int>(record)) + " is not a record");
  if (block_size < 1) throw InspectError("block_size must be >= 1, got " + std::to_string(block_size));
  if (pos < 0 || pos >= block_size)
    throw InspectError("position " + std::to_string(pos) + " outside the block (block_size " +
                       std::to_string(block_size) + ")");
  const auto need = mul_checked(block_size, S::record_layout(record).token_bytes());
  if (!need || static_cast<uint64_t>(*need) > block.size())
    throw InspectError("a block of " + std::to_string(block.size()) + " bytes cannot hold " +
                       std::to_string(block_size) + " tokens");
}

// Every record's key row fits the 584-byte record's 512 values; a token has at most 32 scales.
constexpr bool records_fit() {
  for (int i = 0; i < S::kNumRecords; ++i) {
    const S::RecordLayout rec = S::record_layout(static_cast<S::Record>(i));
    if (rec.head_dim > S::kHeadDim || rec.num_scales() > kMaxScaleBytes || rec.head_dim < S::kRopeDim) return false;
    if (i != 0 && rec.bf16_dim() != 0) return false;  // a V4.1 record quantizes every value
  }
  return true;
}
static_assert(records_fit());

// bf16 bits of the head_dim decoded values of position `pos` of a V4.1 record (check_token first).
void decode_v41(std::span<const uint8_t> block, int64_t block_size, int64_t pos, S::Record record,
                std::array<uint16_t, S::kHeadDim>& out) {
  const S::RecordLayout rec = S::record_layout(record);
  const int group_bytes = rec.value_bytes() / rec.num_scales();
  const uint8_t* data = block.data() + rec.data_offset(pos);
  for (int g = 0; g < rec.num_scales(); ++g) {
    const uint8_t s = block[static_cast<size_t>(rec.scale_offset(block_size, pos, g))];
    for (int i = 0; i < rec.group; ++i)
      out[static_cast<size_t>(g * rec.group + i)] = S::dequantize_group_value(record, data + g * group_bytes, s, i);
  }
}
}  // namespace

std::array<float, spec::kNopeDim> decode_nope(std::span<const uint8_t> block, int64_t block_size, int64_t pos,
                                              spec::Fp8Format format) {
  check_token(block, block_size, pos, S::Record::kFp8DsMla);
  std::array<float, S::kNopeDim> v{};
  for (int i = 0; i < S::kNopeDim; ++i)
    v[i] = S::bf16_to_f32(S::dequantize_element(block[S::fp8_code_offset(pos, i)],
                                                block[S::scale_offset(block_size, pos, i / S::kTileSize)], format));
  return v;
}

std::vector<float> decode_quantized(std::span<const uint8_t> block, int64_t block_size, int64_t pos,
                                    spec::Fp8Format format, spec::Record record) {
  if (record == S::Record::kFp8DsMla) {
    const auto v = decode_nope(block, block_size, pos, format);
    return std::vector<float>(v.begin(), v.end());
  }
  check_token(block, block_size, pos, record);
  std::array<uint16_t, S::kHeadDim> bits{};
  decode_v41(block, block_size, pos, record, bits);
  std::vector<float> v(static_cast<size_t>(S::record_layout(record).head_dim));
  for (size_t i = 0; i < v.size(); ++i) v[i] = S::bf16_to_f32(bits[i]);
  return v;
}

namespace {

/// Tallies a token's n decoded values (value_at(i)) into r: its NaN and infinite counts, and [nope_min, nope_max]
/// over the values that are not NaN (both NaN when every value is).
template <class ValueAt>
void tally_values(TokenReport& r, int n, ValueAt value_at) {
  float lo = std::numeric_limits<float>::quiet_NaN(), hi = lo;
  for (int i = 0; i < n; ++i) {
    const float v = value_at(i);
    if (std::isnan(v)) {
      ++r.nan_values;
      continue;
    }
    if (std::isinf(v)) ++r.inf_values;
    if (std::isnan(lo) || v < lo) lo = v;
    if (std::isnan(hi) || v > hi) hi = v;
  }
  r.nope_min = lo;
  r.nope_max = hi;
}

// inspect_token for a V4.1 record: scales, decoded values (all quantized), NaN codes.
TokenReport inspect_v41_token(std::span<const uint8_t> block, int64_t block_size, int64_t pos, S::Record record) {
  check_token(block, block_size, pos, record);
  const S::RecordLayout rec = S::record_layout(record);
  TokenReport r;
  r.pos = pos;
  r.record = record;
  r.num_scales = rec.num_scales();
  for (int j = 0; j < rec.num_scales(); ++j)
    r.scale_bytes[static_cast<size_t>(j)] = block[static_cast<size_t>(rec.scale_offset(block_size, pos, j))];
  std::array<uint16_t, S::kHeadDim> bits{};
  decode_v41(block, block_size, pos, record, bits);
  if (rec.values == S::ValueCode::kE4M3)
    for (int i = 0; i < rec.value_bytes(); ++i)
      r.nan_codes +=
          value_code_is_nan(record, block[static_cast<size_t>(rec.data_offset(pos) + i)], S::Fp8Format::kE4M3Fn);
  tally_values(r, rec.head_dim, [&](int i) { return S::bf16_to_f32(bits[static_cast<size_t>(i)]); });
  std::copy_n(bits.begin(), S::kRopeDim, r.rope.begin());
  return r;
}
}  // namespace

TokenReport inspect_token(std::span<const uint8_t> block, int64_t block_size, int64_t pos, spec::Fp8Format format,
                          spec::Record record) {
  if (record != S::Record::kFp8DsMla) return inspect_v41_token(block, block_size, pos, record);
  const std::array<float, S::kNopeDim> values = decode_nope(block, block_size, pos, format);
  TokenReport r;
  r.pos = pos;
  for (int j = 0; j < S::kNumTiles; ++j) r.scale_bytes[j] = block[S::scale_offset(block_size, pos, j)];
  r.pad_byte = block[S::scale_offset(block_size, pos, S::kScalePadIndex)];
  for (int i = 0; i < S::kNopeDim; ++i)
    if (S::fp8_is_nan(block[S::fp8_code_offset(pos, i)], format)) ++r.nan_codes;
  tally_values(r, S::kNopeDim, [&](int i) { return values[i]; });
  const int64_t rope = S::rope_offset(pos);
  for (int k = 0; k < S::kRopeDim; ++k)
    r.rope[k] = static_cast<uint16_t>(block[rope + 2 * k] | (block[rope + 2 * k + 1] << 8));  // little-endian
  return r;
}

InspectResult inspect_image(CacheImage image, const InspectOptions& o) {
  const Selection sel = select_tokens(image, o);
  InspectResult res;
  res.format = o.format;
  res.record = sel.record;
  res.block_size = sel.block_size;
  for (int64_t b = sel.b0; b < sel.b1; ++b) {
    const auto blk = block_bytes(image, b);
    for (int64_t p = sel.p0; p < sel.p1; ++p) {
      TokenReport t = inspect_token(blk, res.block_size, p, o.format, sel.record);
      t.block = b;
      if (t.flagged()) ++res.flagged_tokens;
      res.tokens.push_back(t);
    }
  }
  res.image = std::move(image);
  return res;
}

std::string format_inspection(const InspectResult& r, const InspectOptions& o) {
  std::string s = preamble(r.image, r.block_size, r.format, r.record);
  int64_t current = -1;
  Tally tally(r.record);
  for (const TokenReport& t : r.tokens) {
    if (t.block != current) {
      current = t.block;
      s += block_line(r.image, t.block);
    }
    s += format_token_line(t, o.rope_values);
    tally.add(t);
  }
  return s + tally.line();
}

InspectSummary write_inspection(const CacheImage& image, const InspectOptions& o,
                                const std::function<bool(std::string_view)>& write) {
  const Selection sel = select_tokens(image, o);
  InspectSummary sum;
  if (!write(preamble(image, sel.block_size, o.format, sel.record))) return sum;
  // Offset of the cache inside the file's bytes, for dropping decoded pages of a mapping.
  const size_t base = image.storage && !image.bytes.empty()
                          ? static_cast<size_t>(image.bytes.data() - image.storage->bytes().data())
                          : 0;
  size_t released = 0;  // cache bytes before this offset have been released
  Tally tally(sel.record);
  std::string chunk;
  for (int64_t b = sel.b0; b < sel.b1; ++b) {
    const auto blk = block_bytes(image, b);
    chunk = block_line(image, b);
    for (int64_t p = sel.p0; p < sel.p1; ++p) {
      TokenReport t = inspect_token(blk, sel.block_size, p, o.format, sel.record);
      t.block = b;
      tally.add(t);
      chunk += format_token_line(t, o.rope_values);
    }
    sum.tokens = tally.tokens;
    sum.flagged_tokens = tally.flagged;
    if (!write(chunk)) return sum;
    const size_t done = static_cast<size_t>(b + 1) * static_cast<size_t>(image.block_stride);
    if (image.storage && done - released >= kReleaseBytes) {
      image.storage->release(base + released, done - released);
      released = done;
    }
  }
  sum.complete = write(tally.line());
  return sum;
}

std::string inspect_bytes(std::span<const uint8_t> file, const InspectOptions& options, const std::string& origin) {
  std::string out;
  write_inspection(load_cache_image(file, options.tensor, origin), options, [&](std::string_view s) {
    out += s;
    return true;
  });
  return out;
}

CacheImage cache_image_from_memory(std::vector<int64_t> shape, std::span<const uint8_t> bytes,
                                   const std::string& origin) {
  CacheImage img;
  img.origin = origin;
  img.format = "array";
  set_shape(img, std::move(shape), bytes);
  return img;
}

std::optional<spec::Record> record_of_shape(std::span<const int64_t> shape) {
  S::Record r{};
  if (shape.size() == 3 && S::record_from_token_bytes(shape[2], r)) return r;
  return std::nullopt;
}

std::optional<int64_t> infer_block_size(std::span<const int64_t> shape, std::optional<spec::Record> record) {
  if (shape.size() != 2 && shape.size() != 3) return std::nullopt;
  const std::optional<S::Record> implied = record_of_shape(shape);
  const S::Record r = record ? *record : implied.value_or(S::Record::kFp8DsMla);
  if (!S::record_known(r)) return std::nullopt;
  if (implied && *implied != r) return std::nullopt;  // a [n, B, W] view made for another record
  if (implied && shape[1] > 0) return shape[1];
  int64_t stride = 1;
  for (size_t d = 1; d < shape.size(); ++d) {
    const auto p = shape[d] < 0 ? std::nullopt : mul_checked(stride, shape[d]);
    if (!p) return std::nullopt;
    stride = *p;
  }
  // The exact layout is b = stride / token_bytes. vllm_block_stride(b) rounds b * token_bytes up
  // by less than page_alignment, so only the few b just below stride / token_bytes can give it:
  // one b for the 584- and 528-byte records, several for the 288- and 68-byte ones (refused).
  const S::RecordLayout rec = S::record_layout(r);
  const int64_t tb = rec.token_bytes(), top = stride / tb;
  if (top >= 1 && top * tb == stride) return top;
  std::optional<int64_t> found;
  for (int64_t b = std::max<int64_t>(1, (stride - rec.page_alignment) / tb); b <= top; ++b) {
    if (b * tb > std::numeric_limits<int64_t>::max() - rec.page_alignment) break;  // no overflow in the rounding
    if (rec.vllm_block_stride(b) != stride) continue;
    if (found) return std::nullopt;
    found = b;
  }
  return found;
}

std::vector<BlockSummary> summarize_blocks(const CacheImage& image, int64_t block_size, spec::Fp8Format format,
                                           std::optional<spec::Record> record) {
  InspectOptions o;
  o.block_size = block_size;
  o.format = format;
  o.record = record;
  const Selection sel = select_tokens(image, o);
  std::vector<BlockSummary> out;
  out.reserve(static_cast<size_t>(image.num_blocks));
  for (int64_t b = 0; b < image.num_blocks; ++b) {
    const auto blk = block_bytes(image, b);
    BlockSummary s{255, 0, 0};
    for (int64_t p = 0; p < sel.block_size; ++p) {
      const TokenReport t = inspect_token(blk, sel.block_size, p, format, sel.record);
      for (int j = 0; j < t.num_scales; ++j) {
        const uint8_t x = t.scale_bytes[static_cast<size_t>(j)];
        s.min_scale_byte = std::min<int>(s.min_scale_byte, x);
        s.max_scale_byte = std::max<int>(s.max_scale_byte, x);
      }
      s.flagged += t.flagged();
    }
    out.push_back(s);
  }
  return out;
}

// ---------------------------------------------------------------------------
// The command line. Parsed here, not by the CLI program's option library, so
// that the C++ program and `python -m dsv4kv inspect` (which has no such
// library) share one grammar, one set of messages and one table of exit statuses
// (InspectStatus).
// ---------------------------------------------------------------------------
namespace {

[[noreturn]] void usage_error(const std::string& what) { throw InspectUsageError(what); }

template <class T>
T integer_flag(const std::string& flag, const std::string& text, T lo, T hi) {
  // from_chars reads no sign into an unsigned T: a negative number is still "below", not "malformed".
  if (std::is_unsigned_v<T> && text.size() > 1 && text[0] == '-' &&
      std::all_of(text.begin() + 1, text.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    usage_error(flag + " must be >= " + std::to_string(lo) + ", got " + printable(text));
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec == std::errc::invalid_argument || end != text.data() + text.size())
    usage_error(flag + " must be an integer, got '" + printable(text) + "'");
  if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
    // A negative number is out of range below even for an unsigned T.
    const bool below = ec == std::errc::result_out_of_range ? text[0] == '-' : v < lo;
    if (below) usage_error(flag + " must be >= " + std::to_string(lo) + ", got " + printable(text));
    usage_error(flag + " must be <= " + std::to_string(hi) + ", got " + printable(text));
  }
  return v;
}

}  // namespace

std::string inspect_usage() {
  std::string names, widths;
  for (int i = 0; i < S::kNumRecords; ++i) {
    const auto r = static_cast<S::Record>(i);
    const char* sep = i == 0 ? "" : (i + 1 == S::kNumRecords ? " or " : ", ");
    names.append(sep).append(S::record_name(r));
    widths.append(sep).append(std::to_string(S::record_layout(r).token_bytes()));
  }
  return "usage: inspect FILE [--block N] [--token T] [--block-size B] [--tensor NAME] [--format NAME] [--fnuz]\n"
         "                    [--rope K] [--max-file-size BYTES]\n"
         "Decodes a K cache saved as safetensors or .npy (uint8 [num_blocks, block_stride] or\n"
         "[num_blocks, block_size, W], W the bytes per token of a record: " +
         widths +
         "), token by token.\n"
         "  FILE                  a regular .safetensors or .npy file\n"
         "  --block N             only block N (default: every block)\n"
         "  --token T             only position T of each selected block (default: every position)\n"
         "  --block-size B        tokens per block (default: inferred from the shape)\n"
         "  --tensor NAME         the safetensors tensor (alias --key; default: the only uint8 tensor of rank 2/3)\n"
         "  --format NAME         the record of the tokens (alias --record):\n"
         "                        " +
         names +
         "\n"
         "                        (default: the record whose width is the shape's W, else fp8_ds_mla)\n"
         "  --fnuz                the cache holds e4m3fnuz codes (fp8_ds_mla only)\n"
         "  --rope K              RoPE values printed per token (a V4.1 record: its first values), 0.." +
         std::to_string(S::kRopeDim) +
         " (default 4)\n"
         "  --max-file-size BYTES refuse larger files (default " +
         std::to_string(kDefaultMaxCacheFileBytes) +
         ")\n"
         "Exit status: 0 report written (flagged bytes are findings, not failures); 1 no report: the file\n"
         "cannot be used or does not fit the options; 2 usage error. An error is one line on stderr.\n"
         "The table: spec/failure_model.md#failure_model_inspect_status\n";
}

InspectCommand parse_inspect_args(const std::vector<std::string>& args) {
  InspectCommand c;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  bool have_file = false, only_files = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_files || a.size() < 2 || a[0] != '-') {
      if (have_file) usage_error("one FILE only, got a second: '" + printable(a) + "'");
      c.file = a;
      have_file = true;
      continue;
    }
    if (a == "--") {
      only_files = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      c.help = true;
      return c;
    }
    const size_t eq = a.find('=');
    const std::string flag = a.substr(0, eq);
    std::optional<std::string> inline_value;
    if (eq != std::string::npos) inline_value = a.substr(eq + 1);
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) usage_error(flag + " needs a value");
      return args[++i];
    };
    if (flag == "--fnuz") {
      if (inline_value) usage_error("--fnuz takes no value");
      c.options.format = spec::Fp8Format::kE4M3Fnuz;
    } else if (flag == "--block") {
      c.options.block = integer_flag<int64_t>(flag, value(), 0, kMax);
    } else if (flag == "--token") {
      c.options.token = integer_flag<int64_t>(flag, value(), 0, kMax);
    } else if (flag == "--block-size") {
      c.options.block_size = integer_flag<int64_t>(flag, value(), 1, kMax);
    } else if (flag == "--format" || flag == "--record") {
      const std::string name = value();
      S::Record r{};
      if (!S::record_from_name(name, r)) {
        std::string names;
        for (int k = 0; k < S::kNumRecords; ++k) names.append(k ? ", " : "").append(S::kRecordNames[k]);
        usage_error(flag + " must be one of " + names + ", got '" + printable(name) + "'");
      }
      c.options.record = r;
    } else if (flag == "--tensor" || flag == "--key") {
      c.options.tensor = value();
      if (c.options.tensor.empty()) usage_error(flag + " needs a non-empty tensor name");
    } else if (flag == "--rope") {
      c.options.rope_values = integer_flag<int>(flag, value(), 0, S::kRopeDim);
    } else if (flag == "--max-file-size") {
      c.max_file_bytes = integer_flag<uint64_t>(flag, value(), 1, std::numeric_limits<uint64_t>::max());
    } else {
      usage_error("unknown option '" + printable(flag) + "' (--help lists the options)");
    }
  }
  if (!have_file) usage_error("missing FILE (--help lists the options)");
  if (c.options.record && *c.options.record != S::Record::kFp8DsMla && c.options.format != S::Fp8Format::kE4M3Fn)
    usage_error(std::string("--fnuz applies to record fp8_ds_mla only, not to ") + S::record_name(*c.options.record) +
                " (the V4.1 records are e4m3fn only)");
  return c;
}

int run_inspect_command(const std::vector<std::string>& args, const std::function<bool(std::string_view)>& out,
                        const std::function<void(std::string_view)>& err) {
  InspectCommand c;
  try {
    c = parse_inspect_args(args);
  } catch (const InspectUsageError& e) {
    err("dsv4kv inspect: " + printable(e.what(), 2000) + "\n");
    return kInspectUsageError;
  }
  if (c.help) {
    out(inspect_usage());
    return kInspectOk;
  }
  // Exceptions of `out` pass through untouched (a Python BrokenPipeError, say); any other is
  // this command's failure and gets its one line.
  bool out_threw = false;
  const auto guarded_out = [&](std::string_view s) {
    try {
      return out(s);
    } catch (...) {
      out_threw = true;
      throw;
    }
  };
  std::string reason;
  try {
    // The file is mapped, not copied; the report is streamed block by block.
    const CacheImage image = load_cache_file(c.file, c.options.tensor, c.max_file_bytes);
    write_inspection(image, c.options, guarded_out);
    return kInspectOk;
  } catch (const std::exception& e) {  // InspectError, or std::bad_alloc and the like
    if (out_threw) throw;
    reason = e.what();
  }
  err("dsv4kv inspect: " + printable(reason, 2000) + "\n");
  return kInspectFailed;
}

}  // namespace dsv4kv::conformance
