/// \file records.hpp
/// \brief The cache records a token can be stored as, as constexpr descriptors.
///
/// Spec section: docs "Cache records" (spec/records.md). DeepSeek-V4's 584-byte record
/// (layout.hpp, the default) and the three records of DeepSeek-V4.1: the 528-byte MXFP8
/// record, the 288-byte FP4 record and the 68-byte FP4 indexer key. Every record splits a
/// block the same way (all tokens' data, then all tokens' scales, then an untouched tail);
/// a descriptor says how wide each part is and how values and scales are encoded. Both
/// backends, the tools and the tests take every record byte count from here.
#pragma once

#include <cstdint>
#include <string_view>

#include "dsv4kv/spec/config.hpp"
#include "dsv4kv/spec/layout.hpp"

namespace dsv4kv::spec {

/// \brief A cache record: how one token's key is encoded in a block.
enum class Record : uint8_t {
  kFp8DsMla = 0,      ///< 584 B: 448 e4m3 + 64 bf16 RoPE, 7 UE8M0 scales of 64 + a pad byte (DeepSeek-V4)
  kMxfp8DsMla = 1,    ///< 528 B: 512 e4m3 (RoPE included), 16 UE8M0 scales of 32 (DeepSeek-V4.1)
  kNvfp4DsMla = 2,    ///< 288 B: 512 e2m1 packed two per byte, 32 e4m3 scales of 16 (DeepSeek-V4.1, compressed cache)
  kMxfp4Indexer = 3,  ///< 68 B: 128 e2m1 packed two per byte, 4 UE8M0 scales of 32 (DeepSeek-V4.1 indexer key)
};

/// Number of records.
inline constexpr int kNumRecords = 4;

/// The records' names, indexed by their values: the Python keyword's and the CLI flag's strings.
inline constexpr const char* kRecordNames[] = {"fp8_ds_mla", "mxfp8_ds_mla", "nvfp4_ds_mla", "mxfp4_indexer"};
static_assert(sizeof(kRecordNames) / sizeof(kRecordNames[0]) == kNumRecords);
static_assert(static_cast<int>(Record::kMxfp4Indexer) == kNumRecords - 1, "one name per enumerator");

/// How the quantized values of a record are encoded.
enum class ValueCode : uint8_t {
  kE4M3 = 0,  ///< one FP8 e4m3 byte per value (e4m3fn, or e4m3fnuz where the record allows it)
  kE2M1 = 1,  ///< FP4 e2m1 nibbles, two per byte: value 2j in bits 0..3, value 2j+1 in bits 4..7
};

/// How the scales of a record are encoded.
enum class ScaleCode : uint8_t {
  kUe8m0 = 0,  ///< one byte s: the multiplier 2^(s - 127)
  kE4M3 = 1,   ///< one OCP e4m3fn byte: the multiplier is its value
};

/// \brief The byte algebra of one record (spec "Cache records").
///
/// A block of B tokens holds, at offset `p * data_bytes`, token p's data (the quantized values,
/// then any bf16 values), and at `B * data_bytes + p * scale_bytes` its scale record; bytes
/// from `B * token_bytes()` to the block stride are never read or written.
struct RecordLayout {
  int head_dim;          ///< values of one key row (the width of k and of a gathered row)
  int quant_dim;         ///< leading values that are quantized; the rest are stored as bf16
  int group;             ///< consecutive quantized values sharing one scale
  ValueCode values;      ///< encoding of the quantized values
  ScaleCode scales;      ///< encoding of the scales
  int scale_bytes;       ///< bytes of one token's scale record (scales, then pad bytes written as 0)
  int page_alignment;    ///< vLLM rounds a block's allocation up to a multiple of this
  int stride_alignment;  ///< a block stride must be a multiple of this (2 where bf16 values are stored)

  /// bf16 values at the end of a row ("RoPE" part): 64 in the 584-byte record, else 0.
  DSV4KV_HD constexpr int bf16_dim() const { return head_dim - quant_dim; }
  /// Scales of one token.
  DSV4KV_HD constexpr int num_scales() const { return quant_dim / group; }
  /// Bytes of one token's quantized values.
  DSV4KV_HD constexpr int value_bytes() const { return values == ValueCode::kE4M3 ? quant_dim : quant_dim / 2; }
  /// Bytes of one token's data record (quantized values, then bf16 values).
  DSV4KV_HD constexpr int data_bytes() const { return value_bytes() + bf16_dim() * kBf16Bytes; }
  /// Bytes a token occupies in a block (data + scale record).
  DSV4KV_HD constexpr int token_bytes() const { return data_bytes() + scale_bytes; }
  /// Pad bytes at the end of a scale record.
  DSV4KV_HD constexpr int pad_bytes() const { return scale_bytes - num_scales(); }

  /// Byte offset, inside its block, of token `pos`'s data record.
  DSV4KV_HD constexpr int64_t data_offset(int64_t pos) const { return pos * data_bytes(); }
  /// Byte offset, inside its block, of token `pos`'s bf16 values (the 584-byte record's RoPE part).
  DSV4KV_HD constexpr int64_t bf16_offset(int64_t pos) const { return data_offset(pos) + value_bytes(); }
  /// Byte offset, inside its block, of the scale region.
  DSV4KV_HD constexpr int64_t scale_region_offset(int64_t block_size) const { return block_size * data_bytes(); }
  /// Byte offset, inside its block, of token `pos`'s scale byte `j` (j >= num_scales() are pad bytes).
  DSV4KV_HD constexpr int64_t scale_offset(int64_t block_size, int64_t pos, int j) const {
    return scale_region_offset(block_size) + pos * scale_bytes + j;
  }
  /// Bytes of a block the record uses.
  DSV4KV_HD constexpr int64_t block_data_bytes(int64_t block_size) const { return block_size * token_bytes(); }
  /// The block stride vLLM allocates for a cache holding only this record.
  DSV4KV_HD constexpr int64_t vllm_block_stride(int64_t block_size) const {
    return (block_data_bytes(block_size) + page_alignment - 1) / page_alignment * page_alignment;
  }
};

/// The descriptor of record `r` (a switch, so device code needs no global table).
DSV4KV_HD constexpr RecordLayout record_layout(Record r) {
  switch (r) {
    case Record::kMxfp8DsMla: return RecordLayout{512, 512, 32, ValueCode::kE4M3, ScaleCode::kUe8m0, 16, 512, 1};
    case Record::kNvfp4DsMla: return RecordLayout{512, 512, 16, ValueCode::kE2M1, ScaleCode::kE4M3, 32, 512, 1};
    case Record::kMxfp4Indexer: return RecordLayout{128, 128, 32, ValueCode::kE2M1, ScaleCode::kUe8m0, 4, 512, 1};
    case Record::kFp8DsMla: break;
  }
  return RecordLayout{kHeadDim,           kNopeDim,
                      kTileSize,          ValueCode::kE4M3,
                      ScaleCode::kUe8m0,  kScaleBytesPerToken,
                      kVllmBlockRounding, kBlockStrideAlignment};
}

/// The record whose token width is `bytes` (584, 528, 288 or 68); false when none is.
constexpr bool record_from_token_bytes(int64_t bytes, Record& r) {
  for (int i = 0; i < kNumRecords; ++i)
    if (record_layout(static_cast<Record>(i)).token_bytes() == bytes) {
      r = static_cast<Record>(i);
      return true;
    }
  return false;
}

/// Whether `r` is one of the records (an enum value from a caller or a file may not be).
DSV4KV_HD constexpr bool record_known(Record r) { return static_cast<int>(r) < kNumRecords; }

/// The name of a record ("?" for a value outside the enum).
constexpr const char* record_name(Record r) { return record_known(r) ? kRecordNames[static_cast<int>(r)] : "?"; }

/// The record named `name` (one of kRecordNames); false when there is none.
constexpr bool record_from_name(std::string_view name, Record& r) {
  for (int i = 0; i < kNumRecords; ++i)
    if (name == kRecordNames[i]) {
      r = static_cast<Record>(i);
      return true;
    }
  return false;
}

/// Whether a main cache of record `main` may be paired with an extra (compressed) cache of
/// record `extra` for one attention call: the same record twice, or the MXFP8 record with the
/// FP4 record (FlashMLA's is_valid_kv_format_pair). The FP4 record is never a main cache, and
/// the indexer key is no attention cache at all.
DSV4KV_HD constexpr bool valid_record_pair(Record main, Record extra) {
  if (main == Record::kNvfp4DsMla || main == Record::kMxfp4Indexer || extra == Record::kMxfp4Indexer) return false;
  return main == extra || (main == Record::kMxfp8DsMla && extra == Record::kNvfp4DsMla);
}

// ---------------------------------------------------------------------------
// The spec's byte counts (spec/records.md, "The four records"), tied to the algebra.
// ---------------------------------------------------------------------------
namespace detail {
inline constexpr RecordLayout kFp8 = record_layout(Record::kFp8DsMla);
inline constexpr RecordLayout kMx8 = record_layout(Record::kMxfp8DsMla);
inline constexpr RecordLayout kNv4 = record_layout(Record::kNvfp4DsMla);
inline constexpr RecordLayout kIdx = record_layout(Record::kMxfp4Indexer);
}  // namespace detail

// The 584-byte record is layout.hpp's, offset for offset.
static_assert(detail::kFp8.token_bytes() == kTokenBytes && detail::kFp8.data_bytes() == kTokenDataBytes);
static_assert(detail::kFp8.num_scales() == kNumTiles && detail::kFp8.pad_bytes() == 1);
static_assert(detail::kFp8.bf16_offset(5) == rope_offset(5) &&
              detail::kFp8.scale_offset(64, 63, 7) == scale_offset(64, 63, 7));
static_assert(detail::kFp8.vllm_block_stride(64) == vllm_block_stride(64));
// 528 = 512 e4m3 + 16 UE8M0; 288 = 256 (512 e2m1) + 32 e4m3; 68 = 64 (128 e2m1) + 4 UE8M0.
static_assert(detail::kMx8.data_bytes() == 512 && detail::kMx8.num_scales() == 16 && detail::kMx8.token_bytes() == 528);
static_assert(detail::kNv4.data_bytes() == 256 && detail::kNv4.num_scales() == 32 && detail::kNv4.token_bytes() == 288);
static_assert(detail::kIdx.data_bytes() == 64 && detail::kIdx.num_scales() == 4 && detail::kIdx.token_bytes() == 68);
static_assert(detail::kMx8.pad_bytes() == 0 && detail::kNv4.pad_bytes() == 0 && detail::kIdx.pad_bytes() == 0);
// Every scale covers whole groups of the quantized part, and two e2m1 values fill one byte.
static_assert(detail::kMx8.quant_dim % detail::kMx8.group == 0 && detail::kNv4.quant_dim % 2 == 0);
// vLLM's V4.1 pages (block size a multiple of 32): exactly B * record, a multiple of 512.
static_assert(detail::kMx8.vllm_block_stride(64) == 33792 && detail::kMx8.vllm_block_stride(32) == 16896);
static_assert(detail::kNv4.vllm_block_stride(64) == 18432 && detail::kIdx.vllm_block_stride(64) == 4608);
// The worked examples of spec/records.md: the last scale byte of a 64-token block.
static_assert(detail::kMx8.scale_offset(64, 63, 15) == 33791 && detail::kNv4.scale_offset(64, 63, 31) == 18431);
static_assert(detail::kIdx.scale_offset(64, 63, 3) == 4351);

}  // namespace dsv4kv::spec
