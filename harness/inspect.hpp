/// \file inspect.hpp
/// \brief Decoding a saved K cache into a readable per-token report (`dsv4kv inspect`).
///
/// This is the one inspector of the project: the `dsv4kv inspect` command, the
/// Python `dsv4kv.inspect` module and `python -m dsv4kv inspect` all run it
/// (Python through the extension), so they accept the same flags and print the
/// same lines with the same exit status (run_inspect_command, InspectStatus).
///
/// A cache saved from PyTorch or NumPy arrives as a safetensors file (the
/// only uint8 tensor of rank 2 or 3, or a named one) or as a `.npy` uint8
/// array. Its tokens are stored as one of the records of dsv4kv/spec/records.hpp
/// (the 584-byte one unless `--format` or a `[num_blocks, B, W]` shape whose W is
/// another record's width says otherwise); its bytes are read with the layout of
/// dsv4kv/spec/layout.hpp and records.hpp and the decoding of numerics.hpp and
/// record_numerics.hpp; nothing here restates a layout constant.
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
  std::string origin;          ///< file name (or "<memory>")
  std::string format;          ///< "safetensors" or "npy"
  std::string tensor;          ///< tensor name inside a safetensors file; empty for .npy
  std::vector<int64_t> shape;  ///< rank 2 [num_blocks, block_stride] or rank 3 [num_blocks, x, y]
  int64_t num_blocks = 0;      ///< shape[0]
  int64_t block_stride = 0;    ///< bytes per block: the product of the other dimensions
  /// Block size implied by the shape (infer_block_size), else 0 (unknown).
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
/// \param tensor name of the safetensors tensor to use; empty = the only
///               uint8 tensor of rank 2 or 3 (several: InspectError listing them)
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
/// \throws InspectError when the file cannot be read or is malformed (a path holding a NUL
///         byte names no file: refused, never cut at the NUL)
CacheImage load_cache_file(const std::string& path, const std::string& tensor = "",
                           uint64_t max_bytes = kDefaultMaxCacheFileBytes);

/// Wraps a cache already in memory (a NumPy array, say) without a copy: the
/// caller keeps `bytes` alive while the image is used.
/// \param shape  rank 2 or 3, non-negative, product = bytes.size()
/// \param bytes  the cache, row-major
/// \param origin name used in messages
/// \throws InspectError when the shape is not a cache's or does not match the bytes
CacheImage cache_image_from_memory(std::vector<int64_t> shape, std::span<const uint8_t> bytes,
                                   const std::string& origin = "<array>");

/// The record a cache's shape implies: that of a rank-3 [num_blocks, B, W] tensor whose W is
/// a record's token width (584, 528, 288 or 68 bytes); nullopt for any other shape (a rank-2
/// cache, or a W that is no record's width), whose record is fp8_ds_mla unless --format says.
std::optional<spec::Record> record_of_shape(std::span<const int64_t> shape);

/// The block size a cache's shape implies for `record` (default: record_of_shape, else
/// fp8_ds_mla): x for a rank-3 [num_blocks, x, W] tensor whose W is that record's width;
/// nullopt when W is another record's width; otherwise the block size whose exact layout
/// (B * token bytes) is the block stride, else the one block size whose vLLM allocation
/// (vllm_block_stride) is (a V4.1 record's 512-byte pages can give several: then none).
/// \param shape  the cache's shape, rank 2 or 3
/// \param record the record the tokens are stored as; nullopt = from the shape
/// \return the block size, or nullopt when the shape implies none
std::optional<int64_t> infer_block_size(std::span<const int64_t> shape,
                                        std::optional<spec::Record> record = std::nullopt);

/// The most scale bytes a token has in any record (the FP4 record's 32).
inline constexpr int kMaxScaleBytes = 32;

/// What one scale byte says against the rules of its record (spec/records.md, "Inspecting a
/// cache"). The one statement of these rules: the report's flags, its summary and Python's
/// `dsv4kv.inspect.scale_flag` all read scale_flag().
enum class ScaleFlag : uint8_t {
  kOk = 0,    ///< nothing to say
  kInfinite,  ///< UE8M0 byte 255 of fp8_ds_mla / mxfp8_ds_mla: the scale of a group that held inf (written, flagged)
  kNan,       ///< a NaN scale the writer never stores: e4m3 0x7F/0xFF (nvfp4_ds_mla), UE8M0 255 (mxfp4_indexer)
  kNegative,  ///< an e4m3 scale with its sign bit set (nvfp4_ds_mla; the writer's scales are positive)
  kZero,      ///< byte 0 of nvfp4_ds_mla or mxfp4_indexer (their writers store 2^-9 and 2^-126 at least)
};

/// The flag of scale byte `byte` of record `r`: fp8_ds_mla and mxfp8_ds_mla flag 255 (kInfinite);
/// nvfp4_ds_mla flags 0x7F and 0xFF (kNan), any other byte with bit 7 set (kNegative) and 0
/// (kZero); mxfp4_indexer flags 255 (kNan) and 0 (kZero).
ScaleFlag scale_flag(spec::Record r, uint8_t byte);

/// The report's name of a scale flag: "scale255", "scale-nan", "scale-neg", "scale0"; "" for kOk.
const char* scale_flag_name(ScaleFlag f);

/// Whether value byte `code` of record `r` is a NaN code (e4m3 records only: fp8_ds_mla in
/// `format`, mxfp8_ds_mla in e4m3fn; the e2m1 records have no NaN).
bool value_code_is_nan(spec::Record r, uint8_t code, spec::Fp8Format format);

/// What one token's records say.
struct TokenReport {
  int64_t block = 0;                                  ///< block index in the cache
  int64_t pos = 0;                                    ///< position inside the block
  spec::Record record = spec::Record::kFp8DsMla;      ///< how the token is stored
  int num_scales = spec::kNumTiles;                   ///< scale bytes of the record (7, 16, 32 or 4)
  std::array<uint8_t, kMaxScaleBytes> scale_bytes{};  ///< the first num_scales: the scale byte of each tile/group
  uint8_t pad_byte = 0;                               ///< the scale record's pad byte (should be 0; fp8_ds_mla only)
  /// Smallest / largest non-NaN decoded value (NaN when every value is NaN): of the 448 NoPE
  /// values of fp8_ds_mla, of every value of a V4.1 record.
  float nope_min = 0.0f;
  float nope_max = 0.0f;
  int nan_codes = 0;   ///< FP8 codes that are NaN in the cache's format (e4m3 records)
  int nan_values = 0;  ///< decoded values (as for nope_min) that are NaN (NaN codes, 0 * inf, a NaN scale)
  int inf_values = 0;  ///< decoded values that are +-inf
  /// bf16 bits: fp8_ds_mla's 64 RoPE values; for a V4.1 record, its first 64 decoded values.
  std::array<uint16_t, spec::kRopeDim> rope{};

  /// Exponent of tile j's scale: byte - 127 (UE8M0 scales).
  int exponent(int j) const { return static_cast<int>(scale_bytes[j]) - spec::kScaleBias; }
  /// Scale bytes whose scale_flag is `f`.
  int scales_flagged(ScaleFlag f) const;
  /// Tiles whose scale byte is 255 in fp8_ds_mla or mxfp8_ds_mla (the scale of an infinite tile; decodes to inf/NaN).
  int scale255_tiles() const { return scales_flagged(ScaleFlag::kInfinite); }
  /// True when a byte breaks the record's rules: a non-zero pad byte, a flagged scale byte, a NaN code.
  bool flagged() const;
  /// Short flags, e.g. {"pad=0x5a", "scale255@2,5", "nan-codes=3"} (scale255@ lists the tiles;
  /// scale-nan@, scale-neg@ and scale0@ likewise, scale_flag_name); empty when none.
  std::vector<std::string> flags() const;
};

/// Decodes the records of position `pos` of one block.
/// \param block      the block's bytes (at least block_size * the record's token bytes)
/// \param block_size tokens per block, >= 1
/// \param pos        position in [0, block_size)
/// \param format     FP8 encoding of the cache (e4m3fn for every record but fp8_ds_mla)
/// \param record     how the tokens are stored
/// \throws InspectError when the block is too short or `pos` out of range
TokenReport inspect_token(std::span<const uint8_t> block, int64_t block_size, int64_t pos, spec::Fp8Format format,
                          spec::Record record = spec::Record::kFp8DsMla);

/// The decoded NoPE values of position `pos` (what dequantize_and_gather_k_cache
/// writes, as float), from the same decoding as inspect_token.
/// \throws InspectError as inspect_token
std::array<float, spec::kNopeDim> decode_nope(std::span<const uint8_t> block, int64_t block_size, int64_t pos,
                                              spec::Fp8Format format);

/// The decoded quantized values of position `pos` as float: decode_nope's 448 for fp8_ds_mla,
/// the head_dim values (512 or 128) a V4.1 record's gather writes, from the same decoding as
/// inspect_token (spec::dequantize_group_value).
/// \throws InspectError as inspect_token
std::vector<float> decode_quantized(std::span<const uint8_t> block, int64_t block_size, int64_t pos,
                                    spec::Fp8Format format, spec::Record record);

/// The line of one token in the report (position, scales, range of the decoded values, RoPE
/// values or a V4.1 record's first values, flags), with "\n".
std::string format_token_line(const TokenReport& token, int rope_values);

/// The header line naming the report's columns for `record`, with "\n".
std::string columns_line(spec::Record record = spec::Record::kFp8DsMla);

/// What one block's tokens say, in short.
struct BlockSummary {
  int min_scale_byte = 0;  ///< smallest tile scale byte over the block's tokens
  int max_scale_byte = 0;  ///< largest
  int64_t flagged = 0;     ///< tokens with at least one flag
};

/// Summarizes every block of a cache.
/// \param block_size tokens per block; 0 = infer_block_size
/// \param record     the record (InspectOptions::record); nullopt = from the shape
/// \throws InspectError when the block size or the record does not fit the cache
std::vector<BlockSummary> summarize_blocks(const CacheImage& image, int64_t block_size, spec::Fp8Format format,
                                           std::optional<spec::Record> record = std::nullopt);

/// Options of an inspection (the flags of `dsv4kv inspect`).
struct InspectOptions {
  std::string tensor;            ///< safetensors tensor name; empty = the only uint8 tensor of rank 2/3
  std::optional<int64_t> block;  ///< only this block (default: every block)
  std::optional<int64_t> token;  ///< only this position, in every selected block (default: every position)
  int64_t block_size = 0;        ///< tokens per block; 0 = infer_block_size (an error when it infers none)
  spec::Fp8Format format = spec::Fp8Format::kE4M3Fn;  ///< --fnuz selects kE4M3Fnuz (fp8_ds_mla only)
  int rope_values = 4;                                ///< RoPE values (a V4.1 record: first values) printed per token
  /// --format: the record the tokens are stored as; nullopt = record_of_shape, else fp8_ds_mla.
  /// One that contradicts a rank-3 shape's width is refused (InspectError).
  std::optional<spec::Record> record;
};

/// The decoded view of a cache under some options.
struct InspectResult {
  CacheImage image;        ///< the loaded tensor
  int64_t block_size = 0;  ///< block size used
  spec::Fp8Format format = spec::Fp8Format::kE4M3Fn;
  spec::Record record = spec::Record::kFp8DsMla;  ///< record used
  std::vector<TokenReport> tokens;                ///< the selected tokens, block-major
  int64_t flagged_tokens = 0;                     ///< tokens with at least one flag
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

/// A command line that is wrong on its own, whatever the file (kInspectUsageError).
class InspectUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A parsed `inspect` command line.
struct InspectCommand {
  std::string file;                                     ///< FILE
  InspectOptions options;                               ///< the flags
  uint64_t max_file_bytes = kDefaultMaxCacheFileBytes;  ///< --max-file-size
  bool help = false;                                    ///< -h/--help: print inspect_usage(), nothing else
};

/// Parses the arguments after `inspect`: FILE, --block N, --token T, --block-size B,
/// --tensor NAME (alias --key), --format NAME (alias --record), --fnuz, --rope K,
/// --max-file-size BYTES, -h/--help; `--flag=value` and `--` work as usual.
/// \throws InspectUsageError on an unknown flag, a missing or malformed value, a value out of its range
///         (a --format that names no record), --fnuz with a --format other than fp8_ds_mla, or no FILE
InspectCommand parse_inspect_args(const std::vector<std::string>& args);

/// The help text of the inspect command (ends with "\n").
std::string inspect_usage();

/// The exit statuses of the inspect command: the one table of `dsv4kv inspect` and
/// `python -m dsv4kv inspect`. Both return run_inspect_command's value, or kInspectFailed when
/// they cannot write stdout (which they own). The spec shows this table once
/// (spec/failure_model.md#failure_model_inspect_status); python/tests/test_inspect_parity.py
/// runs every row against both front ends and checks the spec's table against this one.
enum InspectStatus : int {
  /// The report was written, or the help (-h/--help). Bytes that break the layout's rules are
  /// findings, flagged in the report, not failures. A reader of stdout that goes away early
  /// (`| head`) does not change the status.
  kInspectOk = 0,
  /// No complete report, one line "dsv4kv inspect: <reason>" on stderr: the file cannot be used
  /// (missing, not a regular file, over the size cap, truncated or malformed, no tensor, an
  /// ambiguous or unknown tensor) or the options do not fit it (--block or --token past its
  /// end, a block size that does not fit the block stride or cannot be inferred, a --format
  /// whose width contradicts a [num_blocks, B, W] shape, --fnuz on a V4.1 record's shape). The
  /// front ends also return it when stdout cannot be written (a full disk), with the line
  /// "dsv4kv: cannot write to stdout: <reason>", and for an internal error (out of memory).
  kInspectFailed = 1,
  /// The command line alone is wrong, whatever the file; one line "dsv4kv inspect: <reason>"
  /// on stderr: no FILE, a second FILE, an unknown option, a missing or malformed value, a
  /// value out of its range, a --format that names no record, --fnuz with a V4.1 --format
  /// (InspectUsageError).
  kInspectUsageError = 2,
};

/// The whole `inspect` command: parses `args`, loads the file and streams the
/// report to `out`. Returns kInspectOk, or writes exactly one line
/// "dsv4kv inspect: <reason>\n" to `err` and returns kInspectUsageError or
/// kInspectFailed (InspectStatus). Exceptions thrown by `out` or `err` pass through;
/// any other exception is reported as that one line, with kInspectFailed.
/// \param args the arguments after `inspect`
/// \param out  receives the report in order; returns false to stop (a closed pipe)
/// \param err  receives the error line
/// \return an InspectStatus
int run_inspect_command(const std::vector<std::string>& args, const std::function<bool(std::string_view)>& out,
                        const std::function<void(std::string_view)>& err);

}  // namespace dsv4kv::conformance
