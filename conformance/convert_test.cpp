// Converting a cache between records (spec/records.md, "Converting a cache"; harness/convert.hpp):
// the conversion equals the sparse gather of every slot followed by quantize into the same slot,
// whatever the chunk size; no byte of the destination outside its token records changes; the
// CUDA backend gives the same bytes; and broken requests get an error naming the rule.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "convert.hpp"
#include "tester_common.hpp"

namespace dsv4kv::conformance {
namespace {

namespace S = spec;
using spec::Record;

const Record kAttention[] = {Record::kFp8DsMla, Record::kMxfp8DsMla, Record::kNvfp4DsMla};

/// Slots 0, 1, ..., n - 1: every slot of a cache, in order.
std::vector<int64_t> every_slot(int64_t n) {
  std::vector<int64_t> slots(static_cast<size_t>(n));
  std::iota(slots.begin(), slots.end(), int64_t{0});
  return slots;
}

/// A source cache of `from` holding quantized random rows of every magnitude (what a writer of
/// the record stores), at the record's vLLM stride; its tails keep random bytes.
std::vector<uint8_t> make_source(Record from, int64_t num_blocks, int64_t block_size, uint64_t seed) {
  const S::RecordLayout L = S::record_layout(from);
  const int64_t stride = L.vllm_block_stride(block_size);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> cache(static_cast<size_t>(num_blocks * stride));
  for (auto& b : cache) b = static_cast<uint8_t>(rng());
  const int64_t n = num_blocks * block_size;
  std::vector<uint16_t> k(static_cast<size_t>(n * L.head_dim));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t t = 0; t < n; ++t) {
    const float mag = std::ldexp(1.f, static_cast<int>(rng() % 40) - 20);
    for (int j = 0; j < L.head_dim; ++j)
      k[static_cast<size_t>(t * L.head_dim + j)] = S::f32_to_bf16_rne(normal(rng) * mag);
  }
  std::vector<int64_t> slots = every_slot(n);
  QuantizeInsertArgs q;
  q.k = TensorView::mat(k.data(), DType::kBF16, n, L.head_dim);
  q.k_cache = TensorView::mat(cache.data(), DType::kU8, num_blocks, stride);
  q.slot_mapping = TensorView::vec(slots.data(), DType::kI64, n);
  q.block_size = block_size;
  q.record = from;
  reference_backend().run(q);
  return cache;
}

/// Every slot of a cache of `r`, decoded to bf16 by the sparse gather; `reports` (if given) counts its reports.
std::vector<uint16_t> decode_all(const std::vector<uint8_t>& cache, Record r, int64_t num_blocks, int64_t block_size,
                                 int32_t* reports = nullptr) {
  const S::RecordLayout L = S::record_layout(r);
  const int64_t n = num_blocks * block_size;
  std::vector<uint16_t> rows(static_cast<size_t>(n * L.head_dim));
  std::vector<int64_t> slots = every_slot(n);
  SparseGatherArgs g;
  g.out = TensorView::mat(rows.data(), DType::kBF16, n, L.head_dim);
  g.k_cache =
      TensorView::mat(const_cast<uint8_t*>(cache.data()), DType::kU8, num_blocks, L.vllm_block_stride(block_size));
  g.slot_indices = TensorView::vec(slots.data(), DType::kI64, n);
  g.block_size = block_size;
  g.record = r;
  g.error_count = reports;
  reference_backend().run(g);
  return rows;
}

/// The conversion written out: every slot decoded, then quantized into the same slot.
std::vector<uint8_t> convert_by_hand(const std::vector<uint8_t>& src, Record from, Record to, int64_t num_blocks,
                                     int64_t block_size, std::vector<uint8_t> dst, int32_t* reports) {
  const int64_t n = num_blocks * block_size;
  std::vector<uint16_t> rows = decode_all(src, from, num_blocks, block_size, reports);
  std::vector<int64_t> slots = every_slot(n);
  const int64_t out_stride = S::record_layout(to).vllm_block_stride(block_size);
  QuantizeInsertArgs q;
  q.k = TensorView::mat(rows.data(), DType::kBF16, n, S::record_layout(from).head_dim);
  q.k_cache = TensorView::mat(dst.data(), DType::kU8, static_cast<int64_t>(dst.size()) / out_stride, out_stride);
  q.slot_mapping = TensorView::vec(slots.data(), DType::kI64, n);
  q.block_size = block_size;
  q.record = to;
  q.error_count = reports;
  reference_backend().run(q);
  return dst;
}

struct Converted {
  std::vector<uint8_t> dst;
  ConvertReport report;
};

Converted run_convert(Backend& be, const std::vector<uint8_t>& src, Record from, Record to, int64_t num_blocks,
                      int64_t dst_blocks, int64_t block_size, int64_t chunk_tokens, uint8_t poison) {
  const int64_t in_stride = S::record_layout(from).vllm_block_stride(block_size);
  const int64_t out_stride = S::record_layout(to).vllm_block_stride(block_size);
  Converted c{std::vector<uint8_t>(static_cast<size_t>(dst_blocks * out_stride), poison), {}};
  ConvertOptions o;
  o.from = from;
  o.to = to;
  o.block_size = block_size;
  o.chunk_tokens = chunk_tokens;
  c.report = convert_k_cache(be, TensorView::mat(const_cast<uint8_t*>(src.data()), DType::kU8, num_blocks, in_stride),
                             TensorView::mat(c.dst.data(), DType::kU8, dst_blocks, out_stride), o);
  return c;
}

RC_GTEST_PROP(Convert, EqualsGatherThenQuantizeWhateverTheChunk, ()) {
  const Record from = *rc::gen::elementOf(std::vector<Record>(std::begin(kAttention), std::end(kAttention)));
  const Record to = *rc::gen::elementOf(std::vector<Record>(std::begin(kAttention), std::end(kAttention)));
  const int64_t block_size = *rc::gen::inRange<int64_t>(1, 20);
  const int64_t num_blocks = *rc::gen::inRange<int64_t>(0, 5);
  const int64_t extra_blocks = *rc::gen::inRange<int64_t>(0, 2);
  const int64_t chunk_tokens = *rc::gen::inRange<int64_t>(1, 3 * block_size + 2);
  const auto seed = *rc::gen::arbitrary<uint64_t>();
  const auto poison = *rc::gen::arbitrary<uint8_t>();
  const std::vector<uint8_t> src = make_source(from, num_blocks, block_size, seed);

  const Converted got = run_convert(reference_backend(), src, from, to, num_blocks, num_blocks + extra_blocks,
                                    block_size, chunk_tokens, poison);
  int32_t reports = 0;
  const std::vector<uint8_t> want =
      convert_by_hand(src, from, to, num_blocks, block_size, std::vector<uint8_t>(got.dst.size(), poison), &reports);
  RC_ASSERT(got.dst == want);
  RC_ASSERT(got.report.tokens == num_blocks * block_size);
  RC_ASSERT(got.report.reports == reports);

  // Only token records are written: the tails of converted blocks and the blocks past the source's keep the poison.
  const S::RecordLayout T = S::record_layout(to);
  const int64_t out_stride = T.vllm_block_stride(block_size);
  for (int64_t b = 0; b < num_blocks + extra_blocks; ++b) {
    const int64_t first_untouched = b < num_blocks ? T.block_data_bytes(block_size) : 0;
    for (int64_t i = first_untouched; i < out_stride; ++i)
      RC_ASSERT(got.dst[static_cast<size_t>(b * out_stride + i)] == poison);
  }
}

TEST(Convert, IntoTheSameFp8RecordKeepsTheValuesAndIsIdempotent) {
  // A power-of-two scale re-derived from decoded values is the source's scale or half of it (a
  // group maximum that rounded to 224 * S or below), and both represent the decoded values
  // exactly: the values survive, the bytes may not, and a second pass changes nothing.
  for (Record r : {Record::kFp8DsMla, Record::kMxfp8DsMla}) {
    const int64_t B = 16, nb = 3;
    const std::vector<uint8_t> src = make_source(r, nb, B, 7);
    const Converted once = run_convert(reference_backend(), src, r, r, nb, nb, B, 20, 0);
    EXPECT_TRUE(decode_all(once.dst, r, nb, B) == decode_all(src, r, nb, B)) << S::record_name(r);
    const Converted twice = run_convert(reference_backend(), once.dst, r, r, nb, nb, B, 20, 0);
    EXPECT_TRUE(twice.dst == once.dst) << S::record_name(r);
    EXPECT_EQ(once.report.reports, 0);
  }
}

TEST(Convert, CudaMatchesReference) {
  std::string why;
  Backend* cuda = cuda_backend(&why);
  if (cuda == nullptr) GTEST_SKIP() << "CUDA backend unusable: " << why;
  for (Record from : kAttention)
    for (Record to : kAttention) {
      const std::vector<uint8_t> src = make_source(from, 5, 64, 11);
      const Converted a = run_convert(reference_backend(), src, from, to, 5, 6, 64, 100, 0xA5);
      const Converted b = run_convert(*cuda, src, from, to, 5, 6, 64, 100, 0xA5);
      EXPECT_TRUE(a.dst == b.dst) << S::record_name(from) << " -> " << S::record_name(to);
      EXPECT_EQ(a.report.reports, b.report.reports);
    }
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing \"" << fragment << "\"";
  } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what(); }
}

TEST(Convert, BrokenRequestsNameTheRule) {
  std::vector<uint8_t> src(2 * S::record_layout(Record::kFp8DsMla).vllm_block_stride(64)),
      dst(2 * S::record_layout(Record::kMxfp8DsMla).vllm_block_stride(64));
  const auto view = [](std::vector<uint8_t>& v, int64_t blocks) {
    return TensorView::mat(v.data(), DType::kU8, blocks, static_cast<int64_t>(v.size()) / blocks);
  };
  ConvertOptions o;
  o.to = Record::kMxfp4Indexer;
  expect_error([&] { convert_k_cache(reference_backend(), view(src, 2), view(dst, 2), o); },
               "convert_k_cache: records fp8_ds_mla (512 values) and mxfp4_indexer (128 values)");
  o.to = Record::kMxfp8DsMla;
  expect_error([&] { convert_k_cache(reference_backend(), view(src, 2), view(dst, 1), o); },
               "dst has 1 blocks, fewer than src's 2");
  o.block_size = 0;
  expect_error([&] { convert_k_cache(reference_backend(), view(src, 2), view(dst, 2), o); }, "block_size must be >= 1");
  o.block_size = 64;
  o.chunk_tokens = 0;
  expect_error([&] { convert_k_cache(reference_backend(), view(src, 2), view(dst, 2), o); },
               "chunk_tokens must be >= 1");
  o.chunk_tokens = 64;
  TensorView wrong = view(src, 2);
  wrong.dtype = DType::kI32;
  expect_error([&] { convert_k_cache(reference_backend(), wrong, view(dst, 2), o); }, "src must be a uint8 tensor");
  // A destination stride too small for the record: the quantize contract's own error, nothing written.
  std::vector<uint8_t> small(2 * 1000, 0x5A);
  expect_error([&] { convert_k_cache(reference_backend(), view(src, 2), view(small, 2), o); },
               "quantize_and_insert_k_cache:");
  for (uint8_t b : small) ASSERT_EQ(b, 0x5A);
}

}  // namespace
}  // namespace dsv4kv::conformance
