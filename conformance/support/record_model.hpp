/// \file record_model.hpp
/// \brief An independent model of the V4.1 records (spec/records.md) for the properties: decoding
/// with double arithmetic and the e2m1 grid as a table, and the records a generator draws.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <rapidcheck.h>

#include "dsv4kv/spec.hpp"

namespace dsv4kv::conformance {

/// The three V4.1 records.
inline constexpr spec::Record kV41Records[] = {spec::Record::kMxfp8DsMla, spec::Record::kNvfp4DsMla,
                                               spec::Record::kMxfp4Indexer};

/// One of the V4.1 records.
inline rc::Gen<spec::Record> gen_v41_record() {
  return rc::gen::elementOf(std::vector<spec::Record>(std::begin(kV41Records), std::end(kV41Records)));
}

/// Any record, the 584-byte one half of the time.
inline rc::Gen<spec::Record> gen_any_record() {
  return rc::gen::weightedOneOf<spec::Record>({{3, rc::gen::just(spec::Record::kFp8DsMla)}, {1, gen_v41_record()}});
}

/// A block stride for `bs` tokens of `record`: vLLM's (0), the minimum, and a few above it (even
/// for the 584-byte record, which stores bf16 values).
inline rc::Gen<int64_t> gen_record_stride(spec::Record record, int64_t bs) {
  const spec::RecordLayout L = spec::record_layout(record);
  const int64_t need = L.block_data_bytes(bs);
  if (L.stride_alignment > 1) return rc::gen::elementOf(std::vector<int64_t>{0, need, need + 2, need + 34, need + 576});
  return rc::gen::elementOf(std::vector<int64_t>{0, need, need + 1, need + 37, need + 512});
}

/// The value of an e2m1 nibble as read back: nibble 8 (-0) is +0 (spec "Deviations").
inline double model_e2m1(uint8_t nibble) {
  static constexpr double kGrid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  if ((nibble & 7) == 0) return 0.0;
  return (nibble & 8) ? -kGrid[nibble & 7] : kGrid[nibble & 7];
}

/// bf16 bits of value `i` of the token at `pos` of `block` (a V4.1 record), decoded with double
/// arithmetic: the code's value times the scale, NaN as 0x7FFF (spec "Numerics of the V4.1 records").
inline uint16_t model_decode(spec::Record r, const uint8_t* block, int64_t B, int64_t pos, int i) {
  namespace S = spec;
  const S::RecordLayout L = S::record_layout(r);
  const uint8_t s = block[L.scale_offset(B, pos, i / L.group)];
  double v = 0;
  if (L.values == S::ValueCode::kE4M3) {
    const uint8_t code = block[L.data_offset(pos) + i];
    if (S::fp8_is_nan(code, S::Fp8Format::kE4M3Fn)) return 0x7FFF;
    v = S::fp8_decode(code, S::Fp8Format::kE4M3Fn);
  } else {
    const uint8_t byte = block[L.data_offset(pos) + i / 2];
    v = model_e2m1(static_cast<uint8_t>(i % 2 == 0 ? (byte & 0xF) : (byte >> 4)));
  }
  double scale = 0;
  if (L.scales == S::ScaleCode::kE4M3) {
    if ((s & 0x7F) == 0x7F) return 0x7FFF;
    scale = S::fp8_decode(s, S::Fp8Format::kE4M3Fn);
  } else if (s == 255) {
    if (r == S::Record::kMxfp4Indexer || v == 0) return 0x7FFF;  // E8M0 NaN; 0 * inf
    return std::signbit(v) ? 0xFF80 : 0x7F80;                    // MXFP8: the 584-byte record's +inf scale
  } else {
    // MXFP8 byte 0 is +0 (the 584-byte record's rule); the indexer key's is 2^-127.
    scale = (s == 0 && r == S::Record::kMxfp8DsMla) ? 0.0 : std::ldexp(1.0, s - 127);
  }
  const double p = v * scale;  // exact in double
  if (p == 0) return std::signbit(p) ? 0x8000 : 0x0000;
  return S::f32_to_bf16_rne(static_cast<float>(p));
}

/// Whether the token at `pos` of `block` has a scale byte that is a NaN of its record's encoding.
inline bool model_nan_scale(spec::Record r, const uint8_t* block, int64_t B, int64_t pos) {
  const spec::RecordLayout L = spec::record_layout(r);
  for (int g = 0; g < L.num_scales(); ++g) {
    const uint8_t s = block[L.scale_offset(B, pos, g)];
    if (r == spec::Record::kNvfp4DsMla && (s & 0x7F) == 0x7F) return true;
    if (r == spec::Record::kMxfp4Indexer && s == 255) return true;
  }
  return false;
}

}  // namespace dsv4kv::conformance
