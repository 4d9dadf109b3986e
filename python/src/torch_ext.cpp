/// \file torch_ext.cpp
/// \brief `dsv4kv._torch_ext`: the eager fast path for PyTorch tensors (built only where PyTorch
/// is importable at build time; the package works without it).
///
/// One entry per operation of the table (spec/op_table.hpp), generated like _ext's bindings:
/// `_torch_ext.<name>(*fields, shapes, check_modes)` takes the members of the argument struct in
/// order as Python objects, reads each torch.Tensor's at::Tensor directly (no DLPack capsule),
/// allocates the outputs that are None on the tensors' device (int32; with `shapes` None, as the
/// eager route passes it, the shapes of spec's allocated_shape() in one allocation shared by the
/// outputs; else one at::empty of shape `shapes[i]` each, as the registered kernels ask),
/// runs the reference or the CUDA backend on PyTorch's current stream of that device
/// (CUDA tensors only where torch has c10::cuda and this build the CUDA backend; else they decline),
/// and returns the allocated outputs as a tuple (None when the operation allocates nothing).
///
/// It only ever takes the happy path: anything it is not sure about (an argument that is not a
/// plain torch.Tensor, a dtype, layout or device the library does not take, tensors on several
/// devices, a scalar that is not exactly an int or a bool, an active dispatch or torch-function
/// mode when `check_modes`, or any contract error raised by validate()) makes it return
/// NotImplemented before anything is written, and the caller (dsv4kv/_torch.py) runs the call
/// through its DLPack route instead, which raises the contract's exception with its message.
/// So every error message stays the one of the DLPack route by construction. A CUDA failure
/// after the launch raises RuntimeError, as _ext does.
///
/// Why: a DLPack capsule per tensor plus torch.empty per output from Python cost more host time
/// than the launch itself for small batches (bench/host_cost.py --profile; see
/// bench/RESULTS.md#host-cost).
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "binding_common.hpp"
#include "dsv4kv/reference.hpp"
#include "dsv4kv/spec.hpp"
#include "dsv4kv/spec/op_table.hpp"

#if defined(DSV4KV_HAVE_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dsv4kv::torch_ext {
namespace {

/// Thrown inside an entry when the call leaves the fast path (the entry returns NotImplemented).
struct Decline {};

/// The library's DType of a torch dtype, or nothing (the DLPack route reports it).
std::optional<DType> map_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::BFloat16: return DType::kBF16;
    case c10::ScalarType::Byte: return DType::kU8;
    case c10::ScalarType::Int: return DType::kI32;
    case c10::ScalarType::Long: return DType::kI64;
    case c10::ScalarType::Bool: return DType::kBool;
    default: return std::nullopt;
  }
}

/// The arrays of one call: every tensor must be a plain strided CPU or CUDA tensor, all on one
/// device.
class Binder {
 public:
  /// The at::Tensor inside a plain torch.Tensor (or Parameter), else Decline. Subclasses
  /// (FakeTensor, FunctionalTensor, ...) and tensors with a Python dispatch key decline: torch
  /// must see those calls as the operator. So do lazy conjugate/negative views and zero tensors,
  /// whose memory does not hold their values (DLPack refuses to export them).
  static const at::Tensor& unpack(PyObject* o) {
    if (!THPVariable_CheckExact(o)) throw Decline{};
    const at::Tensor& t = THPVariable_Unpack(o);
    if (!t.defined() || t.layout() != c10::kStrided) throw Decline{};
    static const c10::DispatchKeySet kDeclined({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot,
                                                c10::DispatchKey::Functionalize, c10::DispatchKey::Conjugate,
                                                c10::DispatchKey::Negative, c10::DispatchKey::ZeroTensor});
    if (t.key_set().has_any(kDeclined)) throw Decline{};
    return t;
  }

  TensorView view(PyObject* o) {
    if (o == Py_None) return TensorView{};
    return view(unpack(o));
  }

  TensorView view(const at::Tensor& t) {
    const c10::Device d = t.device();
    if (d.type() != c10::DeviceType::CPU && d.type() != c10::DeviceType::CUDA) throw Decline{};
    if (!device_) {
      device_ = d;
    } else if (*device_ != d) {
      throw Decline{};
    }
    const std::optional<DType> dt = map_dtype(t.scalar_type());
    const int64_t ndim = t.dim();
    if (!dt || ndim > kMaxRank) throw Decline{};
    TensorView v;
    v.data = t.data_ptr();
    v.dtype = *dt;
    v.ndim = static_cast<int>(ndim);
    const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
    for (int64_t i = 0; i < ndim; ++i) {
      v.shape[i] = sizes[i];
      v.stride[i] = strides[i];
    }
    // As _ext's binder: an empty array's strides carry no meaning, row-major ones are judged.
    if (t.numel() == 0) {
      int64_t s = 1;
      for (int64_t i = ndim - 1; i >= 0; --i) {
        v.stride[i] = s;
        s *= v.shape[i] > 0 ? v.shape[i] : 1;
      }
    }
    return v;
  }

  const std::optional<c10::Device>& device() const { return device_; }

 private:
  std::optional<c10::Device> device_;
};

/// An integer scalar: exactly a Python int in int64 range, else Decline (the DLPack route
/// applies operator.index and reports the rest).
int64_t int_arg(PyObject* o) {
  if (!PyLong_CheckExact(o)) throw Decline{};
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    throw Decline{};
  }
  return static_cast<int64_t>(v);
}

/// A flag: exactly True or False (Python's bool() of anything else is the DLPack route's).
bool bool_arg(PyObject* o) {
  if (o == Py_True) return true;
  if (o == Py_False) return false;
  throw Decline{};
}

/// A semantics profile or a record by its exact name, else Decline (the DLPack route reports a bad one).
template <class E>
E named_arg(PyObject* o, bool (*from_name)(std::string_view, E&)) {
  if (!PyUnicode_CheckExact(o)) throw Decline{};
  Py_ssize_t n = 0;
  const char* text = PyUnicode_AsUTF8AndSize(o, &n);
  E e{};
  if (text == nullptr) {
    PyErr_Clear();
    throw Decline{};
  }
  if (!from_name(std::string_view(text, static_cast<size_t>(n)), e)) throw Decline{};
  return e;
}

/// Item i of a list or tuple (a borrowed reference), else Decline.
PyObject* item(PyObject* seq, Py_ssize_t i) {
  if (PyTuple_Check(seq) && i < PyTuple_GET_SIZE(seq)) return PyTuple_GET_ITEM(seq, i);
  if (PyList_CheckExact(seq) && i < PyList_GET_SIZE(seq)) return PyList_GET_ITEM(seq, i);
  throw Decline{};
}

/// One output shape from `shapes[i]` (dsv4kv/_opspec.py's rule: a list of tuples of ints).
std::array<int64_t, kMaxRank> shape_arg(PyObject* shapes, Py_ssize_t i, int& ndim) {
  PyObject* s = item(shapes, i);
  const Py_ssize_t n = PyTuple_Check(s) ? PyTuple_GET_SIZE(s) : PyList_CheckExact(s) ? PyList_GET_SIZE(s) : -1;
  if (n < 0 || n > kMaxRank) throw Decline{};
  std::array<int64_t, kMaxRank> dims{};
  ndim = static_cast<int>(n);
  for (int d = 0; d < ndim; ++d) {
    dims[d] = int_arg(item(s, d));
    if (dims[d] < 0) throw Decline{};
  }
  return dims;
}

/// The outputs of one eager call (`n` int32 tensors of shapes `dims[k][:ndim[k]]`) in one
/// allocation on `device`, each starting on a 64-byte boundary of it. Why: each at::empty costs
/// about 2.5-3 us of host time (dispatcher, then allocator), as much as the launch; one allocator
/// call for all outputs, without the dispatcher, is most of that saving (see
/// bench/RESULTS.md#host-cost). The tensors share one storage but never overlap, as the outputs
/// of torch.split do; the caller's kernel writes every element. Decline when the sizes overflow.
std::array<at::Tensor, 4> allocate_together(const c10::Device& device, int n,
                                            const std::array<std::array<int64_t, kMaxRank>, 4>& dims,
                                            const std::array<int, 4>& ndim) {
  constexpr int64_t kAlign = 64;
  std::array<int64_t, 4> offset{};
  spec::Checked total = 0;
  for (int k = 0; k < n; ++k) {
    offset[k] = total.value;
    const spec::Checked bytes = spec::checked_mul(spec::checked_numel(dims[k].data(), ndim[k]), sizeof(int32_t));
    total = spec::checked_round_up(spec::checked_add(total, bytes), kAlign);
    if (!total.ok) throw Decline{};
  }
  c10::Allocator* allocator = nullptr;
#if defined(DSV4KV_HAVE_CUDA)
  // The caching allocator allocates on torch's current device: set through torch's own guard (the
  // caller's DeviceGuard is the library's CUDA runtime, not necessarily the one torch asks).
  std::optional<c10::cuda::CUDAGuard> torch_guard;
  if (device.is_cuda()) {
    torch_guard.emplace(device.index());
    allocator = c10::cuda::CUDACachingAllocator::get();
  }
#endif
  if (!device.is_cuda()) allocator = c10::GetCPUAllocator();
  if (allocator == nullptr) throw Decline{};
  const c10::Storage storage(c10::Storage::use_byte_size_t(), total.value, allocator, /*resizable=*/true);
  const c10::DispatchKeySet keys(device.is_cuda() ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU);
  std::array<at::Tensor, 4> out;
  for (int k = 0; k < n; ++k) {
    auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(storage), keys, caffe2::TypeMeta::Make<int32_t>());
    impl->set_sizes_contiguous(c10::IntArrayRef(dims[k].data(), ndim[k]));
    impl->set_storage_offset(offset[k] / static_cast<int64_t>(sizeof(int32_t)));
    out[k] = at::Tensor(std::move(impl));
  }
  return out;
}

/// The output shapes of an operation that allocates two ([rows, width] and [rows], from
/// spec's allocated_shape), or Decline when its inputs give none.
template <class Args>
void allocated_dims(const Args& a, int npending, std::array<std::array<int64_t, kMaxRank>, 4>& dims,
                    std::array<int, 4>& ndim) {
  if constexpr (requires { allocated_shape(a); }) {
    const std::optional<AllocatedShape> s = allocated_shape(a);
    if (!s || npending != 2 || s->rows < 0 || s->width < 0) throw Decline{};
    dims[0] = {s->rows, s->width};
    ndim[0] = 2;
    dims[1] = {s->rows};
    ndim[1] = 1;
  } else {
    (void)a, (void)npending, (void)dims, (void)ndim;
    throw Decline{};
  }
}

/// Releases the GIL for the backend call (as _ext does), whatever it throws.
class NoGil {
 public:
  NoGil() : state_(PyEval_SaveThread()) {}
  ~NoGil() { PyEval_RestoreThread(state_); }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  PyThreadState* state_;
};

/// `_torch_ext.<name>(*fields, shapes, check_modes)`: see the file comment.
template <class Args, void (*Host)(const Args&), void (*Device)(const Args&, uintptr_t)>
PyObject* entry(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  static const int kFields = python::field_count<Args>();
  if (argc != kFields + 2) {
    PyErr_Format(PyExc_TypeError,
                 "_torch_ext.%s takes %d arguments (the fields of its argument struct, shapes, "
                 "check_modes), got %zd",
                 Args::kName, kFields + 2, argc);
    return nullptr;
  }
  try {
    // check_modes: exactly True from the routes, False from the registered kernels (the
    // dispatcher has already given every mode its turn).
    if (argv[kFields + 1] != Py_False &&
        (c10::impl::TorchDispatchModeTLS::stack_len() > 0 || at::impl::torch_function_mode_enabled()))
      throw Decline{};
    Binder b;
    Args a;
    // Outputs to allocate (None fields of role kOut), in field order: set after the inputs are
    // bound, so that they go on the inputs' device.
    std::array<TensorView*, 4> pending{};
    int npending = 0;
    int i = 0;
    Args::fields(a, [&](const char*, Role role, auto& m) {
      using T = std::remove_cvref_t<decltype(m)>;
      PyObject* o = argv[i++];
      if constexpr (std::is_same_v<T, TensorView>) {
        if (role == Role::kOut && o == Py_None) {
          if (npending == static_cast<int>(pending.size())) throw Decline{};
          pending[npending++] = &m;
        } else {
          m = b.view(o);
        }
      } else if constexpr (std::is_same_v<T, int32_t*>) {
        if (o != Py_None) {
          TensorView v = b.view(o);
          // validate() does not see the counter: the DLPack route's rules are checked there.
          if (v.dtype != DType::kI32 || v.ndim != 1 || v.shape[0] != 1 ||
              reinterpret_cast<uintptr_t>(v.data) % alignof(int32_t) != 0)
            throw Decline{};
          m = v.as<int32_t>();
        } else {
          m = nullptr;
        }
      } else if constexpr (std::is_same_v<T, int64_t>) {
        m = int_arg(o);
      } else if constexpr (std::is_same_v<T, bool>) {
        m = bool_arg(o);
      } else if constexpr (std::is_same_v<T, spec::Fp8Format>) {
        m = bool_arg(o) ? spec::Fp8Format::kE4M3Fnuz : spec::Fp8Format::kE4M3Fn;
      } else if constexpr (std::is_same_v<T, spec::Semantics>) {
        m = named_arg(o, spec::semantics_from_name);
      } else if constexpr (std::is_same_v<T, spec::Record>) {
        m = named_arg(o, spec::record_from_name);
      } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
        m = o == Py_None ? std::nullopt : std::optional<int64_t>(int_arg(o));
      } else {
        static_assert(sizeof(T) == 0, "torch_ext.cpp: an argument-struct member type the binder does not know");
      }
    });
    if (!b.device()) throw Decline{};  // no tensor at all: the DLPack route reports it
    const c10::Device device = *b.device();
#if defined(DSV4KV_HAVE_CUDA)
    // The tensors' device is current for the launch from here on (the outputs' allocation sets
    // it for torch's allocator itself); the caller's is restored on return.
    std::optional<python::DeviceGuard> guard;
    if (device.is_cuda()) guard.emplace(device.index());
#else
    if (device.is_cuda()) throw Decline{};  // the DLPack route says that this build has no CUDA backend
#endif
    std::array<at::Tensor, 4> allocated;
    if (npending > 0) {
      std::array<std::array<int64_t, kMaxRank>, 4> dims{};
      std::array<int, 4> ndim{};
      if (argv[kFields] == Py_None) {
        // The eager route: shapes from the spec's rule, all outputs in one allocation.
        allocated_dims(a, npending, dims, ndim);
        allocated = allocate_together(device, npending, dims, ndim);
      } else {
        // The registered kernels (torch.ops.dsv4kv.*) pass the fake kernels' shapes and get
        // one tensor per output, with its own storage, as the operator's schema promises.
        for (int k = 0; k < npending; ++k) {
          dims[k] = shape_arg(argv[kFields], k, ndim[k]);
          allocated[k] =
              at::empty(c10::IntArrayRef(dims[k].data(), ndim[k]), at::TensorOptions().dtype(at::kInt).device(device));
        }
      }
      for (int k = 0; k < npending; ++k) *pending[k] = b.view(allocated[k]);
    }
    if (device.is_cuda()) {
#if defined(DSV4KV_HAVE_CUDA)
      // PyTorch's current stream of the tensors' device, as torch.cuda.current_stream(device).
      const auto s = reinterpret_cast<uintptr_t>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
      NoGil no_gil;
      Device(a, s);
#endif
    } else {
      NoGil no_gil;
      Host(a);
    }
    if (npending == 0) Py_RETURN_NONE;
    PyObject* out = PyTuple_New(npending);
    if (out == nullptr) return nullptr;
    for (int k = 0; k < npending; ++k) {
      PyObject* t = THPVariable_Wrap(std::move(allocated[k]));
      if (t == nullptr) {
        Py_DECREF(out);
        return nullptr;
      }
      PyTuple_SET_ITEM(out, k, t);
    }
    return out;
  } catch (const Decline&) {
  } catch (const Error&) {
    // validate() refused the call before anything was written: the DLPack route raises it.
  } catch (const c10::Error&) {
    // e.g. at::empty out of memory: torch.empty on the DLPack route raises torch's own error.
  } catch (const CudaError& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  } catch (const std::bad_alloc&) {
    PyErr_SetString(PyExc_MemoryError, "out of host memory");
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NOTIMPLEMENTED;
}

PyMethodDef methods[] = {
#define DSV4KV_TORCH_ENTRY(name, Args, stem)                                                            \
  {#name,                                                                                               \
   reinterpret_cast<PyCFunction>(                                                                       \
       reinterpret_cast<void (*)()>(&entry<Args, &::dsv4kv::reference::name, &python::device_##name>)), \
   METH_FASTCALL, "Eager fast path of " #name ": the fields of " #Args ", shapes, check_modes."},
    DSV4KV_OPS(DSV4KV_TORCH_ENTRY)
#undef DSV4KV_TORCH_ENTRY
        {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT,
                      "_torch_ext",
                      "dsv4kv's eager fast path for torch tensors (see dsv4kv/_torch.py).",
                      -1,
                      methods,
                      nullptr,
                      nullptr,
                      nullptr,
                      nullptr};

}  // namespace
}  // namespace dsv4kv::torch_ext

PyMODINIT_FUNC PyInit__torch_ext() {
  PyObject* m = PyModule_Create(&dsv4kv::torch_ext::module);
  if (m == nullptr) return nullptr;
  // The torch this module was compiled against: dsv4kv/_torch.py uses it only with that torch.
  PyModule_AddStringConstant(m, "torch_version", DSV4KV_TORCH_VERSION);
#if defined(DSV4KV_HAVE_CUDA)
  Py_INCREF(Py_True);
  PyModule_AddObject(m, "has_cuda", Py_True);
#else
  Py_INCREF(Py_False);
  PyModule_AddObject(m, "has_cuda", Py_False);
#endif
  return m;
}
