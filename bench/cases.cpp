// The bench's cases; see cases.hpp. Shapes and input distributions mirror
// ../shared/oracle/bench.py, and bench/triton_bench.py builds the same shapes under the same keys.
#include "cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <ostream>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "dsv4kv/cuda.hpp"
#include "dsv4kv/spec/op_table.hpp"
#include "testers.hpp"
#include "timer.cuh"

namespace dsv4kv::bench {

namespace {

namespace sp = dsv4kv::spec;
namespace cf = dsv4kv::conformance;

constexpr int64_t kBlockSize = 64;
constexpr int64_t kNumBlocks = 16384;
/// vLLM's block stride for block size 64 (a multiple of 16 bytes).
constexpr int64_t kAlignedStride = sp::vllm_block_stride(kBlockSize);
/// The smallest even stride >= block_data_bytes that is not a multiple of 16: the unaligned path.
constexpr int64_t kUnalignedStride = sp::block_data_bytes(kBlockSize) + sp::kBlockStrideAlignment;
static_assert(kUnalignedStride % 16 != 0);
/// The records other than the default one that quantize and gather are measured with.
constexpr Record kV41BenchRecords[] = {Record::kMxfp8DsMla, Record::kNvfp4DsMla, Record::kMxfp4Indexer};

/// The conformance suite's reference backend (host memory), which the verification compares with.
cf::Backend& reference_backend() {
  static const std::unique_ptr<cf::Backend> be = cf::make_reference_backend();
  return *be;
}

// The operation table, as two overload sets: the CUDA function and the reference backend's
// function of each Args, so the generic call below names no operation.
#define DSV4KV_BENCH_CALLS(name, Args, stem)                                  \
  void cuda_call(const Args& a, cudaStream_t s) { dsv4kv::cuda::name(a, s); } \
  void ref_call(const Args& a) { reference_backend().name(a); }
DSV4KV_OPS(DSV4KV_BENCH_CALLS)
#undef DSV4KV_BENCH_CALLS

size_t extent(const TensorView& v) {
  const sp::Checked e = v.extent_bytes();
  return e.ok ? static_cast<size_t>(e.value) : 0;
}

/// One tensor member of an argument struct, in Args::fields order.
struct TensorField {
  const char* name;
  Role role;
  TensorView* view;
};

template <class A>
std::vector<TensorField> tensors_of(A& a) {
  std::vector<TensorField> v;
  A::fields(a, [&](const char* name, Role role, auto& m) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(m)>, TensorView>) v.push_back({name, role, &m});
  });
  return v;
}

template <class A>
void set_counter(A& a, int32_t* p) {
  A::fields(a, [&](const char*, Role, auto& m) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(m)>, int32_t*>) m = p;
  });
}

bool outputs(Role r) { return r == Role::kOut || r == Role::kInOut; }

/// An operation call on host arguments (pointers into buffers that `owner` keeps alive).
template <class A>
class OpCall final : public Call {
 public:
  explicit OpCall(const A& host) : host_(host) {}
  const char* op_name() const override { return A::kName; }

  void stage(int copies, cudaStream_t s) override {
    dev_.clear();
    bufs_.clear();
    std::map<std::string, void*> first;
    for (int c = 0; c < copies; ++c) {
      A d = host_;
      set_counter(d, nullptr);
      for (TensorField& f : tensors_of(d)) {
        const size_t bytes = extent(*f.view);
        if (bytes == 0) continue;  // absent or empty: never read (as the conformance CUDA backend)
        const bool one = std::find(shared.begin(), shared.end(), f.name) != shared.end();
        if (c > 0 && one) {
          f.view->data = first.at(f.name);
          continue;
        }
        bufs_.emplace_back(bytes);
        BENCH_CUDA(cudaMemcpyAsync(bufs_.back().get(), f.view->data, bytes, cudaMemcpyHostToDevice, s));
        f.view->data = bufs_.back().get();
        if (c == 0) first[f.name] = f.view->data;
      }
      dev_.push_back(d);
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
  }

  void launch(int copy, cudaStream_t s) const override { cuda_call(dev_.at(static_cast<size_t>(copy)), s); }

  std::string verify(cudaStream_t s) override {
    A d = dev_.at(0), h = host_;
    const std::vector<TensorField> dv = tensors_of(d), hv = tensors_of(h);
    // Copy 0 back to the state the host arguments describe: outputs poisoned with kFillByte
    // (the host outputs hold it too), in-out tensors (quantize's cache) as on the host.
    for (size_t i = 0; i < dv.size(); ++i) {
      const size_t bytes = extent(*hv[i].view);
      if (bytes == 0) continue;
      if (dv[i].role == Role::kOut) BENCH_CUDA(cudaMemsetAsync(dv[i].view->data, cf::kFillByte, bytes, s));
      if (dv[i].role == Role::kInOut)
        BENCH_CUDA(cudaMemcpyAsync(dv[i].view->data, hv[i].view->data, bytes, cudaMemcpyHostToDevice, s));
    }
    DeviceBuffer err(sizeof(int32_t));
    BENCH_CUDA(cudaMemsetAsync(err.get(), 0, sizeof(int32_t), s));
    set_counter(d, err.as<int32_t>());
    cuda_call(d, s);
    std::vector<std::vector<uint8_t>> got(dv.size());
    for (size_t i = 0; i < dv.size(); ++i) {
      const size_t bytes = extent(*hv[i].view);
      if (bytes == 0 || !outputs(dv[i].role)) continue;
      got[i].resize(bytes);
      BENCH_CUDA(cudaMemcpyAsync(got[i].data(), dv[i].view->data, bytes, cudaMemcpyDeviceToHost, s));
    }
    int32_t got_err = 0;
    BENCH_CUDA(cudaMemcpyAsync(&got_err, err.get(), sizeof got_err, cudaMemcpyDeviceToHost, s));
    BENCH_CUDA(cudaStreamSynchronize(s));
    // The reference on the host arguments, in place: the host outputs become the expected bytes.
    int32_t ref_err = 0;
    set_counter(h, &ref_err);
    ref_call(h);
    for (size_t i = 0; i < hv.size(); ++i) {
      const size_t bytes = extent(*hv[i].view);
      if (bytes == 0 || !outputs(hv[i].role)) continue;
      const std::string m = cf::first_mismatch(
          std::span<const uint8_t>(static_cast<const uint8_t*>(hv[i].view->data), bytes), got[i], hv[i].name);
      if (!m.empty()) return m;
    }
    if (ref_err != got_err)
      return "error_count: expected " + std::to_string(ref_err) + ", got " + std::to_string(got_err);
    return "";
  }

  int32_t host_check() override {
    validate(host_);
    A h = host_;
    int32_t count = 0;
    set_counter(h, &count);
    ref_call(h);
    return count;
  }

 private:
  A host_;
  std::vector<A> dev_;
  std::vector<DeviceBuffer> bufs_;
};

/// A conformance backend that runs nothing: it keeps the host arguments a tester passes.
class CaptureBackend final : public cf::Backend {
 public:
  const char* name() const override { return "bench-capture"; }
#define DSV4KV_BENCH_CAPTURE(name, Args, stem) \
  void name(const Args& a) override { call = std::make_unique<OpCall<Args>>(a); }
  DSV4KV_OPS(DSV4KV_BENCH_CAPTURE)
#undef DSV4KV_BENCH_CAPTURE
  std::unique_ptr<Call> call;
};

/// The call a tester makes (it draws its inputs from its seed, poisons its outputs with
/// kFillByte and passes host arguments); the tester stays alive as the call's owner.
template <class Tester>
std::unique_ptr<Call> tester_call(Tester t, std::vector<std::string> shared = {}) {
  auto owner = std::make_shared<Tester>(std::move(t));
  CaptureBackend cap;
  owner->Run(cap);
  if (!cap.call) throw std::logic_error("the tester ran no operation");
  cap.call->owner = owner;
  cap.call->shared = std::move(shared);
  return std::move(cap.call);
}

/// Host buffers of a call whose arguments the bench builds itself (see combine and mixed).
struct HostArena {
  std::deque<std::vector<int32_t>> i32;
  int32_t* add(std::vector<int32_t> v) { return i32.emplace_back(std::move(v)).data(); }
  /// An output of n int32 holding kFillByte bytes (the reference writes the expected bytes here).
  int32_t* output(int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::memset(v.data(), cf::kFillByte, v.size() * sizeof(int32_t));
    return add(std::move(v));
  }
};

/// The two outputs of the index operations, [T, width] and [T] int32, poisoned on the arena.
void index_outputs(HostArena& arena, TensorView& out, TensorView& lens, int64_t T, int64_t width) {
  out = TensorView::mat(arena.output(T * width), DType::kI32, T, width);
  lens = TensorView::vec(arena.output(T), DType::kI32, T);
}

template <class A>
std::unique_ptr<Call> host_call(const A& a, std::shared_ptr<HostArena> arena) {
  auto c = std::make_unique<OpCall<A>>(a);
  c->owner = std::move(arena);
  return c;
}

/// Uniform draws for the bench-built inputs (std::mt19937_64, seeded per case).
struct Draw {
  std::mt19937_64 g;
  explicit Draw(uint64_t seed) : g(seed) {}
  int32_t below(int64_t n) { return static_cast<int32_t>(g() % static_cast<uint64_t>(n)); }
};

int rotation_copies(double working_set_bytes, int64_t l2_bytes) {
  // Enough copies that the rotated working set is 4x the L2; at least 2, at most 8.
  const double want = std::ceil(4.0 * static_cast<double>(l2_bytes) / std::max(working_set_bytes, 1.0));
  return static_cast<int>(std::clamp(want, 2.0, 8.0));
}

Case one_call(CaseMeta meta, std::unique_ptr<Call> call, const BenchContext& ctx) {
  meta.copies = rotation_copies(meta.bytes_min, ctx.l2_bytes);
  Case c{std::move(meta), {}};
  c.calls.push_back(std::move(call));
  return c;
}

std::string str(int64_t v) { return std::to_string(v); }

/// The key and shape suffix of a semantics profile's case: nothing for the seed's (their keys predate the
/// profiles), " semantics=<name>" otherwise.
std::string semantics_suffix(Semantics s) {
  return s == Semantics::kSeed ? std::string() : std::string(" semantics=") + sp::semantics_name(s);
}

/// The key and shape suffix of a record's case: nothing for the 584-byte record's (their keys predate the records),
/// " record=<name>" otherwise.
std::string record_suffix(Record r) {
  return r == Record::kFp8DsMla ? std::string() : std::string(" record=") + sp::record_name(r);
}

/// Plans `Op::build(ctx, params...)` under the key `Op::key(params...)`.
template <class Op, class... P>
void add_case(std::vector<Planned>& p, const BenchContext& ctx, P... params) {
  p.push_back({Op::kShort, Op::key(params...), [ctx, params...] { return Op::build(ctx, params...); }, Op::kLight});
}

// ---------------------------------------------------------------------------
// The cases of each operation: one OpBench specialization per entry of DSV4KV_OPS.
// ---------------------------------------------------------------------------

/// `kShort` (the name of --only, the first word of every key), `kLight` (its cases' host side
/// takes seconds, not minutes: `--host-check --light`, a CTest test) and `plan` (its cases).
/// An operation of the table without a specialization stops the build here.
template <class Args>
struct OpBench {
  static_assert(sizeof(Args) == 0,
                "every operation of DSV4KV_OPS needs its bench cases: add OpBench<Args> in bench/cases.cpp");
};

template <>
struct OpBench<QuantizeInsertArgs> {
  static constexpr const char* kShort = "quantize";
  static constexpr bool kLight = false;
  static std::string key(int64_t n, int64_t stride, Record record = Record::kFp8DsMla) {
    return "quantize tokens=" + str(n) + " stride=" + str(stride) + record_suffix(record);
  }
  /// `n` tokens into slots contiguous inside randomly permuted blocks (bench.py's layout), keys
  /// drawn by QuantizeTester; the 613 MB cache (of the 584-byte record) is one device copy shared
  /// by the rotation.
  static Case build(const BenchContext& ctx, int64_t n, int64_t stride, Record record = Record::kFp8DsMla) {
    const sp::RecordLayout rec = sp::record_layout(record);
    std::vector<int32_t> perm(kNumBlocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(1000 + 17 * static_cast<uint64_t>(n)));
    std::vector<int64_t> slots(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) slots[t] = int64_t{perm[t / kBlockSize]} * kBlockSize + t % kBlockSize;
    CaseMeta m;
    m.op = kShort;
    m.key = key(n, stride, record);
    m.shape = "tokens=" + str(n) + " bs=64 blocks=16384" + record_suffix(record);
    m.block_stride = stride;
    m.bytes_min = static_cast<double>(n) * (2 * rec.head_dim + 8 + rec.token_bytes());
    m.bytes_note = record == Record::kFp8DsMla
                       ? "read k row + slot id, write 448 fp8 + 128 bf16 + 8 scale bytes per token"
                       : "read k row + slot id, write the record's token bytes";
    m.small = n <= 64;
    auto t =
        cf::QuantizeTester().record(record).block_size(kBlockSize).num_blocks(kNumBlocks).stride(stride).seed(77 + n);
    t.slots(std::move(slots));
    return one_call(std::move(m), tester_call(std::move(t), {"k_cache"}), ctx);
  }
  static void plan(const BenchContext& ctx, std::vector<Planned>& p) {
    for (int64_t n : {1, 64, 4096, 16384, 65536}) add_case<OpBench>(p, ctx, n, kAlignedStride);
    add_case<OpBench>(p, ctx, int64_t{65536}, kUnalignedStride);
    // The V4.1 records at 65,536 tokens, each at vLLM's stride for a cache of that record alone.
    for (Record r : kV41BenchRecords)
      add_case<OpBench>(p, ctx, int64_t{65536}, sp::record_layout(r).vllm_block_stride(kBlockSize), r);
  }
};

template <>
struct OpBench<DequantizeGatherArgs> {
  static constexpr const char* kShort = "gather";
  static constexpr bool kLight = false;
  static std::string key(int64_t R, int64_t T, int64_t stride, Record record = Record::kFp8DsMla) {
    return "gather reqs=" + str(R) + " tokens=" + str(T) + " stride=" + str(stride) + record_suffix(record);
  }
  /// R whole sequences of T tokens through a random block table, from GatherTester's realistic
  /// cache (scales of typical keys, no NaN code: what quantize writes; one device copy shared by
  /// the rotation). Arbitrary bytes hold NaN codes and the infinite scale byte, which send a warp
  /// to the exact per-element path (cuda/src/gather.cu); a cache written by quantize has neither.
  static Case build(const BenchContext& ctx, int64_t R, int64_t T, int64_t stride, Record record = Record::kFp8DsMla) {
    const sp::RecordLayout rec = sp::record_layout(record);
    const int64_t nb_per = (T + kBlockSize - 1) / kBlockSize;
    const int64_t scale_bytes_read = rec.num_scales();  // the pad byte is not needed
    CaseMeta m;
    m.op = kShort;
    m.key = key(R, T, stride, record);
    m.shape = "reqs=" + str(R) + " tokens/req=" + str(T) + " bs=64" + record_suffix(record);
    m.block_stride = stride;
    m.bytes_min = static_cast<double>(R * T) * (rec.data_bytes() + scale_bytes_read + 2 * rec.head_dim) +
                  static_cast<double>(R * nb_per) * 4;
    m.bytes_note = "read the record's data and scale bytes, write the bf16 row, plus the block table";
    m.small = R * T <= 128;
    auto t = cf::GatherTester()
                 .record(record)
                 .out_rows(T)
                 .block_size(kBlockSize)
                 .num_blocks(kNumBlocks)
                 .stride(stride)
                 .table(nb_per, 0, 0)
                 .realistic_cache(true)
                 .seed(2000 + 31 * static_cast<uint64_t>(R * T));
    t.lengths(std::vector<int32_t>(static_cast<size_t>(R), static_cast<int32_t>(T)), {});
    return one_call(std::move(m), tester_call(std::move(t), {"k_cache"}), ctx);
  }
  static void plan(const BenchContext& ctx, std::vector<Planned>& p) {
    const std::pair<int64_t, int64_t> shapes[] = {{1, 128},   {1, 8192},  {1, 32000}, {4, 8192},
                                                  {16, 8192}, {64, 2048}, {256, 128}};
    for (auto [R, T] : shapes) add_case<OpBench>(p, ctx, R, T, kAlignedStride);
    add_case<OpBench>(p, ctx, int64_t{16}, int64_t{8192}, kUnalignedStride);
    for (Record r : kV41BenchRecords)
      add_case<OpBench>(p, ctx, int64_t{16}, int64_t{8192}, sp::record_layout(r).vllm_block_stride(kBlockSize), r);
  }
};

template <>
struct OpBench<GlobalTopkArgs> {
  static constexpr const char* kShort = "global_topk";
  static constexpr bool kLight = true;
  static std::string key(int64_t T, int64_t topk, Semantics sem, bool trailing) {
    return "global_topk tokens=" + str(T) + " topk=" + str(topk) + (trailing ? " trailing" : "") +
           semantics_suffix(sem);
  }
  /// T tokens of 4 requests of 32,768 compressed tokens, 5% sentinels (GlobalTopkTester); `sem`
  /// vllm_v4: the packed rows of current vLLM. `trailing`: each row's sentinels are its last
  /// entries (a short row from a top-k kernel), else scattered over the row.
  static Case build(const BenchContext& ctx, int64_t T, int64_t topk, Semantics sem, bool trailing) {
    constexpr int64_t nreq = 4, ctx_tokens = 32768, cols = ctx_tokens / kBlockSize;
    CaseMeta m;
    m.op = kShort;
    m.key = key(T, topk, sem, trailing);
    m.shape =
        "tokens=" + str(T) + " topk=" + str(topk) + " bs=64" + (trailing ? " trailing" : "") + semantics_suffix(sem);
    m.bytes_min = static_cast<double>(T * topk * 8 + T * 9 + nreq * cols * 4);
    m.bytes_note = "read + write topk int32, token_to_req/is_valid/lens, the block table once";
    m.small = T <= 64;
    auto t = cf::GlobalTopkTester()
                 .tokens(T)
                 .topk(topk)
                 .requests(nreq)
                 .block_size(kBlockSize)
                 .table(cols, 0)
                 .sentinel_fraction(0.05)
                 .trailing_sentinels(trailing)
                 .semantics(sem)
                 .seed(3001 + 7 * static_cast<uint64_t>(T * topk));
    return one_call(std::move(m), tester_call(std::move(t)), ctx);
  }
  static void plan(const BenchContext& ctx, std::vector<Planned>& p) {
    for (Semantics sem : {Semantics::kSeed, Semantics::kVllmV4}) {
      for (int64_t T : {64, 8192})
        for (int64_t k : {512, 2048}) add_case<OpBench>(p, ctx, T, k, sem, false);
      for (int64_t k : {512, 2048}) add_case<OpBench>(p, ctx, int64_t{8192}, k, sem, true);
    }
  }
};

template <>
struct OpBench<CombineArgs> {
  static constexpr const char* kShort = "combine";
  static constexpr bool kLight = true;
  static std::string key(int64_t topk, int64_t img, Semantics sem) {
    return "combine tokens=8192 topk=" + str(topk) + " window=128 image=" + str(img) + semantics_suffix(sem);
  }
  /// 4 requests x 2,048 query tokens after an 8,192-token prefix (compress ratio 4, window 128),
  /// with or without image spans. Built here, not by CombineTester: the tester draws each
  /// request's query length, and the Triton rows need these fixed ones. `sem` vllm_v41: V4.1's
  /// combine (top-k values >= N dropped; no images), whose inputs then hold 1% of values >= N.
  static Case build(const BenchContext& ctx, int64_t topk, int64_t max_image_tokens, Semantics sem) {
    constexpr int64_t nreq = 4, q = 2048, p = 8192, win = 128, cr = 4, T = nreq * q;
    const bool image = max_image_tokens > 0;
    const int64_t width = sp::combine_row_width(topk, win, max_image_tokens);
    const int64_t N = (p + q + cr - 1) / cr, gl = q + std::min(p, win - 1), M = N + gl + 8;
    int64_t topk_used = 0;
    for (int64_t t = 0; t < T; ++t) topk_used += sp::topk_len_at(p + t % q, cr, topk);
    CaseMeta m;
    m.op = kShort;
    m.key = key(topk, max_image_tokens, sem);
    m.shape = "tokens=" + str(T) + " topk=" + str(topk) + " window=128" +
              (image ? " images (max_image_tokens=" + str(max_image_tokens) + ")" : "") + semantics_suffix(sem);
    m.bytes_min = static_cast<double>(T * width * 4 + topk_used * 4 + T * 4 + (image ? T * 8 : 0));
    m.bytes_note = std::string("write the whole row (with -1 padding) + lens once, read the used topk entries") +
                   (image ? " and left/right visibility" : "");
    auto arena = std::make_shared<HostArena>();
    std::vector<int32_t> qsl;
    for (int64_t b = 0; b <= nreq; ++b) qsl.push_back(static_cast<int32_t>(b * q));
    CombineArgs a;
    a.query_start_loc = TensorView::vec(arena->add(qsl), DType::kI32, nreq + 1);
    a.seq_lens = TensorView::vec(arena->add(std::vector<int32_t>(nreq, p + q)), DType::kI32, nreq);
    a.gather_lens =
        TensorView::vec(arena->add(std::vector<int32_t>(nreq, static_cast<int32_t>(gl))), DType::kI32, nreq);
    if (image) {
      // Request r, span i covers positions [s, e] (inclusive), s = p + 100 + 500 i + 37 r, length
      // 64 - 8 ((i + r) % 4); DeepSeek's rule inside a span (triton_bench.py builds the same).
      std::vector<int32_t> lv(T, 0), rv(T, 0);
      for (int64_t r = 0; r < nreq; ++r)
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t s = p + 100 + 500 * i + 37 * r, e = s + (64 - 8 * ((i + r) % 4)) - 1;
          for (int64_t pos = s; pos <= e; ++pos) {
            lv[r * q + (pos - p)] = static_cast<int32_t>(std::min(pos - s, max_image_tokens - 1));
            rv[r * q + (pos - p)] = static_cast<int32_t>(std::min(e - pos, max_image_tokens));
          }
        }
      a.left_visible = TensorView::vec(arena->add(std::move(lv)), DType::kI32, T);
      a.right_visible = TensorView::vec(arena->add(std::move(rv)), DType::kI32, T);
    }
    Draw d(4000 + 13 * static_cast<uint64_t>(topk));
    std::vector<int32_t> ti(static_cast<size_t>(T * topk));
    for (auto& v : ti)
      v = sem == Semantics::kVllmV41 && d.below(100) == 0 ? static_cast<int32_t>(N) + d.below(N) : d.below(N);
    a.topk_indices = TensorView::mat(arena->add(std::move(ti)), DType::kI32, T, topk);
    a.semantics = sem;
    a.M = M;
    a.N = N;
    a.window_size = win;
    a.compress_ratio = cr;
    a.topk = topk;
    a.max_image_tokens = max_image_tokens;
    index_outputs(*arena, a.combined_indices, a.combined_lens, T, width);
    return one_call(std::move(m), host_call(a, arena), ctx);
  }
  static void plan(const BenchContext& ctx, std::vector<Planned>& p) {
    for (int64_t k : {512, 2048}) {
      for (int64_t img : {0, 64}) add_case<OpBench>(p, ctx, k, img, Semantics::kSeed);
      add_case<OpBench>(p, ctx, k, int64_t{0}, Semantics::kVllmV41);
    }
  }
};

template <>
struct OpBench<MixedSparseArgs> {
  static constexpr const char* kShort = "mixed";
  static constexpr bool kLight = true;
  static std::string key(int64_t D, int64_t nprefill, int64_t draft, Semantics sem) {
    return "mixed decode=" + str(D) + (draft > 1 ? " draft=" + str(draft) + " swa_width=192" : "") +
           " prefill=" + str(nprefill * 2048) + " topk=512 window=128" + semantics_suffix(sem);
  }
  /// D decode rows (context 8,193) and `nprefill` prefill requests of 2,048 tokens after 8,192.
  /// Built here, not by MixedSparseTester, for the same reason as combine. `draft` > 1: the decode
  /// tokens are draft blocks of that many tokens per request, their SWA rows 192 wide as DSpark's
  /// builder lays them out (the window of context and the block from column 0), which vllm_v4
  /// arranges in DSpark's layout. vllm_v41: replay_start 8,000 for each prefill request (the
  /// windows of its first 64 tokens bounded).
  static Case build(const BenchContext& ctx, int64_t D, int64_t nprefill, int64_t draft, Semantics sem) {
    constexpr int64_t q = 2048, p = 8192, topk = 512, cr = 4, win = 128;
    const int64_t sw = draft > 1 ? 192 : win, nd = D / draft;  // decode requests
    const int64_t P = nprefill * q, T = D + P, R = nd + nprefill;
    constexpr int64_t swa_cols = (p + q) / 64 + 1, comp_cols = (p + q) / cr / 64 + 1;
    const int64_t width = sp::mixed_row_width(sw, 0, topk, topk);
    CaseMeta m;
    m.op = kShort;
    m.key = key(D, nprefill, draft, sem);
    m.shape = "decode=" + str(D) + (draft > 1 ? " (draft blocks of " + str(draft) + ", swa_width 192)" : "") +
              " prefill=" + str(P) + " topk=512 window=128" + semantics_suffix(sem);
    m.bytes_min = static_cast<double>(T * width * 4 + T * 4 + D * (sw + topk) * 4 + P * topk * 4);
    m.bytes_note = "write [T, width] once + lens; read decode rows + prefill topk";
    auto arena = std::make_shared<HostArena>();
    Draw d(5000 + static_cast<uint64_t>(D * 7 + nprefill));
    std::vector<int32_t> qsl{0}, seq, t2r;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t qr = r < nd ? draft : q;
      qsl.push_back(qsl.back() + static_cast<int32_t>(qr));
      seq.push_back(static_cast<int32_t>(r < nd ? p + draft : p + q));
      for (int64_t j = 0; j < qr; ++j) t2r.push_back(static_cast<int32_t>(r));
    }
    auto draws = [&](int64_t n, int64_t below) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = d.below(below);
      return v;
    };
    MixedSparseArgs a;
    a.swa_block_size = 64;
    a.compressed_block_size = 64;
    a.window_size = win;
    a.compress_ratio = cr;
    a.topk = topk;
    a.swa_block_table = TensorView::mat(arena->add(draws(R * swa_cols, 100000)), DType::kI32, R, swa_cols);
    a.compressed_block_table = TensorView::mat(arena->add(draws(R * comp_cols, 100000)), DType::kI32, R, comp_cols);
    std::vector<int32_t> dswa = draws(D * sw, 10000000);
    if (draft > 1)  // each row: win context slots and the request's draft block, then -1
      for (int64_t t = 0; t < D; ++t)
        for (int64_t c = win + draft; c < sw; ++c) dswa[t * sw + c] = -1;
    a.decode_swa_indices = TensorView::mat(arena->add(std::move(dswa)), DType::kI32, D, sw);
    a.decode_compressed_indices = TensorView::mat(arena->add(draws(D * topk, 10000000)), DType::kI32, D, topk);
    a.decode_compressed_topk_lens = TensorView::vec(arena->add(std::vector<int32_t>(D, topk)), DType::kI32, D);
    a.prefill_topk_indices = TensorView::mat(arena->add(draws(P * topk, (p + q) / cr)), DType::kI32, P, topk);
    a.query_start_loc = TensorView::vec(arena->add(std::move(qsl)), DType::kI32, R + 1);
    a.seq_lens = TensorView::vec(arena->add(std::move(seq)), DType::kI32, R);
    a.token_to_req = TensorView::vec(arena->add(std::move(t2r)), DType::kI32, T);
    a.semantics = sem;
    if (sp::bounded_replay(sem)) {
      std::vector<int32_t> replay(static_cast<size_t>(R), 0);
      for (int64_t r = nd; r < R; ++r) replay[r] = 8000;
      a.replay_start = TensorView::vec(arena->add(std::move(replay)), DType::kI32, R);
    }
    index_outputs(*arena, a.sparse_indices, a.sparse_topk_lens, T, width);
    return one_call(std::move(m), host_call(a, arena), ctx);
  }
  static void plan(const BenchContext& ctx, std::vector<Planned>& p) {
    add_case<OpBench>(p, ctx, int64_t{256}, int64_t{4}, int64_t{1}, Semantics::kSeed);
    add_case<OpBench>(p, ctx, int64_t{256}, int64_t{4}, int64_t{1}, Semantics::kVllmV41);
    for (Semantics sem : {Semantics::kSeed, Semantics::kVllmV4})
      add_case<OpBench>(p, ctx, int64_t{256}, int64_t{4}, int64_t{4}, sem);
  }
};

template <>
struct OpBench<SparseGatherArgs> {
  static constexpr const char* kShort = "sparse_gather";
  static constexpr bool kLight = false;
  static std::string key(int64_t R, int64_t K, int64_t stride) {
    return "sparse_gather rows=" + str(R) + " topk=" + str(K) + " stride=" + str(stride);
  }
  /// N = R x K random slots over the whole cache (kNumBlocks blocks) with `padding` of them -1,
  /// from SparseGatherTester's realistic cache (random codes, no NaN code, scale bytes as quantize
  /// writes them: the codes the Triton side quantizes; one device copy shared by the rotation).
  static Case build(const BenchContext& ctx, int64_t R, int64_t K, int64_t stride, double padding = 0.05) {
    const int64_t n = R * K;
    constexpr int64_t kScaleBytesRead = sp::kNumTiles;  // the pad byte is not needed
    auto t = cf::SparseGatherTester()
                 .slots(n)
                 .block_size(kBlockSize)
                 .num_blocks(kNumBlocks)
                 .stride(stride)
                 .padding_fraction(padding)
                 .cache_fill(cf::SparseGatherTester::CacheFill::kRealistic)  // as the Triton side's quantized cache
                 .seed(5000 + 31 * static_cast<uint64_t>(n));
    t.Prepare();
    int64_t valid = 0;
    for (int64_t i = 0; i < n; ++i) valid += t.slot_valid(i);
    CaseMeta m;
    m.op = kShort;
    m.key = key(R, K, stride);
    m.shape = "slots=" + str(R) + "x" + str(K) + " (" + str(n - valid) + " of -1) bs=64 blocks=16384";
    m.block_stride = stride;
    m.bytes_min = static_cast<double>(valid) * (sp::kTokenDataBytes + kScaleBytesRead + 2 * sp::kHeadDim) +
                  static_cast<double>(n) * 4;
    m.bytes_note = "read 583 B, write 1024 B per valid slot, plus 4 B per slot id";
    m.small = n <= 128;
    return one_call(std::move(m), tester_call(std::move(t), {"k_cache"}), ctx);
  }
  static void plan(const BenchContext& ctx, std::vector<Planned>& p) {
    const std::pair<int64_t, int64_t> shapes[] = {{256, 512}, {64, 2048}, {1024, 2048}};
    for (auto [R, K] : shapes) add_case<OpBench>(p, ctx, R, K, kAlignedStride);
    // End to end, one decode step of 256 requests x 8,192 tokens of context with top-512: the
    // sparse gather of the 131,072 selected rows against the dense gather of the same requests
    // (both rows report their time and the bytes they move).
    p.push_back({kShort, "sparse_gather decode reqs=256 ctx=8192 topk=512", [ctx] {
                   Case c = build(ctx, 256, 512, kAlignedStride, 0.0);
                   c.meta.key = "sparse_gather decode reqs=256 ctx=8192 topk=512";
                   c.meta.shape = "decode: 256 reqs x top-512 of 8192 = 131072 rows (sparse)";
                   return c;
                 }});
    p.push_back({kShort, "sparse_gather decode-dense reqs=256 ctx=8192", [ctx] {
                   Case c = OpBench<DequantizeGatherArgs>::build(ctx, 256, 8192, kAlignedStride);
                   c.meta.op = kShort;
                   c.meta.key = "sparse_gather decode-dense reqs=256 ctx=8192";
                   c.meta.shape = "decode: dense gather of the same 256 reqs x 8192 tokens = 2097152 rows";
                   return c;
                 }});
  }
};

// ---------------------------------------------------------------------------
// Chains: one CUDA graph per serving step, against the same chain of Triton kernels.
// ---------------------------------------------------------------------------

/// The calls of `parts` in order, as one case (bytes and copies: the sum, and the rotation of
/// the sum); verification checks every call.
Case chain(const BenchContext& ctx, const std::string& key, const std::string& shape, std::vector<Case> parts) {
  Case c;
  c.meta.op = "chain";
  c.meta.key = key;
  c.meta.shape = shape;
  std::string note;
  for (Case& part : parts) {
    c.meta.bytes_min += part.meta.bytes_min;
    c.meta.step_bytes.push_back(part.meta.bytes_min);
    note += (note.empty() ? "" : " + ") + part.meta.key;
    for (auto& call : part.calls) c.calls.push_back(std::move(call));
  }
  c.meta.bytes_note = "sum of the steps' minimal bytes: " + note;
  c.meta.copies = rotation_copies(c.meta.bytes_min, ctx.l2_bytes);
  return c;
}

/// Plans a chain whose steps are built (in order) by `steps`; with ctx.pdl_chains also its
/// variant launched with programmatic dependent launch (the same calls and inputs, key + " pdl").
void add_chain(std::vector<Planned>& p, const BenchContext& ctx, const std::string& key, const std::string& shape,
               bool light, std::vector<std::function<Case()>> steps) {
  for (const bool pdl : {false, true}) {
    if (pdl && !ctx.pdl_chains) break;
    const std::string k = pdl ? key + " pdl" : key;
    p.push_back({"chain", k,
                 [=] {
                   std::vector<Case> parts;
                   for (const auto& step : steps) parts.push_back(step());
                   Case c = chain(ctx, k, pdl ? shape + ", programmatic dependent launch" : shape, std::move(parts));
                   c.meta.pdl = pdl;
                   return c;
                 },
                 light});
  }
  if (!ctx.chain_steps) return;
  for (size_t i = 0; i < steps.size(); ++i) {
    p.push_back({"chain", key + " step " + std::to_string(i + 1),
                 [=] {
                   Case c = steps[i]();
                   c.meta.shape = "step " + std::to_string(i + 1) + " of " + key + " alone: " + c.meta.key;
                   c.meta.key = key + " step " + std::to_string(i + 1) + ": " + c.meta.key;
                   return c;
                 },
                 light});
  }
}

void plan_chains(const BenchContext& ctx, std::vector<Planned>& p) {
  add_chain(p, ctx, "chain decode",
            "decode step: quantize 256 tokens + global_topk 256x512 + mixed 256 decode rows (window 128)", true,
            {[ctx] { return OpBench<QuantizeInsertArgs>::build(ctx, 256, kAlignedStride); },
             [ctx] { return OpBench<GlobalTopkArgs>::build(ctx, 256, 512, Semantics::kSeed, false); },
             [ctx] { return OpBench<MixedSparseArgs>::build(ctx, 256, 0, 1, Semantics::kSeed); }});
  add_chain(p, ctx, "chain prefill",
            "prefill step: quantize 8192 tokens + gather (4, 8192) + global_topk 8192x2048 + combine 8192x2048 "
            "(window 128)",
            false,
            {[ctx] { return OpBench<QuantizeInsertArgs>::build(ctx, 8192, kAlignedStride); },
             [ctx] { return OpBench<DequantizeGatherArgs>::build(ctx, 4, 8192, kAlignedStride); },
             [ctx] { return OpBench<GlobalTopkArgs>::build(ctx, 8192, 2048, Semantics::kSeed, false); },
             [ctx] { return OpBench<CombineArgs>::build(ctx, 2048, 0, Semantics::kSeed); }});
}

}  // namespace

std::vector<std::string> case_groups() {
  std::vector<std::string> g;
  for_each_op([&](auto t) { g.push_back(OpBench<typename decltype(t)::type>::kShort); });
  g.push_back("chain");
  return g;
}

std::string short_op(const std::string& name) {
  std::string s;
  for_each_op([&](auto t) {
    using A = typename decltype(t)::type;
    if (name == A::kName || name == OpBench<A>::kShort) s = OpBench<A>::kShort;
  });
  if (name == "chain") s = name;
  return s;
}

std::vector<Planned> plan_cases(const BenchContext& ctx, const std::vector<std::string>& only,
                                const std::string& filter, bool light_only) {
  std::vector<Planned> all, kept;
  for_each_op([&](auto t) { OpBench<typename decltype(t)::type>::plan(ctx, all); });
  plan_chains(ctx, all);
  for (Planned& p : all) {
    const bool op_ok = only.empty() || std::find(only.begin(), only.end(), p.op) != only.end();
    if (op_ok && (p.light || !light_only) && p.key.find(filter) != std::string::npos) kept.push_back(std::move(p));
  }
  return kept;
}

bool host_check_cases(const std::vector<Planned>& plan, std::ostream& out) {
  bool ok = true;
  for (const Planned& p : plan) {
    try {
      const Case c = p.build();
      out << p.key << ": " << c.meta.bytes_min / 1e6 << " MB, " << c.meta.copies << " copies";
      bool counted = false;  // the bench's inputs are valid: a count means a case is built wrong
      for (const auto& call : c.calls) {
        const int32_t n = call->host_check();
        out << "; " << call->op_name() << " error_count " << n;
        counted = counted || n != 0;
      }
      out << (counted ? " FAILED: nonzero error_count\n" : "\n");
      ok = ok && !counted;
    } catch (const std::exception& e) {
      out << p.key << ": FAILED: " << e.what() << "\n";
      ok = false;
    }
  }
  return ok;
}

std::string layout_json() {
  std::ostringstream s;
  s << "{\"block_size\": " << kBlockSize << ", \"num_blocks\": " << kNumBlocks
    << ", \"aligned_stride\": " << kAlignedStride << ", \"unaligned_stride\": " << kUnalignedStride
    << ", \"head_dim\": " << sp::kHeadDim << ", \"nope_dim\": " << sp::kNopeDim << ", \"num_tiles\": " << sp::kNumTiles
    << ", \"bf16_bytes\": " << sp::kBf16Bytes << ", \"rope_bytes\": " << sp::kRopeBytes
    << ", \"token_bytes\": " << sp::kTokenBytes << ", \"combine_row_alignment\": " << sp::kCombineRowAlignment
    << ", \"mixed_topk_alignment\": " << sp::kMixedTopkAlignment << ", \"tile_size\": " << sp::kTileSize
    << ", \"rope_dim\": " << sp::kRopeDim << ", \"token_data_bytes\": " << sp::kTokenDataBytes
    << ", \"scale_bytes_per_token\": " << sp::kScaleBytesPerToken
    << ", \"vllm_block_rounding\": " << sp::kVllmBlockRounding << ", \"records\": [";
  // The records the bench measures besides the default one: name, token bytes, head_dim, vLLM's stride at the bench's
  // block size (the strides of their rows).
  for (size_t i = 0; i < std::size(kV41BenchRecords); ++i) {
    const sp::RecordLayout r = sp::record_layout(kV41BenchRecords[i]);
    s << (i ? ", " : "") << "{\"name\": \"" << sp::record_name(kV41BenchRecords[i])
      << "\", \"token_bytes\": " << r.token_bytes() << ", \"data_bytes\": " << r.data_bytes()
      << ", \"num_scales\": " << r.num_scales() << ", \"head_dim\": " << r.head_dim
      << ", \"block_stride\": " << r.vllm_block_stride(kBlockSize) << "}";
  }
  s << "]}";
  return s.str();
}

}  // namespace dsv4kv::bench
