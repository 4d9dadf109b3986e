/// \file safetensors.hpp
/// \brief A strict, bounds-checked reader of safetensors files (the golden data format).
///
/// Format (https://github.com/huggingface/safetensors): a little-endian u64 N,
/// an N-byte JSON header mapping tensor names to {dtype, shape, data_offsets}
/// plus an optional "__metadata__" string map, then the data section, which the
/// offsets address relative to its first byte.
///
/// Golden files come from outside the build, and the byte-buffer entry point
/// is fuzzed, so every structural fact the header claims is checked against
/// the bytes that are really there before anything is read: a malformed file
/// raises SafetensorsError naming the file and the problem, never a crash or
/// an out-of-bounds read. Overlapping tensors are not rejected (they are
/// harmless to a reader).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsv4kv::conformance {

/// A malformed or unreadable safetensors file, or a request the file cannot
/// satisfy (missing tensor, wrong dtype). The message starts with the file name.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The element types the golden files use.
enum class StDType : uint8_t { kBF16, kU8, kI32, kI64, kBool };

/// Name of `t` as the safetensors header spells it ("BF16", "U8", ...).
const char* st_dtype_name(StDType t);
/// Bytes of one element of `t`.
int st_dtype_size(StDType t);

/// One tensor's header entry, validated against the data section.
struct TensorInfo {
  std::string name;            ///< full name, e.g. "case003.k_cache_after"
  StDType dtype = StDType::kU8;
  std::vector<int64_t> shape;  ///< exact shape (rank 0 = scalar, one element)
  uint64_t begin = 0;          ///< first byte, relative to the data section
  uint64_t end = 0;            ///< one past the last byte, relative to the data section
  /// Number of elements (product of the shape; 1 for rank 0).
  int64_t numel() const;
};

/// \brief A parsed safetensors file held in memory.
///
/// Typed accessors copy the bytes out (the data section has no alignment
/// guarantee, so a typed span into it would be undefined behaviour); `raw()`
/// gives the bytes themselves.
class SafetensorsFile {
 public:
  /// Reads and parses the file at `path`.
  /// \param path file to read
  /// \throws SafetensorsError when the file cannot be read or is malformed
  static SafetensorsFile load(const std::string& path);

  /// Parses a file image already in memory (the fuzzed entry point).
  /// \param bytes  the whole file image; copied
  /// \param size   its length in bytes
  /// \param origin name used in error messages (a path, or "<memory>")
  /// \throws SafetensorsError when the image is malformed
  static SafetensorsFile from_bytes(const uint8_t* bytes, size_t size, std::string origin = "<memory>");
  /// \copydoc from_bytes(const uint8_t*, size_t, std::string)
  static SafetensorsFile from_bytes(std::vector<uint8_t> bytes, std::string origin = "<memory>");

  /// The path (or origin label) the file came from.
  const std::string& origin() const { return origin_; }
  /// True when a tensor named `name` exists.
  bool has(const std::string& name) const;
  /// Header entry of tensor `name`. \throws SafetensorsError when absent
  const TensorInfo& info(const std::string& name) const;
  /// All tensor names, sorted.
  std::vector<std::string> tensor_names() const;
  /// The bytes of tensor `name` (valid while this object lives). \throws SafetensorsError when absent
  std::span<const uint8_t> raw(const std::string& name) const;

  /// BF16 tensor as raw uint16 bits. \throws SafetensorsError when absent or of another dtype
  std::vector<uint16_t> bf16(const std::string& name) const;
  /// U8 tensor. \throws SafetensorsError when absent or of another dtype
  std::vector<uint8_t> u8(const std::string& name) const;
  /// BOOL tensor, one byte per element (0 or 1 in well-formed files). \throws SafetensorsError
  std::vector<uint8_t> boolean(const std::string& name) const;
  /// I32 tensor. \throws SafetensorsError when absent or of another dtype
  std::vector<int32_t> i32(const std::string& name) const;
  /// I64 tensor. \throws SafetensorsError when absent or of another dtype
  std::vector<int64_t> i64(const std::string& name) const;

  /// A scalar parameter: a one-element I64 tensor.
  /// \param name full tensor name, e.g. "case000.param.block_size"
  /// \throws SafetensorsError when absent, not I64 or not exactly one element
  int64_t param(const std::string& name) const;

  /// The "__metadata__" string map (empty when the header has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Metadata value of `key`, or `fallback` when absent.
  std::string meta(const std::string& key, const std::string& fallback = "") const;

  /// The distinct case prefixes of the tensor names ("case000", "case001", ...),
  /// i.e. every name's part before its first '.' that reads "case" + digits, sorted.
  std::vector<std::string> case_names() const;

 private:
  SafetensorsFile() = default;
  void parse();
  [[noreturn]] void fail(const std::string& problem) const;
  const TensorInfo& typed(const std::string& name, StDType want) const;

  std::string origin_;
  std::vector<uint8_t> bytes_;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dsv4kv::conformance
