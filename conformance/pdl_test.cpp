// Programmatic dependent launch (PDL, dsv4kv::cuda::set_programmatic_launch): the setting's
// scoping rules (no GPU needed), and on a GPU
//   - every operation gives the reference's bytes with PDL on, as with it off: the large cases of
//     every operation (OpSuite::large_cases) run both ways and are compared with each other, and
//     the random differential property of every operation runs with PDL on (PdlDifferential.*);
//   - a chain of dependent operations (quantize -> gather / sparse gather reading that cache ->
//     quantize overwriting slots they read -> sparse gather; global_topk fed its own output, twice)
//     launched with PDL on one stream, and captured in a CUDA graph and replayed, gives the bytes
//     of the same chain on the reference: a kernel that read its input before the previous kernel
//     finished writing it (or wrote a buffer the previous kernel still read) would show here;
//   - captured PDL launches become programmatic edges of the graph (where the device supports
//     PDL), plain launches do not; a PDL launch right after a memset node captures and runs.
// Without a usable GPU the device tests are SKIPPED with the reason.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "property_suite.hpp"
#include "testers.hpp"

#ifdef DSV4KV_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "dsv4kv/cuda.hpp"
#include "dsv4kv/cuda/check.hpp"

namespace dsv4kv::conformance {
namespace {

namespace sp = dsv4kv::spec;
using cuda::ScopedProgrammaticLaunch;

// ---------------------------------------------------------------------------
// The setting (host only)
// ---------------------------------------------------------------------------

TEST(Pdl, ProcessSettingAndThreadScopes) {
  cuda::set_programmatic_launch(false);
  EXPECT_FALSE(cuda::programmatic_launch());
  {
    ScopedProgrammaticLaunch on(true);
    EXPECT_TRUE(cuda::programmatic_launch());
    {
      ScopedProgrammaticLaunch off(false);
      EXPECT_FALSE(cuda::programmatic_launch());
    }
    EXPECT_TRUE(cuda::programmatic_launch());  // the inner scope restored the outer one
    bool other_thread = true;
    std::thread([&] { other_thread = cuda::programmatic_launch(); }).join();
    EXPECT_FALSE(other_thread);  // a scope is the calling thread's only
  }
  EXPECT_FALSE(cuda::programmatic_launch());
  cuda::set_programmatic_launch(true);
  EXPECT_TRUE(cuda::programmatic_launch());
  bool other_thread = false;
  std::thread([&] { other_thread = cuda::programmatic_launch(); }).join();
  EXPECT_TRUE(other_thread);  // the process setting is every thread's
  {
    ScopedProgrammaticLaunch off(false);
    EXPECT_FALSE(cuda::programmatic_launch());  // a scope wins over the process setting
  }
  cuda::set_programmatic_launch(false);
  EXPECT_FALSE(cuda::programmatic_launch());
}

// ---------------------------------------------------------------------------
// Every operation, PDL on and off
// ---------------------------------------------------------------------------

/// The CUDA backend with PDL on for every call (ScopedProgrammaticLaunch around the staging,
/// launch and copy back, all on the calling thread).
class PdlBackend final : public Backend {
 public:
  explicit PdlBackend(Backend& inner) : inner_(inner) {}
  const char* name() const override { return "cuda+pdl"; }
#define DSV4KV_PDL_BACKEND_OP(op, Args, stem) \
  void op(const Args& args) override {        \
    ScopedProgrammaticLaunch pdl(true);       \
    inner_.op(args);                          \
  }
  DSV4KV_OPS(DSV4KV_PDL_BACKEND_OP)
#undef DSV4KV_PDL_BACKEND_OP

 private:
  Backend& inner_;
};

Backend* pdl_backend(std::string* why) {
  Backend* cuda = cuda_backend(why);
  if (cuda == nullptr) return nullptr;
  static PdlBackend be(*cuda);
  return &be;
}

const bool kRegistered = register_differential(
    "PdlDifferential", [](std::string*) { return &reference_backend(); }, pdl_backend, 1.0);

/// Pdl.Large<Op>OnAndOff for every operation of the table: its large cases on CUDA with PDL off
/// and on give identical buffers and counts, and the reference's.
const bool kRegisteredLarge = [] {
  for_each_op([](auto t) {
    using Args = typename decltype(t)::type;
    detail::register_test("Pdl", std::string("Large") + OpSuite<Args>::kPrefix + "OnAndOff", [] {
      DSV4KV_CUDA_OR_SKIP(cuda);
      PdlBackend pdl(*cuda);
      for (const auto& tester : OpSuite<Args>::large_cases()) {
        auto off = tester, on = tester;
        off.Run(*cuda);
        on.Run(pdl);
        EXPECT_EQ(compare_buffers(off.buffers(), on.buffers()), "") << tester;
        EXPECT_EQ(off.error_count(), on.error_count()) << tester;
        EXPECT_EQ(differential_mismatch(reference_backend(), pdl, tester), "") << tester;
      }
    });
  });
  return true;
}();

// ---------------------------------------------------------------------------
// A chain of dependent operations
// ---------------------------------------------------------------------------

/// A host buffer and (with `device`) its device copy.
class Buf {
 public:
  Buf() = default;
  Buf(std::vector<uint8_t> bytes, bool device) : host(std::move(bytes)) {
    if (!device) return;
    DSV4KV_CUDA_CHECK(cudaMalloc(&dev_, host.size()));
    DSV4KV_CUDA_CHECK(cudaMemcpy(dev_, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  template <class T>
  static Buf of(const std::vector<T>& v, bool device) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return Buf(std::move(b), device);
  }
  Buf(Buf&& o) noexcept : host(std::move(o.host)), dev_(std::exchange(o.dev_, nullptr)) {}
  Buf& operator=(Buf&& o) noexcept {
    std::swap(host, o.host);
    std::swap(dev_, o.dev_);
    return *this;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { cudaFree(dev_); }
  void* ptr(bool device) { return device ? dev_ : static_cast<void*>(host.data()); }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> b(host.size());
    DSV4KV_CUDA_CHECK(cudaMemcpy(b.data(), dev_, b.size(), cudaMemcpyDeviceToHost));
    return b;
  }
  std::vector<uint8_t> host;

 private:
  void* dev_ = nullptr;
};

/// Runs one operation on CUDA (device pointers, `stream`), whichever it is.
template <class Args>
void cuda_run(const Args& a, cudaStream_t stream) {
#define DSV4KV_PDL_CUDA_RUN(op, A, stem) \
  if constexpr (std::is_same_v<Args, A>) cuda::op(a, stream);
  DSV4KV_OPS(DSV4KV_PDL_CUDA_RUN)
#undef DSV4KV_PDL_CUDA_RUN
}

/// The chain's tensors. Every operation reads what the one before it wrote, or writes what the
/// one before it read.
struct Chain {
  static constexpr int64_t kBs = 64, kBlocks = 40, kSlots = kBs * kBlocks;
  static constexpr int64_t kN1 = 2000, kN2 = 300, kSparse = 3000, kT = 256, kTopk = 512;
  static constexpr uint8_t kCacheFill = 0xA5;
  const int64_t stride = sp::vllm_block_stride(kBs);

  Buf k1, k2, slots1, slots2, cache, seq_lens, table, gather_out, sparse_ids, sparse_out1, sparse_out2, topk0, t2r,
      valid, g1, g2, lens1, lens2, errors;

  /// The chain's inputs drawn from `seed`; with `device`, also in device memory.
  explicit Chain(uint64_t seed, bool device = true) {
    Rng r(seed);
    auto keys = [&](int64_t n) {
      std::vector<uint16_t> k(static_cast<size_t>(n * sp::kHeadDim));
      for (auto& v : k) {
        const float f = static_cast<float>(r.uniform(-8.0, 8.0));
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        v = static_cast<uint16_t>(bits >> 16);  // finite bf16
      }
      return Buf::of(k, device);
    };
    k1 = keys(kN1);
    k2 = keys(kN2);
    std::vector<int64_t> perm(kSlots);
    for (int64_t i = 0; i < kSlots; ++i) perm[i] = i;
    for (int64_t i = kSlots - 1; i > 0; --i) std::swap(perm[i], perm[r.below(i + 1)]);
    std::vector<int64_t> s1(perm.begin(), perm.begin() + kN1), s2(perm.begin(), perm.begin() + kN2);
    for (int64_t i = 0; i < kN1; i += 97) s1[i] = -1;  // padding tokens: skipped, not counted
    slots1 = Buf::of(s1, device);
    slots2 = Buf::of(s2, device);
    cache = Buf(std::vector<uint8_t>(static_cast<size_t>(kBlocks * stride), kCacheFill), device);
    seq_lens = Buf::of(std::vector<int32_t>{static_cast<int32_t>(kSlots)}, device);
    std::vector<int32_t> tab(kBlocks);
    // A permutation of the blocks that is not its own inverse: global_topk fed its own output
    // gives new indices each time (see ChainIsMeaningfulOnTheReference).
    for (int64_t b = 0; b < kBlocks; ++b) tab[b] = static_cast<int32_t>((b * 7 + 3) % kBlocks);
    table = Buf::of(tab, device);
    gather_out = Buf(std::vector<uint8_t>(static_cast<size_t>(kSlots * sp::kHeadDim * 2), 0), device);
    std::vector<int32_t> ids(kSparse);
    for (auto& v : ids) v = r.chance(0.05) ? -1 : static_cast<int32_t>(perm[r.below(kN1 + 200)]);
    sparse_ids = Buf::of(ids, device);
    sparse_out1 = Buf(std::vector<uint8_t>(static_cast<size_t>(kSparse * sp::kHeadDim * 2), 0), device);
    sparse_out2 = Buf(std::vector<uint8_t>(static_cast<size_t>(kSparse * sp::kHeadDim * 2), 0), device);
    std::vector<int32_t> tk(static_cast<size_t>(kT * kTopk));
    for (auto& v : tk) v = static_cast<int32_t>(r.range(-1, kSlots + 16));  // some out of range
    topk0 = Buf::of(tk, device);
    t2r = Buf::of(std::vector<int32_t>(kT, 0), device);
    valid = Buf::of(std::vector<uint8_t>(kT, 1), device);
    g1 = Buf(std::vector<uint8_t>(static_cast<size_t>(kT * kTopk * 4), 0), device);
    g2 = Buf(std::vector<uint8_t>(static_cast<size_t>(kT * kTopk * 4), 0), device);
    lens1 = Buf(std::vector<uint8_t>(static_cast<size_t>(kT * 4), 0), device);
    lens2 = Buf(std::vector<uint8_t>(static_cast<size_t>(kT * 4), 0), device);
    errors = Buf(std::vector<uint8_t>(4, 0), device);
  }

  /// The chain's calls in order, each passed to `run` (host pointers or device pointers).
  template <class Run>
  void calls(bool dev, Run&& run) {
    auto* err = static_cast<int32_t*>(errors.ptr(dev));
    const TensorView cache_v = TensorView::mat(cache.ptr(dev), DType::kU8, kBlocks, stride);
    auto quantize = [&](Buf& k, Buf& slots, int64_t n) {
      QuantizeInsertArgs a;
      a.k = TensorView::mat(k.ptr(dev), DType::kBF16, n, sp::kHeadDim);
      a.k_cache = cache_v;
      a.slot_mapping = TensorView::vec(slots.ptr(dev), DType::kI64, n);
      a.block_size = kBs;
      a.error_count = err;
      run(a);
    };
    auto sparse = [&](Buf& out) {
      SparseGatherArgs a;
      a.out = TensorView::mat(out.ptr(dev), DType::kBF16, kSparse, sp::kHeadDim);
      a.k_cache = cache_v;
      a.slot_indices = TensorView::vec(sparse_ids.ptr(dev), DType::kI32, kSparse);
      a.block_size = kBs;
      a.error_count = err;
      run(a);
    };
    auto topk = [&](Buf& in, Buf& out, Buf& lens) {
      GlobalTopkArgs a;
      a.topk_indices = TensorView::mat(in.ptr(dev), DType::kI32, kT, kTopk);
      a.token_to_req = TensorView::vec(t2r.ptr(dev), DType::kI32, kT);
      a.block_table = TensorView::mat(table.ptr(dev), DType::kI32, 1, kBlocks);
      a.block_size = kBs;
      a.is_valid_token = TensorView::vec(valid.ptr(dev), DType::kBool, kT);
      a.global_topk_indices = TensorView::mat(out.ptr(dev), DType::kI32, kT, kTopk);
      a.topk_lens = TensorView::vec(lens.ptr(dev), DType::kI32, kT);
      a.error_count = err;
      run(a);
    };
    quantize(k1, slots1, kN1);  // writes the cache
    {
      DequantizeGatherArgs a;  // reads the whole cache, written slots and the fill
      a.out = TensorView::cube(gather_out.ptr(dev), DType::kBF16, 1, kSlots, sp::kHeadDim);
      a.k_cache = cache_v;
      a.seq_lens = TensorView::vec(seq_lens.ptr(dev), DType::kI32, 1);
      a.block_table = TensorView::mat(table.ptr(dev), DType::kI32, 1, kBlocks);
      a.block_size = kBs;
      a.error_count = err;
      run(a);
    }
    sparse(sparse_out1);        // reads the cache
    quantize(k2, slots2, kN2);  // overwrites slots the two gathers read
    sparse(sparse_out2);        // reads the overwritten cache
    topk(topk0, g1, lens1);
    topk(g1, g2, lens2);  // reads what the previous one wrote
    topk(g2, g1, lens1);  // overwrites what the previous one read
  }

  /// Resets the device outputs (the cache to its fill, the counter to 0) on `stream`.
  void reset(cudaStream_t stream) {
    DSV4KV_CUDA_CHECK(cudaMemsetAsync(cache.ptr(true), kCacheFill, cache.host.size(), stream));
    DSV4KV_CUDA_CHECK(cudaMemsetAsync(errors.ptr(true), 0, 4, stream));
  }

  /// The outputs, by name.
  std::vector<std::pair<const char*, Buf*>> outputs() {
    return {{"cache", &cache},
            {"gather_out", &gather_out},
            {"sparse_out1", &sparse_out1},
            {"sparse_out2", &sparse_out2},
            {"g1", &g1},
            {"g2", &g2},
            {"lens1", &lens1},
            {"lens2", &lens2},
            {"error_count", &errors}};
  }
};

/// The chain on the reference (the host buffers of a Chain of the same seed), once per seed.
Chain& reference_chain(uint64_t seed) {
  static std::map<uint64_t, std::unique_ptr<Chain>> done;
  std::unique_ptr<Chain>& c = done[seed];
  if (!c) {
    c = std::make_unique<Chain>(seed, /*device=*/false);
    c->calls(false, [](const auto& a) { reference_backend().run(a); });
  }
  return *c;
}

/// Empty when every device output of `got` equals the reference chain's, else the first difference.
std::string chain_mismatch(Chain& got, uint64_t seed) {
  Chain& want = reference_chain(seed);
  auto w = want.outputs(), g = got.outputs();
  for (size_t i = 0; i < w.size(); ++i)
    if (std::string m = first_mismatch(w[i].second->host, g[i].second->download(), w[i].first); !m.empty()) return m;
  return {};
}

// The chain's dependencies are observable (host only): the second quantize changes bytes the
// first sparse gather read, each global_topk's output differs from its input, and the third
// overwrites the first's output with different indices. A kernel of the chain that ran early
// (before its input was written, or after its output was read) would change the bytes compared.
TEST(Pdl, ChainIsMeaningfulOnTheReference) {
  Chain& c = reference_chain(1);
  Chain fresh(1, /*device=*/false);
  EXPECT_NE(c.cache.host, fresh.cache.host);
  EXPECT_NE(c.sparse_out1.host, c.sparse_out2.host);
  EXPECT_NE(c.gather_out.host, fresh.gather_out.host);
  EXPECT_NE(c.g2.host, c.g1.host);
  EXPECT_NE(c.g2.host, fresh.topk0.host);
  Chain two_topk(1, /*device=*/false);  // the first global_topk alone: the third changed g1
  {
    GlobalTopkArgs a;
    a.topk_indices = TensorView::mat(two_topk.topk0.host.data(), DType::kI32, Chain::kT, Chain::kTopk);
    a.token_to_req = TensorView::vec(two_topk.t2r.host.data(), DType::kI32, Chain::kT);
    a.block_table = TensorView::mat(two_topk.table.host.data(), DType::kI32, 1, Chain::kBlocks);
    a.block_size = Chain::kBs;
    a.is_valid_token = TensorView::vec(two_topk.valid.host.data(), DType::kBool, Chain::kT);
    a.global_topk_indices = TensorView::mat(two_topk.g1.host.data(), DType::kI32, Chain::kT, Chain::kTopk);
    a.topk_lens = TensorView::vec(two_topk.lens1.host.data(), DType::kI32, Chain::kT);
    reference_backend().run(a);
  }
  EXPECT_NE(c.g1.host, two_topk.g1.host);
  int32_t errors = 0;
  std::memcpy(&errors, c.errors.host.data(), 4);
  EXPECT_GT(errors, 0);  // out-of-range top-k indices and sparse slots are counted
}

class PdlChain : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda_backend(&why) == nullptr) GTEST_SKIP() << "no CUDA device: " << why;
    DSV4KV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int dev = 0, major = 0, minor = 0;
    DSV4KV_CUDA_CHECK(cudaGetDevice(&dev));
    DSV4KV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    DSV4KV_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    supported_ = cuda::programmatic_launch_supported();
    // Read by bench/verify_gpu.sh and bench/verify_ptx_jit.sh.
    std::cout << "[ PDL      ] programmatic_launch_supported: " << (supported_ ? "yes" : "no")
              << " (compute capability " << major << "." << minor << ")\n";
    if (supported_) {
      EXPECT_GE(major, 9);  // PDL needs compute capability 9.0
    }
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  /// The chain's launches on `stream_` (device pointers).
  void launch(Chain& c) {
    c.calls(true, [&](const auto& a) { cuda_run(a, stream_); });
  }
  /// Captures the chain (and, with `with_reset`, its reset memsets first) into a graph.
  cudaGraph_t capture(Chain& c, bool with_reset) {
    cudaGraph_t g = nullptr;
    DSV4KV_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    if (with_reset) c.reset(stream_);
    launch(c);
    DSV4KV_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    return g;
  }
  cudaStream_t stream_ = nullptr;
  bool supported_ = false;
};

TEST_F(PdlChain, OnStreamMatchesReferenceOnAndOff) {
  for (const bool pdl : {false, true}) {
    ScopedProgrammaticLaunch scope(pdl);
    for (uint64_t seed : {1u, 2u, 3u}) {
      Chain c(seed);
      c.reset(stream_);
      launch(c);
      DSV4KV_CUDA_CHECK(cudaStreamSynchronize(stream_));
      EXPECT_EQ(chain_mismatch(c, seed), "") << "pdl " << pdl << ", seed " << seed;
    }
  }
}

/// Programmatic edges of a graph (cudaGraphDependencyTypeProgrammatic), and all its edges.
std::pair<size_t, size_t> programmatic_edges(cudaGraph_t g) {
#if CUDART_VERSION >= 13000
#define DSV4KV_GRAPH_GET_EDGES cudaGraphGetEdges
#else
#define DSV4KV_GRAPH_GET_EDGES cudaGraphGetEdges_v2
#endif
  size_t n = 0;
  DSV4KV_CUDA_CHECK(DSV4KV_GRAPH_GET_EDGES(g, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  DSV4KV_CUDA_CHECK(DSV4KV_GRAPH_GET_EDGES(g, from.data(), to.data(), data.data(), &n));
#undef DSV4KV_GRAPH_GET_EDGES
  size_t programmatic = 0;
  for (size_t i = 0; i < n; ++i) programmatic += data[i].type == cudaGraphDependencyTypeProgrammatic;
  return {programmatic, n};
}

TEST_F(PdlChain, GraphReplayMatchesReference) {
  for (const bool pdl : {false, true}) {
    ScopedProgrammaticLaunch scope(pdl);
    const uint64_t seed = 4;
    Chain c(seed);
    cudaGraph_t g = capture(c, /*with_reset=*/false);  // kernels only: each edge joins two kernels
    const auto [prog, edges] = programmatic_edges(g);
    EXPECT_EQ(edges, 7u);  // 8 kernels in a line
    // Launched with PDL, each kernel after the first depends programmatically on the one before.
    EXPECT_EQ(prog, pdl && supported_ ? edges : 0u) << "pdl " << pdl;
    cudaGraphExec_t exec = nullptr;
    DSV4KV_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int replay = 0; replay < 3; ++replay) {
      c.reset(stream_);
      DSV4KV_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      DSV4KV_CUDA_CHECK(cudaStreamSynchronize(stream_));
      EXPECT_EQ(chain_mismatch(c, seed), "") << "pdl " << pdl << ", replay " << replay;
    }
    DSV4KV_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DSV4KV_CUDA_CHECK(cudaGraphDestroy(g));
  }
}

// A PDL launch whose predecessor in the capture is a memset node (not a kernel): the capture, the
// instantiation and the replays work, and the results are the reference's.
TEST_F(PdlChain, GraphWithMemsetNodesMatchesReference) {
  ScopedProgrammaticLaunch scope(true);
  const uint64_t seed = 5;
  Chain c(seed);
  cudaGraph_t g = capture(c, /*with_reset=*/true);
  cudaGraphExec_t exec = nullptr;
  DSV4KV_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int replay = 0; replay < 3; ++replay) {
    DSV4KV_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    DSV4KV_CUDA_CHECK(cudaStreamSynchronize(stream_));
    EXPECT_EQ(chain_mismatch(c, seed), "") << "replay " << replay;
  }
  DSV4KV_CUDA_CHECK(cudaGraphExecDestroy(exec));
  DSV4KV_CUDA_CHECK(cudaGraphDestroy(g));
}

}  // namespace
}  // namespace dsv4kv::conformance

#else  // !DSV4KV_HAVE_CUDA

TEST(Pdl, NeedsTheCudaBackend) { GTEST_SKIP() << "dsv4kv was built without CUDA (DSV4KV_WITH_CUDA=OFF)"; }

#endif  // DSV4KV_HAVE_CUDA
