// dequantize_and_gather_k_cache_sparse (spec "dequantize_and_gather_k_cache_sparse").
//
// The operation's defining property: a slot list is a dense gather of single-token requests.
// For slot s the equivalent request has seq_len = s % B + 1, gather_len = 1 and the one-entry
// block-table row [s / B]; padding (-1) is a request of length 0, and an out-of-range slot a
// request the dense gather skips with one report. Every case here runs both and requires the
// same bytes in the whole output buffer (rows of skipped slots, rows >= N and the padding between
// rows keep their canary bytes) and the same error count; the CUDA backend must give the
// reference's bytes. The spec page's worked example and the bad-input contract are checked too.
//
// Self-contained on purpose: its case builder and its CUDA staging are local, so that the per-op
// tester structure can take them over as they are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dsv4kv/reference.hpp"
#include "dsv4kv/spec.hpp"

#ifdef DSV4KV_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "dsv4kv/cuda.hpp"
#endif

namespace dsv4kv {
namespace {

namespace sp = dsv4kv::spec;

constexpr uint16_t kCanary = 0xA5A5;  // every out element before the operation
constexpr int32_t kCounterStart = 7;  // reports are added to it

// ---------------------------------------------------------------------------
// A case: a cache, a slot list and an output buffer, all in host memory
// ---------------------------------------------------------------------------

struct Case {
  int64_t block_size = 64;
  int64_t num_blocks = 0;
  int64_t block_stride = 0;            // bytes
  std::vector<uint8_t> cache;          // num_blocks * block_stride bytes
  DType slot_dtype = DType::kI32;
  int64_t n = 0;                       // slots
  std::vector<int64_t> slot_values;    // the n slots, as drawn
  std::vector<uint8_t> slot_bytes;     // the n slots as slot_dtype, contiguous
  int64_t out_rows = 0;                // >= n
  int64_t out_stride = sp::kHeadDim;   // elements
  int64_t out_offset = 0;              // elements from out_buf[0] to out[0, 0]
  std::vector<uint16_t> out_buf;       // canary-filled
  Fp8Format format = Fp8Format::kE4M3Fn;

  int64_t slot_capacity() const { return num_blocks * block_size; }

  void set_slots(const std::vector<int64_t>& values) {
    slot_values = values;
    n = static_cast<int64_t>(values.size());
    const int esize = dtype_size(slot_dtype);
    slot_bytes.assign(static_cast<size_t>(std::max<int64_t>(n, 1) * esize), 0xEE);
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* p = slot_bytes.data() + i * esize;
      if (slot_dtype == DType::kI32) {
        const int32_t v = static_cast<int32_t>(values[i]);
        std::memcpy(p, &v, sizeof v);
      } else {
        std::memcpy(p, &values[i], sizeof(int64_t));
      }
    }
  }
  void reset_out() {
    out_buf.assign(static_cast<size_t>(out_offset + std::max<int64_t>(out_rows, 1) * out_stride), kCanary);
  }

  /// The operation's arguments over the given copies of the buffers (host or device).
  SparseGatherArgs args(uint8_t* cache_p, uint8_t* slots_p, uint16_t* out_p, int32_t* counter) const {
    SparseGatherArgs a;
    a.out = TensorView::mat(out_p + out_offset, DType::kBF16, out_rows, sp::kHeadDim, out_stride);
    a.k_cache = TensorView::mat(cache_p, DType::kU8, num_blocks, sp::block_data_bytes(block_size), block_stride);
    a.slot_indices = TensorView::vec(slots_p, slot_dtype, n);
    a.block_size = block_size;
    a.format = format;
    a.error_count = counter;
    return a;
  }
};

/// Random cache bytes: every code (NaN codes included) and every scale byte (0 and 255 included).
void fill_cache(Case& c, std::mt19937_64& rng) {
  c.cache.resize(static_cast<size_t>(c.num_blocks * c.block_stride));
  for (uint8_t& b : c.cache) b = static_cast<uint8_t>(rng());
}

/// A case over `num_blocks` random blocks of 64 tokens at vLLM's block stride (no slots yet).
Case random_cache_case(int64_t num_blocks, std::mt19937_64& rng) {
  Case c;
  c.block_size = 64;
  c.num_blocks = num_blocks;
  c.block_stride = sp::vllm_block_stride(64);
  fill_cache(c, rng);
  return c;
}

/// A random slot: mostly valid, some -1, some out of range in every way the dtype can hold.
int64_t draw_slot(const Case& c, std::mt19937_64& rng) {
  const int64_t cap = c.slot_capacity();
  const bool i64 = c.slot_dtype == DType::kI64;
  const uint64_t u = rng() % 100;
  if (u < 70) return static_cast<int64_t>(rng() % static_cast<uint64_t>(cap));
  if (u < 80) return -1;
  switch (rng() % 7) {
    case 0: return cap;  // the first slot past the cache
    case 1: return cap + static_cast<int64_t>(rng() % 1000);
    case 2: return -2;
    case 3: return -1 - static_cast<int64_t>(rng() % 100000);
    case 4: return i64 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int32_t>::min();
    case 5: return i64 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int32_t>::max();
    default: return i64 ? (int64_t{1} << 40) + 3 : (int64_t{1} << 30) + 3;
  }
}

/// A random case. `stride_kind`: 0 = vLLM's block stride (16-byte aligned blocks), 1 = the
/// smallest stride + 2 (blocks only 2-byte aligned).
Case random_case(std::mt19937_64& rng, DType slot_dtype, Fp8Format fmt, int64_t n) {
  Case c;
  const int64_t sizes[] = {64, 128, 16, 5, 1};
  c.block_size = sizes[rng() % 5];
  c.num_blocks = 1 + static_cast<int64_t>(rng() % 8);
  c.block_stride = rng() % 2 == 0 ? sp::vllm_block_stride(c.block_size) : sp::block_data_bytes(c.block_size) + 2;
  fill_cache(c, rng);
  c.slot_dtype = slot_dtype;
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t& v : values) v = draw_slot(c, rng);
  c.set_slots(values);
  c.out_rows = n + static_cast<int64_t>(rng() % 3);
  const int64_t strides[] = {sp::kHeadDim, sp::kHeadDim + 8, sp::kHeadDim + 1, 2 * sp::kHeadDim};
  c.out_stride = strides[rng() % 4];
  c.out_offset = static_cast<int64_t>(rng() % 2);  // 1: rows only 2-byte aligned
  c.format = fmt;
  c.reset_out();
  return c;
}

// ---------------------------------------------------------------------------
// Runners: the operation on a case's buffers, host (reference) or device (CUDA)
// ---------------------------------------------------------------------------

/// What a run leaves: the whole output buffer and the counter.
struct Result {
  std::vector<uint16_t> out_buf;
  int32_t counter = 0;
};

using Mutation = std::function<void(SparseGatherArgs&)>;

Result run_reference(Case c, const Mutation& mutate = {}) {
  Result r;
  r.counter = kCounterStart;
  SparseGatherArgs a = c.args(c.cache.data(), c.slot_bytes.data(), c.out_buf.data(), &r.counter);
  if (mutate) mutate(a);
  reference::dequantize_and_gather_k_cache_sparse(a);
  r.out_buf = std::move(c.out_buf);
  return r;
}

/// The dense gather of the single-token requests equivalent to the case's slots.
Result run_dense_equivalent(Case c) {
  const int64_t n = c.n;
  const int64_t bs = c.block_size;
  std::vector<int32_t> seq_lens(static_cast<size_t>(n)), gather_lens(static_cast<size_t>(n)),
      table(static_cast<size_t>(std::max<int64_t>(n, 1)), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = c.slot_values[i];
    if (s == -1) {  // a request of length 0: nothing gathered, nothing reported
      seq_lens[i] = 0;
      gather_lens[i] = 0;
    } else if (s < 0 || s / bs > std::numeric_limits<int32_t>::max()) {  // malformed: one report
      seq_lens[i] = -1;
      gather_lens[i] = 0;
    } else {  // position s % bs of block s / bs (a block past the cache is one report)
      seq_lens[i] = static_cast<int32_t>(s % bs + 1);
      gather_lens[i] = 1;
      table[i] = static_cast<int32_t>(s / bs);
    }
  }
  Result r;
  r.counter = kCounterStart;
  DequantizeGatherArgs a;
  a.out = TensorView::cube(c.out_buf.data() + c.out_offset, DType::kBF16, n, 1, sp::kHeadDim, c.out_stride,
                           sp::kHeadDim);
  a.k_cache = TensorView::mat(c.cache.data(), DType::kU8, c.num_blocks, sp::block_data_bytes(bs), c.block_stride);
  a.seq_lens = TensorView::vec(seq_lens.data(), DType::kI32, n);
  a.gather_lens = TensorView::vec(gather_lens.data(), DType::kI32, n);
  a.block_table = TensorView::mat(table.data(), DType::kI32, n, 1);
  a.block_size = bs;
  a.offset = 0;
  a.format = c.format;
  a.error_count = &r.counter;
  reference::dequantize_and_gather_k_cache(a);
  r.out_buf = std::move(c.out_buf);
  return r;
}

#ifdef DSV4KV_HAVE_CUDA
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
}

/// A device copy of a host buffer; freed on destruction.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer(const void* host, size_t n) : bytes(n) {
    cuda_check(cudaMalloc(&p, n == 0 ? 1 : n), "cudaMalloc");
    if (n != 0) cuda_check(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void to_host(void* host) const {
    if (bytes != 0) cuda_check(cudaMemcpy(host, p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
};

/// Runs the CUDA backend on device copies of the case's buffers (cudaMalloc keeps 256-byte
/// alignment, so every alignment the host case has is kept) and copies out and counter back.
Result run_cuda(Case c, const Mutation& mutate = {}) {
  Result r;
  r.counter = kCounterStart;
  DeviceBuffer cache(c.cache.data(), c.cache.size());
  DeviceBuffer slots(c.slot_bytes.data(), c.slot_bytes.size());
  DeviceBuffer out(c.out_buf.data(), c.out_buf.size() * sizeof(uint16_t));
  DeviceBuffer counter(&r.counter, sizeof(int32_t));
  SparseGatherArgs a = c.args(static_cast<uint8_t*>(cache.p), static_cast<uint8_t*>(slots.p),
                              static_cast<uint16_t*>(out.p), static_cast<int32_t*>(counter.p));
  if (mutate) mutate(a);
  cuda::dequantize_and_gather_k_cache_sparse(a, nullptr);
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  out.to_host(c.out_buf.data());
  counter.to_host(&r.counter);
  r.out_buf = std::move(c.out_buf);
  return r;
}
#endif

/// Empty when usable; otherwise why the CUDA runner cannot run here.
std::string cuda_unavailable() {
#ifdef DSV4KV_HAVE_CUDA
  std::string why;
  return cuda::device_available(&why) ? std::string() : "no usable CUDA device: " + why;
#else
  return "built without CUDA (DSV4KV_WITH_CUDA=OFF)";
#endif
}

#define CUDA_OR_SKIP()                                      \
  do {                                                      \
    const std::string why_ = cuda_unavailable();            \
    if (!why_.empty()) GTEST_SKIP() << why_;                \
  } while (0)

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// Empty when equal; else the first differing element, located as (row, column).
std::string first_difference(const Case& c, const std::vector<uint16_t>& want, const std::vector<uint16_t>& got) {
  if (want.size() != got.size()) return "buffer sizes differ";
  for (size_t k = 0; k < want.size(); ++k) {
    if (want[k] == got[k]) continue;
    const int64_t e = static_cast<int64_t>(k) - c.out_offset;
    char buf[200];
    std::snprintf(buf, sizeof buf, "element %zu (row %lld, column %lld) expected 0x%04x, got 0x%04x", k,
                  static_cast<long long>(e / c.out_stride), static_cast<long long>(e % c.out_stride), want[k], got[k]);
    return buf;
  }
  return {};
}

/// Independent of both gathers' shared token function: the written rows hold spec::dequantize_element
/// of the slot's bytes, the RoPE bits copied, and every other element of the buffer is the canary.
void expect_spec_rows(const Case& c, const Result& r) {
  std::vector<bool> written(static_cast<size_t>(c.out_rows), false);
  for (int64_t i = 0; i < c.n; ++i) {
    const int64_t s = c.slot_values[i];
    if (s < 0 || s >= c.slot_capacity()) continue;
    written[i] = true;
    const uint8_t* block = c.cache.data() + sp::slot_block(s, c.block_size) * c.block_stride;
    const int64_t p = sp::slot_pos(s, c.block_size);
    const uint16_t* row = r.out_buf.data() + c.out_offset + i * c.out_stride;
    for (int v = 0; v < sp::kNopeDim; ++v) {
      const uint16_t want = sp::dequantize_element(block[sp::fp8_code_offset(p, v)],
                                                   block[sp::scale_offset(c.block_size, p, v / sp::kTileSize)], c.format);
      ASSERT_EQ(row[v], want) << "slot " << s << " (row " << i << "), value " << v;
    }
    uint16_t rope[sp::kRopeDim];
    std::memcpy(rope, block + sp::rope_offset(p), sizeof rope);
    for (int v = 0; v < sp::kRopeDim; ++v) ASSERT_EQ(row[sp::kNopeDim + v], rope[v]) << "row " << i << " RoPE " << v;
  }
  for (size_t k = 0; k < r.out_buf.size(); ++k) {
    const int64_t e = static_cast<int64_t>(k) - c.out_offset;
    const bool in_row = e >= 0 && e / c.out_stride < c.out_rows && e % c.out_stride < sp::kHeadDim;
    if (in_row && written[e / c.out_stride]) continue;
    ASSERT_EQ(r.out_buf[k], kCanary) << "element " << k << " is outside every written row but changed";
  }
}

int64_t expected_reports(const Case& c) {
  int64_t n = 0;
  for (int64_t s : c.slot_values) n += s != -1 && (s < 0 || s >= c.slot_capacity());
  return n;
}

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.block_size) + " blocks=" + std::to_string(c.num_blocks) +
         " stride=" + std::to_string(c.block_stride) + " N=" + std::to_string(c.n) +
         (c.slot_dtype == DType::kI32 ? " int32" : " int64") + " out_stride=" + std::to_string(c.out_stride) + " out_offset=" + std::to_string(c.out_offset) +
         (c.format == Fp8Format::kE4M3Fn ? " e4m3fn" : " e4m3fnuz");
}

// ---------------------------------------------------------------------------
// The property: sparse == dense of single-token requests, on both backends
// ---------------------------------------------------------------------------

/// Calls `check(case)` on 200 random cases of up to `max_n` slots, alternating int32 and int64
/// slot ids and, every two cases, the FP8 format; stops at the first fatal failure.
template <class Check>
void for_random_cases(uint64_t seed, int64_t max_n, Check&& check) {
  std::mt19937_64 rng(seed);
  for (int iter = 0; iter < 200 && !::testing::Test::HasFatalFailure(); ++iter) {
    const DType dt = iter % 2 == 0 ? DType::kI32 : DType::kI64;
    const Fp8Format fmt = (iter / 2) % 2 == 0 ? Fp8Format::kE4M3Fn : Fp8Format::kE4M3Fnuz;
    const Case c = random_case(rng, dt, fmt, static_cast<int64_t>(rng() % (max_n + 1)));
    SCOPED_TRACE(describe(c));
    check(c);
  }
}

TEST(SparseGather, EqualsTheDenseGatherOfSingleTokenRequests) {
  for_random_cases(20261201, 64, [](const Case& c) {
    const Result sparse = run_reference(c);
    const Result dense = run_dense_equivalent(c);
    ASSERT_EQ(first_difference(c, dense.out_buf, sparse.out_buf), "");
    ASSERT_EQ(sparse.counter, dense.counter);
    ASSERT_EQ(sparse.counter, kCounterStart + expected_reports(c));
    expect_spec_rows(c, sparse);
  });
}

TEST(SparseGather, CudaMatchesTheReference) {
  CUDA_OR_SKIP();
#ifdef DSV4KV_HAVE_CUDA
  for_random_cases(42, 299, [](const Case& c) {
    const Result want = run_reference(c);
    const Result got = run_cuda(c);
    ASSERT_EQ(first_difference(c, want.out_buf, got.out_buf), "");
    ASSERT_EQ(got.counter, want.counter);
  });
#endif
}

#ifdef DSV4KV_HAVE_CUDA
/// Every (scale byte, code) pair in every lane position of a row: token t has all 7 tile scales
/// equal to t % 256, and its 448 codes run through 0..255 starting at 64 * (t / 256), so each pair
/// lands in the NoPE lanes of both halves of a row.
Case every_code_under_every_scale(Fp8Format fmt, int64_t stride) {
  Case c;
  c.block_size = 64;
  const int64_t tokens = 256 * 4;
  c.num_blocks = tokens / c.block_size;
  c.block_stride = stride;
  c.cache.assign(static_cast<size_t>(c.num_blocks * stride), 0);
  std::vector<int64_t> slots;
  for (int64_t t = 0; t < tokens; ++t) {
    uint8_t* block = c.cache.data() + (t / c.block_size) * stride;
    const int64_t p = t % c.block_size;
    for (int v = 0; v < sp::kNopeDim; ++v) block[sp::fp8_code_offset(p, v)] = static_cast<uint8_t>(v + 64 * (t / 256));
    for (int j = 0; j < sp::kNumTiles; ++j) block[sp::scale_offset(c.block_size, p, j)] = static_cast<uint8_t>(t % 256);
    for (int k = 0; k < sp::kRopeBytes; ++k) block[sp::rope_offset(p) + k] = static_cast<uint8_t>(t * 31 + k);
    slots.push_back(tokens - 1 - t);  // reversed: no two neighbouring rows read neighbouring slots
  }
  c.set_slots(slots);
  c.out_rows = tokens;
  c.format = fmt;
  c.reset_out();
  return c;
}
#endif

TEST(SparseGather, CudaEveryCodeUnderEveryScale) {
  CUDA_OR_SKIP();
#ifdef DSV4KV_HAVE_CUDA
  for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    for (int64_t stride : {sp::vllm_block_stride(64), sp::block_data_bytes(64) + 2}) {
      const Case c = every_code_under_every_scale(fmt, stride);
      SCOPED_TRACE(describe(c));
      const Result want = run_reference(c);
      expect_spec_rows(c, want);
      EXPECT_EQ(first_difference(c, want.out_buf, run_cuda(c).out_buf), "");
    }
  }
#endif
}

TEST(SparseGather, CudaLargeListCoversTheGridStrideLoop) {
  // More rows than the launch's CTA cap times its rows per CTA on any current GPU (an H200 holds
  // 2,112 CTAs of 128 threads: cap 16,896 CTAs x 8 rows = 135,168 rows), so warps loop.
  CUDA_OR_SKIP();
#ifdef DSV4KV_HAVE_CUDA
  std::mt19937_64 rng(5);
  Case c = random_cache_case(512, rng);
  std::vector<int64_t> values(200000);
  for (int64_t& v : values) v = draw_slot(c, rng);
  c.set_slots(values);
  c.out_rows = c.n;
  c.reset_out();
  const Result want = run_reference(c);
  const Result got = run_cuda(c);
  EXPECT_EQ(first_difference(c, want.out_buf, got.out_buf), "");
  EXPECT_EQ(got.counter, want.counter);
  EXPECT_EQ(want.counter, kCounterStart + expected_reports(c));
#endif
}

// ---------------------------------------------------------------------------
// The spec page's example (spec/operations.md, dequantize_and_gather_k_cache_sparse)
// ---------------------------------------------------------------------------

TEST(SparseGather, SpecExample) {
  // B = 64, 4 blocks at vLLM's stride. Slot 130 = block 2, position 2 holds, in tile 0, the codes
  // 7C F0 62 A0 7F under scale byte 0x78 (2^-7); every other code and scale byte is 0; its first
  // RoPE value is 0x3F80 (1.0).
  Case c;
  c.block_size = 64;
  c.num_blocks = 4;
  c.block_stride = sp::vllm_block_stride(64);
  c.cache.assign(static_cast<size_t>(c.num_blocks * c.block_stride), 0);
  uint8_t* block2 = c.cache.data() + 2 * c.block_stride;
  const uint8_t codes[] = {0x7C, 0xF0, 0x62, 0xA0, 0x7F};
  std::memcpy(block2 + sp::fp8_code_offset(2, 0), codes, sizeof codes);
  block2[sp::scale_offset(64, 2, 0)] = 0x78;
  block2[sp::rope_offset(2)] = 0x80;
  block2[sp::rope_offset(2) + 1] = 0x3F;
  ASSERT_EQ(2 * c.block_stride + sp::fp8_code_offset(2, 0), 76032);
  ASSERT_EQ(2 * c.block_stride + sp::scale_offset(64, 2, 0), 111760);
  ASSERT_EQ(2 * c.block_stride + sp::rope_offset(2), 76480);
  c.set_slots({130, -1, 7, 300, -5});
  c.out_rows = 5;
  for (Fp8Format fmt : {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz}) {
    c.format = fmt;
    c.reset_out();
    const Result r = run_reference(c);
    EXPECT_EQ(r.counter, kCounterStart + 2);  // 300 >= 4 * 64 and -5: one report each
    const uint16_t* row0 = r.out_buf.data();
    const std::vector<uint16_t> head(row0, row0 + 6);
    if (fmt == Fp8Format::kE4M3Fn)
      EXPECT_EQ(head, (std::vector<uint16_t>{0x4040, 0xBF80, 0x3EA0, 0xBA80, 0x7FFF, 0x0000}));
    else
      EXPECT_EQ(head, (std::vector<uint16_t>{0x3FC0, 0xBF00, 0x3E20, 0xBA00, 0x3FF0, 0x0000}));
    EXPECT_EQ(row0[64], 0x0000);  // tile 1: code 0 under scale byte 0
    EXPECT_EQ(row0[sp::kNopeDim], 0x3F80);
    // Slot 7 (block 0, position 7) is all zero bytes: +0 everywhere.
    for (int v = 0; v < sp::kHeadDim; ++v) ASSERT_EQ(r.out_buf[2 * sp::kHeadDim + v], 0x0000) << v;
    // Rows 1 (padding), 3 and 4 (out of range) keep their contents.
    for (int row : {1, 3, 4})
      for (int v = 0; v < sp::kHeadDim; ++v) ASSERT_EQ(r.out_buf[row * sp::kHeadDim + v], kCanary) << row;
  }
}

// ---------------------------------------------------------------------------
// Bad input: a contract error naming the operation, the argument and the rule; no byte written
// ---------------------------------------------------------------------------

struct BadInput {
  const char* what;
  Mutation mutate;
  const char* message;  // the whole message after "dequantize_and_gather_k_cache_sparse: "
};

std::vector<BadInput> bad_inputs() {
  return {
      {"slot_indices absent", [](SparseGatherArgs& a) { a.slot_indices = TensorView{}; }, "slot_indices is required"},
      {"slot_indices uint8", [](SparseGatherArgs& a) { a.slot_indices.dtype = DType::kU8; },
       "slot_indices must be int32 or int64, got uint8"},
      {"slot_indices bf16", [](SparseGatherArgs& a) { a.slot_indices.dtype = DType::kBF16; },
       "slot_indices must be int32 or int64, got bfloat16"},
      {"slot_indices rank 2",
       [](SparseGatherArgs& a) { a.slot_indices = TensorView::mat(a.slot_indices.data, DType::kI32, 1, 4); },
       "slot_indices must have rank 1, got 2"},
      {"slot_indices stride 2", [](SparseGatherArgs& a) { a.slot_indices.stride[0] = 2; },
       "slot_indices must have unit stride in its last dimension, got 2"},
      {"slot_indices misaligned",
       [](SparseGatherArgs& a) { a.slot_indices.data = static_cast<uint8_t*>(a.slot_indices.data) + 2; },
       "slot_indices must be aligned to 4 bytes (its element size), got address 0x"},
      {"out absent", [](SparseGatherArgs& a) { a.out = TensorView{}; }, "out is required"},
      {"out uint8", [](SparseGatherArgs& a) { a.out.dtype = DType::kU8; }, "out must be bfloat16, got uint8"},
      {"out 448 columns", [](SparseGatherArgs& a) { a.out.shape[1] = sp::kNopeDim; }, "out must have 512 columns, got 448"},
      {"out too few rows", [](SparseGatherArgs& a) { a.out.shape[0] = 3; }, "out must have at least 4 rows (one per slot), got 3"},
      {"out column stride 2", [](SparseGatherArgs& a) { a.out.stride[1] = 2; },
       "out must have unit stride in its last dimension, got 2"},
      {"block_size 0", [](SparseGatherArgs& a) { a.block_size = 0; }, "block_size must be >= 1, got 0"},
      {"block_size past int32", [](SparseGatherArgs& a) { a.block_size = int64_t{1} << 31; },
       "block_size must fit in int32, got 2147483648"},
      {"cache block too small", [](SparseGatherArgs& a) { a.block_size = 128; },
       "k_cache must hold at least block_size*584 = 74752 bytes per block, got 37376"},
      {"odd block stride", [](SparseGatherArgs& a) { a.k_cache.stride[0] = 37441; },
       "k_cache block stride must be even (bf16 RoPE values are 2-byte aligned), got 37441"},
      {"error_count misaligned",
       [](SparseGatherArgs& a) { a.error_count = reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(a.error_count) + 1); },
       "error_count must be aligned to 4 bytes (int32), got address 0x"},
  };
}

Case small_valid_case() {
  std::mt19937_64 rng(9);
  Case c = random_cache_case(2, rng);
  c.set_slots({3, -1, 70, 500});
  c.out_rows = 4;
  c.reset_out();
  return c;
}

void check_bad_inputs(const std::function<Result(const Case&, const Mutation&)>& run) {
  const Case c = small_valid_case();
  const std::string prefix = std::string(SparseGatherArgs::kName) + ": ";
  for (const BadInput& b : bad_inputs()) {
    SCOPED_TRACE(b.what);
    try {
      run(c, b.mutate);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(prefix + b.message, 0), 0u) << msg;
    }
  }
}

TEST(SparseGather, BadInputsAreContractErrors) {
  // The reference writes through host pointers: a run that threw must leave out and counter as
  // they were (validation precedes every write).
  check_bad_inputs([](const Case& c, const Mutation& m) {
    Case copy = c;
    int32_t counter = kCounterStart;
    SparseGatherArgs a = copy.args(copy.cache.data(), copy.slot_bytes.data(), copy.out_buf.data(), &counter);
    m(a);
    try {
      reference::dequantize_and_gather_k_cache_sparse(a);
    } catch (...) {
      EXPECT_EQ(copy.out_buf, c.out_buf) << "out changed before the error";
      EXPECT_EQ(copy.cache, c.cache) << "k_cache changed";
      EXPECT_EQ(counter, kCounterStart) << "error_count changed";
      throw;
    }
    return Result{};
  });
  // The unmutated case is accepted, with one report (slot 500 >= 2 * 64).
  const Result ok = run_reference(small_valid_case());
  EXPECT_EQ(ok.counter, kCounterStart + 1);
}

TEST(SparseGather, CudaBadInputsAreContractErrors) {
  CUDA_OR_SKIP();
#ifdef DSV4KV_HAVE_CUDA
  check_bad_inputs([](const Case& c, const Mutation& m) { return run_cuda(c, m); });
#endif
}

TEST(SparseGather, EmptySlotListWritesNothing) {
  for (DType dt : {DType::kI32, DType::kI64}) {
    Case c = small_valid_case();
    c.slot_dtype = dt;
    c.set_slots({});
    c.out_rows = 2;  // rows beyond N = 0 stay untouched
    c.reset_out();
    const Result r = run_reference(c);
    EXPECT_EQ(r.counter, kCounterStart);
    EXPECT_EQ(r.out_buf, c.out_buf);
#ifdef DSV4KV_HAVE_CUDA
    if (cuda_unavailable().empty()) {
      EXPECT_EQ(run_cuda(c).out_buf, c.out_buf);
    }
#endif
  }
}

}  // namespace
}  // namespace dsv4kv
