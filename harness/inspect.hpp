/// \file inspect.hpp
/// \brief Decoding a saved K cache into a readable per-token report (`dsv4kv inspect`).
///
/// A cache saved from PyTorch or NumPy arrives as a safetensors file (the
/// first uint8 tensor of rank 2 or 3, or a named one) or as a `.npy` uint8
/// array. Its bytes are read with the layout of dsv4kv/spec/layout.hpp and the
/// decoding of dsv4kv/spec/numerics.hpp; nothing here restates a layout
/// constant.
///
/// Files come from outside the build, so the readers assume hostile bytes: a
/// path must name a regular file no larger than the size cap (devices, FIFOs
/// and directories are refused before a byte is read); the file is mapped (or
/// read once) and the cache is a view into it, never a copy; the `.npy` header
/// is read with a strict grammar (exactly the keys descr, fortran_order and
/// shape, each once; a Python tuple of plain decimal integers; True/False as
/// whole words) and the data must be exactly as long as the shape says; the
/// safetensors reader is SafetensorsFile. Every size is overflow-checked, and
/// malformed input raises InspectError with a one-line message, never a crash
/// or an out-of-bounds read (the byte-buffer entry points are fuzzed).
///
/// write_inspection() streams the report token by token, dropping the pages of
/// a mapped cache once they are decoded, so memory stays small whatever the
/// size of the cache.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dsv4kv/spec.hpp"
#include "file_input.hpp"

namespace dsv4kv::conformance {

/// A file that is not a readable cache, or options the cache cannot satisfy
/// (block index out of range, block size too large for the block stride).
class InspectError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The bytes of a cache tensor loaded from a file.
struct CacheImage {
  std::string origin;           ///< file name (or "<memory>")
  std::string format;           ///< "safetensors" or "npy"
  std::string tensor;           ///< tensor name inside a safetensors file; empty for .npy
  std::vector<int64_t> shape;   ///< rank 2 [num_blocks, block_stride] or rank 3 [num_blocks, x, y]
  int64_t num_blocks = 0;       ///< shape[0]
  int64_t block_stride = 0;     ///< bytes per block: the product of the other dimensions
  /// Block size implied by the shape: x for a rank-3 [num_blocks, x, 584] tensor, else 0 (unknown).
  int64_t implied_block_size = 0;
  std::shared_ptr<const FileBytes> storage;  ///< the file's bytes; keeps `bytes` valid
  std::span<const uint8_t> bytes;            ///< num_blocks * block_stride bytes, row-major: a view into storage
};

/// Largest `.npy` header accepted, in bytes (NumPy writes about 128 for a uint8 array).
inline constexpr size_t kMaxNpyHeaderBytes = 65536;
/// Default size cap of load_cache_file (a larger cache needs an explicit, larger cap).
inline constexpr uint64_t kDefaultMaxCacheFileBytes = uint64_t{4} << 30;

/// Parses a cache file image in memory: `.npy` (recognized by its magic
/// bytes) or safetensors. The image is copied once; the result views the copy.
/// \param file   the whole file image
/// \param tensor name of the safetensors tensor to use; empty = the first
///               (in name order) uint8 tensor of rank 2 or 3
/// \param origin name used in messages
/// \throws InspectError when the image is malformed or holds no suitable tensor
CacheImage load_cache_image(std::span<const uint8_t> file, const std::string& tensor = "",
                            const std::string& origin = "<memory>");

/// Parses a cache file whose bytes are already held (mapped or in memory), without a copy.
/// \param file   the whole file
/// \param tensor as in load_cache_image
/// \param origin name used in messages
/// \throws InspectError when the image is malformed or holds no suitable tensor
CacheImage load_cache_storage(std::shared_ptr<const FileBytes> file, const std::string& tensor = "",
                              const std::string& origin = "<memory>");

/// Maps (or reads) the file at `path` and parses it with load_cache_storage.
/// \param path      a regular .safetensors or .npy file
/// \param tensor    as in load_cache_image
/// \param max_bytes size cap: a larger file is refused
/// \throws InspectError when the file cannot be read or is malformed
CacheImage load_cache_file(const std::string& path, const std::string& tensor = "",
                           uint64_t max_bytes = kDefaultMaxCacheFileBytes);

/// What one token's records say.
struct TokenReport {
  int64_t block = 0;  ///< block index in the cache
  int64_t pos = 0;    ///< position inside the block
  std::array<uint8_t, spec::kNumTiles> scale_bytes{};  ///< UE8M0 bytes of tiles 0..6
  uint8_t pad_byte = 0;        ///< the scale record's pad byte (should be 0)
  float nope_min = 0.0f;       ///< smallest non-NaN decoded NoPE value (NaN when every value is NaN)
  float nope_max = 0.0f;       ///< largest non-NaN decoded NoPE value (NaN when every value is NaN)
  int nan_codes = 0;           ///< FP8 codes that are NaN in the cache's format
  int nan_values = 0;          ///< decoded NoPE values that are NaN (NaN codes, 0 * inf)
  int inf_values = 0;          ///< decoded NoPE values that are +-inf
  std::array<uint16_t, spec::kRopeDim> rope{};  ///< RoPE values as bf16 bits

  /// Exponent of tile j's scale: byte - 127.
  int exponent(int j) const { return static_cast<int>(scale_bytes[j]) - spec::kScaleBias; }
  /// Tiles whose scale byte is 255 (the scale of an infinite tile; decodes to inf/NaN).
  int scale255_tiles() const;
  /// True when a byte breaks the spec: non-zero pad byte, scale byte 255 or a NaN code.
  bool flagged() const { return pad_byte != 0 || scale255_tiles() > 0 || nan_codes > 0; }
  /// Short flags, e.g. {"pad=0x5a", "scale255x2", "nan-codes=3"}; empty when none.
  std::vector<std::string> flags() const;
};

/// Decodes the records of position `pos` of one block.
/// \param block      the block's bytes (at least block_data_bytes(block_size))
/// \param block_size tokens per block, >= 1
/// \param pos        position in [0, block_size)
/// \param format     FP8 encoding of the cache
/// \throws InspectError when the block is too short or `pos` out of range
TokenReport inspect_token(std::span<const uint8_t> block, int64_t block_size, int64_t pos, spec::Fp8Format format);

/// Options of an inspection (the flags of `dsv4kv inspect`).
struct InspectOptions {
  std::string tensor;             ///< safetensors tensor name; empty = first uint8 tensor of rank 2/3
  std::optional<int64_t> block;   ///< only this block (default: every block)
  std::optional<int64_t> token;   ///< only this position (default: every position)
  int64_t block_size = 0;         ///< tokens per block; 0 = implied by a rank-3 shape, else 64
  spec::Fp8Format format = spec::Fp8Format::kE4M3Fn;  ///< --fnuz selects kE4M3Fnuz
  int rope_values = 4;            ///< RoPE values printed per token
};

/// The decoded view of a cache under some options.
struct InspectResult {
  CacheImage image;                 ///< the loaded tensor
  int64_t block_size = 0;           ///< block size used
  spec::Fp8Format format = spec::Fp8Format::kE4M3Fn;
  std::vector<TokenReport> tokens;  ///< the selected tokens, block-major
  int64_t flagged_tokens = 0;       ///< tokens with at least one flag
};

/// Decodes the selected tokens of a loaded cache.
/// \throws InspectError when the options do not fit the cache
InspectResult inspect_image(CacheImage image, const InspectOptions& options);

/// Renders an inspection as the text `dsv4kv inspect` prints.
std::string format_inspection(const InspectResult& result, const InspectOptions& options);

/// Counts of a streamed inspection.
struct InspectSummary {
  int64_t tokens = 0;          ///< tokens written
  int64_t flagged_tokens = 0;  ///< of which flagged
  bool complete = false;       ///< false when `write` asked to stop early
};

/// Decodes the selected tokens and writes the same text as format_inspection,
/// one piece at a time, without holding the tokens: memory does not grow with
/// the cache. Stops as soon as `write` returns false (a closed pipe, say).
/// \param image   the loaded cache
/// \param options what to decode
/// \param write   receives the text in order; returns false to stop
/// \throws InspectError when the options do not fit the cache (before anything is written)
InspectSummary write_inspection(const CacheImage& image, const InspectOptions& options,
                                const std::function<bool(std::string_view)>& write);

/// The whole pipeline on a file image: load, decode, render with
/// write_inspection (the fuzzed entry point).
/// \throws InspectError on malformed input or unsatisfiable options
std::string inspect_bytes(std::span<const uint8_t> file, const InspectOptions& options,
                          const std::string& origin = "<memory>");

}  // namespace dsv4kv::conformance
