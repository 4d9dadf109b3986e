/// \file convert.hpp
/// \brief Re-encoding a whole cache from one record to another (spec/records.md, "Converting a
/// cache"), on host memory through a Backend: the `dsv4kv convert` command and its tests.
///
/// Token `s` of the source is read back with the sparse gather and written to slot `s` of the
/// destination with quantize, a chunk of whole blocks at a time; the Python package's
/// `dsv4kv.convert_k_cache` is the same composition.
#pragma once

#include <cstdint>

#include "backend.hpp"
#include "dsv4kv/spec.hpp"

namespace dsv4kv::conformance {

/// What to convert: both records, the block size both caches share, the FP8 format.
struct ConvertOptions {
  spec::Record from = spec::Record::kFp8DsMla;        ///< the source's record
  spec::Record to = spec::Record::kMxfp8DsMla;        ///< the destination's record (same head_dim)
  int64_t block_size = 64;                            ///< tokens per block, of both caches
  spec::Fp8Format format = spec::Fp8Format::kE4M3Fn;  ///< FP8 codes of a 584-byte side (fnuz or not)
  int64_t chunk_tokens = 65536;                       ///< tokens decoded per step (bf16 rows held at once)
};

/// What a conversion did.
struct ConvertReport {
  int64_t tokens = 0;   ///< token slots converted (num_blocks * block_size)
  int64_t reports = 0;  ///< the two operations' error_count: NaN scale bytes, non-finite decoded values
};

/// The name in errors: dsv4kv::Error("convert_k_cache", ...).
inline constexpr const char* kConvertName = "convert_k_cache";

/// \brief Re-encodes every token slot of `src` into the same slot of `dst`.
///
/// \param be      the backend that runs the two operations (host-memory arguments)
/// \param src     [num_blocks, src_stride] (or rank 3) uint8 cache of `options.from`
/// \param dst     uint8 cache of `options.to` with at least num_blocks blocks; only its token
///                records are written (block tails and blocks past num_blocks keep their bytes)
/// \param options the records, block size and format
/// \return the tokens converted and the operations' reports
/// \throws dsv4kv::Error naming the argument and the rule it broke (records of different
///         head_dim, too few destination blocks, a chunk size < 1), or the operations' own
///         contract errors (a block stride too small for the record, say)
ConvertReport convert_k_cache(Backend& be, const TensorView& src, const TensorView& dst, const ConvertOptions& options);

}  // namespace dsv4kv::conformance
