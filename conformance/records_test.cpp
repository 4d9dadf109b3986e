// The records (spec/records.md): the page's generated tables against records.hpp and
// record_numerics.hpp, the V4.1 numerics against independent models (hardware fp32 arithmetic,
// double arithmetic, the e2m1 grid), and FlashMLA's valid pairs. The operations on every record
// are tested in their modules (support/ops/<op>_properties.hpp: the Records* properties, the
// differential cases, the record rows of the bad-input tables).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "dsv4kv/spec.hpp"
#include "record_model.hpp"

namespace dsv4kv::conformance {
namespace {

namespace S = spec;
using spec::Fp8Format;
using spec::Record;

float f32(uint32_t b) { return S::f32_from_bits(b); }

// ---------------------------------------------------------------------------
// The page's table against the header
// ---------------------------------------------------------------------------

std::string source_dir() {
  if (const char* env = std::getenv("DSV4KV_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
#ifdef DSV4KV_SOURCE_DIR
  return DSV4KV_SOURCE_DIR;
#else
  return ".";
#endif
}

// The table spec/records.md prints between its markers, regenerated from records.hpp.
std::vector<std::string> record_table() {
  std::vector<std::string> rows = {
      "| record | head_dim | quantized | group | values | scales | data bytes | scale bytes | token bytes | "
      "block stride, B = 64 |",
      "|---|--:|--:|--:|---|---|--:|--:|--:|--:|",
  };
  for (int i = 0; i < S::kNumRecords; ++i) {
    const auto r = static_cast<Record>(i);
    const S::RecordLayout L = S::record_layout(r);
    std::ostringstream s;
    s << "| `" << S::record_name(r) << "` | " << L.head_dim << " | " << L.quant_dim << " | " << L.group << " | "
      << (L.values == S::ValueCode::kE4M3 ? "e4m3" : "e2m1 pairs") << " | "
      << (L.scales == S::ScaleCode::kUe8m0 ? "UE8M0" : "e4m3") << " | " << L.data_bytes() << " | " << L.scale_bytes
      << " | " << L.token_bytes() << " | " << L.vllm_block_stride(64) << " |";
    rows.push_back(s.str());
  }
  return rows;
}

// The worked example's table: group 0 of the row (1, -0.30078125, 5, 0, ...) in each V4.1 record.
std::vector<std::string> example_table() {
  std::vector<std::string> rows = {
      "| record | scale byte | value bytes 0..3 | values 0..2 read back |",
      "|---|--:|---|---|",
  };
  for (Record r : kV41Records) {
    uint16_t x[32] = {};
    x[0] = 0x3F80;  // 1
    x[1] = 0xBE9A;  // -0.30078125
    x[2] = 0x40A0;  // 5
    uint8_t v[32] = {};
    int nonfinite = 0;
    const uint8_t s = S::quantize_group(r, x, v, nonfinite);
    char buf[160];
    std::snprintf(buf, sizeof buf, "| `%s` | 0x%02X | %02X %02X %02X %02X | %g, %g, %g |", S::record_name(r), s, v[0],
                  v[1], v[2], v[3], S::bf16_to_f32(S::dequantize_group_value(r, v, s, 0)),
                  S::bf16_to_f32(S::dequantize_group_value(r, v, s, 1)),
                  S::bf16_to_f32(S::dequantize_group_value(r, v, s, 2)));
    rows.push_back(buf);
  }
  return rows;
}

// The non-blank lines of spec/records.md between `<!-- <marker> begin -->` and `<!-- <marker> end -->`.
std::vector<std::string> marked(const std::string& marker) {
  const std::string path = source_dir() + "/spec/records.md";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::vector<std::string> got;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.find("<!-- " + marker + " begin -->") != std::string::npos) {
      inside = true;
      continue;
    }
    if (line.find("<!-- " + marker + " end -->") != std::string::npos) break;
    if (inside && !line.empty()) got.push_back(line);
  }
  return got;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST(RecordsDoc, TablesAreTheHeaders) {
  EXPECT_EQ(marked("record table"), record_table())
      << "spec/records.md's record table differs from records.hpp; expected:\n"
      << joined(record_table());
  EXPECT_EQ(marked("record example"), example_table())
      << "spec/records.md's worked example differs from record_numerics.hpp; expected:\n"
      << joined(example_table());
}

// ---------------------------------------------------------------------------
// Numerics against independent models
// ---------------------------------------------------------------------------

// f32_mul_bits / f32_div_bits are the IEEE operations (the test host computes in fp32 with
// round-to-nearest and without flushing): random operands of every class.
TEST(RecordNumerics, IntegerProductsAndQuotientsAreIeee) {
  std::mt19937_64 g(7);
  auto draw = [&]() -> uint32_t {
    switch (g() % 4) {
      case 0: return static_cast<uint32_t>(g()) & 0x807FFFFFu;                  // subnormal
      case 1: return (static_cast<uint32_t>(g()) & 0x80FFFFFFu) | 0x3F000000u;  // near 1
      default: {
        uint32_t b = static_cast<uint32_t>(g());
        if ((b & 0x7F800000u) == 0x7F800000u) b ^= 0x00800000u;  // finite
        return b;
      }
    }
  };
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t a = draw(), b = draw();
    const uint32_t mul = S::f32_bits(f32(a) * f32(b));
    ASSERT_EQ(S::f32_mul_bits(a, b), mul) << std::hex << a << " * " << b;
    if ((b & 0x7FFFFFFFu) == 0) continue;
    const uint32_t div = S::f32_bits(f32(a) / f32(b));
    ASSERT_EQ(S::f32_div_bits(a, b), div) << std::hex << a << " / " << b;
  }
}

// f32_normal_ceil_log2 is the least e with v <= 2^e: every normal exponent field, with mantissas at
// both ends and random ones between, against log2 in double.
TEST(RecordNumerics, CeilLog2IsTheLeastPowerAbove) {
  std::mt19937_64 g(5);
  for (uint32_t field = 1; field < 255; ++field) {
    for (int i = 0; i < 64; ++i) {
      const uint32_t mantissa =
          i == 0 ? 1u : (i == 1 ? 0x7FFFFFu : (i == 2 ? 0u : static_cast<uint32_t>(g()) & 0x7FFFFFu));
      const uint32_t v = field << 23 | mantissa;
      const int expected = static_cast<int>(std::ceil(std::log2(static_cast<double>(f32(v)))));
      ASSERT_EQ(S::f32_normal_ceil_log2(v), expected) << std::hex << v;
    }
  }
}

// The e2m1 nibble is the nearest grid value, ties to the even code, saturating, sign kept: for
// every bf16 pattern and random fp32 values, against a search over the grid in double.
TEST(RecordNumerics, E2m1IsNearestEvenOnTheGrid) {
  const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  auto model = [&](uint32_t b) -> uint8_t {
    const uint8_t sign = (b >> 31) ? 0x8 : 0;
    const float v = f32(b);
    if (std::isnan(v)) return 0x7;
    const double m = std::fabs(static_cast<double>(v));
    if (m > 5) return static_cast<uint8_t>(7 | sign);  // nearer 6 than 4; saturating above
    int best = 0;
    for (int c = 1; c < 8; ++c) {
      const double d = std::fabs(m - grid[c]), db = std::fabs(m - grid[best]);
      if (d < db || (d == db && c % 2 == 0)) best = c;
    }
    return static_cast<uint8_t>(best | sign);
  };
  for (uint32_t h = 0; h <= 0xFFFF; ++h) ASSERT_EQ(S::e2m1_encode_bits(h << 16), model(h << 16)) << std::hex << h;
  std::mt19937_64 g(11);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t b = (static_cast<uint32_t>(g()) & 0x81FFFFFFu) | 0x3E000000u;  // 2^-3 .. 2^4
    ASSERT_EQ(S::e2m1_encode_bits(b), model(b)) << std::hex << b;
  }
  // Every nibble reads back as itself, but -0 (nibble 8), which reads as +0 (nibble 0).
  for (int c = 0; c < 16; ++c) EXPECT_EQ(S::e2m1_encode_bits(S::f32_bits(S::e2m1_decode(c))), c == 8 ? 0 : c) << c;
  EXPECT_EQ(S::f32_bits(S::e2m1_decode(8)), 0u);
}

// vLLM multiplies by fl32(1/448) and fl32(1/6); FlashMLA and SGLang divide. For every bf16 absolute
// maximum (the operation's keys are bf16) both give the same scale byte (spec/records.md, "`mxfp8_ds_mla`").
TEST(RecordNumerics, ReciprocalScalesEqualDivisionForEveryBf16Amax) {
  for (uint32_t h = 0; h < 0x7F80; ++h) {
    const uint32_t a = h << 16;
    const float af = f32(a);
    const float m8 = std::max(af, f32(S::kAmaxFloorBits));
    ASSERT_EQ(S::mxfp8_group_scale(a).exponent,
              static_cast<int>(std::ceil(std::log2(static_cast<double>(m8 / 448.0f)))))
        << std::hex << h;
    const float q = std::min(std::max(af / 6.0f, 0x1p-9f), 448.0f);
    ASSERT_EQ(S::nvfp4_scale_byte(a), S::fp8_encode_satfinite(q, Fp8Format::kE4M3Fn)) << std::hex << h;
    const float m4 = std::max(af, 6.0f * 0x1p-126f);
    const int e4 = static_cast<int>(std::ceil(std::log2(static_cast<double>(m4 / 6.0f))));
    ASSERT_EQ(S::mxfp4_group_exponent(a), e4) << std::hex << h;  // upstream's clamp to [-127, 127] never binds
  }
  // The floors: an all-zero group's bytes.
  EXPECT_EQ(S::mxfp8_group_scale(0).byte, 105);
  EXPECT_EQ(S::nvfp4_scale_byte(0), 0x01);
  EXPECT_EQ(S::mxfp4_group_exponent(0) + S::kScaleBias, 1);
  // Non-finite groups: NaN-only groups take the floor, inf the top.
  EXPECT_TRUE(S::mxfp8_group_scale(0x7F800000u).infinite);
  EXPECT_EQ(S::nvfp4_scale_byte(0x7FC00000u), 0x01);
  EXPECT_EQ(S::nvfp4_scale_byte(0x7F800000u), 0x7E);
  EXPECT_EQ(S::mxfp4_group_exponent(0x7F800000u), 127);
}

TEST(RecordPairs, ValidPairsAreFlashMlas) {
  for (int m = 0; m < S::kNumRecords; ++m)
    for (int e = 0; e < S::kNumRecords; ++e) {
      const auto main = static_cast<Record>(m), extra = static_cast<Record>(e);
      const bool want = (main == extra && main != Record::kNvfp4DsMla && main != Record::kMxfp4Indexer) ||
                        (main == Record::kMxfp8DsMla && extra == Record::kNvfp4DsMla);
      EXPECT_EQ(S::valid_record_pair(main, extra), want) << m << " " << e;
    }
}

}  // namespace
}  // namespace dsv4kv::conformance
