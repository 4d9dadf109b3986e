// Strict safetensors reader: every header claim is checked against the bytes before use.
#include "safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace dsv4kv::conformance {

namespace {

using nlohmann::json;

/// The reference implementation refuses headers above 100 MB; so do we. A
/// larger claim is far more likely a corrupt length than a real header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

bool parse_dtype(const std::string& s, StDType* out) {
  if (s == "BF16") *out = StDType::kBF16;
  else if (s == "U8") *out = StDType::kU8;
  else if (s == "I32") *out = StDType::kI32;
  else if (s == "I64") *out = StDType::kI64;
  else if (s == "BOOL") *out = StDType::kBool;
  else return false;
  return true;
}

/// A JSON number that is a non-negative integer representable in uint64.
bool as_u64(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

}  // namespace

const char* st_dtype_name(StDType t) {
  switch (t) {
    case StDType::kBF16: return "BF16";
    case StDType::kU8: return "U8";
    case StDType::kI32: return "I32";
    case StDType::kI64: return "I64";
    case StDType::kBool: return "BOOL";
  }
  return "?";
}

int st_dtype_size(StDType t) {
  switch (t) {
    case StDType::kBF16: return 2;
    case StDType::kU8: return 1;
    case StDType::kI32: return 4;
    case StDType::kI64: return 8;
    case StDType::kBool: return 1;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // parse() proved the product fits
  return n;
}

SafetensorsFile SafetensorsFile::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SafetensorsError(path + ": cannot open file");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw SafetensorsError(path + ": cannot determine file size");
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    throw SafetensorsError(path + ": read error");
  return from_bytes(std::move(bytes), path);
}

SafetensorsFile SafetensorsFile::from_bytes(const uint8_t* bytes, size_t size, std::string origin) {
  std::vector<uint8_t> copy;
  if (size > 0) copy.assign(bytes, bytes + size);
  return from_bytes(std::move(copy), std::move(origin));
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> bytes, std::string origin) {
  SafetensorsFile f;
  f.origin_ = std::move(origin);
  f.bytes_ = std::move(bytes);
  f.parse();
  return f;
}

void SafetensorsFile::fail(const std::string& problem) const { throw SafetensorsError(origin_ + ": " + problem); }

void SafetensorsFile::parse() {
  const uint64_t size = bytes_.size();
  if (size < 8) fail("file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes_[static_cast<size_t>(i)];
  if (n > kMaxHeaderBytes)
    fail("header length " + std::to_string(n) + " is absurd (limit " + std::to_string(kMaxHeaderBytes) + ")");
  if (n > size - 8)
    fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size - 8) +
         " bytes follow the length)");
  if (n < 2) fail("header length " + std::to_string(n) + " is too short for a JSON object");
  data_start_ = 8 + n;
  const uint64_t data_size = size - data_start_;

  json header;
  try {
    const auto* b = reinterpret_cast<const char*>(bytes_.data() + 8);
    header = json::parse(b, b + n);
  } catch (const json::exception& e) {
    fail(std::string("invalid JSON header: ") + e.what());
  }
  if (!header.is_object()) fail("JSON header is not an object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string()) fail("__metadata__ value of '" + m.key() + "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) fail(where + ": entry is not an object");
    const auto dt = entry.find("dtype");
    const auto sh = entry.find("shape");
    const auto off = entry.find("data_offsets");
    if (dt == entry.end()) fail(where + ": missing dtype");
    if (sh == entry.end()) fail(where + ": missing shape");
    if (off == entry.end()) fail(where + ": missing data_offsets");

    TensorInfo info;
    info.name = name;
    if (!dt->is_string()) fail(where + ": dtype is not a string");
    if (!parse_dtype(dt->get<std::string>(), &info.dtype))
      fail(where + ": unknown dtype '" + dt->get<std::string>() + "' (expected BF16, U8, I32, I64 or BOOL)");

    if (!sh->is_array()) fail(where + ": shape is not an array");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      uint64_t v = 0;
      if (!as_u64(d, &v) || v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(where + ": shape entry " + d.dump() + " is not a non-negative integer");
      info.shape.push_back(static_cast<int64_t>(v));
      if (!overflow && __builtin_mul_overflow(numel, v, &numel)) overflow = true;
    }
    // A zero dimension makes the product 0 even if an earlier partial product overflowed.
    if (std::find(info.shape.begin(), info.shape.end(), 0) != info.shape.end()) {
      overflow = false;
      numel = 0;
    }

    if (!off->is_array() || off->size() != 2) fail(where + ": data_offsets is not a [begin, end] pair");
    if (!as_u64((*off)[0], &info.begin) || !as_u64((*off)[1], &info.end))
      fail(where + ": data_offsets entries are not non-negative integers");
    if (info.begin > info.end)
      fail(where + ": data_offsets reversed (begin " + std::to_string(info.begin) + " > end " +
           std::to_string(info.end) + ")");
    if (info.end > data_size)
      fail(where + ": data_offsets end " + std::to_string(info.end) + " is beyond the data section (" +
           std::to_string(data_size) + " bytes)");
    uint64_t nbytes = 0;
    if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, static_cast<uint64_t>(st_dtype_size(info.dtype)), &nbytes))
      fail(where + ": shape " + sh->dump() + " has too many elements");
    if (nbytes != info.end - info.begin)
      fail(where + ": byte size " + std::to_string(info.end - info.begin) + " != prod(shape) * " +
           std::to_string(st_dtype_size(info.dtype)) + " = " + std::to_string(nbytes) + " for shape " + sh->dump() +
           " and dtype " + st_dtype_name(info.dtype));
    tensors_.emplace(name, std::move(info));
  }
}

bool SafetensorsFile::has(const std::string& name) const { return tensors_.count(name) != 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("no tensor named '" + name + "'");
  return it->second;
}

std::vector<std::string> SafetensorsFile::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& kv : tensors_) names.push_back(kv.first);
  return names;
}

std::span<const uint8_t> SafetensorsFile::raw(const std::string& name) const {
  const TensorInfo& t = info(name);
  return {bytes_.data() + data_start_ + t.begin, static_cast<size_t>(t.end - t.begin)};
}

const TensorInfo& SafetensorsFile::typed(const std::string& name, StDType want) const {
  const TensorInfo& t = info(name);
  if (t.dtype != want)
    fail("tensor '" + name + "' has dtype " + st_dtype_name(t.dtype) + ", expected " + st_dtype_name(want));
  return t;
}

namespace {
template <class T>
std::vector<T> copy_out(std::span<const uint8_t> bytes) {
  // Little-endian file, little-endian host (x86-64 / aarch64): a byte copy is the decode.
  static_assert(std::endian::native == std::endian::little, "the reader assumes a little-endian host");
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}
}  // namespace

std::vector<uint16_t> SafetensorsFile::bf16(const std::string& name) const {
  typed(name, StDType::kBF16);
  return copy_out<uint16_t>(raw(name));
}
std::vector<uint8_t> SafetensorsFile::u8(const std::string& name) const {
  typed(name, StDType::kU8);
  return copy_out<uint8_t>(raw(name));
}
std::vector<uint8_t> SafetensorsFile::boolean(const std::string& name) const {
  typed(name, StDType::kBool);
  return copy_out<uint8_t>(raw(name));
}
std::vector<int32_t> SafetensorsFile::i32(const std::string& name) const {
  typed(name, StDType::kI32);
  return copy_out<int32_t>(raw(name));
}
std::vector<int64_t> SafetensorsFile::i64(const std::string& name) const {
  typed(name, StDType::kI64);
  return copy_out<int64_t>(raw(name));
}

int64_t SafetensorsFile::param(const std::string& name) const {
  const TensorInfo& t = typed(name, StDType::kI64);
  if (t.numel() != 1)
    fail("parameter '" + name + "' must have exactly one element, has " + std::to_string(t.numel()));
  return i64(name)[0];
}

std::string SafetensorsFile::meta(const std::string& key, const std::string& fallback) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? fallback : it->second;
}

std::vector<std::string> SafetensorsFile::case_names() const {
  std::set<std::string> cases;
  for (const auto& kv : tensors_) {
    const std::string& name = kv.first;
    const size_t dot = name.find('.');
    if (dot == std::string::npos || dot <= 4 || name.compare(0, 4, "case") != 0) continue;
    const std::string prefix = name.substr(0, dot);
    if (std::all_of(prefix.begin() + 4, prefix.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      cases.insert(prefix);
  }
  return {cases.begin(), cases.end()};
}

}  // namespace dsv4kv::conformance
