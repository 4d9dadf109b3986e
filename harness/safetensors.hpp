/// \file safetensors.hpp
/// \brief A strict, bounds-checked reader of safetensors files (the golden data format).
///
/// Format (https://github.com/huggingface/safetensors): a little-endian u64 N,
/// an N-byte JSON header mapping tensor names to {dtype, shape, data_offsets}
/// plus an optional "__metadata__" string map, then the data section, which the
/// offsets address relative to its first byte.
///
/// Golden files and saved caches come from outside the build, and the
/// byte-buffer entry point is fuzzed, so the reader assumes hostile bytes:
/// - a file is read only if it is a regular file of at most the caller's size
///   cap (FileBytes), mapped or read once; tensors are views into those bytes;
/// - the header must start with '{' at byte 8 and is at most kMaxHeaderBytes;
///   it is parsed by a small iterative parser that knows the schema (no
///   recursion, nesting limited to kMaxJsonDepth in skipped fields, strict
///   JSON: no NUL or other control bytes, valid UTF-8, no duplicate keys);
/// - every size the header claims is checked against the bytes that are
///   really there with overflow-checked arithmetic; the tensors must tile the
///   data section exactly (no overlap, no gap, nothing after the last one),
///   as in the reference implementation;
/// - a dtype this reader does not decode (F32, or a name it has never seen)
///   does not make the file unreadable: the tensor is listed as StDType::kOther
///   and only an attempt to read it as a supported type fails.
///
/// A malformed file raises SafetensorsError with one line naming the file and
/// the problem (a file that is not safetensors at all: "not a safetensors
/// file: ..."), never a crash or an out-of-bounds read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "file_input.hpp"

namespace dsv4kv::conformance {

/// Largest JSON header accepted, in bytes (real headers are a few KB; a
/// corrupt length is refused before anything is allocated).
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{16} << 20;
/// Deepest nesting accepted inside a field the reader skips (the schema's own
/// fields are at depth 3 at most).
inline constexpr int kMaxJsonDepth = 64;
/// Largest tensor rank accepted.
inline constexpr size_t kMaxRank = 64;
/// Default size cap of SafetensorsFile::load.
inline constexpr uint64_t kDefaultMaxFileBytes = uint64_t{4} << 30;

/// A malformed or unreadable safetensors file, or a request the file cannot
/// satisfy (missing tensor, wrong dtype). The message starts with the file name.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The element types the golden files use, and kOther for every other dtype
/// (listed, bounds-checked, never decoded).
enum class StDType : uint8_t { kBF16, kU8, kI32, kI64, kBool, kOther };

/// Name of `t` as the safetensors header spells it ("BF16", "U8", ...; "other" for kOther).
const char* st_dtype_name(StDType t);
/// Bytes of one element of `t` (0 for kOther).
int st_dtype_size(StDType t);

/// One tensor's header entry, validated against the data section.
struct TensorInfo {
  std::string name;  ///< full name, e.g. "case003.k_cache_after"
  StDType dtype = StDType::kU8;
  std::string dtype_name;      ///< dtype as the header spells it ("U8", "F32", ...)
  std::vector<int64_t> shape;  ///< exact shape (rank 0 = scalar, one element)
  uint64_t begin = 0;          ///< first byte, relative to the data section
  uint64_t end = 0;            ///< one past the last byte, relative to the data section
  /// Number of elements (product of the shape; 1 for rank 0; 0 when any
  /// dimension is 0, however large the others).
  /// \throws SafetensorsError when the product does not fit in int64 (never
  ///         for an entry of a parsed file, whose counts were checked)
  int64_t numel() const;
};

/// \brief A parsed safetensors file: the header, and views into the file's bytes.
///
/// Typed accessors copy the bytes out (the data section has no alignment
/// guarantee, so a typed span into it would be undefined behaviour); `raw()`
/// gives the bytes themselves, without a copy.
class SafetensorsFile {
 public:
  /// Reads and parses the file at `path` (a regular file of at most `max_bytes`).
  /// \param path      file to read
  /// \param max_bytes size cap
  /// \throws SafetensorsError when the file cannot be read or is malformed
  static SafetensorsFile load(const std::string& path, uint64_t max_bytes = kDefaultMaxFileBytes);

  /// Parses a file whose bytes are already held (mapped or in memory); the
  /// result keeps `bytes` alive and views into it.
  /// \param bytes  the whole file image
  /// \param origin name used in error messages
  /// \throws SafetensorsError when the image is malformed
  static SafetensorsFile from_storage(std::shared_ptr<const FileBytes> bytes, std::string origin);

  /// Parses a file image already in memory (the fuzzed entry point).
  /// \param bytes  the whole file image; copied once
  /// \param size   its length in bytes
  /// \param origin name used in error messages (a path, or "<memory>")
  /// \throws SafetensorsError when the image is malformed
  static SafetensorsFile from_bytes(const uint8_t* bytes, size_t size, std::string origin = "<memory>");
  /// Parses a file image handed over (moved in, not copied).
  /// \param bytes  the whole file image
  /// \param origin name used in error messages
  /// \throws SafetensorsError when the image is malformed
  static SafetensorsFile from_bytes(std::vector<uint8_t> bytes, std::string origin = "<memory>");

  /// The bytes the views point into (to keep them alive beyond this object).
  const std::shared_ptr<const FileBytes>& storage() const { return storage_; }

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
  void parse_header(const char* begin, const char* end);
  [[noreturn]] void fail(const std::string& problem) const;
  const TensorInfo& typed(const std::string& name, StDType want) const;

  std::string origin_;
  std::shared_ptr<const FileBytes> storage_;
  std::span<const uint8_t> bytes_;
  uint64_t data_start_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace dsv4kv::conformance
