// Decoding of saved caches for `dsv4kv inspect` (see inspect.hpp).
#include "inspect.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

#include "safetensors.hpp"

namespace dsv4kv::conformance {
namespace {

namespace S = dsv4kv::spec;

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw InspectError(origin + ": " + what);
}

// a * b for non-negative sizes, or nullopt when it would overflow int64.
std::optional<int64_t> mul_checked(int64_t a, int64_t b) {
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return std::nullopt;
  return a * b;
}

// Fills shape-derived fields and checks rank and size; `available` = bytes the file holds for it.
void set_shape(CacheImage& img, std::vector<int64_t> shape, uint64_t available) {
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
  if (static_cast<uint64_t>(*total) > available)
    fail(img.origin, "shape needs " + std::to_string(*total) + " bytes but the file holds " +
                         std::to_string(available));
  img.shape = std::move(shape);
  img.num_blocks = img.shape[0];
  img.block_stride = per_block;
  img.implied_block_size =
      img.shape.size() == 3 && img.shape[2] == S::kTokenBytes && img.shape[1] > 0 ? img.shape[1] : 0;
}

// ---------------------------------------------------------------------------
// .npy: magic, version, little-endian header length, a Python dict literal,
// then the data. Only what a uint8 C-order array needs is accepted.
// ---------------------------------------------------------------------------
constexpr unsigned char kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

bool is_npy(std::span<const uint8_t> f) {
  return f.size() >= sizeof kNpyMagic && std::memcmp(f.data(), kNpyMagic, sizeof kNpyMagic) == 0;
}

// The text after `'key':` in the header dict, with leading spaces removed; empty if absent.
std::string npy_value(const std::string& header, const std::string& key) {
  const std::string quoted[] = {"'" + key + "'", "\"" + key + "\""};
  for (const auto& q : quoted) {
    const auto k = header.find(q);
    if (k == std::string::npos) continue;
    auto c = header.find_first_not_of(" ", k + q.size());
    if (c == std::string::npos || header[c] != ':') continue;
    c = header.find_first_not_of(" ", c + 1);
    if (c == std::string::npos) return "";
    return header.substr(c);
  }
  return "";
}

CacheImage parse_npy(std::span<const uint8_t> f, const std::string& origin) {
  CacheImage img;
  img.origin = origin;
  img.format = "npy";
  if (f.size() < 10) fail(origin, "truncated .npy header");
  const int major = f[6];
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = size_t{f[8]} | (size_t{f[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (f.size() < 12) fail(origin, "truncated .npy header");
    header_len = size_t{f[8]} | (size_t{f[9]} << 8) | (size_t{f[10]} << 16) | (size_t{f[11]} << 24);
    header_start = 12;
  } else {
    fail(origin, ".npy version " + std::to_string(major) + " is not supported");
  }
  if (header_len > f.size() - header_start) fail(origin, ".npy header runs past the end of the file");
  const std::string header(reinterpret_cast<const char*>(f.data() + header_start), header_len);

  const std::string descr = npy_value(header, "descr");
  const bool u8 = descr.rfind("'|u1'", 0) == 0 || descr.rfind("'<u1'", 0) == 0 || descr.rfind("'>u1'", 0) == 0 ||
                  descr.rfind("'u1'", 0) == 0 || descr.rfind("\"|u1\"", 0) == 0;
  if (!u8) fail(origin, ".npy array must be uint8 (descr '|u1'), got " + descr.substr(0, descr.find(',')));
  const std::string order = npy_value(header, "fortran_order");
  if (order.rfind("False", 0) != 0) fail(origin, ".npy array must be in C order (fortran_order False)");
  const std::string shape_text = npy_value(header, "shape");
  if (shape_text.empty() || shape_text[0] != '(') fail(origin, ".npy header has no shape tuple");
  const auto close = shape_text.find(')');
  if (close == std::string::npos) fail(origin, ".npy shape tuple is not closed");
  std::vector<int64_t> shape;
  std::string tok;
  for (size_t i = 1; i <= close; ++i) {
    const char ch = shape_text[i];
    if (ch >= '0' && ch <= '9') {
      if (tok.size() > 17) fail(origin, ".npy dimension too large");
      tok += ch;
    } else if (ch == ',' || ch == ')') {
      if (!tok.empty()) shape.push_back(std::stoll(tok));
      tok.clear();
    } else if (ch != ' ' && ch != 'L') {
      fail(origin, ".npy shape tuple holds something other than integers");
    }
    if (shape.size() > 8) fail(origin, ".npy shape has too many dimensions");
  }
  const size_t data_start = header_start + header_len;
  set_shape(img, std::move(shape), f.size() - data_start);
  const auto n = static_cast<size_t>(img.num_blocks * img.block_stride);
  img.bytes.assign(f.begin() + static_cast<std::ptrdiff_t>(data_start),
                   f.begin() + static_cast<std::ptrdiff_t>(data_start + n));
  return img;
}

CacheImage parse_safetensors(std::span<const uint8_t> f, const std::string& wanted, const std::string& origin) {
  CacheImage img;
  img.origin = origin;
  img.format = "safetensors";
  try {
    const auto file = SafetensorsFile::from_bytes(f.data(), f.size(), origin);
    std::string name = wanted;
    if (name.empty()) {
      for (const auto& n : file.tensor_names()) {
        const auto& info = file.info(n);
        if (info.dtype == StDType::kU8 && (info.shape.size() == 2 || info.shape.size() == 3)) {
          name = n;
          break;
        }
      }
      if (name.empty()) fail(origin, "no uint8 tensor of rank 2 or 3 in the file (name one with --tensor)");
    }
    if (!file.has(name)) fail(origin, "no tensor named '" + name + "'");
    const auto& info = file.info(name);
    if (info.dtype != StDType::kU8)
      fail(origin, "tensor '" + name + "' is " + st_dtype_name(info.dtype) + ", a cache is U8");
    img.tensor = name;
    const auto raw = file.raw(name);
    set_shape(img, info.shape, raw.size());
    img.bytes.assign(raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(img.num_blocks * img.block_stride));
  } catch (const SafetensorsError& e) {
    throw InspectError(e.what());
  }
  return img;
}

std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", static_cast<double>(v));
  return buf;
}

}  // namespace

CacheImage load_cache_image(std::span<const uint8_t> file, const std::string& tensor, const std::string& origin) {
  if (is_npy(file)) {
    if (!tensor.empty()) fail(origin, "--tensor names a safetensors tensor, but this is a .npy file");
    return parse_npy(file, origin);
  }
  return parse_safetensors(file, tensor, origin);
}

CacheImage load_cache_file(const std::string& path, const std::string& tensor) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "read error");
  return load_cache_image(bytes, tensor, path);
}

int TokenReport::scale255_tiles() const {
  return static_cast<int>(std::count(scale_bytes.begin(), scale_bytes.end(), uint8_t{255}));
}

std::vector<std::string> TokenReport::flags() const {
  std::vector<std::string> out;
  char buf[32];
  if (pad_byte != 0) {
    std::snprintf(buf, sizeof buf, "pad=0x%02x", pad_byte);
    out.emplace_back(buf);
  }
  if (const int n = scale255_tiles(); n > 0) out.push_back("scale255x" + std::to_string(n));
  if (nan_codes > 0) out.push_back("nan-codes=" + std::to_string(nan_codes));
  return out;
}

TokenReport inspect_token(std::span<const uint8_t> block, int64_t block_size, int64_t pos, spec::Fp8Format format) {
  if (block_size < 1) throw InspectError("block_size must be >= 1, got " + std::to_string(block_size));
  if (pos < 0 || pos >= block_size)
    throw InspectError("position " + std::to_string(pos) + " outside the block (block_size " +
                       std::to_string(block_size) + ")");
  const auto need = mul_checked(block_size, S::kTokenBytes);
  if (!need || static_cast<uint64_t>(*need) > block.size())
    throw InspectError("a block of " + std::to_string(block.size()) + " bytes cannot hold " +
                       std::to_string(block_size) + " tokens");
  TokenReport r;
  r.pos = pos;
  for (int j = 0; j < S::kNumTiles; ++j) r.scale_bytes[j] = block[S::scale_offset(block_size, pos, j)];
  r.pad_byte = block[S::scale_offset(block_size, pos, S::kScalePadIndex)];
  float lo = std::numeric_limits<float>::quiet_NaN(), hi = lo;
  for (int i = 0; i < S::kNopeDim; ++i) {
    const uint8_t code = block[S::fp8_code_offset(pos, i)];
    if (S::fp8_is_nan(code, format)) ++r.nan_codes;
    const float v = S::bf16_to_f32(S::dequantize_element(code, r.scale_bytes[i / S::kTileSize], format));
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
  const int64_t rope = S::rope_offset(pos);
  for (int k = 0; k < S::kRopeDim; ++k)
    r.rope[k] = static_cast<uint16_t>(block[rope + 2 * k] | (block[rope + 2 * k + 1] << 8));  // little-endian
  return r;
}

InspectResult inspect_image(CacheImage image, const InspectOptions& o) {
  InspectResult res;
  res.format = o.format;
  const std::string& origin = image.origin;
  res.block_size = o.block_size > 0 ? o.block_size : (image.implied_block_size > 0 ? image.implied_block_size : 64);
  if (o.block_size < 0) fail(origin, "block size must be >= 1, got " + std::to_string(o.block_size));
  const auto need = mul_checked(res.block_size, S::kTokenBytes);
  if (!need || *need > image.block_stride)
    fail(origin, "block_size " + std::to_string(res.block_size) + " needs " +
                     (need ? std::to_string(*need) : std::string("too many")) +
                     " bytes per block, but the cache's blocks have " + std::to_string(image.block_stride) +
                     " (pass the right --block-size)");
  int64_t b0 = 0, b1 = image.num_blocks;
  if (o.block) {
    if (*o.block < 0 || *o.block >= image.num_blocks)
      fail(origin, "block " + std::to_string(*o.block) + " out of range: the cache has " +
                       std::to_string(image.num_blocks) + " blocks");
    b0 = *o.block;
    b1 = b0 + 1;
  }
  int64_t p0 = 0, p1 = res.block_size;
  if (o.token) {
    if (*o.token < 0 || *o.token >= res.block_size)
      fail(origin, "token " + std::to_string(*o.token) + " out of range: block_size is " +
                       std::to_string(res.block_size));
    p0 = *o.token;
    p1 = p0 + 1;
  }
  for (int64_t b = b0; b < b1; ++b) {
    const std::span<const uint8_t> blk(image.bytes.data() + b * image.block_stride,
                                       static_cast<size_t>(image.block_stride));
    for (int64_t p = p0; p < p1; ++p) {
      TokenReport t = inspect_token(blk, res.block_size, p, o.format);
      t.block = b;
      if (t.flagged()) ++res.flagged_tokens;
      res.tokens.push_back(t);
    }
  }
  res.image = std::move(image);
  return res;
}

std::string format_inspection(const InspectResult& r, const InspectOptions& o) {
  std::ostringstream s;
  const CacheImage& img = r.image;
  s << "cache: " << img.origin;
  if (!img.tensor.empty()) s << "  tensor " << img.tensor;
  s << "  uint8 [";
  for (size_t d = 0; d < img.shape.size(); ++d) s << (d ? ", " : "") << img.shape[d];
  s << "]\n";
  const int64_t used = S::block_data_bytes(r.block_size);
  s << "layout: block_size " << r.block_size << ", block_stride " << img.block_stride << " bytes (" << used
    << " used, tail " << img.block_stride - used << "), " << img.num_blocks << " blocks, "
    << (r.format == spec::Fp8Format::kE4M3Fn ? "e4m3fn" : "e4m3fnuz") << "\n";
  s << "columns: scale exponents of tiles 0..6 (byte - 127; '-' = byte 0 i.e. scale 0, 'inf' = byte 255), "
       "min/max of the decoded NoPE values, first RoPE values, flags\n";
  int64_t current = -1;
  int64_t pad = 0, s255 = 0, nan = 0;
  for (const TokenReport& t : r.tokens) {
    if (t.block != current) {
      current = t.block;
      s << "block " << t.block << " (cache bytes " << t.block * img.block_stride << ".."
        << (t.block + 1) * img.block_stride - 1 << ")\n";
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %4lld ", static_cast<long long>(t.pos));
    s << buf;
    for (int j = 0; j < S::kNumTiles; ++j) {
      if (t.scale_bytes[j] == 0) std::snprintf(buf, sizeof buf, "%5s", "-");
      else if (t.scale_bytes[j] == 255) std::snprintf(buf, sizeof buf, "%5s", "inf");
      else std::snprintf(buf, sizeof buf, "%5d", t.exponent(j));
      s << buf;
    }
    std::snprintf(buf, sizeof buf, "  %11s %11s  ", fmt_float(t.nope_min).c_str(), fmt_float(t.nope_max).c_str());
    s << buf << "rope[";
    const int nr = std::clamp(o.rope_values, 0, S::kRopeDim);
    for (int k = 0; k < nr; ++k) s << (k ? " " : "") << fmt_float(S::bf16_to_f32(t.rope[k]));
    s << "]";
    const auto flags = t.flags();
    for (const auto& f : flags) s << "  " << f;
    if (t.nan_values > 0 || t.inf_values > 0)
      s << "  (decoded: " << t.nan_values << " NaN, " << t.inf_values << " inf)";
    s << "\n";
    pad += t.pad_byte != 0;
    s255 += t.scale255_tiles() > 0;
    nan += t.nan_codes > 0;
  }
  s << "summary: " << r.tokens.size() << " tokens, " << r.flagged_tokens << " flagged (non-zero pad byte: " << pad
    << ", scale byte 255: " << s255 << ", NaN codes: " << nan << ")\n";
  return s.str();
}

std::string inspect_bytes(std::span<const uint8_t> file, const InspectOptions& options, const std::string& origin) {
  return format_inspection(inspect_image(load_cache_image(file, options.tensor, origin), options), options);
}

}  // namespace dsv4kv::conformance
