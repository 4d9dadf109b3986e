/// \file ext.cpp
/// \brief The compiled half of the Python package: `dsv4kv._ext`.
///
/// Each binding turns DLPack arrays (PyTorch, NumPy, CuPy, ...) into dsv4kv::TensorView,
/// fills the operation's argument struct and runs the reference backend for host arrays or
/// the CUDA backend for device arrays. The Python wrappers in dsv4kv/ops.py choose the
/// stream, allocate outputs and normalize arguments; everything about shapes, dtypes and
/// ranges is checked here by the shared C++ `validate()`, so Python users see exactly the
/// messages of the C++ contracts.
///
/// Exceptions: dsv4kv::Error -> ValueError, or TypeError when the message is a dtype rule
/// ("... must be <dtype>, got ..."); dsv4kv::CudaError -> RuntimeError. Each operation binding
/// catches them itself (guarded()) and raises the Python exception before returning to nanobind,
/// so no library exception travels through nanobind's dispatcher, std::exception_ptr or the
/// exception-translator list (which nanobind shares between the modules of one ABI domain).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsv4kv/reference.hpp"
#include "dsv4kv/spec.hpp"

#if defined(DSV4KV_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "dsv4kv/cuda.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace dsv4kv::python {
namespace {

namespace dl = nb::dlpack;

/// A dtype problem found while binding an array (becomes Python's TypeError).
struct TypeProblem : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// True if `msg` is one of validate()'s dtype rules ("x must be int32, got int64"):
/// those are TypeErrors in Python, every other contract violation a ValueError.
bool is_dtype_message(const char* msg) {
  static constexpr DType kAll[] = {DType::kBF16, DType::kU8, DType::kI32, DType::kI64, DType::kBool};
  for (DType t : kAll) {
    const std::string pattern = std::string(" must be ") + dtype_name(t) + ", got ";
    if (std::strstr(msg, pattern.c_str()) != nullptr) return true;
  }
  return false;
}

/// PyTorch-style name of a DLPack dtype, for messages ("float32", "uint16", "bool").
std::string dlpack_dtype_name(dl::dtype t) {
  std::string base;
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int: base = "int"; break;
    case dl::dtype_code::UInt: base = "uint"; break;
    case dl::dtype_code::Float: base = "float"; break;
    case dl::dtype_code::Bfloat: base = "bfloat"; break;
    case dl::dtype_code::Complex: base = "complex"; break;
    case dl::dtype_code::Bool: base = "bool"; break;
    default: base = "dtype(code=" + std::to_string(t.code) + ")"; break;
  }
  if (static_cast<dl::dtype_code>(t.code) != dl::dtype_code::Bool || t.bits != 8) base += std::to_string(t.bits);
  if (t.lanes != 1) base += "x" + std::to_string(t.lanes);
  return base;
}

/// Maps a DLPack dtype onto the library's DType. `bf16_bits`: the array is a uint16 view of
/// bfloat16 data (how dsv4kv/ops.py passes NumPy arrays of ml_dtypes.bfloat16, which NumPy
/// cannot export through DLPack).
std::optional<DType> map_dtype(dl::dtype t, bool bf16_bits) {
  if (t.lanes != 1) return std::nullopt;
  const auto code = static_cast<dl::dtype_code>(t.code);
  if (code == dl::dtype_code::Bfloat && t.bits == 16) return DType::kBF16;
  if (code == dl::dtype_code::UInt && t.bits == 16 && bf16_bits) return DType::kBF16;
  if (code == dl::dtype_code::UInt && t.bits == 8) return DType::kU8;
  if (code == dl::dtype_code::Int && t.bits == 32) return DType::kI32;
  if (code == dl::dtype_code::Int && t.bits == 64) return DType::kI64;
  if (code == dl::dtype_code::Bool && t.bits == 8) return DType::kBool;
  return std::nullopt;
}

// DLPack device types (dlpack.h's DLDeviceType values, fixed by the DLPack ABI).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

/// Where a bound array lives: host memory (CPU, CUDA-pinned host) runs the reference,
/// device memory (CUDA, CUDA-managed) the CUDA backend.
enum class Where { kNone, kHost, kCuda };

std::string where_name(Where w, int id) {
  if (w == Where::kCuda) return "cuda:" + std::to_string(id);
  return "cpu";
}

/// Binds the array arguments of one call: imports each through DLPack, converts it to a
/// TensorView, keeps the import alive for the duration of the call, and checks that every
/// array is on one device.
class Binder {
 public:
  explicit Binder(const char* op) : op_(op) {}

  /// An input array (read only), or the absent view for None.
  TensorView in(nb::handle h, const char* name, DType want, int rank) { return bind(h, name, want, rank, false); }
  /// An output array (must be writable), or the absent view for None.
  TensorView out(nb::handle h, const char* name, DType want, int rank) { return bind(h, name, want, rank, true); }

  /// The optional `error_count` argument: None, or a writable int32 array of one element.
  /// The pointer is checked with the spec's tensor rule (int32, 4-byte aligned, non-null), so a
  /// misaligned view (e.g. a NumPy int32 view at an odd byte offset) is a contract error, never
  /// an unaligned counter handed to the backend.
  int32_t* counter(nb::handle h) {
    if (h.is_none()) return nullptr;
    TensorView v = bind(h, "error_count", DType::kI32, 1, true);
    if (v.dtype != DType::kI32)
      throw TypeProblem(std::string(op_) + ": error_count must be int32, got " + dtype_name(v.dtype));
    if (v.numel() != 1)
      throw Error(op_, "error_count must have exactly one element, got " + std::to_string(v.numel()));
    detail::Check(op_).tensor(v, "error_count", DType::kI32, v.ndim);
    return v.as<int32_t>();
  }

  Where where() const { return where_; }
  int device_id() const { return device_id_; }

 private:
  TensorView bind(nb::handle h, const char* name, DType want, int rank, bool writable) {
    if (h.is_none()) return TensorView{};
    nb::object src = nb::borrow(h);
    bool bf16_bits = false;
    // dsv4kv/ops.py wraps NumPy bfloat16 arrays as (uint16 view, True).
    if (nb::isinstance<nb::tuple>(h)) {
      const nb::tuple t = nb::borrow<nb::tuple>(h);
      if (t.size() == 2) {
        src = t[0];
        bf16_bits = nb::cast<bool>(t[1]);
      }
    }
    nb::ndarray<nb::ro> arr;
    if (writable) {
      nb::ndarray<> w;
      if (!nb::try_cast(src, w, false)) {
        if (nb::try_cast(src, arr, false))
          throw Error(op_, std::string(name) + " must be writable, got a read-only array");
        throw TypeProblem(std::string(op_) + ": " + name +
                          " must be an array supporting DLPack (torch.Tensor, numpy.ndarray, cupy.ndarray), got " +
                          nb::inst_name(src).c_str());
      }
      arr = nb::ndarray<nb::ro>(w);
    } else if (!nb::try_cast(src, arr, false)) {
      throw TypeProblem(std::string(op_) + ": " + name +
                        " must be an array supporting DLPack (torch.Tensor, numpy.ndarray, cupy.ndarray), got " +
                        nb::inst_name(src).c_str());
    }

    const std::optional<DType> dt = map_dtype(arr.dtype(), bf16_bits);
    if (!dt)
      throw TypeProblem(std::string(op_) + ": " + name + " must be " + dtype_name(want) + ", got " +
                        dlpack_dtype_name(arr.dtype()));
    const int ndim = static_cast<int>(arr.ndim());
    if (ndim > kMaxRank) {
      const std::string want_rank = rank < 0 ? "2 or 3" : std::to_string(rank);
      throw Error(op_, std::string(name) + " must have rank " + want_rank + ", got " + std::to_string(ndim));
    }

    Where w;
    switch (arr.device_type()) {
      case kDLCPU:
      case kDLCUDAHost: w = Where::kHost; break;
      case kDLCUDA:
      case kDLCUDAManaged: w = Where::kCuda; break;
      default:
        throw Error(op_, std::string(name) + " is on an unsupported device (DLPack device type " +
                             std::to_string(arr.device_type()) + "); use CPU or CUDA memory");
    }
    const int id = w == Where::kCuda ? arr.device_id() : 0;
    if (where_ == Where::kNone) {
      where_ = w;
      device_id_ = id;
      first_ = name;
    } else if (w != where_ || id != device_id_) {
      throw Error(op_, "all arrays must be on one device: " + first_ + " is on " + where_name(where_, device_id_) +
                           ", " + name + " is on " + where_name(w, id));
    }

    TensorView v;
    // nanobind's data() already includes DLPack's byte_offset.
    v.data = const_cast<void*>(arr.data());
    v.dtype = *dt;
    v.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      v.shape[d] = static_cast<int64_t>(arr.shape(d));
      v.stride[d] = arr.stride(d);  // DLPack strides are in elements, like TensorView's
    }
    // An empty array's strides carry no meaning (NumPy reports 0 for every dimension of a
    // [0, n] array): give it row-major strides so the stride rules only judge real layouts.
    if (v.numel() == 0) {
      int64_t s = 1;
      for (int d = ndim - 1; d >= 0; --d) {
        v.stride[d] = s;
        s *= v.shape[d] > 0 ? v.shape[d] : 1;
      }
    }
    keep_.push_back(std::move(arr));
    return v;
  }

  const char* op_;
  Where where_ = Where::kNone;
  int device_id_ = 0;
  std::string first_;
  std::vector<nb::ndarray<nb::ro>> keep_;  // DLPack imports stay alive until the call returns
};

#if defined(DSV4KV_HAVE_CUDA)
/// Makes the arrays' device current for the launch and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) {
      const cudaError_t e = cudaSetDevice(device);
      if (e != cudaSuccess)
        throw CudaError(std::string("cudaSetDevice(") + std::to_string(device) + "): " + cudaGetErrorString(e));
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_ && previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};
#define DSV4KV_CUDA_OP(op, args) [&](uintptr_t s) { ::dsv4kv::cuda::op(args, reinterpret_cast<cudaStream_t>(s)); }
#else
#define DSV4KV_CUDA_OP(op, args) [&](uintptr_t) {}
#endif

/// Runs `host()` for host arrays or `device(stream)` for CUDA arrays, without the GIL.
template <class Host, class Device>
void dispatch([[maybe_unused]] const char* op, const Binder& b, uintptr_t stream, Host&& host, Device&& device) {
  if (b.where() == Where::kCuda) {
#if defined(DSV4KV_HAVE_CUDA)
    DeviceGuard guard(b.device_id());
    nb::gil_scoped_release no_gil;
    device(stream);
#else
    (void)device;
    (void)stream;
    throw std::runtime_error(std::string(op) +
                             ": the arrays are in CUDA memory but this build of dsv4kv has no CUDA backend "
                             "(reinstall with nvcc available, or DSV4KV_PY_CUDA=ON pip install .)");
#endif
  } else {
    nb::gil_scoped_release no_gil;
    host();
  }
}

/// Raises `type(message)` in Python: sets the error indicator and hands it to nanobind as a
/// python_error, which nanobind's dispatcher restores without consulting any translator.
[[noreturn]] void raise_python(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

/// Runs one operation binding: every exception of the library or of the binder becomes the
/// Python exception of the contract right here, with the GIL held again (the gil_scoped_release
/// in dispatch() has ended by the time a handler runs). The message is copied out of the C++
/// exception before the exception object is destroyed.
template <class Body>
auto guarded(Body&& body) -> decltype(body()) {
  PyObject* type = nullptr;
  std::string message;
  try {
    return body();
  } catch (const nb::python_error&) {
    throw;  // already a Python exception (raised by a nanobind call in the binder)
  } catch (const nb::builtin_exception&) {
    throw;  // nanobind's own TypeError/ValueError/...; its dispatcher maps it by type
  } catch (const TypeProblem& e) {
    type = PyExc_TypeError;
    message = e.what();
  } catch (const Error& e) {
    type = is_dtype_message(e.what()) ? PyExc_TypeError : PyExc_ValueError;
    message = e.what();
  } catch (const CudaError& e) {
    type = PyExc_RuntimeError;
    message = e.what();
  } catch (const std::bad_alloc&) {
    type = PyExc_MemoryError;
    message = "out of host memory";
  } catch (const std::exception& e) {
    type = PyExc_RuntimeError;
    message = e.what();
  }
  raise_python(type, message);
}

spec::Fp8Format fp8_format(bool use_fnuz) { return use_fnuz ? spec::Fp8Format::kE4M3Fnuz : spec::Fp8Format::kE4M3Fn; }

// ---------------------------------------------------------------------------
// The five operations (low level: every argument explicit; see dsv4kv/ops.py)
// ---------------------------------------------------------------------------

void quantize_and_insert_k_cache(nb::handle k, nb::handle k_cache, nb::handle slot_mapping, int64_t block_size,
                                 bool is_ue8m0, bool use_fnuz, nb::handle error_count, uintptr_t stream) {
  static constexpr const char* kOp = "quantize_and_insert_k_cache";
  guarded([&] {
    Binder b(kOp);
    QuantizeInsertArgs a;
    a.k = b.in(k, "k", DType::kBF16, 2);
    a.k_cache = b.out(k_cache, "k_cache", DType::kU8, -1);
    a.slot_mapping = b.in(slot_mapping, "slot_mapping", DType::kI64, 1);
    a.block_size = block_size;
    a.is_ue8m0 = is_ue8m0;
    a.format = fp8_format(use_fnuz);
    a.error_count = b.counter(error_count);
    dispatch(kOp, b, stream, [&] { reference::quantize_and_insert_k_cache(a); },
             DSV4KV_CUDA_OP(quantize_and_insert_k_cache, a));
  });
}

void dequantize_and_gather_k_cache(nb::handle out, nb::handle k_cache, nb::handle seq_lens, nb::handle gather_lens,
                                   nb::handle block_table, int64_t block_size, int64_t offset, bool use_fnuz,
                                   nb::handle error_count, uintptr_t stream) {
  static constexpr const char* kOp = "dequantize_and_gather_k_cache";
  guarded([&] {
    Binder b(kOp);
    DequantizeGatherArgs a;
    a.out = b.out(out, "out", DType::kBF16, 3);
    a.k_cache = b.in(k_cache, "k_cache", DType::kU8, -1);
    a.seq_lens = b.in(seq_lens, "seq_lens", DType::kI32, 1);
    a.gather_lens = b.in(gather_lens, "gather_lens", DType::kI32, 1);
    a.block_table = b.in(block_table, "block_table", DType::kI32, 2);
    a.block_size = block_size;
    a.offset = offset;
    a.format = fp8_format(use_fnuz);
    a.error_count = b.counter(error_count);
    dispatch(kOp, b, stream, [&] { reference::dequantize_and_gather_k_cache(a); },
             DSV4KV_CUDA_OP(dequantize_and_gather_k_cache, a));
  });
}

void compute_global_topk_indices_and_lens(nb::handle topk_indices, nb::handle token_to_req_indices,
                                          nb::handle block_table, int64_t block_size, nb::handle is_valid_token,
                                          nb::handle global_topk_indices, nb::handle topk_lens,
                                          nb::handle error_count, uintptr_t stream) {
  static constexpr const char* kOp = "compute_global_topk_indices_and_lens";
  guarded([&] {
    Binder b(kOp);
    GlobalTopkArgs a;
    a.topk_indices = b.in(topk_indices, "topk_indices", DType::kI32, 2);
    a.token_to_req = b.in(token_to_req_indices, "token_to_req_indices", DType::kI32, 1);
    a.block_table = b.in(block_table, "block_table", DType::kI32, 2);
    a.block_size = block_size;
    a.is_valid_token = b.in(is_valid_token, "is_valid_token", DType::kBool, 1);
    a.global_topk_indices = b.out(global_topk_indices, "global_topk_indices", DType::kI32, 2);
    a.topk_lens = b.out(topk_lens, "topk_lens", DType::kI32, 1);
    a.error_count = b.counter(error_count);
    dispatch(kOp, b, stream, [&] { reference::compute_global_topk_indices_and_lens(a); },
             DSV4KV_CUDA_OP(compute_global_topk_indices_and_lens, a));
  });
}

void combine_topk_swa_indices(nb::handle topk_indices, nb::handle query_start_loc, nb::handle seq_lens,
                              nb::handle gather_lens, int64_t window_size, int64_t compress_ratio, int64_t topk,
                              int64_t M, int64_t N, nb::handle left_visible, nb::handle right_visible,
                              int64_t max_image_tokens, nb::handle combined_indices, nb::handle combined_lens,
                              nb::handle error_count, uintptr_t stream) {
  static constexpr const char* kOp = "combine_topk_swa_indices";
  guarded([&] {
    Binder b(kOp);
    CombineArgs a;
    a.topk_indices = b.in(topk_indices, "topk_indices", DType::kI32, 2);
    a.query_start_loc = b.in(query_start_loc, "query_start_loc", DType::kI32, 1);
    a.seq_lens = b.in(seq_lens, "seq_lens", DType::kI32, 1);
    a.gather_lens = b.in(gather_lens, "gather_lens", DType::kI32, 1);
    a.window_size = window_size;
    a.compress_ratio = compress_ratio;
    a.topk = topk;
    a.M = M;
    a.N = N;
    a.left_visible = b.in(left_visible, "left_visible", DType::kI32, 1);
    a.right_visible = b.in(right_visible, "right_visible", DType::kI32, 1);
    a.max_image_tokens = max_image_tokens;
    a.combined_indices = b.out(combined_indices, "combined_indices", DType::kI32, 2);
    a.combined_lens = b.out(combined_lens, "combined_lens", DType::kI32, 1);
    a.error_count = b.counter(error_count);
    dispatch(kOp, b, stream, [&] { reference::combine_topk_swa_indices(a); },
             DSV4KV_CUDA_OP(combine_topk_swa_indices, a));
  });
}

void build_flashinfer_mixed_sparse_indices(
    nb::handle decode_swa_indices, nb::handle decode_compressed_indices, nb::handle decode_compressed_topk_lens,
    nb::handle prefill_topk_indices, nb::handle query_start_loc, nb::handle seq_lens, nb::handle token_to_req_indices,
    nb::handle swa_block_table, int64_t swa_block_size, nb::handle compressed_block_table,
    int64_t compressed_block_size, int64_t window_size, int64_t compress_ratio, int64_t topk,
    bool decode_compressed_indices_are_local, nb::handle decode_is_valid_token, std::optional<int64_t> swa_block_span,
    std::optional<int64_t> compressed_block_span, nb::handle prefill_left_visible, nb::handle prefill_right_visible,
    int64_t max_image_tokens, nb::handle sparse_indices, nb::handle sparse_topk_lens, nb::handle error_count,
    uintptr_t stream) {
  static constexpr const char* kOp = "build_flashinfer_mixed_sparse_indices";
  guarded([&] {
    Binder b(kOp);
    MixedSparseArgs a;
    a.decode_swa_indices = b.in(decode_swa_indices, "decode_swa_indices", DType::kI32, 2);
    a.decode_compressed_indices = b.in(decode_compressed_indices, "decode_compressed_indices", DType::kI32, 2);
    a.decode_compressed_topk_lens = b.in(decode_compressed_topk_lens, "decode_compressed_topk_lens", DType::kI32, 1);
    a.prefill_topk_indices = b.in(prefill_topk_indices, "prefill_topk_indices", DType::kI32, 2);
    a.query_start_loc = b.in(query_start_loc, "query_start_loc", DType::kI32, 1);
    a.seq_lens = b.in(seq_lens, "seq_lens", DType::kI32, 1);
    a.token_to_req = b.in(token_to_req_indices, "token_to_req_indices", DType::kI32, 1);
    a.swa_block_table = b.in(swa_block_table, "swa_block_table", DType::kI32, 2);
    a.swa_block_size = swa_block_size;
    a.compressed_block_table = b.in(compressed_block_table, "compressed_block_table", DType::kI32, 2);
    a.compressed_block_size = compressed_block_size;
    a.window_size = window_size;
    a.compress_ratio = compress_ratio;
    a.topk = topk;
    a.decode_compressed_indices_are_local = decode_compressed_indices_are_local;
    a.decode_is_valid_token = b.in(decode_is_valid_token, "decode_is_valid_token", DType::kBool, 1);
    a.swa_block_span = swa_block_span;
    a.compressed_block_span = compressed_block_span;
    a.prefill_left_visible = b.in(prefill_left_visible, "prefill_left_visible", DType::kI32, 1);
    a.prefill_right_visible = b.in(prefill_right_visible, "prefill_right_visible", DType::kI32, 1);
    a.max_image_tokens = max_image_tokens;
    a.sparse_indices = b.out(sparse_indices, "sparse_indices", DType::kI32, 2);
    a.sparse_topk_lens = b.out(sparse_topk_lens, "sparse_topk_lens", DType::kI32, 1);
    a.error_count = b.counter(error_count);
    dispatch(kOp, b, stream, [&] { reference::build_flashinfer_mixed_sparse_indices(a); },
             DSV4KV_CUDA_OP(build_flashinfer_mixed_sparse_indices, a));
  });
}

// ---------------------------------------------------------------------------
// Spec helpers for dsv4kv.inspect and output allocation
// ---------------------------------------------------------------------------

/// table[s * 256 + c] = bf16 bits of dequantize_element(code c, scale byte s): the whole
/// dequantization rule as one lookup table (64 K entries), straight from spec/numerics.hpp.
nb::bytes dequantize_table(bool use_fnuz) {
  std::vector<uint16_t> t(256 * 256);
  for (int s = 0; s < 256; ++s)
    for (int c = 0; c < 256; ++c)
      t[s * 256 + c] = spec::dequantize_element(static_cast<uint8_t>(c), static_cast<uint8_t>(s), fp8_format(use_fnuz));
  return nb::bytes(reinterpret_cast<const char*>(t.data()), t.size() * sizeof(uint16_t));
}

/// table[c] = 1 if FP8 code c is a NaN in the format, else 0.
nb::bytes fp8_nan_table(bool use_fnuz) {
  std::vector<uint8_t> t(256);
  for (int c = 0; c < 256; ++c) t[c] = spec::fp8_is_nan(static_cast<uint8_t>(c), fp8_format(use_fnuz)) ? 1 : 0;
  return nb::bytes(reinterpret_cast<const char*>(t.data()), t.size());
}

std::pair<bool, std::string> cuda_available() {
#if defined(DSV4KV_HAVE_CUDA)
  std::string why;
  const bool ok = cuda::device_available(&why);
  return {ok, ok ? std::string() : why};
#else
  return {false, "dsv4kv was built without the CUDA backend"};
#endif
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyErr_SetString(is_dtype_message(e.what()) ? PyExc_TypeError : PyExc_ValueError, e.what());
  } catch (const TypeProblem& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const CudaError& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

}  // namespace
}  // namespace dsv4kv::python

void bind_inspect(nanobind::module_& m);  // inspect_binding.cpp

NB_MODULE(_ext, m) {
  namespace py = dsv4kv::python;
  namespace spec = dsv4kv::spec;
  m.doc() = "dsv4kv compiled core: DLPack arrays in, dsv4kv reference (CPU) or CUDA backend out.";
  nb::register_exception_translator(py::translate);
  bind_inspect(m);

  // Layout constants, exported from spec/layout.hpp so Python never restates them.
  m.attr("kHeadDim") = spec::kHeadDim;
  m.attr("kNopeDim") = spec::kNopeDim;
  m.attr("kRopeDim") = spec::kRopeDim;
  m.attr("kTileSize") = spec::kTileSize;
  m.attr("kNumTiles") = spec::kNumTiles;
  m.attr("kBf16Bytes") = spec::kBf16Bytes;
  m.attr("kRopeBytes") = spec::kRopeBytes;
  m.attr("kTokenDataBytes") = spec::kTokenDataBytes;
  m.attr("kScaleBytesPerToken") = spec::kScaleBytesPerToken;
  m.attr("kScalePadIndex") = spec::kScalePadIndex;
  m.attr("kTokenBytes") = spec::kTokenBytes;
  m.attr("kScaleBias") = spec::kScaleBias;
  m.attr("kBlockStrideAlignment") = spec::kBlockStrideAlignment;
  m.attr("kVllmBlockRounding") = spec::kVllmBlockRounding;
  m.attr("kCombineRowAlignment") = spec::kCombineRowAlignment;
  m.attr("kMixedTopkAlignment") = spec::kMixedTopkAlignment;
#if defined(DSV4KV_HAVE_CUDA)
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif

  m.def(
      "token_data_offset", [](int64_t pos) { return py::guarded([&] { return spec::token_data_offset(pos); }); },
      "pos"_a, "Byte offset, inside its block, of token `pos`'s FP8 codes.");
  m.def(
      "rope_offset", [](int64_t pos) { return py::guarded([&] { return spec::rope_offset(pos); }); }, "pos"_a,
      "Byte offset, inside its block, of token `pos`'s 64 bf16 RoPE values.");
  m.def(
      "scale_offset",
      [](int64_t block_size, int64_t pos, int tile) {
        return py::guarded([&] { return spec::scale_offset(block_size, pos, tile); });
      },
      "block_size"_a, "pos"_a, "tile"_a,
      "Byte offset, inside its block, of token `pos`'s scale byte `tile` (7 = pad).");
  m.def(
      "block_data_bytes",
      [](int64_t block_size) { return py::guarded([&] { return spec::block_data_bytes(block_size); }); },
      "block_size"_a, "Bytes of a block that the layout uses (block_size * 584).");
  m.def(
      "vllm_block_stride",
      [](int64_t block_size) { return py::guarded([&] { return spec::vllm_block_stride(block_size); }); },
      "block_size"_a, "The block stride vLLM allocates: block_data_bytes rounded up to a multiple of 576.");
  m.def(
      "combine_row_width",
      [](int64_t topk, int64_t window, int64_t max_image_tokens) {
        return py::guarded([&] { return spec::combine_row_width(topk, window, max_image_tokens); });
      },
      "topk"_a, "window"_a, "max_image_tokens"_a, "Columns of a combine_topk_swa_indices row.");
  m.def(
      "mixed_row_width",
      [](int64_t swa_width, int64_t image_width, int64_t topk, int64_t decode_topk) {
        return py::guarded([&] { return spec::mixed_row_width(swa_width, image_width, topk, decode_topk); });
      },
      "swa_width"_a, "image_width"_a, "topk"_a, "decode_topk"_a,
      "Columns of a build_flashinfer_mixed_sparse_indices row.");
  m.def("dequantize_element",
        [](int code, int scale_byte, bool use_fnuz) {
          return spec::dequantize_element(static_cast<uint8_t>(code), static_cast<uint8_t>(scale_byte),
                                          py::fp8_format(use_fnuz));
        },
        "code"_a, "scale_byte"_a, "use_fnuz"_a = false, "bf16 bits of one dequantized FP8 code under a scale byte.");
  m.def("dequantize_table", &py::dequantize_table, "use_fnuz"_a = false,
        "bytes of a [256 scale bytes, 256 codes] uint16 table of bf16 bits (spec dequantize_element).");
  m.def("fp8_nan_table", &py::fp8_nan_table, "use_fnuz"_a = false, "bytes of a [256] uint8 table: 1 where the code is NaN.");
  m.def("cuda_available", &py::cuda_available,
        "(True, '') when the CUDA backend is built and a device is usable, else (False, reason).");

  // Every array argument accepts None at the nanobind level (.none()): the binder turns None into
  // an absent view and validate() reports a missing required one as "<op>: <name> is required".
  m.def("quantize_and_insert_k_cache", &py::quantize_and_insert_k_cache, "k"_a.none(), "k_cache"_a.none(),
        "slot_mapping"_a.none(), "block_size"_a, "is_ue8m0"_a, "use_fnuz"_a, "error_count"_a.none(), "stream"_a);
  m.def("dequantize_and_gather_k_cache", &py::dequantize_and_gather_k_cache, "out"_a.none(), "k_cache"_a.none(),
        "seq_lens"_a.none(), "gather_lens"_a.none(), "block_table"_a.none(), "block_size"_a, "offset"_a,
        "use_fnuz"_a, "error_count"_a.none(), "stream"_a);
  m.def("compute_global_topk_indices_and_lens", &py::compute_global_topk_indices_and_lens, "topk_indices"_a.none(),
        "token_to_req_indices"_a.none(), "block_table"_a.none(), "block_size"_a, "is_valid_token"_a.none(),
        "global_topk_indices"_a.none(), "topk_lens"_a.none(), "error_count"_a.none(), "stream"_a);
  m.def("combine_topk_swa_indices", &py::combine_topk_swa_indices, "topk_indices"_a.none(), "query_start_loc"_a.none(),
        "seq_lens"_a.none(), "gather_lens"_a.none(), "window_size"_a, "compress_ratio"_a, "topk"_a, "M"_a, "N"_a,
        "left_visible"_a.none(), "right_visible"_a.none(), "max_image_tokens"_a, "combined_indices"_a.none(),
        "combined_lens"_a.none(), "error_count"_a.none(), "stream"_a);
  m.def("build_flashinfer_mixed_sparse_indices", &py::build_flashinfer_mixed_sparse_indices,
        "decode_swa_indices"_a.none(), "decode_compressed_indices"_a.none(), "decode_compressed_topk_lens"_a.none(),
        "prefill_topk_indices"_a.none(), "query_start_loc"_a.none(), "seq_lens"_a.none(),
        "token_to_req_indices"_a.none(), "swa_block_table"_a.none(), "swa_block_size"_a,
        "compressed_block_table"_a.none(), "compressed_block_size"_a, "window_size"_a, "compress_ratio"_a, "topk"_a,
        "decode_compressed_indices_are_local"_a, "decode_is_valid_token"_a.none(), "swa_block_span"_a.none(),
        "compressed_block_span"_a.none(), "prefill_left_visible"_a.none(), "prefill_right_visible"_a.none(),
        "max_image_tokens"_a, "sparse_indices"_a.none(), "sparse_topk_lens"_a.none(), "error_count"_a.none(),
        "stream"_a);
}
