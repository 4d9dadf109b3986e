// The reference must not depend on the thread's floating-point mode (spec "Numerics": results do
// not depend on flush-to-zero). A process that called torch.set_flush_denormal(True), or any
// library built with -ffast-math, runs with MXCSR FTZ and DAZ set; the reference is the oracle and
// the CPU fallback, so every byte it produces must be the same there.
//
// Each test switches FTZ and DAZ on for its duration (and checks that they really flush), then
// replays golden data through the reference: the whole 65,536-entry dequantize table (every scale
// byte x every code, including the fp32-subnormal products that FTZ would flush) and the quantize
// files with crafted subnormal and tiny inputs, plus a random quantize/dequantize round trip
// compared with the same run under the default mode.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend.hpp"
#include "dsv4kv/reference.hpp"
#include "dsv4kv/spec.hpp"
#include "golden.hpp"
#include "safetensors.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define DSV4KV_HAVE_MXCSR 1
#endif

namespace dsv4kv::conformance {
namespace {

namespace sp = dsv4kv::spec;

#if defined(DSV4KV_HAVE_MXCSR)
/// Sets MXCSR FTZ (bit 15) and DAZ (bit 6) for its lifetime, restoring the old mode afterwards.
class FlushDenormals {
 public:
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_;
};
#define DSV4KV_REQUIRE_MXCSR() (void)0
#else
struct FlushDenormals {};
#define DSV4KV_REQUIRE_MXCSR() GTEST_SKIP() << "FTZ/DAZ are switched through x86 MXCSR; this is not an x86 build"
#endif

/// True when the current mode flushes: a subnormal product comes out as zero.
bool flushing() {
  volatile float tiny = sp::f32_from_bits(0x00800000u);  // smallest normal
  volatile float half = 0.5f;
  const float product = tiny * half;  // subnormal 2^-127 unless flushed
  return sp::f32_bits(product) == 0;
}

std::string golden(const char* name) { return golden_dir() + "/" + name; }

void expect_golden_passes(const std::string& path) {
  auto backend = make_reference_backend();
  const auto results = run_golden_file(path, *backend);
  ASSERT_FALSE(results.empty()) << path;
  for (const auto& r : results) EXPECT_TRUE(r.passed) << path << " " << r.case_name << ": " << r.message;
}

TEST(FlushToZero, ModeReallyFlushes) {
  DSV4KV_REQUIRE_MXCSR();
  EXPECT_FALSE(flushing()) << "the test process already runs with FTZ";
  FlushDenormals ftz;
  EXPECT_TRUE(flushing()) << "setting MXCSR FTZ/DAZ had no effect: the other tests would prove nothing";
}

// Every (scale byte, code) pair through the spec function, against the golden table.
TEST(FlushToZero, DequantizeElementMatchesGoldenTable) {
  DSV4KV_REQUIRE_MXCSR();
  const SafetensorsFile f = SafetensorsFile::load(golden("dequantize_table.safetensors"));
  const std::vector<uint16_t> table = f.bf16("case000.table");
  ASSERT_EQ(table.size(), 65536u);
  FlushDenormals ftz;
  ASSERT_TRUE(flushing());
  int64_t subnormal_outputs = 0, wrong = 0;
  for (int s = 0; s < 256; ++s) {
    for (int c = 0; c < 256; ++c) {
      const uint16_t want = table[static_cast<size_t>(s * 256 + c)];
      const uint16_t got =
          sp::dequantize_element(static_cast<uint8_t>(c), static_cast<uint8_t>(s), sp::Fp8Format::kE4M3Fn);
      if ((want & 0x7F80u) == 0 && (want & 0x7Fu) != 0) ++subnormal_outputs;
      if (got != want && wrong++ < 5)
        ADD_FAILURE() << "scale byte " << s << ", code " << c << ": " << got << " != " << want;
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(subnormal_outputs, 0) << "the table must contain bf16 subnormal outputs for this test to bite";
}

// The same table through the reference operation (dequantize_and_gather_k_cache), and the quantize
// golden files (zeros, -0, subnormals, values below the 1e-4 floor, ties, non-finite values).
TEST(FlushToZero, ReferenceReproducesGoldenFiles) {
  DSV4KV_REQUIRE_MXCSR();
  FlushDenormals ftz;
  ASSERT_TRUE(flushing());
  for (const char* name : {"dequantize_table.safetensors", "dequantize.safetensors", "quantize.safetensors",
                           "quantize_special.safetensors", "quantize_nonfinite.safetensors"})
    expect_golden_passes(golden(name));
}

// FNUZ has no golden data: the whole table of the spec function and a quantize/dequantize run of
// subnormal-rich keys must give the same bytes with FTZ/DAZ on as with the default mode.
TEST(FlushToZero, SameBytesWithAndWithoutFlushing) {
  DSV4KV_REQUIRE_MXCSR();
  constexpr int64_t kTokens = 64, kBlockSize = 64;
  // Keys: every tile mixes magnitudes far apart, so some quotients x / 2^e are fp32 subnormals,
  // and some tiles hold only bf16 subnormals.
  std::vector<uint16_t> keys(static_cast<size_t>(kTokens * sp::kHeadDim));
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < keys.size(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t r = static_cast<uint32_t>(state >> 33);
    const int tile = static_cast<int>((i / sp::kTileSize) % 5);
    uint16_t v = 0;
    switch (tile) {
      case 0: v = static_cast<uint16_t>(r & 0x807Fu); break;  // bf16 subnormals
      case 1:
        v = static_cast<uint16_t>((r & 0x8000u) | (((r >> 8) % 254 + 1) << 7) | (r & 0x7Fu));
        break;                                                                                       // any normal
      case 2: v = static_cast<uint16_t>((r & 0x8000u) | ((r >> 8) % 12 << 7) | (r & 0x7Fu)); break;  // tiny normals
      default: v = static_cast<uint16_t>(r & 0xFFFFu); break;                                        // anything
    }
    if (tile == 2 && i % sp::kTileSize == 0) v = 0x7000;  // one large value per tile: tiny quotients
    keys[i] = v;
  }
  std::vector<int64_t> slots(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) slots[static_cast<size_t>(t)] = t;
  const int64_t stride = sp::vllm_block_stride(kBlockSize);

  auto run = [&](sp::Fp8Format fmt, std::vector<uint8_t>& cache, std::vector<uint16_t>& out, int32_t& errors) {
    cache.assign(static_cast<size_t>(stride), 0);
    out.assign(static_cast<size_t>(kTokens * sp::kHeadDim), 0);
    errors = 0;
    QuantizeInsertArgs q;
    q.k = TensorView::mat(keys.data(), DType::kBF16, kTokens, sp::kHeadDim);
    q.k_cache = TensorView::mat(cache.data(), DType::kU8, 1, stride);
    q.slot_mapping = TensorView::vec(slots.data(), DType::kI64, kTokens);
    q.block_size = kBlockSize;
    q.format = fmt;
    q.error_count = &errors;
    reference::quantize_and_insert_k_cache(q);
    int32_t seq_len = static_cast<int32_t>(kTokens), block = 0;
    DequantizeGatherArgs d;
    d.out = TensorView::cube(out.data(), DType::kBF16, 1, kTokens, sp::kHeadDim);
    d.k_cache = q.k_cache;
    d.seq_lens = TensorView::vec(&seq_len, DType::kI32, 1);
    d.block_table = TensorView::mat(&block, DType::kI32, 1, 1);
    d.block_size = kBlockSize;
    d.format = fmt;
    d.error_count = &errors;
    reference::dequantize_and_gather_k_cache(d);
  };

  for (sp::Fp8Format fmt : {sp::Fp8Format::kE4M3Fn, sp::Fp8Format::kE4M3Fnuz}) {
    std::vector<uint8_t> cache_a, cache_b;
    std::vector<uint16_t> out_a, out_b;
    int32_t err_a = 0, err_b = 0;
    run(fmt, cache_a, out_a, err_a);
    std::vector<uint16_t> table_a(65536), table_b(65536);
    for (int p = 0; p < 65536; ++p)
      table_a[static_cast<size_t>(p)] =
          sp::dequantize_element(static_cast<uint8_t>(p & 255), static_cast<uint8_t>(p >> 8), fmt);
    {
      FlushDenormals ftz;
      ASSERT_TRUE(flushing());
      run(fmt, cache_b, out_b, err_b);
      for (int p = 0; p < 65536; ++p)
        table_b[static_cast<size_t>(p)] =
            sp::dequantize_element(static_cast<uint8_t>(p & 255), static_cast<uint8_t>(p >> 8), fmt);
    }
    const char* name = fmt == sp::Fp8Format::kE4M3Fn ? "e4m3fn" : "e4m3fnuz";
    EXPECT_EQ(cache_a, cache_b) << name << ": quantized cache differs under FTZ/DAZ";
    EXPECT_EQ(out_a, out_b) << name << ": dequantized rows differ under FTZ/DAZ";
    EXPECT_EQ(err_a, err_b) << name;
    EXPECT_EQ(table_a, table_b) << name << ": dequantize table differs under FTZ/DAZ";
    // The keys must actually reach subnormal outputs, or the comparison proves little.
    int64_t subnormal = 0;
    for (uint16_t v : out_a) subnormal += ((v & 0x7F80u) == 0 && (v & 0x7Fu) != 0) ? 1 : 0;
    for (uint16_t v : table_a) subnormal += ((v & 0x7F80u) == 0 && (v & 0x7Fu) != 0) ? 1 : 0;
    EXPECT_GT(subnormal, 0) << name;
  }
}

// tile_scale() computes ceil(log2(max(amax, 1e-4) / fp8_max)) without dividing; it must agree
// with the correctly rounded division (the measured rule) for every finite bf16 amax.
TEST(TileScale, IntegerExponentEqualsDivisionForEveryBf16Amax) {
  for (sp::Fp8Format fmt : {sp::Fp8Format::kE4M3Fn, sp::Fp8Format::kE4M3Fnuz}) {
    const float qmax = sp::fp8_traits(fmt).quant_max;
    for (uint32_t h = 0; h < 0x7F80u; ++h) {
      const float amax = sp::bf16_to_f32(static_cast<uint16_t>(h));
      const float floor_v = sp::f32_from_bits(sp::kAmaxFloorBits);
      const float m = amax < floor_v ? floor_v : amax;
      const uint32_t qb = sp::f32_bits(m / qmax);  // default mode: round to nearest even
      const int want = static_cast<int>(qb >> 23) - 127 + ((qb & 0x7FFFFFu) != 0 ? 1 : 0);
      const sp::TileScale ts = sp::tile_scale(amax, fmt);
      ASSERT_FALSE(ts.infinite);
      ASSERT_EQ(ts.exponent, want) << "amax bits 0x" << std::hex << h;
    }
    // Every fp32 value near each power-of-two boundary fp8_max * 2^k, k in the finite range.
    for (int k = -22; k <= 120; ++k) {
      const uint32_t boundary = sp::f32_bits(qmax) + (static_cast<uint32_t>(k) << 23);
      for (int d = -3; d <= 3; ++d) {
        const uint32_t mb = boundary + static_cast<uint32_t>(d);
        if (mb >= 0x7F800000u) continue;  // fp8_max * 2^120 is beyond fp32: no finite boundary
        const float m = sp::f32_from_bits(mb);
        if (m < sp::f32_from_bits(sp::kAmaxFloorBits)) continue;
        const uint32_t qb = sp::f32_bits(m / qmax);
        const int want = static_cast<int>(qb >> 23) - 127 + ((qb & 0x7FFFFFu) != 0 ? 1 : 0);
        ASSERT_EQ(sp::tile_scale(m, fmt).exponent, want) << "m bits 0x" << std::hex << mb;
      }
    }
  }
}

// f32_mul_pow2_bits() is the correctly rounded product of the default mode, subnormals included.
TEST(FlushToZero, MulPow2MatchesIeeeMultiplication) {
  uint64_t state = 12345;
  for (int i = 0; i < 2000000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t x = static_cast<uint32_t>(state >> 32);
    if ((x & 0x7F800000u) == 0x7F800000u) x &= 0xBFFFFFFFu;  // finite inputs only
    const int k = static_cast<int>((state >> 8) % 300) - 150;
    const float p = sp::f32_from_bits(x) * sp::exp2i(k < -149 ? -149 : (k > 127 ? 127 : k));
    if (k < -149 || k > 127) continue;
    ASSERT_EQ(sp::f32_mul_pow2_bits(x, k), sp::f32_bits(p)) << std::hex << x << " * 2^" << std::dec << k;
  }
}

}  // namespace
}  // namespace dsv4kv::conformance
