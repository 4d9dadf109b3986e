// The CUDA backend over host memory: every tensor's extent is staged in device
// memory between guard bytes, the operation runs on its own stream, and
// everything comes back (inputs too, so a kernel that writes an input is
// seen), with the guards checked.
#include <memory>
#include <string>

#include "backend.hpp"

#ifdef DSV4KV_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "dsv4kv/cuda.hpp"

namespace dsv4kv::conformance {

namespace {

/// Guard bytes on each side of a staged tensor.
constexpr size_t kGuardBytes = 256;
/// The value guard bytes hold; any other value afterwards is a write out of bounds.
constexpr uint8_t kGuardValue = 0xA5;
/// Staged tensors keep the host address modulo this, so alignment-dependent
/// code paths (16-byte vectors, odd block strides) are the same as on the host.
constexpr size_t kAlignmentKept = 256;

void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // reported here: do not leave it for the next operation's launch check
  throw CudaError(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") at " +
                  file + ":" + std::to_string(line));
}
#define BACKEND_CUDA_CHECK(call) check((call), #call, __FILE__, __LINE__)

/// Bytes from a view's first element to one past its last (0 when absent or empty). validate()
/// guarantees the extent of every view an operation reads; a view it does not check (e.g.
/// decode_is_valid_token when it is not needed) may have none, and is then not staged.
size_t extent_bytes(const TensorView& v) {
  const spec::Checked e = v.extent_bytes();
  return e.ok ? static_cast<size_t>(e.value) : 0;
}

/// One operation's device copies of its arguments; frees everything on destruction.
class Staging {
 public:
  Staging() { BACKEND_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Staging() {
    for (Region& r : regions_) cudaFree(r.alloc);
    cudaStreamDestroy(stream_);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  cudaStream_t stream() const { return stream_; }

  /// Moves a tensor's bytes to the device and points the view there (absent and empty views stay).
  void tensor(TensorView& v, const char* name) {
    const size_t bytes = extent_bytes(v);
    if (bytes == 0) return;
    v.data = stage(v.data, bytes, name);
  }

  /// Moves an optional error counter to the device.
  void counter(int32_t*& count) {
    if (count == nullptr) return;
    count = static_cast<int32_t*>(stage(count, sizeof(int32_t), "error_count"));
  }

  /// Waits for the operation, copies every region back and checks its guards.
  void finish() {
    BACKEND_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> bytes;
    for (const Region& r : regions_) {
      bytes.resize(r.alloc_bytes);
      BACKEND_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), r.alloc, r.alloc_bytes, cudaMemcpyDeviceToHost, stream_));
      BACKEND_CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (size_t i = 0; i < r.alloc_bytes; ++i) {
        if (i >= r.front && i < r.front + r.extent) continue;
        if (bytes[i] != kGuardValue) {
          const long long off = static_cast<long long>(i) - static_cast<long long>(r.front);
          throw GuardViolation(std::string("cuda backend: guard byte of ") + r.name + " changed at offset " +
                               std::to_string(off) + " from the tensor's first byte (extent " +
                               std::to_string(r.extent) + " bytes)");
        }
      }
      std::memcpy(r.host, bytes.data() + r.front, r.extent);
    }
  }

 private:
  struct Region {
    const char* name;
    void* host;
    uint8_t* alloc;
    size_t alloc_bytes;
    size_t front;  // offset of the tensor's first byte inside the allocation
    size_t extent;
  };

  void* stage(void* host, size_t extent, const char* name) {
    Region r{name, host, nullptr, 0, 0, extent};
    r.front = kGuardBytes + reinterpret_cast<uintptr_t>(host) % kAlignmentKept;
    r.alloc_bytes = r.front + extent + kGuardBytes;
    void* p = nullptr;
    BACKEND_CUDA_CHECK(cudaMalloc(&p, r.alloc_bytes));
    r.alloc = static_cast<uint8_t*>(p);
    regions_.push_back(r);
    BACKEND_CUDA_CHECK(cudaMemsetAsync(r.alloc, kGuardValue, r.alloc_bytes, stream_));
    BACKEND_CUDA_CHECK(cudaMemcpyAsync(r.alloc + r.front, host, extent, cudaMemcpyHostToDevice, stream_));
    return r.alloc + r.front;
  }

  cudaStream_t stream_ = nullptr;
  std::vector<Region> regions_;
};

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

  void quantize_and_insert_k_cache(const QuantizeInsertArgs& args) override {
    validate(args);  // contract errors surface before any extent is computed from a broken view
    QuantizeInsertArgs a = args;
    Staging s;
    s.tensor(a.k, "k");
    s.tensor(a.k_cache, "k_cache");
    s.tensor(a.slot_mapping, "slot_mapping");
    s.counter(a.error_count);
    cuda::quantize_and_insert_k_cache(a, s.stream());
    s.finish();
  }

  void dequantize_and_gather_k_cache(const DequantizeGatherArgs& args) override {
    validate(args);  // contract errors surface before any extent is computed from a broken view
    DequantizeGatherArgs a = args;
    Staging s;
    s.tensor(a.out, "out");
    s.tensor(a.k_cache, "k_cache");
    s.tensor(a.seq_lens, "seq_lens");
    s.tensor(a.gather_lens, "gather_lens");
    s.tensor(a.block_table, "block_table");
    s.counter(a.error_count);
    cuda::dequantize_and_gather_k_cache(a, s.stream());
    s.finish();
  }

  void compute_global_topk_indices_and_lens(const GlobalTopkArgs& args) override {
    validate(args);  // contract errors surface before any extent is computed from a broken view
    GlobalTopkArgs a = args;
    Staging s;
    s.tensor(a.topk_indices, "topk_indices");
    s.tensor(a.token_to_req, "token_to_req");
    s.tensor(a.block_table, "block_table");
    s.tensor(a.is_valid_token, "is_valid_token");
    s.tensor(a.global_topk_indices, "global_topk_indices");
    s.tensor(a.topk_lens, "topk_lens");
    s.counter(a.error_count);
    cuda::compute_global_topk_indices_and_lens(a, s.stream());
    s.finish();
  }

  void combine_topk_swa_indices(const CombineArgs& args) override {
    validate(args);  // contract errors surface before any extent is computed from a broken view
    CombineArgs a = args;
    Staging s;
    s.tensor(a.topk_indices, "topk_indices");
    s.tensor(a.query_start_loc, "query_start_loc");
    s.tensor(a.seq_lens, "seq_lens");
    s.tensor(a.gather_lens, "gather_lens");
    s.tensor(a.left_visible, "left_visible");
    s.tensor(a.right_visible, "right_visible");
    s.tensor(a.combined_indices, "combined_indices");
    s.tensor(a.combined_lens, "combined_lens");
    s.counter(a.error_count);
    cuda::combine_topk_swa_indices(a, s.stream());
    s.finish();
  }

  void build_flashinfer_mixed_sparse_indices(const MixedSparseArgs& args) override {
    validate(args);  // contract errors surface before any extent is computed from a broken view
    MixedSparseArgs a = args;
    Staging s;
    s.tensor(a.decode_swa_indices, "decode_swa_indices");
    s.tensor(a.decode_compressed_indices, "decode_compressed_indices");
    s.tensor(a.decode_compressed_topk_lens, "decode_compressed_topk_lens");
    s.tensor(a.prefill_topk_indices, "prefill_topk_indices");
    s.tensor(a.query_start_loc, "query_start_loc");
    s.tensor(a.seq_lens, "seq_lens");
    s.tensor(a.token_to_req, "token_to_req");
    s.tensor(a.swa_block_table, "swa_block_table");
    s.tensor(a.compressed_block_table, "compressed_block_table");
    s.tensor(a.decode_is_valid_token, "decode_is_valid_token");
    s.tensor(a.prefill_left_visible, "prefill_left_visible");
    s.tensor(a.prefill_right_visible, "prefill_right_visible");
    s.tensor(a.sparse_indices, "sparse_indices");
    s.tensor(a.sparse_topk_lens, "sparse_topk_lens");
    s.counter(a.error_count);
    cuda::build_flashinfer_mixed_sparse_indices(a, s.stream());
    s.finish();
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  std::string reason;
  if (!cuda::device_available(&reason)) {
    if (why != nullptr) *why = reason;
    return nullptr;
  }
  return std::make_unique<CudaBackend>();
}

}  // namespace dsv4kv::conformance

#else  // !DSV4KV_HAVE_CUDA

namespace dsv4kv::conformance {

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  if (why != nullptr) *why = "dsv4kv was built without CUDA (DSV4KV_WITH_CUDA=OFF)";
  return nullptr;
}

}  // namespace dsv4kv::conformance

#endif  // DSV4KV_HAVE_CUDA
