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
#include <type_traits>
#include <vector>

#include "dsv4kv/cuda.hpp"
#include "dsv4kv/cuda/check.hpp"

namespace dsv4kv::conformance {

namespace {

/// Guard bytes on each side of a staged tensor.
constexpr size_t kGuardBytes = 256;
/// The value guard bytes hold; any other value afterwards is a write out of bounds.
constexpr uint8_t kGuardValue = 0xA5;
/// Staged tensors keep the host address modulo this, so alignment-dependent
/// code paths (16-byte vectors, odd block strides) are the same as on the host.
constexpr size_t kAlignmentKept = 256;

/// One operation's device copies of its arguments; frees everything on destruction.
class Staging {
 public:
  Staging() { DSV4KV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Staging() {
    for (Region& r : regions_) cudaFree(r.alloc);
    cudaStreamDestroy(stream_);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  cudaStream_t stream() const { return stream_; }

  /// Moves a tensor's bytes to the device and points the view there. Absent and empty views stay,
  /// and so does a view without a valid extent: validate() guarantees the extent of every view an
  /// operation reads, so one it does not check (e.g. decode_is_valid_token when not needed) is
  /// not read and need not be staged.
  void tensor(TensorView& v, const char* name) {
    const spec::Checked bytes = v.extent_bytes();
    if (!bytes.ok || bytes.value == 0) return;
    v.data = stage(v.data, static_cast<size_t>(bytes.value), name);
  }

  /// Moves an optional error counter to the device.
  void counter(int32_t*& count) {
    if (count == nullptr) return;
    count = static_cast<int32_t*>(stage(count, sizeof(int32_t), "error_count"));
  }

  /// Waits for the operation, copies every region back and checks its guards.
  void finish() {
    DSV4KV_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> bytes;
    for (const Region& r : regions_) {
      bytes.resize(r.alloc_bytes);
      DSV4KV_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), r.alloc, r.alloc_bytes, cudaMemcpyDeviceToHost, stream_));
      DSV4KV_CUDA_CHECK(cudaStreamSynchronize(stream_));
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
    DSV4KV_CUDA_CHECK(cudaMalloc(&p, r.alloc_bytes));
    r.alloc = static_cast<uint8_t*>(p);
    regions_.push_back(r);
    DSV4KV_CUDA_CHECK(cudaMemsetAsync(r.alloc, kGuardValue, r.alloc_bytes, stream_));
    DSV4KV_CUDA_CHECK(cudaMemcpyAsync(r.alloc + r.front, host, extent, cudaMemcpyHostToDevice, stream_));
    return r.alloc + r.front;
  }

  cudaStream_t stream_ = nullptr;
  std::vector<Region> regions_;
};

/// Runs one operation: its arguments are validated on the host (contract errors surface before
/// any extent is computed from a broken view), every tensor field and the error counter are
/// staged, `launch(args, stream)` runs it, and everything comes back with the guards checked.
/// Written once over Args::fields, so a new operation in the table needs nothing here.
template <class Args, class Launch>
void run_staged(const Args& args, Launch&& launch) {
  validate(args);
  Args a = args;
  Staging s;
  Args::fields(a, [&](const char* name, Role, auto& member) {
    using Member = std::remove_cvref_t<decltype(member)>;
    if constexpr (std::is_same_v<Member, TensorView>)
      s.tensor(member, name);
    else if constexpr (std::is_same_v<Member, int32_t*>)
      s.counter(member);
  });
  launch(a, s.stream());
  s.finish();
}

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }

#define DSV4KV_CUDA_BACKEND_OP(op, Args, stem)                                         \
  void op(const Args& args) override {                                                 \
    run_staged(args, [](const Args& a, cudaStream_t stream) { cuda::op(a, stream); }); \
  }
  DSV4KV_OPS(DSV4KV_CUDA_BACKEND_OP)
#undef DSV4KV_CUDA_BACKEND_OP
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
